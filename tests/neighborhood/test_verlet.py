"""Verlet lists: conservative buffer, rebuild triggers, deferred checks, filtering."""

from __future__ import annotations

import pytest
import torch

from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import (
    AdjacencyList,
    buildVerletList,
    deferVerletChecks,
    filterVerletList,
    radiusSearchCompactHashMap,
)

from .census import census
from .helpers import ALL_MODES, assertCSR, domain, naivePairs, particles, randomCloud, searchPairs

SCALE = 1.25


def _motion(shape, amplitude, seed, device, dtype):
    """Random displacements of length exactly `amplitude` (random directions)."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(shape, generator=gen, dtype=torch.float64)
    v = v / v.norm(dim=1, keepdim=True) * amplitude
    return v.to(device=device, dtype=dtype)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_conservative_within_buffer(device, dtype, dim, mode):
    """After random motions inside the buffer the same (buffered) list is returned and it
    contains every true pair at the new positions."""
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    q, hq = randomCloud(60, dim, device, dtype, seed=1, hMin=0.2, hMax=0.25)
    r, hr = randomCloud(45, dim, device, dtype, seed=2, hMin=0.2, hMax=0.25)
    adj = buildVerletList(particles(q, hq), dom, verletScale=SCALE, supportMode=mode,
                          referenceParticles=particles(r, hr))
    assertCSR(adj)
    assert adj.verletScale == SCALE and adj.supportMode == mode
    assert torch.allclose(adj.querySupports, hq * SCALE)
    buffer = (SCALE - 1.0) * 0.2
    for step in range(3):
        # displacement (query + reference) and support drift together just inside the buffer
        q2 = q + _motion(q.shape, 0.3 * buffer, 10 + step, device, dtype)
        r2 = r + _motion(r.shape, 0.3 * buffer, 20 + step, device, dtype)
        gen = torch.Generator().manual_seed(step)
        drift = 0.3 * buffer * (2 * torch.rand(1, generator=gen).item() - 1)
        hq2, hr2 = hq + drift, hr + drift
        out = buildVerletList(particles(q2, hq2), dom, verletScale=SCALE, supportMode=mode,
                              priorNeighborhood=adj, referenceParticles=particles(r2, hr2))
        assert out is adj
        true = set(naivePairs(q2, r2, hq2, hr2, dom, mode).tolist())
        assert true <= set(searchPairs(adj).tolist())


def test_periodic_seam_crossing_is_a_small_motion(device, dtype):
    """Displacement is measured through the nearest periodic image."""
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    pos = torch.tensor([[0.999, 0.0], [-0.9, 0.1], [0.5, 0.5]], dtype=dtype, device=device)
    h = torch.full((3,), 0.3, dtype=dtype, device=device)
    adj = buildVerletList(particles(pos, h), dom, verletScale=1.5)
    moved = pos.clone()
    moved[0, 0] = -0.999  # 0.002 across the seam
    assert buildVerletList(particles(moved, h), dom, verletScale=1.5, priorNeighborhood=adj) is adj
    moved[0, 0] = 0.7  # a real jump of 0.3
    assert buildVerletList(particles(moved, h), dom, verletScale=1.5,
                           priorNeighborhood=adj) is not adj


def test_rebuild_triggers(device, dtype):
    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(40, 2, device, dtype, seed=3, hMin=0.2, hMax=0.25)
    P = particles(pos, h)
    adj = buildVerletList(P, dom, verletScale=1.2)

    def rebuilt(**kwargs):
        args = dict(verletScale=1.2, supportMode=SupportScheme.Gather, priorNeighborhood=adj)
        args.update(kwargs)
        state = args.pop("state", P)
        return buildVerletList(state, dom, **args) is not adj

    assert not rebuilt()  # nothing moved
    assert rebuilt(priorNeighborhood=None)
    plain = radiusSearchCompactHashMap(P, dom)
    bare = AdjacencyList(plain.i, plain.j, plain.numNeighbors, plain.edgeOffsets, plain.numRows,
                         plain.numCols, supportMode=SupportScheme.Gather, verletScale=1.2)
    assert rebuilt(priorNeighborhood=bare)  # no stored positions
    assert rebuilt(state=particles(pos[:-1], h[:-1]))  # N_q changed
    assert rebuilt(supportMode=SupportScheme.Scatter)
    assert rebuilt(verletScale=1.3)
    other = torch.float64 if dtype == torch.float32 else torch.float32
    otherDom = domain(-1.0, 1.0, (True, True), device, other)
    assert buildVerletList(particles(pos.to(other), h.to(other)), otherDom, verletScale=1.2,
                           priorNeighborhood=adj) is not adj  # dtype changed
    # motion beyond the buffer (0.2 * 0.2 = 0.04): one particle moves by 0.05
    moved = pos.clone()
    moved[5, 0] += 0.05
    assert rebuilt(state=particles(moved, h))
    moved[5, 0] -= 0.04  # 2 x 0.01 < buffer
    assert not rebuilt(state=particles(moved, h))
    # support drift beyond the buffer
    assert rebuilt(state=particles(pos, h * 1.3))
    # verletScale 1.0: any motion rebuilds
    tight = buildVerletList(P, dom, verletScale=1.0)
    assert buildVerletList(P, dom, verletScale=1.0, priorNeighborhood=tight) is tight
    nudged = pos.clone()
    nudged[0, 1] += 1e-3
    assert buildVerletList(particles(nudged, h), dom, verletScale=1.0,
                           priorNeighborhood=tight) is not tight


def test_nonfinite_positions_rebuild_and_raise(device, dtype):
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    pos, h = randomCloud(20, 2, device, dtype, seed=3)
    adj = buildVerletList(particles(pos, h), dom, verletScale=1.3)
    bad = pos.clone()
    bad[2, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        buildVerletList(particles(bad, h), dom, verletScale=1.3, priorNeighborhood=adj)


def test_stored_positions_are_snapshots(device, dtype):
    """In-place updates of the caller's positions do not alter the list's build state."""
    dom = domain(-1.0, 1.0, (True,), device, dtype)
    pos, h = randomCloud(20, 1, device, dtype, seed=3)
    adj = buildVerletList(particles(pos, h), dom, verletScale=1.1)
    assert adj.queryPositions is adj.referencePositions  # aliasing kept
    pos += 0.5  # the caller's simulation step, in place
    assert buildVerletList(particles(pos, h), dom, verletScale=1.1, priorNeighborhood=adj) is not adj


def test_defer_verlet_checks(device, dtype):
    dom = domain(-1.0, 1.0, (True, True), device, dtype)
    pos, h = randomCloud(40, 2, device, dtype, seed=4, hMin=0.2, hMax=0.25)
    adj = buildVerletList(particles(pos, h), dom, verletScale=1.2)
    far = pos.clone()
    far[0, 0] += 0.3
    with census() as c, deferVerletChecks() as flags:
        a = buildVerletList(particles(pos, h), dom, verletScale=1.2, priorNeighborhood=adj)
        b = buildVerletList(particles(far, h), dom, verletScale=1.2, priorNeighborhood=adj)
    assert c.total == 0
    assert a is adj and b is adj  # returned unchanged
    assert len(flags) == 2 and all(f.dtype == torch.bool and f.shape == (1,) for f in flags)
    assert [bool(f) for f in flags] == [False, True]
    # nested scopes collect into the innermost list; outside, checks read back again
    with deferVerletChecks() as outer:
        with deferVerletChecks() as inner:
            buildVerletList(particles(pos, h), dom, verletScale=1.2, priorNeighborhood=adj)
        buildVerletList(particles(pos, h), dom, verletScale=1.2, priorNeighborhood=adj)
    assert len(inner) == 1 and len(outer) == 1
    # a host-known rebuild inside the scope happens eagerly and records a False flag
    with deferVerletChecks() as flags:
        fresh = buildVerletList(particles(pos, h), dom, verletScale=1.2)
    assert isinstance(fresh, AdjacencyList) and [bool(f) for f in flags] == [False]


@pytest.mark.parametrize("mode", ALL_MODES)
def test_filter_equals_fresh_search(device, dtype, dim, mode):
    dom = domain(-1.0, 1.0, (True,) * dim, device, dtype)
    q, hq = randomCloud(50, dim, device, dtype, seed=5, hMin=0.2, hMax=0.25)
    r, hr = randomCloud(35, dim, device, dtype, seed=6, hMin=0.2, hMax=0.25)
    adj = buildVerletList(particles(q, hq), dom, verletScale=SCALE, supportMode=mode,
                          referenceParticles=particles(r, hr))
    q2 = q + _motion(q.shape, 0.01, 1, device, dtype)
    tight = filterVerletList(particles(q2, hq), dom, adj, supportMode=mode,
                             referenceParticles=particles(r, hr))
    assertCSR(tight)
    fresh = radiusSearchCompactHashMap(particles(q2, hq), dom, mode=mode,
                                       referenceParticles=particles(r, hr))
    assert torch.equal(searchPairs(tight), searchPairs(fresh))
    assert tight.verletScale == 1.0 and tight.hashMap is None and tight.supportMode == mode
    assert tight.querySupports.data_ptr() == hq.data_ptr()  # current, unscaled
    # the buffered order is kept: tight pairs are a subsequence of the buffered row
    bufferedRows = {}
    for i, j in zip(adj.i.tolist(), adj.j.tolist()):
        bufferedRows.setdefault(i, []).append(j)
    for i, j in zip(tight.i.tolist(), tight.j.tolist()):
        row = bufferedRows[i]
        k = row.index(j)
        bufferedRows[i] = row[k + 1:]


def test_filter_validation_and_empty(device, dtype):
    dom = domain(-1.0, 1.0, (False,), device, dtype)
    pos, h = randomCloud(10, 1, device, dtype, seed=1)
    adj = buildVerletList(particles(pos, h), dom, verletScale=1.1)
    with pytest.raises(ValueError, match="numRows x numCols"):
        filterVerletList(particles(pos[:5], h[:5]), dom, adj)
    with pytest.raises(TypeError, match="AdjacencyList"):
        filterVerletList(particles(pos, h), dom, object())
    e = torch.zeros((0, 1), dtype=dtype, device=device)
    eh = torch.zeros(0, dtype=dtype, device=device)
    empty = buildVerletList(particles(e, eh), dom, verletScale=1.1)
    assert empty.numEdges == 0 and empty.numRows == 0
    with census() as c:
        tight = filterVerletList(particles(e, eh), dom, empty)
    assert c.total == 1 and tight.numEdges == 0
    with pytest.raises(ValueError, match="verletScale"):
        buildVerletList(particles(pos, h), dom, verletScale=0.9)
