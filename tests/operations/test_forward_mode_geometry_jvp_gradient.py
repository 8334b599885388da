"""Gradient geometry JVP (Tier 2).

`warpOperationJVP` with geometry tangents (positions, supports, reference masses, densities of
both sets, reference volumes, CRK and renormalization tangents) and a fused value tangent,
against J·v of the primal `warpOperation` (reverse-mode Jacobian, rtol 1e-8) and central
differences (rtol 1e-5), float64, frozen neighbour structures with a 1e-3 h margin, ±15 %
supports.

Matrix: 4 gradient schemes x corrections {none, volumes, CRK, renormalization, CRK + renorm
(+ volumes)} on aliased 2D sets, the support schemes Gather, MeanSymmetric,
KernelMeanSymmetric and SuperSymmetric cycled; distinct and cloned reference sets with vector
and matrix fields; 1D; 3D (slow); the dual route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit route; grid == CSR and adjacency=None == explicit list;
combined value + geometry == the sum, and a zero value tangent leaves the geometry result
bit-unchanged; mixed kinds in three operation modes; float32 against the float64 J·v; the
scope's rejections; a float64 reverse-over-forward gradcheck of the JVP output.
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, dualJVP, jacobianJVP
from sph_reference import (
    GRADCHECK,
    makeDomain,
    marginCloud,
    neighbourStructure,
    props,
)
from value_jvp_cases import (
    F64,
    Case,
    aliased,
    callArgs,
    distinct,
    tangents,
)

from warpSPHCore import (
    CRKTangentState,
    GradientScheme,
    KernelFunctions,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

GRAD = WarpOperation.Gradient
SUPPORTS = [SupportScheme.Gather, SupportScheme.MeanSymmetric,
            SupportScheme.KernelMeanSymmetric, SupportScheme.SuperSymmetric]
CORRS = ["none", "volumes", "crk", "renorm", "crk+renorm+volumes"]


# --------------------------------------------------------------------------------------
# J·v and central differences
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("corr", CORRS)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_gradient_jvp_schemes_aliased(device, scheme, corr):
    """Every tangent live at once (positions, supports, masses, densities, values, volumes,
    CRK, L); the dual route gives the same tangent."""
    k = CORRS.index(corr)
    support = SUPPORTS[(int(scheme) + k) % len(SUPPORTS)]
    q, r, dom = aliased(2, 12, 10 + k, device)
    pr = props(GRAD, gradientMode=scheme, supportMode=support)
    c = Case(q, r, dom, pr, "csr", corr, () if k % 2 == 0 else (2,), seed=20 + k)
    T = tangents(c.P, seed=30 + k)
    out = c.check(T, what=f"{scheme.name}/{support.name}/{corr}")
    assert out.shape == c.fn(*c.inputs()).shape and out.dtype == F64
    assert float(out.abs().max()) > 0.0
    dual = dualJVP(c.fn, c.inputs(), c.tangentList(T))
    assertClose(dual, out, rtol=1e-12, atol=1e-13, what="dual route vs explicit")


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_gradient_jvp_distinct(device, scheme, cloned):
    """Distinct query and reference sets (cloned: the reference repeats the query coordinates,
    coincident pairs r = 0 with CRK, where G(0) != 0; Poly6 is smooth there)."""
    k = int(scheme) + 4 * int(cloned)
    q, r, dom = distinct(2, 7, 9, 40 + k, device, cloned)
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(GRAD, kernel=kernel, gradientMode=scheme, supportMode=SUPPORTS[k % 4],
               calibrateNormalization=bool(k % 2), n_h=3.0)
    corr = ["crk+renorm+volumes", "crk", "renorm+volumes", "none"][k % 4]
    shape = [(2,), (), (2, 2), (2,)][k % 4]
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=50 + k)
    T = tangents(c.P, seed=60 + k)
    out = c.check(T, what=f"{scheme.name}/{corr}/{shape}")
    dual = dualJVP(c.fn, c.inputs(), c.tangentList(T))
    assertClose(dual, out, rtol=1e-12, atol=1e-13, what="dual route vs explicit")


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_gradient_jvp_1d(device, scheme):
    k = int(scheme)
    corr = ["none", "crk+renorm+volumes", "renorm", "crk"][k % 4]
    if k % 2:
        q, r, dom = aliased(1, 10, 70 + k, device)
    else:
        q, r, dom = distinct(1, 8, 9, 70 + k, device)
    pr = props(GRAD, gradientMode=scheme, supportMode=SUPPORTS[(k + 1) % 4])
    c = Case(q, r, dom, pr, ["grid", "csr"][k % 2], corr, [(), (1,)][k // 2 % 2], seed=80 + k)
    c.check(tangents(c.P, seed=90 + k), what=f"1D {scheme.name}/{corr}")


@pytest.mark.slow
def test_gradient_jvp_3d(device):
    q, r, dom = distinct(3, 5, 6, 95, device)
    pr = props(GRAD, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (3,), seed=96)
    c.check(tangents(c.P, seed=97), what="3D")


@pytest.mark.parametrize("which", ["positions", "supports", "masses", "densities", "volumes",
                                   "crk", "renorm"])
def test_gradient_jvp_single_channels(device, which):
    """One tangent channel at a time (distinct sets: each role separately), so a channel
    cannot hide behind another's error."""
    q, r, dom = distinct(2, 6, 8, 100, device)
    pr = props(GRAD, gradientMode=GradientScheme.Symmetric if which in ("densities", "masses")
               else GradientScheme.Difference, supportMode=SupportScheme.MeanSymmetric)
    corr = {"volumes": "volumes", "crk": "crk", "renorm": "crk+renorm"}.get(which, "none")
    c = Case(q, r, dom, pr, "csr", corr, (2,), seed=101)
    names = {"positions": ["qpos", "rpos"], "supports": ["qh", "rh"], "masses": ["rm"],
             "densities": ["qrho", "rrho"], "volumes": ["vol"], "crk": ["A", "B", "gA", "gB"],
             "renorm": ["L"]}[which]
    for sub in ([n] for n in names):
        T = tangents(c.P, seed=102, names=sub)
        out = c.check(T, fd=False, what=f"{which}: {sub}")
        assert float(out.abs().max()) > 0.0, sub


# --------------------------------------------------------------------------------------
# traversals, combined tangents, kinds, float32
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_gradient_jvp_traversals(device, distinctSets):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's)."""
    if distinctSets:
        q, r, dom = distinct(2, 8, 10, 110, device)
    else:
        q, r, dom = aliased(2, 12, 110, device)
    pr = props(GRAD, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2,), seed=111)
    T = tangents(c.P, seed=112)
    ref = c.check(T, fd=False, what="csr")
    grid = neighbourStructure("grid", q, dom, r)
    assertClose(c.jvp(T, adjacency=grid), ref, rtol=1e-12, atol=1e-13, what="grid vs csr")
    assertClose(c.jvp(T, adjacency=None), ref, rtol=1e-12, atol=1e-13, what="None vs csr")


def test_gradient_jvp_periodic(device):
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=120, domain=dom, hMean=0.6)
    pr = props(GRAD, gradientMode=GradientScheme.Naive, supportMode=SupportScheme.Gather)
    c = Case(q, None, dom, pr, "grid", "crk", (), seed=121)
    c.check(tangents(c.P, seed=122), what="periodic")


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_gradient_jvp_combined_is_sum(device, distinctSets):
    """value + geometry == value-only (Tier 1) + geometry-only; adding a zero value tangent
    leaves the geometry-only result bit-unchanged."""
    if distinctSets:
        q, r, dom = distinct(2, 7, 9, 130, device)
        vnames = ["fq", "fr"]
    else:
        q, r, dom = aliased(2, 12, 130, device)
        vnames = ["f"]
    for k, scheme in enumerate(GradientScheme):
        pr = props(GRAD, gradientMode=scheme, supportMode=SUPPORTS[k])
        c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes" if k % 2 else "volumes", (2,),
                 seed=131 + k)
        T = tangents(c.P, seed=140 + k)
        geo = {n: v for n, v in T.items() if n not in vnames}
        val = {n: T[n] for n in vnames}
        both = c.jvp(T)
        g = c.jvp(geo)
        v = c.jvp(val)
        assertClose(both, g + v, rtol=1e-12, atol=1e-13, what=f"{scheme.name} combined")
        zero = dict(geo, **{n: torch.zeros_like(c.P[n]) for n in vnames})
        assert torch.equal(c.jvp(zero), g), scheme.name
        # the value-only part is the primal on the tangent values (Tier 1, bit-exact)
        Pv = dict(c.P, **{n: T[n] for n in vnames})
        qs, kw = callArgs(Pv, q, r)
        assert torch.equal(v, warpOperation(qs, pr, dom, adjacency=c.adj, **kw)), scheme.name


@pytest.mark.parametrize("mode", [3, 9, 13])
def test_gradient_jvp_kinds(device, mode):
    """Mixed categories (kinds 0..3 cycled): the JVP equals J·v of the masked primal, and
    masked query rows are exactly 0."""
    dom = makeDomain(2, F64, device)
    kinds = [k % 4 for k in range(14)]
    q = marginCloud(14, 2, F64, device, seed=150, domain=dom, kinds=kinds)
    pr = props(GRAD, gradientMode=[GradientScheme.Difference, GradientScheme.Symmetric,
                                   GradientScheme.Naive][[3, 9, 13].index(mode)],
               supportMode=SupportScheme.KernelMeanSymmetric, operationMode=mode)
    c = Case(q, None, dom, pr, "csr", "crk+renorm", (2,), seed=151)
    out = c.check(tangents(c.P, seed=152), fd=False, what=f"mode {mode}")
    qMask = {3: [k == 0 for k in kinds], 9: [True] * 14, 13: [k != 2 for k in kinds]}[mode]
    masked = torch.tensor([not m for m in qMask], device=out.device)
    assert torch.equal(out[masked], torch.zeros_like(out[masked]))
    assert float(out[~masked].abs().max()) > 0.0


def test_gradient_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    q, r, dom = aliased(2, 12, 160, device)
    pr = props(GRAD, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=161)
    T = tangents(c.P, seed=162)
    ref = jacobianJVP(c.fn, c.inputs(), c.tangentList(T))
    f32 = torch.float32
    q32 = ParticleState(q.positions.to(f32), q.supports.to(f32), q.masses.to(f32), q.kinds,
                        q.densities.to(f32))
    c32 = Case(q32, None, makeDomain(2, f32, device), pr, "csr", "none", (), seed=161)
    c32.P = {k: v.to(f32) for k, v in c.P.items()}
    out = c32.jvp({k: v.to(f32) for k, v in T.items()})
    assert out.dtype == f32
    assertClose(out.double(), ref, rtol=1e-4, atol=1e-5, what="float32")


# --------------------------------------------------------------------------------------
# scope
# --------------------------------------------------------------------------------------


def test_gradient_jvp_rejections(device):
    q, r, dom = aliased(2, 8, 170, device)
    pr = props(GRAD, gradientMode=GradientScheme.Naive)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=171)
    qs, kw = callArgs(c.P, q, r)
    dx = torch.ones_like(q.positions)
    geo = dict(queryTangentState=ParticleTangentState(positions=dx))
    omega = torch.full_like(q.supports, 1.1)
    # grad-h with a geometry tangent (test_gradh_forward_mode.py checks the values): the
    # explicit route equals the dual route
    explicit = warpOperationJVP(qs, pr, dom, adjacency=c.adj, gradHState=omega, **kw, **geo)
    with torch.autograd.forward_ad.dual_level():
        dpos = torch.autograd.forward_ad.make_dual(q.positions, dx)
        dq = ParticleState(dpos, q.supports, q.masses, q.kinds, q.densities)
        out = warpOperation(dq, pr, dom, adjacency=c.adj, gradHState=omega, **kw)
        torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(out).tangent,
                                   explicit, rtol=1e-12, atol=1e-12)
    # query-mass tangent
    with pytest.raises(ValueError, match="masses"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, queryTangentState=(
            ParticleTangentState(masses=torch.ones_like(q.masses))))
    # query-volume tangent
    with pytest.raises(ValueError, match="tangentQueryVolumes"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, **geo,
                         tangentQueryVolumes=torch.ones_like(q.masses))
    # correction tangents without their primal state
    bare = {k: v for k, v in kw.items() if k not in ("crkState", "renormalizationState")}
    crkT = CRKTangentState(*(torch.zeros_like(c.P[k]) for k in ("A", "B", "gA", "gB")))
    with pytest.raises(ValueError, match="crkState"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare, crkTangentState=crkT)
    with pytest.raises(ValueError, match="renormalizationState"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare,
                         renormalizationTangentState=torch.zeros_like(c.P["L"]))
    with pytest.raises(ValueError, match="referenceVolumes"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare,
                         tangentReferenceVolumes=torch.ones_like(q.masses))
    # a geometry JVP needs the frozen values
    nov = {k: v for k, v in kw.items() if k != "queryValues"}
    with pytest.raises(ValueError, match="queryValues"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **nov, **geo)


def test_gradient_jvp_frozen_corrections(device):
    """A primal CRK / renormalization state without a tangent is a frozen correction: the
    JVP equals J·v with zero correction tangents."""
    q, r, dom = aliased(2, 10, 180, device)
    pr = props(GRAD, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.Gather)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=181)
    c.check(tangents(c.P, seed=182, names=["pos", "h"]), fd=False, what="frozen corrections")


# --------------------------------------------------------------------------------------
# reverse over forward ("JVP outputs")
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_gradient_jvp_reverse_over_forward(device, distinctSets):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the position tangent,
    a CRK tangent member and the frozen values (Poly6: smooth at the self pair)."""
    if distinctSets:
        q, r, dom = distinct(2, 5, 6, 190, device)
        pn, hn, vn = "qpos", "rh", "fr"
        tn = ["qpos", "rpos"]
    else:
        q, r, dom = aliased(2, 7, 190, device)
        pn, hn, vn = "pos", "h", "f"
        tn = ["pos"]
    pr = props(GRAD, kernel=KernelFunctions.Poly6,
               gradientMode=GradientScheme.Symmetric if distinctSets else GradientScheme.Naive,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=191)
    T0 = tangents(c.P, seed=192, names=tn + ["B", "L"])
    names = [pn, hn, vn, "tx", "tB"]
    inputs = [t.detach().clone().requires_grad_() for t in
              (c.P[pn], c.P[hn], c.P[vn], T0[tn[0]], T0["B"])]

    def fn(x, h, f, tx, tB):
        P = dict(c.P, **{pn: x, hn: h, vn: f})
        T = dict(T0, **{tn[0]: tx, "B": tB})
        return c.jvp(T, P=P)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK), names
