"""View and placeholder caches of the bridge.

* `getCachedWarpArray(t, use_cache=True)`: a `Field` gives its permanent view; a tensor
  gives its identity-cached view (`util.fieldRegistry.acquireView`) when ``use_cache``,
  else a fresh view of ``t.detach()``. The view owns a gradient buffer exactly when
  ``t.requires_grad`` (float tensors); zeroing it is the bridge's job (zero-on-acquire).
* `getCachedDummyTensor(shape, dtype, device, fillValue=0.0)`: tiny shared placeholder
  tensors (never written by the library).
* `getCachedIdentityMatrices(n, d, dtype, device)`: shared ``[n, d, d]`` identity
  matrices (``n = 1`` is the ``(1, d, d)`` placeholder).

Dummy caches are keyed by ``str(device)`` (``wp.Device`` is unhashable) and by dtype (float32
and float64 calls share a process); callers must not write into the returned tensors.
"""

from __future__ import annotations

import torch
import warp as wp

from ..util.fieldRegistry import Field, Role, acquireView
from .launcher import castTorchToWarp, warpDtypeAsBuiltins

__all__ = ["getCachedWarpArray", "getCachedDummyTensor", "getCachedIdentityMatrices",
           "clearDummyCaches"]


def getCachedWarpArray(t, use_cache: bool = True, *, requires_grad: bool | None = None,
                       dtype=None) -> wp.array:
    """Warp view of a tensor or `Field` (module docstring).

    Args:
        t: a torch.Tensor (pass the caller's object, not ``t.detach()``) or a `Field`.
        use_cache: reuse the view attached to the tensor object (`acquireView`); False
            builds a fresh view every call.
        requires_grad: whether the view owns a gradient buffer; default ``t.requires_grad``
            (always False for integer tensors and Fields).
        dtype: explicit Warp dtype; None uses `castTorchToWarpAsBuiltins`'s mapping.
    """
    if isinstance(t, Field):
        return t.array
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"getCachedWarpArray: expected a torch.Tensor or Field, got "
                        f"{type(t).__name__}")
    rg = t.requires_grad if requires_grad is None else bool(requires_grad)
    rg = rg and t.is_floating_point()
    if use_cache:
        return acquireView(t, Role.PRIMAL, dtype, requires_grad=rg)
    if dtype is None:
        dtype = warpDtypeAsBuiltins(t)
    return castTorchToWarp(t, dtype, requires_grad=rg)


_DUMMIES: dict = {}
_IDENTITIES: dict = {}


def _devKey(device) -> str:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev)


def getCachedDummyTensor(shape, dtype: torch.dtype, device, fillValue=0.0) -> torch.Tensor:
    """Shared placeholder tensor of `shape` filled with `fillValue` (read-only by contract).

    Args:
        shape: an int or a tuple of ints.
        dtype: torch dtype of the tensor.
        device: torch device (or device string).
        fillValue: the constant fill value.
    """
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    dev = _devKey(device)
    key = (shape, dtype, dev, fillValue)
    t = _DUMMIES.get(key)
    if t is None:
        t = torch.full(shape, fillValue, dtype=dtype, device=torch.device(dev))
        _DUMMIES[key] = t
    return t


def getCachedIdentityMatrices(n: int, d: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Shared ``[n, d, d]`` identity matrices (read-only by contract).

    Args:
        n: number of matrices.
        d: matrix size.
        dtype: torch dtype of the tensor.
        device: torch device (or device string).
    """
    dev = _devKey(device)
    key = (int(n), int(d), dtype, dev)
    t = _IDENTITIES.get(key)
    if t is None:
        t = torch.eye(int(d), dtype=dtype, device=torch.device(dev)).expand(int(n), -1, -1)
        t = t.contiguous()
        _IDENTITIES[key] = t
    return t


def clearDummyCaches() -> None:
    """Drop the dummy and identity caches (tests only)."""
    _DUMMIES.clear()
    _IDENTITIES.clear()
