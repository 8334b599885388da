"""Warp initialisation and device/stream helpers shared by every launch site.

Every launch passes `device=` explicitly and, on CUDA, runs on PyTorch's current stream for
that device (pitfalls W8, W67).
"""

from __future__ import annotations

import functools
import os

import torch
import warp as wp

__all__ = ["ensureWarp", "warpDevice", "warpStream", "launch"]


@functools.cache
def ensureWarp() -> None:
    """Initialise Warp once, quietly (greeting and module-load lines off) unless
    WARPSPHCORE_VERBOSE_WARP=1."""
    if os.environ.get("WARPSPHCORE_VERBOSE_WARP", "0") != "1":
        if hasattr(wp, "LOG_WARNING") and hasattr(wp.config, "log_level"):
            wp.config.log_level = wp.LOG_WARNING
        wp.config.quiet = True
    wp.init()


@functools.cache
def _warpDeviceName(torchDevice: str) -> str:
    if torchDevice == "cpu":
        return "cpu"
    if torchDevice.startswith("cuda"):
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
    wp.launch(
        kernel,
        dim=dim,
        inputs=inputs,
        outputs=outputs or [],
        device=wdev,
        stream=stream,
        record_tape=record_tape,
    )
