"""Warp kernels of the CRK correction builder (`crk.computeCRKFactors`, docs/corrections.md).

Three declared operator kernels in the canonical ABI, launched through `launchOperator` (and
therefore differentiable in reverse mode through the bridge):

* `CRK_VOLUME_SPEC` (step 1, call with Gather on the reference set R as query = reference):
  ``V_j = 1 / sum_k W(x_jk, h_j)`` over mode-admitted k (self included); V = 0 for a masked
  j and when the sum is exactly 0. One thread per particle.
* `CRK_MOMENTS_SPEC` (step 2, call with Scatter and ``referenceVolumes = V``): per query i,
  with ``W_ij``, ``grad W_ij`` under the call's support scheme and ``V_j`` the reference
  volume,

  ==========  ============================================================  ===============
  output      formula                                                       layout
  ==========  ============================================================  ===============
  m0          sum_j V_j W_ij                                                ``[N_q]``
  m1          sum_j V_j W_ij x_ij[a]                                        ``[N_q, d]``
  m2          sum_j V_j W_ij x_ij[a] x_ij[b]                                ``[N_q, d, d]``
  dm0         sum_j V_j gradW_ij[g]                                         ``[N_q, d]``
  dm1         sum_j V_j (x_ij[a] gradW_ij[g] + W_ij delta_ag)               ``[N_q, a, g]``
  dm2         sum_j V_j (x_a x_b gradW_g + W_ij (x_a delta_bg + delta_ag x_b))  ``[N_q, g, a, b]``
  count       number of visited mode-admitted pairs (self included), int32  ``[N_q]``
  ==========  ============================================================  ===============

  One thread per output element: ``K = 2 + 2d + 2d^2 + d^3`` components per query (the last
  one is the count), all produced by one pair term so the CSR and grid traversals compile
  once. A masked query gets zeros (count 0).
* `CRK_DENSITY_SPEC` (step 5, call with Scatter, ``referenceVolumes = V`` and a CRKState with
  A, B): ``rho_i = sum_j m_j V_j W^R_ij / sum_j V_j^2 W^R_ij``, 0 when the denominator is
  exactly 0 or the query is masked. One thread per query.

Forward mode (`crk.computeCRKFactorsJVP`), two Tier-2 JVP kernels in the `jvpCommon` ABI, launched
with `launchGeometryJVP` (reverse-differentiable through the bridge: reverse over forward):

* `crkVolumeJVPKernel` (the volume call's context: Gather on R, query = reference = R, the R
  tangent in both roles): ``S'_j = sum_k dW(x_jk, h_j)`` over the pairs of step 1; the caller
  forms ``dV_j = -V_j^2 S'_j`` (0 where V = 0: masked j or a zero sum).
* `crkMomentsJVPKernel` (the moments call's context, the tangent pack carrying dV as the
  reference-volume tangent): one thread per (query, component) for the ``K - 1`` moment
  components (no count), ``sum_j dV_j c_k(x, W, grad W) + V_j dc_k`` with
  ``dc_k = crkMomentComponentJVP_ij`` the exact tangent of `crkMomentComponent_ij` for
  ``(dx_ij, dW_ij, d grad W_ij)`` (`_tangents.kernelJVP_ij`, `kernelGradientJVP_ij`: Hessian and
  d grad W / dh under the Scatter rule). Layout per query ``[m0 | m1 | m2 | dm0 | dm1 |
  dm2]`` as the primal outputs; a masked query gets zeros.

Warp reverse-mode pitfalls avoided: loops only accumulate (`makeNeighborSum`), and every 1/x
or ratio is applied one level up in the kernel on the returned raw sums (Warp loses part of
the adjoint of a loop accumulator divided or used non-linearly inside the looped function);
no ternaries on array reads (a ternary reading an array could zero that array's adjoint).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import OperatorSpec, OutputSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import (
    sphKernel_ij,
    sphKernelGradient_ij,
)
from ..neighborhood.traversal import gridQueryCell
from ..operators._coefficients import apparentVolume_j, apparentVolumeJVP_j
from ..operators._tangents import (
    kernelGradientJVP_ij,
    kernelJVP_ij,
    pairTangent_ij,
)
from ..operators._traversal import makeNeighborSum, pairVector
from ..operators.corrected import correctedKernel_ij
from ..util.precision import warpScalar

__all__ = [
    "crkMomentComponents",
    "CRK_VOLUME_SPEC",
    "CRK_MOMENTS_SPEC",
    "CRK_DENSITY_SPEC",
    "crkMomentComponentJVP_ij",
    "crkVolumeJVPKernel",
    "crkMomentsJVPKernel",
]


def crkMomentComponents(d: int) -> int:
    """K = 2 + 2d + 2d^2 + d^3: flat moment components per query (count included)."""
    return 2 + 2 * d + 2 * d * d + d * d * d


# --------------------------------------------------------------------------------------
# Step 1: apparent volume
# --------------------------------------------------------------------------------------


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def crkVolumePairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                      dom: Any, corr: Any, ks: Any, extra: Any):
    """W_ij (call's support scheme: Gather, h_i) if reference j passes the mode's test."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        res = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                           ks.kernelFunction, dom.dim)
    return res


crkVolumeCsrSum, crkVolumeGridSum = makeNeighborSum(crkVolumePairTerm, "crkVolume")


@wp.kernel
def crkVolumeKernel(queryState: Any, referenceState: Any, domainState: Any,
                    useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                    correctionData: Any, kernelProperties: Any, out: wp.array(dtype=Any)):
    """V_i = 1 / sum_j W_ij; 0 for a masked particle or an exactly zero sum."""
    i = wp.tid()
    ks = kernelProperties
    zero = type(ks.normalizationCoefficient)(0.0)
    s = zero
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            s = crkVolumeCsrSum(adjacencyState, i, 0, 1, queryState, referenceState, domainState,
                                correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            s = crkVolumeGridSum(gridState, cell, i, 0, 1, queryState, referenceState, domainState,
                                 correctionData, ks, referenceState.masses)
    V = zero
    # the division lives here, on the returned raw sum (inside the loop it breaks the adjoint)
    if s != zero:
        V = type(s)(1.0) / s
    out[i] = V


declareStateOverloads(crkVolumeKernel, {"out": "scalar"})


# --------------------------------------------------------------------------------------
# Step 2: moments
# --------------------------------------------------------------------------------------


@wp.func
def _delta(a: wp.int32, b: wp.int32, one: Any):
    res = type(one)(0.0)
    if a == b:
        res = one
    return res


@wp.func
def crkMomentComponent_ij(c: wp.int32, d: wp.int32, x_ij: Any, W_ij: Any, gradW_ij: Any):
    """Component c (< K - 1) of the moment integrand at one pair, without V_j (module doc)."""
    one = type(W_ij)(1.0)
    res = type(W_ij)(0.0)
    dd = d * d
    o1 = 1
    o2 = o1 + d
    o3 = o2 + dd
    o4 = o3 + d
    o5 = o4 + dd
    if c < o1:
        res = W_ij
    elif c < o2:
        res = W_ij * x_ij[c - o1]
    elif c < o3:
        kk = c - o2
        a = kk / d
        b = kk - a * d
        res = W_ij * x_ij[a] * x_ij[b]
    elif c < o4:
        res = gradW_ij[c - o3]
    elif c < o5:
        kk = c - o4
        a = kk / d
        g = kk - a * d
        res = x_ij[a] * gradW_ij[g] + W_ij * _delta(a, g, one)
    else:
        kk = c - o5
        g = kk / dd
        rem = kk - g * dd
        a = rem / d
        b = rem - a * d
        res = (x_ij[a] * x_ij[b] * gradW_ij[g]
               + W_ij * (x_ij[a] * _delta(b, g, one) + _delta(a, g, one) * x_ij[b]))
    return res


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def crkMomentPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                      dom: Any, corr: Any, ks: Any, extra: Any):
    """k < F - 1: V_j times moment component k at (i, j); k == F - 1: 1 (visited pair).
    0 for a reference masked by the mode."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        if k == F - 1:
            res = type(res)(1.0)
        else:
            x_ij = pairVector(q.positions[i], r.positions[j], dom)
            W_ij = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                                ks.kernelFunction, dom.dim)
            gradW_ij = sphKernelGradient_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                                            ks.kernelFunction, dom.dim)
            res = apparentVolume_j(r, corr, j) * crkMomentComponent_ij(k, dom.dim, x_ij, W_ij,
                                                                       gradW_ij)
    return res


crkMomentCsrSum, crkMomentGridSum = makeNeighborSum(crkMomentPairTerm, "crkMoments")


@wp.kernel
def crkMomentsKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any,
                     m0: wp.array(dtype=Any), m1: wp.array(dtype=Any), m2: wp.array(dtype=Any),
                     dm0: wp.array(dtype=Any), dm1: wp.array(dtype=Any),
                     dm2: wp.array(dtype=Any), count: wp.array(dtype=wp.int32)):
    """Thread (i, c): moment component c of query i (module doc); zeros for a masked query."""
    tid = wp.tid()
    d = domainState.dim
    dd = d * d
    K = 2 + 2 * d + 2 * dd + dd * d
    i = tid / K
    c = tid - i * K
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = crkMomentCsrSum(adjacencyState, i, c, K, queryState, referenceState, domainState,
                                  correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = crkMomentGridSum(gridState, cell, i, c, K, queryState, referenceState,
                                   domainState, correctionData, ks, referenceState.masses)
    o2 = 1 + d
    o3 = o2 + dd
    o4 = o3 + d
    o5 = o4 + dd
    o6 = o5 + dd * d
    # every output element is written exactly once (Warp accumulates the adjoints of overwrites)
    if c < 1:
        m0[i] = val
    elif c < o2:
        m1[i * d + c - 1] = val
    elif c < o3:
        m2[i * dd + c - o2] = val
    elif c < o4:
        dm0[i * d + c - o3] = val
    elif c < o5:
        dm1[i * dd + c - o4] = val
    elif c < o6:
        dm2[i * dd * d + c - o5] = val
    else:
        count[i] = wp.int32(val + type(val)(0.5))


declareStateOverloads(crkMomentsKernel, {name: "scalar" for name in
                                          ("m0", "m1", "m2", "dm0", "dm1", "dm2")})


# --------------------------------------------------------------------------------------
# Step 5: diagnostic density
# --------------------------------------------------------------------------------------


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def crkDensityPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, extra: Any):
    """k == 0: m_j V_j W^R_ij; k == 1: V_j^2 W^R_ij; 0 for a masked reference."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        W_ij = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                            ks.kernelFunction, dom.dim)
        WR_ij = correctedKernel_ij(corr, i, x_ij, W_ij)
        V_j = apparentVolume_j(r, corr, j)
        if k == 0:
            res = r.masses[j] * V_j * WR_ij
        else:
            res = V_j * V_j * WR_ij
    return res


crkDensityCsrSum, crkDensityGridSum = makeNeighborSum(crkDensityPairTerm, "crkDensity")


@wp.kernel
def crkDensityKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, out: wp.array(dtype=Any)):
    """rho_i = sum_j m_j V_j W^R_ij / sum_j V_j^2 W^R_ij; 0 for a masked query or an exactly
    zero denominator."""
    i = wp.tid()
    ks = kernelProperties
    zero = type(ks.normalizationCoefficient)(0.0)
    num = zero
    den = zero
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            num = crkDensityCsrSum(adjacencyState, i, 0, 2, queryState, referenceState,
                                   domainState, correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            num = crkDensityGridSum(gridState, cell, i, 0, 2, queryState, referenceState,
                                    domainState, correctionData, ks, referenceState.masses)
        if useAdjacency:
            den = crkDensityCsrSum(adjacencyState, i, 1, 2, queryState, referenceState,
                                   domainState, correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            den = crkDensityGridSum(gridState, cell, i, 1, 2, queryState, referenceState,
                                    domainState, correctionData, ks, referenceState.masses)
    rho = zero
    # the ratio lives here, on the returned raw sums (inside the loop it breaks the adjoint)
    if den != zero:
        rho = num / den
    out[i] = rho


declareStateOverloads(crkDensityKernel, {"out": "scalar"})


# --------------------------------------------------------------------------------------
# Forward mode
# --------------------------------------------------------------------------------------


@wp.func
def crkVolumeJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                         dom: Any, corr: Any, ks: Any, t: Any):
    """dW_ij (the call's support scheme: Gather) for a mode-admitted j, tangents from `t`."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        res = kernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
    return res


crkVolumeJVPCsrSum, crkVolumeJVPGridSum = makeNeighborSum(
    crkVolumeJVPPairTerm, "crkVolumeJVP", replayZero=True, tangent=True)


@wp.kernel
def crkVolumeJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                       useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                       correctionData: Any, kernelProperties: Any, tangents: Any,
                       out: wp.array(dtype=Any)):
    """S'_i = sum_j dW_ij (the tangent of the volume step's raw sum); 0 for a masked i."""
    i = wp.tid()
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = crkVolumeJVPCsrSum(adjacencyState, i, 0, 1, queryState, referenceState,
                                     domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = crkVolumeJVPGridSum(gridState, cell, i, 0, 1, queryState, referenceState,
                                      domainState, correctionData, ks, tangents)
    out[i] = val


declareStateOverloads(crkVolumeJVPKernel, {"out": "scalar"}, tangent=True)


@wp.func
def crkMomentComponentJVP_ij(c: wp.int32, d: wp.int32, x_ij: Any, W_ij: Any, gradW_ij: Any,
                             dx: Any, dW: Any, dG: Any):
    """Tangent of `crkMomentComponent_ij` (component c < K - 1) for the pair tangents
    (dx_ij, dW_ij, d grad W_ij): the product rule on each monomial."""
    one = type(W_ij)(1.0)
    res = type(W_ij)(0.0)
    dd = d * d
    o1 = 1
    o2 = o1 + d
    o3 = o2 + dd
    o4 = o3 + d
    o5 = o4 + dd
    if c < o1:
        res = dW
    elif c < o2:
        a = c - o1
        res = dW * x_ij[a] + W_ij * dx[a]
    elif c < o3:
        kk = c - o2
        a = kk / d
        b = kk - a * d
        res = dW * x_ij[a] * x_ij[b] + W_ij * (dx[a] * x_ij[b] + x_ij[a] * dx[b])
    elif c < o4:
        res = dG[c - o3]
    elif c < o5:
        kk = c - o4
        a = kk / d
        g = kk - a * d
        res = dx[a] * gradW_ij[g] + x_ij[a] * dG[g] + dW * _delta(a, g, one)
    else:
        kk = c - o5
        g = kk / dd
        rem = kk - g * dd
        a = rem / d
        b = rem - a * d
        res = ((dx[a] * x_ij[b] + x_ij[a] * dx[b]) * gradW_ij[g]
               + x_ij[a] * x_ij[b] * dG[g]
               + dW * (x_ij[a] * _delta(b, g, one) + _delta(a, g, one) * x_ij[b])
               + W_ij * (dx[a] * _delta(b, g, one) + _delta(a, g, one) * dx[b]))
    return res


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def crkMomentJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                         dom: Any, corr: Any, ks: Any, t: Any):
    """dV_j c_k + V_j dc_k at (i, j) for a mode-admitted j (k < K - 1), else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        W_ij = sphKernel_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
        gradW_ij = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction,
                                        dom.dim)
        dW = kernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
        dG = kernelGradientJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
        V_j = apparentVolume_j(r, corr, j)
        dV_j = apparentVolumeJVP_j(r, corr, t, j)
        res = (dV_j * crkMomentComponent_ij(k, dom.dim, x_ij, W_ij, gradW_ij)
               + V_j * crkMomentComponentJVP_ij(k, dom.dim, x_ij, W_ij, gradW_ij, dx, dW, dG))
    return res


crkMomentJVPCsrSum, crkMomentJVPGridSum = makeNeighborSum(
    crkMomentJVPPairTerm, "crkMomentsJVP", replayZero=True, tangent=True)


@wp.kernel
def crkMomentsJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                        useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                        correctionData: Any, kernelProperties: Any, tangents: Any,
                        out: wp.array(dtype=Any)):
    """Thread (i, c), c < K - 1: the tangent of moment component c of query i, stored at
    ``out[i (K - 1) + c]``; zeros for a masked query."""
    tid = wp.tid()
    d = domainState.dim
    dd = d * d
    F = 1 + 2 * d + 2 * dd + dd * d
    i = tid / F
    c = tid - i * F
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = crkMomentJVPCsrSum(adjacencyState, i, c, F, queryState, referenceState,
                                     domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = crkMomentJVPGridSum(gridState, cell, i, c, F, queryState, referenceState,
                                      domainState, correctionData, ks, tangents)
    out[tid] = val


declareStateOverloads(crkMomentsJVPKernel, {"out": "scalar"}, tangent=True)


# --------------------------------------------------------------------------------------
# Declarations
# --------------------------------------------------------------------------------------


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _dim(ctx) -> int:
    return int(ctx.domain.dim)


CRK_VOLUME_SPEC = OperatorSpec(
    kernel=crkVolumeKernel,
    outputs=(OutputSpec(dtype=_callScalar),),
)

CRK_MOMENTS_SPEC = OperatorSpec(
    kernel=crkMomentsKernel,
    outputs=(
        OutputSpec(dtype=_callScalar, shape=lambda ctx, extras: (ctx.numQueries,)),
        OutputSpec(dtype=_callScalar, shape=lambda ctx, extras: (ctx.numQueries * _dim(ctx),)),
        OutputSpec(dtype=_callScalar,
                   shape=lambda ctx, extras: (ctx.numQueries * _dim(ctx) ** 2,)),
        OutputSpec(dtype=_callScalar, shape=lambda ctx, extras: (ctx.numQueries * _dim(ctx),)),
        OutputSpec(dtype=_callScalar,
                   shape=lambda ctx, extras: (ctx.numQueries * _dim(ctx) ** 2,)),
        OutputSpec(dtype=_callScalar,
                   shape=lambda ctx, extras: (ctx.numQueries * _dim(ctx) ** 3,)),
        OutputSpec(dtype=wp.int32, shape=lambda ctx, extras: (ctx.numQueries,)),
    ),
    numThreads=lambda ctx, extras: ctx.numQueries * crkMomentComponents(_dim(ctx)),
)

CRK_DENSITY_SPEC = OperatorSpec(
    kernel=crkDensityKernel,
    outputs=(OutputSpec(dtype=_callScalar),),
)
