"""Sync-free compact hash grid build.

Every step runs on the device with host-known output sizes: element-wise Warp kernels (binning,
gathers, per-cell rows, per-bucket ranges) and, in torch, two stable sorts, one scan and
element-wise ops / reductions. No unique/nonzero/boolean-mask/bincount (data-dependent shapes
synchronise on CUDA) and nothing is read back; the validity flags are computed and stored,
never read here.
"""

from __future__ import annotations

import torch
import warp as wp

from ..dataTypes.compactHashMap import CompactHashMap
from ..enumTypes import SupportScheme
from ..util.conversion import toWarp
from ..util.precision import warpVector
from ..util.warpContext import launch
from . import _kernels
from ._inputs import SearchInputs, checkHashMapLength, domainTensors, modeUint, prepareInputs
from .flags import computeFlags
from .traversal import gridDataType

__all__ = ["buildCompactHashMap", "buildGrid", "cellCounts", "cellMargin", "MAX_CELLS_PER_AXIS", "CELL_MARGIN"]

#: Cap of the per-axis cell count (keeps linear indices and hash products inside int64).
MAX_CELLS_PER_AXIS = 2**20
#: Relative margin that keeps every cell at least hMax wide under rounding.
CELL_MARGIN = 1.0e-5


_STENCILS: dict = {}


def stencil(d: int, device: torch.device) -> torch.Tensor:
    """int32 ``[3^d, 3]`` stencil offsets: the cartesian product of (-1, 0, 1), first axis
    slowest, zero-padded to 3 columns. Built with device ops (no host->device copy, which
    would synchronise on CUDA) and cached per (d, device) (keyed by str: a Warp device is
    unhashable); read-only."""
    key = (d, str(device))
    t = _STENCILS.get(key)
    if t is None:
        index = torch.arange(3**d, dtype=torch.int32, device=device)
        t = torch.zeros((3**d, 3), dtype=torch.int32, device=device)
        for k in range(d):
            t[:, k] = torch.div(index, 3 ** (d - 1 - k), rounding_mode="floor") % 3 - 1
        _STENCILS[key] = t
    return t


def gridSupport(mode: int, qSup: torch.Tensor, rSup: torch.Tensor) -> torch.Tensor:
    """Grid support hMax ``[1]`` covering the threshold of `mode` (non-empty tensors; device
    reductions): the largest query support (Gather), reference support (Scatter), their mean
    (MeanSymmetric), or the larger of the two (every max scheme)."""
    if mode == SupportScheme.Gather:
        h = qSup.amax()
    elif mode == SupportScheme.Scatter:
        h = rSup.amax()
    elif mode == SupportScheme.MeanSymmetric:
        h = (qSup.amax() + rSup.amax()) / 2
    else:
        h = torch.maximum(qSup.amax(), rSup.amax())
    return h.reshape(1)


def cellMargin(scale: torch.Tensor, hMax: torch.Tensor) -> torch.Tensor:
    """Relative cell margin per axis: max(1e-5, 32 eps |coordinate scale| / hMax).

    A fixed 1e-5 margin covers the rounding of the cell coordinate only while the
    coordinates are at most ~80 supports large in float32: beyond that, a pair accepted by the
    (rounded) distance test within ~ulp(x) of r = h could land two cells apart and be missed.
    Scaling the margin with the coordinate magnitude in units of hMax (32 ulps bound the
    rounding of wrap, minimum image, distance and cell coordinate together) keeps every
    accepted pair inside the 3^d stencil. In float64 this never exceeds 1e-5 for any
    realistic grid (it would need 1.4e9 supports per axis). Device ops only: no sync.
    """
    eps = torch.finfo(scale.dtype).eps
    return torch.clamp(32.0 * eps * scale / hMax, min=CELL_MARGIN)


def cellCounts(extent: torch.Tensor, hMax: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """int32 ``[d]``: clamp(floor(E_k / (hMax (1 + margin_k))), 1, 2^20); 1 when anything is
    non-finite or non-positive. margin_k = `cellMargin(scale_k, hMax)` (1e-5 when `scale` is
    None), with scale_k the largest coordinate magnitude of the binning bounds."""
    margin = CELL_MARGIN if scale is None else cellMargin(scale, hMax)
    ratio = extent / (hMax * (1.0 + margin))
    ok = (torch.isfinite(ratio) & (ratio >= 1) & torch.isfinite(hMax) & (hMax > 0)
          & torch.isfinite(extent) & (extent > 0))
    capped = torch.floor(torch.where(ok, ratio, torch.ones_like(ratio)).clamp(max=MAX_CELLS_PER_AXIS))
    return capped.to(torch.int32)


def _gridStruct(inp: SearchInputs, numCells, hashMap: CompactHashMap | None = None):
    s = gridDataType(inp.dtype)()
    s.qMin = toWarp(inp.dMin)
    s.qMax = toWarp(inp.dMax)
    s.numCells = toWarp(numCells)
    s.periodicity = toWarp(inp.periodic)
    s.D = inp.d
    s.numOffsets = 3**inp.d
    if hashMap is not None:
        s.sortIndex = toWarp(hashMap.sortIndex)
        s.hashTable = toWarp(hashMap.hashTable, wp.vec2i)
        s.cellTable = toWarp(hashMap.sortedCellTable, wp.vec3l)
        s.cellOffsets = toWarp(hashMap.cellOffsets, wp.vec3i)
    return s


def _emptyGrid(inp: SearchInputs, mode: int, L: int) -> CompactHashMap:
    """Grid of an empty query or reference set: no occupied cells, every bucket (-1, 0),
    zero flags, and no reduction over an empty tensor."""
    dev, dt, d, m = inp.device, inp.dtype, inp.d, inp.numReferences
    extent = inp.dMax - inp.dMin
    numCells = torch.ones(d, dtype=torch.int32, device=dev)
    hashTable = torch.empty((L, 2), dtype=torch.int32, device=dev)
    hashTable[:, 0] = -1
    hashTable[:, 1] = 0
    cellTable = torch.zeros((m, 3), dtype=torch.int64, device=dev)
    cellTable[:, 0] = -1
    return CompactHashMap(
        sortedPositions=inp.rPos.clone(),
        sortedSupports=inp.rSup.clone(),
        sortIndex=torch.arange(m, dtype=torch.int64, device=dev),
        hashTable=hashTable,
        sortedCellTable=cellTable,
        numOccupiedCells=torch.zeros(1, dtype=torch.int64, device=dev),
        qMin=inp.dMin,
        qMax=inp.dMax,
        numCells=numCells,
        cellSize=extent.clone(),
        hMax=torch.zeros(1, dtype=dt, device=dev),
        mode_uint=mode,
        D=d,
        hashMapLength=L,
        searchRadius=1,
        numOffsets=3**d,
        cellOffsets=stencil(d, dev),
        validityFlags=torch.zeros(1, dtype=torch.int32, device=dev),
        periodicity=inp.periodic,
    )


def buildGrid(inp: SearchInputs, mode: int, L: int) -> CompactHashMap:
    """Build the compact hash grid of `inp` for support mode `mode` and table length `L`."""
    if inp.numQueries == 0 or inp.numReferences == 0:
        return _emptyGrid(inp, mode, L)
    dev, d, m = inp.device, inp.d, inp.numReferences
    i64 = torch.int64
    # the build's kernels share a module with the traversal this device runs next
    group = _kernels.searchGroup(d, inp.dtype, "cuda" if dev.type == "cuda" else "cpu")

    # grid support, per-axis cell counts, validity flags
    hMax = gridSupport(mode, inp.qSup, inp.rSup)
    extent = inp.dMax - inp.dMin
    numCells = cellCounts(extent, hMax, torch.maximum(inp.dMin.abs(), inp.dMax.abs()))
    flags = computeFlags(inp.qPos, inp.rPos, inp.qSup, inp.rSup, inp.aliased, hMax, extent,
                         inp.periodic)

    # wrap, cell coordinates (floor; floor-mod / clamp), linear index
    vec = warpVector(d, inp.dtype)
    linear = torch.empty(m, dtype=i64, device=dev)
    wrapped = torch.empty((m, d), dtype=inp.dtype, device=dev)
    launch(
        _kernels.binReferencesKernel,
        dim=m,
        inputs=[toWarp(inp.rPos, vec), _gridStruct(inp, numCells)],
        outputs=[toWarp(linear), toWarp(wrapped, vec)],
        device=dev,
        group=group,
    )

    # stable sort by linear cell index; gather sorted positions and supports
    sortedLinear, sortIndex = torch.sort(linear, stable=True)
    sortedPositions = torch.empty_like(wrapped)
    sortedSupports = torch.empty_like(inp.rSup)
    cellStart = torch.empty(m, dtype=i64, device=dev)
    launch(
        _kernels.gatherSortedKernel,
        dim=m,
        inputs=[toWarp(sortIndex), toWarp(sortedLinear), toWarp(wrapped, vec), toWarp(inp.rSup)],
        outputs=[toWarp(sortedPositions, vec), toWarp(sortedSupports), toWarp(cellStart)],
        device=dev,
        group=group,
    )

    # occupied cells without data-dependent shapes (scan of the start flags, a
    # table of capacity M), 64-bit hash key per cell, sentinel L for padding rows
    cellEnd = torch.cumsum(cellStart, 0)
    numOccupied = cellEnd[-1:]
    table = torch.empty((m, 3), dtype=i64, device=dev)
    key = torch.empty(m, dtype=i64, device=dev)
    launch(
        _kernels.cellTableKernel,
        dim=m,
        inputs=[toWarp(sortedLinear), toWarp(cellEnd), toWarp(numCells), d, L],
        outputs=[toWarp(table, wp.vec3l), toWarp(key)],
        device=dev,
        group=group,
    )

    # group rows by hash (stable sort), bucket (first row, row count)
    sortedKey, perm = torch.sort(key, stable=True)
    sortedCellTable = torch.empty_like(table)
    hashTable = torch.empty((L, 2), dtype=torch.int32, device=dev)
    hashTable[:, 0] = -1
    hashTable[:, 1] = 0
    launch(
        _kernels.hashTableKernel,
        dim=m,
        inputs=[toWarp(perm), toWarp(table, wp.vec3l), toWarp(sortedKey), toWarp(cellEnd)],
        outputs=[toWarp(sortedCellTable, wp.vec3l), toWarp(hashTable, wp.vec2i)],
        device=dev,
        group=group,
    )

    return CompactHashMap(
        sortedPositions=sortedPositions,
        sortedSupports=sortedSupports,
        sortIndex=sortIndex,
        hashTable=hashTable,
        sortedCellTable=sortedCellTable,
        numOccupiedCells=numOccupied,
        qMin=inp.dMin,
        qMax=inp.dMax,
        numCells=numCells,
        cellSize=extent / numCells.to(inp.dtype),
        hMax=hMax,
        mode_uint=mode,
        D=d,
        hashMapLength=L,
        searchRadius=1,
        numOffsets=3**d,
        cellOffsets=stencil(d, dev),
        validityFlags=flags,
        periodicity=inp.periodic,
    )


def buildCompactHashMap(queryPositions, referencePositions, querySupports, referenceSupports,
                        periodicity, domain, mode=SupportScheme.Gather, hashMapLength=4096):
    """Build the compact hash grid over the reference set, without any host sync.

    Cells are per-axis ``numCells_k = clamp(floor(E_k / (hMax (1 + 1e-5))), 1, 2^20)``
    boxes of the domain (at least hMax wide wherever an axis has more than one cell), so every
    pair with ``r <= hMax`` lies in the 3^d stencil around the query's cell. hMax follows the
    support mode (Gather: max h_q; Scatter: max h_r; MeanSymmetric: (max h_q + max h_r)/2;
    otherwise max of both).

    Args:
        queryPositions: float ``[N_q, d]`` (d = 1, 2, 3).
        referencePositions: float ``[N_r, d]`` (pass the same tensor for one set).
        querySupports: float ``[N_q]`` query support radii.
        referenceSupports: float ``[N_r]`` reference support radii.
        periodicity: bool ``[d]`` tensor, a list of d bools, or None (all False).
        domain: `DomainDescription` (or an object with ``.min``/``.max``, or a (min, max) pair).
        mode: `SupportScheme` sizing the grid support.
        hashMapLength: table length L (operators use ``getNextPrime(N_r)``).

    Returns:
        CompactHashMap. Its ``validityFlags`` record invalid inputs; they are not read (the
        search reads them in its single readback). Zero device->host readbacks.
        Non-differentiable.
    """
    where = "buildCompactHashMap"
    dMin, dMax, _ = domainTensors(where, domain)
    inp = prepareInputs(where, queryPositions, referencePositions, querySupports,
                        referenceSupports, periodicity, dMin, dMax)
    return buildGrid(inp, modeUint(where, mode), checkHashMapLength(where, hashMapLength))
