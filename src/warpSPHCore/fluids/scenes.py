"""Scenes: B independent simulations advanced as one particle set.

A minibatch of small scenes (a training batch, the seeds of a dataset) costs one launch per
operator instead of B: the particle sets are concatenated, each particle carries its scene
index, and the neighbour search never pairs particles of different scenes
(`neighborhood.scenes`). Everything per particle (rates, walls, steppers, the Verlet list,
the health checks, gradients through `rollout`) is unchanged; what is per scene is reduced
with `sceneSum` / `sceneMax` (kinetic energy, time-step limits)::

    particles, state = batchScenes([(setA, stateA), (setB, stateB), ...])
    sim = scheme.simulation(particles, state, dt)
    sim.run(100)
    energy = sceneKineticEnergy(sim.state, particles)      # [B]
    finals = splitScenes(sim.state.positions, particles)  # B tensors [N_b, d]

The scenes share the scheme, the domain (one periodic box; on non-periodic axes the bounds
only size the search grid) and one time step: `Scheme.timeStep` is a number of the scheme
and the spacing, the same for every scene of one scheme; `sceneTimeStepLimits` gives each
scene's stable limit ``[B]`` of a running state, whose minimum a common step must respect.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .integrators import FluidState

__all__ = ["batchScenes", "splitScenes", "sceneSum", "sceneMax", "sceneKineticEnergy",
           "sceneTimeStepLimits", "sceneIndex"]


def sceneIndex(counts, device=None) -> torch.Tensor:
    """int32 ``[sum(counts)]`` scene indices of contiguous scenes of ``counts`` particles."""
    counts = torch.as_tensor(list(counts), dtype=torch.int64)
    return torch.repeat_interleave(torch.arange(len(counts), dtype=torch.int32),
                                   counts).to(device)


def batchScenes(scenes):
    """Concatenate B scenes ``[(ParticleSet, FluidState), ...]`` into one `ParticleSet` with
    scene indices and one `FluidState`.

    The sets must share the domain (the same object or equal bounds and periodicity), the
    spacing, the dtype and the device; the states must all carry densities or none, and be
    of one class (a transport state's extra fields are concatenated too). The time is the
    first state's. Particle b of scene s sits at row ``offset_s + b`` (offsets: the
    cumulative scene sizes), which `splitScenes` undoes.

    Returns:
        ``(ParticleSet, FluidState)``.
    """
    from .scheme import ParticleSet

    scenes = list(scenes)
    if not scenes:
        raise ValueError("batchScenes: no scenes; accepted: a list of (ParticleSet, "
                         "FluidState) pairs")
    sets = [p for p, _ in scenes]
    states = [s for _, s in scenes]
    first = sets[0]
    for b, p in enumerate(sets):
        if not isinstance(p, ParticleSet) or not isinstance(states[b], FluidState):
            raise TypeError(f"batchScenes: scene {b} is ({type(p).__name__}, "
                            f"{type(states[b]).__name__}); accepted: (ParticleSet, FluidState)")
        if p.scenes is not None:
            raise ValueError(f"batchScenes: scene {b} is itself a batch; accepted: single "
                             "scenes")
        if p.spacing != first.spacing:
            raise ValueError(f"batchScenes: scene {b} has spacing {p.spacing} but scene 0 "
                             f"has {first.spacing}; accepted: one spacing")
        same = p.domain is first.domain or (
            torch.equal(p.domain.min, first.domain.min)
            and torch.equal(p.domain.max, first.domain.max)
            and torch.equal(p.domain.periodic, first.domain.periodic))
        if not same:
            raise ValueError(f"batchScenes: scene {b} has another domain than scene 0; "
                             "accepted: scenes of one domain (one periodic box)")
        if type(states[b]) is not type(states[0]) \
                or (states[b].densities is None) != (states[0].densities is None):
            raise ValueError(f"batchScenes: scene {b}'s state differs in kind from scene "
                             "0's (class or densities); accepted: states of one kind")
    counts = [p.supports.shape[0] for p in sets]
    device = first.supports.device
    index = sceneIndex(counts, device)

    def cat(name, objs):
        parts = [getattr(o, name) for o in objs]
        return None if parts[0] is None else torch.cat(parts)

    container = first.container
    particles = ParticleSet(cat("supports", sets), cat("masses", sets), cat("kinds", sets),
                            first.domain, first.spacing, container, scenes=index,
                            numScenes=len(sets))
    fields = {}
    for f in dataclasses.fields(states[0]):
        value = getattr(states[0], f.name)
        fields[f.name] = cat(f.name, states) if isinstance(value, torch.Tensor) and \
            value.dim() >= 1 and value.shape[0] == counts[0] else value
    return particles, type(states[0])(**fields)


def _index(particles):
    if particles.scenes is None:
        raise ValueError("the particle set carries no scenes; accepted: a ParticleSet from "
                         "batchScenes (or with scenes and numScenes)")
    return particles.scenes.to(torch.int64), particles.numScenes


def splitScenes(values: torch.Tensor, particles) -> list:
    """The rows of a per-particle tensor ``[N, ...]`` per scene: B tensors (views when the
    scenes are contiguous, as `batchScenes` makes them). Reads the scene sizes back once."""
    index, B = _index(particles)
    counts = torch.bincount(index, minlength=B).tolist()
    contiguous = bool((index[1:] >= index[:-1]).all()) if index.shape[0] > 1 else True
    if contiguous:
        return list(torch.split(values, counts))
    return [values[index == b] for b in range(B)]


def sceneSum(values: torch.Tensor, particles) -> torch.Tensor:
    """``[B, ...]``: the sum of a per-particle tensor ``[N, ...]`` over each scene.
    Differentiable, no host sync."""
    index, B = _index(particles)
    out = torch.zeros((B, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add(0, index, values)


def sceneMax(values: torch.Tensor, particles) -> torch.Tensor:
    """``[B]``: the largest entry of a per-particle ``[N]`` tensor in each scene (-inf for an
    empty scene). No host sync."""
    index, B = _index(particles)
    out = torch.full((B,), -math.inf, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, index, values, reduce="amax", include_self=True)


def sceneKineticEnergy(state: FluidState, particles) -> torch.Tensor:
    """``[B]``: ``sum_i m_i |v_i|^2 / 2`` over each scene (every kind; walls at rest add 0)."""
    v = state.velocities
    return sceneSum(0.5 * particles.masses * (v * v).sum(dim=1), particles)


def sceneTimeStepLimits(scheme, particles):
    """``limit(state) -> [B]``: each scene's stable time step of a running state
    (`Scheme.stableStep` with the scene's largest speed as U and, for a per-particle
    viscosity, the scene's largest viscosity), on the device."""
    nu = scheme._nuTotal(particles)
    if isinstance(nu, torch.Tensor) and nu.dim() == 1:
        nu = sceneMax(nu.detach(), particles)
    else:
        nu = float(nu.detach()) if isinstance(nu, torch.Tensor) else float(nu)

    def limit(state):
        speed = sceneMax(torch.linalg.vector_norm(state.velocities.detach(), dim=1), particles)
        return scheme.stableStep(particles, speed.clamp(min=0.0), nu)

    return limit
