"""`fluids.momentumAcceleration` (the fused Momentum operator divided by the masses) against an
independent float64 NumPy pair sum of the transport-velocity momentum of Adami, Hu & Adams
(2013), written here from the paper's formula: the defaults (V = m / rho, u~ = u), per-particle
viscosities, fluid queries over fluid and wall references (kind mode 11); gradients w.r.t.
the scalar viscosity and pressures (gradcheck), dual tensors through the whole function."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from fluid_reference import ref

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme
from warpSPHCore.fluids import (
    backgroundPressureAcceleration,
    momentumAcceleration,
    numberDensityVolumes,
    transportVelocityAccelerations,
)

KERNEL = KernelFunctions.Wendland4
GATHER = int(SupportScheme.Gather)


def _case(d, periodic, traversal, n=36, seed=3, walls=False):
    kinds = [1 if walls and k % 5 == 2 else 0 for k in range(n)]
    p = ref.cloud(n, d, torch.float64, "cpu", seed, hMean=0.45, kinds=kinds)
    dom = ref.makeDomain(d, torch.float64, "cpu", periodic=periodic)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(n, d, generator=g, dtype=torch.float64)
    ut = u + 0.1 * torch.randn(n, d, generator=g, dtype=torch.float64)
    pres = torch.randn(n, generator=g, dtype=torch.float64)
    return p, dom, ref.neighbourStructure(traversal, p, dom), u, ut, pres


def _numpyMomentum(p, dom, pres, u, ut, mu, V, mode):
    """(1/m_i) sum_j (V_i^2 + V_j^2) [-p~_ij G_ij + mu_ij u_ij (dW/dr) / r
    + 1/2 (A_i + A_j) . G_ij], A = rho u (u~ - u)^T."""
    lo, hi, per = ref._domainArrays(dom)
    x0 = ref._np(p.positions)
    x = ref.pairVectors(x0, x0, lo, hi, per)
    h = ref._np(p.supports)
    d = x0.shape[1]
    G = ref.pairKernelGradient(int(KERNEL), d, x, h, h, GATHER)
    r = np.linalg.norm(x, axis=-1)
    qm, rm = ref.masks(mode, ref._np(p.kinds), ref._np(p.kinds))
    keep = (qm[:, None] & rm[None, :]) & (r > 0)
    n = len(x0)

    def arr(t, shape):
        return np.broadcast_to(ref._np(torch.as_tensor(t, dtype=torch.float64)), shape)

    m, rho, pp, V, mu = (arr(t, (n,)) for t in (p.masses, p.densities, pres, V, mu))
    uu, uut = arr(u, (n, d)), arr(ut, (n, d))
    out = np.zeros((len(x0), d))
    for i in range(len(x0)):
        for j in range(len(x0)):
            if not keep[i, j]:
                continue
            Gij = G[i, j]
            w = V[i] ** 2 + V[j] ** 2
            pt = (rho[j] * pp[i] + rho[i] * pp[j]) / (rho[i] + rho[j])
            muij = 2 * mu[i] * mu[j] / (mu[i] + mu[j])
            dWdr_over_r = Gij @ x[i, j] / (r[i, j] + 1e-8 * h[i]) ** 2
            Ai = rho[i] * np.outer(uu[i], uut[i] - uu[i])
            Aj = rho[j] * np.outer(uu[j], uut[j] - uu[j])
            out[i] += w * (-pt * Gij + muij * dWdr_over_r * (uu[i] - uu[j])
                           + 0.5 * (Ai + Aj) @ Gij)
    return out / m[:, None]


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_momentum_acceleration_reference(d, traversal):
    p, dom, adj, u, ut, pres = _case(d, d == 2, traversal, walls=True)
    # defaults: V = m / rho, u~ = u, scalar viscosity, every non-ghost pair (mode 9)
    a = momentumAcceleration(p, pres, u, dom, adj, dynamicViscosity=0.3, kernel=KERNEL)
    want = _numpyMomentum(p, dom, pres, u, u, 0.3, p.masses / p.densities, 9)
    np.testing.assert_allclose(a.numpy(), want, rtol=0, atol=1e-12 * np.abs(want).max())
    # transport velocities, number-density volumes, per-particle viscosity, fluid queries
    V = numberDensityVolumes(p, dom, adj, kernel=KERNEL)
    mu = 0.2 + 0.1 * torch.arange(len(pres), dtype=torch.float64) / len(pres)
    a = momentumAcceleration(p, pres, u, dom, adj, dynamicViscosity=mu, transportVelocities=ut,
                             volumes=V, kernel=KERNEL, operationMode=11)
    want = _numpyMomentum(p, dom, pres, u, ut, mu, V, 11)
    np.testing.assert_allclose(a.numpy(), want, rtol=0, atol=1e-12 * np.abs(want).max())
    assert torch.all(a[p.kinds == 1] == 0)
    # the same traversal's background-pressure acceleration equals the term computed alone
    a2, ab = transportVelocityAccelerations(p, pres, u, dom, adj, backgroundPressure=2.5,
                                            dynamicViscosity=mu, transportVelocities=ut,
                                            volumes=V, kernel=KERNEL, operationMode=11)
    assert torch.equal(a2, a)
    alone = backgroundPressureAcceleration(p, dom, adj, 2.5, volumes=V, kernel=KERNEL,
                                           operationMode=11)
    torch.testing.assert_close(ab, alone, rtol=0, atol=1e-12 * alone.abs().max())


def test_momentum_acceleration_derivatives():
    """gradcheck w.r.t. positions, pressures, velocities, transport velocities and a scalar
    viscosity tensor; dual tensors (positions, pressures, viscosity) against reverse mode."""
    p, dom, adj, u, ut, pres = _case(2, True, "csr", n=14, seed=8)
    p = ref.marginCloud(14, 2, torch.float64, "cpu", 8, domain=dom, hMean=0.45)
    adj = ref.neighbourStructure("csr", p, dom)

    def f(x, pr, uu, uut, mu):
        q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
        return momentumAcceleration(q, pr, uu, dom, adj, dynamicViscosity=mu,
                                    transportVelocities=uut, kernel=KERNEL)

    mu = torch.tensor(0.3, dtype=torch.float64)
    inputs = ref.leaves(p.positions, pres, u, ut, mu)
    assert torch.autograd.gradcheck(f, tuple(inputs), eps=1e-6, atol=1e-6, rtol=1e-4)
    g = torch.Generator().manual_seed(1)
    vx, vp = (torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (p.positions, pres))
    vmu = torch.tensor(0.7, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda x, pr, m: f(x, pr, u, ut, m),
                                           (p.positions, pres, mu))
    Jv = (J[0].reshape(28, -1) @ vx.reshape(-1) + J[1].reshape(28, -1) @ vp
          + J[2].reshape(28) * vmu).reshape(14, 2)
    with fwAD.dual_level():
        out = f(fwAD.make_dual(p.positions, vx), fwAD.make_dual(pres, vp), u, ut,
                fwAD.make_dual(mu, vmu))
        tangent = fwAD.unpack_dual(out).tangent
    torch.testing.assert_close(tangent, Jv, rtol=0, atol=1e-11 * Jv.abs().max())


def test_momentum_acceleration_rejects_bad_inputs():
    p, dom, adj, u, ut, pres = _case(2, True, "csr", n=10)
    with pytest.raises(ValueError, match="densities"):
        momentumAcceleration(ParticleState(p.positions, p.supports, p.masses, p.kinds),
                             pres, u, dom, adj)
    with pytest.raises(ValueError, match=r"velocities has shape \(10, 3\)"):
        momentumAcceleration(p, pres, torch.zeros(10, 3, dtype=torch.float64), dom, adj)
    with pytest.raises(ValueError, match=r"dynamicViscosity has shape \(3,\)"):
        momentumAcceleration(p, pres, u, dom, adj, dynamicViscosity=torch.ones(3))
