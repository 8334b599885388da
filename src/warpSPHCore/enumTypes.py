"""Every SPH enum of warpSPHCore with its exact integer value.

The values are compiled into Warp kernels and must never change. Note that
the kernel values are not in name order (B8 = 33, B7 = 34).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

__all__ = [
    "KernelFunctions",
    "SupportScheme",
    "GradientScheme",
    "LaplacianScheme",
    "WarpOperation",
    "OperationDirection",
    "Interaction",
    "InteractionKinds",
    "interactionKinds",
    "interactionAliases",
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
    """Pairwise support rule h_ij: h_i, h_j, (h_i + h_j)/2 or max(h_i, h_j) (docs/kernels.md)."""

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
    #: (`corrections.computeLaplacianCorrection`)
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
    """Which particle kinds interact in an operator call (`OperationProperties.operationMode`).

    An operator computes one row per query particle i as a sum over its reference
    particles j. An interaction mode names the kinds admitted on each side, query first:
    `FluidQueriesNonGhostReferences` gives fluid rows, each summing over its non-ghost
    (fluid, boundary and other) neighbours. A query whose kind the mode does not admit gets
    an all-zero row; a reference whose kind it does not admit is skipped. `Unmasked` (0)
    tests neither side (ghosts included); `AllQueriesNonGhostReferences` (9) is the default.
    `interactionKinds(mode)` returns the admitted kinds of both sides.

    The names of earlier versions, "X to Y" with information flowing from reference kind X
    to query kind Y (`AllToFluid`: fluid queries, non-ghost references; `TrueAllToToAll`,
    spelled exactly so, for `Unmasked`), remain as aliases of the same members:
    ``OperationDirection.AllToFluid is OperationDirection.FluidQueriesNonGhostReferences``,
    and ``member.name`` is the new name. `Interaction` is another name of this enum. The
    values are compiled into the Warp kernels and never change.
    """

    Unmasked = 0
    FluidQueriesFluidReferences = 1
    BoundaryQueriesFluidReferences = 2
    FluidQueriesBoundaryReferences = 3
    BoundaryQueriesBoundaryReferences = 4
    GhostQueriesFluidReferences = 5
    FluidQueriesGhostReferences = 6
    GhostQueriesBoundaryReferences = 7
    BoundaryQueriesGhostReferences = 8
    AllQueriesNonGhostReferences = 9
    GhostQueriesNonGhostReferences = 10
    FluidQueriesNonGhostReferences = 11
    BoundaryQueriesNonGhostReferences = 12
    NonGhostQueriesFluidReferences = 13
    NonGhostQueriesBoundaryReferences = 14

    # the names of earlier versions ("reference kind To query kind"): aliases
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


#: another name of `OperationDirection`
Interaction = OperationDirection


class ParticleType(IntEnum):
    """Codes stored in `ParticleState.kinds` (int32)."""

    Fluid = 0
    Boundary = 1
    Ghost = 2
    Other = 3


class InteractionKinds(NamedTuple):
    """The particle kinds an interaction mode admits: `queries` get a row, `references`
    contribute to the rows (`interactionKinds`)."""

    queries: frozenset[ParticleType]
    references: frozenset[ParticleType]


_ALL_KINDS = frozenset(ParticleType)
_NON_GHOST = _ALL_KINDS - {ParticleType.Ghost}
_FLUID = frozenset({ParticleType.Fluid})
_BOUNDARY = frozenset({ParticleType.Boundary})
_GHOST = frozenset({ParticleType.Ghost})

_M = OperationDirection
#: (query kinds, reference kinds) of every mode: the kind tests the Warp kernels compile
#: (`kernels.geometry.checkDirectionality_i` / `_j`)
_INTERACTION_KINDS = {
    _M.Unmasked: InteractionKinds(_ALL_KINDS, _ALL_KINDS),
    _M.FluidQueriesFluidReferences: InteractionKinds(_FLUID, _FLUID),
    _M.BoundaryQueriesFluidReferences: InteractionKinds(_BOUNDARY, _FLUID),
    _M.FluidQueriesBoundaryReferences: InteractionKinds(_FLUID, _BOUNDARY),
    _M.BoundaryQueriesBoundaryReferences: InteractionKinds(_BOUNDARY, _BOUNDARY),
    _M.GhostQueriesFluidReferences: InteractionKinds(_GHOST, _FLUID),
    _M.FluidQueriesGhostReferences: InteractionKinds(_FLUID, _GHOST),
    _M.GhostQueriesBoundaryReferences: InteractionKinds(_GHOST, _BOUNDARY),
    _M.BoundaryQueriesGhostReferences: InteractionKinds(_BOUNDARY, _GHOST),
    _M.AllQueriesNonGhostReferences: InteractionKinds(_ALL_KINDS, _NON_GHOST),
    _M.GhostQueriesNonGhostReferences: InteractionKinds(_GHOST, _NON_GHOST),
    _M.FluidQueriesNonGhostReferences: InteractionKinds(_FLUID, _NON_GHOST),
    _M.BoundaryQueriesNonGhostReferences: InteractionKinds(_BOUNDARY, _NON_GHOST),
    _M.NonGhostQueriesFluidReferences: InteractionKinds(_NON_GHOST, _FLUID),
    _M.NonGhostQueriesBoundaryReferences: InteractionKinds(_NON_GHOST, _BOUNDARY),
}
del _M


def interactionKinds(mode) -> InteractionKinds:
    """The particle kinds an interaction mode admits on each side.

    Args:
        mode: an `OperationDirection` member (canonical name or alias) or its int value.

    Returns:
        ``InteractionKinds(queries, references)``, two frozensets of `ParticleType`: the
        kinds whose query rows are computed (the others are zero) and the kinds whose
        references are summed (the others are skipped). For example
        ``ParticleType.Boundary in interactionKinds(mode).references`` tells whether a call
        in `mode` ever reads a boundary particle as a reference.

    Raises:
        ValueError: `mode` is not an `OperationDirection` member or value.
    """
    return _INTERACTION_KINDS[asInteraction(mode, "interactionKinds")]


def interactionAliases(mode) -> tuple[str, ...]:
    """The earlier ("X to Y") names of an interaction mode, aliases of its member.

    Args:
        mode: an `OperationDirection` member or its int value.

    Returns:
        The alias names in definition order (one per mode), e.g. ``("AllToFluid",)`` for
        `FluidQueriesNonGhostReferences`.
    """
    member = asInteraction(mode, "interactionAliases")
    return tuple(name for name, m in OperationDirection.__members__.items()
                 if m is member and name != member.name)


def asInteraction(mode, owner: str = "operationMode") -> OperationDirection:
    """`mode` as an `OperationDirection` member (an int value is accepted).

    Args:
        mode: an `OperationDirection` member or its int value.
        owner: the name the ValueError message starts with.

    Returns:
        The member.

    Raises:
        ValueError: naming every accepted mode, when `mode` is neither.
    """
    if isinstance(mode, OperationDirection):
        return mode
    if isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return OperationDirection(mode)
        except ValueError:
            pass
    raise ValueError(f"{owner}: {mode!r} is not an interaction mode (OperationDirection); "
                     f"accepted: {enumChoices(OperationDirection)}")


def enumChoices(enum: type[IntEnum]) -> str:
    """The members of `enum` as a user-facing list, names first: ``Naive (1), Symmetric (2),
    ...`` (aliases left out).

    Args:
        enum: an `IntEnum` class of this module.
    """
    return ", ".join(f"{m.name} ({m.value})" for m in enum)


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
