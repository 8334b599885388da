"""Density (`operators.md` §2.1): rho_i = sum_j m_j W_ij.

* Pair term `densityPairTerm`: ``m_j W_ij`` for a mode-admitted reference j (kinds masking,
  `operators.md` §6), with W_ij under the call's support scheme (`kernels.md` §6); the self
  pair contributes ``m_i W(0)``.
* Kernel `densityKernel` (canonical ABI, generic over scalar type and d = 1, 2, 3; CSR or grid
  traversal chosen at run time): one thread per query; a query failing the mode's query test
  gets exactly 0; the lattice calibration factor multiplies the sum.
* Reads positions, supports, reference masses and kinds; volumes, densities, CRK, grad-h
  and renormalization are ignored.

Derivatives: reverse mode w.r.t. query/reference positions, supports and reference masses
(through `StateAwareWarpFunction`). Forward-mode tangents: not yet.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import JVPSpec, OperatorSpec, OutputSpec, ShapeOf
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import sphKernel_ij
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._traversal import makeNeighborSum, pairVector

__all__ = ["densityPairTerm", "densityKernel", "DENSITY_SPEC"]


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


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


DENSITY_SPEC = OperatorSpec(
    kernel=densityKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=ShapeOf.QUERY),),
    extras=(),
    jvp=JVPSpec(),
)
