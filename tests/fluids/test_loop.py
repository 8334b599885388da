"""The simulation loop (`fluids.loop`): the Verlet-skin list never misses a pair of the true
support and gives the states of a fresh search per step; a run resumed from a restart file
continues bitwise as the uninterrupted run (kick-drift-kick with densities, and the
transport-velocity stepper with its state and rates subclasses); a step reads back exactly
one value per rate evaluation plus one per rebuild (the neighbour search's); frames hold
the states of their steps; the periodic wrap; the validation."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore import (
    DomainDescription,
    ParticleState,
    SupportScheme,
    radiusSearchCompactHashMap,
)
from warpSPHCore.fluids import (
    FluidState,
    Rates,
    continuityDensityRate,
    kickDriftKick,
    laminarViscosity,
    predictorCorrector,
    pressureAcceleration,
    taitPressure,
)
from warpSPHCore.fluids.cases import tgv
from warpSPHCore.fluids.loop import (
    LoopOptions,
    Simulation,
    VerletNeighbours,
    loadRestart,
    simulate,
    wrapPeriodic,
)
from warpSPHCore.fluids.transport import (
    TransportRates,
    TransportState,
    transportKickDriftKick,
)
from warpSPHCore.io import readParticles, writeParticles
from warpSPHCore.neighborhood import radiusNaive
from warpSPHCore.util.hostSyncCensus import census

F64 = torch.float64


def _box(n=10, lo=(-0.5, 0.0), extent=(1.0, 1.0), seed=0, jitter=0.3):
    """A jittered n x n lattice of a periodic box [lo, lo + extent], a swirling velocity
    field, unit density; supports 3 dx."""
    lo_, ext = torch.tensor(lo, dtype=F64), torch.tensor(extent, dtype=F64)
    dx = ext / n
    g = torch.arange(n, dtype=F64) + 0.5
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    gen = torch.Generator().manual_seed(seed)
    x = lo_ + (x + jitter * (torch.rand(x.shape, generator=gen, dtype=F64) - 0.5)) * dx
    s = 2 * math.pi * (x - lo_) / ext
    v = torch.stack([-torch.cos(s[:, 0]) * torch.sin(s[:, 1]),
                     torch.sin(s[:, 0]) * torch.cos(s[:, 1])], 1)
    N = x.shape[0]
    H = torch.full((N,), 3.0 * float(dx.max()), dtype=F64)
    m = torch.full((N,), float(dx.prod()), dtype=F64)
    dom = DomainDescription(lo_, lo_ + ext, [True, True])
    return x, v, H, m, torch.zeros(N, dtype=torch.int32), dom


def _wcsph(H, m, kinds, dom):
    """Tait pressure, Morris viscosity and the continuity equation (library terms)."""

    def rates(state, adjacency):
        p = ParticleState(state.positions, H, m, kinds, state.densities)
        pres = taitPressure(state.densities, 1.0, 10.0)
        a = pressureAcceleration(p, pres, dom, adjacency) + \
            laminarViscosity(p, state.velocities, dom, adjacency, 0.01)
        return Rates(a, continuityDensityRate(p, state.velocities, dom, adjacency))

    return rates


def _quiet(**kw):
    return LoopOptions(progress=False, **kw)


def test_verlet_list_holds_every_pair_and_matches_a_fresh_search():
    x, v, H, m, kinds, dom = _box()
    rho = torch.ones(x.shape[0], dtype=F64)
    rates = _wcsph(H, m, kinds, dom)
    dt = 2e-3
    missing = []

    def check(sim):  # every pair within the true support is in the buffered list
        a = sim.neighbours.adjacency
        ii, jj = radiusNaive(sim.state.positions, sim.state.positions, H, H,
                             periodic=dom.periodic, minDomain=dom.min, maxDomain=dom.max)
        have = set(zip(a.i.tolist(), a.j.tolist()))
        missing.append(len(set(zip(ii.tolist(), jj.tolist())) - have))

    sim = simulate(FluidState(x, v, rho), rates, dom, H, dt, steps=30, callback=check,
                   options=_quiet(skin=0.1), stepper=kickDriftKick)
    assert missing == [0] * 30
    # the list was reused and rebuilt: the particles cross the half skin within 30 steps
    assert 1 < sim.neighbours.builds < sim.neighbours.calls == 31

    def fresh(state, _neighbours):  # the reference: a new exact search at every evaluation
        wrapped = wrapPeriodic(state.positions, dom)
        adj = radiusSearchCompactHashMap(ParticleState(wrapped, H, m, kinds), dom,
                                         mode=SupportScheme.Gather)
        return rates(FluidState(wrapped, state.velocities, state.densities, state.time), adj)

    s, r = FluidState(x, v, rho), None
    for _ in range(30):
        s, r = kickDriftKick(s, dt, fresh, None, r)
        s = FluidState(wrapPeriodic(s.positions, dom), s.velocities, s.densities, s.time)
    torch.testing.assert_close(sim.state.positions, s.positions, rtol=0, atol=1e-13)
    torch.testing.assert_close(sim.state.velocities, s.velocities, rtol=0, atol=1e-12)
    torch.testing.assert_close(sim.state.densities, s.densities, rtol=0, atol=1e-12)
    assert sim.state.time == pytest.approx(30 * dt, rel=1e-14)


def _equal(a, b):
    assert type(a) is type(b)
    if a is None:
        return
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, name


def _tgvCase():
    case = tgv.setup(tgv.TaylorGreenConfig(n=10, t=0.05, relax=0))
    start = FluidState(case.positions, case.velocities)
    return start, tgv.taylorGreenRates(case), case.domain, case.supports, case.dt


def _wcsphCase():
    x, v, H, m, kinds, dom = _box(seed=4)
    return FluidState(x, v, torch.ones(x.shape[0], dtype=F64)), _wcsph(H, m, kinds, dom), \
        dom, H, 2e-3


@pytest.mark.parametrize("which", ["kickDriftKick", "predictorCorrector", "transport"])
def test_restart_continues_bitwise(tmp_path, which):
    state, rates, dom, H, dt = _tgvCase() if which == "transport" else _wcsphCase()
    kw = dict(options=_quiet(skin=0.1))
    kw["stepper"] = {"transport": transportKickDriftKick, "kickDriftKick": kickDriftKick,
                     "predictorCorrector": predictorCorrector}[which]
    whole = Simulation(state, rates, dom, H, dt, **kw)
    whole.run(24)
    first = Simulation(state, rates, dom, H, dt, **kw)
    first.run(13)  # between two rebuilds: the resumed run must reuse the saved list
    path = first.save(tmp_path / "restart.pt")
    saved = loadRestart(path)
    assert saved.step == 13 and saved.dt == dt
    if which == "transport":
        assert isinstance(saved.rates, TransportRates)
    resumed = Simulation.resume(path, rates, dom, H, **kw)
    resumed.run(11)
    assert resumed.step == whole.step == 24
    _equal(resumed.state, whole.state)
    _equal(resumed.rates, whole.rates)
    # the saved list was restored, not searched afresh: the split run searched exactly as
    # often as the whole run
    assert first.neighbours.builds + resumed.neighbours.builds == whole.neighbours.builds


def test_one_readback_per_rate_evaluation_plus_one_per_rebuild():
    state, rates, dom, H, dt = _tgvCase()
    sim = Simulation(state, rates, dom, H, torch.tensor(dt, dtype=F64),
                     stepper=transportKickDriftKick, options=_quiet(skin=0.1))
    sim.run(2)  # the first list and the first rates
    calls, builds = sim.neighbours.calls, sim.neighbours.builds
    with census() as c:
        sim.run(12)
    calls, builds = sim.neighbours.calls - calls, sim.neighbours.builds - builds
    assert calls == 12 and builds >= 1
    assert c.total == calls + builds, c.bySite()
    # the Verlet decision and the health flags share one readback (fluids/neighbours.py)
    assert set(c.byModule()) <= {"fluids/neighbours.py", "neighborhood/flags.py"}, \
        c.byModule()
    assert isinstance(sim.state.time, torch.Tensor)  # a tensor dt is never read back


def test_frames_hold_the_states_of_their_steps(tmp_path):
    state, rates, dom, H, dt = _wcsphCase()
    seen = {}
    sim = Simulation(state, rates, dom, H, dt, out=tmp_path, writer=writeParticles,
                     options=_quiet(frameEvery=3, frameFormat="h5"), stepper=kickDriftKick,
                     frameFields=lambda s, r: {"speed": s.velocities.norm(dim=1)})
    sim.run(7, callback=lambda s: seen.setdefault(s.step, s.state))
    assert [p.name for p in sim.frames] == ["frame_000000.h5", "frame_000003.h5",
                                            "frame_000006.h5"]
    _, fields, meta = readParticles(sim.frames[2])
    assert torch.equal(fields["positions"], seen[6].positions)
    assert torch.equal(fields["velocities"], seen[6].velocities)
    assert torch.equal(fields["densities"], seen[6].densities)
    assert torch.equal(fields["speed"], seen[6].velocities.norm(dim=1))
    assert "accelerations" in fields
    assert meta["time"] == pytest.approx(6 * dt, rel=1e-14)
    _, first, meta0 = readParticles(sim.frames[0])
    assert torch.equal(first["positions"], state.positions) and meta0["time"] == 0.0


def test_run_until_and_periodic_restart_files(tmp_path):
    state, rates, dom, H, _ = _wcsphCase()
    sim = Simulation(state, rates, dom, H, 0.01 / 3, out=tmp_path,
                     options=_quiet(restartEvery=2))
    assert sim.stepsUntil(0.01) == 3
    sim.run(until=0.01)
    assert sim.step == 3 and sim.state.time == pytest.approx(0.01, rel=1e-14)
    assert loadRestart(tmp_path / "restart.pt").step == 2


def test_wrap_periodic():
    dom = DomainDescription(torch.tensor([-1.0, 0.0], dtype=F64),
                            torch.tensor([1.0, 2.0], dtype=F64), [True, False])
    x = torch.tensor([[1.5, 3.0], [-1.25, -0.5], [0.25, 1.0]], dtype=F64, requires_grad=True)
    w = wrapPeriodic(x, dom)
    assert torch.equal(w.detach(), torch.tensor([[-0.5, 3.0], [0.75, -0.5], [0.25, 1.0]],
                                                dtype=F64))
    (g,) = torch.autograd.grad(w.sum(), x)
    assert torch.equal(g, torch.ones_like(x))


def test_transport_step_without_background_is_kick_drift_kick():
    state, rates, dom, H, dt = _wcsphCase()
    a, ra = kickDriftKick(state, dt, rates, VerletNeighbours(dom, H, 0.1))
    b, rb = transportKickDriftKick(state, dt, rates, VerletNeighbours(dom, H, 0.1))
    _equal(a, b)
    _equal(ra, rb)
    assert isinstance(TransportState(state.positions, state.velocities), FluidState)


def test_validation(tmp_path):
    state, rates, dom, H, dt = _wcsphCase()
    with pytest.raises(ValueError, match="skin"):
        LoopOptions(skin=-0.1)
    with pytest.raises(ValueError, match="frameEvery"):
        LoopOptions(frameEvery=-1)
    with pytest.raises(ValueError, match="frameFormat"):
        LoopOptions(frameFormat="csv")
    with pytest.raises(ValueError, match="needs out"):
        Simulation(state, rates, dom, H, dt, options=LoopOptions(frameEvery=2))
    with pytest.raises(ValueError, match="dt"):
        Simulation(state, rates, dom, H, -1.0)
    sim = Simulation(state, rates, dom, H, dt, options=_quiet())
    with pytest.raises(ValueError, match="exactly one"):
        sim.run(2, until=1.0)
    with pytest.raises(ValueError, match="transportVelocities"):
        TransportState(state.positions, state.velocities,
                       transportVelocities=state.velocities[:3])
    torch.save({"format": "other"}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a restart file"):
        loadRestart(tmp_path / "x.pt")
