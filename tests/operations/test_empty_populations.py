"""Empty populations, every route at once: all seven operators x {zero
queries, zero references, both} x {CSR list, prebuilt grid, ``adjacency=None``} x 1D/2D/3D.

* the primal keeps the operator's trailing axes for zero queries, and gives finite zeros
  for zero references (plain and with every correction the operator accepts);
* reverse mode: ``backward`` works, gradients are zero or empty;
* forward mode: the explicit `warpOperationJVP` gives zeros of the primal's shape, and the
  dual-tensor route a shape-correct zero tangent, with no readback at all when the output is
  empty (the liveness mask is skipped) and exactly one otherwise;
* the Density HVP and the correction builders (and their JVPs) on empty sets: zeros of the
  right shapes, CRK volume and density 0 where their normalising sums are 0, identity
  corrections kept (the renormalization fallback with zero tangent).
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import TRAVERSALS, cloud, makeDomain, neighbourStructure, props

from warpSPHCore import (
    CRKState,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
    computeCRKFactors,
    computeCRKFactorsJVP,
    computeRenormalizationMatrices,
    computeRenormalizationMatricesJVP,
)
from warpSPHCore.operations import warpOperation, warpOperationHVP, warpOperationJVP
from warpSPHCore.util import hostSyncCensus as _census

F64 = torch.float64
W = WarpOperation
OPS = (W.Density, W.Interpolate, W.Gradient, W.Divergence, W.Curl, W.Laplacian, W.Covariance)
POPULATIONS = {"no-queries": (0, 5), "no-references": (5, 0), "both-empty": (0, 0)}


def _fieldShape(op, d):
    """A field shape the operator accepts in dimension d (None: no values)."""
    if op in (W.Density, W.Covariance):
        return None
    if op in (W.Interpolate, W.Gradient):
        return (2,)
    if op == W.Curl and d == 1:
        return ()
    return (d,)


def _expectedShape(op, n, d, shape):
    if op == W.Density:
        return (n,)
    if op == W.Covariance:
        return (n, d, d)
    if op == W.Gradient:
        return (n,) + shape + (d,)
    if op == W.Divergence:
        return (n,)
    if op == W.Curl:
        return (n,) if d == 1 else ((n, 1) if d == 2 else (n, 3))
    return (n,) + shape


def _corrections(op, nq, nr, d, device):
    """Every correction state the operator accepts, sized for the populations."""
    if op == W.Density:
        return {}
    kw = {"referenceVolumes": torch.full((nr,), 0.1, dtype=F64, device=device),
          "crkState": CRKState(torch.ones(nq, dtype=F64, device=device),
                               torch.zeros(nq, d, dtype=F64, device=device),
                               torch.zeros(nq, d, dtype=F64, device=device),
                               torch.zeros(nq, d, d, dtype=F64, device=device))}
    if op != W.Interpolate:
        kw["renormalizationState"] = torch.eye(d, dtype=F64, device=device).expand(
            nq, d, d).contiguous()
    return kw


def _sets(nq, nr, d, device):
    q = cloud(max(nq, 1), d, F64, device, seed=1)
    r = cloud(max(nr, 1), d, F64, device, seed=2)

    def cut(p, n):
        return ParticleState(p.positions[:n].contiguous(), p.supports[:n].contiguous(),
                             p.masses[:n].contiguous(), p.kinds[:n].contiguous(),
                             p.densities[:n].contiguous())

    return cut(q, nq), cut(r, nr)


@pytest.mark.parametrize("corrected", [False, True], ids=["plain", "corrected"])
@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("population", list(POPULATIONS))
def test_every_operator_and_route(device, dim, population, traversal, corrected):
    nq, nr = POPULATIONS[population]
    dom = makeDomain(dim, F64, device)
    q, r = _sets(nq, nr, dim, device)
    adj = neighbourStructure(traversal, q, dom, r)
    for op in OPS:
        shape = _fieldShape(op, dim)
        kw = _corrections(op, nq, nr, dim, device) if corrected else {}
        if shape is not None:
            kw["queryValues"] = torch.ones((nq,) + shape, dtype=F64, device=device)
            kw["referenceValues"] = torch.ones((nr,) + shape, dtype=F64, device=device)
        pr = props(op)
        expected = _expectedShape(op, nq, dim, shape)

        # primal
        out = warpOperation(q, pr, dom, adjacency=adj, referenceParticles=r, **kw)
        out = out[0] if isinstance(out, tuple) else out
        assert tuple(out.shape) == expected, (op.name, out.shape, expected)
        assert torch.equal(out, torch.zeros_like(out)), op.name

        # reverse mode
        x = q.positions.clone().requires_grad_(True)
        y = r.positions.clone().requires_grad_(True)
        pq = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
        pr_ = ParticleState(y, r.supports, r.masses, r.kinds, r.densities)
        o = warpOperation(pq, pr, dom, adjacency=adj, referenceParticles=pr_, **kw)
        o = o[0] if isinstance(o, tuple) else o
        o.sum().backward()
        for t in (x, y):
            assert t.grad is None or (t.grad.shape == t.shape
                                      and torch.equal(t.grad, torch.zeros_like(t))), op.name

        # forward mode: explicit JVP (geometry tangents; value tangents where there are values)
        jkw = {k: v for k, v in kw.items()
               if not (op == W.Interpolate and k == "renormalizationState")}
        tk = dict(queryTangentState=ParticleTangentState(
            positions=torch.ones_like(q.positions)),
            referenceTangentState=ParticleTangentState(
                positions=torch.ones_like(r.positions)))
        if shape is not None:
            tk["tangentQueryValues"] = torch.ones_like(kw["queryValues"])
        jvp = warpOperationJVP(q, pr, dom, adjacency=adj, referenceParticles=r, **jkw, **tk)
        assert tuple(jvp.shape) == expected and torch.equal(jvp, torch.zeros_like(jvp)), op.name

        # dual route: a shape-correct zero tangent; no readback for an empty output
        with fwAD.dual_level():
            dq = ParticleState(fwAD.make_dual(q.positions, torch.ones_like(q.positions)),
                               q.supports, q.masses, q.kinds, q.densities)
            with _census.census() as c:
                o = warpOperation(dq, pr, dom, adjacency=adj, referenceParticles=r, **jkw)
            o = o[0] if isinstance(o, tuple) else o
            tangent = fwAD.unpack_dual(o).tangent
        assert tangent is not None and tuple(tangent.shape) == expected, op.name
        assert torch.equal(tangent, torch.zeros_like(tangent)), op.name
        assert c.total == (0 if nq == 0 else 1), (op.name, c.sites)


@pytest.mark.parametrize("population", list(POPULATIONS))
def test_hvp_and_builders(device, dim, population):
    nq, nr = POPULATIONS[population]
    dom = makeDomain(dim, F64, device)
    q, r = _sets(nq, nr, dim, device)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(W.Density)
    hv = warpOperationHVP(q, pr, dom, torch.ones_like(q.positions), adjacency=adj,
                          referenceParticles=r)
    assert hv.shape == (nq, dim) and torch.equal(hv, torch.zeros_like(hv))

    # CRK: V on R is 0 where its sum is 0 (no reference, or every reference alone), the
    # correction of a query without neighbours is the identity (A = 1, B = 0, ...)
    radj = neighbourStructure("csr", r, dom)
    V, rho, crk = computeCRKFactors(q, dom, pr.kernel, adjacency=adj, referenceState=r,
                                    referenceAdjacency=radj)
    assert V.shape == (nr,) and rho.shape == (nq,) and torch.equal(rho, torch.zeros_like(rho))
    assert torch.equal(crk.A, torch.ones_like(crk.A))
    for t in (crk.B, crk.gradA, crk.gradB):
        assert torch.equal(t, torch.zeros_like(t))
    qt = ParticleTangentState(positions=torch.ones_like(q.positions))
    rt = ParticleTangentState(positions=torch.ones_like(r.positions))
    _, dV, _, dcrk = computeCRKFactorsJVP(q, dom, pr.kernel, qt, adjacency=adj,
                                          referenceState=r, referenceTangentState=rt,
                                          referenceAdjacency=radj)
    for t in (dV, dcrk.A, dcrk.B, dcrk.gradA, dcrk.gradB):
        assert torch.equal(t, torch.zeros_like(t))

    # renormalization: the identity fallback with a zero tangent
    C, _, L = computeRenormalizationMatrices(q, pr, dom, adjacency=adj, referenceParticles=r)
    eye = torch.eye(dim, dtype=F64, device=device).expand(nq, dim, dim)
    assert torch.equal(C, eye) and torch.equal(L.renormalizationMatrices, eye)
    _, _, _, dL = computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj,
                                                    referenceParticles=r,
                                                    referenceTangentState=rt)
    assert torch.equal(dL.renormalizationMatrices,
                       torch.zeros_like(dL.renormalizationMatrices))
