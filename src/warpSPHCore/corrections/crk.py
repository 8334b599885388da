"""CRK correction builder `computeCRKFactors` (docs/corrections.md).

Pipeline (kinds masking with `operationMode` in every step, docs/particle-kinds.md; no lattice
calibration; x_ij is the minimum image):

1. apparent volume on the reference set R (Gather): ``V_j = 1 / sum_{k in R} W(x_jk, h_j)``
   (Warp kernel `_crkKernels.CRK_VOLUME_SPEC`);
2. moments m0, m1, m2 and their query-position derivatives dm0, dm1, dm2 (Scatter, V_j held
   constant in the spatial derivatives) plus the visited-pair count (`CRK_MOMENTS_SPEC`);
3. limiter: a row with ``count < 2`` or ``|det m2| / h_i^(2d) < 1e-14`` (the determinant
   test), or whose Schur complement ``s = m0 - m1.M m1`` is ``<= tau m0`` (the Schur test,
   below), gets the constants ``m0 = 1, m1 = 0, m2 = I, dm* = 0`` (element-wise select BEFORE
   any division, so the row's correction is exactly the identity with exactly zero adjoint
   and no NaN in backward);
4. with ``M = m2^-1`` (closed form, d <= 3):
   ``A = 1 / (m0 - m1.M m1)``, ``B = -M m1``,
   ``gradA_k = -A^2 (dm0_k - 2 (M m1).dm1[:, k] + (M m1).dm2[k] (M m1))``,
   ``gradB[k, i] = -sum_j M_ij dm1[j, k] + sum_lm M_il dm2[k, l, m] (M m1)_m``
   (gradB layout: row = derivative);
5. diagnostic density (Scatter): ``rho_i = sum_j m_j V_j W^R_ij / sum_j V_j^2 W^R_ij`` with
   the step-4 A, B (`CRK_DENSITY_SPEC`); 0 when the denominator is exactly 0.

Forward mode (`computeCRKFactorsJVP`): ``dV_j = -V_j^2 sum_k dW_jk`` and the moment tangents
from the Tier-2 kernels of `_crkKernels` (dV_j enters as the reference volume tangent), the
same limiter decision (limited rows: zero tangent, selected before any algebra), then the
exact derivatives of step 4 in torch (`_termsJVP`: ``dM = -M dm2 M`` and the product rule on
A, B, gradA, gradB). No `jvp()` rule is registered on the primal launches: a dual tensor
given to `computeCRKFactors` raises NotImplementedError naming `computeCRKFactorsJVP`.

Steps 3 and 4 are sync-free torch glue (element-wise `torch.where`, hand-written closed-form
inverses; no `torch.linalg` routine, since several of them synchronise on CUDA; no readback).

The Schur test (a limiter beyond the determinant test). The determinant test only looks at
m2, but ``A = 1 / s`` needs the full moment matrix ``[[m0, m1^T], [m1, m2]]`` (a sum
of ``V_j W_ij [1; x_ij] [1; x_ij]^T``, positive semi-definite) to be regular, and
``s = det(full) / det(m2)``. The full matrix is singular while m2 is not when a query without
a self pair (distinct reference set, or its own kind masked by the mode) sees in-support
neighbours on a line / plane that misses it: one neighbour in 1D, two in 2D, three coplanar
in 3D. There ``s`` is pure rounding (``|A| ~ 1e17`` or inf), and ``count >= 2`` does not help
because the grid traversal counts out-of-support visits. So step 3 also limits a row with
``s <= tau |m0|``, ``tau = sqrt(eps)`` of the call's dtype (float64 1.5e-8, float32 3.5e-4):
``s`` is a difference of two ``O(m0)`` terms, so its absolute rounding error is a few
``eps m0`` (times the conditioning of m2) and a row with ``s / m0 = tau`` has already lost
half of A's significant digits (gradA ~ A^2 more); a singular row lands at ``s / m0 ~ eps``,
far below tau. Physical
rows stay far above it: ``A m0 = m0 / s`` is 1 at an interior point and O(1-10) at a free
surface or corner, against the cut ``A m0 > 1 / tau`` (6.7e7, 2.9e3). A row with fewer than
two in-support pairs is always singular (m2 = 0 with only the self pair, rank-one full
matrix with one pair), so this test also makes the decision traversal-independent without a
second count. Evaluation stays sync-free: M and s are computed (detached) from the inputs
already filtered by the determinant test, the Schur-limited rows are added to the mask, and
the constants are selected once for all limited rows before the algebra of step 4.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.autograd.forward_ad as fwAD

from ..autograd.jvpCommon import GeometryTangents, launchGeometryJVP
from ..autograd.operator_spec import Corrections, SPHContext, launchOperator
from ..dataTypes.corrections import CRKState, CRKTangentState
from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleTangentState
from ..enumTypes import OperationDirection, SupportScheme
from ..util.conversion import isFunctorchWrapped
from ..util.lazyModule import LazyModule
from ..util.precision import warpScalar

#: the CRK Warp kernels, imported by the first CRK call (`util.lazyModule`)
_kernels = LazyModule(f"{__package__}._crkKernels")

__all__ = ["computeCRKFactors", "computeCRKFactorsJVP"]

_WHERE = "computeCRKFactors"
#: Limiter threshold on |det m2| / h^(2d) (step 3; m2 scales like h^2, so the test is
#: scale-invariant).
LIMITER_DET_THRESHOLD = 1e-14


def limiterSchurTolerance(dtype: torch.dtype) -> float:
    """tau of the Schur test ``s <= tau |m0|``: sqrt(eps) of `dtype` (module doc)."""
    return torch.finfo(dtype).eps ** 0.5


def _det(m: torch.Tensor, d: int) -> torch.Tensor:
    """det of ``[N, d, d]`` matrices, closed form."""
    if d == 1:
        return m[:, 0, 0]
    if d == 2:
        return m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
    return (m[:, 0, 0] * (m[:, 1, 1] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 1])
            - m[:, 0, 1] * (m[:, 1, 0] * m[:, 2, 2] - m[:, 1, 2] * m[:, 2, 0])
            + m[:, 0, 2] * (m[:, 1, 0] * m[:, 2, 1] - m[:, 1, 1] * m[:, 2, 0]))


def _inverse(m: torch.Tensor, d: int) -> torch.Tensor:
    """Inverse of ``[N, d, d]`` matrices as adjugate / det (no torch.linalg: no host sync).
    Only called on limiter-filtered matrices, whose determinant is nonzero."""
    det = _det(m, d)
    if d == 1:
        return (1.0 / det)[:, None, None]
    if d == 2:
        adj = torch.stack((torch.stack((m[:, 1, 1], -m[:, 0, 1]), -1),
                           torch.stack((-m[:, 1, 0], m[:, 0, 0]), -1)), -2)
        return adj / det[:, None, None]

    def c(r0, r1, c0, c1):  # 2x2 minor with rows r0, r1 and columns c0, c1
        return m[:, r0, c0] * m[:, r1, c1] - m[:, r0, c1] * m[:, r1, c0]

    adj = torch.stack((
        torch.stack((c(1, 2, 1, 2), -c(0, 2, 1, 2), c(0, 1, 1, 2)), -1),
        torch.stack((-c(1, 2, 0, 2), c(0, 2, 0, 2), -c(0, 1, 0, 2)), -1),
        torch.stack((c(1, 2, 0, 1), -c(0, 2, 0, 1), c(0, 1, 0, 1)), -1),
    ), -2)
    return adj / det[:, None, None]


def _checkInputs(queryParticles, domain, referenceState):
    d = int(domain.dim)
    for role, p in (("queryParticles", queryParticles), ("referenceState", referenceState)):
        if p is None:
            continue
        pos = getattr(p, "positions", None)
        if not isinstance(pos, torch.Tensor):
            raise TypeError(f"{_WHERE}: {role} must be a ParticleState (positions tensor)")
        if pos.dim() != 2 or pos.shape[1] != d:
            raise ValueError(f"{_WHERE}: {role}.positions has shape {tuple(pos.shape)}; "
                             f"accepted: [N, {d}] (domain.dim = {d})")
        kinds = getattr(p, "kinds", None)
        if not isinstance(kinds, torch.Tensor) or kinds.dtype != torch.int32:
            raise TypeError(f"{_WHERE}: {role}.kinds must be an int32 tensor")
    if referenceState is not None:
        qp, rp = queryParticles.positions, referenceState.positions
        if qp.dtype != rp.dtype or qp.device != rp.device:
            raise TypeError(f"{_WHERE}: referenceState has {rp.dtype} on {rp.device}; accepted: "
                            f"the query's {qp.dtype} on {qp.device}")
    return d


def _rejectDuals(*states):
    """A forward-mode dual tensor in a particle state raises (metadata only, no readback):
    the primal launches register no jvp() rule, and the explicit JVP is the entry point."""
    for p in states:
        if p is None:
            continue
        for f in ("positions", "supports", "masses", "densities"):
            t = getattr(p, f, None)
            if isinstance(t, torch.Tensor) and fwAD.unpack_dual(t).tangent is not None:
                raise NotImplementedError(
                    f"{_WHERE}: {f} is a forward-mode dual tensor; computeCRKFactors has no "
                    "dual-tensor route. Use computeCRKFactorsJVP (the factors and their "
                    "CRKTangentState) and pass the tangent as crkTangentState to "
                    "warpOperationJVP")


def _limiterMask(m0, m1, m2, count, h, d):
    """Step 3's decision (detached): the determinant test, then the Schur test (module doc)."""
    n = m0.shape[0]
    zero = torch.zeros((), dtype=m0.dtype, device=m0.device)
    one = torch.ones((), dtype=m0.dtype, device=m0.device)
    eye = torch.eye(d, dtype=m0.dtype, device=m0.device).expand(n, d, d)
    # determinant test (and fewer than two visited pairs)
    m0d, m1d, m2d = m0.detach(), m1.detach(), m2.detach()
    limited = ((count < 2)
               | (_det(m2d, d).abs() / h.detach() ** (2 * d) < LIMITER_DET_THRESHOLD))
    # Schur test (module doc): Schur complement from the first-pass-safe inputs, detached
    m0d = torch.where(limited, one, m0d)
    m1d = torch.where(limited[:, None], zero, m1d)
    m2d = torch.where(limited[:, None, None], eye, m2d)
    s = m0d - (m1d * torch.einsum("nab,nb->na", _inverse(m2d, d), m1d)).sum(-1)
    return limited | (s <= limiterSchurTolerance(m0.dtype) * m0d.abs())


def _replaceLimited(limited, m0, m1, m2, dm0, dm1, dm2, d, constants=True):
    """Limited rows' inputs replaced BEFORE any division: the constants ``m0 = 1, m1 = 0,
    m2 = I, dm* = 0`` (exact identity, zero adjoint; selecting after the singular algebra would
    leak NaN gradients from the unselected branch), or with ``constants=False`` (the
    tangents of the moments) zeros everywhere."""
    n = m0.shape[0]
    zero = torch.zeros((), dtype=m0.dtype, device=m0.device)
    one = torch.ones((), dtype=m0.dtype, device=m0.device) if constants else zero
    eye = (torch.eye(d, dtype=m0.dtype, device=m0.device).expand(n, d, d) if constants
           else zero)
    l1, l2, l3 = limited[:, None], limited[:, None, None], limited[:, None, None, None]
    m0 = torch.where(limited, one, m0)
    m1 = torch.where(l1, zero, m1)
    m2 = torch.where(l2, eye, m2)
    dm0 = torch.where(l1, zero, dm0)
    dm1 = torch.where(l2, zero, dm1)
    dm2 = torch.where(l3, zero, dm2)
    return m0, m1, m2, dm0, dm1, dm2


def _terms(m0, m1, m2, dm0, dm1, dm2, d):
    """Step 4 on limiter-filtered inputs: ``(A, B, gradA, gradB, M, M m1)``."""
    M = _inverse(m2, d)
    Mm1 = torch.einsum("nab,nb->na", M, m1)
    A = 1.0 / (m0 - (m1 * Mm1).sum(-1))
    B = -Mm1
    t1 = torch.einsum("na,nak->nk", Mm1, dm1)
    t2 = torch.einsum("nl,nklm,nm->nk", Mm1, dm2, Mm1)
    gradA = -(A * A)[:, None] * (dm0 - 2.0 * t1 + t2)
    gradB = (torch.einsum("nil,nklm,nm->nki", M, dm2, Mm1)
             - torch.einsum("nij,njk->nki", M, dm1))
    return A, B, gradA, gradB, M, Mm1


def _limitedTerms(m0, m1, m2, dm0, dm1, dm2, count, h, d):
    """Steps 3 and 4: limiter select, then A, B, gradA, gradB (sync-free torch glue)."""
    limited = _limiterMask(m0, m1, m2, count, h, d)
    sel = _replaceLimited(limited, m0, m1, m2, dm0, dm1, dm2, d)
    A, B, gradA, gradB, _, _ = _terms(*sel, d)
    return A.contiguous(), B.contiguous(), gradA.contiguous(), gradB.contiguous()


def _volumeAndMoments(queryParticles, domain, kernel, operationMode, adjacency,
                      referenceState, referenceAdjacency, d):
    """Steps 1 and 2: ``(V, volume context, moments context, (m0, m1, m2, dm0, dm1, dm2,
    count))`` with the moments reshaped to ``[N_q]``, ``[N_q, d]``, ``[N_q, d, d]``, ``[N_q,
    d]``, ``[N_q, d, d]`` (``[a, gamma]``), ``[N_q, d, d, d]`` (``[gamma, a, b]``)."""
    base = OperationProperties(kernel, operationMode=operationMode)
    gather = dataclasses.replace(base, supportMode=SupportScheme.Gather)
    scatter = dataclasses.replace(base, supportMode=SupportScheme.Scatter)
    R = queryParticles if referenceState is None else referenceState
    volumeAdjacency = adjacency if referenceState is None else referenceAdjacency

    # 1. apparent volume on R (Gather; query = reference = R)
    vctx = SPHContext(R, gather, domain, adjacency=volumeAdjacency)
    V = launchOperator(_kernels.CRK_VOLUME_SPEC, vctx)

    # 2. moments over the query -> reference neighbourhood (Scatter, V as referenceVolumes)
    corr = Corrections(volumes=(None, V))
    ctx = SPHContext(queryParticles, scatter, domain, adjacency=adjacency,
                     reference=referenceState, corrections=corr)
    m0, m1, m2, dm0, dm1, dm2, count = launchOperator(_kernels.CRK_MOMENTS_SPEC, ctx)
    n = m0.shape[0]
    m1 = m1.reshape(n, d)
    m2 = m2.reshape(n, d, d)
    dm0 = dm0.reshape(n, d)
    dm1 = dm1.reshape(n, d, d)  # [a, gamma]
    dm2 = dm2.reshape(n, d, d, d)  # [gamma, a, b]
    return V, vctx, ctx, (m0, m1, m2, dm0, dm1, dm2, count)


def computeCRKFactors(queryParticles, domain, kernel,
                      operationMode=OperationDirection.AllQueriesNonGhostReferences,
                      adjacency=None, referenceState=None, *, referenceAdjacency=None):
    """CRK correction factors of the query particles (module doc).

    Args:
        queryParticles: `ParticleState` (positions ``[N_q, d]``, supports, masses, int32 kinds).
        domain: `DomainDescription` (minimum image on periodic axes).
        kernel: `KernelFunctions` member.
        operationMode: `OperationDirection`, the interaction mode applied to every step
            (default AllQueriesNonGhostReferences).
        adjacency: query -> reference neighbours (`AdjacencyList`, `CompactHashMap` or None: a
            hash grid is built per call, sync-free). With ``referenceState=None`` it is also the
            R -> R neighbourhood of the volume step.
        referenceState: reference set R (`ParticleState`, masses used by step 5) or None (the
            query set).
        referenceAdjacency: R -> R neighbours for the volume step when `referenceState` is
            given (None: a hash grid over R).

    Returns:
        ``(V [N_r], rho_CRK [N_q], CRKState(A [N_q], B [N_q, d], gradA [N_q, d],
        gradB [N_q, d, d]))`` with ``gradB[i, k, c] = d_k B_c``. V is the volume the moments
        used: pass it as ``referenceVolumes`` to CRK-corrected operators.

    Derivatives: reverse mode w.r.t. positions, supports (both sets) and reference masses
    (rho_CRK), through the bridge and the torch glue. Limited rows have exactly zero adjoint.
    Forward mode: `computeCRKFactorsJVP`. No host synchronisation.
    """
    d = _checkInputs(queryParticles, domain, referenceState)
    _rejectDuals(queryParticles, referenceState)
    V, _, ctx, moments = _volumeAndMoments(queryParticles, domain, kernel, operationMode,
                                           adjacency, referenceState, referenceAdjacency, d)
    m0, m1, m2, dm0, dm1, dm2, count = moments
    scatter = ctx.properties

    # 3. + 4. limiter and terms
    A, B, gradA, gradB = _limitedTerms(m0, m1, m2, dm0, dm1, dm2, count,
                                       queryParticles.supports, d)

    # 5. diagnostic density (Scatter, W^R with the step-4 A and B)
    ctx = SPHContext(queryParticles, scatter, domain, adjacency=adjacency,
                     reference=referenceState,
                     corrections=Corrections(volumes=(None, V), crk=CRKState(A, B)))
    rho = launchOperator(_kernels.CRK_DENSITY_SPEC, ctx)
    return V, rho, CRKState(A, B, gradA, gradB)


# --------------------------------------------------------------------------------------
# Forward mode
# --------------------------------------------------------------------------------------

_WHERE_JVP = "computeCRKFactorsJVP"


def _termsJVP(limited, sel, tangents, A, M, Mm1):
    """Exact tangents of `_terms` (step 4) at the limiter-filtered inputs `sel` for the moment
    tangents `tangents` (zeroed on limited rows, whose inputs are constants):

    ``dM = -M dm2 M``, ``du = dM m1 + M dm1`` (u = M m1), ``ds = dm0 - dm1.u - m1.du``
    (s = m0 - m1.u), ``dA = -A^2 ds``, ``dB = -du``,
    ``d gradA = -2 A dA c - A^2 dc`` with ``c = P0 - 2 u.P1 + u P2 u`` and its tangent, and
    ``d gradB[k, i] = (dM P2 u + M T2 u + M P2 du)[k, i] - (dM P1 + M T1)[i, k]`` (P*, T* the
    spatial moment derivatives and their tangents)."""
    d = M.shape[-1]
    m0, m1, m2, P0, P1, P2 = sel
    t0, t1, t2, T0, T1, T2 = _replaceLimited(limited, *tangents, d, constants=False)
    u = Mm1
    dM = -torch.einsum("nab,nbc,ncd->nad", M, t2, M)
    du = torch.einsum("nab,nb->na", dM, m1) + torch.einsum("nab,nb->na", M, t1)
    ds = t0 - (t1 * u).sum(-1) - (m1 * du).sum(-1)
    dA = -(A * A) * ds
    dB = -du
    r1 = torch.einsum("na,nak->nk", u, P1)
    r2 = torch.einsum("nl,nklm,nm->nk", u, P2, u)
    dr1 = torch.einsum("na,nak->nk", du, P1) + torch.einsum("na,nak->nk", u, T1)
    dr2 = (torch.einsum("nl,nklm,nm->nk", du, P2, u) + torch.einsum("nl,nklm,nm->nk", u, T2, u)
           + torch.einsum("nl,nklm,nm->nk", u, P2, du))
    core = P0 - 2.0 * r1 + r2
    dcore = T0 - 2.0 * dr1 + dr2
    dgradA = -(2.0 * A * dA)[:, None] * core - (A * A)[:, None] * dcore
    dgradB = (torch.einsum("nil,nklm,nm->nki", dM, P2, u)
              + torch.einsum("nil,nklm,nm->nki", M, T2, u)
              + torch.einsum("nil,nklm,nm->nki", M, P2, du)
              - torch.einsum("nij,njk->nki", dM, P1)
              - torch.einsum("nij,njk->nki", M, T1))
    return dA.contiguous(), dB.contiguous(), dgradA.contiguous(), dgradB.contiguous()


def _checkTangentState(role, ts, p, dtype, device):
    """(positions, supports) tangents of `ts` checked against the primal `p` (None: zero)."""
    if ts is None:
        return None, None
    if not isinstance(ts, ParticleTangentState):
        raise TypeError(f"{_WHERE_JVP}: {role} has type {type(ts).__name__}; accepted: "
                        "ParticleTangentState or None")
    out = []
    for f in ("positions", "supports", "masses", "densities"):
        t = getattr(ts, f)
        if t is None:
            out.append(None)
            continue
        if isFunctorchWrapped(t):
            raise NotImplementedError(f"{_WHERE_JVP}: {role}.{f} is a torch.func (functorch) "
                                      "wrapped tensor; torch.func transforms are not supported "
                                      "by the Warp bridge (use torch.autograd.forward_ad)")
        like = getattr(p, f)
        if like is None:
            raise ValueError(f"{_WHERE_JVP}: {role}.{f} is given but the primal has no {f}")
        if tuple(t.shape) != tuple(like.shape):
            raise ValueError(f"{_WHERE_JVP}: {role}.{f} has shape {tuple(t.shape)}; accepted: "
                             f"{tuple(like.shape)} (the shape of its primal)")
        if t.dtype != dtype or t.device != device:
            raise TypeError(f"{_WHERE_JVP}: {role}.{f} has {t.dtype} on {t.device}; accepted: "
                            f"the call's {dtype} on {device}")
        out.append(t)
    # masses and densities are accepted and never read: no output of this JVP depends on them
    return out[0], out[1]


def computeCRKFactorsJVP(queryParticles, domain, kernel, queryTangentState,
                         operationMode=OperationDirection.AllQueriesNonGhostReferences,
                         adjacency=None, referenceState=None, referenceTangentState=None, *,
                         referenceAdjacency=None):
    """Forward mode of `computeCRKFactors`: the primal ``V`` and
    `CRKState` with their tangents in the direction of the particle tangents.

    Args:
        queryParticles: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        domain: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        kernel: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        operationMode: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        adjacency: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        referenceState: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        referenceAdjacency: primal argument, as for `computeCRKFactors` (same kinds masking,
            traversals and limiter).
        queryTangentState: `ParticleTangentState` of the query set (positions ``[N_q, d]``,
            supports ``[N_q]``; None fields or None: zero). Masses and densities are accepted
            and not read (no returned output depends on them).
        referenceTangentState: `ParticleTangentState` of a distinct `referenceState` (None:
            zero). With ``referenceState=None`` the reference set is the query set and its
            tangent is `queryTangentState` (passing another object raises `ValueError`);
            with ``referenceState is queryParticles`` a None reference tangent defaults to
            the query tangent, like `warpOperationJVP`.

    Returns:
        ``(V [N_r], dV [N_r], CRKState(A, B, gradA, gradB), CRKTangentState(dA, dB, dgradA,
        dgradB))``:

        * ``dV_j = -V_j^2 sum_k dW(x_jk, h_j)`` (Gather on R; 0 where V = 0);
        * the moment tangents from `crkMomentsJVPKernel` (dV_j included, Hessian and
            d grad W / dh in the spatial-derivative moments);
        * ``dA, dB, d gradA, d gradB`` the exact derivatives of step 4 (`_termsJVP`);
            limited rows (identity correction) have exactly zero tangent.

    The results are reverse-differentiable w.r.t. primals and tangents (the Warp launches go
    through the bridge, the rest is torch). No host synchronisation.
    """
    d = _checkInputs(queryParticles, domain, referenceState)
    pos = queryParticles.positions
    dtype, device = pos.dtype, pos.device
    if referenceState is None and referenceTangentState is not None \
            and referenceTangentState is not queryTangentState:
        raise ValueError(f"{_WHERE_JVP}: referenceTangentState is given without referenceState; "
                         "the reference set is the query set, whose tangent is "
                         "queryTangentState")
    qx, qh = _checkTangentState("queryTangentState", queryTangentState, queryParticles, dtype,
                                device)
    if referenceState is None or (referenceState is queryParticles
                                  and referenceTangentState is None):
        rx, rh = qx, qh  # self interaction: one set, one tangent (as `warpOperationJVP`)
    else:
        rx, rh = _checkTangentState("referenceTangentState", referenceTangentState,
                                    referenceState, dtype, device)

    V, vctx, ctx, moments = _volumeAndMoments(queryParticles, domain, kernel, operationMode,
                                              adjacency, referenceState, referenceAdjacency, d)
    m0, m1, m2, dm0, dm1, dm2, count = moments
    n = m0.shape[0]
    limited = _limiterMask(m0, m1, m2, count, queryParticles.supports, d)
    sel = _replaceLimited(limited, m0, m1, m2, dm0, dm1, dm2, d)
    A, B, gradA, gradB, M, Mm1 = _terms(*sel, d)
    state = CRKState(A.contiguous(), B.contiguous(), gradA.contiguous(), gradB.contiguous())

    if all(t is None for t in (qx, qh, rx, rh)):
        return V, torch.zeros_like(V), state, CRKTangentState(
            torch.zeros_like(state.A), torch.zeros_like(state.B),
            torch.zeros_like(state.gradA), torch.zeros_like(state.gradB))

    s = warpScalar(dtype)
    # 1. dV_j = -V_j^2 S'_j, S' the tangent of the raw sum (R tangent in both roles)
    nR = int(V.shape[0])
    dV = torch.zeros_like(V)
    if rx is not None or rh is not None:
        dS = launchGeometryJVP(_kernels.crkVolumeJVPKernel, vctx,
                               GeometryTangents(qPositions=rx, rPositions=rx, qSupports=rh,
                                                rSupports=rh), (nR,), s)
        dV = -(V * V) * dS

    # 2. moment tangents, dV as the reference-volume tangent
    F = _kernels.crkMomentComponents(d) - 1
    flat = launchGeometryJVP(_kernels.crkMomentsJVPKernel, ctx,
                             GeometryTangents(qPositions=qx, qSupports=qh, rPositions=rx,
                                              rSupports=rh, rVolumes=dV),
                             (n * F,), s, numThreads=n * F).reshape(n, F)
    dd = d * d
    sizes = (1, d, dd, d, dd, dd * d)
    parts = torch.split(flat, sizes, dim=1)
    tangents = (parts[0].reshape(n), parts[1].reshape(n, d), parts[2].reshape(n, d, d),
                parts[3].reshape(n, d), parts[4].reshape(n, d, d),
                parts[5].reshape(n, d, d, d))

    # 3. + 4. limited rows: zero tangent; the rest: exact derivatives of step 4
    dA, dB, dgradA, dgradB = _termsJVP(limited, sel, tangents, A, M, Mm1)
    return V, dV, state, CRKTangentState(dA, dB, dgradA, dgradB)
