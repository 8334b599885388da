"""The declared operator ABI: `OperatorSpec`, `SPHContext`, `launchOperator`.

An operator declares its kernel, outputs, extras (named additional kernel arguments, TENSOR
or SCALAR) and thread count once; `launchOperator(spec, ctx, **extras)` validates a call
against the declaration, resolves the outputs and delegates to the shared engine
`wrapper.launchState`. It is neither a caching layer nor a behaviour change: a kernel launched
through it runs exactly like the `warpWrapper2` call it replaces.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Optional

import torch
import torch.autograd.forward_ad as fwAD

from ..enumTypes import ExecutionMode
from .wrapper import launchState

__all__ = [
    "ShapeOf",
    "OutputSpec",
    "ExtraKind",
    "ExtraSpec",
    "ThreadSpec",
    "JVPSpec",
    "OperatorSpec",
    "Corrections",
    "EMPTY_CORRECTIONS",
    "SPHContext",
    "launchOperator",
]


class ShapeOf(IntEnum):
    """Symbolic output shapes. QUERY: one row per query particle, ``(N_q,)``."""

    QUERY = 0


class ExtraKind(IntEnum):
    """TENSOR extras are tracked by autograd (appended after the 36 state slots); SCALAR
    extras are plain kernel arguments spliced back by position."""

    TENSOR = 0
    SCALAR = 1


class ThreadSpec(IntEnum):
    """QUERY_COUNT: the thread count is the first output's leading size."""

    QUERY_COUNT = 0


def _isResolver(value) -> bool:
    # Warp dtypes are classes and therefore callable: recognise resolvers by type.
    return isinstance(value, types.FunctionType)


@dataclass(frozen=True)
class OutputSpec:
    """One kernel output. `dtype` (a Warp dtype) and `shape` (`ShapeOf`, or a tuple of ints)
    may each be a resolver ``(ctx, extras) -> value``."""

    dtype: Any
    shape: Any = ShapeOf.QUERY


@dataclass(frozen=True)
class ExtraSpec:
    """One declared additional kernel argument, passed to `launchOperator` by `name`."""

    name: str
    kind: ExtraKind = ExtraKind.TENSOR


@dataclass(frozen=True)
class JVPSpec:
    """Forward mode of one operator: the extras eligible for a Tier-1 value tangent (None:
    geometry tangents only), the Tier-2 `geometryKernel` (`jvpCommon` ABI), its thread
    count resolver ``geometryThreads(ctx, extras)`` (None: one thread per output element)
    and its per-configuration specialisation ``geometrySpecialize``."""

    queryValueExtra: Optional[str] = None
    referenceValueExtra: Optional[str] = None
    geometryKernel: Any = None
    geometryThreads: Any = None
    #: optional factory ``(config) -> kernel | None`` of the geometry kernel specialised on a
    #: call's configuration (`autograd.specialize`; the config also carries
    #: ``supportTangents``), used for the untaped launches
    geometrySpecialize: Any = None
    #: optional factory ``(config) -> kernel`` of the kernel that computes the primal and the
    #: position tangent in one traversal (output ``[primal | tangent]``, the primal's bits),
    #: for a dual-tensor call whose only tangent is on the positions (`launchOperator`)
    dualSpecialize: Any = None


@dataclass(frozen=True)
class OperatorSpec:
    """Declaration of one operator kernel.

    Args:
        kernel: the Warp kernel (canonical ABI, extras after the eight state arguments, then
            the outputs).
        outputs: tuple of `OutputSpec`.
        extras: tuple of `ExtraSpec`, in kernel-argument order.
        threads: `ThreadSpec.QUERY_COUNT`.
        numThreads: optional resolver ``(ctx, extras) -> int`` when the thread count is not
            the first output's leading size.
        jvp: `JVPSpec` or None.
        tiledKernel: optional multi-lane CUDA variant (several lanes share one query's
            neighbours and combine their partial sums with a tile reduction).
        reverse: optional `autograd.reverse.ReverseSpec`, a hand-written reverse kernel used
            instead of Warp's generated adjoint for the calls it declares eligible.
        specialize: optional factory ``(config) -> kernel | None`` of forward-only kernels
            specialised on a call's configuration (`autograd.specialize`), used for the
            launches that no `wp.Tape` records.
    """

    kernel: Any
    outputs: tuple[OutputSpec, ...]
    extras: tuple[ExtraSpec, ...] = ()
    threads: ThreadSpec = ThreadSpec.QUERY_COUNT
    numThreads: Any = None
    jvp: Optional[JVPSpec] = None
    tiledKernel: Any = None
    reverse: Any = None
    specialize: Any = None


@dataclass(frozen=True)
class Corrections:
    """Per-call corrections: ``volumes=(queryVolumes, referenceVolumes)``, crk, gradH, renorm,
    and the consistent Laplacian's state ``laplacian`` (read by `LaplacianScheme.Consistent`
    only)."""

    volumes: tuple[Any, Any] = (None, None)
    crk: Any = None
    gradH: Any = None
    renorm: Any = None
    laplacian: Any = None


EMPTY_CORRECTIONS = Corrections()


@dataclass
class SPHContext:
    """Per-call named state of one operator launch.

    `mode=ExecutionMode.FORWARD` is rejected by `launchOperator` (deliberately
    unimplemented); AUTO is not resolved further."""

    query: Any
    properties: Any
    domain: Any
    adjacency: Any = None
    reference: Any = None
    corrections: Corrections = field(default_factory=Corrections)
    mode: ExecutionMode = ExecutionMode.AUTO
    #: the reference side is the query side: the same particles, values and volumes (a
    #: reverse kernel may then take a symmetric list's pairs once for both rows)
    mirrored: bool = False

    @property
    def numQueries(self) -> int:
        return int(self.query.positions.shape[0])

    @property
    def numReferences(self) -> int:
        ref = self.query if self.reference is None else self.reference
        return int(ref.positions.shape[0])

    def stateTuple(self) -> tuple:
        """The legacy 10-slot positional tuple ``(query, properties, domain, qVol, rVol,
        adjacency, reference, crk, gradH, renorm)``."""
        c = self.corrections
        return (self.query, self.properties, self.domain, c.volumes[0], c.volumes[1],
                self.adjacency, self.reference, c.crk, c.gradH, c.renorm)


def _resolve(value, ctx, extras):
    return value(ctx, extras) if _isResolver(value) else value


def _resolveShape(shape, ctx, extras) -> tuple:
    shape = _resolve(shape, ctx, extras)
    if isinstance(shape, ShapeOf):
        if shape == ShapeOf.QUERY:
            return (ctx.numQueries,)
    if isinstance(shape, int):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _validateExtras(spec: OperatorSpec, extras: dict) -> None:
    declared = {e.name: e for e in spec.extras}
    name = getattr(spec.kernel, "key", repr(spec.kernel))
    missing = [n for n in declared if n not in extras]
    if missing:
        raise TypeError(f"launchOperator({name}): missing extras {missing}; declared: "
                        f"{list(declared)}")
    undeclared = [n for n in extras if n not in declared]
    if undeclared:
        raise TypeError(f"launchOperator({name}): undeclared extras {undeclared}; declared: "
                        f"{list(declared)}")
    for n, e in declared.items():
        v = extras[n]
        if e.kind == ExtraKind.TENSOR and not isinstance(v, torch.Tensor):
            raise TypeError(f"launchOperator({name}): extra {n!r} is declared TENSOR but got "
                            f"{type(v).__name__}")
        if e.kind == ExtraKind.SCALAR and isinstance(v, torch.Tensor):
            raise TypeError(f"launchOperator({name}): extra {n!r} is declared SCALAR but got a "
                            "tensor (differentiable scalars travel as TENSOR extras, see "
                            "asScalarArg)")


def _build_geometry_jvp_fn(spec: OperatorSpec, ctx: SPHContext, extras: dict, dualRoute):
    """The dual-tensor route's `jvp_fn`: captures this call's context and
    extras (the caller's own objects) and delegates to `dualRoute` (the entry points pass
    `operationsJVP.dualRouteJVP`, the same core as `warpOperationJVP`)."""

    def jvp_fn(bridgeCtx, flat_tangents):
        return dualRoute(spec, ctx, extras, flat_tangents, bridgeCtx.live_mask)

    def rebind(swap: dict):
        """The same rule on this call's state with tensors swapped (``{id(old): new}``): a
        differentiable backward evaluates it on aliases of the saved inputs."""
        return _build_geometry_jvp_fn(spec, rebindTensors(ctx, swap),
                                      {k: rebindTensors(v, swap) for k, v in extras.items()},
                                      dualRoute)

    jvp_fn.rebind = rebind
    return jvp_fn


def rebindTensors(obj, swap: dict):
    """`obj` (a tensor, tuple, list or state dataclass, nested) with every tensor whose id is
    a key of `swap` replaced by ``swap[id]``; objects holding none of them are returned as
    they are (no copy, no validation rerun)."""
    if isinstance(obj, torch.Tensor):
        return swap.get(id(obj), obj)
    if isinstance(obj, (tuple, list)):
        new = [rebindTensors(x, swap) for x in obj]
        if all(a is b for a, b in zip(new, obj)):
            return obj
        return type(obj)(new) if isinstance(obj, list) else tuple(new)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            if isinstance(v, (torch.Tensor, tuple, list)) or dataclasses.is_dataclass(v):
                nv = rebindTensors(v, swap)
                if nv is not v:
                    changes[f.name] = nv
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def launchOperator(spec: OperatorSpec, ctx: SPHContext, *, dualRoute=None, **extras):
    """Launch `spec.kernel` for the call described by `ctx` with the declared `extras`.

    `dualRoute` ``(spec, ctx, extras, flat_tangents, live_mask) -> tangents`` is the
    forward-mode rule of an operator with a `JVPSpec` (dual tensors reaching the launch);
    the caller passes it (`operationsJVP.dualRouteJVP`), so this bridge layer does not import
    the entry points. Without it a live dual tangent reaching the launch raises
    NotImplementedError.

    Raises:
        NotImplementedError: ``ctx.mode == ExecutionMode.FORWARD``.
        TypeError: missing, undeclared or kind-mismatched extras.

    Returns:
        The output tensor (or a tuple for multi-output kernels), differentiable in reverse
        mode through `StateAwareWarpFunction`.
    """
    if ctx.mode == ExecutionMode.FORWARD:
        raise NotImplementedError("SPHContext.mode=FORWARD is deliberately unimplemented; use "
                                  "AUTO (reverse mode and torch forward-mode duals)")
    _validateExtras(spec, extras)
    fused = getattr(dualRoute, "fused", None)
    if fused is not None and fwAD._current_level >= 0:
        # a forward-mode level is open: a call whose only tangent is on the positions takes
        # the primal and the tangent from one traversal (the entry layer's rule decides)
        out = fused(spec, ctx, extras)
        if out is not None:
            return out
    shapes = [_resolveShape(o.shape, ctx, extras) for o in spec.outputs]
    dtypes = [_resolve(o.dtype, ctx, extras) for o in spec.outputs]
    if len(spec.outputs) == 1:
        outputShape, outputDtype = shapes[0], dtypes[0]
    else:
        outputShape, outputDtype = tuple(shapes), tuple(dtypes)
    numThreads = None
    if spec.numThreads is not None:
        numThreads = int(_resolve(spec.numThreads, ctx, extras))
    jvp_fn = None
    if spec.jvp is not None and dualRoute is not None:
        jvp_fn = _build_geometry_jvp_fn(spec, ctx, extras, dualRoute)
    additional = tuple(extras[e.name] for e in spec.extras)
    kinds = tuple(e.kind for e in spec.extras)
    c = ctx.corrections
    return launchState(spec.kernel, ctx.query, ctx.properties, ctx.domain, c.volumes[0],
                       c.volumes[1], ctx.adjacency, ctx.reference, c.crk, c.gradH, c.renorm,
                       additional, outputShape, outputDtype, numThreads=numThreads,
                       jvp_fn=jvp_fn, extraKinds=kinds, reverse=spec.reverse,
                       specialize=spec.specialize, laplacian=c.laplacian,
                       mirrored=ctx.mirrored)
