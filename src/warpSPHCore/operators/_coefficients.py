"""Scheme coefficients of the value operators (apparent volumes, the gradient schemes' c_ij,
the Laplacian's q_ij, the grad-h divisions) — value, forward-mode tangent (JVP) and
reverse-mode adjoint (VJP) of each, side by side: one definition for every primal, JVP and
reverse kernel, so that no formula exists twice.

================  =========================  ============================  ====================
coefficient       value                      JVP (forward mode)            VJP (reverse kernel)
================  =========================  ============================  ====================
V_j               `apparentVolume_j`         `apparentVolumeJVP_j`         `apparentVolumeVJP_j`
V_j consistent    `consistentVolume_j`       none (outside the JVP scope)  none (tape)
c_ij (gradient    `fieldCoefficient_ij`      `fieldCoefficientJVP_ij`      `fieldCoefficientVJP_ij`
schemes)                                                                   `gradientPairVJP_ij`
s_ij (Laplacian   `laplacianScale_ij`        `laplacianScaleJVP_ij`        none (tape)
scheme scale)
q_ij (Laplacian)  `laplacianDifference_ij`   `laplacianDifferenceJVP_ij`   none (tape)
================  =========================  ============================  ====================

Users: Gradient, Divergence, Curl (c_ij), Laplacian (q_ij), Interpolate, Covariance and the
CRK builders (V_j); the reverse adjoints serve the Gradient's hand-written reverse kernel
(`gradient.gradientVJPKernel`, `_specialized`), every other reverse pass is Warp's generated
adjoint of the value functions.

* `fieldValues_ij(i, j, a, F, q, corr, values, divideQuery)` reads (f_i[a], f_j[a]) from
  ``values = [query N_q F | reference N_r F]``, or from one block ``[N F]`` when the call's
  reference values are its query values (`referenceBase`); under grad-h f_j is divided by
  Omega_j, and f_i by Omega_i when `divideQuery` (Divergence, Curl, Laplacian: both;
  Gradient: f_j only).
* V_j = referenceVolumes[j] with volumes, else m_j / rho_j (0 without densities); with
  `consistent` (Divergence's ``consistentDivergence``) V_j = referenceVolumes[j] rho_j / rho_i
  with volumes, else m_j / rho_i.
* c_ij[a] under the call's gradient scheme (``ks.gradientMode``):

  ============== =========================================================
  Naive (1)      f_j V_j
  Symmetric (2)  m_j rho_i (f_i / rho_i^2 + f_j / rho_j^2)  (masses, densities; V_j unused)
  Difference (3) (f_j - f_i) V_j
  Summation (4)  (f_j + f_i) V_j
  ============== =========================================================

* Laplacian: q_ij[k] = (f_j - f_i) s_ij with f / Omega on both sides under grad-h and the
  scheme scale s_ij = m_j rho_i / rho_j^2 (Symmetric; no volumes), else V_j.

Derivatives. The JVPs take the tangent pack ``t`` (`arg_extract.structFor("tangent", d, s)`)
and return (value, tangent) (the V_j and s_ij JVPs the tangent only): the exact derivative
w.r.t. masses, densities and reference volumes with the values frozen (``t.values``), plus the
value tangent's coefficient ``c(tValues)`` (c and q are linear in f); Omega has no tangent.
The VJPs scatter an adjoint into the reverse pack ``p``
(`arg_extract.structFor("cotangent", d, s)`) with `wp.atomic_add`, each input behind its
presence flag; `fieldCoefficientVJP_ij` is the adjoint of `fieldCoefficientJVP_ij` for the
Gradient's coefficient (``consistent=False``, ``divideQuery=False``, no grad-h: the reverse
kernel's scope). tests/operations/test_pair_coefficients.py checks each JVP against central
differences of its value function and each JVP/VJP pair by the adjoint identity
<u, J v> = <J^T u, v>.

Every array read sits in an explicit if/else, never a conditional expression (a ternary
that reads a Warp array can give that array a zero adjoint); densities are read only behind
their presence flags (absent densities are a length-1 placeholder, and Warp does not check
bounds).
"""

from __future__ import annotations

import functools
from typing import Any

import warp as wp

from ..autograd.arg_extract import getGradH_i, getGradH_j, getVolume_j

__all__ = ["referenceBase", "apparentVolume_j", "apparentVolumeJVP_j", "apparentVolumeVJP_j",
           "consistentVolume_j", "fieldValues_ij", "coefficientOfValues_ij", "omegaTangents_ij",
           "fieldCoefficient_ij", "fieldCoefficientOf", "fieldCoefficientJVP_ij", "fieldCoefficientVJP_ij",
           "densityPairVJP_ij", "gradientPairVJP_ij", "interpolatePairVJP_ij",
           "contractedIndex", "divergenceCoefficients_ij", "divergencePairVJP_ij",
           "curlAxes", "curlPairVJP_ij", "scatterGeometryAdjoint_ij",
           "laplacianDifferenceVJP_ij", "laplacianDenominators_ij", "laplacianPairVJP_ij",
           "laplacianScale_ij", "laplacianScaleJVP_ij",
           "laplacianDifference_ij", "laplacianDifferenceJVP_ij", "laplacianDifferenceOf",
           "laplacianDifferenceOfValues", "coefficientOfValuesOf",
           "plainStates",
           "LAPLACIAN_REG_N", "LAPLACIAN_REG_DEFAULT"]


# --- V_j: the apparent volume ------------------------------------------------------------------


@wp.func
def apparentVolume_j(r: Any, corr: Any, j: wp.int32):
    """V_j: referenceVolumes[j] with volumes, else m_j / rho_j (0 without densities).

    Explicit if/else around every array read (a ternary reading an array can zero its
    adjoint)."""
    useVolume, vol = getVolume_j(corr, j)
    V_j = vol
    if not useVolume:
        if r.hasDensities:
            V_j = r.masses[j] / r.densities[j]
        else:
            V_j = type(vol)(0.0)
    return V_j


@wp.func
def apparentVolumeJVP_j(r: Any, corr: Any, t: Any, j: wp.int32):
    """dV_j: the reference-volume tangent with volumes, else d(m_j / rho_j)
    = dm_j / rho_j - m_j drho_j / rho_j^2 (0 without densities)."""
    dV = type(r.masses[j])(0.0)
    if corr.useVolume:
        if t.hasRVolumes:
            dV = t.rVolumes[j]
    elif r.hasDensities:
        rho_j = r.densities[j]
        if t.hasRMasses:
            dV = dV + t.rMasses[j] / rho_j
        if t.hasRDensities:
            dV = dV - r.masses[j] * t.rDensities[j] / (rho_j * rho_j)
    return dV


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
def consistentVolume_j(q: Any, r: Any, corr: Any, i: wp.int32, j: wp.int32):
    """referenceVolumes[j] rho_j / rho_i with volumes, else m_j / rho_i (0 without the
    densities the formula reads). JVP: `consistentVolumeJVP_j`; no VJP (the Divergence's
    reverse pass is the tape's)."""
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
def consistentVolumeJVP_j(q: Any, r: Any, corr: Any, t: Any, i: wp.int32, j: wp.int32):
    """d(consistentVolume_j): with volumes d(vol_j rho_j / rho_i) = dvol_j rho_j / rho_i +
    vol_j drho_j / rho_i - vol_j rho_j drho_i / rho_i^2, else d(m_j / rho_i) = dm_j / rho_i -
    m_j drho_i / rho_i^2 (0 without the densities the value reads)."""
    useVolume, vol = getVolume_j(corr, j)
    dV = type(vol)(0.0)
    if q.hasDensities:
        rho_i = q.densities[i]
        if useVolume:
            if r.hasDensities:
                rho_j = r.densities[j]
                if t.hasRVolumes:
                    dV = dV + t.rVolumes[j] * rho_j / rho_i
                if t.hasRDensities:
                    dV = dV + vol * t.rDensities[j] / rho_i
                if t.hasQDensities:
                    dV = dV - vol * rho_j * t.qDensities[i] / (rho_i * rho_i)
        else:
            if t.hasRMasses:
                dV = dV + t.rMasses[j] / rho_i
            if t.hasQDensities:
                dV = dV - r.masses[j] * t.qDensities[i] / (rho_i * rho_i)
    return dV


# --- field values ------------------------------------------------------------------------------


@wp.func
def referenceBase(values: Any, q: Any, F: wp.int32):
    """Where reference j's row of a flat field starts, less ``j F``: the field holds the query
    rows first and then the reference rows, ``[N_q F | N_r F]`` (base N_q F), or one block
    ``[N F]`` when the call's reference values are its query values (base 0: row j of the
    same block; `preparation._valueExtras`). A length beyond N_q F tells the two apart. The
    value arrays of one call (values, their tangent, their adjoint) share the layout."""
    n = q.masses.shape[0] * F
    base = wp.int32(0)
    if values.shape[0] > n:
        base = n
    return base


@wp.func
def fieldValues_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, corr: Any,
                   values: Any, divideQuery: wp.bool):
    """(f_i[a], f_j[a]) from values = [query N_q F | reference N_r F]; under grad-h f_j is
    divided by Omega_j, and f_i by Omega_i when `divideQuery`."""
    offset = referenceBase(values, q, F)
    f_j = values[offset + j * F + a]
    f_i = values[i * F + a]
    useGradH, omega_j = getGradH_j(corr, j)
    if useGradH:
        f_j = f_j / omega_j
        if divideQuery:
            useGradH_i, omega_i = getGradH_i(corr, i)
            f_i = f_i / omega_i
    return f_i, f_j


# --- c_ij: the gradient schemes' coefficient (Gradient, Divergence, Curl) ---------------------


def _variantName(stem: str, fixedScheme: int | None, plain: bool) -> str:
    return f"{stem}_g{int(fixedScheme or 0)}{'p' if plain else ''}_ij"


def _coefficientOfValuesFunction(fixedScheme: int | None, plain: bool = False):
    """`coefficientOfValues_ij`: c_ij of the call's gradient scheme for the field values
    (f_i, f_j) as the pair reads them (module table), or its copy with the scheme fixed and,
    with `plain`, the state tests resolved at code generation (`_fieldCoefficientFunction`)."""

    def coefficientOfValues_ij(i: wp.int32, j: wp.int32, f_i: Any, f_j: Any, q: Any, r: Any,
                               corr: Any, ks: Any, consistent: wp.bool):
        """c_ij for the values (f_i, f_j), already divided by Omega where grad-h applies."""
        c = type(f_j)(0.0)
        scheme = ks.gradientMode
        if wp.static(fixedScheme is not None):
            scheme = wp.int32(wp.static(fixedScheme or 0))  # a constant: the C++ compiler
            # folds the branches below and drops the reads only the other schemes make
        if scheme == 2:
            if wp.static(plain) or (q.hasDensities and r.hasDensities):
                rho_i = q.densities[i]
                rho_j = r.densities[j]
                c = r.masses[j] * rho_i * (f_i / (rho_i * rho_i) + f_j / (rho_j * rho_j))
        else:
            V_j = type(f_j)(0.0)
            if consistent:
                V_j = consistentVolume_j(q, r, corr, i, j)
            elif wp.static(plain):
                V_j = r.masses[j] / r.densities[j]
            else:
                V_j = apparentVolume_j(r, corr, j)
            if scheme == 3:
                c = (f_j - f_i) * V_j
            elif scheme == 4:
                c = (f_j + f_i) * V_j
            else:
                c = f_j * V_j
        return c

    if fixedScheme is None and not plain:
        return wp.func(coefficientOfValues_ij)
    return wp.func(coefficientOfValues_ij,
                   name=_variantName("coefficientOfValues", fixedScheme, plain),
                   module="unique")


def _fieldCoefficientFunction(fixedScheme: int | None, plain: bool = False):
    """`fieldCoefficient_ij` (`fixedScheme` None: the scheme read from ``ks.gradientMode`` at
    run time) or its copy for one scheme fixed at code generation (`fieldCoefficientOf`):
    the same arithmetic, so the same bits. `plain`: the copy for calls without grad-h and
    volumes whose query and reference carry densities (`plainStates`), in which the
    run-time tests of those states are resolved at code generation (the values read as
    they are, V_j = m_j / rho_j): a pair loop over several columns then has no branch in
    its column code."""
    ofValues = coefficientOfValues_ij if fixedScheme is None and not plain \
        else coefficientOfValuesOf(fixedScheme, plain)

    def fieldCoefficient_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any,
                            r: Any, corr: Any, ks: Any, values: Any, consistent: wp.bool,
                            divideQuery: wp.bool):
        """c_ij[a] of the call's gradient scheme (module table); f_j / Omega_j under grad-h,
        and f_i / Omega_i when `divideQuery` (Divergence, Curl; not Gradient)."""
        f_i = values.dtype(0.0)
        f_j = values.dtype(0.0)
        if wp.static(plain):
            f_i = values[i * F + a]
            f_j = values[referenceBase(values, q, F) + j * F + a]
        else:
            f_i, f_j = fieldValues_ij(i, j, a, F, q, corr, values, divideQuery)
        return ofValues(i, j, f_i, f_j, q, r, corr, ks, consistent)

    if fixedScheme is None and not plain:
        return wp.func(fieldCoefficient_ij)
    return wp.func(fieldCoefficient_ij,
                   name=_variantName("fieldCoefficient", fixedScheme, plain),
                   module="unique")


coefficientOfValues_ij = _coefficientOfValuesFunction(None)


@functools.cache
def coefficientOfValuesOf(scheme: int | None, plain: bool = False):
    """`coefficientOfValues_ij` with the gradient scheme `scheme` fixed (and, with `plain`,
    the `plainStates` copy): the coefficient of `fieldCoefficientOf(scheme, plain)` for
    values read by the caller (the several-column loops read a block of them at once)."""
    if scheme is None and not plain:
        return coefficientOfValues_ij
    return _coefficientOfValuesFunction(scheme, plain)


fieldCoefficient_ij = _fieldCoefficientFunction(None)


def plainStates(config: dict) -> bool:
    """Whether a call's configuration (`build_fn.config`) has neither grad-h terms nor
    volumes and gives both the query and the reference densities: the `plain` copies of the
    pair coefficients (`fieldCoefficientOf`, `laplacianDifferenceOf`) apply."""
    return (not config["useGradHTerms"] and not config["useVolume"]
            and bool(config["queryHasDensities"]) and bool(config["referenceHasDensities"]))


@functools.cache
def fieldCoefficientOf(scheme: int, plain: bool = False):
    """`fieldCoefficient_ij` with the gradient scheme `scheme` (a `GradientScheme` value)
    fixed at code generation (``wp.static``): no scheme branch in the pair loop and, for
    Naive, no read of f_i; with `plain`, the copy for `plainStates` calls. For the
    forward-only specialised kernels (`_specialized`); same bits as the generic one.
    ``scheme`` 0 without `plain`: the generic `fieldCoefficient_ij` itself."""
    if not scheme and not plain:
        return fieldCoefficient_ij
    return _fieldCoefficientFunction(int(scheme), plain)


@functools.cache
def fieldCoefficientValuesVJPOf(scheme: int):
    """The adjoint of `fieldCoefficient_ij` w.r.t. the field values alone, for `plainStates`
    calls with the gradient scheme `scheme` fixed at code generation: ``valuesVJP(i, j, a,
    F, q, r, gValues, adj_c)`` scatters `adj_c` (the pair's u . G) into the values' adjoint
    ``gValues`` (query rows first, then the reference rows). The arithmetic of
    `fieldCoefficientVJP_ij`'s value terms (the same bits), without its run-time tests:
    the Gradient's reverse kernel of a call that asks for the values' gradient only."""
    scheme = int(scheme)

    def valuesVJP(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                  gValues: Any, adj_c: Any):
        jr = referenceBase(gValues, q, F) + j * F + a
        if wp.static(scheme == 2):
            rho_i = q.densities[i]
            rho_j = r.densities[j]
            m_j = r.masses[j]
            wp.atomic_add(gValues, i * F + a, adj_c * m_j / rho_i)
            wp.atomic_add(gValues, jr, adj_c * m_j * rho_i / (rho_j * rho_j))
        else:
            V_j = r.masses[j] / r.densities[j]
            wp.atomic_add(gValues, jr, adj_c * V_j)
            if wp.static(scheme == 3):
                wp.atomic_sub(gValues, i * F + a, adj_c * V_j)
            elif wp.static(scheme == 4):
                wp.atomic_add(gValues, i * F + a, adj_c * V_j)

    return wp.func(valuesVJP, name=f"fieldCoefficientValuesVJP_s{scheme}", module="unique")


@wp.func
def omegaTangents_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, corr: Any,
                     t: Any, divideQuery: wp.bool):
    """The tangents of the values a pair reads under grad-h, from the Omegas' tangents
    alone: d(f_j / Omega_j) = -(f_j / Omega_j) dOmega_j / Omega_j, and the same for f_i when
    `divideQuery` (0 without grad-h, without a tangent, or for f_i otherwise)."""
    f_i, f_j = fieldValues_ij(i, j, a, F, q, corr, t.values, divideQuery)
    df_i = type(f_j)(0.0)
    df_j = type(f_j)(0.0)
    useGradH, omega_j = getGradH_j(corr, j)
    if useGradH:
        if t.hasROmegas:
            df_j = -f_j * t.rOmegas[j] / omega_j
        if divideQuery and t.hasQOmegas:
            useGradH_i, omega_i = getGradH_i(corr, i)
            df_i = -f_i * t.qOmegas[i] / omega_i
    return df_i, df_j


@wp.func
def coefficientJVP_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                      corr: Any, ks: Any, t: Any, consistent: wp.bool, divideQuery: wp.bool):
    """(c_ij[a], dc_ij[a]) of the call's gradient scheme for the frozen values ``t.values``,
    with the apparent volumes, or the Divergence's consistent ones when `consistent`
    (`consistentVolume_j`, `consistentVolumeJVP_j`): the geometry tangent (``f dV_j``, or the
    Symmetric rule dm_j rho_i S + m_j drho_i S - 2 m_j f_i drho_i / rho_i^2
    - 2 m_j rho_i f_j drho_j / rho_j^3 with S = f_i / rho_i^2 + f_j / rho_j^2) plus the value
    tangent's coefficient c(tValues)."""
    c = fieldCoefficient_ij(i, j, a, F, q, r, corr, ks, t.values, consistent, divideQuery)
    dc = type(c)(0.0)
    if t.hasValueTangent:
        dc = fieldCoefficient_ij(i, j, a, F, q, r, corr, ks, t.tValues, consistent, divideQuery)
    if t.hasQOmegas or t.hasROmegas:
        # c is linear in the values it reads: the Omegas' share is c of their tangents
        df_i, df_j = omegaTangents_ij(i, j, a, F, q, corr, t, divideQuery)
        dc = dc + coefficientOfValues_ij(i, j, df_i, df_j, q, r, corr, ks, consistent)
    if t.hasRMasses or t.hasQDensities or t.hasRDensities or t.hasRVolumes:
        f_i, f_j = fieldValues_ij(i, j, a, F, q, corr, t.values, divideQuery)
        scheme = ks.gradientMode
        if scheme == 2:
            if q.hasDensities and r.hasDensities:
                rho_i = q.densities[i]
                rho_j = r.densities[j]
                m_j = r.masses[j]
                S = f_i / (rho_i * rho_i) + f_j / (rho_j * rho_j)
                if t.hasRMasses:
                    dc = dc + t.rMasses[j] * rho_i * S
                if t.hasQDensities:
                    drho_i = t.qDensities[i]
                    dc = dc + m_j * drho_i * S - type(c)(2.0) * m_j * f_i * drho_i / (
                        rho_i * rho_i)
                if t.hasRDensities:
                    drho_j = t.rDensities[j]
                    dc = dc - type(c)(2.0) * m_j * rho_i * f_j * drho_j / (
                        rho_j * rho_j * rho_j)
        else:
            dV = type(c)(0.0)
            if consistent:
                dV = consistentVolumeJVP_j(q, r, corr, t, i, j)
            else:
                dV = apparentVolumeJVP_j(r, corr, t, j)
            if scheme == 3:
                dc = dc + (f_j - f_i) * dV
            elif scheme == 4:
                dc = dc + (f_j + f_i) * dV
            else:
                dc = dc + f_j * dV
    return c, dc


@wp.func
def fieldCoefficientJVP_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                           corr: Any, ks: Any, t: Any, divideQuery: wp.bool):
    """`coefficientJVP_ij` with the apparent volumes (every operator but the Divergence's
    consistent mode)."""
    return coefficientJVP_ij(i, j, a, F, q, r, corr, ks, t, False, divideQuery)


@wp.func
def fieldCoefficientVJP_ij(i: wp.int32, j: wp.int32, a: wp.int32, F: wp.int32, q: Any, r: Any,
                           corr: Any, ks: Any, p: Any, adj_c: Any):
    """Scatter the adjoint `adj_c` of `fieldCoefficient_ij` (``consistent=False``,
    ``divideQuery=False``, no grad-h: the Gradient's coefficient) into the reverse pack `p`:
    the values f_i, f_j, the masses, the densities and the reference volumes, each behind its
    presence flag. The exact partial derivatives of the four schemes (module table)."""
    jr = referenceBase(p.values, q, F) + j * F + a
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
def densityPairVJP_ij(i: wp.int32, j: wp.int32, r: Any, p: Any, u: Any, W: Any, G: Any,
                      wh_i: Any, wh_j: Any):
    """The adjoint of the Density's pair term m_j W_ij for the row cotangent `u`, given
    (W, grad W, dW/dh_i, dW/dh_j) of the pair: scatters -u m_j G to x_j, u m_j dW/dh to h_i
    and h_j and u W to m_j; returns the x_i adjoint u m_j G. The one definition behind the
    generic and the specialised reverse kernels (`density.densityVJPPairTerm`,
    `_specialized`)."""
    um = u * r.masses[j]
    res = um * G
    if p.hasRPositions:
        wp.atomic_sub(p.rPositions, j, res)
    if p.hasQSupports:
        wp.atomic_add(p.qSupports, i, um * wh_i)
    if p.hasRSupports:
        wp.atomic_add(p.rSupports, j, um * wh_j)
    if p.hasRMasses:
        wp.atomic_add(p.rMasses, j, u * W)
    return res


@wp.func
def interpolatePairVJP_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                          corr: Any, p: Any, u: Any, W: Any, G: Any, wh_i: Any, wh_j: Any):
    """The adjoint of the Interpolate's pair term f_j[k] V_j W_ij for the row cotangent `u`,
    given (W, grad W, dW/dh_i, dW/dh_j) of the pair and the frozen reference values
    ``p.values``: scatters u V_j W to f_j[k], -u f_j V_j G to x_j, u f_j V_j dW/dh to h_i and
    h_j and u f_j W to V_j's inputs (`apparentVolumeVJP_j`); returns the x_i adjoint
    u f_j V_j G. The one definition behind the generic and the specialised reverse kernels
    (`interpolate.interpolateVJPPairTerm`, `_specialized`)."""
    jr = j * F + k
    V_j = apparentVolume_j(r, corr, j)
    a = u * p.values[jr]
    aW = a * V_j
    res = aW * G
    if p.hasRPositions:
        wp.atomic_sub(p.rPositions, j, res)
    if p.hasQSupports:
        wp.atomic_add(p.qSupports, i, aW * wh_i)
    if p.hasRSupports:
        wp.atomic_add(p.rSupports, j, aW * wh_j)
    apparentVolumeVJP_j(r, corr, j, a * W, p)
    if p.hasValues:
        wp.atomic_add(p.gValues, jr, u * V_j * W)
    return res


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


# --- Divergence: the contraction of the coefficients with G_ij ---------------------------------


@wp.func
def contractedIndex(delta: wp.int32, p: wp.int32, P: wp.int32, d: wp.int32, dotMode: wp.bool):
    """The Divergence's flat field index of (contracted axis delta, remaining index p) in a
    field of P = F / d remaining entries: ``delta P + p``, or ``p d + delta`` in dot mode (the
    last field axis contracted)."""
    idx = delta * P + p
    if dotMode:
        idx = p * d + delta
    return idx


@wp.func
def divergenceCoefficients_ij(i: wp.int32, j: wp.int32, p: wp.int32, F: wp.int32, q: Any,
                              r: Any, corr: Any, ks: Any, values: Any, d: wp.int32,
                              like: Any):
    """The d-vector (c_ij[idx(delta, p)])_delta of the Divergence's pair term
    sum_delta c_ij[idx(delta, p)] G_ij[delta] (the Gradient scheme's coefficient, not the
    consistent volumes; `like` gives the vector type): the cotangent of G_ij is u times it.
    For reverse kernels only (components set by index)."""
    c = type(like)()
    for delta in range(d):
        c[delta] = fieldCoefficient_ij(i, j, contractedIndex(delta, p, F / d, d,
                                                             ks.divergenceMode),
                                       F, q, r, corr, ks, values, False, True)
    return c


@wp.func
def divergencePairVJP_ij(i: wp.int32, j: wp.int32, p: wp.int32, F: wp.int32, q: Any, r: Any,
                         corr: Any, ks: Any, pk: Any, u: Any, G: Any, Hg: Any, gh_i: Any,
                         gh_j: Any, d: wp.int32):
    """The adjoint of the Divergence's pair term sum_delta c_ij[idx(delta, p)] G_ij[delta]
    for the row cotangent `u`, given (G, H g, g . dG/dh_i, g . dG/dh_j) of the pair for the
    G cotangent g = u c_ij (`divergenceCoefficients_ij`): scatters u G[delta] dc to the
    inputs of each coefficient (`fieldCoefficientVJP_ij`), -H g to x_j and g . dG/dh to h_i
    and h_j; returns the x_i adjoint H g. The one definition behind the generic and the
    specialised reverse kernels."""
    for delta in range(d):
        fieldCoefficientVJP_ij(i, j, contractedIndex(delta, p, F / d, d, ks.divergenceMode),
                               F, q, r, corr, ks, pk, u * G[delta])
    scatterGeometryAdjoint_ij(i, j, pk, Hg, gh_i, gh_j)
    return Hg


@wp.func
def scatterGeometryAdjoint_ij(i: wp.int32, j: wp.int32, pk: Any, Hg: Any, gh_i: Any,
                              gh_j: Any):
    """Scatter a pair's geometry adjoints into the reverse pack `pk`: -H g to x_j (the x_i
    adjoint H g is summed by the caller's thread) and g . dG/dh to h_i and h_j, each behind
    its presence flag."""
    if pk.hasRPositions:
        wp.atomic_sub(pk.rPositions, j, Hg)
    if pk.hasQSupports:
        wp.atomic_add(pk.qSupports, i, gh_i)
    if pk.hasRSupports:
        wp.atomic_add(pk.rSupports, j, gh_j)


# --- Curl: G_ij x c_ij ----------------------------------------------------------------------------


@wp.func
def curlAxes(k: wp.int32, P: wp.int32, d: wp.int32):
    """(a1, a2, s) of the Curl's output component k: (G x c[:, s])_a = G[a1] c[a2 P + s] -
    G[a2] c[a1 P + s] with a1 = (a + 1) % 3, a2 = (a + 2) % 3 and k = a P + s in 3D; the z
    component (a1 = 0, a2 = 1, s = k) in 2D. The one index map of every Curl kernel."""
    a1 = wp.int32(0)
    a2 = wp.int32(1)
    s = k
    if d == 3:
        a = k / P
        s = k - a * P
        a1 = (a + 1) - 3 * ((a + 1) / 3)
        a2 = (a + 2) - 3 * ((a + 2) / 3)
    return a1, a2, s


@wp.func
def curlPairVJP_ij(i: wp.int32, j: wp.int32, F: wp.int32, q: Any, r: Any, corr: Any, ks: Any,
                   pk: Any, u: Any, G: Any, Hg: Any, gh_i: Any, gh_j: Any, a1: wp.int32,
                   a2: wp.int32, s: wp.int32, P: wp.int32):
    """The adjoint of the Curl's pair term G[a1] c[a2 P + s] - G[a2] c[a1 P + s] for the row
    cotangent `u`, given (G, H g, g . dG/dh_i, g . dG/dh_j) of the pair for the G cotangent
    g (u c[a2 P + s] on axis a1, -u c[a1 P + s] on axis a2): scatters u G[a1] and -u G[a2]
    to the two coefficients' inputs and the geometry adjoints; returns the x_i adjoint H g.
    The one definition behind the generic and the specialised reverse kernels."""
    fieldCoefficientVJP_ij(i, j, a2 * P + s, F, q, r, corr, ks, pk, u * G[a1])
    fieldCoefficientVJP_ij(i, j, a1 * P + s, F, q, r, corr, ks, pk, -u * G[a2])
    scatterGeometryAdjoint_ij(i, j, pk, Hg, gh_i, gh_j)
    return Hg


# --- Laplacian: the scheme scale s_ij and the pair difference q_ij = (f_j - f_i) s_ij ------------

#: the fixed regularisers of the Laplacian's geometric factor for both precisions
#: (n_ij = x_ij / (r + 1e-8 h_ij); Default divides by r + 1e-12 h_ij), used by the generic
#: and the specialised kernels, converted to the call's scalar type (a bare float literal in a
#: Warp kernel stays float32, even in a float64 overload)
LAPLACIAN_REG_N = 1.0e-8
LAPLACIAN_REG_DEFAULT = 1.0e-12


@wp.func
def laplacianScale_ij(i: wp.int32, j: wp.int32, q: Any, r: Any, corr: Any, ks: Any):
    """s_ij: m_j rho_i / rho_j^2 under the Symmetric scheme (volumes ignored; 0 without
    densities), else V_j (`apparentVolume_j`)."""
    scale = r.masses.dtype(0.0)
    if ks.gradientMode == 2:
        if q.hasDensities and r.hasDensities:
            rho_j = r.densities[j]
            scale = r.masses[j] * q.densities[i] / (rho_j * rho_j)
    else:
        scale = apparentVolume_j(r, corr, j)
    return scale


@wp.func
def laplacianScaleJVP_ij(i: wp.int32, j: wp.int32, q: Any, r: Any, corr: Any, ks: Any, t: Any):
    """ds_ij: Symmetric dm_j rho_i / rho_j^2 + m_j drho_i / rho_j^2 - 2 m_j rho_i drho_j /
    rho_j^3, else dV_j (`apparentVolumeJVP_j`)."""
    dscale = r.masses.dtype(0.0)
    if ks.gradientMode == 2:
        if q.hasDensities and r.hasDensities:
            rho_i = q.densities[i]
            rho_j = r.densities[j]
            m_j = r.masses[j]
            rho_j2 = rho_j * rho_j
            if t.hasRMasses:
                dscale = dscale + t.rMasses[j] * rho_i / rho_j2
            if t.hasQDensities:
                dscale = dscale + m_j * t.qDensities[i] / rho_j2
            if t.hasRDensities:
                dscale = dscale - r.masses.dtype(2.0) * m_j * rho_i * t.rDensities[j] / (
                    rho_j2 * rho_j)
    else:
        dscale = apparentVolumeJVP_j(r, corr, t, j)
    return dscale


@wp.func
def laplacianDifference_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                           corr: Any, ks: Any, values: Any):
    """q_ij[k] = (f_j - f_i) s_ij (`laplacianScale_ij`); f / Omega on both sides under
    grad-h. values = [query N_q F | reference N_r F] (or one block: `referenceBase`)."""
    f_i, f_j = fieldValues_ij(i, j, k, F, q, corr, values, True)
    return (f_j - f_i) * laplacianScale_ij(i, j, q, r, corr, ks)


@functools.cache
def laplacianDifferenceOf(scheme: int):
    """`laplacianDifference_ij` for `plainStates` calls with the gradient scheme `scheme`
    fixed at code generation (Symmetric 2: s_ij = m_j rho_i / rho_j^2, else m_j / rho_j):
    the same arithmetic without run-time tests, so the same bits."""
    ofValues = laplacianDifferenceOfValues(scheme)

    def laplacianDifference_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                               r: Any, corr: Any, ks: Any, values: Any):
        return ofValues(i, j, values[i * F + k], values[referenceBase(values, q, F) + j * F + k],
                        q, r)

    return wp.func(laplacianDifference_ij, name=f"laplacianDifference_g{int(scheme)}p_ij",
                   module="unique")


@functools.cache
def laplacianDifferenceOfValues(scheme: int):
    """``(i, j, f_i, f_j, q, r) -> (f_j - f_i) s_ij``: `laplacianDifferenceOf`'s arithmetic
    for values read by the caller."""
    symmetric = int(scheme) == 2

    def laplacianDifferenceOfValues_ij(i: wp.int32, j: wp.int32, f_i: Any, f_j: Any, q: Any,
                                       r: Any):
        scale = type(f_j)(0.0)
        if wp.static(symmetric):
            rho_j = r.densities[j]
            scale = r.masses[j] * q.densities[i] / (rho_j * rho_j)
        else:
            scale = r.masses[j] / r.densities[j]
        return (f_j - f_i) * scale

    return wp.func(laplacianDifferenceOfValues_ij,
                   name=f"laplacianDifferenceOfValues_g{int(scheme)}p_ij", module="unique")


@wp.func
def laplacianDifferenceVJP_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                              r: Any, corr: Any, ks: Any, pk: Any, adj_q: Any):
    """Scatter the adjoint `adj_q` of `laplacianDifference_ij` (no grad-h) into the reverse
    pack `pk`: the values f_i, f_j, and through the scale s_ij the masses, the densities
    (Symmetric: m_j rho_i / rho_j^2) or the apparent volume V_j, each behind its flag."""
    jr = referenceBase(pk.values, q, F) + j * F + k
    iq = i * F + k
    diff = pk.values[jr] - pk.values[iq]
    scale = type(adj_q)(0.0)
    if ks.gradientMode == 2:
        if q.hasDensities and r.hasDensities:
            rho_i = q.densities[i]
            rho_j = r.densities[j]
            m_j = r.masses[j]
            irho2 = type(adj_q)(1.0) / (rho_j * rho_j)
            scale = m_j * rho_i * irho2
            adj_s = adj_q * diff
            if pk.hasRMasses:
                wp.atomic_add(pk.rMasses, j, adj_s * rho_i * irho2)
            if pk.hasQDensities:
                wp.atomic_add(pk.qDensities, i, adj_s * m_j * irho2)
            if pk.hasRDensities:
                wp.atomic_sub(pk.rDensities, j, adj_s * type(adj_q)(2.0) * scale / rho_j)
    else:
        scale = apparentVolume_j(r, corr, j)
        apparentVolumeVJP_j(r, corr, j, adj_q * diff, pk)
    if pk.hasValues:
        wp.atomic_add(pk.gValues, jr, adj_q * scale)
        wp.atomic_sub(pk.gValues, iq, adj_q * scale)


@wp.func
def laplacianDenominators_ij(r_ij: Any, h_ij: Any, scheme: wp.int32):
    """(D, E, the regulariser of E) of the Brookshaw (2) and Default (4) pair factors
    -2 (G . x_ij) / (D E): D = r + 1e-8 h_ij, E = D (Brookshaw) or r + 1e-12 h_ij
    (Default)."""
    reg = type(r_ij)(LAPLACIAN_REG_N)
    D = r_ij + reg * h_ij
    E = D
    regE = reg
    if scheme == 4:
        regE = type(r_ij)(LAPLACIAN_REG_DEFAULT)
        E = r_ij + regE * h_ij
    return D, E, regE


@wp.func
def laplacianPairVJP_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any, r: Any,
                        corr: Any, ks: Any, pk: Any, u: Any, q_k: Any, x_ij: Any, r_ij: Any,
                        D: Any, E: Any, regE: Any, G: Any, Hg: Any, gh_i: Any, gh_j: Any,
                        dh_i: Any, dh_j: Any):
    """The adjoint of the Brookshaw / Default pair term q_k phi, phi = -2 (G . x_ij) / (D E),
    for the row cotangent `u`, given (G, H g, g . dG/dh_i, g . dG/dh_j) of the pair for the G
    cotangent g = adj_a x_ij (adj_a = -2 u q_k / (D E), the adjoint of G . x_ij) and the
    partial derivatives (dh_i, dh_j) of h_ij: scatters u phi to q_k's inputs
    (`laplacianDifferenceVJP_ij`), the geometry adjoints (G . x_ij through x_ij and G, D and E
    through r_ij and h_ij) to x_j, h_i and h_j; returns the x_i adjoint. The one definition
    behind the generic and the specialised reverse kernels."""
    two = type(r_ij)(2.0)
    iDE = type(r_ij)(1.0) / (D * E)
    phi = -two * wp.dot(G, x_ij) * iDE
    laplacianDifferenceVJP_ij(i, j, k, F, q, r, corr, ks, pk, u * phi)
    adj_a = -two * u * q_k * iDE
    adj_D = -u * q_k * phi / D
    adj_E = -u * q_k * phi / E
    adj_h = adj_D * type(r_ij)(LAPLACIAN_REG_N) + adj_E * regE
    gx = Hg + adj_a * G + ((adj_D + adj_E) / r_ij) * x_ij
    scatterGeometryAdjoint_ij(i, j, pk, gx, gh_i + adj_h * dh_i, gh_j + adj_h * dh_j)
    return gx


@wp.func
def laplacianDifferenceJVP_ij(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, q: Any,
                              r: Any, corr: Any, ks: Any, t: Any):
    """(q_ij[k], dq_ij[k]) for the frozen values ``t.values``: dq = (f_j - f_i) ds_ij
    (`laplacianScaleJVP_ij`) plus the value tangent's q_ij(tValues) (q is linear in f) plus,
    under grad-h, the Omegas' tangents' (d(f_j / Omega_j) - d(f_i / Omega_i)) s_ij
    (`omegaTangents_ij`)."""
    q_k = laplacianDifference_ij(i, j, k, F, q, r, corr, ks, t.values)
    dq = type(q_k)(0.0)
    if t.hasGeometry:
        f_i, f_j = fieldValues_ij(i, j, k, F, q, corr, t.values, True)
        dq = (f_j - f_i) * laplacianScaleJVP_ij(i, j, q, r, corr, ks, t)
    if t.hasValueTangent:
        dq = dq + laplacianDifference_ij(i, j, k, F, q, r, corr, ks, t.tValues)
    if t.hasQOmegas or t.hasROmegas:
        df_i, df_j = omegaTangents_ij(i, j, k, F, q, corr, t, True)
        dq = dq + (df_j - df_i) * laplacianScale_ij(i, j, q, r, corr, ks)
    return q_k, dq
