"""Gradient forward values against the
independent float64 reference `sph_reference.gradientReference`, and Gradient validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    gradientReference,
    makeDomain,
    neighbourStructure,
    props,
    randomCorrections,
    tolerances,
)

from warpSPHCore import (
    CRKState,
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation

GRAD = WarpOperation.Gradient
TV_GRADIENT_ROW0 = {
    GradientScheme.Naive: (19.0342306475, 24.4999677945),
    GradientScheme.Symmetric: (26.347989927, 33.3806417503),
    GradientScheme.Difference: (10.454362802, 16.7706940195),
    GradientScheme.Summation: (27.614098493, 32.2292415694),
}
SUPPORTS = list(SupportScheme)


def randomField(n, shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=gen, dtype=torch.float64).to(dtype=dtype,
                                                                              device=device)


CORRECTIONS = ("none", "volumes+gradH", "crk", "renorm", "crk+renorm+volumes")


def _call(q, pr, dom, fq, fr, reference, adj, corr, c):
    vol = c["vol"] if "volumes" in corr else None
    crk = c["crk"] if "crk" in corr else None
    om = c["omegas"] if "gradH" in corr else None
    L = c["L"] if "renorm" in corr else None
    nq = q.positions.shape[0]
    gh = None
    if om is not None:
        gh = (torch.ones(nq, dtype=om.dtype, device=om.device), om)
    out = warpOperation(q, pr, dom, queryValues=fq, referenceValues=fr, referenceVolumes=vol,
                        adjacency=adj, referenceParticles=reference,
                        crkState=None if crk is None else CRKState(*crk), gradHState=gh,
                        renormalizationState=L)
    ref = gradientReference(q, dom, pr, fq, fr, reference, vol, crk, om, L)
    return out, ref


def test_gradient_test_vector(device):
    cast = dict(dtype=torch.float64, device=device)
    p = ParticleState(torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.25, 0.35]], **cast),
                      torch.tensor([1.0, 0.8, 1.2, 0.9], **cast),
                      torch.tensor([1.0, 2.0, 1.5, 0.5], **cast),
                      torch.zeros(4, dtype=torch.int32, device=device),
                      torch.tensor([1.0, 1.2, 0.9, 1.1], **cast))
    dom = DomainDescription(torch.tensor([-2.0, -2.0], **cast), torch.tensor([2.0, 2.0], **cast),
                            [False, False])
    f = torch.tensor([1.0, 2.0, 3.0, 4.0], **cast)
    for scheme, row0 in TV_GRADIENT_ROW0.items():
        pr = props(GRAD, gradientMode=scheme)
        out = warpOperation(p, pr, dom, queryValues=f)
        assert out.shape == (4, 2)
        np.testing.assert_allclose(out[0].cpu().numpy(), row0, rtol=0, atol=2e-9,
                                   err_msg=scheme.name)
        ref = gradientReference(p, dom, pr, f)
        np.testing.assert_allclose(ref[0], row0, rtol=0, atol=2e-9, err_msg=scheme.name)
        np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_gradient_brute_force(device, dtype, dim, traversal, periodic):
    """Every scheme x corrections x field rank x {aliased, distinct} (support schemes cycled)."""
    n = {1: 8, 2: 14, 3: 16}[dim]
    dom = makeDomain(dim, dtype, device, periodic=periodic)
    hMean = 0.6 if periodic else None
    q = cloud(n, dim, dtype, device, seed=60 + dim, hMean=hMean)
    r = cloud(n + 2, dim, dtype, device, seed=70 + dim, hMean=hMean)
    count = 0
    for reference in (None, r):
        nr = n if reference is None else n + 2
        c = randomCorrections(n, nr, dim, dtype, device, seed=11)
        adj = neighbourStructure(traversal, q, dom, reference)
        for si, shape in enumerate([(), (dim,), (dim, dim)]):
            fr = randomField(nr, shape, dtype, device, seed=si)
            fq = fr if reference is None else randomField(n, shape, dtype, device, seed=si + 9)
            for scheme in GradientScheme:
                for corr in CORRECTIONS:
                    pr = props(GRAD, gradientMode=scheme,
                               supportMode=SUPPORTS[count % len(SUPPORTS)])
                    count += 1
                    out, ref = _call(q, pr, dom, fq, fr if reference is not None else None,
                                     reference, adj, corr, c)
                    assert out.shape == (n,) + shape + (dim,) and out.dtype == dtype
                    rtol, atol = tolerances(dtype, float(np.abs(ref).max()))
                    np.testing.assert_allclose(
                        out.cpu().double().numpy(), ref, rtol=rtol, atol=atol,
                        err_msg=f"{scheme.name} {pr.supportMode.name} S={shape} {corr} "
                                f"ref={reference is not None}")


@pytest.mark.parametrize("mode", [0, 1, 9, 12, 13])
def test_gradient_operation_modes(device, mode):
    """Mixed kinds: masked query rows are exactly 0, masked references are skipped."""
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    kinds = [0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 3, 0]
    q = cloud(12, 2, dt, device, seed=3, kinds=kinds)
    f = randomField(12, (2,), dt, device, seed=1)
    c = randomCorrections(12, 12, 2, dt, device, seed=2)
    for scheme in GradientScheme:
        pr = props(GRAD, gradientMode=scheme, operationMode=mode)
        out, ref = _call(q, pr, dom, f, None, None, None, "crk+renorm+volumes", c)
        np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)
        zeroRows = np.all(ref == 0.0, axis=(1, 2))
        assert torch.equal(out[torch.as_tensor(zeroRows)], torch.zeros_like(
            out[torch.as_tensor(zeroRows)]))


def test_gradient_symmetric_ignores_volumes(device):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    q = cloud(10, 2, dt, device, seed=4)
    f = randomField(10, (), dt, device, seed=1)
    pr = props(GRAD, gradientMode=GradientScheme.Symmetric)
    a = warpOperation(q, pr, dom, queryValues=f)
    b = warpOperation(q, pr, dom, queryValues=f, queryVolumes=torch.full((10,), 7.0, dtype=dt,
                                                                         device=device))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_gradient_1d_shapes(device):
    dt = torch.float64
    dom = makeDomain(1, dt, device)
    q = cloud(6, 1, dt, device, seed=1)
    f = randomField(6, (), dt, device, seed=1)
    a = warpOperation(q, props(GRAD), dom, queryValues=f)
    b = warpOperation(q, props(GRAD), dom, queryValues=f[:, None])
    assert a.shape == (6, 1) and b.shape == (6, 1, 1)
    torch.testing.assert_close(a, b[:, 0], rtol=0, atol=0)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_gradient_calibration_factor(device, dtype, traversal):
    dom = makeDomain(3, dtype, device)
    q = cloud(16, 3, dtype, device, seed=5)
    f = randomField(16, (3,), dtype, device, seed=2)
    adj = neighbourStructure(traversal, q, dom)
    for scheme in (GradientScheme.Naive, GradientScheme.Symmetric):
        plain = warpOperation(q, props(GRAD, n_h=2.5, gradientMode=scheme), dom, queryValues=f,
                              adjacency=adj)
        cal = warpOperation(q, props(GRAD, n_h=2.5, gradientMode=scheme,
                                     calibrateNormalization=True), dom, queryValues=f,
                            adjacency=adj)
        factor = latticeDensityFactor(KernelFunctions.Wendland2, 2.5, 3)
        rtol = 1e-6 if dtype == torch.float32 else 1e-14
        torch.testing.assert_close(cal, plain * factor, rtol=rtol,
                                   atol=1e-6 if rtol > 1e-10 else 1e-15)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_gradient_empty_populations(device, dim, traversal):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    full = cloud(5, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    for shape in [(), (dim,), (dim, dim)]:
        # zero queries: trailing axes kept
        fr = randomField(5, shape, dt, device, seed=0)
        fq = randomField(0, shape, dt, device, seed=0)
        adj = neighbourStructure(traversal, empty, dom, full)
        out = warpOperation(empty, props(GRAD), dom, queryValues=fq, referenceValues=fr,
                            adjacency=adj, referenceParticles=full)
        assert out.shape == (0,) + shape + (dim,)
        # zero references: zeros of the full shape, backward works
        f0 = randomField(0, shape, dt, device, seed=0).requires_grad_()
        fq = randomField(5, shape, dt, device, seed=1).requires_grad_()
        pos = full.positions.clone().requires_grad_()
        q = ParticleState(pos, full.supports, full.masses, full.kinds, full.densities)
        adj = neighbourStructure(traversal, full, dom, empty)
        for scheme in GradientScheme:
            out = warpOperation(q, props(GRAD, gradientMode=scheme), dom, queryValues=fq,
                                referenceValues=f0, adjacency=adj, referenceParticles=empty)
            assert out.shape == (5,) + shape + (dim,)
            assert torch.equal(out, torch.zeros_like(out))
            out.sum().backward()
            assert pos.grad is None or torch.equal(pos.grad, torch.zeros_like(pos))
            assert fq.grad is None or torch.equal(fq.grad, torch.zeros_like(fq))


# --- validation ------------------------------------------------------------------------


def test_gradient_validation(device):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    p = cloud(6, 2, dt, device, seed=0)
    nodens = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    vol = torch.ones(6, dtype=dt, device=device)
    sym = props(GRAD, gradientMode=GradientScheme.Symmetric)
    with pytest.raises(ValueError, match="queryParticles.densities"):
        warpOperation(nodens, sym, dom, queryValues=p.masses, queryVolumes=vol)
    with pytest.raises(ValueError, match="referenceParticles.densities"):
        warpOperation(p, sym, dom, queryValues=p.masses, referenceParticles=nodens)
    with pytest.raises(ValueError, match="densities"):
        warpOperation(nodens, props(GRAD), dom, queryValues=p.masses)
    warpOperation(nodens, props(GRAD), dom, queryValues=p.masses, queryVolumes=vol)  # fine
    A, B = torch.ones(6, dtype=dt), torch.zeros(6, 2, dtype=dt)
    with pytest.raises(ValueError, match="gradA"):
        warpOperation(p, props(GRAD), dom, queryValues=p.masses, crkState=CRKState(A, B))
    with pytest.raises(ValueError, match="gradB"):
        warpOperation(p, props(GRAD), dom, queryValues=p.masses,
                      crkState=CRKState(A, B, torch.zeros(6, 2, dtype=dt),
                                        torch.zeros(6, 2, dtype=dt)))
    with pytest.raises(ValueError, match="renormalizationMatrices"):
        warpOperation(p, props(GRAD), dom, queryValues=p.masses,
                      renormalizationState=torch.zeros(6, 3, 3, dtype=dt))
    with pytest.raises(ValueError, match="Omegas"):
        warpOperation(p, props(GRAD), dom, queryValues=p.masses,
                      gradHState=torch.ones(5, dtype=dt))
    other = cloud(7, 2, dt, device, seed=1)
    with pytest.raises(ValueError, match="both queryValues and referenceValues"):
        warpOperation(p, props(GRAD), dom, referenceValues=other.masses,
                      referenceParticles=other)
    with pytest.raises(ValueError, match="field shapes"):
        warpOperation(p, props(GRAD), dom, queryValues=p.positions,
                      referenceValues=other.masses, referenceParticles=other)
