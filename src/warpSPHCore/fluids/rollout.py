"""Differentiable rollouts (issue 16, item 4): many integrator steps in one call, with
optional gradient checkpointing.

`rollout(state, dt, steps, rateFn, checkpointEvery=k)` advances a `FluidState` by `steps`
steps of a stepper (default `integrators.kickDriftKick`: one rate evaluation per step, the
rates carried from step to step). Reverse mode through a long rollout keeps every step's
saved tensors alive until the backward pass; with ``checkpointEvery = k`` the steps run in
segments of k under `torch.utils.checkpoint` (non-reentrant): a segment keeps only its
inputs (the state and the carried rates) and recomputes its steps during the backward pass,
so the memory grows with steps / k segments plus one segment's steps, for one more forward
evaluation of every step. The operators' autograd bridge keeps nothing but saved tensors
(docs/autograd.md), so the recomputed steps' memory is freed as well (docs/fluids.md,
"Differentiable rollouts").

A segment carries every field of the state and of the rates, whatever their dataclasses
(`FluidState` and `Rates`, or subclasses such as the transport velocity's
`cases.transport.TransportState` / `TransportRates`): tensor fields travel through the
checkpoint, the others (None, a time that is a Python number) are recorded by the segment's
first run, and its recomputation reproduces them.

The checkpointed and the plain rollout compute the same values, in the same order, so
their gradients are identical (bitwise, tests/fluids/test_rollout.py); forward mode (dual
tensors) runs through `rollout` as through the steps themselves.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.utils.checkpoint import checkpoint

from .integrators import FluidState, Rates, evaluateRates, kickDriftKick

__all__ = ["rollout"]


def _pack(*objects):
    """(layout, tensors): the dataclass `objects` (or None) as their field values' tensors
    and a layout that holds everything else (types, field names, the non-tensor values)."""
    layout, tensors = [], []
    for obj in objects:
        if obj is None:
            layout.append(None)
            continue
        names = tuple(f.name for f in dataclasses.fields(obj))
        values = [getattr(obj, n) for n in names]
        layout.append((type(obj), names,
                       tuple(None if isinstance(v, torch.Tensor) else v for v in values),
                       tuple(isinstance(v, torch.Tensor) for v in values)))
        tensors += [v for v in values if isinstance(v, torch.Tensor)]
    return tuple(layout), tuple(tensors)


def _unpack(layout, tensors) -> list:
    """The objects `_pack` flattened, rebuilt from `layout` and `tensors`."""
    it = iter(tensors)
    objects = []
    for entry in layout:
        if entry is None:
            objects.append(None)
            continue
        cls, names, static, isTensor = entry
        values = [next(it) if t else v for v, t in zip(static, isTensor)]
        objects.append(cls(**dict(zip(names, values))))
    return objects


def _segment(rateFn, dt, steps: int, layout, stepper, result: list):
    """The function of one checkpointed segment: tensors in, tensors out; the output's
    layout goes to ``result[0]``."""

    def run(*tensors):
        state, rates = _unpack(layout, tensors)
        for _ in range(steps):
            state, rates = stepper(state, dt, rateFn, rates)
        result[0], out = _pack(state, rates)
        return out

    return run


def rollout(state: FluidState, dt, steps: int, rateFn, *, checkpointEvery: int | None = None,
            rates: Rates | None = None, stepper=kickDriftKick):
    """`steps` steps of `state` (module docstring).

    Args:
        state: the initial `FluidState` (or a subclass).
        dt: the time step (a number or a 0-dim tensor; differentiable).
        steps: the number of steps (>= 0).
        rateFn: ``rates(state) -> Rates``.
        checkpointEvery: segment length k of the checkpointed rollout, or None (plain).
        rates: the rates at `state` when known (evaluated otherwise: here for
            `kickDriftKick`, by the stepper's first step for any other stepper).
        stepper: ``stepper(state, dt, rateFn, rates) -> (state, rates)`` (default
            `kickDriftKick`; e.g. `cases.transport.transportKickDriftKick`). A checkpointed
            segment carries every field of its state and rates.

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
    if checkpointEvery is None or not torch.is_grad_enabled():
        for _ in range(steps):
            state, rates = stepper(state, dt, rateFn, rates)
        return state, rates
    layout, tensors = _pack(state, rates)
    done = 0
    while done < steps:
        k = min(checkpointEvery, steps - done)
        result = [None]
        tensors = checkpoint(_segment(rateFn, dt, k, layout, stepper, result), *tensors,
                             use_reentrant=False)
        layout = result[0]
        done += k
    state, rates = _unpack(layout, tensors)
    return state, rates
