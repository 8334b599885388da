"""Explicit time integration of the weakly compressible SPH state.

The state is `FluidState` (positions, velocities, densities, time). A *rate function*

    rates(state: FluidState, neighbours: AdjacencyList) -> Rates

returns the accelerations and, with a continuity equation, the density rates (None with
summation density, which the rate function recomputes from the positions itself). The
same signature serves every stepper, `Simulation`, `rollout` and the cases; the list is
produced by a neighbour policy (`fluids.neighbours`): a `VerletNeighbours`, a fixed
`AdjacencyList`, a callable, or None (the operators then build a grid per call).

Every stepper has one signature, so they are interchangeable (a user's own included):

    stepper(state, dt, rates, neighbours, carried=None) -> (new state, carried)

`carried` is what the stepper hands to its next call: kick-drift-kick's end-of-step rates
(its next first kick), None for the others. Every step is plain torch arithmetic on the
tensors, so it is differentiable in reverse and forward mode through any number of steps,
and it never reads a value back to the host.

=====================  =================================================================
`symplecticEuler`      v' = v + dt a(s); x' = x + dt v'; rho' = rho + dt drho(s)
                       (first order, symplectic for position-only forces)
`kickDriftKick`        velocity Verlet: v_h = v + dt/2 a(s); rho_h = rho + dt/2 drho(s);
                       x' = x + dt v_h; then v' = v_h + dt/2 a(s'), rho' = rho_h + dt/2
                       drho(s') with s' = (x', v_h, rho_h) (second order for forces that
                       depend on the positions only; velocity- and density-dependent rates
                       are evaluated at the half-step velocity and density, as in Adami,
                       Hu & Adams 2013). The rates at s' are carried to the next step's
                       first kick: one rate evaluation per step.
`predictorCorrector`   the midpoint (Monaghan 1989) scheme: a predictor half step
                       s_h = s + dt/2 f(s), a corrector half step s_c = s + dt/2 f(s_h),
                       and s' = 2 s_c - s (second order for every rate; two evaluations)
=====================  =================================================================

**Which stepper by default** (`defaultStepper`): kick-drift-kick when the densities are
not integrated (summation density: the density is a function of the positions and the
scheme is symplectic), predictor-corrector when they are (a continuity equation). With a
continuity equation, kick-drift-kick kicks the velocities and the densities with rates
evaluated at one state, so the acoustic exchange between pressure and velocity is
integrated like forward Euler: its highest modes grow by about (1 + (omega dt)^2)^(1/2)
per step, and only the density diffusion holds them back. A tank at rest at the acoustic
time step (0.25 dx / c0) blows up within a few thousand steps (docs/fluids.md, "Stable
defaults"); the midpoint scheme's growth is of fourth order in omega dt, which the density
diffusion absorbs. No one-evaluation scheme avoids this: a symplectic pairing of density
and velocity needs the density rate from the new velocity and the acceleration from the
new density, two evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .neighbours import neighbourList

__all__ = ["FluidState", "Rates", "evaluateRates", "symplecticEuler", "kickDriftKick",
           "predictorCorrector", "defaultStepper", "advance"]


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
        if rho is not None and (not isinstance(rho, torch.Tensor)
                                or tuple(rho.shape) != (x.shape[0],)):
            shape = tuple(rho.shape) if isinstance(rho, torch.Tensor) else type(rho).__name__
            raise ValueError(f"FluidState: densities {shape}; accepted: [{x.shape[0]}] or "
                             "None")


@dataclass(frozen=True)
class Rates:
    """Accelerations ``[N, d]`` and density rates ``[N]`` (None: the densities are not
    integrated)."""

    accelerations: torch.Tensor
    densityRates: torch.Tensor | None = None


def evaluateRates(rates, state: FluidState, neighbours=None) -> Rates:
    """``rates(state, list)`` with the list of the neighbour policy `neighbours`
    (`fluids.neighbours`; the state's periodic positions wrapped first when the policy
    wraps), checked: a `Rates` whose accelerations match the velocities and whose density
    rates are present exactly when the state carries densities, shaped ``[N]``.

    Args:
        rates: ``rates(state, neighbours) -> Rates``.
        state: the `FluidState`.
        neighbours: `VerletNeighbours`, an `AdjacencyList`, a callable
            ``state -> AdjacencyList``, or None (the rates receive None).

    Returns:
        The `Rates`.
    """
    if neighbours is None:
        adjacency = None
    else:
        state, adjacency = neighbourList(neighbours, state)
    r = rates(state, adjacency)
    if not isinstance(r, Rates):
        raise TypeError(f"the rate function must return a Rates, got {type(r).__name__}")
    if tuple(r.accelerations.shape) != tuple(state.velocities.shape):
        raise ValueError(f"the rate function returned accelerations "
                         f"{tuple(r.accelerations.shape)}; accepted: "
                         f"{tuple(state.velocities.shape)} (the velocities' shape)")
    if (r.densityRates is None) != (state.densities is None):
        raise ValueError("the rate function must return densityRates exactly when the state "
                         "carries densities (None with summation density)")
    if r.densityRates is not None and tuple(r.densityRates.shape) != tuple(
            state.densities.shape):
        raise ValueError(f"the rate function returned densityRates "
                         f"{tuple(r.densityRates.shape)}; accepted: "
                         f"{tuple(state.densities.shape)} (the densities' shape)")
    return r


def _advance(rho, drho, dt):
    return None if rho is None else rho + dt * drho


def symplecticEuler(state: FluidState, dt, rates, neighbours=None, carried=None):
    """One semi-implicit (symplectic) Euler step (module table).

    Args:
        state: the state at t.
        dt: the time step (number or 0-dim tensor).
        rates: ``rates(state, neighbours) -> Rates``.
        neighbours: the neighbour policy (`evaluateRates`).
        carried: unused (the stepper signature's slot).

    Returns:
        ``(state at t + dt, None)``.
    """
    r = evaluateRates(rates, state, neighbours)
    v = state.velocities + dt * r.accelerations
    return replace(state, positions=state.positions + dt * v, velocities=v,
                   densities=_advance(state.densities, r.densityRates, dt),
                   time=state.time + dt), None


def kickDriftKick(state: FluidState, dt, rates, neighbours=None, carried: Rates | None = None):
    """One kick-drift-kick (velocity Verlet) step (module table).

    Args:
        state: the state at t.
        dt: the time step (number or 0-dim tensor).
        rates: ``rates(state, neighbours) -> Rates``.
        neighbours: the neighbour policy (`evaluateRates`).
        carried: the rates at `state` when known (the previous step's end-of-step rates),
            else evaluated here.

    Returns:
        ``(state at t + dt, rates at the end of the step)``; pass the rates to the next call.
    """
    r0 = evaluateRates(rates, state, neighbours) if carried is None else carried
    half = 0.5 * dt
    vHalf = state.velocities + half * r0.accelerations
    rhoHalf = _advance(state.densities, r0.densityRates, half)
    drifted = replace(state, positions=state.positions + dt * vHalf, velocities=vHalf,
                      densities=rhoHalf, time=state.time + dt)
    r1 = evaluateRates(rates, drifted, neighbours)
    new = replace(drifted, velocities=vHalf + half * r1.accelerations,
                  densities=_advance(rhoHalf, r1.densityRates, half))
    return new, r1


def predictorCorrector(state: FluidState, dt, rates, neighbours=None, carried=None):
    """One predictor-corrector (midpoint) step (module table): second order for every rate
    function, two rate evaluations.

    Args:
        state: the state at t.
        dt: the time step (number or 0-dim tensor).
        rates: ``rates(state, neighbours) -> Rates``.
        neighbours: the neighbour policy (`evaluateRates`).
        carried: unused (the stepper signature's slot).

    Returns:
        ``(state at t + dt, None)``.
    """
    half = 0.5 * dt

    def halfStep(r: Rates, at: FluidState) -> FluidState:
        return replace(state, positions=state.positions + half * at.velocities,
                       velocities=state.velocities + half * r.accelerations,
                       densities=_advance(state.densities, r.densityRates, half),
                       time=state.time + half)

    predicted = halfStep(evaluateRates(rates, state, neighbours), state)
    corrected = halfStep(evaluateRates(rates, predicted, neighbours), predicted)
    rho = None if state.densities is None else 2.0 * corrected.densities - state.densities
    return replace(state, positions=2.0 * corrected.positions - state.positions,
                   velocities=2.0 * corrected.velocities - state.velocities, densities=rho,
                   time=state.time + dt), None


def defaultStepper(state: FluidState):
    """The default stepper for `state` (module docstring): `kickDriftKick` when its
    densities are None (summation density), `predictorCorrector` when they are
    integrated."""
    return kickDriftKick if state.densities is None else predictorCorrector


def advance(stepper, state: FluidState, dt, rates, neighbours=None, carried=None):
    """One step of `stepper`, the result placed by the neighbour policy (its periodic
    positions wrapped, `VerletNeighbours.place`): the step of `Simulation` and `rollout`.

    Returns:
        ``(state at t + dt, carried)``.
    """
    new, carried = stepper(state, dt, rates, neighbours, carried)
    place = getattr(neighbours, "place", None)
    return (new if place is None else place(new)), carried
