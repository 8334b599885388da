"""Compact-hash radius search: count pass, device scan, ONE readback, collect pass."""

from __future__ import annotations

import dataclasses

import torch

from ..dataTypes.adjacency import AdjacencyList, trustedConstruction
from ..dataTypes.compactHashMap import CompactHashMap
from ..enumTypes import HashMapLengthMode, SupportScheme
from ..util.conversion import plainData, toWarp
from ..util.precision import warpVector
from ..util.warpContext import launch
from . import _kernels
from ._inputs import (
    SearchInputs,
    checkHashMapLength,
    domainTensors,
    lengthForMode,
    modeUint,
    particleTensors,
    prepareInputs,
)
from .flags import raiseForFlags, readback
from .grid import _gridStruct, buildGrid
from .hashLength import getNextPrime
from .scenes import embedScenes, sceneTensors

__all__ = [
    "MAX_EDGES",
    "radiusSearchCompactHashMap",
    "radiusSearchCompactHashMap_",
    "searchInputs",
    "finishCSR",
    "partitionRows",
]

#: Largest edge count an int32-offset CSR list can hold. Tests lower it to exercise the check.
MAX_EDGES = 2**31 - 1

#: CPU count and collect passes for a query set that IS the reference set: one thread per
#: occupied cell shares the stencil lookups between the cell's queries (Warp's CPU backend
#: runs threads sequentially, so nothing is lost; on CUDA one thread per query keeps the GPU
#: busy). Such a search compiles the cell-major kernel only (`_kernels.ConcreteSignature`).
CELL_MAJOR_CPU = True
#: Collect-pass slot cache (CPU only): rows with at most this many neighbours are copied from
#: what the count pass accepted instead of re-traversed (the order is the same). 0 disables.
SLOT_CACHE_CAPACITY = 64
#: Upper bound of the cache size in int32 entries (the capacity shrinks for large N_q):
#: 2^26 entries (256 MiB, held during the search) keep the full 64 slots per row up to 1M
#: queries; below that budget a large set re-traverses its rows in the collect pass, which
#: made the search ~30 % slower per edge at 1M particles than at 16k (benchmarks/bench_scale.py)
SLOT_CACHE_MAX_ENTRIES = 2**26

_OVERFLOW_MESSAGE = ("edge count exceeds int32 CSR offsets; split the query set "
                     "(E = {E}, limit = {limit})")


def _empty(n: int, dtype, device) -> torch.Tensor:
    return torch.empty(n, dtype=dtype, device=device)


def _cacheCapacity(device: torch.device, numQueries: int) -> int:
    """Slot-cache capacity per row: CPU only (on CUDA the second traversal is cheap and the
    cache would cost memory bandwidth); shrinks so the cache stays below the entry budget."""
    if device.type != "cpu" or SLOT_CACHE_CAPACITY <= 0 or numQueries == 0:
        return 0
    cap = min(SLOT_CACHE_CAPACITY, SLOT_CACHE_MAX_ENTRIES // numQueries)
    return cap if cap >= 8 else 0


#: support schemes whose acceptance threshold is symmetric in (h_i, h_j): MeanSymmetric and
#: the max schemes (Gather and Scatter read one side's support)
_SYMMETRIC_THRESHOLDS = (13, 14, 15, 16)


def symmetricTest(inp: SearchInputs, mode: int) -> torch.Tensor | None:
    """None where a self-search's list is symmetric whatever the supports (a symmetric
    threshold) or never (two sets); else the int64 ``[1]`` device flag "the supports are all
    equal" (Gather, Scatter: then the threshold is one value), read with the search's one
    readback (`finishCSR`). `symmetricList` turns the answer into `AdjacencyList.symmetric`."""
    if not inp.aliased or int(mode) in _SYMMETRIC_THRESHOLDS or inp.qSup.shape[0] == 0:
        return None
    return (inp.qSup.amin() == inp.qSup.amax()).to(torch.int64).reshape(1)


def symmetricList(inp: SearchInputs, mode: int, uniform) -> bool:
    """Whether a list searched from `inp` pairs symmetrically (`AdjacencyList.symmetric`): a
    self-search with a symmetric threshold, or with equal supports (`uniform`, the host value
    of `symmetricTest`'s flag; None where it made no test)."""
    return inp.aliased and (int(mode) in _SYMMETRIC_THRESHOLDS or inp.qSup.shape[0] == 0
                            or bool(uniform))


def partitionRows(j: torch.Tensor, counts: torch.Tensor, edgeOffsets: torch.Tensor, d: int,
                  dtype, group: str | None = None) -> None:
    """Reorder the column indices `j` of a CSR list of a set against itself in place, each
    row's references j >= i first and then those j < i (one pass, no readback; a row already
    in that order is left as it is). What `AdjacencyList.symmetric` promises of a row: a
    kernel that takes each pair once from the smaller index stops at the row's first
    j < i. `d` and `dtype` pick the search module the kernel is compiled in."""
    nq = int(counts.shape[0])
    if nq > 0 and j.shape[0] > 0:
        if group is None:
            group = _kernels.searchGroup(d, dtype, "cuda" if j.device.type == "cuda" else "query")
        launch(_kernels.partitionRowsKernel, dim=nq,
               inputs=[toWarp(counts), toWarp(edgeOffsets)], outputs=[toWarp(j)],
               device=j.device, group=group)


def finishCSR(where: str, counts: torch.Tensor, flags, hMax, dMin, dMax, aliased: bool,
              modeName: str, extra=None):
    """Scan the int32 row counts on the device, then THE single readback (edge total + flags,
    and `extra`'s value), then the host checks. Returns ``(E, edgeOffsets int32, value of
    extra)``, the last None without `extra`."""
    if counts.shape[0] > 0:
        counts64 = counts.to(torch.int64)
        csum = torch.cumsum(counts64, 0)
        total = csum[-1:]
        offsets64 = csum - counts64
    else:
        total = torch.zeros(1, dtype=torch.int64, device=counts.device)
        offsets64 = torch.zeros(0, dtype=torch.int64, device=counts.device)
    back = readback(total, flags, hMax, dMin, dMax, extra)
    E, flagValue, h, lo, hi = back[:5]
    raiseForFlags(where, flagValue, h, lo, hi, aliased=aliased, modeName=modeName)
    if E > MAX_EDGES:
        raise OverflowError(f"{where}: " + _OVERFLOW_MESSAGE.format(E=E, limit=MAX_EDGES))
    return E, offsets64.to(torch.int32), (back[5] if extra is not None else None)


def searchWithGrid(where: str, inp: SearchInputs, mode: int, grid: CompactHashMap,
                   storeInputs: bool = True, returnCompactHashMap: bool = False):
    """Count -> scan -> readback -> collect over a freshly built grid."""
    dev = inp.device
    nq = inp.numQueries
    counts = torch.zeros(nq, dtype=torch.int32, device=dev)
    traverse = nq > 0 and inp.numReferences > 0
    if traverse:
        vec = warpVector(inp.d, inp.dtype)
        gridStruct = _gridStruct(inp, grid.numCells, grid)
        qPosW = toWarp(inp.qPos, vec)
        qSupW = toWarp(inp.qSup)
        sPosW = toWarp(grid.sortedPositions, vec)
        sSupW = toWarp(grid.sortedSupports)
        hMaxW = toWarp(grid.hMax)
        countsW = toWarp(counts)
        dummy32 = toWarp(_empty(0, torch.int32, dev))
        dummy64 = toWarp(_empty(0, torch.int64, dev))
        cacheCap = _cacheCapacity(dev, nq)
        cacheW = toWarp(_empty(nq * cacheCap, torch.int32, dev))
        cellMajor = CELL_MAJOR_CPU and dev.type == "cpu" and inp.rPos is inp.qPos
        if cellMajor:
            group = _kernels.searchGroup(inp.d, inp.dtype, "cpu")
            head = [qPosW, qSupW, sPosW, sSupW, hMaxW, gridStruct, toWarp(grid.numOccupiedCells),
                    mode]
            launch(_kernels.cellMajorSearchKernel, dim=inp.numReferences,
                   inputs=head + [0, cacheCap, cacheW],
                   outputs=[countsW, dummy32, dummy64, dummy64], device=dev, group=group)
        else:
            group = _kernels.searchGroup(inp.d, inp.dtype,
                                         "cuda" if dev.type == "cuda" else "query")
            head = [qPosW, qSupW, sPosW, sSupW, hMaxW, gridStruct, mode]
            launch(_kernels.radiusSearchKernel, dim=nq, inputs=head + [0, cacheCap, cacheW],
                   outputs=[countsW, dummy32, dummy64, dummy64], device=dev, group=group)
    E, edgeOffsets, uniform = finishCSR(where, counts, grid.validityFlags, grid.hMax, inp.dMin,
                                        inp.dMax, inp.aliased, SupportScheme(mode).name,
                                        symmetricTest(inp, mode))
    symmetric = symmetricList(inp, mode, uniform)
    i = _empty(E, torch.int64, dev)
    j = _empty(E, torch.int64, dev)
    if traverse and E > 0:
        outputs = [countsW, toWarp(edgeOffsets), toWarp(i), toWarp(j)]
        if cellMajor:
            # rows that fit the slot cache in query order, the others traversed per cell
            launch(_kernels.copyCachedRowsKernel, dim=nq,
                   inputs=[countsW, outputs[1], cacheCap, cacheW, toWarp(grid.sortIndex)],
                   outputs=outputs[2:], device=dev, group=group)
            launch(_kernels.cellMajorSearchKernel, dim=inp.numReferences,
                   inputs=head + [1, cacheCap, cacheW], outputs=outputs, device=dev,
                   group=group)
        else:
            launch(_kernels.radiusSearchKernel, dim=nq, inputs=head + [1, cacheCap, cacheW],
                   outputs=outputs, device=dev, group=group)
        if symmetric:
            partitionRows(j, counts, edgeOffsets, inp.d, inp.dtype, group)
    with trustedConstruction():
        adjacency = AdjacencyList(
            i=i,
            j=j,
            numNeighbors=counts,
            edgeOffsets=edgeOffsets,
            numRows=nq,
            numCols=inp.numReferences,
            queryPositions=inp.qPos if storeInputs else None,
            referencePositions=inp.rPos if storeInputs else None,
            querySupports=inp.qSup if storeInputs else None,
            referenceSupports=inp.rSup if storeInputs else None,
            hashMap=grid,
            supportMode=SupportScheme(mode),
            verletScale=1.0,
            symmetric=symmetric,
        )
    if returnCompactHashMap:
        return adjacency, grid
    return adjacency


def searchInputs(where: str, queryParticles, domain, referenceParticles=None) -> SearchInputs:
    """Validated inputs from particle states (attribute bags) and a domain, with the sets'
    scene indices when they carry them (`neighborhood.scenes`)."""
    qPos, qSup = particleTensors(where, "queryParticles", queryParticles)
    if referenceParticles is None:
        rPos, rSup = qPos, qSup
    else:
        rPos, rSup = particleTensors(where, "referenceParticles", referenceParticles)
    for t in (qPos, rPos, qSup, rSup):
        plainData(t, where)  # a vmap over positions has no single list: a clear error
    dMin, dMax, periodic = domainTensors(where, domain)
    inp = prepareInputs(where, qPos, rPos, qSup, rSup, periodic, dMin, dMax)
    return sceneTensors(where, inp, queryParticles, referenceParticles)


def search(where: str, inp: SearchInputs, mode: int, L: int, storeInputs: bool = True,
           returnCompactHashMap: bool = False):
    """Build the grid and search it; with scene indices, on the scene-separated inputs
    (`neighborhood.scenes`), returning a list that stores the original inputs and the query
    scene index (no grid: the separated one is of no use to an operator).

    Inside a `torch.func` transform (a rollout under ``torch.func.grad``, say) the search
    runs on the positions' values (`util.conversion.plainData`) with functorch's dispatch
    off, so every tensor it makes has storage for Warp; the list is never differentiated."""
    if torch._C._are_functorch_transforms_active():
        plain = dataclasses.replace(inp, **{
            f.name: plainData(getattr(inp, f.name), where)
            for f in dataclasses.fields(inp) if isinstance(getattr(inp, f.name), torch.Tensor)})
        with torch._C._DisableFuncTorch():
            return _search(where, plain, mode, L, storeInputs, returnCompactHashMap)
    return _search(where, inp, mode, L, storeInputs, returnCompactHashMap)


def _search(where: str, inp: SearchInputs, mode: int, L: int, storeInputs: bool,
            returnCompactHashMap: bool):
    """`search` on tensors with storage, outside any `torch.func` dispatch."""
    if inp.qScenes is None:
        grid = buildGrid(inp, mode, L)
        return searchWithGrid(where, inp, mode, grid, storeInputs=storeInputs,
                              returnCompactHashMap=returnCompactHashMap)
    if returnCompactHashMap:
        raise ValueError(f"{where}: returnCompactHashMap=True with scenes; accepted: False (a "
                         "grid over several scenes cannot keep them apart in an operator)")
    separated = embedScenes(where, inp)
    if separated is None:
        i, j, counts, offsets = searchEachScene(where, inp, mode)
    else:
        a = searchWithGrid(where, separated, mode, buildGrid(separated, mode, L),
                           storeInputs=False)
        i, j, counts, offsets = a.i, a.j, a.numNeighbors, a.edgeOffsets
    with trustedConstruction():
        return AdjacencyList(
            i=i, j=j, numNeighbors=counts, edgeOffsets=offsets, numRows=inp.numQueries,
            numCols=inp.numReferences,
            queryPositions=inp.qPos if storeInputs else None,
            referencePositions=inp.rPos if storeInputs else None,
            querySupports=inp.qSup if storeInputs else None,
            referenceSupports=inp.rSup if storeInputs else None,
            hashMap=None, supportMode=SupportScheme(mode), verletScale=1.0,
            sceneIndex=inp.qScenes,
            # the scene-separated search's verdict; scenes searched one by one: a symmetric
            # threshold only (their supports are not compared)
            symmetric=(a.symmetric if separated is not None
                       else symmetricList(inp, mode, False)))


def searchEachScene(where: str, inp: SearchInputs, mode: int):
    """Each scene searched on its own, the lists merged: ``(i, j, counts, offsets)`` in the
    original numbering, rows ascending, each row in its scene's search order. For scenes no
    axis can separate (`neighborhood.scenes`: 3D, periodic on every axis). Readbacks: two
    for the scene count and sizes, one per scene's search."""
    dev = inp.device
    same = inp.rPos is inp.qPos and inp.rScenes is inp.qScenes
    qOrder = torch.argsort(inp.qScenes, stable=True)
    rOrder = qOrder if same else torch.argsort(inp.rScenes, stable=True)
    both = inp.qScenes if same else torch.cat([inp.qScenes, inp.rScenes])
    lo = both.amin().to(torch.int64)
    B = int((both.amax().to(torch.int64) - lo + 1).clamp(min=1))
    sizes = torch.stack([torch.bincount(inp.qScenes.to(torch.int64) - lo, minlength=B),
                         torch.bincount(inp.rScenes.to(torch.int64) - lo, minlength=B)])
    qSizes, rSizes = sizes.tolist()
    parts_i, parts_j = [], []
    qa = ra = 0
    for nq, nr in zip(qSizes, rSizes):
        if nq and nr:
            qi, ri = qOrder[qa:qa + nq], rOrder[ra:ra + nr]
            qPos, qSup = inp.qPos[qi], inp.qSup[qi]
            rPos, rSup = (qPos, qSup) if same else (inp.rPos[ri], inp.rSup[ri])
            sub = SearchInputs(qPos=qPos, rPos=rPos, qSup=qSup,
                               rSup=qSup if same and inp.aliased else rSup,
                               periodic=inp.periodic, dMin=inp.dMin, dMax=inp.dMax,
                               dtype=inp.dtype, device=dev, d=inp.d,
                               aliased=inp.aliased and same)
            a = searchWithGrid(where, sub, mode, buildGrid(sub, mode, getNextPrime(nr)),
                               storeInputs=False)
            parts_i.append(qi[a.i])
            parts_j.append(ri[a.j])
        qa += nq
        ra += nr
    empty = torch.empty(0, dtype=torch.int64, device=dev)
    i = torch.cat(parts_i) if parts_i else empty
    j = torch.cat(parts_j) if parts_j else empty
    i, order = torch.sort(i, stable=True)
    j = j[order]
    counts = torch.bincount(i, minlength=inp.numQueries).to(torch.int32)
    offsets = (torch.cumsum(counts, 0, dtype=torch.int64) - counts).to(torch.int32)
    return i, j, counts, offsets


def radiusSearchCompactHashMap(queryParticles, domain, mode=SupportScheme.Gather,
                               hashMapLengthMode=HashMapLengthMode.NextPrime,
                               fixedHashMapLength=4096, returnCompactHashMap=False,
                               referenceParticles=None):
    """All pairs (i, j) with ``r_ij <= threshold`` as a CSR `AdjacencyList`.

    r_ij is the minimum-image distance ``sqrt(sum_k x_ij[k]^2)`` (axis order, call precision);
    the threshold is h_i (Gather), h_j (Scatter), (h_i + h_j)/2 (MeanSymmetric) or
    max(h_i, h_j) (KernelMeanSymmetric, SuperSymmetric, PartialSymmetric). Exact (never
    truncated), deterministic (rows ascending; within a row stencil-offset order, then
    ascending original index per cell), self pairs included.

    Naming trap kept for compatibility: this returns the neighbour list, not the hash map
    (``returnCompactHashMap=True`` returns ``(AdjacencyList, CompactHashMap)``).

    Args:
        queryParticles: `ParticleState` (or any object with ``.positions [N_q, d]`` and
            ``.supports [N_q]``, float32/float64, d = 1, 2, 3).
        domain: `DomainDescription` (``.min``, ``.max`` ``[d]``, ``.periodic`` bool ``[d]``, a
            list of bools or None). Periodic positions may be unwrapped.
        mode: `SupportScheme` of the acceptance threshold.
        hashMapLengthMode: `HashMapLengthMode` (Fixed: ``fixedHashMapLength``;
            NumberOfParticles: N_r, +1 if even; NextPrime: ``getNextPrime(N_r)``).
        fixedHashMapLength: table length of the Fixed mode.
        returnCompactHashMap: also return the grid.
        referenceParticles: the reference set (default: the query set itself).

    Particles that carry scene indices (``.scenes``, on both sets) are paired only within
    their scene (`neighborhood.scenes`); the list then carries ``sceneIndex``.

    Returns:
        AdjacencyList (int64 i/j, int32 numNeighbors/edgeOffsets), optionally with the
        CompactHashMap. Exactly one device->host readback (edge total + validity flags).

    Raises:
        ValueError: invalid options/shapes/devices (before any launch), or through the
            readback: non-finite positions, invalid supports, degenerate extents, periodic
            hMax >= L/2. OverflowError: more than 2^31 - 1 edges.
        TypeError: wrong types or mixed float dtypes.

    Non-differentiable (the structure is frozen under AD).
    """
    where = "radiusSearchCompactHashMap"
    m = modeUint(where, mode)
    inp = searchInputs(where, queryParticles, domain, referenceParticles)
    L = lengthForMode(where, hashMapLengthMode, fixedHashMapLength, inp.numReferences)
    return search(where, inp, m, L, returnCompactHashMap=returnCompactHashMap)


def radiusSearchCompactHashMap_(queryPositions, referencePositions, querySupports,
                                referenceSupports, periodicity, domainDescription,
                                mode=SupportScheme.Gather, hashMapLength=4096,
                                returnCompactHashMap=False):
    """Positional (flat-tensor) form of `radiusSearchCompactHashMap`.

    Args:
        queryPositions: float ``[N_q, d]``.
        referencePositions: float ``[N_r, d]`` (the same tensor as queryPositions for one
            set).
        querySupports: float ``[N_q]``.
        referenceSupports: float ``[N_r]``.
        periodicity: bool ``[d]`` tensor, list of bools or None (overrides the domain's).
        domainDescription: `DomainDescription` (or ``.min``/``.max`` bag, or a (min, max) pair).
        mode: `SupportScheme`.
        hashMapLength: table length L.
        returnCompactHashMap: also return the grid.

    Returns / raises as `radiusSearchCompactHashMap` (exactly one readback).
    """
    where = "radiusSearchCompactHashMap_"
    m = modeUint(where, mode)
    L = checkHashMapLength(where, hashMapLength)
    dMin, dMax, _ = domainTensors(where, domainDescription)
    inp = prepareInputs(where, queryPositions, referencePositions, querySupports,
                        referenceSupports, periodicity, dMin, dMax)
    grid = buildGrid(inp, m, L)
    return searchWithGrid(where, inp, m, grid, returnCompactHashMap=returnCompactHashMap)
