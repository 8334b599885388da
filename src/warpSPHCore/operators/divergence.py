"""Divergence: out_i = sum_j sum_delta c_ij[idx(delta, p)] G_ij[delta].

* G_ij: the corrected kernel gradient (`corrected.correctedGradient_ij`: grad W, CRK, then
  renormalization L_i G; query-side terms only).
* c_ij: the Gradient scheme table, grad-h dividing both f_i by Omega_i and f_j by Omega_j;
  ``consistentDivergence`` replaces V_j by referenceVolumes_j rho_j / rho_i (volumes) or
  m_j / rho_i (no effect on Symmetric) — `_coefficients.fieldCoefficient_ij`.
* Contraction (flat field of width F, P = F / d, `ks.divergenceMode`):
  default (False) contracts the first field axis, ``idx = delta P + p``; dot mode (True)
  contracts the last one, ``idx = p d + delta``. 1D scalars are F = 1.
* Values: one flat array ``[N_q F | N_r F]`` (TENSOR extra ``values``), SCALAR extras
  ``fieldWidth`` = F and ``consistentDivergence``. One thread per output element (i, p):
  ``out[i P + p] = N sum_j ...`` (N: calibration factor or 1), so one compiled overload per
  (scalar type, d) serves every field shape and both modes.
* The pair term receives the consistent flag packed into its component argument
  (``k = 2 p + consistent``): `makeNeighborSum`'s pair-term signature carries one extra.
* The sum over delta is unrolled with ``if d > 1`` / ``if d > 2`` guards (no runtime-bound
  loop carrying G: Warp does not replay dynamic loops in backward); indices are clamped so a
  1D/2D overload never reads past G.
* Kinds masking (docs/particle-kinds.md): a masked query row is exactly 0; masked references are
  skipped.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, values, reference
volumes, Omega, CRK A, B, gradA, gradB and L (through `StateAwareWarpFunction`). Without CRK,
renormalization, grad-h and the consistent volumes the backward is the hand-written reverse
kernel `divergenceVJPKernel` (`autograd.reverse`): thread (i, p) traverses its references
once; per pair, the cotangent of G_ij is g = u c_ij (the d coefficients of the pair,
`_coefficients.divergenceCoefficients_ij`), whose adjoint (H g, g . dG/dh) comes from one
shape evaluation, and u G_ij[delta] is the adjoint of each coefficient
(`_coefficients.divergencePairVJP_ij`); the reference side is scattered with atomics. Forward mode
(exact, neighbours fixed): `divergenceJVPKernel`, the same thread layout, traversal, kinds and
calibration as the primal, with the pair term

    d(sum_delta c_ij[idx(delta, p)] G_ij[delta])
        = sum_delta (dc_ij[idx] G_ij[delta] + c_ij[idx] dG_ij[delta])

(`_coefficients.fieldCoefficientJVP_ij` with f_i and f_j both divided (``divideQuery``), the
value tangent fused; `_tangents.correctedGradientJVP_ij`). Non-consistent volumes only: the
scope check (`operationsJVP.checkJVPScope`) rejects grad-h; dot mode mirrors the primal's
index map `_coefficients.contractedIndex`, and ``consistentDivergence`` the primal's component packing with
the consistent volumes' tangent (`_coefficients.consistentVolumeJVP_j`); both checked against
J·v and central differences. Itself reverse-differentiable (reverse over forward).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import ExtraKind, ExtraSpec, JVPSpec, OperatorSpec, OutputSpec
from ..autograd.reverse import ReverseSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernelGradientVJP_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import (
    coefficientJVP_ij,
    contractedIndex,
    divergenceCoefficients_ij,
    divergencePairVJP_ij,
    fieldCoefficient_ij,
)
from ._reverse import buffersCovered, uncorrected, valueReverseLaunch
from ._specialized import divergenceSpecialized, divergenceVJPSpecialized
from ._tangents import coefficientTangentPresent, correctedGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, pairVector
from .corrected import correctedGradient_ij

__all__ = ["divergencePairTerm", "divergenceKernel", "DIVERGENCE_SPEC", "divergenceJVPPairTerm",
           "divergenceJVPKernel", "divergenceVJPPairTerm", "divergenceVJPKernel",
           "DIVERGENCE_REVERSE"]


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def divergencePairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, extra: Any):
    """sum_delta c_ij[idx(delta, p)] G_ij[delta] (k = 2 p + consistent) if reference j
    passes the mode's test, else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        p = k / 2
        consistent = (k - 2 * p) == 1
        d = dom.dim
        P = F / d
        dotMode = ks.divergenceMode
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        G = correctedGradient_ij(corr, ks, dom, i, x_ij, q.supports[i], r.supports[j])
        res = fieldCoefficient_ij(i, j, contractedIndex(0, p, P, d, dotMode), F, q, r, corr,
                                  ks, extra, consistent, True) * G[0]
        if d > 1:
            d1 = wp.min(1, d - 1)
            res = res + fieldCoefficient_ij(i, j, contractedIndex(d1, p, P, d, dotMode), F, q,
                                            r, corr, ks, extra, consistent, True) * G[d1]
        if d > 2:
            d2 = wp.min(2, d - 1)
            res = res + fieldCoefficient_ij(i, j, contractedIndex(d2, p, P, d, dotMode), F, q,
                                            r, corr, ks, extra, consistent, True) * G[d2]
    return res


divergenceCsrSum, divergenceGridSum = makeNeighborSum(divergencePairTerm, "divergence",
                                                      replayZero=True)


@wp.kernel
def divergenceKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, values: wp.array(dtype=Any),
                     fieldWidth: wp.int32, consistentDivergence: wp.bool,
                     out: wp.array(dtype=Any)):
    """out[i P + p] = N sum_j sum_delta c_ij[idx(delta, p)] G_ij[delta]; 0 for a masked
    query."""
    tid = wp.tid()
    P = fieldWidth / domainState.dim
    i = tid / P
    p = tid - i * P
    k = 2 * p
    if consistentDivergence:
        k = k + 1
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = divergenceCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                                   domainState, correctionData, ks, values)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = divergenceGridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                                    domainState, correctionData, ks, values)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(divergenceKernel, {"values": "scalar", "out": "scalar"})


@wp.func
def divergenceJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                          dom: Any, corr: Any, ks: Any, t: Any):
    """sum_delta (dc_ij[idx(delta, p)] G_ij[delta] + c_ij[idx(delta, p)] dG_ij[delta])
    (k = 2 p + consistent, as the primal's pair term) for a mode-admitted reference j (tangent
    pack `t`), else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        p = k / 2
        consistent = (k - 2 * p) == 1
        d = dom.dim
        P = F / d
        dotMode = ks.divergenceMode
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        G, dG = correctedGradientJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j,
                                        coefficientTangentPresent(t))
        c0, dc0 = coefficientJVP_ij(i, j, contractedIndex(0, p, P, d, dotMode), F, q, r,
                                    corr, ks, t, consistent, True)
        res = dc0 * G[0] + c0 * dG[0]
        if d > 1:
            d1 = wp.min(1, d - 1)
            c1, dc1 = coefficientJVP_ij(i, j, contractedIndex(d1, p, P, d, dotMode), F, q,
                                        r, corr, ks, t, consistent, True)
            res = res + dc1 * G[d1] + c1 * dG[d1]
        if d > 2:
            d2 = wp.min(2, d - 1)
            c2, dc2 = coefficientJVP_ij(i, j, contractedIndex(d2, p, P, d, dotMode), F, q,
                                        r, corr, ks, t, consistent, True)
            res = res + dc2 * G[d2] + c2 * dG[d2]
    return res


divergenceJVPCsrSum, divergenceJVPGridSum = makeNeighborSum(
    divergenceJVPPairTerm, "divergenceJVP", replayZero=True, tangent=True)


@wp.kernel
def divergenceJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                        useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                        correctionData: Any, kernelProperties: Any, tangents: Any,
                        fieldWidth: wp.int32, consistentDivergence: wp.bool,
                        out: wp.array(dtype=Any)):
    """dout[i P + p] = N sum_j sum_delta d(c_ij[idx] G_ij[delta]); 0 for a masked query;
    `consistentDivergence` as the primal (packed into the pair term's component)."""
    tid = wp.tid()
    P = fieldWidth / domainState.dim
    i = tid / P
    p = tid - i * P
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    k = 2 * p
    if consistentDivergence:
        k = k + 1
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = divergenceJVPCsrSum(adjacencyState, i, k, fieldWidth, queryState,
                                      referenceState, domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = divergenceJVPGridSum(gridState, cell, i, k, fieldWidth, queryState,
                                       referenceState, domainState, correctionData, ks,
                                       tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(divergenceJVPKernel, {"out": "scalar"}, tangent=True)


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def divergenceVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                          dom: Any, corr: Any, ks: Any, pk: Any):
    """The adjoint of the pair term of output row (i, p = k) for the row cotangent
    u = N scalarSeed[i P + p] (`_coefficients.divergencePairVJP_ij`); returns the x_i
    adjoint H (u c_ij), 0 if reference j fails the mode's test."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        u = pk.scalarSeed[i * (F / d) + k]
        if ks.calibrateNormalization:
            u = u * ks.normalizationCoefficient
        c = divergenceCoefficients_ij(i, j, k, F, q, r, corr, ks, pk.values, d, x_ij)
        G, Hg, gh_i, gh_j = sphKernelGradientVJP_ij(x_ij, q.supports[i], r.supports[j], u * c,
                                                    ks.supportMode, ks.kernelFunction, d)
        res = divergencePairVJP_ij(i, j, k, F, q, r, corr, ks, pk, u, G, Hg, gh_i, gh_j, d)
    return res


divergenceVJPCsrSum, divergenceVJPGridSum = makeNeighborSum(divergenceVJPPairTerm,
                                                            "divergenceVJP", vector=True)


@wp.kernel(enable_backward=False)
def divergenceVJPKernel(queryState: Any, referenceState: Any, domainState: Any,
                        useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                        correctionData: Any, kernelProperties: Any, cotangents: Any,
                        fieldWidth: wp.int32):
    """Thread (i, p): the reverse of `divergenceKernel`'s row (i, p) for the cotangent
    ``cotangents.scalarSeed[i P + p]``, one traversal; nothing for a masked query (its row
    is 0)."""
    tid = wp.tid()
    P = fieldWidth / domainState.dim
    i = tid / P
    p = tid - i * P
    ks = kernelProperties
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        val = queryState.positions.dtype()
        if useAdjacency:
            val = divergenceVJPCsrSum(adjacencyState, i, p, fieldWidth, queryState,
                                      referenceState, domainState, correctionData, ks,
                                      cotangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = divergenceVJPGridSum(gridState, cell, i, p, fieldWidth, queryState,
                                       referenceState, domainState, correctionData, ks,
                                       cotangents)
        if cotangents.hasQPositions:
            wp.atomic_add(cotangents.qPositions, i, val)


declareStateOverloads(divergenceVJPKernel, cotangent=True)

def _reverseEligible(config, args):
    """Every scheme, support mode, interaction mode, calibration, traversal, contraction axis
    and volumes; CRK, renormalization, grad-h and the consistent volumes keep the tape path
    (`fieldCoefficientVJP_ij` is the coefficient's adjoint without them)."""
    return uncorrected(config) and not bool(args[10]) and buffersCovered(args)


DIVERGENCE_REVERSE = ReverseSpec(kernel=divergenceVJPKernel, eligible=_reverseEligible,
                                 build=valueReverseLaunch, specialize=divergenceVJPSpecialized)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    return (ctx.numQueries * (int(extras["fieldWidth"]) // int(ctx.domain.dim)),)


DIVERGENCE_SPEC = OperatorSpec(
    kernel=divergenceKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("values", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR),
            ExtraSpec("consistentDivergence", ExtraKind.SCALAR)),
    jvp=JVPSpec(queryValueExtra="values", referenceValueExtra="values",
                geometryKernel=divergenceJVPKernel),
    reverse=DIVERGENCE_REVERSE,
    specialize=divergenceSpecialized,
)
