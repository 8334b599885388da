"""Per-configuration specialised kernels: the bridge's side (issue 15).

An operator may declare ``OperatorSpec.specialize``, a factory ``(config) -> kernel | None``
that returns a forward-only kernel compiled for exactly the configuration of a call
(`build_fn.config`: scalar type, dimension, smoothing kernel, support scheme, kind mode,
traversal, calibration, corrections), in its own small Warp module, or None when the call
needs the generic kernel. The bridge uses it for every launch that Warp's tape does not
differentiate: calls without a tensor requiring grad, and calls whose backward is the
operator's hand-written reverse kernel (`autograd.reverse`). A `wp.Tape` launch always takes
the generic kernel, whose generated adjoint the tape replays. ``ReverseSpec.specialize``
does the same for a hand-written reverse kernel.

The specialised kernel has the generic kernel's ABI (the same eight state arguments, extras
and outputs), so nothing else in the call changes; the outputs agree with the generic
kernel's to rounding (bitwise where the arithmetic is the same: see
`operators._specialized`).

Gate: ``WARPSPHCORE_SPECIALIZE=0`` (read once, at import) or `setSpecialization(False)`
keeps every call on the generic kernels (A/B comparisons, debugging).
"""

from __future__ import annotations

import os

__all__ = ["specializationEnabled", "setSpecialization", "specializedKernel"]

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
    """`factory(config)` when specialisation is on and the factory covers the call, else
    `generic`."""
    if factory is None or not _ENABLED[0]:
        return generic
    kernel = factory(config)
    return generic if kernel is None else kernel
