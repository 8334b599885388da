"""Smoothing kernels: Warp-level shape functions, per-pair quantities and support schemes.

Warp functions (usable inside user kernels; `kernels.md` §8):

* `shapes`: `sphShape` (k, k', k'', k''') and the float64 metadata functions
  `sphKernelC_d_warp`, `sphKernelScale_warp`, `packingRatio_warp`, `sphKernel_xi_warp`,
  `sphKernelN_H_warp`.
* `evaluation`: single-support W, grad W (custom adjoint), dW/dh, d(grad W)/dh (custom
  adjoint), Hessian and its derivatives, kernel Laplacian and its derivatives, JVP helpers.
* `support`: `computePairwiseSupport` and the `_ij` pairwise variants of `kernels.md` §6.
* `geometry`: `computeDistanceVec`, `checkDirectionality_i`, `checkDirectionality_j`.

All per-pair quantities are unnormalised (N = 1); lattice calibration multiplies them by N
in the operator code.

Host functions (float64, no device work):

* `metadata`: `sphKernelC_d`, `sphKernelScale`, `packingRatio`, `sphKernel_xi`,
  `sphKernelN_H`, `volumeToSupport`, `volumeToSupport_tensor`, `n_h_to_nH`, `nH_to_n_h`.
* `lattice`: `latticeDensity` and its methods, `latticeDensityFactor`, helpers.
* `densityCorrection`: `applyDensityCorrection`, `selfTermW0`, `densityCorrectionConstants`.
"""

from .densityCorrection import applyDensityCorrection, densityCorrectionConstants, selfTermW0
from .evaluation import (
    sphGradientD2kDh2,
    sphGradientDkDh,
    sphKernel,
    sphKernelDkDh,
    sphKernelEps,
    sphKernelGradient,
    sphKernelGradientJVP,
    sphKernelGradientVJP,
    sphKernelHessian,
    sphKernelHessianDkDh,
    sphKernelHessianDot,
    sphKernelHessianJVP,
    sphKernelJVP,
    sphKernelLaplacian,
    sphKernelLaplacianDkDh,
    sphKernelLaplacianGradient,
    sphKernelLaplacianJVP,
    sphKernelThirdDerivative,
    sphKernelThirdDerivativeContract,
)
from .geometry import checkDirectionality_i, checkDirectionality_j, computeDistanceVec
from .lattice import (
    epsteinZeta,
    jacobiR2,
    kernelFourierTransform,
    latticeDensity,
    latticeDensityClosed,
    latticeDensityFactor,
    latticeDensityFourier,
    latticeDensityIsStrictlyAbove1,
    latticeDensityShells,
    shellCounts,
)
from .metadata import (
    n_h_to_nH,
    nH_to_n_h,
    packingRatio,
    sphKernel_xi,
    sphKernelC_d,
    sphKernelN_H,
    sphKernelScale,
    volumeToSupport,
    volumeToSupport_tensor,
)
from .shapes import (
    packingRatio_warp,
    sphKernel_xi_warp,
    sphKernelC_d_warp,
    sphKernelN_H_warp,
    sphKernelScale_warp,
    sphShape,
)
from .support import (
    computePairwiseSupport,
    computePairwiseSupportJVP,
    sphGradientDkDh_ij,
    sphKernel_ij,
    sphKernelDkDh_ij,
    sphKernelGradient_ij,
    sphKernelGradientJVP_ij,
    sphKernelGradientJVPPositions_ij,
    sphKernelGradientVJP_ij,
    sphKernelHessian_ij,
    sphKernelJVP_ij,
    sphKernelJVPPositions_ij,
    sphKernelLaplacian_ij,
    sphKernelLaplacianDkDh_ij,
    sphKernelLaplacianGradient_ij,
    sphKernelLaplacianJVP_ij,
)

__all__ = [
    # host metadata
    "sphKernelC_d",
    "sphKernelScale",
    "packingRatio",
    "sphKernel_xi",
    "sphKernelN_H",
    "volumeToSupport",
    "volumeToSupport_tensor",
    "n_h_to_nH",
    "nH_to_n_h",
    # lattice calibration and density correction
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
    # shapes and metadata
    "sphShape",
    "sphKernelC_d_warp",
    "sphKernelScale_warp",
    "packingRatio_warp",
    "sphKernel_xi_warp",
    "sphKernelN_H_warp",
    # single support
    "sphKernelEps",
    "sphKernel",
    "sphKernelGradient",
    "sphKernelDkDh",
    "sphGradientDkDh",
    "sphGradientD2kDh2",
    "sphKernelHessian",
    "sphKernelHessianDot",
    "sphKernelGradientVJP",
    "sphKernelHessianDkDh",
    "sphKernelThirdDerivative",
    "sphKernelThirdDerivativeContract",
    "sphKernelHessianJVP",
    "sphKernelLaplacian",
    "sphKernelLaplacianGradient",
    "sphKernelLaplacianDkDh",
    "sphKernelLaplacianJVP",
    "sphKernelJVP",
    "sphKernelGradientJVP",
    # pairwise
    "computePairwiseSupport",
    "computePairwiseSupportJVP",
    "sphKernel_ij",
    "sphKernelGradient_ij",
    "sphKernelJVP_ij",
    "sphKernelGradientJVP_ij",
    "sphKernelGradientJVPPositions_ij",
    "sphKernelGradientVJP_ij",
    "sphKernelJVPPositions_ij",
    "sphKernelDkDh_ij",
    "sphGradientDkDh_ij",
    "sphKernelHessian_ij",
    "sphKernelLaplacian_ij",
    "sphKernelLaplacianGradient_ij",
    "sphKernelLaplacianDkDh_ij",
    "sphKernelLaplacianJVP_ij",
    # geometry
    "computeDistanceVec",
    "checkDirectionality_i",
    "checkDirectionality_j",
]
