"""Correction builders: CRK factors, gradient renormalization matrices, the grad-h Omega
helper, and the consistent second derivatives (`computeLaplacianCorrection`,
`consistentLaplacian`, `consistentHessian`). Every Warp launch runs through the autograd
bridge, sync-free.
"""

from .crk import computeCRKFactors, computeCRKFactorsJVP
from .gradH import computeOmega
from .renormalization import (
    computeRenormalizationMatrices,
    computeRenormalizationMatricesJVP,
    pinv1x1,
    pinv2x2_warpBackend,
    pinv_warp,
)
from .secondDerivatives import (
    LaplacianCorrectionState,
    LaplacianCorrectionTangentState,
    computeLaplacianCorrection,
    computeLaplacianCorrectionJVP,
    consistentHessian,
    consistentHessianJVP,
    consistentLaplacian,
    consistentLaplacianJVP,
)

__all__ = [
    "LaplacianCorrectionState",
    "LaplacianCorrectionTangentState",
    "computeLaplacianCorrection",
    "computeLaplacianCorrectionJVP",
    "consistentLaplacian",
    "consistentLaplacianJVP",
    "consistentHessian",
    "consistentHessianJVP",
    "computeCRKFactors",
    "computeCRKFactorsJVP",
    "computeOmega",
    "computeRenormalizationMatrices",
    "computeRenormalizationMatricesJVP",
    "pinv_warp",
    "pinv1x1",
    "pinv2x2_warpBackend",
]
