"""Hand-written reverse kernels: `ReverseSpec` and its bridge hook.

By default the bridge differentiates a launch with Warp's generated adjoint of the primal
kernel (the launch recorded on a `wp.Tape`). That adjoint is exact (the pair functions
carry custom adjoints where Warp's own would be wrong, e.g. the kernel gradient at r = 0) but
not cheap: Warp's adjoint of a neighbour loop replays the loop's forward, and every
differentiated function replays the forward of what it calls, so one backward evaluates the
kernel shape several times per pair. An operator may declare a hand-written reverse kernel
for the calls where it is exact: one traversal, the per-pair adjoint quantities from one shape
evaluation, and atomic scatters into the inputs' gradient buffers (docs/performance.md).

`ReverseSpec(kernel, eligible, build)`:

* ``eligible(config, args) -> bool``: host-side test of one call (the `build_fn.config` of
  `arg_extract.extractStateInfo` and the built kernel arguments), without device access. A
  call that is not eligible (a correction the kernel does not implement, a gradient buffer on
  an input it does not write) keeps the tape path.
* ``build(config, args, outputs) -> (dim, inputs)``: the reverse launch, reading the outputs'
  adjoint buffers (``outputs[k].grad``) and writing the inputs' ``.grad`` buffers.

The bridge (`StateAwareWarpFunction.forward`) launches an eligible call outside the tape and
records the reverse launch with ``tape.record_func``, so `backward`, `tape.zero()` and the
seed handling are the same for both paths. The environment variable
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1`` (`util.gates`: read once) forces the tape path, for
A/B comparisons and debugging. The route a call took is ``out.grad_fn.reverse_route`` (the
reverse kernel's key, or None for the tape).

`gradientBuffersWithin(args, allowed)` is the shared eligibility helper: True when every
gradient buffer among the arguments' arrays (struct fields included) belongs to an allowed
(argument index, field) pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import warp as wp

from ..util.gates import gate
from .arg_extract import structFor
from .launcher import deviceOfArgs, launch_reverse, structFields
from .specialize import specializedKernel

__all__ = ["ReverseSpec", "reverseKernelsEnabled", "gradientBuffersWithin", "recordReverse",
           "vectorView", "cotangentPack"]


@dataclass(frozen=True)
class ReverseSpec:
    """A hand-written reverse kernel of one operator (module docstring).

    Args:
        kernel: the Warp reverse kernel (launched without a tape; ``enable_backward=False``).
        eligible: ``(config, args) -> bool``, host-side.
        build: ``(config, args, outputs) -> (dim, inputs)`` of the reverse launch.
        specialize: optional ``(config) -> kernel | None``, the reverse kernel specialised on
            the call's configuration (`autograd.specialize`).
        pairedForward: optional ``(config) -> kernel | None``, the operator's specialised
            forward kernel built in one Warp module with the reverse kernel that
            `specialize` returns afterwards: the forward launch of a call that this reverse
            kernel will differentiate uses it, so the call compiles one module, not two.
    """

    kernel: Any
    eligible: Callable
    build: Callable
    specialize: Any = None
    pairedForward: Any = None


def reverseKernelsEnabled() -> bool:
    """Gate ``WARPSPHCORE_DISABLE_REVERSE_KERNELS`` (default: enabled; "1" disables;
    `util.gates`)."""
    return gate("WARPSPHCORE_DISABLE_REVERSE_KERNELS") != "1"


def gradientBuffersWithin(args, allowed: dict) -> bool:
    """True when every array with a gradient buffer among `args` is allowed: a plain array
    argument at index k when ``"*" in allowed[k]``, a struct field ``name`` of argument k when
    ``name in allowed[k]``.

    Args:
        args: the built kernel arguments of one call.
        allowed: ``{argument index: set of field names (or "*")}``.
    """
    for k, a in enumerate(args):
        if isinstance(a, wp.array):
            if a.grad is not None and "*" not in allowed.get(k, ()):
                return False
            continue
        fields = structFields(a)
        if fields is None:
            continue
        ok = allowed.get(k, ())
        for name in fields:
            v = getattr(a, name, None)
            if isinstance(v, wp.array) and v.grad is not None and name not in ok:
                return False
    return True


def geometryAdjointAsked(args) -> bool:
    """Whether a call's backward needs the adjoint of a particle set's positions or supports
    (the fields ``positions`` / ``supports`` of its particle-state structs hold gradient
    buffers): a reverse kernel specialised on False skips the pair's Hessian terms."""
    for a in args:
        fields = structFields(a)
        if fields is None or "positions" not in fields:
            continue
        for name in ("positions", "supports"):
            v = getattr(a, name, None)
            if isinstance(v, wp.array) and v.grad is not None:
                return True
    return False


def onlyArraysAsked(args) -> bool:
    """Whether no field of a call's structs (particle states, corrections) holds a gradient
    buffer: the backward asks only for the plain array arguments' adjoints (the field
    values)."""
    for a in args:
        fields = structFields(a)
        if fields is None:
            continue
        for name in fields:
            v = getattr(a, name, None)
            if isinstance(v, wp.array) and v.grad is not None:
                return False
    return True


def cotangentPack(config: dict, adjoints, **fields):
    """The reverse pack (`arg_extract.structFor("cotangent", ...)`) of a call: for each
    ``(field, flag, array)`` of `adjoints`, the array's gradient buffer in ``field`` and
    whether it has one in ``flag``; `fields` set as given (the seeds, the frozen values)."""
    pack = structFor("cotangent", config["dim"], config["scalar"])()
    for name, value in fields.items():
        setattr(pack, name, value)
    for field, flag, arr in adjoints:
        setattr(pack, field, arr.grad)
        setattr(pack, flag, arr.grad is not None)
    return pack


def vectorView(flat: wp.array, vecType, count: int) -> wp.array:
    """A zero-copy view of a flat scalar array as `count` vectors of `vecType` (the output
    cotangent of a derivative-last operator, one d-vector per output row).

    Args:
        flat: a contiguous scalar array of at least ``count * len(vecType)`` elements.
        vecType: the Warp vector type.
        count: number of vectors.
    """
    return wp.array(ptr=flat.ptr, dtype=vecType, shape=(count,), device=flat.device,
                    copy=False)


def recordReverse(tape: wp.Tape, spec: ReverseSpec, config: dict, args, outputs, inputs):
    """Record `spec`'s reverse launch on `tape` (``tape.record_func``): at backward time it
    builds the launch from the outputs' adjoint buffers and launches on the call's device and
    torch's current stream.

    Args:
        tape: the call's tape (recorded in `StateAwareWarpFunction.forward`).
        spec: the operator's `ReverseSpec`.
        config: the call's `build_fn.config`.
        args: the built kernel arguments.
        outputs: the outputs' Warp views (their ``.grad`` holds the seeds at backward time).
        inputs: the call's Warp views (their gradient buffers are zeroed by ``tape.zero()``
            with the outputs').
    """
    args = tuple(args)
    outputs = tuple(outputs)
    device = deviceOfArgs(args)
    config = dict(config, geometryAdjoint=geometryAdjointAsked(args),
                  valuesOnly=onlyArraysAsked(args))
    kernel = specializedKernel(spec.specialize, config, spec.kernel)

    def backward():
        dim, launchInputs = spec.build(config, args, outputs)
        launch_reverse(kernel, dim, launchInputs, device)

    # empty arrays have nothing to zero (and `record_func` rejects them)
    tracked = [a for a in list(outputs) + list(inputs)
               if isinstance(a, wp.array) and a.grad is not None and a.grad.size > 0]
    tape.record_func(backward, tracked)
