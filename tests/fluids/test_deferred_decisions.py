"""Rebuild decisions read once every k steps (`LoopOptions.verletCheckEvery`) and captured
segments (`LoopOptions.capture`): a step between decisions makes no host synchronisation
(census 0) and a decision one readback (plus the search's when it rebuilds); every pair of
the true support is in the list at every state; the states equal those of a check per
evaluation; a segment whose list went past its buffer is taken again, giving the answer of
a check per evaluation; a resumed run continues bitwise; the segment logic of a capture
(static copies, replay) equals the eager steps bitwise (on the CPU with a stand-in graph,
on CUDA with a CUDA graph); the validation."""

from __future__ import annotations

import pytest
import torch

from warpSPHCore.fluids import FluidState, kickDriftKick
from warpSPHCore.fluids import loop as loopModule
from warpSPHCore.fluids import neighbours as neighboursModule
from warpSPHCore.fluids.cases import tgv
from warpSPHCore.fluids.loop import LoopOptions, Simulation
from warpSPHCore.fluids.transport import transportKickDriftKick
from warpSPHCore.neighborhood import radiusNaive
from warpSPHCore.util.hostSyncCensus import census

F64 = torch.float64


def _case(device="cpu", n=12):
    case = tgv.setup(tgv.TaylorGreenConfig(n=n, t=0.05, relax=0, device=device))
    start = FluidState(case.positions, case.velocities)
    return start, tgv.taylorGreenRates(case), case.domain, case.supports, case.dt


def _sim(k=1, skin=0.1, device="cpu", **kw):
    state, rates, dom, H, dt = _case(device)
    return Simulation(state, rates, dom, H, dt, stepper=transportKickDriftKick,
                      options=LoopOptions(progress=False, skin=skin, verletCheckEvery=k,
                                          **kw))


def _missing(sim):
    """Pairs of the true support absent from the current list."""
    s, a = sim.state, sim.neighbours.adjacency
    dom, H = sim.domain, sim.neighbours.supports
    ii, jj = radiusNaive(s.positions, s.positions, H, H, periodic=dom.periodic,
                         minDomain=dom.min, maxDomain=dom.max)
    return len(set(zip(ii.tolist(), jj.tolist())) - set(zip(a.i.tolist(), a.j.tolist())))


def _close(a, b, atol=1e-12):
    torch.testing.assert_close(a.positions, b.positions, rtol=0, atol=atol)
    torch.testing.assert_close(a.velocities, b.velocities, rtol=0, atol=atol)


def _equal(a, b):
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            assert torch.equal(torch.as_tensor(x, dtype=F64), torch.as_tensor(y, dtype=F64)), \
                name
        else:
            assert x == y, name


def test_a_step_between_decisions_reads_nothing_back():
    k = 8
    sim = _sim(k)
    sim.run(2)  # the first list and the first rates
    counts = {}
    for _ in range(30):
        builds = sim.neighbours.builds
        with census() as c:
            sim.advance()
        counts[sim.step - 1] = (c.total, sim.neighbours.builds - builds)
    assert sim.replays == 0
    between = {s: n for s, (n, _) in counts.items() if s % k}
    assert set(between.values()) == {0}, counts
    for s in range(8, 32, k):  # a decision: one readback, plus the search's on a rebuild
        total, rebuilt = counts[s]
        assert total == 1 + rebuilt, counts
    assert sim.neighbours.builds >= 2  # the run did rebuild (at a decision)


def test_deferred_states_equal_a_check_per_evaluation_and_miss_no_pair():
    eager, deferred = _sim(1), _sim(5)
    seen = []
    eager.run(40)
    deferred.run(40, callback=lambda s: seen.append(_missing(s)))
    assert seen == [0] * 40
    assert deferred.replays == 0 and deferred.neighbours.builds >= 2
    # another rebuild schedule sums the same pairs in another order: rounding only
    _close(deferred.state, eager.state)


def test_a_list_past_its_buffer_is_taken_again(monkeypatch):
    """Without the test ahead (the step bound set to 0) the lists go past their buffers
    within a segment; the segment is taken again from the last decision with a check per
    evaluation, and the run ends where a check per evaluation ends."""
    monkeypatch.setattr(neighboursModule, "STEP_REACH", 0.0)
    eager, deferred = _sim(1, skin=0.02), _sim(6, skin=0.02)
    eager.run(36)
    deferred.run(36)
    assert deferred.replays >= 1 and deferred.step == 36
    assert _missing(deferred) == 0
    _close(deferred.state, eager.state)


def test_resumed_deferred_run_continues_bitwise(tmp_path):
    whole = _sim(4)
    whole.run(26)
    first = _sim(4)
    first.run(13)
    path = first.save(tmp_path / "restart.pt")
    state, rates, dom, H, _ = _case()
    resumed = Simulation.resume(path, rates, dom, H, stepper=transportKickDriftKick,
                                options=LoopOptions(progress=False, verletCheckEvery=4))
    resumed.run(13)
    _equal(resumed.state, whole.state)
    assert first.neighbours.builds + resumed.neighbours.builds == whole.neighbours.builds


def test_captured_segments_equal_the_eager_steps_with_a_stand_in_graph(monkeypatch):
    monkeypatch.setattr(loopModule, "_graphFactory", loopModule._EagerGraph)
    eager = _sim(4, skin=0.3)  # a list that holds for several segments
    eager.run(40)
    captured = _sim(4, skin=0.3, capture=True)
    steps = []
    captured.run(40, callback=lambda s: steps.append(s.step))
    assert captured.captures >= 1
    _equal(captured.state, eager.state)
    assert captured.neighbours.builds == eager.neighbours.builds
    assert captured.neighbours.calls == eager.neighbours.calls
    # one callback per segment where segments are whole; single steps at the end of a run
    assert steps[-1] == 40 and all(b - a in (1, 4) for a, b in zip([0] + steps, steps))
    assert len(steps) < 40


def test_capture_validation(monkeypatch):
    with pytest.raises(ValueError, match="verletCheckEvery >= 2"):
        LoopOptions(capture=True)
    with pytest.raises(ValueError, match="multiple of verletCheckEvery=4"):
        LoopOptions(capture=True, verletCheckEvery=4, frameEvery=6)
    with pytest.raises(ValueError, match="verletCheckEvery=0"):
        LoopOptions(verletCheckEvery=0)
    sim = _sim(4, capture=True)
    with pytest.raises(ValueError, match="CUDA graphs; the state is on cpu"):
        sim.run(8)
    monkeypatch.setattr(loopModule, "_graphFactory", loopModule._EagerGraph)
    state, rates, dom, H, dt = _case()
    v = state.velocities.clone().requires_grad_(True)
    sim = Simulation(FluidState(state.positions, v), rates, dom, H, dt,
                     stepper=transportKickDriftKick,
                     options=LoopOptions(progress=False, verletCheckEvery=4, capture=True))
    with pytest.raises(ValueError, match="velocities require grad"):
        sim.run(8)


def test_distributed_simulation_rejects_deferred_decisions():
    from warpSPHCore.distributed import DistributedSimulation

    case = tgv.setup(tgv.TaylorGreenConfig(n=10, t=0.05, relax=0))
    with pytest.raises(ValueError, match="accepted across ranks: verletCheckEvery=1"):
        DistributedSimulation(tgv.taylorGreenScheme(case), tgv.taylorGreenParticles(case),
                              FluidState(case.positions, case.velocities), case.dt,
                              options=LoopOptions(progress=False, verletCheckEvery=4))


def test_another_stepper_defers_too():
    """Plain kick-drift-kick (the particles drift with their velocities) under deferred
    decisions ends where a check per evaluation ends."""
    state, rates, dom, H, dt = _case()
    out = []
    for k in (1, 5):
        sim = Simulation(state, rates, dom, H, dt, stepper=kickDriftKick,
                         options=LoopOptions(progress=False, verletCheckEvery=k))
        sim.run(25)
        out.append(sim.state)
    _close(out[0], out[1])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_replay_equals_the_eager_steps_on_cuda():
    eager = _sim(4, skin=0.3, device="cuda:0")
    eager.run(40)
    captured = _sim(4, skin=0.3, device="cuda:0", capture=True)
    captured.run(40)
    assert captured.captures >= 1
    torch.cuda.synchronize()
    _equal(captured.state, eager.state)
