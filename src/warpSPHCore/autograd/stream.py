"""Torch and Warp on one CUDA stream, and CUDA graph capture of mixed torch/Warp work.

Every launch of this library already runs on torch's *current* stream for the tensors'
device (looked up per launch), so ordering between torch and Warp work follows from sharing
the stream. The two context managers here extend that to user code and to graph capture:

* `torchWarpStream(device)`: inside the scope, Warp's current stream for `device` is torch's
  current stream, so the user's own Warp calls follow torch as well. Nestable; the previous
  Warp stream is restored on exit. For a CPU device it is a no-op (Warp's CPU launches are
  synchronous and have no streams).
* `torchWarpCapture(graph, **graph_kwargs)`: entered inside a `torchWarpStream(device)` scope,
  it enters ``torch.cuda.graph(graph, **graph_kwargs)`` (which makes a capture side stream
  current), makes that stream Warp's current stream, registers the capture torch started with
  Warp (``wp.capture_begin(..., external=True)`` / ``wp.capture_end``), and disables Python's
  cyclic garbage collector until the capture ends (restoring its previous state even when
  the block raises), so that older Warp resources are not freed mid-capture. Without CUDA, or
  for a CPU device, it raises `RuntimeError`.

What can be captured (docs/gpu.md): operator calls, explicit `warpOperationJVP` calls and the
Density HVP with a prebuilt neighbour structure (no host readback, no data-dependent shape),
after every kernel has been warmed (loaded) in each scalar type and dimension the capture
uses. Not capturable: neighbour searches (one readback of the edge count) and the dual-tensor
route when an output is non-empty (its liveness mask is read back). Replays read updated
kinds in place; a change of ``operationMode`` needs a new capture.
"""

from __future__ import annotations

import contextlib
import gc
import threading

import torch
import warp as wp

from ..util.warpContext import ensureWarp, warpDevice
from .launcher import torchStreamAsWarp

__all__ = ["torchWarpStream", "torchWarpCapture"]

_local = threading.local()  # the torchWarpStream scopes entered on this thread (a stack)


def _scopes():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _cudaDevice(device):
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


@contextlib.contextmanager
def torchWarpStream(device):
    """Make torch's current stream Warp's current stream for `device` (module docstring).

    Args:
        device: a torch device (``"cuda:0"``, ``torch.device``) or ``"cpu"``.

    Yields:
        The Warp stream (None for a CPU device).
    """
    dev = torch.device(device)
    if dev.type == "cpu":
        _scopes().append(dev)
        try:
            yield None
        finally:
            _scopes().pop()
        return
    if dev.type != "cuda":
        raise ValueError(f"torchWarpStream: device {device!r} is not supported; accepted: "
                         "cpu, cuda[:k]")
    if not torch.cuda.is_available():
        raise RuntimeError("torchWarpStream: CUDA is not available")
    ensureWarp()
    dev = _cudaDevice(dev)
    wdev = wp.get_device(warpDevice(dev))
    stream = torchStreamAsWarp(wdev)
    previous = wdev.stream
    # no device-side sync: the work is ordered by torch's stream itself
    wdev.set_stream(stream, sync=False)
    _scopes().append(dev)
    try:
        yield stream
    finally:
        _scopes().pop()
        wdev.set_stream(previous, sync=False)


_CAPTURE_MODES = {"global": "GLOBAL", "thread_local": "THREAD_LOCAL", "relaxed": "RELAXED"}


@contextlib.contextmanager
def torchWarpCapture(graph, **graph_kwargs):
    """Capture mixed torch/Warp work into the `torch.cuda.CUDAGraph` `graph` (module
    docstring). Must be entered inside a `torchWarpStream` scope for a CUDA device.

    Args:
        graph: a ``torch.cuda.CUDAGraph``.
        **graph_kwargs: passed to ``torch.cuda.graph`` (``pool``, ``stream``,
            ``capture_error_mode``).

    Raises:
        RuntimeError: no CUDA, no enclosing `torchWarpStream` scope, or a CPU scope.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("torchWarpCapture: CUDA graph capture needs a CUDA device; CUDA is "
                           "not available (on the CPU, call the operators directly)")
    scopes = _scopes()
    if not scopes:
        raise RuntimeError("torchWarpCapture: enter it inside a torchWarpStream(device) scope")
    dev = scopes[-1]
    if dev.type != "cuda":
        raise RuntimeError("torchWarpCapture: the enclosing torchWarpStream scope is for "
                           f"{dev}; graph capture needs a CUDA device")
    mode = getattr(wp.CaptureMode, _CAPTURE_MODES.get(
        graph_kwargs.get("capture_error_mode", "global"), "GLOBAL"))
    wdev = wp.get_device(warpDevice(dev))
    gcWasEnabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.device(dev), torch.cuda.graph(graph, **graph_kwargs):
            stream = torchStreamAsWarp(wdev)  # the capture side stream torch made current
            previous = wdev.stream
            wdev.set_stream(stream, sync=False)
            wp.capture_begin(device=wdev, stream=stream, external=True, capture_mode=mode)
            try:
                yield graph
            finally:
                try:
                    wp.capture_end(device=wdev, stream=stream)
                finally:
                    wdev.set_stream(previous, sync=False)
    finally:
        if gcWasEnabled:
            gc.enable()
