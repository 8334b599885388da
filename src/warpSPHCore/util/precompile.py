"""Warm Warp's kernel cache ahead of time: `precompile` (``warpsph precompile``).

Loads (compiles, or finds in the cache) the library's Warp modules with Warp's parallel
module loading (``wp.force_load``), for users, containers and CI, and marks them announced
in `util.compileNotice` so that no compile notice follows.
"""

from __future__ import annotations

import importlib
import time

import warp as wp

from . import compileNotice
from .warpContext import ensureWarp

__all__ = ["precompile"]


def precompile(devices=("cpu",), operators=None, workers: int | None = None,
               verbose: bool = True) -> dict:
    """Compile (or load from the cache) the library's Warp modules ahead of time.

    Args:
        devices: Warp device aliases (``"cpu"``, ``"cuda:0"``).
        operators: names of `compileNotice.OPERATOR_MODULES` (e.g. ``["Density", "Gradient"]``) or None for
            every module of the library.
        workers: threads for Warp's parallel module loading (default: Warp's, at most 4).
        verbose: print one line per module and device.

    Returns:
        ``{"modules": [...], "devices": [...], "seconds": float}``.
    """
    ensureWarp()
    if operators is None:
        names = sorted({m for mods in compileNotice.OPERATOR_MODULES.values() for m in mods})
    else:
        unknown = [o for o in operators if o not in compileNotice.OPERATOR_MODULES]
        if unknown:
            raise ValueError(f"precompile: unknown operators {unknown}; accepted: "
                             f"{', '.join(compileNotice.OPERATOR_MODULES)} (or None for all)")
        names = sorted({m for o in operators for m in compileNotice.OPERATOR_MODULES[o]})
    mods = []
    for short in names:
        importlib.import_module(f"warpSPHCore.{short}")
        mods.append(wp.get_module(f"warpSPHCore.{short}"))
    todo = [(m, wp.get_device(d)) for d in devices for m in mods]
    if verbose:
        for m, d in todo:
            state = "cached" if compileNotice._isCached(m, d) else "compiling"
            compileNotice._say(f"  {compileNotice.moduleLabel(m.name):16s} {d.alias:8s} {state}")
    t0 = time.perf_counter()
    for _, d in todo:
        compileNotice._SEEN.update((m.name, str(d)) for m in mods)
    wp.force_load(device=list(devices), modules=mods, max_workers=workers)
    seconds = time.perf_counter() - t0
    if verbose:
        compileNotice._say(f"warpSPHCore: {len(mods)} modules ready on {', '.join(devices)} in {seconds:.1f} s "
             f"(cache: {wp.config.kernel_cache_dir})")
    return {"modules": [m.name for m in mods], "devices": list(devices), "seconds": seconds}
