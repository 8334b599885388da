"""Covariance: C_i = sum_j V_j (x_j - x_i) (x) G_ij, plus the int32
neighbour count n_i = #{mode-admitted visited j : W^R_ij > 0} (self included).

* x_j - x_i = -x_ij (minimum image); rows index the position component, columns the gradient
  component: ``C_i[a, b] = sum_j V_j (-x_ij[a]) G_ij[b]``.
* G_ij: the corrected kernel gradient (`corrected.correctedGradient_ij`: CRK, then L_i G);
  W^R_ij: `corrected.correctedKernel_ij`. V_j = ``referenceVolumes[j]`` or m_j / rho_j.
  Grad-h is accepted and ignored.
* One thread per output element: ``N_q (d^2 + 1)`` threads; thread (i, k) with ``k < d^2``
  writes ``C[i d^2 + k]`` (k = a d + b), thread (i, d^2) writes ``count[i]``. Both come from
  one pair term (component ``k == d^2`` is the count), so the CSR and grid traversals are
  compiled once. The lattice calibration factor multiplies C (not the count).
* Kinds masking (docs/particle-kinds.md): a masked query has C = 0 and count 0; masked
  references are skipped.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, reference volumes,
CRK A, B, gradA, gradB and L; the count is non-differentiable. Without CRK and
renormalization the backward is the hand-written reverse kernel `covarianceVJPKernel`
(`autograd.reverse`): one thread per query for its whole matrix cotangent U, per pair one
shape evaluation for the G cotangent -V_j U^T x_ij, the x_ij adjoint -V_j U G_ij and V_j's
-x_ij . U G_ij; else Warp's adjoint. Forward mode (the exact
derivative of the pair term, neighbour structure fixed): `covarianceJVPKernel`, the matrix
tangent only (one thread per matrix element, ``N_q d^2`` threads; the count has no tangent),
with the primal's traversal, kinds and calibration:

    dC_i[a, b] = N sum_j -( dV_j x_ij[a] G_ij[b] + V_j dx_ij[a] G_ij[b] + V_j x_ij[a] dG_ij[b] )

(`covarianceJVPPairTerm`; dV_j from `apparentVolumeJVP_j`, (G, dG) from
`correctedGradientJVP_ij`). Itself reverse-differentiable (reverse over forward).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import JVPSpec, OperatorSpec, OutputSpec
from ..autograd.reverse import ReverseSpec, cotangentPack
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernel_ij, sphKernelGradientVJP_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import (
    apparentVolume_j,
    apparentVolumeJVP_j,
    apparentVolumeVJP_j,
    scatterGeometryAdjoint_ij,
)
from ._reverse import buffersCovered, uncorrected
from ._specialized import covarianceSpecialized
from ._tangents import correctedGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, pairVector
from .corrected import correctedGradient_ij, correctedKernel_ij

__all__ = ["covariancePairTerm", "covarianceKernel", "covarianceJVPPairTerm",
           "covarianceJVPKernel", "covarianceVJPPairTerm", "covarianceVJPKernel",
           "COVARIANCE_REVERSE", "COVARIANCE_SPEC"]


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def covariancePairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, extra: Any):
    """k < F = d^2: V_j (-x_ij[a]) G_ij[b] (k = a d + b); k == F: 1 if W^R_ij > 0. 0 for a
    reference masked by the mode."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        if k < F:
            a = k / dom.dim
            b = k - a * dom.dim
            G = correctedGradient_ij(corr, ks, dom, i, x_ij, q.supports[i], r.supports[j])
            res = -apparentVolume_j(r, corr, j) * x_ij[a] * G[b]
        else:
            W_ij = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                                ks.kernelFunction, dom.dim)
            WR_ij = correctedKernel_ij(corr, i, x_ij, W_ij)
            if WR_ij > type(WR_ij)(0.0):
                res = type(res)(1.0)
    return res


covarianceCsrSum, covarianceGridSum = makeNeighborSum(covariancePairTerm, "covariance",
                                                      replayZero=True)


@wp.kernel
def covarianceKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, out: wp.array(dtype=Any),
                     count: wp.array(dtype=wp.int32)):
    """out[i d^2 + a d + b] = N C_i[a, b]; count[i] = n_i; zeros for a masked query."""
    tid = wp.tid()
    dd = domainState.dim * domainState.dim
    i = tid / (dd + 1)
    k = tid - i * (dd + 1)
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = covarianceCsrSum(adjacencyState, i, k, dd, queryState, referenceState,
                                   domainState, correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = covarianceGridSum(gridState, cell, i, k, dd, queryState, referenceState,
                                    domainState, correctionData, ks, referenceState.masses)
    if k < dd:
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
        out[i * dd + k] = val
    else:
        count[i] = wp.int32(val + type(val)(0.5))


declareStateOverloads(covarianceKernel, {"out": "scalar"})


@wp.func
def covarianceJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                          dom: Any, corr: Any, ks: Any, t: Any):
    """d[V_j (-x_ij[a]) G_ij[b]] (k = a d + b) for a mode-admitted reference j (tangent pack
    `t`), else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        a = k / dom.dim
        b = k - a * dom.dim
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        G, dG = correctedGradientJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j,
                                        True)
        V = apparentVolume_j(r, corr, j)
        dV = apparentVolumeJVP_j(r, corr, t, j)
        res = -(dV * x_ij[a] * G[b] + V * dx[a] * G[b] + V * x_ij[a] * dG[b])
    return res


covarianceJVPCsrSum, covarianceJVPGridSum = makeNeighborSum(
    covarianceJVPPairTerm, "covarianceJVP", replayZero=True, tangent=True)


@wp.kernel
def covarianceJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                        useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                        correctionData: Any, kernelProperties: Any, tangents: Any,
                        out: wp.array(dtype=Any)):
    """out[i d^2 + a d + b] = N dC_i[a, b]; 0 for a masked query."""
    tid = wp.tid()
    dd = domainState.dim * domainState.dim
    i = tid / dd
    k = tid - i * dd
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = covarianceJVPCsrSum(adjacencyState, i, k, dd, queryState, referenceState,
                                      domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = covarianceJVPGridSum(gridState, cell, i, k, dd, queryState, referenceState,
                                       domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(covarianceJVPKernel, {"out": "scalar"}, tangent=True)


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def _seedDot(pk: Any, base: wp.int32, d: wp.int32, v: Any, transpose: wp.bool):
    """U v (or U^T v) for the query's matrix cotangent U = scalarSeed[base : base + d^2]
    (row-major, ``U[a, b]`` at ``base + a d + b``)."""
    res = type(v)()
    for a in range(d):
        for b in range(d):
            if transpose:
                res[b] = res[b] + pk.scalarSeed[base + a * d + b] * v[a]
            else:
                res[a] = res[a] + pk.scalarSeed[base + a * d + b] * v[b]
    return res


@wp.func
def covarianceVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                          dom: Any, corr: Any, ks: Any, pk: Any):
    """The adjoint of the pair's V_j (-x_ij) (x) G_ij for the query's matrix cotangent
    U = N scalarSeed[i d^2 : (i + 1) d^2] (F = d^2): -x_ij . U G_ij to V_j
    (`apparentVolumeVJP_j`), the G cotangent -V_j U^T x_ij (H g and g . dG/dh from one shape
    evaluation) and -V_j U G_ij to x_ij; returns the x_i adjoint, 0 for a masked
    reference."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        N = type(x_ij[0])(1.0)
        if ks.calibrateNormalization:
            N = ks.normalizationCoefficient
        V = apparentVolume_j(r, corr, j)
        g = _seedDot(pk, i * F, d, x_ij, True) * (-N * V)
        G, Hg, gh_i, gh_j = sphKernelGradientVJP_ij(x_ij, q.supports[i], r.supports[j], g,
                                                    ks.supportMode, ks.kernelFunction, d)
        UG = _seedDot(pk, i * F, d, G, False) * N
        apparentVolumeVJP_j(r, corr, j, -wp.dot(x_ij, UG), pk)
        res = Hg - V * UG
        scatterGeometryAdjoint_ij(i, j, pk, res, gh_i, gh_j)
    return res


covarianceVJPCsrSum, covarianceVJPGridSum = makeNeighborSum(covarianceVJPPairTerm,
                                                            "covarianceVJP", vector=True)


@wp.kernel(enable_backward=False)
def covarianceVJPKernel(queryState: Any, referenceState: Any, domainState: Any,
                        useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                        correctionData: Any, kernelProperties: Any, cotangents: Any,
                        fieldWidth: wp.int32):
    """Thread i: the reverse of `covarianceKernel`'s matrix C_i for its cotangent
    ``cotangents.scalarSeed[i d^2 : (i + 1) d^2]`` (`fieldWidth` = d^2), one traversal with
    one shape evaluation per pair for all d^2 elements; nothing for a masked query (its
    matrix is 0); the count has no adjoint."""
    i = wp.tid()
    ks = kernelProperties
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        val = queryState.positions.dtype()
        if useAdjacency:
            val = covarianceVJPCsrSum(adjacencyState, i, 0, fieldWidth, queryState,
                                      referenceState, domainState, correctionData, ks,
                                      cotangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = covarianceVJPGridSum(gridState, cell, i, 0, fieldWidth, queryState,
                                       referenceState, domainState, correctionData, ks,
                                       cotangents)
        if cotangents.hasQPositions:
            wp.atomic_add(cotangents.qPositions, i, val)


declareStateOverloads(covarianceVJPKernel, cotangent=True)


def _reverseEligible(config, args):
    """Every kernel, support scheme, interaction mode, calibration, traversal and volumes
    (grad-h is ignored by the operator); CRK and renormalization keep the tape path."""
    return uncorrected(config) and buffersCovered(args)


def _reverseLaunch(config, args, outputs):
    qs, rs, dom, useAdjacency, adjacency, grid, corr, ks = args[:8]
    pack = cotangentPack(config, (("qPositions", "hasQPositions", qs.positions),
                                  ("qSupports", "hasQSupports", qs.supports),
                                  ("rPositions", "hasRPositions", rs.positions),
                                  ("rSupports", "hasRSupports", rs.supports),
                                  ("rMasses", "hasRMasses", rs.masses),
                                  ("rDensities", "hasRDensities", rs.densities),
                                  ("rVolumes", "hasRVolumes", corr.referenceVolumes)),
                         scalarSeed=outputs[0].grad)
    d = int(dom.dim)
    return int(qs.positions.shape[0]), [qs, rs, dom, useAdjacency, adjacency, grid, corr, ks,
                                        pack, d * d]


COVARIANCE_REVERSE = ReverseSpec(kernel=covarianceVJPKernel, eligible=_reverseEligible,
                                 build=_reverseLaunch)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _matrixShape(ctx, extras):
    d = int(ctx.domain.dim)
    return (ctx.numQueries * d * d,)


def _numThreads(ctx, extras):
    d = int(ctx.domain.dim)
    return ctx.numQueries * (d * d + 1)


COVARIANCE_SPEC = OperatorSpec(
    kernel=covarianceKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_matrixShape),
             OutputSpec(dtype=wp.int32, shape=lambda ctx, extras: (ctx.numQueries,))),
    extras=(),
    numThreads=_numThreads,
    jvp=JVPSpec(geometryKernel=covarianceJVPKernel, geometryThreads=None),
    reverse=COVARIANCE_REVERSE,
    specialize=covarianceSpecialized,
)
