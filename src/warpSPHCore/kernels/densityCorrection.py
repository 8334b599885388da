"""Density self-term correction (Dehnen & Aly 2012, eq. 18/19).

Separate from lattice calibration (`kernels/lattice.py`). A summation density
ρ_i = Σ_j m_j W_ij includes the self term m_i W(0, h_i), which biases it upwards; Dehnen &
Aly remove a fitted fraction of it:

    ρ_corr = ρ − ε_c · m · W(0, h),   ε_c = ε100 · (N_H / 100)^(−α),   N_H = V_d h^d ρ / m,

per particle, with W(0, h) = C_d k(0) / h^d and the fitted (ε100, α) of
`densityCorrectionConstants` (2D and 3D Wendland kernels only). The fit is valid for
N_H ∈ [40, 400]; because N_H is per particle and lives on the device, that window is not
checked (it would need a readback): values outside it are extrapolation.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..enumTypes import KernelFunctions as K
from ..util.precision import commonFloatDtype
from .constants import C_D, K0, UNIT_BALL_VOLUME
from .hostShapes import asKernel, checkDim

__all__ = ["applyDensityCorrection", "selfTermW0", "densityCorrectionConstants"]

#: (d, kernel) -> (ε100, α), the fitted values as shipped by Dehnen & Aly's correction.
DENSITY_CORRECTION_CONSTANTS: dict[tuple[int, K], tuple[float, float]] = {
    (2, K.Wendland2): (0.0030233012061203278, 1.5016297296462702),
    (2, K.Wendland4): (0.00035064837551512925, 2.4815365353197136),
    (2, K.Wendland6): (8.005994569170169e-05, 3.4708508575608708),
    (3, K.Wendland2): (0.029488222560940334, 0.9989656162766523),
    (3, K.Wendland4): (0.013611521340766316, 1.6332544351850704),
    (3, K.Wendland6): (0.011308235376902351, 2.218472363304362),
}


def densityCorrectionConstants(kernel, d: int) -> tuple[float, float]:
    """The fitted (ε100, α) of the self-term correction for (kernel, d).

    Args:
        kernel: Wendland2, Wendland4 or Wendland6 (`KernelFunctions`).
        d: dimension, 2 or 3.

    Returns:
        ``(eps100, alpha)`` as Python floats.

    Raises:
        ValueError: for any pair other than Wendland2/4/6 in 2D or 3D (the message lists the
            supported pairs).
    """
    owner = "densityCorrectionConstants"
    kernel = asKernel(owner, kernel)
    try:
        return DENSITY_CORRECTION_CONSTANTS[(d, kernel)]
    except (KeyError, TypeError):
        supported = ", ".join(f"({k.name}, d={dd})" for dd, k in DENSITY_CORRECTION_CONSTANTS)
        raise ValueError(
            f"{owner}: no density-correction constants for kernel={kernel.name}, d={d!r}; "
            f"accepted: {supported}"
        ) from None


def selfTermW0(kernel, d: int, h):
    """Self-term kernel value W(0, h) = C_d k(0) / h^d.

    Args:
        kernel: a `KernelFunctions` member (ViscosityKernel gives +inf).
        d: 1, 2 or 3.
        h: a positive finite float, or a float tensor of supports (any shape; element-wise,
            differentiable, values not checked).

    Returns:
        a float, or a tensor of the shape, dtype and device of `h`.
    """
    owner = "selfTermW0"
    kernel = asKernel(owner, kernel)
    d = checkDim(owner, d)
    w0 = C_D[kernel][d - 1] * K0[kernel]
    if isinstance(h, torch.Tensor):
        if h.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{owner}: h has dtype {h.dtype}; accepted: torch.float32 or "
                            "torch.float64")
        return w0 / h**d
    if isinstance(h, bool) or not isinstance(h, numbers.Real) or not (
        math.isfinite(float(h)) and float(h) > 0.0
    ):
        raise ValueError(f"{owner}: h={h!r}; accepted: a positive finite real number or a "
                         "float tensor")
    return w0 / float(h) ** d


def applyDensityCorrection(
    densities: torch.Tensor,
    masses: torch.Tensor,
    supports: torch.Tensor,
    kernel,
    dim: int,
) -> torch.Tensor:
    """Subtract the fitted self-term fraction from summation densities (D&A eq. 18/19).

        ρ_corr = ρ − ε_c m W(0, h),   ε_c = ε100 (N_H / 100)^(−α),   N_H = V_d h^d ρ / m.

    Args:
        densities: ρ, float32/float64 tensor (typically [N]).
        masses: m, tensor broadcastable with `densities` (same dtype and device).
        supports: h, tensor broadcastable with `densities` (same dtype and device).
        kernel: Wendland2, Wendland4 or Wendland6.
        dim: 2 or 3.

    Returns:
        ρ_corr, tensor of the broadcast shape, with the inputs' dtype and device.

    Derivatives: element-wise torch operations, so reverse mode, forward mode and higher
    orders all work through torch autograd. No host synchronisation: no value is read, and
    the validity window N_H ∈ [40, 400] is not checked (outside it the fit is extrapolated;
    non-positive ρ or m give NaN or inf).

    Raises:
        ValueError: unsupported (kernel, dim) (see `densityCorrectionConstants`), tensors on
            different devices, or shapes that do not broadcast.
        TypeError: non-tensor inputs, or float dtypes that are not float32/float64 or differ.
    """
    owner = "applyDensityCorrection"
    eps100, alpha = densityCorrectionConstants(kernel, dim)
    kernel = asKernel(owner, kernel)
    tensors = {"densities": densities, "masses": masses, "supports": supports}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{owner}: {name} must be a torch.Tensor, got {type(t).__name__}")
    commonFloatDtype(owner, **tensors)
    for name, t in tensors.items():
        if t.device != densities.device:
            raise ValueError(f"{owner}: {name} is on {t.device}; every tensor of the call must "
                             f"be on {densities.device}")
    try:
        torch.broadcast_shapes(densities.shape, masses.shape, supports.shape)
    except RuntimeError:
        raise ValueError(
            f"{owner}: shapes densities {tuple(densities.shape)}, masses "
            f"{tuple(masses.shape)}, supports {tuple(supports.shape)} do not broadcast; "
            "accepted: broadcastable shapes (typically all [N])"
        ) from None
    hd = supports**dim
    nH = UNIT_BALL_VOLUME[dim - 1] * hd * densities / masses
    epsC = eps100 * torch.pow(nH / 100.0, -alpha)
    w0 = C_D[kernel][dim - 1] * K0[kernel] / hd
    return densities - epsC * masses * w0
