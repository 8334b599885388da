"""Pair coefficients of the value operators (`operators.md` §2.3-2.6, §4.2) — one definition
for Gradient, Divergence, Curl and (the field reads of) the Laplacian.

`fieldValues_ij(i, j, a, F, q, corr, values, divideQuery)` reads (f_i[a], f_j[a]); under
grad-h f_j is divided by Omega_j, and f_i by Omega_i when `divideQuery` (Divergence, Curl,
Laplacian: both; Gradient: f_j only).

`fieldCoefficient_ij(i, j, a, F, q, r, corr, ks, values, consistent, divideQuery)` is the
component `a` of c_ij under the call's gradient scheme:

  ============== =========================================================
  Naive (1)      f_j V_j
  Symmetric (2)  m_j rho_i (f_i / rho_i^2 + f_j / rho_j^2)  (masses, densities; V_j unused)
  Difference (3) (f_j - f_i) V_j
  Summation (4)  (f_j + f_i) V_j
  ============== =========================================================

V_j = referenceVolumes[j] with volumes, else m_j / rho_j; with `consistent`
(Divergence's ``consistentDivergence``) V_j = referenceVolumes[j] rho_j / rho_i with volumes,
else m_j / rho_i. Values: ``[query N_q F | reference N_r F]``.

`fieldCoefficientVJP_ij` and `apparentVolumeVJP_j` scatter the adjoint of the Gradient's c_ij
(and V_j) into a reverse pack, for the hand-written reverse kernel (`autograd.reverse`). Every array read sits in an
explicit if/else (W1); densities are read only behind their presence flags (W61).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import getGradH_i, getGradH_j, getVolume_j

__all__ = ["apparentVolume_j", "consistentVolume_j", "fieldValues_ij", "fieldCoefficient_ij",
           "apparentVolumeVJP_j", "fieldCoefficientVJP_ij", "gradientPairVJP_ij"]


@wp.func
def apparentVolume_j(r: Any, corr: Any, j: wp.int32):
    """V_j: referenceVolumes[j] with volumes, else m_j / rho_j (0 without densities).

    Explicit if/else around every array read (W1)."""
    useVolume, vol = getVolume_j(corr, j)
    V_j = vol
    if not useVolume:
        if r.hasDensities:
            V_j = r.masses[j] / r.densities[j]
        else:
            V_j = type(vol)(0.0)
    return V_j


@wp.func
def consistentVolume_j(q: Any, r: Any, corr: Any, i: wp.int32, j: wp.int32):
    """referenceVolumes[j] rho_j / rho_i with volumes, else m_j / rho_i (0 without the
    densities the formula reads)."""
    useVolume, vol = getVolume_j(corr, j)
    V_j = type(vol)(0.0)
    if q.hasDensities:
        rho_i = q.densities[i]
        if useVolume:
            if r.hasDensities:
                V_j = vol * r.densities[j] / rho_i
        else:
            V_j = r.masses[j] / rho_i
    return V_j


@wp.func
def fieldValues_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, corr: Any,
                   values: Any, divideQuery: wp.bool):
    """(f_i[a], f_j[a]) from values = [query N_q F | reference N_r F]; under grad-h f_j is
    divided by Omega_j, and f_i by Omega_i when `divideQuery` (`operators.md` §4.2)."""
    offset = q.masses.shape[0] * F
    f_j = values[offset + j * F + a]
    f_i = values[i * F + a]
    useGradH, omega_j = getGradH_j(corr, j)
    if useGradH:
        f_j = f_j / omega_j
        if divideQuery:
            useGradH_i, omega_i = getGradH_i(corr, i)
            f_i = f_i / omega_i
    return f_i, f_j


@wp.func
def fieldCoefficient_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                        corr: Any, ks: Any, values: Any, consistent: wp.bool,
                        divideQuery: wp.bool):
    """c_ij[a] of the call's gradient scheme; f_j / Omega_j under grad-h, and f_i / Omega_i
    when `divideQuery` (Divergence, Curl; not Gradient)."""
    f_i, f_j = fieldValues_ij(i, j, a, F, q, corr, values, divideQuery)
    c = type(f_j)(0.0)
    scheme = ks.gradientMode
    if scheme == 2:
        if q.hasDensities and r.hasDensities:
            rho_i = q.densities[i]
            rho_j = r.densities[j]
            c = r.masses[j] * rho_i * (f_i / (rho_i * rho_i) + f_j / (rho_j * rho_j))
    else:
        V_j = type(f_j)(0.0)
        if consistent:
            V_j = consistentVolume_j(q, r, corr, i, j)
        else:
            V_j = apparentVolume_j(r, corr, j)
        if scheme == 3:
            c = (f_j - f_i) * V_j
        elif scheme == 4:
            c = (f_j + f_i) * V_j
        else:
            c = f_j * V_j
    return c


# --- reverse (hand-written reverse kernels, `autograd.reverse`) ------------------------------


@wp.func
def apparentVolumeVJP_j(r: Any, corr: Any, j: wp.int32, adj_V: Any, p: Any):
    """Scatter the adjoint `adj_V` of `apparentVolume_j` into the reverse pack `p`:
    referenceVolumes[j] with volumes, else m_j (1 / rho_j) and rho_j (-m_j / rho_j^2)."""
    if corr.useVolume:
        if p.hasRVolumes:
            wp.atomic_add(p.rVolumes, j, adj_V)
    elif r.hasDensities:
        rho_j = r.densities[j]
        if p.hasRMasses:
            wp.atomic_add(p.rMasses, j, adj_V / rho_j)
        if p.hasRDensities:
            wp.atomic_sub(p.rDensities, j, adj_V * r.masses[j] / (rho_j * rho_j))


@wp.func
def fieldCoefficientVJP_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                           corr: Any, ks: Any, p: Any, adj_c: Any):
    """Scatter the adjoint `adj_c` of `fieldCoefficient_ij` (``consistent=False``,
    ``divideQuery=False``, no grad-h: the Gradient's coefficient) into the reverse pack `p`:
    the values f_i, f_j, the masses, the densities and the reference volumes, each behind its
    presence flag. The exact partial derivatives of the four schemes (module table)."""
    offset = q.masses.shape[0] * F
    jr = offset + j * F + a
    iq = i * F + a
    f_j = p.values[jr]
    f_i = p.values[iq]
    scheme = ks.gradientMode
    if scheme == 2:
        if q.hasDensities and r.hasDensities:
            rho_i = q.densities[i]
            rho_j = r.densities[j]
            m_j = r.masses[j]
            a_i = f_i / (rho_i * rho_i)
            a_j = f_j / (rho_j * rho_j)
            if p.hasRMasses:
                wp.atomic_add(p.rMasses, j, adj_c * rho_i * (a_i + a_j))
            if p.hasQDensities:
                wp.atomic_add(p.qDensities, i, adj_c * m_j * (a_j - a_i))
            if p.hasRDensities:
                wp.atomic_sub(p.rDensities, j, adj_c * type(f_j)(2.0) * m_j * rho_i * a_j / rho_j)
            if p.hasValues:
                wp.atomic_add(p.gValues, iq, adj_c * m_j / rho_i)
                wp.atomic_add(p.gValues, jr, adj_c * m_j * rho_i / (rho_j * rho_j))
    else:
        V_j = apparentVolume_j(r, corr, j)
        w = f_j
        if scheme == 3:
            w = f_j - f_i
        elif scheme == 4:
            w = f_j + f_i
        apparentVolumeVJP_j(r, corr, j, adj_c * w, p)
        if p.hasValues:
            wp.atomic_add(p.gValues, jr, adj_c * V_j)
            if scheme == 3:
                wp.atomic_sub(p.gValues, iq, adj_c * V_j)
            elif scheme == 4:
                wp.atomic_add(p.gValues, iq, adj_c * V_j)


@wp.func
def gradientPairVJP_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                       corr: Any, ks: Any, p: Any, u: Any, G: Any, Hu: Any, gh_i: Any,
                       gh_j: Any):
    """The adjoint of the Gradient's pair term c_ij[k] G_ij for the row cotangent `u`, given
    (G, H u, u . dG/dh_i, u . dG/dh_j) of the pair: scatters c H u to -x_j, c (u . dG/dh) to
    h_i and h_j and (u . G) dc to the coefficient's inputs (`fieldCoefficientVJP_ij`); returns
    the x_i adjoint c H u. The one definition behind the generic and the specialised reverse
    kernels (`gradient.gradientVJPPairTerm`, `_specialized`)."""
    c = fieldCoefficient_ij(i, j, k, F, q, r, corr, ks, p.values, False, False)
    fieldCoefficientVJP_ij(i, j, k, F, q, r, corr, ks, p, wp.dot(G, u))
    res = c * Hu
    if p.hasRPositions:
        wp.atomic_sub(p.rPositions, j, res)
    if p.hasQSupports:
        wp.atomic_add(p.qSupports, i, c * gh_i)
    if p.hasRSupports:
        wp.atomic_add(p.rSupports, j, c * gh_j)
    return res
