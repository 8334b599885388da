"""Environment gates, read once: the ``WARPSPHCORE_*`` switches of the bridge.

Every gate is read from the environment when this module is imported and kept here; the
per-call code asks `gate(name)` (a dict lookup) instead of reading ``os.environ`` on every
forward. A program that changes one of these variables after importing warpSPHCore calls
`refreshGates()` (the test suite does so whenever a test sets one). The other switches have
setter functions (`setSpecialization`, `setEagerErrorChecks`) and are read once as well.

=======================================  =========  ==========================================
variable                                 default    effect
=======================================  =========  ==========================================
WARPSPHCORE_DISABLE_BUNDLE               0          1: fresh state structs on every call
WARPSPHCORE_DISABLE_FIELD_CACHE          0          1: fresh Warp views on every call
WARPSPHCORE_FIELD_CACHE_GRAD             1          0: fresh views on grad-path calls
WARPSPHCORE_NULL_FILL                    zeros      sentinel: NaN/-1 in absent fields
WARPSPHCORE_DISABLE_REVERSE_KERNELS      0          1: every backward on Warp's tape
WARPSPHCORE_COMPILE_NOTICE               1          0: no compile notices
WARPSPHCORE_CALL_PLANS                   1          0: no call plans (every call full path)
=======================================  =========  ==========================================
"""

from __future__ import annotations

import os

__all__ = ["gate", "refreshGates", "gatesGeneration", "GATES"]

#: name -> default value
GATES = {
    "WARPSPHCORE_DISABLE_BUNDLE": "0",
    "WARPSPHCORE_DISABLE_FIELD_CACHE": "0",
    "WARPSPHCORE_FIELD_CACHE_GRAD": "1",
    "WARPSPHCORE_NULL_FILL": "zeros",
    "WARPSPHCORE_DISABLE_REVERSE_KERNELS": "0",
    "WARPSPHCORE_COMPILE_NOTICE": "1",
    "WARPSPHCORE_CALL_PLANS": "1",
}

_VALUES: dict[str, str] = {}
_GENERATION = [0]


def refreshGates() -> None:
    """Re-read every gate from the environment (and start a new generation: call plans
    recorded under the previous values are not replayed)."""
    _GENERATION[0] += 1
    _VALUES.clear()
    for name, default in GATES.items():
        _VALUES[name] = os.environ.get(name, default)


def gatesGeneration() -> int:
    """How many times the gates have been read (part of every call plan's key)."""
    return _GENERATION[0]


def gate(name: str) -> str:
    """The value of gate `name` as read at import (or at the last `refreshGates`)."""
    return _VALUES[name]


refreshGates()
