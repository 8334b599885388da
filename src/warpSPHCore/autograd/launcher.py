"""Torch <-> Warp conversion and the one differentiable launch site.

* `castTorchToWarpAsBuiltins(t)`: the Warp view of a tensor in the kernel ABI's dtypes —
  float rank 1 -> scalar array, rank 2 ``[N, K]`` -> array of ``vector(K)``, rank 3
  ``[N, A, B]`` -> array of ``matrix(A, B)``; integer/bool rank 1 -> plain array, int32
  ``[N, 2]`` -> ``vec2i``, int32 ``[N, 3]`` -> ``vec3i``, int64 ``[N, 3]`` -> ``vec3l``
  (the hash-grid tables), any other integer rank 2 -> plain 2-d array.
  Higher float ranks raise `TypeError` (`operations.py` flattens fields first).
* `castTorchToWarp(t, dtype=None)`: plain n-d array of the tensor's scalar type, or the
  explicitly requested Warp dtype.
* `allocateTorchWarp(shape, dtype, device, requires_grad)`: a zero-filled output on torch's
  caching allocator plus its zero-copy Warp view; with ``requires_grad`` the view owns a
  torch-allocated zero adjoint buffer (never the caller's ``grad_output``, which Warp would
  consume and zero in place).
* `launch_kernel(kernel, output_shape, output_dtype, *args, numThreads=None, lanes=None)`:
  allocates the output(s), launches on the inputs' device and torch's current stream, and
  returns the output tensor(s), each carrying its Warp view in the courier attribute
  ``_warp_array`` (the bridge moves it to ``ctx`` and deletes the attribute: left in
  place it would close a tensor <-> view reference cycle that only the cyclic GC frees).

Both casts build the view from ``t.detach()`` (a view of the undetached tensor would put the
conversion into torch's graph) with canonical strides (``wp.from_torch`` rejects some
degenerate ones); they never cache — caching is `util.fieldRegistry.acquireView`'s job. Memo
tables are keyed by ``str(device)`` because ``wp.Device`` is unhashable.
"""

from __future__ import annotations

import functools

import torch
import warp as wp

from ..kernels.evaluation import registerCustomAdjoints
from ..util.compileNotice import announceCompile
from ..util.conversion import (  # noqa: F401  (re-exported: the bridge's casts)
    _asBuiltins,
    castTorchToWarp,
    castTorchToWarpAsBuiltins,
    warpDtypeAsBuiltins,
)
from ..util.launchCapture import CapturedLaunch, activeCapture, noteForeignLaunch
from ..util.warpContext import ensureWarp

__all__ = [
    "launch_kernel",
    "launch_reverse",
    "replayLaunch",
    "allocateTorchWarp",
    "castTorchToWarpAsBuiltins",
    "castTorchToWarp",
    "warpDtypeAsBuiltins",
    "outputIsFloat",
    "torchStreamAsWarp",
    "deviceOfArgs",
    "COURIER",
]

#: Attribute through which `launch_kernel` hands an output's Warp view to the bridge.
COURIER = "_warp_array"

def outputIsFloat(dtype) -> bool:
    """True for Warp float scalar/vector/matrix dtypes (differentiable outputs)."""
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    return scalar in (wp.float16, wp.float32, wp.float64)


@functools.cache
def _resolveOutput(dtype, deviceKey: str):
    """(Warp dtype, device) -> (torch dtype, torch device, trailing shape), memoised by str."""
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    trailing = tuple(int(s) for s in getattr(dtype, "_shape_", ()))
    return wp.dtype_to_torch(scalar), wp.device_to_torch(deviceKey), trailing


def allocateTorchWarp(shape, dtype, device, requires_grad: bool):
    """Allocate a zero output: (torch tensor on torch's caching allocator, its Warp view).

    ``shape`` is the Warp array shape (int or tuple); the torch tensor additionally carries
    the trailing component axes of a vector/matrix ``dtype``. With ``requires_grad`` (float
    dtypes only) the view owns a zero adjoint buffer that no caller tensor aliases.

    Args:
        shape: Warp array shape, an int or a tuple of ints.
        dtype: Warp dtype of the output (scalar, vector or matrix).
        device: the torch / Warp device of the allocation.
        requires_grad: allocate an adjoint buffer (float dtypes only).

    Returns:
        ``(tensor, array)``: the zero torch tensor and its Warp view.
    """
    ensureWarp()
    shape = tuple(int(s) for s in shape) if isinstance(shape, (tuple, list, torch.Size)) \
        else (int(shape),)
    torchDtype, torchDevice, trailing = _resolveOutput(dtype, str(wp.get_device(device)))
    out = torch.zeros(shape + trailing, dtype=torchDtype, device=torchDevice)
    # The view wraps a detached alias: wp.from_torch keeps a reference to the tensor it is
    # given, and out -> grad_fn -> ctx.output_warp -> view -> out would be a reference cycle
    # that only the cyclic GC can break.
    alias = out.detach()
    if requires_grad and outputIsFloat(dtype):
        view = wp.from_torch(alias, dtype=dtype, requires_grad=True, grad=torch.zeros_like(out))
    else:
        view = wp.from_torch(alias, dtype=dtype, requires_grad=False)
    return out, view


def structFields(a):
    """The field declarations of a Warp struct instance (a dict by name), None otherwise."""
    fields = getattr(getattr(a, "_cls", None), "vars", None)
    return fields if isinstance(fields, dict) else None


def _arrayDevice(a):
    if isinstance(a, wp.array):
        return a.device
    fields = structFields(a)
    if fields is not None:
        for name in fields:
            dev = _arrayDevice(getattr(a, name, None))
            if dev is not None:
                return dev
    return None


def deviceOfArgs(args):
    """Device of the first `wp.array` argument, else of the first array inside a struct."""
    for a in args:
        if isinstance(a, wp.array):
            return a.device
    for a in args:
        dev = _arrayDevice(a)
        if dev is not None:
            return dev
    raise ValueError(
        "launch_kernel: cannot infer the device: no wp.array among the arguments or their "
        "struct fields"
    )


_STREAMS: dict = {}


def torchStreamAsWarp(device):
    """Torch's current stream for a CUDA `device` as a Warp stream (memoised per handle);
    None on CPU (every launch of the library runs on torch's current stream)."""
    dev = wp.get_device(device)
    if not dev.is_cuda:
        return None
    tstream = torch.cuda.current_stream(wp.device_to_torch(dev))
    key = (str(dev), int(tstream.cuda_stream))
    s = _STREAMS.get(key)
    if s is None:
        s = wp.stream_from_torch(tstream)
        _STREAMS[key] = s
    return s


def _tapeRecording() -> bool:
    """Whether a `wp.Tape` is recording (a launch now would be recorded on it)."""
    runtime = getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)
    return getattr(runtime, "tape", None) is not None


def _isMulti(output_dtype) -> bool:
    return isinstance(output_dtype, (tuple, list))


def _registerAdjointsFor(kernel) -> None:
    """Register the custom adjoints of the kernel functions
    (`kernels.evaluation.registerCustomAdjoints`) before `kernel`'s module can be built,
    unless the kernel declares ``callsKernelFunctions = False`` (the per-configuration
    specialised kernels, `operators._specialized`, which use `kernels.specialized`): a first
    result on the specialised kernels never pays for the registration."""
    if getattr(kernel, "callsKernelFunctions", True):
        registerCustomAdjoints()


def launch_kernel(kernel, output_shape, output_dtype, *args, numThreads=None, lanes=None,
                  requires_grad: bool = False, mode: str = "launch", tape=None):
    """Allocate the output(s), launch `kernel(*args, *outputs)`, return the output tensor(s).

    Args:
        kernel: the Warp kernel.
        output_shape: Warp shape of the output (int or tuple), or a tuple of shapes when
            ``output_dtype`` is a tuple/list (multi-output kernels).
        output_dtype: Warp dtype of the output, or a tuple/list of dtypes.
        *args: the kernel's positional inputs (structs, arrays, scalars) before the outputs.
        numThreads: launch dimension (int or tuple); default the first output's leading size.
        lanes: lanes per thread of a tiled kernel (``dim=[n, lanes]``, ``block_dim=lanes``);
            None or 1 launches one thread per item.
        requires_grad: float outputs own a zero adjoint buffer (the bridge also enforces this
            after the launch, so a wrapped launcher may omit it).
        mode: ``"launch"`` (run it); ``"record"``: record the launch on `tape` without
            running it (the bridge's backward, `StateAwareWarpFunction`: the forward already
            ran the same launch); ``"allocate"``: only allocate the outputs.
        tape: the `wp.Tape` of ``mode="record"``.

    The device is the first `wp.array` argument's (else a struct argument's array field's);
    the launch passes ``device=`` and torch's current stream. A launch with zero
    threads is skipped and the zero-filled output(s) returned. Each returned tensor carries
    its Warp view as the courier attribute ``_warp_array``. The kernel functions' custom
    adjoints are registered before a kernel that may call them is launched
    (`_registerAdjointsFor`).
    """
    if mode not in ("launch", "record", "allocate"):
        raise ValueError(f"launch_kernel: mode={mode!r}; accepted: launch, record, allocate")
    ensureWarp()
    _registerAdjointsFor(kernel)
    device = deviceOfArgs(args)
    if _isMulti(output_dtype):
        shapes, dtypes = tuple(output_shape), tuple(output_dtype)
        if len(shapes) != len(dtypes):
            raise ValueError(
                f"launch_kernel: {len(dtypes)} output dtypes but {len(shapes)} output shapes"
            )
    else:
        shapes, dtypes = (output_shape,), (output_dtype,)
    outs, views = [], []
    for shp, dt in zip(shapes, dtypes):
        o, v = allocateTorchWarp(shp, dt, device, requires_grad)
        outs.append(o)
        views.append(v)
    if numThreads is None:
        first = shapes[0]
        numThreads = int(tuple(first)[0]) if isinstance(first, (tuple, list, torch.Size)) \
            else int(first)
    if isinstance(numThreads, (tuple, list)):
        dims = tuple(int(n) for n in numThreads)
    else:
        dims = (int(numThreads),)
    if mode != "allocate" and all(n > 0 for n in dims):
        blockDim = None
        if lanes is not None and int(lanes) > 1:
            dims = dims + (int(lanes),)
            blockDim = int(lanes)
        if mode == "record":
            # what wp.launch records on an active tape, without the launch
            tape.record_launch(kernel, dims if len(dims) > 1 else dims[0], 0, list(args),
                               views, wp.get_device(device), blockDim)
            for o, v in zip(outs, views):
                setattr(o, COURIER, v)
            return tuple(outs) if _isMulti(output_dtype) else outs[0]
        announceCompile(kernel, device)
        capture = activeCapture()
        stream = torchStreamAsWarp(device)
        if capture is not None and _tapeRecording():
            capture.foreign += 1  # a taped launch is never replayed from a plan
            capture = None
        command = wp.launch(
            kernel,
            dim=dims if len(dims) > 1 else dims[0],
            inputs=list(args),
            outputs=views,
            device=device,
            stream=stream,
            block_dim=blockDim,
            record_cmd=capture is not None,
        )
        if capture is not None:
            # the command keeps raw pointers only: the plan keeps the inputs alive itself,
            # and the recorded output view is not retained (each replay allocates its own)
            command.fwd_args = None
            command.launch(stream)
            capture.launches.append(CapturedLaunch(
                command, list(args), [(tuple(v.shape), v.dtype) for v in views], len(args)))
    elif activeCapture() is not None:
        activeCapture().foreign += 1  # nothing launched: keep the call on the full path
    for o, v in zip(outs, views):
        setattr(o, COURIER, v)
    return tuple(outs) if _isMulti(output_dtype) else outs[0]


def replayLaunch(command, numInputs: int, outputs) -> None:
    """Replay a launch recorded by `launch_kernel` under a launch capture (a call plan,
    `autograd.callPlan`): its output parameters are pointed at `outputs` (fresh tensors of
    the recorded shapes and dtypes, in order), then it runs on torch's current stream.

    Args:
        command: the recorded ``wp.Launch``.
        numInputs: how many of its parameters precede the outputs.
        outputs: the output tensors.
    """
    params = command.params
    first = 1 + numInputs  # params[0] holds the launch bounds
    for k, o in enumerate(outputs):
        params[first + k].data = o.data_ptr()
    device = command.device
    command.launch(torchStreamAsWarp(device) if device.is_cuda else None)


def launch_reverse(kernel, dim: int, inputs, device) -> None:
    """Launch a hand-written reverse kernel (`reverse.recordReverse`, at backward time): no
    outputs (it scatters into gradient buffers), explicit ``device=`` and torch's current
    stream; nothing for ``dim == 0``.

    Args:
        kernel: the reverse kernel.
        dim: thread count.
        inputs: its arguments.
        device: the call's Warp device.
    """
    noteForeignLaunch()
    if int(dim) > 0:
        _registerAdjointsFor(kernel)
        announceCompile(kernel, device)
        wp.launch(kernel, dim=int(dim), inputs=list(inputs), device=device,
                  stream=torchStreamAsWarp(device))
