"""Grad-h helper: the Omega terms the caller passes as `gradHState` (docs/corrections.md).

``Omega_i = 1 + (h_i / (d rho_i)) N sum_j m_j dW(x_ij, h_i)/dh_i``

* the query support h_i (Gather) whatever `supportMode` says; dW/dh the kernel's analytic
  support derivative ``-(C_d / h^(d+1)) (d k + q k')`` (`kernels.evaluation.sphKernelDkDh`);
* rho_i the query densities (required); m_j the reference masses;
* kinds masking with `operationMode` (docs/particle-kinds.md): a masked query gets Omega = 1,
  masked references are skipped;
* N: the lattice calibration factor of the properties (1 without calibration).

One Warp kernel in the canonical ABI (`omegaKernel`, this module) launched with
`launchOperator`: reverse mode w.r.t. positions, supports, masses and densities through the
bridge; a live forward-mode tangent raises `NotImplementedError` (no JVP rule is
registered). No host sync.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import declareStateOverloads
from ..autograd.operator_spec import OperatorSpec, OutputSpec, ShapeOf, SPHContext, launchOperator
from ..kernels.evaluation import sphKernelDkDh
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..neighborhood.traversal import gridQueryCell
from ..operators._traversal import makeNeighborSum, pairVector
from ..preparation import _checkAdjacency, _checkParticles, _checkTensors, _collectTensors
from ..util.precision import warpScalar

__all__ = ["computeOmega", "omegaPairTerm", "omegaKernel", "OMEGA_SPEC"]

_WHERE = "computeOmega"


# inline=False: one compiled copy shared by the CSR and grid traversals (less compile time).
@wp.func(inline=False)
def omegaPairTerm(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                  dom: Any, corr: Any, ks: Any, extra: Any):
    """m_j dW(x_ij, h_i)/dh_i (query support, any support scheme) for an admitted j."""
    res = type(ks.normalizationCoefficient)(0.0)
    if checkDirectionality_j(ks.operationMode, r.kinds[j]):
        x_ij = pairVector(q.positions[i], r.positions[j], dom)
        res = r.masses[j] * sphKernelDkDh(x_ij, q.supports[i], ks.kernelFunction, dom.dim)
    return res


omegaCsrSum, omegaGridSum = makeNeighborSum(omegaPairTerm, "omega")


@wp.kernel
def omegaKernel(queryState: Any, referenceState: Any, domainState: Any,
                useAdjacency: wp.bool, adjacencyState: Any, gridState: Any,
                correctionData: Any, kernelProperties: Any, out: wp.array(dtype=Any)):
    """Omega_i = 1 + h_i / (d rho_i) N sum_j m_j dW_ij/dh_i; 1 for a masked query."""
    i = wp.tid()
    ks = kernelProperties
    one = type(ks.normalizationCoefficient)(1.0)
    omega = one
    if checkDirectionality_i(ks.operationMode, queryState.kinds[i]):
        # the looped function only accumulates; the ratio is taken here (a division inside
        # the loop's function would lose part of Warp's adjoint)
        if useAdjacency:
            s = omegaCsrSum(adjacencyState, i, 0, 1, queryState, referenceState, domainState,
                            correctionData, ks, referenceState.masses)
        else:
            cell = gridQueryCell(gridState, queryState.positions[i])
            s = omegaGridSum(gridState, cell, i, 0, 1, queryState, referenceState, domainState,
                             correctionData, ks, referenceState.masses)
        if ks.calibrateNormalization:
            s = s * ks.normalizationCoefficient
        h_i = queryState.supports[i]
        rho_i = queryState.densities[i]
        dimS = type(one)(domainState.dim)
        omega = one + h_i / (dimS * rho_i) * s
    out[i] = omega


declareStateOverloads(omegaKernel, {"out": "scalar"})


def _callScalar(ctx, extras):
    return warpScalar(ctx.query.positions.dtype)


#: grad-h Omega helper: reverse mode only, ``jvp=None`` (a live
#: forward-mode tangent raises NotImplementedError in the bridge).
OMEGA_SPEC = OperatorSpec(
    kernel=omegaKernel,
    outputs=(OutputSpec(dtype=_callScalar, shape=ShapeOf.QUERY),),
    extras=(),
    jvp=None,
)


def computeOmega(queryParticles, operationProperties, domain, adjacency=None,
                 referenceParticles=None):
    """Grad-h terms ``Omega_i = 1 + h_i / (d rho_i) sum_j m_j dW(x_ij, h_i)/dh_i``.

    Args:
        queryParticles: `ParticleState` with densities ``[N_q]`` (required).
        operationProperties: `OperationProperties` (kernel, operationMode, calibration;
            supportMode is ignored: the query support is used).
        domain: `DomainDescription`.
        adjacency: `AdjacencyList`, `CompactHashMap` or None (a grid is built per call).
        referenceParticles: `ParticleState` or None (= the query set).

    Returns:
        ``[N_q]`` tensor of the call's dtype; 1 for queries masked by the mode.

    Raises:
        ValueError: missing query densities, shapes, devices. TypeError: dtypes, types.
        NotImplementedError: torch.func-wrapped tensors; a live forward-mode tangent.
    """
    if not hasattr(queryParticles, "positions"):
        raise TypeError(f"{_WHERE}: queryParticles must be a ParticleState")
    reference = queryParticles if referenceParticles is None else referenceParticles
    device = queryParticles.positions.device
    tensors = _collectTensors(queryParticles, reference, domain, None, None, None, None, None,
                              None, None)
    try:
        _checkTensors(tensors, device)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise type(e)(str(e).replace("warpOperation", _WHERE)) from None
    d = int(domain.dim)
    nQ = _checkParticles("queryParticles", queryParticles, d, device)
    nR = nQ if reference is queryParticles else _checkParticles("referenceParticles",
                                                                 reference, d, device)
    _checkAdjacency(adjacency, nQ, nR, device)
    if getattr(queryParticles, "densities", None) is None:
        raise ValueError(f"{_WHERE}: Omega_i = 1 + h_i / (d rho_i) sum_j m_j dW_ij/dh_i needs "
                         "queryParticles.densities (found None)")
    ctx = SPHContext(query=queryParticles, properties=operationProperties, domain=domain,
                     adjacency=adjacency,
                     reference=None if reference is queryParticles else reference)
    return launchOperator(OMEGA_SPEC, ctx)
