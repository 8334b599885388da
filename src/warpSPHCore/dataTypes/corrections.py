"""Correction states and their tangent twins for forward mode (see docs/corrections.md).

Volumes are loose tensors (`queryVolumes [N_q]`, `referenceVolumes [N_r]`); the states below
carry the per-particle quantities of CRK, grad-h and renormalization.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._fields import checkFields

__all__ = [
    "CRKState",
    "CRKTangentState",
    "GradHState",
    "LaplacianCorrectionState",
    "LaplacianCorrectionTangentState",
    "RenormalizationState",
    "RenormalizationTangentState",
    "asGradHState",
    "asRenormalizationState",
]


def _crkFields(owner: str, s, optionalGrads: bool):
    return checkFields(
        owner,
        [
            ("A", s.A, ("N",), "float", False),
            ("B", s.B, ("N", "d"), "float", False),
            ("gradA", s.gradA, ("N", "d"), "float", optionalGrads),
            ("gradB", s.gradB, ("N", "d", "d"), "float", optionalGrads),
        ],
    )


@dataclass
class CRKState:
    """CRK correction of the query particles (from `computeCRKFactors`).

    Args:
        A: ``[N]``.
        B: ``[N, d]``.
        gradA: ``[N, d]``.
        gradB: ``[N, d, d]`` with ``gradB[i, k, c] = d_k B_c`` (row = derivative).
            gradA/gradB may be None only for Interpolate (checked by the operator).
    """

    A: torch.Tensor
    B: torch.Tensor
    gradA: torch.Tensor | None = None
    gradB: torch.Tensor | None = None

    def __post_init__(self):
        _crkFields("CRKState", self, optionalGrads=True)


@dataclass
class CRKTangentState:
    """Tangents of a `CRKState`; every field required (callers fill zeros for frozen parts)."""

    A: torch.Tensor
    B: torch.Tensor
    gradA: torch.Tensor
    gradB: torch.Tensor

    def __post_init__(self):
        _crkFields("CRKTangentState", self, optionalGrads=False)


@dataclass
class GradHState:
    """Grad-h terms Omega (from `computeOmega`): ``queryOmegas [N_q]``, ``referenceOmegas
    [N_r]`` or None (then the query Omegas serve both roles)."""

    queryOmegas: torch.Tensor
    referenceOmegas: torch.Tensor | None = None

    def __post_init__(self):
        checkFields("GradHState", [("queryOmegas", self.queryOmegas, ("N",), "float", False)])
        if self.referenceOmegas is not None:
            bound = checkFields(
                "GradHState", [("referenceOmegas", self.referenceOmegas, ("M",), "float", False)]
            )
            if bound["dtype"] != self.queryOmegas.dtype or bound["device"] != self.queryOmegas.device:
                raise TypeError(
                    "GradHState: referenceOmegas must share dtype and device with queryOmegas "
                    f"(found {self.referenceOmegas.dtype}/{self.referenceOmegas.device} vs "
                    f"{self.queryOmegas.dtype}/{self.queryOmegas.device})"
                )


def asGradHState(value) -> GradHState | None:
    """Accept a GradHState, a bare tensor (both roles) or a (query, reference) tuple."""
    if value is None or isinstance(value, GradHState):
        return value
    if isinstance(value, torch.Tensor):
        return GradHState(value)
    if isinstance(value, tuple) and len(value) == 2:
        return GradHState(value[0], value[1])
    if hasattr(value, "queryOmegas"):
        return value
    raise TypeError(
        f"gradHState has type {type(value).__name__}; accepted: GradHState, a tensor [N], or a "
        "(queryOmegas, referenceOmegas) tuple"
    )


@dataclass
class RenormalizationState:
    """Gradient renormalization matrices L_i, ``[N_q, d, d]`` (`computeRenormalizationMatrices`)."""

    renormalizationMatrices: torch.Tensor

    def __post_init__(self):
        checkFields(
            "RenormalizationState",
            [("renormalizationMatrices", self.renormalizationMatrices, ("N", "d", "d"), "float", False)],
        )


@dataclass
class RenormalizationTangentState:
    """Tangent of the renormalization matrices, ``[N_q, d, d]``."""

    renormalizationMatrices: torch.Tensor

    def __post_init__(self):
        checkFields(
            "RenormalizationTangentState",
            [("renormalizationMatrices", self.renormalizationMatrices, ("N", "d", "d"), "float", False)],
        )


def asRenormalizationState(value) -> RenormalizationState | None:
    """Accept a RenormalizationState or a bare ``[N, d, d]`` tensor."""
    if value is None or isinstance(value, RenormalizationState):
        return value
    if isinstance(value, torch.Tensor):
        return RenormalizationState(value)
    if hasattr(value, "renormalizationMatrices"):
        return value
    raise TypeError(
        f"renormalizationState has type {type(value).__name__}; accepted: RenormalizationState "
        "or a tensor [N, d, d]"
    )


@dataclass
class LaplacianCorrectionState:
    """Per-query state of the consistent Laplacian and Hessian (`LaplacianScheme.Consistent`,
    built by `corrections.computeLaplacianCorrection`; the scheme: `corrections.secondDerivatives`).

    The Consistent kernel reads ``B`` and ``gamma`` only (its pair term is
    ``q_ij G_ij . (B_i x_ij / D^2 - gamma_i)``); the other members serve the Hessian and the
    forward mode of the builder.

    Attributes:
        L: ``[N_q, d, d]`` renormalization matrices.
        B: ``[N_q, d, d]`` modified renormalization tensor (symmetric).
        beta: ``[N_q, d]``, ``B : N3[c]``.
        gamma: ``[N_q, d]``, ``L^T beta``: the first-derivative correction the kernel applies.
        Ainv: ``[N_q, K, K]`` inverse of the Voigt matrix A (the Hessian's solve).
        N3: ``[N_q, d, d, d]`` moment ``sum V r_c w_pq``.
        fallback: bool ``[N_q]``: rows that fell back to Brookshaw (``B = -2 I``,
            ``beta = gamma = 0``).
    """

    L: torch.Tensor
    B: torch.Tensor
    beta: torch.Tensor
    gamma: torch.Tensor
    Ainv: torch.Tensor
    N3: torch.Tensor
    fallback: torch.Tensor


@dataclass
class LaplacianCorrectionTangentState:
    """Tangents of a `LaplacianCorrectionState` (`corrections.computeLaplacianCorrectionJVP`):
    ``L``, ``B``, ``beta``, ``gamma``, ``Ainv``, ``N3`` (fallback rows: zero ``B``, ``beta``
    and ``gamma`` tangents). A direction of ``B`` and ``gamma`` alone is enough for
    `warpOperationJVP` (the other members may be None)."""

    L: torch.Tensor | None = None
    B: torch.Tensor | None = None
    beta: torch.Tensor | None = None
    gamma: torch.Tensor | None = None
    Ainv: torch.Tensor | None = None
    N3: torch.Tensor | None = None
