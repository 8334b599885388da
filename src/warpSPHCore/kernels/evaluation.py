"""Per-pair kernel quantities for a single support h: W, its derivatives, Hessian, Laplacian.

Every function here is a Warp function usable from any kernel, generic over the scalar
type (float32 / float64, taken from `h`) and the dimension (the length of the vector `x`,
d in {1, 2, 3}). The dimension is also passed explicitly as the int32 `d` (used for the
Wendland variants, C_d and the powers of h; older Warp read a vector's length as 0 when it
served as a loop bound, so d is never derived from `x`). `kernel` is the int32
`KernelFunctions` value.

Normalisation: these functions are **unnormalised (N = 1)**. With lattice calibration
(N = 1/L; docs/kernels.md, "Lattice calibration") the operator code multiplies each returned
quantity by the factor N itself; every quantity here is linear in N, so that is exact.

With k^(n) = C_d k^(n)(q) / h^(d+n) (`k0 = W`, `k1`, `k2`, `k3`) and q = |x| / h:

=============================  =============================================================
`sphKernel`                     W = k0
`sphKernelGradient`             grad W = x_hat k1, x_hat = x / max(r, eps)  (custom adjoint)
`sphKernelDkDh`                 dW/dh = -(C_d / h^(d+1)) (d k + q k')
`sphGradientDkDh`               d(grad W)/dh = x_hat (-C_d / h^(d+2)) (q k'' + (d+1) k')
                                (custom adjoint)
`sphGradientD2kDh2`             d^2(grad W)/dh^2
`sphKernelHessian`              H = k2 A + k1 B (regularised at r = 0)
`sphKernelHessianDot`           H u without forming H (the position tangent of grad W)
`sphKernelGradientVJP`          (grad W, H u, u . d(grad W)/dh) from one shape evaluation
                                (the reverse kernels' per-pair quantities)
`sphKernelHessianDkDh`          dH/dh (with the derivative of the eps h regularisers)
`sphKernelThirdDerivative`      T . u (matrix, sum over the last index of T_abc)
`sphKernelThirdDerivativeContract`  T : G (vector, sum over the last two indices)
`sphKernelHessianJVP`           dH = T . dx + dH/dh dh
`sphKernelLaplacian`            s k2 + t k1, 0 for q < eps or q > 1
`sphKernelLaplacianGradient`    grad_x of the kernel Laplacian
`sphKernelLaplacianDkDh`        d/dh of the kernel Laplacian
`sphKernelLaplacianJVP`         its tangent for (dx, dh)
`sphKernelJVP`                  dW = grad W . dx + dW/dh dh
`sphKernelGradientJVP`          d grad W = H dx + d(grad W)/dh dh
`sphKernelEps`                  eps of the scalar type (1e-7 float32, 1e-15 float64)
=============================  =============================================================

Strict cutoff: for q > 1 every quantity is exactly 0.

Custom adjoints. Warp's automatic adjoint of grad W at r = 0
multiplies an O(1/eps) term by an exact 0 and returns 0 instead of the finite H(0); the same
happens for d(grad W)/dh (whose x-derivative at r = 0 is dH/dh(0)). `@wp.func_grad` rejects
generic arguments, so `sphKernelGradient` and `sphGradientDkDh` are each one Warp function
name with six concrete overloads, (vec1, vec2, vec3) x (float32, float64), each with a
hand-written adjoint; generic kernels calling the name get the right overload by Warp's
overload resolution. Their adjoints are: x-adjoint H adj (resp. dH/dh adj) and h-adjoint
d(grad W)/dh . adj (resp. d^2(grad W)/dh^2 . adj). Every other function here has an exact
automatic adjoint at coincident points: W (its x-derivative at r = 0 is 0 = grad W(0) because
Warp's `length` adjoint is 0 at 0), dW/dh, the Hessian (its third derivative T is 0 for
q < eps by convention, and dH/dh), and the kernel Laplacian (forced to 0 for q < eps).

Compile time: `sphShape` and the single-support quantities that the `_ij`
variants call twice are ``@wp.func(inline=False)``, so each is compiled once per scalar type
(and dimension) instead of once per call site. Measured on the CPU backend (-O3, backward
on, 6 overloads): a kernel using W_ij and grad W_ij compiles in ~6 s instead of ~13.5 s, one
adding their JVPs in ~11 s instead of ~24 s (an empty kernel: ~2.4 s).

This module deliberately has no ``from __future__ import annotations``: the concrete
overloads are created in a loop and their annotations must be evaluated at definition time.
"""

import threading
from typing import Any

import warp as wp

from .shapes import sphKernelC_d_warp, sphShape

__all__ = [
    "registerCustomAdjoints",
    "customAdjointsRegistered",
    "sphKernelEps",
    "sphKernel",
    "sphKernelGradient",
    "sphKernelDkDh",
    "sphGradientDkDh",
    "sphGradientD2kDh2",
    "sphKernelHessian",
    "sphKernelHessianDot",
    "sphKernelGradientVJP",
    "sphKernelValueVJP",
    "sphKernelHessianDkDh",
    "sphKernelThirdDerivative",
    "sphKernelThirdDerivativeContract",
    "sphKernelHessianJVP",
    "sphKernelLaplacian",
    "sphKernelLaplacianGradient",
    "sphKernelLaplacianDkDh",
    "sphKernelLaplacianJVP",
    "sphKernelJVP",
    "sphKernelGradientJVP",
]

_EPS32 = 1e-7
_EPS64 = 1e-15


# --- precision and small helpers -----------------------------------------------------------


@wp.func
def sphKernelEps(h: wp.float32):
    """eps = 1e-7 for float32 calls (regulariser of x_hat, the Hessian and the Laplacian)."""
    return wp.float32(_EPS32)


@wp.func
def sphKernelEps(h: wp.float64):  # noqa: F811  (Warp overload)
    """eps = 1e-15 for float64 calls (regulariser of x_hat, the Hessian and the Laplacian)."""
    return wp.float64(_EPS64)


@wp.func
def _ipow(x: Any, n: wp.int32):
    """x^n for n in 1..6, unrolled (Warp may drop adjoints carried through a dynamic loop)."""
    p = x
    if n >= 2:
        p = p * x
    if n >= 3:
        p = p * x
    if n >= 4:
        p = p * x
    if n >= 5:
        p = p * x
    if n >= 6:
        p = p * x
    return p


@wp.func
def _cd(kernel: wp.int32, d: wp.int32, h: Any):
    """C_d converted from float64 to the scalar type of `h`."""
    return type(h)(sphKernelC_d_warp(kernel, d))


@wp.func
def _identity(x: Any, h: Any):
    """d x d identity in the matrix type of outer(x, x)."""
    return wp.diag(type(x)(type(h)(1.0)))


@wp.func
def _radial(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """(k0, k1, k2, k3) = C_d k^(n)(q) / h^(d+n) (zero for q > 1)."""
    r = wp.length(x)
    q = r / h
    ih = type(h)(1.0) / h
    s = sphShape(q, kernel, d) * (_cd(kernel, d, h) * _ipow(ih, d))
    return wp.vector(s[0], s[1] * ih, s[2] * ih * ih, s[3] * ih * ih * ih)


# --- value and first derivatives ---------------------------------------------------------


@wp.func(inline=False)
def sphKernel(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """W(x, h) = C_d k(q) / h^d for q <= 1, else 0."""
    r = wp.length(x)
    q = r / h
    res = type(h)(0.0)
    if q <= type(h)(1.0):
        s = sphShape(q, kernel, d)
        res = _cd(kernel, d, h) * s[0] * _ipow(type(h)(1.0) / h, d)
    return res


@wp.func(inline=False)
def _sphKernelGradient(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0):
        s = sphShape(q, kernel, d)
        k1 = _cd(kernel, d, h) * s[1] * _ipow(type(h)(1.0) / h, d + 1)
        res = x * (k1 / wp.max(r, sphKernelEps(h)))
    return res


@wp.func(inline=False)
def sphKernelDkDh(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """dW/dh = -(C_d / h^(d+1)) (d k(q) + q k'(q))."""
    r = wp.length(x)
    q = r / h
    res = type(h)(0.0)
    if q <= type(h)(1.0):
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(type(h)(1.0) / h, d + 1)
        res = -c * (type(h)(d) * s[0] + q * s[1])
    return res


@wp.func(inline=False)
def _sphGradientDkDh(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0):
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(type(h)(1.0) / h, d + 2)
        g = -c * (q * s[2] + type(h)(d + 1) * s[1])
        res = x * (g / wp.max(r, sphKernelEps(h)))
    return res


@wp.func(inline=False)
def sphGradientD2kDh2(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """d^2(grad W)/dh^2 = x_hat C_d/h^(d+3) [(d+2)(d+1) k' + 2(d+2) q k'' + q^2 k''']."""
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0):
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(type(h)(1.0) / h, d + 3)
        g = c * (type(h)((d + 2) * (d + 1)) * s[1] + type(h)(2 * (d + 2)) * q * s[2] + q * q * s[3])
        res = x * (g / wp.max(r, sphKernelEps(h)))
    return res


# --- second derivatives ------------------------------------------------------------------


@wp.func(inline=False)
def sphKernelHessian(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """Hessian H = k2 A + k1 B of W, d x d.

    A = x x^T / (r^2 + eps^2 h^2) with diagonal set to 1 when q < eps;
    B = -x x^T / (r^3 + eps^3 h^3) + I / (r + eps^2 h). H(0) = k2(0) I for kernels with k'(0) = 0.
    """
    r = wp.length(x)
    q = r / h
    xx = wp.outer(x, x)
    res = xx * type(h)(0.0)
    if q <= type(h)(1.0):
        eps = sphKernelEps(h)
        eh = eps * h
        kk = _radial(x, h, kernel, d)
        eye = _identity(x, h)
        A = xx / (r * r + eh * eh)
        if q < eps:
            A = A - wp.diag(wp.get_diag(A)) + eye
        B = eye / (r + eps * eh) - xx / (r * r * r + eh * eh * eh)
        res = kk[2] * A + kk[1] * B
    return res


@wp.func
def _hessianDot(x: Any, u: Any, r: Any, q: Any, h: Any, k1: Any, k2: Any):
    """k2 (A u) + k1 (B u) inside the support, with A and B (and the q < eps diagonal rule)
    exactly as in `sphKernelHessian`: the one definition of H u."""
    eps = sphKernelEps(h)
    eh = eps * h
    xu = wp.dot(x, u)
    den = r * r + eh * eh
    Au = x * (xu / den)
    if q < eps:
        Au = Au - wp.cw_mul(wp.cw_mul(x, x), u) / den + u
    Bu = u / (r + eps * eh) - x * (xu / (r * r * r + eh * eh * eh))
    return k2 * Au + k1 * Bu


@wp.func(inline=False)
def sphKernelHessianDot(x: Any, h: Any, u: Any, kernel: wp.int32, d: wp.int32):
    """H u for a vector u without forming H: k2 (A u) + k1 (B u), with A and B (and the
    q < eps diagonal rule) exactly as in `sphKernelHessian`. The position tangent of grad W
    (``d grad W = H dx`` when no support moves): one shape evaluation, no d x d matrix."""
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0):
        kk = _radial(x, h, kernel, d)
        res = _hessianDot(x, u, r, q, h, kk[1], kk[2])
    return res


@wp.func(inline=False)
def sphKernelValueVJP(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """(W, grad W, dW/dh) from one shape evaluation: the per-pair quantities of the Density's
    hand-written reverse kernel. The same values as `sphKernel`, `sphKernelGradient` and
    `sphKernelDkDh` (grad W(0) = 0)."""
    r = wp.length(x)
    q = r / h
    W = type(h)(0.0)
    G = type(x)()
    Wh = type(h)(0.0)
    if q <= type(h)(1.0):
        ih = type(h)(1.0) / h
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(ih, d)
        W = c * s[0]
        G = x * ((c * s[1] * ih) / wp.max(r, sphKernelEps(h)))
        Wh = -(c * ih) * (type(h)(d) * s[0] + q * s[1])
    return W, G, Wh


@wp.func(inline=False)
def sphKernelGradientVJP(x: Any, h: Any, u: Any, kernel: wp.int32, d: wp.int32):
    """(grad W, H u, u . d(grad W)/dh) for a cotangent u, from one shape evaluation: the
    per-pair quantities of a hand-written reverse kernel (H is symmetric, so the x-adjoint
    H^T u is H u). The same values as the custom adjoint of `sphKernelGradient` (finite H(0)
    at coincident points, d(grad W)/dh(0) = 0), without forming H."""
    r = wp.length(x)
    q = r / h
    G = type(x)()
    Hu = type(x)()
    gh = type(h)(0.0)
    if q <= type(h)(1.0):
        ih = type(h)(1.0) / h
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(ih, d)
        k1 = c * s[1] * ih
        k2 = c * s[2] * ih * ih
        m = wp.max(r, sphKernelEps(h))
        G = x * (k1 / m)
        Hu = _hessianDot(x, u, r, q, h, k1, k2)
        g = -(c * ih * ih) * (q * s[2] + type(h)(d + 1) * s[1])
        gh = wp.dot(x, u) * (g / m)
    return G, Hu, gh


@wp.func(inline=False)
def sphKernelHessianDkDh(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """dH/dh = dk2/dh A + k2 dA/dh + dk1/dh B + k1 dB/dh.

    dk1/dh = -(C_d/h^(d+2)) (q k'' + (d+1) k'), dk2/dh = -(C_d/h^(d+3)) (q k''' + (d+2) k'');
    dA/dh and dB/dh are the (tiny) derivatives of the eps h regularisers.
    """
    r = wp.length(x)
    q = r / h
    xx = wp.outer(x, x)
    res = xx * type(h)(0.0)
    if q <= type(h)(1.0):
        eps = sphKernelEps(h)
        eh = eps * h
        ih = type(h)(1.0) / h
        s = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(ih, d + 1)
        k1 = c * s[1]
        k2 = c * s[2] * ih
        dk1 = -c * ih * (q * s[2] + type(h)(d + 1) * s[1])
        dk2 = -c * ih * ih * (q * s[3] + type(h)(d + 2) * s[2])
        eye = _identity(x, h)
        a = r * r + eh * eh
        A = xx / a
        dA = xx * (type(h)(-2.0) * eps * eh / (a * a))
        if q < eps:
            A = A - wp.diag(wp.get_diag(A)) + eye
            dA = dA - wp.diag(wp.get_diag(dA))
        b3 = r * r * r + eh * eh * eh
        b1 = r + eps * eh
        B = eye / b1 - xx / b3
        dB = xx * (type(h)(3.0) * eps * eh * eh / (b3 * b3)) - eye * (eps * eps / (b1 * b1))
        res = dk2 * A + k2 * dA + dk1 * B + k1 * dB
    return res


@wp.func(inline=False)
def sphKernelThirdDerivative(x: Any, h: Any, u: Any, kernel: wp.int32, d: wp.int32):
    """Directional third derivative (T . u)_ab = sum_c T_abc u_c.

    T_abc = k3 x_a x_b x_c + ((k2 - k1/r)/r)(d_ab x_c + d_ac x_b + d_bc x_a - 3 x_a x_b x_c)
    with unit x; T = 0 for q > 1 and, by convention, for q < eps (the limit at r = 0 depends
    on the direction unless k'(0) = k'''(0) = 0).
    """
    r = wp.length(x)
    q = r / h
    res = wp.outer(x, x) * type(h)(0.0)
    if q <= type(h)(1.0) and q >= sphKernelEps(h):
        kk = _radial(x, h, kernel, d)
        n = x / r
        nu = wp.dot(n, u)
        nn = wp.outer(n, n)
        c = (kk[2] - kk[1] / r) / r
        eye = _identity(x, h)
        res = (
            nn * (kk[3] * nu)
            + (eye * nu + wp.outer(u, n) + wp.outer(n, u) - nn * (type(h)(3.0) * nu)) * c
        )
    return res


@wp.func(inline=False)
def sphKernelThirdDerivativeContract(x: Any, h: Any, G: Any, kernel: wp.int32, d: wp.int32):
    """(T : G)_a = sum_bc T_abc G_bc, the x-adjoint of the Hessian for an adjoint G."""
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0) and q >= sphKernelEps(h):
        kk = _radial(x, h, kernel, d)
        n = x / r
        nGn = wp.dot(n, wp.mul(G, n))
        c = (kk[2] - kk[1] / r) / r
        res = (
            n * (kk[3] * nGn)
            + (wp.mul(G, n) + wp.mul(wp.transpose(G), n) + n * (wp.trace(G) - type(h)(3.0) * nGn))
            * c
        )
    return res


@wp.func
def sphKernelHessianJVP(x: Any, h: Any, dx: Any, dh: Any, kernel: wp.int32, d: wp.int32):
    """dH = T . dx + dH/dh dh."""
    return (
        sphKernelThirdDerivative(x, h, dx, kernel, d) + sphKernelHessianDkDh(x, h, kernel, d) * dh
    )


# --- kernel Laplacian (LaplacianScheme.Naive) ---------------------------------------------


@wp.func
def _laplacianWeights(r: Any, e: Any, re: Any, d: wp.int32):
    """s, t and their r-derivatives for r_e = r + e, e = eps h.

    s = r^2/r_e^2, t = -r^2/r_e^3 + d/r_e, ds/dr = 2r/r_e^2 - 2r^2/r_e^3,
    dt/dr = -2r/r_e^3 + 3r^2/r_e^4 - d/r_e^2, written in the algebraically identical forms
    t = (d - 1)/r_e + e (2r + e)/r_e^3, ds/dr = 2 r e / r_e^3,
    dt/dr = ((1 - d) r^2 - 2 (1 + d) r e - d e^2) / r_e^4,
    which avoid the cancellation of O(1/r) terms (visible in float32 for d = 1).
    """
    re2 = re * re
    re3 = re2 * re
    s = r * r / re2
    t = type(r)(d - 1) / re + e * (type(r)(2.0) * r + e) / re3
    ds = type(r)(2.0) * r * e / re3
    dt = (type(r)(1 - d) * r * r - type(r)(2 * (1 + d)) * r * e - type(r)(d) * e * e) / (re3 * re)
    return s, t, ds, dt


@wp.func(inline=False)
def sphKernelLaplacian(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """Kernel Laplacian s k2 + t k1 (as eps -> 0: k2 + (d - 1) k1 / r).

    r_e = r + eps h, s = r^2/r_e^2, t = -r^2/r_e^3 + d/r_e; 0 for q < eps or q > 1.
    """
    r = wp.length(x)
    q = r / h
    res = type(h)(0.0)
    if q <= type(h)(1.0) and q >= sphKernelEps(h):
        kk = _radial(x, h, kernel, d)
        e = sphKernelEps(h) * h
        re = r + e
        s, t, ds, dt = _laplacianWeights(r, e, re, d)
        res = s * kk[2] + t * kk[1]
    return res


@wp.func(inline=False)
def sphKernelLaplacianGradient(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """grad_x of the kernel Laplacian: x_hat (ds/dr k2 + s k3 + dt/dr k1 + t k2)."""
    r = wp.length(x)
    q = r / h
    res = type(x)()
    if q <= type(h)(1.0) and q >= sphKernelEps(h):
        kk = _radial(x, h, kernel, d)
        e = sphKernelEps(h) * h
        re = r + e
        s, t, ds, dt = _laplacianWeights(r, e, re, d)
        res = x * ((ds * kk[2] + s * kk[3] + dt * kk[1] + t * kk[2]) / r)
    return res


@wp.func(inline=False)
def sphKernelLaplacianDkDh(x: Any, h: Any, kernel: wp.int32, d: wp.int32):
    """d/dh of the kernel Laplacian: ds/dh k2 + s dk2/dh + dt/dh k1 + t dk1/dh."""
    r = wp.length(x)
    q = r / h
    res = type(h)(0.0)
    eps = sphKernelEps(h)
    if q <= type(h)(1.0) and q >= eps:
        ih = type(h)(1.0) / h
        sh = sphShape(q, kernel, d)
        c = _cd(kernel, d, h) * _ipow(ih, d + 1)
        k1 = c * sh[1]
        k2 = c * sh[2] * ih
        dk1 = -c * ih * (q * sh[2] + type(h)(d + 1) * sh[1])
        dk2 = -c * ih * ih * (q * sh[3] + type(h)(d + 2) * sh[2])
        e = eps * h
        re = r + e
        s, t, ds, dt = _laplacianWeights(r, e, re, d)
        re3 = re * re * re
        # ds/dh = -2 eps r^2 / re^3; dt/dh = eps (3 r^2 - d re^2) / re^4 with the difference
        # expanded as (3 - d) r^2 - d (2 r e + e^2) (no cancellation)
        dsh = type(h)(-2.0) * eps * r * r / re3
        dth = eps * (type(h)(3 - d) * r * r - type(h)(d) * e * (type(h)(2.0) * r + e)) / (re3 * re)
        res = dsh * k2 + s * dk2 + dth * k1 + t * dk1
    return res


@wp.func
def sphKernelLaplacianJVP(x: Any, h: Any, dx: Any, dh: Any, kernel: wp.int32, d: wp.int32):
    """Tangent of the kernel Laplacian: grad_x(lap W) . dx + d(lap W)/dh dh."""
    return (
        wp.dot(sphKernelLaplacianGradient(x, h, kernel, d), dx)
        + sphKernelLaplacianDkDh(x, h, kernel, d) * dh
    )


# --- concrete overloads with custom adjoints (see the module docstring) ------------------

_CONCRETE = tuple(
    (wp.types.vector(length=_n, dtype=_s), _s)
    for _s in (wp.float32, wp.float64)
    for _n in (1, 2, 3)
)

# Each iteration adds one overload to the same Warp function (Warp registers a @wp.func
# whose name already names a Function in the defining scope as an overload of it); the
# custom adjoints are attached by `registerCustomAdjoints`.
for _vecT, _scalarT in _CONCRETE:

    @wp.func
    def sphKernelGradient(x: _vecT, h: _scalarT, kernel: wp.int32, d: wp.int32):
        """grad W = x_hat C_d k'(q) / h^(d+1), x_hat = x / max(r, eps); 0 at r = 0 and q > 1.

        Custom adjoint: x-adjoint H . adj (closed-form Hessian, finite
        H(0) at coincident points), h-adjoint d(grad W)/dh . adj.
        """
        return _sphKernelGradient(x, h, kernel, d)

    @wp.func
    def sphGradientDkDh(x: _vecT, h: _scalarT, kernel: wp.int32, d: wp.int32):
        """d(grad W)/dh = x_hat (-C_d / h^(d+2)) (q k''(q) + (d+1) k'(q)).

        Custom adjoint: x-adjoint dH/dh . adj, h-adjoint d^2(grad W)/dh^2 . adj.
        """
        return _sphGradientDkDh(x, h, kernel, d)


del _vecT, _scalarT

_REGISTERED = [False]
_REGISTER_LOCK = threading.Lock()


def customAdjointsRegistered() -> bool:
    """Whether `registerCustomAdjoints` has run in this process."""
    return _REGISTERED[0]


def registerCustomAdjoints() -> None:
    """Attach the hand-written adjoints to the twelve concrete overloads of
    `sphKernelGradient` and `sphGradientDkDh` (idempotent, thread-safe).

    Deferred from import to first need: ``@wp.func_grad`` builds each overload,
    and with it the whole kernel-id dispatch below it, only to learn its return type, about
    1 s of the import on a 2-core machine, and a first result with the specialised kernels
    never builds a module that calls these functions. It must run before any Warp module
    whose code calls them is built (the module's hash and its adjoint depend on it); the
    library guarantees that: every launch helper (`autograd.launcher`,
    `util.warpContext.launch`), `warpSPHCore.precompile` and the public access to the Warp
    functions through `warpSPHCore.kernels` call it first. A user kernel that takes them
    from the submodules (`kernels.evaluation`, `kernels.support`) before any library
    launch calls it itself."""
    if _REGISTERED[0]:
        return
    with _REGISTER_LOCK:
        if _REGISTERED[0]:
            return
        for vecT, scalarT in _CONCRETE:

            def adjSphKernelGradient(x: vecT, h: scalarT, kernel: wp.int32, d: wp.int32,
                                     adj_ret: vecT):
                wp.adjoint[x] += wp.mul(sphKernelHessian(x, h, kernel, d), adj_ret)
                wp.adjoint[h] += wp.dot(_sphGradientDkDh(x, h, kernel, d), adj_ret)

            def adjSphGradientDkDh(x: vecT, h: scalarT, kernel: wp.int32, d: wp.int32,
                                   adj_ret: vecT):
                wp.adjoint[x] += wp.mul(sphKernelHessianDkDh(x, h, kernel, d), adj_ret)
                wp.adjoint[h] += wp.dot(sphGradientD2kDh2(x, h, kernel, d), adj_ret)

            wp.func_grad(sphKernelGradient)(adjSphKernelGradient)
            wp.func_grad(sphGradientDkDh)(adjSphGradientDkDh)
        _REGISTERED[0] = True


# --- tangents --------------------------------------------------------------------------------


@wp.func
def sphKernelJVP(x: Any, h: Any, dx: Any, dh: Any, kernel: wp.int32, d: wp.int32):
    """dW = grad W . dx + dW/dh dh."""
    return wp.dot(sphKernelGradient(x, h, kernel, d), dx) + sphKernelDkDh(x, h, kernel, d) * dh


@wp.func
def sphKernelGradientJVP(x: Any, h: Any, dx: Any, dh: Any, kernel: wp.int32, d: wp.int32):
    """d(grad W) = H dx + d(grad W)/dh dh."""
    return wp.mul(sphKernelHessian(x, h, kernel, d), dx) + sphGradientDkDh(x, h, kernel, d) * dh
