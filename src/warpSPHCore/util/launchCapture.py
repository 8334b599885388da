"""Launch capture: the hook through which a call plan (`autograd.callPlan`) learns what one
operator call launched.

While `capturing()` is active on a thread, the bridge's launcher records each kernel launch
it makes as a `CapturedLaunch` (the replayable ``wp.Launch`` command, its arguments and its
outputs), and every other launch site (the neighbour search's `warpContext.launch`, the
hand-written reverse kernels) marks the capture as *foreign*: such a call is not replayed
from a plan. Outside a capture the hook costs one thread-local attribute read per launch.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CapturedLaunch", "LaunchCapture", "activeCapture", "capturing", "noteForeignLaunch"]


@dataclass
class CapturedLaunch:
    """One recorded launch: the ``wp.Launch`` command (recorded with ``record_cmd=True``),
    the input arguments it was built from (kept alive with the plan: their memory is what
    the command's parameters point at), and per output its (Warp shape, Warp dtype)."""

    command: Any
    inputs: list
    outputs: list
    numInputs: int


@dataclass
class LaunchCapture:
    """What one captured call launched (`launches`), and how many launches it made
    elsewhere (`foreign`: search, reverse kernels, taped launches)."""

    launches: list = field(default_factory=list)
    foreign: int = 0


_LOCAL = threading.local()


def activeCapture() -> LaunchCapture | None:
    """The capture active on this thread, or None."""
    return getattr(_LOCAL, "capture", None)


@contextmanager
def capturing():
    """Record this thread's launches until the block ends; yields the `LaunchCapture`."""
    previous = activeCapture()
    capture = LaunchCapture()
    _LOCAL.capture = capture
    try:
        yield capture
    finally:
        _LOCAL.capture = previous


def noteForeignLaunch() -> None:
    """Mark the active capture (if any) as containing a launch a plan cannot replay."""
    capture = getattr(_LOCAL, "capture", None)
    if capture is not None:
        capture.foreign += 1
