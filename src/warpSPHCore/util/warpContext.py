"""Warp initialisation and device/stream helpers shared by every launch site.

Every launch passes `device=` explicitly and, on CUDA, runs on PyTorch's current stream for
that device (pitfalls W8, W67).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile

import torch
import warp as wp

from .compileNotice import announceCompile

__all__ = ["ensureWarp", "warpDevice", "warpStream", "launch"]


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
    """Warp device alias for a torch device (keyed by string: wp.Device is unhashable, W28)."""
    ensureWarp()
    return _warpDeviceName(str(torch.device(device)))


def warpStream(device):
    """PyTorch's current stream for `device` as a Warp stream, or None on CPU."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return wp.stream_from_torch(torch.cuda.current_stream(dev))


def launch(kernel, dim, inputs, device, outputs=None, record_tape=False):
    """Launch a non-differentiable Warp kernel on `device` and torch's current stream.

    Only the neighbour search and other frozen (non-differentiable) structure builders use
    this helper; every differentiable launch goes through the autograd bridge.
    """
    wdev = warpDevice(device)
    stream = warpStream(device)
    announceCompile(kernel, wdev)
    wp.launch(
        kernel,
        dim=dim,
        inputs=inputs,
        outputs=outputs or [],
        device=wdev,
        stream=stream,
        record_tape=record_tape,
    )
