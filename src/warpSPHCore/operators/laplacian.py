"""Laplacian: lap f_i = sum_j (geometric factor of the scheme) q_ij.

* Pair difference q_ij (f_i -> f_i / Omega_i and f_j -> f_j / Omega_j under grad-h), chosen
  by `gradientMode`:

  ================================ ==================================================
  Naive (1), Difference (3),       q_ij = (f_j - f_i) V_j
  Summation (4)
  Symmetric (2)                    q_ij = (f_j - f_i) m_j rho_i / rho_j^2 (no volumes)
  ================================ ==================================================

  V_j = ``referenceVolumes[j]`` with volumes, else m_j / rho_j.
  q_ij, its scale and their tangents: `_coefficients.laplacianDifference_ij`,
  `laplacianScale_ij` (beside the gradient schemes' c_ij).
* Geometry: h_ij = pairwise support (max for schemes 14, 15, 16), r = |x_ij|,
  n_ij = x_ij / (r + 1e-8 h_ij), G_ij = the corrected kernel gradient
  (`corrected.correctedGradient_ij`: grad W, CRK, then L_i G).
* Per pair, by `laplacianMode`:

  ============== ==============================================================
  Naive (1)      q_ij lap W_ij (the analytic kernel Laplacian, 0 at q < eps, by
                 `support.sphKernelLaplacian_ij`: at max(h_i, h_j) under
                 KernelMeanSymmetric, averaged under SuperSymmetric); never CRK- or
                 renormalization-corrected (`operations.py` drops those states)
  Brookshaw (2)  r > 0: -2 q_ij (G . n_ij) / (r + 1e-8 h_ij); else 0
  Dot (3)        r > 0: phi_ij [q_ij - (d + 2) (q_ij . n_ij) n_ij],
                 phi_ij = (G . n_ij) / (r + 1e-8 h_ij), the projection blockwise over
                 consecutive d-blocks of the flat field; else 0
  Default (4)    r > 0: -2 q_ij (G . n_ij) / (r + 1e-12 h_ij); else 0
  Consistent (5) r > 0: q_ij G . (B_i x_ij / D^2 - gamma_i), D = r + 1e-8 h_ij, with
                 the call's `LaplacianCorrectionState` (B_i, gamma_i = L_i^T beta_i;
                 `corrections.secondDerivatives`); exact for quadratic fields; else 0.
                 q_ij = (f_j - f_i) V_j (no Symmetric, grad-h, CRK, renormalization or
                 positiveDivergence: the call preparation rejects them)
  ============== ==============================================================

* `positiveDivergence`: a pair is kept only if sum_delta x_ij,delta q_ij,delta >= 0 (F = d,
  checked by `operations.py`); applies to every scheme.
* Values: one flat array ``[N_q F | N_r F]`` (query values first), the TENSOR extra
  ``values`` with the SCALAR extra ``fieldWidth`` = F. One thread per output element (i, k):
  ``out[i F + k] = N sum_j term_ij[k]`` (N: calibration factor or 1); one compiled overload
  per (scalar type, d) serves every field shape and every scheme (run-time switches).
* Kinds masking (docs/particle-kinds.md): a masked query row is exactly 0; masked references are
  skipped.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, values, reference
volumes, Omega (query and reference), CRK A, B, gradA, gradB and L (through
`StateAwareWarpFunction`). For the Brookshaw and Default schemes without positiveDivergence,
CRK, renormalization and grad-h the backward is the hand-written reverse kernel
`laplacianVJPKernel` (`autograd.reverse`): per pair, with the factor phi = -2 (G . x_ij) /
(D E) (E = D for Brookshaw), the adjoint of G . x_ij is the G cotangent along x_ij, whose
adjoint (H g, g . dG/dh) comes from one shape evaluation, and u phi is the adjoint of q_ij
(`_coefficients.laplacianPairVJP_ij`); the other schemes keep Warp's adjoint. The r > 0 guard keeps the adjoint at coincident points finite and
exact (the true contribution is 0; Warp's adjoint of n_ij / D / D through the exactly zero
unit vector is wrong). With CRK (G(0) != 0) the
Brookshaw/Dot/Default terms grow like G(0).x_hat / r as a distinct particle leaves a
coincident partner, so the position derivative of such a pair exists only along motions
that keep it coincident; the guard's value and adjoint there are 0.

Forward mode: `laplacianJVPKernel`, the exact derivative of
`laplacianKernel` (same thread layout, traversal, kinds, calibration and grad-h division) with
the values frozen (the pack's ``values``) and the neighbour structure fixed:

* dq_ij = (f_j - f_i) dV_j, Symmetric (f_j - f_i) d(m_j rho_i / rho_j^2)
  (`_coefficients.laplacianDifferenceJVP_ij`), plus the value tangent q_ij(tValues) fused into the loop;
* Naive: dq lap W + q d(lap W) (`support.sphKernelLaplacianJVP_ij`, the helper support rule);
* Consistent: B_i and gamma_i frozen here, ``dq G.v + q (dG.v + G.dv)`` with
  ``dv = B_i (dx / D^2 - 2 x dD / D^3)``; the operator is linear in (B, gamma), so their
  tangents are the primal launched with (dB, dgamma) (`operationsJVP.jvpFromContext`);
* Brookshaw/Default/Dot: n_ij, r and the regularised denominators differentiated literally,
  dr = x.dx / r, dD = dr + 1e-8 dh_ij (Default's second denominator: 1e-12 dh_ij),
  dn = dx / D - x dD / D^2, d(G.n) = dG.n + G.dn with (G, dG) from
  `_tangents.correctedGradientJVP_ij` (CRK and renormalization tangents included); pairs
  with r = 0 contribute 0 with tangent 0;
* positiveDivergence: the primal's pair selection, made by the frozen values (exact away
  from the switching surface x_ij . q_ij = 0). This kernel also serves value tangents alone
  under this option, since the operator is then not linear in its values
  (`operationsJVP`).

The JVP kernel runs through the bridge, so it is itself reverse-differentiable (reverse over
forward).

The float32/float64 x d = 1, 2, 3 overloads are declared at import, so the module is built
once (an overload added at a first launch would reload the module).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import ExtraKind, ExtraSpec, JVPSpec, OperatorSpec, OutputSpec
from ..autograd.reverse import ReverseSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import (
    computePairwiseSupport,
    computePairwiseSupportJVP,
    sphKernelGradientVJP_ij,
    sphKernelLaplacian_ij,
    sphKernelLaplacianJVP_ij,
)
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import LAPLACIAN_REG_DEFAULT as _REG_DEFAULT
from ._coefficients import LAPLACIAN_REG_N as _REG_N
from ._coefficients import (
    laplacianDenominators_ij,
    laplacianDifference_ij,
    laplacianDifferenceJVP_ij,
    laplacianPairVJP_ij,
)
from ._reverse import buffersCovered, uncorrected, valueReverseLaunch
from ._specialized import laplacianSpecialized, laplacianVJPSpecialized
from ._tangents import correctedGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, makeRowReverseKernel, pairVector
from .corrected import correctedGradient_ij

__all__ = ["laplacianPairTerm", "laplacianKernel", "LAPLACIAN_SPEC", "laplacianJVPPairTerm",
           "laplacianJVPKernel", "laplacianVJPPairTerm", "laplacianVJPKernel",
           "LAPLACIAN_REVERSE"]



@wp.func
def _blockDot(i: wp.int32, j: wp.int32, base: wp.int32, F: wp.int32, v: Any, d: wp.int32,
              q: Any, r: Any, corr: Any, ks: Any, values: Any):
    """sum_{c < d} q_ij[base + c] v[c]. A constant-bound loop (unrolled by Warp; c < 3 guarded
    by d) that only accumulates, so no runtime-bound loop carries an adjoint (Warp does not
    replay dynamic loops in backward)."""
    acc = type(v[0])(0.0)
    for c in range(3):
        if c < d:
            acc += laplacianDifference_ij(i, j, base + c, F, q, r, corr, ks, values) * v[c]
    return acc


@wp.func
def consistentDirection_ij(corr: Any, i: wp.int32, x_ij: Any, D: Any):
    """The Consistent scheme's direction ``B_i x_ij / D^2 - gamma_i`` (its pair term is
    ``q_ij G_ij . direction``); Brookshaw's ``-2 x_ij / D^2`` without a state (the
    call preparation never launches the scheme without one)."""
    v = x_ij * (type(D)(-2.0) / (D * D))
    if corr.useConsistentLaplacian:
        v = wp.mul(corr.laplacianMatrices[i], x_ij) / (D * D) - corr.laplacianVectors[i]
    return v


@wp.func
def consistentDirectionJVP_ij(corr: Any, i: wp.int32, x_ij: Any, dx: Any, D: Any, dD: Any):
    """(`consistentDirection_ij`, its tangent along dx and dD with B_i, gamma_i frozen:
    ``B (dx / D^2 - 2 x dD / D^3)``)."""
    inv2 = type(D)(1.0) / (D * D)
    u = x_ij * inv2
    du = dx * inv2 - x_ij * (type(D)(2.0) * dD * inv2 / D)
    v = u * type(D)(-2.0)
    dv = du * type(D)(-2.0)
    if corr.useConsistentLaplacian:
        Bm = corr.laplacianMatrices[i]
        v = wp.mul(Bm, u) - corr.laplacianVectors[i]
        dv = wp.mul(Bm, du)
    return v, dv


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def laplacianPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                      dom: Any, corr: Any, ks: Any, extra: Any):
    """Component k of the pair contribution of the call's Laplacian scheme; 0 for a reference
    masked by the mode or a pair dropped by positiveDivergence."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        q_k = laplacianDifference_ij(i, j, k, F, q, r, corr, ks, extra)
        keep = True
        if ks.positiveDivergenceMode:
            keep = _blockDot(i, j, 0, F, x_ij, d, q, r, corr, ks, extra) >= type(res)(0.0)
        if keep:
            scheme = ks.laplacianMode
            if scheme == 1:
                res = q_k * sphKernelLaplacian_ij(x_ij, h_i, h_j, ks.supportMode,
                                                  ks.kernelFunction, d)
            else:
                r_ij = wp.length(x_ij)
                # Explicit r > 0 guard: n_ij / D / D through an exactly zero unit vector has
                # a wrong adjoint when G(0) != 0 under CRK; the true term is 0.
                if r_ij > type(r_ij)(0.0):
                    h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
                    G = correctedGradient_ij(corr, ks, dom, i, x_ij, h_i, h_j)
                    D = r_ij + type(r_ij)(_REG_N) * h_ij
                    n_ij = x_ij / D
                    Gn = wp.dot(G, n_ij)
                    if scheme == 3:
                        b = k / d
                        base = b * d
                        qn = _blockDot(i, j, base, F, n_ij, d, q, r, corr, ks, extra)
                        res = (Gn / D) * (q_k - type(r_ij)(d + 2) * qn * n_ij[k - base])
                    elif scheme == 4:
                        res = type(r_ij)(-2.0) * q_k * Gn / (
                            r_ij + type(r_ij)(_REG_DEFAULT) * h_ij)
                    elif scheme == 5:
                        res = q_k * wp.dot(G, consistentDirection_ij(corr, i, x_ij, D))
                    else:
                        res = type(r_ij)(-2.0) * q_k * Gn / D
    return res


laplacianCsrSum, laplacianGridSum = makeNeighborSum(laplacianPairTerm, "laplacian", replayZero=True)


@wp.kernel
def laplacianKernel(queryState: Any, referenceState: Any, domainState: Any,
                    useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                    correctionData: Any, kernelProperties: Any, values: wp.array(dtype=Any),
                    fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """out[i F + k] = N sum_j term_ij[k]; 0 for a masked query."""
    tid = wp.tid()
    i = tid / fieldWidth
    k = tid - i * fieldWidth
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = laplacianCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                                  domainState, correctionData, ks, values)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = laplacianGridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                                   domainState, correctionData, ks, values)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(laplacianKernel, {"values": "scalar", "out": "scalar"})


# --- forward mode (Tier 2) ----------------------------------------------------------------


@wp.func
def _blockDotJVP(i: wp.int32, j: wp.int32, base: wp.int32, F: wp.int32, n: Any, dn: Any,
                 d: wp.int32, q: Any, r: Any, corr: Any, ks: Any, t: Any):
    """(sum_{c<d} q_ij[base + c] n[c], its tangent sum_c dq[base + c] n[c] + q[base + c] dn[c]);
    a constant-bound loop that only accumulates, like `_blockDot`."""
    acc = type(n[0])(0.0)
    dacc = type(n[0])(0.0)
    for c in range(3):
        if c < d:
            q_c, dq_c = laplacianDifferenceJVP_ij(i, j, base + c, F, q, r, corr, ks, t)
            acc += q_c * n[c]
            dacc += dq_c * n[c] + q_c * dn[c]
    return acc, dacc


@wp.func
def laplacianJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                         dom: Any, corr: Any, ks: Any, t: Any):
    """Tangent of component k of `laplacianPairTerm` (tangent pack `t`); 0 for a reference
    masked by the mode, a pair dropped by positiveDivergence, or r = 0 (non-Naive)."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        d = dom.dim
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        q_k, dq_k = laplacianDifferenceJVP_ij(i, j, k, F, q, r, corr, ks, t)
        keep = True
        if ks.positiveDivergenceMode:
            keep = _blockDot(i, j, 0, F, x_ij, d, q, r, corr, ks, t.values) >= type(res)(0.0)
        if keep:
            scheme = ks.laplacianMode
            if scheme == 1:
                lapW = sphKernelLaplacian_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction,
                                             d)
                dLapW = sphKernelLaplacianJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks.supportMode,
                                                 ks.kernelFunction, d)
                res = dq_k * lapW + q_k * dLapW
            else:
                r_ij = wp.length(x_ij)
                # r > 0 guard of the primal: the term and its tangent are 0 at r = 0
                if r_ij > type(r_ij)(0.0):
                    h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
                    dh_ij = computePairwiseSupportJVP(h_i, h_j, dh_i, dh_j, ks.supportMode)
                    G, dG = correctedGradientJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx,
                                                    dh_i, dh_j, True)
                    dr = wp.dot(x_ij, dx) / r_ij
                    D = r_ij + type(r_ij)(_REG_N) * h_ij
                    dD = dr + type(r_ij)(_REG_N) * dh_ij
                    n_ij = x_ij / D
                    dn = dx / D - x_ij * (dD / (D * D))
                    Gn = wp.dot(G, n_ij)
                    dGn = wp.dot(dG, n_ij) + wp.dot(G, dn)
                    if scheme == 3:
                        b = k / d
                        base = b * d
                        kb = k - base
                        qn, dqn = _blockDotJVP(i, j, base, F, n_ij, dn, d, q, r, corr, ks, t)
                        phi = Gn / D
                        dphi = dGn / D - Gn * dD / (D * D)
                        c2 = type(r_ij)(d + 2)
                        s = q_k - c2 * qn * n_ij[kb]
                        ds = dq_k - c2 * (dqn * n_ij[kb] + qn * dn[kb])
                        res = dphi * s + phi * ds
                    elif scheme == 5:
                        v, dv = consistentDirectionJVP_ij(corr, i, x_ij, dx, D, dD)
                        res = dq_k * wp.dot(G, v) + q_k * (wp.dot(dG, v) + wp.dot(G, dv))
                    else:
                        E = D
                        dE = dD
                        if scheme == 4:
                            E = r_ij + type(r_ij)(_REG_DEFAULT) * h_ij
                            dE = dr + type(r_ij)(_REG_DEFAULT) * dh_ij
                        res = type(r_ij)(-2.0) * ((dq_k * Gn + q_k * dGn) / E
                                                  - q_k * Gn * dE / (E * E))
    return res


laplacianJVPCsrSum, laplacianJVPGridSum = makeNeighborSum(laplacianJVPPairTerm, "laplacianJVP",
                                                          replayZero=True, tangent=True)


@wp.kernel
def laplacianJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                       useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                       correctionData: Any, kernelProperties: Any, tangents: Any,
                       fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """d out[i F + k] = N sum_j d term_ij[k]; 0 for a masked query (layout of
    `laplacianKernel`)."""
    tid = wp.tid()
    i = tid / fieldWidth
    k = tid - i * fieldWidth
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = laplacianJVPCsrSum(adjacencyState, i, k, fieldWidth, queryState,
                                     referenceState, domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = laplacianJVPGridSum(gridState, cell, i, k, fieldWidth, queryState,
                                      referenceState, domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(laplacianJVPKernel, {"out": "scalar"}, tangent=True)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    return (ctx.numQueries * int(extras["fieldWidth"]),)


# --- hand-written reverse kernel (`autograd.reverse`): Brookshaw and Default ----------------


@wp.func
def laplacianVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                         dom: Any, corr: Any, ks: Any, pk: Any):
    """The adjoint of component k of the Brookshaw / Default pair term for the row
    cotangent u = N scalarSeed[i F + k] (`_coefficients.laplacianPairVJP_ij`); returns the x_i
    adjoint, 0 for a reference masked by the mode or r = 0 (the primal's guard)."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        r_ij = wp.length(x_ij)
        if r_ij > type(r_ij)(0.0):
            h_i = q.supports[i]
            h_j = r.supports[j]
            u = pk.scalarSeed[i * F + k]
            if ks.calibrateNormalization:
                u = u * ks.normalizationCoefficient
            q_k = laplacianDifference_ij(i, j, k, F, q, r, corr, ks, pk.values)
            one = type(r_ij)(1.0)
            zero = type(r_ij)(0.0)
            D, E, regE = laplacianDenominators_ij(
                r_ij, computePairwiseSupport(h_i, h_j, ks.supportMode), ks.laplacianMode)
            g = x_ij * (type(r_ij)(-2.0) * u * q_k / (D * E))
            G, Hg, gh_i, gh_j = sphKernelGradientVJP_ij(x_ij, h_i, h_j, g, ks.supportMode,
                                                        ks.kernelFunction, dom.dim)
            res = laplacianPairVJP_ij(
                i, j, k, F, q, r, corr, ks, pk, u, q_k, x_ij, r_ij, D, E, regE, G, Hg, gh_i,
                gh_j, computePairwiseSupportJVP(h_i, h_j, one, zero, ks.supportMode),
                computePairwiseSupportJVP(h_i, h_j, zero, one, ks.supportMode))
    return res


laplacianVJPCsrSum, laplacianVJPGridSum = makeNeighborSum(laplacianVJPPairTerm, "laplacianVJP",
                                                          vector=True)


#: thread (i, k): the reverse of `laplacianKernel`'s output (i, k) for the cotangent
#: ``cotangents.scalarSeed[i F + k]`` (Brookshaw, Default), one traversal
laplacianVJPKernel = makeRowReverseKernel(laplacianVJPCsrSum, laplacianVJPGridSum,
                                          "laplacianVJPKernel", __name__)

def _reverseEligible(config, args):
    """The Brookshaw and Default schemes with every gradient scheme's q_ij, support scheme,
    interaction mode, calibration, traversal and volumes; Naive, Dot, Consistent,
    positiveDivergence, CRK, renormalization and grad-h keep the tape path."""
    return (int(config["laplacianMode"]) in (2, 4) and not config["positiveDivergenceMode"]
            and uncorrected(config) and buffersCovered(args))


LAPLACIAN_REVERSE = ReverseSpec(kernel=laplacianVJPKernel, eligible=_reverseEligible,
                                build=valueReverseLaunch, specialize=laplacianVJPSpecialized)


LAPLACIAN_SPEC = OperatorSpec(
    kernel=laplacianKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("values", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR)),
    jvp=JVPSpec(queryValueExtra="values", referenceValueExtra="values",
                geometryKernel=laplacianJVPKernel),
    reverse=LAPLACIAN_REVERSE,
    specialize=laplacianSpecialized,
)
