"""The torch <-> Warp autograd bridge (design: docs/autograd.md).

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
    this package stays importable before the operator modules).

    Args:
        fn: callable of the primals returning a scalar tensor.
        primals: a floating-point tensor or a tuple of them (need not require grad).
        tangents: matching tensor(s) v, one per primal, of the primal's shape.

    Returns:
        ``(value, Hv)``: the detached value of ``fn`` and a tuple of ``H v`` per primal (a
        single tensor when `primals` is a tensor).
    """
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
