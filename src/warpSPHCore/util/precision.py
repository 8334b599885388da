"""Per-call precision: the scalar type of a call is the dtype of its float tensors.

Nothing here is global: every helper maps a torch dtype to Warp types on demand
(no import-time precision: float32 and float64 calls mix freely in one process).
"""

from __future__ import annotations

import torch
import warp as wp

__all__ = [
    "FLOAT_DTYPES",
    "EPS",
    "warpScalar",
    "warpVector",
    "warpMatrix",
    "epsFor",
    "checkFloatDtype",
    "commonFloatDtype",
]

FLOAT_DTYPES = (torch.float32, torch.float64)

#: ε of x̂ = x / max(r, ε), the Hessian and the kernel Laplacian, per precision.
EPS = {torch.float32: 1e-7, torch.float64: 1e-15}

_SCALAR = {torch.float32: wp.float32, torch.float64: wp.float64}


def warpScalar(dtype: torch.dtype):
    """Warp scalar type for a torch float dtype (TypeError for anything else)."""
    try:
        return _SCALAR[dtype]
    except KeyError:
        raise TypeError(
            f"dtype {dtype} is not supported; accepted: torch.float32, torch.float64"
        ) from None


def warpVector(length: int, dtype: torch.dtype):
    """Memoised Warp vector type of `length` components in the call's precision."""
    return wp.types.vector(length=int(length), dtype=warpScalar(dtype))


def warpMatrix(rows: int, cols: int, dtype: torch.dtype):
    return wp.types.matrix(shape=(int(rows), int(cols)), dtype=warpScalar(dtype))


def epsFor(dtype: torch.dtype) -> float:
    warpScalar(dtype)
    return EPS[dtype]


def checkFloatDtype(where: str, name: str, t: torch.Tensor) -> torch.dtype:
    """Raise TypeError unless `t` is float32/float64; return its dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{where}: {name} has dtype {t.dtype}; accepted: torch.float32 or torch.float64"
        )
    return t.dtype


def commonFloatDtype(where: str, **tensors) -> torch.dtype:
    """The one float dtype shared by every non-None tensor; TypeError naming offenders."""
    found = {}
    for name, t in tensors.items():
        if t is None:
            continue
        found[name] = checkFloatDtype(where, name, t)
    if not found:
        raise TypeError(f"{where}: no floating-point tensor given")
    dtypes = set(found.values())
    if len(dtypes) > 1:
        listing = ", ".join(f"{n}={d}" for n, d in found.items())
        raise TypeError(
            f"{where}: all floating-point tensors of one call must share a dtype; found {listing}"
        )
    return dtypes.pop()
