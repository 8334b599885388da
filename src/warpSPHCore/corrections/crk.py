"""CRK correction builder `computeCRKFactors` (`operators.md` §4.3).

Pipeline (kinds masking with `operationMode` in every step, `operators.md` §6; no lattice
calibration; x_ij is the minimum image):

1. apparent volume on the reference set R (Gather): ``V_j = 1 / sum_{k in R} W(x_jk, h_j)``
   (Warp kernel `_crkKernels.CRK_VOLUME_SPEC`);
2. moments m0, m1, m2 and their query-position derivatives dm0, dm1, dm2 (Scatter, V_j held
   constant in the spatial derivatives) plus the visited-pair count (`CRK_MOMENTS_SPEC`);
3. limiter: a row with ``count < 2`` or ``|det m2| / h_i^(2d) < 1e-14`` (the spec's test), or
   whose Schur complement ``s = m0 - m1.M m1`` is ``<= tau m0`` (deviation below), gets the
   constants ``m0 = 1, m1 = 0, m2 = I, dm* = 0`` (element-wise select BEFORE any division, so
   the row's correction is exactly the identity with exactly zero adjoint and no NaN in
   backward);
4. with ``M = m2^-1`` (closed form, d <= 3):
   ``A = 1 / (m0 - m1.M m1)``, ``B = -M m1``,
   ``gradA_k = -A^2 (dm0_k - 2 (M m1).dm1[:, k] + (M m1).dm2[k] (M m1))``,
   ``gradB[k, i] = -sum_j M_ij dm1[j, k] + sum_lm M_il dm2[k, l, m] (M m1)_m``
   (gradB layout: row = derivative);
5. diagnostic density (Scatter): ``rho_i = sum_j m_j V_j W^R_ij / sum_j V_j^2 W^R_ij`` with
   the step-4 A, B (`CRK_DENSITY_SPEC`); 0 when the denominator is exactly 0.

Steps 3 and 4 are sync-free torch glue (element-wise `torch.where`, hand-written closed-form
inverses; no `torch.linalg` routine, no readback, `autodiff.md` §15).

Deviation from the spec (limiter, in the spirit of its difference d). The spec's test only
looks at m2, but ``A = 1 / s`` needs the full moment matrix ``[[m0, m1^T], [m1, m2]]`` (a sum
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
already filtered by the spec's test, the Schur-limited rows are added to the mask, and the
constants are selected once for all limited rows before the algebra of step 4.
"""

from __future__ import annotations

import dataclasses

import torch

from ..autograd.operator_spec import Corrections, SPHContext, launchOperator
from ..dataTypes.corrections import CRKState
from ..dataTypes.operationProperties import OperationProperties
from ..enumTypes import OperationDirection, SupportScheme
from ._crkKernels import CRK_DENSITY_SPEC, CRK_MOMENTS_SPEC, CRK_VOLUME_SPEC

__all__ = ["computeCRKFactors"]

_WHERE = "computeCRKFactors"
#: Limiter threshold on |det m2| / h^(2d) (`operators.md` §4.3 step 3).
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


def _limitedTerms(m0, m1, m2, dm0, dm1, dm2, count, h, d):
    """Steps 3 and 4: limiter select, then A, B, gradA, gradB (sync-free torch glue)."""
    n = m0.shape[0]
    zero = torch.zeros((), dtype=m0.dtype, device=m0.device)
    one = torch.ones((), dtype=m0.dtype, device=m0.device)
    eye = torch.eye(d, dtype=m0.dtype, device=m0.device).expand(n, d, d)
    # spec test (`operators.md` §4.3 step 3)
    m0d, m1d, m2d = m0.detach(), m1.detach(), m2.detach()
    limited = ((count < 2)
               | (_det(m2d, d).abs() / h.detach() ** (2 * d) < LIMITER_DET_THRESHOLD))
    # deviation (module doc): Schur complement from the first-pass-safe inputs, detached
    m0d = torch.where(limited, one, m0d)
    m1d = torch.where(limited[:, None], zero, m1d)
    m2d = torch.where(limited[:, None, None], eye, m2d)
    s = m0d - (m1d * torch.einsum("nab,nb->na", _inverse(m2d, d), m1d)).sum(-1)
    limited = limited | (s <= limiterSchurTolerance(m0.dtype) * m0d.abs())
    l1, l2, l3 = limited[:, None], limited[:, None, None], limited[:, None, None, None]
    # replaced by finite constants BEFORE any division: exact identity, zero adjoint (W66)
    m0 = torch.where(limited, one, m0)
    m1 = torch.where(l1, zero, m1)
    m2 = torch.where(l2, eye, m2)
    dm0 = torch.where(l1, zero, dm0)
    dm1 = torch.where(l2, zero, dm1)
    dm2 = torch.where(l3, zero, dm2)

    M = _inverse(m2, d)
    Mm1 = torch.einsum("nab,nb->na", M, m1)
    A = 1.0 / (m0 - (m1 * Mm1).sum(-1))
    B = -Mm1
    t1 = torch.einsum("na,nak->nk", Mm1, dm1)
    t2 = torch.einsum("nl,nklm,nm->nk", Mm1, dm2, Mm1)
    gradA = -(A * A)[:, None] * (dm0 - 2.0 * t1 + t2)
    gradB = (torch.einsum("nil,nklm,nm->nki", M, dm2, Mm1)
             - torch.einsum("nij,njk->nki", M, dm1))
    return A.contiguous(), B.contiguous(), gradA.contiguous(), gradB.contiguous()


def computeCRKFactors(queryParticles, domain, kernel, operationMode=OperationDirection.AllToAll,
                      adjacency=None, referenceState=None, *, referenceAdjacency=None):
    """CRK correction factors of the query particles (`operators.md` §4.3; module doc).

    Args:
        queryParticles: `ParticleState` (positions ``[N_q, d]``, supports, masses, int32 kinds).
        domain: `DomainDescription` (minimum image on periodic axes).
        kernel: `KernelFunctions` member.
        operationMode: `OperationDirection` applied to every step (default AllToAll = 9).
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
    No host synchronisation.
    """
    d = _checkInputs(queryParticles, domain, referenceState)
    base = OperationProperties(kernel, operationMode=operationMode)
    gather = dataclasses.replace(base, supportMode=SupportScheme.Gather)
    scatter = dataclasses.replace(base, supportMode=SupportScheme.Scatter)
    R = queryParticles if referenceState is None else referenceState
    volumeAdjacency = adjacency if referenceState is None else referenceAdjacency

    # 1. apparent volume on R (Gather; query = reference = R)
    V = launchOperator(CRK_VOLUME_SPEC, SPHContext(R, gather, domain, adjacency=volumeAdjacency))

    # 2. moments over the query -> reference neighbourhood (Scatter, V as referenceVolumes)
    corr = Corrections(volumes=(None, V))
    ctx = SPHContext(queryParticles, scatter, domain, adjacency=adjacency,
                     reference=referenceState, corrections=corr)
    m0, m1, m2, dm0, dm1, dm2, count = launchOperator(CRK_MOMENTS_SPEC, ctx)
    n = m0.shape[0]
    m1 = m1.reshape(n, d)
    m2 = m2.reshape(n, d, d)
    dm0 = dm0.reshape(n, d)
    dm1 = dm1.reshape(n, d, d)  # [a, gamma]
    dm2 = dm2.reshape(n, d, d, d)  # [gamma, a, b]

    # 3. + 4. limiter and terms
    A, B, gradA, gradB = _limitedTerms(m0, m1, m2, dm0, dm1, dm2, count,
                                       queryParticles.supports, d)

    # 5. diagnostic density (Scatter, W^R with the step-4 A and B)
    ctx = SPHContext(queryParticles, scatter, domain, adjacency=adjacency,
                     reference=referenceState,
                     corrections=Corrections(volumes=(None, V), crk=CRKState(A, B)))
    rho = launchOperator(CRK_DENSITY_SPEC, ctx)
    return V, rho, CRKState(A, B, gradA, gradB)
