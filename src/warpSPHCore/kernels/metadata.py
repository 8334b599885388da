"""Kernel metadata on the host: C_d, kernelScale, packing ratio, xi, N_H.

The code support h is Dehnen & Aly's (2012) compact-support radius H. The constants here
relate H to other length scales; **none of them enters operator evaluation**, and lattice
calibration (`kernels/lattice.py`) does not scale them.

* ``sphKernelC_d(kernel, d)``: normalisation C_d of W = C_d k(q) / h^d.
* ``sphKernelScale(kernel, d)``: kernelScale = H / h_DA with h_DA = 2σ,
  σ² = (1/d) ∫ W(x) |x|² dx for H = 1 (tabulated).
* ``packingRatio(kernel)``: η = h_DA / Δx (Dehnen & Aly Table 2; 1 for unlisted kernels).
* ``sphKernel_xi(kernel, d)``: ξ = η · kernelScale = H / Δx (support in particle spacings).
* ``sphKernelN_H(kernel, d)``: N_H = V_d ξ^d, the expected neighbour count inside H.
* ``volumeToSupport(v, N, d)`` / ``volumeToSupport_tensor``: the h with V_d h^d = N v.
* ``n_h_to_nH(n_h, d) = V_d n_h^d`` and its inverse ``nH_to_n_h``.

V_d is the unit-ball volume (2, π, 4π/3). Every value comes from the tables of
`kernels/constants.py`. The Warp-function variants of the first four live with the Warp
kernel functions. Host functions validate their arguments (`ValueError` naming the argument,
the value found and what is accepted); the tensor variants read no tensor values (no device
synchronisation) and are differentiable through torch autograd.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from .constants import C_D, KERNEL_SCALE, PACKING_RATIO, UNIT_BALL_VOLUME
from .hostShapes import asKernel, checkDim

__all__ = [
    "sphKernelC_d",
    "sphKernelScale",
    "packingRatio",
    "sphKernel_xi",
    "sphKernelN_H",
    "volumeToSupport",
    "volumeToSupport_tensor",
    "n_h_to_nH",
    "nH_to_n_h",
]


def sphKernelC_d(kernel, d: int) -> float:
    """Normalisation C_d of `kernel` in dimension `d`, a float64 host value.

    Args:
        kernel: a `KernelFunctions` member.
        d: dimension, 1, 2 or 3.
    """
    kernel = asKernel("sphKernelC_d", kernel)
    d = checkDim("sphKernelC_d", d)
    return C_D[kernel][d - 1]


def sphKernelScale(kernel, d: int) -> float:
    """kernelScale = H / h_DA of `kernel` in dimension `d` (tabulated).

    Args:
        kernel: a `KernelFunctions` member.
        d: dimension, 1, 2 or 3.
    """
    kernel = asKernel("sphKernelScale", kernel)
    d = checkDim("sphKernelScale", d)
    return KERNEL_SCALE[kernel][d - 1]


def packingRatio(kernel) -> float:
    """Packing ratio η = h_DA / Δx (Dehnen & Aly 2012, Table 2; 1 for unlisted kernels).

    Args:
        kernel: a `KernelFunctions` member.
    """
    kernel = asKernel("packingRatio", kernel)
    return PACKING_RATIO[kernel]


def sphKernel_xi(kernel, d: int) -> float:
    """ξ = η · kernelScale = H / Δx: the support radius in particle spacings.

    Args:
        kernel: a `KernelFunctions` member.
        d: dimension, 1, 2 or 3.
    """
    kernel = asKernel("sphKernel_xi", kernel)
    d = checkDim("sphKernel_xi", d)
    return PACKING_RATIO[kernel] * KERNEL_SCALE[kernel][d - 1]


def sphKernelN_H(kernel, d: int) -> float:
    """N_H = V_d · (η · kernelScale)^d: expected neighbour count inside the support H.

    Examples: 2D Wendland2 25.008, 3D Wendland2 100.016.

    Args:
        kernel: a `KernelFunctions` member.
        d: dimension, 1, 2 or 3.
    """
    kernel = asKernel("sphKernelN_H", kernel)
    d = checkDim("sphKernelN_H", d)
    return UNIT_BALL_VOLUME[d - 1] * sphKernel_xi(kernel, d) ** d


def _hostPositive(owner: str, name: str, value):
    """Host value(s) > 0 and finite, as a float (scalar) or float64 array; ValueError else."""
    if isinstance(value, torch.Tensor):
        raise TypeError(
            f"{owner}: {name} is a torch.Tensor; accepted: a Python/NumPy number or array "
            "(use the _tensor variant for tensors)"
        )
    if isinstance(value, bool) or not (
        isinstance(value, (numbers.Real, np.ndarray, list, tuple))
    ):
        raise ValueError(f"{owner}: {name}={value!r}; accepted: a positive finite real number")
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or not np.all(arr > 0.0):
        raise ValueError(f"{owner}: {name}={value!r}; accepted: positive finite values")
    return float(arr) if arr.ndim == 0 else arr


def volumeToSupport(v, N, d: int):
    """Support h with V_d h^d = N v (host, float64).

    1D: h = N v / 2; 2D: h = sqrt(N v / π); 3D: h = (3 N v / (4π))^(1/3).

    Args:
        v: particle volume (positive finite number or NumPy array of them).
        N: target neighbour count (positive finite number or array, broadcast with v).
        d: 1, 2 or 3.

    Returns:
        a float (scalar inputs) or a float64 array.
    """
    owner = "volumeToSupport"
    d = checkDim(owner, d)
    v = _hostPositive(owner, "v", v)
    N = _hostPositive(owner, "N", N)
    x = np.multiply(N, v)
    if d == 1:
        h = x / 2.0
    elif d == 2:
        h = np.sqrt(x / math.pi)
    else:
        h = np.cbrt(3.0 * x / (4.0 * math.pi))
    return float(h) if np.ndim(h) == 0 else h


def volumeToSupport_tensor(v: torch.Tensor, N, d: int) -> torch.Tensor:
    """Element-wise tensor variant of `volumeToSupport` (differentiable, no host sync).

    Args:
        v: float32/float64 tensor of volumes (any shape).
        N: a Python number or a tensor broadcastable with `v` (same dtype and device).
        d: 1, 2 or 3.

    Returns:
        tensor of the broadcast shape, dtype and device of `v`. Values are not checked
        (non-positive inputs give 0 or NaN, as the formula does).
    """
    owner = "volumeToSupport_tensor"
    d = checkDim(owner, d)
    if not isinstance(v, torch.Tensor) or v.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"{owner}: v must be a float32/float64 torch.Tensor, got "
            f"{v.dtype if isinstance(v, torch.Tensor) else type(v).__name__}"
        )
    if isinstance(N, torch.Tensor):
        if N.dtype != v.dtype:
            raise TypeError(f"{owner}: N has dtype {N.dtype} but v has {v.dtype}; accepted: "
                            "one shared float dtype")
        if N.device != v.device:
            raise ValueError(f"{owner}: N is on {N.device} but v is on {v.device}")
    elif isinstance(N, bool) or not isinstance(N, numbers.Real):
        raise TypeError(f"{owner}: N={N!r}; accepted: a real number or a tensor")
    x = N * v
    if d == 1:
        return x / 2.0
    if d == 2:
        return torch.sqrt(x / math.pi)
    return torch.pow(3.0 * x / (4.0 * math.pi), 1.0 / 3.0)


def _checkRatioArg(owner: str, name: str, value):
    if isinstance(value, torch.Tensor):
        if value.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{owner}: {name} has dtype {value.dtype}; accepted: torch.float32 "
                            "or torch.float64")
        return value  # no value check: reading it would synchronise with the device
    return _hostPositive(owner, name, value)


def n_h_to_nH(n_h, d: int):
    """Neighbour count N_H = V_d · n_h^d of a support of n_h lattice spacings.

    `n_h` may be a positive number, a NumPy array or a float tensor (element-wise).

    Args:
        n_h: support in lattice spacings (number, NumPy array or float tensor).
        d: dimension, 1, 2 or 3.
    """
    d = checkDim("n_h_to_nH", d)
    n_h = _checkRatioArg("n_h_to_nH", "n_h", n_h)
    r = UNIT_BALL_VOLUME[d - 1] * n_h**d
    return float(r) if not isinstance(r, torch.Tensor) and np.ndim(r) == 0 else r


def nH_to_n_h(nH, d: int):
    """Inverse of `n_h_to_nH`: n_h = (N_H / V_d)^(1/d).

    Args:
        nH: neighbour count N_H (number, NumPy array or float tensor, element-wise).
        d: dimension, 1, 2 or 3.
    """
    d = checkDim("nH_to_n_h", d)
    nH = _checkRatioArg("nH_to_n_h", "nH", nH)
    x = nH / UNIT_BALL_VOLUME[d - 1]
    if isinstance(x, torch.Tensor):
        return x if d == 1 else (torch.sqrt(x) if d == 2 else torch.pow(x, 1.0 / 3.0))
    r = x if d == 1 else (np.sqrt(x) if d == 2 else np.cbrt(x))
    return float(r) if np.ndim(r) == 0 else r
