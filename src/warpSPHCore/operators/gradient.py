"""Gradient (`operators.md` §2.3): out_i = sum_j c_ij (x) G_ij, derivative-last.

* G_ij: the corrected kernel gradient (`corrected.correctedGradient_ij`: grad W, CRK, then
  renormalization L_i G; query-side terms only).
* c_ij per `GradientScheme` (`_coefficients.fieldCoefficient_ij`; f_j -> f_j / Omega_j
  under grad-h, f_i is never divided):

  ============== =========================================================
  Naive (1)      f_j V_j
  Symmetric (2)  m_j rho_i (f_i / rho_i^2 + f_j / rho_j^2)  (masses, densities even with
                 volumes)
  Difference (3) (f_j - f_i) V_j
  Summation (4)  (f_j + f_i) V_j
  ============== =========================================================

  V_j = ``referenceVolumes[j]`` with volumes, else m_j / rho_j (`operators.md` §4.1).
* Values: one flat array ``[N_q F | N_r F]`` (query values first, then reference values,
  row-major per particle), passed as the TENSOR extra ``values`` with the SCALAR extra
  ``fieldWidth`` = F. One thread per output row (i, a) accumulating the d-vector
  ``N sum_j c_ij[a] G_ij`` (N: calibration factor or 1) and writing
  ``out[i F d + a d + delta]`` for every delta, so the kernel gradient is evaluated once per
  pair and thread, and one compiled overload per (scalar type, d) serves every field shape
  (`testing.md` §17).
* Kinds masking (`operators.md` §6): a masked query row is exactly 0; masked references are
  skipped.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, values, reference
volumes, Omega, CRK A, B, gradA, gradB and L (through `StateAwareWarpFunction`).

Forward mode (`autodiff.md` §9.1, §9.5): value tangents alone are Tier 1 (this kernel on the
tangent values, grad-h included). Geometry tangents: `gradientJVPKernel`, with the primal's
thread layout (thread (i, a), ``out[i F d + a d + delta]``) and
``d out_i[a] = N sum_j (dc_ij[a] G_ij + c_ij[a] dG_ij)`` (`gradientJVPPairTerm`): ``(c, dc)``
from `_tangents.fieldCoefficientJVP_ij` (the value tangent fused into dc), ``(G, dG)`` from
`_tangents.correctedGradientJVP_ij` (positions, supports, CRK and renormalization
tangents); same kinds masking, traversal and calibration as the primal; itself
reverse-differentiable (reverse over forward). Geometry tangents with grad-h are rejected by
the scope check (`operationsJVP.checkJVPScope`), so the JVP kernel never divides by Omega.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import ExtraKind, ExtraSpec, JVPSpec, OperatorSpec, OutputSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import fieldCoefficient_ij
from ._tangents import (
    coefficientTangentPresent,
    correctedGradientJVP_ij,
    fieldCoefficientJVP_ij,
    pairTangent_ij,
)
from ._traversal import makeNeighborSum, pairVector
from .corrected import correctedGradient_ij

__all__ = ["gradientPairTerm", "gradientKernel", "GRADIENT_SPEC", "gradientJVPPairTerm",
           "gradientJVPKernel"]


# Inlined into both traversals: Warp passes struct arguments of a non-inlined function by
# value, and copying the five state structs per pair made the forward ~2.5x slower; inlining
# costs ~13 % more cold compile time (measured, docs/performance.md).
@wp.func
def gradientPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                     dom: Any, corr: Any, ks: Any, extra: Any):
    """c_ij[a] G_ij (a d-vector; k = a) if reference j passes the mode's test, else 0."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        G = correctedGradient_ij(corr, ks, dom, i, x_ij, q.supports[i], r.supports[j])
        res = fieldCoefficient_ij(i, j, k, F, q, r, corr, ks, extra, False, False) * G
    return res


gradientCsrSum, gradientGridSum = makeNeighborSum(gradientPairTerm, "gradient", vector=True,
                                                   replayZero=True)


@wp.kernel
def gradientKernel(queryState: Any, referenceState: Any, domainState: Any,
                   useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                   correctionData: Any, kernelProperties: Any, values: wp.array(dtype=Any),
                   fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """Thread (i, a): out[i F d + a d + delta] = N sum_j c_ij[a] G_ij[delta] for every delta
    (one kernel-gradient evaluation per pair and thread); 0 for a masked query."""
    tid = wp.tid()
    i = tid / fieldWidth
    a = tid - i * fieldWidth
    ks = kernelProperties
    val = queryState.positions.dtype()
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = gradientCsrSum(adjacencyState, i, a, fieldWidth, queryState, referenceState,
                                 domainState, correctionData, ks, values)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = gradientGridSum(gridState, cell, i, a, fieldWidth, queryState, referenceState,
                                  domainState, correctionData, ks, values)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    base = tid * domainState.dim
    for delta in range(domainState.dim):
        out[base + delta] = val[delta]


declareStateOverloads(gradientKernel, {"values": "scalar", "out": "scalar"})


@wp.func
def gradientJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                        dom: Any, corr: Any, ks: Any, t: Any):
    """d(c_ij[a] G_ij) = dc_ij[a] G_ij + c_ij[a] dG_ij (a d-vector; k = a; tangent pack `t`)
    if reference j passes the mode's test, else 0."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        G, dG = correctedGradientJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j,
                                        coefficientTangentPresent(t))
        c, dc = fieldCoefficientJVP_ij(i, j, k, F, q, r, corr, ks, t, False)
        res = dc * G + c * dG
    return res


gradientJVPCsrSum, gradientJVPGridSum = makeNeighborSum(gradientJVPPairTerm, "gradientJVP",
                                                        vector=True, replayZero=True,
                                                        tangent=True)


@wp.kernel
def gradientJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                      useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                      correctionData: Any, kernelProperties: Any, tangents: Any,
                      fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """Thread (i, a): out[i F d + a d + delta] = N sum_j (dc_ij[a] G_ij + c_ij[a] dG_ij)[delta]
    for every delta; 0 for a masked query."""
    tid = wp.tid()
    i = tid / fieldWidth
    a = tid - i * fieldWidth
    ks = kernelProperties
    val = queryState.positions.dtype()
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = gradientJVPCsrSum(adjacencyState, i, a, fieldWidth, queryState,
                                    referenceState, domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = gradientJVPGridSum(gridState, cell, i, a, fieldWidth, queryState,
                                     referenceState, domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    base = tid * domainState.dim
    for delta in range(domainState.dim):
        out[base + delta] = val[delta]


declareStateOverloads(gradientJVPKernel, {"out": "scalar"}, tangent=True)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    return (ctx.numQueries * int(extras["fieldWidth"]) * int(ctx.domain.dim),)


def _numThreads(ctx, extras):
    return ctx.numQueries * int(extras["fieldWidth"])


GRADIENT_SPEC = OperatorSpec(
    kernel=gradientKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("values", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR)),
    numThreads=_numThreads,
    jvp=JVPSpec(queryValueExtra="values", referenceValueExtra="values",
                geometryKernel=gradientJVPKernel, geometryThreads=_numThreads),
)
