"""Validation cases (`fluids.cases`): the Taylor-Green momentum (the fused Momentum operator
through `transportVelocityAccelerations`, MeanSymmetric supports) against an independent
NumPy pair sum (2D and 3D, a periodic box of any extent, varied supports), its momentum
conservation and its indifference to a Verlet list's buffer pairs; the TGV case at
a tiny size writes results.json with the documented keys and values that follow the analytic
decay; the registry and the config validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from warpSPHCore import DomainDescription, KernelFunctions, ParticleState, SupportScheme
from warpSPHCore.fluids import transportVelocityAccelerations
from warpSPHCore.fluids.cases import CASES, tgv
from warpSPHCore.neighborhood import radiusSearchCompactHashMap
from warpSPHCore.neighborhood.verlet import buildVerletList

F64 = torch.float64
C_D = {2: 7.0 / math.pi, 3: 21.0 / (2.0 * math.pi)}  # Wendland C2, support H


def _cloud(d, seed=1):
    n = 40 if d == 2 else 100
    g = torch.Generator().manual_seed(seed)
    lo = torch.tensor([-1.0, 0.5, 2.0][:d], dtype=F64)
    ext = torch.tensor([1.5, 1.4, 1.2][:d], dtype=F64)
    x = lo + ext * torch.rand(n, d, generator=g, dtype=F64)
    H = 0.3 * (1.0 + 0.3 * (torch.rand(n, generator=g, dtype=F64) - 0.5))
    m = 0.02 * (1.0 + 0.5 * torch.rand(n, generator=g, dtype=F64))
    rho = 1.0 + 0.1 * torch.rand(n, generator=g, dtype=F64)
    u, ut = (torch.randn(n, d, generator=g, dtype=F64) for _ in range(2))
    p = torch.randn(n, generator=g, dtype=F64)
    V = m / rho * (1.0 + 0.1 * torch.rand(n, generator=g, dtype=F64))
    dom = DomainDescription(lo, lo + ext, [True] * (d - 1) + [False])  # last axis walls
    return ParticleState(x, H, m, torch.zeros(n, dtype=torch.int32), rho), dom, u, ut, p, V


def _numpyMomentum(particles, dom, u, ut, p, V, mu):
    """a_i = (1/m_i) sum_j (V_i^2 + V_j^2) [-p~_ij G_ij + mu u_ij F_ij + 1/2 (A_i + A_j) G_ij],
    a double loop over all pairs (Adami, Hu & Adams 2013), with the pair support
    h = (H_i + H_j) / 2 and F_ij = (dW/dr) r / (r + 1e-8 h)^2 (the operator's regularised
    r^2); the background-pressure sum b_i = -(1/m_i) sum_j (V_i^2 + V_j^2) G_ij beside it."""
    x, H, m, rho = (t.numpy() for t in (particles.positions, particles.supports,
                                         particles.masses, particles.densities))
    u, ut, p, V = u.numpy(), ut.numpy(), p.numpy(), V.numpy()
    lo, hi = dom.min.numpy(), dom.max.numpy()
    per = np.asarray(dom.periodic)
    n, d = x.shape
    a = np.zeros((n, d))
    b = np.zeros((n, d))
    for i in range(n):
        Ai = rho[i] * np.outer(u[i], ut[i] - u[i])
        for j in range(n):
            xij = x[i] - x[j]
            L = hi - lo
            xij = np.where(per, xij - L * np.round(xij / L), xij)
            r = np.sqrt(xij @ xij)
            h = 0.5 * (H[i] + H[j])
            if r >= h or i == j:
                continue
            q = r / h
            dWdr = C_D[d] / h**d * (-20.0 * q * (1 - q) ** 3) / h
            G = xij / r * dWdr
            Aj = rho[j] * np.outer(u[j], ut[j] - u[j])
            pt = (rho[j] * p[i] + rho[i] * p[j]) / (rho[i] + rho[j])
            a[i] += (V[i] ** 2 + V[j] ** 2) * (-pt * G + mu * (u[i] - u[j]) * dWdr * r
                                               / (r + 1e-8 * h) ** 2 + 0.5 * (Ai + Aj) @ G)
            b[i] -= (V[i] ** 2 + V[j] ** 2) * G
        a[i] /= m[i]
        b[i] /= m[i]
    return a, b


@pytest.mark.parametrize("d", [2, 3])
def test_momentum_against_a_numpy_pair_sum(d):
    particles, dom, u, ut, p, V = _cloud(d)
    adj = radiusSearchCompactHashMap(particles, dom, mode=SupportScheme.SuperSymmetric)
    mean = SupportScheme.MeanSymmetric

    def rates(adjacency):
        return transportVelocityAccelerations(
            particles, p, u, dom, adjacency, backgroundPressure=1.0, dynamicViscosity=0.07,
            transportVelocities=ut, volumes=V, kernel=KernelFunctions.Wendland2,
            supportMode=mean)

    a, ab = rates(adj)
    ref, refB = _numpyMomentum(particles, dom, u, ut, p, V, 0.07)
    assert np.abs(ref).max() > 1.0
    np.testing.assert_allclose(a.numpy(), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(ab.numpy(), refB, rtol=0, atol=1e-12 * np.abs(refB).max())
    # antisymmetric pair forces: the total momentum rate vanishes
    total = (particles.masses[:, None] * a).sum(0)
    assert float(total.abs().max()) < 1e-13 * float((particles.masses[:, None] * a).abs().sum())
    # a Verlet list's buffer pairs (r_ij up to 1.2 h) carry zero weight
    buffered = buildVerletList(particles, dom, 1.2, SupportScheme.SuperSymmetric)
    assert buffered.numEdges > adj.numEdges
    torch.testing.assert_close(rates(buffered)[0], a, rtol=0,
                               atol=1e-13 * float(a.abs().max()))


def test_taylor_green_tiny_run(tmp_path):
    config = tgv.TaylorGreenConfig(n=12, t=0.05, relax=50)
    threads = torch.get_num_threads()
    r = tgv.run(config, tmp_path, quiet=True)
    assert torch.get_num_threads() == threads  # the run's one thread is restored
    saved = json.loads((tmp_path / "results.json").read_text())
    for key in ("kineticEnergyRelErr", "velocityL2RelErr", "msPerStep", "particles",
                "particleStepsPerSecond", "steps", "dx", "t", "kineticEnergyRelErrAnalytic",
                "maxVelocityRelErr", "neighbourBuilds", "history"):
        assert key in saved, key
        assert saved[key] == r[key], key
    dx, dt0 = 1 / 12, 0.25 / 12 / 11  # acoustic limit 0.25 dx / (c0 + U)
    assert r["particles"] == 144 and r["dx"] == pytest.approx(dx) and r["t"] == 0.05
    assert r["steps"] == math.ceil(0.05 / dt0) and r["dt"] * r["steps"] == pytest.approx(0.05)
    assert abs(r["kineticEnergyRelErr"]) < 0.03
    assert abs(r["kineticEnergyRelErrAnalytic"]) < 0.05
    assert r["velocityL2RelErr"] < 0.05
    assert 0 < r["msPerStep"] and r["particleStepsPerSecond"] == pytest.approx(
        144 * 1e3 / r["msPerStep"])
    assert 1 <= r["neighbourBuilds"] < r["rateEvaluations"] == r["steps"] + 1
    h = r["history"]
    assert h["time"][0] == 0.0 and h["time"][-1] == pytest.approx(0.05)
    assert h["kineticEnergy"][0] == pytest.approx(0.25, rel=0.03)  # 0.25 U^2 per unit mass
    decay = math.exp(-16 * math.pi**2 / 100 * 0.05)
    assert h["kineticEnergy"][-1] / h["kineticEnergy"][0] == pytest.approx(decay, rel=0.03)
    png = tmp_path / "tgv.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_registry_and_config():
    case = CASES["tgv"]
    assert case.run is tgv.run and case.config is tgv.TaylorGreenConfig
    c = case.config()  # the acceptance size
    assert (c.n, c.t, c.relax, c.support, c.re, c.pb) == (50, 1.0, 600, 4.0, 100.0, 1.0)
    assert c.threads == 1
    with pytest.raises(ValueError, match="half the box"):
        tgv.TaylorGreenConfig(n=8)
    with pytest.raises(ValueError, match="dtype"):
        tgv.TaylorGreenConfig(dtype="float16")
    x = torch.tensor([[0.125, 0.0], [0.25, 0.25]], dtype=F64)
    torch.testing.assert_close(tgv.taylorGreenVelocity(x, 2.0, 0.5),
                               torch.tensor([[-0.0, 0.7071067811865476], [-0.0, 0.0]],
                                            dtype=F64), rtol=0, atol=1e-15)
