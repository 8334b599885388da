"""The shared launch engine `_launch`, the positional shim `warpWrapper2` and `asScalarArg`.

`_launch` extracts the 36-slot state (`extractStateInfo`), appends the TENSOR extras from slot
36 on, keeps SCALAR extras by position, prunes inert tensors (no forward tangent and no
``requires_grad``) out of the tracked list, and calls
``StateAwareWarpFunction.apply(jvp_fn, build_fn, launcher, kernel, shape, dtype, *tracked)``.
Pruned tensors travel as ``build_fn.side``: the bridge converts them to their cached views,
merges them back through ``build_fn(..., side=views)`` and saves them for backward when the
call records a gradient; the kinds slots 8 and 9 are never pruned from a call that has any
grad-requiring or dual input (they are saved, so that torch's version check catches an
in-place change of the kinds before backward).
"""

from __future__ import annotations

import functools

import torch
import torch.autograd.forward_ad as fwAD
import warp as wp

from ..util.errorFlags import siteId
from ..util.fieldRegistry import Field
from ..util.precision import warpScalar
from .arg_extract import _QK, _RK, extractStateInfo
from .launcher import launch_kernel
from .stateAwareWarpFunction import bridgeApply

__all__ = ["_launch", "launchState", "_launchFlat", "_isInertTensor", "warpWrapper2", "asScalarArg"]

_TENSOR, _SCALAR = 0, 1  # ExtraKind values (operator_spec imports this module)
_NEVER_PRUNED_WHEN_TRACKING = (_QK, _RK)
_TENSOR_SLOT = object()  # a TENSOR extra's place among the SCALAR values of `build_fn`


def _isInertTensor(t) -> bool:
    """True iff `t` is a real tensor with no forward tangent now and no ``requires_grad``
    (metadata only: no device sync)."""
    if not isinstance(t, torch.Tensor):
        return False
    if t.requires_grad:
        return False
    return fwAD.unpack_dual(t).tangent is None


def asScalarArg(value, device=None, dtype=None) -> torch.Tensor:
    """A Python number or one-element tensor as a shape-(1,) tensor, so that a
    differentiable scalar travels as a TENSOR extra (read in the kernel as ``param[0]``).

    Args:
        value: float/int or a tensor with one element (its graph is kept).
        device: target device (default: the tensor's, else cpu).
        dtype: target float dtype (default: the tensor's, else torch.float64).
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"asScalarArg: expected one element, got shape {tuple(value.shape)}")
        t = value.reshape(1)
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        if device is not None and t.device != torch.device(device):
            t = t.to(device)
        return t
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"asScalarArg: value has type {type(value).__name__}; accepted: a "
                        "number or a one-element tensor")
    return torch.tensor([float(value)], dtype=dtype or torch.float64,
                        device=device if device is not None else "cpu")


def _castScalar(value, scalar):
    """SCALAR extras in the call's precision (`wp.launch` infers a Python float as float32)."""
    if isinstance(value, bool):
        return wp.bool(value)
    if isinstance(value, int):
        return wp.int32(value)
    if isinstance(value, float):
        return scalar(value)
    return value


def _launch(kernel, stateTuple, additionalArguments=(), outputShape=None, outputDtype=None,
            numThreads=None, jvp_fn=None, extraKinds=None, lanes=None, reverse=None,
            specialize=None):
    """Run one operator launch through the bridge from the legacy 10-slot ``stateTuple``
    ``(query, properties, domain, qVol, rVol, adjacency, reference, crk, gradH, renorm)``
    (None-padded); the other arguments as for `launchState`."""
    (query, properties, domain, qVol, rVol, adjacency, reference, crk, gradH,
     renorm) = stateTuple
    return launchState(kernel, query, properties, domain, qVol, rVol, adjacency, reference, crk,
                       gradH, renorm, additionalArguments, outputShape, outputDtype,
                       numThreads=numThreads, jvp_fn=jvp_fn, extraKinds=extraKinds,
                       lanes=lanes, reverse=reverse, specialize=specialize)


def launchState(kernel, query, properties, domain, queryVolumes, referenceVolumes, adjacency,
                reference, crk, gradH, renorm, additionalArguments=(), outputShape=None,
                outputDtype=None, numThreads=None, jvp_fn=None, extraKinds=None, lanes=None,
                reverse=None, specialize=None, laplacian=None, mirrored=False):
    """Run one operator launch through the bridge (`launchOperator` passes its `SPHContext`
    fields here: the call's state goes straight to the flat slots and the structs).

    Args:
        kernel: Warp kernel with the canonical ABI.
        query, properties, domain, queryVolumes, referenceVolumes, adjacency, reference,
            crk, gradH, renorm: the call's state (None where absent).
        additionalArguments: the extras in kernel order.
        outputShape, outputDtype: of the output (tuples of them for several outputs).
        numThreads: thread count (default: the first output's leading size).
        jvp_fn: forward-mode closure or None.
        extraKinds: per extra TENSOR (0) / SCALAR (1); default by isinstance.
        lanes: lanes of an optional tiled kernel.
        reverse: optional `reverse.ReverseSpec` (a hand-written reverse kernel).
        specialize: optional factory of specialised forward-only kernels
            (`autograd.specialize`).
        laplacian: the consistent Laplacian's state or None.
        mirrored: the reference side is the query side (`arg_extract.extractStateInfo`).
    """
    flat, build_state = extractStateInfo(query, properties, domain, queryVolumes=queryVolumes,
                                         referenceVolumes=referenceVolumes, adjacency=adjacency,
                                         referenceParticles=reference, crkState=crk,
                                         gradHState=gradH, renormalizationState=renorm,
                                         site=siteId(kernel), laplacianState=laplacian,
                                         mirrored=mirrored)
    return _launchFlat(kernel, flat, build_state, warpScalar(query.positions.dtype),
                       additionalArguments, outputShape, outputDtype, numThreads=numThreads,
                       jvp_fn=jvp_fn, extraKinds=extraKinds, lanes=lanes, reverse=reverse,
                       specialize=specialize)


def _launchFlat(kernel, flat, build_state, scalar, additionalArguments=(), outputShape=None,
                outputDtype=None, numThreads=None, jvp_fn=None, extraKinds=None, lanes=None,
                reverse=None, specialize=None):
    """The engine behind `_launch` and `jvpCommon.launchGeometryJVP`: `flat` is the state
    list (36 slots, or 36 + the tangent block) and ``build_state(arrays, use_bundle)`` turns
    its Warp views into the kernel's leading arguments; the extras follow. `reverse` (a
    `reverse.ReverseSpec`) travels to the bridge as ``build_fn.reverse``."""
    nState = len(flat)
    extras = tuple(additionalArguments)
    if extraKinds is None:
        extraKinds = tuple(_TENSOR if isinstance(a, torch.Tensor) else _SCALAR for a in extras)
    tensorExtras = [a for a, k in zip(extras, extraKinds) if int(k) == _TENSOR]
    full = list(flat) + tensorExtras

    tracking = any(isinstance(t, torch.Tensor) and not _isInertTensor(t) for t in full)
    prunedIdx: list[int] = []
    trackedIdx: list[int] = []
    for idx, t in enumerate(full):
        if isinstance(t, Field):
            trackedIdx.append(idx)
        elif tracking and idx in _NEVER_PRUNED_WHEN_TRACKING:
            trackedIdx.append(idx)
        elif _isInertTensor(t):
            prunedIdx.append(idx)
        else:
            trackedIdx.append(idx)
    tracked = [full[idx] for idx in trackedIdx]
    n = len(full)
    # the closure keeps no tensor: SCALAR extras only (the bridge keeps build_fn for backward)
    scalars = tuple(_TENSOR_SLOT if int(k) == _TENSOR else _castScalar(a, scalar)
                    for a, k in zip(extras, extraKinds))

    def build_fn(warp_arrays, use_bundle=False, side=()):
        arrays = [None] * n
        for idx, wa in zip(trackedIdx, warp_arrays):
            arrays[idx] = wa
        for idx, wa in zip(prunedIdx, side):
            arrays[idx] = wa
        args = build_state(arrays[:nState], use_bundle=use_bundle)
        it = iter(arrays[nState:])
        for value in scalars:
            args.append(next(it) if value is _TENSOR_SLOT else value)
        return args

    build_fn.config = build_state.config
    build_fn.reverse = reverse
    build_fn.specialize = specialize
    # pruned (inert) tensors travel beside the tracked ones: the bridge converts them to
    # cached views and, when it records a gradient, saves them for backward
    build_fn.side = [full[idx] for idx in prunedIdx]

    wrapped_jvp = jvp_fn
    if jvp_fn is not None and prunedIdx:
        wrapped_jvp = _expandedRule(jvp_fn, n, trackedIdx)

    launcher = launch_kernel
    if numThreads is not None or lanes is not None:
        launcher = functools.partial(launch_kernel, numThreads=numThreads, lanes=lanes)
    return bridgeApply(wrapped_jvp, build_fn, launcher, kernel, outputShape,
                                        outputDtype, *tracked)


def _expandedRule(jvp_fn, n: int, trackedIdx: list):
    """`jvp_fn` called with the tracked positions' tangents re-expanded to absolute slots
    (pruned, inert positions have no live tangent); keeps the rule's ``rebind``."""
    def wrapped_jvp(ctx, flat_tangents, *rest, **kw):
        fullT = [None] * n
        for idx, tg in zip(trackedIdx, flat_tangents):
            fullT[idx] = tg
        mask = getattr(ctx, "live_mask", None)
        if mask is not None and len(mask) == len(trackedIdx):
            fullMask = [False] * n
            for idx, live in zip(trackedIdx, mask):
                fullMask[idx] = bool(live)
            ctx.live_mask = fullMask
        return jvp_fn(ctx, fullT, *rest, **kw)

    rebind = getattr(jvp_fn, "rebind", None)
    if rebind is not None:
        wrapped_jvp.rebind = lambda swap: _expandedRule(rebind(swap), n, trackedIdx)
    return wrapped_jvp


def warpWrapper2(kernel, stateTuple, additionalArguments=(), outputShape=None, outputDtype=None,
                 numThreads=None, jvp_fn=None):
    """Legacy positional shim: the 10-slot None-padded `stateTuple` and `additionalArguments`
    analysed by isinstance (tensor -> TENSOR, anything else -> SCALAR). Launches identically
    to `launchOperator`."""
    if len(stateTuple) != 10:
        raise ValueError(f"warpWrapper2: stateTuple has {len(stateTuple)} entries; accepted: 10 "
                         "(query, properties, domain, qVol, rVol, adjacency, reference, crk, "
                         "gradH, renorm)")
    if outputShape is None:
        outputShape = (int(stateTuple[0].positions.shape[0]),)
    if outputDtype is None:
        outputDtype = warpScalar(stateTuple[0].positions.dtype)
    return _launch(kernel, tuple(stateTuple), tuple(additionalArguments), outputShape,
                   outputDtype, numThreads=numThreads, jvp_fn=jvp_fn)
