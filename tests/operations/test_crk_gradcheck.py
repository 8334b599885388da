"""`computeCRKFactors` reverse mode: float64 gradcheck of every output (V, rho_CRK, A, B,
gradA, gradB) w.r.t. positions and supports, aliased and distinct
reference sets, CSR / grid / on-the-fly traversals, 1D/2D/3D (tiny), clouds with limited rows
(count < 2 and collinear neighbours; invertible m2 but singular full moment matrix), and CRK
built inside the graph and chained into `warpOperation(Gradient)`. Neighbourhoods are frozen
(1e-3 h margin from every threshold).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    cloud,
    leaves,
    makeDomain,
    neighbourStructure,
    props,
    supportMargin,
)
from test_crk import SINGULAR_CASES, limiterCloud, singularMomentCase

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.corrections import computeCRKFactors
from warpSPHCore.operations import warpOperation

F64 = torch.float64
W2 = KernelFunctions.Wendland2


def _outputs(res):
    V, rho, crk = res
    return V, rho, crk.A, crk.B, crk.gradA, crk.gradB


def _frozenPair(nq, nr, d, device, seed, dom, hMean, margin=1e-3):
    """(query, reference) whose q-q, q-r and r-r pairs all keep `margin` h from every
    support threshold, and whose CRK rows are well conditioned (|A| < 20: no row whose
    moment system is nearly singular without being limited)."""
    for s in range(seed, seed + 400):
        q = cloud(nq, d, F64, device, s, hMean=hMean)
        r = cloud(nr, d, F64, device, s + 1000, hMean=hMean)
        if (supportMargin(q, dom) > margin and supportMargin(q, dom, r) > margin
                and supportMargin(r, dom) > margin):
            A = [computeCRKFactors(q, dom, W2, referenceState=ref)[2].A for ref in (None, r)]
            if max(float(a.abs().max()) for a in A) < 20.0:
                return q, r
    raise AssertionError("no frozen clouds")


@pytest.mark.parametrize("dim, traversal, n", [(1, "none", 5), (2, "csr", 7), (3, "grid", 6)])
def test_crk_gradcheck_aliased(device, dim, traversal, n):
    dom = makeDomain(dim, F64, device)
    q, _ = _frozenPair(n, 1, dim, device, 10 * dim, dom, hMean={1: 0.9, 2: 1.1, 3: 1.5}[dim])
    adj = neighbourStructure(traversal, q, dom)

    def fn(pos, h):
        p = ParticleState(pos, h, q.masses, q.kinds)
        return _outputs(computeCRKFactors(p, dom, W2, adjacency=adj))

    assert torch.autograd.gradcheck(fn, leaves(q.positions, q.supports), **GRADCHECK)


@pytest.mark.parametrize("dim, traversal", [(2, "grid"), (2, "none"), (1, "csr")])
def test_crk_gradcheck_distinct(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q, r = _frozenPair(5, 9, dim, device, 100 + dim, dom, hMean={1: 1.0, 2: 1.2}[dim])
    adj = neighbourStructure(traversal, q, dom, r)
    radj = neighbourStructure(traversal, r, dom)

    def fn(qp, qh, rp, rh, rm):
        query = ParticleState(qp, qh, q.masses, q.kinds)
        ref = ParticleState(rp, rh, rm, r.kinds)
        return _outputs(computeCRKFactors(query, dom, W2, adjacency=adj, referenceState=ref,
                                          referenceAdjacency=radj))

    inputs = leaves(q.positions, q.supports, r.positions, r.supports, r.masses)
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_crk_gradcheck_limited_rows(device):
    """An isolated particle (count < 2) and a collinear triple (singular m2) among regular
    rows. The y coordinates of the collinear particles are held fixed (moving them off the
    line would cross the limiter threshold, a non-smooth switch); everything else is free."""
    dom = makeDomain(2, F64, device)
    p, iso, line = limiterCloud(device)
    adj = neighbourStructure("csr", p, dom)
    fixed = torch.zeros(p.positions.shape, dtype=torch.bool, device=device)
    fixed[line, 1] = True
    base = p.positions.detach()

    def fn(pos, h):
        pos = torch.where(fixed, base, pos)
        q = ParticleState(pos, h, p.masses, p.kinds)
        return _outputs(computeCRKFactors(q, dom, W2, adjacency=adj))

    assert torch.autograd.gradcheck(fn, leaves(p.positions, p.supports), **GRADCHECK)


@pytest.mark.parametrize("case, dim, traversal", [(c, d, t) for (c, d), t in zip(
    SINGULAR_CASES, ("grid", "csr", "none", "csr"))])
def test_crk_gradcheck_singular_moment_rows(device, case, dim, traversal):
    """Query row 0 with an invertible m2 but a singular full moment matrix (limiter deviation,
    `crk.py` module doc) among regular rows. Every coordinate is free: a perturbation keeps
    the row singular (same in-support neighbour count, no self pair), hence limited, so the
    function is smooth; the row's outputs are constants."""
    dom = makeDomain(dim, F64, device)
    q, r, mode, _ = singularMomentCase(case, device)
    assert supportMargin(q, dom, r) > 1e-3
    assert r is None or supportMargin(r, dom) > 1e-3
    adj = neighbourStructure(traversal, q, dom, r)
    radj = None if r is None else neighbourStructure(traversal, r, dom)

    def fn(qp, qh, *rest):
        query = ParticleState(qp, qh, q.masses, q.kinds)
        ref = None if r is None else ParticleState(*rest, r.kinds)
        out = _outputs(computeCRKFactors(query, dom, W2, operationMode=mode, adjacency=adj,
                                         referenceState=ref, referenceAdjacency=radj))
        assert out[2][0] == 1.0
        return out

    inputs = leaves(q.positions, q.supports)
    if r is not None:
        inputs += leaves(r.positions, r.supports, r.masses)
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("traversal", ["csr", "none"])
def test_crk_gradcheck_chained_into_gradient(device, traversal):
    """CRK built inside the graph (positions, supports -> V, CRKState) and used by a
    Scatter Naive Gradient with referenceVolumes = V: gradients flow through construction."""
    dom = makeDomain(2, F64, device)
    q, _ = _frozenPair(7, 1, 2, device, 300, dom, hMean=1.1)
    adj = neighbourStructure(traversal, q, dom)
    f = torch.linspace(0.5, 1.5, 7, dtype=F64, device=device)
    pr = props(WarpOperation.Gradient, supportMode=SupportScheme.Scatter)

    def fn(pos, h, values):
        p = ParticleState(pos, h, q.masses, q.kinds)
        V, _, crk = computeCRKFactors(p, dom, W2, adjacency=adj)
        return warpOperation(p, pr, dom, queryValues=values, referenceVolumes=V,
                             adjacency=adj, crkState=crk)

    assert torch.autograd.gradcheck(fn, leaves(q.positions, q.supports, f), **GRADCHECK)
