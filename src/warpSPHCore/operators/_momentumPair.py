"""The Momentum operator's pair physics (`operators.momentum`): the one definition of the pair
contribution to (F_i; B_i) and of the tangents of its pieces, shared by the generic primal
and JVP kernels (`momentum`) and the specialised forward kernel (`_specialized`). Functions
only: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

import warp as wp

__all__ = ["momentumRows", "momentumPair", "weightedPressure", "pairViscosity",
           "weightedPressureJVP", "pairViscosityJVP", "stressJVP"]


def momentumRows(d: int, scalar):
    """The accumulator type of one query: a 2 x d matrix, rows (F_i, B_i)."""
    return wp.types.matrix(shape=(2, d), dtype=scalar)


@wp.func
def weightedPressure(p_i: Any, p_j: Any, rho_i: Any, rho_j: Any):
    """p~_ij = (rho_j p_i + rho_i p_j) / (rho_i + rho_j); 0 where rho_i + rho_j <= 0."""
    s = rho_i + rho_j
    res = type(s)(0.0)
    if s > type(s)(0.0):
        res = (rho_j * p_i + rho_i * p_j) / s
    return res


@wp.func
def pairViscosity(mu_i: Any, mu_j: Any):
    """mu_ij = 2 mu_i mu_j / (mu_i + mu_j); 0 where mu_i + mu_j <= 0."""
    s = mu_i + mu_j
    res = type(s)(0.0)
    if s > type(s)(0.0):
        res = type(s)(2.0) * mu_i * mu_j / s
    return res


@wp.func
def momentumPair(G: Any, x_ij: Any, D: Any, p_i: Any, rho_i: Any, V_i: Any, mu_i: Any,
                 u_i: Any, ut_i: Any, p_j: Any, rho_j: Any, V_j: Any, mu_j: Any, u_j: Any,
                 ut_j: Any):
    """The pair contribution to (F_i; B_i) (module formula) for the kernel gradient G, the
    pair vector x_ij and the denominator D = r_ij + 1e-8 h_ij."""
    w = V_i * V_i + V_j * V_j
    visc = pairViscosity(mu_i, mu_j) * wp.dot(x_ij, G) / (D * D)
    a_i = rho_i * wp.dot(ut_i - u_i, G) * u_i
    a_j = rho_j * wp.dot(ut_j - u_j, G) * u_j
    F = w * (visc * (u_i - u_j) - weightedPressure(p_i, p_j, rho_i, rho_j) * G
             + type(D)(0.5) * (a_i + a_j))
    return wp.matrix_from_rows(F, w * G)


@wp.func
def weightedPressureJVP(p_i: Any, p_j: Any, rho_i: Any, rho_j: Any, dp_i: Any, dp_j: Any,
                         drho_i: Any, drho_j: Any):
    """Tangent of `weightedPressure`."""
    s = rho_i + rho_j
    res = type(s)(0.0)
    if s > type(s)(0.0):
        pt = (rho_j * p_i + rho_i * p_j) / s
        dnum = drho_j * p_i + rho_j * dp_i + drho_i * p_j + rho_i * dp_j
        res = (dnum - pt * (drho_i + drho_j)) / s
    return res


@wp.func
def pairViscosityJVP(mu_i: Any, mu_j: Any, dmu_i: Any, dmu_j: Any):
    """Tangent of `pairViscosity`: 2 (mu_j^2 dmu_i + mu_i^2 dmu_j) / (mu_i + mu_j)^2."""
    s = mu_i + mu_j
    res = type(s)(0.0)
    if s > type(s)(0.0):
        res = type(s)(2.0) * (mu_j * mu_j * dmu_i + mu_i * mu_i * dmu_j) / (s * s)
    return res


@wp.func
def stressJVP(G: Any, dG: Any, rho: Any, u: Any, ut: Any, drho: Any, du: Any, dut: Any):
    """Tangent of rho ((u~ - u) . G) u, one side of the transport-velocity term."""
    c = wp.dot(ut - u, G)
    dc = wp.dot(dut - du, G) + wp.dot(ut - u, dG)
    return (drho * c + rho * dc) * u + (rho * c) * du
