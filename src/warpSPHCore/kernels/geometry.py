"""Pair geometry shared by the neighbour search and every operator kernel.

* `computeDistanceVec`: the minimum-image pair vector x_ij (both coordinates
  wrapped into [min, max), the difference mapped into [-L/2, L/2) on periodic axes).
* `checkDirectionality_i` / `checkDirectionality_j`: the kind tests of an `operationMode`
  (docs/particle-kinds.md, "The modes").

One definition each; the search, the brute-force reference (`neighborhood/bruteForce.py`
implements the same arithmetic in torch for testing) and the operators share them.
"""

from __future__ import annotations

from typing import Any

import warp as wp

__all__ = [
    "wrapCoordinate",
    "minimumImage",
    "computeDistanceVec",
    "checkDirectionality_i",
    "checkDirectionality_j",
]


@wp.func
def wrapCoordinate(x: Any, lo: Any, extent: Any):
    """Wrap x into [lo, lo + extent): p = x - L floor((x - lo) / L)."""
    return x - extent * wp.floor((x - lo) / extent)


@wp.func
def minimumImage(xi: Any, xj: Any, lo: Any, hi: Any, periodic: wp.bool):
    """Minimum-image difference of one coordinate (plain difference when not periodic).

    The wrap is piecewise constant, so the derivative is d(x_i) - d(x_j) (the floor terms
    have zero adjoint).
    """
    delta = xi - xj
    if periodic:
        extent = hi - lo
        half = extent * type(xi)(0.5)
        pi = wrapCoordinate(xi, lo, extent)
        pj = wrapCoordinate(xj, lo, extent)
        d = pi - pj
        delta = (d + half) - extent * wp.floor((d + half) / extent) - half
    return delta


@wp.func
def computeDistanceVec(
    xi: Any,
    xj: Any,
    domainMin: wp.array(dtype=Any),
    domainMax: wp.array(dtype=Any),
    periodicity: wp.array(dtype=wp.bool),
    dim: wp.int32,
):
    """x_ij = x_i - x_j, per axis the minimum image on periodic axes.

    `xi`, `xj`: vectors of length `dim`; the domain arrays have length `dim`.

    The local starts from a constant zero vector: initialising it with ``xi - xj`` and then
    overwriting the components makes Warp's adjoint count d(x_ij)/dx twice (the overwritten
    initial value still receives the adjoint; measured with Warp 1.19; the same Warp bug
    double-counts ``v[i] = v[i] + x`` on a local vector).
    """
    res = type(xi)()
    # A constant-bound loop (unrolled by Warp, guarded by `dim`) instead of range(dim): a
    # runtime-bound loop here costs a loop frame per pair in the forward and in every
    # adjoint replay (the Gradient floor kernel: forward 25 -> 21 ms, forward + backward
    # 84 -> 74 ms at 2D 16384; docs/performance.md).
    for k in range(3):
        if k < dim:
            res[k] = minimumImage(xi[k], xj[k], domainMin[k], domainMax[k], periodicity[k])
    return res


@wp.func
def checkDirectionality_i(mode: wp.int32, kind: wp.int32):
    """True iff a query of `kind` is allowed under `operationMode` `mode`."""
    ok = False
    if mode == 0 or mode == 9:
        ok = True
    elif mode == 1 or mode == 3 or mode == 6 or mode == 11:
        ok = kind == 0
    elif mode == 2 or mode == 4 or mode == 8 or mode == 12:
        ok = kind == 1
    elif mode == 5 or mode == 7 or mode == 10:
        ok = kind == 2
    elif mode == 13 or mode == 14:
        ok = kind != 2
    return ok


@wp.func
def checkDirectionality_j(mode: wp.int32, kind: wp.int32):
    """True iff a reference of `kind` contributes under `operationMode` `mode`."""
    ok = False
    if mode == 0:
        ok = True
    elif mode == 1 or mode == 2 or mode == 5 or mode == 13:
        ok = kind == 0
    elif mode == 3 or mode == 4 or mode == 7 or mode == 14:
        ok = kind == 1
    elif mode == 6 or mode == 8:
        ok = kind == 2
    elif mode == 9 or mode == 10 or mode == 11 or mode == 12:
        ok = kind != 2
    return ok
