"""Interpolate reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. positions, supports, masses, densities, values, reference volumes
and the CRK A, B.

Matrix: every support scheme x {none, volumes, CRK} (2D, CSR, aliased, scalar field); grid
and on-the-fly traversals with vector fields; distinct and cloned reference sets with
matrix fields and calibration; periodic; 1D and 3D; coincident points with CRK.
Neighbour structures are frozen (built once from detached positions, 1e-3 h margin).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
)

from warpSPHCore import CRKState, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64
INTERP = WarpOperation.Interpolate


def _field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=g, dtype=F64).to(device)


def _crk(n, d, device, seed):
    g = torch.Generator().manual_seed(seed)
    A = 1.0 + 0.2 * torch.rand(n, generator=g, dtype=F64)
    B = 0.3 * torch.randn(n, d, generator=g, dtype=F64)
    return A.to(device), B.to(device)


def _aliasedCheck(q, dom, pr, traversal, shape=(), correction="none"):
    n, d = q.positions.shape
    adj = neighbourStructure(traversal, q, dom)
    f = _field(n, shape, q.positions.device, seed=1)
    vol = 0.05 + 0.1 * torch.rand(n, generator=torch.Generator().manual_seed(2), dtype=F64)
    A, B = _crk(n, d, q.positions.device, seed=3)
    base = [q.positions, q.supports, q.masses, q.densities, f]
    if correction == "volumes":
        base.append(vol.to(q.positions.device))
    elif correction == "crk":
        base += [A, B]
    inputs = leaves(*base)

    def fn(pos, h, m, rho, values, *corr):
        p = ParticleState(pos, h, m, q.kinds, rho)
        kw = {}
        if correction == "volumes":
            kw["queryVolumes"] = corr[0]
        elif correction == "crk":
            kw["crkState"] = CRKState(corr[0], corr[1])
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj, **kw)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _distinctCheck(q, r, dom, pr, traversal, shape, volumes=True, crk=True):
    nq, d = q.positions.shape
    nr = r.positions.shape[0]
    dev = q.positions.device
    adj = neighbourStructure(traversal, q, dom, r)
    f = _field(nr, shape, dev, seed=4)
    vol = (0.05 + 0.1 * torch.rand(nr, generator=torch.Generator().manual_seed(5),
                                   dtype=F64)).to(dev)
    A, B = _crk(nq, d, dev, seed=6)
    inputs = leaves(q.positions, q.supports, r.positions, r.supports, r.masses, r.densities, f,
                    vol, A, B)

    def fn(qp, qh, rp, rh, rm, rrho, values, rv, a, b):
        query = ParticleState(qp, qh, q.masses, q.kinds, q.densities)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        return warpOperation(query, pr, dom, referenceValues=values, adjacency=adj,
                             referenceParticles=ref,
                             referenceVolumes=rv if volumes else None,
                             crkState=CRKState(a, b) if crk else None)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("correction", ["none", "volumes", "crk"])
@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_interpolate_gradcheck_schemes(device, scheme, correction):
    dom = makeDomain(2, F64, device)
    q = marginCloud(9, 2, F64, device, seed=100, domain=dom)
    _aliasedCheck(q, dom, props(INTERP, supportMode=scheme), "csr", (), correction)


@pytest.mark.parametrize("traversal", ["grid", "none"])
def test_interpolate_gradcheck_traversals(device, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(9, 2, F64, device, seed=110, domain=dom)
    pr = props(INTERP, supportMode=SupportScheme.PartialSymmetric)
    _aliasedCheck(q, dom, pr, traversal, (2,), "crk")


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
def test_interpolate_gradcheck_distinct(device, cloned, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(7, 8, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    pr = props(INTERP, supportMode=SupportScheme.MeanSymmetric, n_h=3.0,
               calibrateNormalization=True)
    _distinctCheck(q, r, dom, pr, traversal, (2, 2))


def test_interpolate_gradcheck_densities_distinct(device):
    """V_j = m_j / rho_j on a distinct reference set (no volumes)."""
    dom = makeDomain(2, F64, device)
    q, r = marginPair(7, 8, 2, F64, device, seed=210, domain=dom)
    _distinctCheck(q, r, dom, props(INTERP, supportMode=SupportScheme.Scatter), "csr", (),
                   volumes=False, crk=False)


def test_interpolate_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(9, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    _aliasedCheck(q, dom, props(INTERP, supportMode=SupportScheme.SuperSymmetric), "grid", (2,),
                  "crk")


@pytest.mark.parametrize("dim, traversal, shape", [(1, "csr", ()), (3, "none", (3,))])
def test_interpolate_gradcheck_dimensions(device, dim, traversal, shape):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(6, 7, dim, F64, device, seed=400, domain=dom)
    _distinctCheck(q, r, dom, props(INTERP, supportMode=SupportScheme.KernelMeanSymmetric),
                   traversal, shape)


def test_interpolate_gradcheck_coincident_crk(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    _aliasedCheck(c, dom, props(INTERP, supportMode=SupportScheme.Gather), "csr", (), "crk")


@pytest.mark.parametrize("op", [WarpOperation.Density, INTERP], ids=lambda o: o.name)
def test_grid_gradients_equal_csr(device, op):
    """Grid traversal (nested loop, W72) and CSR give the same gradients, value by value."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    f = _field(12, (3,), q.positions.device, seed=7)
    vol = torch.full((12,), 0.15, dtype=F64, device=device)
    A, B = _crk(12, 2, q.positions.device, seed=8)
    grads = {}
    for traversal in TRAVERSALS:
        adj = neighbourStructure(traversal, q, dom)
        inputs = leaves(q.positions, q.supports, q.masses, f, vol, A, B)
        pos, h, m, values, v, a, b = inputs
        p = ParticleState(pos, h, m, q.kinds, q.densities)
        pr = props(op, supportMode=SupportScheme.KernelMeanSymmetric)
        if op == WarpOperation.Density:
            out = warpOperation(p, pr, dom, adjacency=adj)
        else:
            out = warpOperation(p, pr, dom, queryValues=values, queryVolumes=v, adjacency=adj,
                                crkState=CRKState(a, b))
        w = torch.linspace(0.3, 1.7, out.numel(), dtype=F64, device=device).reshape(out.shape)
        (out * w).sum().backward()
        grads[traversal] = [t.grad for t in inputs]
    for traversal in ("grid", "none"):
        for g0, g1 in zip(grads["csr"], grads[traversal]):
            if g0 is None:
                assert g1 is None or torch.equal(g1, torch.zeros_like(g1))
            else:
                torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-13)
