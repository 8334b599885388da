"""Stabilisation terms (`fluids.stabilization`) against independent float64 NumPy pair sums
written here from the papers' formulas (brute force over all pairs, minimum image, the kind
mask of mode 9, W and grad W from the kernel tests' NumPy reference, the renormalization
pseudo-inverse of `sph_reference`), in 2D and 3D, periodic and not; float64 gradchecks,
forward-mode (dual tensor) checks, and the properties: no artificial viscosity for a rigid
motion or an expansion, a dissipative and momentum-conserving one for a compression; no
Antuono diffusion for a linear density field; no shift on a periodic lattice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from fluid_reference import ref

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme
from warpSPHCore.fluids import densityDiffusion
from warpSPHCore.fluids.stabilization import (
    antuonoDensityDiffusion,
    artificialViscosity,
    particleShifting,
)
from warpSPHCore.util import hostSyncCensus as _census

KERNEL = KernelFunctions.Wendland4
GATHER = int(SupportScheme.Gather)
ALPHA, BETA, HS, EPS = 0.3, 0.7, 0.05, 0.01
DELTA, C0 = 0.1, 12.0
DX, R, NEXP, DCOEF = 0.12, 0.2, 4, 0.013


def _case(d, periodic, n=40, seed=5, dtype=torch.float64, ghosts=True):
    kinds = [2 if (ghosts and k % 7 == 3) else 0 for k in range(n)]  # mode 9 skips ghosts
    p = ref.cloud(n, d, dtype, "cpu", seed, hMean=0.45 if d == 2 else 0.6, kinds=kinds)
    dom = ref.makeDomain(d, dtype, "cpu", periodic=periodic)
    adj = ref.neighbourStructure("csr", p, dom)
    g = torch.Generator().manual_seed(seed + 1)
    v = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    c = (5.0 + torch.rand(n, generator=g, dtype=torch.float64)).to(dtype)
    return p, dom, adj, v, c


def _geometry(p, dom):
    """x_ij, W_ij, G_ij (Gather: h_ij = h_i) and the mode-9 pair mask, all [N, N, ...]."""
    lo, hi, per = ref._domainArrays(dom)
    pos = ref._np(p.positions)
    d = pos.shape[1]
    x = ref.pairVectors(pos, pos, lo, hi, per)
    h = ref._np(p.supports)
    W = ref.pairKernel(int(KERNEL), d, x, h, h, GATHER)
    G = ref.pairKernelGradient(int(KERNEL), d, x, h, h, GATHER)
    qm, rm = ref.masks(9, ref._np(p.kinds), ref._np(p.kinds))
    mask = (qm[:, None] & rm[None, :]).astype(np.float64)
    return x, W, G, mask


def _numpyViscosity(p, dom, v, c):
    """Monaghan 1992, explicit pair loop."""
    x, W, G, mask = _geometry(p, dom)
    m, rho, vv, cc = (ref._np(t) for t in (p.masses, p.densities, v, c))
    N, d = vv.shape
    a = np.zeros((N, d))
    for i in range(N):
        for j in range(N):
            if not mask[i, j]:
                continue
            vx = np.dot(vv[i] - vv[j], x[i, j])
            if vx >= 0:
                continue
            mu = HS * vx / (np.dot(x[i, j], x[i, j]) + EPS * HS**2)
            Pi = (-ALPHA * 0.5 * (cc[i] + cc[j]) * mu + BETA * mu**2) / (0.5 * (rho[i] + rho[j]))
            a[i] -= m[j] * Pi * G[i, j]
    return a


def _numpyAntuono(p, dom):
    """Antuono et al. 2010: psi_ij = 2 (rho_j - rho_i) x_ji / r^2 - (gL_i + gL_j) with the
    renormalized gradient gL_i = sum_j (rho_j - rho_i) L_i G_ij V_j; r^2 the library's
    Brookshaw denominator (r + 1e-8 h_i)^2."""
    x, W, G, mask = _geometry(p, dom)
    m, rho, h = ref._np(p.masses), ref._np(p.densities), ref._np(p.supports)
    V = m / rho
    N, d = x.shape[0], x.shape[2]
    C = np.einsum("ija,ijb,ij->iab", -x, G, V[None, :] * mask)  # sum_j V_j x_ji (x) G_ij
    n = ((W > 0) * mask).sum(axis=1)
    _, L, _ = ref.renormalizationReference(C, n)
    gL = np.zeros((N, d))
    for i in range(N):
        for j in range(N):
            if mask[i, j]:
                gL[i] += (rho[j] - rho[i]) * V[j] * (L[i] @ G[i, j])
    D = np.zeros(N)
    for i in range(N):
        for j in range(N):
            r = np.linalg.norm(x[i, j])
            if not mask[i, j] or r == 0:
                continue
            psi = 2.0 * (rho[j] - rho[i]) * (-x[i, j]) / (r + 1e-8 * h[i]) ** 2 - (gL[i] + gL[j])
            D[i] += np.dot(psi, G[i, j]) * V[j]
    return DELTA * HS * C0 * D


def _numpyShifting(p, dom):
    """Lind et al. 2012: dr_i = -D sum_j V_j (1 + R (W_ij / W(dx, h_i))^n) G_ij."""
    x, W, G, mask = _geometry(p, dom)
    m, rho, h = ref._np(p.masses), ref._np(p.densities), ref._np(p.supports)
    d = x.shape[2]
    e = np.zeros((1, 1, d))
    e[..., 0] = DX
    Wdx = np.array([ref.pairKernel(int(KERNEL), d, e, [hi], [hi], GATHER)[0, 0] for hi in h])
    w = mask * (m / rho)[None, :] * (1.0 + R * (W / Wdx[:, None]) ** NEXP)
    return -DCOEF * np.einsum("ij,ijk->ik", w, G)


def _close(got, want, tol=1e-12):
    got = got.detach().cpu().numpy()
    s = np.abs(want).max()
    assert s > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * s)


@pytest.mark.parametrize("d, periodic", [(2, True), (3, False)])
def test_terms_match_numpy_pair_sums(d, periodic):
    p, dom, adj, v, c = _case(d, periodic)
    with torch.no_grad():
        a = artificialViscosity(p, v, dom, adj, c, alpha=ALPHA, beta=BETA, smoothingLength=HS,
                                kernel=KERNEL)
        _close(a, _numpyViscosity(p, dom, v, c))
        _close(antuonoDensityDiffusion(p, dom, adj, DELTA, HS, C0, kernel=KERNEL),
               _numpyAntuono(p, dom), tol=1e-10)
        _close(particleShifting(p, dom, adj, DX, HS, diffusionCoefficient=DCOEF, kernel=KERNEL),
               _numpyShifting(p, dom))


def test_float32_agrees_with_float64():
    p64, dom64, adj64, v64, c64 = _case(2, True)
    p, dom, adj, v, c = _case(2, True, dtype=torch.float32)
    kw = dict(alpha=ALPHA, beta=BETA, smoothingLength=HS, kernel=KERNEL)
    a = artificialViscosity(p, v, dom, adj, c, **kw)
    b = artificialViscosity(p64, v64, dom64, adj64, c64, **kw)
    assert a.dtype == torch.float32
    torch.testing.assert_close(a.double(), b, rtol=0, atol=1e-4 * float(b.abs().max()))
    s = particleShifting(p, dom, adj, DX, HS, kernel=KERNEL)
    t = particleShifting(p64, dom64, adj64, DX, HS, kernel=KERNEL)
    assert s.dtype == torch.float32
    torch.testing.assert_close(s.double(), t, rtol=0, atol=1e-4 * float(t.abs().max()))


def _small():
    """12 particles, no ghosts, a fixed neighbour list (for derivatives)."""
    return _case(2, True, n=12, seed=8, ghosts=False)


def _terms(p, dom, adj, v, c):
    def state(x, rho):
        return ParticleState(x, p.supports, p.masses, p.kinds, rho)

    return {
        "viscosity": lambda x, rho, u: artificialViscosity(
            state(x, rho), u, dom, adj, c, alpha=ALPHA, beta=BETA, smoothingLength=HS,
            kernel=KERNEL),
        "antuono": lambda x, rho, u: antuonoDensityDiffusion(state(x, rho), dom, adj, DELTA, HS,
                                                             C0, kernel=KERNEL),
        "shifting": lambda x, rho, u: particleShifting(state(x, rho), dom, adj, DX, HS,
                                                       kernel=KERNEL) / HS,
    }


def test_gradcheck():
    p, dom, adj, v, c = _small()
    leaves = [t.detach().clone().requires_grad_(True) for t in (p.positions, p.densities, v)]
    for name, f in _terms(p, dom, adj, v, c).items():
        assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-6, rtol=1e-5), name
    cl = c.detach().clone().requires_grad_(True)
    alpha = torch.tensor(ALPHA, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda cc, al: artificialViscosity(p, v, dom, adj, cc, alpha=al, smoothingLength=HS,
                                           kernel=KERNEL), (cl, alpha), eps=1e-6, atol=1e-6)


def test_forward_mode_matches_reverse_mode():
    """Dual-tensor tangents in the positions and densities equal the reverse-mode Jacobian
    applied to the same direction."""
    p, dom, adj, v, c = _small()
    g = torch.Generator().manual_seed(4)
    tx = torch.randn(p.positions.shape, dtype=torch.float64, generator=g)
    tr = torch.randn(p.densities.shape, dtype=torch.float64, generator=g)
    for name, f in _terms(p, dom, adj, v, c).items():
        with fwAD.dual_level():
            out = f(fwAD.make_dual(p.positions, tx), fwAD.make_dual(p.densities, tr), v)
            tangent = fwAD.unpack_dual(out).tangent
        Jx, Jr = torch.autograd.functional.jacobian(lambda x, r, f=f: f(x, r, v),
                                                    (p.positions, p.densities))
        expected = torch.einsum("...jb,jb->...", Jx, tx) + torch.einsum("...j,j->...", Jr, tr)
        assert float(expected.abs().max()) > 0, name
        torch.testing.assert_close(tangent, expected, rtol=1e-9, atol=1e-11, msg=name)


def test_viscosity_vanishes_for_rigid_motion_and_expansion_and_dissipates_compression():
    p, dom, adj, v, c = _case(2, False, ghosts=False)
    N = p.positions.shape[0]
    # uniform supports: G_ji = -G_ij, so the pair forces are equal and opposite
    p = ParticleState(p.positions, torch.full((N,), 0.45, dtype=torch.float64), p.masses,
                      p.kinds, p.densities)
    adj = ref.neighbourStructure("csr", p, dom)
    x = p.positions
    kw = dict(alpha=ALPHA, beta=BETA, smoothingLength=HS, kernel=KERNEL)
    rigid = torch.tensor([0.3, -1.2], dtype=torch.float64) + 0.8 * torch.stack(
        [-x[:, 1], x[:, 0]], dim=1)  # translation + rotation: v_ij . x_ij = 0
    assert float(artificialViscosity(p, rigid, dom, adj, c, **kw).abs().max()) < 1e-12
    expansion = 0.5 * x  # v_ij . x_ij = 0.5 r^2 > 0: separating pairs
    assert float(artificialViscosity(p, expansion, dom, adj, c, **kw).abs().max()) == 0.0
    a = artificialViscosity(p, -0.5 * x, dom, adj, c, **kw)
    m = p.masses[:, None]
    assert float(a.abs().max()) > 1e-3
    assert float((m * a).sum(0).abs().max()) < 1e-12 * float((m * a).abs().sum())
    assert float((m * a * (-0.5 * x)).sum()) < 0.0  # kinetic energy is dissipated


def test_antuono_vanishes_for_a_linear_density_field():
    """Renormalized gradients are exact for a linear field wherever L_i inverts the
    covariance (here every row: a jittered lattice in a box, free surfaces included), and
    then psi_ij . G_ij = 0 pair by pair; the Molteni-Colagrossi term is not zero. The bound
    is the 1e-8 offset of the Brookshaw denominator."""
    n, d = 8, 2
    g = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), dim=-1).reshape(-1, d)
    N = x.shape[0]
    gen = torch.Generator().manual_seed(3)
    x = x + (0.4 / n) * (torch.rand(N, d, generator=gen, dtype=torch.float64) - 0.5)
    rho = 1.0 + 0.2 * x[:, 0] - 0.35 * x[:, 1]
    p = ParticleState(x, torch.full((N,), 2.6 / n, dtype=torch.float64),
                      (0.8 + 0.4 * torch.rand(N, generator=gen, dtype=torch.float64)) / N,
                      torch.zeros(N, dtype=torch.int32), rho)
    dom = ref.makeDomain(d, torch.float64, "cpu", lo=0.0, hi=1.0)
    adj = ref.neighbourStructure("csr", p, dom)
    plain = densityDiffusion(p, dom, adj, DELTA, HS, C0, kernel=KERNEL)
    corrected = antuonoDensityDiffusion(p, dom, adj, DELTA, HS, C0, kernel=KERNEL)
    assert float(plain.abs().max()) > 1e-3
    assert float(corrected.abs().max()) < 1e-6 * float(plain.abs().max())


def test_shifting_vanishes_on_a_periodic_lattice_and_pushes_out_of_a_cluster():
    n, d = 10, 2
    g = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), dim=-1).reshape(-1, d)
    N = x.shape[0]
    dom = ref.makeDomain(d, torch.float64, "cpu", lo=0.0, hi=1.0, periodic=True)

    def shifts(pos):
        p = ParticleState(pos, torch.full((N,), 3.0 / n, dtype=torch.float64),
                          torch.full((N,), 1.0 / N, dtype=torch.float64),
                          torch.zeros(N, dtype=torch.int32), torch.ones(N, dtype=torch.float64))
        return particleShifting(p, dom, ref.neighbourStructure("csr", p, dom), 1.0 / n, 1.0 / n,
                                kernel=KERNEL)

    assert float(shifts(x).abs().max()) < 1e-12
    moved = x.clone()
    moved[55] += torch.tensor([0.04, 0.0], dtype=torch.float64)  # towards particle 65
    s = shifts(moved)
    assert float(s[55, 0]) < 0.0 and float(s[65, 0]) > 0.0  # the crowded pair is pulled apart


def test_no_host_sync():
    """Forward and backward of every term read nothing back to the host (census)."""
    p, dom, adj, v, c = _small()
    leaves = [t.detach().clone().requires_grad_(True) for t in (p.positions, p.densities, v)]
    terms = _terms(p, dom, adj, v, c)
    for f in terms.values():  # warm-up (compile)
        f(*leaves)
    with _census.census() as counts:
        sum(f(*leaves).sum() for f in terms.values()).backward()
    assert counts.total == 0, (counts.hits, counts.sites)
    assert all(bool(torch.isfinite(t.grad).all()) for t in leaves)


def test_validation():
    p, dom, adj, v, c = _small()
    bare = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    with pytest.raises(ValueError, match="particles.densities is None"):
        artificialViscosity(bare, v, dom, adj, c, alpha=ALPHA, smoothingLength=HS)
    with pytest.raises(TypeError, match="accepted: an AdjacencyList"):
        particleShifting(p, dom, None, DX, HS)
