"""Warp initialisation and device/stream helpers shared by every launch site.

Every launch passes `device=` explicitly and, on CUDA, runs on PyTorch's current stream for
that device (without `device=`, Warp launches on its own default device; on its own stream,
a launch would be unordered with the surrounding torch work).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
import types

import torch
import warp as wp

from .compileNotice import announceCompile, moduleLabel
from .launchCapture import noteForeignLaunch

__all__ = ["ensureWarp", "warpDevice", "warpStream", "launch", "concreteKernel"]


# Printed by Warp's native library (fprintf to stderr, no Warp setting turns it off) when
# wp.init() finds no libcuda. On a machine where torch sees no CUDA either it is withheld, kept
# here and shown in the error raised when a CUDA device is asked for (_warpDeviceName).
_NO_DRIVER = "Could not find or load the NVIDIA CUDA driver"
_withheldInitLines: list[str] = []


def _initWithheldNoDriverLine() -> None:
    """wp.init() with file descriptor 2 sent to a temporary file; everything Warp wrote there is
    written back to stderr except the no-driver line, which is kept in _withheldInitLines."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, AttributeError, ValueError):  # no usable fd 2 (closed, embedded)
        wp.init()
        return
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            try:
                wp.init()
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
        finally:
            tmp.seek(0)
            text = tmp.read().decode("utf-8", errors="replace")
            kept = []
            for line in text.splitlines(keepends=True):
                (_withheldInitLines if _NO_DRIVER in line else kept).append(line)
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


@functools.cache
def ensureWarp() -> None:
    """Initialise Warp once, quietly unless WARPSPHCORE_VERBOSE_WARP=1: the greeting and the
    module-load lines are off, and on a machine without CUDA (torch sees none) Warp's native
    "Could not find or load the NVIDIA CUDA driver" line is withheld; it is part of the error
    raised when a CUDA device is asked for. Other output of Warp's initialisation passes."""
    if os.environ.get("WARPSPHCORE_VERBOSE_WARP", "0") == "1":
        wp.init()
        return
    if hasattr(wp, "LOG_WARNING") and hasattr(wp.config, "log_level"):
        wp.config.log_level = wp.LOG_WARNING
    wp.config.quiet = True
    if torch.cuda.is_available():
        wp.init()  # CUDA is there: whatever Warp says about it is worth reading
    else:
        _initWithheldNoDriverLine()


@functools.cache
def _warpDeviceName(torchDevice: str) -> str:
    if torchDevice == "cpu":
        return "cpu"
    if torchDevice.startswith("cuda"):
        if not wp.is_cuda_available():
            said = " ".join(line.strip() for line in _withheldInitLines)
            raise RuntimeError(
                f"device {torchDevice!r}: Warp has no CUDA device"
                + (f" ({said})" if said else "")
                + "; accepted: cpu, or a CUDA device with the NVIDIA driver installed"
            )
        idx = torchDevice.split(":")[1] if ":" in torchDevice else str(torch.cuda.current_device())
        return f"cuda:{idx}"
    raise ValueError(f"device {torchDevice!r} is not supported; accepted: cpu, cuda[:k]")


def warpDevice(device) -> str:
    """Warp device alias for a torch device (keyed by string: wp.Device is unhashable)."""
    ensureWarp()
    return _warpDeviceName(str(torch.device(device)))


def warpStream(device):
    """PyTorch's current stream for `device` as a Warp stream, or None on CPU."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return wp.stream_from_torch(torch.cuda.current_stream(dev))


_CONCRETE: dict = {}
_REQUESTS: dict = {}  # (signature key, group) of a request -> its copy in _CONCRETE
_CONCRETE_LOCK = threading.Lock()


def _shortName(annotations: dict) -> str:
    """``2d_f32`` from the first float vector among the argument types (looking into a
    struct's ``positions`` field), else ``f32``/``f64`` from the first float array, else
    ``any``."""
    def vectorOf(t):
        fields = getattr(t, "vars", None)
        if isinstance(fields, dict) and "positions" in fields:
            t = fields["positions"].type
        dtype = getattr(t, "dtype", t)
        if wp.types.type_is_vector(dtype) and dtype._wp_scalar_type_ in (wp.float32, wp.float64):
            return dtype
        return None

    for t in annotations.values():
        v = vectorOf(t)
        if v is not None:
            return f"{v._length_}d_{'f32' if v._wp_scalar_type_ == wp.float32 else 'f64'}"
    for t in annotations.values():
        dtype = getattr(t, "dtype", t)
        if dtype in (wp.float32, wp.float64):
            return "f32" if dtype == wp.float32 else "f64"
    return "any"


def concreteKernel(kernel, annotations: dict | None = None, args=None, backward: bool = False,
                   group: str | None = None):
    """A copy of `kernel` with concrete argument types in a small Warp module (no adjoint
    code unless `backward`), made once per signature.

    The types come from `annotations` (overrides of the kernel's own annotations, e.g. one
    ``wp.overload`` signature) or are inferred from the launch arguments `args`. A module of
    generic kernels with every (scalar type, dimension) overload declared compiles all of
    them, with adjoints, the first time any one is launched; the copy compiles only what the
    launch needs (`warpSPHCore.precompile` builds the same copies ahead of time).

    Grouping: when the kernel's Python module declares ``CONCRETE_SIGNATURES`` (the
    neighbour search: entries with ``kernel``, ``types`` and a group ``tag``) and the
    signature is one of them, the copies of every declared signature with the same tag share
    one module, built on the first request: a search launches several of them in a row, and
    one compile of the group costs less than one per kernel (about 0.4 s of a cold first
    search on 2 cores). A signature declared under several tags (one whose types fix no
    dimension) is looked up under `group`. Other kernels get a module of their own
    (``module="unique"``)."""
    resolved = _resolvedTypes(kernel, annotations, args)
    request = _concreteKey(kernel, resolved, backward) + (group,)
    found = _REQUESTS.get(request)
    if found is not None:
        return found
    declared = None if backward else _declaredEntry(kernel, resolved, group)
    key = request[:-1] + ((declared.tag,) if declared else ())
    with _CONCRETE_LOCK:
        found = _CONCRETE.get(key)
        if found is None:
            if declared is None:
                found = _concreteCopy(kernel, resolved, backward, "unique")
                _CONCRETE[key] = found
            else:
                moduleName = _groupModuleName(kernel, declared.tag)
                for member in _declaredSignatures(kernel):
                    if member.tag != declared.tag:
                        continue
                    types_ = {**member.kernel.adj.arg_types, **member.types}
                    memberKey = _concreteKey(member.kernel, types_, False) + (member.tag,)
                    if memberKey not in _CONCRETE:
                        _CONCRETE[memberKey] = _concreteCopy(member.kernel, types_, False,
                                                             moduleName)
                found = _CONCRETE[key]
        _REQUESTS[request] = found
    return found


def _resolvedTypes(kernel, annotations, args) -> dict:
    names = list(kernel.adj.arg_types.keys())
    if annotations is not None:
        return {**kernel.adj.arg_types, **annotations}
    if kernel.is_generic:
        return dict(zip(names, kernel.infer_argument_types(list(args)), strict=True))
    return dict(kernel.adj.arg_types)


def _concreteKey(kernel, resolved: dict, backward: bool) -> tuple:
    return (kernel.module.name, kernel.key, bool(backward),
            tuple(wp.types.type_repr(resolved[n]) for n in kernel.adj.arg_types))


def _concreteCopy(kernel, resolved: dict, backward: bool, module):
    fn = kernel.func
    label = moduleLabel(kernel.module.name).replace(" ", "").replace("_", "")
    name = f"warpSPHCore_{label}_{kernel.key}_{_shortName(resolved)}"
    if backward:
        name += "_adj"
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__,
                              fn.__closure__)
    copy.__qualname__ = name
    copy.__annotations__ = dict(resolved)
    return wp.kernel(copy, enable_backward=bool(backward), module=module)


def _declaredSignatures(kernel) -> list:
    """The ``CONCRETE_SIGNATURES`` of `kernel`'s Python module (empty when none)."""
    pyModule = sys.modules.get(getattr(kernel.func, "__module__", ""), None)
    return getattr(pyModule, "CONCRETE_SIGNATURES", None) or []


def _declaredEntry(kernel, resolved: dict, group: str | None):
    """The declared signature (`concreteKernel`) of `kernel` with the types `resolved`: the
    one tagged `group` when several match, else the only match; None when the kernel's
    Python module declares none or the signature is not among them."""
    wanted = _concreteKey(kernel, resolved, False)
    matches = [e for e in _declaredSignatures(kernel) if e.kernel is kernel
               and _concreteKey(kernel, {**kernel.adj.arg_types, **e.types}, False) == wanted]
    if len(matches) > 1:
        matches = [e for e in matches if e.tag == group]
        if len(matches) != 1:
            raise ValueError(f"concreteKernel: {kernel.key} is declared in several groups; "
                             f"name one of them with group= (got {group!r})")
    return matches[0] if matches else None


def _groupModuleName(kernel, tag: str) -> str:
    label = moduleLabel(kernel.module.name).replace(" ", "").replace("_", "")
    return f"warpSPHCore_{label}_kernels_{tag}_group"


def launch(kernel, dim, inputs, device, outputs=None, record_tape=False, group=None):
    """Launch a non-differentiable Warp kernel on `device` and torch's current stream.

    Only the neighbour search and other frozen (non-differentiable) structure builders use
    this helper; every differentiable launch goes through the autograd bridge. The kernel
    runs as its `concreteKernel` copy (one small module per signature, no adjoint code)
    unless `record_tape` asks for a differentiable launch; `group` names the declared group
    of a kernel declared in several (`concreteKernel`, the search's
    `neighborhood._kernels.ConcreteSignature`).
    """
    wdev = warpDevice(device)
    stream = warpStream(device)
    outputs = outputs or []
    if not record_tape:
        kernel = concreteKernel(kernel, args=list(inputs) + list(outputs), group=group)
    noteForeignLaunch()
    announceCompile(kernel, wdev)
    wp.launch(
        kernel,
        dim=dim,
        inputs=inputs,
        outputs=outputs,
        device=wdev,
        stream=stream,
        record_tape=record_tape,
    )
