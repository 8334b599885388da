"""Pair-level tests of the scheme coefficients (`operators._coefficients`): the value, JVP and
VJP functions of V_j, the gradient schemes' c_ij and the Laplacian's scale s_ij and pair
difference q_ij, evaluated by one test-only Warp kernel for random pairs (i, j, a).

For each case (gradient scheme x support scheme x dimension x scalar type; the default run a
covering subset in which every value of every axis appears, the full product marked slow) and
each correction variant (masses, volumes, volumes without densities, grad-h with f_j or both
f_i and f_j divided, consistent volumes):

* the values against an independent float64 NumPy evaluation of the pair coefficients' formulas
  (c_ij, V_j, s_ij, q_ij), and every output finite with the null placeholders filled with NaN
  (``WARPSPHCORE_NULL_FILL=sentinel``: no read of an absent density, volume or Omega, W61);
* the value returned by each JVP equals its value function bit for bit;
* each JVP (dc, dV, ds, dq: masses, densities, reference volumes and field values moved at
  once) against central differences of its value function, evaluated in float64;
* the adjoint identity <u, J v> = <J^T u, v> for each JVP/VJP pair (`fieldCoefficientJVP_ij` /
  `fieldCoefficientVJP_ij`, `apparentVolumeJVP_j` / `apparentVolumeVJP_j`), in the VJPs' scope
  (no grad-h), and for the Gradient's whole pair adjoint `gradientPairVJP_ij` (the adjoint of
  c_ij G_ij with given H and dG/dh, against dc G + c (H dx_ij + dG/dh_i dh_i + dG/dh_j dh_j)).

The support scheme does not enter any coefficient; it is swept so that the kernel-state struct
of every support mode reaches the functions unchanged. The structs are built as the operator
kernels get them: `arg_extract.extractStateInfo` for the particle, correction and kernel-state
structs, the tangent pack with null tangent placeholders for absent tangents (as
`jvpCommon.launchGeometryJVP`), the reverse pack with None for absent gradient buffers (as
`_reverse.vectorSeedLaunch`).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch
import warp as wp
from sph_reference import makeDomain, props

from warpSPHCore import (
    AdjacencyList,
    GradHState,
    GradientScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.autograd.arg_extract import extractStateInfo, structFor
from warpSPHCore.autograd.cache import getCachedWarpArray
from warpSPHCore.operators._coefficients import (
    apparentVolume_j,
    apparentVolumeJVP_j,
    apparentVolumeVJP_j,
    fieldCoefficient_ij,
    fieldCoefficientJVP_ij,
    fieldCoefficientVJP_ij,
    gradientPairVJP_ij,
    laplacianDifference_ij,
    laplacianDifferenceJVP_ij,
    laplacianScale_ij,
    laplacianScaleJVP_ij,
)
from warpSPHCore.util.fieldRegistry import FieldKind, nullField
from warpSPHCore.util.warpContext import warpDevice

# Forward-only and -O0: one small module, compiled once with its six overloads.
wp.set_module_options({"enable_backward": False, "optimization_level": 0})

F64 = torch.float64
NQ, NR, F, NPAIRS = 5, 7, 3, 40

# output columns per pair
C, CJ, DC, V, DV, S, DS, QL, QJ, DQ = range(10)
NOUT = 10
# (value column, tangent column) of each JVP
JVP_COLUMNS = {"c": (CJ, DC), "V": (V, DV), "s": (S, DS), "q": (QL, DQ)}
# VJP selector of the kernel -> the JVP column it is the adjoint of
VJP_COEFFICIENT, VJP_VOLUME = 1, 2
VJP_OF = {VJP_COEFFICIENT: DC, VJP_VOLUME: DV}


@wp.kernel
def _pairCoefficients(q: Any, r: Any, corr: Any, ks: Any, t: Any, p: Any,
                      pairs: wp.array(dtype=wp.int32), F: wp.int32, consistent: wp.bool,
                      divideQuery: wp.bool, vjp: wp.int32, u: wp.array(dtype=Any),
                      out: wp.array(dtype=Any)):
    """Thread n: pair (i, j, a) = pairs[3n : 3n + 3]; writes the ten columns above and, for
    `vjp` 1 / 2, scatters u[n] through `fieldCoefficientVJP_ij` / `apparentVolumeVJP_j`."""
    n = wp.tid()
    i = pairs[3 * n]
    j = pairs[3 * n + 1]
    a = pairs[3 * n + 2]
    c = fieldCoefficient_ij(i, j, a, F, q, r, corr, ks, t.values, consistent, divideQuery)
    cJ, dc = fieldCoefficientJVP_ij(i, j, a, F, q, r, corr, ks, t, divideQuery)
    qJ, dq = laplacianDifferenceJVP_ij(i, j, a, F, q, r, corr, ks, t)
    base = n * 10
    out[base + 0] = c
    out[base + 1] = cJ
    out[base + 2] = dc
    out[base + 3] = apparentVolume_j(r, corr, j)
    out[base + 4] = apparentVolumeJVP_j(r, corr, t, j)
    out[base + 5] = laplacianScale_ij(i, j, q, r, corr, ks)
    out[base + 6] = laplacianScaleJVP_ij(i, j, q, r, corr, ks, t)
    out[base + 7] = laplacianDifference_ij(i, j, a, F, q, r, corr, ks, t.values)
    out[base + 8] = qJ
    out[base + 9] = dq
    if vjp == 1:
        fieldCoefficientVJP_ij(i, j, a, F, q, r, corr, ks, p, u[n])
    elif vjp == 2:
        apparentVolumeVJP_j(r, corr, j, u[n], p)


@wp.kernel
def _gradientPairAdjoint(q: Any, r: Any, corr: Any, ks: Any, p: Any,
                         pairs: wp.array(dtype=wp.int32), F: wp.int32, u: wp.array(dtype=Any),
                         G: wp.array(dtype=Any), H: wp.array(dtype=Any),
                         dGdh_i: wp.array(dtype=Any), dGdh_j: wp.array(dtype=Any),
                         out: wp.array(dtype=Any)):
    """Thread n: `gradientPairVJP_ij` of pair (i, j, a) for the row cotangent u[n], with the
    pair's G, H u and u . dG/dh formed from the given G[n], H[n], dG/dh_i[n], dG/dh_j[n];
    out[n] = the returned x_i adjoint."""
    n = wp.tid()
    un = u[n]
    out[n] = gradientPairVJP_ij(pairs[3 * n], pairs[3 * n + 1], pairs[3 * n + 2], F, q, r,
                                corr, ks, p, un, G[n], H[n] * un, wp.dot(un, dGdh_i[n]),
                                wp.dot(un, dGdh_j[n]))


for _s in (wp.float32, wp.float64):
    for _d in (1, 2, 3):
        _V = wp.types.vector(length=_d, dtype=_s)
        wp.overload(_gradientPairAdjoint, {
            "q": structFor("particle", _d, _s), "r": structFor("particle", _d, _s),
            "corr": structFor("correction", _d, _s), "ks": structFor("kernelState", _d, _s),
            "p": structFor("cotangent", _d, _s), "u": wp.array(dtype=_V),
            "G": wp.array(dtype=_V), "H": wp.array(dtype=wp.types.matrix((_d, _d), _s)),
            "dGdh_i": wp.array(dtype=_V), "dGdh_j": wp.array(dtype=_V),
            "out": wp.array(dtype=_V)})
        wp.overload(_pairCoefficients, {
            "q": structFor("particle", _d, _s), "r": structFor("particle", _d, _s),
            "corr": structFor("correction", _d, _s), "ks": structFor("kernelState", _d, _s),
            "t": structFor("tangent", _d, _s), "p": structFor("cotangent", _d, _s),
            "u": wp.array(dtype=_s), "out": wp.array(dtype=_s)})

# --- cases -----------------------------------------------------------------------------------

SCHEMES = list(GradientScheme)
SUPPORTS = list(SupportScheme)
DIMS = (1, 2, 3)
DTYPES = (torch.float64, torch.float32)
# (volumes, densities, grad-h, divideQuery, consistent)
VARIANTS = {
    "masses": (False, True, False, False, False),
    "volumes": (True, True, False, False, False),
    "volumesNoDensities": (True, False, False, False, False),
    "gradH": (False, True, True, False, False),
    "gradHBothDivided": (True, True, True, True, False),
    "consistentMasses": (False, True, False, True, True),
    "consistentVolumes": (True, True, True, True, True),
}


def _covering():
    """Eight cases: every scheme with both scalar types, every support scheme and dimension."""
    return [(SCHEMES[c % 4], SUPPORTS[c % 6], DIMS[c % 3], DTYPES[(c // 4) % 2])
            for c in range(8)]


COVERING = _covering()
CASES = [pytest.param(*c, marks=() if c in COVERING else pytest.mark.slow,
                      id=f"{c[0].name}-{c[1].name}-{c[2]}d-{str(c[3])[6:]}")
         for c in itertools.product(SCHEMES, SUPPORTS, DIMS, DTYPES)]


def test_covering_subset_has_every_value():
    assert {c[0] for c in COVERING} == set(SCHEMES)
    assert {c[1] for c in COVERING} == set(SUPPORTS)
    assert {c[2] for c in COVERING} == set(DIMS)
    assert {c[3] for c in COVERING} == set(DTYPES)
    assert {(c[0], c[3]) for c in COVERING} == set(itertools.product(SCHEMES, DTYPES))


# --- inputs and launches ---------------------------------------------------------------------


def _inputs(d, variant, seed):
    """Float64 inputs of one case: fixed geometry and Omegas, and the differentiable inputs
    ``x`` (values, rMasses, qDensities, rDensities, rVolumes; None where absent) with a
    random tangent ``v`` of each, the pairs and the cotangent u."""
    volumes, densities, gradH, _, _ = VARIANTS[variant]
    g = torch.Generator().manual_seed(seed)

    def rand(n, lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=g, dtype=F64)

    fixed = {"qPositions": rand((NQ, d), -1.0, 1.0), "rPositions": rand((NR, d), -1.0, 1.0),
             "qSupports": rand(NQ, 0.3, 0.5), "rSupports": rand(NR, 0.3, 0.5),
             "qMasses": rand(NQ, 0.5, 1.5),
             "qOmegas": rand(NQ, 0.8, 1.2) if gradH else None,
             "rOmegas": rand(NR, 0.8, 1.2) if gradH else None}
    x = {"values": torch.randn((NQ + NR) * F, generator=g, dtype=F64),
         "rMasses": rand(NR, 0.5, 1.5),
         "qDensities": rand(NQ, 0.8, 1.2) if densities else None,
         "rDensities": rand(NR, 0.8, 1.2) if densities else None,
         "rVolumes": rand(NR, 0.05, 0.15) if volumes else None}
    v = {k: (None if t is None else torch.randn(t.shape, generator=g, dtype=F64))
         for k, t in x.items()}
    pairs = torch.stack([torch.randint(0, NQ, (NPAIRS,), generator=g),
                         torch.randint(0, NR, (NPAIRS,), generator=g),
                         torch.randint(0, F, (NPAIRS,), generator=g)], dim=1)
    u = torch.randn(NPAIRS, generator=g, dtype=F64)
    return fixed, x, v, pairs.to(torch.int32), u


def _launch(case, variant, device, fixed, x, v, pairs, u, dtype, vjp=0):
    """Evaluate the kernel on inputs cast to `dtype`; returns (out [NPAIRS, 10], the reverse
    pack's gradient buffers by input name, or None)."""
    qs, rs, corr, ks, t, p, grads, view, cast = _packs(case, variant, device, fixed, x, v,
                                                       dtype)
    out = torch.zeros(NPAIRS * NOUT, dtype=dtype, device=device)
    dev = warpDevice(device)
    wp.launch(_pairCoefficients, dim=NPAIRS,
              inputs=[qs, rs, corr, ks, t, p, view(pairs.to(device).reshape(-1).contiguous()),
                      F, VARIANTS[variant][4], VARIANTS[variant][3], vjp, view(cast(u))],
              outputs=[view(out)], device=dev)
    wp.synchronize_device(dev)
    out = out.reshape(NPAIRS, NOUT).to(F64).cpu()
    return out, ({k: g.to(F64).cpu() for k, g in grads.items()} if vjp else None)


def _packs(case, variant, device, fixed, x, v, dtype):
    """The structs of one evaluation on inputs cast to `dtype`: (q, r, corr, ks, the tangent
    pack, the reverse pack, its gradient buffers by input name, view, cast)."""
    scheme, support, d, _ = case
    volumes, densities, gradH, _, _ = VARIANTS[variant]
    s = wp.float64 if dtype == F64 else wp.float32

    def cast(t):
        return None if t is None else t.to(dtype=dtype, device=device).contiguous()

    fx, xx, vx = ({k: cast(t) for k, t in a.items()} for a in (fixed, x, v))
    kinds = torch.zeros(NQ, dtype=torch.int32, device=device)
    q = ParticleState(fx["qPositions"], fx["qSupports"], fx["qMasses"], kinds,
                      xx["qDensities"])
    r = ParticleState(fx["rPositions"], fx["rSupports"], xx["rMasses"],
                      torch.zeros(NR, dtype=torch.int32, device=device), xx["rDensities"])
    i64 = dict(dtype=torch.int64, device=device)
    i32 = dict(dtype=torch.int32, device=device)
    adj = AdjacencyList(torch.zeros(1, **i64), torch.zeros(1, **i64),
                        torch.tensor([1] + [0] * (NQ - 1), **i32),
                        torch.tensor([0] + [1] * (NQ - 1), **i32), NQ, NR)
    pr = props(WarpOperation.Gradient, gradientMode=scheme, supportMode=support)
    flat, build = extractStateInfo(
        q, pr, makeDomain(d, dtype, device), referenceVolumes=xx["rVolumes"], adjacency=adj,
        referenceParticles=r, gradHState=GradHState(fx["qOmegas"], fx["rOmegas"]) if gradH
        else None)
    qs, rs, _, _, _, _, corr, ks = build([getCachedWarpArray(t, use_cache=False)
                                           for t in flat])

    def view(t):
        return getCachedWarpArray(t, use_cache=False)

    def tangentNull(kind):
        return nullField(kind, d, device, dtype, tangent=True).array

    # the tangent pack: every input of the coefficients moves (values: tValues)
    t = structFor("tangent", d, s)()
    for name, kind in (("qPositions", FieldKind.VECTOR), ("rPositions", FieldKind.VECTOR),
                       ("qSupports", FieldKind.SCALAR), ("rSupports", FieldKind.SCALAR),
                       ("A", FieldKind.SCALAR), ("B", FieldKind.VECTOR),
                       ("gradA", FieldKind.VECTOR), ("gradB", FieldKind.MATRIX),
                       ("L", FieldKind.MATRIX)):
        setattr(t, name, tangentNull(kind))
    for flag in ("hasQPositions", "hasRPositions", "hasQSupports", "hasRSupports", "hasCRK",
                 "hasRenormalization"):
        setattr(t, flag, False)
    t.values = view(xx["values"])
    t.tValues = view(vx["values"])
    t.hasValueTangent = True
    for name in ("rMasses", "qDensities", "rDensities", "rVolumes"):
        present = vx[name] is not None
        setattr(t, name, view(vx[name]) if present else tangentNull(FieldKind.SCALAR))
        setattr(t, "has" + name[0].upper() + name[1:], present)
    t.hasGeometry = True

    # the reverse pack: one zeroed buffer per present input, None (flag False) elsewhere
    p = structFor("cotangent", d, s)()
    p.values = view(xx["values"])
    grads = {}
    for name, flag in (("gValues", "hasValues"), ("rMasses", "hasRMasses"),
                       ("qDensities", "hasQDensities"), ("rDensities", "hasRDensities"),
                       ("rVolumes", "hasRVolumes")):
        key = "values" if name == "gValues" else name
        if xx[key] is not None:
            grads[key] = torch.zeros_like(xx[key])
            setattr(p, name, view(grads[key]))
        setattr(p, flag, xx[key] is not None)
    for flag in ("hasQPositions", "hasQSupports", "hasRPositions", "hasRSupports"):
        setattr(p, flag, False)
    return qs, rs, corr, ks, t, p, grads, view, cast


def _reference(case, variant, fixed, x, pairs):
    """Columns C, V, S, QL from their formulas (NumPy)."""
    scheme = int(case[0])
    volumes, densities, gradH, divideQuery, consistent = VARIANTS[variant]
    n = {k: (None if t is None else t.numpy()) for k, t in {**fixed, **x}.items()}
    i, j, a = (pairs[:, k].numpy().astype(np.int64) for k in range(3))
    f_i = n["values"][i * F + a]
    f_j = n["values"][NQ * F + j * F + a]
    fiBoth = f_i
    if gradH:
        f_j = f_j / n["rOmegas"][j]
        fiBoth = f_i / n["qOmegas"][i]
    fiC = fiBoth if divideQuery else f_i
    m_j = n["rMasses"][j]
    zero = np.zeros(NPAIRS)
    rho_i = n["qDensities"][i] if densities else None
    rho_j = n["rDensities"][j] if densities else None
    if volumes:
        V_j = n["rVolumes"][j]
        Vc = V_j * rho_j / rho_i if densities else zero
    else:
        V_j = m_j / rho_j if densities else zero
        Vc = m_j / rho_i if densities else zero
    Vs = Vc if consistent else V_j
    if scheme == 2:
        c = m_j * rho_i * (fiC / rho_i**2 + f_j / rho_j**2) if densities else zero
        s = m_j * rho_i / rho_j**2 if densities else zero
    else:
        c = {1: f_j, 3: f_j - fiC, 4: f_j + fiC}[scheme] * Vs
        s = V_j
    return {C: c, V: V_j, S: s, QL: (f_j - fiBoth) * s}


def _f32(t):
    """`t` rounded to float32, kept in float64 (None stays None)."""
    return None if t is None else t.float().double()


def _assertClose(actual, expected, rtol, atol, what):
    scale = max(1.0, float(np.abs(expected).max()))
    err = np.abs(actual - expected)
    bad = err > atol * scale + rtol * np.abs(expected)
    assert not bad.any(), (f"{what}: max error {err.max():.3e} at pair "
                           f"{int(np.argmax(err))} (rtol {rtol}, atol {atol}, scale {scale:.3e})")


# --- the test --------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme, support, d, dtype", CASES)
def test_pair_coefficients(device, monkeypatch, scheme, support, d, dtype):
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", "sentinel")  # NaN in every null placeholder
    case = (scheme, support, d, dtype)
    f32 = dtype == torch.float32
    rtolV, atolV = (1e-5, 1e-6) if f32 else (1e-12, 1e-14)
    rtolFD, atolFD = (1e-4, 1e-5) if f32 else (1e-7, 1e-9)
    for k, variant in enumerate(VARIANTS):
        fixed, x, v, pairs, u = _inputs(d, variant, 100 * d + 10 * int(scheme) + k)
        if f32:  # every launch on the same (float32-representable) inputs
            fixed, x, v = ({n: _f32(t) for n, t in a.items()} for a in (fixed, x, v))
            u = _f32(u)
        tag = f"{scheme.name}/{variant}"
        out, _ = _launch(case, variant, device, fixed, x, v, pairs, u, dtype)
        assert torch.isfinite(out).all(), f"{tag}: a null placeholder was read"

        # values against NumPy; the JVPs' values are the value functions'
        ref = _reference(case, variant, fixed, x, pairs)
        for col, name in ((C, "c_ij"), (V, "V_j"), (S, "s_ij"), (QL, "q_ij")):
            _assertClose(out[:, col].numpy(), ref[col], rtolV, atolV, f"{tag} {name}")
        assert torch.equal(out[:, QJ], out[:, QL]), tag
        if not VARIANTS[variant][4]:  # consistent: c_ij differs from the JVP's (non-consistent)
            assert torch.equal(out[:, CJ], out[:, C]), tag

        # JVPs against central differences of the value functions (float64 launches)
        eps = 1e-6
        plus, _ = _launch(case, variant, device, fixed,
                          {n: None if t is None else t + eps * v[n] for n, t in x.items()},
                          v, pairs, u, F64)
        minus, _ = _launch(case, variant, device, fixed,
                           {n: None if t is None else t - eps * v[n] for n, t in x.items()},
                           v, pairs, u, F64)
        for name, (valCol, tanCol) in JVP_COLUMNS.items():
            fd = ((plus[:, valCol] - minus[:, valCol]) / (2 * eps)).numpy()
            _assertClose(out[:, tanCol].numpy(), fd, rtolFD, atolFD, f"{tag} d{name} vs FD")
        if VARIANTS[variant][1] or scheme != GradientScheme.Symmetric:  # else c = q = 0
            assert float(out[:, DC].abs().max()) > 0 and float(out[:, DQ].abs().max()) > 0, tag

        # adjoint identity <u, J v> = <J^T u, v> (the VJPs have no grad-h)
        if VARIANTS[variant][2]:
            continue
        for vjp, tanCol in VJP_OF.items():
            _, grads = _launch(case, variant, device, fixed, x, v, pairs, u, dtype, vjp=vjp)
            lhs = float((u * out[:, tanCol]).sum())
            rhs = sum(float((g * v[n]).sum()) for n, g in grads.items())
            scale = float((u * out[:, tanCol]).abs().sum())
            assert abs(lhs - rhs) <= (1e-5 if f32 else 1e-12) * max(scale, 1e-30), (
                f"{tag} VJP {vjp}: <u, Jv> = {lhs!r}, <J^T u, v> = {rhs!r}")


@pytest.mark.parametrize("scheme, support, d, dtype", CASES)
def test_gradient_pair_vjp_adjoint_identity(device, scheme, support, d, dtype):
    """<u, J v> = <J^T u, v> for the Gradient's pair term c_ij[a] G_ij (a d-vector per pair)
    over every input the reverse kernel differentiates: values, masses, densities, reference
    volumes (through c_ij: `fieldCoefficientJVP_ij` gives dc), x_i, x_j and h_i, h_j (through
    G_ij, with random symmetric H and dG/dh given to both sides). In the reverse kernel's
    scope: no grad-h, non-consistent volumes."""
    case = (scheme, support, d, dtype)
    f32 = dtype == torch.float32
    for k, variant in enumerate(("masses", "volumes", "volumesNoDensities")):
        seed = 1000 + 100 * d + 10 * int(scheme) + k
        fixed, x, v, pairs, _ = _inputs(d, variant, seed)
        g = torch.Generator().manual_seed(seed + 1)
        u = torch.randn(NPAIRS, d, generator=g, dtype=F64)
        G = torch.randn(NPAIRS, d, generator=g, dtype=F64)
        A = torch.randn(NPAIRS, d, d, generator=g, dtype=F64)
        H = A + A.transpose(1, 2)
        gi, gj = (torch.randn(NPAIRS, d, generator=g, dtype=F64) for _ in range(2))
        dxq = torch.randn(NQ, d, generator=g, dtype=F64)
        dxr = torch.randn(NR, d, generator=g, dtype=F64)
        dhq = torch.randn(NQ, generator=g, dtype=F64)
        dhr = torch.randn(NR, generator=g, dtype=F64)
        if f32:
            fixed, x, v = ({n: _f32(t) for n, t in a_.items()} for a_ in (fixed, x, v))
            u, G, H, gi, gj = (_f32(t) for t in (u, G, H, gi, gj))
        # J v: dc G + c (H (dx_i - dx_j) + dG/dh_i dh_i + dG/dh_j dh_j), with c and dc from
        # the coefficient kernel (the values' and the other inputs' tangents together)
        out, _ = _launch(case, variant, device, fixed, x, v, pairs, torch.zeros(NPAIRS), dtype)
        c, dc = out[:, CJ], out[:, DC]
        i, j = pairs[:, 0].long(), pairs[:, 1].long()
        dG = (torch.einsum("nab,nb->na", H, dxq[i] - dxr[j]) + gi * dhq[i][:, None]
              + gj * dhr[j][:, None])
        Jv = dc[:, None] * G + c[:, None] * dG
        lhs = float((u * Jv).sum())

        # J^T u: the reverse pack scatters into the inputs' buffers, x_i's is returned
        qs, rs, corr, ks, _, p, grads, view, cast = _packs(case, variant, device, fixed, x,
                                                           v, dtype)
        geo = {"rPositions": torch.zeros(NR, d, dtype=dtype, device=device),
               "qSupports": torch.zeros(NQ, dtype=dtype, device=device),
               "rSupports": torch.zeros(NR, dtype=dtype, device=device)}
        vec = wp.types.vector(length=d, dtype=wp.float64 if dtype == F64 else wp.float32)
        p.rPositions = wp.from_torch(geo["rPositions"], dtype=vec)
        p.qSupports = view(geo["qSupports"])
        p.rSupports = view(geo["rSupports"])
        p.hasRPositions = p.hasQSupports = p.hasRSupports = True
        mat = wp.types.matrix((d, d), vec._wp_scalar_type_)
        res = torch.zeros(NPAIRS, d, dtype=dtype, device=device)
        dev = warpDevice(device)

        def arr(t, dt, cast=cast):
            return wp.from_torch(cast(t).contiguous(), dtype=dt)

        wp.launch(_gradientPairAdjoint, dim=NPAIRS,
                  inputs=[qs, rs, corr, ks, p, view(pairs.to(device).reshape(-1).contiguous()),
                          F, arr(u, vec), arr(G, vec), arr(H, mat), arr(gi, vec),
                          arr(gj, vec)],
                  outputs=[wp.from_torch(res, dtype=vec)], device=dev)
        wp.synchronize_device(dev)
        rhs = sum(float((gr.to(F64).cpu() * v[n]).sum()) for n, gr in grads.items())
        gx_i = torch.zeros(NQ, d, dtype=F64).index_add_(0, i, res.to(F64).cpu())
        rhs += float((gx_i * dxq).sum())
        rhs += float((geo["rPositions"].to(F64).cpu() * dxr).sum())
        rhs += float((geo["qSupports"].to(F64).cpu() * dhq).sum())
        rhs += float((geo["rSupports"].to(F64).cpu() * dhr).sum())
        scale = float((u * Jv).abs().sum())
        if scheme == GradientScheme.Symmetric and not VARIANTS[variant][1]:
            assert scale == 0 and rhs == 0  # c_ij = 0 without densities
            continue
        assert scale > 0
        assert abs(lhs - rhs) <= (1e-5 if f32 else 1e-12) * scale, (
            f"{scheme.name}/{variant}: <u, Jv> = {lhs!r}, <J^T u, v> = {rhs!r}")
