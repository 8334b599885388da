"""`LazyModule`: a module imported on its first attribute access.

For modules whose import is costly and that many processes never use: a module of Warp
kernels is parsed by Warp at import (tens of milliseconds each), so the CRK kernels or the
Hessian-vector product's are loaded by the first call that needs them rather than by
``import warpSPHCore``. The import itself goes through `importlib.import_module` (thread-safe
under Python's import lock). It is not a way around an import cycle: a proxy names only a
module that its declaring module could import at the top (same layer or below); the
import-linter contract does not see an import by name, so `tests/test_layers.py` checks
each proxy's target against the layers.
"""

from __future__ import annotations

import importlib

__all__ = ["LazyModule"]


class LazyModule:
    """Proxy of the module `name`: ``proxy.attr`` imports `name` on first use and returns
    its ``attr``."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str):
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded yet"
        return f"<LazyModule {self._name} ({state})>"
