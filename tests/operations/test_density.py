"""Density forward values: the float64 test vector for every
support scheme, brute-force agreement in 1D/2D/3D x float32/float64 x periodic x every
traversal, lattice calibration and empty populations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    densityReference,
    makeDomain,
    neighbourStructure,
    props,
    tolerances,
)

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation

# a small hand-checkable configuration
TV_POS = [[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.25, 0.35]]
TV_H = [1.0, 0.8, 1.2, 0.9]
TV_M = [1.0, 2.0, 1.5, 0.5]
TV_RHO = [1.0, 1.2, 0.9, 1.1]
TV_DENSITY = {
    SupportScheme.Gather: [6.0279754272, 9.1198640621, 4.5402632355, 6.2156265267],
    SupportScheme.Scatter: [6.2516700806, 9.3372863096, 4.3279430717, 5.5355087211],
    SupportScheme.MeanSymmetric: [6.1869791505, 9.3355337455, 4.5525907598, 5.8740480993],
    SupportScheme.KernelMeanSymmetric: [6.1398227539, 9.2285751859, 4.4341031536, 5.8755676239],
    SupportScheme.SuperSymmetric: [6.1398227539, 9.2285751859, 4.4341031536, 5.8755676239],
    SupportScheme.PartialSymmetric: [5.9715353205, 9.3372863096, 4.5402632355, 5.5888894936],
}


def vectorState(device, dtype=torch.float64):
    cast = dict(dtype=dtype, device=device)
    p = ParticleState(torch.tensor(TV_POS, **cast), torch.tensor(TV_H, **cast),
                      torch.tensor(TV_M, **cast), torch.zeros(4, dtype=torch.int32, device=device),
                      torch.tensor(TV_RHO, **cast))
    dom = DomainDescription(torch.tensor([-2.0, -2.0], **cast), torch.tensor([2.0, 2.0], **cast),
                            [False, False])
    return p, dom


@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_density_test_vector(device, scheme):
    p, dom = vectorState(device)
    out = warpOperation(p, props(supportMode=scheme), dom)
    expected = np.array(TV_DENSITY[scheme])
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=0, atol=2e-10)
    ref = densityReference(p, dom, props(supportMode=scheme))
    np.testing.assert_allclose(ref, expected, rtol=0, atol=2e-10)
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-13, atol=0)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_density_brute_force(device, dtype, dim, traversal, periodic):
    n = {1: 12, 2: 24, 3: 30}[dim]
    dom = makeDomain(dim, dtype, device, periodic=periodic)
    hMean = 0.6 if periodic else None  # h < L/2 on periodic axes
    q = cloud(n, dim, dtype, device, seed=10 + dim, hMean=hMean)
    r = cloud(n + 3, dim, dtype, device, seed=20 + dim, hMean=hMean)
    for reference in (None, r):
        adj = neighbourStructure(traversal, q, dom, reference)
        for scheme in SupportScheme:
            pr = props(supportMode=scheme)
            out = warpOperation(q, pr, dom, adjacency=adj, referenceParticles=reference)
            assert out.dtype == dtype and out.shape == (n,) and out.device == device
            ref = densityReference(q, dom, pr, reference)
            rtol, atol = tolerances(dtype, float(np.abs(ref).max()))
            np.testing.assert_allclose(out.cpu().double().numpy(), ref, rtol=rtol, atol=atol,
                                       err_msg=f"{scheme.name} reference={reference is not None}")


def test_density_unwrapped_positions(device):
    """Periodic: positions shifted by whole boxes give the same densities."""
    dom = makeDomain(2, torch.float64, device, periodic=True)
    q = cloud(20, 2, torch.float64, device, seed=3, hMean=0.6)
    shifted = ParticleState(q.positions + torch.tensor([2.0, -4.0], dtype=torch.float64,
                                                       device=device),
                            q.supports, q.masses, q.kinds, q.densities)
    a = warpOperation(q, props(), dom)
    b = warpOperation(shifted, props(), dom)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_density_calibration_factor(device, dtype, traversal):
    dom = makeDomain(2, dtype, device)
    q = cloud(20, 2, dtype, device, seed=5)
    adj = neighbourStructure(traversal, q, dom)
    plain = warpOperation(q, props(n_h=3.0), dom, adjacency=adj)
    cal = warpOperation(q, props(n_h=3.0, calibrateNormalization=True), dom, adjacency=adj)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 3.0, 2)
    assert factor != 1.0
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(cal, plain * factor, rtol=rtol, atol=0)


@pytest.mark.parametrize("kernel", [KernelFunctions.Wendland2, KernelFunctions.CubicSpline],
                         ids=lambda k: k.name)
def test_density_calibrated_lattice_is_rho0(device, dim, kernel):
    """A perfect periodic cubic lattice with m = rho0 s^d: calibrated Density = rho0."""
    n_h, per_axis, rho0 = 2.0, 8, 1000.0
    s = 1.0 / per_axis
    axes = [torch.arange(per_axis, dtype=torch.float64) * s] * dim
    pos = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, dim)
    n = pos.shape[0]
    cast = dict(dtype=torch.float64, device=device)
    p = ParticleState(pos.to(**cast), torch.full((n,), n_h * s, **cast),
                      torch.full((n,), rho0 * s**dim, **cast),
                      torch.zeros(n, dtype=torch.int32, device=device))
    dom = makeDomain(dim, torch.float64, device, lo=0.0, hi=1.0, periodic=True)
    out = warpOperation(p, props(kernel=kernel, n_h=n_h, calibrateNormalization=True), dom)
    torch.testing.assert_close(out, torch.full_like(out, rho0), rtol=1e-12, atol=0)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_density_empty_populations(device, dim, traversal):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    full = cloud(6, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    # zero queries
    adj = neighbourStructure(traversal, empty, dom, full)
    out = warpOperation(empty, props(), dom, adjacency=adj, referenceParticles=full)
    assert out.shape == (0,) and out.dtype == dt
    # zero references: finite zeros, backward works
    pos = full.positions.clone().requires_grad_()
    q = ParticleState(pos, full.supports, full.masses, full.kinds)
    adj = neighbourStructure(traversal, full, dom, empty)
    out = warpOperation(q, props(), dom, adjacency=adj, referenceParticles=empty)
    assert out.shape == (6,)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert pos.grad is None or torch.equal(pos.grad, torch.zeros_like(pos))
