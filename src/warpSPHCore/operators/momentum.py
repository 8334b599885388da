"""Momentum: the fused momentum rate of weakly compressible SPH with the
transport-velocity formulation of Adami, Hu & Adams (2013, J. Comput. Phys. 241: 292-307),
pressure, viscosity and the transport-velocity stress summed in one neighbour traversal,
together with the background-pressure sum of the transport velocity:

    F_i = sum_j (V_i^2 + V_j^2) [ -p~_ij G_ij + mu_ij u_ij (x_ij . G_ij) / D_ij^2
                                  + 1/2 (A_i + A_j) . G_ij ]
    B_i = sum_j (V_i^2 + V_j^2) G_ij

* p~_ij = (rho_j p_i + rho_i p_j) / (rho_i + rho_j): the density-weighted inter-particle
  pressure (0 where rho_i + rho_j <= 0);
* mu_ij = 2 mu_i mu_j / (mu_i + mu_j): the inter-particle dynamic viscosity (mu for a single
  fluid; 0 where mu_i + mu_j <= 0), u_ij = u_i - u_j; the viscous term is the Morris et al.
  (1997) form written with G_ij: (x_ij . G_ij) / r_ij^2 = (dW/dr) / r_ij;
* A = rho u (u~ - u)^T, the transport-velocity stress: (A . G)_a = rho u_a ((u~ - u) . G);
* G_ij = grad_i W_ij (the call's kernel and support scheme; no CRK, renormalization or grad-h:
  correction states are accepted and ignored), D_ij = r_ij + 1e-8 h_ij (the library's
  Brookshaw denominator), pairs with r_ij = 0 skipped (their G is 0).

The acceleration is F_i / m_i and the background-pressure acceleration -p_b B_i / m_i
(`fluids.momentumAcceleration` and `fluids.transportVelocityAccelerations` divide; the
operator itself reads no masses). Output ``[N_q, 2, d]``: row 0 is F_i, row 1 is B_i. Walls are references like any other particle: their p, rho, V and u are
the extrapolated values of the Adami et al. (2012) dummy particles and u~ = u (A = 0).

* Values: one field per particle, ``[N, 4 + 2 d]`` with the columns
  ``(p, rho, V, mu, u_0 .. u_{d-1}, u~_0 .. u~_{d-1})``; query and reference fields in the
  flat ``[N_q F | N_r F]`` layout of the value operators (``values``, ``fieldWidth`` = F).
  The densities, masses and volumes of the particle states are not read.
* One thread per query accumulates the 2 x d matrix (F_i; B_i) as a whole matrix (Warp
  double-counts the adjoint of a component update ``v[k] = v[k] + x`` of a local vector or
  matrix): the kernel gradient is evaluated once per pair. Kinds masking
  (docs/particle-kinds.md): a masked query row is exactly 0, masked references are skipped.
  Calibration multiplies the sum.

A launch that no `wp.Tape` records (no gradient) runs the forward kernel specialised on the
call's configuration (`_specialized.momentumSpecialized`).

Derivatives: reverse mode w.r.t. positions, supports and every field column: the
hand-written reverse kernel of `_specialized.momentumVJPSpecialized` (one traversal, the
per-pair adjoint written out) for every configuration with a specialised kernel, else Warp's
generated adjoint through `StateAwareWarpFunction`. Forward mode: `momentumJVPKernel`, the
exact derivative of the primal w.r.t. positions, supports and the field (the operator is not
linear in its values, so value tangents also go through this kernel, with the primal field
frozen in the tangent pack's ``values``); itself reverse-differentiable.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads, structFor
from ..autograd.operator_spec import ExtraKind, ExtraSpec, JVPSpec, OperatorSpec, OutputSpec
from ..autograd.reverse import ReverseSpec, cotangentPack, gradientBuffersWithin, vectorView
from ..autograd.specialize import specializationEnabled
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.support import (
    computePairwiseSupport,
    computePairwiseSupportJVP,
    sphKernelGradient_ij,
)
from ..neighborhood.traversal import gridQueryCell
from ..util.precision import warpScalar
from ._coefficients import LAPLACIAN_REG_N as _REG_N
from ._coefficients import referenceBase
from ._momentumPair import (
    momentumPair,
    momentumRows,
    pairViscosity,
    pairViscosityJVP,
    stressJVP,
    weightedPressure,
    weightedPressureJVP,
)
from ._specialized import configurationOf, momentumSpecialized, momentumVJPSpecialized
from ._tangents import kernelGradientJVP_ij, pairTangent_ij
from ._traversal import makeNeighborSum, pairVector

__all__ = ["MOMENTUM_COLUMNS", "momentumFieldWidth", "momentumPairTerm",
           "momentumKernel", "momentumJVPPairTerm", "momentumJVPKernel", "MOMENTUM_SPEC"]

#: the scalar columns of the per-particle field, before the velocity and transport velocity
MOMENTUM_COLUMNS = ("pressure", "density", "volume", "viscosity")


def momentumFieldWidth(d: int) -> int:
    """F = 4 + 2 d: (p, rho, V, mu), u, u~."""
    return len(MOMENTUM_COLUMNS) + 2 * d


def _zeroOf(M):
    def momentumZero(q, ks):
        return M()

    return momentumZero


def _zeroOverloads():
    """``momentumZero(q, ks)``: the zero 2 x d accumulator, one concrete overload per (d,
    scalar type) (a generic function cannot name a shape that depends on d)."""
    result = None
    for s in (wp.float32, wp.float64):
        for d in (1, 2, 3):
            fn = _zeroOf(momentumRows(d, s))
            # concrete annotations (this module's annotations are strings)
            fn.__annotations__ = {"q": structFor("particle", d, s),
                                  "ks": structFor("kernelState", d, s)}
            f = wp.func(fn)
            if result is None:
                result = f
            else:
                result.add_overload(f)
    return result


momentumZero = _zeroOverloads()


@wp.func
def _fieldVector(values: Any, base: wp.int32, d: wp.int32, like: Any):
    """The d-vector ``values[base : base + d]``, for whole-vector accumulation (Warp
    double-counts the adjoint of a component update of a local vector)."""
    v = type(like)()
    for c in range(3):
        if c < d:
            e = type(like)()
            e[c] = type(like[0])(1.0)
            v = v + values[base + c] * e
    return v


@wp.func
def _particleFields(values: Any, base: wp.int32, d: wp.int32, like: Any):
    """(p, rho, V, mu, u, u~) of the particle whose field starts at ``values[base]``."""
    return (values[base], values[base + 1], values[base + 2], values[base + 3],
            _fieldVector(values, base + 4, d, like), _fieldVector(values, base + 4 + d, d, like))


# Inlined into both traversals (struct arguments of a non-inlined function are copied per
# pair; docs/performance.md).
@wp.func
def momentumPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                     dom: Any, corr: Any, ks: Any, extra: Any):
    """The pair contribution of reference j to (F_i; B_i); 0 for a reference masked by the
    mode or a coincident pair (r_ij = 0)."""
    res = momentumZero(q, ks)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        r_ij = wp.length(x_ij)
        if r_ij > type(r_ij)(0.0):
            d = dom.dim
            h_i = q.supports[i]
            h_j = r.supports[j]
            G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, d)
            D = r_ij + type(r_ij)(_REG_N) * computePairwiseSupport(h_i, h_j, ks.supportMode)
            p_i, rho_i, V_i, mu_i, u_i, ut_i = _particleFields(extra, i * F, d, x_ij)
            p_j, rho_j, V_j, mu_j, u_j, ut_j = _particleFields(
                extra, referenceBase(extra, q, F) + j * F, d, x_ij)
            res = momentumPair(G, x_ij, D, p_i, rho_i, V_i, mu_i, u_i, ut_i, p_j, rho_j, V_j,
                               mu_j, u_j, ut_j)
    return res


momentumCsrSum, momentumGridSum = makeNeighborSum(momentumPairTerm, "momentum",
                                                  replayZero=True, zero=momentumZero)


@wp.kernel
def momentumKernel(queryState: Any, referenceState: Any, domainState: Any,
                   useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                   correctionData: Any, kernelProperties: Any, values: wp.array(dtype=Any),
                   fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """Thread i: out[2 i d + row d + delta] = N sum_j (pair contribution)[row, delta] (rows F,
    B); 0 for a masked query."""
    i = wp.tid()
    ks = kernelProperties
    val = momentumZero(queryState, ks)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = momentumCsrSum(adjacencyState, i, 0, fieldWidth, queryState, referenceState,
                                 domainState, correctionData, ks, values)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = momentumGridSum(gridState, cell, i, 0, fieldWidth, queryState,
                                  referenceState, domainState, correctionData, ks, values)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    d = domainState.dim
    base = i * 2 * d
    for delta in range(d):
        out[base + delta] = val[0, delta]
        out[base + d + delta] = val[1, delta]


declareStateOverloads(momentumKernel, {"values": "scalar", "out": "scalar"})


# --- forward mode (Tier 2) ----------------------------------------------------------------


@wp.func
def _tangentFields(t: Any, base: wp.int32, d: wp.int32, like: Any):
    """The tangents (dp, drho, dV, dmu, du, du~) of one particle's field; 0 without a value
    tangent."""
    zero = type(like[0])(0.0)
    dp = zero
    drho = zero
    dV = zero
    dmu = zero
    du = type(like)()
    dut = type(like)()
    if t.hasValueTangent:
        dp, drho, dV, dmu, du, dut = _particleFields(t.tValues, base, d, like)
    return dp, drho, dV, dmu, du, dut


@wp.func
def momentumJVPPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                        dom: Any, corr: Any, ks: Any, t: Any):
    """Tangent of `momentumPairTerm` for the pack `t` (position and support tangents, the
    frozen field ``t.values`` and its tangent ``t.tValues``); 0 where the primal is."""
    res = momentumZero(q, ks)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        r_ij = wp.length(x_ij)
        if r_ij > type(r_ij)(0.0):
            d = dom.dim
            h_i = q.supports[i]
            h_j = r.supports[j]
            dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
            G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, d)
            dG = kernelGradientJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
            reg = type(r_ij)(_REG_N)
            D = r_ij + reg * computePairwiseSupport(h_i, h_j, ks.supportMode)
            dD = wp.dot(x_ij, dx) / r_ij + reg * computePairwiseSupportJVP(
                h_i, h_j, dh_i, dh_j, ks.supportMode)
            bi = i * F
            bj = referenceBase(t.values, q, F) + j * F
            p_i, rho_i, V_i, mu_i, u_i, ut_i = _particleFields(t.values, bi, d, x_ij)
            p_j, rho_j, V_j, mu_j, u_j, ut_j = _particleFields(t.values, bj, d, x_ij)
            dp_i, drho_i, dV_i, dmu_i, du_i, dut_i = _tangentFields(t, bi, d, x_ij)
            dp_j, drho_j, dV_j, dmu_j, du_j, dut_j = _tangentFields(t, bj, d, x_ij)

            w = V_i * V_i + V_j * V_j
            dw = type(w)(2.0) * (V_i * dV_i + V_j * dV_j)
            mu = pairViscosity(mu_i, mu_j)
            dmu = pairViscosityJVP(mu_i, mu_j, dmu_i, dmu_j)
            xg = wp.dot(x_ij, G)
            dxg = wp.dot(dx, G) + wp.dot(x_ij, dG)
            visc = mu * xg / (D * D)
            dvisc = (dmu * xg + mu * dxg) / (D * D) - type(w)(2.0) * visc * dD / D
            pt = weightedPressure(p_i, p_j, rho_i, rho_j)
            dpt = weightedPressureJVP(p_i, p_j, rho_i, rho_j, dp_i, dp_j, drho_i, drho_j)
            half = type(w)(0.5)
            Q = (visc * (u_i - u_j) - pt * G
                 + half * (rho_i * wp.dot(ut_i - u_i, G) * u_i
                           + rho_j * wp.dot(ut_j - u_j, G) * u_j))
            dQ = (dvisc * (u_i - u_j) + visc * (du_i - du_j) - dpt * G - pt * dG
                  + half * (stressJVP(G, dG, rho_i, u_i, ut_i, drho_i, du_i, dut_i)
                            + stressJVP(G, dG, rho_j, u_j, ut_j, drho_j, du_j, dut_j)))
            res = wp.matrix_from_rows(dw * Q + w * dQ, dw * G + w * dG)
    return res


momentumJVPCsrSum, momentumJVPGridSum = makeNeighborSum(momentumJVPPairTerm, "momentumJVP",
                                                        replayZero=True, tangent=True,
                                                        zero=momentumZero)


@wp.kernel
def momentumJVPKernel(queryState: Any, referenceState: Any, domainState: Any,
                      useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                      correctionData: Any, kernelProperties: Any, tangents: Any,
                      fieldWidth: wp.int32, out: wp.array(dtype=Any)):
    """Thread i: d out[2 i d + row d + delta] = N sum_j (pair tangent)[row, delta]; 0 for a
    masked query (layout of `momentumKernel`)."""
    i = wp.tid()
    ks = kernelProperties
    val = momentumZero(queryState, ks)
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        if useAdjacency:
            val = momentumJVPCsrSum(adjacencyState, i, 0, fieldWidth, queryState,
                                    referenceState, domainState, correctionData, ks, tangents)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            val = momentumJVPGridSum(gridState, cell, i, 0, fieldWidth, queryState,
                                     referenceState, domainState, correctionData, ks, tangents)
        if ks.calibrateNormalization:
            val = val * ks.normalizationCoefficient
    d = domainState.dim
    base = i * 2 * d
    for delta in range(d):
        out[base + delta] = val[0, delta]
        out[base + d + delta] = val[1, delta]


declareStateOverloads(momentumJVPKernel, {"out": "scalar"}, tangent=True)


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


def _flatOutputShape(ctx, extras):
    return (ctx.numQueries * 2 * int(ctx.domain.dim),)


def _queryThreads(ctx, extras):
    return ctx.numQueries


# --- hand-written reverse kernel (`autograd.reverse`) -----------------------------------------

# the gradient buffers the reverse kernel may meet, per kernel argument: it writes positions,
# supports and the field; the particle states' masses and densities are never read (their
# volumes and densities are field columns), so their gradient is exactly zero and a buffer
# there (a rate function passing rho = m / V along) needs nothing written
_REVERSE_FIELDS = {0: {"positions", "supports", "masses", "densities"},
                   1: {"positions", "supports", "masses", "densities"}, 8: {"*"}}


class _ReverseKernelName:
    """The reverse route's name: every eligible call runs the kernel specialised on its
    configuration (`_specialized.momentumVJPSpecialized`), there is no generic one."""

    key = "momentumVJPKernel"


def _reverseEligible(config, args):
    """Every configuration with a specialised kernel (a known smoothing kernel and support
    scheme, specialisation on): Warp's adjoint of the pair loop costs about nine forward
    passes, the hand-written one about two (docs/performance.md). A differentiable domain or
    correction input keeps the tape path."""
    return (specializationEnabled() and configurationOf(config) is not None
            and gradientBuffersWithin(args, _REVERSE_FIELDS))


def _reverseLaunch(config, args, outputs):
    qs, rs, dom, useAdjacency, adjacency, grid, corr, ks, values, fieldWidth = args
    rows = int(qs.positions.shape[0])
    pack = cotangentPack(config, (("qPositions", "hasQPositions", qs.positions),
                                  ("qSupports", "hasQSupports", qs.supports),
                                  ("rPositions", "hasRPositions", rs.positions),
                                  ("rSupports", "hasRSupports", rs.supports),
                                  ("gValues", "hasValues", values)),
                         values=values,
                         seed=vectorView(outputs[0].grad, qs.positions.dtype, 2 * rows))
    # each pair once for both rows, except where the supports' adjoints are asked (row j's
    # term exchanges h_i and h_j: `_specialized._pairOnceOf`)
    pack.pairsOnce = bool(config.get("pairsOnce", False)) and not (pack.hasQSupports
                                                                   or pack.hasRSupports)
    return rows, [qs, rs, dom, useAdjacency, adjacency, grid, corr, ks, pack, fieldWidth]


MOMENTUM_REVERSE = ReverseSpec(kernel=_ReverseKernelName, eligible=_reverseEligible,
                               build=_reverseLaunch, specialize=momentumVJPSpecialized)


MOMENTUM_SPEC = OperatorSpec(
    kernel=momentumKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=_flatOutputShape),),
    extras=(ExtraSpec("values", ExtraKind.TENSOR),
            ExtraSpec("fieldWidth", ExtraKind.SCALAR)),
    numThreads=_queryThreads,
    jvp=JVPSpec(queryValueExtra="values", referenceValueExtra="values",
                geometryKernel=momentumJVPKernel, geometryThreads=_queryThreads),
    reverse=MOMENTUM_REVERSE,
    specialize=momentumSpecialized,
)
