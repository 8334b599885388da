"""A first-order-consistent SPH Laplacian and Hessian: the correction builder
`computeLaplacianCorrection` and the operators `consistentLaplacian`, `consistentHessian`.

Scheme (the structure of Fatehi & Manzari 2011, Comput. Math. Appl. 61: 482-498: a
renormalized first derivative inside a Brookshaw-type pair sum and a "modified
renormalization tensor"; derived, with its exactness proof, in the float64 reference
`tests/operations/consistent_laplacian_reference.py`). Per query i, with r = x_j - x_i,
G_ij the kernel gradient and the symmetrised Brookshaw pair weight
``w_ij = sym(x_ij (x) G_ij) / D^2``, ``D = r_ij + 1e-8 h_ij``:

1. ``L_i = pinv(C_i)``, ``C_i = sum_j V_j r (x) G_ij`` (`computeRenormalizationMatrices`);
   ``<grad f>_i = sum_j V_j (f_j - f_i) L_i G_ij`` (Gradient, Difference scheme, with L);
2. moments (`_laplacianKernels`): ``M3[a,b,c] = sum V r_a r_b G_c``,
   ``N3[c,p,q] = sum V r_c w_pq``, ``M4[a,b,p,q] = sum V r_a r_b w_pq``;
   ``T = L . M3``, ``Q = M4 - T . N3``;
3. ``S_i = sum_j V_j (f_j - f_i) w_ij - <grad f>_i . N3_i`` equals ``1/2 H : Q_i`` for every
   quadratic f (Hessian H), a linear map voigt(H) -> voigt(S) with the K x K matrix
   ``A_i[(pq),(ab)] = c_ab Q_i[a,b,p,q]`` (K = d(d+1)/2, c_ab = 1 off the diagonal, 1/2 on it);
4. Hessian ``unvoigt(A_i^-1 voigt(S_i))``; Laplacian ``B_i : S_i`` with the modified
   renormalization tensor B_i (symmetric) solving ``A_i^T b = voigt(I)``, i.e.
   ``<lap f>_i = sum_j V_j (f_j - f_i) B_i : w_ij - beta_i . <grad f>_i``,
   ``beta_i[c] = B_i : N3_i[c]``.

The Laplacian is the registry scheme ``LaplacianScheme.Consistent`` (`operators.laplacian`):
one fused pass ``sum_j q_ij G_ij . (B_i x_ij / D^2 - gamma_i)`` with ``gamma_i = L_i^T beta_i``
(``beta . (L G) = (L^T beta) . G``, so the kernel reads B and gamma and no L), carried by the
state in two appended flat slots. Both traversals, kinds and modes, volumes, periodicity,
1D/2D/3D, float32/float64, reverse and forward mode come with the registry.
(The first version was two registry calls: Brookshaw with the renormalization slot
``-B_i / 2``, whose pair term ``-2 q_ij (L G) . x_ij / D^2`` becomes ``q_ij B : w_ij``, minus
``beta . <grad f>``; twice the cost, the same numbers.) The Hessian takes K Brookshaw calls
(one per Voigt component).

Exactness: constant, linear and quadratic fields give the exact Laplacian and Hessian (to
rounding) wherever C_i and A_i are regular. Two kinds of rows fall back to Brookshaw's
Laplacian (``B = -2 I``, ``beta = 0``; the state's ``fallback`` mask; their Hessian is not
exact): rows whose elimination meets a pivot below ``1e-10`` of the row scale (too few or
degenerate neighbours, an isolated particle), and ill-conditioned rows whose B has an entry
above ``bLimit`` (default 16; Brookshaw's is 2). The second are the rows within about two
spacings of a free (non-periodic, ghost-free) wall: their B reaches 1e3-1e5, the exactness
there amplifies the O(h) truncation error by as much, and the operator gains eigenvalues with
a large positive real part (a heat solve blows up). Interior rows have |B| < 4, so the
limit separates the two populations with a wide margin (4 to 64 pick the same rows on the
tested lattices).

Derivatives: reverse mode through everything (the moments kernel's Warp adjoint, torch for
the rest, the scheme's adjoint to B and gamma). Forward mode: the scheme takes value,
geometry and state tangents (`warpOperationJVP` with ``laplacianCorrectionTangentState``, or
dual tensors); the state's own geometry tangents come from the explicit route
`computeLaplacianCorrectionJVP` (the moments' Tier-2 kernel and the exact derivatives of the
solve), which `consistentLaplacianJVP` combines. A dual tensor reaching
`computeLaplacianCorrection` raises NotImplementedError naming the explicit route.
No host sync: the solve is a hand-written batched Gauss-Jordan elimination (no
`torch.linalg`).
"""

from __future__ import annotations

import dataclasses

import torch

from ..autograd.operator_spec import launchOperator
from ..dataTypes.corrections import LaplacianCorrectionState, LaplacianCorrectionTangentState
from ..enumTypes import GradientScheme, LaplacianScheme, WarpOperation
from ..operations import warpOperation
from ..preparation import _prepareCall
from ..util.conversion import isFunctorchWrapped
from ..util.lazyModule import LazyModule
from .renormalization import computeRenormalizationMatrices

_kernels = LazyModule(f"{__package__}._laplacianKernels")

__all__ = ["LaplacianCorrectionState", "LaplacianCorrectionTangentState",
           "computeLaplacianCorrection", "computeLaplacianCorrectionJVP", "consistentLaplacian",
           "consistentLaplacianJVP", "consistentHessian", "consistentHessianJVP"]

_WHERE = "computeLaplacianCorrection"
#: a pivot below this fraction of its row's scale marks the row singular (fallback)
PIVOT_TOLERANCE = 1e-10
#: a row whose modified renormalization tensor has an entry above this (Brookshaw's is 2 on
#: the diagonal) is ill-conditioned (a free wall, a corner) and falls back
B_LIMIT = 16.0


def voigtPairs(d: int):
    """The Voigt index pairs (a <= b), row-major."""
    return [(a, b) for a in range(d) for b in range(a, d)]


def _gaussJordanInverse(A: torch.Tensor):
    """Batched inverse of ``A [N, K, K]`` without pivoting (the matrices here are definite up
    to the small T.N3 term) and without host sync: ``(inverse, singular [N])``. A row whose
    pivot falls below `PIVOT_TOLERANCE` of its row scale is marked singular; its pivot is
    replaced by 1 so no inf or NaN enters the arithmetic (or the adjoint)."""
    N, K, _ = A.shape
    scale = A.abs().amax(dim=(1, 2)).clamp(min=torch.finfo(A.dtype).tiny)
    M = torch.cat([A, torch.eye(K, dtype=A.dtype, device=A.device).expand(N, K, K)], dim=2)
    singular = torch.zeros(N, dtype=torch.bool, device=A.device)
    for k in range(K):
        pivot = M[:, k, k]
        bad = pivot.abs() <= PIVOT_TOLERANCE * scale
        singular = singular | bad
        pivot = torch.where(bad, torch.ones_like(pivot), pivot)
        row = M[:, k, :] / pivot[:, None]
        factors = M[:, :, k].clone()
        factors[:, k] = 0.0
        M = M - factors[:, :, None] * row[:, None, :]
        M = torch.cat([M[:, :k], row[:, None], M[:, k + 1:]], dim=1)
    return M[:, :, K:], singular


def computeLaplacianCorrection(queryParticles, operationProperties, domain, queryVolumes=None,
                               referenceVolumes=None, adjacency=None, referenceParticles=None,
                               *, bLimit: float = B_LIMIT):
    """The per-query state of the consistent Laplacian and Hessian (module docstring).

    Args:
        queryParticles: `ParticleState` (densities needed unless volumes are given).
        operationProperties: `OperationProperties` (kernel, supportMode, operationMode;
            the operation and schemes are ignored).
        domain: `DomainDescription`.
        queryVolumes: ``[N_q]`` or None.
        referenceVolumes: ``[N_r]`` or None (V_j; default m_j / rho_j).
        adjacency: `AdjacencyList`, `CompactHashMap` or None (a grid per call).
        referenceParticles: `ParticleState` or None (the query set).
        bLimit: rows whose modified renormalization tensor has an entry above this fall back
            to Brookshaw (`B_LIMIT`; Brookshaw's own B is -2 I).

    Returns:
        `LaplacianCorrectionState`. Reverse-differentiable w.r.t. positions, supports,
        masses, densities and volumes; no host synchronisation.

    Raises:
        NotImplementedError: dual (forward-mode) or torch.func-wrapped inputs.
        ValueError, TypeError: as `warpOperation` for invalid inputs.
    """
    import torch.autograd.forward_ad as fwAD

    for t in (queryParticles.positions, queryParticles.supports):
        if isFunctorchWrapped(t) or fwAD.unpack_dual(t).tangent is not None:
            raise NotImplementedError(
                f"{_WHERE}: forward-mode (dual or torch.func) inputs are not supported; use "
                "computeLaplacianCorrectionJVP and consistentLaplacianJVP for geometry "
                "tangents (value tangents of consistentLaplacian work with a fixed state)")
    props = dataclasses.replace(operationProperties, operation=WarpOperation.Density)
    L = computeRenormalizationMatrices(
        queryParticles, props, domain, queryVolumes=queryVolumes,
        referenceVolumes=referenceVolumes, adjacency=adjacency,
        referenceParticles=referenceParticles, returnEigVals=False).renormalizationMatrices
    _, M3, N3, M4 = _moments(queryParticles, props, domain, queryVolumes, referenceVolumes,
                             adjacency, referenceParticles)
    return _state(L, M3, N3, M4, bLimit)[0]


def _moments(queryParticles, props, domain, queryVolumes, referenceVolumes, adjacency,
             referenceParticles):
    """The primal context and the moments M3, N3 ``[n, d, d, d]``, M4 ``[n, d, d, d, d]``."""
    _, ctx, _, _ = _prepareCall(queryParticles, props, domain, queryVolumes=queryVolumes,
                                referenceVolumes=referenceVolumes, adjacency=adjacency,
                                referenceParticles=referenceParticles)
    moments = launchOperator(_kernels.LAPLACIAN_MOMENTS_SPEC, ctx)
    return (ctx,) + _splitMoments(moments, int(domain.dim),
                                  int(queryParticles.positions.shape[0]))


def _splitMoments(flat, d, n):
    d3 = d ** 3
    flat = flat.reshape(n, 2 * d3 + d ** 4)
    return (flat[:, :d3].reshape(n, d, d, d), flat[:, d3:2 * d3].reshape(n, d, d, d),
            flat[:, 2 * d3:].reshape(n, d, d, d, d))


def _voigtMatrix(Q, idx):
    """``A[(pq),(ab)] = c_ab Q[a,b,p,q]`` ``[n, K, K]`` (linear in Q)."""
    cols = [(0.5 if a == b else 1.0) * Q[:, a, b] for a, b in idx]  # each [n, d, d] (p, q)
    return torch.stack([torch.stack([c[:, p, q] for p, q in idx], dim=1) for c in cols], dim=2)


def _unvoigt(b, d, idx):
    """The symmetric B ``[n, d, d]`` of the Voigt vector b (off-diagonal entries halved)."""
    slot = {pq: k for k, pq in enumerate(idx)}
    return torch.stack([torch.stack([
        b[:, slot[(p, q)]] if p == q else 0.5 * b[:, slot[(min(p, q), max(p, q))]]
        for q in range(d)], dim=1) for p in range(d)], dim=1)


def _state(L, M3, N3, M4, bLimit=B_LIMIT):
    """Steps 2-4 of the module docstring (torch, sync-free): the state and the
    intermediates ``(T, Ainv, e, idx)`` its forward mode reuses."""
    n, d = L.shape[0], L.shape[1]
    T = torch.einsum("nck,nabk->nabc", L, M3)
    Q = M4 - torch.einsum("nabc,ncpq->nabpq", T, N3)
    idx = voigtPairs(d)
    A = _voigtMatrix(Q, idx)
    Ainv, singular = _gaussJordanInverse(A)
    e = torch.tensor([1.0 if a == b else 0.0 for a, b in idx], dtype=A.dtype, device=A.device)
    b = torch.einsum("nkl,k->nl", Ainv, e)  # A^T b = e  <=>  b = Ainv^T e
    B = _unvoigt(b, d, idx)
    singular = singular | (B.detach().abs().amax(dim=(1, 2)) > bLimit)
    eye = torch.eye(d, dtype=A.dtype, device=A.device).expand(n, d, d)
    B = torch.where(singular[:, None, None], -2.0 * eye, B)
    beta = torch.einsum("npq,ncpq->nc", B, N3)
    beta = torch.where(singular[:, None], torch.zeros_like(beta), beta)
    gamma = torch.einsum("nck,nc->nk", L, beta)
    return LaplacianCorrectionState(L, B, beta, gamma, Ainv, N3, singular), (T, e, idx)


def computeLaplacianCorrectionJVP(queryParticles, operationProperties, domain,
                                  queryTangentState=None, queryVolumes=None,
                                  referenceVolumes=None, tangentReferenceVolumes=None,
                                  adjacency=None, referenceParticles=None,
                                  referenceTangentState=None, *, bLimit: float = B_LIMIT):
    """Forward mode of `computeLaplacianCorrection`: the state and its tangent along the
    particle tangents.

    ``dL`` from `computeRenormalizationMatricesJVP`; the moment tangents from
    `_laplacianKernels.laplacianMomentsJVPKernel`; then the exact derivatives of the torch
    steps: ``dT = dL M3 + L dM3``, ``dQ = dM4 - dT N3 - T dN3``, ``dA^-1 = -A^-1 dA A^-1``,
    ``dB`` from ``db = dA^-T e``, ``dbeta = dB : N3 + B : dN3``; fallback rows get zero
    ``dB`` and ``dbeta``.

    Args:
        queryParticles: as for `computeLaplacianCorrection`.
        operationProperties: as for `computeLaplacianCorrection`.
        domain: as for `computeLaplacianCorrection`.
        queryTangentState: `ParticleTangentState` of the queries (positions, supports) or None.
        queryVolumes: as for `computeLaplacianCorrection`.
        referenceVolumes: as for `computeLaplacianCorrection`.
        tangentReferenceVolumes: ``[N_r]`` tangent of `referenceVolumes` or None.
        adjacency: as for `computeLaplacianCorrection`.
        referenceParticles: as for `computeLaplacianCorrection`.
        referenceTangentState: `ParticleTangentState` of the references (positions,
            supports, masses, densities); None: the query tangent for a self-interaction
            call, else zero.
        bLimit: as for `computeLaplacianCorrection`.

    Returns:
        ``(LaplacianCorrectionState, LaplacianCorrectionTangentState)``; reverse
        differentiable; no host synchronisation.
    """
    from ..autograd.jvpCommon import GeometryTangents, launchGeometryJVP
    from ..util.precision import warpScalar
    from .renormalization import computeRenormalizationMatricesJVP

    props = dataclasses.replace(operationProperties, operation=WarpOperation.Density)
    selfCall = referenceParticles is None or referenceParticles is queryParticles
    if referenceTangentState is None and selfCall:
        referenceTangentState = queryTangentState
    Lstate, dLstate = computeRenormalizationMatricesJVP(
        queryParticles, props, domain, queryTangentState, queryVolumes=queryVolumes,
        referenceVolumes=referenceVolumes, tangentReferenceVolumes=tangentReferenceVolumes,
        adjacency=adjacency, referenceParticles=referenceParticles,
        referenceTangentState=referenceTangentState, returnEigVals=False)
    L = Lstate.renormalizationMatrices
    dL = dLstate.renormalizationMatrices if hasattr(dLstate, "renormalizationMatrices") \
        else dLstate
    ctx, M3, N3, M4 = _moments(queryParticles, props, domain, queryVolumes, referenceVolumes,
                               adjacency, referenceParticles)
    state, (T, e, idx) = _state(L, M3, N3, M4, bLimit)
    n, d = L.shape[0], L.shape[1]
    qt = queryTangentState
    rt = referenceTangentState

    def field(ts, name):
        return None if ts is None else getattr(ts, name, None)

    K = _kernels.laplacianMomentComponents(d)
    dflat = launchGeometryJVP(
        _kernels.laplacianMomentsJVPKernel, ctx,
        GeometryTangents(qPositions=field(qt, "positions"), qSupports=field(qt, "supports"),
                         rPositions=field(rt, "positions"), rSupports=field(rt, "supports"),
                         rMasses=field(rt, "masses"), rDensities=field(rt, "densities"),
                         rVolumes=tangentReferenceVolumes),
        (n * K,), warpScalar(L.dtype), numThreads=n * K)
    dM3, dN3, dM4 = _splitMoments(dflat, d, n)
    dT = torch.einsum("nck,nabk->nabc", dL, M3) + torch.einsum("nck,nabk->nabc", L, dM3)
    dQ = dM4 - torch.einsum("nabc,ncpq->nabpq", dT, N3) \
        - torch.einsum("nabc,ncpq->nabpq", T, dN3)
    dA = _voigtMatrix(dQ, idx)
    dAinv = -state.Ainv @ dA @ state.Ainv
    db = torch.einsum("nkl,k->nl", dAinv, e)
    dB = _unvoigt(db, d, idx)
    dB = torch.where(state.fallback[:, None, None], torch.zeros_like(dB), dB)
    dbeta = torch.einsum("npq,ncpq->nc", dB, N3) + torch.einsum("npq,ncpq->nc", state.B, dN3)
    dbeta = torch.where(state.fallback[:, None], torch.zeros_like(dbeta), dbeta)
    dgamma = torch.einsum("nck,nc->nk", dL, state.beta) + torch.einsum("nck,nc->nk", L, dbeta)
    return state, LaplacianCorrectionTangentState(dL, dB, dbeta, dgamma, dAinv, dN3)


def _callArgs(queryValues, referenceValues, queryVolumes, referenceVolumes, adjacency,
              referenceParticles):
    """The keyword arguments the scheme's operator calls share."""
    return dict(queryValues=queryValues, referenceValues=referenceValues,
                queryVolumes=queryVolumes, referenceVolumes=referenceVolumes,
                adjacency=adjacency, referenceParticles=referenceParticles)


def _brookshaw(queryParticles, props, domain, renorm, **kw):
    p = dataclasses.replace(props, operation=WarpOperation.Laplacian,
                            laplacianMode=LaplacianScheme.Brookshaw,
                            gradientMode=GradientScheme.Difference)
    return warpOperation(queryParticles, p, domain, renormalizationState=renorm, **kw)


def _gradient(queryParticles, props, domain, L, **kw):
    p = dataclasses.replace(props, operation=WarpOperation.Gradient,
                            gradientMode=GradientScheme.Difference)
    return warpOperation(queryParticles, p, domain, renormalizationState=L, **kw)


def _consistentProperties(operationProperties):
    return dataclasses.replace(operationProperties, operation=WarpOperation.Laplacian,
                               laplacianMode=LaplacianScheme.Consistent,
                               gradientMode=GradientScheme.Difference)


def consistentLaplacian(queryParticles, operationProperties, domain, correction,
                        queryValues, referenceValues=None, queryVolumes=None,
                        referenceVolumes=None, adjacency=None, referenceParticles=None):
    """The first-order-consistent Laplacian ``[N_q, *S]`` of a field ``[N, *S]``: the
    registry's ``LaplacianScheme.Consistent`` (one fused pass,
    ``sum_j q_ij G_ij . (B_i x_ij / D^2 - gamma_i)``, module docstring) through
    `warpOperation`, with the operation and schemes set here. `correction` is the
    `LaplacianCorrectionState` of `computeLaplacianCorrection` for the same particles,
    volumes and kernel.

    Args:
        queryParticles: `ParticleState` of the queries (densities unless volumes are given).
        operationProperties: `OperationProperties` (kernel, supportMode, operationMode; the
            operation and schemes are set here).
        domain: `DomainDescription`.
        correction: the `LaplacianCorrectionState` of the same particles, volumes, kernel.
        queryValues: the field ``[N_q, *S]``.
        referenceValues: ``[N_r, *S]`` or None (the query values).
        queryVolumes: ``[N_q]`` or None.
        referenceVolumes: ``[N_r]`` or None (m_j / rho_j).
        adjacency: `AdjacencyList`, `CompactHashMap` or None.
        referenceParticles: `ParticleState` or None (the query set).

    Returns:
        ``[N_q, *S]``; differentiable in reverse mode (w.r.t. the values, the geometry and,
        through the state, the geometry again) and in forward mode (dual tensors, or
        `consistentLaplacianJVP`).
    """
    return warpOperation(queryParticles, _consistentProperties(operationProperties), domain,
                         laplacianCorrectionState=correction,
                         **_callArgs(queryValues, referenceValues, queryVolumes,
                                     referenceVolumes, adjacency, referenceParticles))


def consistentLaplacianJVP(queryParticles, operationProperties, domain, correction,
                           correctionTangent, queryValues, tangentQueryValues=None,
                           queryTangentState=None, referenceTangentState=None,
                           referenceValues=None, tangentReferenceValues=None,
                           queryVolumes=None, referenceVolumes=None,
                           tangentReferenceVolumes=None, adjacency=None,
                           referenceParticles=None):
    """Forward mode of `consistentLaplacian`: the tangent ``[N_q, *S]`` along value and
    particle tangents, with the state's tangent from `computeLaplacianCorrectionJVP`
    (`warpOperationJVP` of the Consistent scheme: its Tier-2 kernel with the state frozen,
    plus the scheme on the tangent state ``(dB, dgamma)``, in which it is linear).

    Args:
        queryParticles: as for `consistentLaplacian`.
        operationProperties: as for `consistentLaplacian`.
        domain: as for `consistentLaplacian`.
        correction: the `LaplacianCorrectionState`.
        correctionTangent: its `LaplacianCorrectionTangentState` (None: a frozen state).
        queryValues: the field ``[N_q, *S]``.
        tangentQueryValues: its tangent or None.
        queryTangentState: `ParticleTangentState` of the queries or None.
        referenceTangentState: `ParticleTangentState` of the references or None.
        referenceValues: as for `consistentLaplacian`.
        tangentReferenceValues: tangent of distinct reference values or None.
        queryVolumes: as for `consistentLaplacian`.
        referenceVolumes: as for `consistentLaplacian`.
        tangentReferenceVolumes: ``[N_r]`` or None.
        adjacency: as for `consistentLaplacian`.
        referenceParticles: as for `consistentLaplacian`.

    Returns:
        ``[N_q, *S]``, reverse-differentiable.
    """
    from ..operationsJVP import warpOperationJVP

    return warpOperationJVP(
        queryParticles, _consistentProperties(operationProperties), domain,
        tangentQueryValues=tangentQueryValues, tangentReferenceValues=tangentReferenceValues,
        queryTangentState=queryTangentState, referenceTangentState=referenceTangentState,
        queryValues=queryValues, referenceValues=referenceValues, queryVolumes=queryVolumes,
        referenceVolumes=referenceVolumes, tangentReferenceVolumes=tangentReferenceVolumes,
        adjacency=adjacency, referenceParticles=referenceParticles,
        laplacianCorrectionState=correction, laplacianCorrectionTangentState=correctionTangent)


def consistentHessian(queryParticles, operationProperties, domain, correction, queryValues,
                      referenceValues=None, queryVolumes=None, referenceVolumes=None,
                      adjacency=None, referenceParticles=None):
    """The first-order-consistent Hessian ``[N_q, *S, d, d]`` (module docstring): K
    Brookshaw calls give ``sum_j V_j (f_j - f_i) w_pq`` per Voigt pair, minus
    ``<grad f> . N3``, then ``A^-1`` per query. Rows in ``correction.fallback`` are not
    exact.

    Args:
        queryParticles: `ParticleState` of the queries (densities unless volumes are given).
        operationProperties: `OperationProperties` (kernel, supportMode, operationMode; the
            operation and schemes are set here).
        domain: `DomainDescription`.
        correction: the `LaplacianCorrectionState` of the same particles, volumes, kernel.
        queryValues: the field ``[N_q, *S]``.
        referenceValues: ``[N_r, *S]`` or None (the query values).
        queryVolumes: ``[N_q]`` or None.
        referenceVolumes: ``[N_r]`` or None (m_j / rho_j).
        adjacency: `AdjacencyList`, `CompactHashMap` or None.
        referenceParticles: `ParticleState` or None (the query set).

    Returns:
        ``[N_q, *S, d, d]`` (symmetric); differentiable as `consistentLaplacian`.
    """
    kw = _callArgs(queryValues, referenceValues, queryVolumes, referenceVolumes, adjacency,
                   referenceParticles)
    L = correction.L
    n, d = L.shape[0], L.shape[1]
    grad = _gradient(queryParticles, operationProperties, domain, L, **kw)  # [n, *S, d]
    sums = [_brookshaw(queryParticles, operationProperties, domain, _voigtSlot(E, n), **kw)
            for E in _voigtUnits(d, L)]
    return _assembleHessian(grad, sums, correction.N3, correction.Ainv, d)


def _voigtUnits(d, like):
    """The symmetric unit matrices E_pq (E : w = w_pq), one per Voigt pair."""
    units = []
    for p, q in voigtPairs(d):
        E = torch.zeros((d, d), dtype=like.dtype, device=like.device)
        E[p, q] = E[q, p] = 0.5 if p != q else 1.0
        units.append(E)
    return units


def _voigtSlot(E, n):
    """The renormalization slot -E/2 with which Brookshaw sums ``V_j (f_j - f_i) E : w_ij``."""
    d = E.shape[0]
    return (-0.5 * E).expand(n, d, d).contiguous()


def _assembleHessian(grad, sums, N3, Ainv, d):
    """``unvoigt(A^-1 S)`` with ``S_pq = sums_pq - <grad f> . N3[., p, q]``."""
    n = grad.shape[0]
    lead = grad.dim() - 2
    N3 = N3.reshape(n, *([1] * lead), d, d, d)
    idx = voigtPairs(d)
    S = torch.stack([w - (grad * N3[..., p, q]).sum(dim=-1)
                     for w, (p, q) in zip(sums, idx)], dim=-1)  # [n, *S, K]
    Ainv = Ainv.reshape(n, *([1] * lead), len(idx), len(idx))
    h = (Ainv * S[..., None, :]).sum(dim=-1)  # [n, *S, K]
    return _unvoigtField(h, d, idx)


def _unvoigtField(h, d, idx):
    H = torch.zeros(h.shape[:-1] + (d, d), dtype=h.dtype, device=h.device)
    for k, (a, b) in enumerate(idx):
        H[..., a, b] = h[..., k]
        if a != b:
            H[..., b, a] = h[..., k]
    return H


def consistentHessianJVP(queryParticles, operationProperties, domain, correction,
                         correctionTangent, queryValues, tangentQueryValues=None,
                         queryTangentState=None, referenceTangentState=None,
                         referenceValues=None, tangentReferenceValues=None,
                         queryVolumes=None, referenceVolumes=None,
                         tangentReferenceVolumes=None, adjacency=None,
                         referenceParticles=None):
    """Forward mode of `consistentHessian`: the tangent ``[N_q, *S, d, d]`` along value and
    particle tangents, with the state's tangent from `computeLaplacianCorrectionJVP`
    (`warpOperationJVP` of the K Brookshaw calls, whose slots are constants, and of the
    renormalized Gradient with ``dL``; then the product rule on ``<grad f> . N3`` and on
    ``A^-1 S``).

    Args:
        queryParticles: as for `consistentHessian`.
        operationProperties: as for `consistentHessian`.
        domain: as for `consistentHessian`.
        correction: the `LaplacianCorrectionState`.
        correctionTangent: its `LaplacianCorrectionTangentState` (``L``, ``N3`` and ``Ainv``
            read; None: a frozen state).
        queryValues: the field ``[N_q, *S]``.
        tangentQueryValues: its tangent or None.
        queryTangentState: `ParticleTangentState` of the queries or None.
        referenceTangentState: `ParticleTangentState` of the references or None.
        referenceValues: as for `consistentHessian`.
        tangentReferenceValues: tangent of distinct reference values or None.
        queryVolumes: as for `consistentHessian`.
        referenceVolumes: as for `consistentHessian`.
        tangentReferenceVolumes: ``[N_r]`` or None.
        adjacency: as for `consistentHessian`.
        referenceParticles: as for `consistentHessian`.

    Returns:
        ``[N_q, *S, d, d]``, reverse-differentiable.
    """
    from ..operationsJVP import warpOperationJVP

    L = correction.L
    n, d = L.shape[0], L.shape[1]
    kw = _callArgs(queryValues, referenceValues, queryVolumes, referenceVolumes, adjacency,
                   referenceParticles)
    tkw = dict(kw, tangentQueryValues=tangentQueryValues,
               tangentReferenceValues=tangentReferenceValues,
               queryTangentState=queryTangentState, referenceTangentState=referenceTangentState,
               tangentReferenceVolumes=tangentReferenceVolumes)
    t = correctionTangent

    def member(name):
        v = None if t is None else getattr(t, name, None)
        return torch.zeros_like(getattr(correction, name)) if v is None else v

    brook = dataclasses.replace(operationProperties, operation=WarpOperation.Laplacian,
                                laplacianMode=LaplacianScheme.Brookshaw,
                                gradientMode=GradientScheme.Difference)
    gradProps = dataclasses.replace(operationProperties, operation=WarpOperation.Gradient,
                                    gradientMode=GradientScheme.Difference)
    grad = _gradient(queryParticles, operationProperties, domain, L, **kw)
    dGrad = warpOperationJVP(queryParticles, gradProps, domain, renormalizationState=L,
                             renormalizationTangentState=member("L"), **tkw)
    units = _voigtUnits(d, L)
    sums = [_brookshaw(queryParticles, operationProperties, domain, _voigtSlot(E, n), **kw)
            for E in units]
    dSums = [warpOperationJVP(queryParticles, brook, domain,
                              renormalizationState=_voigtSlot(E, n), **tkw) for E in units]
    # H = unvoigt(Ainv S(grad, sums, N3)): linear in each of (grad, sums), N3 and Ainv
    Ainv, N3 = correction.Ainv, correction.N3
    return (_assembleHessian(dGrad, dSums, N3, Ainv, d)
            + _assembleHessian(grad, [torch.zeros_like(w) for w in sums], member("N3"), Ainv, d)
            + _assembleHessian(grad, sums, N3, member("Ainv"), d))
