"""Density position Hessian-vector product: the kernel and its launch
`launchHVP`; the entry point is `operationsHVP.warpOperationHVP`.

For each query i, block row i of the position Hessian of rho_i = N sum_j m_j W_ij applied to
the tangent (v on the query positions, u on the reference positions, default 0):

    HVP_i = N sum_j m_j H_ij (v_i - u_j)      [N_q, d]

i.e. the x_i-derivative of ``sum_j m_j grad W_ij . (v_i - u_j)``. ``H_ij`` is the exact
Hessian of the Density pair term under the call's support scheme: at h_ij for Gather,
Scatter, MeanSymmetric and PartialSymmetric, the average 1/2 [H(x, h_i) + H(x, h_j)] for
KernelMeanSymmetric and SuperSymmetric -- exactly `kernels.support.sphKernelGradientJVP_ij`
with zero support tangents. Supports and masses are frozen; kinds, operationMode and the
lattice calibration are those of the forward (the launch state comes from the same
`extractStateInfo`).

Self pairs: when the reference set is the query set (``referenceParticles`` None, or its
positions tensor is the query positions tensor object) the pair ``j == i`` is dropped by
index. The self term W(x_i - x_i) is constant in the one shared variable x_i, so its true
second derivative is H(0) - 2 H(0) + H(0) = 0: dropping is exact. With a shared tangent
(u = v) the dropped factor (v_i - v_i) is 0 anyway; with v != u (e.g. v = e_k, u = 0, the
Jacobi diagonal block) dropping is required. With a distinct reference set nothing is
dropped (equal indices do not identify a particle there).

Implementation: one CSR Warp kernel (one thread per query, the row accumulated in order)
launched through the bridge (`launchHVP` -> `jvpCommon.launchGeometryJVP`, the query
tangent in the pack's ``qPositions``, the reference tangent in ``rPositions``), with the
SCALAR extra ``dropSelf``. No per-edge buffer, no torch scatter, no host sync. The result is
reverse-differentiable (w.r.t. positions, supports, masses and both tangents) through the
bridge; dual tensors reaching it raise.
"""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.jvpCommon import GeometryTangents, launchGeometryJVP
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernelGradientJVP_ij
from ..util.precision import warpScalar
from ._tangents import pairTangent_ij
from ._traversal import makeNeighborSum, pairVector

__all__ = ["densityHVPPairTerm", "densityHVPKernel", "launchHVP"]



@wp.func
def densityHVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, t: Any):
    """m_j H_ij (v_i - u_j) (a d-vector) for a mode-admitted reference j; 0 for the self pair
    j == i when ``F`` (dropSelf) is non-zero."""
    res = q.positions.dtype()
    if F == 0 or j != i:
        if checkDirectionality_j(ks.operationMode, r.kinds[j]):
            x_ij = pairVector(q.positions[i], r.positions[j], dom)
            h_i = q.supports[i]
            h_j = r.supports[j]
            dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
            zero = type(h_i)(0.0)
            res = r.masses[j] * sphKernelGradientJVP_ij(x_ij, h_i, h_j, dx, zero, zero,
                                                        ks.supportMode, ks.kernelFunction,
                                                        dom.dim)
    return res


densityHVPCsrSum, _densityHVPGridSum = makeNeighborSum(
    densityHVPPairTerm, "densityHVP", vector=True, replayZero=True, tangent=True)


@wp.kernel
def densityHVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, tangents: Any,
                     dropSelf: wp.int32, out: wp.array(dtype=Any)):
    """out[i d + a] = N sum_j m_j (H_ij (v_i - u_j))[a] over the CSR row of i (explicit
    adjacency only; `useAdjacency` and `gridState` are part of the ABI and unused); 0 for a
    masked query."""
    i = wp.tid()
    ks = kernelProperties
    val = queryState.positions.dtype()
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        val = densityHVPCsrSum(adjacencyState, i, 0, dropSelf, queryState, referenceState,
                               domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    base = i * domainState.dim
    for a in range(domainState.dim):
        out[base + a] = val[a]


declareStateOverloads(densityHVPKernel, {"out": "scalar"}, tangent=True)


def launchHVP(ctx, tangentQueryPositions, tangentReferencePositions=None,
              dropSelf: bool = False) -> torch.Tensor:
    """Launch `densityHVPKernel` for the prepared Density call `ctx` (`SPHContext`, explicit
    `AdjacencyList`) through the bridge.

    Args:
        ctx: the primal call's context (slots 0-35 come from its `extractStateInfo`).
        tangentQueryPositions: v ``[N_q, d]``.
        tangentReferencePositions: u ``[N_r, d]`` or None (zero, not read).
        dropSelf: skip the pairs j == i (only when the reference set is the query set).

    Returns:
        ``[N_q, d]``, reverse-differentiable.
    """
    pos = ctx.query.positions
    nQ, d = int(pos.shape[0]), int(pos.shape[1])
    tangents = GeometryTangents(qPositions=tangentQueryPositions,
                                rPositions=tangentReferencePositions)
    flat = launchGeometryJVP(densityHVPKernel, ctx, tangents, (nQ * d,), warpScalar(pos.dtype),
                             scalarExtras=(1 if dropSelf else 0,), numThreads=nQ)
    return flat.reshape(nQ, d)
