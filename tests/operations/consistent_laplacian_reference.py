r"""Independent float64 NumPy reference for a first-order-consistent SPH Laplacian and Hessian
(groundwork for the consistent second derivatives).

Not a test file: the tests (`test_consistent_laplacian_reference.py`) and the study
(`benchmarks/studies/consistent_laplacian_study.py`) import it; the future Warp operator's
tests are meant to compare against it. Brute force over every (query, reference) pair, with
the minimum image on periodic axes, any dimension d = 1, 2, 3. It never
calls library maths.

Conventions (the library's)
---------------------------
* Kernel: Wendland2 with compact-support radius ``h``: ``W = C_d k(q) / h^d``,
  ``∇W(x) = x̂ C_d k'(q) / h^(d+1)``, ``x̂ = x / max(|x|, 1e-15)``, ``q = |x| / h``, with
  ``k(q) = (1-q)^3 (1+3q)`` (1D) or ``(1-q)^4 (1+4q)`` (2D/3D) and
  ``C_d = 5/4, 7/π, 21/(2π)`` (`kernels/constants.py`).
* ``x_ij = x_i − x_j`` (minimum image), ``r = |x_ij|``, ``G_ij = ∇W(x_ij, h_ij)`` is the
  gradient with respect to x_i; ``h_ij = h_i`` (the default support scheme, Gather).
* Renormalization: ``C_i = Σ_j V_j (x_j − x_i) ⊗ G_ij``,
  ``L_i = pinv(C_i)`` (1D: ``1/C`` if ``C > 1e-10`` else 0; 2D: the closed form on the
  symmetrised C with the 1e-12 / 1e-6 cutoffs; 3D: pinv with relative cutoff 1e-6), rows
  with fewer than d + 2 neighbours (W > 0, self included) use the identity.
* Brookshaw (LaplacianScheme.Brookshaw with the Difference/Naive pair
  difference): ``Σ_j −2 q_ij (G_ij · n_ij) / (r + 1e-8 h_ij)`` for r > 0, with
  ``q_ij = (f_j − f_i) V_j`` and ``n_ij = x_ij / (r + 1e-8 h_ij)``; ``G`` optionally
  renormalized (``G ← L_i G``). This is the classic Brookshaw (1985) form
  ``2 Σ_j V_j (f_i − f_j) x_ij · ∇W_ij / r_ij²``.

The consistent scheme (Fatehi & Manzari 2011 structure)
--------------------------------------------------------
Reference: R. Fatehi, M. T. Manzari, "Error estimation in smoothed particle hydrodynamics
and a new scheme for second derivatives", Computers & Mathematics with Applications 61
(2011) 482–498. What could be verified here (from the paper's abstract only): four
first-derivative and three second-derivative SPH schemes are analysed by Taylor expansion on
regular and irregular particles; only the renormalized (first-order-consistent) first
derivative converges acceptably; none of the three second-derivative schemes is first-order
consistent, so they converge only when the particle spacing shrinks much faster than the
smoothing length; the new scheme, built with a "modified renormalization tensor", is
first-order consistent, is at least an order of magnitude more accurate on a 2D heat
equation, and converges at a higher rate on regular particle arrangements. The paper's
equations were not available, so the scheme below is derived here with that structure (a
renormalized first derivative inside a Brookshaw-type pair sum, and a second correction
tensor that removes every quadratic error term); its exactness is proved below and checked
by the tests. To our understanding it has the same form as the paper's scheme (the same
rank-3 and rank-4 moments), but that is not verified; constant factors and signs follow this
module's conventions.

Notation per query particle i, with ``r_j = x_j − x_i = −x_ij`` (so ``r_a r_b = x_ij,a x_ij,b``)
and the *second-derivative pair weight* (symmetric, since ``G_ij ∥ x_ij``)::

    w_ij = x_ij ⊗ G_ij / r²  =  φ_ij n_ij ⊗ n_ij,   φ_ij = (G_ij · n_ij) / r   (0 for r = 0)

Brookshaw's Laplacian is ``−2 tr Σ_j V_j (f_j − f_i) w_ij``. The exactness below holds for
any symmetric pair weight as long as the same ``w_ij`` enters the moments and the pair sum
(a Warp kernel may use Brookshaw's regularised ``r + 1e-8 h``).

Step 1, first derivative (renormalized Difference gradient)::

    C_i = Σ_j V_j r_j ⊗ G_ij            (d x d; the library's Covariance)
    L_i = pinv(C_i)
    <∇f>_i = Σ_j V_j (f_j − f_i) L_i G_ij

Step 2, moments (per query, no field values)::

    M3_i[a,b,c]   = Σ_j V_j r_a r_b G_c                 rank 3 (symmetric in a, b)
    T_i[a,b,c]    = Σ_k L_i[c,k] M3_i[a,b,k]            rank 3
    N3_i[c,p,q]   = Σ_j V_j r_c w_pq                    rank 3 (symmetric in p, q)
    M4_i[a,b,p,q] = Σ_j V_j r_a r_b w_pq                rank 4 (symmetric in (a,b), (p,q))
    Q_i[a,b,p,q]  = M4_i[a,b,p,q] − Σ_c T_i[a,b,c] N3_i[c,p,q]

Step 3, pair sum (the field enters only here and in <∇f>)::

    S_i[p,q] = Σ_j V_j (f_j − f_i − r_j · <∇f>_i) w_pq
             = Σ_j V_j (f_j − f_i) w_pq − Σ_c <∇f>_i,c N3_i[c,p,q]

Step 4, correction solve. Exactness for quadratics: let ``f(x_i + r) = f_i + g·r + ½ rᵀHr``.
Then ``Σ_j V_j (f_j − f_i) G = Cᵀ g + ½ Σ_ab H_ab M3[a,b,:]``; with ``L C = I`` (C is
symmetric here because G ∥ x_ij, so ``L Cᵀ = I``) this gives ``<∇f>_c = g_c + ½ Σ_ab H_ab
T[a,b,c]`` — the renormalized gradient is exact for linear fields only. Hence
``f_j − f_i − r·<∇f> = ½ Σ_ab H_ab (r_a r_b − Σ_c r_c T[a,b,c])`` and::

    S_i[p,q] = ½ Σ_ab H_ab Q_i[a,b,p,q]            (exactly, for every quadratic f)

a linear map from the symmetric H (K = d(d+1)/2 unknowns) to the symmetric S (K equations).
In Voigt form (index pairs a ≤ b, p ≤ q) ``A_i[(pq),(ab)] = c_ab Q_i[a,b,p,q]`` with
``c_ab = 1`` for a < b and ``½`` for a = b, and ``A_i h = s_i``:

* Hessian: ``<∇∇f>_i = unvoigt(A_i⁻¹ s_i)``, a K x K solve per particle (1 x 1, 3 x 3,
  6 x 6 for d = 1, 2, 3). Exact (to rounding) for every quadratic f on any particle
  configuration where ``C_i`` and ``A_i`` are invertible.
* Laplacian: ``<∇²f>_i = B̂_i : S_i`` with the *modified renormalization tensor* B̂_i
  (symmetric d x d) solving ``½ Σ_pq B̂_i[p,q] Q_i[a,b,p,q] = δ_ab`` for all a ≤ b (K
  equations: ``A_iᵀ b̂ = voigt(I)``, then ``B̂[p,q] = b̂_(pq)`` for p = q and ``b̂_(pq)/2``
  for p < q). Since B̂ depends only on the geometry, a Warp operator can store it per
  particle like L_i. ``<∇²f>_i = tr <∇∇f>_i`` to rounding.

Single pair pass: substituting ``<∇f>_i`` gives ``<∇²f>_i = Σ_j a_ij (f_j − f_i)`` with
``a_ij = V_j [B̂_i : w_ij − (L_i G_ij) · β_i]`` and ``β_i[c] = B̂_i : N3_i[c]``
(`laplacianPairCoefficients`): after a geometry pass that stores L_i, B̂_i and β_i per
particle, the field pass has Brookshaw's cost. Likewise the Hessian is
``Σ_j V_j (f_j − f_i) unvoigt(A_i⁻¹ voigt(w_ij − (L_i G_ij) · N3_i))``.

Consistency: zeroth, first and second moments of the Taylor expansion are reproduced exactly
(constant, linear and quadratic fields give the exact Hessian/Laplacian), i.e. the operator
is first-order consistent in the sense of Fatehi & Manzari. The truncation error comes from
the cubic Taylor term: ``S`` gains ``Σ_j V_j O(r³) |w| = O(h)`` while ``A = O(1)``, so the error
is O(h) on irregular particles at fixed h/dx (O(h²) where the third moments vanish by
symmetry, e.g. on a regular lattice). Brookshaw's error instead contains
``g · Σ_j V_j r_j w_ij = O(disorder / h)``, which grows as h → 0 at fixed h/dx.

Requirements/fallbacks: ``C_i`` must be invertible (neighbours spanning all d directions;
the identity fallback for n_i < d + 2 is not exact) and ``A_i`` too (at least d + K
neighbours besides i in general position: 2, 5, 9 for d = 1, 2, 3). Rows whose
``A_i`` has a condition number above ``condLimit`` use its pseudo-inverse and are flagged in
the diagnostics; they are not exact.

Everything is float64. Field shapes: ``f`` is ``[N]`` or ``[N, *S]``; the Laplacian has the
shape of ``f``, the Hessian ``[N, *S, d, d]``, the gradient ``[N, *S, d]``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "C_D_WENDLAND2",
    "Box",
    "Pairs",
    "asBox",
    "wendland2",
    "wendland2Derivative",
    "gradW",
    "findPairs",
    "shepardVolumes",
    "covarianceMatrices",
    "renormalizationMatrices",
    "renormalizedGradient",
    "brookshawLaplacian",
    "secondDerivativeWeights",
    "secondDerivativeMoments",
    "correctionMatrices",
    "laplacianCorrectionTensor",
    "secondDerivativePairSum",
    "consistentHessian",
    "consistentLaplacian",
    "laplacianPairCoefficients",
    "brookshawPairCoefficients",
    "applyPairCoefficients",
    "jitteredLattice",
    "fitOrder",
]

#: C_d of Wendland2 for d = 1, 2, 3 (`kernels/constants.py`).
C_D_WENDLAND2 = (5.0 / 4.0, 7.0 / math.pi, 21.0 / (2.0 * math.pi))
#: x̂ = x / max(|x|, EPS) in float64.
EPS_FLOAT64 = 1e-15
#: Brookshaw's fixed regulariser.
BROOKSHAW_EPS = 1e-8


# --- kernel --------------------------------------------------------------------------------


def _shape(q, d):
    """k(q) and k'(q) of Wendland2 (0 for q >= 1)."""
    q = np.asarray(q, dtype=np.float64)
    a = np.maximum(1.0 - q, 0.0)
    if d == 1:
        k, dk = a**3 * (1.0 + 3.0 * q), -12.0 * q * a**2
    else:
        k, dk = a**4 * (1.0 + 4.0 * q), -20.0 * q * a**3
    inside = q < 1.0
    return np.where(inside, k, 0.0), np.where(inside, dk, 0.0)


def _checkDim(d):
    if d not in (1, 2, 3):
        raise ValueError(f"d={d!r}; accepted: 1, 2, 3")
    return int(d)


def wendland2(r, h, d):
    """Wendland2 kernel value ``C_d k(r/h) / h^d`` (``h`` = compact-support radius)."""
    d = _checkDim(d)
    r, h = np.asarray(r, np.float64), np.asarray(h, np.float64)
    k, _ = _shape(r / h, d)
    return C_D_WENDLAND2[d - 1] * k / h**d


def wendland2Derivative(r, h, d):
    """dW/dr = ``C_d k'(r/h) / h^(d+1)`` (≤ 0; 0 at r = 0 and for r ≥ h)."""
    d = _checkDim(d)
    r, h = np.asarray(r, np.float64), np.asarray(h, np.float64)
    _, dk = _shape(r / h, d)
    return C_D_WENDLAND2[d - 1] * dk / h ** (d + 1)


def gradW(xij, h, d):
    """∇W(x_ij, h) with respect to x_i, shape ``[..., d]``: ``x̂ C_d k'(q) / h^(d+1)``."""
    xij = np.asarray(xij, np.float64)
    r = np.linalg.norm(xij, axis=-1)
    xhat = xij / np.maximum(r, EPS_FLOAT64)[..., None]
    return xhat * wendland2Derivative(r, h, d)[..., None]


# --- domain and pairs ------------------------------------------------------------------------


class Box(NamedTuple):
    """Axis-aligned box ``[lo, hi]`` with per-axis periodicity (bool array [d])."""

    lo: np.ndarray
    hi: np.ndarray
    periodic: np.ndarray


def _np(a):
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def asBox(domain, d):
    """``None`` (free space), a `Box`, a tuple ``(lo, hi, periodic)`` or an object with
    ``min``, ``max``, ``periodic`` (e.g. the library's `DomainDescription`) → `Box` or None."""
    if domain is None:
        return None
    if isinstance(domain, Box):
        lo, hi, per = domain
    elif isinstance(domain, (tuple, list)):
        lo, hi, per = domain
    else:
        lo, hi, per = domain.min, domain.max, domain.periodic
    lo = np.broadcast_to(_np(lo).astype(np.float64), (d,)).copy()
    hi = np.broadcast_to(_np(hi).astype(np.float64), (d,)).copy()
    per = np.zeros(d, bool) if per is None else np.broadcast_to(_np(per).astype(bool), (d,))
    return Box(lo, hi, per.copy())


def _minimumImage(xi, xj, box):
    """x_i − x_j with the minimum image on periodic axes."""
    delta = xi - xj
    if box is None or not box.periodic.any():
        return delta
    for k in np.nonzero(box.periodic)[0]:
        L = box.hi[k] - box.lo[k]
        pi = xi[..., k] - L * np.floor((xi[..., k] - box.lo[k]) / L)
        pj = xj[..., k] - L * np.floor((xj[..., k] - box.lo[k]) / L)
        dk = pi - pj
        delta[..., k] = (dk + 0.5 * L) - L * np.floor((dk + 0.5 * L) / L) - 0.5 * L
    return delta


class Pairs(NamedTuple):
    """Every pair with ``r < h_i`` (self pair included), sorted by the query index i."""

    i: np.ndarray  # [P] int64, query
    j: np.ndarray  # [P] int64, reference
    xij: np.ndarray  # [P, d] x_i − x_j (minimum image)
    r: np.ndarray  # [P]
    h: np.ndarray  # [P] h_ij = h_i (Gather)
    N: int
    d: int


def _supports(h, N):
    return np.broadcast_to(np.asarray(h, np.float64), (N,)).copy()


def findPairs(x, h, domain=None, chunk=2_000_000):
    """Brute-force O(N²) pair search: all (i, j) with ``|x_ij| < h_i``.

    Pairs outside the support contribute exactly 0 to every sum of this module (W(1) = 0 and
    k'(1) = 0 for Wendland2), so restricting the sums to these pairs changes nothing.
    """
    x = np.asarray(x, np.float64)
    if x.ndim == 1:
        x = x[:, None]
    N, d = x.shape
    _checkDim(d)
    box = asBox(domain, d)
    hs = _supports(h, N)
    rows = max(1, int(chunk // max(N, 1)))
    parts = []
    for s in range(0, N, rows):
        xi = np.broadcast_to(x[s : s + rows, None, :], (min(rows, N - s), N, d))
        xj = np.broadcast_to(x[None, :, :], xi.shape)
        xij = _minimumImage(xi.copy(), xj, box)
        r = np.sqrt(np.einsum("ijk,ijk->ij", xij, xij))
        ii, jj = np.nonzero(r < hs[s : s + rows, None])
        parts.append((ii + s, jj, xij[ii, jj], r[ii, jj]))
    i = np.concatenate([p[0] for p in parts]).astype(np.int64)
    j = np.concatenate([p[1] for p in parts]).astype(np.int64)
    xij = np.concatenate([p[2] for p in parts]).reshape(-1, d)
    r = np.concatenate([p[3] for p in parts])
    return Pairs(i, j, xij, r, hs[i], N, d)


def _pairs(x, h, domain, pairs):
    return findPairs(x, h, domain) if pairs is None else pairs


def _rowSum(values, p):
    """Σ over the pairs of each query row: ``values`` [P, ...] → [N, ...] (rows are sorted
    and non-empty because the self pair is always present)."""
    out = np.zeros((p.N,) + values.shape[1:], np.float64)
    starts = np.flatnonzero(np.r_[True, p.i[1:] != p.i[:-1]])
    out[p.i[starts]] = np.add.reduceat(values, starts, axis=0)
    return out


def shepardVolumes(x, h, domain=None, pairs=None):
    """Apparent volumes ``V_i = 1 / Σ_j W_ij`` (= m_i / ρ_i for uniform masses)."""
    p = _pairs(x, h, domain, pairs)
    return 1.0 / _rowSum(wendland2(p.r, p.h, p.d), p)


# --- renormalization --------------------------------------------------------------------------


def covarianceMatrices(x, V, h, domain=None, pairs=None):
    """``C_i = Σ_j V_j (x_j − x_i) ⊗ G_ij`` [N, d, d] and the neighbour count n_i (W > 0)."""
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    G = gradW(p.xij, p.h, p.d)
    C = _rowSum(V[p.j, None, None] * (-p.xij)[:, :, None] * G[:, None, :], p)
    n = np.bincount(p.i, weights=(wendland2(p.r, p.h, p.d) > 0).astype(float), minlength=p.N)
    return C, n.astype(np.int64)


def _pinv2(C):
    """The 2D closed form on the symmetrised matrix."""
    a, c = C[:, 0, 0], C[:, 1, 1]
    b = 0.5 * (C[:, 0, 1] + C[:, 1, 0])
    disc = np.sqrt((a - c) ** 2 + 4.0 * b * b)
    lp, lm = 0.5 * (a + c + disc), 0.5 * (a + c - disc)
    pBig = np.abs(lp) >= np.abs(lm)
    big, small = np.where(pBig, lp, lm), np.where(pBig, lm, lp)
    invBig = np.abs(big) > 1e-12
    invSmall = np.abs(small) > 1e-6 * np.abs(big)
    det = a * c - b * b
    with np.errstate(divide="ignore", invalid="ignore"):
        plain = np.stack([np.stack([c, -b], -1), np.stack([-b, a], -1)], -2) / det[:, None, None]
        th = 0.5 * np.arctan2(2.0 * b, a - c)
        ep = np.stack([np.cos(th), np.sin(th)], -1)
        em = np.stack([-np.sin(th), np.cos(th)], -1)
        gBig = np.where(invBig, 1.0 / np.where(invBig, big, 1.0), 0.0)
        gSmall = np.where(invSmall, 1.0 / np.where(invSmall, small, 1.0), 0.0)
    gp, gm = np.where(pBig, gBig, gSmall), np.where(pBig, gSmall, gBig)
    eig = gp[:, None, None] * ep[:, :, None] * ep[:, None, :] + gm[:, None, None] * (
        em[:, :, None] * em[:, None, :]
    )
    return np.where((invBig & invSmall)[:, None, None], plain, eig)


def renormalizationMatrices(x, V, h, domain=None, pairs=None, returnC=False):
    """``L_i = pinv(C_i)`` [N, d, d] as in the consistent Laplacian (identity for n_i < d + 2)."""
    p = _pairs(x, h, domain, pairs)
    C, n = covarianceMatrices(x, V, h, domain, p)
    d = p.d
    C = np.where((n < d + 2)[:, None, None], np.eye(d), C)
    if d == 1:
        c = C[:, 0, 0]
        L = np.where(c > 1e-10, 1.0 / np.where(c > 1e-10, c, 1.0), 0.0)[:, None, None]
    elif d == 2:
        L = _pinv2(C)
    else:
        L = np.linalg.pinv(C, rcond=1e-6)
    return (L, C) if returnC else L


# --- field helpers ----------------------------------------------------------------------------


def _flat(f, N):
    f = np.asarray(f, np.float64)
    if f.shape[0] != N:
        raise ValueError(f"field has {f.shape[0]} rows, positions {N}")
    return f.reshape(N, -1), f.shape[1:]


def renormalizedGradient(x, V, h, f, domain=None, L=None, pairs=None):
    """``<∇f>_i = Σ_j V_j (f_j − f_i) L_i G_ij``, shape ``[N, *S, d]`` (derivative last).

    Exact for linear fields when ``L_i C_i = I``."""
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    if L is None:
        L = renormalizationMatrices(x, V, h, domain, p)
    F, S = _flat(f, p.N)
    LG = np.einsum("pab,pb->pa", L[p.i], gradW(p.xij, p.h, p.d))
    q = (F[p.j] - F[p.i]) * V[p.j, None]
    return _rowSum(q[:, :, None] * LG[:, None, :], p).reshape((p.N,) + S + (p.d,))


def brookshawLaplacian(x, V, h, f, domain=None, L=None, pairs=None):
    """LaplacianScheme.Brookshaw with the Difference pair difference:
    ``Σ_{j, r>0} −2 (f_j − f_i) V_j (G_ij · n_ij) / (r + 1e-8 h_ij)``; ``G ← L_i G`` when a
    renormalization matrix ``L`` [N, d, d] is given. Output has the shape of ``f``."""
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    F, S = _flat(f, p.N)
    G = gradW(p.xij, p.h, p.d)
    if L is not None:
        G = np.einsum("pab,pb->pa", L[p.i], G)
    den = p.r + BROOKSHAW_EPS * p.h
    nij = p.xij / den[:, None]
    fac = np.where(p.r > 0, -2.0 * np.einsum("pa,pa->p", G, nij) / den, 0.0)
    q = (F[p.j] - F[p.i]) * V[p.j, None]
    return _rowSum(q * fac[:, None], p).reshape((p.N,) + S)


# --- the consistent scheme: named, separable pieces -------------------------------------------


def secondDerivativeWeights(p):
    """``w_ij = x_ij ⊗ G_ij / r²`` [P, d, d] (0 for r = 0); symmetric because G ∥ x_ij."""
    G = gradW(p.xij, p.h, p.d)
    inv = np.where(p.r > 0, 1.0 / np.where(p.r > 0, p.r, 1.0) ** 2, 0.0)
    w = p.xij[:, :, None] * G[:, None, :] * inv[:, None, None]
    return 0.5 * (w + np.swapaxes(w, 1, 2))  # exact symmetry (removes rounding asymmetry)


class Moments(NamedTuple):
    """Per-query geometric moments of the consistent scheme (module docstring, step 2)."""

    L: np.ndarray  # [N, d, d]   renormalization L_i = pinv(C_i)
    M3: np.ndarray  # [N, d, d, d] Σ V r_a r_b G_c
    T: np.ndarray  # [N, d, d, d] Σ_k L[c,k] M3[a,b,k]
    N3: np.ndarray  # [N, d, d, d] Σ V r_c w_pq
    M4: np.ndarray  # [N, d, d, d, d] Σ V r_a r_b w_pq
    Q: np.ndarray  # [N, d, d, d, d] M4 − T·N3


def secondDerivativeMoments(x, V, h, domain=None, pairs=None, L=None):
    """The moments L, M3, T, N3, M4 and Q of every query particle."""
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    if L is None:
        L = renormalizationMatrices(x, V, h, domain, p)
    G = gradW(p.xij, p.h, p.d)
    w = secondDerivativeWeights(p)
    r = -p.xij  # x_j − x_i
    Vj = V[p.j]
    rr = r[:, :, None] * r[:, None, :]
    M3 = _rowSum(Vj[:, None, None, None] * rr[:, :, :, None] * G[:, None, None, :], p)
    N3 = _rowSum(Vj[:, None, None, None] * r[:, :, None, None] * w[:, None, :, :], p)
    M4 = _rowSum(Vj[:, None, None, None, None] * rr[:, :, :, None, None] * w[:, None, None], p)
    T = np.einsum("nck,nabk->nabc", L, M3)
    Q = M4 - np.einsum("nabc,ncpq->nabpq", T, N3)
    return Moments(L, M3, T, N3, M4, Q)


def _voigt(d):
    return [(a, b) for a in range(d) for b in range(a, d)]


def correctionMatrices(Q):
    """``A_i[(pq),(ab)] = c_ab Q_i[a,b,p,q]`` [N, K, K], K = d(d+1)/2 (module docstring,
    step 4): ``voigt(S_i) = A_i voigt(H)`` for every quadratic field with Hessian H."""
    d = Q.shape[1]
    idx = _voigt(d)
    A = np.empty((Q.shape[0], len(idx), len(idx)))
    for col, (a, b) in enumerate(idx):
        c = 1.0 if a < b else 0.5
        for row, (pp, qq) in enumerate(idx):
            A[:, row, col] = c * Q[:, a, b, pp, qq]
    return A


def _solve(A, rhs, condLimit):
    """Batched ``A x = rhs`` (rhs [N, K, F]); rows with cond(A) > condLimit use pinv."""
    cond = np.linalg.cond(A)
    ok = np.isfinite(cond) & (cond < condLimit)
    out = np.empty(rhs.shape)
    if ok.any():
        out[ok] = np.linalg.solve(A[ok], rhs[ok])
    if (~ok).any():
        out[~ok] = np.linalg.pinv(A[~ok]) @ rhs[~ok]
    return out, cond, ok


def laplacianCorrectionTensor(Q, condLimit=1e12):
    """The modified renormalization tensor B̂_i [N, d, d] (symmetric) with
    ``½ Σ_pq B̂_i[p,q] Q_i[a,b,p,q] = δ_ab`` (a ≤ b), so that ``<∇²f>_i = B̂_i : S_i``."""
    d = Q.shape[1]
    idx = _voigt(d)
    A = correctionMatrices(Q)
    e = np.array([1.0 if a == b else 0.0 for a, b in idx])
    b, _, _ = _solve(np.swapaxes(A, 1, 2), np.broadcast_to(e, (A.shape[0], len(idx)))[..., None],
                     condLimit)
    B = np.zeros((Q.shape[0], d, d))
    for k, (pp, qq) in enumerate(idx):
        if pp == qq:
            B[:, pp, pp] = b[:, k, 0]
        else:
            B[:, pp, qq] = B[:, qq, pp] = 0.5 * b[:, k, 0]
    return B


def secondDerivativePairSum(x, V, h, f, domain=None, pairs=None, L=None, gradient=None):
    """``S_i[p,q] = Σ_j V_j (f_j − f_i − (x_j − x_i)·<∇f>_i) w_ij[p,q]``, shape
    ``[N, F, d, d]`` for the flattened field (``gradient`` [N, F, d] defaults to the
    renormalized gradient)."""
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    F, _ = _flat(f, p.N)
    if gradient is None:
        gradient = renormalizedGradient(x, V, h, F, domain, L, p).reshape(p.N, -1, p.d)
    w = secondDerivativeWeights(p)
    r = -p.xij
    resid = F[p.j] - F[p.i] - np.einsum("pa,pfa->pf", r, gradient[p.i])
    return _rowSum((V[p.j, None] * resid)[:, :, None, None] * w[:, None], p)


def _prepare(x, V, h, f, domain, pairs):
    x = np.asarray(x, np.float64)
    if x.ndim == 1:
        x = x[:, None]
    p = _pairs(x, h, domain, pairs)
    mom = secondDerivativeMoments(x, V, h, domain, p)
    F, S = _flat(f, p.N)
    Sij = secondDerivativePairSum(x, V, h, F, domain, p, mom.L)
    return x, p, mom, F, S, Sij


def consistentHessian(x, V, h, f, domain=None, pairs=None, condLimit=1e12,
                      returnDiagnostics=False):
    """First-order-consistent SPH Hessian ``[N, *S, d, d]`` (module docstring): exact for every
    quadratic field wherever ``C_i`` and ``A_i`` are invertible.

    With ``returnDiagnostics=True`` also returns ``{"cond": cond(A_i), "exact": bool [N]
    (False where the pseudo-inverse fallback was used), "moments": Moments}``."""
    x, p, mom, F, S, Sij = _prepare(x, V, h, f, domain, pairs)
    d, idx = p.d, _voigt(p.d)
    A = correctionMatrices(mom.Q)
    s = np.stack([Sij[:, :, a, b] for a, b in idx], axis=1)  # [N, K, F]
    hv, cond, ok = _solve(A, s, condLimit)
    H = np.zeros((p.N, F.shape[1], d, d))
    for k, (a, b) in enumerate(idx):
        H[:, :, a, b] = H[:, :, b, a] = hv[:, k, :]
    H = H.reshape((p.N,) + S + (d, d))
    if returnDiagnostics:
        return H, {"cond": cond, "exact": ok, "moments": mom}
    return H


def laplacianPairCoefficients(x, V, h, domain=None, pairs=None, condLimit=1e12):
    """The consistent Laplacian as one pair sum, ``<∇²f>_i = Σ_j a_ij (f_j − f_i)`` with

        a_ij = V_j [ B̂_i : w_ij − (L_i G_ij) · β_i ],   β_i[c] = Σ_pq B̂_i[p,q] N3_i[c,p,q]

    (substitute ``<∇f>_i`` into ``B̂_i : S_i``). A Warp operator therefore needs one geometry
    pass (C_i, M3_i, N3_i, M4_i → L_i, B̂_i, β_i: d² + d(d+1)/2 + d numbers per particle) and
    then one pass over the pairs, like the Brookshaw scheme. Returns ``(pairs, a [P])``."""
    x = np.asarray(x, np.float64)
    if x.ndim == 1:
        x = x[:, None]
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    mom = secondDerivativeMoments(x, V, h, domain, p)
    B = laplacianCorrectionTensor(mom.Q, condLimit)
    beta = np.einsum("npq,ncpq->nc", B, mom.N3)
    LG = np.einsum("pab,pb->pa", mom.L[p.i], gradW(p.xij, p.h, p.d))
    w = secondDerivativeWeights(p)
    a = V[p.j] * (np.einsum("kpq,kpq->k", B[p.i], w)
                  - np.einsum("ka,ka->k", LG, beta[p.i]))
    return p, a


def brookshawPairCoefficients(x, V, h, domain=None, pairs=None, L=None):
    """Brookshaw as ``Σ_j a_ij (f_j − f_i)``: ``a_ij = −2 V_j (G_ij·n_ij) / (r + 1e-8 h_ij)``
    for r > 0, else 0 (``G ← L_i G`` when ``L`` is given). Returns ``(pairs, a [P])``."""
    x = np.asarray(x, np.float64)
    if x.ndim == 1:
        x = x[:, None]
    p = _pairs(x, h, domain, pairs)
    V = np.asarray(V, np.float64)
    G = gradW(p.xij, p.h, p.d)
    if L is not None:
        G = np.einsum("pab,pb->pa", L[p.i], G)
    den = p.r + BROOKSHAW_EPS * p.h
    fac = np.where(p.r > 0, -2.0 * np.einsum("pa,pa->p", G, p.xij / den[:, None]) / den, 0.0)
    return p, V[p.j] * fac


def applyPairCoefficients(p, a, f):
    """``Σ_j a_ij (f_j − f_i)`` for a field ``[N, *S]`` (output of the same shape)."""
    F, S = _flat(f, p.N)
    return _rowSum(a[:, None] * (F[p.j] - F[p.i]), p).reshape((p.N,) + S)


def consistentLaplacian(x, V, h, f, domain=None, pairs=None, condLimit=1e12):
    """First-order-consistent SPH Laplacian ``<∇²f>_i = B̂_i : S_i`` (shape of ``f``); equals
    the trace of `consistentHessian` to rounding."""
    x, p, mom, F, S, Sij = _prepare(x, V, h, f, domain, pairs)
    B = laplacianCorrectionTensor(mom.Q, condLimit)
    return np.einsum("npq,nfpq->nf", B, Sij).reshape((p.N,) + S)


# --- particle sets and orders (shared by the tests and the study) ----------------------------


def jitteredLattice(n, d, jitter=0.3, hOverDx=2.5, seed=0, lo=0.0, hi=1.0):
    """``n^d`` cell-centred lattice points of ``[lo, hi]^d`` moved by ``uniform(−½, ½) ·
    jitter · dx`` per coordinate (the demo's convention, `demo/common.py`).

    Returns ``(x [N, d], dx, h)`` with ``h = hOverDx · dx``."""
    dx = (hi - lo) / n
    g = (np.arange(n) + 0.5) * dx + lo
    grids = np.meshgrid(*([g] * d), indexing="ij")
    x = np.stack([m.ravel() for m in grids], axis=1)
    rng = np.random.default_rng(seed)
    x = x + rng.uniform(-0.5, 0.5, x.shape) * jitter * dx
    return x, dx, hOverDx * dx


def fitOrder(dx, err):
    """Least-squares slope of log(err) against log(dx)."""
    return float(np.polyfit(np.log(np.asarray(dx, float)),
                            np.log(np.maximum(np.asarray(err, float), 1e-300)), 1)[0])
