"""Warp kernel of `consistentLaplacian.computeLaplacianCorrection`: the per-query geometric
moments of the consistent second-derivative scheme (module docstring there).

Thread (i, c) sums component c of

    M3_i[a,b,c] = sum_j V_j r_a r_b G_c          (d^3 components)
    N3_i[c,p,q] = sum_j V_j r_c w_pq             (d^3)
    M4_i[a,b,p,q] = sum_j V_j r_a r_b w_pq       (d^4)

with r = x_j - x_i = -x_ij (minimum image), G_ij the kernel gradient under the call's support
scheme, and the pair weight of the Brookshaw scheme, symmetrised,

    w_pq = (x_p G_q + x_q G_p) / (2 D^2),   D = r_ij + 1e-8 h_ij,

so that a Brookshaw call with the renormalization slot set to -B/2 sums exactly
``sum_j V_j (f_j - f_i) B : w_ij``. V_j is the reference volume (or m_j / rho_j), masked
references are skipped, masked queries get zeros. Reverse mode comes from Warp's adjoint
through the bridge; no forward-mode kernel (see the builder).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import OperatorSpec, OutputSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import computePairwiseSupport, sphKernelGradient_ij
from ..neighborhood.traversal import gridQueryCell
from ..operators._coefficients import LAPLACIAN_REG_N as _REG_N
from ..operators._coefficients import apparentVolume_j
from ..operators._traversal import makeNeighborSum, pairVector
from ..util.precision import warpScalar

__all__ = ["laplacianMomentComponents", "laplacianMomentsKernel", "LAPLACIAN_MOMENTS_SPEC"]


def laplacianMomentComponents(d: int) -> int:
    """2 d^3 + d^4 components per query."""
    return 2 * d ** 3 + d ** 4


@wp.func
def _weight(p: wp.int32, q: wp.int32, x_ij: Any, G: Any, D2: Any):
    return (x_ij[p] * G[q] + x_ij[q] * G[p]) / (type(D2)(2.0) * D2)


# inline=False: one compiled copy shared by the CSR and grid traversals (testing.md §17).
@wp.func(inline=False)
def laplacianMomentPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                            r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
    """V_j times moment component k at the pair (i, j); 0 for a masked reference."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, d)
        h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
        D = wp.length(x_ij) + type(h_ij)(_REG_N) * h_ij
        D2 = D * D
        d3 = d * d * d
        val = type(res)(0.0)
        if k < d3:  # M3[a, b, c]
            a = k / (d * d)
            b = (k / d) - a * d
            c = k - (k / d) * d
            val = x_ij[a] * x_ij[b] * G[c]
        elif k < 2 * d3:  # N3[c, p, q] with r_c = -x_c
            kk = k - d3
            c = kk / (d * d)
            p = (kk / d) - c * d
            qq = kk - (kk / d) * d
            val = -x_ij[c] * _weight(p, qq, x_ij, G, D2)
        else:  # M4[a, b, p, q]
            kk = k - 2 * d3
            a = kk / d3
            rem = kk - a * d3
            b = rem / (d * d)
            rem2 = rem - b * d * d
            p = rem2 / d
            qq = rem2 - p * d
            val = x_ij[a] * x_ij[b] * _weight(p, qq, x_ij, G, D2)
        res = apparentVolume_j(r, corr, j) * val
    return res


laplacianMomentCsrSum, laplacianMomentGridSum = makeNeighborSum(laplacianMomentPairTerm,
                                                                "laplacianMoments")


@wp.kernel
def laplacianMomentsKernel(queryState: Any, referenceState: Any, domainState: Any,
                           useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                           correctionData: Any, kernelProperties: Any,
                           moments: wp.array(dtype=Any)):
    """moments[i K + c] = component c of query i (module docstring); 0 for a masked query."""
    tid = wp.tid()
    d = domainState.dim
    K = 2 * d * d * d + d * d * d * d
    i = tid / K
    c = tid - i * K
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = laplacianMomentCsrSum(adjacencyState, i, c, K, queryState, referenceState,
                                        domainState, correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = laplacianMomentGridSum(gridState, cell, i, c, K, queryState, referenceState,
                                         domainState, correctionData, ks,
                                         referenceState.masses)
    moments[tid] = val


declareStateOverloads(laplacianMomentsKernel, {"moments": "scalar"})


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


LAPLACIAN_MOMENTS_SPEC = OperatorSpec(
    kernel=laplacianMomentsKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=lambda ctx, extras: (
        ctx.numQueries * laplacianMomentComponents(int(ctx.domain.dim)),)),),
    numThreads=lambda ctx, extras: ctx.numQueries * laplacianMomentComponents(
        int(ctx.domain.dim)),
)
