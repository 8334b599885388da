"""Entry point `warpOperationHVP`: the explicit CSR position
Hessian-vector product of the Density, validated and prepared like `warpOperation`, launched
by `operators.densityHVP.launchHVP`."""

from __future__ import annotations

import torch

from .dataTypes.adjacency import AdjacencyList
from .enumTypes import WarpOperation
from .preparation import _prepareCall
from .util.conversion import isFunctorchWrapped
from .util.lazyModule import LazyModule

#: the HVP kernels, imported by the first HVP call (`util.lazyModule`)
_densityHVP = LazyModule("warpSPHCore.operators.densityHVP")

__all__ = ["warpOperationHVP"]

_WHERE = "warpOperationHVP"


def _checkTangent(name: str, t, n: int, d: int, like: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_WHERE}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if isFunctorchWrapped(t):
        raise NotImplementedError(f"{_WHERE}: {name} is a torch.func wrapped tensor; torch.func "
                                  "transforms cannot see Warp kernels (use "
                                  "torch.autograd.forward_ad or warpSPHCore.autograd.hvp)")
    if tuple(t.shape) != (n, d):
        raise ValueError(f"{_WHERE}: {name} has shape {tuple(t.shape)}; accepted: [{n}, {d}] "
                         "(the shape of its positions)")
    if t.dtype != like.dtype:
        raise TypeError(f"{_WHERE}: {name} has dtype {t.dtype}; accepted: {like.dtype} (the "
                        "positions' dtype)")
    if t.device != like.device:
        raise ValueError(f"{_WHERE}: {name} is on {t.device}; accepted: {like.device}")


def warpOperationHVP(queryParticles, operationProperties, domain, tangentQueryPositions,
                     adjacency=None, referenceParticles=None, tangentReferencePositions=None):
    """Density position Hessian-vector product.

    ``HVP_i = N sum_j m_j H_ij (v_i - u_j)``: for each query i, block row i of the position
    Hessian of rho_i applied to the tangent (module docstring), with the pair j == i dropped
    exactly when the reference set is the query set.

    Args:
        queryParticles: `ParticleState` of the queries.
        operationProperties: `OperationProperties` with ``operation=WarpOperation.Density``
            (kernel, supportMode, operationMode and calibration as the forward).
        domain: `DomainDescription`.
        tangentQueryPositions: v ``[N_q, d]`` (same dtype and device as the positions).
        adjacency: an explicit `AdjacencyList` (required: this is the explicit CSR HVP).
        referenceParticles: `ParticleState` of the references, or None (the query set).
        tangentReferencePositions: u ``[N_r, d]`` or None (zero).

    Returns:
        ``[N_q, d]`` tensor; zeros for empty sets. Differentiable in reverse mode.

    Raises:
        NotImplementedError: an operation other than Density; torch.func wrapped tangents.
        ValueError: adjacency not an `AdjacencyList` (a `CompactHashMap` or None); tangent
            shape or device mismatches; invalid primal inputs.
        TypeError: non-tensor tangents or a dtype mismatch.
    """
    op = WarpOperation(operationProperties.operation)
    if op != WarpOperation.Density:
        raise NotImplementedError(f"{_WHERE}: only WarpOperation.Density has a position HVP "
                                  f"(got {op.name}); use warpSPHCore.autograd.hvp (reverse over "
                                  "forward) for other operators")
    if not isinstance(adjacency, AdjacencyList):
        got = "None" if adjacency is None else type(adjacency).__name__
        raise ValueError(f"{_WHERE}: adjacency is {got}; accepted: an explicit AdjacencyList "
                         "(the Density HVP is the explicit CSR position HVP; build one with "
                         "radiusSearch / radiusSearchCompactHashMap)")
    pos = getattr(queryParticles, "positions", None)
    if not isinstance(pos, torch.Tensor) or pos.dim() != 2:
        raise TypeError(f"{_WHERE}: queryParticles must be a ParticleState with positions "
                        "[N_q, d]")
    selfRef = referenceParticles is None or getattr(referenceParticles, "positions",
                                                    None) is pos
    ref = queryParticles if referenceParticles is None else referenceParticles
    rPos = getattr(ref, "positions", None)
    if not isinstance(rPos, torch.Tensor) or rPos.dim() != 2:
        raise TypeError(f"{_WHERE}: referenceParticles must be a ParticleState with positions "
                        "[N_r, d]")
    d = int(domain.dim)
    nQ, nR = int(pos.shape[0]), int(rPos.shape[0])
    _checkTangent("tangentQueryPositions", tangentQueryPositions, nQ, d, pos)
    if tangentReferencePositions is not None:
        _checkTangent("tangentReferencePositions", tangentReferencePositions, nR, d, pos)

    _, ctx, _, _ = _prepareCall(queryParticles, operationProperties, domain,
                                adjacency=adjacency, referenceParticles=referenceParticles)
    # empty sets: the bridge skips the zero-thread launch (or sums empty rows) and returns
    # zeros [N_q, d] that still take part in autograd
    return _densityHVP.launchHVP(ctx, tangentQueryPositions, tangentReferencePositions,
                                 dropSelf=selfRef)
