"""StateBundle: persistent structs on the no-grad path only."""

from __future__ import annotations

import contextlib

import pytest
import torch
import warp as wp

from warpSPHCore.autograd import castTorchToWarpAsBuiltins as cast
from warpSPHCore.autograd.launcher import torchStreamAsWarp
from warpSPHCore.util.stateBundle import (
    StateBundle,
    clearStateBundles,
    makeStruct,
    stateBundleFor,
)

try:
    from ._bridge_toys import (
        ToyCsr64,
        makeProblem,
        reference,
        structBuild,
        toyStructApply,
        toyStructKernel,
    )
except ImportError:
    from _bridge_toys import (
        ToyCsr64,
        makeProblem,
        reference,
        structBuild,
        toyStructApply,
        toyStructKernel,
    )

TOL = dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(autouse=True)
def _bundleOn(monkeypatch):
    monkeypatch.delenv("WARPSPHCORE_DISABLE_BUNDLE", raising=False)
    clearStateBundles()
    yield
    clearStateBundles()


def _spyBuild(log):
    def build(wa, use_bundle=False):
        log.append(use_bundle)
        return structBuild(wa, use_bundle=use_bundle)

    return build


def test_bundle_only_without_grad(device, monkeypatch):
    off, nbr, w, x, y = makeProblem(device=device)
    log = []
    toyStructApply(off, nbr, w, x, y, build_fn=_spyBuild(log))
    x.requires_grad_()
    toyStructApply(off, nbr, w, x, y, build_fn=_spyBuild(log))
    x.requires_grad_(False)
    monkeypatch.setenv("WARPSPHCORE_DISABLE_BUNDLE", "1")
    toyStructApply(off, nbr, w, x, y, build_fn=_spyBuild(log))
    assert log == [True, False, False]


def test_no_grad_calls_reuse_and_refresh(device):
    """One persistent instance serves every no-grad call and follows new inputs."""
    problems = [makeProblem(device=device, seed=s) for s in range(3)]
    for off, nbr, w, x, y in problems:
        out = toyStructApply(off, nbr, w, x, y)
        torch.testing.assert_close(out, reference(off, nbr, w, x, y), **TOL)
    bundle = stateBundleFor("toy-struct")
    assert len(bundle) == 1 and bundle.misses == 1 and bundle.hits == 2
    off, nbr, w, x, y = problems[0]
    x.mul_(-2.0)  # in-place change of a cached tensor: same view, new values
    torch.testing.assert_close(toyStructApply(off, nbr, w, x, y), reference(off, nbr, w, x, y),
                               **TOL)


def test_disable_gate(monkeypatch, device):
    off, nbr, w, x, y = makeProblem(device=device)
    fields = {"off": cast(off), "nbr": cast(nbr), "w": cast(w), "x": cast(x)}
    a = makeStruct(ToyCsr64, fields, use_bundle=True, key="k")
    assert makeStruct(ToyCsr64, fields, use_bundle=True, key="k") is a
    assert makeStruct(ToyCsr64, fields, use_bundle=False, key="k") is not a
    monkeypatch.setenv("WARPSPHCORE_DISABLE_BUNDLE", "1")
    b = makeStruct(ToyCsr64, fields, use_bundle=True, key="k")
    assert b is not a and makeStruct(ToyCsr64, fields, use_bundle=True, key="k") is not b
    assert b.x is fields["x"]


def test_refresh_identity_compare():
    class Recorder:
        def __init__(self):
            object.__setattr__(self, "writes", [])
            object.__setattr__(self, "arr", None)
            object.__setattr__(self, "scale", 0.0)

        def __setattr__(self, name, value):
            self.writes.append(name)
            object.__setattr__(self, name, value)

    a1 = wp.zeros(3, dtype=wp.float64, device="cpu")
    a2 = wp.zeros(3, dtype=wp.float64, device="cpu")
    r = Recorder()
    StateBundle.refresh(r, arr=a1, scale=1.0)
    StateBundle.refresh(r, arr=a1, scale=1.0)  # same array object: not rewritten
    StateBundle.refresh(r, arr=a2, scale=2.0)
    assert r.writes == ["arr", "scale", "scale", "arr", "scale"]
    assert r.arr is a2 and r.scale == 2.0


def _rawLaunch(s, y, n, device):
    out = wp.zeros(n, dtype=wp.float64, device=device, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(toyStructKernel, dim=n, inputs=[s, y], outputs=[out], device=device)
    return tape, out


def _torchStream(device):
    stream = torchStreamAsWarp(str(device))
    return wp.ScopedStream(stream) if stream is not None else contextlib.nullcontext()


def test_raw_tape_rereads_struct_fields(device):
    """The W25 repro on Warp itself: a struct reused between a taped launch and its
    backward sends the first call's gradient to the second call's array."""
    with _torchStream(device):
        _rawRepro(device)


def _rawRepro(device):
    off, nbr, w, x, y = makeProblem(device=device)
    n = off.numel() - 1
    dev = str(device)
    x1 = cast(x, requires_grad=True)
    x2 = cast(x.clone(), requires_grad=True)
    yv, ov = cast(y), torch.ones(n, dtype=torch.float64, device=device)
    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(reference(off, nbr, w, xr, y).sum(), (xr,))

    def seed():
        return cast(ov)

    # reused struct: corrupt
    s = ToyCsr64()
    s.off, s.nbr, s.w, s.x = cast(off), cast(nbr), cast(w), x1
    tape1, out1 = _rawLaunch(s, yv, n, dev)
    s.x = x2  # "the next call" refreshes the shared instance
    _rawLaunch(s, yv, n, dev)
    tape1.backward(grads={out1: seed()})
    g1, g2 = wp.to_torch(x1.grad).clone(), wp.to_torch(x2.grad).clone()
    assert torch.count_nonzero(g1) == 0
    torch.testing.assert_close(g2, expected, **TOL)

    # fresh structs: correct
    x1.grad.zero_()
    x2.grad.zero_()
    sa, sb = ToyCsr64(), ToyCsr64()
    sa.off, sa.nbr, sa.w, sa.x = cast(off), cast(nbr), cast(w), x1
    sb.off, sb.nbr, sb.w, sb.x = cast(off), cast(nbr), cast(w), x2
    tapeA, outA = _rawLaunch(sa, yv, n, dev)
    _rawLaunch(sb, yv, n, dev)
    tapeA.backward(grads={outA: seed()})
    torch.testing.assert_close(wp.to_torch(x1.grad), expected, **TOL)
    assert torch.count_nonzero(wp.to_torch(x2.grad)) == 0


def _forcedBundleBuild(wa, use_bundle=False):
    return structBuild(wa, use_bundle=True)  # ignores the bridge's gate: unsafe under a tape


@pytest.mark.parametrize("forceBundle", [False, True], ids=["bridge", "forced-bundle"])
def test_bridge_deferred_backward(device, forceBundle):
    """Two grad calls whose backward runs after both forwards match a strictly sequential
    reference. The bridge records its tape in backward, from structs built there and
    consumed at once, so even a build_fn that forces the shared bundle cannot hand the first
    call's backward the second call's arrays (the hazard itself, at the Warp level, is the
    raw two-launch repro above); before that change the forced bundle corrupted g1."""
    off, nbr, w, x, y = makeProblem(device=device)
    x1 = x.clone().requires_grad_()
    x2 = (2.0 * x).requires_grad_()
    y2 = (y + 1.0)
    build = _forcedBundleBuild if forceBundle else structBuild
    outs = [toyStructApply(off, nbr, w, x1, y, build_fn=build),
            toyStructApply(off, nbr, w, x2, y2, build_fn=build)]
    (g1,) = torch.autograd.grad(outs[0].sum(), (x1,))
    (g2,) = torch.autograd.grad(outs[1].sum(), (x2,))
    xr1, xr2 = x.clone().requires_grad_(), (2.0 * x).requires_grad_()
    (r1,) = torch.autograd.grad(reference(off, nbr, w, xr1, y).sum(), (xr1,))
    (r2,) = torch.autograd.grad(reference(off, nbr, w, xr2, y2).sum(), (xr2,))
    torch.testing.assert_close(g1, r1, **TOL)
    torch.testing.assert_close(g2, r2, **TOL)
