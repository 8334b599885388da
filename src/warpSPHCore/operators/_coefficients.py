"""Pair coefficients of Divergence and Curl (`operators.md` §2.4, §2.5, §4.2).

`fieldCoefficient_ij(i, j, a, F, q, r, corr, ks, values, consistent)` is the component `a` of
c_ij under the call's gradient scheme, with grad-h dividing **both** f_i by Omega_i and f_j
by Omega_j (unlike `gradient.gradientCoefficient_ij`, which divides f_j only):

  ============== =========================================================
  Naive (1)      f_j V_j
  Symmetric (2)  m_j rho_i (f_i / rho_i^2 + f_j / rho_j^2)  (masses, densities; V_j unused)
  Difference (3) (f_j - f_i) V_j
  Summation (4)  (f_j + f_i) V_j
  ============== =========================================================

V_j = referenceVolumes[j] with volumes, else m_j / rho_j; with `consistent`
(Divergence's ``consistentDivergence``) V_j = referenceVolumes[j] rho_j / rho_i with volumes,
else m_j / rho_i. Values: ``[query N_q F | reference N_r F]``. Every array read sits in an
explicit if/else (W1); densities are read only behind their presence flags (W61).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import getGradH_i, getGradH_j, getVolume_j
from .interpolate import apparentVolume_j

__all__ = ["consistentVolume_j", "fieldCoefficient_ij"]


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
def fieldCoefficient_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                        corr: Any, ks: Any, values: Any, consistent: wp.bool):
    """c_ij[a] of the call's gradient scheme, f_i / Omega_i and f_j / Omega_j under grad-h."""
    offset = q.masses.shape[0] * F
    f_j = values[offset + j * F + a]
    f_i = values[i * F + a]
    useGradH, omega_j = getGradH_j(corr, j)
    if useGradH:
        useGradH_i, omega_i = getGradH_i(corr, i)
        f_j = f_j / omega_j
        f_i = f_i / omega_i
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
