"""Warp kernels of the neighbour search (non-differentiable: no adjoints are generated).

Generic kernels; the search launches concrete copies of them (`CONCRETE_SIGNATURES`), one
forward-only Warp module per (dimension, scalar type) group, built on first use:

* grid build: `binReferencesKernel` (cell linear index and cell-consistent wrapped position
  per reference), `gatherSortedKernel` (sorted positions/supports, cell start flags),
  `cellTableKernel` (occupied-cell table and hash keys), `hashTableKernel` (rows grouped by
  hash, bucket ranges); the last two are index-only (one overload);
* search: `radiusSearchKernel`, one thread per query: count pass (``collect = 0``) and
  collect pass (``collect = 1``) in the same traversal order; `cellMajorSearchKernel`, one
  thread per occupied cell, both passes on the CPU when the query set is the reference set
  (stencil lookups shared by the cell's queries; per-query work identical), with
  `copyCachedRowsKernel` writing the collect rows that fit the slot cache in query order;
* `filterPairsKernel`: count / collect pass re-testing the pairs of a CSR list (Verlet);
* `partitionRowsKernel`: the rows of a symmetric list reordered in place, references
  j >= i first.

Pair test. The accepted predicate is exactly ``r <= threshold`` with r the minimum-image
distance of `kernels.geometry.computeDistanceVec` accumulated in axis order (the definition
the brute-force reference mirrors). To keep the inner loop cheap, the grid search first
forms d = (q_i - shift) - p_j, where q_i is the query's cell-consistent wrapped coordinate
and shift the period added by the stencil wrap; with >= 3 cells on every periodic axis the
cell offset fixes the image, so d equals the exact minimum-image vector up to a few ulps of
the box. Candidates with |d|^2 clearly above (resp. below) the threshold squared — outside a
margin that bounds those rounding differences — are rejected (resp. accepted) directly;
only the thin shell in between is decided by the exact formula. Grids with a periodic axis of
fewer than 3 cells use the exact formula for every candidate.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import warp as wp

from ..kernels.geometry import computeDistanceVec
from ..kernels.support import computePairwiseSupport
from .traversal import (
    _P0,
    _P1,
    _P2,
    KIND_NEIGHBOR_INDEX_W,
    adjacencyData,
    axisCell,
    axisNeighbor,
    cellHash,
    findCellHashed,
    flagError,
    getIndexRange,
    gridData_f32,
    gridData_f64,
    linearCellIndex,
)

wp.set_module_options({"enable_backward": False})

__all__ = [
    "binReferencesKernel",
    "gatherSortedKernel",
    "cellTableKernel",
    "hashTableKernel",
    "radiusSearchKernel",
    "cellMajorSearchKernel",
    "copyCachedRowsKernel",
    "partitionRowsKernel",
    "filterPairsKernel",
    "ConcreteSignature",
    "CONCRETE_SIGNATURES",
    "searchGroup",
]

# relative margin of the cheap pre-test (>> accumulated rounding in both precisions)
_REL_MARGIN = 1.0e-5
# absolute margin per unit of |lo| + |hi| + L on periodic axes, in units of machine epsilon
_ABS_MARGIN_ULPS = 16.0
_EPS32 = 1.1920928955078125e-07
_EPS64 = 2.220446049250313e-16


@wp.func
def _machineEps(x: wp.float32):
    return wp.float32(_EPS32)


@wp.func
def _machineEps(x: wp.float64):
    return wp.float64(_EPS64)


@wp.func
def exactPairDistance(xi: Any, xj: Any, grid: Any):
    """r = sqrt(sum_k x_ij[k]^2) in axis order, x_ij the minimum image (shared definition)."""
    xij = computeDistanceVec(xi, xj, grid.qMin, grid.qMax, grid.periodicity, grid.D)
    r2 = xij[0] * xij[0]
    for k in range(1, grid.D):
        r2 = r2 + xij[k] * xij[k]
    return wp.sqrt(r2)


@wp.kernel
def binReferencesKernel(
    positions: wp.array(dtype=Any),
    grid: Any,
    linearIndex: wp.array(dtype=wp.int64),
    wrapped: wp.array(dtype=Any),
):
    m = wp.tid()
    x = positions[m]
    p = x
    c = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
    for k in range(grid.D):
        ck, pk = axisCell(x[k], grid.qMin[k], grid.qMax[k], grid.numCells[k], grid.periodicity[k])
        c[k] = ck
        p[k] = pk
    linearIndex[m] = linearCellIndex(c, grid.numCells)
    wrapped[m] = p


@wp.kernel
def gatherSortedKernel(
    sortIndex: wp.array(dtype=wp.int64),
    sortedLinear: wp.array(dtype=wp.int64),
    wrapped: wp.array(dtype=Any),
    supports: wp.array(dtype=Any),
    sortedPositions: wp.array(dtype=Any),
    sortedSupports: wp.array(dtype=Any),
    cellStart: wp.array(dtype=wp.int64),
):
    """Sorted slot m: gather position and support, flag the first slot of each cell."""
    m = wp.tid()
    j = wp.int32(sortIndex[m])
    sortedPositions[m] = wrapped[j]
    sortedSupports[m] = supports[j]
    start = wp.int64(1)
    if m > 0:
        if sortedLinear[m] == sortedLinear[m - 1]:
            start = wp.int64(0)
    cellStart[m] = start


@wp.kernel
def cellTableKernel(
    sortedLinear: wp.array(dtype=wp.int64),
    cellEnd: wp.array(dtype=wp.int64),
    numCells: wp.array(dtype=wp.int32),
    D: wp.int32,
    L: wp.int64,
    table: wp.array(dtype=wp.vec3l),
    keys: wp.array(dtype=wp.int64),
):
    """Occupied-cell table and hash keys: the first slot m of a cell writes row
    ``cellEnd[m] - 1`` (cellEnd = inclusive cumsum of the start flags) = (linear index, m,
    count) and its hash key; rows at or after the number of occupied cells get the padding
    (-1, 0, 0) with the sentinel key L."""
    m = wp.tid()
    M = sortedLinear.shape[0]
    numOccupied = cellEnd[M - 1]
    lin = sortedLinear[m]
    isStart = bool(True)  # noqa: UP018 (a Warp dynamic variable, not a constant)
    if m > 0:
        if sortedLinear[m - 1] == lin:
            isStart = False
    if isStart:
        e = m + 1
        while e < M:
            if sortedLinear[e] != lin:
                break
            e = e + 1
        c = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
        rest = lin
        for k in range(D):
            n64 = wp.int64(numCells[k])
            c[k] = rest % n64
            rest = rest / n64
        row = wp.int32(cellEnd[m] - wp.int64(1))
        table[row] = wp.vec3l(lin, wp.int64(m), wp.int64(e - m))
        keys[row] = cellHash(c, D, L)
    if wp.int64(m) >= numOccupied:
        table[m] = wp.vec3l(wp.int64(-1), wp.int64(0), wp.int64(0))
        keys[m] = L


@wp.kernel
def hashTableKernel(
    perm: wp.array(dtype=wp.int64),
    table: wp.array(dtype=wp.vec3l),
    sortedKeys: wp.array(dtype=wp.int64),
    cellEnd: wp.array(dtype=wp.int64),
    sortedTable: wp.array(dtype=wp.vec3l),
    hashTable: wp.array(dtype=wp.vec2i),
):
    """Rows grouped by hash: gather row r, and the first row of each bucket
    writes (first row, row count) into the (pre-filled (-1, 0)) hash table."""
    r = wp.tid()
    M = cellEnd.shape[0]
    numOccupied = wp.int32(cellEnd[M - 1])
    sortedTable[r] = table[wp.int32(perm[r])]
    if r < numOccupied:
        key = sortedKeys[r]
        first = bool(True)  # noqa: UP018 (a Warp dynamic variable, not a constant)
        if r > 0:
            if sortedKeys[r - 1] == key:
                first = False
        if first:
            e = r + 1
            while e < numOccupied:
                if sortedKeys[e] != key:
                    break
                e = e + 1
            hashTable[wp.int32(key)] = wp.vec2i(r, e - r)


_mat33l = wp.types.matrix(shape=(3, 3), dtype=wp.int64)
_vec27i = wp.types.vector(length=27, dtype=wp.int32)


@wp.func
def _axisStencil(grid: Any, k: wp.int32, ck: wp.int64, stride: wp.int64, prime: wp.int64,
                 L: wp.int64, ok: _mat33l, lin: _mat33l, hsh: _mat33l, wraps: _mat33l):
    """Row k (axis k) of the per-axis stencil tables, for offsets -1, 0, +1: valid flag,
    linear-index term ``cell * stride``, hash residue ``cell * prime mod L`` (the hash is a
    sum of per-axis terms, so a cell's hash is formed from residues without a division) and
    the periods added by the wrap."""
    n64 = wp.int64(grid.numCells[k])
    per = grid.periodicity[k]
    for t in range(3):
        v, cl, w = axisNeighbor(ck, wp.int64(t - 1), n64, per)
        ok[k, t] = wp.where(v, wp.int64(1), wp.int64(0))
        lin[k, t] = cl * stride
        hsh[k, t] = (cl * prime) % L
        wraps[k, t] = w
    return ok, lin, hsh, wraps


@wp.func
def _stencilTables():
    """Tables for absent axes: only offset 0 valid, zero terms."""
    ok = _mat33l()
    ok[0, 1] = wp.int64(1)
    ok[1, 1] = wp.int64(1)
    ok[2, 1] = wp.int64(1)
    return ok, _mat33l(), _mat33l(), _mat33l()


@wp.func
def _stencilPrime(D: wp.int32, k: wp.int32) -> wp.int64:
    p = wp.int64(1)
    if D > 1:
        p = _P0
        if k == 1:
            p = _P1
        elif k == 2:
            p = _P2
    return p


@wp.func
def _cellRange(grid: Any, L: wp.int64, a: wp.int32, b: wp.int32, c: wp.int32, ok: _mat33l,
               lin: _mat33l, hsh: _mat33l) -> wp.vec2i:
    """Sorted-slot range of stencil cell (a, b, c) (offset indices 0..2 per axis), or
    (-1, -1) when the offset is skipped or the cell unoccupied."""
    res = wp.vec2i(-1, -1)
    if ok[0, a] != wp.int64(0) and ok[1, b] != wp.int64(0) and ok[2, c] != wp.int64(0):
        h = hsh[0, a] + hsh[1, b] + hsh[2, c]
        if h >= L:
            h = h - L
        if h >= L:
            h = h - L
        res = findCellHashed(grid, lin[0, a] + lin[1, b] + lin[2, c], h)
    return res


@wp.func
def _offsetDigits(o: wp.int32, D: wp.int32):
    """Per-axis offset indices (0, 1, 2 for -1, 0, +1) of stencil entry o in cellOffsets
    order (first axis slowest); absent axes get 1 (offset 0)."""
    a = o
    b = 1
    c = 1
    if D == 2:
        a = o / 3
        b = o % 3
    elif D == 3:
        a = o / 9
        b = (o / 3) % 3
        c = o % 3
    return a, b, c


@wp.func
def _gap(gapLo: Any, gapHi: Any, k: wp.int32, t: wp.int32, D: wp.int32):
    """Lower bound of the distance along axis k from the query to stencil offset t."""
    g = gapLo[0] * type(gapLo[0])(0.0)
    if k < D:
        if t == 0:
            g = gapLo[k]
        elif t == 2:
            g = gapHi[k]
    return g


@wp.func
def _shifted(qb: Any, wraps: _mat33l, ext: Any, a: wp.int32, b: wp.int32, c: wp.int32,
             D: wp.int32):
    """The query coordinate moved by the periods of the stencil wrap (cheap image)."""
    qs = qb
    qs[0] = qb[0] - type(qb[0])(wraps[0, a]) * ext[0]
    if D > 1:
        qs[1] = qb[1] - type(qb[0])(wraps[1, b]) * ext[1]
    if D > 2:
        qs[2] = qb[2] - type(qb[0])(wraps[2, c]) * ext[2]
    return qs


@wp.func
def _queryGaps(qb: Any, grid: Any, ck: wp.int64, k: wp.int32, axisMargin: Any):
    """Gaps from the query to its lower / upper neighbour cell on axis k (rounding margin
    removed, never negative)."""
    lo = grid.qMin[k]
    extent = grid.qMax[k] - lo
    zero = extent * type(extent)(0.0)
    cellSize = extent / type(extent)(grid.numCells[k])
    cellLow = lo + type(extent)(ck) * cellSize
    return (wp.max(qb[k] - cellLow - axisMargin, zero),
            wp.max(cellLow + cellSize - qb[k] - axisMargin, zero))


@wp.func
def _axisMargin(grid: Any, k: wp.int32, eps16: Any):
    lo = grid.qMin[k]
    up = grid.qMax[k]
    return (wp.abs(lo) + wp.abs(up) + (up - lo)) * eps16


@wp.func
def _scanCell(
    first: wp.int32,
    num: wp.int32,
    qs: Any,
    xi: Any,
    hi: Any,
    sortedPositions: wp.array(dtype=Any),
    sortedSupports: wp.array(dtype=Any),
    grid: Any,
    mode: wp.int32,
    gather: wp.bool,
    exactOnly: wp.bool,
    margin: Any,
    boundUp2: Any,
    gatherUp2: Any,
    gatherDown2: Any,
    i: wp.int32,
    collect: wp.int32,
    base: wp.int32,
    count: wp.int32,
    outI: wp.array(dtype=wp.int64),
    outJ: wp.array(dtype=wp.int64),
    cacheBase: wp.int64,
    cacheCapacity: wp.int32,
    slotCache: wp.array(dtype=wp.int32),
):
    """Test the sorted slots [first, first + num) against query i; record accepted pairs
    (collect: at base + count; count pass: in the slot cache) and return the new count."""
    zero = hi * type(hi)(0.0)
    relUp = type(hi)(1.0 + _REL_MARGIN)
    relDown = type(hi)(1.0 - _REL_MARGIN)
    capacity = wp.int32(outJ.shape[0])
    s = first
    sEnd = first + num
    while s < sEnd:  # a while loop compiles leaner than range() here
        pj = sortedPositions[s]
        d = qs - pj
        d2 = wp.dot(d, d)
        if d2 <= boundUp2:
            accept = bool(False)  # noqa: UP018 (a Warp dynamic variable, not a constant)
            if gather:
                if d2 < gatherDown2:
                    accept = True
                elif d2 <= gatherUp2:
                    accept = exactPairDistance(xi, pj, grid) <= hi
            else:
                thr = computePairwiseSupport(hi, sortedSupports[s], mode)
                up = thr * relUp + margin
                down = wp.max(thr * relDown - margin, zero)
                if exactOnly:
                    accept = exactPairDistance(xi, pj, grid) <= thr
                elif d2 < down * down:
                    accept = True
                elif d2 <= up * up:
                    accept = exactPairDistance(xi, pj, grid) <= thr
            if accept:
                if collect != 0:
                    e = base + count
                    if e >= 0 and e < capacity:
                        outI[e] = wp.int64(i)
                        outJ[e] = grid.sortIndex[s]
                elif count < cacheCapacity:
                    slotCache[cacheBase + wp.int64(count)] = s
                count = count + 1
        s = s + 1
    return count


@wp.func
def _queryBounds(hi: Any, hMaxValue: Any, margin: Any, gather: wp.bool, exactOnly: wp.bool):
    """(boundUp2, pruneBound2, gatherUp2, gatherDown2) of one query.

    boundUp2 bounds |d|^2 of any acceptable pair (hMax bounds every mode's threshold);
    Gather accepts below gatherDown2 and tests the exact formula up to gatherUp2. With fewer
    than 3 cells on a periodic axis the cheap image is not unique: exact test only, no cell
    pruning. NaN supports never prune (the search raises through its readback)."""
    one = type(hi)(1.0)
    zero = type(hi)(0.0)
    relUp = type(hi)(1.0 + _REL_MARGIN)
    relDown = type(hi)(1.0 - _REL_MARGIN)
    bound = hMaxValue
    if gather:
        bound = hi
    boundUp = bound * relUp + margin
    boundUp2 = boundUp * boundUp
    pruneBound2 = boundUp2
    gatherUp = hi * relUp + margin
    gatherDown = wp.max(hi * relDown - margin, zero)
    gatherUp2 = gatherUp * gatherUp
    gatherDown2 = gatherDown * gatherDown
    if exactOnly:
        boundUp2 = type(hi)(wp.inf)
        pruneBound2 = type(hi)(wp.inf)
        gatherUp2 = type(hi)(wp.inf)
        gatherDown2 = -one
    if not (pruneBound2 >= zero):
        pruneBound2 = type(hi)(wp.inf)
    return boundUp2, pruneBound2, gatherUp2, gatherDown2


@wp.kernel
def radiusSearchKernel(
    queryPositions: wp.array(dtype=Any),
    querySupports: wp.array(dtype=Any),
    sortedPositions: wp.array(dtype=Any),
    sortedSupports: wp.array(dtype=Any),
    hMax: wp.array(dtype=Any),
    grid: Any,
    mode: wp.int32,
    collect: wp.int32,
    cacheCapacity: wp.int32,
    slotCache: wp.array(dtype=wp.int32),
    numNeighbors: wp.array(dtype=wp.int32),
    edgeOffsets: wp.array(dtype=wp.int32),
    outI: wp.array(dtype=wp.int64),
    outJ: wp.array(dtype=wp.int64),
):
    """Count (collect = 0) or collect (collect = 1) pass for query i (one thread per query).

    ``slotCache`` (``[N_q * cacheCapacity]``, may be empty) holds the sorted slots the count
    pass accepted; a collect row that fits is copied from it instead of re-traversed."""
    i = wp.tid()
    count = wp.int32(0)
    base = wp.int32(0)
    capacity = wp.int32(outJ.shape[0])
    cacheBase = wp.int64(i) * wp.int64(cacheCapacity)
    cap = cacheCapacity
    if cap < 0 or cacheBase + wp.int64(cap) > wp.int64(slotCache.shape[0]):
        cap = 0
    if collect != 0:
        base = edgeOffsets[i]
        rowCount = numNeighbors[i]
        if rowCount <= cap:
            numSlots = wp.int32(grid.sortIndex.shape[0])
            for k in range(rowCount):
                e = base + k
                slot = slotCache[cacheBase + wp.int64(k)]
                if e >= 0 and e < capacity and slot >= 0 and slot < numSlots:
                    outI[e] = wp.int64(i)
                    outJ[e] = grid.sortIndex[slot]
            return
        cap = 0

    xi = queryPositions[i]
    hi = querySupports[i]
    D = grid.D
    L = wp.int64(grid.hashTable.shape[0])
    eps16 = type(hi)(_ABS_MARGIN_ULPS) * _machineEps(hi)
    ok, lin, hsh, wraps = _stencilTables()
    qb = xi
    ext = xi
    gapLo = xi
    gapHi = xi
    margin = hi * type(hi)(0.0)
    exactOnly = bool(False)  # noqa: UP018 (a Warp dynamic variable, not a constant)
    stride = wp.int64(1)
    for k in range(D):
        lo = grid.qMin[k]
        ext[k] = grid.qMax[k] - lo
        ck, pk = axisCell(xi[k], lo, grid.qMax[k], grid.numCells[k], grid.periodicity[k])
        qb[k] = pk
        ok, lin, hsh, wraps = _axisStencil(grid, k, ck, stride, _stencilPrime(D, k), L, ok, lin,
                                           hsh, wraps)
        stride = stride * wp.int64(grid.numCells[k])
        axisMargin = _axisMargin(grid, k, eps16)
        gLo, gHi = _queryGaps(qb, grid, ck, k, axisMargin)
        gapLo[k] = gLo
        gapHi[k] = gHi
        if grid.periodicity[k]:
            margin = margin + axisMargin
            if grid.numCells[k] < 3:
                exactOnly = True
    gather = mode == 11
    boundUp2, pruneBound2, gatherUp2, gatherDown2 = _queryBounds(hi, hMax[0], margin, gather,
                                                                 exactOnly)

    # stencil in cellOffsets order (first axis slowest); a dynamic loop, not unrolled, keeps
    # one inlined copy of the scan
    for o in range(grid.numOffsets):
        a, b, c = _offsetDigits(o, D)
        gA = _gap(gapLo, gapHi, 0, a, D)
        gB = _gap(gapLo, gapHi, 1, b, D)
        gC = _gap(gapLo, gapHi, 2, c, D)
        if gA * gA + gB * gB + gC * gC <= pruneBound2:  # else beyond every threshold
            r = _cellRange(grid, L, a, b, c, ok, lin, hsh)
            if r[1] > 0:
                count = _scanCell(r[0], r[1], _shifted(qb, wraps, ext, a, b, c, D), xi, hi,
                                  sortedPositions, sortedSupports, grid, mode, gather,
                                  exactOnly, margin, boundUp2, gatherUp2, gatherDown2, i,
                                  collect, base, count, outI, outJ, cacheBase, cap, slotCache)
    if collect == 0:
        numNeighbors[i] = count


@wp.func
def _cachedCapacity(i: wp.int32, cacheCapacity: wp.int32, slotCache: wp.array(dtype=wp.int32)):
    """The slot-cache capacity of query i's row: `cacheCapacity`, or 0 when the cache does
    not hold the row (an empty or too short cache)."""
    cacheBase = wp.int64(i) * wp.int64(cacheCapacity)
    cap = cacheCapacity
    if cap < 0 or cacheBase + wp.int64(cap) > wp.int64(slotCache.shape[0]):
        cap = 0
    return cap


@wp.kernel
def copyCachedRowsKernel(
    numNeighbors: wp.array(dtype=wp.int32),
    edgeOffsets: wp.array(dtype=wp.int32),
    cacheCapacity: wp.int32,
    slotCache: wp.array(dtype=wp.int32),
    sortIndex: wp.array(dtype=wp.int64),
    outI: wp.array(dtype=wp.int64),
    outJ: wp.array(dtype=wp.int64),
):
    """Collect pass of the rows that fit the slot cache, one thread per query (rows written
    in query order): the sorted slots the count pass accepted, mapped to reference indices.
    `cellMajorSearchKernel` traverses the other rows."""
    i = wp.tid()
    rowCount = numNeighbors[i]
    if rowCount > _cachedCapacity(i, cacheCapacity, slotCache):
        return
    cacheBase = wp.int64(i) * wp.int64(cacheCapacity)
    base = edgeOffsets[i]
    capacity = wp.int32(outJ.shape[0])
    numSlots = wp.int64(sortIndex.shape[0])
    for k in range(rowCount):
        e = base + k
        slot = slotCache[cacheBase + wp.int64(k)]
        if e >= 0 and e < capacity and slot >= 0 and wp.int64(slot) < numSlots:
            outI[e] = wp.int64(i)
            outJ[e] = sortIndex[slot]


@wp.kernel
def partitionRowsKernel(
    numNeighbors: wp.array(dtype=wp.int32),
    edgeOffsets: wp.array(dtype=wp.int32),
    j: wp.array(dtype=wp.int64),
):
    """One thread per row i of a list of a set against itself, in place: the row's references
    j >= i first, then those j < i (`AdjacencyList.symmetric`: a kernel that takes each pair
    once stops at the first j < i). Two cursors from the row's ends swap the entries out of
    place, so a row already in that order is left as it is. A row that does not lie inside
    the array is not touched (a guard: the search's rows always do)."""
    i = wp.tid()
    base = edgeOffsets[i]
    count = numNeighbors[i]
    if base < 0 or count <= 1 or base + count > wp.int32(j.shape[0]):
        return
    row = wp.int64(i)
    lo = base
    hi = base + count - 1
    while lo < hi:
        if j[lo] >= row:
            lo = lo + 1
        elif j[hi] < row:
            hi = hi - 1
        else:
            a = j[lo]
            j[lo] = j[hi]
            j[hi] = a
            lo = lo + 1
            hi = hi - 1


@wp.kernel
def cellMajorSearchKernel(
    positions: wp.array(dtype=Any),
    querySupports: wp.array(dtype=Any),
    sortedPositions: wp.array(dtype=Any),
    sortedSupports: wp.array(dtype=Any),
    hMax: wp.array(dtype=Any),
    grid: Any,
    numOccupied: wp.array(dtype=wp.int64),
    mode: wp.int32,
    collect: wp.int32,
    cacheCapacity: wp.int32,
    slotCache: wp.array(dtype=wp.int32),
    numNeighbors: wp.array(dtype=wp.int32),
    edgeOffsets: wp.array(dtype=wp.int32),
    outI: wp.array(dtype=wp.int64),
    outJ: wp.array(dtype=wp.int64),
):
    """Count (collect = 0) or collect (collect = 1) pass, one thread per occupied cell, when
    the query positions ARE the reference positions (CPU): the stencil lookups are done once
    per cell and shared by its queries.

    Each query's traversal (stencil order, per-cell slot order, acceptance arithmetic) and
    its use of the slot cache are exactly those of `radiusSearchKernel`; only the lookup
    work is shared. The collect pass traverses the rows that did not fit the slot cache;
    `copyCachedRowsKernel` writes the others. A CPU self-search launches these two kernels,
    so the per-query kernel is not compiled for it."""
    row = wp.tid()
    if wp.int64(row) >= numOccupied[0]:
        return
    cell = grid.cellTable[row]
    zeroH = hMax[0] * type(hMax[0])(0.0)
    numSlots = wp.int64(grid.sortIndex.shape[0])
    s0 = wp.clamp(cell[1], wp.int64(0), numSlots)
    s1 = wp.clamp(cell[1] + cell[2], s0, numSlots)
    # collect pass: the rows that fit the slot cache are `copyCachedRowsKernel`'s (in query
    # order); the stencil work below is done only when a row of this cell must be traversed
    traverse = collect == 0
    for slot in range(wp.int32(s0), wp.int32(s1)):
        if not traverse:
            i = wp.int32(grid.sortIndex[slot])
            if numNeighbors[i] > _cachedCapacity(i, cacheCapacity, slotCache):
                traverse = True
    if not traverse:
        return
    D = grid.D
    L = wp.int64(grid.hashTable.shape[0])
    eps16 = type(zeroH)(_ABS_MARGIN_ULPS) * _machineEps(zeroH)
    ok, lin, hsh, wraps = _stencilTables()
    cellCoord = wp.vec3l(wp.int64(0), wp.int64(0), wp.int64(0))
    rest = cell[0]
    margin = zeroH
    exactOnly = bool(False)  # noqa: UP018 (a Warp dynamic variable, not a constant)
    stride = wp.int64(1)
    for k in range(D):
        n64 = wp.int64(grid.numCells[k])
        ck = rest % n64
        rest = rest / n64
        cellCoord[k] = ck
        ok, lin, hsh, wraps = _axisStencil(grid, k, ck, stride, _stencilPrime(D, k), L, ok, lin,
                                           hsh, wraps)
        stride = stride * n64
        if grid.periodicity[k]:
            margin = margin + _axisMargin(grid, k, eps16)
            if grid.numCells[k] < 3:
                exactOnly = True
    # the 3^3 stencil ranges of this cell, in cellOffsets order
    firsts = _vec27i()
    counts = _vec27i()
    numOffsets = grid.numOffsets
    for o in range(numOffsets):
        a, b, c = _offsetDigits(o, D)
        r = _cellRange(grid, L, a, b, c, ok, lin, hsh)
        firsts[o] = r[0]
        counts[o] = r[1]
    gather = mode == 11
    for slot in range(wp.int32(s0), wp.int32(s1)):
        i = wp.int32(grid.sortIndex[slot])
        cacheBase = wp.int64(i) * wp.int64(cacheCapacity)
        cap = _cachedCapacity(i, cacheCapacity, slotCache)
        base = wp.int32(0)
        if collect != 0:
            if numNeighbors[i] <= cap:
                continue  # copyCachedRowsKernel's
            base = edgeOffsets[i]
            cap = 0
        xi = positions[i]
        hi = querySupports[i]
        qb = sortedPositions[slot]  # = axisCell coordinates of xi (the build binned it)
        ext = qb
        gapLo = qb
        gapHi = qb
        for k in range(D):
            ext[k] = grid.qMax[k] - grid.qMin[k]
            gLo, gHi = _queryGaps(qb, grid, cellCoord[k], k, _axisMargin(grid, k, eps16))
            gapLo[k] = gLo
            gapHi[k] = gHi
        boundUp2, pruneBound2, gatherUp2, gatherDown2 = _queryBounds(hi, hMax[0], margin,
                                                                     gather, exactOnly)
        count = wp.int32(0)
        for o in range(numOffsets):
            if counts[o] > 0:
                a, b, c = _offsetDigits(o, D)
                gA = _gap(gapLo, gapHi, 0, a, D)
                gB = _gap(gapLo, gapHi, 1, b, D)
                gC = _gap(gapLo, gapHi, 2, c, D)
                if gA * gA + gB * gB + gC * gC <= pruneBound2:
                    count = _scanCell(firsts[o], counts[o], _shifted(qb, wraps, ext, a, b, c, D),
                                      xi, hi, sortedPositions, sortedSupports, grid, mode,
                                      gather, exactOnly, margin, boundUp2, gatherUp2,
                                      gatherDown2, i, collect, base, count, outI, outJ,
                                      cacheBase, cap, slotCache)
        if collect == 0:
            numNeighbors[i] = count


@wp.kernel
def filterPairsKernel(
    queryPositions: wp.array(dtype=Any),
    querySupports: wp.array(dtype=Any),
    referencePositions: wp.array(dtype=Any),
    referenceSupports: wp.array(dtype=Any),
    adjacency: Any,
    grid: Any,
    mode: wp.int32,
    collect: wp.int32,
    numNeighbors: wp.array(dtype=wp.int32),
    edgeOffsets: wp.array(dtype=wp.int32),
    outI: wp.array(dtype=wp.int64),
    outJ: wp.array(dtype=wp.int64),
):
    i = wp.tid()
    xi = queryPositions[i]
    hi = querySupports[i]
    numRefs = wp.int64(referencePositions.shape[0])
    r = getIndexRange(adjacency, i)
    count = wp.int32(0)
    base = wp.int32(0)
    capacity = wp.int32(outJ.shape[0])
    if collect != 0:
        base = edgeOffsets[i]
    for e in range(r[0], r[0] + r[1]):
        j = adjacency.neighborList[e]
        if j < wp.int64(0) or j >= numRefs:
            if collect == 0:  # flag once per list, in the counting pass
                flagError(adjacency.errors, adjacency.site, KIND_NEIGHBOR_INDEX_W, wp.int64(e),
                          j, i, numRefs, wp.int64(0))
            continue
        hj = referenceSupports[wp.int32(j)]
        if exactPairDistance(xi, referencePositions[wp.int32(j)], grid) <= computePairwiseSupport(hi, hj, mode):
            if collect != 0:
                k = base + count
                if k >= 0 and k < capacity:
                    outI[k] = wp.int64(i)
                    outJ[k] = j
            count = count + 1
    if collect == 0:
        numNeighbors[i] = count


# ------------------------------------------------------------------------------------------
# Concrete signatures for float32/float64 x d = 1, 2, 3, grouped into one module per
# (dimension, scalar type): a module is built once, whole, and never reloaded because a
# launch added a signature (Warp reloads a module when a kernel overload is added after its
# first launch).
# ------------------------------------------------------------------------------------------

_SCALARS = ((wp.float32, gridData_f32), (wp.float64, gridData_f64))


class ConcreteSignature(NamedTuple):
    """One concrete signature the search launches (`util.warpContext.concreteKernel`):
    `kernel` with argument `types` in `d` dimensions and scalar type `scalar`, compiled in
    the module of its group `tag` (``2d_f32_cpu``). The groups hold what one kind of search
    launches, so that a search compiles one module and nothing it does not run:

    * ``cpu``: the grid build, `cellMajorSearchKernel` and `copyCachedRowsKernel` (a CPU
      search of a set against itself), and `partitionRowsKernel`;
    * ``cuda``: the grid build, `radiusSearchKernel` (any search on CUDA) and
      `partitionRowsKernel`;
    * ``query``: `radiusSearchKernel` (a CPU search of distinct query and reference sets,
      after the ``cpu`` group's grid build) and `partitionRowsKernel`;
    * ``filter``: `filterPairsKernel` (the Verlet list's re-test of a CSR list).

    A kernel declared in several groups is launched with its group named
    (``launch(..., group=tag)``)."""

    kernel: Any
    types: dict
    d: int
    scalar: Any  # wp.float32 or wp.float64
    part: str  # "cpu", "cuda", "query" or "filter"

    @property
    def tag(self) -> str:
        return searchGroup(self.d, self.scalar, self.part)


def searchGroup(d: int, scalar, part: str) -> str:
    """The group tag of `ConcreteSignature` ``part`` in `d` dimensions; `scalar` is a Warp or
    torch scalar type."""
    short = "f64" if scalar in (wp.float64, torch.float64) else "f32"
    return f"{d}d_{short}_{part}"


def _signatures() -> list:
    """Every `ConcreteSignature` of the search, for float32/float64 x d = 1, 2, 3:
    `util.warpContext.concreteKernel` builds one forward-only module per group tag
    (`warpSPHCore.precompile` ahead of time, `util.warpContext.launch` on first use). The
    generic kernels of this module are never launched themselves, so nothing compiles all
    of them at once."""
    out = []
    for scalar, gridType in _SCALARS:
        for d in (1, 2, 3):
            vec = wp.types.vector(length=d, dtype=scalar)
            build = [
                (cellTableKernel, {}),
                (hashTableKernel, {}),
                (binReferencesKernel, {
                    "positions": wp.array(dtype=vec),
                    "grid": gridType,
                    "linearIndex": wp.array(dtype=wp.int64),
                    "wrapped": wp.array(dtype=vec),
                }),
                (gatherSortedKernel, {
                    "sortIndex": wp.array(dtype=wp.int64),
                    "sortedLinear": wp.array(dtype=wp.int64),
                    "wrapped": wp.array(dtype=vec),
                    "supports": wp.array(dtype=scalar),
                    "sortedPositions": wp.array(dtype=vec),
                    "sortedSupports": wp.array(dtype=scalar),
                    "cellStart": wp.array(dtype=wp.int64),
                }),
            ]
            pair = {
                "querySupports": wp.array(dtype=scalar),
                "grid": gridType,
                "mode": wp.int32,
                "collect": wp.int32,
                "numNeighbors": wp.array(dtype=wp.int32),
                "edgeOffsets": wp.array(dtype=wp.int32),
                "outI": wp.array(dtype=wp.int64),
                "outJ": wp.array(dtype=wp.int64),
            }
            traversal = {
                **pair,
                "sortedPositions": wp.array(dtype=vec),
                "sortedSupports": wp.array(dtype=scalar),
                "hMax": wp.array(dtype=scalar),
                "cacheCapacity": wp.int32,
                "slotCache": wp.array(dtype=wp.int32),
            }
            cellMajor = (cellMajorSearchKernel, {
                **traversal, "positions": wp.array(dtype=vec),
                "numOccupied": wp.array(dtype=wp.int64)})
            perQuery = (radiusSearchKernel, {**traversal,
                                             "queryPositions": wp.array(dtype=vec)})
            filterPairs = (filterPairsKernel, {
                **pair,
                "queryPositions": wp.array(dtype=vec),
                "referencePositions": wp.array(dtype=vec),
                "referenceSupports": wp.array(dtype=scalar),
                "adjacency": adjacencyData,
            })
            copyRows = (copyCachedRowsKernel, {})
            partition = (partitionRowsKernel, {})
            groups = {"cpu": build + [cellMajor, copyRows, partition],
                      "cuda": build + [perQuery, partition], "query": [perQuery, partition],
                      "filter": [filterPairs]}
            for part, members in groups.items():
                out += [ConcreteSignature(k, t, d, scalar, part) for k, t in members]
    return out


#: see `_signatures`
CONCRETE_SIGNATURES = _signatures()
