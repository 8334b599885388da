"""Torch -> Warp array conversion for non-differentiable structure code.

Views are built from `t.detach()` with canonical strides: degenerate strides (e.g. from
`vstack(...).mT` in 1D, or empty tensors) are normalised first (pitfall W10).
"""

from __future__ import annotations

import torch
import warp as wp

from .warpContext import ensureWarp

__all__ = ["canonical", "toWarp"]


def canonical(t: torch.Tensor) -> torch.Tensor:
    """Detached tensor with canonical contiguous strides (copy only when needed)."""
    t = t.detach()
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    if not t.is_contiguous():
        return t.contiguous()
    expected = []
    stride = 1
    for size in reversed(t.shape):
        expected.append(stride)
        stride *= size
    if tuple(reversed(expected)) != tuple(t.stride()):
        # contiguous by torch's rules but with degenerate strides on size-1 axes
        return t.clone(memory_format=torch.contiguous_format)
    return t


def toWarp(t: torch.Tensor, dtype=None) -> wp.array:
    """Non-differentiable Warp view of `t` (dtype: Warp scalar/vector/matrix type or None)."""
    ensureWarp()
    return wp.from_torch(canonical(t), dtype=dtype, requires_grad=False)


def isFunctorchWrapped(t) -> bool:
    """True for a torch.func (functorch) wrapped tensor, which the Warp bridge cannot read."""
    try:
        return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))
    except AttributeError:  # pragma: no cover (older torch)
        return False
