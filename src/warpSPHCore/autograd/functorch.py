"""`torch.func` transforms over the public entry points.

The Warp bridge reads tensor storage, which the tensors of a `torch.func` transform
(functorch's grad-tracking and batched wrappers) do not expose. So an entry point that finds
a wrapped tensor among its arguments (`FunctorchWrappedInput`, raised by the argument checks
before any conversion) calls itself again through `functorchCall`: the wrapped tensors
become the inputs of `_FuncOp`, an `autograd.Function` in the `setup_context` form, which
functorch unwraps level by level:

* ``forward`` runs the entry point on the unwrapped (plain) tensors, the ordinary path;
* ``backward`` (``grad``, ``vjp``, ``jacrev``) returns `_FuncVJP` of the saved inputs and
  the cotangents: its forward takes the gradient of the entry point on plain tensors with
  ``torch.autograd.grad`` (the operators' reverse kernels);
* ``jvp`` (``jvp``, ``jacfwd``) returns `_FuncJVP`: forward mode through dual tensors (the
  operators' forward-mode kernels) on plain tensors;
* ``vmap``: each of the three has a batching rule; over a batch of value fields with every
  other input shared, `_FuncOp`'s rule makes one call with the batch as an extra field axis
  (one neighbour traversal for all fields) where the entry point says that this is exact
  (``call.batchFields``); otherwise, and for the two derivative Functions, one call per
  batch element, stacked.

Not supported, with an error that says so: a transform over a derivative transform inside
`torch.func` (``hessian``, ``jacrev(grad(...))``, ``jvp`` of ``grad``: the derivatives
`_FuncVJP` and `_FuncJVP` compute are not differentiated again, while
``torch.autograd.grad(..., create_graph=True)`` outside `torch.func` is); integer tensors
that a transform wraps.
"""

from __future__ import annotations

import dataclasses

import torch

from .operator_spec import rebindTensors

__all__ = ["FunctorchWrappedInput", "functorchCall", "isWrapped", "anyWrapped"]


class FunctorchWrappedInput(NotImplementedError):
    """Raised by an entry point's argument checks for a `torch.func`-wrapped tensor; the
    entry point catches it and calls itself through `functorchCall` (a NotImplementedError,
    so that an entry point without that dispatch still refuses the tensor clearly)."""


def isWrapped(t) -> bool:
    """True for a tensor that a `torch.func` transform wraps."""
    return isinstance(t, torch.Tensor) and bool(
        torch._C._functorch.is_functorch_wrapped_tensor(t))


def _wrappedTensors(obj, out: list, seen: set):
    if isinstance(obj, torch.Tensor):
        if id(obj) not in seen and isWrapped(obj):
            seen.add(id(obj))
            out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _wrappedTensors(x, out, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            _wrappedTensors(x, out, seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _wrappedTensors(getattr(obj, f.name), out, seen)


def anyWrapped(obj) -> bool:
    """True when a `torch.func`-wrapped tensor lies anywhere in `obj` (tuples, lists, dicts,
    state dataclasses)."""
    found: list = []
    _wrappedTensors(obj, found, set())
    return bool(found)


def functorchCall(fn, where: str, args: tuple, kwargs: dict, batchFields=None):
    """``fn(*args, **kwargs)`` with its `torch.func`-wrapped tensors routed through `_FuncOp`
    (module docstring).

    Args:
        fn: the entry point.
        where: its name, for errors.
        args, kwargs: the call's arguments (tensors anywhere in tuples, lists, dicts and
            state dataclasses).
        batchFields: optional ``(call, inputs, inDims, batchSize) -> (output, outDims) |
            None``: the entry point's one-call batching rule for a vmap over value fields
            (None: not exact for this call, loop instead); ``call(*inputs)`` evaluates the
            entry point on plain tensors parallel to ``call.tensors``.
    """
    tensors: list = []
    _wrappedTensors((args, kwargs), tensors, set())
    for t in tensors:
        if not t.is_floating_point():
            raise NotImplementedError(
                f"{where}: a torch.func transform wraps an integer tensor ({t.dtype}, shape "
                f"{tuple(t.shape)}); accepted: transforms over floating-point inputs only "
                "(kinds, neighbour lists and scene indices stay outside the transform)")

    def call(*plain):
        swap = {id(t): p for t, p in zip(tensors, plain)}
        return fn(*rebindTensors(args, swap),
                  **{k: rebindTensors(v, swap) for k, v in kwargs.items()})

    call.where = where
    call.batchFields = batchFields
    call.tensors = tensors  # the original wrapped inputs, for batchFields' bookkeeping
    return _FuncOp.apply(call, *tensors)


def _sliceArgs(xs, inDims, b):
    return [x.select(d, b) if isinstance(x, torch.Tensor) and d is not None else x
            for x, d in zip(xs, inDims)]


def _stack(outs):
    first = outs[0]
    if isinstance(first, tuple):
        return tuple(torch.stack([o[k] for o in outs]) for k in range(len(first))), \
            tuple(0 for _ in first)
    return torch.stack(outs), 0


def _loop(apply, info, inDims, xs):
    """A batching rule by one call per batch element, stacked along a new leading axis."""
    outs = [apply(*_sliceArgs(xs, inDims, b)) for b in range(info.batch_size)]
    return _stack(outs)


class _FuncOp(torch.autograd.Function):
    """The entry point as a function of its wrapped tensors (module docstring)."""

    @staticmethod
    def forward(call, *xs):
        return call(*xs)

    @staticmethod
    def setup_context(ctx, inputs, output):
        call, *xs = inputs
        ctx.call = call
        ctx.save_for_backward(*xs)
        ctx.save_for_forward(*xs)
        for o in (output if isinstance(output, tuple) else (output,)):
            if isinstance(o, torch.Tensor) and not o.is_floating_point():
                ctx.mark_non_differentiable(o)

    @staticmethod
    def backward(ctx, *grads):
        xs = ctx.saved_tensors
        out = _FuncVJP.apply(ctx.call, len(xs), *xs, *grads)
        return (None,) + (out if isinstance(out, tuple) else (out,))

    @staticmethod
    def jvp(ctx, *tangents):
        xs = ctx.saved_tensors
        return _FuncJVP.apply(ctx.call, len(xs), *xs, *tangents[1:])

    @staticmethod
    def vmap(info, inDims, call, *xs):
        dims = inDims[1:]
        rule = getattr(call, "batchFields", None)
        if rule is not None:
            out = rule(call, xs, dims, info.batch_size)
            if out is not None:
                return out
        return _loop(lambda *s: _FuncOp.apply(call, *s), info, dims, xs)


class _Derivative(torch.autograd.Function):
    """A derivative Function of `_FuncOp`: a batching rule by a loop, and no derivative of
    its own (`refusal` says which transform and what works instead)."""

    refusal = ""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.where = inputs[0].where

    @classmethod
    def refuse(cls, ctx):
        raise NotImplementedError(f"{ctx.where}: {cls.refusal}")

    @classmethod
    def vmap(cls, info, inDims, call, nx, *rest):
        return _loop(lambda *s: cls.apply(call, nx, *s), info, inDims[2:], rest)


class _FuncVJP(_Derivative):
    """``(x, g) -> J(x)^T g`` of the entry point, on plain tensors."""

    refusal = ("a torch.func transform over a reverse transform (hessian = jacfwd(jacrev), "
               "jacrev of grad, jvp of grad) is not supported; for second derivatives "
               "differentiate a gradient taken with torch.autograd.grad(..., "
               "create_graph=True) (reverse over reverse) or use warpSPHCore.autograd.hvp "
               "(reverse over forward)")

    @staticmethod
    def forward(call, nx, *rest):
        xs, gs = rest[:nx], list(rest[nx:])
        leaves = [x.detach().requires_grad_(True) for x in xs]
        with torch.enable_grad():
            out = call(*leaves)
            outs = out if isinstance(out, tuple) else (out,)
            pairs = [(o, g) for o, g in zip(outs, gs)
                     if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
            grads = [None] * len(leaves)
            if pairs:
                grads = torch.autograd.grad([o for o, _ in pairs], leaves,
                                            [g for _, g in pairs], allow_unused=True)
        return tuple(g if g is not None else torch.zeros_like(x) for g, x in zip(grads, xs))

    @staticmethod
    def backward(ctx, *grads):
        _FuncVJP.refuse(ctx)

    @staticmethod
    def jvp(ctx, *tangents):
        _FuncVJP.refuse(ctx)


class _FuncJVP(_Derivative):
    """``(x, t) -> J(x) t`` of the entry point, on plain tensors. Not through dual tensors:
    a `torch.func.jvp` holds torch's one forward-mode level while this runs, so the tangent
    is the cotangents' derivative of a backward taken with ``create_graph=True``,
    d/du <J^T u, t> = J t, which the bridge's differentiable backward evaluates with the
    operators' forward-mode kernels."""

    refusal = ("a reverse torch.func transform over a forward transform (jacrev of jvp) is "
               "not supported; use reverse over forward with dual tensors "
               "(warpSPHCore.autograd.hvp) instead")

    @staticmethod
    def forward(call, nx, *rest):
        xs, ts = rest[:nx], rest[nx:]
        leaves = [x.detach().requires_grad_(True) for x in xs]
        with torch.enable_grad():
            out = call(*leaves)
            outs = out if isinstance(out, tuple) else (out,)
            live = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
            seeds = [torch.zeros_like(o, requires_grad=True) for o in live]
            tangents = {id(o): None for o in outs}
            if live:
                grads = torch.autograd.grad(live, leaves, seeds, create_graph=True,
                                            allow_unused=True)
                terms = [(g * t).sum() for g, t in zip(grads, ts)
                         if g is not None and t is not None]
                if terms:
                    total = terms[0]
                    for term in terms[1:]:
                        total = total + term
                    jt = torch.autograd.grad(total, seeds, allow_unused=True)
                    tangents.update({id(o): t for o, t in zip(live, jt)})
        res = [tangents[id(o)].detach() if tangents[id(o)] is not None
               else torch.zeros_like(o) for o in outs]
        return tuple(res) if isinstance(out, tuple) else res[0]

    @staticmethod
    def backward(ctx, *grads):
        _FuncJVP.refuse(ctx)
