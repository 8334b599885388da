"""Warp traversal helpers shared by the neighbour search and operator kernels.

Two traversals, one helper each:

* CSR (`AdjacencyList`): ``getIndexRange(adj, i)`` -> ``wp.vec2i(first, count)``; slot ``e``
  in ``[first, first + count)`` maps to reference ``adj.neighborList[e]``.
* Grid (`CompactHashMap`): ``cell = gridQueryCell(grid, x_i)`` once per query, then for
  ``o in range(grid.numOffsets)``: ``r = checkOffset(grid, cell, o)`` ->
  ``wp.vec2i(firstSlot, count)`` or ``(-1, -1)`` (no such cell, skipped or duplicate); slot
  ``s`` in ``[r[0], r[0] + r[1])`` maps to reference ``grid.sortIndex[s]``.
  ``checkOffsetPosition(grid, x_i, o)`` recomputes the query cell itself (convenience).

Both clamp what they return to the arrays they index (a corrupted structure never causes an
out-of-bounds read); callers must still skip reference indices outside ``[0, N_r)``. What is
clamped or skipped is recorded with `flagError` in the device's error buffer that the structs
carry (``errors``, ``site``; `util.errorFlags`), and reported by the next readback or
``checkErrors()``.

Usage inside a generic operator kernel (``adjacency: Any``, ``grid: Any``)::

    if useAdjacency:
        r = getIndexRange(adjacency, i)
        for e in range(r[0], r[0] + r[1]):
            j = adjacency.neighborList[e]
            ...
    else:
        cell = gridQueryCell(grid, x_i)
        for o in range(grid.numOffsets):
            r = checkOffset(grid, cell, o)
            for s in range(r[0], r[0] + r[1]):
                j = grid.sortIndex[s]
                ...

The structs are `adjacencyData` (no float fields, one class) and `gridData_f32` /
`gridData_f64` (``qMin``/``qMax`` carry the scalar type; Warp structs cannot be generic).
`gridDataType(dtype)` selects the class; `makeAdjacencyData` / `makeGridData` fill them from
the dataclasses. Every function here is generic over float32/float64 and d = 1, 2, 3.
"""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from ..util.conversion import toWarp
from ..util.errorFlags import (
    ERROR_SLOTS,
    KIND_GRID_INDEX,
    KIND_NEIGHBOR_INDEX,
    KIND_ROW_RANGE,
    errorArray,
)

__all__ = [
    "HASH_PRIMES",
    "adjacencyData",
    "gridData_f32",
    "gridData_f64",
    "gridDataType",
    "makeAdjacencyData",
    "makeGridData",
    "axisCell",
    "cellHash",
    "linearCellIndex",
    "gridQueryCell",
    "axisNeighbor",
    "neighborCell",
    "findCell",
    "findCellHashed",
    "checkOffset",
    "checkOffsetPosition",
    "getIndexRange",
    "flagError",
    "KIND_NEIGHBOR_INDEX_W",
    "KIND_GRID_INDEX_W",
]

#: Spatial-hash primes of `cellHash` (products formed in int64).
HASH_PRIMES = (73856093, 19349663, 83492791)

# error-buffer constants of util.errorFlags, as Warp compile-time constants
ERROR_SLOTS_W = wp.constant(ERROR_SLOTS)
KIND_NEIGHBOR_INDEX_W = wp.constant(KIND_NEIGHBOR_INDEX)
KIND_ROW_RANGE_W = wp.constant(KIND_ROW_RANGE)
KIND_GRID_INDEX_W = wp.constant(KIND_GRID_INDEX)

# Python ints captured by Warp functions are compile-time constants.
_P0 = wp.constant(wp.int64(HASH_PRIMES[0]))
_P1 = wp.constant(wp.int64(HASH_PRIMES[1]))
_P2 = wp.constant(wp.int64(HASH_PRIMES[2]))
# |float cell coordinate| is clamped to this before the int64 conversion (memory safety for
# wild positions; exact for every sane one because numCells <= 2^20).
_CELL_CLAMP = 1099511627776.0  # 2^40


@wp.struct
class adjacencyData:
    """CSR view of an `AdjacencyList` (`j`, `edgeOffsets`, `numNeighbors`), plus the device's
    error buffer (`util.errorFlags`; may be empty), the site id of the launch and
    ``lowerTaken``: empty, or one int32 device flag, nonzero when a kernel that takes each
    pair once may stop a row of the (symmetric) list at its first j < i, every such pair
    being taken by row j (`autograd.arg_extract.lowerTakenFlag`)."""

    neighborList: wp.array(dtype=wp.int64)
    neighborOffsets: wp.array(dtype=wp.int32)
    numNeighbors: wp.array(dtype=wp.int32)
    errors: wp.array(dtype=wp.int64)
    site: wp.int32
    lowerTaken: wp.array(dtype=wp.int32)


@wp.struct
class gridData_f32:
    """Grid view of a float32 `CompactHashMap` plus the domain's periodicity, the device's
    error buffer and the site id of the launch."""

    sortIndex: wp.array(dtype=wp.int64)
    qMin: wp.array(dtype=wp.float32)
    qMax: wp.array(dtype=wp.float32)
    numCells: wp.array(dtype=wp.int32)
    hashTable: wp.array(dtype=wp.vec2i)
    cellTable: wp.array(dtype=wp.vec3l)
    cellOffsets: wp.array(dtype=wp.vec3i)
    periodicity: wp.array(dtype=wp.bool)
    D: wp.int32
    numOffsets: wp.int32
    errors: wp.array(dtype=wp.int64)
    site: wp.int32


@wp.struct
class gridData_f64:
    """Grid view of a float64 `CompactHashMap` plus the domain's periodicity, the device's
    error buffer and the site id of the launch."""

    sortIndex: wp.array(dtype=wp.int64)
    qMin: wp.array(dtype=wp.float64)
    qMax: wp.array(dtype=wp.float64)
    numCells: wp.array(dtype=wp.int32)
    hashTable: wp.array(dtype=wp.vec2i)
    cellTable: wp.array(dtype=wp.vec3l)
    cellOffsets: wp.array(dtype=wp.vec3i)
    periodicity: wp.array(dtype=wp.bool)
    D: wp.int32
    numOffsets: wp.int32
    errors: wp.array(dtype=wp.int64)
    site: wp.int32


_GRID_TYPES = {torch.float32: gridData_f32, torch.float64: gridData_f64}


def gridDataType(dtype: torch.dtype):
    """The `gridData_*` struct class for a torch float dtype.

    Args:
        dtype: torch.float32 (`gridData_f32`) or torch.float64 (`gridData_f64`).
    """
    try:
        return _GRID_TYPES[dtype]
    except KeyError:
        raise TypeError(f"gridDataType: dtype {dtype}; accepted: torch.float32 or "
                        "torch.float64") from None


def makeAdjacencyData(adjacency, site: int = 0) -> adjacencyData:
    """Fill an `adjacencyData` struct from an `AdjacencyList` (zero-copy views; the list must
    outlive the struct).

    Args:
        adjacency: the `AdjacencyList` (int64 ``j [E]``, int32 ``edgeOffsets [N_q]`` and
            ``numNeighbors [N_q]``).
        site: the `util.errorFlags.siteId` that names the launch in error reports.
    """
    s = adjacencyData()
    s.neighborList = toWarp(adjacency.j, wp.int64)
    s.neighborOffsets = toWarp(adjacency.edgeOffsets, wp.int32)
    s.numNeighbors = toWarp(adjacency.numNeighbors, wp.int32)
    s.errors = errorArray(adjacency.j.device)
    s.site = site
    return s


def makeGridData(hashMap, periodicity: torch.Tensor | None = None, site: int = 0):
    """Fill a `gridData_*` struct from a `CompactHashMap` (zero-copy views).

    Args:
        hashMap: the `CompactHashMap` (float32 or float64; the struct type follows its dtype).
        periodicity: bool ``[d]``; defaults to the periodicity the grid was built with.
        site: the `util.errorFlags.siteId` that names the launch in error reports.
    """
    if periodicity is None:
        periodicity = hashMap.periodicity
    if periodicity is None:
        raise ValueError("makeGridData: the CompactHashMap carries no periodicity; pass "
                         "periodicity (bool tensor [d])")
    s = gridDataType(hashMap.qMin.dtype)()
    s.sortIndex = toWarp(hashMap.sortIndex, wp.int64)
    s.qMin = toWarp(hashMap.qMin)
    s.qMax = toWarp(hashMap.qMax)
    s.numCells = toWarp(hashMap.numCells, wp.int32)
    s.hashTable = toWarp(hashMap.hashTable, wp.vec2i)
    s.cellTable = toWarp(hashMap.sortedCellTable, wp.vec3l)
    s.cellOffsets = toWarp(hashMap.cellOffsets, wp.vec3i)
    s.periodicity = toWarp(periodicity, wp.bool)
    s.D = int(hashMap.D)
    s.numOffsets = int(hashMap.numOffsets)
    s.errors = errorArray(hashMap.sortIndex.device)
    s.site = site
    return s


# --------------------------------------------------------------------------------------
# Cell arithmetic (wrap, cell index, linear index, hash). One definition for the build and
# every traversal.
# --------------------------------------------------------------------------------------


@wp.func
def axisCell(x: Any, lo: Any, hi: Any, n: wp.int32, periodic: wp.bool):
    """Cell index of one coordinate and the cell-consistent wrapped coordinate.

    Periodic: ``p = wrap(x)`` into [lo, hi), ``c = floor((p - lo) / cellSize)`` floor-mod n
    (absorbs p == hi from rounding; the returned coordinate is shifted by the same number of
    periods, so it lies in or on the boundary of its cell). Non-periodic: p = x and c is
    clamped into [0, n - 1]. A non-finite coordinate gives cell 0. Floor, never truncation
    (truncation toward zero would misplace negative coordinates). Returns ``(c: int64, p)``.
    """
    extent = hi - lo
    nn = wp.int64(n)
    p = x
    if periodic:
        p = x - extent * wp.floor((x - lo) / extent)
    cellSize = extent / type(x)(n)
    u = wp.floor((p - lo) / cellSize)
    raw = wp.int64(0)
    if wp.isfinite(u):
        lim = type(x)(_CELL_CLAMP)
        raw = wp.int64(wp.clamp(u, -lim, lim))
    c = raw
    if periodic:
        # integer floor-mod, so both seams (below lo and above hi) wrap; nn >= 1
        c = raw % nn
        if c < wp.int64(0):
            c = c + nn
        wraps = (raw - c) / nn
        if wraps != wp.int64(0):
            p = p - type(x)(wraps) * extent
    else:
        c = wp.clamp(raw, wp.int64(0), nn - wp.int64(1))
    return c, p


@wp.func
def linearCellIndex(c: wp.vec3l, numCells: wp.array(dtype=wp.int32)) -> wp.int64:
    """``c0 + n0 (c1 + n1 c2)`` (axis 0 fastest; absent axes have c = 0)."""
    n0 = wp.int64(numCells[0])
    n1 = wp.int64(1)
    if numCells.shape[0] > 1:
        n1 = wp.int64(numCells[1])
    return c[0] + n0 * (c[1] + n1 * c[2])


@wp.func
def cellHash(c: wp.vec3l, D: wp.int32, L: wp.int64) -> wp.int64:
    """1D ``c0 mod L``; 2D/3D ``(73856093 c0 + 19349663 c1 + 83492791 c2) mod L`` (int64,
    non-negative operands: int32 products would overflow)."""
    if D == 1:
        return c[0] % L
    return (c[0] * _P0 + c[1] * _P1 + c[2] * _P2) % L


@wp.func
def gridQueryCell(grid: Any, x: Any) -> wp.vec3l:
    """Cell of a (current, possibly unwrapped) position, exactly as the build bins.

    Args:
        grid: a `gridData_f32` / `gridData_f64` struct (from `makeGridData`).
        x: the position, a Warp vector of the grid's float type and dimension.
    """
    c = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
    for k in range(grid.D):
        ck, pk = axisCell(x[k], grid.qMin[k], grid.qMax[k], grid.numCells[k], grid.periodicity[k])
        c[k] = ck
    return c


@wp.func
def axisNeighbor(c: wp.int64, o: wp.int64, n: wp.int64, periodic: wp.bool):
    """One axis of the stencil neighbour ``c + o``: ``(valid, cell, wraps)``.

    Periodic: wrap modulo n (``wraps`` = -1, 0, +1 periods added); an offset whose wrapped
    cell equals that of a smaller offset value (o = +1 with 2 cells, o = 0 or +1 with 1 cell)
    is invalid, so each cell is visited once. Non-periodic: invalid outside [0, n).
    """
    v = c + o
    wraps = wp.int64(0)
    valid = bool(True)  # noqa: UP018 (a Warp dynamic variable, not a constant)
    if periodic:
        if (o == wp.int64(1) and n <= wp.int64(2)) or (o == wp.int64(0) and n == wp.int64(1)):
            valid = False
        if v < wp.int64(0):
            v = v + n
            wraps = wp.int64(-1)
        elif v >= n:
            v = v - n
            wraps = wp.int64(1)
    elif v < wp.int64(0) or v >= n:
        valid = False
    return valid, v, wraps


@wp.func
def neighborCell(grid: Any, c: wp.vec3l, o: wp.vec3i):
    """Stencil neighbour ``n = c + o``, per axis as in `axisNeighbor`.

    Returns ``(valid: bool, n: vec3l, wraps: vec3l)``.
    """
    n = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
    wraps = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
    valid = bool(True)  # noqa: UP018 (a Warp dynamic variable, not a constant)
    for k in range(grid.D):
        ok, v, w = axisNeighbor(c[k], wp.int64(o[k]), wp.int64(grid.numCells[k]), grid.periodicity[k])
        if not ok:
            valid = False
        n[k] = v
        wraps[k] = w
    return valid, n, wraps


@wp.func
def findCellHashed(grid: Any, lin: wp.int64, h: wp.int64) -> wp.vec2i:
    """Sorted-slot range ``(first, count)`` of the cell with linear index ``lin`` and hash
    ``h`` (see `findCell`), or (-1, -1) when unoccupied. Index reads are clamped to their
    arrays (corrupted tables stay memory-safe)."""
    res = wp.vec2i(-1, -1)
    L = wp.int64(grid.hashTable.shape[0])
    if h >= wp.int64(0) and h < L:
        entry = grid.hashTable[wp.int32(h)]
        numRows = grid.cellTable.shape[0]
        first = wp.clamp(entry[0], 0, numRows)
        last = wp.clamp(entry[0] + entry[1], first, numRows)
        # no `break`: this helper is also compiled into differentiable operator kernels,
        # whose adjoint replay of early exits from dynamic loops is wrong in Warp
        for row in range(first, last):
            t = grid.cellTable[row]
            if t[0] == lin and res[0] < 0:
                m = wp.int64(grid.sortIndex.shape[0])
                s0 = wp.clamp(t[1], wp.int64(0), m)
                s1 = wp.clamp(t[1] + t[2], s0, m)
                res = wp.vec2i(wp.int32(s0), wp.int32(s1 - s0))
    return res


@wp.func
def findCell(grid: Any, n: wp.vec3l) -> wp.vec2i:
    """Sorted-slot range ``(first, count)`` of cell ``n`` (valid, wrapped coordinates), or
    (-1, -1) when unoccupied: hash n, scan the bucket's rows for the matching linear index."""
    res = wp.vec2i(-1, -1)
    L = wp.int64(grid.hashTable.shape[0])
    if L > wp.int64(0):
        res = findCellHashed(grid, linearCellIndex(n, grid.numCells), cellHash(n, grid.D, L))
    return res


@wp.func
def checkOffset(grid: Any, c: wp.vec3l, offsetIndex: wp.int32) -> wp.vec2i:
    """Sorted-slot range ``(first, count)`` of stencil cell ``offsetIndex`` around query
    cell ``c`` (from `gridQueryCell`), or (-1, -1) if skipped, duplicate or unoccupied.

    Args:
        grid: a `gridData_f32` / `gridData_f64` struct (from `makeGridData`).
        c: the query cell, ``wp.vec3l`` (unused axes 0).
        offsetIndex: int32 index into the grid's 3^d stencil offsets ``cellOffsets``.
    """
    res = wp.vec2i(-1, -1)
    if offsetIndex >= 0 and offsetIndex < grid.cellOffsets.shape[0]:
        valid, n, wraps = neighborCell(grid, c, grid.cellOffsets[offsetIndex])
        if valid:
            res = findCell(grid, n)
    return res


@wp.func
def checkOffsetPosition(grid: Any, x: Any, offsetIndex: wp.int32) -> wp.vec2i:
    """`checkOffset` recomputing the query cell from the current (unwrapped) position.

    Args:
        grid: a `gridData_f32` / `gridData_f64` struct (from `makeGridData`).
        x: the query position, a Warp vector of the grid's float type and dimension.
        offsetIndex: int32 index into the grid's 3^d stencil offsets ``cellOffsets``.
    """
    return checkOffset(grid, gridQueryCell(grid, x), offsetIndex)


@wp.func
def flagError(errors: wp.array(dtype=wp.int64), site: wp.int32, kind: wp.int32, pos: wp.int64,
              value: wp.int64, row: wp.int32, limit: wp.int64, aux: wp.int64):
    """Record a skipped entry in the device's error buffer (`util.errorFlags` layout): count
    it, and let the first flagging thread (compare-and-swap on slot 1) store what it saw.
    A no-op when `errors` is empty (a struct built without a buffer).

    Args:
        errors: the error buffer (int64 ``[8]``) or an empty array.
        site: the launch's site id; kind: a ``KIND_*`` code of `util.errorFlags`.
        pos: the position (edge, slot or row); value: the offending value; row: the query row;
        limit: the bound it broke; aux: a further value of the kind.
    """
    if errors.shape[0] >= ERROR_SLOTS_W:
        wp.atomic_add(errors, 0, wp.int64(1))
        if wp.atomic_cas(errors, 1, wp.int64(-1), pos) == wp.int64(-1):
            errors[2] = value
            errors[3] = wp.int64(row)
            errors[4] = wp.int64(site)
            errors[5] = wp.int64(kind)
            errors[6] = limit
            errors[7] = aux


@wp.func
def getIndexRange(adj: Any, i: wp.int32) -> wp.vec2i:
    """CSR row ``(neighborOffsets[i], numNeighbors[i])``, clamped to ``[0, E)``; (0, 0) for a
    row index outside the arrays.

    Args:
        adj: an `adjacencyData` struct (from `makeAdjacencyData`).
        i: int32 query (row) index.
    """
    E = adj.neighborList.shape[0]
    res = wp.vec2i(0, 0)
    if i >= 0 and i < adj.neighborOffsets.shape[0] and i < adj.numNeighbors.shape[0]:
        first0 = adj.neighborOffsets[i]
        count0 = adj.numNeighbors[i]
        first = wp.clamp(first0, 0, E)
        count = wp.clamp(count0, 0, E - first)
        res = wp.vec2i(first, count)
        if first != first0 or count != count0:
            flagError(adj.errors, adj.site, KIND_ROW_RANGE_W, wp.int64(i), wp.int64(first0), i,
                      wp.int64(E), wp.int64(count0))
    return res
