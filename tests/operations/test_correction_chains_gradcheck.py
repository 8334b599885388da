"""Corrections built inside the graph (issue: "gradients flow
through their construction"): positions and supports -> `computeCRKFactors` (V, CRKState) ->
`computeRenormalizationMatrices` (with V and the CRK state) -> every value operator with
``referenceVolumes = V``, the CRK state and L, checked by a float64 gradcheck w.r.t. the
positions and supports of one frozen neighbour structure (1e-3 h support margin).

Also checks the forward of the chain against the same operators fed with the detached
correction tensors (the chain changes the derivatives, never the values).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import GRADCHECK, leaves, makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import (
    KernelFunctions,
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
    computeCRKFactors,
    computeRenormalizationMatrices,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
W = WarpOperation

CASES = [
    (W.Interpolate, {}, "scalar"),
    (W.Gradient, {}, "scalar"),
    (W.Divergence, {}, "vector"),
    (W.Curl, {}, "vector"),
    (W.Laplacian, {"laplacianMode": LaplacianScheme.Brookshaw}, "scalar"),
    (W.Laplacian, {"laplacianMode": LaplacianScheme.Dot}, "vector"),
    (W.Covariance, {}, None),
]


def _chain(op, kw, field, pos, h, q, dom, adj, detachCorrections=False):
    p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
    V, _, crk = computeCRKFactors(p, dom, KernelFunctions.Wendland2, adjacency=adj)
    # Gather with non-uniform supports: the CRK moments (Scatter) do not make C the identity,
    # so the renormalization stage is not trivial on top of CRK
    cov = props(W.Covariance, supportMode=SupportScheme.Gather)
    L = computeRenormalizationMatrices(p, cov, dom, referenceVolumes=V, adjacency=adj,
                                       crkState=crk, returnEigVals=False)
    if detachCorrections:
        V = V.detach()
        crk = type(crk)(*(t.detach() for t in (crk.A, crk.B, crk.gradA, crk.gradB)))
        L = L.renormalizationMatrices.detach()
    pr = props(op, supportMode=SupportScheme.Gather, **kw)
    values = {"scalar": torch.sin(2.0 * pos[:, 0]) + pos[:, 1] ** 2,
              "vector": torch.stack((pos[:, 0] * pos[:, 1], torch.cos(pos[:, 0])), dim=1),
              None: None}[field]
    renorm = None if op == W.Interpolate else L
    return warpOperation(p, pr, dom, queryValues=values, referenceVolumes=V, adjacency=adj,
                         crkState=crk, renormalizationState=renorm)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("op,kw,field", CASES,
                         ids=[f"{c[0].name}{c[1].get('laplacianMode', '')}" for c in CASES])
def test_crk_and_renormalization_built_in_graph(device, op, kw, field, traversal):
    if traversal == "grid" and op not in (W.Gradient, W.Laplacian):
        pytest.skip("grid traversal: representative operators only (CSR covers all)")
    dom = makeDomain(2, F64, device)
    q = marginCloud(9, 2, F64, device, seed=21, domain=dom, lo=-0.5, hi=0.5, hMean=0.8)
    adj = neighbourStructure(traversal, q, dom)
    pos, h = leaves(q.positions, q.supports)
    # the cloud is dense enough that no row falls back to an identity correction
    V, _, crk = computeCRKFactors(q, dom, KernelFunctions.Wendland2, adjacency=adj)
    assert ((crk.A - 1.0).abs() > 1e-3).all() and (crk.gradB.abs().sum(dim=(1, 2)) > 0).all()
    C, eig, _ = computeRenormalizationMatrices(q, props(W.Covariance), dom, referenceVolumes=V,
                                               adjacency=adj, crkState=crk)
    assert int(((eig - 1.0).abs() > 1e-3).any(dim=1).sum()) >= 5  # non-trivial L rows

    chained = _chain(op, kw, field, pos, h, q, dom, adj)
    frozen = _chain(op, kw, field, pos, h, q, dom, adj, detachCorrections=True)
    torch.testing.assert_close(chained, frozen, rtol=0, atol=0)
    assert torch.isfinite(chained).all()

    def fn(x, hh):
        return _chain(op, kw, field, x, hh, q, dom, adj)

    assert torch.autograd.gradcheck(fn, (pos, h), **GRADCHECK)
