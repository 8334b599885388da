"""Integrators (`fluids.integrators`) on problems with analytic solutions: a harmonic
oscillator (position-dependent force) and exponential density decay (a density rate),
their convergence orders (measured from the error at two step sizes), the symplectic
schemes' bounded energy error over long times, reuse of the rates in kick-drift-kick,
derivatives through a rollout against central differences, and the validation."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore.fluids import (
    FluidState,
    Rates,
    defaultStepper,
    kickDriftKick,
    predictorCorrector,
    symplecticEuler,
)

OMEGA, K = 2.0, 0.7


def _oscillator(state: FluidState, neighbours=None) -> Rates:
    drho = None if state.densities is None else -K * state.densities
    return Rates(-OMEGA**2 * state.positions, drho)


def _start(n=3, d=2, densities=True):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    rho = torch.full((n,), 1000.0, dtype=torch.float64) if densities else None
    return FluidState(x, v, rho)


def _exact(s0: FluidState, t):
    c, s = math.cos(OMEGA * t), math.sin(OMEGA * t)
    x = s0.positions * c + s0.velocities * s / OMEGA
    v = -s0.positions * OMEGA * s + s0.velocities * c
    rho = None if s0.densities is None else s0.densities * math.exp(-K * t)
    return x, v, rho


def _run(step, s0, T, n):
    dt = T / n
    s, r = s0, None
    for _ in range(n):
        s, r = step(s, dt, _oscillator, None, r)  # one signature for every stepper
    return s


def _errors(step, s0, T, n):
    s = _run(step, s0, T, n)
    x, v, rho = _exact(s0, T)
    ex = float((s.positions - x).abs().max() + (s.velocities - v).abs().max())
    er = float((s.densities - rho).abs().max() / rho.abs().max())
    return ex, er, s


@pytest.mark.parametrize("step, orderX, orderRho", [
    (symplecticEuler, 1, 1),
    (kickDriftKick, 2, 1),      # densities kicked at the half step (module docstring)
    (predictorCorrector, 2, 2),
])
def test_convergence_orders(step, orderX, orderRho):
    s0 = _start()
    T = 1.0
    ex1, er1, s = _errors(step, s0, T, 200)
    ex2, er2, _ = _errors(step, s0, T, 400)
    assert math.log2(ex1 / ex2) == pytest.approx(orderX, abs=0.15)
    assert math.log2(er1 / er2) == pytest.approx(orderRho, abs=0.15)
    assert float(s.time) == pytest.approx(T, rel=1e-12)


@pytest.mark.parametrize("step", [symplecticEuler, kickDriftKick])
def test_symplectic_energy_stays_bounded(step):
    """Long run (about 64 periods): the symplectic schemes keep the oscillator's energy
    within O(dt) (Euler) / O(dt^2) (velocity Verlet) of its start; no drift."""
    s0 = _start(densities=False)
    dt = 0.01

    def energy(s):
        return 0.5 * (s.velocities**2).sum() + 0.5 * OMEGA**2 * (s.positions**2).sum()

    e0 = float(energy(s0))
    s, r, worst = s0, None, 0.0
    for k in range(20000):
        s, r = step(s, dt, _oscillator, None, r)
        if k % 100 == 0:
            worst = max(worst, abs(float(energy(s)) - e0) / e0)
    bound = OMEGA * dt if step is symplecticEuler else (OMEGA * dt) ** 2
    assert worst < bound


def test_kick_drift_kick_evaluates_the_rates_once_per_step():
    calls = []

    def counted(state, neighbours):
        calls.append(1)
        return _oscillator(state)

    s, r = _start(), None
    for _ in range(10):
        s, r = kickDriftKick(s, 0.01, counted, None, r)
    assert len(calls) == 11  # the first step evaluates its start as well


def test_rollout_gradient_matches_central_differences():
    """d(final kinetic energy)/d(omega-scaled start) through 50 KDK steps, float64."""
    s0 = _start(densities=False)

    def final(x0):
        s, r = FluidState(x0, s0.velocities), None
        for _ in range(50):
            s, r = kickDriftKick(s, 0.02, _oscillator, None, r)
        return (s.velocities**2).sum() + s.positions[0, 0]

    x0 = s0.positions.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(final(x0), x0)
    fd = torch.zeros_like(g)
    for i in range(x0.shape[0]):
        for a in range(x0.shape[1]):
            e = torch.zeros_like(g)
            e[i, a] = 1e-6
            fd[i, a] = (final(s0.positions + e) - final(s0.positions - e)) / 2e-6
    torch.testing.assert_close(g, fd, rtol=1e-7, atol=1e-9)
    # forward mode through the same rollout
    v = torch.randn_like(g)
    _, jvp = torch.func.jvp(final, (s0.positions,), (v,))
    torch.testing.assert_close(jvp, (g * v).sum(), rtol=1e-10, atol=1e-12)


def test_state_and_rates_are_validated():
    x = torch.zeros(4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="accepted: both"):
        FluidState(x, torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"accepted: \[4\] or None"):
        FluidState(x, x, torch.zeros(3, dtype=torch.float64))
    s = FluidState(x, x, None)
    with pytest.raises(ValueError, match="densityRates exactly when"):
        symplecticEuler(s, 0.1, lambda st, nb: Rates(st.positions, torch.zeros(4)))
    with pytest.raises(ValueError, match="the velocities' shape"):
        symplecticEuler(s, 0.1, lambda st, nb: Rates(st.positions[:, :1]))
    with pytest.raises(TypeError, match="must return a Rates"):
        predictorCorrector(s, 0.1, lambda st, nb: st.positions)
    withRho = FluidState(x, x, torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"densityRates \(4, 1\); accepted: \(4,\)"):
        kickDriftKick(withRho, 0.1, lambda st, nb: Rates(st.positions,
                                                         torch.zeros(4, 1, dtype=x.dtype)))


def test_default_stepper_follows_the_density_treatment():
    """Summation density (no densities in the state): kick-drift-kick; integrated densities:
    predictor-corrector (the stable choice with a continuity equation)."""
    x = torch.zeros(4, 2, dtype=torch.float64)
    assert defaultStepper(FluidState(x, x)) is kickDriftKick
    assert defaultStepper(FluidState(x, x, torch.ones(4, dtype=x.dtype))) is predictorCorrector
