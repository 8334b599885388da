"""`torch.func` over the public entry points (`autograd.functorch`).

For every operator of the registry (float64, CSR; one operator also on the grid):
``torch.func.grad``, ``vjp``, ``jacrev``, ``jacfwd`` and ``jvp`` against the existing routes
(reverse mode by ``torch.autograd``, forward mode by dual tensors) to 1e-10; ``vmap`` over 8
value fields against 8 calls, made in one launch where the operator treats leading field
axes independently and by one call per field otherwise (the Momentum's fixed field, a
batch of positions); `warpOperationJVP` under ``grad`` and ``vmap``; and the transforms that
are not supported (``hessian``, ``jacrev`` of ``grad``) raise and say what works instead.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import ParticleState, ParticleTangentState, SupportScheme, WarpOperation
from warpSPHCore.autograd import stateAwareWarpFunction as bridge
from warpSPHCore.operations import warpOperation, warpOperationJVP
from warpSPHCore.operators import OPERATORS, ValueInputs

F64 = torch.float64
KMS = SupportScheme.KernelMeanSymmetric
N, D = 8, 2
TOL = dict(rtol=1e-10, atol=1e-12)
OPS = list(OPERATORS)


def _values(op, n, seed, batch=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    if op == WarpOperation.Momentum:
        r = lambda *s: torch.rand(*lead, *s, generator=g, dtype=F64)  # noqa: E731
        return torch.cat([r(n, 1) - 0.5, 0.8 + 0.4 * r(n, 1), 0.5 + r(n, 1),
                          0.1 + 0.2 * r(n, 1), r(n, D) - 0.5, r(n, D) - 0.5], dim=-1)
    shape = (D,) if op in (WarpOperation.Divergence, WarpOperation.Curl) else ()
    return torch.randn(*lead, n, *shape, generator=g, dtype=F64)


def _case(op, traversal="csr", seed=5, device="cpu"):
    dom = makeDomain(D, F64, device)
    q = marginCloud(N, D, F64, device, seed=seed, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    pr = props(op, supportMode=KMS)
    hasValues = OPERATORS[op].values is not ValueInputs.NONE

    def fn(x, v=None):
        state = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
        kw = {"queryValues": v} if hasValues else {}
        out = warpOperation(state, pr, dom, adjacency=adj, **kw)
        return out[0] if isinstance(out, tuple) else out

    return q, fn, (_values(op, N, 3).to(device) if hasValues else None)


def _leaf(t):
    return t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("op", OPS, ids=[o.name for o in OPS])
def test_grad_vjp_jacobians_and_jvp(device, op):
    q, fn, f = _case(op, device=device)
    x = q.positions.detach().clone()
    args = (x,) if f is None else (x, f)
    argnums = tuple(range(len(args)))

    def loss(*a):
        out = fn(*a)
        w = torch.linspace(0.5, 1.5, out.numel(), dtype=F64, device=out.device)
        return (w.reshape(out.shape) * out ** 2).sum()

    leaves = [_leaf(a) for a in args]
    ref = torch.autograd.grad(loss(*leaves), leaves)
    got = torch.func.grad(loss, argnums=argnums)(*args)
    for a, b in zip(got, ref):
        assertClose(a, b, 1e-10, 1e-12, f"{op.name} grad")
    out, vjpFn = torch.func.vjp(fn, *args)
    u = torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                    dtype=F64).to(device)
    leaves = [_leaf(a) for a in args]
    ref = torch.autograd.grad(fn(*leaves), leaves, u)
    for a, b in zip(vjpFn(u), ref):
        assertClose(a, b, 1e-10, 1e-12, f"{op.name} vjp")
    jr = torch.func.jacrev(fn, argnums=argnums)(*args)
    jf = torch.func.jacfwd(fn, argnums=argnums)(*args)
    jt = torch.autograd.functional.jacobian(fn, args)
    for a, b, c in zip(jr, jf, jt):
        assertClose(a, c, 1e-10, 1e-12, f"{op.name} jacrev")
        assertClose(b, c, 1e-10, 1e-12, f"{op.name} jacfwd")
    t = tuple(torch.randn(a.shape, generator=torch.Generator().manual_seed(2),
                          dtype=F64).to(device) for a in args)
    _, jv = torch.func.jvp(fn, args, t)
    with fwAD.dual_level():
        dual = fn(*[fwAD.make_dual(a, ta) for a, ta in zip(args, t)])
        ref = fwAD.unpack_dual(dual).tangent
    assertClose(jv, ref, 1e-10, 1e-12, f"{op.name} jvp")
    assert float(jv.abs().max()) > 0


def test_grad_on_the_grid():
    q, fn, f = _case(WarpOperation.Gradient, traversal="grid")
    x = q.positions.detach().clone()
    got = torch.func.grad(lambda a, b: fn(a, b).pow(2).sum(), argnums=(0, 1))(x, f)
    leaves = [_leaf(x), _leaf(f)]
    ref = torch.autograd.grad(fn(*leaves).pow(2).sum(), leaves)
    for a, b in zip(got, ref):
        assertClose(a, b, 1e-10, 1e-12, "grid grad")


_VALUE_OPS = [op for op in OPS if OPERATORS[op].values is not ValueInputs.NONE]


def _oneLaunch(op, fieldShape) -> bool:
    """The registry's shape rule: leading field axes are independent."""
    entry, pr = OPERATORS[op], props(op)
    try:
        return tuple(entry.outputShape((8, *fieldShape), D, pr)) == (
            8, *tuple(entry.outputShape(tuple(fieldShape), D, pr)))
    except ValueError:
        return False


def _countLaunches(monkeypatch):
    calls = []
    original = bridge.StateAwareWarpFunction.apply

    def counted(*a, **kw):
        calls.append(1)
        return original(*a, **kw)

    monkeypatch.setattr(bridge.StateAwareWarpFunction, "apply", counted)
    return calls


@pytest.mark.parametrize("op", _VALUE_OPS, ids=[o.name for o in _VALUE_OPS])
def test_vmap_over_value_fields(op, monkeypatch):
    """8 fields: the same numbers as 8 calls; one launch where leading field axes are
    independent (the registry's shape rule: Interpolate, Gradient, Laplacian), 8 for fixed
    field shapes (Divergence and Curl of [N, d], the Momentum's columns)."""
    q, fn, _ = _case(op)
    batch = _values(op, N, 9, batch=8)
    x = q.positions.detach()
    loop = torch.stack([fn(x, batch[b]) for b in range(8)])
    calls = _countLaunches(monkeypatch)
    with torch.no_grad():
        out = torch.func.vmap(lambda v: fn(x, v))(batch)
    assertClose(out, loop, 1e-13, 1e-14, f"{op.name} vmap")
    assert len(calls) == (1 if _oneLaunch(op, batch.shape[2:]) else 8), len(calls)
    # the batch on another axis than the first, and a gradient through the vmap
    moved = batch.movedim(0, 1)
    out2 = torch.func.vmap(lambda v: fn(x, v), in_dims=1)(moved)
    assertClose(out2, loop, 1e-13, 1e-14, f"{op.name} vmap in_dims=1")
    b = _leaf(batch)
    g = torch.autograd.grad(torch.func.vmap(lambda v: fn(x, v))(b).pow(2).sum(), b)[0]
    bl = _leaf(batch)
    ref = torch.autograd.grad(torch.stack([fn(x, bl[k]) for k in range(8)]).pow(2).sum(),
                              bl)[0]
    assertClose(g, ref, 1e-12, 1e-13, f"{op.name} grad through vmap")


def test_vmap_over_positions_loops():
    q, fn, f = _case(WarpOperation.Gradient)
    xs = q.positions.detach() + 1e-3 * torch.randn(4, N, D, dtype=F64,
                                                   generator=torch.Generator().manual_seed(4))
    out = torch.func.vmap(lambda a: fn(a, f))(xs)
    ref = torch.stack([fn(xs[k], f) for k in range(4)])
    assertClose(out, ref, 1e-13, 1e-14, "vmap positions")


def test_explicit_jvp_under_transforms():
    op = WarpOperation.Gradient
    q, fn, f = _case(op)
    pr = props(op, supportMode=KMS)
    dom = makeDomain(D, F64, "cpu")
    adj = neighbourStructure("csr", q, dom)
    t = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(6), dtype=F64)

    def jv(x, tangent):
        return warpOperationJVP(ParticleState(x, q.supports, q.masses, q.kinds, q.densities),
                                pr, dom, queryValues=f, adjacency=adj,
                                queryTangentState=ParticleTangentState(positions=tangent))

    x = q.positions.detach().clone()
    got = torch.func.grad(lambda a: jv(a, t).pow(2).sum())(x)
    xl = _leaf(x)
    ref = torch.autograd.grad(jv(xl, t).pow(2).sum(), xl)[0]
    assertClose(got, ref, 1e-10, 1e-12, "grad of warpOperationJVP")
    ts = torch.randn(3, *x.shape, generator=torch.Generator().manual_seed(7), dtype=F64)
    out = torch.func.vmap(lambda tt: jv(x, tt))(ts)
    assertClose(out, torch.stack([jv(x, ts[k]) for k in range(3)]), 1e-13, 1e-14,
                "vmap of warpOperationJVP over tangents")


def test_unsupported_transforms_raise():
    q, fn, f = _case(WarpOperation.Density)
    x = q.positions.detach().clone()

    def loss(a):
        return fn(a).pow(2).sum()

    with pytest.raises(NotImplementedError, match="create_graph=True"):
        torch.func.hessian(loss)(x)
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        torch.func.jacrev(torch.func.grad(loss))(x)


def test_one_launch_rule_is_not_vacuous():
    for op in (WarpOperation.Interpolate, WarpOperation.Gradient, WarpOperation.Laplacian):
        assert _oneLaunch(op, ())
    for op in (WarpOperation.Divergence, WarpOperation.Momentum):
        assert not _oneLaunch(op, (D,) if op == WarpOperation.Divergence else (4 + 2 * D,))
