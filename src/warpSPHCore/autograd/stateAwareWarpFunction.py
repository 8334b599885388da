"""`StateAwareWarpFunction`: the torch.autograd bridge around one Warp launch
(design: docs/autograd.md).

``StateAwareWarpFunction.apply(jvp_fn, build_fn, launcher, kernel, output_shape,
output_dtype, *flat_tensors)``

The six leading arguments are non-tensors (`_N_NON_TENSOR`); backward returns six ``None``
before the per-position gradients and `jvp` drops the six leading tangents.

``flat_tensors``
    Heterogeneous: real ``torch.Tensor``s (float inputs, integer/bool structure tensors)
    and `Field` placeholders (`util.fieldRegistry.nullField`). Any other object is passed
    through to ``build_fn`` unchanged (and kept on the graph node when the call records a
    gradient).

``build_fn(warp_arrays, use_bundle=False[, side=views]) -> list``
    Receives ``warp_arrays``, a list parallel to ``flat_tensors``: the Warp view of each
    tensor (``getCachedWarpArray``), the permanent view of each Field, pass-through objects
    unchanged. Returns the kernel's positional argument list **before the outputs**
    (structs, arrays, scalars, in kernel-ABI order); the launcher appends the outputs.
    ``use_bundle=True`` allows persistent structs (`util.stateBundle`) and is passed only
    when nothing requires grad (a `wp.Tape` re-reads struct fields at backward time);
    otherwise every struct must be fresh and call-local.
    Optional ``build_fn.side``: a list of tensors the call needs but `apply` does not track
    (`wrapper._launchFlat`'s pruned inert tensors); the bridge passes their cached views as
    ``side=`` and, when the call records a gradient, saves them and sets
    ``build_fn.side = None``. The closure itself must hold no tensor: the graph node keeps
    it until backward.

``launcher(kernel, output_shape, output_dtype, *args, [requires_grad=, mode=, tape=])``
    `autograd.launcher.launch_kernel` or a wrapper of it (numThreads/lanes injected):
    returns the output tensor (or a tuple for a tuple ``output_dtype``), each carrying its
    Warp view in the courier attribute ``_warp_array``. Backward calls it again with
    ``mode="record", tape=tape`` (record the launch on the tape without running it) or
    ``mode="allocate"`` (outputs only, for a hand-written reverse kernel).

Reverse mode, what the graph node keeps: the forward pass never runs under a tape. A call
that needs a gradient saves its tensors (`save_for_backward`, each distinct object once)
and tensor-free metadata (`build_fn`, the launcher, the kernel, the output shapes, Fields);
backward rebuilds the views, the structs, fresh zero outputs and a tape from the saved
tensors and runs the tape's backward. Nothing else outlives the forward pass, so gradient
checkpointing frees what it recomputes (docs/autograd.md), with one exception outside
saved-tensor hooks: the forward-mode rule (``ctx.double_fn``) that a differentiable backward
(``create_graph=True``, `differentiableBackward`) evaluates; under hooks it is not kept.

``jvp_fn(ctx, flat_tangents) -> tangent | tuple``
    Optional forward-mode rule: ``flat_tangents`` is parallel to ``flat_tensors`` (``None``
    at Fields and integer positions; torch-synthesised zeros elsewhere). ``ctx.live_mask``
    is the list of per-position liveness booleans computed with a single readback;
    ``ctx.saved_tensors`` holds the real tensors of ``flat_tensors`` in order (their
    positions are ``ctx.tensor_positions``). Returns one tangent per forward output.

``build_fn.reverse``
    Optional `reverse.ReverseSpec`: when the call is eligible, the forward pass launches its
    paired forward kernel and backward records the hand-written reverse launch on the tape
    (``tape.record_func``); ``ctx.reverse_route`` names the reverse kernel (None: Warp's
    generated adjoint).

Gates (`util.gates`: read once at import, `refreshGates()` re-reads):
``WARPSPHCORE_FIELD_CACHE_GRAD`` (default on; "0" rebuilds grad-path views every call),
``WARPSPHCORE_DISABLE_FIELD_CACHE`` (in `acquireView`), ``WARPSPHCORE_DISABLE_BUNDLE`` (in
`util.stateBundle`), ``WARPSPHCORE_DISABLE_REVERSE_KERNELS`` (in `reverse`; "1" keeps every
call on the tape path).
"""

from __future__ import annotations

import types

import torch
import torch.autograd.forward_ad as fwAD
import warp as wp

from ..util.errorFlags import checkErrors, eagerErrorChecks, pendingErrorBuffer, reportErrorValues
from ..util.fieldRegistry import Field
from ..util.gates import gate
from ..util.launchCapture import activeCapture
from ..util.profiling import recordFunction
from ..util.stateBundle import bundleDisabled
from .cache import getCachedWarpArray
from .launcher import COURIER, castTorchToWarp, outputIsFloat, torchStreamAsWarp
from .reverse import recordReverse, reverseKernelsEnabled
from .specialize import specializationEnabled, specializedKernel, tapedKernel

__all__ = ["StateAwareWarpFunction", "bridgeApply", "hasLiveTangent", "fieldCacheGradEnabled",
           "_liveTangentMask", "_N_NON_TENSOR"]

_N_NON_TENSOR = 6


def fieldCacheGradEnabled() -> bool:
    """Gate ``WARPSPHCORE_FIELD_CACHE_GRAD`` (default on; "0" disables; `util.gates`)."""
    return gate("WARPSPHCORE_FIELD_CACHE_GRAD") != "0"


class _StreamScope:
    """Make torch's current stream Warp's current stream for `device` (CUDA only), so the
    tape's adjoint launches, seed copies and ``zero_()`` memsets follow torch."""

    __slots__ = ("_scope",)

    def __init__(self, device):
        stream = torchStreamAsWarp(device) if device is not None else None
        self._scope = (wp.ScopedStream(stream, sync_enter=False, sync_exit=False)
                       if stream is not None else None)

    def __enter__(self):
        if self._scope is not None:
            self._scope.__enter__()

    def __exit__(self, *exc):
        if self._scope is not None:
            return self._scope.__exit__(*exc)
        return False


def _gradTensor(wa: wp.array) -> torch.Tensor:
    """The torch tensor behind a view's (torch-allocated) gradient buffer."""
    g = wa.grad
    t = getattr(g, "_tensor", None)
    return t if t is not None else wp.to_torch(g, requires_grad=False)


def _activeWarpTape():
    """The wp.Tape currently recording (None when none is, or when Warp's runtime is not
    initialised); entering a second tape would raise an anonymous Warp RuntimeError."""
    runtime = getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)
    return getattr(runtime, "tape", None)


def _untaped(build_fn, kernel, reverse=None):
    """The kernel of a launch that no tape records: the operator's specialised kernel for
    this call's configuration when it declares one (`autograd.specialize`), else `kernel`.
    With `reverse` (the `ReverseSpec` that will differentiate the call), its
    ``pairedForward`` kernel first (compiled with the reverse kernel)."""
    config = getattr(build_fn, "config", None)
    if config is None:
        return kernel
    paired = getattr(reverse, "pairedForward", None)
    if paired is not None and specializationEnabled():
        found = paired(config)
        if found is not None:
            return found
    return specializedKernel(getattr(build_fn, "specialize", None), config, kernel)


def _tapedForward(build_fn, kernel):
    """(the kernel the forward pass of a taped call launches, the kernel backward records on
    its tape): the operator's specialised forward kernel when it covers the call (faster, and
    the values of the same call without grad), else the taped kernel itself (no second
    module to compile); the tape always records the taped kernel, whose adjoint it runs."""
    config = getattr(build_fn, "config", None)
    if config is None:
        return kernel, kernel
    taped = tapedKernel(config, kernel)
    factory = getattr(build_fn, "specialize", None)
    if factory is not None and specializationEnabled():
        fast = factory(config)
        if fast is not None:
            return fast, taped
    return taped, taped


def _kernelName(kernel) -> str:
    return str(getattr(kernel, "key", None) or getattr(kernel, "__name__", None) or kernel)


def _isCandidate(t) -> bool:
    return isinstance(t, torch.Tensor) and t.numel() > 0


def _liveTangentMask(tangents) -> list:
    """Per-position liveness (``abs().amax() != 0``) with at most one device->host readback.

    ``None`` and empty tangents are inactive; with no candidate there is no readback. NaN
    tangents count as live (they must propagate).
    """
    idx = [k for k, t in enumerate(tangents) if _isCandidate(t)]
    mask = [False] * len(tangents)
    if not idx:
        return mask
    device = tangents[idx[0]].device
    errors = pendingErrorBuffer(device)
    with torch.no_grad():
        flags = torch.stack([(tangents[k].detach().abs().amax() != 0).to(torch.int64)
                             for k in idx])
        if errors is not None:  # earlier kernels' skipped indices ride along
            flags = torch.cat([flags, errors])
        values = flags.tolist()  # the one host readback of a dual call
    if errors is not None:
        reportErrorValues(values[len(idx):], device)
    for k, v in zip(idx, values):
        mask[k] = bool(v)
    return mask


def hasLiveTangent(t) -> bool:
    """Single-tensor form of `_liveTangentMask` (None/empty: False; else one readback).

    Args:
        t: a tangent tensor or None.
    """
    if not _isCandidate(t):
        return False
    return _liveTangentMask([t])[0]


def _views(flat, isTensor, needsGrad, useCache: bool, zero: bool) -> list:
    """The Warp arguments of a call's flat list: one view per tensor object (cached or not:
    an aliased tensor, the same object in two roles, then has one gradient buffer that
    backward reports once, so the cache gates cannot change the summation order of its
    gradient), a `Field`'s permanent view, any other object unchanged. With `zero`, every
    gradient buffer is zeroed (zero-on-acquire, at the point of use: backward)."""
    arrays, seen = [], {}
    for t, it, rg in zip(flat, isTensor, needsGrad):
        if it:
            wa = seen.get(id(t))
            if wa is None:
                wa = getCachedWarpArray(t, use_cache=useCache, requires_grad=rg)
                if rg and zero:
                    _gradTensor(wa).zero_()  # torch op: torch's current stream
                seen[id(t)] = wa
            arrays.append(wa)
        elif isinstance(t, Field):
            arrays.append(t.array)
        else:
            arrays.append(t)
    return arrays


def _distinct(tensors):
    """(the distinct tensor objects of `tensors` in first-seen order, the index of each entry
    among them): a tensor in several roles is saved once, and unpacks as one object."""
    unique, index, where = [], [], {}
    for t in tensors:
        k = where.get(id(t))
        if k is None:
            k = where[id(t)] = len(unique)
            unique.append(t)
        index.append(k)
    return unique, tuple(index)


def _build(build_fn, warpArrays, sideViews, useBundle: bool):
    """``build_fn``'s kernel arguments; the views of its side tensors passed when it has
    any (`_launchFlat`'s pruned inert tensors)."""
    if sideViews:
        return build_fn(warpArrays, use_bundle=useBundle, side=sideViews)
    return build_fn(warpArrays, use_bundle=useBundle)


class StateAwareWarpFunction(torch.autograd.Function):
    """Forward, backward and forward-mode rule of one bridged Warp launch (module docstring)."""

    @staticmethod
    def forward(ctx, jvp_fn, build_fn, launcher, kernel, output_shape, output_dtype,
                *flat_tensors):
        # 1. inspect
        isTensor = [isinstance(t, torch.Tensor) for t in flat_tensors]
        needsGrad = [
            bool(it and t.requires_grad and t.is_floating_point())
            for it, t in zip(isTensor, flat_tensors)
        ]
        anyRG = any(needsGrad)
        real = [t for it, t in zip(isTensor, flat_tensors) if it]
        side = list(getattr(build_fn, "side", None) or ())
        ctx.tensor_positions = tuple(k for k, it in enumerate(isTensor) if it)

        # 2. save: every tensor backward rebuilds the launch from, the side tensors (inert
        #    inputs the caller converts itself, `build_fn.side`) included, so that nothing
        #    but saved tensors outlives the forward (checkpointing can then free them); kinds
        #    included: in-place changes before backward trip the version check
        if anyRG:
            unique, ctx.saved_index = _distinct(real + side)
            ctx.save_for_backward(*unique)
        if jvp_fn is not None:
            ctx.save_for_forward(*real)

        # 3. convert
        useCache = (not anyRG) or fieldCacheGradEnabled()
        with recordFunction("warpSPHCore::bridge::convert"):
            warpArrays = _views(flat_tensors, isTensor, needsGrad, useCache, zero=False)
            sideViews = [getCachedWarpArray(t, use_cache=True) for t in side]

        # 4. build (persistent structs only without grad: a tape re-reads struct fields at
        #    backward time; a call being captured into a call plan gets structs of its own,
        #    which the plan keeps)
        useBundle = (not anyRG) and not bundleDisabled() and activeCapture() is None
        with recordFunction("warpSPHCore::bridge::build"):
            args = _build(build_fn, warpArrays, sideViews, useBundle)

        # 5. launch, never under a tape: a call that needs a gradient records its tape in
        #    backward, from the saved tensors; its forward runs the specialised kernel where
        #    one covers the call (`_tapedForward`), else the taped kernel, and a call
        #    eligible for the operator's hand-written reverse kernel its paired forward
        reverse = getattr(build_fn, "reverse", None)
        with recordFunction("warpSPHCore::bridge::launch"):
            if anyRG:
                if _activeWarpTape() is not None:
                    raise NotImplementedError(
                        f"{_kernelName(kernel)}: called inside an active wp.Tape while a "
                        "tensor requires grad; the Warp bridge records its own tape. Call "
                        "warpSPHCore operators outside `with wp.Tape():` and differentiate "
                        "with torch.autograd")
                if reverse is not None and not (reverseKernelsEnabled() and
                                                reverse.eligible(build_fn.config, args)):
                    reverse = None
                if reverse is not None:
                    launched = recorded = _untaped(build_fn, kernel, reverse)
                else:
                    launched, recorded = _tapedForward(build_fn, kernel)
                result = launcher(launched, output_shape, output_dtype, *args)
            else:
                reverse = None
                recorded = None
                result = launcher(_untaped(build_fn, kernel), output_shape, output_dtype, *args)

        multi = isinstance(result, (tuple, list))
        outs = tuple(result) if multi else (result,)
        for o in outs:
            if o.__dict__.pop(COURIER, None) is None:  # break the tensor <-> view cycle
                raise RuntimeError(
                    f"StateAwareWarpFunction: the launcher of kernel {_kernelName(kernel)} "
                    f"returned an output without its recorded Warp view ({COURIER!r})"
                )

        # what backward needs besides the saved tensors: no Warp view, tape or tensor
        ctx.reverse = reverse
        ctx.reverse_route = _kernelName(reverse.kernel) if reverse is not None else None
        ctx.any_requires_grad = anyRG
        if anyRG:
            ctx.build_fn = build_fn
            ctx.launcher = launcher
            ctx.taped_kernel = recorded
            ctx.output_shape, ctx.output_dtype = output_shape, output_dtype
            ctx.side_count = len(side)
            # Fields and pass-through objects (no tensors of the call's own)
            ctx.others = tuple(None if it else t for t, it in zip(flat_tensors, isTensor))
        if side:
            build_fn.side = None  # the saved copies are the only references kept
        ctx.needs_grad = tuple(needsGrad)
        ctx.input_shapes = tuple(t.shape if it else None for t, it in zip(flat_tensors, isTensor))
        ctx.kernel_name = _kernelName(kernel)
        ctx.jvp_fn = jvp_fn
        # the forward-mode rule, kept (beside the saved tensors, which it reads as the same
        # objects) for a differentiable backward; not under saved-tensor hooks (gradient
        # checkpointing), whose point is that nothing but what they pack outlives forward
        ctx.double_fn = None
        ctx.double_reason = None
        ctx.reported = None
        if anyRG:
            if jvp_fn is None:
                ctx.double_reason = (
                    "the launch has no forward-mode rule of its own (a forward-mode or "
                    "derivative kernel: differentiating its backward would take a third "
                    "derivative of the operator). torch.autograd.functional.hvp/jvp take that "
                    "route (the double-backward trick); for a Hessian-vector product "
                    "differentiate a gradient taken with create_graph=True (reverse over "
                    "reverse, torch.autograd.functional.vhp), use warpSPHCore.autograd.hvp "
                    "(reverse over forward) or warpOperationHVP (Density)")
            elif _savedTensorHooksActive():
                ctx.double_reason = ("it was recorded under saved-tensor hooks (gradient "
                                     "checkpointing, save_on_cpu); run the segment without "
                                     "checkpointing to differentiate its gradient")
            elif getattr(jvp_fn, "rebind", None) is None:
                ctx.double_reason = ("its forward-mode rule cannot be re-evaluated on the saved "
                                     "inputs (no rebind)")
            else:
                ctx.double_fn = jvp_fn
        ctx.multi_output = multi
        ctx.output_meta = tuple(
            (tuple(o.shape), o.dtype, o.device, o.is_floating_point()) for o in outs
        )
        for o in outs:
            if not o.is_floating_point():
                ctx.mark_non_differentiable(o)
        if eagerErrorChecks():  # debugging aid: one readback per launch
            checkErrors(outs[0].device)
        return tuple(outs) if multi else outs[0]

    @staticmethod
    def backward(ctx, *grad_outputs):
        nIn = len(ctx.needs_grad)
        if not ctx.any_requires_grad:
            return (None,) * (_N_NON_TENSOR + nIn)
        for g in grad_outputs:
            if isinstance(g, torch.Tensor) and fwAD.unpack_dual(g).tangent is not None:
                raise NotImplementedError(
                    f"{ctx.kernel_name}: forward-over-reverse (a dual grad_output entering a "
                    "Warp backward) is not supported; use reverse-over-forward (differentiate "
                    "the forward-mode tangent with torch.autograd.grad)"
                )
        unique = ctx.saved_tensors  # torch's in-place version check (and checkpoint's unpack)
        if torch.is_grad_enabled():  # create_graph=True: a backward that is differentiable
            return (None,) * _N_NON_TENSOR + differentiableBackward(ctx, unique, grad_outputs)
        return (None,) * _N_NON_TENSOR + _firstOrderGrads(ctx, unique, grad_outputs)

    @staticmethod
    def jvp(ctx, *tangents):
        flat = tuple(tangents[_N_NON_TENSOR:])
        meta = ctx.output_meta

        def zeros():
            z = tuple(
                torch.zeros(shape, dtype=dtype, device=device) if isFloat else None
                for shape, dtype, device, isFloat in meta
            )
            return z if ctx.multi_output else z[0]

        # empty outputs: shape-correct zero tangents, no readback (and no amax of an empty
        # tangent, which would raise)
        if all(_numel(m[0]) == 0 for m in meta):
            return zeros()
        mask = _liveTangentMask(flat)
        if not any(mask):
            return zeros()
        if ctx.jvp_fn is None:
            live = [k for k, v in enumerate(mask) if v]
            raise NotImplementedError(
                f"{ctx.kernel_name}: a live forward-mode tangent reached this Warp launch "
                f"(flat positions {live}) but no JVP rule is registered for it"
            )
        ctx.live_mask = mask
        out = ctx.jvp_fn(ctx, flat)
        if not ctx.multi_output and isinstance(out, (tuple, list)):
            if len(out) != 1:
                raise RuntimeError(
                    f"{ctx.kernel_name}: jvp_fn returned {len(out)} tangents for 1 output"
                )
            out = out[0]
        elif ctx.multi_output:
            out = tuple(out)
            if len(out) != len(meta):
                raise RuntimeError(
                    f"{ctx.kernel_name}: jvp_fn returned {len(out)} tangents for "
                    f"{len(meta)} outputs"
                )
        return out


def _firstOrderGrads(ctx, unique, grad_outputs) -> tuple:
    """The gradients of one bridged launch (one per forward position, None where none is
    reported) for the cotangents `grad_outputs`, from the saved tensors `unique`: the views,
    structs and outputs rebuilt, the tape (or the hand-written reverse kernel) run once."""
    nIn = len(ctx.needs_grad)
    flat = _flatOf(ctx, unique)
    saved = [unique[k] for k in ctx.saved_index]
    side = saved[len(saved) - ctx.side_count:]
    isTensor = [isinstance(t, torch.Tensor) for t in flat]
    device = wp.device_from_torch(ctx.output_meta[0][2]) if ctx.output_meta else None
    with _StreamScope(device):
        # 1. the call's views (zero-on-acquire), structs and outputs, rebuilt
        warpArrays = _views(flat, isTensor, ctx.needs_grad, fieldCacheGradEnabled(),
                            zero=True)
        sideViews = [getCachedWarpArray(t, use_cache=True) for t in side]
        args = _build(ctx.build_fn, warpArrays, sideViews, False)
        # 2. the tape: the reverse kernel's launch, or the primal launch recorded (not
        #    run) into fresh zero outputs that own their adjoint buffers (never the caller's
        #    grad_output, which the tape would consume and zero)
        tape = wp.Tape()
        reverse = ctx.reverse
        if reverse is not None:
            result = ctx.launcher(ctx.taped_kernel, ctx.output_shape, ctx.output_dtype,
                                  *args, requires_grad=True, mode="allocate")
        else:
            result = ctx.launcher(ctx.taped_kernel, ctx.output_shape, ctx.output_dtype,
                                  *args, requires_grad=True, mode="record", tape=tape)
        outs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        views = []
        for o in outs:
            v = o.__dict__.pop(COURIER)
            if outputIsFloat(v.dtype) and v.grad is None:
                v.grad = castTorchToWarp(torch.zeros_like(o), v.dtype)
            views.append(v)
        if reverse is not None:
            recordReverse(tape, reverse, ctx.build_fn.config, args, views, warpArrays)

        # 3. seeds, copied into the outputs' own adjoint buffers by the tape (never assigned
        #    as ``array.grad``)
        seeds = {}
        for view, g, meta in zip(views, grad_outputs, ctx.output_meta):
            if g is None or not meta[3] or g.numel() == 0:
                continue
            seeds[view] = castTorchToWarp(g, view.dtype)
        tape.backward(grads=seeds)

        grads = []
        seen = set()
        for pos in range(nIn):
            if not ctx.needs_grad[pos]:
                grads.append(None)
                continue
            wa = warpArrays[pos]
            if id(wa) in seen:
                grads.append(None)  # aliased role: already reported in full (twice would double it)
                continue
            seen.add(id(wa))
            # cloned: tape.zero() below clears the buffer
            grads.append(_gradTensor(wa).clone().view(ctx.input_shapes[pos]))
        tape.zero()
    if eagerErrorChecks() and ctx.output_meta:
        checkErrors(ctx.output_meta[0][2])
    return tuple(grads)


def _savedTensorHooksActive() -> bool:
    """True while saved-tensor hooks are installed (gradient checkpointing, ``save_on_cpu``,
    a user's ``saved_tensors_hooks``): the saved tensors backward receives are then not the
    objects the forward saw."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def _flatOf(ctx, unique) -> list:
    """The forward's flat argument list rebuilt from the saved tensors `unique`."""
    saved = [unique[k] for k in ctx.saved_index]
    real = saved[:len(saved) - ctx.side_count]
    flat = list(ctx.others)
    for pos, t in zip(ctx.tensor_positions, real):
        flat[pos] = t
    return flat


def differentiableBackward(ctx, unique, grad_outputs) -> tuple:
    """The backward of one bridged launch as a differentiable function of its inputs and of
    the cotangents (``create_graph=True``): the gradients the first-order route computes,
    recorded as `_BackwardOfBackward`, whose own backward is the operator's forward-mode rule
    (the cotangents' adjoint is J c) and reverse mode through that rule (the inputs' adjoint
    is grad_x <u, J(x) c>). Returns one entry per forward position, as `_firstOrderGrads`."""
    if ctx.double_fn is None:
        raise NotImplementedError(
            f"{ctx.kernel_name}: double backward (differentiating this launch's backward, "
            f"create_graph=True) is not available for this call: {ctx.double_reason}")
    floatOut = [k for k, m in enumerate(ctx.output_meta) if m[3]]
    seeds = []
    for k in floatOut:
        g = grad_outputs[k]
        shape, dtype, device, _ = ctx.output_meta[k]
        seeds.append(g if g is not None else torch.zeros(shape, dtype=dtype, device=device))
    outs = _BackwardOfBackward.apply(ctx, tuple(floatOut), len(seeds), *seeds, *unique)
    outs = outs if isinstance(outs, tuple) else (outs,)
    it = iter(outs)
    return tuple(next(it) if r else None for r in ctx.reported)


class _BackwardOfBackward(torch.autograd.Function):
    """The first-order backward of one bridged launch (node `ctx` of
    `StateAwareWarpFunction`) as a differentiable function of the cotangents u and the saved
    inputs x: forward runs `_firstOrderGrads` (g = J(x)^T u, the Warp kernels); backward,
    for the cotangents c of g, returns J(x) c for u (the operator's forward-mode rule) and
    grad_x <u, J(x) c> for x (reverse mode through that rule: <c, J^T u> = <u, J c>)."""

    @staticmethod
    def forward(bctx, node, floatOut, nSeeds, *tensors):
        seeds, unique = tensors[:nSeeds], tensors[nSeeds:]
        grads = [None] * len(node.output_meta)
        for k, g in zip(floatOut, seeds):
            grads[k] = g
        first = _firstOrderGrads(node, unique, grads)
        node.reported = tuple(g is not None for g in first)
        bctx.node = node
        bctx.float_out = floatOut
        bctx.n_seeds = nSeeds
        bctx.save_for_backward(*tensors)
        return tuple(g for g in first if g is not None)

    @staticmethod
    def backward(bctx, *cotangents):
        node = bctx.node
        create = torch.is_grad_enabled()
        tensors = bctx.saved_tensors
        nSeeds = bctx.n_seeds
        seeds, unique = tensors[:nSeeds], tensors[nSeeds:]
        flat = _flatOf(node, unique)
        nIn = len(flat)
        # the tangent of every differentiated position: the cotangent of the gradient that
        # reports it, or (an aliased role, reported in full at an earlier position) that of
        # the earlier position holding the same tensor
        cot = iter(cotangents)
        tangents = [None] * nIn
        for pos in range(nIn):
            if node.reported[pos]:
                tangents[pos] = next(cot)
        for pos in range(nIn):
            if node.needs_grad[pos] and not node.reported[pos]:
                for q in range(pos):
                    if node.reported[q] and flat[q] is flat[pos]:
                        tangents[pos] = tangents[q]
                        break
        mask = [t is not None for t in tangents]
        live = types.SimpleNamespace(live_mask=list(mask))
        xs = [t for t in unique if isinstance(t, torch.Tensor) and t.requires_grad
              and t.is_floating_point()]
        gx = [None] * len(xs)
        jc = [None] * len(seeds)
        if any(mask):
            with torch.enable_grad():
                # the rule evaluated on aliases of the inputs: the gradient is taken at the
                # aliases, so it never runs back through the inputs' own history (nor through
                # the cotangents', which depend on the inputs too), and stays connected to
                # the inputs for a third derivative
                aliases = {id(t): t.view_as(t) for t in xs}
                try:
                    out = node.double_fn.rebind(aliases)(live, tangents)
                except NotImplementedError as e:  # the forward-mode rule's scope is the limit
                    raise NotImplementedError(
                        f"{node.kernel_name}: double backward (create_graph=True) goes through "
                        f"the operator's forward-mode rule, which does not cover this call: {e}"
                    ) from e
                outs = out if isinstance(out, (tuple, list)) else (out,)
                jc = [outs[k] if k < len(outs) else None for k in bctx.float_out]
                terms = [(u * t).sum() for u, t in zip(seeds, jc) if t is not None]
                inputs = [aliases[id(t)] for t in xs]
                if terms and inputs:
                    total = terms[0]
                    for term in terms[1:]:
                        total = total + term
                    if total.requires_grad:
                        gx = list(torch.autograd.grad(total, inputs, allow_unused=True,
                                                      create_graph=create))
        byId = {id(t): g for t, g in zip(xs, gx)}
        gSeeds = [None if t is None else (t if create else t.detach()) for t in jc]
        gUnique = [byId.get(id(t)) if isinstance(t, torch.Tensor) else None for t in unique]
        if not create:
            gUnique = [g.detach() if g is not None else None for g in gUnique]
        return (None, None, None) + tuple(gSeeds) + tuple(gUnique)


def bridgeApply(jvp_fn, build_fn, launcher, kernel, output_shape, output_dtype, *flat_tensors):
    """``StateAwareWarpFunction.apply`` with the same arguments, then the forward-mode rule
    dropped from the graph node: torch runs `jvp` inside ``apply`` or never, and the rule's
    closure holds the caller's state (tensors that backward does not need, and that gradient
    checkpointing must be able to free)."""
    out = StateAwareWarpFunction.apply(jvp_fn, build_fn, launcher, kernel, output_shape,
                                       output_dtype, *flat_tensors)
    if jvp_fn is not None:
        for o in (out if isinstance(out, tuple) else (out,)):
            node = o.grad_fn
            if node is not None:
                node.jvp_fn = None
                break
    return out


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
