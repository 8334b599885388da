"""Warp kernels of the renormalization pseudo-inverse helpers.
Launched only through the bridge (`renormalization.py`); never with a bare ``wp.launch``
(which would be a silent hole in the gradient). Every float32/float64 overload of the three
kernels is declared at import, so the module is compiled once and never reloaded by a launch
adding an overload.

Pseudo-inverse kernels, one thread per row, generic over the scalar type (one kernel per d,
because the 2D and 3D algebra differ):

* `pinv1Kernel` (C ``[N]`` scalars): ``L = 1/C`` if ``C > 1e-10`` else 0.
* `pinv2Kernel` (C ``[N]`` of mat22): symmetrise ``b = (C01 + C10)/2``; eigenvalues
  ``lambda+- = (a + c +- sqrt((a - c)^2 + 4 b^2))/2`` ordered by magnitude into (big, small);
  plain inverse of ``[[a, b], [b, c]]`` when ``|big| > 1e-12`` and
  ``|small| > 1e-6 |big|``, else eigenvector reconstruction with the single angle
  ``theta = atan2(2b, a - c)/2`` and each eigenvalue inverted on its own test. Outputs L and
  eigVals = (big, small). The square root is `safeSqrt`, whose adjoint is 0 at 0: at
  exact isotropy ``(a - c)^2 + 4 b^2 = 0`` and Warp's own sqrt adjoint would be 0 * inf.
* `pinv3Kernel` (C ``[N]`` of mat33, unsymmetrised): ``wp.svd3``; when every singular value
  exceeds ``1e-6 sigma_max`` the plain inverse ``wp.inverse(C)`` (adjoint ``-L^T adj L^T``,
  exact), else the truncated SVD form ``V diag(g(sigma)) U^T``. The branch choice is not
  differentiated. Warp's svd3 adjoint guards its ``1/(s_k^2 - s_l^2)`` factors with an
  epsilon, so the (zero-seeded) svd3 adjoint of the plain-inverse branch stays finite; in the
  truncated branch it is exact for distinct singular values.

This module has no ``from __future__ import annotations``: the concrete `safeSqrt` overloads
are created in a loop and their annotations must be evaluated at definition time (Warp's
custom adjoints accept no generic argument, so there is one overload per scalar type).
"""

from typing import Any

import warp as wp

__all__ = ["safeSqrt", "pinv1Kernel", "pinv2Kernel", "pinv3Kernel"]

# Pseudo-inverse cutoffs (module-level Python floats, converted at use: a constant expression
# inside a kernel would be evaluated in float32).
_CUT_1D = 1e-10
_CUT_BIG = 1e-12
_CUT_REL = 1e-6

# --- sqrt with a zero adjoint at 0 (concrete overloads per scalar type) ------------------------
# (`wp.func_grad` rejects generic arguments.)

for _scalarT in (wp.float32, wp.float64):

    @wp.func
    def safeSqrt(x: _scalarT):
        """sqrt(max(x, 0)); its adjoint is 0.5 adj / sqrt(x) for x > 0 and 0 otherwise."""
        return wp.sqrt(wp.max(x, type(x)(0.0)))

    @wp.func_grad(safeSqrt)
    def _adjSafeSqrt(x: _scalarT, adj_ret: _scalarT):
        if x > type(x)(0.0):
            wp.adjoint[x] += adj_ret * type(x)(0.5) / wp.sqrt(x)


del _scalarT


# --- 1D ------------------------------------------------------------------------------------


@wp.kernel
def pinv1Kernel(C: wp.array(dtype=Any), L: wp.array(dtype=Any)):
    """L[i] = 1 / C[i] if C[i] > 1e-10, else 0."""
    i = wp.tid()
    c = C[i]
    res = type(c)(0.0)
    if c > type(c)(_CUT_1D):
        res = type(c)(1.0) / c
    L[i] = res


# --- 2D ------------------------------------------------------------------------------------


@wp.func
def _invOrZero(lam: Any, keep: wp.bool):
    """1/lam when `keep`, else 0 (explicit if/else: a ternary can zero Warp adjoints)."""
    res = type(lam)(0.0)
    if keep:
        res = type(lam)(1.0) / lam
    return res


@wp.kernel
def pinv2Kernel(C: wp.array(dtype=Any), L: wp.array(dtype=Any), eigVals: wp.array(dtype=Any)):
    """Closed-form pseudo-inverse of the symmetrised 2x2 C (module docstring)."""
    i = wp.tid()
    Ci = C[i]
    half = type(Ci[0, 0])(0.5)
    a = Ci[0, 0]
    c = Ci[1, 1]
    b = half * (Ci[0, 1] + Ci[1, 0])
    amc = a - c
    root = safeSqrt(amc * amc + type(a)(4.0) * b * b)
    lamP = half * (a + c + root)
    lamM = half * (a + c - root)
    plusIsBig = wp.abs(lamP) >= wp.abs(lamM)
    big = lamP
    small = lamM
    if not plusIsBig:
        big = lamM
        small = lamP
    keepBig = wp.abs(big) > type(a)(_CUT_BIG)
    keepSmall = wp.abs(small) > type(a)(_CUT_REL) * wp.abs(big)
    Li = type(Ci)()
    if keepBig and keepSmall:
        det = a * c - b * b
        Li = type(Ci)(c / det, -b / det, -b / det, a / det)
    else:
        theta = half * wp.atan2(type(a)(2.0) * b, amc)
        cs = wp.cos(theta)
        sn = wp.sin(theta)
        keepP = keepBig
        keepM = keepSmall
        if not plusIsBig:
            keepP = keepSmall
            keepM = keepBig
        gP = _invOrZero(lamP, keepP)
        gM = _invOrZero(lamM, keepM)
        Li = type(Ci)(gP * cs * cs + gM * sn * sn, (gP - gM) * cs * sn,
                      (gP - gM) * cs * sn, gP * sn * sn + gM * cs * cs)
    L[i] = Li
    eigVals[i] = wp.vector(big, small)


# --- 3D ------------------------------------------------------------------------------------


@wp.kernel
def pinv3Kernel(C: wp.array(dtype=Any), L: wp.array(dtype=Any)):
    """pinv(C) with relative cutoff 1e-6 (singular values <= 1e-6 sigma_max dropped)."""
    i = wp.tid()
    Ci = C[i]
    U, sigma, V = wp.svd3(Ci)
    s0 = wp.abs(sigma[0])
    s1 = wp.abs(sigma[1])
    s2 = wp.abs(sigma[2])
    sMax = wp.max(s0, wp.max(s1, s2))
    cut = type(s0)(_CUT_REL) * sMax
    k0 = s0 > cut
    k1 = s1 > cut
    k2 = s2 > cut
    Li = type(Ci)()
    if k0 and k1 and k2:
        Li = wp.inverse(Ci)
    else:
        g = wp.vector(_invOrZero(sigma[0], k0), _invOrZero(sigma[1], k1),
                      _invOrZero(sigma[2], k2))
        Li = wp.mul(wp.mul(V, wp.diag(g)), wp.transpose(U))
    L[i] = Li


def _declareOverloads() -> None:
    """Declare the float32/float64 overloads of the three kernels (at import, so that no launch
    adds one and reloads the module)."""
    for s in (wp.float32, wp.float64):
        m2 = wp.types.matrix(shape=(2, 2), dtype=s)
        m3 = wp.types.matrix(shape=(3, 3), dtype=s)
        wp.overload(pinv1Kernel, {"C": wp.array(dtype=s), "L": wp.array(dtype=s)})
        wp.overload(pinv2Kernel, {"C": wp.array(dtype=m2), "L": wp.array(dtype=m2),
                                  "eigVals": wp.array(dtype=wp.types.vector(2, s))})
        wp.overload(pinv3Kernel, {"C": wp.array(dtype=m3), "L": wp.array(dtype=m3)})


_declareOverloads()
