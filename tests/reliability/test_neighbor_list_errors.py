"""Neighbour structures with indices outside the particle sets.

* A list from the library's search, changed in place afterwards (``adj.j[0] = 10 * N``, a row
  range past the edge list), and a grid whose sorted index is changed: every operator,
  forward, backward and forward mode (explicit JVP), skips the bad entry -- the result equals
  the result on the list without that entry -- and ``checkErrors()`` raises
  `NeighborListError` naming the operator, the position and the bad index, once.
* The report rides on the readbacks the library already makes: the next neighbour search
  and the next dual-tensor call raise it, without an extra readback.
* ``setEagerErrorChecks(True)``: the call itself raises.
* Lists built from user tensors are checked on the device at construction (no readback):
  indices within the sets, counts >= 0, offsets the exclusive prefix sum of the counts,
  counts summing to E, each edge in its row; hypothesis fuzzes the mutations.
"""

from __future__ import annotations

import pathlib
import re
import sys

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "operations"))
from sph_reference import cloud, makeDomain, props  # noqa: E402

from warpSPHCore import (  # noqa: E402
    AdjacencyList,
    NeighborListError,
    ParticleTangentState,
    WarpOperation,
    buildCompactHashMap,
    checkErrors,
    computeCRKFactors,
    getNextPrime,
    radiusSearchCompactHashMap,
    setEagerErrorChecks,
    warpOperation,
    warpOperationJVP,
)
from warpSPHCore.util import errorFlags  # noqa: E402
from warpSPHCore.util import hostSyncCensus as _census  # noqa: E402

F64 = torch.float64
W = WarpOperation
OPS = (W.Density, W.Interpolate, W.Gradient, W.Divergence, W.Curl, W.Laplacian, W.Covariance)
LABELS = {W.Density: "Density", W.Interpolate: "Interpolate", W.Gradient: "Gradient",
          W.Divergence: "Divergence", W.Curl: "Curl", W.Laplacian: "Laplacian",
          W.Covariance: "Covariance"}
N = 30


@pytest.fixture(autouse=True)
def _cleanBuffers():
    for key in list(errorFlags._BUFFERS):
        errorFlags.resetErrors(key)
    previous = setEagerErrorChecks(False)
    yield
    setEagerErrorChecks(previous)
    for key in list(errorFlags._BUFFERS):
        errorFlags.resetErrors(key)


def _setup(device, d=2):
    dom = makeDomain(d, F64, device)
    p = cloud(N, d, F64, device, seed=3)
    adj = radiusSearchCompactHashMap(p, dom)
    return p, dom, adj


def _dropEdge(adj, e):
    """The same list without edge e: a valid user-built list (its construction check
    records nothing)."""
    keep = torch.ones(adj.numEdges, dtype=torch.bool, device=adj.device)
    keep[e] = False
    row = int(adj.i[e])
    counts = adj.numNeighbors.clone()
    counts[row] -= 1
    offsets = (torch.cumsum(counts.to(torch.int64), 0) - counts).to(torch.int32)
    return AdjacencyList(adj.i[keep].clone(), adj.j[keep].clone(), counts, offsets,
                         adj.numRows, adj.numCols)


def _copy(adj):
    """A library list's tensors copied (the original stays intact), as a list that the
    library built: changed in place afterwards, it is not re-checked."""
    from warpSPHCore.dataTypes.adjacency import trustedConstruction

    with trustedConstruction():
        return AdjacencyList(adj.i.clone(), adj.j.clone(), adj.numNeighbors.clone(),
                             adj.edgeOffsets.clone(), adj.numRows, adj.numCols)


def _kwargs(op, p, d):
    g = torch.Generator().manual_seed(7)
    if op in (W.Density, W.Covariance):
        return {}
    if op in (W.Interpolate, W.Gradient):
        shape = (2,)
    elif op == W.Curl and d == 1:
        shape = ()
    else:
        shape = (d,)
    vals = torch.randn((p.positions.shape[0],) + shape, generator=g, dtype=F64)
    return {"queryValues": vals.to(p.positions.device)}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _raised(pattern):
    """checkErrors() raises once with a message matching `pattern`, then is clean."""
    with pytest.raises(NeighborListError) as info:
        checkErrors()
    assert re.search(pattern, str(info.value)), str(info.value)
    checkErrors()  # reported once: the buffer was cleared
    return str(info.value)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_mutated_list_every_operator(device, op):
    p, dom, adj = _setup(device)
    e0 = int(torch.nonzero(adj.i != adj.j)[0, 0])  # a pair that contributes (not i = j)
    row = int(adj.i[e0])
    ref = _dropEdge(adj, e0)
    bad = _copy(adj)
    bad.j[e0] = 10 * N
    pr = props(op)
    kw = _kwargs(op, p, 2)

    # forward: the bad entry is skipped, nothing else changes
    out = _first(warpOperation(p, pr, dom, adjacency=bad, **kw))
    want = _first(warpOperation(p, pr, dom, adjacency=ref, **kw))
    assert torch.equal(out, want), op.name
    assert not torch.equal(out, _first(warpOperation(p, pr, dom, adjacency=adj, **kw)))
    msg = _raised(rf"warpOperation\({LABELS[op]}\).*j\[{e0}\] = {10 * N} \(query row {row}\)"
                  rf".*\[0, N_r = {N}\)")
    assert "skipped" in msg

    # backward (positions and values)
    def grads(a):
        x = p.positions.clone().requires_grad_(True)
        q = type(p)(x, p.supports, p.masses, p.kinds, p.densities)
        kk = {k: v.clone().requires_grad_(True) for k, v in kw.items()}
        o = _first(warpOperation(q, pr, dom, adjacency=a, **kk))
        w = torch.linspace(-1.0, 1.0, o.numel(), dtype=F64, device=o.device).reshape(o.shape)
        (o * w).sum().backward()
        return [x.grad] + [v.grad for v in kk.values()]

    gBad = grads(bad)
    _raised(rf"{LABELS[op]}.*j\[{e0}\] = {10 * N}")
    gRef = grads(ref)
    for a, b in zip(gBad, gRef):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)

    # forward mode: a position tangent (the Tier-2 JVP kernel)
    v = torch.randn(N, 2, generator=torch.Generator().manual_seed(1), dtype=F64).to(device)
    ts = ParticleTangentState(positions=v)
    jBad = warpOperationJVP(p, pr, dom, adjacency=bad, queryTangentState=ts, **kw)
    _raised(rf"warpOperationJVP\({LABELS[op]}\).*j\[{e0}\] = {10 * N}")
    jRef = warpOperationJVP(p, pr, dom, adjacency=ref, queryTangentState=ts, **kw)
    torch.testing.assert_close(jBad, jRef, rtol=1e-12, atol=1e-14)


def test_row_range_past_the_edge_list(device):
    p, dom, adj = _setup(device)
    bad = _copy(adj)
    E = adj.numEdges
    bad.numNeighbors[N - 1] = E + 50  # the last row reaches past the list: clamped
    out = warpOperation(p, props(W.Density), dom, adjacency=bad)
    assert torch.equal(out, warpOperation(p, props(W.Density), dom, adjacency=adj))
    _raised(rf"query row {N - 1} has edgeOffsets\[{N - 1}\] = \d+ and numNeighbors\[{N - 1}\] "
            rf"= {E + 50}, outside the edge list \[0, E = {E}\)")
    bad.edgeOffsets[3] = -7
    warpOperation(p, props(W.Density), dom, adjacency=bad)
    _raised(r"edgeOffsets\[3\] = -7")


def test_index_beyond_int32_is_not_wrapped(device):
    """2^32 + 1 must not be read as reference 1 (the index is compared in int64)."""
    p, dom, adj = _setup(device)
    ref = _dropEdge(adj, 5)
    bad = _copy(adj)
    bad.j[5] = 2**32 + 1
    out = warpOperation(p, props(W.Density), dom, adjacency=bad)
    assert torch.equal(out, warpOperation(p, props(W.Density), dom, adjacency=ref))
    _raised(rf"j\[5\] = {2**32 + 1}")


def test_mutated_grid(device):
    p, dom, _ = _setup(device)
    grid = buildCompactHashMap(p.positions, p.positions, p.supports, p.supports, dom.periodic,
                               dom, hashMapLength=getNextPrime(N))
    clean = warpOperation(p, props(W.Density), dom, adjacency=grid)
    grid.sortIndex[0] = -4
    out = warpOperation(p, props(W.Density), dom, adjacency=grid)
    assert torch.isfinite(out).all() and not torch.equal(out, clean)
    _raised(r"warpOperation\(Density\).*sortIndex\[0\] = -4 .*outside the reference set "
            rf"\[0, N_r = {N}\)")


def test_correction_builder_reports(device):
    p, dom, adj = _setup(device)
    bad = _copy(adj)
    bad.j[2] = -1
    computeCRKFactors(p, dom, props().kernel, adjacency=bad)
    _raised(r"computeCRKFactors.*j\[2\] = -1")


def test_reported_by_the_next_search_and_dual_call(device):
    p, dom, adj = _setup(device)
    bad = _copy(adj)
    bad.j[0] = 10 * N
    warpOperation(p, props(W.Density), dom, adjacency=bad)
    with _census.census() as c, pytest.raises(NeighborListError, match=r"Density.*j\[0\]"):
        radiusSearchCompactHashMap(p, dom)
    assert c.total == 1  # the search's own readback, nothing more
    radiusSearchCompactHashMap(p, dom)  # reported once; the search works again
    warpOperation(p, props(W.Density), dom, adjacency=bad)
    with fwAD.dual_level():
        x = fwAD.make_dual(p.positions, torch.ones_like(p.positions))
        q = type(p)(x, p.supports, p.masses, p.kinds, p.densities)
        with _census.census() as c, pytest.raises(NeighborListError, match=r"j\[0\]"):
            warpOperation(q, props(W.Density), dom, adjacency=adj)
    assert c.total == 1  # the dual call's liveness readback carried it
    checkErrors()


def test_eager_checks(device):
    p, dom, adj = _setup(device)
    bad = _copy(adj)
    bad.j[0] = 10 * N
    setEagerErrorChecks(True)
    with pytest.raises(NeighborListError, match=r"warpOperation\(Density\)"):
        warpOperation(p, props(W.Density), dom, adjacency=bad)
    with pytest.raises(NeighborListError, match=r"AdjacencyList built from user tensors"):
        AdjacencyList(bad.i, bad.j, bad.numNeighbors, bad.edgeOffsets, N, N)
    out = warpOperation(p, props(W.Density), dom, adjacency=adj)  # clean calls pass
    assert torch.isfinite(out).all()


def test_clean_calls_record_nothing(device):
    p, dom, adj = _setup(device)
    for op in OPS:
        warpOperation(p, props(op), dom, adjacency=adj, **_kwargs(op, p, 2))
    user = AdjacencyList(adj.i.clone(), adj.j.clone(), adj.numNeighbors.clone(),
                         adj.edgeOffsets.clone(), N, N)
    with _census.census() as c:
        AdjacencyList(adj.i, adj.j, adj.numNeighbors, adj.edgeOffsets, N, N)
    assert c.total == 0  # the construction check reads nothing back
    user.check()
    checkErrors()


# --------------------------------------------------------------------------------------
# user-built lists: every mutation is named
# --------------------------------------------------------------------------------------

_MUTATIONS = {
    "j-negative": r"neighbour index j\[{e}\] = -\d+ is outside the reference set",
    "j-too-large": r"neighbour index j\[{e}\] = \d+ is outside the reference set \[0, numCols",
    "i-too-large": r"query index i\[{e}\] = \d+ is outside the query set",
    "count-negative": r"numNeighbors\[\d+\] = -\d+ is negative",
    "first-offset": r"edgeOffsets\[0\] = [1-9]\d*; accepted: 0",
    "offsets-not-monotone": r"edgeOffsets\[\d+\] = -?\d+ but edgeOffsets\[\d+\] \+ "
                            r"numNeighbors\[\d+\] = \d+",
    "counts-sum": r"the rows end at .* = \d+ but the list has E = len\(i\) = \d+ edges",
    "row-of-edge": r"edge \d+ has i\[\d+\] = \d+ but row \d+'s range",
}


def _validList(rows, cols, counts):
    counts = torch.tensor(counts, dtype=torch.int32)
    offsets = (torch.cumsum(counts.to(torch.int64), 0) - counts).to(torch.int32)
    i = torch.repeat_interleave(torch.arange(rows, dtype=torch.int64), counts.to(torch.int64))
    g = torch.Generator().manual_seed(int(counts.sum()) + rows)
    j = torch.randint(0, cols, (int(counts.sum()),), generator=g, dtype=torch.int64)
    return i, j, counts, offsets


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(2, 6), cols=st.integers(1, 6), data=st.data(),
       kind=st.sampled_from(sorted(_MUTATIONS)))
def test_user_built_lists_fuzzed(rows, cols, data, kind):
    counts = data.draw(st.lists(st.integers(1, 4), min_size=rows, max_size=rows))
    i, j, c, off = _validList(rows, cols, counts)
    AdjacencyList(i, j, c, off, rows, cols).check()  # the valid list passes
    E = i.shape[0]
    e = data.draw(st.integers(0, E - 1))
    r = data.draw(st.integers(0, rows - 1))
    i, j, c, off = i.clone(), j.clone(), c.clone(), off.clone()
    if kind == "j-negative":
        j[e] = -data.draw(st.integers(1, 2**40))
    elif kind == "j-too-large":
        j[e] = cols + data.draw(st.integers(0, 2**40))
    elif kind == "i-too-large":
        i[e] = rows + data.draw(st.integers(0, 100))
    elif kind == "count-negative":
        c[r] = -data.draw(st.integers(1, 5))
    elif kind == "first-offset":
        off[0] = data.draw(st.integers(1, 5))
    elif kind == "offsets-not-monotone":
        r = max(r, 1)
        off[r] = off[r] + data.draw(st.sampled_from([-3, -1, 1, 2]))
    elif kind == "counts-sum":
        c[rows - 1] += data.draw(st.sampled_from([-1, 1, 3]))
        if c[rows - 1] < 0:
            c[rows - 1] = c[rows - 1] + 2
    elif kind == "row-of-edge":
        # move one edge's row label to another row (i no longer matches the ranges)
        i[e] = (i[e] + 1) % rows
    with pytest.raises(NeighborListError) as info:
        AdjacencyList(i, j, c, off, rows, cols).check()
    msg = str(info.value)
    assert "AdjacencyList built from user tensors is invalid" in msg
    pattern = _MUTATIONS[kind].format(e=e)
    # one mutation can break several checks; the first failing check in the documented
    # order is reported, so accept any message of the checks the mutation can trip
    alternatives = {
        "count-negative": ("offsets-not-monotone", "counts-sum", "row-of-edge"),
        "counts-sum": ("row-of-edge",),
        "i-too-large": (),
        "offsets-not-monotone": ("row-of-edge", "counts-sum"),
        "first-offset": (),
    }.get(kind, ())
    ok = [re.search(pattern, msg)] + [re.search(_MUTATIONS[k].format(e=r"\d+"), msg)
                                      for k in alternatives]
    assert any(ok), (kind, msg)
    checkErrors()  # reported once
