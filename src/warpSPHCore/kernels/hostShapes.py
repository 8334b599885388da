"""Host (float64 NumPy) twin of the Warp shape functions k(q).

The Warp functions in `kernels/shapes.py` evaluate k(q) on the device inside every operator.
Some quantities must instead be computed on the host in float64 (NumPy), never on the
device, so that they cost no device synchronisation: the lattice sums of the calibration
(`kernels/lattice.py`), the self-term W(0, h) of the density correction
(`kernels/densityCorrection.py`) and the radial Fourier transform used by the `'fourier'`
cross-check. This module is that host implementation. It is written from the published
kernel formulas alone, not from the Warp code; the kernel tests cross-check it against the
Warp shape functions value by value, so that the two implementations cannot drift apart.

Conventions: `q = r / h >= 0`; every shape function is exactly 0 for `q > 1` (the strict
cutoff: the value and every derivative vanish there). Knots are float64-exact host values.

Public helpers:

* `hostShape(kernel, q, d)`: k(q), float64 array of the shape of `q`.
* `hostShapeKnots(kernel, d)`: the interior points of (0, 1) where k is not analytic (piece
  boundaries); quadratures split there.
"""

from __future__ import annotations

import math

import numpy as np

from ..enumTypes import KernelFunctions as K
from .constants import B7_KNOTS, HOCT4_CONSTANTS

__all__ = ["hostShape", "hostShapeKnots", "asKernel", "checkDim"]


def asKernel(owner: str, kernel, name: str = "kernel") -> K:
    """`kernel` as a `KernelFunctions` member (an int value is accepted); ValueError otherwise."""
    if isinstance(kernel, K):
        return kernel
    if isinstance(kernel, (int, np.integer)) and not isinstance(kernel, bool):
        try:
            return K(int(kernel))
        except ValueError:
            pass
    accepted = ", ".join(f"{m.name}={m.value}" for m in K)
    raise ValueError(
        f"{owner}: {name}={kernel!r} is not a KernelFunctions member; accepted: {accepted}"
    )


def checkDim(owner: str, d, name: str = "d") -> int:
    """`d` as an int in {1, 2, 3}; ValueError otherwise."""
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and int(d) in (1, 2, 3):
        return int(d)
    raise ValueError(f"{owner}: {name}={d!r}; accepted: 1, 2, 3")


def _pos(a: np.ndarray) -> np.ndarray:
    """(a)_+ = max(a, 0)."""
    return np.maximum(a, 0.0)


def _wendland(kernel: K, q: np.ndarray, d: int) -> np.ndarray:
    t = _pos(1.0 - q)
    if d == 1:
        if kernel == K.Wendland2:
            return t**3 * (1.0 + 3.0 * q)
        if kernel == K.Wendland4:
            return t**5 * (1.0 + 5.0 * q + 8.0 * q**2)
        return t**7 * (1.0 + 7.0 * q + 19.0 * q**2 + 21.0 * q**3)
    if kernel == K.Wendland2:
        return t**4 * (1.0 + 4.0 * q)
    if kernel == K.Wendland4:
        return t**6 * (1.0 + 6.0 * q + (35.0 / 3.0) * q**2)
    return t**8 * (1.0 + 8.0 * q + 25.0 * q**2 + 32.0 * q**3)


_THIRD = 1.0 / 3.0
_TWO_THIRDS = 2.0 / 3.0


def _shapeInside(kernel: K, q: np.ndarray, d: int) -> np.ndarray:
    """k(q) for 0 <= q (values for q > 1 are overwritten by the caller)."""
    if kernel in (K.Wendland2, K.Wendland4, K.Wendland6):
        return _wendland(kernel, q, d)
    if kernel == K.CubicSpline:
        return _pos(1.0 - q) ** 3 - 4.0 * _pos(0.5 - q) ** 3
    if kernel == K.QuarticSpline:
        return _pos(1.0 - q) ** 4 - 5.0 * _pos(0.6 - q) ** 4 + 10.0 * _pos(0.2 - q) ** 4
    if kernel == K.QuinticSpline:
        return (
            _pos(1.0 - q) ** 5
            - 6.0 * _pos(_TWO_THIRDS - q) ** 5
            + 15.0 * _pos(_THIRD - q) ** 5
        )
    if kernel == K.B7:
        t1, t3, t5 = B7_KNOTS
        return (
            _pos(1.0 - q) ** 6
            - 7.0 * _pos(t5 - q) ** 6
            + 21.0 * _pos(t3 - q) ** 6
            - 35.0 * _pos(t1 - q) ** 6
        )
    if kernel == K.B8:
        return (
            _pos(1.0 - q) ** 7
            - 8.0 * _pos(0.75 - q) ** 7
            + 28.0 * _pos(0.5 - q) ** 7
            - 56.0 * _pos(0.25 - q) ** 7
        )
    if kernel == K.HOCT4:
        c = HOCT4_CONSTANTS
        outer = (
            _pos(1.0 - q) ** 4
            + c["A"] * _pos(c["gamma"] - q) ** 4
            + c["B"] * _pos(c["beta"] - q) ** 4
        )
        return np.where(q <= c["alpha"], c["P"] * q + c["Q"], outer)
    if kernel == K.Gaussian:
        return np.exp(-128.0 * q * q)
    if kernel == K.Poly6:
        return (1.0 - q * q) ** 3
    if kernel == K.Spiky:
        return _pos(1.0 - q) ** 3
    if kernel == K.ViscosityKernel:
        with np.errstate(divide="ignore", invalid="ignore"):
            v = -0.5 * q**3 + q**2 + 0.5 / q - 1.0
        return np.where(q == 0.0, math.inf, v)
    if kernel == K.CohesionKernel:
        base = (1.0 - q) ** 3 * q**3
        return np.where(q < 0.5, 2.0 * base - 1.0 / 64.0, base)
    if kernel == K.AdhesionKernel:
        u = -4.0 * q * q + 6.0 * q - 2.0
        return np.where(q > 0.5, np.sqrt(np.sqrt(_pos(u))), 0.0)
    raise AssertionError(kernel)  # unreachable: asKernel validated the member


def hostShape(kernel, q, d: int) -> np.ndarray:
    """Shape function k(q) of `kernel` in dimension `d`, float64 NumPy.

    Args:
        kernel: a `KernelFunctions` member (or its int value).
        q: array-like of normalised distances r/h (q >= 0); any shape.
        d: 1, 2 or 3 (only the Wendland kernels depend on d).

    Returns:
        float64 array of the shape of `q`; exactly 0 where q > 1. ViscosityKernel gives
        +inf at q = 0.
    """
    kernel = asKernel("hostShape", kernel)
    d = checkDim("hostShape", d)
    q = np.asarray(q, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        k = _shapeInside(kernel, q, d)
    return np.where(q > 1.0, 0.0, k)


_KNOTS = {
    K.CubicSpline: (0.5,),
    K.QuarticSpline: (0.2, 0.6),
    K.QuinticSpline: (_THIRD, _TWO_THIRDS),
    K.B7: B7_KNOTS,
    K.B8: (0.25, 0.5, 0.75),
    K.HOCT4: (HOCT4_CONSTANTS["alpha"], HOCT4_CONSTANTS["beta"], HOCT4_CONSTANTS["gamma"]),
    K.CohesionKernel: (0.5,),
    K.AdhesionKernel: (0.5,),
}


def hostShapeKnots(kernel, d: int) -> tuple[float, ...]:
    """Interior points of (0, 1) where k(q) changes its analytic form (sorted)."""
    kernel = asKernel("hostShapeKnots", kernel)
    checkDim("hostShapeKnots", d)
    return tuple(sorted(_KNOTS.get(kernel, ())))
