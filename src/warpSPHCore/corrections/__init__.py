"""Correction builders (`operators.md` §4): CRK factors, gradient renormalization matrices and
the grad-h Omega helper. Every Warp launch runs through the autograd bridge, sync-free.
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

__all__ = [
    "computeCRKFactors",
    "computeCRKFactorsJVP",
    "computeOmega",
    "computeRenormalizationMatrices",
    "computeRenormalizationMatricesJVP",
    "pinv_warp",
    "pinv1x1",
    "pinv2x2_warpBackend",
]
