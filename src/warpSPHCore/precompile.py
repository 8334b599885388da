"""Warm Warp's kernel cache ahead of time: `precompile` (``warpsph precompile``). An entry
point beside the CLI: it reaches every layer's kernels.

Loads (compiles, or finds in the cache) the library's Warp modules with Warp's parallel
module loading (``wp.force_load``), for users, containers and CI, and marks them announced
in `util.compileNotice` so that no compile notice follows.
"""

from __future__ import annotations

import dataclasses
import importlib
import time

import warp as wp

from .enumTypes import OperationDirection, SupportScheme
from .kernels.evaluation import registerCustomAdjoints
from .operators import _specialized
from .util import compileNotice
from .util.warpContext import concreteKernel, ensureWarp

__all__ = ["precompile"]

_SCALARS = {"float32": wp.float32, "float64": wp.float64}


def _modulesOf(short: str, dims, scalars, device) -> list:
    """The Warp modules a launch of module `short` compiles on `device`: the module itself,
    or, for a module that declares ``CONCRETE_SIGNATURES`` (the search), the group modules
    of `util.warpContext.concreteKernel` that run on the device's kind (filtered by `dims`
    and `scalars`; `neighborhood._kernels.ConcreteSignature`)."""
    pyModule = importlib.import_module(f"warpSPHCore.{short}")
    signatures = getattr(pyModule, "CONCRETE_SIGNATURES", None)
    if signatures is None:
        return [wp.get_module(f"warpSPHCore.{short}")]
    skip = "cpu" if device.is_cuda else "cuda"
    return [concreteKernel(e.kernel, e.types, group=e.tag).module for e in signatures
            if e.d in dims and e.scalar in scalars and e.part != skip]


def _specializedModules(operators, dims, scalars, kernels, device) -> list:
    """The specialised Density/Gradient kernels (`operators._specialized`: the Gradient's
    forward, reverse and forward-mode kernels) of the default call configuration (Gather
    supports, interaction mode AllQueriesNonGhostReferences, no calibration, CSR and grid;
    Naive gradient scheme; densities, no grad-h or volumes; on the CPU also the Density that
    takes a symmetric list's pairs once) for each smoothing kernel in
    `kernels`, dimension and scalar type, as a call on `device` picks them (the Gradient's
    forward kernel takes a row per thread on the CPU with a CSR list)."""
    sp = _specialized
    wanted = [o for o in ("Density", "Gradient") if operators is None or o in operators]
    out = []
    for kernel in kernels:
        for d in dims:
            for scalar in scalars:
                for csr in (True, False):
                    cfg = sp.Configuration(d, scalar, int(kernel), int(SupportScheme.Gather),
                                           int(OperationDirection.AllQueriesNonGhostReferences),
                                           csr, False)
                    if "Density" in wanted:
                        out.append(sp._densityKernel(cfg).module)
                        if csr and not device.is_cuda:
                            # a symmetric list's pairs once (`_specialized._forwardOnce`):
                            # what a call through the library's own search picks on the CPU
                            once = dataclasses.replace(cfg, pairsOnce=True)
                            out.append(sp._densityKernel(once).module)
                    if "Gradient" in wanted:
                        config = dict(deviceType="cuda" if device.is_cuda else "cpu",
                                      useAdjacency=csr, useGradHTerms=False, useVolume=False,
                                      queryHasDensities=True, referenceHasDensities=True)
                        naive = dataclasses.replace(cfg, gradientScheme=1)
                        # no-grad forward (a row per thread on the CPU with a CSR list);
                        # forward + reverse of a differentiated call
                        # (`_specialized._gradientPair`); forward mode
                        out += [sp._gradientKernel(sp._widened(naive, config)).module,
                                sp._gradientPair(naive).module,
                                sp._gradientJVPKernel(cfg).module]
    return out


def precompile(devices=("cpu",), operators=None, workers: int | None = None,
               verbose: bool = True, dims=(1, 2, 3), dtypes=("float32", "float64"),
               kernels=(0,)) -> dict:
    """Compile (or load from the cache) the library's Warp modules ahead of time.

    Args:
        devices: Warp device aliases (``"cpu"``, ``"cuda:0"``).
        operators: names of `compileNotice.OPERATOR_MODULES` (e.g. ``["Density",
            "Gradient"]``) or None for every module of the library.
        workers: threads for Warp's parallel module loading (default: Warp's, at most 4).
        verbose: print one line per module and device.
        dims, dtypes: the dimensions and scalar types (``"float32"``, ``"float64"``) of the
            per-configuration modules: the search's and the specialised Density/Gradient
            kernels' (the generic operator modules hold every combination anyway).
        kernels: `KernelFunctions` values whose specialised Density/Gradient kernels to build
            (default call configuration: Gather, AllQueriesNonGhostReferences, no
            calibration, CSR and grid).

    Returns:
        ``{"modules": [...], "devices": [...], "seconds": float}``.
    """
    ensureWarp()
    registerCustomAdjoints()  # before any module that calls them is built
    if operators is None:
        names = sorted({m for mods in compileNotice.OPERATOR_MODULES.values() for m in mods})
    else:
        unknown = [o for o in operators if o not in compileNotice.OPERATOR_MODULES]
        if unknown:
            raise ValueError(f"precompile: unknown operators {unknown}; accepted: "
                             f"{', '.join(compileNotice.OPERATOR_MODULES)} (or None for all)")
        names = sorted({m for o in operators for m in compileNotice.OPERATOR_MODULES[o]})
    badDims = [d for d in dims if d not in (1, 2, 3)]
    badTypes = [t for t in dtypes if t not in _SCALARS]
    if badDims or badTypes:
        raise ValueError(f"precompile: dims {badDims} / dtypes {badTypes} not accepted; "
                         "accepted: dims 1, 2, 3 and dtypes float32, float64")
    scalars = [_SCALARS[t] for t in dtypes]
    todo = []  # (module, device), each module once per device
    for device in (wp.get_device(d) for d in devices):
        common = _specializedModules(operators, dims, scalars, kernels, device)
        mods = [m for short in names for m in _modulesOf(short, dims, scalars, device)]
        todo += [(m, device) for m in {m.name: m for m in mods + common}.values()]
    if verbose:
        for m, d in todo:
            state = "cached" if compileNotice._isCached(m, d) else "compiling"
            label = compileNotice.moduleLabel(m.name)
            if m.name.startswith("warpSPHCore_"):
                label = compileNotice.specializedLabel(m.name)
            compileNotice._say(f"  {label:16s} {d.alias:8s} {state}")
    t0 = time.perf_counter()
    compileNotice._SEEN.update((m.name, str(d)) for m, d in todo)
    for device in {d.alias: d for _, d in todo}.values():
        wp.force_load(device=device, modules=[m for m, d in todo if d.alias == device.alias],
                      max_workers=workers)
    seconds = time.perf_counter() - t0
    names = sorted({m.name for m, _ in todo})
    if verbose:
        compileNotice._say(f"warpSPHCore: {len(names)} modules ready on {', '.join(devices)} "
                           f"in {seconds:.1f} s (cache: {wp.config.kernel_cache_dir})")
    return {"modules": names, "devices": list(devices), "seconds": seconds}
