"""The spatial sort (`neighborhood.ordering`): `cellOrder` against a Morton index written here
bit by bit, scenes kept together, neighbours brought close in memory, operators and a
simulation unchanged by the order (outputs mapped back, float64, 1e-12), gradients through
`reorder`, and the errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
)
from warpSPHCore.fluids import FluidState, LoopOptions, batchScenes, rollout, splitScenes
from warpSPHCore.fluids.cases.tgv import (
    TaylorGreenConfig,
    setup,
    taylorGreenParticles,
    taylorGreenScheme,
)
from warpSPHCore.neighborhood.ordering import cellOrder, inverseOrder, reorder
from warpSPHCore.operations import warpOperation

TOL = 1e-12


def _morton(cell: tuple) -> int:
    """Interleave the bits of the cell coordinates (axis 0 the lowest), one bit at a time."""
    key = 0
    for b in range(21):
        for a, c in enumerate(cell):
            key |= ((c >> b) & 1) << (b * len(cell) + a)
    return key


@pytest.mark.parametrize("d", [1, 2, 3])
def test_cell_order_sorts_by_the_morton_index_of_cells(d):
    g = torch.Generator().manual_seed(d)
    x = torch.rand(400, d, generator=g, dtype=torch.float64) * 3.0 - 1.0
    size = 0.25
    order = cellOrder(x, size)
    assert order.dtype == torch.int64 and torch.equal(torch.sort(order).values,
                                                       torch.arange(400))
    lo = x.min(0).values
    cells = [tuple(int(c) for c in torch.floor((x[k] - lo) / size).tolist())
             for k in range(400)]
    keys = [_morton(c) for c in cells]
    # sorted by key, ties in the input order (stable)
    expected = sorted(range(400), key=lambda k: (keys[k], k))
    assert order.tolist() == expected


def test_scenes_stay_together_in_increasing_order():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(300, 2, generator=g, dtype=torch.float64)
    scenes = torch.randint(0, 4, (300,), generator=g, dtype=torch.int32)
    order = cellOrder(x, 0.1, scenes)
    s = scenes[order]
    assert bool((s[1:] >= s[:-1]).all())
    lo = x.min(0).values  # one grid of cells for all scenes (they share the domain)
    keys = [_morton(tuple(int(c) for c in torch.floor((x[k] - lo) / 0.1).tolist()))
            for k in range(300)]
    for b in range(4):  # within a scene: by cell, ties in the input order
        members = [int(k) for k in torch.nonzero(scenes == b)[:, 0]]
        assert order[s == b].tolist() == sorted(members, key=lambda k: (keys[k], k))


def _lattice(side, dtype=torch.float64, seed=0):
    dx = 1.0 / side
    g = torch.arange(side, dtype=torch.float64)
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    gen = torch.Generator().manual_seed(seed)
    x = (x + 0.5 + 0.1 * (torch.rand(x.shape, generator=gen, dtype=torch.float64) - 0.5)) * dx
    return x.to(dtype), dx


def _set(x, dx):
    n = x.shape[0]
    h = torch.full((n,), 3.0 * dx, dtype=x.dtype)
    m = torch.full((n,), dx * dx, dtype=x.dtype)
    dom = DomainDescription(torch.zeros(2, dtype=x.dtype), torch.ones(2, dtype=x.dtype),
                            [True, True])
    return ParticleState(x, h, m, torch.zeros(n, dtype=torch.int32)), dom


def test_sorting_a_shuffle_brings_neighbours_close_in_memory():
    x, dx = _lattice(40)
    shuffled = x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))]

    def spread(pos):
        p, dom = _set(pos, dx)
        adj = radiusSearchCompactHashMap(p, dom)
        return float((adj.i - adj.j).abs().to(torch.float64).median())

    before = spread(shuffled)
    after = spread(shuffled[cellOrder(shuffled, 3.0 * dx)])
    # a shuffle scatters a particle's neighbours over the whole set (median gap ~ N/3); the
    # sort puts them within a few rows of cells
    assert before > 300 and after < 0.1 * before


def test_operators_do_not_depend_on_the_order():
    """Density, Gradient (values and their gradients w.r.t. positions and values through
    `reorder`) of sorted particles, mapped back with `inverseOrder`, equal the unsorted
    call's."""
    x, dx = _lattice(24)
    x = x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(2))]
    f = torch.sin(6.0 * x[:, 0]) * torch.cos(4.0 * x[:, 1])
    kernel = KernelFunctions.Wendland2
    dens = OperationProperties(kernel, operation=WarpOperation.Density)
    grad = OperationProperties(kernel, operation=WarpOperation.Gradient,
                               gradientMode=GradientScheme.Difference)

    def outputs(pos, values):
        p, dom = _set(pos, dx)
        adj = radiusSearchCompactHashMap(p, dom)
        rho = warpOperation(p, dens, dom, adjacency=adj)
        p = dataclasses.replace(p, densities=rho)
        return rho, warpOperation(p, grad, dom, queryValues=values, adjacency=adj)

    pos = x.clone().requires_grad_(True)
    vals = f.clone().requires_grad_(True)
    rho, g = outputs(pos, vals)
    loss = (g ** 2).sum() + (rho ** 3).sum()
    gx, gf = torch.autograd.grad(loss, (pos, vals))

    order = cellOrder(x, 3.0 * dx)
    back = inverseOrder(order)
    pos2 = x.clone().requires_grad_(True)
    vals2 = f.clone().requires_grad_(True)
    rhoS, gS = outputs(reorder(pos2, order), reorder(vals2, order))
    torch.testing.assert_close(reorder(rhoS, back), rho, rtol=TOL, atol=TOL)
    torch.testing.assert_close(reorder(gS, back), g, rtol=TOL, atol=TOL)
    lossS = (gS ** 2).sum() + (rhoS ** 3).sum()
    gx2, gf2 = torch.autograd.grad(lossS, (pos2, vals2))
    scale = float(gx.abs().max())
    torch.testing.assert_close(gx2, gx, rtol=0, atol=TOL * scale)
    torch.testing.assert_close(gf2, gf, rtol=0, atol=TOL * float(gf.abs().max()))


def test_a_rollout_does_not_depend_on_the_order():
    """Two Taylor-Green scenes in one batch, shuffled, sorted by `cellOrder` with their scene
    indices: 30 steps of the case's scheme and Verlet lists equal the unsorted run's."""
    cases = [setup(TaylorGreenConfig(n=10, t=0.0, relax=5, seed=s)) for s in range(2)]
    scheme = taylorGreenScheme(cases[0])
    particles, state = batchScenes([(taylorGreenParticles(c),
                                     FluidState(c.positions, c.velocities)) for c in cases])
    dt = cases[0].dt
    ref = rollout(state, dt, 30, scheme.rates(particles), scheme.neighbours(particles),
                  stepper=scheme.stepper).state

    order = cellOrder(state.positions, float(particles.supports.max()), particles.scenes)
    sortedParticles, sortedState = reorder(particles, order), reorder(state, order)
    assert torch.equal(sortedParticles.scenes, particles.scenes[order])
    out = rollout(sortedState, dt, 30, scheme.rates(sortedParticles),
                  scheme.neighbours(sortedParticles), stepper=scheme.stepper).state
    back = inverseOrder(order)
    for name in ("positions", "velocities"):
        a, b = getattr(reorder(out, back), name), getattr(ref, name)
        assert float((a - b).abs().max()) <= TOL * max(1.0, float(b.abs().max())), name
    # the scenes stay contiguous, so the per-scene views still apply
    assert [t.shape[0] for t in splitScenes(out.positions, sortedParticles)] == [100, 100]


def test_reorder_and_inverse():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(50, 3, generator=g, dtype=torch.float64)
    order = cellOrder(x, 0.2)
    back = inverseOrder(order)
    assert torch.equal(order[back], torch.arange(50)) and torch.equal(back[order],
                                                                      torch.arange(50))
    s = FluidState(x, 2.0 * x, torch.ones(50, dtype=torch.float64), time=0.5)
    r = reorder(s, order)
    assert torch.equal(r.positions, x[order]) and torch.equal(r.velocities, 2.0 * x[order])
    assert r.time == 0.5
    assert torch.equal(reorder(r, back).positions, x)
    assert cellOrder(torch.zeros(0, 2), 1.0).shape == (0,)


def test_errors_name_what_was_wrong():
    x = torch.rand(10, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="cellSize=0.*positive finite"):
        cellOrder(x, 0.0)
    with pytest.raises(ValueError, match="positions is .*accepted: a floating tensor"):
        cellOrder(torch.rand(10, 4), 1.0)
    with pytest.raises(ValueError, match=r"scenes has shape \(9,\); accepted: \[10\]"):
        cellOrder(x, 1.0, torch.zeros(9, dtype=torch.int32))
    order = cellOrder(x, 0.5)
    with pytest.raises(ValueError, match="order is a torch.int32 tensor"):
        reorder(x, order.to(torch.int32))
    with pytest.raises(ValueError, match=r"shape \(9, 2\); accepted: \[N, \.\.\.\] with N = 10"):
        reorder(x[:9], order)
    with pytest.raises(TypeError, match="obj is a list"):
        reorder([x], order)


def test_a_simulation_resorted_between_runs_equals_one_run():
    """The pattern of the docs: run, sort the state, the particle set and the carried rates,
    build the simulation again, run on; the permutations composed map the result back."""
    case = setup(TaylorGreenConfig(n=12, t=0.0, relax=5, seed=3))
    scheme = taylorGreenScheme(case)
    particles = taylorGreenParticles(case)
    state = FluidState(case.positions, case.velocities)
    shuffle = torch.randperm(state.positions.shape[0], generator=torch.Generator().manual_seed(4))
    particles, state = reorder(particles, shuffle), reorder(state, shuffle)
    quiet = LoopOptions(progress=False)
    one = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, options=quiet)
    one.run(20)

    total = torch.arange(state.positions.shape[0])
    sim = scheme.simulation(particles, state, case.dt, maxSpeed=1.0, options=quiet)
    for _ in range(2):
        sim.run(10)
        order = cellOrder(sim.state.positions, float(particles.supports.max()))
        particles, total = reorder(particles, order), total[order]
        carried = reorder(sim.rates, order)
        sim = scheme.simulation(particles, reorder(sim.state, order), case.dt, maxSpeed=1.0,
                                options=quiet)
        sim.rates = carried  # what the stepper carries into its next step
    final = reorder(sim.state, inverseOrder(total))
    for name in ("positions", "velocities"):
        a, b = getattr(final, name), getattr(one.state, name)
        assert float((a - b).abs().max()) <= 1e-10 * max(1.0, float(b.abs().max())), name


def test_the_sort_on_each_device(device):
    """`cellOrder` on the device gives the CPU's permutation (integer keys, stable sort), and
    a Taylor-Green simulation sorted every 4 steps there equals the unsorted one."""
    g = torch.Generator().manual_seed(9)
    x = torch.rand(500, 2, generator=g, dtype=torch.float64)
    scenes = torch.randint(0, 3, (500,), generator=g, dtype=torch.int32)
    order = cellOrder(x.to(device), 0.1, scenes.to(device))
    assert order.device == torch.device(device)
    assert torch.equal(order.cpu(), cellOrder(x, 0.1, scenes))
    assert torch.equal(reorder(x.to(device), order).cpu(), x[order.cpu()])

    case = setup(TaylorGreenConfig(n=10, t=0.0, relax=2, device=device))
    scheme = taylorGreenScheme(case)
    particles = taylorGreenParticles(case)
    state = FluidState(case.positions, case.velocities)
    finals = []
    for every in (0, 4):
        sim = scheme.simulation(particles, state, case.dt, maxSpeed=1.0,
                                options=LoopOptions(progress=False, sortEvery=every))
        sim.run(10)
        finals.append(sim.inOriginalOrder(sim.state))
    for name in ("positions", "velocities"):
        a, b = getattr(finals[1], name), getattr(finals[0], name)
        assert float((a - b).abs().max()) <= 1e-10 * max(1.0, float(b.abs().max())), name
