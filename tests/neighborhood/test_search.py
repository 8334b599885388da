"""Compact-hash radius search vs the brute-force reference."""

from __future__ import annotations

import itertools

import pytest
import torch

from warpSPHCore.enumTypes import HashMapLengthMode, SupportScheme
from warpSPHCore.neighborhood import (
    AdjacencyList,
    CompactHashMap,
    radiusSearchCompactHashMap,
    radiusSearchCompactHashMap_,
)

from .helpers import (
    ALL_MODES,
    assertCSR,
    domain,
    naivePairs,
    particles,
    randomCloud,
    searchPairs,
)

PERIODIC_PATTERNS = {1: [(False,), (True,)], 2: [(False, False), (True, True), (True, False)],
                     3: [(False, False, False), (True, True, True), (False, True, True)]}


def _check(qPos, qSup, dom, mode, rPos=None, rSup=None, **kwargs):
    aliased = rPos is None
    adj = radiusSearchCompactHashMap(
        particles(qPos, qSup), dom, mode=mode,
        referenceParticles=None if aliased else particles(rPos, rSup), **kwargs)
    rPos, rSup = (qPos, qSup) if aliased else (rPos, rSup)
    assert isinstance(adj, AdjacencyList)
    assert adj.numRows == qPos.shape[0] and adj.numCols == rPos.shape[0]
    assert adj.supportMode == mode
    assertCSR(adj)
    expected = naivePairs(qPos, rPos, qSup, rSup, dom, mode)
    got = searchPairs(adj)
    assert torch.equal(got, expected), f"{got.numel()} pairs vs {expected.numel()} (brute force)"
    return adj


@pytest.mark.parametrize("dim", [1, 2, 3], ids=["1d", "2d", "3d"])
def test_random_clouds_all_modes(device, dtype, dim):
    """Random clouds on [-1, 1]^d (negative coordinates), non-uniform supports, every mode,
    every periodicity pattern; aliased sets."""
    n = {1: 60, 2: 120, 3: 160}[dim]
    for p, periodic in enumerate(PERIODIC_PATTERNS[dim]):
        dom = domain(-1.0, 1.0, periodic, device, dtype)
        pos, h = randomCloud(n, dim, device, dtype, seed=10 * dim + p, hMin=0.25, hMax=0.4)
        for mode in ALL_MODES:
            _check(pos, h, dom, mode)


@pytest.mark.parametrize("dim", [1, 2, 3], ids=["1d", "2d", "3d"])
def test_query_reference_different_sizes(device, dtype, dim):
    """Distinct query and reference sets of different sizes and support ranges."""
    for p, periodic in enumerate(PERIODIC_PATTERNS[dim]):
        dom = domain(-1.0, 1.0, periodic, device, dtype)
        q, hq = randomCloud(37, dim, device, dtype, seed=100 + p, hMin=0.2, hMax=0.3)
        r, hr = randomCloud(91, dim, device, dtype, seed=200 + p, hMin=0.3, hMax=0.45)
        for mode in ALL_MODES:
            _check(q, hq, dom, mode, r, hr)
            _check(r, hr, dom, mode, q, hq)


def test_same_tensors_as_reference_argument(device, dtype):
    """Passing the query state explicitly as reference equals the aliased default."""
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    pos, h = randomCloud(80, 2, device, dtype, seed=3)
    a = radiusSearchCompactHashMap(particles(pos, h), dom)
    b = radiusSearchCompactHashMap(particles(pos, h), dom, referenceParticles=particles(pos, h))
    assert torch.equal(a.i, b.i) and torch.equal(a.j, b.j)
    assert a.queryPositions is a.referencePositions  # aliasing recorded


@pytest.mark.parametrize("dim", [1, 2, 3], ids=["1d", "2d", "3d"])
def test_cell_boundaries_and_exact_support_radius(device, dtype, dim):
    """h = 15/64 on [-1, 1] gives 8 cells of exactly 0.25: lattice points at multiples of
    1/8 lie on cell boundaries, and Pythagorean offsets of length exactly h are present
    (all values dyadic, so every distance is computed exactly in both precisions)."""
    h = 15.0 / 64.0
    step = {1: 1.0 / 64.0, 2: 3.0 / 64.0, 3: 5.0 / 64.0}[dim]  # 15, (9, 12), (5, 10, 10)/64
    side = int(round(2.0 / step))
    axes = [torch.arange(side, dtype=torch.float64) * step - 1.0] * dim
    lattice = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, dim)
    gen = torch.Generator().manual_seed(dim)
    keep = torch.randperm(lattice.shape[0], generator=gen)[:200]
    onBoundary = torch.stack(torch.meshgrid(*[torch.arange(-4, 4, dtype=torch.float64) / 4] * dim,
                                            indexing="ij"), -1).reshape(-1, dim)
    pos = torch.cat([lattice[keep], onBoundary[: 60]]).to(device=device, dtype=dtype)
    sup = torch.full((pos.shape[0],), h, dtype=dtype, device=device)
    for periodic in PERIODIC_PATTERNS[dim]:
        dom = domain(-1.0, 1.0, periodic, device, dtype)
        adj = _check(pos, sup, dom, SupportScheme.Gather, returnCompactHashMap=False)
        assert adj.hashMap.numCells.tolist() == [8] * dim
        # the test is meaningful: some accepted pairs lie exactly at r = h
        d = (pos[adj.i] - pos[adj.j]).double()
        if any(periodic):
            L = 2.0
            per = torch.tensor(periodic, device=device)
            d = torch.where(per, d - L * torch.round(d / L), d)
        assert bool((d.norm(dim=1) == h).any())


def test_periodic_unwrapped_positions(device, dtype, dim):
    """Positions shifted by integer numbers of boxes give the same pairs (both seams)."""
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    pos, h = randomCloud(90, dim, device, dtype, seed=7, hMin=0.25, hMax=0.35)
    base = radiusSearchCompactHashMap(particles(pos, h), dom)
    gen = torch.Generator().manual_seed(11)
    shifts = torch.randint(-3, 4, pos.shape, generator=gen).to(device=device, dtype=dtype) * 2.0
    moved = pos + shifts
    adj = _check(moved, h, dom, SupportScheme.Gather)
    assert torch.equal(searchPairs(adj), searchPairs(base))


def test_both_seams_every_axis(device, dtype, dim):
    """Particles hugging min and max of every periodic axis find each other across the seam
    (the lower and the upper side, W70), including exactly at min and at max."""
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    pts = []
    for k in range(dim):
        for v in (-1.0, -0.97, -0.9, 0.9, 0.97, 1.0, 0.9999):
            p = [0.05 * (k + 1)] * dim
            p[k] = v
            pts.append(p)
    pos = torch.tensor(pts, dtype=dtype, device=device)
    sup = torch.full((pos.shape[0],), 0.2, dtype=dtype, device=device)
    adj = _check(pos, sup, dom, SupportScheme.Gather)
    # a pair across the seam exists on every axis
    assert adj.numEdges > pos.shape[0]


@pytest.mark.parametrize("cells", [1, 2], ids=["1cell_nonperiodic", "2cells"])
def test_few_cells(device, dtype, dim, cells):
    """Two cells on periodic axes (duplicate stencil offsets are skipped) and a single cell on
    non-periodic axes (hMax larger than the extent)."""
    if cells == 2:
        periodic = (True,) * dim
        hMin, hMax = 0.3, 0.45  # L = 1: numCells = 2 on every axis
    else:
        periodic = (False,) * dim
        hMin, hMax = 0.9, 1.3  # larger than the extent: one cell
    dom = domain(0.0, 1.0, periodic, device, dtype)
    pos, h = randomCloud(50, dim, device, dtype, seed=5, lo=-0.5, hi=1.5, hMin=hMin, hMax=hMax)
    for mode in ALL_MODES:
        adj = _check(pos, h, dom, mode)
        assert adj.hashMap.numCells.tolist() == [cells] * dim
    # no pair is listed twice
    keys = searchPairs(adj)
    assert torch.unique(keys).numel() == keys.numel()


def test_mixed_periodicity_anisotropic_box(device, dtype):
    """Different extents per axis and a mix of periodic / non-periodic axes in 3D."""
    lo = torch.tensor([-1.0, 0.0, -0.5], dtype=dtype)
    hi = torch.tensor([1.0, 0.75, 2.0], dtype=dtype)
    from warpSPHCore.dataTypes.domain import DomainDescription

    for periodic in [(True, False, True), (False, True, False)]:
        dom = DomainDescription(lo.to(device), hi.to(device), list(periodic))
        gen = torch.Generator().manual_seed(1)
        pos = (lo + (hi - lo) * torch.rand(150, 3, generator=gen, dtype=torch.float64).to(dtype))
        h = (0.15 + 0.1 * torch.rand(150, generator=gen, dtype=torch.float64)).to(dtype)
        for mode in ALL_MODES:
            _check(pos.to(device), h.to(device), dom, mode)


def test_out_of_box_nonperiodic(device, dtype, dim):
    """Non-periodic particles far outside the box are clamped into boundary cells and still
    found exactly (distances use the true positions)."""
    dom = domain(-1.0, 1.0, (False,) * dim, device, dtype)
    pos, h = randomCloud(120, dim, device, dtype, seed=9, lo=-3.0, hi=3.0, hMin=0.3, hMax=0.5)
    for mode in (SupportScheme.Gather, SupportScheme.SuperSymmetric):
        _check(pos, h, dom, mode)


def test_empty_sets(device, dtype, dim):
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    pos, h = randomCloud(10, dim, device, dtype, seed=1)
    empty = torch.zeros((0, dim), dtype=dtype, device=device)
    emptyH = torch.zeros(0, dtype=dtype, device=device)
    cases = [(empty, emptyH, pos, h), (pos, h, empty, emptyH), (empty, emptyH, empty, emptyH)]
    for qp, qh, rp, rh in cases:
        adj, grid = radiusSearchCompactHashMap(particles(qp, qh), dom,
                                               referenceParticles=particles(rp, rh),
                                               returnCompactHashMap=True)
        assert adj.numEdges == 0 and adj.numRows == qp.shape[0] and adj.numCols == rp.shape[0]
        assert adj.numNeighbors.tolist() == [0] * qp.shape[0]
        assertCSR(adj)
        assert grid.sortIndex.shape == (rp.shape[0],)
        assert int(grid.numOccupiedCells) == 0 and int(grid.validityFlags) == 0
        assert bool((grid.hashTable[:, 0] == -1).all()) and bool((grid.hashTable[:, 1] == 0).all())


def test_determinism(device, dtype):
    """Two searches give identical lists in the same order."""
    dom = domain(-1.0, 1.0, (True, True, False), device, dtype)
    pos, h = randomCloud(150, 3, device, dtype, seed=21)
    for mode in (SupportScheme.Gather, SupportScheme.MeanSymmetric):
        a = radiusSearchCompactHashMap(particles(pos, h), dom, mode=mode)
        b = radiusSearchCompactHashMap(particles(pos, h), dom, mode=mode)
        for f in ("i", "j", "numNeighbors", "edgeOffsets"):
            assert torch.equal(getattr(a, f), getattr(b, f))


def _expectedRowOrder(adj, grid, qPos, accepted):
    """Host re-enactment of the row order: stencil-offset order, then sorted slots per cell."""
    numCells = grid.numCells.tolist()
    d = len(numCells)
    lo = grid.qMin.double().tolist()
    hi = grid.qMax.double().tolist()
    per = grid.periodicity.tolist()
    table = grid.sortedCellTable.tolist()
    cellOf = {row[0]: (row[1], row[2]) for row in table if row[0] >= 0}
    sortIndex = grid.sortIndex.tolist()
    rows = []
    for i in range(qPos.shape[0]):
        # the cell of the query: recomputed by the library's own binning (the kernel result is
        # reproduced through the build: bin the query with the reference binning arithmetic)
        x = qPos[i].double().tolist()
        c = []
        for k in range(d):
            L = hi[k] - lo[k]
            p = x[k] - L * __import__("math").floor((x[k] - lo[k]) / L) if per[k] else x[k]
            ck = __import__("math").floor((p - lo[k]) / (L / numCells[k]))
            ck = ck % numCells[k] if per[k] else min(max(ck, 0), numCells[k] - 1)
            c.append(ck)
        seen = set()
        row = []
        for o in itertools.product((-1, 0, 1), repeat=d):
            n = []
            ok = True
            for k in range(d):
                v = c[k] + o[k]
                if per[k]:
                    v %= numCells[k]
                elif not 0 <= v < numCells[k]:
                    ok = False
                n.append(v)
            if not ok or tuple(n) in seen:
                continue
            seen.add(tuple(n))
            lin = n[0] + numCells[0] * ((n[1] if d > 1 else 0) + (numCells[1] if d > 1 else 1)
                                        * (n[2] if d > 2 else 0))
            if lin in cellOf:
                first, count = cellOf[lin]
                row += [sortIndex[s] for s in range(first, first + count)
                        if (i, sortIndex[s]) in accepted]
        rows.append(row)
    return rows


def test_row_order_is_stencil_then_sorted_slots(device, dtype, dim):
    """Within a row: stencil-offset order (first axis slowest), then ascending original index
    inside each cell (stable sort), as a host re-enactment of the traversal predicts."""
    dom = domain(-1.0, 1.0, (True,) + (False,) * (dim - 1), device, torch.float64)
    pos, h = randomCloud(70, dim, device, torch.float64, seed=4, hMin=0.3, hMax=0.4)
    adj, grid = radiusSearchCompactHashMap(particles(pos, h), dom, returnCompactHashMap=True)
    accepted = set(zip(adj.i.tolist(), adj.j.tolist()))
    expected = _expectedRowOrder(adj, grid, pos, accepted)
    starts = adj.edgeOffsets.tolist()
    counts = adj.numNeighbors.tolist()
    j = adj.j.tolist()
    for i in range(pos.shape[0]):
        assert j[starts[i]: starts[i] + counts[i]] == expected[i]


@pytest.mark.parametrize("lengthMode", list(HashMapLengthMode))
def test_hash_length_modes(device, dtype, lengthMode):
    """The table length affects collisions only, never the result (L = 1 puts every cell in
    one bucket)."""
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    pos, h = randomCloud(97, 2, device, dtype, seed=8, hMin=0.1, hMax=0.15)
    expected = naivePairs(pos, pos, h, h, dom, SupportScheme.Gather)
    for fixed in (1, 7, 4096):
        adj, grid = radiusSearchCompactHashMap(particles(pos, h), dom, hashMapLengthMode=lengthMode,
                                               fixedHashMapLength=fixed, returnCompactHashMap=True)
        assert torch.equal(searchPairs(adj), expected)
        L = {HashMapLengthMode.Fixed: fixed, HashMapLengthMode.NumberOfParticles: 97,
             HashMapLengthMode.NextPrime: 101}[lengthMode]
        assert grid.hashMapLength == L and grid.hashTable.shape == (L, 2)


def test_flat_entry_point_and_grid(device, dtype):
    """`radiusSearchCompactHashMap_` (list periodicity) equals the state entry point and
    returns the grid on request."""
    dom = domain(-1.0, 1.0, (True, False, True), device, dtype)
    q, hq = randomCloud(40, 3, device, dtype, seed=31)
    r, hr = randomCloud(55, 3, device, dtype, seed=32)
    for mode in ALL_MODES:
        a = radiusSearchCompactHashMap(particles(q, hq), dom, mode=mode,
                                       hashMapLengthMode=HashMapLengthMode.Fixed,
                                       fixedHashMapLength=4096, referenceParticles=particles(r, hr))
        b, grid = radiusSearchCompactHashMap_(q, r, hq, hr, [True, False, True], dom, mode=mode,
                                              hashMapLength=4096, returnCompactHashMap=True)
        assert torch.equal(a.i, b.i) and torch.equal(a.j, b.j)
        assert isinstance(grid, CompactHashMap) and b.hashMap is grid
        assert grid.mode_uint == int(mode) and grid.D == 3 and grid.numOffsets == 27


def test_periodicity_none_means_open(device, dtype):
    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(60, 2, device, dtype, seed=2, hMin=0.3, hMax=0.4)
    adj = radiusSearchCompactHashMap_(pos, pos, h, h, None, dom)
    open_ = domain(-1.0, 1.0, (False, False), device, dtype)
    assert torch.equal(searchPairs(adj), naivePairs(pos, pos, h, h, open_, SupportScheme.Gather))


def test_requires_grad_inputs_are_detached(device, dtype):
    dom = domain(-1.0, 1.0, (False,), device, dtype)
    pos, h = randomCloud(30, 1, device, dtype, seed=2)
    pos.requires_grad_(True)
    adj = radiusSearchCompactHashMap(particles(pos, h), dom)
    assert not adj.queryPositions.requires_grad
    assert adj.numEdges > 0


def test_stored_inputs_and_metadata(device, dtype):
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    q, hq = randomCloud(20, 2, device, dtype, seed=2)
    r, hr = randomCloud(25, 2, device, dtype, seed=3)
    adj = radiusSearchCompactHashMap(particles(q, hq), dom, mode=SupportScheme.Scatter,
                                     referenceParticles=particles(r, hr))
    assert adj.queryPositions.data_ptr() == q.data_ptr()
    assert adj.referenceSupports.data_ptr() == hr.data_ptr()
    assert adj.supportMode == SupportScheme.Scatter and adj.verletScale == 1.0
    assert adj.hashMap.sortIndex.shape == (25,) and adj.device == q.device


@pytest.mark.parametrize("cellMajor,cacheCapacity", [(True, 64), (False, 64), (True, 0),
                                                     (False, 0), (True, 8), (False, 8)])
def test_cpu_paths_identical(device, dtype, dim, monkeypatch, cellMajor, cacheCapacity):
    """The traversal variants (cell-major count pass, slot cache of the collect pass with rows
    that overflow it) give exactly the lists of the plain per-query traversal, order included."""
    import warpSPHCore.neighborhood.search as searchModule

    dom = domain(-1.0, 1.0, (True,) + (False,) * (dim - 1), device, dtype)
    pos, h = randomCloud(150, dim, device, dtype, seed=12, hMin=0.2, hMax=0.45)
    results = []
    for variant in ((False, 0), (cellMajor, cacheCapacity)):
        monkeypatch.setattr(searchModule, "CELL_MAJOR_CPU", variant[0])
        monkeypatch.setattr(searchModule, "SLOT_CACHE_CAPACITY", variant[1])
        results.append([radiusSearchCompactHashMap(particles(pos, h), dom, mode=mode)
                        for mode in (SupportScheme.Gather, SupportScheme.MeanSymmetric)])
    for a, b in zip(*results):
        for f in ("i", "j", "numNeighbors", "edgeOffsets"):
            assert torch.equal(getattr(a, f), getattr(b, f))
    assert int(results[0][0].numNeighbors.max()) > 8  # rows overflow the small cache


def test_domain_far_from_origin(device, dtype, dim):
    """Large coordinates relative to h (big rounding margins in float32) stay exact."""
    for periodic in PERIODIC_PATTERNS[dim]:
        dom = domain(1000.0, 1004.0, periodic, device, dtype)
        pos, h = randomCloud(120, dim, device, dtype, seed=13, lo=1000.0, hi=1004.0,
                             hMin=0.4, hMax=0.6)
        for mode in (SupportScheme.Gather, SupportScheme.Scatter):
            _check(pos, h, dom, mode)


def test_with_particle_state(device, dtype):
    """The library's ParticleState / DomainDescription are accepted as they are."""
    from warpSPHCore.dataTypes.particleState import ParticleState

    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(50, 2, device, dtype, seed=14)
    state = ParticleState(pos, h, torch.ones_like(h), torch.zeros(50, dtype=torch.int32,
                                                                   device=device))
    adj = radiusSearchCompactHashMap(state, dom, mode=SupportScheme.SuperSymmetric)
    assert torch.equal(searchPairs(adj), naivePairs(pos, pos, h, h, dom,
                                                    SupportScheme.SuperSymmetric))


_MODULES_OF_ONE_SEARCH = """
import torch
from warpSPHCore import DomainDescription, ParticleState, SupportScheme
from warpSPHCore import radiusSearchCompactHashMap
from warpSPHCore.util import warpContext

n = 400
pos = torch.rand(n, 2) * 2 - 1
state = ParticleState(positions=pos, supports=torch.full((n,), 0.2),
                      masses=torch.ones(n), kinds=torch.zeros(n, dtype=torch.int32))
domain = DomainDescription(torch.full((2,), -1.0), torch.full((2,), 1.0), [True, True])
{search}
loaded = sorted({k.module.name for k in warpContext._CONCRETE.values() if k.module.execs})
print("|".join(loaded))
"""


@pytest.mark.parametrize("distinct", [False, True])
def test_cpu_search_compiles_what_it_runs(distinct):
    """A fresh process's first CPU search loads the search modules of its kind only
    (`_kernels.ConcreteSignature`): a set against itself one module (grid build, cell-major
    traversal, cached-row copy), distinct sets that module and the per-query traversal's."""
    import subprocess
    import sys

    search = ("adj = radiusSearchCompactHashMap(state, domain, mode=SupportScheme.Gather)"
              if not distinct else
              "adj = radiusSearchCompactHashMap(state, domain, mode=SupportScheme.Gather, "
              "referenceParticles=ParticleState(positions=pos.clone(), "
              "supports=state.supports, masses=state.masses, kinds=state.kinds))")
    r = subprocess.run([sys.executable, "-c", _MODULES_OF_ONE_SEARCH.replace("{search}", search)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    loaded = r.stdout.strip().splitlines()[-1].split("|")
    expected = ["warpSPHCore_Search_kernels_2d_f32_cpu_group"]
    if distinct:
        expected.append("warpSPHCore_Search_kernels_2d_f32_query_group")
    assert loaded == expected
