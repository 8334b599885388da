"""The hydrostatic tank (`warpsph run hydrostatic`): the exact hydrostatic pressure of the
equations of state, the start in balance (walls of volume dx^2), a tiny run that stays at
rest inside its walls with the hydrostatic pressure, and the configuration checks."""

from __future__ import annotations

import json
import math

import pytest
import torch

from warpSPHCore.fluids import FluidState, Linear, Tait, VerletNeighbours
from warpSPHCore.fluids.cases import CASES, hydrostatic

F64 = torch.float64


@pytest.mark.parametrize("eos", [Tait(), Tait(gamma=3.0, backgroundPressure=5.0), Linear()],
                         ids=["tait", "tait3", "linear"])
def test_exact_hydrostatic_pressure_solves_dp_dz(eos):
    """dp/d(depth) = rho(p) g, p = p_b at the surface, rho0 g depth to first order."""
    rho0, c0, g = 1000.0, 30.0, 9.81
    depth = torch.linspace(0.0, 2.0, 21, dtype=F64, requires_grad=True)
    p = eos.hydrostaticPressure(depth, rho0, c0, g)
    (dp,) = torch.autograd.grad(p.sum(), depth)
    torch.testing.assert_close(dp, eos.density(p.detach(), rho0, c0) * g, rtol=1e-12, atol=0)
    assert float(p[0].detach()) == pytest.approx(eos.backgroundPressure, abs=1e-9)
    shallow = eos.hydrostaticPressure(torch.tensor(1e-4, dtype=F64), rho0, c0, g)
    assert float(shallow - eos.backgroundPressure) == pytest.approx(rho0 * g * 1e-4, rel=1e-5)


def test_start_is_in_balance():
    """Walls of volume dx^2 and masses rho(0) dx^2: the rows above the floor feel no net
    force (the wall masses rho0 dx^2 with V = m / rho_w gave -0.17 g at H/20); the walls never
    move."""
    tank = hydrostatic.setup(hydrostatic.HydrostaticConfig(n=20, tEnd=0.1))
    nf, dx = tank.fluidCount, tank.dx
    rates = tank.scheme.rates(tank.particles)
    state = tank.state
    nb = VerletNeighbours(tank.particles.domain, tank.particles.supports, 0.0)
    acc = rates(state, nb(state)).accelerations
    assert float(acc[nf:].abs().max()) == 0.0
    x = state.positions[:nf]
    middle = (x[:, 0] > 0.5) & (x[:, 0] < 1.5)
    for row in range(3):
        sel = middle & ((x[:, 1] - (row + 0.5) * dx).abs() < 1e-9)
        assert abs(float(acc[:nf][sel, 1].mean())) < 0.02 * tank.config.g, row


def test_tiny_run_stays_at_rest(tmp_path):
    cfg = hydrostatic.HydrostaticConfig(n=8, tEnd=1.0)
    r = hydrostatic.run(cfg, tmp_path, quiet=True)
    assert json.loads((tmp_path / "results.json").read_text())["steps"] == r["steps"]
    assert (tmp_path / "hydrostatic.png").stat().st_size > 0
    assert r["stepper"] == "predictorCorrector" and r["finite"]
    assert r["particlesLeft"] == 0 and r["wallCrossings"] == 0
    assert r["pressureL2RelErr"] < 0.03
    assert r["maxSpeed"] < 0.01
    assert abs(r["surfaceDrift"]) < 0.01
    assert r["c0"] == pytest.approx(10 * math.sqrt(2 * cfg.g * cfg.H))
    assert r["dt"] <= 0.25 * r["dx"] / r["c0"] * (1 + 1e-12)
    assert r["particles"] == 8 * 16 + r["particles"] - r["fluidParticles"]


@pytest.mark.slow
def test_kick_drift_kick_is_unstable_where_the_default_is_not(tmp_path):
    """The reason for the default: kick-drift-kick with a continuity equation at the
    acoustic time step lets the tank blow up, the scheme's predictor-corrector does not."""
    base = dict(n=8, tEnd=5.0)
    kdk = hydrostatic.run(hydrostatic.HydrostaticConfig(**base, stepper="kickDriftKick"),
                          tmp_path / "kdk", quiet=True)
    pc = hydrostatic.run(hydrostatic.HydrostaticConfig(**base), tmp_path / "pc", quiet=True)
    assert pc["maxSpeed"] < 0.01 < kdk["maxSpeed"]


def test_registered_and_validated():
    assert CASES["hydrostatic"].config is hydrostatic.HydrostaticConfig
    for bad in (dict(n=2), dict(width=1.03), dict(diffusion="x"), dict(stepper="rk4"),
                dict(dtype="float16"), dict(g=0.0)):
        with pytest.raises(ValueError):
            hydrostatic.HydrostaticConfig(**bad)
    # the state of a fluid at rest: densities of the exact hydrostatic pressures
    tank = hydrostatic.setup(hydrostatic.HydrostaticConfig(n=6, tEnd=0.1))
    nf = tank.fluidCount
    p = tank.scheme.equationOfState.pressure(tank.state.densities[:nf], 1.0, tank.c0)
    torch.testing.assert_close(p, hydrostatic.exactPressure(tank, tank.state.positions[:nf]))
    assert isinstance(tank.state, FluidState)
