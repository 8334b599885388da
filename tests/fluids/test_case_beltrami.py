"""The ABC flow (`fluids.cases.beltrami`): the analytic field is a divergence-free Beltrami
field (curl u = k u) whose exponential decay with the pressure -|u|^2 / 2 solves the
incompressible Navier-Stokes equations (checked with autograd at random points); the
discrete initial energy on the lattice is the analytic one; the pressure start's number
density carries the analytic pressure and lowers the acoustic error; a tiny run writes
results.json with the documented keys and values that follow the analytic decay; the
registry, the time step and the config validation."""

from __future__ import annotations

import json
import math

import pytest
import torch

from warpSPHCore import ParticleState, SupportScheme
from warpSPHCore.cli import main
from warpSPHCore.fluids.cases import CASES, beltrami
from warpSPHCore.fluids.terms import numberDensityVolumes
from warpSPHCore.io import readParticles
from warpSPHCore.neighborhood import radiusSearchCompactHashMap

F64 = torch.float64


def _points(n=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    return 2.0 * math.pi * torch.rand(n, 3, generator=g, dtype=F64)


def _jacobian(fn, x):
    """``[3, 3]`` d fn_i / d x_j of a point function ``fn: [3] -> [3]``."""
    return torch.autograd.functional.jacobian(fn, x)


@pytest.mark.parametrize("k", [1, 2])
def test_the_field_is_beltrami_and_divergence_free(k):
    amplitude = 1.3
    for x in _points():
        J = _jacobian(lambda y: beltrami.beltramiVelocity(y[None], amplitude, k=k)[0], x)
        u = beltrami.beltramiVelocity(x[None], amplitude, k=k)[0]
        curl = torch.stack([J[2, 1] - J[1, 2], J[0, 2] - J[2, 0], J[1, 0] - J[0, 1]])
        assert float(u.abs().max()) > 0.1
        torch.testing.assert_close(curl, k * u, rtol=0, atol=1e-12)
        assert abs(float(J.trace())) < 1e-12


def _navierStokesSides(x, t, k, nu, rho0, amplitude):
    """(u_t + (u . grad) u, -grad p / rho0 + nu lap u, lap u, u) at the point x, time t."""

    def u(y, s):
        return beltrami.beltramiVelocity(y[None], amplitude, torch.exp(-nu * k * k * s),
                                         k=k)[0]

    def p(y):
        return beltrami.beltramiPressure(y[None], amplitude, torch.exp(-nu * k * k * t),
                                         k=k, rho0=rho0)[0]

    ut = torch.autograd.functional.jacobian(lambda s: u(x, s), t)
    J = _jacobian(lambda y: u(y, t), x)
    gradP = torch.autograd.functional.jacobian(p, x)
    lap = torch.stack([torch.autograd.functional.hessian(lambda y, c=c: u(y, t)[c], x).trace()
                       for c in range(3)])
    v = u(x, t)
    return ut + J @ v, -gradP / rho0 + nu * lap, lap, v


@pytest.mark.parametrize("k", [1, 2])
def test_the_decay_solves_navier_stokes(k):
    """u_t + (u . grad) u = -grad p / rho0 + nu lap u with u = u0 exp(-nu k^2 t) and
    p = -rho0 |u|^2 / 2, at random points and times."""
    nu, rho0, amplitude = 0.37, 1.7, 0.8
    for i, x in enumerate(_points(5, seed=k)):
        t = torch.tensor(0.1 + 0.3 * i, dtype=F64)
        lhs, rhs, lap, v = _navierStokesSides(x, t, k, nu, rho0, amplitude)
        assert float(lhs.abs().max()) > 0.05  # the nonlinear term is not zero here
        torch.testing.assert_close(lhs, rhs, rtol=0, atol=1e-12)
        torch.testing.assert_close(lap, -k * k * v, rtol=0, atol=1e-12)
    # the pressure is needed: without it the momentum balance fails
    lhs, rhs, lap, v = _navierStokesSides(_points(1)[0], torch.tensor(0.2, dtype=F64), k, nu,
                                          rho0, amplitude)
    assert float((lhs - nu * lap).abs().max()) > 0.05


def test_lattice_energy_max_speed_and_time_step():
    config = beltrami.BeltramiConfig(n=6, support=2.5, re=5.0)
    case = beltrami.setup(config)
    N, dx = 216, 2.0 * math.pi / 6
    assert case.positions.shape == (N, 3) and case.dx == pytest.approx(dx)
    assert case.masses.sum().item() == pytest.approx((2.0 * math.pi) ** 3)
    # the discrete kinetic energy on the lattice is the analytic (3 / 2) M U^2
    e0 = 0.5 * float((case.masses[:, None] * case.velocities**2).sum())
    assert e0 == pytest.approx(1.5 * float(case.masses.sum()), rel=1e-13)
    # and so on any lattice of n >= 3 cells, for any amplitude
    for n in (3, 5, 8):
        g = (torch.arange(n, dtype=F64) + 0.5) * 2 * math.pi / n
        x = torch.stack(torch.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
        mean = float((beltrami.beltramiVelocity(x, 0.7) ** 2).sum(1).mean())
        assert mean == pytest.approx(3 * 0.49, rel=1e-13)
    # max |u0| = sqrt(6) U at x = y = z = pi / 4
    peak = beltrami.beltramiVelocity(torch.full((1, 3), math.pi / 4, dtype=F64), 2.0)
    assert float(peak.norm()) == pytest.approx(2.0 * math.sqrt(6.0), rel=1e-14)
    assert float(case.velocities.norm(dim=1).max()) <= math.sqrt(6.0) + 1e-12
    # constants, the end time t_half and the time step (acoustic limit at n = 6, Re = 5)
    nu = 2 * math.pi / 5
    assert case.nu == pytest.approx(nu) and config.nu == pytest.approx(nu)
    assert case.c0 == pytest.approx(10 * math.sqrt(6.0))
    assert case.t == pytest.approx(math.log(2) / (2 * nu))
    limit = min(0.25 * dx / (case.c0 + math.sqrt(6.0)), 0.125 * dx * dx / nu)
    assert case.steps == math.ceil(case.t / limit)
    assert case.dt * case.steps == pytest.approx(case.t) and case.dt <= limit
    # the analytic kinetic energy halves at t_half
    decay = math.exp(-nu * case.t)
    assert decay**2 == pytest.approx(0.5, rel=1e-14)
    scheme = beltrami.beltramiScheme(case)
    assert scheme.c0 == case.c0 and scheme.viscosity == pytest.approx(nu)
    assert scheme.transportVelocity.backgroundPressure == pytest.approx(case.c0**2)
    assert scheme.density == "summation"


def test_tiny_run(tmp_path):
    config = beltrami.BeltramiConfig(n=8, support=3.0, t=0.06)
    threads = torch.get_num_threads()
    r = beltrami.run(config, tmp_path, quiet=True)
    assert torch.get_num_threads() == threads
    saved = json.loads((tmp_path / "results.json").read_text())
    for key in ("kineticEnergyRelErr", "velocityL2RelErr", "msPerStep", "particles", "steps",
                "dt", "t", "nu", "re", "kineticEnergyRelErrAnalytic", "maxVelocityRelErr",
                "tHalf", "history"):
        assert key in saved, key
        assert saved[key] == r[key], key
    for key in ("kineticEnergyRelErr", "velocityL2RelErr", "msPerStep", "dt", "nu"):
        assert math.isfinite(r[key]) and (key == "kineticEnergyRelErr" or r[key] > 0), key
    assert r["particles"] == 512 and r["t"] == 0.06 and r["re"] == 10.0
    assert r["nu"] == pytest.approx(2 * math.pi / 10)
    assert r["steps"] * r["dt"] == pytest.approx(0.06) and r["steps"] >= 8
    # the lattice start: E_0 is the analytic energy, so both energy errors agree
    assert r["kineticEnergyRelErr"] == pytest.approx(r["kineticEnergyRelErrAnalytic"],
                                                     abs=1e-12)
    assert abs(r["kineticEnergyRelErr"]) < 0.02
    assert r["velocityL2RelErr"] < 0.05
    h = r["history"]
    assert h["time"][0] == 0.0 and h["time"][-1] == pytest.approx(0.06)
    assert h["kineticEnergy"][0] == pytest.approx(1.5, rel=1e-12)
    decay = math.exp(-2 * r["nu"] * 0.06)
    assert h["kineticEnergy"][-1] / h["kineticEnergy"][0] == pytest.approx(decay, rel=0.02)
    png = tmp_path / "beltrami.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def _discretePressure(case):
    """c0^2 (rho - rho0) of summation density at the case's start, mean removed."""
    particles = ParticleState(case.positions, case.supports, case.masses, case.kinds)
    adjacency = radiusSearchCompactHashMap(particles, case.domain, mode=SupportScheme.Gather)
    V = numberDensityVolumes(particles, case.domain, adjacency, beltrami.KERNEL)
    p = case.c0**2 * (case.masses / V - case.rho0)
    return p - p.mean()


def test_pressure_start_carries_the_analytic_pressure(tmp_path):
    lattice = beltrami.setup(beltrami.BeltramiConfig(n=12, support=3.0))
    assert float(_discretePressure(lattice).abs().max()) < 1e-9  # p = const on the lattice
    case = beltrami.setup(beltrami.BeltramiConfig(n=12, support=3.0, pressure=True))
    shift = case.positions - lattice.positions
    assert 0 < float(shift.abs().max()) < 0.01 * case.dx  # sqrt(3) U^2 / (2 c0^2) at most
    p = _discretePressure(case)
    exact = beltrami.beltramiPressure(case.positions, 1.0)
    exact = exact - exact.mean()
    # the kernel-smoothed number density carries 85 % of the |k| = sqrt(2) pressure modes
    slope = float((p * exact).sum() / (exact * exact).sum())
    assert 0.75 < slope < 1.0
    assert float((p - slope * exact).norm() / (slope * exact).norm()) < 0.05
    # and the acoustic error of the unbalanced start drops
    short = dict(n=8, support=3.0, t=0.06)
    plain = beltrami.run(beltrami.BeltramiConfig(**short), tmp_path / "p0", quiet=True)
    balanced = beltrami.run(beltrami.BeltramiConfig(**short, pressure=True), tmp_path / "p1",
                            quiet=True)
    assert balanced["velocityL2RelErr"] < 0.7 * plain["velocityL2RelErr"]


def test_cli_run_with_frames(tmp_path, capsys):
    out = tmp_path / "abc"
    assert main(["run", "beltrami", "--n", "6", "--support", "2.5", "--t", "0.03",
                 "--frames", "4", "--out", str(out), "--quiet"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["config"]["n"] == 6 and r["particles"] == 216 and r["t"] == 0.03
    frames = sorted((out / "frames").glob("frame_*.vtu"))
    assert frames and frames[0].name == "frame_000000.vtu"
    _, fields, meta = readParticles(frames[-1])
    assert fields["positions"].shape == (216, 3)
    assert meta["domain"].periodic.tolist() == [True, True, True]
    assert "warpsph run beltrami" in capsys.readouterr().out


def test_registry_and_config():
    case = CASES["beltrami"]
    assert case.run is beltrami.run and case.config is beltrami.BeltramiConfig
    c = case.config()
    assert (c.n, c.re, c.u, c.t, c.relax, c.support, c.pb, c.soundSpeed, c.pressure,
            c.threads) == (20, 10.0, 1.0, 0.0, 0, 4.0, 1.0, 10.0, False, 1)
    assert c.re <= 10 and c.end == pytest.approx(math.log(2) / (2 * c.nu))
    assert beltrami.BeltramiConfig(t=0.3).end == 0.3
    with pytest.raises(ValueError, match="half the box"):
        beltrami.BeltramiConfig(n=8)
    with pytest.raises(ValueError, match="dtype"):
        beltrami.BeltramiConfig(dtype="float16")
    with pytest.raises(ValueError, match="re=0"):
        beltrami.BeltramiConfig(re=0.0)
    with pytest.raises(ValueError, match="t=-1"):
        beltrami.BeltramiConfig(t=-1.0)
    with pytest.raises(ValueError, match="threads"):
        beltrami.BeltramiConfig(threads=-1)
