"""The dam-break case (`fluids.cases.dambreak`): the Martin & Moyce table and its scaling,
the hydrostatic start, the front measures (unshifted error, the fitted arrival-time offset
and its residual, Ritter's bound), tiny runs in 2D and 3D with free-slip and no-slip walls
(the column collapses, the fluid volume is kept, no particle leaves the tank, results.json
has the documented keys) and the config validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from warpSPHCore.fluids.cases import dambreak
from warpSPHCore.fluids.eos import taitPressure
from warpSPHCore.fluids.integrators import FluidState
from warpSPHCore.fluids.loop import VerletNeighbours

KEYS = {"case", "dim", "frontMaxRelErr", "frontMeanRelErr", "frontLagT", "frontRmsResidualT",
        "frontMaxRelErrLagged", "frontMaxRelErrLaggedAllT", "ritterExcess", "ritterBoundHolds",
        "particlesOutside",
        "wallCrossingEvents", "maxWallPenetration", "stepper", "frontFinal", "msPerStep",
        "particleStepsPerSecond", "particles", "fluidParticles", "steps", "dx", "dt", "c0",
        "tEnd", "TEnd", "fluidVolumeRelChange", "densityRange", "fluidInsideTank", "finite",
        "neighbourBuilds", "seconds", "figure", "config", "history", "data"}


def test_martin_moyce_table_is_monotone_and_scaled():
    data = np.asarray(dambreak.MARTIN_MOYCE)
    T, Z = data[:, 0], data[:, 1]
    assert (T[0], Z[0]) == (0.0, 1.0)
    assert np.all(np.diff(T) > 0) and np.all(np.diff(Z) > 0)
    assert T[-1] == pytest.approx(2.96) and 0.4 < T[1] < 0.45
    # the front positions are whole 1/4 inches on the a = 2.25 in column: Z = 1 + k / 9
    np.testing.assert_allclose(Z, 1.0 + np.round((Z - 1.0) * 9.0) / 9.0, atol=0.01)
    # shallow-water theory (Ritter): the front runs at 2 sqrt(g 2a) at most, i.e.
    # dZ/dT <= 2 with T = t sqrt(2 g / a); with T = t sqrt(g / a) the bound would be 2 sqrt 2
    assert np.all(np.diff(Z) / np.diff(T) < 2.0)
    assert 1.0 < (Z[-1] - Z[6]) / (T[-1] - T[6]) < 2.0
    a, g, t = 0.05715, 9.81, 0.1
    assert dambreak.dimensionlessTime(t, a, g) == pytest.approx(t * math.sqrt(2 * g / a))
    assert dambreak.dimensionlessTime(t, 1.0, 0.5) == pytest.approx(t)


def test_front_error_measure():
    data = np.asarray(dambreak.MARTIN_MOYCE)
    T = np.linspace(0.0, 3.0, 301)
    Z = np.interp(T, data[:, 0], data[:, 1])
    maxErr, meanErr = dambreak.frontError(T, Z)
    assert maxErr < 1e-12 and meanErr < 1e-12
    maxErr, meanErr = dambreak.frontError(T, 1.1 * Z)
    assert maxErr == pytest.approx(0.1) and meanErr == pytest.approx(0.1)
    assert math.isnan(dambreak.frontError(T[:100], Z[:100])[0])  # ends at T = 0.99 < 2.5


def test_front_lag_is_the_fitted_arrival_time_offset():
    """A front that is the data delayed by 0.2 in T has frontLagT = 0.2, no residual, and no
    error once shifted; noise on the arrival times shows as the rms residual."""
    data = np.asarray(dambreak.MARTIN_MOYCE)
    T = np.linspace(0.0, 3.6, 721)
    Z = np.interp(T, data[:, 0] - 0.2, data[:, 1], left=1.0)  # leads the data by 0.2
    lag, rms = dambreak.frontLag(T, Z)
    assert lag == pytest.approx(0.2, abs=1e-3) and rms < 1e-3
    assert dambreak.frontError(T, Z, lag=lag)[0] < 2e-3
    assert dambreak.frontError(T, Z, tMax=None, lag=lag, zRange=dambreak.LAG_Z_RANGE)[0] < 2e-3
    assert dambreak.frontError(T, Z)[0] > 0.05  # unshifted, the lead is an error
    # the fitted points: the tabulated Z = 1.22 .. 3.0 (k = 2 .. 18 quarter inches)
    Tk, Zk = dambreak._data(zRange=dambreak.LAG_Z_RANGE)
    assert len(Zk) == 9 and Zk[0] == pytest.approx(1.23) and Zk[-1] == pytest.approx(3.0)
    arrival = dambreak.arrivalTimes(T, Z, Zk)
    np.testing.assert_allclose(Tk - arrival, 0.2, atol=2e-3)
    # a run that never reaches Z = 3 has no lag
    assert all(math.isnan(v) for v in dambreak.frontLag(T[:200], Z[:200]))
    # Ritter: Z = 1 + 2T bounds an inviscid front; the data respect it, a faster front not
    assert dambreak.ritterExcess(data[:, 0], data[:, 1]) <= 0.0
    assert dambreak.ritterExcess(T, 1.0 + 2.5 * T) == pytest.approx(0.5 * T[-1])


def test_hydrostatic_start():
    cfg = dambreak.DamBreakConfig(n=8, tEnd=0.5)
    case = dambreak.setup(cfg)
    nf, dx, a = case.fluidCount, case.dx, cfg.a
    fluid = case.kinds == 0
    assert nf == 8 * 16 and int(fluid[:nf].sum()) == nf and not bool(fluid[nf:].any())
    x = case.positions[:nf]
    assert float(x[:, 0].max()) == pytest.approx(a - dx / 2)
    assert float(x[:, 1].max()) == pytest.approx(2 * a - dx / 2)
    p = case.pressures[:nf]
    # the exact hydrostatics of the Tait fluid: rho0 g depth to first order, a little more
    depth = 2 * a - x[:, 1]
    torch.testing.assert_close(p, cfg.rho0 * cfg.g * depth, rtol=3e-3, atol=0)
    assert bool((p >= cfg.rho0 * cfg.g * depth).all())
    torch.testing.assert_close(taitPressure(case.densities[:nf], cfg.rho0, case.c0), p)
    assert float(case.densities[:nf].max()) < cfg.rho0 * 1.01  # ~1 % compression at c0
    assert case.c0 == pytest.approx(10 * math.sqrt(2 * cfg.g * 2 * a))
    # the start is in balance away from the free edge: walls extrapolate the hydrostatics
    nb = VerletNeighbours(case.domain, case.supports, 0.0)
    state = FluidState(case.positions, case.velocities, case.densities)
    rates = dambreak.damBreakRates(case)(state, nb(state.positions))
    acc = rates.accelerations
    assert float(acc[nf:].abs().max()) == 0.0  # walls never move
    interior = (x[:, 0] < a - 3 * dx) & (x[:, 1] < 2 * a - 3 * dx)
    assert float(acc[:nf][interior].norm(dim=1).max()) < 0.15 * cfg.g
    assert float(acc[:nf, 0].max()) > cfg.g  # the free edge is pushed out


def test_tiny_run(tmp_path):
    cfg = dambreak.DamBreakConfig(n=6, tEnd=1.0, record=5)
    r = dambreak.run(cfg, tmp_path, quiet=True)
    assert r["stepper"] == "predictorCorrector" and r["wallCrossingEvents"] == 0
    assert KEYS <= set(r)
    assert json.loads((tmp_path / "results.json").read_text())["steps"] == r["steps"]
    assert (tmp_path / "dambreak.png").stat().st_size > 0
    assert r["finite"] and r["fluidInsideTank"]
    assert r["particles"] > r["fluidParticles"] == 6 * 12
    h = r["history"]
    assert h["T"][0] == 0.0 and h["Z"][0] == pytest.approx(1.0)
    assert h["T"][-1] == pytest.approx(1.0)
    assert r["frontFinal"] > 1.15  # the column collapses ...
    assert np.all(np.diff(h["Z"]) > -0.05)  # ... and its front advances
    assert math.isnan(r["frontMaxRelErr"])  # too short for the T <= 2.5 error
    assert abs(r["fluidVolumeRelChange"]) < 0.02  # mass kept: sum m / rho stays
    lo, hi = r["densityRange"]
    assert 0.9 * cfg.rho0 < lo <= hi < 1.1 * cfg.rho0
    assert r["msPerStep"] > 0 and r["particleStepsPerSecond"] > 0


def test_tiny_run_in_3d(tmp_path):
    """The column in a channel of width a: walls on five sides, gravity along -z, the front
    along x, no-slip walls with a laminar viscosity; the walls hold (no crossing) and the
    front advances."""
    cfg = dambreak.DamBreakConfig(dim=3, n=4, tEnd=0.6, record=5, noSlip=True, nu=1e-3)
    case = dambreak.setup(cfg)
    assert 0.0 < float(case.scheme._noSlipShare(case.particles)) < 1.0  # a viscous no-slip
    assert case.positions.shape[1] == 3 and case.fluidCount == 4 * 4 * 8
    assert case.scheme.bodyForce == (0.0, 0.0, -cfg.g)
    r = dambreak.run(cfg, tmp_path, quiet=True)
    assert r["dim"] == 3 and r["finite"] and r["fluidInsideTank"]
    assert r["frontFinal"] > 1.05 and r["ritterBoundHolds"]
    assert abs(r["fluidVolumeRelChange"]) < 0.02
    assert dambreak.DamBreakConfig(dim=3).n == 10 and dambreak.DamBreakConfig().n == 20


@pytest.mark.parametrize("bad", [dict(n=1), dict(tank=1.0), dict(tank=4.03),
                                 dict(diffusion="x"), dict(dtype="float16"), dict(cfl=0.0),
                                 dict(threads=-1), dict(record=0), dict(dim=4)])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        dambreak.DamBreakConfig(**bad)
