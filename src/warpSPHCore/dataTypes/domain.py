"""`DomainDescription`: the box used for binning and the minimum image."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._fields import checkFields

__all__ = ["DomainDescription", "periodicityTensor"]


def periodicityTensor(owner: str, periodic, d: int, device) -> torch.Tensor:
    """Normalise `periodic` (bool tensor [d], a sequence of d bools, a bool, or None) to a
    bool tensor [d] on `device`. Host-side values only."""
    if periodic is None:
        return torch.zeros(d, dtype=torch.bool, device=device)
    if isinstance(periodic, bool):
        return torch.full((d,), periodic, dtype=torch.bool, device=device)
    if isinstance(periodic, torch.Tensor):
        if periodic.dtype != torch.bool:
            raise TypeError(f"{owner}: periodic has dtype {periodic.dtype}; accepted: torch.bool")
        if tuple(periodic.shape) != (d,):
            raise ValueError(f"{owner}: periodic has shape {tuple(periodic.shape)}; accepted: [{d}]")
        if periodic.device != torch.device(device):
            raise ValueError(f"{owner}: periodic is on {periodic.device}; accepted: {device}")
        return periodic
    if isinstance(periodic, (list, tuple)):
        if len(periodic) != d or not all(isinstance(p, (bool, int)) for p in periodic):
            raise ValueError(f"{owner}: periodic={periodic!r}; accepted: {d} bools")
        return torch.tensor([bool(p) for p in periodic], dtype=torch.bool, device=device)
    raise TypeError(f"{owner}: periodic has type {type(periodic).__name__}; accepted: a bool "
                    "tensor [d], a list of d bools, a bool, or None")


@dataclass
class DomainDescription:
    """Axis-aligned box ``[min, max]`` with per-axis periodicity.

    Args:
        min: ``[d]`` lower corner, a tensor of the call's float dtype and device.
        max: ``[d]`` upper corner, a tensor of the call's float dtype and device.
        periodic: ``[d]`` bool tensor (a list of bools, a bool or None are converted).
        dim: d; inferred from ``min`` when None.

    The extents ``max - min`` must be positive and finite; that is checked by the neighbour
    search's single readback, not here (construction never reads device values).
    """

    min: torch.Tensor
    max: torch.Tensor
    periodic: torch.Tensor | None = None
    dim: int | None = None

    def __post_init__(self):
        bound = checkFields(
            "DomainDescription",
            [
                ("min", self.min, ("d",), "float", False),
                ("max", self.max, ("d",), "float", False),
            ],
        )
        d = bound["d"]
        if self.dim is None:
            self.dim = d
        if not isinstance(self.dim, int) or isinstance(self.dim, bool) or self.dim != d:
            raise ValueError(f"DomainDescription: dim={self.dim!r} but min has {d} entries; "
                             "accepted: dim == len(min) in {1, 2, 3}")
        self.periodic = periodicityTensor("DomainDescription", self.periodic, d, self.min.device)
