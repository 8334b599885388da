"""Lift one pair term to both neighbour traversals (CSR and grid) — one physics definition,
many uses.

`makeNeighborSum(pairTerm, tag, vector=False, replayZero=False)` returns two Warp functions

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
``vector=True`` a d-vector of the positions' type, accumulated as a whole vector (Warp
double-counts the adjoint of a component update ``v[k] = v[k] + x`` of a local vector): a pair
term that yields all d components of one output row at once lets one thread evaluate the
kernel gradient once instead of d times. With ``replayZero=True`` (every operator kernel: it
only scales and stores the sum) the two sums are concrete per (scalar type, d) and Warp's
backward replay of the kernel's forward returns zero instead of traversing (`_withZeroReplay`).

Warp reverse-mode pitfalls shaping the structure (each one breaks gradients silently):

* every runtime-bound loop lives in its own `@wp.func` that only accumulates with ``+=`` and
  returns the sum: Warp does not replay dynamic loops in backward, so a nonlinear operation
  or a division applied to the accumulator inside the looped function, or a value carried
  across the loop, loses its adjoint; the grid's nested loop (stencil cells x slots in a
  cell) has its inner loop in a separate function (nested dynamic loops doubled gradients);
* no ``continue``/``break`` (they give wrong gradients inside a dynamic loop): skips are
  ``if cond: acc += term``;
* everything per pair (x_i, h_i, corrections of i) is read inside `pairTerm`, never carried
  into a loop from outside it (its adjoint would be silently zero);
* reference indices outside ``[0, N_r)`` are skipped (corrupted structures stay memory-safe)
  and flagged in the device's error buffer (`neighborhood.traversal.flagError`); the index is
  compared in int64 before the int32 conversion, so 2^32 + k is not mistaken for k.
"""

from __future__ import annotations

import types
from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads, structFor
from ..kernels.geometry import checkDirectionality_i, computeDistanceVec
from ..neighborhood.traversal import (
    KIND_GRID_INDEX_W,
    KIND_NEIGHBOR_INDEX_W,
    checkOffset,
    flagError,
    getIndexRange,
    gridQueryCell,
)

__all__ = ["makeNeighborSum", "makeRowReverseKernel", "pairVector"]


@wp.func
def pairVector(xi: Any, xj: Any, dom: Any):
    """x_ij = x_i - x_j with the minimum image on periodic axes: the one definition
    `kernels.geometry.computeDistanceVec`, read from the domain struct."""
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


def makeNeighborSum(pairTerm, tag: str, vector: bool = False, replayZero: bool = False,
                    tangent: bool = False, zero=None):
    """Build the CSR/grid neighbour sum of `pairTerm` (Warp function names suffixed `tag`);
    `vector`: the pair term returns a d-vector (the positions' type) instead of a scalar;
    `tangent`: a Tier-2 JVP pair term, whose `extra` is the tangent pack struct
    (`arg_extract.structFor("tangent", d, s)`) instead of a scalar array; `zero`: a Warp
    function ``zero(q, ks)`` returning the accumulator's zero for another accumulator type
    (the Momentum's 2 x d matrix), overloaded per (d, scalar type)."""
    if zero is None:
        zero = _vectorZero if vector else _scalarZero

    def csrSum(adj: Any, i: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any, dom: Any,
               corr: Any, ks: Any, extra: Any):
        rng = getIndexRange(adj, i)
        nR = wp.int64(r.masses.shape[0])
        acc = zero(q, ks)
        for e in range(rng[0], rng[0] + rng[1]):
            jl = adj.neighborList[e]
            if jl >= wp.int64(0) and jl < nR:
                acc += pairTerm(i, wp.int32(jl), k, F, q, r, dom, corr, ks, extra)
            else:
                flagError(adj.errors, adj.site, KIND_NEIGHBOR_INDEX_W, wp.int64(e), jl, i, nR,
                          wp.int64(0))
        return acc

    def cellSum(grid: Any, first: wp.int32, count: wp.int32, i: wp.int32, k: wp.int32,
                F: wp.int32, q: Any, r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
        nR = wp.int64(r.masses.shape[0])
        acc = zero(q, ks)
        for slot in range(first, first + count):
            jl = grid.sortIndex[slot]
            if jl >= wp.int64(0) and jl < nR:
                acc += pairTerm(i, wp.int32(jl), k, F, q, r, dom, corr, ks, extra)
            else:
                flagError(grid.errors, grid.site, KIND_GRID_INDEX_W, wp.int64(slot), jl, i, nR,
                          wp.int64(0))
        return acc

    cellSumF = _named(cellSum, f"cellSum_{tag}")

    def gridSum(grid: Any, cell: wp.vec3l, i: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
        acc = zero(q, ks)
        for o in range(grid.numOffsets):
            rng = checkOffset(grid, cell, o)
            acc += cellSumF(grid, rng[0], rng[1], i, k, F, q, r, dom, corr, ks, extra)
        return acc

    if not replayZero:
        return _named(csrSum, f"csrSum_{tag}"), _named(gridSum, f"gridSum_{tag}")

    def csrReplay(adj: Any, i: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any, dom: Any,
                  corr: Any, ks: Any, extra: Any):
        return zero(q, ks)

    def gridReplay(grid: Any, cell: wp.vec3l, i: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                   r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
        return zero(q, ks)

    return (_withZeroReplay(csrSum, csrReplay, f"csrSum_{tag}", "adj", tangent),
            _withZeroReplay(gridSum, gridReplay, f"gridSum_{tag}", "grid", tangent))


def _copy(fn, name: str, annotations: dict):
    """A copy of the Python function `fn` (same code and closure) with concrete annotations."""
    g = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    g.__qualname__ = name
    g.__annotations__ = dict(annotations)
    return g


def _withZeroReplay(fn, replay, name: str, structure: str, tangent: bool = False):
    """`fn` as concrete float32/float64 x d = 1, 2, 3 overloads of one Warp function, each with
    a replay that returns zero instead of traversing (Warp accepts custom replays only for
    concrete signatures).

    Warp's backward replays a kernel's forward before running its adjoint. The operator
    kernels only scale and store a neighbour sum, so their adjoint needs none of its value,
    and the adjoint of every pair term recomputes what it needs itself: the replay can skip
    the whole traversal. Only for sums whose value the calling kernel does not use in its
    adjoint (not the CRK volume, CRK density or Omega kernels, which divide by or multiply
    with the sum)."""

    result = None
    for s in (wp.float32, wp.float64):
        for d in (1, 2, 3):
            ann = {"i": wp.int32, "k": wp.int32, "F": wp.int32,
                   "q": structFor("particle", d, s), "r": structFor("particle", d, s),
                   "dom": structFor("domain", d, s), "corr": structFor("correction", d, s),
                   "ks": structFor("kernelState", d, s),
                   "extra": structFor("tangent", d, s) if tangent else wp.array(dtype=s)}
            if structure == "adj":
                ann = {"adj": structFor("adjacency", d, s), **ann}
            else:
                ann = {"grid": structFor("grid", d, s), "cell": wp.vec3l, **ann}
            f = wp.func(_copy(fn, name, ann))
            if result is None:
                result = f
            else:
                result.add_overload(f)
            wp.func_replay(result)(_copy(replay, f"{name}_replay", ann))
    return result


def makeRowReverseKernel(csrSum, gridSum, name: str, module: str):
    """The generic hand-written reverse kernel of an operator with one thread per output
    element (i, k) = divmod(tid, F) (Interpolate, Gradient, Laplacian; `autograd.reverse`):
    thread (i, k) sums its reverse pair term over query i's references with `csrSum` or
    `gridSum` (`makeNeighborSum` of a vector pair term that scatters the reference side and
    returns the x_i adjoint) and adds that sum to the query positions' adjoint; nothing for a
    query the interaction mode masks (its row is 0). Named `name` in the Warp module
    `module`, with the float32/float64 x d = 1, 2, 3 overloads declared."""

    def kernel(queryState: Any, referenceState: Any, domainState: Any, useAdjacency: wp.bool,
               adjacencyState: Any, gridState: Any, correctionData: Any, kernelProperties: Any,
               cotangents: Any, fieldWidth: wp.int32):
        tid = wp.tid()
        i = tid / fieldWidth
        k = tid - i * fieldWidth
        ks = kernelProperties
        if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
            val = queryState.positions.dtype()
            if useAdjacency:
                val = csrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                             domainState, correctionData, ks, cotangents)
            else:
                cell = gridQueryCell(gridState, queryState.positions[i])
                val = gridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                              domainState, correctionData, ks, cotangents)
            if cotangents.hasQPositions:
                wp.atomic_add(cotangents.qPositions, i, val)

    kernel.__name__ = kernel.__qualname__ = name
    result = wp.kernel(kernel, enable_backward=False, module=module)
    declareStateOverloads(result, cotangent=True)
    return result
