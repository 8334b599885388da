"""Compact hash grid structure and the Warp traversal
helpers operators use, exercised from a generic kernel as an operator would."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import warp as wp

from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import (
    buildCompactHashMap,
    getNextPrime,
    radiusNaive,
    radiusSearchCompactHashMap,
)
from warpSPHCore.neighborhood.traversal import (
    HASH_PRIMES,
    adjacencyData,
    checkOffset,
    checkOffsetPosition,
    getIndexRange,
    gridData_f32,
    gridData_f64,
    gridQueryCell,
    makeAdjacencyData,
    makeGridData,
)
from warpSPHCore.util.conversion import toWarp
from warpSPHCore.util.errorFlags import NeighborListError, checkErrors
from warpSPHCore.util.precision import warpVector
from warpSPHCore.util.warpContext import launch

from .helpers import domain, particles, randomCloud

wp.set_module_options({"enable_backward": False})


@wp.kernel
def gridVisitKernel(queryPositions: wp.array(dtype=Any), grid: Any,
                    visits: wp.array2d(dtype=wp.int32), mismatches: wp.array(dtype=wp.int32)):
    i = wp.tid()
    x = queryPositions[i]
    cell = gridQueryCell(grid, x)
    for o in range(grid.numOffsets):
        r = checkOffset(grid, cell, o)
        r2 = checkOffsetPosition(grid, x, o)
        if r[0] != r2[0] or r[1] != r2[1]:
            wp.atomic_add(mismatches, 0, 1)
        for s in range(r[0], r[0] + r[1]):
            j = grid.sortIndex[s]
            visits[i, wp.int32(j)] = visits[i, wp.int32(j)] + 1


@wp.kernel
def csrVisitKernel(adjacency: adjacencyData, visits: wp.array2d(dtype=wp.int32)):
    i = wp.tid()
    r = getIndexRange(adjacency, i)
    for e in range(r[0], r[0] + r[1]):
        j = adjacency.neighborList[e]
        visits[i, wp.int32(j)] = visits[i, wp.int32(j)] + 1


for _scalar, _grid in ((wp.float32, gridData_f32), (wp.float64, gridData_f64)):
    for _d in (1, 2, 3):
        wp.overload(gridVisitKernel, {
            "queryPositions": wp.array(dtype=wp.types.vector(length=_d, dtype=_scalar)),
            "grid": _grid, "visits": wp.array2d(dtype=wp.int32),
            "mismatches": wp.array(dtype=wp.int32)})


def _gridVisits(qPos, grid, periodic):
    n, m = qPos.shape[0], grid.sortIndex.shape[0]
    visits = torch.zeros((n, m), dtype=torch.int32, device=qPos.device)
    mismatches = torch.zeros(1, dtype=torch.int32, device=qPos.device)
    launch(gridVisitKernel, dim=n,
           inputs=[toWarp(qPos, warpVector(qPos.shape[1], qPos.dtype)), makeGridData(grid, periodic)],
           outputs=[toWarp(visits), toWarp(mismatches)], device=qPos.device)
    assert int(mismatches) == 0
    return visits


def test_grid_traversal_helpers_cover_every_pair(device, dtype, dim):
    """`gridQueryCell` + `checkOffset` over a SuperSymmetric grid (the operator path) visit
    every pair within max(h_i, h_j) exactly once and no reference twice (also with 2 cells
    on a periodic axis), from current unwrapped query positions."""
    for lo, hi, periodic, hRange in [(-1.0, 1.0, (True,) * dim, (0.2, 0.3)),
                                     (0.0, 1.0, (True,) * dim, (0.3, 0.45)),
                                     (-1.0, 1.0, (False,) * dim, (0.2, 0.3))]:
        dom = domain(lo, hi, periodic, device, dtype)
        q, hq = randomCloud(40, dim, device, dtype, seed=1, lo=lo - 0.5, hi=hi + 0.5,
                            hMin=hRange[0], hMax=hRange[1])
        r, hr = randomCloud(50, dim, device, dtype, seed=2, lo=lo, hi=hi, hMin=hRange[0],
                            hMax=hRange[1])
        grid = buildCompactHashMap(q, r, hq, hr, dom.periodic, dom, mode=SupportScheme.SuperSymmetric,
                                   hashMapLength=getNextPrime(r.shape[0]))
        visits = _gridVisits(q, grid, dom.periodic).cpu()
        assert int(visits.max()) <= 1  # each reference at most once per query
        ii, jj = radiusNaive(q, r, hq, hr, dom.periodic, dom.min, dom.max, mode="superSymmetric")
        assert bool((visits[ii.cpu(), jj.cpu()] == 1).all())


def test_csr_traversal_helper(device, dtype):
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    pos, h = randomCloud(60, 2, device, dtype, seed=3)
    adj = radiusSearchCompactHashMap(particles(pos, h), dom)
    visits = torch.zeros((60, 60), dtype=torch.int32, device=device)
    launch(csrVisitKernel, dim=60, inputs=[makeAdjacencyData(adj)], outputs=[toWarp(visits)],
           device=device)
    expected = torch.zeros((60, 60), dtype=torch.int32)
    expected[adj.i.cpu(), adj.j.cpu()] = 1
    assert torch.equal(visits.cpu(), expected)


def test_csr_traversal_clamps_corrupted_rows(device, dtype):
    """A corrupted list (offsets/counts beyond E) never reads out of bounds."""
    dom = domain(-1.0, 1.0, (False,), device, dtype)
    pos, h = randomCloud(12, 1, device, dtype, seed=3)
    adj = radiusSearchCompactHashMap(particles(pos, h), dom)
    adj.numNeighbors[3] = 10**6
    adj.edgeOffsets[5] = -7
    adj.edgeOffsets[6] = 10**6
    visits = torch.zeros((12, 12), dtype=torch.int32, device=device)
    launch(csrVisitKernel, dim=12, inputs=[makeAdjacencyData(adj)], outputs=[toWarp(visits)],
           device=device)
    assert int(visits.sum()) >= 0  # completed without a fault
    # ... and the clamped rows were recorded
    with pytest.raises(NeighborListError, match=r"query row \d+ has edgeOffsets\[\d+\] = "
                       r"-?\d+ and numNeighbors\[\d+\] = -?\d+, outside the edge list"):
        checkErrors(device)


def test_grid_structure(device, dtype, dim):
    """Every field of the grid: sort, occupied-cell table, hash buckets, stencil."""
    dom = domain(-1.0, 1.0, (True,) + (False,) * (dim - 1), device, dtype)
    q, hq = randomCloud(30, dim, device, dtype, seed=1, hMin=0.2, hMax=0.3)
    r, hr = randomCloud(70, dim, device, dtype, seed=2, lo=-2.5, hi=2.5, hMin=0.3, hMax=0.4)
    L = 13
    for mode in SupportScheme:
        g = buildCompactHashMap(q, r, hq, hr, dom.periodic, dom, mode=mode, hashMapLength=L)
        hMax = {SupportScheme.Gather: hq.max(), SupportScheme.Scatter: hr.max(),
                SupportScheme.MeanSymmetric: (hq.max() + hr.max()) / 2}.get(
                    mode, torch.maximum(hq.max(), hr.max()))
        assert torch.equal(g.hMax, hMax.reshape(1))
        ext = (dom.max - dom.min).cpu().double()
        nc = torch.floor(ext / (hMax.cpu().double() * (1 + 1e-5))).clamp(min=1).to(torch.int32)
        assert torch.equal(g.numCells.cpu(), nc)
        assert bool(((g.cellSize.cpu().double() - ext / nc) .abs() < 1e-6).all())
        assert (g.mode_uint, g.D, g.hashMapLength, g.searchRadius, g.numOffsets) == \
            (int(mode), dim, L, 1, 3**dim)
        # stencil: cartesian product of (-1, 0, 1), first axis slowest, zero-padded
        stencil = [list(o) + [0] * (3 - dim) for o in itertools.product((-1, 0, 1), repeat=dim)]
        assert g.cellOffsets.tolist() == stencil
        # sort: a permutation, supports gathered, positions wrapped on periodic axes only
        m = r.shape[0]
        assert sorted(g.sortIndex.tolist()) == list(range(m))
        assert torch.equal(g.sortedSupports, hr[g.sortIndex])
        sp = g.sortedPositions
        assert torch.equal(sp[:, 1:], r[g.sortIndex, 1:])
        assert bool((sp[:, 0] >= -1).all() and (sp[:, 0] <= 1).all())
        # cells: recompute coordinates from the wrapped positions (host float64 reference)
        cs = (dom.max - dom.min) / g.numCells.to(dtype)
        c = torch.floor((sp - dom.min) / cs).to(torch.int64)
        c[:, 0] = c[:, 0] % int(g.numCells[0])
        for k in range(1, dim):
            c[:, k] = c[:, k].clamp(0, int(g.numCells[k]) - 1)
        ncl = g.numCells.to(torch.int64).tolist() + [1, 1]
        lin = c[:, 0] + ncl[0] * ((c[:, 1] if dim > 1 else 0) + ncl[1] * (c[:, 2] if dim > 2 else 0))
        assert bool((lin[1:] >= lin[:-1]).all())  # sorted by linear index
        # stable: ascending original index within each cell
        same = lin[1:] == lin[:-1]
        assert bool((g.sortIndex[1:][same] > g.sortIndex[:-1][same]).all())
        # occupied cells table
        occ = int(g.numOccupiedCells)
        assert occ == torch.unique(lin).numel()
        table = g.sortedCellTable.cpu()
        assert bool((table[occ:] == torch.tensor([-1, 0, 0])).all())
        rows = table[:occ]
        assert int(rows[:, 2].sum()) == m
        for cellLin, first, count in rows.tolist():
            assert bool((lin[first: first + count] == cellLin).all())
        # keys grouped by hash; buckets point at their rows
        cc = [(v % ncl[0], (v // ncl[0]) % ncl[1], v // (ncl[0] * ncl[1])) for v in rows[:, 0].tolist()]
        keys = [c0 % L if dim == 1 else (c0 * HASH_PRIMES[0] + c1 * HASH_PRIMES[1] +
                                         c2 * HASH_PRIMES[2]) % L for c0, c1, c2 in cc]
        assert keys == sorted(keys)
        ht = g.hashTable.cpu()
        for key in range(L):
            count = keys.count(key)
            if count == 0:
                assert ht[key].tolist() == [-1, 0]
            else:
                assert ht[key].tolist() == [keys.index(key), count]
        assert int(g.validityFlags) == 0


def test_large_cell_indices_hash_in_int64(device):
    """Many cells per axis (large c_k x prime products) stay exact."""
    dtype = torch.float64
    dom = domain(0.0, 1.0, (False, False, True), device, dtype)
    pos, _ = randomCloud(150, 3, device, dtype, seed=5, lo=0.0, hi=1.0)
    h = torch.full((150,), 2e-6, dtype=dtype, device=device)
    pos[1::2] = pos[::2] + 1e-6  # close pairs
    adj, g = radiusSearchCompactHashMap(particles(pos, h), dom, returnCompactHashMap=True)
    assert int(g.numCells.min()) > 2**18
    ii, jj = radiusNaive(pos, pos, h, h, dom.periodic, dom.min, dom.max)
    assert sorted(zip(adj.i.tolist(), adj.j.tolist())) == list(zip(ii.tolist(), jj.tolist()))
    assert adj.numEdges > 150


def test_cell_count_cap(device):
    dom = domain(0.0, 1.0, (False,), device, torch.float64)
    pos = torch.tensor([[0.1], [0.1 + 1e-9]], dtype=torch.float64, device=device)
    h = torch.full((2,), 1e-8, dtype=torch.float64, device=device)
    adj, g = radiusSearchCompactHashMap(particles(pos, h), dom, returnCompactHashMap=True)
    assert g.numCells.tolist() == [2**20] and adj.numEdges == 4


@pytest.mark.parametrize("n,expected", [(0, 2), (1, 2), (2, 3), (7, 11), (96, 97), (97, 101),
                                        (4096, 4099), (-5, 2)])
def test_get_next_prime(n, expected):
    assert getNextPrime(n) == expected


def test_get_next_prime_rejects_tensors():
    with pytest.raises(TypeError):
        getNextPrime(torch.tensor(5))


def test_cell_margin_scales_with_coordinate_magnitude_in_float32():
    """float32 grids with many cells per axis get a margin covering coordinate rounding;
    float64 keeps the spec's 1e-5 (docs/neighborhood.md, known limits)."""
    from warpSPHCore.neighborhood.grid import CELL_MARGIN, cellCounts, cellMargin

    for dtype, expect_wide in ((torch.float32, True), (torch.float64, False)):
        h = torch.tensor([0.002], dtype=dtype)  # 1000 cells on [-1, 1]
        scale = torch.tensor([1.0], dtype=dtype)
        m = cellMargin(scale, h)
        if expect_wide:
            assert m.item() >= 32 * torch.finfo(torch.float32).eps * 500 * 0.999
        else:
            assert m.item() == CELL_MARGIN
        n = cellCounts(torch.tensor([2.0], dtype=dtype), h, scale)
        cell = 2.0 / n.item()
        assert cell >= h.item() * (1 + m.item()) * (1 - 1e-6)
        # the spec's rule is recovered without a scale
        assert cellCounts(torch.tensor([2.0], dtype=dtype), h).item() == int(2.0 / (0.002 * (1 + 1e-5)))
