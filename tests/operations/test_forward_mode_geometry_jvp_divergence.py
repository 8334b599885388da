"""Divergence geometry JVP (Tier 2, `autodiff.md` §9.4-9.6, `testing.md` §4).

`warpOperationJVP` with geometry tangents (positions, supports, reference masses, densities of
both sets, reference volumes, CRK and renormalization tangents) and a fused value tangent,
against J·v of the primal `warpOperation` (reverse-mode Jacobian, rtol 1e-8) and central
differences (rtol 1e-5), float64, 2D (the default contraction: vector ``[N, 2] -> [N]`` and
matrix ``[N, 2, F'] -> [N, F']`` fields), frozen neighbour structures with a 1e-3 h margin,
±15 % supports.

Matrix: three operation modes (kinds 0..3 cycled) x four gradient schemes, support schemes
cycled, corrections cycled through {none, volumes, CRK, renorm, CRK + renorm + volumes};
CRK (+ tangent), renormalization (+ tangent), both, volumes (+ tangent), each correction
tangent alone and frozen corrections; distinct and cloned reference sets; 1D scalar fields
(3D: slow); grid == CSR and
adjacency=None == explicit list; the dual route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit route; combined value + geometry == the sum and a zero
value tangent leaves the geometry result bit-unchanged; calibration; float32 against the
float64 J·v; rejections (dot mode, consistent divergence, query-mass tangents, grad-h,
correction tangents without their state); a float64 reverse-over-forward gradcheck.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose, checkJVP, dualJVP, jacobianJVP
from sph_reference import (
    GRADCHECK,
    makeDomain,
    marginCloud,
    marginPair,
    masks,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    CRKState,
    CRKTangentState,
    GradientScheme,
    KernelFunctions,
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
OP = WarpOperation.Divergence
SUPPORTS = list(SupportScheme)
CORRS = ["none", "volumes", "crk", "renorm", "crk+renorm+volumes"]
MODES = [OperationDirection.AllToAll, OperationDirection.AllToFluid,
         OperationDirection.BoundaryToAll]
# tangent scale per primal name (supports and densities: a few per cent of their size)
_SCALE = {"h": 0.05, "qh": 0.05, "rh": 0.05, "rho": 0.1, "qrho": 0.1, "rrho": 0.1}
_TIGHT = dict(rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------------------
# case builders: named primals P and tangents T
# --------------------------------------------------------------------------------------


def _randn(shape, gen, device, scale=1.0):
    return (scale * torch.randn(shape, generator=gen, dtype=F64)).to(device)


def _primals(q, r, corr, shape, seed):
    """Named float64 primals: the particle fields, the field values and the corrections."""
    dev = q.positions.device
    nq, d = q.positions.shape
    g = torch.Generator().manual_seed(seed)
    if r is None:
        P = dict(pos=q.positions, h=q.supports, m=q.masses, rho=q.densities,
                 f=_randn((nq,) + shape, g, dev))
        nr = nq
    else:
        nr = r.positions.shape[0]
        P = dict(qpos=q.positions, qh=q.supports, qrho=q.densities,
                 fq=_randn((nq,) + shape, g, dev), rpos=r.positions, rh=r.supports,
                 rm=r.masses, rrho=r.densities, fr=_randn((nr,) + shape, g, dev))
    vol, _, A, B, gA, gB, L = randomCorrectionTensors(nq, nr, d, dev, seed + 1)
    if "volumes" in corr:
        P["vol"] = vol
    if "crk" in corr:
        P.update(A=A, B=B, gA=gA, gB=gB)
    if "renorm" in corr:
        P["L"] = L
    return P


def _tangents(P, seed, names=None):
    """Random tangents for the primals in `names` (default: all)."""
    g = torch.Generator().manual_seed(seed)
    names = list(P) if names is None else names
    return {k: _randn(P[k].shape, g, P[k].device, _SCALE.get(k, 1.0)) for k in names}


def _callArgs(P, q, r):
    """(queryParticles, keyword arguments) of warpOperation / warpOperationJVP from P."""
    if r is None:
        qs = ParticleState(P["pos"], P["h"], P["m"], q.kinds, P["rho"])
        kw = dict(queryValues=P["f"])
    else:
        qs = ParticleState(P["qpos"], P["qh"], q.masses, q.kinds, P["qrho"])
        rs = ParticleState(P["rpos"], P["rh"], P["rm"], r.kinds, P["rrho"])
        kw = dict(queryValues=P["fq"], referenceValues=P["fr"], referenceParticles=rs)
    if "vol" in P:
        kw["referenceVolumes"] = P["vol"]
    if "A" in P:
        kw["crkState"] = CRKState(P["A"], P["B"], P["gA"], P["gB"])
    if "L" in P:
        kw["renormalizationState"] = P["L"]
    return qs, kw


def _tangentArgs(P, T, r):
    """warpOperationJVP's tangent keywords from T (a missing name is a zero tangent)."""
    t = T.get
    if r is None:
        kw = dict(queryTangentState=ParticleTangentState(t("pos"), t("h"), None, t("rho")),
                  referenceTangentState=ParticleTangentState(t("pos"), t("h"), t("m"),
                                                             t("rho")),
                  tangentQueryValues=t("f"))
    else:
        kw = dict(queryTangentState=ParticleTangentState(t("qpos"), t("qh"), None, t("qrho")),
                  referenceTangentState=ParticleTangentState(t("rpos"), t("rh"), t("rm"),
                                                             t("rrho")))
        if "fq" in T or "fr" in T:  # both sides explicit (the reference defaults to the query)
            kw["tangentQueryValues"] = T.get("fq", torch.zeros_like(P["fq"]))
            kw["tangentReferenceValues"] = T.get("fr", torch.zeros_like(P["fr"]))
    if "vol" in T:
        kw["tangentReferenceVolumes"] = T["vol"]
    if any(k in T for k in ("A", "B", "gA", "gB")):
        z = {k: T.get(k, torch.zeros_like(P[k])) for k in ("A", "B", "gA", "gB")}
        kw["crkTangentState"] = CRKTangentState(z["A"], z["B"], z["gA"], z["gB"])
    if "L" in T:
        kw["renormalizationTangentState"] = T["L"]
    return kw


class Case:
    """One primal call (query, optional distinct reference, domain, properties, neighbour
    structure) with named primals; `fn` is the primal as a function of the primals' tensors
    (for the oracles) and `jvp(T)` the explicit forward mode."""

    def __init__(self, q, r, dom, pr, traversal, corr="none", shape=(2,), seed=0):
        self.q, self.r, self.dom, self.pr = q, r, dom, pr
        self.adj = neighbourStructure(traversal, q, dom, r)
        self.P = _primals(q, r, corr, shape, seed)
        self.names = list(self.P)

    def fn(self, *xs):
        qs, kw = _callArgs(dict(zip(self.names, xs)), self.q, self.r)
        return warpOperation(qs, self.pr, self.dom, adjacency=self.adj, **kw)

    def inputs(self):
        return [self.P[k] for k in self.names]

    def tangentList(self, T):
        return [T.get(k) for k in self.names]

    def jvp(self, T, adjacency="default", P=None, pr=None, **extra):
        P = self.P if P is None else P
        qs, kw = _callArgs(P, self.q, self.r)
        adj = self.adj if adjacency == "default" else adjacency
        return warpOperationJVP(qs, self.pr if pr is None else pr, self.dom, adjacency=adj,
                                **kw, **_tangentArgs(P, T, self.r), **extra)

    def check(self, T, fd=True, what=""):
        out = self.jvp(T)
        checkJVP(self.fn, self.inputs(), self.tangentList(T), out, fd=fd, what=what)
        return out


def _aliased(n, seed, device, **kw):
    dom = makeDomain(2, F64, device)
    return marginCloud(n, 2, F64, device, seed=seed, domain=dom, **kw), None, dom


def _distinct(nq, nr, seed, device, cloned=False):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(nq, nr, 2, F64, device, seed=seed, domain=dom, cloned=cloned)
    return q, r, dom


# --------------------------------------------------------------------------------------
# J·v and central differences
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_modes_schemes(device, scheme, mode):
    """Every tangent live at once on a mixed-kinds cloud; masked query rows are exactly 0;
    the dual route gives the same tangent."""
    k = int(scheme) + 4 * MODES.index(mode)
    support = SUPPORTS[k % len(SUPPORTS)]
    corr = CORRS[k % len(CORRS)]
    kinds = [i % 4 for i in range(12)]
    q, r, dom = _aliased(12, 10 + k, device, kinds=kinds)
    pr = props(OP, gradientMode=scheme, supportMode=support, operationMode=mode)
    shape = (2,) if k % 2 else (2, 2)
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=20 + k)
    T = _tangents(c.P, seed=30 + k)
    what = f"{scheme.name}/{mode.name}/{support.name}/{corr}/{shape}"
    out = c.check(T, what=what)
    assert out.shape == c.fn(*c.inputs()).shape and out.dtype == F64
    kq = q.kinds.cpu().numpy()
    qm = torch.as_tensor(masks(int(mode), kq, kq)[0], device=out.device)
    assert torch.equal(out[~qm], torch.zeros_like(out[~qm])), what
    assert float(out[qm].abs().max()) > 0.0, what
    if mode != OperationDirection.AllToAll:
        assert bool((~qm).any()), what
    dual = dualJVP(c.fn, c.inputs(), c.tangentList(T))
    assertClose(dual, out, **_TIGHT, what=f"{what}: dual route vs explicit")


@pytest.mark.parametrize("corr", ["crk", "renorm", "crk+renorm", "volumes"])
def test_divergence_jvp_corrections(device, corr):
    """Each correction with all tangents, with only its own tangent (each member alone), and
    frozen (no correction tangent)."""
    k = ["crk", "renorm", "crk+renorm", "volumes"].index(corr)
    q, r, dom = _aliased(12, 40 + k, device)
    scheme = [GradientScheme.Difference, GradientScheme.Naive, GradientScheme.Summation,
              GradientScheme.Naive][k]
    pr = props(OP, gradientMode=scheme, supportMode=SUPPORTS[(k + 2) % len(SUPPORTS)])
    c = Case(q, r, dom, pr, "csr", corr, (2, 2) if k % 2 else (2,), seed=50 + k)
    c.check(_tangents(c.P, seed=60 + k), what=f"{corr}: all")
    own = [n for n in ("A", "B", "gA", "gB", "L", "vol") if n in c.P]
    for n in own:
        out = c.check(_tangents(c.P, seed=61 + k, names=[n]), fd=False, what=f"{corr}: {n}")
        assert float(out.abs().max()) > 0.0, n
    c.check(_tangents(c.P, seed=62 + k, names=["pos", "h"]), what=f"{corr}: frozen")


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_distinct(device, scheme, cloned):
    """Distinct query and reference sets (cloned: the reference repeats the query coordinates,
    coincident pairs r = 0 with CRK, where G(0) != 0; Poly6 is smooth there)."""
    k = int(scheme) + 4 * int(cloned)
    q, r, dom = _distinct(7, 9, 70 + k, device, cloned)
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(OP, kernel=kernel, gradientMode=scheme, supportMode=SUPPORTS[k % 6],
               calibrateNormalization=bool(k % 2), n_h=3.0)
    corr = ["crk+renorm+volumes", "crk", "renorm+volumes", "none"][k % 4]
    shape = [(2,), (2, 3), (2, 2), (2,)][k % 4]
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=80 + k)
    T = _tangents(c.P, seed=90 + k)
    out = c.check(T, what=f"{scheme.name}/{corr}/{shape}")
    dual = dualJVP(c.fn, c.inputs(), c.tangentList(T))
    assertClose(dual, out, **_TIGHT, what="dual route vs explicit")


@pytest.mark.parametrize("dim", [1, pytest.param(3, marks=pytest.mark.slow)], ids=["1d", "3d"])
def test_divergence_jvp_other_dimensions(device, dim):
    """The scope is not restricted to 2D: 1D scalar fields ([N] and [N, 1]) and 3D."""
    dom = makeDomain(dim, F64, device)
    for k, shape in enumerate([(), (1,)] if dim == 1 else [(3,)]):
        if k % 2:
            q, r = marginCloud(9, 1, F64, device, seed=105, domain=dom), None
        else:
            q, r = marginPair(5 if dim == 3 else 8, 6 if dim == 3 else 9, dim, F64, device,
                              seed=105 + dim, domain=dom)
        pr = props(OP, gradientMode=list(GradientScheme)[(k + dim) % 4],
                   supportMode=SUPPORTS[(k + dim) % 6])
        c = Case(q, r, dom, pr, ["csr", "grid"][k], "crk+renorm+volumes", shape, seed=106 + k)
        c.check(_tangents(c.P, seed=107 + k), what=f"{dim}D {shape}")


@pytest.mark.parametrize("which", ["positions", "supports", "masses", "densities"])
def test_divergence_jvp_single_channels(device, which):
    """One particle tangent channel of one role at a time (distinct sets)."""
    q, r, dom = _distinct(6, 8, 100, device)
    pr = props(OP, gradientMode=GradientScheme.Symmetric if which in ("densities", "masses")
               else GradientScheme.Difference, supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "none", (2,), seed=101)
    names = {"positions": ["qpos", "rpos"], "supports": ["qh", "rh"], "masses": ["rm"],
             "densities": ["qrho", "rrho"]}[which]
    for n in names:
        out = c.check(_tangents(c.P, seed=102, names=[n]), fd=False, what=f"{which}: {n}")
        assert float(out.abs().max()) > 0.0, n


# --------------------------------------------------------------------------------------
# traversals, combined tangents, float32
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinct", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_traversals(device, distinct):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's)."""
    if distinct:
        q, r, dom = _distinct(8, 10, 110, device)
    else:
        q, r, dom = _aliased(12, 110, device)
    pr = props(OP, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2, 2), seed=111)
    T = _tangents(c.P, seed=112)
    ref = c.check(T, fd=False, what="csr")
    grid = neighbourStructure("grid", q, dom, r)
    assertClose(c.jvp(T, adjacency=grid), ref, **_TIGHT, what="grid vs csr")
    assertClose(c.jvp(T, adjacency=None), ref, **_TIGHT, what="None vs csr")


def test_divergence_jvp_periodic(device):
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=120, domain=dom, hMean=0.6)
    pr = props(OP, gradientMode=GradientScheme.Naive, supportMode=SupportScheme.Gather)
    c = Case(q, None, dom, pr, "grid", "crk", (2,), seed=121)
    c.check(_tangents(c.P, seed=122), what="periodic")


@pytest.mark.parametrize("distinct", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_combined_is_sum(device, distinct):
    """value + geometry == value-only (Tier 1) + geometry-only; adding a zero value tangent
    leaves the geometry-only result bit-unchanged; the value-only part is the primal on the
    tangent values (bit-exact)."""
    if distinct:
        q, r, dom = _distinct(7, 9, 130, device)
        vnames = ["fq", "fr"]
    else:
        q, r, dom = _aliased(12, 130, device)
        vnames = ["f"]
    for k, scheme in enumerate(GradientScheme):
        pr = props(OP, gradientMode=scheme, supportMode=SUPPORTS[k])
        c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes" if k % 2 else "volumes",
                 (2, 2) if k % 2 else (2,), seed=131 + k)
        T = _tangents(c.P, seed=140 + k)
        geo = {n: v for n, v in T.items() if n not in vnames}
        val = {n: T[n] for n in vnames}
        both = c.jvp(T)
        g = c.jvp(geo)
        v = c.jvp(val)
        assertClose(both, g + v, **_TIGHT, what=f"{scheme.name} combined")
        zero = dict(geo, **{n: torch.zeros_like(c.P[n]) for n in vnames})
        assert torch.equal(c.jvp(zero), g), scheme.name
        Pv = dict(c.P, **{n: T[n] for n in vnames})
        qs, kw = _callArgs(Pv, q, r)
        assert torch.equal(v, warpOperation(qs, pr, dom, adjacency=c.adj, **kw)), scheme.name


def test_divergence_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    q, r, dom = _aliased(12, 160, device)
    pr = props(OP, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (2,), seed=161)
    T = _tangents(c.P, seed=162)
    ref = jacobianJVP(c.fn, c.inputs(), c.tangentList(T))
    f32 = torch.float32
    q32 = ParticleState(q.positions.to(f32), q.supports.to(f32), q.masses.to(f32), q.kinds,
                        q.densities.to(f32))
    c32 = Case(q32, None, makeDomain(2, f32, device), pr, "csr", "none", (2,), seed=161)
    c32.P = {k: v.to(f32) for k, v in c.P.items()}
    out = c32.jvp({k: v.to(f32) for k, v in T.items()})
    assert out.dtype == f32
    assertClose(out.double(), ref, rtol=1e-4, atol=1e-5, what="float32")


# --------------------------------------------------------------------------------------
# scope (autodiff.md §9.4)
# --------------------------------------------------------------------------------------


def test_divergence_jvp_rejections(device):
    q, r, dom = _aliased(8, 170, device)
    pr = props(OP, gradientMode=GradientScheme.Naive)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2,), seed=171)
    qs, kw = _callArgs(c.P, q, r)
    dx = torch.ones_like(q.positions)
    geo = dict(queryTangentState=ParticleTangentState(positions=dx))
    # the contraction over the last field axis and consistent divergence: out of scope
    dot = props(OP, gradientMode=GradientScheme.Naive, divergenceDotMode=True)
    with pytest.raises(NotImplementedError, match="divergenceDotMode"):
        warpOperationJVP(qs, dot, dom, adjacency=c.adj, **kw, **geo)
    with pytest.raises(NotImplementedError, match="consistentDivergence"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, **geo, consistentDivergence=True)
    omega = torch.full_like(q.supports, 1.1)
    with pytest.raises(NotImplementedError, match="grad-h"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, gradHState=omega, **kw, **geo)
    # ... also through the dual route
    with fwAD.dual_level():
        dq = ParticleState(fwAD.make_dual(q.positions, dx), q.supports, q.masses, q.kinds,
                           q.densities)
        with pytest.raises(NotImplementedError, match="divergenceDotMode"):
            warpOperation(dq, dot, dom, adjacency=c.adj, **kw)
        with pytest.raises(NotImplementedError, match="consistentDivergence"):
            warpOperation(dq, pr, dom, adjacency=c.adj, consistentDivergence=True, **kw)
    # the value tangents alone stay Tier 1 in dot mode and with consistent divergence
    tf = torch.ones_like(c.P["f"])
    for p, cons in ((dot, False), (pr, True)):
        out = warpOperationJVP(qs, p, dom, adjacency=c.adj, **kw, tangentQueryValues=tf,
                               consistentDivergence=cons)
        ref = warpOperation(qs, p, dom, adjacency=c.adj, **dict(kw, queryValues=tf),
                            consistentDivergence=cons)
        assert torch.equal(out, ref)
    # query-mass and query-volume tangents
    with pytest.raises(ValueError, match="masses"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, queryTangentState=(
            ParticleTangentState(masses=torch.ones_like(q.masses))))
    with pytest.raises(ValueError, match="tangentQueryVolumes"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, **geo,
                         tangentQueryVolumes=torch.ones_like(q.masses))
    # correction tangents without their primal state
    bare = {k: v for k, v in kw.items()
            if k not in ("crkState", "renormalizationState", "referenceVolumes")}
    crkT = CRKTangentState(*(torch.zeros_like(c.P[k]) for k in ("A", "B", "gA", "gB")))
    with pytest.raises(ValueError, match="crkState"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare, crkTangentState=crkT)
    with pytest.raises(ValueError, match="renormalizationState"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare,
                         renormalizationTangentState=torch.zeros_like(c.P["L"]))
    with pytest.raises(ValueError, match="referenceVolumes"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **bare,
                         tangentReferenceVolumes=torch.ones_like(q.masses))


# --------------------------------------------------------------------------------------
# reverse over forward (testing.md §3, "JVP outputs")
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinct", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_reverse_over_forward(device, distinct):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the frozen values, the
    position tangent and a CRK tangent member (Poly6: smooth at the self pair)."""
    if distinct:
        q, r, dom = _distinct(5, 6, 190, device)
        pn, hn, vn = "qpos", "rh", "fr"
        tn = ["qpos", "rpos"]
    else:
        q, r, dom = _aliased(7, 190, device)
        pn, hn, vn = "pos", "h", "f"
        tn = ["pos"]
    pr = props(OP, kernel=KernelFunctions.Poly6,
               gradientMode=GradientScheme.Symmetric if distinct else GradientScheme.Difference,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (2,), seed=191)
    T0 = _tangents(c.P, seed=192, names=tn + ["B", "L"])
    inputs = [t.detach().clone().requires_grad_() for t in
              (c.P[pn], c.P[hn], c.P[vn], T0[tn[0]], T0["B"])]

    def fn(x, h, f, tx, tB):
        P = dict(c.P, **{pn: x, hn: h, vn: f})
        T = dict(T0, **{tn[0]: tx, "B": tB})
        return c.jvp(T, P=P)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
