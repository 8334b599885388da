"""Gradient: out_i = sum_j c_ij (x) G_ij, derivative-last.

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

  V_j = ``referenceVolumes[j]`` with volumes, else m_j / rho_j.
* Values: one flat array ``[N_q F | N_r F]`` (query values first, then reference values,
  row-major per particle), passed as the TENSOR extra ``values`` with the SCALAR extra
  ``fieldWidth`` = F. One thread per output row (i, a) accumulating the d-vector
  ``N sum_j c_ij[a] G_ij`` (N: calibration factor or 1) and writing
  ``out[i F d + a d + delta]`` for every delta, so the kernel gradient is evaluated once per
  pair and thread, and one compiled overload per (scalar type, d) serves every field shape
  (few overloads, a short cold compile).
* Kinds masking (docs/particle-kinds.md): a masked query row is exactly 0; masked references are
  skipped.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, values, reference
volumes, Omega, CRK A, B, gradA, gradB and L (through `StateAwareWarpFunction`).

Reverse kernel (`autograd.reverse`): without CRK, renormalization and grad-h (every scheme,
support mode, interaction mode, calibration, traversal, volumes), backward is the
hand-written `gradientVJPKernel` instead of Warp's generated adjoint: the primal's thread
layout, one traversal, ``(G, H u, u . dG/dh_i, u . dG/dh_j)`` from one shape evaluation per
single support (`kernels.support.sphKernelGradientVJP_ij`; H is symmetric, so the x-adjoint
is c H u), the coefficient's partial derivatives (`_coefficients.fieldCoefficientVJP_ij`) and
atomic scatters into the gradient buffers. The other calls keep the tape path.

Forward mode (docs/forward-mode.md): value tangents alone are Tier 1 (this kernel on the
tangent values, grad-h included). Geometry tangents: `gradientJVPKernel`, with the primal's
thread layout (thread (i, a), ``out[i F d + a d + delta]``) and
``d out_i[a] = N sum_j (dc_ij[a] G_ij + c_ij[a] dG_ij)`` (`gradientJVPPairTerm`): ``(c, dc)``
from `_coefficients.fieldCoefficientJVP_ij` (the value tangent fused into dc), ``(G, dG)`` from
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
from ..autograd.reverse import ReverseSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernelGradientVJP_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import fieldCoefficient_ij, fieldCoefficientJVP_ij, gradientPairVJP_ij
from ._reverse import buffersCovered, uncorrected, vectorSeedLaunch
from ._specialized import (
    gradientDualSpecialized,
    gradientJVPSpecialized,
    gradientPairedSpecialized,
    gradientSpecialized,
    gradientVJPSpecialized,
)
from ._tangents import coefficientTangentPresent, correctedGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, makeRowReverseKernel, pairVector
from .corrected import correctedGradient_ij

__all__ = ["gradientPairTerm", "gradientKernel", "GRADIENT_SPEC", "gradientJVPPairTerm",
           "gradientJVPKernel", "gradientVJPPairTerm", "gradientVJPKernel", "GRADIENT_REVERSE"]


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


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def gradientVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                        dom: Any, corr: Any, ks: Any, p: Any):
    """The adjoint of c_ij[a] G_ij (k = a) for the row cotangent u = N seed[i F + a]: scatters
    c H_ij u to -x_j, c (u . dG/dh) to h_i and h_j and (u . G) dc to the coefficient's
    inputs (`fieldCoefficientVJP_ij`); returns the x_i adjoint c H_ij u (a d-vector), 0 if
    reference j fails the mode's test."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        u = p.seed[i * F + k]
        if ks.calibrateNormalization:
            u = u * ks.normalizationCoefficient
        G, Hu, gh_i, gh_j = sphKernelGradientVJP_ij(x_ij, q.supports[i], r.supports[j], u,
                                                    ks.supportMode, ks.kernelFunction,
                                                    dom.dim)
        res = gradientPairVJP_ij(i, j, k, F, q, r, corr, ks, p, u, G, Hu, gh_i, gh_j)
    return res


gradientVJPCsrSum, gradientVJPGridSum = makeNeighborSum(gradientVJPPairTerm, "gradientVJP",
                                                        vector=True)


#: thread (i, a): the reverse of `gradientKernel`'s row (i, a) for the cotangent
#: ``cotangents.seed[i F + a]``, one traversal
gradientVJPKernel = makeRowReverseKernel(gradientVJPCsrSum, gradientVJPGridSum,
                                         "gradientVJPKernel", __name__)

def _reverseEligible(config, args):
    """The reverse kernel covers every scheme, support mode, interaction mode, calibration,
    traversal and volumes; CRK, renormalization and grad-h keep the tape path."""
    return uncorrected(config) and buffersCovered(args)


GRADIENT_REVERSE = ReverseSpec(kernel=gradientVJPKernel, eligible=_reverseEligible,
                               build=vectorSeedLaunch, specialize=gradientVJPSpecialized,
                               pairedForward=gradientPairedSpecialized)


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
                geometryKernel=gradientJVPKernel, geometryThreads=_numThreads,
                geometrySpecialize=gradientJVPSpecialized,
                dualSpecialize=gradientDualSpecialized),
    reverse=GRADIENT_REVERSE,
    specialize=gradientSpecialized,
)
