"""`StateAwareWarpFunction`: the torch.autograd bridge around one Warp launch
(`autodiff.md` §6; pitfalls W19-W26, W37-W39, W64, W75-W77, W82).

``StateAwareWarpFunction.apply(jvp_fn, build_fn, launcher, kernel, output_shape,
output_dtype, *flat_tensors)``

The six leading arguments are non-tensors (`_N_NON_TENSOR`); backward returns six ``None``
before the per-position gradients and `jvp` drops the six leading tangents.

``flat_tensors``
    Heterogeneous: real ``torch.Tensor``s (float inputs, integer/bool structure tensors)
    and `Field` placeholders (`util.fieldRegistry.nullField`). Any other object (e.g. a
    prebuilt ``wp.array`` of a pruned inert tensor) is passed through to ``build_fn``
    unchanged.

``build_fn(warp_arrays, use_bundle=False) -> list``
    Receives ``warp_arrays``, a list parallel to ``flat_tensors``: the Warp view of each
    tensor (``getCachedWarpArray``), the permanent view of each Field, pass-through objects
    unchanged. Returns the kernel's positional argument list **before the outputs**
    (structs, arrays, scalars, in kernel-ABI order); the launcher appends the outputs.
    ``use_bundle=True`` allows persistent structs (`util.stateBundle`) and is passed only
    when nothing requires grad (W25); otherwise every struct must be fresh and call-local.

``launcher(kernel, output_shape, output_dtype, *args)``
    `autograd.launcher.launch_kernel` or a wrapper of it (numThreads/lanes injected):
    returns the output tensor (or a tuple for a tuple ``output_dtype``), each carrying its
    recorded Warp view in the courier attribute ``_warp_array``.

``jvp_fn(ctx, flat_tangents) -> tangent | tuple``
    Optional forward-mode rule: ``flat_tangents`` is parallel to ``flat_tensors`` (``None``
    at Fields and integer positions; torch-synthesised zeros elsewhere). ``ctx.live_mask``
    is the list of per-position liveness booleans computed with a single readback;
    ``ctx.saved_tensors`` holds the real tensors of ``flat_tensors`` in order (their
    positions are ``ctx.tensor_positions``). Returns one tangent per forward output.

``build_fn.reverse``
    Optional `reverse.ReverseSpec`: when the call is eligible, the launch runs outside the
    tape and the hand-written reverse launch is recorded on it (``tape.record_func``);
    ``ctx.reverse_route`` names the reverse kernel (None: Warp's generated adjoint).

Gates (`util.gates`: read once at import, `refreshGates()` re-reads): ``WARPSPHCORE_FIELD_CACHE_GRAD`` (default on; "0" rebuilds
grad-path views every call), ``WARPSPHCORE_DISABLE_FIELD_CACHE`` (in `acquireView`),
``WARPSPHCORE_DISABLE_BUNDLE`` (in `util.stateBundle`), ``WARPSPHCORE_DISABLE_REVERSE_KERNELS``
(in `reverse`; "1" keeps every call on the tape path).
"""

from __future__ import annotations

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

__all__ = ["StateAwareWarpFunction", "hasLiveTangent", "fieldCacheGradEnabled",
           "_liveTangentMask", "_N_NON_TENSOR"]

_N_NON_TENSOR = 6


def fieldCacheGradEnabled() -> bool:
    """Gate ``WARPSPHCORE_FIELD_CACHE_GRAD`` (default on; "0" disables; `util.gates`)."""
    return gate("WARPSPHCORE_FIELD_CACHE_GRAD") != "0"


class _StreamScope:
    """Make torch's current stream Warp's current stream for `device` (CUDA only), so the
    tape's adjoint launches, seed copies and ``zero_()`` memsets follow torch (§16)."""

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
        values = flags.tolist()  # the one readback of the call (§6.4, §15)
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
        ctx.tensor_positions = tuple(k for k, it in enumerate(isTensor) if it)

        # 2. save (kinds included: in-place changes before backward trip the version check)
        if anyRG:
            ctx.save_for_backward(*real)
        if jvp_fn is not None:
            ctx.save_for_forward(*real)

        # 3. convert (zero-on-acquire for every grad view)
        useCache = (not anyRG) or fieldCacheGradEnabled()
        warpArrays = []
        # one view per tensor object within the call, cached or not: an aliased tensor (the
        # same object in two roles) then has one gradient buffer that backward reports once,
        # so the cache gates cannot change the summation order of its gradient (bitwise
        # identical results with the caches disabled)
        views = {}
        with recordFunction("warpSPHCore::bridge::convert"):
            for t, it, rg in zip(flat_tensors, isTensor, needsGrad):
                if it:
                    wa = views.get(id(t))
                    if wa is None:
                        wa = getCachedWarpArray(t, use_cache=useCache, requires_grad=rg)
                        if rg:
                            _gradTensor(wa).zero_()  # torch op: torch's current stream
                        views[id(t)] = wa
                    warpArrays.append(wa)
                elif isinstance(t, Field):
                    warpArrays.append(t.array)
                else:
                    warpArrays.append(t)

        # 4. build (persistent structs only without grad, W25; a call being captured into a
        #    call plan gets structs of its own, which the plan keeps)
        useBundle = (not anyRG) and not bundleDisabled() and activeCapture() is None
        with recordFunction("warpSPHCore::bridge::build"):
            args = build_fn(warpArrays, use_bundle=useBundle)

        # 5. launch (under a fresh tape only when something requires grad; a call eligible
        #    for the operator's hand-written reverse kernel is launched outside the tape and
        #    its reverse launch recorded on it below)
        reverse = getattr(build_fn, "reverse", None)
        with recordFunction("warpSPHCore::bridge::launch"):
            if anyRG:
                if _activeWarpTape() is not None:
                    raise NotImplementedError(
                        f"{_kernelName(kernel)}: called inside an active wp.Tape while a "
                        "tensor requires grad; the Warp bridge records its own tape. Call "
                        "warpSPHCore operators outside `with wp.Tape():` and differentiate "
                        "with torch.autograd")
                tape = wp.Tape()
                if reverse is not None and not (reverseKernelsEnabled() and
                                                reverse.eligible(build_fn.config, args)):
                    reverse = None
                if reverse is not None:
                    result = launcher(_untaped(build_fn, kernel, reverse), output_shape,
                                      output_dtype, *args)
                else:
                    taped = kernel
                    config = getattr(build_fn, "config", None)
                    if config is not None:
                        taped = tapedKernel(config, kernel)
                    with tape:
                        result = launcher(taped, output_shape, output_dtype, *args)
            else:
                reverse = None
                tape = None
                result = launcher(_untaped(build_fn, kernel), output_shape, output_dtype, *args)

        multi = isinstance(result, (tuple, list))
        outs = tuple(result) if multi else (result,)
        views = []
        for o in outs:
            v = o.__dict__.pop(COURIER, None)  # break the tensor <-> wp.array cycle (W26)
            if v is None:
                raise RuntimeError(
                    f"StateAwareWarpFunction: the launcher of kernel {_kernelName(kernel)} "
                    f"returned an output without its recorded Warp view ({COURIER!r})"
                )
            if anyRG and outputIsFloat(v.dtype) and v.grad is None:
                # the output must own its adjoint buffer, never alias grad_output (W24, W62)
                v.grad = castTorchToWarp(torch.zeros_like(o.detach()), v.dtype)
            views.append(v)

        if reverse is not None:
            recordReverse(tape, reverse, build_fn.config, args, views, warpArrays)
        ctx.reverse_route = _kernelName(reverse.kernel) if reverse is not None else None
        ctx.output_warp = tuple(views)
        ctx.tape = tape
        ctx.any_requires_grad = anyRG
        ctx.needs_grad = tuple(needsGrad)
        ctx.input_warp = tuple(warpArrays) if anyRG else None
        ctx.input_shapes = tuple(t.shape if it else None for t, it in zip(flat_tensors, isTensor))
        ctx.kernel_name = _kernelName(kernel)
        ctx.jvp_fn = jvp_fn
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
        if torch.is_grad_enabled():
            raise NotImplementedError(
                f"{ctx.kernel_name}: double backward (create_graph=True, and hence "
                "torch.autograd.functional.jvp/hvp) through a Warp launch is not supported; "
                "use torch.autograd.forward_ad for JVPs and reverse-over-forward "
                "(warpSPHCore.autograd.hvp) for Hessian-vector products"
            )
        ctx.saved_tensors  # noqa: B018 (torch's in-place version check)

        tape = ctx.tape
        device = ctx.output_warp[0].device if ctx.output_warp else None
        with _StreamScope(device):
            seeds = {}
            for view, g, meta in zip(ctx.output_warp, grad_outputs, ctx.output_meta):
                if g is None or not meta[3] or g.numel() == 0:
                    continue
                # copied into the output's own adjoint buffer by the tape, never installed
                # as the buffer itself (W24)
                seeds[view] = castTorchToWarp(g, view.dtype)
            tape.backward(grads=seeds)

            grads = []
            seen = set()
            for pos in range(nIn):
                if not ctx.needs_grad[pos]:
                    grads.append(None)
                    continue
                wa = ctx.input_warp[pos]
                if id(wa) in seen:
                    grads.append(None)  # aliased role: already reported in full (W20)
                    continue
                seen.add(id(wa))
                grads.append(_gradTensor(wa).clone().view(ctx.input_shapes[pos]))  # W23
            tape.zero()
        if eagerErrorChecks() and ctx.output_meta:
            checkErrors(ctx.output_meta[0][2])
        return (None,) * _N_NON_TENSOR + tuple(grads)

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

        # empty outputs: shape-correct zero tangents, no readback (§6.4, W64)
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


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n
