"""Differentiable rollouts: many steps of a stepper in one call, with the neighbour lists of
`Simulation`, optional gradient checkpointing and an optional trajectory for trajectory
losses.

    result = rollout(state, dt, steps, rates, neighbours, checkpointEvery=k,
                     trajectoryEvery=m)
    result.state, result.carried, result.trajectory

* **The same step as `Simulation`.** Every step is `integrators.advance`: the stepper
  (default `integrators.defaultStepper` of the state) with ``rates(state, neighbours)``,
  its result placed by the neighbour policy (periodic positions wrapped; the initial state
  too, as `Simulation` does). With the
  `VerletNeighbours` of a `Simulation` (same domain, supports, skin and support scheme) a
  rollout reuses its Verlet lists as the simulation does and computes bitwise the same
  states (tests/fluids/test_solver_contract.py).
* **Checkpointing.** Reverse mode through a long rollout keeps every step's saved tensors
  alive until the backward pass; with ``checkpointEvery = k`` the steps run in segments of
  k under `torch.utils.checkpoint` (non-reentrant): a segment keeps only its inputs (the
  state and the carried rates) and recomputes its steps during the backward pass, so the
  memory grows with steps / k segments plus one segment's steps, for one more forward
  evaluation of every step. The operators' autograd bridge keeps nothing but saved tensors
  (docs/autograd.md), so the recomputed steps' memory is freed as well. A segment records
  the neighbour lists of its first run and its recomputation replays them, so the
  recomputed steps see the same lists (and the Verlet policy is not advanced twice).
* **A segment carries every field** of the state and of the carried rates, whatever their
  dataclasses (`FluidState` and `Rates`, or subclasses such as the transport velocity's
  `TransportState` / `TransportRates`): tensor fields travel through the checkpoint, the
  others (None, a time that is a Python number) are recorded by the segment's first run,
  and its recomputation reproduces them.
* **Trajectories.** ``trajectoryEvery = m`` also returns the states at steps 0, m, 2m, ...
  as a `Trajectory` of stacked tensors (``[S, N, d]`` positions and velocities, ``[S, N]``
  densities, ``[S]`` times), differentiable, checkpointed or not.

The checkpointed and the plain rollout compute the same values, in the same order, so their
gradients are identical (bitwise, tests/fluids/test_rollout.py); forward mode (dual
tensors) runs through `rollout` as through the steps themselves.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from ..dataTypes.adjacency import AdjacencyList
from .integrators import FluidState, Rates, advance, defaultStepper

__all__ = ["rollout", "RolloutResult", "Trajectory"]


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """States of a rollout every m steps, stacked along a leading axis of length S.

    Attributes:
        steps: the step numbers (ints, 0 first).
        times: ``[S]`` times.
        positions: ``[S, N, d]``.
        velocities: ``[S, N, d]``.
        densities: ``[S, N]``, or None when the states carry none.
    """

    steps: tuple
    times: torch.Tensor
    positions: torch.Tensor
    velocities: torch.Tensor
    densities: torch.Tensor | None


class RolloutResult(NamedTuple):
    """What `rollout` returns: the final state, what the stepper carries at it (e.g.
    kick-drift-kick's end-of-step rates; pass it to a continuing rollout), and the
    `Trajectory` (None unless ``trajectoryEvery`` was given)."""

    state: FluidState
    carried: Rates | None
    trajectory: Trajectory | None


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


class _Replay:
    """A segment's neighbour policy: the first run asks `policy` and records each list, a
    recomputation replays them in order (the policy is not consulted again)."""

    def __init__(self, policy):
        self.policy = policy
        self.place = getattr(policy, "place", None)
        self.lists: list | None = None
        self.position = 0

    def begin(self) -> None:
        if self.lists is None:
            self.lists = []
            self.recording = True
        else:
            self.recording = False
            self.position = 0

    def __call__(self, state) -> AdjacencyList:
        if not self.recording:
            adjacency = self.lists[self.position]
            self.position += 1
            return adjacency
        p = self.policy
        adjacency = p if isinstance(p, AdjacencyList) else p(state)
        self.lists.append(adjacency)
        return adjacency


def _policy(neighbours):
    """A segment's view of `neighbours`: a `_Replay` when there is a policy to consult."""
    return None if neighbours is None else _Replay(neighbours)


def _steps(stepper, state, dt, rates, neighbours, carried, first: int, count: int,
           every: int | None, snapshots: list):
    """`count` steps from step number `first`; appends the states at multiples of `every`."""
    for k in range(first + 1, first + count + 1):
        state, carried = advance(stepper, state, dt, rates, neighbours, carried)
        if every and k % every == 0:
            snapshots.append((k, state))
    return state, carried


def _segment(stepper, rates, dt, first: int, count: int, every, layout, neighbours,
             result: list):
    """The function of one checkpointed segment: tensors in, tensors out (the state, the
    carried rates, then the segment's snapshot states); the output layout and the
    snapshots' step numbers go to ``result``."""

    def run(*tensors):
        state, carried = _unpack(layout, tensors)
        if neighbours is not None:
            neighbours.begin()
        snapshots: list = []
        state, carried = _steps(stepper, state, dt, rates, neighbours, carried, first, count,
                                every, snapshots)
        result[0], out = _pack(state, carried, *(s for _, s in snapshots))
        result[1] = [k for k, _ in snapshots]
        return out

    return run


def _trajectory(snapshots: list) -> Trajectory:
    steps = tuple(k for k, _ in snapshots)
    states = [s for _, s in snapshots]
    like = states[0].positions
    times = torch.stack([t if isinstance(t, torch.Tensor) else torch.as_tensor(
        t, dtype=like.dtype, device=like.device) for t in (s.time for s in states)])
    rho = None if states[0].densities is None else torch.stack([s.densities for s in states])
    return Trajectory(steps, times, torch.stack([s.positions for s in states]),
                      torch.stack([s.velocities for s in states]), rho)


def rollout(state: FluidState, dt, steps: int, rates, neighbours=None, *, stepper=None,
            checkpointEvery: int | None = None, carried=None,
            trajectoryEvery: int | None = None) -> RolloutResult:
    """`steps` steps of `state` (module docstring).

    Args:
        state: the initial `FluidState` (or a subclass).
        dt: the time step (a number or a 0-dim tensor; differentiable).
        steps: the number of steps (>= 0).
        rates: ``rates(state, neighbours) -> Rates``.
        neighbours: the neighbour policy: a `VerletNeighbours` (the lists of `Simulation`),
            an `AdjacencyList` (one fixed list), a callable ``state -> AdjacencyList``, or
            None (the rates receive None).
        stepper: ``stepper(state, dt, rates, neighbours, carried) -> (state, carried)``
            (default `defaultStepper(state)`: kick-drift-kick with summation density,
            predictor-corrector with integrated densities).
        checkpointEvery: segment length k of the checkpointed rollout, or None (plain).
        carried: what the stepper carries at `state` (kick-drift-kick: the rates at it),
            when known.
        trajectoryEvery: m: also return the states every m steps (`Trajectory`), or None.

    Returns:
        `RolloutResult` ``(state, carried, trajectory)``.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"rollout: steps={steps!r}; accepted: an int >= 0")
    for name, value in (("checkpointEvery", checkpointEvery),
                        ("trajectoryEvery", trajectoryEvery)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"rollout: {name}={value!r}; accepted: an int >= 1 or None")
    if not isinstance(state, FluidState):
        raise TypeError(f"rollout: state is a {type(state).__name__}; accepted: a FluidState")
    stepper = defaultStepper(state) if stepper is None else stepper
    place = getattr(neighbours, "place", None)
    if place is not None and steps > 0:
        state = place(state)  # as `Simulation` places its initial state
    snapshots = [(0, state)] if trajectoryEvery else []
    if checkpointEvery is None or not torch.is_grad_enabled():
        state, carried = _steps(stepper, state, dt, rates, neighbours, carried, 0, steps,
                                trajectoryEvery, snapshots)
        return RolloutResult(state, carried,
                             _trajectory(snapshots) if trajectoryEvery else None)
    layout, tensors = _pack(state, carried)
    done = 0
    while done < steps:
        k = min(checkpointEvery, steps - done)
        result = [None, None]
        out = checkpoint(_segment(stepper, rates, dt, done, k, trajectoryEvery, layout,
                                  _policy(neighbours), result), *tensors,
                         use_reentrant=False)
        objects = _unpack(result[0], out)
        state, carried = objects[0], objects[1]
        snapshots += list(zip(result[1], objects[2:]))
        layout, tensors = _pack(state, carried)
        done += k
    return RolloutResult(state, carried, _trajectory(snapshots) if trajectoryEvery else None)
