"""Curl: out_i = sum_j G_ij x c_ij over the first field axis.

* G_ij: the corrected kernel gradient (`corrected.correctedGradient_ij`: grad W, CRK, then
  renormalization L_i G; query-side terms only).
* c_ij: the Gradient scheme table with grad-h dividing both f_i by Omega_i and f_j by
  Omega_j (`_coefficients.fieldCoefficient_ij`, never consistent).
* Layout (flat field of width F):
  * 3D, P = F / 3: ``out[a P + s] = sum_j (G x c[:, s])_a = G[a1] c[a2 P + s] -
    G[a2] c[a1 P + s]`` with a1 = (a + 1) % 3, a2 = (a + 2) % 3; F outputs per query.
  * 2D, P = F / 2: ``out[s] = sum_j (G_x c[P + s] - G_y c[s])`` (the 3D formula's a = 2
    component: a1 = 0, a2 = 1); P outputs per query.
  * 1D: one output per query, exactly 0. The kernel still writes it (so the result is a
    node of the autograd graph) but never visits neighbours: every adjoint is exactly 0 and
    backward runs normally (design decision: zeros with zero gradients, not an error).
* Values: ``[N_q F | N_r F]`` (TENSOR extra ``values``), SCALAR extra ``fieldWidth`` = F.
  One thread per output element; one compiled overload per (scalar type, d).
* Kinds masking (docs/particle-kinds.md): a masked query row is exactly 0; masked references are
  skipped. Lattice calibration multiplies the sum.

Derivatives: reverse mode w.r.t. positions, supports, masses, densities, values, reference
volumes, Omega, CRK A, B, gradA, gradB and L (through `StateAwareWarpFunction`). Without CRK,
renormalization and grad-h the backward is the hand-written reverse kernel `curlVJPKernel`
(`autograd.reverse`): per pair the G cotangent g is u c[a2 P + s] on axis a1 and
-u c[a1 P + s] on axis a2, whose adjoint (H g, g . dG/dh) comes from one shape evaluation,
and u G[a1], -u G[a2] are the two coefficients' adjoints (`_coefficients.curlPairVJP_ij`). Forward mode
(exact, neighbours fixed): `curlJVPKernel`, the same thread layout, traversal, kinds and
calibration as the primal, with the product-rule pair term

    d(G[a1] c[a2 P + s] - G[a2] c[a1 P + s])
        = dG[a1] c2 + G[a1] dc2 - dG[a2] c1 - G[a2] dc1

(`_tangents.correctedGradientJVP_ij`; `_coefficients.fieldCoefficientJVP_ij` with f_i and f_j
both divided, the value tangent fused). The scope (`operationsJVP.checkJVPScope`): every d, no
grad-h; the kernel is the same generic formula for every d (1D: exactly 0, like the primal;
3D: the same index map as the primal), checked against J·v in 2D and 3D. Itself
reverse-differentiable.
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
    curlAxes,
    curlPairVJP_ij,
    fieldCoefficient_ij,
    fieldCoefficientJVP_ij,
)
from ._reverse import buffersCovered, uncorrected, valueReverseLaunch
from ._specialized import curlSpecialized, curlVJPSpecialized
from ._tangents import coefficientTangentPresent, correctedGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, pairVector
from .corrected import correctedGradient_ij

__all__ = ["curlPairTerm", "curlKernel", "CURL_SPEC", "curlJVPPairTerm", "curlJVPKernel",
           "curlVJPPairTerm", "curlVJPKernel", "CURL_REVERSE"]


@wp.func
def _outputsPerQuery(d: wp.int32, F: wp.int32):
    """Outputs per query of a field of width F: F in 3D, F / 2 in 2D (the z component), 1 in
    1D (exactly 0)."""
    n = wp.int32(1)
    if d == 2:
        n = F / 2
    elif d == 3:
        n = F
    return n


# Inlined into both traversals (a non-inlined Warp function takes its struct arguments by
# value: one copy of the state structs per pair; docs/performance.md).
@wp.func
def curlPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any, dom: Any,
                 corr: Any, ks: Any, extra: Any):
    """(G_ij x c_ij[:, s])_a for the output component k (2D: k = s, a = z; 3D: k = a P + s)
    if reference j passes the mode's test, else 0 (d = 1: 0)."""
    res = type(ks.normalizationCoefficient)(0.0)
    d = dom.dim
    if d > 1 and checkDirectionality_j(ks.operationMode, r.kinds[j]):
        P = F / d
        a1, a2, s = curlAxes(k, P, d)
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        G = correctedGradient_ij(corr, ks, dom, i, x_ij, q.supports[i], r.supports[j])
        c2 = fieldCoefficient_ij(i, j, a2 * P + s, F, q, r, corr, ks, extra, False, True)
        c1 = fieldCoefficient_ij(i, j, a1 * P + s, F, q, r, corr, ks, extra, False, True)
        res = G[wp.min(a1, d - 1)] * c2 - G[wp.min(a2, d - 1)] * c1
    return res


curlCsrSum, curlGridSum = makeNeighborSum(curlPairTerm, "curl", replayZero=True)


@wp.kernel
def curlKernel(queryState: Any, referenceState: Any, domainState: Any, useAdjacency: wp.bool,
               adjacencyState: Any, gridState: Any, correctionData: Any, kernelProperties: Any,
               values: wp.array(dtype=Any), fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """out[i n + k] = N sum_j (G_ij x c_ij)[k] (n = F in 3D, F / 2 in 2D, 1 in 1D); 0 for a
    masked query and in 1D."""
    tid = wp.tid()
    d = domainState.dim
    n = _outputsPerQuery(d, fieldWidth)
    i = tid / n
    k = tid - i * n
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if d > 1 and checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = curlCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                             domainState, correctionData, ks, values)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = curlGridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                              domainState, correctionData, ks, values)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(curlKernel, {"values": "scalar", "out": "scalar"})


@wp.func
def curlJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                    dom: Any, corr: Any, ks: Any, t: Any):
    """d(G_ij x c_ij[:, s])_a = dG[a1] c2 + G[a1] dc2 - dG[a2] c1 - G[a2] dc1 for the output
    component k (as `curlPairTerm`) if reference j passes the mode's test, else 0 (d = 1:
    0)."""
    res = type(ks.normalizationCoefficient)(0.0)
    d = dom.dim
    if d > 1 and checkDirectionality_j(ks.operationMode, r.kinds[j]):
        P = F / d
        a1, a2, s = curlAxes(k, P, d)
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        h_i = q.supports[i]
        h_j = r.supports[j]
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        G, dG = correctedGradientJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j,
                                        coefficientTangentPresent(t))
        c2, dc2 = fieldCoefficientJVP_ij(i, j, a2 * P + s, F, q, r, corr, ks, t, True)
        c1, dc1 = fieldCoefficientJVP_ij(i, j, a1 * P + s, F, q, r, corr, ks, t, True)
        b1 = wp.min(a1, d - 1)
        b2 = wp.min(a2, d - 1)
        res = (dG[b1] * c2 + G[b1] * dc2) - (dG[b2] * c1 + G[b2] * dc1)
    return res


curlJVPCsrSum, curlJVPGridSum = makeNeighborSum(curlJVPPairTerm, "curlJVP", replayZero=True,
                                                tangent=True)


@wp.kernel
def curlJVPKernel(queryState: Any, referenceState: Any, domainState: Any, useAdjacency: wp.bool,
                  adjacencyState: Any, gridState: Any, correctionData: Any,
                  kernelProperties: Any, tangents: Any, fieldWidth: wp.int32,
                  out: wp.array(dtype=Any)):
    """dout[i n + k] = N sum_j d(G_ij x c_ij)[k] (n as `curlKernel`); 0 for a masked query
    and in 1D."""
    tid = wp.tid()
    d = domainState.dim
    n = _outputsPerQuery(d, fieldWidth)
    i = tid / n
    k = tid - i * n
    ks = kernelProperties
    val = type(ks.normalizationCoefficient)(0.0)
    if d > 1 and checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = curlJVPCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                                domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = curlJVPGridSum(gridState, cell, i, k, fieldWidth, queryState, referenceState,
                                 domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    out[tid] = val


declareStateOverloads(curlJVPKernel, {"out": "scalar"}, tangent=True)


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------


@wp.func
def curlVJPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                    dom: Any, corr: Any, ks: Any, pk: Any):
    """The adjoint of the pair term of output (i, k) for the row cotangent
    u = N scalarSeed[i n + k] (`_coefficients.curlPairVJP_ij`); returns the x_i adjoint H g,
    0 if reference j fails the mode's test (d = 1: 0)."""
    res = q.positions.dtype()
    d = dom.dim
    if d > 1 and checkDirectionality_j(ks.operationMode, r.kinds[j]):
        P = F / d
        n = _outputsPerQuery(d, F)
        a1, a2, s = curlAxes(k, P, d)
        b1 = wp.min(a1, d - 1)
        b2 = wp.min(a2, d - 1)
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        u = pk.scalarSeed[i * n + k]
        if ks.calibrateNormalization:
            u = u * ks.normalizationCoefficient
        c2 = fieldCoefficient_ij(i, j, a2 * P + s, F, q, r, corr, ks, pk.values, False, True)
        c1 = fieldCoefficient_ij(i, j, a1 * P + s, F, q, r, corr, ks, pk.values, False, True)
        g = type(x_ij)()
        g[b1] = u * c2
        g[b2] = -u * c1
        G, Hg, gh_i, gh_j = sphKernelGradientVJP_ij(x_ij, q.supports[i], r.supports[j], g,
                                                    ks.supportMode, ks.kernelFunction, d)
        res = curlPairVJP_ij(i, j, F, q, r, corr, ks, pk, u, G, Hg, gh_i, gh_j, b1, b2, s, P)
    return res


curlVJPCsrSum, curlVJPGridSum = makeNeighborSum(curlVJPPairTerm, "curlVJP", vector=True)


@wp.kernel(enable_backward=False)
def curlVJPKernel(queryState: Any, referenceState: Any, domainState: Any, useAdjacency: wp.bool,
                  adjacencyState: Any, gridState: Any, correctionData: Any,
                  kernelProperties: Any, cotangents: Any, fieldWidth: wp.int32):
    """Thread (i, k): the reverse of `curlKernel`'s output (i, k) for the cotangent
    ``cotangents.scalarSeed[i n + k]``, one traversal; nothing for a masked query and in
    1D (the output is 0)."""
    tid = wp.tid()
    d = domainState.dim
    n = _outputsPerQuery(d, fieldWidth)
    i = tid / n
    k = tid - i * n
    ks = kernelProperties
    if d > 1 and checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        val = queryState.positions.dtype()
        if useAdjacency:
            val = curlVJPCsrSum(adjacencyState, i, k, fieldWidth, queryState, referenceState,
                                domainState, correctionData, ks, cotangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = curlVJPGridSum(gridState, cell, i, k, fieldWidth, queryState,
                                 referenceState, domainState, correctionData, ks, cotangents)
        if cotangents.hasQPositions:
            wp.atomic_add(cotangents.qPositions, i, val)


declareStateOverloads(curlVJPKernel, cotangent=True)

def _reverseEligible(config, args):
    """Every scheme, support mode, interaction mode, calibration, traversal, dimension and
    volumes; CRK, renormalization and grad-h keep the tape path."""
    return uncorrected(config) and buffersCovered(args)


CURL_REVERSE = ReverseSpec(kernel=curlVJPKernel, eligible=_reverseEligible,
                           build=valueReverseLaunch, specialize=curlVJPSpecialized)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    d = int(ctx.domain.dim)
    F = int(extras["fieldWidth"])
    perQuery = {1: 1, 2: F // 2}.get(d, F)
    return (ctx.numQueries * perQuery,)


CURL_SPEC = OperatorSpec(
    kernel=curlKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("values", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR)),
    jvp=JVPSpec(queryValueExtra="values", referenceValueExtra="values",
                geometryKernel=curlJVPKernel),
    reverse=CURL_REVERSE,
    specialize=curlSpecialized,
)
