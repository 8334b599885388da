"""Gradient renormalization matrices (docs/corrections.md).

``computeRenormalizationMatrices`` builds, per query particle i,

* ``C_i = sum_j V_j (x_j - x_i) (x) G_ij`` and the count ``n_i = #{j : W^R_ij > 0}`` with
  `warpOperation` (Covariance, every correction passed) on a `dataclasses.replace` copy of
  the caller's properties (the caller's object is never mutated);
* the identity in place of ``C_i`` where ``n_i < d + 2`` (element-wise `torch.where`, no
  host sync); the adjoint of a replaced row is exactly zero;
* ``L_i = pinv(C_i)`` per dimension (1D ``1/C`` above 1e-10; 2D closed form on the
  symmetrised C; 3D pinv with relative cutoff 1e-6 on the unsymmetrised C) and the
  eigenvalues ``eigVals [N, d]``.

Design decision (how the pseudo-inverse helpers are "launched through the bridge"): every
pseudo-inverse is a small one-thread-per-row Warp kernel (`_renormKernels.py`) launched with
``StateAwareWarpFunction.apply`` and its own ``build_fn`` (the kernel arguments are just C
and the outputs), like the other launches outside the operators (CRK, grad-h, HVP): every
Warp launch reachable from a differentiable pipeline goes through the bridge.
The canonical ABI via `launchOperator` was not used: the helpers take a bare ``C`` and
have no particle state, and a fake `SPHContext` would drag 36 unrelated slots (and an
on-the-fly grid build) into every call. Consequences:

* reverse mode end to end through Warp's tape: the branches are dynamic ``if``s, so only
  the taken branch is differentiated (no ``0 * inf`` from an untaken branch), the 2D square
  root has a zero adjoint at 0 (its true derivative is infinite there) and the 3D
  plain-inverse branch has the exact adjoint ``-L dC L`` (the SVD's own derivative is unstable
  at repeated singular values);
* sync-free: no ``.item()``, no synchronising ``torch.linalg`` routine, no data-dependent
  Python branch; the 3D eigenvalues are a closed-form torch computation;
* forward mode: the pseudo-inverse launches carry the JVP rule ``dL = -L dC L`` (2D: of the
  symmetrised C, with the eigenvalue tangents), so dual tensors pass through
  `computeRenormalizationMatrices` wherever the Covariance dual route does (no CRK state);
  the explicit entry point is `computeRenormalizationMatricesJVP`: dC from the Covariance
  geometry JVP (`warpOperationJVP`), zeroed on identity-fallback rows, then ``dL = -L dC L``
  in torch (1D: ``-dC / C^2`` where ``C > 1e-10``, else 0, which is the same expression since
  L = 0 there; 2D: dC symmetrised like C, the exact derivative of the well-conditioned
  branch).

eigVals: 1D ``C`` (``[N, 1]``, differentiable); 2D ``(big, small)`` (differentiable);
3D the eigenvalues of ``(C + C^T)/2`` by decreasing magnitude (trigonometric closed form,
detached diagnostic). Low-neighbour rows give eigVals 1.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.autograd.forward_ad as fwAD
import warp as wp

from ..autograd.launcher import launch_kernel
from ..autograd.stateAwareWarpFunction import bridgeApply
from ..dataTypes.corrections import RenormalizationState, RenormalizationTangentState
from ..enumTypes import WarpOperation
from ..operations import warpOperation, warpOperationJVP
from ..util.conversion import isFunctorchWrapped
from ..util.precision import warpScalar
from ._renormKernels import pinv1Kernel, pinv2Kernel, pinv3Kernel

__all__ = ["computeRenormalizationMatrices", "computeRenormalizationMatricesJVP", "pinv_warp",
           "pinv1x1", "pinv2x2_warpBackend", "pinv3x3_warpBackend", "symmetricEigenvalues3"]

def _bridgeLaunch(kernel, C, outputDtypes, jvp=None):
    """Launch ``kernel(C, *outputs)`` (one thread per row) through `StateAwareWarpFunction`.

    `C` is ``[N]``, ``[N, d, d]``; `outputDtypes` the Warp dtypes of the outputs (each of
    shape ``(N,)``); `jvp`: ``(primal C, its tangent) -> output tangent(s)`` or None (a live
    dual tangent then raises in the bridge). Returns the output tensor or a tuple of them."""
    n = int(C.shape[0])
    if len(outputDtypes) == 1:
        shape, dtype = (n,), outputDtypes[0]
    else:
        shape, dtype = tuple((n,) for _ in outputDtypes), tuple(outputDtypes)

    def build_fn(warp_arrays, use_bundle=False):
        return list(warp_arrays)

    jvp_fn = None
    if jvp is not None:
        def rule(primal):
            def jvp_fn(ctx, flat_tangents):
                return jvp(fwAD.unpack_dual(primal).primal, flat_tangents[0])

            jvp_fn.rebind = lambda swap: rule(swap.get(id(primal), primal))
            return jvp_fn

        jvp_fn = rule(C)

    return bridgeApply(jvp_fn, build_fn, launch_kernel, kernel, shape, dtype,
                                        C)


# Forward-mode rules of the pseudo-inverse launches: dL = -L dC L (the exact derivative on
# full-rank rows; in the truncated branches the same expression, which is not the derivative of
# the truncated pseudo-inverse, as in `computeRenormalizationMatricesJVP`). L is relaunched on
# the primal C (no tangent), so the tangent is reverse-differentiable (reverse over forward).


def _inverseTangent(L, dC, symmetrise):
    """``-L dC L`` for ``[N, d, d]`` matrices (dC symmetrised first when the primal inverts
    the symmetric part, as the 2D closed form does)."""
    if symmetrise:
        dC = 0.5 * (dC + dC.transpose(1, 2))
    return -torch.einsum("nab,nbc,ncd->nad", L, dC, L)


def _pinv1JVP(C, dC):
    L = _bridgeLaunch(pinv1Kernel, C, (warpScalar(C.dtype),))
    return -(L * L) * dC


def _pinv2JVP(C, dC):
    s = warpScalar(C.dtype)
    L, _ = _bridgeLaunch(pinv2Kernel, C, (wp.types.matrix(shape=(2, 2), dtype=s),
                                          wp.types.vector(length=2, dtype=s)))
    dS = 0.5 * (dC + dC.transpose(1, 2))  # the kernel inverts the symmetrised C
    dL = _inverseTangent(L, dS, False)
    # eigenvalues (a + c +- root) / 2 of [[a, b], [b, c]], root = sqrt((a - c)^2 + 4 b^2),
    # ordered (big, small) by magnitude like the kernel; d root = 0 where root = 0 (as the
    # kernel's safeSqrt adjoint)
    a, c = C[:, 0, 0], C[:, 1, 1]
    b = 0.5 * (C[:, 0, 1] + C[:, 1, 0])
    da, dc, db = dS[:, 0, 0], dS[:, 1, 1], dS[:, 0, 1]
    root = torch.sqrt((a - c) ** 2 + 4.0 * b * b)
    safe = torch.where(root > 0, root, torch.ones_like(root))
    droot = torch.where(root > 0, ((a - c) * (da - dc) + 4.0 * b * db) / safe,
                        torch.zeros_like(root))
    lamP, lamM = 0.5 * (a + c + root), 0.5 * (a + c - root)
    dP, dM = 0.5 * (da + dc + droot), 0.5 * (da + dc - droot)
    plusIsBig = lamP.abs() >= lamM.abs()
    dEv = torch.stack((torch.where(plusIsBig, dP, dM), torch.where(plusIsBig, dM, dP)), dim=1)
    return dL, dEv


def _pinv3JVP(C, dC):
    L = _bridgeLaunch(pinv3Kernel, C, (wp.types.matrix(shape=(3, 3),
                                                       dtype=warpScalar(C.dtype)),))
    return _inverseTangent(L, dC, False)


def _checkMatrices(owner: str, C, d: int | None = None):
    if not isinstance(C, torch.Tensor):
        raise TypeError(f"{owner}: C must be a torch.Tensor, got {type(C).__name__}")
    if isFunctorchWrapped(C):
        raise NotImplementedError(f"{owner}: C is a torch.func (functorch) wrapped tensor; "
                                  "torch.func transforms are not supported by the Warp bridge. "
                                  "Use reverse mode (or torch.autograd.forward_ad where a JVP "
                                  "rule exists)")
    if C.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{owner}: C has dtype {C.dtype}; accepted: torch.float32/float64")
    ok = C.dim() == 3 and C.shape[1] == C.shape[2] and C.shape[1] in (1, 2, 3)
    if ok and d is not None:
        ok = C.shape[1] == d
    if not ok:
        acc = f"[N, {d}, {d}]" if d is not None else "[N, d, d] with d in 1, 2, 3"
        raise ValueError(f"{owner}: C has shape {tuple(C.shape)}; accepted: {acc}")


def _lowNeighbourMask(C, n):
    """Boolean ``[N, 1, 1]`` mask of the rows with ``n < d + 2`` (None when n is None)."""
    if n is None:
        return None
    d = int(C.shape[1])
    if not isinstance(n, torch.Tensor) or tuple(n.shape) != (C.shape[0],):
        raise ValueError(f"pinv: n must be an integer tensor [{C.shape[0]}], got "
                         f"{getattr(n, 'shape', type(n).__name__)}")
    return (n.to(C.device) < d + 2).reshape(-1, 1, 1)


def _identityFallback(C, n):
    """C with the rows of ``n < d + 2`` replaced by the identity (zero adjoint there)."""
    mask = _lowNeighbourMask(C, n)
    if mask is None:
        return C
    eye = torch.eye(C.shape[1], dtype=C.dtype, device=C.device).expand_as(C)
    return torch.where(mask, eye, C)


def pinv1x1(C):
    """1x1 pseudo-inverse: ``L = 1/C`` where ``C > 1e-10``, else 0.

    Args:
        C: ``[N, 1, 1]`` float32/float64.

    Returns:
        ``(L [N, 1, 1], eigVals [N, 1])`` with eigVals = C. Reverse mode through the bridge.
    """
    _checkMatrices("pinv1x1", C, 1)
    N = int(C.shape[0])
    L = _bridgeLaunch(pinv1Kernel, C.reshape(N), (warpScalar(C.dtype),), jvp=_pinv1JVP)
    return L.reshape(N, 1, 1), C.reshape(N, 1)


def pinv2x2_warpBackend(C, n=None):
    """Closed-form 2x2 pseudo-inverse of the symmetrised C.

    ``b = (C01 + C10)/2``; eigenvalues ``(a + c +- sqrt((a - c)^2 + 4 b^2))/2`` ordered by
    magnitude into (big, small); the plain inverse of ``[[a, b], [b, c]]`` when
    ``|big| > 1e-12`` and ``|small| > 1e-6 |big|``, else the eigenvector reconstruction
    with ``theta = atan2(2b, a - c)/2``, each eigenvalue inverted on its own test. Rows
    with ``n < 4`` give the identity and eigVals (1, 1) with zero adjoint.

    Args:
        C: ``[N, 2, 2]``; n: int ``[N]`` neighbour counts or None (no fallback).

    Returns:
        ``(L [N, 2, 2], eigVals [N, 2])``; reverse mode w.r.t. C (sqrt adjoint 0 at 0).
    """
    _checkMatrices("pinv2x2_warpBackend", C, 2)
    C = _identityFallback(C, n)
    s = warpScalar(C.dtype)
    mat = wp.types.matrix(shape=(2, 2), dtype=s)
    vec = wp.types.vector(length=2, dtype=s)
    L, ev = _bridgeLaunch(pinv2Kernel, C, (mat, vec), jvp=_pinv2JVP)
    return L, ev


def symmetricEigenvalues3(C):
    """Eigenvalues of ``(C + C^T)/2`` for ``C [N, 3, 3]`` in closed form (trigonometric
    method), ordered by decreasing magnitude, detached. Sync-free (no torch.linalg)."""
    C = fwAD.unpack_dual(C).primal.detach()  # no reverse or forward-mode derivative
    with torch.no_grad():
        S = 0.5 * (C + C.transpose(1, 2))
        p1 = S[:, 0, 1] ** 2 + S[:, 0, 2] ** 2 + S[:, 1, 2] ** 2
        diag = torch.diagonal(S, dim1=1, dim2=2)
        q = diag.sum(dim=1) / 3.0
        p2 = ((diag - q[:, None]) ** 2).sum(dim=1) + 2.0 * p1
        p = torch.sqrt(p2 / 6.0)
        safeP = torch.where(p > 0, p, torch.ones_like(p))
        eye = torch.eye(3, dtype=C.dtype, device=C.device)
        B = (S - q[:, None, None] * eye) / safeP[:, None, None]
        detB = (B[:, 0, 0] * (B[:, 1, 1] * B[:, 2, 2] - B[:, 1, 2] * B[:, 2, 1])
                - B[:, 0, 1] * (B[:, 1, 0] * B[:, 2, 2] - B[:, 1, 2] * B[:, 2, 0])
                + B[:, 0, 2] * (B[:, 1, 0] * B[:, 2, 1] - B[:, 1, 1] * B[:, 2, 0]))
        r = torch.clamp(0.5 * detB, -1.0, 1.0)
        phi = torch.acos(r) / 3.0
        e1 = q + 2.0 * p * torch.cos(phi)
        e3 = q + 2.0 * p * torch.cos(phi + 2.0 * math.pi / 3.0)
        e2 = 3.0 * q - e1 - e3
        ev = torch.stack((e1, e2, e3), dim=1)
        # p = 0: S = q I exactly (the trigonometric form would read 0/0)
        ev = torch.where((p > 0)[:, None], ev, diag)
        order = torch.argsort(ev.abs(), dim=1, descending=True, stable=True)
        return torch.gather(ev, 1, order)


def pinv3x3_warpBackend(C, n=None):
    """3x3 pseudo-inverse with relative cutoff 1e-6 on the unsymmetrised C
    (= ``torch.linalg.pinv(C, rtol=1e-6)``), sync-free: the plain inverse when every
    singular value exceeds ``1e-6 sigma_max``, else the truncated SVD (Warp ``svd3``).

    Args:
        C: ``[N, 3, 3]``; n: int ``[N]`` neighbour counts or None (rows with ``n < 5`` give
            the identity).

    Returns:
        ``(L [N, 3, 3], eigVals [N, 3])``; eigVals are the detached eigenvalues of the
        symmetric part by decreasing magnitude. Reverse mode w.r.t. C (exact ``-L dC L`` in
        the full-rank branch; the truncated branch differentiates the SVD, exact for
        distinct singular values).
    """
    _checkMatrices("pinv3x3_warpBackend", C, 3)
    C = _identityFallback(C, n)
    mat = wp.types.matrix(shape=(3, 3), dtype=warpScalar(C.dtype))
    L = _bridgeLaunch(pinv3Kernel, C, (mat,), jvp=_pinv3JVP)
    return L, symmetricEigenvalues3(C)


def pinv_warp(C, n=None):
    """Pseudo-inverse of ``C [N, d, d]`` dispatched by d: rows with
    ``n < d + 2`` are replaced by the identity first (eigVals 1, zero adjoint), then
    `pinv1x1`, `pinv2x2_warpBackend` or `pinv3x3_warpBackend`.

    Args:
        C: ``[N, d, d]`` float32/float64, d in 1, 2, 3; n: int ``[N]`` or None.

    Returns:
        ``(L [N, d, d], eigVals [N, d])``.
    """
    _checkMatrices("pinv_warp", C)
    C = _identityFallback(C, n)
    d = int(C.shape[1])
    if d == 1:
        return pinv1x1(C)
    if d == 2:
        return pinv2x2_warpBackend(C)
    return pinv3x3_warpBackend(C)


def computeRenormalizationMatrices(queryParticles, operationProperties, domain,
                                   queryVolumes=None, referenceVolumes=None, adjacency=None,
                                   referenceParticles=None, crkState=None, gradHState=None,
                                   renormalizationState=None, returnEigVals=True):
    """Gradient renormalization matrices ``L_i = pinv(C_i)``.

    ``C_i = sum_j V_j (x_j - x_i) (x) G_ij`` (Covariance with every correction passed:
    volumes, CRK, a given renormalization; grad-h is accepted and ignored), rows with fewer
    than ``d + 2`` neighbours (``W^R_ij > 0``) replaced by the identity, then the
    pseudo-inverse of `pinv_warp`. Use: ``G_ij <- L_i G_ij`` by passing the returned state
    as ``renormalizationState`` to `warpOperation`.

    Args:
        queryParticles: query `ParticleState`.
        operationProperties: `OperationProperties`; a copy with ``operation=Covariance`` is
            used (the caller's object is unchanged).
        domain: `DomainDescription`.
        queryVolumes: ``[N_q]`` or None.
        referenceVolumes: ``[N_r]`` or None.
        adjacency: `AdjacencyList`, `CompactHashMap` or None.
        referenceParticles: reference `ParticleState` (defaults to queryParticles).
        crkState: `CRKState` or None.
        gradHState: `GradHState` or None.
        renormalizationState: `RenormalizationState` or None.
        returnEigVals: False returns only the state.

    Returns:
        ``(C [N_q, d, d], eigVals [N_q, d], RenormalizationState(L [N_q, d, d]))`` — C is the
        identity-replaced matrix — or only the state. Reverse mode w.r.t. positions,
        supports, masses, densities, volumes, CRK tensors and a given L; no host sync.
        Forward mode: `computeRenormalizationMatricesJVP`.
    """
    props = dataclasses.replace(operationProperties, operation=WarpOperation.Covariance)
    C, n = warpOperation(queryParticles, props, domain, queryVolumes=queryVolumes,
                         referenceVolumes=referenceVolumes, adjacency=adjacency,
                         referenceParticles=referenceParticles, crkState=crkState,
                         gradHState=gradHState, renormalizationState=renormalizationState,
                         covarianceReturnNumNeighbors=True)
    C = _identityFallback(C, n)
    L, eigVals = pinv_warp(C)
    state = RenormalizationState(L)
    if not returnEigVals:
        return state
    return C, eigVals, state


def computeRenormalizationMatricesJVP(queryParticles, operationProperties, domain,
                                      queryTangentState, queryVolumes=None, referenceVolumes=None,
                                      tangentReferenceVolumes=None, adjacency=None,
                                      referenceParticles=None, referenceTangentState=None,
                                      returnEigVals=True):
    """Forward mode of `computeRenormalizationMatrices`.

    * ``dC`` is the Covariance geometry JVP (`warpOperationJVP`, operation set to Covariance
      on a copy of the properties; its scope: positions, supports and densities of both
      sets, reference masses, reference volumes with their tangent; no CRK, grad-h or
      renormalization state);
    * rows with ``n < d + 2`` (identity fallback) get ``dC = 0``;
    * ``dL = -L dC L`` — 1D: ``-dC / C^2`` where ``C > 1e-10``, else 0; 2D: dC symmetrised
      as the primal symmetrises C. Exact on full-rank rows (2D well-conditioned branch, 3D
      all singular values above the cutoff); in the 2D eigen-reconstruction and 3D
      truncated branches this is ``-L dC L`` as in 0.6.0, not the derivative of the
      truncated pseudo-inverse.

    Args:
        queryParticles: primal argument, as for `computeRenormalizationMatrices`.
        operationProperties: primal argument, as for `computeRenormalizationMatrices`.
        domain: primal argument, as for `computeRenormalizationMatrices`.
        queryVolumes: primal argument, as for `computeRenormalizationMatrices`.
        referenceVolumes: primal argument, as for `computeRenormalizationMatrices`.
        adjacency: primal argument, as for `computeRenormalizationMatrices`.
        referenceParticles: primal argument, as for `computeRenormalizationMatrices`.
        queryTangentState: `ParticleTangentState` of the query set or None; query masses
            are never read (their tangent raises, as in `warpOperationJVP`).
        referenceTangentState: `ParticleTangentState` of the reference set or None (the
            reference tangent defaults to the query tangent for a self-interaction call).
        tangentReferenceVolumes: ``[N_r]`` tangent of `referenceVolumes` or None.
        returnEigVals: False returns only the two states.

    Returns:
        ``(C, eigVals, RenormalizationState(L), RenormalizationTangentState(dL))`` or
        ``(RenormalizationState(L), RenormalizationTangentState(dL))``. Reverse-differentiable
        (reverse over forward); no host sync.
    """
    props = dataclasses.replace(operationProperties, operation=WarpOperation.Covariance)
    common = dict(queryVolumes=queryVolumes, referenceVolumes=referenceVolumes,
                  adjacency=adjacency, referenceParticles=referenceParticles)
    C, n = warpOperation(queryParticles, props, domain, covarianceReturnNumNeighbors=True,
                         **common)
    dC = warpOperationJVP(queryParticles, props, domain, queryTangentState=queryTangentState,
                          referenceTangentState=referenceTangentState,
                          tangentReferenceVolumes=tangentReferenceVolumes, **common)
    low = _lowNeighbourMask(C, n)
    C = _identityFallback(C, n)
    dC = torch.where(low, torch.zeros((), dtype=dC.dtype, device=dC.device), dC)
    L, eigVals = pinv_warp(C)
    dL = _inverseTangent(L, dC, int(C.shape[1]) == 2)
    state = RenormalizationState(L)
    tangentState = RenormalizationTangentState(dL.contiguous())
    if not returnEigVals:
        return state, tangentState
    return C, eigVals, state, tangentState
