"""Grad-h helper `computeOmega`: Omega_i = 1 + h_i/(d rho_i) N sum_j
m_j dW(x_ij, h_i)/dh_i against the float64 NumPy reference `sph_reference.omegaReference`
(dW/dh from the kernel tests' independent reference), cross-checked against central finite
differences of the kernel in h; the query support is used whatever the support scheme; kinds
masking (masked query -> 1); lattice calibration; distinct reference set; CSR/grid/on-the-fly
traversals; missing densities raise; float64 gradcheck w.r.t. positions, supports, masses,
densities; a live forward-mode tangent raises NotImplementedError; no host sync.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    kr,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    omegaReference,
    props,
)

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme, latticeDensityFactor
from warpSPHCore.corrections import computeOmega
from warpSPHCore.util import hostSyncCensus as _census

F64 = torch.float64


def _np(t):
    return t.detach().cpu().to(F64).numpy()


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_omega_vs_reference(device, dtype, dim, traversal):
    dom = makeDomain(dim, dtype, device)
    q = marginCloud(12, dim, dtype, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    # supportMode must not matter: the query support h_i is used
    pr = props(kernel=KernelFunctions.Wendland4, supportMode=SupportScheme.Scatter)
    om = computeOmega(q, pr, dom, adjacency=adj)
    assert om.shape == (12,) and om.dtype == dtype
    ref = omegaReference(q, dom, pr)
    tol = 1e-12 if dtype == F64 else 1e-4
    np.testing.assert_allclose(_np(om), ref, rtol=tol, atol=tol * np.abs(ref).max())
    assert np.abs(ref - 1.0).max() > 1e-2


def test_omega_reference_uses_dWdh(device):
    """The reference's dW/dh equals a central finite difference of the kernel in h."""
    g = np.random.default_rng(0)
    for d in (1, 2, 3):
        x = g.uniform(-0.5, 0.5, size=(20, d))
        h = g.uniform(0.6, 1.2, size=20)
        e = 1e-6
        fd = (kr.W(int(KernelFunctions.Wendland4), d, x, h + e)
              - kr.W(int(KernelFunctions.Wendland4), d, x, h - e)) / (2 * e)
        np.testing.assert_allclose(kr.dWdh(int(KernelFunctions.Wendland4), d, x, h), fd,
                                   rtol=1e-6, atol=1e-8)


def test_omega_masking(device, dim):
    dom = makeDomain(dim, F64, device)
    kinds = [0, 1, 2, 0, 1, 2, 0, 0, 1, 0]
    q = marginCloud(10, dim, F64, device, seed=4, domain=dom, kinds=kinds)
    for mode in (1, 3, 9, 0, 12):
        pr = props(operationMode=mode)
        om = computeOmega(q, pr, dom)
        ref = omegaReference(q, dom, pr)
        np.testing.assert_allclose(_np(om), ref, rtol=1e-12, atol=1e-12)
    om = computeOmega(q, props(operationMode=1), dom)  # FluidToFluid: non-fluid queries -> 1
    k = np.array(kinds)
    assert np.all(_np(om)[k != 0] == 1.0)


def test_omega_calibration(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=6, domain=dom)
    pr = props(n_h=3.0, calibrateNormalization=True)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 3.0, 2)
    assert factor != 1.0
    om = computeOmega(q, pr, dom)
    np.testing.assert_allclose(_np(om), omegaReference(q, dom, pr, factor=factor), rtol=1e-12,
                               atol=1e-12)


def test_omega_distinct_reference(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(7, 10, 2, F64, device, seed=8, domain=dom)
    for traversal in ("csr", "none"):
        adj = neighbourStructure(traversal, q, dom, r)
        om = computeOmega(q, props(), dom, adjacency=adj, referenceParticles=r)
        np.testing.assert_allclose(_np(om), omegaReference(q, dom, props(), reference=r),
                                   rtol=1e-12, atol=1e-12)


def test_omega_missing_densities_raises(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=1, domain=dom, densities=False)
    with pytest.raises(ValueError, match="densities"):
        computeOmega(q, props(), dom)


def test_omega_empty(device, dim):
    dom = makeDomain(dim, F64, device)
    e = torch.zeros(0, dtype=F64, device=device)
    p = ParticleState(torch.zeros(0, dim, dtype=F64, device=device), e, e,
                      torch.zeros(0, dtype=torch.int32, device=device), e)
    assert computeOmega(p, props(), dom).shape == (0,)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_omega_gradcheck(device, dim, traversal):
    if dim == 3 and traversal != "csr":
        pytest.skip("3D: one traversal suffices (traversals are covered in 1D/2D)")
    dom = makeDomain(dim, F64, device)
    q = marginCloud(8, dim, F64, device, seed=9, domain=dom, kinds=[0, 0, 1, 0, 2, 0, 0, 1])
    adj = neighbourStructure(traversal, q, dom)
    pr = props(kernel=KernelFunctions.Wendland4, n_h=3.0, calibrateNormalization=True)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities)

    def fn(pos, h, m, rho):
        return computeOmega(ParticleState(pos, h, m, q.kinds, rho), pr, dom, adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_omega_gradcheck_distinct(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 8, 2, F64, device, seed=10, domain=dom)
    inputs = leaves(q.positions, q.supports, q.densities, r.positions, r.masses)

    def fn(qp, qh, qr, rp, rm):
        qs = ParticleState(qp, qh, q.masses, q.kinds, qr)
        rs = ParticleState(rp, r.supports, rm, r.kinds, r.densities)
        return computeOmega(qs, props(), dom, referenceParticles=rs)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_omega_forward_mode_raises(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=2, domain=dom)
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, torch.ones_like(q.positions))
        p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
        with pytest.raises(NotImplementedError):
            computeOmega(p, props(), dom)


def test_omega_no_host_sync(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=2, domain=dom)
    for traversal in TRAVERSALS:
        adj = neighbourStructure(traversal, q, dom)
        computeOmega(q, props(), dom, adjacency=adj)  # warm-up (compile)
        pos = q.positions.detach().clone().requires_grad_()
        with _census.census() as c:
            with torch.no_grad():
                computeOmega(q, props(), dom, adjacency=adj)
            om = computeOmega(ParticleState(pos, q.supports, q.masses, q.kinds, q.densities),
                              props(), dom, adjacency=adj)
            om.sum().backward()
        assert c.total == 0, (c.hits, c.sites)
        assert torch.isfinite(pos.grad).all()
