"""Shared geometry-JVP checks of Divergence and Curl (`test_forward_mode_geometry_jvp_
{divergence,curl}.py`): 2D vector and matrix fields on the named-primal
cases of `value_jvp_cases`, every tangent channel, the corrections with their tangents,
distinct and cloned reference sets, traversals, periodic axes, combined tangents, float32
and reverse over forward. Each check takes the operator; the two files differ in their
modes and in their operator-specific scope tests.
"""

from __future__ import annotations

import torch
from jvp_helpers import assertClose, jacobianJVP
from sph_reference import GRADCHECK, makeDomain, marginCloud, masks, neighbourStructure, props
from value_jvp_cases import F64, TIGHT, Case, aliased, callArgs, distinct, tangents

from warpSPHCore import (
    GradientScheme,
    KernelFunctions,
    OperationDirection,
    ParticleState,
    SupportScheme,
)
from warpSPHCore.operations import warpOperation

SUPPORTS = list(SupportScheme)
CORRS = ["none", "volumes", "crk", "renorm", "crk+renorm+volumes"]


def checkModesSchemes(op, modes, device, scheme, mode):
    """Every tangent live at once on a mixed-kinds cloud; masked query rows are exactly 0;
    the dual route gives the same tangent (`Case.check`)."""
    k = int(scheme) + 4 * modes.index(mode)
    support = SUPPORTS[k % len(SUPPORTS)]
    corr = CORRS[k % len(CORRS)]
    kinds = [i % 4 for i in range(12)]
    q, r, dom = aliased(2, 12, 10 + k, device, kinds=kinds)
    pr = props(op, gradientMode=scheme, supportMode=support, operationMode=mode)
    shape = (2,) if k % 2 else (2, 2)
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=20 + k)
    T = tangents(c.P, seed=30 + k)
    what = f"{scheme.name}/{mode.name}/{support.name}/{corr}/{shape}"
    out = c.check(T, what=what)
    assert out.shape == c.fn(*c.inputs()).shape and out.dtype == F64
    kq = q.kinds.cpu().numpy()
    qm = torch.as_tensor(masks(int(mode), kq, kq)[0], device=out.device)
    assert torch.equal(out[~qm], torch.zeros_like(out[~qm])), what
    assert float(out[qm].abs().max()) > 0.0, what
    if mode != OperationDirection.AllToAll:
        assert bool((~qm).any()), what


def checkCorrections(op, device, corr):
    """Each correction with all tangents, with only its own tangent (each member alone), and
    frozen (no correction tangent)."""
    k = ["crk", "renorm", "crk+renorm", "volumes"].index(corr)
    q, r, dom = aliased(2, 12, 40 + k, device)
    scheme = [GradientScheme.Difference, GradientScheme.Naive, GradientScheme.Summation,
              GradientScheme.Naive][k]
    pr = props(op, gradientMode=scheme, supportMode=SUPPORTS[(k + 2) % len(SUPPORTS)])
    c = Case(q, r, dom, pr, "csr", corr, (2, 2) if k % 2 else (2,), seed=50 + k)
    c.check(tangents(c.P, seed=60 + k), what=f"{corr}: all")
    own = [n for n in ("A", "B", "gA", "gB", "L", "vol") if n in c.P]
    for n in own:
        out = c.check(tangents(c.P, seed=61 + k, names=[n]), fd=False, what=f"{corr}: {n}")
        assert float(out.abs().max()) > 0.0, n
    c.check(tangents(c.P, seed=62 + k, names=["pos", "h"]), what=f"{corr}: frozen")


def checkDistinct(op, device, scheme, cloned):
    """Distinct query and reference sets (cloned: the reference repeats the query coordinates,
    coincident pairs r = 0 with CRK, where G(0) != 0; Poly6 is smooth there)."""
    k = int(scheme) + 4 * int(cloned)
    q, r, dom = distinct(2, 7, 9, 70 + k, device, cloned)
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(op, kernel=kernel, gradientMode=scheme, supportMode=SUPPORTS[k % 6],
               calibrateNormalization=bool(k % 2), n_h=3.0)
    corr = ["crk+renorm+volumes", "crk", "renorm+volumes", "none"][k % 4]
    shape = [(2,), (2, 3), (2, 2), (2,)][k % 4]
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=80 + k)
    T = tangents(c.P, seed=90 + k)
    out = c.check(T, what=f"{scheme.name}/{corr}/{shape}")
    assert float(out.abs().max()) > 0.0


def checkSingleChannels(op, device, which):
    """One particle tangent channel of one role at a time (distinct sets)."""
    q, r, dom = distinct(2, 6, 8, 100, device)
    pr = props(op, gradientMode=GradientScheme.Symmetric if which in ("densities", "masses")
               else GradientScheme.Difference, supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "none", (2,), seed=101)
    names = {"positions": ["qpos", "rpos"], "supports": ["qh", "rh"], "masses": ["rm"],
             "densities": ["qrho", "rrho"]}[which]
    for n in names:
        out = c.check(tangents(c.P, seed=102, names=[n]), fd=False, what=f"{which}: {n}")
        assert float(out.abs().max()) > 0.0, n


# --------------------------------------------------------------------------------------
# traversals, combined tangents, float32
# --------------------------------------------------------------------------------------


def checkTraversals(op, device, distinctSets):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's)."""
    if distinctSets:
        q, r, dom = distinct(2, 8, 10, 110, device)
    else:
        q, r, dom = aliased(2, 12, 110, device)
    pr = props(op, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2, 2), seed=111)
    T = tangents(c.P, seed=112)
    ref = c.check(T, fd=False, what="csr")
    grid = neighbourStructure("grid", q, dom, r)
    assertClose(c.jvp(T, adjacency=grid), ref, **TIGHT, what="grid vs csr")
    assertClose(c.jvp(T, adjacency=None), ref, **TIGHT, what="None vs csr")


def checkPeriodic(op, device):
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=120, domain=dom, hMean=0.6)
    pr = props(op, gradientMode=GradientScheme.Naive, supportMode=SupportScheme.Gather)
    c = Case(q, None, dom, pr, "grid", "crk", (2,), seed=121)
    c.check(tangents(c.P, seed=122), what="periodic")


def checkCombinedIsSum(op, device, distinctSets):
    """value + geometry == value-only (Tier 1) + geometry-only; adding a zero value tangent
    leaves the geometry-only result bit-unchanged; the value-only part is the primal on the
    tangent values (bit-exact)."""
    if distinctSets:
        q, r, dom = distinct(2, 7, 9, 130, device)
        vnames = ["fq", "fr"]
    else:
        q, r, dom = aliased(2, 12, 130, device)
        vnames = ["f"]
    for k, scheme in enumerate(GradientScheme):
        pr = props(op, gradientMode=scheme, supportMode=SUPPORTS[k])
        c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes" if k % 2 else "volumes",
                 (2, 2) if k % 2 else (2,), seed=131 + k)
        T = tangents(c.P, seed=140 + k)
        geo = {n: v for n, v in T.items() if n not in vnames}
        val = {n: T[n] for n in vnames}
        both = c.jvp(T)
        g = c.jvp(geo)
        v = c.jvp(val)
        assertClose(both, g + v, **TIGHT, what=f"{scheme.name} combined")
        zero = dict(geo, **{n: torch.zeros_like(c.P[n]) for n in vnames})
        assert torch.equal(c.jvp(zero), g), scheme.name
        Pv = dict(c.P, **{n: T[n] for n in vnames})
        qs, kw = callArgs(Pv, q, r)
        assert torch.equal(v, warpOperation(qs, pr, dom, adjacency=c.adj, **kw)), scheme.name


def checkFloat32(op, device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    q, r, dom = aliased(2, 12, 160, device)
    pr = props(op, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (2,), seed=161)
    T = tangents(c.P, seed=162)
    ref = jacobianJVP(c.fn, c.inputs(), c.tangentList(T))
    f32 = torch.float32
    q32 = ParticleState(q.positions.to(f32), q.supports.to(f32), q.masses.to(f32), q.kinds,
                        q.densities.to(f32))
    c32 = Case(q32, None, makeDomain(2, f32, device), pr, "csr", "none", (2,), seed=161)
    c32.P = {k: v.to(f32) for k, v in c.P.items()}
    out = c32.jvp({k: v.to(f32) for k, v in T.items()})
    assert out.dtype == f32
    assertClose(out.double(), ref, rtol=1e-4, atol=1e-5, what="float32")


def checkReverseOverForward(op, device, distinctSets):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the frozen values, the
    position tangent and a CRK tangent member (Poly6: smooth at the self pair)."""
    if distinctSets:
        q, r, dom = distinct(2, 5, 6, 190, device)
        pn, hn, vn = "qpos", "rh", "fr"
        tn = ["qpos", "rpos"]
    else:
        q, r, dom = aliased(2, 7, 190, device)
        pn, hn, vn = "pos", "h", "f"
        tn = ["pos"]
    pr = props(op, kernel=KernelFunctions.Poly6,
               gradientMode=GradientScheme.Symmetric if distinctSets else GradientScheme.Difference,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (2,), seed=191)
    T0 = tangents(c.P, seed=192, names=tn + ["B", "L"])
    inputs = [t.detach().clone().requires_grad_() for t in
              (c.P[pn], c.P[hn], c.P[vn], T0[tn[0]], T0["B"])]

    def fn(x, h, f, tx, tB):
        P = dict(c.P, **{pn: x, hn: h, vn: f})
        T = dict(T0, **{tn[0]: tx, "B": tB})
        return c.jvp(T, P=P)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
