"""Batched scenes in the fluids layer: B Taylor-Green vortices of different starts in one
particle set equal B separate runs (float64, 1e-12): a 100-step rollout through the scheme's
stepper and Verlet lists, its gradients w.r.t. the initial velocities (checkpointed),
the simulation loop, the per-scene reductions, and the host-sync census of a batched step
against one scene's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpSPHCore.fluids import (
    FluidState,
    batchScenes,
    rollout,
    sceneKineticEnergy,
    sceneSum,
    sceneTimeStepLimits,
    splitScenes,
)
from warpSPHCore.fluids.cases.tgv import (
    TaylorGreenConfig,
    setup,
    taylorGreenParticles,
    taylorGreenScheme,
)
from warpSPHCore.util.hostSyncCensus import census

B, N = 3, 10
TOL = 1e-12


def _cases():
    return [setup(TaylorGreenConfig(n=N, t=0.0, relax=20, seed=s)) for s in range(B)]


@pytest.fixture(scope="module")
def cases():
    return _cases()


def _single(case):
    return taylorGreenParticles(case), FluidState(case.positions, case.velocities)


def _close(a, b, what):
    scale = max(1.0, float(b.abs().max()))
    err = float((a - b).abs().max())
    assert err <= TOL * scale, f"{what}: batched vs separate {err:.3e}"


def test_hundred_step_rollout_equals_separate_runs(cases):
    scheme = taylorGreenScheme(cases[0])
    dt = cases[0].dt
    finals = []
    for case in cases:
        particles, state = _single(case)
        res = rollout(state, dt, 100, scheme.rates(particles), scheme.neighbours(particles),
                      stepper=scheme.stepper)
        finals.append(res.state)
    particles, state = batchScenes([_single(c) for c in cases])
    assert particles.numScenes == B and particles.scenes.shape == (B * N * N,)
    res = rollout(state, dt, 100, scheme.rates(particles), scheme.neighbours(particles),
                  stepper=scheme.stepper)
    for b, (x, v) in enumerate(zip(splitScenes(res.state.positions, particles),
                                   splitScenes(res.state.velocities, particles))):
        _close(x, finals[b].positions, f"scene {b} positions")
        _close(v, finals[b].velocities, f"scene {b} velocities")
    energies = sceneKineticEnergy(res.state, particles)
    for b, case in enumerate(cases):
        single = 0.5 * (case.masses[:, None] * finals[b].velocities ** 2).sum()
        _close(energies[b], single, f"scene {b} kinetic energy")


def test_rollout_gradients_equal_separate_runs(cases):
    """The gradient of a loss of the state after 100 steps (checkpointed) w.r.t. the initial
    velocities."""
    scheme = taylorGreenScheme(cases[0])
    dt = cases[0].dt

    def loss(state, particles, rates, neighbours):
        res = rollout(state, dt, 100, rates, neighbours, stepper=scheme.stepper,
                      checkpointEvery=10)
        x = res.state.positions
        return (torch.sin(4.0 * x).sum(dim=1) * res.state.velocities.sum(dim=1)).sum()

    expected = []
    for case in cases:
        particles, state = _single(case)
        v0 = state.velocities.clone().requires_grad_(True)
        value = loss(FluidState(state.positions, v0), particles, scheme.rates(particles),
                     scheme.neighbours(particles))
        expected.append(torch.autograd.grad(value, v0)[0])
    particles, state = batchScenes([_single(c) for c in cases])
    v0 = state.velocities.clone().requires_grad_(True)
    value = loss(FluidState(state.positions, v0), particles, scheme.rates(particles),
                 scheme.neighbours(particles))
    grad = torch.autograd.grad(value, v0)[0]
    for b, g in enumerate(splitScenes(grad, particles)):
        _close(g, expected[b], f"scene {b} gradient")


def test_simulation_and_per_scene_reductions(cases):
    scheme = taylorGreenScheme(cases[0])
    particles, state = batchScenes([_single(c) for c in cases])
    sim = scheme.simulation(particles, state, cases[0].dt, maxSpeed=1.0)
    sim.run(5)
    single = scheme.simulation(*_single(cases[1]), cases[0].dt, maxSpeed=1.0)
    single.run(5)
    _close(splitScenes(sim.state.velocities, particles)[1], single.state.velocities,
           "Simulation scene 1")
    m = sceneSum(particles.masses, particles)
    assert m.shape == (B,)
    torch.testing.assert_close(m, torch.stack([c.masses.sum() for c in cases]))
    limits = sceneTimeStepLimits(scheme, particles)(sim.state)
    assert limits.shape == (B,)
    one = scheme.timeStepLimit(_single(cases[1])[0])(single.state)
    _close(limits[1], one, "scene 1 time-step limit")


def test_batching_refuses_mismatched_scenes(cases):
    p0, s0 = _single(cases[0])
    other = setup(TaylorGreenConfig(n=N + 2, t=0.0, relax=0))
    with pytest.raises(ValueError, match="spacing"):
        batchScenes([(p0, s0), _single(other)])
    with pytest.raises(ValueError, match="no scenes"):
        batchScenes([])
    with pytest.raises(ValueError, match="carries no scenes"):
        sceneSum(p0.masses, p0)
    batch, _ = batchScenes([(p0, s0), (p0, s0)])
    wrong = batch.scenes.clone()
    wrong[7] = 2
    with pytest.raises(ValueError, match=r"scenes holds 2 \(particle 7\).*\[0, 2\)"):
        dataclasses.replace(batch, scenes=wrong)


def test_host_sync_census_of_a_batched_step_equals_one_scene(cases):
    scheme = taylorGreenScheme(cases[0])

    def syncs(particles, state):
        sim = scheme.simulation(particles, state, cases[0].dt, maxSpeed=1.0)
        sim.run(2)  # compile, first lists
        builds = sim.neighbours.builds
        with census() as c:
            sim.run(3)
        assert sim.neighbours.builds == builds  # no rebuild inside the counted steps
        return dict(c.hits)

    one = syncs(*_single(cases[0]))
    batched = syncs(*batchScenes([_single(c) for c in cases]))
    assert batched == one and sum(one.values()) > 0


def test_per_scene_reynolds_numbers_through_a_per_particle_viscosity():
    """Scenes of one batch with different physics: the viscosity as one value per particle
    (the scheme's momentum reads it per particle); each scene equals its own run, and the
    time step and the per-scene limits follow each scene's viscosity."""
    cases = [setup(TaylorGreenConfig(n=N, t=0.0, relax=0, re=re)) for re in (25.0, 100.0)]
    particles, state = batchScenes([_single(c) for c in cases])
    nu = torch.tensor([c.nu for c in cases], dtype=torch.float64)[particles.scenes.long()]
    scheme = taylorGreenScheme(cases[0], viscosity=nu * cases[0].rho0)
    dt = min(c.dt for c in cases)
    res = rollout(state, dt, 30, scheme.rates(particles), scheme.neighbours(particles),
                  stepper=scheme.stepper)
    for b, case in enumerate(cases):
        own = taylorGreenScheme(case)
        p1, s1 = _single(case)
        r1 = rollout(s1, dt, 30, own.rates(p1), own.neighbours(p1), stepper=own.stepper)
        _close(splitScenes(res.state.velocities, particles)[b], r1.state.velocities,
               f"scene {b} (Re {case.config.re})")
        limit = own.timeStepLimit(p1)(r1.state)
        _close(sceneTimeStepLimits(scheme, particles)(res.state)[b], limit,
               f"scene {b} time-step limit")
    assert scheme.timeStep(particles) == min(taylorGreenScheme(c).timeStep(_single(c)[0])
                                             for c in cases)
