"""warpSPHCore: differentiable SPH building blocks on NVIDIA Warp, bridged into PyTorch.

The public surface is this module's `__all__`; everything else is internal. Warp-level pair
functions for user kernels live in `warpSPHCore.kernels`, the traversal helpers for operator
kernels in `warpSPHCore.neighborhood`.
"""

from ._version import __version__
from .corrections import (
    computeCRKFactors,
    computeCRKFactorsJVP,
    computeOmega,
    computeRenormalizationMatrices,
    computeRenormalizationMatricesJVP,
)
from .dataTypes import (
    AdjacencyList,
    CompactHashMap,
    CRKState,
    CRKTangentState,
    DomainDescription,
    GradHState,
    LatticeSample,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    RenormalizationState,
    RenormalizationTangentState,
)
from .enumTypes import (
    ExecutionMode,
    GradientScheme,
    HashMapLengthMode,
    Interaction,
    InteractionKinds,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    ParticleType,
    SupportScheme,
    WarpOperation,
    interactionKinds,
    supportSchemeToUint,
)
from .kernels import (
    applyDensityCorrection,
    densityCorrectionConstants,
    epsteinZeta,
    jacobiR2,
    kernelFourierTransform,
    latticeDensity,
    latticeDensityClosed,
    latticeDensityFactor,
    latticeDensityFourier,
    latticeDensityIsStrictlyAbove1,
    latticeDensityShells,
    n_h_to_nH,
    nH_to_n_h,
    packingRatio,
    selfTermW0,
    shellCounts,
    sphKernel_xi,
    sphKernelC_d,
    sphKernelN_H,
    sphKernelScale,
    volumeToSupport,
    volumeToSupport_tensor,
)
from .neighborhood import (
    buildCompactHashMap,
    buildVerletList,
    cellOrder,
    deferVerletChecks,
    filterVerletList,
    getNextPrime,
    inverseOrder,
    radiusNaive,
    radiusNaiveFixed,
    radiusSearchCompactHashMap,
    reorder,
)
from .operations import sphOperation_warp, warpOperation, warpOperationHVP, warpOperationJVP
from .sampling import generateNeighborTestData, sampleDensestLattice
from .util.errorFlags import NeighborListError, checkErrors, setEagerErrorChecks

__all__ = [
    "__version__",
    # entry points
    "warpOperation",
    "warpOperationJVP",
    "warpOperationHVP",
    "sphOperation_warp",
    # correction builders
    "computeCRKFactors",
    "computeCRKFactorsJVP",
    "computeRenormalizationMatricesJVP",
    "computeRenormalizationMatrices",
    "computeOmega",
    # enums
    "KernelFunctions",
    "SupportScheme",
    "GradientScheme",
    "LaplacianScheme",
    "WarpOperation",
    "OperationDirection",
    "Interaction",
    "InteractionKinds",
    "interactionKinds",
    "ParticleType",
    "HashMapLengthMode",
    "ExecutionMode",
    "supportSchemeToUint",
    # data types
    "ParticleState",
    "ParticleTangentState",
    "DomainDescription",
    "OperationProperties",
    "AdjacencyList",
    "CompactHashMap",
    "CRKState",
    "CRKTangentState",
    "GradHState",
    "RenormalizationState",
    "RenormalizationTangentState",
    "LatticeSample",
    # deferred error reports of the neighbour traversals
    "checkErrors",
    "setEagerErrorChecks",
    "NeighborListError",
    # neighbour search
    "radiusSearchCompactHashMap",
    "buildCompactHashMap",
    "buildVerletList",
    "deferVerletChecks",
    "filterVerletList",
    "radiusNaive",
    "radiusNaiveFixed",
    "getNextPrime",
    # particle order
    "cellOrder",
    "reorder",
    "inverseOrder",
    # kernel metadata, lattice calibration, density correction
    "sphKernelScale",
    "sphKernelC_d",
    "sphKernelN_H",
    "sphKernel_xi",
    "packingRatio",
    "volumeToSupport",
    "volumeToSupport_tensor",
    "n_h_to_nH",
    "nH_to_n_h",
    "latticeDensity",
    "latticeDensityFactor",
    "latticeDensityShells",
    "latticeDensityFourier",
    "latticeDensityClosed",
    "latticeDensityIsStrictlyAbove1",
    "kernelFourierTransform",
    "epsteinZeta",
    "shellCounts",
    "jacobiR2",
    "applyDensityCorrection",
    "selfTermW0",
    "densityCorrectionConstants",
    # sampling
    "sampleDensestLattice",
    "generateNeighborTestData",
]
