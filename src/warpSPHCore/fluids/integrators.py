"""Explicit time integration of the weakly compressible SPH state (issue 16, item 3).

The state is `FluidState` (positions, velocities, densities, time); a *rate function*
``rates(state) -> Rates`` returns the accelerations and, with a continuity equation, the
density rates (None with summation density, which the rate function recomputes from the
positions itself). Every step is plain torch arithmetic on the tensors, so it is
differentiable in reverse and forward mode through any number of steps, and it never reads
a value back to the host.

=====================  =================================================================
`symplecticEuler`      v' = v + dt a(s); x' = x + dt v'; rho' = rho + dt drho(s)
                       (first order, symplectic for position-only forces)
`kickDriftKick`        velocity Verlet: v_h = v + dt/2 a(s); rho_h = rho + dt/2 drho(s);
                       x' = x + dt v_h; then v' = v_h + dt/2 a(s'), rho' = rho_h + dt/2
                       drho(s') with s' = (x', v_h, rho_h) (second order for forces that
                       depend on the positions only; velocity- and density-dependent rates
                       are evaluated at the half-step velocity and density, as in Adami,
                       Hu & Adams 2013). The rates at s' are returned for the next step's
                       first kick: one rate evaluation per step.
`predictorCorrector`   the midpoint (Monaghan 1989) scheme: a predictor half step
                       s_h = s + dt/2 f(s), a corrector half step s_c = s + dt/2 f(s_h),
                       and s' = 2 s_c - s (second order for every rate; two evaluations)
=====================  =================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

__all__ = ["FluidState", "Rates", "evaluateRates", "symplecticEuler", "kickDriftKick",
           "predictorCorrector"]


@dataclass(frozen=True)
class FluidState:
    """Positions ``[N, d]``, velocities ``[N, d]``, densities ``[N]`` (None when the rate
    function computes them by summation) and the time (a number or a 0-dim tensor)."""

    positions: torch.Tensor
    velocities: torch.Tensor
    densities: torch.Tensor | None = None
    time: float | torch.Tensor = 0.0

    def __post_init__(self):
        x, v = self.positions, self.velocities
        if not isinstance(x, torch.Tensor) or not isinstance(v, torch.Tensor):
            raise TypeError("FluidState: positions and velocities must be torch.Tensors")
        if x.dim() != 2 or tuple(v.shape) != tuple(x.shape):
            raise ValueError(f"FluidState: positions {tuple(x.shape)} and velocities "
                             f"{tuple(v.shape)}; accepted: both [N, d]")
        rho = self.densities
        if rho is not None and tuple(rho.shape) != (x.shape[0],):
            raise ValueError(f"FluidState: densities {tuple(rho.shape)}; accepted: "
                             f"[{x.shape[0]}] or None")


@dataclass(frozen=True)
class Rates:
    """Accelerations ``[N, d]`` and density rates ``[N]`` (None: the densities are not
    integrated)."""

    accelerations: torch.Tensor
    densityRates: torch.Tensor | None = None


def evaluateRates(rateFn, state: FluidState) -> Rates:
    """``rateFn(state)``, checked: a `Rates` whose accelerations match the velocities and
    whose density rates are present exactly when the state carries densities."""
    r = rateFn(state)
    if not isinstance(r, Rates):
        raise TypeError(f"the rate function must return a Rates, got {type(r).__name__}")
    if tuple(r.accelerations.shape) != tuple(state.velocities.shape):
        raise ValueError(f"the rate function returned accelerations "
                         f"{tuple(r.accelerations.shape)}; accepted: "
                         f"{tuple(state.velocities.shape)} (the velocities' shape)")
    if (r.densityRates is None) != (state.densities is None):
        raise ValueError("the rate function must return densityRates exactly when the state "
                         "carries densities (None with summation density)")
    return r


def _advance(rho, drho, dt):
    return None if rho is None else rho + dt * drho


def symplecticEuler(state: FluidState, dt, rateFn) -> FluidState:
    """One semi-implicit (symplectic) Euler step (module table)."""
    r = evaluateRates(rateFn, state)
    v = state.velocities + dt * r.accelerations
    return FluidState(state.positions + dt * v, v,
                      _advance(state.densities, r.densityRates, dt), state.time + dt)


def kickDriftKick(state: FluidState, dt, rateFn, rates: Rates | None = None):
    """One kick-drift-kick (velocity Verlet) step (module table).

    Args:
        state: the state at t.
        dt: the time step (number or 0-dim tensor).
        rateFn: ``rates(state) -> Rates``.
        rates: the rates at `state` when known (the previous step's returned rates), else
            evaluated here.

    Returns:
        ``(state at t + dt, rates at the end of the step)``; pass the rates to the next call.
    """
    r0 = evaluateRates(rateFn, state) if rates is None else rates
    half = 0.5 * dt
    vHalf = state.velocities + half * r0.accelerations
    rhoHalf = _advance(state.densities, r0.densityRates, half)
    drifted = FluidState(state.positions + dt * vHalf, vHalf, rhoHalf, state.time + dt)
    r1 = evaluateRates(rateFn, drifted)
    new = replace(drifted, velocities=vHalf + half * r1.accelerations,
                  densities=_advance(rhoHalf, r1.densityRates, half))
    return new, r1


def predictorCorrector(state: FluidState, dt, rateFn) -> FluidState:
    """One predictor-corrector (midpoint) step (module table): second order for every rate
    function, two rate evaluations."""
    half = 0.5 * dt

    def halfStep(rates: Rates, at: FluidState) -> FluidState:
        return FluidState(state.positions + half * at.velocities,
                          state.velocities + half * rates.accelerations,
                          _advance(state.densities, rates.densityRates, half),
                          state.time + half)

    predicted = halfStep(evaluateRates(rateFn, state), state)
    corrected = halfStep(evaluateRates(rateFn, predicted), predicted)
    rho = None if state.densities is None else 2.0 * corrected.densities - state.densities
    return FluidState(2.0 * corrected.positions - state.positions,
                      2.0 * corrected.velocities - state.velocities, rho, state.time + dt)
