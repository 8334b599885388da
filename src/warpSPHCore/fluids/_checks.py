"""Shape checks of the per-particle inputs of the fluids layer: a ``[N, 1]`` pressure must
raise, never broadcast against ``[N]`` densities into ``[N, N, d]``."""

from __future__ import annotations

import torch

__all__ = ["particleField", "particleScalar"]


def _shape(value) -> str:
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def particleField(where: str, name: str, value, n: int, d: int | None = None) -> torch.Tensor:
    """`value` as it is, after checking that it is a tensor of shape ``[n]`` (``d`` None) or
    ``[n, d]``; ValueError naming the function, the argument, the shape and what is
    accepted otherwise."""
    want = (n,) if d is None else (n, d)
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != want:
        accepted = f"[{n}] (one value per particle)" if d is None else \
            f"[{n}, {d}] (one vector per particle)"
        raise ValueError(f"{where}: {name} has shape {_shape(value)}; accepted: {accepted}")
    return value


def particleScalar(where: str, name: str, value, n: int):
    """`value` as it is, after checking that it is a number, a 0-dim tensor or ``[n]``."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) != (n,):
        raise ValueError(f"{where}: {name} has shape {_shape(value)}; accepted: a number, a "
                         f"0-dim tensor or [{n}] (one value per particle)")
    return value
