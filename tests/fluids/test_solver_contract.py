"""One contract for the solver layer: every stepper (symplectic Euler, kick-drift-kick,
predictor-corrector, the transport velocity's, a user's own) runs a `Scheme`'s rates through
`Simulation` and `rollout`; a rollout with the Verlet policy of a simulation reuses its
lists and computes bitwise the same states; trajectory losses differentiate through a
checkpointed rollout with Verlet reuse (central differences, float64); a user term (a
`torch.nn.Module`) plugs into the scheme and gets gradients."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore import DomainDescription
from warpSPHCore.fluids import (
    FluidState,
    LoopOptions,
    kickDriftKick,
    predictorCorrector,
    rollout,
    symplecticEuler,
    transportKickDriftKick,
)
from warpSPHCore.fluids.scheme import DensityDiffusion, Linear, ParticleSet, Scheme, Term

F64 = torch.float64
N_SIDE = 8


def _box(seed=0):
    """A jittered 8 x 8 lattice of the periodic box [-0.5, 0.5) x [0, 1), a swirl."""
    dx = 1.0 / N_SIDE
    g = (torch.arange(N_SIDE, dtype=F64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    gen = torch.Generator().manual_seed(seed)
    x = x + 0.3 * dx * (torch.rand(x.shape, generator=gen, dtype=F64) - 0.5)
    x[:, 0] -= 0.5
    s = 2 * math.pi * x
    v = torch.stack([-torch.cos(s[:, 0]) * torch.sin(s[:, 1]),
                     torch.sin(s[:, 0]) * torch.cos(s[:, 1])], 1)
    N = x.shape[0]
    dom = DomainDescription(torch.tensor([-0.5, 0.0], dtype=F64),
                            torch.tensor([0.5, 1.0], dtype=F64), [True, True])
    particles = ParticleSet(torch.full((N,), 3.0 * dx, dtype=F64),
                            torch.full((N,), dx * dx, dtype=F64),
                            torch.zeros(N, dtype=torch.int32), dom, dx)
    return particles, FluidState(x, v, torch.ones(N, dtype=F64))


def _scheme(viscosity=0.02, terms=()):
    return Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), density="continuity",
                  viscosity=viscosity, densityDiffusion=DensityDiffusion("molteni", 0.1),
                  terms=terms)


def _halfSteps(state, dt, rates, neighbours=None, carried=None):
    """A user's own stepper: two symplectic Euler steps of dt / 2."""
    s, _ = symplecticEuler(state, 0.5 * dt, rates, neighbours)
    return symplecticEuler(s, 0.5 * dt, rates, neighbours)


STEPPERS = [symplecticEuler, kickDriftKick, predictorCorrector, transportKickDriftKick,
            _halfSteps]


@pytest.mark.parametrize("stepper", STEPPERS, ids=lambda s: s.__name__)
def test_every_stepper_through_simulation_and_rollout_is_bitwise_the_same(stepper):
    particles, start = _box()
    scheme = _scheme()
    dt = scheme.timeStep(particles, maxSpeed=1.0)
    steps = 12
    sim = scheme.simulation(particles, start, dt, stepper=stepper,
                            options=LoopOptions(skin=0.1, progress=False))
    sim.run(steps)
    neighbours = scheme.neighbours(particles, skin=0.1)
    out = rollout(start, dt, steps, scheme.rates(particles), neighbours, stepper=stepper)
    for name in ("positions", "velocities", "densities"):
        assert torch.equal(getattr(out.state, name), getattr(sim.state, name)), name
    assert float(out.state.time) == pytest.approx(steps * dt, rel=1e-14)
    # the rollout reused its Verlet lists exactly as the simulation did
    assert neighbours.builds == sim.neighbours.builds
    assert neighbours.calls == sim.neighbours.calls
    assert neighbours.builds < neighbours.calls
    # and moved the particles: a test that can fail
    assert float((out.state.positions - sim.state.positions.new_tensor(0)).abs().max()) > 0
    assert not torch.equal(out.state.velocities, start.velocities)


def test_checkpointed_rollout_with_verlet_reuse_is_bitwise_the_plain_one():
    """Checkpointing replays the segment's recorded lists, so the recomputed steps see the
    same lists and the Verlet policy advances once."""
    particles, start = _box(seed=1)
    scheme = _scheme()
    dt = scheme.timeStep(particles, maxSpeed=1.0)

    def run(k):
        v = start.velocities.clone().requires_grad_(True)
        neighbours = scheme.neighbours(particles, skin=0.1)
        out = rollout(FluidState(start.positions, v, start.densities), dt, 10,
                      scheme.rates(particles), neighbours, checkpointEvery=k,
                      trajectoryEvery=2)
        loss = (out.trajectory.velocities**2).sum() + out.trajectory.densities.sum()
        return loss.detach(), torch.autograd.grad(loss, v)[0], neighbours

    (la, ga, na), (lb, gb, nb) = run(None), run(3)
    assert torch.equal(la, lb) and torch.equal(ga, gb)
    assert (na.builds, na.calls) == (nb.builds, nb.calls)


class _Drag(torch.nn.Module):
    """A learned linear drag a = -k u (a user's acceleration term)."""

    def __init__(self):
        super().__init__()
        self.k = torch.nn.Parameter(torch.tensor(0.3, dtype=F64))

    def forward(self, context):
        return -self.k * context.state.velocities


def _trajectoryLoss(nu, amplitude, k, checkpointEvery=4):
    particles, start = _box(seed=2)
    drag = _Drag()
    with torch.no_grad():
        drag.k.copy_(k)
    scheme = _scheme(nu, terms=(Term("acceleration", drag),))
    dt = scheme.timeStep(particles, maxSpeed=1.0)
    state = FluidState(start.positions, amplitude * start.velocities, start.densities)
    out = rollout(state, dt, 12, scheme.rates(particles), scheme.neighbours(particles, 0.1),
                  checkpointEvery=checkpointEvery, trajectoryEvery=3)
    t = out.trajectory
    weights = torch.linspace(0.5, 1.5, t.positions.shape[1], dtype=F64)[:, None]
    return ((t.velocities**2).sum() + (weights * t.positions).sum()
            + 0.1 * t.densities.sum()), drag


def test_trajectory_loss_gradients_match_central_differences():
    nu = torch.tensor(0.02, dtype=F64, requires_grad=True)
    amplitude = torch.tensor(1.0, dtype=F64, requires_grad=True)
    k = torch.tensor(0.3, dtype=F64)
    loss, drag = _trajectoryLoss(nu, amplitude, k)
    gNu, gA, gK = torch.autograd.grad(loss, [nu, amplitude, drag.k])

    def at(nu_, a_, k_):
        with torch.no_grad():
            return float(_trajectoryLoss(torch.tensor(nu_, dtype=F64),
                                         torch.tensor(a_, dtype=F64),
                                         torch.tensor(k_, dtype=F64), None)[0])

    eps = 1e-6
    fd = [(at(0.02 + eps, 1.0, 0.3) - at(0.02 - eps, 1.0, 0.3)) / (2 * eps),
          (at(0.02, 1.0 + eps, 0.3) - at(0.02, 1.0 - eps, 0.3)) / (2 * eps),
          (at(0.02, 1.0, 0.3 + eps) - at(0.02, 1.0, 0.3 - eps)) / (2 * eps)]
    for g, f in zip((gNu, gA, gK), fd):
        assert abs(float(g)) > 1e-3
        assert float(g) == pytest.approx(f, rel=1e-6)


def test_shifting_drifts_particles_down_the_concentration_gradient():
    """`Shifting` adds -A h U grad C to the drift (transport kick-drift-kick): on a jittered
    box at rest the particles move towards a more uniform distribution, the velocities are
    untouched by the shift itself."""
    from warpSPHCore.fluids import Shifting, TransportRates

    particles, start = _box(seed=3)
    scheme = Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), density="summation",
                    shifting=Shifting(speed=1.0, coefficient=2.0))
    assert scheme.stepper is transportKickDriftKick
    rates = scheme.rates(particles)
    neighbours = scheme.neighbours(particles, skin=0.0)
    state = FluidState(start.positions, torch.zeros_like(start.velocities))
    placed = neighbours.place(state)
    r = rates(placed, neighbours(placed))
    assert isinstance(r, TransportRates) and r.shiftVelocities is not None
    assert float(r.shiftVelocities.abs().max()) > 0
    dt = scheme.timeStep(particles)
    out = rollout(state, dt, 3, rates, neighbours)
    moved = (out.state.positions - start.positions).abs().max()
    assert float(moved) > 0
    with pytest.raises(ValueError, match="density='summation' only"):
        Scheme(rho0=1.0, c0=10.0, density="continuity", shifting=Shifting(speed=1.0))
