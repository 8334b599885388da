"""Call plans: a repeated no-grad operator call replayed as one recorded launch.

The fourth caching layer, after the ``wp.array`` view cache, the reuse of persistent Warp
structs on the no-grad path (the struct bundle) and the placeholder cache. The first time an
eligible call runs, the full path (validation, state extraction, views, structs, the
specialised kernel) runs under `util.launchCapture.capturing`, and its single kernel launch
is recorded as a ``wp.Launch`` command. The plan keeps that command and its arguments; a
later call whose arguments are *the same objects in the same state* replays it: it allocates
the output(s), points the command's output parameters at them and launches. Validation,
extraction, view lookups and struct packing are skipped: they would produce the same
launch.

What "the same" means (the key, `fingerprint`): every argument is walked down through its
dataclass fields (states, domain, adjacency, corrections, properties) to the leaves; a
tensor leaf contributes its identity, version counter (bumped by every in-place write),
data pointer, shape, dtype, device and ``requires_grad``; every other leaf its value. The
key also holds the grad mode, the specialisation switch and the gates' generation
(`util.gates.refreshGates` starts a new one). So an in-place write to any input, a field of
a state reassigned, a tensor that now requires grad, or a changed setting all miss, and the
call takes the full path (and records a new plan). A plan never outlives its inputs: it
holds a weak reference to each input tensor, and the death of any of them drops the plan;
its strong references are only to the buffers the command points at.

A plan is recorded on the *second* sight of a key, not the first: a simulation loop that
builds new tensors every step never repeats a key, and recording costs a capture and the
struct bundle's reuse. The first sight only notes the key with weak
references to its tensors (so a recycled ``id`` of a dead tensor is not taken for a repeat);
a key whose recording was declined is remembered and not tried again. At most `MAX_SEEN`
keys are noted.

Eligible: no-grad calls (grad mode off, or no tensor requiring grad), no forward-mode AD
level open, no `wp.Tape` or Warp graph capture recording, profiling regions and eager error
checks off, and a call that made exactly one launch through the bridge (so not the
on-the-fly grid of ``adjacency=None``, and never a call with a hand-written reverse
kernel). Results are bitwise those of the full path: the same kernel runs on the same
buffers. At most `MAX_PLANS` plans are kept (oldest dropped first).

Gate: ``WARPSPHCORE_CALL_PLANS=0`` (`util.gates`) or `setCallPlans(False)` turns the layer off.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import weakref

import torch
import torch.autograd.forward_ad as fwAD
import warp as wp

from ..util.errorFlags import eagerErrorChecks
from ..util.gates import gate, gatesGeneration
from ..util.launchCapture import capturing
from ..util.profiling import profilingEnabled
from .launcher import _resolveOutput, replayLaunch
from .specialize import specializationEnabled

__all__ = ["callPlansEnabled", "setCallPlans", "clearCallPlans", "callPlanStats",
           "fingerprint", "lookupPlan", "seenBefore", "recordPlan", "MAX_PLANS", "MAX_SEEN"]

#: plans kept at once (the oldest is dropped first)
MAX_PLANS = 64
#: keys noted on first sight (the oldest is forgotten first)
MAX_SEEN = 256

_ENABLED = [True]
_PLANS: dict = {}
_SEEN: dict = {}
_DECLINED = object()
_LOCK = threading.Lock()
_STATS = {"hits": 0, "recorded": 0, "declined": 0}


def callPlansEnabled() -> bool:
    """Whether repeated no-grad calls are replayed from call plans."""
    return _ENABLED[0] and gate("WARPSPHCORE_CALL_PLANS") != "0"


def setCallPlans(enabled: bool) -> bool:
    """Turn call plans on or off for this process (dropping the kept ones); returns the
    previous setting."""
    previous = _ENABLED[0]
    _ENABLED[0] = bool(enabled)
    clearCallPlans()
    return previous


def clearCallPlans() -> None:
    """Drop every kept plan (and the buffers they keep alive) and every noted key."""
    with _LOCK:
        _PLANS.clear()
        _SEEN.clear()


def callPlanStats() -> dict:
    """Counters since import: ``hits`` (calls replayed), ``recorded`` (plans made),
    ``declined`` (eligible calls whose launches could not be planned), ``kept`` (plans
    held now)."""
    return dict(_STATS, kept=len(_PLANS))


# --------------------------------------------------------------------------- the key

_FIELDS: dict = {}
_Tensor = torch.Tensor


def _fieldNames(cls):
    """The fields of a dataclass that an operator call reads: ``cls.OPERATOR_FIELDS`` where
    the class declares it (the adjacency types), else all its fields; () for anything else."""
    names = _FIELDS.get(cls)
    if names is None:
        names = getattr(cls, "OPERATOR_FIELDS", None)
        if names is None:
            names = (tuple(f.name for f in dataclasses.fields(cls))
                     if dataclasses.is_dataclass(cls) else ())
        _FIELDS[cls] = tuple(names)
        names = _FIELDS[cls]
    return names


_LEAF_TYPES = {bool, int, float, str, type(None)}


def _walk(obj, leaves: list, tensors: list) -> bool:
    """Append the leaves of `obj` (module docstring); False when `obj` holds something the
    key cannot describe (the call then takes the full path)."""
    cls = type(obj)
    if cls is tuple or cls is list:
        leaves.append(len(obj))
        items = obj
    else:
        names = _fieldNames(cls)
        if not names:
            return False
        leaves.append(cls)
        leaves.append(id(obj))
        items = [getattr(obj, name) for name in names]
    for item in items:
        cls = type(item)
        if cls in _LEAF_TYPES:
            leaves.append(item)
        elif issubclass(cls, _Tensor):
            try:
                ptr = item.data_ptr()
            except RuntimeError:  # no storage (functorch wrappers, fake tensors): not planned
                return False
            leaves.append((id(item), item._version, ptr, item.shape, item.dtype,
                           item.requires_grad))
            tensors.append(item)
        elif issubclass(cls, enum.Enum):
            _LEAF_TYPES.add(cls)
            leaves.append(item)
        elif not _walk(item, leaves, tensors):
            return False
    return True


def fingerprint(args: tuple):
    """``(key, tensors)`` of a call's arguments when the call is eligible for a plan
    (module docstring), else None."""
    if (not callPlansEnabled() or fwAD._current_level >= 0 or eagerErrorChecks()
            or profilingEnabled() or _tapeOrCaptureActive()):
        return None
    leaves: list = [torch.is_grad_enabled(), specializationEnabled(), gatesGeneration()]
    tensors: list = []
    if not _walk(args, leaves, tensors):
        return None
    if leaves[0] and any(t.requires_grad for t in tensors):
        return None
    if tensors and tensors[0].is_cuda:
        leaves.append(torch.cuda.current_stream(tensors[0].device).cuda_stream)
    try:
        key = tuple(leaves)
        hash(key)
    except TypeError:
        return None
    return key, tensors


def _tapeOrCaptureActive() -> bool:
    runtime = getattr(getattr(getattr(wp, "_src", None), "context", None), "runtime", None)
    if runtime is None:
        return False
    return (getattr(runtime, "tape", None) is not None
            or getattr(runtime, "_apic_capture", None) is not None)


# --------------------------------------------------------------------------- plans


class CallPlan:
    """One recorded launch and how to finish its outputs (module docstring)."""

    __slots__ = ("key", "launch", "outputs", "multi", "finish", "refs",
                 "__weakref__")

    def __init__(self, key, launch, finish, multi: bool, tensors):
        self.key = key
        self.launch = launch
        self.finish = finish
        self.multi = multi
        device = launch.command.device
        self.outputs = []
        for shape, dtype in launch.outputs:
            torchDtype, torchDevice, trailing = _resolveOutput(dtype, str(device))
            self.outputs.append((tuple(shape) + trailing, torchDtype, torchDevice))
        drop = _dropper(weakref.ref(self))
        seen = set()
        self.refs = []
        for t in tensors:
            if id(t) not in seen:
                seen.add(id(t))
                self.refs.append(weakref.ref(t, drop))

    def run(self):
        """Replay: fresh zero outputs, the recorded launch, the call's finishing step."""
        outs = [torch.zeros(shape, dtype=dtype, device=device)
                for shape, dtype, device in self.outputs]
        replayLaunch(self.launch.command, self.launch.numInputs, outs)
        return self.finish(tuple(outs) if self.multi else outs[0])


def _dropper(planRef):
    def drop(_ref):
        plan = planRef()
        if plan is not None:
            with _LOCK:
                if _PLANS.get(plan.key) is plan:
                    del _PLANS[plan.key]
    return drop


def lookupPlan(key):
    """The plan recorded for `key`, or None."""
    plan = _PLANS.get(key)
    if plan is not None:
        _STATS["hits"] += 1
    return plan


def seenBefore(fp) -> bool:
    """Whether the key of ``fp`` was seen before with the same live tensors and its
    recording was not declined; a first sight is noted (module docstring)."""
    key, tensors = fp
    noted = _SEEN.get(key)
    if noted is not None and noted is not _DECLINED:
        if len(noted) == len(tensors) and all(r() is t for r, t in zip(noted, tensors)):
            return True
        noted = None
    if noted is None:
        with _LOCK:
            while len(_SEEN) >= MAX_SEEN:
                _SEEN.pop(next(iter(_SEEN)))
            _SEEN[key] = tuple(weakref.ref(t) for t in tensors)
    return False


def recordPlan(fp, run):
    """Run ``run()`` (the call's full path, returning ``(raw, finish)``: the kernel's raw
    output and the step turning it into the call's result) under a launch capture, keep a
    plan for the fingerprint ``fp`` when the call made exactly one bridge launch, and return
    ``finish(raw)``."""
    with capturing() as capture:
        raw, finish = run()
    multi = isinstance(raw, tuple)
    if (capture.foreign or len(capture.launches) != 1
            or not _samePlanOutputs(raw, multi, capture.launches[0])):
        _STATS["declined"] += 1
        with _LOCK:
            _SEEN[fp[0]] = _DECLINED
        return finish(raw)
    key, tensors = fp
    plan = CallPlan(key, capture.launches[0], finish, multi, tensors)
    with _LOCK:
        while len(_PLANS) >= MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
        _SEEN.pop(key, None)
    _STATS["recorded"] += 1
    return finish(raw)


def _samePlanOutputs(raw, multi: bool, launch) -> bool:
    """The call returned exactly the launch's outputs (tensors, one per recorded output)."""
    outs = raw if multi else (raw,)
    return (len(outs) == len(launch.outputs)
            and all(isinstance(o, torch.Tensor) for o in outs))
