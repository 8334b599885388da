"""Forward mode and second derivatives with grad-h terms (f / Omega).

The Gradient divides f_j by Omega_j, the Divergence, Curl and Laplacian f_i and f_j by their
Omegas. With a `GradHState`, the explicit JVP (`warpOperationJVP`, the Omegas' tangents in a
`GradHState` as ``gradHTangentState``), the dual-tensor route and the double backward (which
runs the forward-mode rule) take tangents of positions, supports, densities, masses, values
and the Omegas together. Each is checked against J·v of the reverse-mode Jacobian and against
central differences (float64), with one Omega set serving both roles and with distinct query
and reference Omegas, on CSR lists and on the grid, in 2D and 3D; `gradgradcheck` with the
Omegas among the differentiated inputs; the Interpolate and the Covariance, which never read
Omega, ignore the state (their JVP is the one without it)."""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, checkJVP, dualJVP, randomTangents
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import (
    GradHState,
    GradientScheme,
    LaplacianScheme,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.operationsJVP import warpOperationJVP

F64 = torch.float64
KMS = SupportScheme.KernelMeanSymmetric
CASES = [
    (WarpOperation.Gradient, dict(gradientMode=GradientScheme.Difference), ()),
    (WarpOperation.Gradient, dict(gradientMode=GradientScheme.Symmetric), ()),
    (WarpOperation.Divergence, dict(gradientMode=GradientScheme.Naive), ("d",)),
    (WarpOperation.Divergence, dict(gradientMode=GradientScheme.Summation,
                                    divergenceDotMode=True), ("d",)),
    (WarpOperation.Curl, dict(gradientMode=GradientScheme.Difference), ("d",)),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Brookshaw), ()),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Dot,
                                   gradientMode=GradientScheme.Symmetric), ("d",)),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Default), ()),
]


def _ids(c):
    op, kw, _ = c
    return op.name + "".join(f"-{getattr(v, 'name', v)}" for v in kw.values())


def _setup(d, traversal, seed, device="cpu"):
    # periodic in 2D (ten particles of the 3D cloud have supports beyond half the box)
    dom = makeDomain(d, F64, device, periodic=d == 2)
    q = marginCloud(10, d, F64, device, seed=seed, domain=dom)
    return q, dom, neighbourStructure(traversal, q, dom)


def _omegas(n, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (0.8 + 0.4 * torch.rand(n, generator=g, dtype=F64)).to(device)


def _field(shape, n, d, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    full = (n,) + tuple(d if s == "d" else s for s in shape)
    return torch.randn(full, generator=g, dtype=F64).to(device)


# 2D: both traversals, shared and distinct Omegas; 3D: the CSR list, distinct Omegas
LAYOUTS = [(2, "csr", False), (2, "grid", True), (2, "csr", True), (3, "csr", True)]


@pytest.mark.parametrize("layout", LAYOUTS,
                         ids=[f"{d}d-{t}-{'distinct' if x else 'shared'}" for d, t, x in LAYOUTS])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_gradh_jvp_matches_jacobian_and_differences(device, case, layout):
    op, kw, shape = case
    d, traversal, distinct = layout
    seed = 300 + 7 * d + (traversal == "grid") + 2 * distinct
    q, dom, adj = _setup(d, traversal, seed, device)
    pr = props(op, supportMode=KMS, **kw)
    n = q.positions.shape[0]
    f = _field(shape, n, d, seed + 1, device)
    oq = _omegas(n, seed + 2, device)
    orf = _omegas(n, seed + 3, device) if distinct else None

    def fn(x, h, rho, v, oq, *orf):
        state = ParticleState(x, h, q.masses, q.kinds, rho)
        return warpOperation(state, pr, dom, queryValues=v, adjacency=adj,
                             gradHState=GradHState(oq, orf[0] if orf else None))

    inputs = [q.positions, q.supports, q.densities, f, oq] + ([orf] if distinct else [])
    tangents = randomTangents(inputs, seed + 4, scales=[1e-1, 1e-2, 1e-1, 1.0, 1e-1, 1e-1])
    tH = GradHState(tangents[4], tangents[5] if distinct else None)
    explicit = warpOperationJVP(
        q, pr, dom, queryValues=f, adjacency=adj, gradHState=GradHState(oq, orf),
        queryTangentState=ParticleTangentState(positions=tangents[0], supports=tangents[1],
                                               densities=tangents[2]),
        tangentQueryValues=tangents[3], gradHTangentState=tH)
    assert explicit.abs().max() > 0
    checkJVP(fn, inputs, tangents, explicit, what=f"{op.name} grad-h")
    assertClose(dualJVP(fn, inputs, tangents), explicit, rtol=1e-12, atol=1e-13,
                what="dual route")
    # the Omegas' tangent alone: the share of d(f / Omega)
    alone = [None] * 4 + tangents[4:]
    onlyOmega = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                                 gradHState=GradHState(oq, orf), gradHTangentState=tH)
    checkJVP(fn, inputs, alone, onlyOmega, what=f"{op.name} Omega tangents")


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("case", CASES[::2], ids=_ids)
def test_gradh_gradgradcheck(device, case, traversal):
    """Second derivatives with the Omegas, positions and values all differentiated."""
    op, kw, shape = case
    q, dom, adj = _setup(2, traversal, 40, device)
    pr = props(op, supportMode=KMS, **kw)
    n = q.positions.shape[0]

    def fn(x, v, oq):
        state = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
        return warpOperation(state, pr, dom, queryValues=v, adjacency=adj, gradHState=oq)

    leaves = tuple(t.detach().clone().requires_grad_(True) for t in (
        q.positions, _field(shape, n, 2, 41, device), _omegas(n, 42, device)))
    # the Laplacian's second derivatives reach 1e6 on this cloud: central differences of
    # the first-order gradients then carry absolute errors near 1e-3 (1e-9 relative)
    atol = 1e-2 if op == WarpOperation.Laplacian else 1e-6
    assert torch.autograd.gradgradcheck(fn, leaves, eps=1e-6, atol=atol, rtol=1e-5,
                                        nondet_tol=1e-12)


@pytest.mark.parametrize("op", [WarpOperation.Interpolate, WarpOperation.Covariance],
                         ids=lambda o: o.name)
def test_operators_without_omega_ignore_the_state(op):
    """The Interpolate and the Covariance never read Omega: a geometry JVP with a
    `GradHState` (and its tangent) equals the one without it."""
    q, dom, adj = _setup(2, "csr", 50)
    pr = props(op, supportMode=KMS)
    n = q.positions.shape[0]
    kw = dict(queryValues=_field((), n, 2, 51)) if op == WarpOperation.Interpolate else {}
    t = ParticleTangentState(positions=randomTangents([q.positions], 52)[0])
    om = _omegas(n, 53)
    with_ = warpOperationJVP(q, pr, dom, adjacency=adj, queryTangentState=t, gradHState=om,
                             gradHTangentState=GradHState(torch.ones_like(om)), **kw)
    without = warpOperationJVP(q, pr, dom, adjacency=adj, queryTangentState=t, **kw)
    assert without.abs().max() > 0
    assert torch.equal(with_, without)


def test_gradh_tangent_errors():
    q, dom, adj = _setup(2, "csr", 60)
    pr = props(WarpOperation.Gradient)
    f = _field((), q.positions.shape[0], 2, 61)
    om = _omegas(q.positions.shape[0], 62)
    with pytest.raises(ValueError, match="gradHTangentState given without gradHState"):
        warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                         gradHTangentState=GradHState(om))
    with pytest.raises(ValueError, match=r"gradHTangentState.queryOmegas has shape \(3,\)"):
        warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj, gradHState=om,
                         gradHTangentState=GradHState(om[:3]))
    with pytest.raises(ValueError, match="has no referenceOmegas"):
        warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj, gradHState=om,
                         gradHTangentState=GradHState(om, om))
    # a tangent on the query Omegas only, with distinct reference Omegas: those stay frozen
    x = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                         gradHState=GradHState(om, om * 1.1),
                         gradHTangentState=GradHState(torch.ones_like(om)))
    # the Gradient divides f_j only: a query Omega tangent changes nothing
    assert float(x.abs().max()) == 0.0
