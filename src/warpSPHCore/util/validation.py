"""Construction-time validation helpers: host-known facts only (shapes, dtypes, devices).

Messages name the owner (class or function), the field, what was found and what is accepted.
None of these helpers reads tensor values, so they never synchronise with the device.
"""

from __future__ import annotations

import torch

__all__ = ["requireTensor", "requireShape", "requireDevice", "requireDtype", "describe"]


def describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"
    return f"{type(t).__name__}"


def requireTensor(owner: str, name: str, t, optional: bool = False):
    if t is None:
        if optional:
            return None
        raise TypeError(f"{owner}: {name} is required (a torch.Tensor), got None")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{owner}: {name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def requireDtype(owner: str, name: str, t: torch.Tensor, accepted) -> None:
    accepted = tuple(accepted)
    if t.dtype not in accepted:
        names = " or ".join(str(d) for d in accepted)
        raise TypeError(f"{owner}: {name} has dtype {t.dtype}; accepted: {names}")


def requireShape(owner: str, name: str, t: torch.Tensor, shape, what: str) -> None:
    """`shape` is a tuple whose entries are ints or None (any size)."""
    ok = t.dim() == len(shape) and all(s is None or s == n for s, n in zip(shape, t.shape))
    if not ok:
        raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; accepted: {what}")


def requireDevice(owner: str, name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(
            f"{owner}: {name} is on {t.device}; every tensor of the call must be on {device}"
        )
