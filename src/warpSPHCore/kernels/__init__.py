"""Smoothing kernels: Warp-level shape functions, per-pair quantities and support schemes.

Warp functions (usable inside user kernels):

* `shapes`: `sphShape` (k, k', k'', k''') and the float64 metadata functions
  `sphKernelC_d_warp`, `sphKernelScale_warp`, `packingRatio_warp`, `sphKernel_xi_warp`,
  `sphKernelN_H_warp`.
* `evaluation`: single-support W, grad W (custom adjoint), dW/dh, d(grad W)/dh (custom
  adjoint), Hessian and its derivatives, kernel Laplacian and its derivatives, JVP helpers.
* `support`: `computePairwiseSupport` and the `_ij` pairwise variants (W_ij, grad W_ij
  and their helpers under a `SupportScheme`).
* `geometry`: `computeDistanceVec`, `checkDirectionality_i`, `checkDirectionality_j`.

The `evaluation` and `support` functions are resolved on first access through this package
(``from warpSPHCore.kernels import sphKernelGradient_ij``): that access registers the custom
adjoints of grad W and d(grad W)/dh (`evaluation.registerCustomAdjoints`, deferred from the
import because it costs about a second and a first result with the specialised kernels
never needs it). A user kernel built from functions taken straight from the submodules, and
launched before any library launch, calls `registerCustomAdjoints()` first.

All per-pair quantities are unnormalised (N = 1); lattice calibration multiplies them by N
in the operator code.

Host functions (float64, no device work):

* `metadata`: `sphKernelC_d`, `sphKernelScale`, `packingRatio`, `sphKernel_xi`,
  `sphKernelN_H`, `volumeToSupport`, `volumeToSupport_tensor`, `n_h_to_nH`, `nH_to_n_h`.
* `lattice`: `latticeDensity` and its methods, `latticeDensityFactor`, helpers.
* `densityCorrection`: `applyDensityCorrection`, `selfTermW0`, `densityCorrectionConstants`.
"""

from . import evaluation as _evaluation
from . import support as _support
from .densityCorrection import applyDensityCorrection, densityCorrectionConstants, selfTermW0
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


_LAZY = {name: _evaluation for name in _evaluation.__all__}
_LAZY.update({name: _support for name in _support.__all__})


def __getattr__(name: str):
    """The Warp functions of `evaluation` and `support`, with the custom adjoints registered
    first (module docstring)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _evaluation.registerCustomAdjoints()
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
