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


def hvp(fn, primals, tangents):
    """Reverse-over-forward Hessian-vector product (`jvpCommon.hvp`; imported lazily so that
    this package stays importable before the operator modules)."""
    from .jvpCommon import hvp as _hvp

    return _hvp(fn, primals, tangents)


__all__ = [
    "StateAwareWarpFunction",
    "hasLiveTangent",
    "hvp",
    "launch_kernel",
    "allocateTorchWarp",
    "castTorchToWarpAsBuiltins",
    "castTorchToWarp",
    "getCachedWarpArray",
    "getCachedDummyTensor",
    "getCachedIdentityMatrices",
    "clearDummyCaches",
]
