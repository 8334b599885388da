"""Covariance forward values and neighbour counts
against the independent float64 reference `sph_reference.covarianceReference`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    covarianceReference,
    makeDomain,
    neighbourStructure,
    props,
    randomCorrections,
    tolerances,
)

from warpSPHCore import (
    CRKState,
    DomainDescription,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation

COV = WarpOperation.Covariance
TV_COVARIANCE_ROW0 = [[2.5270979797, 0.3280366174], [0.3280366174, 3.0261021865]]
CORRECTIONS = ("none", "volumes", "crk", "renorm", "crk+renorm+volumes+gradH")


def _call(q, pr, dom, reference, adj, corr, c):
    vol = c["vol"] if "volumes" in corr else None
    crk = c["crk"] if "crk" in corr else None
    L = c["L"] if "renorm" in corr else None
    gh = c["omegas"] if "gradH" in corr else None
    if gh is not None:
        gh = (torch.ones(q.positions.shape[0], dtype=gh.dtype, device=gh.device), gh)
    C, n = warpOperation(q, pr, dom, referenceVolumes=vol, adjacency=adj,
                         referenceParticles=reference,
                         crkState=None if crk is None else CRKState(*crk), gradHState=gh,
                         renormalizationState=L, covarianceReturnNumNeighbors=True)
    return (C, n), covarianceReference(q, dom, pr, reference, vol, crk, L)


def test_covariance_test_vector(device):
    cast = dict(dtype=torch.float64, device=device)
    p = ParticleState(torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.25, 0.35]], **cast),
                      torch.tensor([1.0, 0.8, 1.2, 0.9], **cast),
                      torch.tensor([1.0, 2.0, 1.5, 0.5], **cast),
                      torch.zeros(4, dtype=torch.int32, device=device),
                      torch.tensor([1.0, 1.2, 0.9, 1.1], **cast))
    dom = DomainDescription(torch.tensor([-2.0, -2.0], **cast), torch.tensor([2.0, 2.0], **cast),
                            [False, False])
    C, n = warpOperation(p, props(COV), dom, covarianceReturnNumNeighbors=True)
    assert C.shape == (4, 2, 2) and n.dtype == torch.int32 and n.shape == (4,)
    np.testing.assert_allclose(C[0].cpu().numpy(), TV_COVARIANCE_ROW0, rtol=0, atol=2e-10)
    assert n.cpu().tolist() == [4, 4, 4, 4]
    Cr, nr = covarianceReference(p, dom, props(COV))
    np.testing.assert_allclose(Cr[0], TV_COVARIANCE_ROW0, rtol=0, atol=2e-10)
    np.testing.assert_allclose(C.cpu().numpy(), Cr, rtol=1e-12, atol=1e-13)
    C2 = warpOperation(p, props(COV), dom)
    assert isinstance(C2, torch.Tensor)
    torch.testing.assert_close(C2, C, rtol=0, atol=0)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_covariance_brute_force(device, dtype, dim, traversal, periodic):
    n = {1: 8, 2: 14, 3: 16}[dim]
    dom = makeDomain(dim, dtype, device, periodic=periodic)
    hMean = 0.6 if periodic else None
    q = cloud(n, dim, dtype, device, seed=80 + dim, hMean=hMean)
    r = cloud(n + 2, dim, dtype, device, seed=90 + dim, hMean=hMean)
    for reference in (None, r):
        nr = n if reference is None else n + 2
        c = randomCorrections(n, nr, dim, dtype, device, seed=12)
        adj = neighbourStructure(traversal, q, dom, reference)
        for si, support in enumerate(SupportScheme):
            corr = CORRECTIONS[si % len(CORRECTIONS)]
            pr = props(COV, supportMode=support)
            (C, cnt), (Cr, nref) = _call(q, pr, dom, reference, adj, corr, c)
            assert C.shape == (n, dim, dim) and C.dtype == dtype
            rtol, atol = tolerances(dtype, float(np.abs(Cr).max()))
            np.testing.assert_allclose(C.cpu().double().numpy(), Cr, rtol=rtol, atol=atol,
                                       err_msg=f"{support.name} {corr}")
            if dtype == torch.float64:  # float32 may flip W^R > 0 at the support edge
                np.testing.assert_array_equal(cnt.cpu().numpy(), nref)


@pytest.mark.parametrize("mode", [0, 1, 9, 13])
def test_covariance_operation_modes(device, mode):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    kinds = [0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 3, 0]
    q = cloud(12, 2, dt, device, seed=3, kinds=kinds)
    c = randomCorrections(12, 12, 2, dt, device, seed=2)
    pr = props(COV, operationMode=mode)
    (C, cnt), (Cr, nref) = _call(q, pr, dom, None, None, "crk+renorm+volumes", c)
    np.testing.assert_allclose(C.cpu().numpy(), Cr, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(cnt.cpu().numpy(), nref)


def test_covariance_calibration_factor(device, dtype):
    dom = makeDomain(3, dtype, device)
    q = cloud(16, 3, dtype, device, seed=5)
    plain, n0 = warpOperation(q, props(COV, n_h=2.5), dom, covarianceReturnNumNeighbors=True)
    cal, n1 = warpOperation(q, props(COV, n_h=2.5, calibrateNormalization=True), dom,
                            covarianceReturnNumNeighbors=True)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 2.5, 3)
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(cal, plain * factor, rtol=rtol, atol=1e-6 if rtol > 1e-10 else 0)
    assert torch.equal(n0, n1)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_covariance_empty_populations(device, dim, traversal):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    full = cloud(5, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    adj = neighbourStructure(traversal, empty, dom, full)
    C, n = warpOperation(empty, props(COV), dom, adjacency=adj, referenceParticles=full,
                         covarianceReturnNumNeighbors=True)
    assert C.shape == (0, dim, dim) and n.shape == (0,) and n.dtype == torch.int32
    pos = full.positions.clone().requires_grad_()
    q = ParticleState(pos, full.supports, full.masses, full.kinds, full.densities)
    adj = neighbourStructure(traversal, full, dom, empty)
    C, n = warpOperation(q, props(COV), dom, adjacency=adj, referenceParticles=empty,
                         covarianceReturnNumNeighbors=True)
    assert C.shape == (5, dim, dim) and torch.equal(C, torch.zeros_like(C))
    assert torch.equal(n, torch.zeros(5, dtype=torch.int32, device=device))
    C.sum().backward()
    assert pos.grad is None or torch.equal(pos.grad, torch.zeros_like(pos))


def test_covariance_validation(device):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    p = cloud(6, 2, dt, device, seed=0)
    nodens = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    with pytest.raises(ValueError, match="densities"):
        warpOperation(nodens, props(COV), dom)
    warpOperation(nodens, props(COV), dom, queryVolumes=torch.ones(6, dtype=dt, device=device))
    A, B = torch.ones(6, dtype=dt), torch.zeros(6, 2, dtype=dt)
    with pytest.raises(ValueError, match="gradA"):
        warpOperation(p, props(COV), dom, crkState=CRKState(A, B))
    with pytest.raises(ValueError, match="renormalizationMatrices"):
        warpOperation(p, props(COV), dom, renormalizationState=torch.zeros(5, 2, 2, dtype=dt))


@pytest.mark.usefixtures("specialized")  # conftest: specialised kernels on for this test
@pytest.mark.parametrize("dim,periodic,dtype", [(1, False, torch.float64), (2, False, torch.float64),
                                                (3, True, torch.float64), (2, True, torch.float32)])
def test_covariance_specialized_matches_generic(dim, periodic, dtype):
    """The Covariance's kernel specialised on the configuration (no CRK, no renormalization:
    the renormalization builder's call) against the generic kernel: the same arithmetic up to
    the compiler's contractions and, on periodic axes, the generic minimum image's wrap; the
    neighbour counts equal; with CRK the generic kernel runs."""
    from warpSPHCore.autograd.specialize import setSpecialization
    from warpSPHCore.operators import _specialized

    n = {1: 9, 2: 40, 3: 60}[dim]
    q = cloud(n, dim, dtype, "cpu", seed=70 + dim, hMean=0.5)
    dom = DomainDescription(-torch.ones(dim, dtype=dtype), torch.ones(dim, dtype=dtype),
                            [periodic] * dim)  # the cloud's box
    pr = props(COV, kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Scatter)
    V = torch.full((q.positions.shape[0],), 0.01, dtype=dtype)
    tol = {torch.float64: 1e-13, torch.float32: 1e-4}[dtype]
    for adjacency in (None, neighbourStructure("csr", q, dom, None)):
        with torch.no_grad():
            fast = warpOperation(q, pr, dom, referenceVolumes=V, adjacency=adjacency,
                                 covarianceReturnNumNeighbors=True)
            previous = setSpecialization(False)
            try:
                generic = warpOperation(q, pr, dom, referenceVolumes=V, adjacency=adjacency,
                                        covarianceReturnNumNeighbors=True)
            finally:
                setSpecialization(previous)
        assert float((fast[0] - generic[0]).abs().max()) <= tol * float(generic[0].abs().max())
        assert torch.equal(fast[1], generic[1])
    assert any(name == "covariance" and cfg.dim == dim for name, cfg in _specialized._BUILT)
