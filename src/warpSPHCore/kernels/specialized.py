"""Kernel quantities specialised at compile time on (kernel, support scheme, d, scalar type).

`pairKernels(kernel, supportMode, d, scalar)` returns a namespace of Warp functions for one
configuration, for the forward-only specialised operator kernels (`operators._specialized`):

=====================  ===================================================================
``W(x, h)``            W = C_d k(q) / h^d for q <= 1, else 0
``gradW(x, h)``        grad W = x / max(r, eps) C_d k'(q) / h^(d+1) for q <= 1, else 0
``W_ij(x, h_i, h_j)``  W under the support scheme (`kernels.support`)
``gradW_ij(...)``      grad W under the support scheme
``gradVJP_ij(x, h_i, h_j, u)``  (G, H u, u . dG/dh_i, u . dG/dh_j) for a cotangent u
``valueVJP_ij(x, h_i, h_j)``  (W, G, dW/dh_i, dW/dh_j): the Density's reverse quantities
                       (`kernels.support.sphKernelGradientVJP_ij`)
=====================  ===================================================================

The arithmetic is that of `kernels.evaluation.sphKernel` / `sphKernelGradient` and
`kernels.support.sphKernel_ij` / `sphKernelGradient_ij` operation for operation (the same
per-kernel shape function of `kernels.shapes`, C_d converted from the same float64 value,
the same powers and the same pairwise-support rule), so a specialised result is bitwise the
generic one; what differs is that the kernel id, the dimension and the support scheme are
Python constants resolved by ``wp.static`` when the function is generated: no kernel-id
dispatch, no scheme branch and no table lookup is left in the compiled pair loop.

No custom adjoints: these functions serve kernels compiled with ``enable_backward=False``
(the generic functions keep the exact adjoints for taped launches).
"""

import functools
from typing import Any

import warp as wp

from ..enumTypes import KernelFunctions as K
from . import shapes as _shapes
from .constants import C_D
from .evaluation import _hessianDot, _ipow, sphKernelEps

__all__ = ["pairKernels", "specialFunction", "SPECIALIZED_KERNELS"]


@wp.func
def _hessianDotFar(x: Any, u: Any, ir: Any, a: Any, k2: Any):
    """H u away from r = 0, where the regularisers of `_hessianDot` are below rounding:
    k2 (x x^T / r^2) u + (k1 / r) (u - (x x^T / r^2) u), with ``ir`` = 1/r and ``a`` = k1/r
    (one reciprocal instead of three divisions)."""
    return x * (wp.dot(x, u) * ir * ir * (k2 - a)) + u * a

# no `from __future__ import annotations`: the generated functions' annotations name
# closure variables (evaluated when the function is defined)

# kernel id -> (shape function, takes the dimension)
_SHAPES = {
    K.Wendland2: (_shapes._wendland2, True),
    K.Wendland4: (_shapes._wendland4, True),
    K.Wendland6: (_shapes._wendland6, True),
    K.Poly6: (_shapes._poly6, False),
    K.Spiky: (_shapes._spiky, False),
    K.CubicSpline: (_shapes._cubicSpline, False),
    K.QuarticSpline: (_shapes._quarticSpline, False),
    K.QuinticSpline: (_shapes._quinticSpline, False),
    K.B8: (_shapes._b8, False),
    K.B7: (_shapes._b7, False),
    K.HOCT4: (_shapes._hoct4, False),
    K.Gaussian: (_shapes._gaussian, False),
    K.ViscosityKernel: (_shapes._viscosity, False),
    K.CohesionKernel: (_shapes._cohesion, False),
    K.AdhesionKernel: (_shapes._adhesion, False),
}

#: the kernel ids with a specialised shape (every `KernelFunctions` value)
SPECIALIZED_KERNELS = frozenset(int(k) for k in _SHAPES)


def specialFunction(tag: str, inline: bool | None = True):
    """Decorator: a Warp function for one configuration, named ``<name>_<tag>`` in a Warp
    module of its own. Functions generated per configuration must not share a name: Warp
    makes a second function of the same name in the same module an overload of the first,
    and two configurations with the same argument types would then resolve to one of them."""
    def wrap(fn):
        return wp.func(fn, name=f"{fn.__name__}_{tag}", module="unique", inline=inline)
    return wrap


def _scalarTag(scalar) -> str:
    return "f32" if scalar == wp.float32 else "f64"


@functools.cache
def _shapeFunction(kernel: int, d: int, scalar):
    """(k, k', k'', k''') of one kernel in dimension d for 0 <= q <= 1 (the caller applies
    the cutoff, as `sphShape` does)."""
    fn, takesDim = _SHAPES[K(kernel)]
    tag = f"k{int(kernel)}_{d}d_{_scalarTag(scalar)}"
    if takesDim:
        @specialFunction(tag)
        def shape(q: scalar):
            return fn(q, wp.static(d))
    else:
        @specialFunction(tag)
        def shape(q: scalar):
            return fn(q)
    return shape


@functools.cache
def pairKernels(kernel: int, supportMode: int, d: int, scalar):
    """Warp functions W, gradW, W_ij, gradW_ij for one (kernel, support scheme, d, scalar)
    (module docstring). Raises KeyError for an unknown kernel id."""
    S = scalar
    V = wp.types.vector(length=d, dtype=S)
    shape = _shapeFunction(int(kernel), d, S)
    cd = float(C_D[K(kernel)][d - 1])
    mode = int(supportMode)
    average = mode in (14, 15)
    tag = f"k{int(kernel)}_s{mode}_{d}d_{_scalarTag(S)}"

    @specialFunction(tag)
    def W(x: V, h: S):
        r = wp.length(x)
        ih = S(1.0) / h
        q = r * ih
        # no branch on q <= 1: a list's pairs beyond the support (a Verlet list's buffer)
        # come in an order no predictor learns, and this pair is cheap enough for the
        # misses to dominate; the shape at min(q, 1) is finite and selected away outside
        s = shape(wp.min(q, S(1.0)))
        val = (S(wp.float64(cd)) * _ipow(ih, wp.static(d))) * s[0]
        return wp.where(q <= S(1.0), val, S(0.0))

    @specialFunction(tag)
    def gradW(x: V, h: S):
        r = wp.length(x)
        ih = S(1.0) / h
        q = r * ih
        res = V()
        if q <= S(1.0):
            s = shape(q)
            k1 = (S(wp.float64(cd)) * _ipow(ih, wp.static(d + 1))) * s[1]
            res = x * (k1 / wp.max(r, sphKernelEps(h)))
        return res

    @specialFunction(tag)
    def support_ij(h_i: S, h_j: S):
        """h_ij of the scheme (`kernels.support.computePairwiseSupport`); h_i when averaging."""
        res = h_i
        if wp.static(mode == 12):
            res = h_j
        elif wp.static(mode == 13):
            res = (h_i + h_j) * S(0.5)
        elif wp.static(mode != 11 and not average):
            if h_j > h_i:
                res = h_j
        return res

    @specialFunction(tag)
    def W_ij(x: V, h_i: S, h_j: S):
        res = W(x, support_ij(h_i, h_j))
        if wp.static(average):
            res = (res + W(x, h_j)) * S(0.5)
        return res

    @specialFunction(tag)
    def gradW_ij(x: V, h_i: S, h_j: S):
        res = gradW(x, support_ij(h_i, h_j))
        if wp.static(average):
            res = (res + gradW(x, h_j)) * S(0.5)
        return res

    @specialFunction(tag)
    def supportAdjoint(g: S, h_i: S, h_j: S):
        """(g dh_ij/dh_i, g dh_ij/dh_j) of `kernels.support.computePairwiseSupport`'s h_ij
        (constants of the scheme; max, also for the averaged schemes: the larger support's,
        h_i on a tie)."""
        g_i = g
        g_j = S(0.0)
        if wp.static(mode == 12):
            g_i = S(0.0)
            g_j = g
        elif wp.static(mode == 13):
            g_i = g * S(0.5)
            g_j = g * S(0.5)
        elif wp.static(mode != 11):
            if h_j > h_i:
                g_i = S(0.0)
                g_j = g
        return g_i, g_j

    # q above which the Hessian's and x_hat's regularisers (eps h, eps = `sphKernelEps`) lie
    # below the scalar type's rounding: there 1/r replaces the regularised denominators
    qFast = 1.0e-6 if S == wp.float64 else 1.0e-2

    @specialFunction(tag)
    def gradVJP(x: V, h: S, u: V):
        """(grad W, H u, u . d(grad W)/dh) from one shape evaluation
        (`kernels.evaluation.sphKernelGradientVJP`). Above ``qFast`` (where the regularisers
        are below rounding) one reciprocal of r serves G, H u and the support term;
        closer pairs take `_hessianDot`'s regularised form."""
        r = wp.length(x)
        ih = S(1.0) / h
        q = r * ih
        G = V()
        Hu = V()
        gh = S(0.0)
        if q <= S(1.0):
            s = shape(q)
            c = S(wp.float64(cd)) * _ipow(ih, wp.static(d))
            k1 = c * s[1] * ih
            k2 = c * s[2] * ih * ih
            g = -(c * ih * ih) * (q * s[2] + S(wp.static(d + 1)) * s[1])
            xu = wp.dot(x, u)
            eps = sphKernelEps(h)
            if q > S(wp.static(qFast)) and r > eps:
                ir = S(1.0) / r
                a = k1 * ir
                G = x * a
                Hu = _hessianDotFar(x, u, ir, a, k2)
                gh = xu * (g * ir)
            else:
                m = wp.max(r, eps)
                G = x * (k1 / m)
                Hu = _hessianDot(x, u, r, q, h, k1, k2)
                gh = xu * (g / m)
        return G, Hu, gh

    @specialFunction(tag)
    def gradHessDot(x: V, h: S, u: V):
        """(grad W, H u) from one shape evaluation, grad W with `gradW`'s arithmetic (the
        same bits): the primal and the position tangent of one traversal."""
        r = wp.length(x)
        ih = S(1.0) / h
        q = r * ih
        G = V()
        Hu = V()
        if q <= S(1.0):
            s = shape(q)
            k1 = (S(wp.float64(cd)) * _ipow(ih, wp.static(d + 1))) * s[1]
            k2 = (S(wp.float64(cd)) * _ipow(ih, wp.static(d + 2))) * s[2]
            eps = sphKernelEps(h)
            G = x * (k1 / wp.max(r, eps))
            if q > S(wp.static(qFast)) and r > eps:
                # (k1 / r as a product: a kernel that uses H u alone divides once)
                ir = S(1.0) / r
                Hu = _hessianDotFar(x, u, ir, k1 * ir, k2)
            else:
                Hu = _hessianDot(x, u, r, q, h, k1, k2)
        return G, Hu

    @specialFunction(tag)
    def gradHessDot_ij(x: V, h_i: S, h_j: S, u: V):
        """(`gradW_ij`, H u) of the support scheme (`gradHessDot`; the averaged schemes
        average both)."""
        G, Hu = gradHessDot(x, support_ij(h_i, h_j), u)
        if wp.static(average):
            G2, Hu2 = gradHessDot(x, h_j, u)
            G = (G + G2) * S(0.5)
            Hu = (Hu + Hu2) * S(0.5)
        return G, Hu

    @specialFunction(tag)
    def gradVJP_ij(x: V, h_i: S, h_j: S, u: V):
        """`kernels.support.sphKernelGradientVJP_ij` for this scheme: the support tangents of
        h_ij are constants of the scheme (max: the larger support's, h_i on a tie)."""
        G, Hu, gh = gradVJP(x, support_ij(h_i, h_j), u)
        gh_i = gh
        gh_j = S(0.0)
        if wp.static(average):
            G2, Hu2, gh2 = gradVJP(x, h_j, u)
            G = (G + G2) * S(0.5)
            Hu = (Hu + Hu2) * S(0.5)
            gh_i = gh * S(0.5)
            gh_j = gh2 * S(0.5)
        else:
            gh_i, gh_j = supportAdjoint(gh, h_i, h_j)
        return G, Hu, gh_i, gh_j

    @specialFunction(tag)
    def valueVJP(x: V, h: S):
        """(W, grad W, dW/dh) from one shape evaluation
        (`kernels.evaluation.sphKernelValueVJP`)."""
        r = wp.length(x)
        q = r / h
        inside = q <= S(1.0)  # no branch, as `W`
        ih = S(1.0) / h
        s = shape(wp.min(q, S(1.0)))
        c = S(wp.float64(cd)) * _ipow(ih, wp.static(d))
        Wv = wp.where(inside, c * s[0], S(0.0))
        G = wp.where(inside, x * ((c * s[1] * ih) / wp.max(r, sphKernelEps(h))), V())
        wh = wp.where(inside, -(c * ih) * (S(wp.static(d)) * s[0] + q * s[1]), S(0.0))
        return Wv, G, wh

    @specialFunction(tag)
    def valueVJP_ij(x: V, h_i: S, h_j: S):
        """`kernels.support.sphKernelVJP_ij` for this scheme: (W, grad W, dW/dh_i, dW/dh_j),
        the support tangents of h_ij constants of the scheme (max: the larger support's, h_i
        on a tie)."""
        Wv, G, wh = valueVJP(x, support_ij(h_i, h_j))
        wh_i = wh
        wh_j = S(0.0)
        if wp.static(average):
            W2, G2, wh2 = valueVJP(x, h_j)
            Wv = (Wv + W2) * S(0.5)
            G = (G + G2) * S(0.5)
            wh_i = wh * S(0.5)
            wh_j = wh2 * S(0.5)
        else:
            wh_i, wh_j = supportAdjoint(wh, h_i, h_j)
        return Wv, G, wh_i, wh_j

    ns = type("PairKernels", (), {})()
    ns.W, ns.gradW, ns.W_ij, ns.gradW_ij = W, gradW, W_ij, gradW_ij
    ns.gradVJP_ij = gradVJP_ij
    ns.gradHessDot_ij = gradHessDot_ij
    ns.valueVJP_ij = valueVJP_ij
    ns.supportAdjoint = supportAdjoint
    return ns
