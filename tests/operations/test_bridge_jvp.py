"""Forward mode through the bridge and the loud failures of unsupported nestings
(the dual wrapper).

The toy's forward-mode rule (`toyJvpFn`) is checked against the reference Jacobian
contracted with the tangent.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from warpSPHCore.autograd import castTorchToWarpAsBuiltins
from warpSPHCore.autograd.stateAwareWarpFunction import _liveTangentMask, hasLiveTangent

try:
    from ._bridge_toys import makeProblem, reference, toyApply, toyJvpFn, toyMultiApply
except ImportError:
    from _bridge_toys import makeProblem, reference, toyApply, toyJvpFn, toyMultiApply

TOL = dict(rtol=1e-12, atol=1e-12)


@contextlib.contextmanager
def countReadbacks(monkeypatch):
    """Count device->host readbacks (.tolist, .item, .cpu, .numpy, bool/int/float)."""
    counts = {"n": 0}
    for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__"):
        orig = getattr(torch.Tensor, name)

        def wrapped(self, *a, _orig=orig, **k):
            counts["n"] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapped)
    try:
        yield counts
    finally:
        monkeypatch.undo()


def _dualCall(fn, primals, tangents):
    """fn(*duals) under a dual level; returns (primal out, tangent out)."""
    with fwAD.dual_level():
        duals = [p if t is None else fwAD.make_dual(p, t) for p, t in zip(primals, tangents)]
        out = fn(*duals)
        if isinstance(out, tuple):
            return tuple(fwAD.unpack_dual(o) for o in out)
        u = fwAD.unpack_dual(out)
        return u.primal, u.tangent


def _jacobianTangent(off, nbr, w, x, y, dw, dx, dy):
    _, jvp = torch.autograd.functional.jvp(lambda w, x, y: reference(off, nbr, w, x, y),
                                           (w, x, y), (dw, dx, dy))
    return jvp


@pytest.mark.parametrize("which", ["w", "x", "y", "all"])
def test_jvp_matches_jacobian(device, which):
    off, nbr, w, x, y = makeProblem(device=device)
    g = torch.Generator().manual_seed(3)
    tan = {k: torch.randn(t.shape, generator=g, dtype=t.dtype).to(device)
           for k, t in zip("wxy", (w, x, y))}
    use = {k: (which in (k, "all")) for k in "wxy"}
    tangents = [tan[k] if use[k] else None for k in "wxy"]
    prim, tout = _dualCall(lambda w, x, y: toyApply(off, nbr, w, x, y, jvp_fn=toyJvpFn),
                           (w, x, y), tangents)
    zeros = {k: torch.zeros_like(tan[k]) for k in "wxy"}
    expect = _jacobianTangent(off, nbr, w, x, y,
                              *[tan[k] if use[k] else zeros[k] for k in "wxy"])
    torch.testing.assert_close(prim, reference(off, nbr, w, x, y), **TOL)
    torch.testing.assert_close(tout, expect, **TOL)


def test_one_readback_per_call(device, monkeypatch):
    off, nbr, w, x, y = makeProblem(device=device)
    dx = torch.randn_like(x)
    with countReadbacks(monkeypatch) as c:
        _dualCall(lambda x: toyApply(off, nbr, w, x, y, jvp_fn=toyJvpFn), (x,), (dx,))
    assert c["n"] == 1
    # several dual inputs, one of them zero: still exactly one readback
    with countReadbacks(monkeypatch) as c:
        _dualCall(lambda w, x, y: toyApply(off, nbr, w, x, y, jvp_fn=toyJvpFn), (w, x, y),
                  (torch.zeros_like(w), dx, torch.zeros_like(y)))
    assert c["n"] == 1
    # nothing live: one readback, no jvp_fn needed
    with countReadbacks(monkeypatch) as c:
        _dualCall(lambda x: toyApply(off, nbr, w, x, y), (x,), (torch.zeros_like(x),))
    assert c["n"] == 1
    # no forward-mode AD at all: no readback
    with countReadbacks(monkeypatch) as c:
        toyApply(off, nbr, w, x, y)
        xr = x.clone().requires_grad_()
        torch.autograd.grad(toyApply(off, nbr, w, xr, y).sum(), (xr,))
    assert c["n"] == 0


def test_zero_tangents_not_live(device):
    """Torch synthesises zero tangents for every other tensor argument; none is live, so the
    output gets an exactly-zero tangent (never None) and no rule is needed."""
    off, nbr, w, x, y = makeProblem(device=device)
    _, t = _dualCall(lambda x: toyApply(off, nbr, w, x, y), (x,), (torch.zeros_like(x),))
    assert t is not None and torch.equal(t, torch.zeros_like(t))
    (o, to), (c, tc) = _dualCall(lambda x: toyMultiApply(off, nbr, w, x, y), (x,),
                                 (torch.zeros_like(x),))
    assert torch.equal(to, torch.zeros_like(o)) and tc is None


def test_live_without_rule_raises(device):
    off, nbr, w, x, y = makeProblem(device=device)
    with pytest.raises(NotImplementedError, match="toyCsrKernel"):
        _dualCall(lambda x: toyApply(off, nbr, w, x, y), (x,), (torch.randn_like(x),))
    with pytest.raises(NotImplementedError, match="toyCsrKernel"):
        _dualCall(lambda y: toyApply(off, nbr, w, x, y), (y,),
                  (torch.full_like(y, float("nan")),))  # NaN is live


def test_multi_output_rule(device):
    off, nbr, w, x, y = makeProblem(device=device)
    dx = torch.randn_like(x)

    def rule(ctx, flat):
        return (toyJvpFn(ctx, flat), None)

    (o, to), (c, tc) = _dualCall(lambda x: toyMultiApply(off, nbr, w, x, y, jvp_fn=rule), (x,),
                                 (dx,))
    expect = _jacobianTangent(off, nbr, w, x, y, torch.zeros_like(w), dx, torch.zeros_like(y))
    torch.testing.assert_close(to, expect, **TOL)
    assert tc is None and c.dtype == torch.int32


def test_rule_sees_mask_and_saved_tensors(device):
    off, nbr, w, x, y = makeProblem(device=device)
    seen = {}

    def rule(ctx, flat):
        seen["mask"] = list(ctx.live_mask)
        seen["saved"] = len(ctx.saved_tensors)
        seen["flat"] = [t is None for t in flat]
        return toyJvpFn(ctx, flat)

    _dualCall(lambda x: toyApply(off, nbr, w, x, y, jvp_fn=rule), (x,), (torch.randn_like(x),))
    assert seen["mask"] == [False, False, False, True, False]
    assert seen["saved"] == 5
    assert seen["flat"][:2] == [True, True]  # integer structure has no tangent


def test_empty_tangents_inactive(device, monkeypatch):
    """An empty tangent is inactive: no readback, zero output tangent."""
    off = torch.zeros(4, dtype=torch.int32, device=device)  # three rows, no edges
    nbr = torch.zeros(0, dtype=torch.int32, device=device)
    w = torch.zeros(0, dtype=torch.float64, device=device)
    x = torch.randn(3, dtype=torch.float64, device=device)
    y = torch.randn(3, dtype=torch.float64, device=device)
    # x and y travel as prebuilt views, as `_launch` passes pruned inert tensors; otherwise
    # torch's synthesised (non-empty) zero tangents for them would be candidates
    xv, yv = castTorchToWarpAsBuiltins(x), castTorchToWarpAsBuiltins(y)
    with countReadbacks(monkeypatch) as c:
        _, t = _dualCall(lambda w: toyApply(off, nbr, w, xv, yv, dtype=torch.float64), (w,),
                         (torch.zeros_like(w),))
    assert c["n"] == 0
    assert t.shape == (3,) and torch.equal(t, torch.zeros_like(t))
    # with candidates present the mask still treats the empty tangent as inactive
    with countReadbacks(monkeypatch) as c:
        _, t = _dualCall(lambda w: toyApply(off, nbr, w, x, y), (w,), (torch.zeros_like(w),))
    assert c["n"] == 1 and torch.equal(t, torch.zeros_like(t))


def test_empty_output_zero_tangent_without_readback(device, monkeypatch):
    off = torch.zeros(1, dtype=torch.int32, device=device)  # zero queries
    nbr = torch.zeros(0, dtype=torch.int32, device=device)
    w = torch.zeros(0, dtype=torch.float64, device=device)
    x = torch.randn(4, 2, dtype=torch.float64, device=device)
    y = torch.zeros(0, dtype=torch.float64, device=device)
    with countReadbacks(monkeypatch) as c:
        _, t = _dualCall(lambda x: toyApply(off, nbr, w, x, y), (x,), (torch.randn_like(x),))
    assert c["n"] == 0
    assert t.shape == (0, 2)


def test_live_mask_and_has_live_tangent(device):
    z = torch.zeros(3, device=device)
    nz = torch.tensor([0.0, -1.0, 0.0], device=device)
    nan = torch.tensor([float("nan")], device=device)
    e = torch.zeros(0, device=device)
    assert _liveTangentMask([None, z, nz, e, nan]) == [False, False, True, False, True]
    assert _liveTangentMask([None, e]) == [False, False]
    assert not hasLiveTangent(None) and not hasLiveTangent(e) and not hasLiveTangent(z)
    assert hasLiveTangent(nz) and hasLiveTangent(nan)


def test_create_graph_backward_raises(device):
    off, nbr, w, x, y = makeProblem(device=device)
    x.requires_grad_()
    out = toyApply(off, nbr, w, x, y)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(out.sum(), (x,), create_graph=True)


def test_functional_jvp_and_hvp_raise(device):
    """torch.autograd.functional.jvp/hvp use double backward; non-strict mode would return
    silent zeros, so the bridge must raise."""
    off, nbr, w, x, y = makeProblem(device=device)
    with pytest.raises(NotImplementedError):
        torch.autograd.functional.jvp(lambda x: toyApply(off, nbr, w, x, y), (x,),
                                      (torch.ones_like(x),))
    with pytest.raises(NotImplementedError):
        torch.autograd.functional.hvp(lambda x: toyApply(off, nbr, w, x, y).sum(), (x,),
                                      (torch.ones_like(x),))


def test_forward_over_reverse_raises(device):
    off, nbr, w, x, y = makeProblem(device=device)
    x.requires_grad_()
    out = toyApply(off, nbr, w, x, y)
    with fwAD.dual_level():
        seed = fwAD.make_dual(torch.ones_like(out), torch.randn_like(out))
        with pytest.raises(NotImplementedError, match="forward-over-reverse"):
            torch.autograd.grad(out, (x,), seed)


def test_reverse_over_forward(device):
    """The tangent returned through the bridge is differentiable when the rule is."""
    off, nbr, w, x, y = makeProblem(device=device)
    xr = x.clone().requires_grad_()
    dx = torch.randn_like(x)
    with fwAD.dual_level():
        out = toyApply(off, nbr, w, fwAD.make_dual(xr, dx), y, jvp_fn=toyJvpFn)
        t = fwAD.unpack_dual(out).tangent
        assert t.requires_grad
        (g,) = torch.autograd.grad(t.sum(), (xr,), allow_unused=True)
    # the toy is linear in x: d/dx <1, J dx> = 0
    assert g is None or torch.count_nonzero(g) == 0
