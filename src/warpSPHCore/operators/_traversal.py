"""Lift one pair term to both neighbour traversals (CSR and grid) — one physics definition,
many uses (STYLE.md §1).

`makeNeighborSum(pairTerm, tag, vector=False)` returns two Warp functions

    csrSum(adj, i, k, F, q, r, dom, corr, ks, extra) -> sum
    gridSum(grid, cell, i, k, F, q, r, dom, corr, ks, extra) -> sum

that sum ``pairTerm(i, j, k, F, q, r, dom, corr, ks, extra)`` over the neighbours j of query
i: the CSR row of `adj`, or the 3^d grid stencil around `cell`, the query's current cell
(``gridQueryCell(grid, x_i)``). A kernel picks one itself:

    if useAdjacency:
        val = fooCsrSum(adjacencyState, i, ...)
    else:
        cell = gridQueryCell(gridState, queryState.positions[i])
        val = fooGridSum(gridState, cell, i, ...)

Warp's adjoint of a function replays the forward of everything it calls, so a wrapper
level around the neighbour loop costs one more traversal in backward; this flat layout made
the Gradient's forward + backward ~1.5x faster than a combined `neighborSum(useAdjacency,
...)` wrapper (docs/performance.md). The sum is a scalar, or with
``vector=True`` a d-vector of the positions' type (whole-vector accumulation, W74): a pair
term that yields all d components of one output row at once lets one thread evaluate the
kernel gradient once instead of d times.

Pitfalls shaping the structure (`warp-pitfalls.md`):

* every runtime-bound loop lives in its own `@wp.func` that only accumulates with ``+=`` and
  returns the sum (W3, W4, W71); the grid's nested loop (stencil cells x slots in a cell) has
  its inner loop in a separate function (W72);
* no ``continue``/``break``: skips are ``if cond: acc += term`` (W73);
* everything per pair (x_i, h_i, corrections of i) is read inside `pairTerm`, never carried
  into a loop from outside it (W71);
* reference indices outside ``[0, N_r)`` are skipped (corrupted structures stay memory-safe).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..kernels.geometry import computeDistanceVec
from ..neighborhood.traversal import checkOffset, getIndexRange

__all__ = ["makeNeighborSum", "pairVector"]


@wp.func
def pairVector(xi: Any, xj: Any, dom: Any):
    """x_ij = x_i - x_j with the minimum image on periodic axes (`operators.md` §8.2): the
    one definition `kernels.geometry.computeDistanceVec`, read from the domain struct."""
    return computeDistanceVec(xi, xj, dom.domainMin, dom.domainMax, dom.periodicity, dom.dim)


@wp.func
def _scalarZero(q: Any, ks: Any):
    return type(ks.normalizationCoefficient)(0.0)


@wp.func
def _vectorZero(q: Any, ks: Any):
    return q.positions.dtype()


def _named(fn, name: str):
    fn.__name__ = name
    fn.__qualname__ = name
    return wp.func(fn)


def makeNeighborSum(pairTerm, tag: str, vector: bool = False):
    """Build the CSR/grid neighbour sum of `pairTerm` (Warp function names suffixed `tag`);
    `vector`: the pair term returns a d-vector (the positions' type) instead of a scalar."""
    zero = _vectorZero if vector else _scalarZero

    def csrSum(adj: Any, i: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any, dom: Any,
               corr: Any, ks: Any, extra: Any):
        rng = getIndexRange(adj, i)
        nR = r.masses.shape[0]
        acc = zero(q, ks)
        for e in range(rng[0], rng[0] + rng[1]):
            j = wp.int32(adj.neighborList[e])
            if j >= 0 and j < nR:
                acc += pairTerm(i, j, k, F, q, r, dom, corr, ks, extra)
        return acc

    def cellSum(grid: Any, first: wp.int32, count: wp.int32, i: wp.int32, k: wp.int32,
                F: wp.int32, q: Any, r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
        nR = r.masses.shape[0]
        acc = zero(q, ks)
        for slot in range(first, first + count):
            j = wp.int32(grid.sortIndex[slot])
            if j >= 0 and j < nR:
                acc += pairTerm(i, j, k, F, q, r, dom, corr, ks, extra)
        return acc

    cellSumF = _named(cellSum, f"cellSum_{tag}")

    def gridSum(grid: Any, cell: wp.vec3l, i: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
        acc = zero(q, ks)
        for o in range(grid.numOffsets):
            rng = checkOffset(grid, cell, o)
            acc += cellSumF(grid, rng[0], rng[1], i, k, F, q, r, dom, corr, ks, extra)
        return acc

    return _named(csrSum, f"csrSum_{tag}"), _named(gridSum, f"gridSum_{tag}")
