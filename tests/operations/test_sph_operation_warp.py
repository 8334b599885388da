"""`sphOperation_warp` (flat-tensor adapter) equals `warpOperation` on the
same state, keeps its own defaults (Wendland4), and rejects flags that disagree with their
tensors."""

from __future__ import annotations

import pytest
import torch
from sph_reference import makeDomain, marginCloud, neighbourStructure

from warpSPHCore import (
    CRKState,
    KernelFunctions,
    OperationProperties,
    WarpOperation,
    sphOperation_warp,
    warpOperation,
)

F64 = torch.float64


def _flat(q, f, dom, adj, **kw):
    return sphOperation_warp(q.positions, q.positions, q.supports, q.supports, q.masses,
                             q.masses, q.densities, q.densities, f, f, dom, adjacency=adj,
                             queryKinds=q.kinds, referenceKinds=q.kinds, **kw)


@pytest.mark.parametrize("op", [WarpOperation.Interpolate, WarpOperation.Gradient,
                                WarpOperation.Density], ids=lambda o: o.name)
def test_adapter_equals_warp_operation(device, op):
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=4, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = torch.linspace(-1, 1, 12, dtype=F64, device=device)
    n = 12
    crk = CRKState(1 + 0.1 * torch.rand(n, dtype=F64, device=device),
                   0.1 * torch.rand(n, 2, dtype=F64, device=device),
                   0.1 * torch.rand(n, 2, dtype=F64, device=device),
                   0.1 * torch.rand(n, 2, 2, dtype=F64, device=device))
    vol = 0.01 + 0.05 * torch.rand(n, dtype=F64, device=device)
    useCRK = op != WarpOperation.Density
    out = _flat(q, f, dom, adj, operation=op, useVolume=True, referenceVolumes=vol,
                useCRK=useCRK, **(dict(crk_A=crk.A, crk_B=crk.B, crk_gradA=crk.gradA,
                                       crk_gradB=crk.gradB) if useCRK else {}))
    props = OperationProperties(KernelFunctions.Wendland4, operation=op)
    kw = dict(queryValues=f) if op != WarpOperation.Density else {}
    ref = warpOperation(q, props, dom, referenceVolumes=vol, adjacency=adj,
                        crkState=crk if useCRK else None, **kw)
    assert torch.equal(out, ref)


@pytest.mark.parametrize(
    "kw,pattern",
    [
        (dict(useVolume=True), "useVolume=True"),
        (dict(queryVolumes=torch.ones(6, dtype=F64)), "useVolume=False"),
        (dict(useCRK=True), "crk_A, crk_B is None"),
        (dict(crk_A=torch.ones(6, dtype=F64)), "useCRK=False"),
        (dict(useGradHTerms=True), "queryOmegas is None"),
        (dict(referenceOmegas=torch.ones(6, dtype=F64)), "useGradHTerms=False"),
        (dict(useGradientRenormalization=True), "renormalizationMatrices is None"),
    ],
)
def test_flags_must_agree_with_tensors(kw, pattern):
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(6, 2, F64, "cpu", seed=4, domain=dom)
    with pytest.raises(ValueError, match=pattern):
        _flat(q, torch.ones(6, dtype=F64), dom, None, **kw)


def test_kinds_are_required_keywords():
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(6, 2, F64, "cpu", seed=4, domain=dom)
    with pytest.raises(TypeError):
        sphOperation_warp(q.positions, q.positions, q.supports, q.supports, q.masses,
                          q.masses, q.densities, q.densities, None, None, dom)
