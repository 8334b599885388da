"""Physics terms (`fluids.terms`) against independent float64 NumPy pair sums written here
from their papers' formulas (brute force over all pairs, minimum image, the kind mask of
mode 9, grad W from the kernel tests' NumPy reference), in 2D and 3D, periodic and not, CSR
and grid traversal; float64 gradchecks and a forward-mode (dual tensor) check."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from fluid_reference import ref

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme
from warpSPHCore.fluids import (
    backgroundPressureAcceleration,
    bodyAcceleration,
    continuityDensityRate,
    densityDiffusion,
    laminarViscosity,
    numberDensityVolumes,
    pressureAcceleration,
)

KERNEL = KernelFunctions.Wendland4
GATHER = int(SupportScheme.Gather)
MU, DELTA, HS, C0 = 0.37, 0.1, 0.05, 12.0


def _case(d, periodic, traversal, n=40, seed=5, dtype=torch.float64):
    kinds = [2 if k % 7 == 3 else 0 for k in range(n)]  # a few ghosts: mode 9 skips them
    p = ref.cloud(n, d, dtype, "cpu", seed, hMean=0.45, kinds=kinds)
    dom = ref.makeDomain(d, dtype, "cpu", periodic=periodic)
    adj = ref.neighbourStructure(traversal, p, dom)
    g = torch.Generator().manual_seed(seed + 1)
    v = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    pres = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    return p, dom, adj, v, pres


def _geometry(p, dom):
    lo, hi, per = ref._domainArrays(dom)
    pos = ref._np(p.positions)
    x = ref.pairVectors(pos, pos, lo, hi, per)
    h = ref._np(p.supports)
    G = ref.pairKernelGradient(int(KERNEL), pos.shape[1], x, h, h, GATHER)
    qm, rm = ref.masks(9, ref._np(p.kinds), ref._np(p.kinds))
    mask = (qm[:, None] & rm[None, :]).astype(np.float64)
    r = np.linalg.norm(x, axis=-1)
    D = r + 1e-8 * h[:, None]  # the Brookshaw denominator, h_ij = h_i under Gather
    inv = np.where(r > 0, 1.0 / np.where(r > 0, D, 1.0) ** 2, 0.0)
    return x, G, mask, inv


def _numpyTerms(p, dom, v, pres):
    x, G, mask, inv = _geometry(p, dom)
    m, rho, vv, pp = (ref._np(t) for t in (p.masses, p.densities, v, pres))
    V = m / rho
    # Monaghan symmetric pressure acceleration
    coef = m[None, :] * (pp[:, None] / rho[:, None] ** 2 + pp[None, :] / rho[None, :] ** 2)
    aP = -np.einsum("ij,ijk->ik", mask * coef, G)
    # Morris et al. 1997, constant mu
    xg = np.einsum("ijk,ijk->ij", x, G)
    w = mask * V[None, :] * xg * inv
    vij = vv[:, None, :] - vv[None, :, :]
    aV = (2.0 * MU / rho)[:, None] * np.einsum("ij,ijk->ik", w, vij)
    # Molteni & Colagrossi 2009: psi_ij = 2 (rho_j - rho_i), x_ji . G_ij = -x_ij . G_ij
    dD = DELTA * HS * C0 * np.sum(mask * 2.0 * (rho[None, :] - rho[:, None]) * V[None, :]
                                  * (-xg) * inv, axis=1)
    # continuity: sum_j m_j (v_i - v_j) . G_ij
    dC = np.sum(mask * m[None, :] * np.einsum("ijk,ijk->ij", vij, G), axis=1)
    return aP, aV, dD, dC


def _close(got, want, scale=None):
    got = got.detach().cpu().numpy()
    s = np.abs(want).max() if scale is None else scale
    assert s > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * s)


@pytest.mark.parametrize("d, periodic, traversal", [
    (2, True, "csr"), (2, False, "grid"), (3, True, "grid"), (3, False, "csr")])
def test_terms_match_numpy_pair_sums(d, periodic, traversal):
    p, dom, adj, v, pres = _case(d, periodic, traversal)
    aP, aV, dD, dC = _numpyTerms(p, dom, v, pres)
    kw = dict(kernel=KERNEL)
    with torch.no_grad():
        _close(pressureAcceleration(p, pres, dom, adj, **kw), aP)
        _close(laminarViscosity(p, v, dom, adj, MU, **kw), aV)
        _close(densityDiffusion(p, dom, adj, DELTA, HS, C0, **kw), dD)
        _close(continuityDensityRate(p, v, dom, adj, **kw), dC)


def test_float32_agrees_with_float64():
    p64, dom64, adj64, v64, pres64 = _case(2, True, "csr")
    p, dom, adj, v, pres = _case(2, True, "csr", dtype=torch.float32)
    a = pressureAcceleration(p, pres, dom, adj, kernel=KERNEL)
    b = pressureAcceleration(p64, pres64, dom64, adj64, kernel=KERNEL)
    assert a.dtype == torch.float32
    torch.testing.assert_close(a.double(), b, rtol=0, atol=2e-5 * float(b.abs().max()))


def test_gradcheck_through_the_terms():
    p, dom, adj, v, pres = _case(2, True, "csr", n=12, seed=8)

    def state(x, rho):
        return ParticleState(x, p.supports, p.masses, p.kinds, rho)

    x0 = p.positions.detach().clone().requires_grad_(True)
    rho0 = p.densities.detach().clone().requires_grad_(True)
    v0 = v.detach().clone().requires_grad_(True)
    p0 = pres.detach().clone().requires_grad_(True)
    mu = torch.tensor(MU, dtype=torch.float64, requires_grad=True)
    opts = dict(eps=1e-6, atol=1e-6, rtol=1e-5)
    assert torch.autograd.gradcheck(
        lambda x, rho, pr: pressureAcceleration(state(x, rho), pr, dom, adj, kernel=KERNEL),
        (x0, rho0, p0), **opts)
    assert torch.autograd.gradcheck(
        lambda x, u, m_: laminarViscosity(state(x, rho0.detach()), u, dom, adj, m_,
                                          kernel=KERNEL), (x0, v0, mu), **opts)
    assert torch.autograd.gradcheck(
        lambda x, rho: densityDiffusion(state(x, rho), dom, adj, DELTA, HS, C0, kernel=KERNEL),
        (x0, rho0), **opts)
    assert torch.autograd.gradcheck(
        lambda x, u: continuityDensityRate(state(x, rho0.detach()), u, dom, adj,
                                           kernel=KERNEL), (x0, v0), **opts)


def test_forward_mode_matches_reverse_mode():
    """Dual-tensor (forward-mode) tangents of every term in the positions equal the
    reverse-mode Jacobian applied to the same direction."""
    p, dom, adj, v, pres = _case(2, True, "csr", n=12, seed=9)
    t = torch.randn(p.positions.shape, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(4))

    def state(x):
        return ParticleState(x, p.supports, p.masses, p.kinds, p.densities)

    terms = {
        "pressure": lambda x: pressureAcceleration(state(x), pres, dom, adj, kernel=KERNEL),
        "viscosity": lambda x: laminarViscosity(state(x), v, dom, adj, MU, kernel=KERNEL),
        "diffusion": lambda x: densityDiffusion(state(x), dom, adj, DELTA, HS, C0,
                                                kernel=KERNEL),
        "continuity": lambda x: continuityDensityRate(state(x), v, dom, adj, kernel=KERNEL),
    }
    for name, f in terms.items():
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(f(fwAD.make_dual(p.positions, t))).tangent
        J = torch.autograd.functional.jacobian(f, p.positions)
        expected = torch.einsum("...jb,jb->...", J, t)
        assert float(expected.abs().max()) > 0, name
        torch.testing.assert_close(tangent, expected, rtol=1e-10, atol=1e-12, msg=name)


def test_body_acceleration_and_validation():
    x = torch.zeros(5, 2, dtype=torch.float32)
    g = bodyAcceleration((0.0, -9.81), x)
    assert g.shape == (5, 2) and g.dtype == torch.float32 and float(g[3, 1]) == pytest.approx(-9.81)
    with pytest.raises(ValueError, match=r"accepted: \(2,\)"):
        bodyAcceleration((0.0, 0.0, -9.81), x)
    p, dom, adj, v, pres = _case(2, True, "csr")
    bare = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    with pytest.raises(ValueError, match="particles.densities is None"):
        pressureAcceleration(bare, pres, dom, adj)


def _numpyBackground(p, dom, pb):
    """Adami et al. 2013: V_i = 1 / sum_j W_ij and
    a_i = -(p_b / m_i) sum_j (V_i^2 + V_j^2) grad_i W_ij, brute force over all pairs."""
    lo, hi, per = ref._domainArrays(dom)
    pos = ref._np(p.positions)
    x = ref.pairVectors(pos, pos, lo, hi, per)
    h = ref._np(p.supports)
    W = ref.pairKernel(int(KERNEL), pos.shape[1], x, h, h, GATHER)
    G = ref.pairKernelGradient(int(KERNEL), pos.shape[1], x, h, h, GATHER)
    qm, rm = ref.masks(9, ref._np(p.kinds), ref._np(p.kinds))
    mask = (qm[:, None] & rm[None, :]).astype(np.float64)
    S = np.sum(mask * W, axis=1)
    V = np.where(S > 0, 1.0 / np.where(S > 0, S, 1.0), 0.0)  # ghosts: not queried
    w = mask * (V[:, None] ** 2 + V[None, :] ** 2)
    a = -(pb / ref._np(p.masses))[:, None] * np.einsum("ij,ijk->ik", w, G)
    return V, a


@pytest.mark.parametrize("d, periodic, traversal", [(2, True, "csr"), (3, False, "grid")])
def test_background_pressure_matches_numpy_pair_sums(d, periodic, traversal):
    p, dom, adj, v, pres = _case(d, periodic, traversal)
    V, a = _numpyBackground(p, dom, 2.5)
    with torch.no_grad():
        got = numberDensityVolumes(p, dom, adj, kernel=KERNEL)
        _close(got, V)
        _close(backgroundPressureAcceleration(p, dom, adj, 2.5, kernel=KERNEL), a)


def test_background_pressure_gradcheck_and_forward_mode():
    p, dom, adj, v, pres = _case(2, True, "csr", n=12, seed=8)
    x0 = p.positions.detach().clone().requires_grad_(True)
    pb = torch.tensor(1.7, dtype=torch.float64, requires_grad=True)

    fluid = torch.zeros_like(p.kinds)  # no ghost: a ghost's sum of W (few fluid
    # neighbours) is tiny, its V^2 huge, and gradcheck's absolute tolerance meaningless

    def f(x, pb_):  # times m_i: entries of order one
        return p.masses[:, None] * backgroundPressureAcceleration(
            ParticleState(x, p.supports, p.masses, fluid), dom, adj, pb_, kernel=KERNEL)

    assert torch.autograd.gradcheck(f, (x0, pb), eps=1e-6, atol=1e-6, rtol=1e-5)
    t = torch.randn(p.positions.shape, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(4))
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(f(fwAD.make_dual(p.positions, t), 1.7)).tangent
    J = torch.autograd.functional.jacobian(lambda x: f(x, 1.7), p.positions)
    torch.testing.assert_close(tangent, torch.einsum("...jb,jb->...", J, t), rtol=1e-10,
                               atol=1e-12)


def test_background_pressure_vanishes_on_a_lattice():
    """A periodic lattice is the uniform state: every sum of grad W cancels."""
    n, d = 12, 2
    g = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), dim=-1).reshape(-1, d)
    N = x.shape[0]
    p = ParticleState(x, torch.full((N,), 3.0 / n, dtype=torch.float64),
                      torch.full((N,), 1.0 / N, dtype=torch.float64),
                      torch.zeros(N, dtype=torch.int32))
    dom = ref.makeDomain(d, torch.float64, "cpu", lo=0.0, hi=1.0, periodic=True)
    adj = ref.neighbourStructure("csr", p, dom)
    a = backgroundPressureAcceleration(p, dom, adj, 1.0, kernel=KERNEL)
    assert float(a.abs().max()) < 1e-9
