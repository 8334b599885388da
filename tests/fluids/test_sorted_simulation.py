"""A `Simulation` that sorts its particles (`LoopOptions.sortEvery`): the same run as without
sorting in the original numbering (float64, to rounding), with deferred decisions and
batched scenes; frames in the original numbering; a restart after a sort continues bitwise;
health messages name the original particle; the errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpSPHCore.fluids import FluidState, LoopOptions, Simulation, batchScenes
from warpSPHCore.fluids.cases.tgv import (
    TaylorGreenConfig,
    setup,
    taylorGreenParticles,
    taylorGreenScheme,
)
from warpSPHCore.fluids.health import SimulationHealthError
from warpSPHCore.neighborhood.ordering import inverseOrder, reorder

TOL = 1e-10


@pytest.fixture(scope="module")
def shuffled():
    """A 12 x 12 Taylor-Green case whose particles are stored in a random order, with
    supports that differ by up to 2 % (so a support left in the old order would show)."""
    case = setup(TaylorGreenConfig(n=12, t=0.0, relax=5, seed=3))
    particles = taylorGreenParticles(case)
    g = torch.Generator().manual_seed(5)
    wobble = 1.0 + 0.02 * torch.rand(particles.supports.shape, generator=g, dtype=torch.float64)
    particles = dataclasses.replace(particles, supports=particles.supports * wobble)
    state = FluidState(case.positions, case.velocities)
    shuffle = torch.randperm(state.positions.shape[0],
                             generator=torch.Generator().manual_seed(4))
    return case, reorder(particles, shuffle), reorder(state, shuffle)


def _close(a, b, what):
    err = float((a - b).abs().max())
    assert err <= TOL * max(1.0, float(b.abs().max())), f"{what}: {err:.3e}"


def _run(case, particles, state, steps, **options):
    scheme = taylorGreenScheme(case)
    sim = scheme.simulation(particles, state, case.dt, maxSpeed=1.0,
                            options=LoopOptions(progress=False, **options))
    sim.run(steps)
    return sim


@pytest.mark.parametrize("options", [dict(sortEvery=5),
                                     dict(sortEvery=8, verletCheckEvery=4)])
def test_a_sorted_run_equals_the_unsorted_run(shuffled, options):
    case, particles, state = shuffled
    plain = _run(case, particles, state, 20)
    sim = _run(case, particles, state, 20, **options)
    assert sim.sorts == 19 // options["sortEvery"]  # at each multiple of k before the end
    # the particles are now in cell order: the order is not the identity any more
    assert not torch.equal(sim.order, torch.arange(sim.order.numel()))
    back = sim.inOriginalOrder(sim.state)
    _close(back.positions, plain.state.positions, "positions")
    _close(back.velocities, plain.state.velocities, "velocities")
    assert torch.equal(sim.inOriginalOrder(sim.state.positions), back.positions)
    # what follows the particles follows the order
    assert torch.equal(sim.neighbours.supports, plain.neighbours.supports[sim.order])


def test_batched_scenes_stay_in_their_scenes():
    cases = [setup(TaylorGreenConfig(n=10, t=0.0, relax=3, seed=s)) for s in range(2)]
    particles, state = batchScenes([(taylorGreenParticles(c),
                                     FluidState(c.positions, c.velocities)) for c in cases])
    plain = _run(cases[0], particles, state, 12)
    sim = _run(cases[0], particles, state, 12, sortEvery=4)
    scenes = particles.scenes[sim.order]
    assert bool((scenes[1:] >= scenes[:-1]).all())  # each scene's rows stay together
    back = sim.inOriginalOrder(sim.state)
    _close(back.positions, plain.state.positions, "positions")
    _close(back.velocities, plain.state.velocities, "velocities")


def test_frames_keep_the_original_numbering(shuffled, tmp_path):
    case, particles, state = shuffled
    written = {}

    def writer(path, fields, domain, time):
        written.setdefault(path.parent.name, []).append(
            {k: v.detach().clone() for k, v in fields.items()})

    scheme = taylorGreenScheme(case)
    for name, every in (("plain", 0), ("sorted", 3)):
        sim = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, writer=writer,
                                out=tmp_path / name,
                                options=LoopOptions(progress=False, sortEvery=every,
                                                    frameEvery=5))
        sim.run(15)
    assert len(written["plain"]) == len(written["sorted"]) == 4
    for a, b in zip(written["sorted"], written["plain"]):
        for k in ("positions", "velocities", "accelerations"):
            if k in b:
                _close(a[k], b[k], f"frame {k}")


def test_a_restart_after_a_sort_continues_bitwise(shuffled, tmp_path):
    case, particles, state = shuffled
    scheme = taylorGreenScheme(case)
    options = LoopOptions(progress=False, sortEvery=4)
    whole = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, options=options)
    whole.run(14)
    first = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, options=options)
    first.run(6)
    assert first.sorts == 1
    first.save(tmp_path / "restart.pt")
    again = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, options=options)
    resumed = Simulation.resume(tmp_path / "restart.pt", scheme.rates(particles),
                                particles.domain, particles.supports,
                                stepper=scheme.stepper, options=options,
                                reorder=again.reorderFn)
    assert torch.equal(resumed.order, first.order) and resumed.step == 6
    resumed.run(8)
    assert torch.equal(resumed.order, whole.order)
    assert torch.equal(resumed.state.positions, whole.state.positions)
    assert torch.equal(resumed.state.velocities, whole.state.velocities)
    with pytest.raises(ValueError, match="sorted order; pass reorder"):
        Simulation.resume(tmp_path / "restart.pt", scheme.rates(particles), particles.domain,
                          particles.supports, stepper=scheme.stepper,
                          options=LoopOptions(progress=False))


def test_health_messages_name_the_original_particle(shuffled):
    case, particles, state = shuffled
    sim = _run(case, particles, state, 3, sortEvery=3)
    sim.sort()
    row = 7
    original = int(sim.order[row])
    v = sim.state.velocities.clone()
    v[row, 0] = float("nan")
    bad = dataclasses.replace(sim.state, velocities=v)
    with pytest.raises(SimulationHealthError,
                       match=rf"particle {original} \(row {row} of the sorted set\)"):
        sim.monitor.check(bad)


def test_errors():
    with pytest.raises(ValueError, match="sortEvery=-1; accepted: an int >= 0"):
        LoopOptions(sortEvery=-1)
    with pytest.raises(ValueError, match="sortEvery=6 with verletCheckEvery=4; accepted: a "
                                         "multiple of verletCheckEvery"):
        LoopOptions(sortEvery=6, verletCheckEvery=4)
    case = setup(TaylorGreenConfig(n=10, t=0.0, relax=0))
    scheme = taylorGreenScheme(case)
    particles = taylorGreenParticles(case)
    state = FluidState(case.positions, case.velocities)
    with pytest.raises(ValueError, match="needs reorder"):
        Simulation(state, scheme.rates(particles), particles.domain, particles.supports,
                   case.dt, stepper=scheme.stepper,
                   options=LoopOptions(progress=False, sortEvery=2))
    plain = Simulation(state, scheme.rates(particles), particles.domain, particles.supports,
                       case.dt, stepper=scheme.stepper, options=LoopOptions(progress=False))
    with pytest.raises(ValueError, match="no reorder function"):
        plain.sort()
    assert plain.inOriginalOrder(state) is state
    assert torch.equal(inverseOrder(plain.order), plain.order)


def test_distributed_simulation_rejects_sorting():
    from warpSPHCore.distributed import DistributedSimulation

    case = setup(TaylorGreenConfig(n=10, t=0.05, relax=0))
    with pytest.raises(ValueError, match="accepted across ranks: sortEvery=0"):
        DistributedSimulation(taylorGreenScheme(case), taylorGreenParticles(case),
                              FluidState(case.positions, case.velocities), case.dt,
                              options=LoopOptions(progress=False, sortEvery=4))


def test_a_walled_case_sorted_equals_unsorted():
    """The dam break (Adami walls, continuity densities): the walls' kinds and the rates
    rebuilt for the sorted set keep the run equal to the unsorted one."""
    from warpSPHCore.fluids.cases.dambreak import DamBreakConfig
    from warpSPHCore.fluids.cases.dambreak import setup as damBreak

    case = damBreak(DamBreakConfig())
    scheme = case.scheme
    state = FluidState(case.positions, case.velocities, case.densities)
    shuffle = torch.randperm(case.particles.supports.shape[0],
                             generator=torch.Generator().manual_seed(0))
    particles, state = reorder(case.particles, shuffle), reorder(state, shuffle)
    runs = {}
    for every in (0, 10):
        sim = scheme.simulation(particles, state, case.dt,
                                options=LoopOptions(progress=False, sortEvery=every))
        sim.run(25)
        runs[every] = sim
    assert runs[10].sorts == 2
    sortedBack = runs[10].inOriginalOrder(runs[10].state)
    for name in ("positions", "velocities", "densities"):
        _close(getattr(sortedBack, name), getattr(runs[0].state, name), name)
    # the monitor's kinds follow: its fluid rows are the fluid particles of the sorted set
    assert torch.equal(runs[10].monitor.kinds, particles.kinds[runs[10].order])


def test_a_failed_sort_leaves_the_simulation_as_it_was(shuffled):
    """When the rate function of the sorted set cannot be built, the state, the order and the
    neighbour policy stay as they were."""
    case, particles, state = shuffled
    scheme = taylorGreenScheme(case)
    sim = scheme.simulation(particles, state, case.dt, maxSpeed=1.0,
                            options=LoopOptions(progress=False))
    sim.run(2)
    before = (sim.state.positions.clone(), sim.order.clone(), sim.neighbours.supports.clone())

    def broken(order):
        raise RuntimeError("no rates for this order")

    sim.reorderFn = broken
    with pytest.raises(RuntimeError, match="no rates for this order"):
        sim.sort()
    assert torch.equal(sim.state.positions, before[0]) and torch.equal(sim.order, before[1])
    assert torch.equal(sim.neighbours.supports, before[2]) and sim.sorts == 0
