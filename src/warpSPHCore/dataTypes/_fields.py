"""Shared construction-time validation of the state dataclasses.

A state declares its tensor fields with symbolic shapes ("N", "d", or ints); `checkFields`
binds the symbols from the first tensor that has them and checks every other field against
them, together with one float dtype, one device and contiguity. Host-known facts only: no
tensor value is read, so construction never synchronises with the device.
"""

from __future__ import annotations

import torch

from ..util.precision import FLOAT_DTYPES

__all__ = ["checkFields", "fmtShape"]


def fmtShape(pattern) -> str:
    return "[" + ", ".join(str(p) for p in pattern) + "]"


def checkFields(owner: str, fields, bound: dict | None = None) -> dict:
    """Validate `fields`: iterable of (name, tensor, pattern, kind, optional).

    kind: "float" (float32/float64, shared by all float fields), "int32", "int64", "bool".
    Returns the bound symbols (e.g. {"N": 5, "d": 2, "dtype": torch.float64, "device": ...}).
    """
    bound = dict(bound or {})
    for name, t, pattern, kind, optional in fields:
        if t is None:
            if optional:
                continue
            raise TypeError(f"{owner}: {name} is required (a torch.Tensor of shape "
                            f"{fmtShape(pattern)}), got None")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{owner}: {name} must be a torch.Tensor of shape "
                            f"{fmtShape(pattern)}, got {type(t).__name__}")
        # dtype
        if kind == "float":
            if t.dtype not in FLOAT_DTYPES:
                raise TypeError(f"{owner}: {name} has dtype {t.dtype}; accepted: torch.float32 "
                                "or torch.float64")
            if "dtype" in bound and t.dtype != bound["dtype"]:
                raise TypeError(f"{owner}: {name} has dtype {t.dtype} but {bound['dtypeFrom']} "
                                f"has {bound['dtype']}; all float fields must share one dtype")
            bound.setdefault("dtype", t.dtype)
            bound.setdefault("dtypeFrom", name)
        else:
            want = {"int32": torch.int32, "int64": torch.int64, "bool": torch.bool}[kind]
            if t.dtype != want:
                raise TypeError(f"{owner}: {name} has dtype {t.dtype}; accepted: {want}")
        # device
        if "device" in bound and t.device != bound["device"]:
            raise ValueError(f"{owner}: {name} is on {t.device} but {bound['deviceFrom']} is on "
                             f"{bound['device']}; all tensors must be on one device")
        bound.setdefault("device", t.device)
        bound.setdefault("deviceFrom", name)
        # shape
        if t.dim() != len(pattern):
            raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; accepted: "
                             f"{fmtShape(pattern)} ({len(pattern)} axes)")
        for axis, (sym, n) in enumerate(zip(pattern, t.shape)):
            if isinstance(sym, int):
                if n != sym:
                    raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; accepted: "
                                     f"{fmtShape(pattern)}")
                continue
            if sym == "d" and "d" not in bound and n not in (1, 2, 3):
                raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}: the spatial "
                                 f"dimension (axis {axis}) is {n}; accepted: 1, 2 or 3")
            if sym in bound and bound[sym] != n:
                raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; accepted: "
                                 f"{fmtShape(pattern)} with {sym} = {bound[sym]} "
                                 f"(from {bound[sym + 'From']})")
            bound.setdefault(sym, n)
            bound.setdefault(sym + "From", name)
        # contiguity (expanded / strided views would be copied silently at every launch)
        if t.numel() > 0 and not t.is_contiguous():
            raise ValueError(f"{owner}: {name} is not contiguous (strides {t.stride()}); "
                             "accepted: contiguous tensors (call .contiguous())")
    return bound
