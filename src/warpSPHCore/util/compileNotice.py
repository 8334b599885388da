"""A first run that speaks: say what is compiled before Warp compiles it, and warm the cache.

Warp compiles a kernel module (every kernel and overload of one Python module) the first
time one of its kernels is launched on a device, and caches the binary in its kernel cache.
On a cold cache that takes tens of seconds per module on the CPU and longer on CUDA, and a
program that says nothing meanwhile looks hung. `announceCompile(kernel, device)` is called
by the library's launch sites before every launch; the first time a warpSPHCore module is
used on a device in this process it checks whether Warp's cache holds the binary, and if not
writes one line to stderr (through ``tqdm.write``, so progress bars stay intact): what is
compiled, for which device, that it happens once, and where the cache is.
``WARPSPHCORE_COMPILE_NOTICE=0`` silences it.

`warpSPHCore.precompile.precompile(devices, operators, workers)` loads the library's modules ahead
of time with Warp's parallel module loading (``wp.force_load``), for users, containers and
CI (``warpsph precompile``).
"""

from __future__ import annotations

import os
import sys
import threading

import warp as wp

from ..enumTypes import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    SupportScheme,
)
from .gates import gate

__all__ = ["announceCompile", "OPERATOR_MODULES", "moduleLabel", "specializedLabel"]

#: operator name -> the warpSPHCore modules its launches compile (primal, JVP and reverse
#: kernels live in one module per operator; the traversal/coefficient modules hold only
#: functions and compile nothing of their own).
OPERATOR_MODULES = {
    "Density": ("operators.density", "operators.densityHVP"),
    "Interpolate": ("operators.interpolate",),
    "Gradient": ("operators.gradient",),
    "Divergence": ("operators.divergence",),
    "Curl": ("operators.curl",),
    "Laplacian": ("operators.laplacian",),
    "Covariance": ("operators.covariance",),
    "Momentum": ("operators.momentum",),
    "CRK": ("corrections._crkKernels",),
    "Renormalization": ("corrections._renormKernels", "operators.covariance"),
    "GradH": ("corrections.gradH",),
    "ConsistentLaplacian": ("corrections._laplacianKernels",),
    "Search": ("neighborhood._kernels",),
}

_LABELS = {m: name for name, mods in OPERATOR_MODULES.items() for m in mods}
_LABELS["operators.densityHVP"] = "Density HVP"
_LABELS["operators.covariance"] = "Covariance"
_SEEN: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


def moduleLabel(moduleName: str) -> str:
    """A user-facing name for a warpSPHCore Warp module (``warpSPHCore.operators.density`` ->
    ``Density``).

    Args:
        moduleName: the Warp module's name (the Python module's dotted name).
    """
    short = moduleName[len("warpSPHCore."):] if moduleName.startswith("warpSPHCore.") \
        else moduleName
    return _LABELS.get(short, short)


#: module-name prefix of the per-configuration kernels of `operators._specialized`
_SPECIALIZED_PREFIX = "warpSPHCore_"

#: the support-scheme words of the specialised kernels' names (`_specialized._SUPPORT_NAMES`)
_SUPPORT_WORDS = {"gather": SupportScheme.Gather, "scatter": SupportScheme.Scatter,
                  "mean": SupportScheme.MeanSymmetric,
                  "kmean": SupportScheme.KernelMeanSymmetric,
                  "super": SupportScheme.SuperSymmetric,
                  "partial": SupportScheme.PartialSymmetric}


def _isConfiguration(parts: list) -> bool:
    """True for the name parts of a per-configuration kernel (``density_k0_...``)."""
    return len(parts) > 1 and parts[1][:1] == "k" and parts[1][1:].isdigit()


def _valueName(enum, text: str) -> str:
    """The member name of the value written in `text` (the enum's name and the value when
    no member has it)."""
    try:
        return enum(int(text)).name
    except ValueError:
        return f"{enum.__name__} {text}"


def specializedLabel(moduleName: str) -> str:
    """A user-facing name of a per-configuration module, every option by its enum name:
    ``warpSPHCore_density_k0_gather_m9_csr_2d_f32_<hash>`` -> ``Density (Wendland2, Gather
    supports, AllQueriesNonGhostReferences, csr, 2D float32)`` (`operators._specialized`;
    the Gradient adds its scheme, ``Symmetric gradient``, the Laplacian its own,
    ``Brookshaw Laplacian``);
    ``warpSPHCore_Search_radiusSearchKernel_2d_f32_<hash>`` -> ``Search: radiusSearchKernel
    (2D float32)``, ``warpSPHCore_Search_kernels_2d_f32_cpu_group`` -> ``Search kernels (2D
    float32)``, ``..._2d_f32_query_group`` -> ``Search kernels (2D float32, query)``
    (`util.warpContext.concreteKernel`, `neighborhood._kernels.ConcreteSignature`).

    Args:
        moduleName: the Warp module's name (returned unchanged when it is not one of these).
    """
    parts = moduleName[len(_SPECIALIZED_PREFIX):].split("_")
    scalars = {"f32": "float32", "f64": "float64"}
    try:
        if _isConfiguration(parts):
            op, kern, support, mode = parts[:4]
            rest = parts[4:-1]
            items = [_valueName(KernelFunctions, kern[1:]),
                     (f"{_SUPPORT_WORDS[support].name} supports" if support in _SUPPORT_WORDS
                      else f"{support} supports"),
                     _valueName(OperationDirection, mode[1:])]
            if rest[0][:1] == "g" and rest[0][1:].isdigit():  # the Gradient's scheme
                items.append(f"{_valueName(GradientScheme, rest[0][1:])} gradient")
                rest = rest[1:]
            if rest[0][:1] == "l" and rest[0][1:].isdigit():  # the Laplacian's scheme
                items.append(f"{_valueName(LaplacianScheme, rest[0][1:])} Laplacian")
                rest = rest[1:]
            if rest[0] == "L":  # gradient renormalization in the kernel
                items.append("renormalized")
                rest = rest[1:]
            if rest[0] in ("w", "wp"):  # every field column of a row in one thread
                items.append("row per thread" + (", plain states" if rest[0] == "wp" else ""))
                rest = rest[1:]
            items.append(rest[0])  # the traversal: csr or grid
            rest = rest[1:]
            if rest and rest[0] == "cal":
                items.append("calibrated")
            d, s = rest[-2], rest[-1]
            items.append(f"{d.upper()} {scalars.get(s, s)}")
            name = f"{op[0].upper()}{op[1:]}"
            if name.endswith("AndVJP"):  # forward and reverse kernels in one module
                name = f"{name[:-6]} + reverse"
            return f"{name} ({', '.join(items)})"
        label, kernel = parts[0], parts[1]
        if parts[-1] == "group":  # a group of declared signatures (concreteKernel)
            tail = parts[2:-1]
            if len(tail) in (2, 3):  # 2d_f32 or 2d_f32_<part> (the device says cpu/cuda)
                part = f", {tail[2]}" if len(tail) == 3 and tail[2] not in ("cpu", "cuda") \
                    else ""
                return (f"{label} kernels ({tail[0].upper()} "
                        f"{scalars.get(tail[1], tail[1])}{part})")
            return f"{label} kernels"
        tail = parts[2:-1]
        adjoint = bool(tail) and tail[-1] == "adj"
        if adjoint:
            tail = tail[:-1]
        extra = ", with its adjoint" if adjoint else ""
        if len(tail) == 2:
            return (f"{label}: {kernel} ({tail[0].upper()} {scalars.get(tail[1], tail[1])}"
                    f"{extra})")
        return f"{label}: {kernel}" + (f" ({extra[2:]})" if adjoint else "")
    except (ValueError, IndexError):
        return moduleName


def _enabled() -> bool:
    return gate("WARPSPHCORE_COMPILE_NOTICE") != "0"


def _processRank() -> int:
    """This process's rank when it is one of several (the default torch.distributed group
    once initialised, else torchrun's ``RANK``), 0 otherwise: only rank 0 announces
    compiles, so N processes do not print every notice N times."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _isCached(module, device) -> bool:
    """True when the module is loaded on `device` in this process or Warp's cache holds its
    binary for `device` (the same paths `Module.load` uses)."""
    try:
        if any(ctx == device.context for ctx, _ in module.execs):
            return True
        # an ordinary launch loads block_dim 1 on the CPU and the module's default on CUDA
        bd = 1 if device.is_cpu else module.options["block_dim"]
        ident = module.get_module_identifier(bd)
        name = module._get_compile_output_name(device, block_dim=bd)
        return os.path.exists(os.path.join(wp.config.kernel_cache_dir, ident, name))
    except Exception:  # a Warp internal changed: assume cached rather than say nonsense
        return True


def _say(text: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)
    except Exception:  # pragma: no cover (tqdm is a dependency)
        print(text, file=sys.stderr, flush=True)


def announceCompile(kernel, device) -> None:
    """Before a launch: the first time this process uses `kernel`'s module on `device`, say
    so on stderr if Warp is about to compile it (nothing when its binary is cached).

    Args:
        kernel: the Warp kernel about to be launched.
        device: the Warp device (or its alias) of the launch.
    """
    module = getattr(kernel, "module", None)
    if module is None:
        return
    key = (module.name, str(device))
    if key in _SEEN:
        return
    with _LOCK:
        if key in _SEEN:
            return
        _SEEN.add(key)
    if not module.name.startswith("warpSPHCore") or not _enabled() or _processRank() != 0:
        return
    dev = wp.get_device(device)
    if _isCached(module, dev):
        return
    if module.name.startswith(_SPECIALIZED_PREFIX):
        label = specializedLabel(module.name)
        configuration = _isConfiguration(module.name[len(_SPECIALIZED_PREFIX):].split("_"))
        what = (f"the {label} kernel specialised for this call's configuration"
                if configuration else f"the {label}" if " kernels" in label
                else f"the {label} kernel")
    else:
        what = (f"the Warp kernels of {moduleLabel(module.name)} ({module.name}, "
                "float32/float64 x 1D/2D/3D)")
    _say(f"warpSPHCore: compiling {what} for {dev.alias}. This happens once: the result is "
         f"cached in {wp.config.kernel_cache_dir}. `warpsph precompile` does it ahead of time.")
