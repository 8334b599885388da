"""Interpolate: fbar_i = sum_j f_j V_j W^R_ij.

* V_j = ``referenceVolumes[j]`` with volumes, else m_j / rho_j (reference masses and
  densities). Query volumes are never read.
* W^R_ij = A_i (1 + B_i . x_ij) W_ij with CRK (query-side A, B only;
  `corrected.correctedKernel_ij`), else W_ij. Grad-h and renormalization are accepted and not
  applied.
* The field is flattened to width F (``referenceValues`` flat ``[N_r * F]``, row-major): one
  thread per output element (i, k), ``out[i * F + k] = N sum_j f_j[k] V_j W^R_ij`` with the
  calibration factor N (or 1). F is a run-time SCALAR extra, so one compiled overload per
  (scalar type, d) serves every field shape (few overloads, a short cold compile).
* Kinds masking (docs/particle-kinds.md): a masked query row is exactly 0; masked
  references are skipped.

Derivatives: reverse mode w.r.t. positions, supports, reference masses and densities,
values, reference volumes and the CRK A, B (through `StateAwareWarpFunction`). Forward mode
(exact, neighbours fixed): `interpolateJVPKernel`, the same thread layout, traversal, kinds and
calibration as the primal, with the values frozen (the pack's flat ``values [N_r F]``) and the
value tangent fused (``tValues``, same layout):

    d fbar_i[k] = N sum_j ( f_j[k] (dV_j W^R_ij + V_j dW^R_ij) + df_j[k] V_j W^R_ij )

(`interpolateJVPPairTerm`; dV_j from `apparentVolumeJVP_j`, (W^R, dW^R) from
`correctedKernelJVP_ij`). Itself reverse-differentiable (reverse over forward).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import ExtraKind, ExtraSpec, JVPSpec, OperatorSpec, OutputSpec
from ..autograd.reverse import ReverseSpec
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernel_ij, sphKernelVJP_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import apparentVolume_j, apparentVolumeJVP_j, interpolatePairVJP_ij
from ._reverse import buffersCovered, valueReverseLaunch
from ._specialized import interpolateSpecialized, interpolateVJPSpecialized
from ._tangents import correctedKernelJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, makeRowReverseKernel, pairVector
from .corrected import correctedKernel_ij

__all__ = ["interpolatePairTerm", "interpolateKernel", "interpolateJVPPairTerm",
           "interpolateJVPKernel", "interpolateVJPKernel", "INTERPOLATE_SPEC"]


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def interpolatePairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                        dom: Any, corr: Any, ks: Any, extra: Any):
    """f_j[k] V_j W^R_ij if reference j passes the mode's reference test, else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        W_ij = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                            ks.kernelFunction, dom.dim)
        WR_ij = correctedKernel_ij(corr, i, x_ij, W_ij)
        res = extra[j * F + k] * apparentVolume_j(r, corr, j) * WR_ij
    return res


interpolateCsrSum, interpolateGridSum = makeNeighborSum(interpolatePairTerm, "interpolate",
                                                        replayZero=True)


@wp.kernel
def interpolateKernel(queryState: Any, referenceState: Any, domainState: Any,
                      useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                      correctionData: Any, kernelProperties: Any,
                      referenceValues: wp.array(dtype=Any), fieldWidth: wp.int32,
                      out: wp.array(dtype=Any)):
    """out[i F + k] = N sum_j f_j[k] V_j W^R_ij; 0 for a masked query."""
    tid = wp.tid()
    i = tid / fieldWidth
    k = tid - i * fieldWidth
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = interpolateCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                                    domainState, correctionData, ks, referenceValues)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = interpolateGridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                                     domainState, correctionData, ks, referenceValues)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(interpolateKernel, {"referenceValues": "scalar", "out": "scalar"})


@wp.func
def interpolateJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                           dom: Any, corr: Any, ks: Any, t: Any):
    """f_j[k] (dV_j W^R_ij + V_j dW^R_ij) + df_j[k] V_j W^R_ij for a mode-admitted reference j
    (tangent pack `t`: frozen values ``t.values``, value tangent ``t.tValues``), else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        WR, dWR = correctedKernelJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j)
        V = apparentVolume_j(r, corr, j)
        dV = apparentVolumeJVP_j(r, corr, t, j)
        res = t.values[j * F + k] * (dV * WR + V * dWR)
        if t.hasValueTangent:
            res += t.tValues[j * F + k] * V * WR
    return res


interpolateJVPCsrSum, interpolateJVPGridSum = makeNeighborSum(
    interpolateJVPPairTerm, "interpolateJVP", replayZero=True, tangent=True)


@wp.kernel
def interpolateJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                         useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                         correctionData: Any, kernelProperties: Any, tangents: Any,
                         fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """out[i F + k] = N sum_j d(f_j[k] V_j W^R_ij); 0 for a masked query."""
    tid = wp.tid()
    i = tid / fieldWidth
    k = tid - i * fieldWidth
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = interpolateJVPCsrSum(adjacencyState, i, k, fieldWidth, queryState,
                                       referenceState, domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = interpolateJVPGridSum(gridState, cell, i, k, fieldWidth, queryState,
                                        referenceState, domainState, correctionData, ks,
                                        tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(interpolateJVPKernel, {"out": "scalar"}, tangent=True)


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def interpolateVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                           dom: Any, corr: Any, ks: Any, p: Any):
    """The adjoint of f_j[k] V_j W_ij for the row cotangent u = N scalarSeed[i F + k]
    (`_coefficients.interpolatePairVJP_ij`); returns the x_i adjoint (a d-vector), 0 if
    reference j fails the mode's test."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        u = p.scalarSeed[i * F + k]
        if ks.calibrateNormalization:
            u = u * ks.normalizationCoefficient
        W, G, wh_i, wh_j = sphKernelVJP_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                                           ks.kernelFunction, dom.dim)
        res = interpolatePairVJP_ij(i, j, k, F, q, r, corr, p, u, W, G, wh_i, wh_j)
    return res


interpolateVJPCsrSum, interpolateVJPGridSum = makeNeighborSum(
    interpolateVJPPairTerm, "interpolateVJP", vector=True)


#: thread (i, k): the reverse of `interpolateKernel`'s row (i, k) for the cotangent
#: ``cotangents.scalarSeed[i F + k]``, one traversal
interpolateVJPKernel = makeRowReverseKernel(interpolateVJPCsrSum, interpolateVJPGridSum,
                                            "interpolateVJPKernel", __name__)

def _reverseEligible(config, args):
    """Every kernel, support scheme, interaction mode, calibration, traversal and volumes;
    CRK (which corrects W_ij with the query's A, B) and a differentiable domain keep the
    tape path (the Interpolate reads no query density, volume or mass: their gradient is
    exactly zero)."""
    return not config["useCRK"] and buffersCovered(args)


INTERPOLATE_REVERSE = ReverseSpec(kernel=interpolateVJPKernel, eligible=_reverseEligible,
                                  build=valueReverseLaunch,
                                  specialize=interpolateVJPSpecialized)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    return (ctx.numQueries * int(extras["fieldWidth"]),)


INTERPOLATE_SPEC = OperatorSpec(
    kernel=interpolateKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("referenceValues", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR)),
    jvp=JVPSpec(referenceValueExtra="referenceValues", geometryKernel=interpolateJVPKernel),
    reverse=INTERPOLATE_REVERSE,
    specialize=interpolateSpecialized,
)
