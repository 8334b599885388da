"""Dependency-free gate for `torch.profiler.record_function` regions.

``WARPSPHCORE_PROFILING=1`` (read once, at import) makes `recordFunction(name)` return a
real ``torch.profiler.record_function`` region (about 70-115 µs per call); otherwise it
returns a shared no-op context manager. This module imports nothing from the package (and
torch only lazily, when profiling is on), so any module — `autograd` included — can import
it first without creating an import cycle that leaves `util` half-initialised.
"""

from __future__ import annotations

import os

__all__ = ["PROFILING", "profilingEnabled", "recordFunction"]

#: Whether profiling regions are real (fixed at import).
PROFILING = os.environ.get("WARPSPHCORE_PROFILING", "0") == "1"


class _NullRegion:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NULL = _NullRegion()


def profilingEnabled() -> bool:
    """True when `recordFunction` returns real profiler regions."""
    return PROFILING


def recordFunction(name: str):
    """Context manager labelling a region in the torch profiler when profiling is enabled."""
    if not PROFILING:
        return _NULL
    from torch.profiler import record_function  # noqa: PLC0415 (lazy: keep this module light)

    return record_function(name)
