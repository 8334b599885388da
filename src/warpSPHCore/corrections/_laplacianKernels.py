"""Warp kernel of `secondDerivatives.computeLaplacianCorrection`: the per-query geometric
moments of the consistent second-derivative scheme (module docstring there).

Thread (i, block) of the primal kernel sums a block of d x d components (the last two
indices) of

    M3_i[a,b,c] = sum_j V_j r_a r_b G_c          (d^3 components)
    N3_i[c,p,q] = sum_j V_j r_c w_pq             (d^3)
    M4_i[a,b,p,q] = sum_j V_j r_a r_b w_pq       (d^4)

with r = x_j - x_i = -x_ij (minimum image), G_ij the kernel gradient under the call's support
scheme, and the pair weight of the Brookshaw scheme, symmetrised,

    w_pq = (x_p G_q + x_q G_p) / (2 D^2),   D = r_ij + 1e-8 h_ij,

so that a Brookshaw call with the renormalization slot set to -B/2 sums exactly
``sum_j V_j (f_j - f_i) B : w_ij``. V_j is the reference volume (or m_j / rho_j), masked
references are skipped, masked queries get zeros. Reverse mode comes from Warp's adjoint
through the bridge; an untaped launch takes the kernel specialised on the call's
configuration (`_laplacianSpecialized`, same layout and arithmetic, bitwise equal). Forward
mode: `laplacianMomentsJVPKernel`, the product rule on every factor (dV_j, dx_ij, dG_ij, and
dD = x.dx / r + 1e-8 dh_ij); a pair with r = 0 contributes 0 with tangent 0 (every moment is
at least quadratic in x_ij there, and G(0) = 0).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import OperatorSpec, OutputSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import (
    computePairwiseSupport,
    computePairwiseSupportJVP,
    sphKernelGradient_ij,
)
from ..neighborhood.traversal import gridQueryCell
from ..operators._coefficients import LAPLACIAN_REG_N as _REG_N
from ..operators._coefficients import apparentVolume_j, apparentVolumeJVP_j
from ..operators._tangents import kernelGradientJVP_ij, pairTangent_ij
from ..operators._traversal import makeNeighborSum, pairVector
from ..util.precision import warpScalar

__all__ = ["laplacianMomentComponents", "laplacianMomentBlocks", "laplacianMomentsKernel",
           "laplacianMomentsJVPKernel", "LAPLACIAN_MOMENTS_SPEC"]


def laplacianMomentComponents(d: int) -> int:
    """2 d^3 + d^4 components per query."""
    return 2 * d ** 3 + d ** 4


@wp.func
def _weight(p: wp.int32, q: wp.int32, x_ij: Any, G: Any, D2: Any):
    return (x_ij[p] * G[q] + x_ij[q] * G[p]) / (type(D2)(2.0) * D2)


def laplacianMomentBlocks(d: int) -> int:
    """Threads per query of the primal kernel: 2 d + d^2 blocks of d x d components."""
    return 2 * d + d * d


@wp.func
def _matrixZero(q: Any, ks: Any):
    """The zero d x d accumulator of the call's type."""
    z = q.positions.dtype()
    return wp.outer(z, z)


# Inlined into both traversals: a non-inlined function takes the state structs by value, one
# copy per pair. Measured (2D, 10,000 particles, float64, positions requiring grad): the
# builder's forward + backward 1119 -> 826 ms; the module's cold compile 5.6 -> 6.6 s.
@wp.func
def laplacianMomentPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                            r: Any, dom: Any, corr: Any, ks: Any, extra: Any):
    """V_j times moment block k at the pair (i, j), a d x d matrix over the last two indices
    (one kernel-gradient evaluation serves d^2 components); 0 for a masked reference."""
    z = q.positions.dtype()
    res = wp.outer(z, z)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, d)
        h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
        D = wp.length(x_ij) + type(h_ij)(_REG_N) * h_ij
        V_j = apparentVolume_j(r, corr, j)
        xG = wp.outer(x_ij, G)
        if k < d:  # M3[a, :, :] = x_a (x (x) G)
            res = (V_j * x_ij[k]) * xG
        else:
            w = (xG + wp.transpose(xG)) * (type(h_ij)(1.0) / (type(h_ij)(2.0) * D * D))
            if k < 2 * d:  # N3[c, :, :] = r_c w with r_c = -x_c
                res = (-V_j * x_ij[k - d]) * w
            else:  # M4[a, b, :, :] = x_a x_b w
                kk = k - 2 * d
                a = kk / d
                b = kk - a * d
                res = (V_j * x_ij[a] * x_ij[b]) * w
    return res


laplacianMomentCsrSum, laplacianMomentGridSum = makeNeighborSum(laplacianMomentPairTerm,
                                                                "laplacianMoments",
                                                                zero=_matrixZero)


@wp.kernel
def laplacianMomentsKernel(queryState: Any, referenceState: Any, domainState: Any,
                           useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                           correctionData: Any, kernelProperties: Any,
                           moments: wp.array(dtype=Any)):
    """Thread (i, block): d x d components of query i's moments (module docstring), stored
    at ``moments[i K + block d^2 + b d + c]``; 0 for a masked query."""
    tid = wp.tid()
    d = domainState.dim
    nb = 2 * d + d * d
    i = tid / nb
    blk = tid - i * nb
    ks = kernelProperties
    z = queryState.positions.dtype()
    val = wp.outer(z, z)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = laplacianMomentCsrSum(adjacencyState, i, blk, nb, queryState, referenceState,
                                        domainState, correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = laplacianMomentGridSum(gridState, cell, i, blk, nb, queryState,
                                         referenceState, domainState, correctionData, ks,
                                         referenceState.masses)
    base = (i * nb + blk) * d * d
    # every output element is written exactly once (Warp accumulates the adjoints of
    # overwrites); constant bounds, guarded by d
    for b in range(3):
        for c in range(3):
            if b < d and c < d:
                moments[base + b * d + c] = val[b, c]


declareStateOverloads(laplacianMomentsKernel, {"moments": "scalar"})


# --- forward mode ---------------------------------------------------------------------


@wp.func
def _weightJVP(p: wp.int32, q: wp.int32, x_ij: Any, G: Any, D2: Any, dx: Any, dG: Any,
               dD_over_D: Any):
    """Tangent of `_weight`: the product rule, with d(1 / D^2) = -2 dD / D^3."""
    w = _weight(p, q, x_ij, G, D2)
    num = dx[p] * G[q] + x_ij[p] * dG[q] + dx[q] * G[p] + x_ij[q] * dG[p]
    return num / (type(D2)(2.0) * D2) - type(D2)(2.0) * w * dD_over_D


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def laplacianMomentJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                               r: Any, dom: Any, corr: Any, ks: Any, t: Any):
    """Tangent of `laplacianMomentPairTerm` (tangent pack `t`); 0 for a masked reference or
    r = 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        r_ij = wp.length(x_ij)
        if r_ij > type(r_ij)(0.0):
            h_i = q.supports[i]
            h_j = r.supports[j]
            dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
            G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, d)
            dG = kernelGradientJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
            h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
            dh_ij = computePairwiseSupportJVP(h_i, h_j, dh_i, dh_j, ks.supportMode)
            D = r_ij + type(h_ij)(_REG_N) * h_ij
            D2 = D * D
            dD_over_D = (wp.dot(x_ij, dx) / r_ij + type(h_ij)(_REG_N) * dh_ij) / D
            d3 = d * d * d
            val = type(res)(0.0)
            dval = type(res)(0.0)
            if k < d3:
                a = k / (d * d)
                b = (k / d) - a * d
                c = k - (k / d) * d
                val = x_ij[a] * x_ij[b] * G[c]
                dval = (dx[a] * x_ij[b] * G[c] + x_ij[a] * dx[b] * G[c]
                        + x_ij[a] * x_ij[b] * dG[c])
            elif k < 2 * d3:
                kk = k - d3
                c = kk / (d * d)
                p = (kk / d) - c * d
                qq = kk - (kk / d) * d
                w = _weight(p, qq, x_ij, G, D2)
                val = -x_ij[c] * w
                dval = -dx[c] * w - x_ij[c] * _weightJVP(p, qq, x_ij, G, D2, dx, dG, dD_over_D)
            else:
                kk = k - 2 * d3
                a = kk / d3
                rem = kk - a * d3
                b = rem / (d * d)
                rem2 = rem - b * d * d
                p = rem2 / d
                qq = rem2 - p * d
                w = _weight(p, qq, x_ij, G, D2)
                val = x_ij[a] * x_ij[b] * w
                dval = ((dx[a] * x_ij[b] + x_ij[a] * dx[b]) * w
                        + x_ij[a] * x_ij[b] * _weightJVP(p, qq, x_ij, G, D2, dx, dG, dD_over_D))
            res = apparentVolumeJVP_j(r, corr, t, j) * val + apparentVolume_j(r, corr, j) * dval
    return res


laplacianMomentJVPCsrSum, laplacianMomentJVPGridSum = makeNeighborSum(
    laplacianMomentJVPPairTerm, "laplacianMomentsJVP", replayZero=True, tangent=True)


@wp.kernel
def laplacianMomentsJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                              useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                              correctionData: Any, kernelProperties: Any, tangents: Any,
                              out: wp.array(dtype=Any)):
    """out[i K + c] = the tangent of moment component c of query i; 0 for a masked query."""
    tid = wp.tid()
    d = domainState.dim
    K = 2 * d * d * d + d * d * d * d
    i = tid / K
    c = tid - i * K
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = laplacianMomentJVPCsrSum(adjacencyState, i, c, K, queryState, referenceState,
                                           domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = laplacianMomentJVPGridSum(gridState, cell, i, c, K, queryState,
                                            referenceState, domainState, correctionData, ks,
                                            tangents)
    out[tid] = val


declareStateOverloads(laplacianMomentsJVPKernel, {"out": "scalar"}, tangent=True)


def _specialize(config: dict):
    """`OperatorSpec.specialize`: `_laplacianSpecialized.laplacianMomentsSpecialized`."""
    from ._laplacianSpecialized import laplacianMomentsSpecialized

    return laplacianMomentsSpecialized(config)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


LAPLACIAN_MOMENTS_SPEC = OperatorSpec(
    kernel=laplacianMomentsKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=lambda ctx, extras: (
        ctx.numQueries * laplacianMomentComponents(int(ctx.domain.dim)),)),),
    numThreads=lambda ctx, extras: ctx.numQueries * laplacianMomentBlocks(int(ctx.domain.dim)),
    specialize=_specialize,
)
