"""The torch <-> Warp autograd bridge (`autodiff.md`).

Exports of the bridge core; the operator-facing modules (`arg_extract`, `operator_spec`,
`wrapper`) are added alongside.
"""

from .cache import (
    clearDummyCaches,
    getCachedDummyTensor,
    getCachedIdentityMatrices,
    getCachedWarpArray,
)
from .launcher import (
    allocateTorchWarp,
    castTorchToWarp,
    castTorchToWarpAsBuiltins,
    launch_kernel,
)
from .stateAwareWarpFunction import StateAwareWarpFunction, hasLiveTangent

__all__ = [
    "StateAwareWarpFunction",
    "hasLiveTangent",
    "launch_kernel",
    "allocateTorchWarp",
    "castTorchToWarpAsBuiltins",
    "castTorchToWarp",
    "getCachedWarpArray",
    "getCachedDummyTensor",
    "getCachedIdentityMatrices",
    "clearDummyCaches",
]
