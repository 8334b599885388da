"""Call plans (`autograd.callPlan`): a repeated no-grad call on the same objects in
the same state is recorded on its second sight and replayed from the third; every change that could change the launch (an
in-place write, a reassigned state field, a tensor that now requires grad, a changed
setting) takes the full path again. Results are bitwise those of the full path, outputs are
fresh tensors, and a plan does not outlive its inputs."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import warp as wp
from sph_reference import cloud, makeDomain, neighbourStructure, props

from warpSPHCore import GradientScheme, WarpOperation
from warpSPHCore.autograd.callPlan import callPlanStats, clearCallPlans, setCallPlans
from warpSPHCore.operations import warpOperation

DEV = "cpu"


@pytest.fixture(autouse=True)
def _plansOn():
    previous = setCallPlans(True)
    yield
    setCallPlans(previous)


def _setup(d=2, dtype=torch.float64, traversal="csr", seed=3):
    dom = makeDomain(d, dtype, DEV, periodic=True)
    p = cloud(40, d, dtype, DEV, seed, hMean=0.5)
    adj = neighbourStructure(traversal, p, dom)
    return p, dom, adj


def _full(*args, **kw):
    """The same call on the full path (plans off), for comparison."""
    previous = setCallPlans(False)
    try:
        with torch.no_grad():
            return warpOperation(*args, **kw)
    finally:
        setCallPlans(previous)


def _hits():
    return callPlanStats()["hits"]


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_repeated_density_call_replays_bitwise(traversal, dtype):
    p, dom, adj = _setup(dtype=dtype, traversal=traversal)
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        first = warpOperation(p, pr, dom, adjacency=adj)
        h0 = _hits()
        recorded = warpOperation(p, pr, dom, adjacency=adj)
        assert _hits() == h0  # the first sight is only noted, the second records
        second = warpOperation(p, pr, dom, adjacency=adj)
        third = warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0 + 2
    assert second.data_ptr() != third.data_ptr() != first.data_ptr()  # fresh outputs
    ref = _full(p, pr, dom, adjacency=adj)
    assert all(torch.equal(t, ref) for t in (first, recorded, second, third))
    assert ref.abs().max() > 0


def test_gradient_and_covariance_shapes_and_tuples():
    p, dom, adj = _setup(d=3)
    v = torch.randn(40, 3, dtype=torch.float64)
    pg = props(WarpOperation.Gradient, gradientMode=GradientScheme.Difference)
    pc = props(WarpOperation.Covariance)
    with torch.no_grad():
        for _ in range(2):
            warpOperation(p, pg, dom, queryValues=v, adjacency=adj)
            warpOperation(p, pc, dom, adjacency=adj, covarianceReturnNumNeighbors=True)
        h0 = _hits()
        g = warpOperation(p, pg, dom, queryValues=v, adjacency=adj)
        C, n = warpOperation(p, pc, dom, adjacency=adj, covarianceReturnNumNeighbors=True)
    assert _hits() == h0 + 2
    assert g.shape == (40, 3, 3) and C.shape == (40, 3, 3) and n.dtype == torch.int32
    assert torch.equal(g, _full(p, pg, dom, queryValues=v, adjacency=adj))
    Cr, nr = _full(p, pc, dom, adjacency=adj, covarianceReturnNumNeighbors=True)
    assert torch.equal(C, Cr) and torch.equal(n, nr)


def test_in_place_write_misses_and_recomputes():
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
        before = warpOperation(p, pr, dom, adjacency=adj)
        p.masses.mul_(2.0)
        h0 = _hits()
        after = warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0  # the in-place write bumped the version: full path
    torch.testing.assert_close(after, 2.0 * before, rtol=1e-14, atol=0)


def test_values_written_in_place_miss():
    p, dom, adj = _setup()
    v = torch.randn(40, dtype=torch.float64)
    pg = props(WarpOperation.Gradient)
    with torch.no_grad():
        warpOperation(p, pg, dom, queryValues=v, adjacency=adj)
        warpOperation(p, pg, dom, queryValues=v, adjacency=adj)
        assert callPlanStats()["kept"] >= 1
        v.add_(1.0)  # the kernel reads a concatenated copy made by the full path
        got = warpOperation(p, pg, dom, queryValues=v, adjacency=adj)
    assert torch.equal(got, _full(p, pg, dom, queryValues=v, adjacency=adj))


def test_reassigned_state_field_misses():
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
        warpOperation(p, pr, dom, adjacency=adj)
        p.masses = p.masses * 3.0
        h0 = _hits()
        got = warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0
    assert torch.equal(got, _full(p, pr, dom, adjacency=adj))


def test_other_properties_or_domain_miss():
    p, dom, adj = _setup()
    with torch.no_grad():
        a = warpOperation(p, props(WarpOperation.Density), dom, adjacency=adj)
        h0 = _hits()
        from warpSPHCore import KernelFunctions
        b = warpOperation(p, props(WarpOperation.Density, KernelFunctions.Wendland4), dom,
                          adjacency=adj)
    assert _hits() == h0 and not torch.equal(a, b)


def test_requires_grad_takes_the_full_path_and_differentiates():
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    warpOperation(p, pr, dom, adjacency=adj)
    warpOperation(p, pr, dom, adjacency=adj)  # plan recorded (grad mode on, nothing requires)
    p.masses.requires_grad_(True)
    h0 = _hits()
    rho = warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0 and rho.requires_grad
    rho.sum().backward()
    assert p.masses.grad is not None and p.masses.grad.abs().max() > 0


def test_forward_ad_level_and_tape_are_not_replayed():
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
        warpOperation(p, pr, dom, adjacency=adj)
    h0 = _hits()
    with fwAD.dual_level(), torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
    with wp.Tape(), torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0


def test_on_the_fly_grid_is_not_planned():
    p, dom, _ = _setup()
    pr = props(WarpOperation.Density)
    declined = callPlanStats()["declined"]
    with torch.no_grad():
        a = warpOperation(p, pr, dom, adjacency=None)
        b = warpOperation(p, pr, dom, adjacency=None)
        c = warpOperation(p, pr, dom, adjacency=None)
    # tried once (the second sight), then remembered as declined
    assert callPlanStats()["declined"] == declined + 1
    assert torch.equal(a, b) and torch.equal(a, c)


def test_plan_owns_its_structs_across_other_calls():
    """Another call in between refreshes the shared no-grad struct bundle; the plan's replay
    must still read its own arrays."""
    p, dom, adj = _setup(seed=3)
    q, _, adjQ = _setup(seed=4)
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
        warpOperation(p, pr, dom, adjacency=adj)
        warpOperation(q, pr, dom, adjacency=adjQ)
        other = warpOperation(q, pr, dom, adjacency=adjQ)
        h0 = _hits()
        again = warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0 + 1
    assert torch.equal(again, _full(p, pr, dom, adjacency=adj))
    assert not torch.equal(again, other)


def test_plan_dies_with_its_inputs():
    clearCallPlans()
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    with torch.no_grad():
        warpOperation(p, pr, dom, adjacency=adj)
        assert callPlanStats()["kept"] == 0  # first sight: only noted
        warpOperation(p, pr, dom, adjacency=adj)
    assert callPlanStats()["kept"] == 1
    del p
    gc.collect()
    assert callPlanStats()["kept"] == 0


def test_gate_off_never_replays(monkeypatch):
    monkeypatch.setenv("WARPSPHCORE_CALL_PLANS", "0")
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    h0 = _hits()
    with torch.no_grad():
        for _ in range(3):
            warpOperation(p, pr, dom, adjacency=adj)
    assert _hits() == h0


def test_new_tensors_every_call_are_never_recorded():
    """A loop that builds new inputs every step never repeats a key: nothing is recorded,
    even where a dead tensor's id and memory are recycled."""
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)
    recorded = callPlanStats()["recorded"]
    with torch.no_grad():
        for _ in range(6):
            masses = p.masses.clone()
            q = type(p)(p.positions, p.supports, masses, p.kinds, p.densities)
            warpOperation(q, pr, dom, adjacency=adj)
            del q, masses
    assert callPlanStats()["recorded"] == recorded


def test_functorch_tensors_take_the_full_path():
    """A functorch-wrapped tensor has no storage to fingerprint: a torch.func transform runs
    the call on plain tensors (autograd.functorch), whose Jacobian is autograd's."""
    p, dom, adj = _setup()
    pr = props(WarpOperation.Density)

    def fn(x):
        q = type(p)(x, p.supports, p.masses, p.kinds, p.densities)
        return warpOperation(q, pr, dom, adjacency=adj)

    jac = torch.func.jacrev(fn)(p.positions)
    ref = torch.autograd.functional.jacobian(fn, p.positions)
    torch.testing.assert_close(jac, ref, rtol=1e-12, atol=1e-14)
