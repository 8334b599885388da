"""Differentiable rollouts (issue 16, item 4): many integrator steps in one call, with
optional gradient checkpointing.

`rollout(state, dt, steps, rateFn, checkpointEvery=k)` advances a `FluidState` by `steps`
kick-drift-kick steps (`integrators.kickDriftKick`, one rate evaluation per step, the rates
carried from step to step). Reverse mode through a long rollout keeps every step's saved
tensors alive until the backward pass; with ``checkpointEvery = k`` the steps run in
segments of k under `torch.utils.checkpoint` (non-reentrant): a segment keeps only its
inputs (the state and the carried rates) and recomputes its steps during the backward pass,
so the memory grows with steps / k segments plus one segment's steps, for one more forward
evaluation of every step.

The checkpointed and the plain rollout compute the same values, in the same order, so
their gradients are identical (bitwise, tests/fluids/test_rollout.py); forward mode (dual
tensors) runs through `rollout` as through the steps themselves.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from .integrators import FluidState, Rates, evaluateRates, kickDriftKick

__all__ = ["rollout"]


def _segment(rateFn, dt, steps: int, time, hasDensities: bool, stepper):
    """The function of one checkpointed segment: tensors in, tensors out."""

    def run(x, v, rho, a, drho):
        state = FluidState(x, v, rho if hasDensities else None, time)
        rates = Rates(a, drho if hasDensities else None)
        for _ in range(steps):
            state, rates = stepper(state, dt, rateFn, rates)
        empty = x.new_zeros(0)
        return (state.positions, state.velocities,
                state.densities if hasDensities else empty, rates.accelerations,
                rates.densityRates if hasDensities else empty)

    return run


def rollout(state: FluidState, dt, steps: int, rateFn, *, checkpointEvery: int | None = None,
            rates: Rates | None = None, stepper=kickDriftKick):
    """`steps` kick-drift-kick steps of `state` (module docstring).

    Args:
        state: the initial `FluidState`.
        dt: the time step (a number or a 0-dim tensor; differentiable).
        steps: the number of steps (>= 0).
        rateFn: ``rates(state) -> Rates``.
        checkpointEvery: segment length k of the checkpointed rollout, or None (plain).
        rates: the rates at `state` when known (evaluated otherwise).
        stepper: ``stepper(state, dt, rateFn, rates) -> (state, rates)`` (default
            `kickDriftKick`). A checkpointed segment carries the state and the
            accelerations and density rates only, so a stepper whose rates carry more (the
            transport velocity's `cases.transport.TransportRates`) runs unsegmented.

    Returns:
        ``(final state, rates at the end)``.
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"rollout: steps must be an int >= 0, got {steps!r}")
    if checkpointEvery is not None and (not isinstance(checkpointEvery, int)
                                        or checkpointEvery < 1):
        raise ValueError(f"rollout: checkpointEvery must be an int >= 1 or None, got "
                         f"{checkpointEvery!r}")
    if rates is None and stepper is kickDriftKick:
        rates = evaluateRates(rateFn, state)
    if checkpointEvery is None or not torch.is_grad_enabled() or stepper is not kickDriftKick:
        for _ in range(steps):
            state, rates = stepper(state, dt, rateFn, rates)
        return state, rates
    hasDensities = state.densities is not None
    empty = state.positions.new_zeros(0)
    tensors = (state.positions, state.velocities,
               state.densities if hasDensities else empty, rates.accelerations,
               rates.densityRates if hasDensities else empty)
    done, time = 0, state.time
    while done < steps:
        k = min(checkpointEvery, steps - done)
        tensors = checkpoint(_segment(rateFn, dt, k, time, hasDensities, stepper), *tensors,
                             use_reentrant=False)
        done += k
        for _ in range(k):  # as the plain rollout adds it, step by step
            time = time + dt
    x, v, rho, a, drho = tensors
    final = FluidState(x, v, rho if hasDensities else None, time)
    return final, Rates(a, drho if hasDensities else None)
