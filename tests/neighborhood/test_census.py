"""Readback census: exactly one device->host readback per search, zero per grid build. The census itself is shown to fail."""

from __future__ import annotations

import pytest
import torch
import warp as wp

import warpSPHCore.neighborhood.grid as gridModule
from warpSPHCore.enumTypes import HashMapLengthMode, SupportScheme
from warpSPHCore.neighborhood import (
    buildCompactHashMap,
    buildVerletList,
    deferVerletChecks,
    filterVerletList,
    getNextPrime,
    radiusSearchCompactHashMap,
    radiusSearchCompactHashMap_,
)

from .census import census
from .helpers import domain, particles, randomCloud


def _count(fn, *args, **kwargs):
    with census() as c:
        out = fn(*args, **kwargs)
    return c, out


@pytest.mark.parametrize("mode", list(SupportScheme))
def test_one_readback_per_search(device, dtype, dim, mode):
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    q, hq = randomCloud(40, dim, device, dtype, seed=1)
    r, hr = randomCloud(30, dim, device, dtype, seed=2)
    for lengthMode in HashMapLengthMode:
        c, _ = _count(radiusSearchCompactHashMap, particles(q, hq), dom, mode=mode,
                      hashMapLengthMode=lengthMode, referenceParticles=particles(r, hr))
        assert c.total == 1, c.sites
    c, _ = _count(radiusSearchCompactHashMap_, q, r, hq, hr, dom.periodic, dom, mode=mode,
                  returnCompactHashMap=True)
    assert c.total == 1, c.sites
    assert c.sites[0][1].startswith("/neighborhood/flags.py")  # the designated readback


def test_one_readback_for_empty_sets(device, dtype):
    dom = domain(-1.0, 1.0, (False, True), device, dtype)
    q, hq = randomCloud(5, 2, device, dtype, seed=1)
    e = torch.zeros((0, 2), dtype=dtype, device=device)
    eh = torch.zeros(0, dtype=dtype, device=device)
    for a, ah, b, bh in [(e, eh, q, hq), (q, hq, e, eh), (e, eh, e, eh)]:
        c, adj = _count(radiusSearchCompactHashMap, particles(a, ah), dom,
                        referenceParticles=particles(b, bh))
        assert c.total == 1 and adj.numEdges == 0
        c, _ = _count(buildCompactHashMap, a, b, ah, bh, dom.periodic, dom)
        assert c.total == 0


def test_zero_readbacks_for_grid_build(device, dtype, dim):
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    q, hq = randomCloud(40, dim, device, dtype, seed=1)
    for mode in SupportScheme:
        c, grid = _count(buildCompactHashMap, q, q, hq, hq, dom.periodic, dom, mode=mode,
                         hashMapLength=getNextPrime(40))
        assert c.total == 0, c.sites
        assert grid.hashMapLength == 41


def test_verlet_readbacks(device, dtype):
    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(50, 2, device, dtype, seed=1)
    c, adj = _count(buildVerletList, particles(pos, h), dom, verletScale=1.2)
    assert c.total == 1  # first build: the search only
    c, same = _count(buildVerletList, particles(pos + 1e-4, h), dom, verletScale=1.2,
                     priorNeighborhood=adj)
    assert c.total == 1 and same is adj  # the check only
    c, fresh = _count(buildVerletList, particles(pos + 0.2, h), dom, verletScale=1.2,
                      priorNeighborhood=adj)
    assert c.total == 2 and fresh is not adj  # the check + the rebuild
    with census() as c, deferVerletChecks() as flags:
        out = buildVerletList(particles(pos + 0.2, h), dom, verletScale=1.2, priorNeighborhood=adj)
    assert c.total == 0 and out is adj and len(flags) == 1
    c, _ = _count(filterVerletList, particles(pos, h), dom, adj)
    assert c.total == 1


# --------------------------------------------------------------------------------------
# the census can fail
# --------------------------------------------------------------------------------------


def test_census_counts_every_patched_operation():
    t = torch.ones(3)
    b = torch.tensor([True, False, True])
    ops = {
        "item": lambda: t[0].item(),
        "tolist": lambda: t.tolist(),
        "cpu": lambda: t.cpu(),
        "numpy": lambda: t.numpy(),
        "bool": lambda: bool(t[0] > 0),
        "int": lambda: int(t[0]),
        "float": lambda: float(t[0]),
        "index": lambda: [1, 2, 3][t.long()[0]],
        "nonzero": lambda: torch.nonzero(t),
        "unique": lambda: torch.unique(t),
        "masked_select": lambda: torch.masked_select(t, b),
        "bincount": lambda: torch.bincount(t.long()),
        "repeat_interleave": lambda: torch.repeat_interleave(t, t.long()),
        "bool_getitem": lambda: t[b],
        "bool_setitem": lambda: t.__setitem__(b, 0.0),
        "linalg": lambda: torch.linalg.inv(torch.eye(2)),
        "wp.synchronize": lambda: wp.synchronize(),
        "wp.synchronize_device": lambda: wp.synchronize_device("cpu"),
        "wp.array.numpy": lambda: wp.zeros(3, dtype=float, device="cpu").numpy(),
        "torch.cuda.synchronize": lambda: torch.cuda.synchronize(),
    }
    for name, op in ops.items():
        with census() as c:
            try:
                op()
            except (RuntimeError, AssertionError, AttributeError):
                pass  # torch.cuda.synchronize without CUDA still counts before raising
        assert c.total >= 1, f"census missed {name}"
    # not counted: repeat_interleave with output_size, integer indexing
    u = torch.ones(3)
    with census() as c:
        torch.repeat_interleave(u, u.long(), output_size=3)
        _ = u[torch.tensor([0, 2])]
    assert c.total == 0


def test_census_detects_injected_readback(device, dtype, monkeypatch):
    """A deliberate `.item()` inside the grid build is caught by the census."""
    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(30, 2, device, dtype, seed=1)
    original = gridModule.cellCounts

    def leaky(extent, hMax, *rest):
        hMax.reshape(-1)[0].item()  # the injected host sync
        return original(extent, hMax, *rest)

    monkeypatch.setattr(gridModule, "cellCounts", leaky)
    c, _ = _count(buildCompactHashMap, pos, pos, h, h, dom.periodic, dom)
    assert c.total == 1 and c.hits["Tensor.item"] == 1
    c, _ = _count(radiusSearchCompactHashMap, particles(pos, h), dom)
    assert c.total == 2  # the census would fail the one-readback assertion
