"""Torch -> Warp array conversion for non-differentiable structure code.

Views are built from `t.detach()` with canonical strides: degenerate strides (e.g. from
`vstack(...).mT` in 1D, or empty tensors) are normalised first (`wp.from_torch`
rejects such strides although torch calls the tensor contiguous).
"""

from __future__ import annotations

import functools

import torch
import warp as wp

from .warpContext import ensureWarp

__all__ = ["canonical", "toWarp", "plainData"]


def plainData(t: torch.Tensor, where: str = "warpSPHCore") -> torch.Tensor:
    """`t` without the `torch.func` gradient-tracking wrappers around it (the same values, a
    plain tensor with storage), for structure code that is never differentiated (the
    neighbour search): under ``torch.func.grad``/``vjp``/``jacrev`` a rollout searches the
    positions' values. A batched (``vmap``) tensor has no single set of values: that raises,
    pointing to scenes."""
    while isFunctorchWrapped(t):
        if torch._C._functorch.is_batchedtensor(t):
            raise NotImplementedError(
                f"{where}: torch.func.vmap over a neighbour search (a batch of particle "
                "positions) is not supported; run a batch of simulations as the scenes of one "
                "particle set (fluids.batchScenes), or vmap over value fields only")
        t = torch._C._functorch.get_unwrapped(t)
    return t


def canonical(t: torch.Tensor) -> torch.Tensor:
    """Detached tensor with canonical contiguous strides (copy only when needed); the values
    of a `torch.func`-wrapped tensor (`plainData`)."""
    t = plainData(t.detach())
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


# --- the kernel ABI's dtype mapping (one definition; `autograd.launcher` re-exports it) ---

_FLOAT_SCALARS = {torch.float32: wp.float32, torch.float64: wp.float64}
_INT_VECTORS = {
    (torch.int32, 2): wp.vec2i,
    (torch.int32, 3): wp.vec3i,
    (torch.int64, 3): wp.vec3l,
}


@functools.cache
def _asBuiltins(torchDtype: torch.dtype, trailing: tuple):
    """Warp dtype of the builtins mapping for a tensor dtype and its trailing shape."""
    if torchDtype in _FLOAT_SCALARS:
        scalar = _FLOAT_SCALARS[torchDtype]
        if len(trailing) == 0:
            return scalar
        if len(trailing) == 1:
            return wp.types.vector(length=int(trailing[0]), dtype=scalar)
        if len(trailing) == 2:
            return wp.types.matrix(shape=(int(trailing[0]), int(trailing[1])), dtype=scalar)
        raise TypeError(
            f"castTorchToWarpAsBuiltins: float tensors of rank {len(trailing) + 1} are not "
            "supported; accepted: rank 1 [N], rank 2 [N, K], rank 3 [N, A, B] (flatten fields first)"
        )
    if torchDtype in (torch.int32, torch.int64, torch.bool):
        if len(trailing) == 1 and (torchDtype, int(trailing[0])) in _INT_VECTORS:
            return _INT_VECTORS[(torchDtype, int(trailing[0]))]
        return None  # plain n-d array of the scalar type
    raise TypeError(
        f"castTorchToWarpAsBuiltins: dtype {torchDtype} is not supported; accepted: "
        "torch.float32, torch.float64, torch.int32, torch.int64, torch.bool"
    )


def warpDtypeAsBuiltins(t: torch.Tensor):
    """Warp dtype `castTorchToWarpAsBuiltins` uses for `t` (None: plain scalar n-d array)."""
    if t.dim() == 0:
        raise TypeError("castTorchToWarpAsBuiltins: 0-d tensors are not supported; use shape (1,)")
    return _asBuiltins(t.dtype, tuple(t.shape[1:]))


def castTorchToWarpAsBuiltins(t: torch.Tensor, requires_grad: bool = False) -> wp.array:
    """Fresh (uncached) Warp view of `t` in the kernel ABI's dtypes (module docstring).

    With ``requires_grad`` the view owns a torch-allocated zero gradient buffer.

    Args:
        t: the torch tensor (at least 1-d; 0-d tensors raise TypeError).
        requires_grad: give the view a zero gradient buffer.
    """
    return castTorchToWarp(t, warpDtypeAsBuiltins(t), requires_grad=requires_grad)


def castTorchToWarp(t: torch.Tensor, dtype=None, requires_grad: bool = False) -> wp.array:
    """Fresh (uncached) Warp view of `t`: plain n-d array of its scalar type, or `dtype`.

    The view is built from ``t.detach()`` with canonical strides (a copy only when the
    tensor is non-contiguous, has degenerate strides or is empty). With ``requires_grad``
    the view owns a zero gradient buffer allocated by torch (on torch's current stream).

    Args:
        t: the torch tensor.
        dtype: Warp dtype of the view, or None for the plain array of ``t``'s scalar type.
        requires_grad: give the view a zero gradient buffer.
    """
    ensureWarp()
    td = canonical(t)
    if requires_grad:
        grad = torch.zeros_like(td, memory_format=torch.contiguous_format)
        return wp.from_torch(td, dtype=dtype, requires_grad=True, grad=grad)
    return wp.from_torch(td, dtype=dtype, requires_grad=False)
