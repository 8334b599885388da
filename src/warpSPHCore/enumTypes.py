"""Every SPH enum of warpSPHCore with its exact integer value.

The values are compiled into Warp kernels and must never change (`kernels.md` §1). Note that
the kernel values are not in name order (B8 = 33, B7 = 34).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "KernelFunctions",
    "SupportScheme",
    "GradientScheme",
    "LaplacianScheme",
    "WarpOperation",
    "OperationDirection",
    "ParticleType",
    "HashMapLengthMode",
    "ExecutionMode",
    "supportSchemeToUint",
]


class KernelFunctions(IntEnum):
    """Smoothing kernels (shape functions in `kernels/shapes.py`)."""

    Wendland2 = 0
    Wendland4 = 1
    Wendland6 = 2
    Poly6 = 20
    Spiky = 21
    CubicSpline = 30
    QuarticSpline = 31
    QuinticSpline = 32
    B8 = 33
    B7 = 34
    HOCT4 = 35
    Gaussian = 36
    ViscosityKernel = 40
    CohesionKernel = 41
    AdhesionKernel = 42


class SupportScheme(IntEnum):
    """Pairwise support rule h_ij (`kernels.md` §6)."""

    Gather = 11
    Scatter = 12
    MeanSymmetric = 13
    KernelMeanSymmetric = 14
    SuperSymmetric = 15
    PartialSymmetric = 16


class GradientScheme(IntEnum):
    Naive = 1
    Symmetric = 2
    Difference = 3
    Summation = 4


class LaplacianScheme(IntEnum):
    Naive = 1
    Brookshaw = 2
    Dot = 3
    Default = 4
    #: first-order consistent (exact for quadratic fields), with a `LaplacianCorrectionState`
    #: (`corrections.computeLaplacianCorrection`); issue 18
    Consistent = 5


class WarpOperation(IntEnum):
    Interpolate = 1
    Gradient = 2
    Divergence = 3
    Curl = 4
    Laplacian = 5
    Density = 6
    Covariance = 7
    Custom = 8
    Momentum = 9


class OperationDirection(IntEnum):
    """Which (query kind, reference kind) pairs interact (`operators.md` §6).

    `TrueAllToToAll` (spelled exactly so) is the "no masking" sentinel; `AllToAll` (9, the
    default) is a real mode (pitfall W36).
    """

    TrueAllToToAll = 0
    FluidToFluid = 1
    FluidToBoundary = 2
    BoundaryToFluid = 3
    BoundaryToBoundary = 4
    FluidToGhost = 5
    GhostToFluid = 6
    BoundaryToGhost = 7
    GhostToBoundary = 8
    AllToAll = 9
    AllToGhost = 10
    AllToFluid = 11
    AllToBoundary = 12
    FluidToAll = 13
    BoundaryToAll = 14


class ParticleType(IntEnum):
    """Codes stored in `ParticleState.kinds` (int32)."""

    Fluid = 0
    Boundary = 1
    Ghost = 2
    Other = 3


class HashMapLengthMode(IntEnum):
    Fixed = 0
    NumberOfParticles = 1
    NextPrime = 2


class ExecutionMode(IntEnum):
    NONE = 0
    REVERSE = 1
    FORWARD = 2
    AUTO = 3


def supportSchemeToUint(scheme) -> int:
    """Map a `SupportScheme` member to its integer value (11-16); ValueError otherwise.

    Args:
        scheme: a `SupportScheme` member or its int value.

    Returns:
        The int value (11-16) of the scheme.
    """
    if isinstance(scheme, SupportScheme):
        return int(scheme.value)
    if isinstance(scheme, int) and not isinstance(scheme, bool):
        try:
            return int(SupportScheme(scheme).value)
        except ValueError:
            pass
    raise ValueError(
        f"supportSchemeToUint: scheme={scheme!r} is not a SupportScheme; accepted: "
        + ", ".join(f"{m.name}={m.value}" for m in SupportScheme)
    )
