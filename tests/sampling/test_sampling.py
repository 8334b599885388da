"""Test-data helpers: `sampleDensestLattice`, `generateNeighborTestData`.

Distances are checked by brute force over all pairs (minimum image for periodic checks),
written here in NumPy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.dataTypes.latticeSample import LatticeSample
from warpSPHCore.sampling import generateNeighborTestData, sampleDensestLattice

PI = math.pi


def pairDistances(x, lo=None, hi=None):
    """All pair distances [N, N] (minimum image when lo/hi are given), self pairs = inf."""
    delta = x[:, None, :] - x[None, :, :]
    if lo is not None:
        ext = hi - lo
        delta = delta - ext * np.round(delta / ext)
    r = np.sqrt((delta**2).sum(-1))
    np.fill_diagonal(r, np.inf)
    return r


# --------------------------------------------------------------------------------------
# sampleDensestLattice


@pytest.mark.parametrize(
    "n,d,expected", [(10, 1, 10), (1, 1, 1), (32, 3, 32), (100, 3, 108), (256, 3, 256),
                     (3, 3, 4), (1, 2, 4)]
)
def test_particle_counts(n, d, expected):
    s = sampleDensestLattice(n, 1.0, d)
    assert isinstance(s, LatticeSample)
    assert s.numParticles == expected == s.positions.shape[0]
    assert s.positions.shape == (expected, d) and s.positions.dtype == np.float64


@pytest.mark.parametrize("n", [4, 16, 50, 100, 400, 1000])
def test_2d_counts_are_hexagonal_supercells(n):
    s = sampleDensestLattice(n, 2.0, 2)
    N = s.numParticles
    assert N % 4 == 0 and abs(N - n) <= 0.25 * n + 4
    # hexagonal up to the stretch needed for periodicity: the 6 nearest neighbours of every
    # particle lie within 12 % of the nearest-neighbour distance
    if N >= 16:
        r = np.sort(pairDistances(s.positions, s.boxMin, s.boxMax), axis=1)
        assert np.all(r[:, 5] <= 1.12 * s.nearestNeighborDistance)


@pytest.mark.parametrize("d,n", [(1, 12), (2, 100), (3, 32), (3, 108)])
def test_nearest_neighbour_distance(d, n):
    s = sampleDensestLattice(n, 1.0, d)
    r = pairDistances(s.positions)
    rp = pairDistances(s.positions, s.boxMin, s.boxMax)
    assert r.min() == pytest.approx(s.nearestNeighborDistance, rel=1e-12)
    assert rp.min(axis=1) == pytest.approx(np.full(s.numParticles, s.nearestNeighborDistance),
                                           rel=1e-12)
    if d == 1:
        assert s.nearestNeighborDistance == pytest.approx(1.0 / n)
    if d == 3:
        p = round((s.numParticles / 4) ** (1 / 3))
        assert s.nearestNeighborDistance == pytest.approx(1.0 / p / math.sqrt(2.0), rel=1e-14)


@pytest.mark.parametrize("d,n,coordination", [(1, 9, 2), (2, 64, 2), (3, 32, 12), (3, 256, 12)])
def test_periodic_consistency(d, n, coordination):
    """Under the minimum image every particle sees the same neighbourhood (the box is a
    periodic supercell): identical sorted distance lists, and the FCC/1D coordination."""
    s = sampleDensestLattice(n, 1.5, d)
    r = np.sort(pairDistances(s.positions, s.boxMin, s.boxMax), axis=1)[:, : min(30, n - 1)]
    np.testing.assert_allclose(r, np.broadcast_to(r[0], r.shape), rtol=1e-12)
    nn = s.nearestNeighborDistance
    counts = (r <= nn * (1 + 1e-9)).sum(1)
    assert np.all(counts >= coordination) if d == 2 else np.all(counts == coordination)


def test_positions_inside_box_and_custom_box():
    s = sampleDensestLattice(200, 1.0, 3, box=((-1.0, 0.0, 2.0), (1.0, 1.0, 3.0)))
    np.testing.assert_array_equal(s.boxMin, [-1.0, 0.0, 2.0])
    np.testing.assert_array_equal(s.boxMax, [1.0, 1.0, 3.0])
    assert np.all(s.positions >= s.boxMin) and np.all(s.positions < s.boxMax)
    rp = pairDistances(s.positions, s.boxMin, s.boxMax)
    assert rp.min() == pytest.approx(s.nearestNeighborDistance, rel=1e-12)
    s2 = sampleDensestLattice(50, 3.0, 2, box=(-1.0, 1.0))
    np.testing.assert_array_equal(s2.boxMin, [-1.0, -1.0])
    s3 = sampleDensestLattice(50, 3.0, 2)
    np.testing.assert_array_equal(s3.boxMin, [0.0, 0.0])
    np.testing.assert_array_equal(s3.boxMax, [3.0, 3.0])
    assert np.all(s3.positions >= 0.0) and np.all(s3.positions < 3.0)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_jitter_bounds_and_seed(d):
    base = sampleDensestLattice(60, 1.0, d)
    jitter = 0.2
    a = sampleDensestLattice(60, 1.0, d, jitter=jitter, seed=11)
    b = sampleDensestLattice(60, 1.0, d, jitter=jitter, seed=11)
    c = sampleDensestLattice(60, 1.0, d, jitter=jitter, seed=12)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)
    ext = a.boxMax - a.boxMin
    disp = a.positions - base.positions
    disp -= ext * np.round(disp / ext)
    bound = jitter / 2 * base.nearestNeighborDistance
    assert np.all(np.abs(disp) <= bound * (1 + 1e-12))
    assert np.abs(disp).max() > 0.5 * bound  # really displaced
    assert np.all(a.positions >= a.boxMin) and np.all(a.positions < a.boxMax)
    assert a.nearestNeighborDistance == base.nearestNeighborDistance


def test_jitter_requires_seed_and_validation():
    with pytest.raises(ValueError, match="seed"):
        sampleDensestLattice(10, 1.0, 2, jitter=0.1)
    sampleDensestLattice(10, 1.0, 2, jitter=0.0)  # no seed needed without jitter
    for kwargs in ({"n": 0}, {"n": 2.5}, {"n": True}, {"L": 0.0}, {"L": -1.0},
                   {"L": math.nan}, {"d": 4}, {"d": 0}, {"jitter": -0.1, "seed": 1},
                   {"jitter": math.inf, "seed": 1}, {"box": (1.0, 0.0)},
                   {"box": (0.0, (1.0, 1.0, 1.0))}, {"box": 5.0}):
        args = {"n": 10, "L": 1.0, "d": 2} | kwargs
        with pytest.raises(ValueError):
            sampleDensestLattice(**args)


def test_lattice_sample_validation():
    x = np.zeros((3, 2))
    s = LatticeSample(x, [0, 0], [1, 1], 0.5, 3)
    assert s.dim == 2 and s.boxMin.dtype == np.float64
    with pytest.raises(ValueError):
        LatticeSample(x, [0, 0], [1, 1], 0.5, 4)
    with pytest.raises(ValueError):
        LatticeSample(x, [0, 0, 0], [1, 1], 0.5, 3)
    with pytest.raises(ValueError):
        LatticeSample(np.zeros(3), [0], [1], 0.5, 3)


# --------------------------------------------------------------------------------------
# generateNeighborTestData


@pytest.mark.parametrize("d", [1, 2, 3])
def test_generate_neighbor_test_data(device, dtype, d):
    nx, target = 6, 20
    positions, supports, N, domain, dx = generateNeighborTestData(nx, target, d, True, device,
                                                                   dtype=dtype)
    assert N == nx**d and isinstance(N, int)
    assert dx == 2.0 / nx
    assert positions.shape == (N, d) and supports.shape == (N,)
    for t in (positions, supports, domain.min, domain.max):
        assert t.dtype == dtype and t.device == torch.device(device)
    assert positions.is_contiguous()
    assert isinstance(domain, DomainDescription) and domain.dim == d
    assert domain.periodic.tolist() == [True] * d
    assert domain.min.tolist() == [-1.0] * d and domain.max.tolist() == [1.0] * d
    # h with V_d h^d = N dx^d
    Vd = (2.0, PI, 4 * PI / 3)[d - 1]
    h = (target * dx**d / Vd) ** (1.0 / d)
    rtol = 1e-14 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(supports.cpu().double().numpy(), h, rtol=rtol)
    # cell-centred grid from an 'xy' meshgrid, flattened row-major
    axis = -1.0 + (np.arange(nx) + 0.5) * dx
    if d == 1:
        ref = axis[:, None]
    else:
        ref = np.stack([g.ravel() for g in np.meshgrid(*([axis] * d), indexing="xy")], -1)
    np.testing.assert_allclose(positions.cpu().double().numpy(), ref, rtol=0,
                               atol=1e-15 if dtype == torch.float64 else 1e-7)


def test_generate_neighbor_test_data_ordering_and_periodicity():
    positions, _, N, domain, dx = generateNeighborTestData(4, 12, 2, [True, False], "cpu",
                                                           dtype=torch.float64)
    # x varies fastest in 2D
    assert positions[1, 0] - positions[0, 0] == pytest.approx(dx)
    assert positions[1, 1] == positions[0, 1]
    assert positions[4, 1] - positions[0, 1] == pytest.approx(dx)
    assert domain.periodic.tolist() == [True, False]
    assert positions.dtype == torch.float64
    p32 = generateNeighborTestData(4, 12, 2, False, "cpu")[0]
    assert p32.dtype == torch.float32  # default dtype
    assert domain.max.tolist() == [1.0, 1.0]
    assert N == 16


def test_generate_neighbor_test_data_validation():
    for args in ((0, 10, 2, True), (4.5, 10, 2, True), (4, 0, 2, True), (4, -3, 2, True),
                 (4, 10, 4, True), (4, 10, 0, True)):
        with pytest.raises(ValueError):
            generateNeighborTestData(*args, "cpu")
    with pytest.raises(TypeError):
        generateNeighborTestData(4, 10, 2, True, "cpu", dtype=torch.float16)
