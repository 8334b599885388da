"""Per-configuration specialised kernels: the bridge's side.

An operator may declare ``OperatorSpec.specialize``, a factory ``(config) -> kernel | None``
that returns a forward-only kernel compiled for exactly the configuration of a call
(`build_fn.config`: scalar type, dimension, smoothing kernel, support scheme, interaction
mode, traversal, calibration, corrections), in its own small Warp module, or None when the
call needs the generic kernel. The bridge launches it for every forward pass it covers: calls
without a tensor requiring grad, calls whose backward is the operator's hand-written reverse
kernel (`autograd.reverse`), and calls that Warp's tape differentiates; the tape (recorded in
backward) always records the generic kernel's overload with its adjoint (`tapedKernel`),
whose generated adjoint it runs. ``ReverseSpec.specialize`` does the same for a
hand-written reverse kernel.

Launches without a factory, or whose factory does not cover the call (the other operators,
the JVP kernels, the correction builders' kernels), take `concreteOverload`: the generic
kernel's own overload for the call's (d, scalar type), compiled alone and without adjoint
code in a module of its own.

The specialised kernel has the generic kernel's ABI (the same eight state arguments, extras
and outputs), so nothing else in the call changes; the outputs agree with the generic
kernel's to rounding (bitwise where the arithmetic is the same: see
`operators._specialized`).

Gate: ``WARPSPHCORE_SPECIALIZE=0`` (read once, at import) or `setSpecialization(False)`
keeps every call on the generic kernels (A/B comparisons, debugging).
"""

from __future__ import annotations

import os

from ..util.warpContext import concreteKernel
from .arg_extract import structFor

__all__ = ["specializationEnabled", "setSpecialization", "specializedKernel",
           "tapedKernel", "concreteOverload"]

_ENABLED = [os.environ.get("WARPSPHCORE_SPECIALIZE", "1") != "0"]


def specializationEnabled() -> bool:
    """Whether eligible launches use per-configuration specialised kernels."""
    return _ENABLED[0]


def setSpecialization(enabled: bool) -> bool:
    """Turn specialised kernels on or off for this process; returns the previous setting."""
    previous = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    return previous


def specializedKernel(factory, config: dict, generic):
    """The kernel of an untaped launch: `factory(config)` when specialisation is on and the
    factory covers the call; else, for a generic kernel with declared (scalar type, d)
    overloads, `concreteOverload` (its overload for the call as a forward-only module of its
    own); else `generic`."""
    if not _ENABLED[0]:
        return generic
    if factory is not None:
        kernel = factory(config)
        if kernel is not None:
            return kernel
    return concreteOverload(generic, config)


def tapedKernel(config: dict, generic):
    """The kernel of a launch that a `wp.Tape` records: with specialisation on, the generic
    kernel's own (d, dtype) overload compiled alone *with* its adjoint (`concreteOverload`
    with ``backward=True``), so a taped call compiles one overload instead of the six of the
    generic module; else `generic`."""
    if not _ENABLED[0]:
        return generic
    return concreteOverload(generic, config, backward=True)


def concreteOverload(kernel, config: dict, backward: bool = False):
    """`kernel`'s declared overload for the call's (d, scalar type) (`declareStateOverloads`:
    the first argument is the query struct of that pair), compiled alone, without adjoint
    code, in a module of its own (`util.warpContext.concreteKernel`): a call pays for the
    overload it uses, not for the six of the generic module and their adjoints. `kernel`
    itself when it is not generic or declares no matching overload."""
    if not getattr(kernel, "is_generic", False) or not kernel.overloads:
        return kernel
    key = (kernel.module.name, kernel.key, config["dim"], config["scalar"], bool(backward))
    found = _OVERLOADS.get(key)
    if found is None:
        want = structFor("particle", config["dim"], config["scalar"])
        for ovl in kernel.overloads.values():
            first = next(iter(ovl.adj.arg_types.values()))
            if first is want:
                found = concreteKernel(kernel, dict(ovl.adj.arg_types), backward=backward)
                break
        else:
            found = kernel
        _OVERLOADS[key] = found
    return found


_OVERLOADS: dict = {}
