"""Kinds masking: every one of the 15 `OperationDirection` modes on mixed
kinds (0, 1, 2, 3 cycling) against a masked float64 reference written from the table, for
Density and Interpolate, aliased and distinct reference sets, CSR and grid traversal; plus a
gradcheck per mode (masking is an `if`, never a `continue`, W73)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    GRADCHECK,
    cloud,
    densityReference,
    interpolateReference,
    leaves,
    makeDomain,
    marginCloud,
    masks,
    neighbourStructure,
    props,
)

from warpSPHCore import OperationDirection, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64


def _kinds(n, shift=0):
    return [(k + shift) % 4 for k in range(n)]


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("mode", list(OperationDirection), ids=lambda m: m.name)
def test_modes_forward(device, mode, traversal):
    dom = makeDomain(2, F64, device)
    q = cloud(16, 2, F64, device, seed=800, kinds=_kinds(16))
    r = cloud(13, 2, F64, device, seed=801, kinds=_kinds(13, shift=1))
    f = torch.linspace(-1.0, 2.0, 13 * 2, dtype=F64, device=device).reshape(13, 2)
    fq = torch.linspace(0.5, 1.5, 16 * 2, dtype=F64, device=device).reshape(16, 2)
    qm, rm = masks(mode, q.kinds.numpy(), r.kinds.numpy())
    # the configuration exercises both tests of the mode (unless the mode admits everything)
    assert qm.any()
    for reference in (None, r):
        adj = neighbourStructure(traversal, q, dom, reference)
        pd = props(operationMode=mode, supportMode=SupportScheme.MeanSymmetric)
        out = warpOperation(q, pd, dom, adjacency=adj, referenceParticles=reference)
        ref = densityReference(q, dom, pd, reference)
        np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)
        assert np.all(out.cpu().numpy()[~masks(mode, q.kinds.numpy(), q.kinds.numpy())[0]] == 0)
        values = f if reference is not None else fq
        pi = props(WarpOperation.Interpolate, operationMode=mode,
                   supportMode=SupportScheme.Gather)
        out = warpOperation(q, pi, dom, referenceValues=values, adjacency=adj,
                            referenceParticles=reference)
        ref = interpolateReference(q, dom, pi, values, reference)
        np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)


def test_modes_are_distinct(device):
    """Sanity: on mixed kinds the 15 modes give pairwise different Density outputs, except
    where the table makes them coincide — so a mode dispatched to the wrong branch fails."""
    dom = makeDomain(2, F64, device)
    q = cloud(16, 2, F64, device, seed=810, kinds=_kinds(16))
    outs = {m: warpOperation(q, props(operationMode=m), dom) for m in OperationDirection}
    refs = {m: densityReference(q, dom, props(operationMode=m)) for m in OperationDirection}
    for m in OperationDirection:
        np.testing.assert_allclose(outs[m].cpu().numpy(), refs[m], rtol=1e-12, atol=1e-12)
    distinct = {tuple(np.round(v, 10)) for v in refs.values()}
    assert len(distinct) == len(OperationDirection)


@pytest.mark.parametrize("mode", list(OperationDirection), ids=lambda m: m.name)
def test_modes_gradcheck(device, mode):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=820, domain=dom, kinds=_kinds(8))
    adj = neighbourStructure("csr", q, dom)
    pr = props(WarpOperation.Interpolate, operationMode=mode, supportMode=SupportScheme.Scatter)
    f = torch.linspace(-1.0, 1.0, 8, dtype=F64, device=device)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities, f)

    def fn(pos, h, m, rho, values):
        return warpOperation(ParticleState(pos, h, m, q.kinds, rho), pr, dom,
                             queryValues=values, adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
