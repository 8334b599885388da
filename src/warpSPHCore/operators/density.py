"""Density: rho_i = sum_j m_j W_ij.

* Pair term `densityPairTerm`: ``m_j W_ij`` for a mode-admitted reference j (kinds masking,
  docs/particle-kinds.md), with W_ij under the call's support scheme (`SupportScheme`,
  docs/kernels.md); the self pair contributes ``m_i W(0)``.
* Kernel `densityKernel` (canonical ABI, generic over scalar type and d = 1, 2, 3; CSR or grid
  traversal chosen at run time): one thread per query; a query failing the mode's query test
  gets exactly 0; the lattice calibration factor multiplies the sum.
* Reads positions, supports, reference masses and kinds; volumes, densities, CRK, grad-h
  and renormalization are ignored.

Derivatives: reverse mode w.r.t. query/reference positions, supports and reference masses
(through `StateAwareWarpFunction`): the hand-written reverse kernel `densityVJPKernel`
(`DENSITY_REVERSE`, one traversal, W, grad W and dW/dh from one shape evaluation per
support, `sphKernelVJP_ij`) for every call whose only gradient buffers are those of the
particle states; Warp's generated adjoint of `densityKernel` otherwise (a differentiable
domain or correction input). Forward mode: `densityJVPKernel`,
``drho_i = N sum_j (dm_j W_ij + m_j dW_ij)`` for position, support and reference-mass
tangents (`densityJVPPairTerm`, the same traversal, kinds and calibration as the primal);
itself reverse-differentiable.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import JVPSpec, OperatorSpec, OutputSpec, ShapeOf
from ..autograd.reverse import ReverseSpec, cotangentPack, gradientBuffersWithin
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernel_ij, sphKernelVJP_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import densityPairVJP_ij
from ._specialized import densityPairedSpecialized, densitySpecialized, densityVJPSpecialized
from ._tangents import kernelJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, pairVector

__all__ = ["densityPairTerm", "densityKernel", "DENSITY_SPEC", "densityJVPPairTerm",
           "densityJVPKernel", "densityVJPPairTerm", "densityVJPKernel", "DENSITY_REVERSE"]


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def densityPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                    dom: Any, corr: Any, ks: Any, extra: Any):
    """m_j W_ij if reference j passes the mode's reference test, else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        W_ij = sphKernel_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                            ks.kernelFunction, dom.dim)
        res = r.masses[j] * W_ij
    return res


densityCsrSum, densityGridSum = makeNeighborSum(densityPairTerm, "density", replayZero=True)


@wp.kernel
def densityKernel(queryState: Any, referenceState: Any, domainState: Any,
                  useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                  correctionData: Any, kernelProperties: Any, out: wp.array(dtype=Any)):
    """rho_i = N sum_j m_j W_ij (N = calibration factor or 1); 0 for a masked query."""
    i = wp.tid()
    ks = kernelProperties
    rho = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            rho = densityCsrSum(adjacencyState, i, 0, 1, queryState, referenceState, domainState,
                                correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            rho = densityGridSum(gridState, cell, i, 0, 1, queryState, referenceState, domainState,
                                 correctionData, ks, referenceState.masses)
        if ks.calibrateNormalization:
            rho = rho * ks.normalizationCoefficient
    out[i] = rho


declareStateOverloads(densityKernel, {"out": "scalar"})


@wp.func
def densityJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, t: Any):
    """dm_j W_ij + m_j dW_ij for a mode-admitted reference j (tangent pack `t`), else 0."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        res = r.masses[j] * kernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
        if t.hasRMasses:
            res += t.rMasses[j] * sphKernel_ij(x_ij, h_i, h_j, ks.supportMode,
                                               ks.kernelFunction, dom.dim)
    return res


densityJVPCsrSum, densityJVPGridSum = makeNeighborSum(densityJVPPairTerm, "densityJVP",
                                                      replayZero=True, tangent=True)


@wp.kernel
def densityJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, tangents: Any,
                     out: wp.array(dtype=Any)):
    """drho_i = N sum_j (dm_j W_ij + m_j dW_ij); 0 for a masked query."""
    i = wp.tid()
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = densityJVPCsrSum(adjacencyState, i, 0, 1, queryState, referenceState,
                                   domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = densityJVPGridSum(gridState, cell, i, 0, 1, queryState, referenceState,
                                    domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[i] = val


declareStateOverloads(densityJVPKernel, {"out": "scalar"}, tangent=True)


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def densityVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       dom: Any, corr: Any, ks: Any, p: Any):
    """The adjoint of m_j W_ij for the row cotangent u = N scalarSeed[i]: scatters -u m_j G_ij
    to x_j, u m_j dW/dh to h_i and h_j and u W_ij to m_j; returns the x_i adjoint
    u m_j G_ij (a d-vector), 0 if reference j fails the mode's test."""
    res = q.positions.dtype()
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        u = p.scalarSeed[i]
        if ks.calibrateNormalization:
            u = u * ks.normalizationCoefficient
        W, G, wh_i, wh_j = sphKernelVJP_ij(x_ij, q.supports[i], r.supports[j], ks.supportMode,
                                           ks.kernelFunction, dom.dim)
        res = densityPairVJP_ij(i, j, r, p, u, W, G, wh_i, wh_j)
    return res


densityVJPCsrSum, densityVJPGridSum = makeNeighborSum(densityVJPPairTerm, "densityVJP",
                                                      vector=True)


@wp.kernel(enable_backward=False)
def densityVJPKernel(queryState: Any, referenceState: Any, domainState: Any,
                     useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                     correctionData: Any, kernelProperties: Any, cotangents: Any):
    """Thread i: the reverse of `densityKernel`'s row i for the cotangent
    ``cotangents.scalarSeed[i]``, one traversal; nothing for a masked query (its row is 0)."""
    i = wp.tid()
    ks = kernelProperties
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        val = queryState.positions.dtype()
        if useAdjacency:
            val = densityVJPCsrSum(adjacencyState, i, 0, 1, queryState, referenceState,
                                   domainState, correctionData, ks, cotangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = densityVJPGridSum(gridState, cell, i, 0, 1, queryState, referenceState,
                                    domainState, correctionData, ks, cotangents)
        if cotangents.hasQPositions:
            wp.atomic_add(cotangents.qPositions, i, val)


declareStateOverloads(densityVJPKernel, cotangent=True)

# the gradient buffers the reverse kernel writes, per kernel argument: the Density reads
# positions, supports, reference masses and kinds; query masses and both sides' densities
# are never read (their gradient is exactly zero, and an aliased query mass shares the
# reference's buffer)
_REVERSE_FIELDS = {0: {"positions", "supports", "masses", "densities"},
                   1: {"positions", "supports", "masses", "densities"}}


def _reverseEligible(config, args):
    """Every kernel, support scheme, interaction mode, calibration and traversal; a
    differentiable domain or correction input keeps the tape path."""
    return gradientBuffersWithin(args, _REVERSE_FIELDS)


def _reverseLaunch(config, args, outputs):
    qs, rs, dom, useAdjacency, adjacency, grid, corr, ks = args
    pack = cotangentPack(config, (("qPositions", "hasQPositions", qs.positions),
                                  ("qSupports", "hasQSupports", qs.supports),
                                  ("rPositions", "hasRPositions", rs.positions),
                                  ("rSupports", "hasRSupports", rs.supports),
                                  ("rMasses", "hasRMasses", rs.masses)),
                         scalarSeed=outputs[0].grad,
                         pairsOnce=bool(config.get("pairsOnce", False)))
    return int(qs.positions.shape[0]), [qs, rs, dom, useAdjacency, adjacency, grid, corr, ks,
                                        pack]


DENSITY_REVERSE = ReverseSpec(kernel=densityVJPKernel, eligible=_reverseEligible,
                              build=_reverseLaunch, specialize=densityVJPSpecialized,
                              pairedForward=densityPairedSpecialized)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


DENSITY_SPEC = OperatorSpec(
    kernel=densityKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=ShapeOf.QUERY),),
    extras=(),
    jvp=JVPSpec(geometryKernel=densityJVPKernel),
    reverse=DENSITY_REVERSE,
    specialize=densitySpecialized,
)
