"""Shape functions k(q), k'(q), k''(q), k'''(q) of the 15 smoothing kernels.

`sphShape(q, kernel, d)` is the one Warp-level definition of every kernel shape: it
dispatches on the int32 `KernelFunctions` value and returns a 4-vector
``(k, k', k'', k''')`` in the scalar type of `q` (float32 or float64). The Wendland kernels
differ between 1D and 2D/3D, so the dimension `d` (1, 2, 3) is an argument. Strict cutoff:
for q > 1 the result is exactly zero; an unknown kernel id gives NaN for q <= 1.

Every literal inside the Warp functions is wrapped in the scalar type of the call, and every
non-dyadic constant (35/3, 56/3, the HOCT4 constants, 1/64) is a module-level Python float
(float64) converted at use: a constant expression such as ``5.0 / 7.0`` inside a Warp
function is evaluated in float32, even in a float64 call. The splines with non-dyadic knots
(Quartic: 1/5, 3/5; Quintic: 1/3, 2/3; B7: 1/7, 3/7, 5/7) are evaluated in the scaled
variable s = m q (m = 5, 3, 7), where their knots are integers: no rounded knot enters at
all, and at q = 0 and at the knots the truncated-power sums are exact integers.

Also here, as Warp functions returning float64 (convert at use), the kernel metadata (the
host versions and their definitions live in `kernels/metadata.py`):

* `sphKernelC_d_warp(kernel, d)`      C_d
* `sphKernelScale_warp(kernel, d)`    kernelScale = H / h_DA
* `packingRatio_warp(kernel)`         eta
* `sphKernel_xi_warp(kernel, d)`      xi = eta * kernelScale
* `sphKernelN_H_warp(kernel, d)`      N_H = V_d * xi^d

Unknown kernel ids or d outside {1, 2, 3} give NaN.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..enumTypes import KernelFunctions as K
from .constants import (
    C_D,
    HOCT4_CONSTANTS,
    KERNEL_SCALE,
    PACKING_RATIO,
    UNIT_BALL_VOLUME,
)

__all__ = [
    "sphShape",
    "sphKernelC_d_warp",
    "sphKernelScale_warp",
    "packingRatio_warp",
    "sphKernel_xi_warp",
    "sphKernelN_H_warp",
]

# --- float64 host constants (not Warp literals): converted to the call's scalar type at use --

_W4_A = 35.0 / 3.0
_W4_B = 56.0 / 3.0
_HOCT4_ALPHA = HOCT4_CONSTANTS["alpha"]
_HOCT4_BETA = HOCT4_CONSTANTS["beta"]
_HOCT4_GAMMA = HOCT4_CONSTANTS["gamma"]
_HOCT4_A = HOCT4_CONSTANTS["A"]
_HOCT4_B = HOCT4_CONSTANTS["B"]
_HOCT4_P = HOCT4_CONSTANTS["P"]
_HOCT4_Q = HOCT4_CONSTANTS["Q"]
_COHESION_OFFSET = 1.0 / 64.0


def _vec3d(values) -> wp.vec3d:
    return wp.vec3d(*(float(v) for v in values))


# (1D, 2D, 3D) tables as float64 Warp constants, captured with wp.static below.
_CD = {int(k): _vec3d(v) for k, v in C_D.items()}
_SCALE = {int(k): _vec3d(v) for k, v in KERNEL_SCALE.items()}
_ETA = {int(k): wp.float64(v) for k, v in PACKING_RATIO.items()}
_VD = _vec3d(UNIT_BALL_VOLUME)


# --- small helpers -----------------------------------------------------------------------


@wp.func
def _tp(t: Any, q: Any):
    """Truncated difference (t - q)_+."""
    return wp.max(t - q, type(q)(0.0))


@wp.func
def _shape4(k: Any, k1: Any, k2: Any, k3: Any):
    return wp.vector(k, k1, k2, k3)


@wp.func
def _zero4(q: Any):
    z = type(q)(0.0)
    return wp.vector(z, z, z, z)


# --- the 15 shape functions (q in [0, 1]; the dispatcher applies the cutoff) ------------


@wp.func
def _wendland2(q: Any, d: wp.int32):
    one = type(q)(1.0)
    a = one - q
    a2 = a * a
    a3 = a2 * a
    res = _zero4(q)
    if d == 1:
        res = _shape4(
            a3 * (one + type(q)(3.0) * q),
            type(q)(-12.0) * q * a2,
            type(q)(-12.0) * (type(q)(3.0) * q * q - type(q)(4.0) * q + one),
            type(q)(48.0) - type(q)(72.0) * q,
        )
    else:
        res = _shape4(
            a3 * a * (one + type(q)(4.0) * q),
            type(q)(-20.0) * q * a3,
            type(q)(20.0) * (type(q)(4.0) * q - one) * a2,
            type(q)(120.0) * (type(q)(2.0) * q * q - type(q)(3.0) * q + one),
        )
    return res


@wp.func
def _wendland4(q: Any, d: wp.int32):
    one = type(q)(1.0)
    a = one - q
    a2 = a * a
    a3 = a2 * a
    a4 = a2 * a2
    a5 = a4 * a
    res = _zero4(q)
    if d == 1:
        res = _shape4(
            a5 * (one + type(q)(5.0) * q + type(q)(8.0) * q * q),
            type(q)(-14.0) * q * (type(q)(4.0) * q + one) * a4,
            type(q)(14.0) * (type(q)(24.0) * q * q - type(q)(3.0) * q - one) * a3,
            type(q)(-840.0) * q * (type(q)(2.0) * q - one) * a2,
        )
    else:
        c56 = type(q)(_W4_B)
        res = _shape4(
            a5 * a * (one + type(q)(6.0) * q + type(q)(_W4_A) * q * q),
            -c56 * q * (type(q)(5.0) * q + one) * a5,
            c56 * (type(q)(35.0) * q * q - type(q)(4.0) * q - one) * a4,
            type(q)(-560.0) * q * (type(q)(7.0) * q - type(q)(3.0)) * a3,
        )
    return res


@wp.func
def _wendland6(q: Any, d: wp.int32):
    one = type(q)(1.0)
    a = one - q
    a2 = a * a
    a4 = a2 * a2
    a5 = a4 * a
    a6 = a4 * a2
    a7 = a6 * a
    q2 = q * q
    q3 = q2 * q
    res = _zero4(q)
    if d == 1:
        res = _shape4(
            a7 * (one + type(q)(7.0) * q + type(q)(19.0) * q2 + type(q)(21.0) * q3),
            type(q)(-6.0) * q * (type(q)(35.0) * q2 + type(q)(18.0) * q + type(q)(3.0)) * a6,
            type(q)(18.0)
            * (type(q)(105.0) * q3 + type(q)(13.0) * q2 - type(q)(5.0) * q - one)
            * a5,
            type(q)(-1008.0) * q * (type(q)(15.0) * q2 - type(q)(4.0) * q - one) * a4,
        )
    else:
        res = _shape4(
            a7 * a * (one + type(q)(8.0) * q + type(q)(25.0) * q2 + type(q)(32.0) * q3),
            type(q)(-22.0) * q * (type(q)(16.0) * q2 + type(q)(7.0) * q + one) * a7,
            type(q)(22.0)
            * (type(q)(160.0) * q3 + type(q)(15.0) * q2 - type(q)(6.0) * q - one)
            * a6,
            type(q)(-1584.0) * q * (type(q)(20.0) * q2 - type(q)(5.0) * q - one) * a5,
        )
    return res


@wp.func
def _cubicSpline(q: Any):
    a = type(q)(1.0) - q
    b = _tp(type(q)(0.5), q)
    k3 = type(q)(-6.0)
    if q < type(q)(0.5):
        k3 = type(q)(18.0)
    return _shape4(
        a * a * a - type(q)(4.0) * b * b * b,
        type(q)(-3.0) * a * a + type(q)(12.0) * b * b,
        type(q)(6.0) * a - type(q)(24.0) * b,
        k3,
    )


@wp.func
def _quarticSpline(q: Any):
    # Scaled variable s = 5q: the knots 1/5, 3/5 become the integers 1, 3 (see _b7).
    s = type(q)(5.0) * q
    a = type(q)(5.0) - s
    b = _tp(type(q)(3.0), s)
    c = _tp(type(q)(1.0), s)
    a2 = a * a
    b2 = b * b
    c2 = c * c
    return _shape4(
        (a2 * a2 - type(q)(5.0) * b2 * b2 + type(q)(10.0) * c2 * c2) / type(q)(625.0),
        (type(q)(-4.0) * a2 * a + type(q)(20.0) * b2 * b - type(q)(40.0) * c2 * c) / type(q)(125.0),
        (type(q)(12.0) * a2 - type(q)(60.0) * b2 + type(q)(120.0) * c2) / type(q)(25.0),
        (type(q)(-24.0) * a + type(q)(120.0) * b - type(q)(240.0) * c) / type(q)(5.0),
    )


@wp.func
def _quinticSpline(q: Any):
    # Scaled variable s = 3q: the knots 1/3, 2/3 become the integers 1, 2 (see _b7).
    s = type(q)(3.0) * q
    a = type(q)(3.0) - s
    b = _tp(type(q)(2.0), s)
    c = _tp(type(q)(1.0), s)
    a2 = a * a
    b2 = b * b
    c2 = c * c
    a4 = a2 * a2
    b4 = b2 * b2
    c4 = c2 * c2
    return _shape4(
        (a4 * a - type(q)(6.0) * b4 * b + type(q)(15.0) * c4 * c) / type(q)(243.0),
        (type(q)(-5.0) * a4 + type(q)(30.0) * b4 - type(q)(75.0) * c4) / type(q)(81.0),
        (type(q)(20.0) * a2 * a - type(q)(120.0) * b2 * b + type(q)(300.0) * c2 * c)
        / type(q)(27.0),
        (type(q)(-60.0) * a2 + type(q)(360.0) * b2 - type(q)(900.0) * c2) / type(q)(9.0),
    )


@wp.func
def _bSplineSum(a: Any, b: Any, c: Any, e: Any, wb: Any, wc: Any, we: Any):
    """(a^p - wb b^p + wc c^p - we e^p) for p = 3..7, returned as (S3, S4, S5, S6, S7)."""
    a2 = a * a
    b2 = b * b
    c2 = c * c
    e2 = e * e
    a3 = a2 * a
    b3 = b2 * b
    c3 = c2 * c
    e3 = e2 * e
    s3 = a3 - wb * b3 + wc * c3 - we * e3
    s4 = a3 * a - wb * b3 * b + wc * c3 * c - we * e3 * e
    s5 = a3 * a2 - wb * b3 * b2 + wc * c3 * c2 - we * e3 * e2
    s6 = a3 * a3 - wb * b3 * b3 + wc * c3 * c3 - we * e3 * e3
    s7 = a3 * a3 * a - wb * b3 * b3 * b + wc * c3 * c3 * c - we * e3 * e3 * e
    return s3, s4, s5, s6, s7


@wp.func
def _b7(q: Any):
    # Scaled variable s = 7q, so that the knots 1/7, 3/7, 5/7 become the integers 1, 3, 5:
    # S_p(q) = [(7 - s)^p - 7 (5 - s)_+^p + 21 (3 - s)_+^p - 35 (1 - s)_+^p] / 7^p.
    # No non-dyadic constant enters (it would be rounded to float32), and at q = 0 and at the
    # knots the sums are exact integers, so k is correctly rounded there (float64, 1e-15).
    s = type(q)(7.0) * q
    s3, s4, s5, s6, s7 = _bSplineSum(
        type(q)(7.0) - s,
        _tp(type(q)(5.0), s),
        _tp(type(q)(3.0), s),
        _tp(type(q)(1.0), s),
        type(q)(7.0),
        type(q)(21.0),
        type(q)(35.0),
    )
    return _shape4(
        s6 / type(q)(117649.0),
        type(q)(-6.0) * s5 / type(q)(16807.0),
        type(q)(30.0) * s4 / type(q)(2401.0),
        type(q)(-120.0) * s3 / type(q)(343.0),
    )


@wp.func
def _b8(q: Any):
    a = type(q)(1.0) - q
    s3, s4, s5, s6, s7 = _bSplineSum(
        a,
        _tp(type(q)(0.75), q),
        _tp(type(q)(0.5), q),
        _tp(type(q)(0.25), q),
        type(q)(8.0),
        type(q)(28.0),
        type(q)(56.0),
    )
    return _shape4(s7, type(q)(-7.0) * s6, type(q)(42.0) * s5, type(q)(-210.0) * s4)


@wp.func
def _hoct4(q: Any):
    res = _shape4(
        type(q)(_HOCT4_P) * q + type(q)(_HOCT4_Q),
        type(q)(_HOCT4_P),
        type(q)(0.0),
        type(q)(0.0),
    )
    if q > type(q)(_HOCT4_ALPHA):
        a = type(q)(1.0) - q
        g = _tp(type(q)(_HOCT4_GAMMA), q)
        b = _tp(type(q)(_HOCT4_BETA), q)
        cA = type(q)(_HOCT4_A)
        cB = type(q)(_HOCT4_B)
        a2 = a * a
        g2 = g * g
        b2 = b * b
        res = _shape4(
            a2 * a2 + cA * g2 * g2 + cB * b2 * b2,
            type(q)(-4.0) * (a2 * a + cA * g2 * g + cB * b2 * b),
            type(q)(12.0) * (a2 + cA * g2 + cB * b2),
            type(q)(-24.0) * (a + cA * g + cB * b),
        )
    return res


@wp.func
def _gaussian(q: Any):
    q2 = q * q
    e = wp.exp(type(q)(-128.0) * q2)
    return _shape4(
        e,
        type(q)(-256.0) * q * e,
        (type(q)(65536.0) * q2 - type(q)(256.0)) * e,
        (type(q)(196608.0) * q - type(q)(16777216.0) * q2 * q) * e,
    )


@wp.func
def _poly6(q: Any):
    q2 = q * q
    b = type(q)(1.0) - q2
    return _shape4(
        b * b * b,
        type(q)(-6.0) * q * b * b,
        type(q)(-6.0) * (type(q)(5.0) * q2 * q2 - type(q)(6.0) * q2 + type(q)(1.0)),
        type(q)(-6.0) * (type(q)(20.0) * q2 * q - type(q)(12.0) * q),
    )


@wp.func
def _spiky(q: Any):
    a = type(q)(1.0) - q
    return _shape4(a * a * a, type(q)(-3.0) * a * a, type(q)(6.0) * a, type(q)(-6.0))


@wp.func
def _viscosity(q: Any):
    # Singular at q = 0 (k = +inf, k' = -inf): a self pair gives W = +inf and a NaN gradient.
    q2 = q * q
    return _shape4(
        type(q)(-0.5) * q2 * q + q2 + type(q)(1.0) / (type(q)(2.0) * q) - type(q)(1.0),
        type(q)(-1.5) * q2 - type(q)(1.0) / (type(q)(2.0) * q2) + type(q)(2.0) * q,
        type(q)(1.0) / (q2 * q) - type(q)(3.0) * q + type(q)(2.0),
        type(q)(-3.0) / (q2 * q2) - type(q)(3.0),
    )


@wp.func
def _cohesion(q: Any):
    a = type(q)(1.0) - q
    q2 = q * q
    q3 = q2 * q
    s = type(q)(1.0)
    k = a * a * a * q3
    if q < type(q)(0.5):
        s = type(q)(2.0)
        k = type(q)(2.0) * k - type(q)(_COHESION_OFFSET)
    return _shape4(
        k,
        s * (type(q)(-3.0) * q2 * (type(q)(2.0) * q - type(q)(1.0)) * a * a),
        s
        * type(q)(6.0)
        * q
        * (type(q)(-5.0) * q3 + type(q)(10.0) * q2 - type(q)(6.0) * q + type(q)(1.0)),
        s * (type(q)(-120.0) * q3 + type(q)(180.0) * q2 - type(q)(72.0) * q + type(q)(6.0)),
    )


@wp.func
def _adhesion(q: Any):
    res = _zero4(q)
    if q > type(q)(0.5):
        # u = -4q^2 + 6q - 2 and 2q^2 - 3q + 1 in factored form (no rounding below 0 near q = 1).
        m = type(q)(2.0) * q - type(q)(1.0)
        u = type(q)(2.0) * m * (type(q)(1.0) - q)
        p = m * (q - type(q)(1.0))
        u14 = wp.sqrt(wp.sqrt(u))
        u34 = u14 * u14 * u14
        q2 = q * q
        res = _shape4(
            u14,
            (type(q)(6.0) - type(q)(8.0) * q) / (type(q)(4.0) * u34),
            (type(q)(16.0) * q2 - type(q)(24.0) * q + type(q)(11.0)) / (type(q)(8.0) * u34 * p),
            type(q)(3.0)
            * (type(q)(3.0) - type(q)(4.0) * q)
            * (type(q)(16.0) * q2 - type(q)(24.0) * q + type(q)(15.0))
            / (type(q)(32.0) * p * p * u34),
        )
    return res


@wp.func(inline=False)
def sphShape(q: Any, kernel: wp.int32, d: wp.int32):
    """(k(q), k'(q), k''(q), k'''(q)) of `kernel` in dimension `d`.

    `q` >= 0 is float32 or float64; the result is a 4-vector of that type. Exactly zero for
    q > 1; NaN for an unknown kernel id. Unnormalised (no C_d).
    """
    res = _zero4(q)
    if q > type(q)(1.0):
        res = _zero4(q)
    elif kernel == 0:
        res = _wendland2(q, d)
    elif kernel == 1:
        res = _wendland4(q, d)
    elif kernel == 2:
        res = _wendland6(q, d)
    elif kernel == 20:
        res = _poly6(q)
    elif kernel == 21:
        res = _spiky(q)
    elif kernel == 30:
        res = _cubicSpline(q)
    elif kernel == 31:
        res = _quarticSpline(q)
    elif kernel == 32:
        res = _quinticSpline(q)
    elif kernel == 33:
        res = _b8(q)
    elif kernel == 34:
        res = _b7(q)
    elif kernel == 35:
        res = _hoct4(q)
    elif kernel == 36:
        res = _gaussian(q)
    elif kernel == 40:
        res = _viscosity(q)
    elif kernel == 41:
        res = _cohesion(q)
    elif kernel == 42:
        res = _adhesion(q)
    else:
        nan = type(q)(wp.nan)
        res = _shape4(nan, nan, nan, nan)
    return res


# --- metadata (float64) ------------------------------------------------------------------


@wp.func
def _pick3(v: wp.vec3d, d: wp.int32):
    """v[d - 1] for d in {1, 2, 3}, NaN otherwise."""
    res = wp.float64(wp.nan)
    if d == 1:
        res = v[0]
    elif d == 2:
        res = v[1]
    elif d == 3:
        res = v[2]
    return res


@wp.func
def sphKernelC_d_warp(kernel: wp.int32, d: wp.int32):
    """C_d of `kernel` in dimension `d` as float64 (NaN if unknown)."""
    res = wp.float64(wp.nan)
    if kernel == 0:
        res = _pick3(wp.static(_CD[K.Wendland2]), d)
    elif kernel == 1:
        res = _pick3(wp.static(_CD[K.Wendland4]), d)
    elif kernel == 2:
        res = _pick3(wp.static(_CD[K.Wendland6]), d)
    elif kernel == 20:
        res = _pick3(wp.static(_CD[K.Poly6]), d)
    elif kernel == 21:
        res = _pick3(wp.static(_CD[K.Spiky]), d)
    elif kernel == 30:
        res = _pick3(wp.static(_CD[K.CubicSpline]), d)
    elif kernel == 31:
        res = _pick3(wp.static(_CD[K.QuarticSpline]), d)
    elif kernel == 32:
        res = _pick3(wp.static(_CD[K.QuinticSpline]), d)
    elif kernel == 33:
        res = _pick3(wp.static(_CD[K.B8]), d)
    elif kernel == 34:
        res = _pick3(wp.static(_CD[K.B7]), d)
    elif kernel == 35:
        res = _pick3(wp.static(_CD[K.HOCT4]), d)
    elif kernel == 36:
        res = _pick3(wp.static(_CD[K.Gaussian]), d)
    elif kernel == 40:
        res = _pick3(wp.static(_CD[K.ViscosityKernel]), d)
    elif kernel == 41:
        res = _pick3(wp.static(_CD[K.CohesionKernel]), d)
    elif kernel == 42:
        res = _pick3(wp.static(_CD[K.AdhesionKernel]), d)
    return res


@wp.func
def sphKernelScale_warp(kernel: wp.int32, d: wp.int32):
    """kernelScale = H / h_DA of `kernel` in dimension `d` as float64 (tabulated)."""
    res = wp.float64(wp.nan)
    if kernel == 0:
        res = _pick3(wp.static(_SCALE[K.Wendland2]), d)
    elif kernel == 1:
        res = _pick3(wp.static(_SCALE[K.Wendland4]), d)
    elif kernel == 2:
        res = _pick3(wp.static(_SCALE[K.Wendland6]), d)
    elif kernel == 20:
        res = _pick3(wp.static(_SCALE[K.Poly6]), d)
    elif kernel == 21:
        res = _pick3(wp.static(_SCALE[K.Spiky]), d)
    elif kernel == 30:
        res = _pick3(wp.static(_SCALE[K.CubicSpline]), d)
    elif kernel == 31:
        res = _pick3(wp.static(_SCALE[K.QuarticSpline]), d)
    elif kernel == 32:
        res = _pick3(wp.static(_SCALE[K.QuinticSpline]), d)
    elif kernel == 33:
        res = _pick3(wp.static(_SCALE[K.B8]), d)
    elif kernel == 34:
        res = _pick3(wp.static(_SCALE[K.B7]), d)
    elif kernel == 35:
        res = _pick3(wp.static(_SCALE[K.HOCT4]), d)
    elif kernel == 36:
        res = _pick3(wp.static(_SCALE[K.Gaussian]), d)
    elif kernel == 40:
        res = _pick3(wp.static(_SCALE[K.ViscosityKernel]), d)
    elif kernel == 41:
        res = _pick3(wp.static(_SCALE[K.CohesionKernel]), d)
    elif kernel == 42:
        res = _pick3(wp.static(_SCALE[K.AdhesionKernel]), d)
    return res


@wp.func
def packingRatio_warp(kernel: wp.int32):
    """Packing ratio eta = h_DA / dx of `kernel` as float64 (NaN if unknown)."""
    res = wp.float64(wp.nan)
    if kernel == 0:
        res = wp.static(_ETA[K.Wendland2])
    elif kernel == 1:
        res = wp.static(_ETA[K.Wendland4])
    elif kernel == 2:
        res = wp.static(_ETA[K.Wendland6])
    elif kernel == 30:
        res = wp.static(_ETA[K.CubicSpline])
    elif kernel == 31:
        res = wp.static(_ETA[K.QuarticSpline])
    elif kernel == 32:
        res = wp.static(_ETA[K.QuinticSpline])
    elif kernel == 33:
        res = wp.static(_ETA[K.B8])
    elif kernel == 34:
        res = wp.static(_ETA[K.B7])
    elif kernel == 35:
        res = wp.static(_ETA[K.HOCT4])
    elif kernel == 36:
        res = wp.static(_ETA[K.Gaussian])
    elif kernel == 20 or kernel == 21 or kernel == 40 or kernel == 41 or kernel == 42:
        res = wp.float64(1.0)
    return res


@wp.func
def sphKernel_xi_warp(kernel: wp.int32, d: wp.int32):
    """xi = eta * kernelScale = H / dx (support in particle spacings) as float64."""
    return packingRatio_warp(kernel) * sphKernelScale_warp(kernel, d)


@wp.func
def sphKernelN_H_warp(kernel: wp.int32, d: wp.int32):
    """Expected neighbour count N_H = V_d * xi^d as float64."""
    xi = sphKernel_xi_warp(kernel, d)
    p = xi
    if d >= 2:
        p = p * xi
    if d >= 3:
        p = p * xi
    return _pick3(wp.static(_VD), d) * p
