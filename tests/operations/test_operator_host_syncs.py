"""No host synchronisation in operator calls (`autodiff.md` §15.1): the forward path
(extract, convert, build, launch) and the backward of all seven operators (with CRK, grad-h
and renormalization where they apply), with a CSR list, a prebuilt grid and `adjacency=None`
(the per-call grid build is sync-free), count zero readbacks. The census patches every
readback/synchronising call of §15.2 and is shown to count in
`tests/neighborhood/test_census.py`. (The whole-repository census with exact counts per module
is a later issue.)"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import torch
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import CRKState, WarpOperation
from warpSPHCore.operations import warpOperation

_spec = importlib.util.spec_from_file_location(
    "_census", pathlib.Path(__file__).resolve().parents[1] / "neighborhood" / "census.py")
_census = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_census)

F64 = torch.float64
OPS = [WarpOperation.Density, WarpOperation.Interpolate, WarpOperation.Gradient,
       WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian,
       WarpOperation.Covariance]
_VECTOR_OPS = (WarpOperation.Divergence, WarpOperation.Curl)


def _call(op, q, dom, adj, f, crk):
    kw = {}
    if op not in (WarpOperation.Density, WarpOperation.Covariance):
        kw["queryValues"] = f[:, None] * q.positions if op in _VECTOR_OPS else f
    if op != WarpOperation.Density:
        kw["crkState"] = crk
    if op in (WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian):
        kw["gradHState"] = f  # grad-h divides f_i and f_j: exercise the Omega reads too
        kw["renormalizationState"] = torch.eye(2, dtype=f.dtype, device=f.device).expand(
            f.shape[0], 2, 2).contiguous()
    out = warpOperation(q, props(op=op), dom, adjacency=adj, **kw)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("traversal", ["csr", "grid", "none"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_forward_and_backward_without_host_sync(device, op, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    n = q.positions.shape[0]
    f = torch.linspace(0.5, 1.5, n, dtype=F64, device=device)
    crk = CRKState(torch.ones(n, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, 2, dtype=F64, device=device))
    _call(op, q, dom, adj, f, crk)  # warm-up: compile outside the census
    with _census.census() as c:
        with torch.no_grad():
            _call(op, q, dom, adj, f, crk)
    assert c.total == 0, c.hits
    q.positions.requires_grad_(True)
    out = _call(op, q, dom, adj, f, crk)
    seed = torch.ones_like(out)
    with _census.census() as c:
        out = _call(op, q, dom, adj, f, crk)
        out.backward(seed)
    assert c.total == 0, c.hits
    assert q.positions.grad is not None


def test_census_counts_a_readback_here(device):
    t = torch.ones(3, device=device)
    with _census.census() as c:
        t.sum().item()
    assert c.total == 1


# --- forward mode (autodiff.md §15.1, §15.2) ----------------------------------------------


def _jvpCall(op, q, dom, adj, f, crk, route, v):
    """The JVP of `_call` in the direction v (positions) plus a value tangent, explicitly or
    through dual tensors; CRK and renormalization with their tangents where the scope admits
    them (no grad-h: geometry JVPs with grad-h are out of scope)."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import CRKTangentState, ParticleState, ParticleTangentState
    from warpSPHCore.operations import warpOperationJVP

    kw = {}
    values = None
    if op not in (WarpOperation.Density, WarpOperation.Covariance):
        values = f[:, None] * q.positions if op in _VECTOR_OPS else f
        kw["queryValues"] = values
    n, d = q.positions.shape
    L = torch.eye(d, dtype=f.dtype, device=f.device).expand(n, d, d).contiguous()
    corrected = op in (WarpOperation.Gradient, WarpOperation.Divergence, WarpOperation.Curl,
                       WarpOperation.Laplacian)
    if corrected:
        kw["crkState"] = crk
        kw["renormalizationState"] = L
    if route == "explicit":
        tk = {}
        if values is not None:
            tk["tangentQueryValues"] = torch.ones_like(values)
        if corrected:
            tk["crkTangentState"] = CRKTangentState(*(torch.ones_like(x) for x in (
                crk.A, crk.B, crk.gradA, crk.gradB)))
            tk["renormalizationTangentState"] = torch.ones_like(L)
        return warpOperationJVP(q, props(op=op), dom, adjacency=adj,
                                queryTangentState=ParticleTangentState(positions=v), **kw,
                                **tk)
    with fwAD.dual_level():
        p = ParticleState(fwAD.make_dual(q.positions, v), q.supports, q.masses, q.kinds,
                          q.densities)
        if values is not None:
            kw["queryValues"] = fwAD.make_dual(values, torch.ones_like(values))
        if corrected:
            kw["renormalizationState"] = fwAD.make_dual(L, torch.ones_like(L))
        out = warpOperation(p, props(op=op), dom, adjacency=adj, **kw)
        out = out[0] if isinstance(out, tuple) else out
        return fwAD.unpack_dual(out).tangent


@pytest.mark.parametrize("route", ["explicit", "dual"])
@pytest.mark.parametrize("traversal", ["csr", "none"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_forward_mode_host_syncs(device, op, traversal, route):
    """Explicit JVPs: 0 readbacks, forward and backward (reverse over forward); the dual route:
    exactly 1 (the batched liveness mask) per dual operator call, 0 in backward."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    n = q.positions.shape[0]
    f = torch.linspace(0.5, 1.5, n, dtype=F64, device=device)
    crk = CRKState(torch.ones(n, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, 2, dtype=F64, device=device))
    v = torch.cos(3.0 * q.positions)
    _jvpCall(op, q, dom, adj, f, crk, route, v)  # warm-up: compile outside the census
    with _census.census() as c:
        with torch.no_grad():
            out = _jvpCall(op, q, dom, adj, f, crk, route, v)
    assert float(out.abs().max()) > 0
    assert c.total == (1 if route == "dual" else 0), c.hits
    q.positions.requires_grad_(True)
    with _census.census() as c:
        out = _jvpCall(op, q, dom, adj, f, crk, route, v)
        out.backward(torch.ones_like(out))
    assert c.total == (1 if route == "dual" else 0), c.hits
    assert q.positions.grad is not None


def test_forward_mode_builders_and_hvp_host_syncs(device):
    """computeCRKFactorsJVP, computeRenormalizationMatricesJVP and warpOperationHVP: 0
    readbacks; a dual call whose outputs are all empty: 0 (no mask)."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import ParticleState, ParticleTangentState
    from warpSPHCore.corrections import (
        computeCRKFactorsJVP,
        computeRenormalizationMatricesJVP,
    )
    from warpSPHCore.operations import warpOperationHVP

    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=4, domain=dom, hMean=0.9)
    adj = neighbourStructure("csr", q, dom)
    qt = ParticleTangentState(positions=torch.cos(3.0 * q.positions),
                              supports=0.01 * torch.sin(q.supports))
    pr = props(op=WarpOperation.Density)
    calls = (
        lambda: computeCRKFactorsJVP(q, dom, pr.kernel, qt, adjacency=adj),
        lambda: computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj),
        lambda: warpOperationHVP(q, pr, dom, qt.positions, adjacency=adj),
    )
    for call in calls:
        call()
        with _census.census() as c:
            call()
        assert c.total == 0, c.hits
    empty = ParticleState(q.positions[:0], q.supports[:0], q.masses[:0], q.kinds[:0])
    with fwAD.dual_level():
        e = ParticleState(fwAD.make_dual(empty.positions, torch.ones_like(empty.positions)),
                          empty.supports, empty.masses, empty.kinds)
        warpOperation(e, pr, dom, referenceParticles=q)
        with _census.census() as c:
            out = warpOperation(e, pr, dom, referenceParticles=q)
    assert c.total == 0 and out.shape == (0,), c.hits
