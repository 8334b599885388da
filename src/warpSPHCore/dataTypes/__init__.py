"""Data types of the public API, validated at construction (host-known facts only)."""

from .adjacency import AdjacencyList
from .compactHashMap import CompactHashMap
from .corrections import (
    CRKState,
    CRKTangentState,
    GradHState,
    LaplacianCorrectionState,
    LaplacianCorrectionTangentState,
    RenormalizationState,
    RenormalizationTangentState,
)
from .domain import DomainDescription
from .latticeSample import LatticeSample
from .operationProperties import OperationProperties
from .particleState import ParticleState, ParticleTangentState

__all__ = [
    "ParticleState",
    "ParticleTangentState",
    "DomainDescription",
    "OperationProperties",
    "AdjacencyList",
    "CompactHashMap",
    "CRKState",
    "CRKTangentState",
    "GradHState",
    "LaplacianCorrectionState",
    "LaplacianCorrectionTangentState",
    "RenormalizationState",
    "RenormalizationTangentState",
    "LatticeSample",
]
