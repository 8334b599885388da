"""`OperationProperties`: the frozen options of one operator call."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

from ..enumTypes import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    SupportScheme,
    WarpOperation,
    enumChoices,
)

__all__ = ["OperationProperties", "CALIBRATION_UNDEFINED"]

#: Kernels for which lattice calibration is undefined: ViscosityKernel (k(0) = +inf, so the
#: lattice sum diverges) and AdhesionKernel (not an interpolation kernel).
CALIBRATION_UNDEFINED = (KernelFunctions.ViscosityKernel, KernelFunctions.AdhesionKernel)


def _asEnum(field: str, value, enum: type[IntEnum]):
    if isinstance(value, enum):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return enum(value)
        except ValueError:
            pass
    raise ValueError(
        f"OperationProperties: {field}={value!r} is not a {enum.__name__}; accepted: "
        f"{enumChoices(enum)}"
    )


@dataclass(frozen=True)
class OperationProperties:
    """Options of an operator call. Frozen and hashable; backends derive per-call copies with
    `dataclasses.replace` and never mutate the caller's object.

    Args:
        kernel: `KernelFunctions` member (required).
        operation: `WarpOperation`, default Interpolate.
        gradientMode: `GradientScheme`, default Naive.
        laplacianMode: `LaplacianScheme`, default Brookshaw.
        positiveDivergence: bool, default False.
        supportMode: `SupportScheme`, default Gather.
        operationMode: `OperationDirection` (the interaction mode: which particle kinds
            query and which are summed as references), default
            `AllQueriesNonGhostReferences` (every query, ghosts excluded as references).
        divergenceDotMode: bool, default False (contract the last index instead of the first).
        n_h: nominal support-to-spacing ratio H/s, used only by lattice calibration.
        calibrateNormalization: bool; needs a positive finite `n_h` and a kernel other than
            ViscosityKernel / AdhesionKernel.

    Integer values of the enums are accepted and converted to members.
    """

    kernel: KernelFunctions
    operation: WarpOperation = WarpOperation.Interpolate
    gradientMode: GradientScheme = GradientScheme.Naive
    laplacianMode: LaplacianScheme = LaplacianScheme.Brookshaw
    positiveDivergence: bool = False
    supportMode: SupportScheme = SupportScheme.Gather
    operationMode: OperationDirection = OperationDirection.AllQueriesNonGhostReferences
    divergenceDotMode: bool = False
    n_h: float | None = None
    calibrateNormalization: bool = False

    def __post_init__(self):
        for field, enum in (
            ("kernel", KernelFunctions),
            ("operation", WarpOperation),
            ("gradientMode", GradientScheme),
            ("laplacianMode", LaplacianScheme),
            ("supportMode", SupportScheme),
            ("operationMode", OperationDirection),
        ):
            object.__setattr__(self, field, _asEnum(field, getattr(self, field), enum))
        for field in ("positiveDivergence", "divergenceDotMode", "calibrateNormalization"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(
                    f"OperationProperties: {field}={getattr(self, field)!r}; accepted: True or False"
                )
        if self.n_h is not None:
            if isinstance(self.n_h, bool) or not isinstance(self.n_h, (int, float)):
                raise TypeError(
                    f"OperationProperties: n_h={self.n_h!r}; accepted: a positive finite number or None"
                )
            object.__setattr__(self, "n_h", float(self.n_h))
        if self.calibrateNormalization:
            if self.n_h is None or not math.isfinite(self.n_h) or self.n_h <= 0:
                raise ValueError(
                    "OperationProperties: calibrateNormalization=True needs a positive finite "
                    f"n_h (support-to-spacing ratio H/s), got n_h={self.n_h!r}"
                )
            if self.kernel in CALIBRATION_UNDEFINED:
                raise ValueError(
                    f"OperationProperties: lattice calibration is undefined for "
                    f"{self.kernel.name} (accepted: every kernel except ViscosityKernel and "
                    "AdhesionKernel)"
                )
