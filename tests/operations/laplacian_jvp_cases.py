"""Shared checks of the Laplacian geometry-JVP tests
(`test_forward_mode_geometry_jvp_laplacian_{naive,brookshaw,dot,default}.py`) on the named-primal cases of `value_jvp_cases`: traversals, combined tangents, kinds,
float32, reverse over forward, coincident points and positiveDivergence.
"""

from __future__ import annotations

import torch
from jvp_helpers import assertClose, jacobianJVP
from sph_reference import GRADCHECK, makeDomain, marginCloud, neighbourStructure, props
from value_jvp_cases import (
    F64,
    TIGHT,
    Case,
    aliased,
    callArgs,
    distinct,
    primals,
    tangentArgs,
    tangents,
    valueNames,
)

from warpSPHCore import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

LAP = WarpOperation.Laplacian
SUPPORTS = [SupportScheme.Gather, SupportScheme.MeanSymmetric,
            SupportScheme.KernelMeanSymmetric, SupportScheme.SuperSymmetric]


# --------------------------------------------------------------------------------------
# checks shared by the four scheme files
# --------------------------------------------------------------------------------------


def checkTraversals(lscheme, gscheme, corr, shape, device, seed):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's), on an
    aliased and a distinct set."""
    for k, (q, r, dom) in enumerate((aliased(2, 12, seed, device),
                                     distinct(2, 8, 10, seed + 1, device))):
        pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
                   supportMode=SUPPORTS[(seed + k) % 4])
        c = Case(q, r, dom, pr, "csr", corr, shape, seed=seed + 2 + k)
        T = tangents(c.P, seed=seed + 4 + k)
        ref = c.check(T, fd=False, dual=False, what=f"csr {k}")
        assert float(ref.abs().max()) > 0.0
        grid = neighbourStructure("grid", q, dom, r)
        assertClose(c.jvp(T, adjacency=grid), ref, **TIGHT, what="grid vs csr")
        assertClose(c.jvp(T, adjacency=None), ref, **TIGHT, what="None vs csr")


def checkCombined(lscheme, corrs, shape, device, seed):
    """value + geometry == value-only (Tier 1) + geometry-only for every gradient scheme;
    adding a zero value tangent leaves the geometry-only result bit-unchanged; the value part
    is the primal on the tangent values, bit-exactly."""
    for k, gscheme in enumerate(GradientScheme):
        q, r, dom = aliased(2, 12, seed, device) if k % 2 == 0 else distinct(2, 7, 9, seed,
                                                                             device)
        vnames = valueNames(r)
        pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme, supportMode=SUPPORTS[k])
        c = Case(q, r, dom, pr, "csr", corrs[k % len(corrs)], shape, seed=seed + 1 + k)
        T = tangents(c.P, seed=seed + 10 + k)
        geo = {n: v for n, v in T.items() if n not in vnames}
        val = {n: T[n] for n in vnames}
        both = c.jvp(T)
        g = c.jvp(geo)
        v = c.jvp(val)
        assert float(g.abs().max()) > 0.0 and float(v.abs().max()) > 0.0
        assertClose(both, g + v, **TIGHT, what=f"{gscheme.name} combined")
        zero = dict(geo, **{n: torch.zeros_like(c.P[n]) for n in vnames})
        assert torch.equal(c.jvp(zero), g), gscheme.name
        Pv = dict(c.P, **{n: T[n] for n in vnames})
        qs, kw = callArgs(Pv, q, r)
        assert torch.equal(v, warpOperation(qs, pr, dom, adjacency=c.adj, **kw)), gscheme.name
        # the fused result also matches J·v of the primal
        assertClose(both, jacobianJVP(c.fn, c.inputs(), c.tangentList(T)),
                    what=f"{gscheme.name} combined vs J.v")


def checkKinds(lscheme, gscheme, corr, shape, mode, device, seed):
    """Mixed categories (kinds 0..3 cycled): the JVP equals J·v of the masked primal, masked
    query rows are exactly 0."""
    dom = makeDomain(2, F64, device)
    kinds = [k % 4 for k in range(14)]
    q = marginCloud(14, 2, F64, device, seed=seed, domain=dom, kinds=kinds)
    pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.KernelMeanSymmetric, operationMode=mode)
    c = Case(q, None, dom, pr, "csr", corr, shape, seed=seed + 1)
    out = c.check(tangents(c.P, seed=seed + 2), fd=False, what=f"mode {mode}")
    qMask = {3: [k == 0 for k in kinds], 9: [True] * 14, 13: [k != 2 for k in kinds],
             0: [True] * 14}[mode]
    masked = torch.tensor([not m for m in qMask], device=out.device)
    assert torch.equal(out[masked], torch.zeros_like(out[masked]))
    assert float(out[~masked].abs().max()) > 0.0


def checkFloat32(lscheme, gscheme, corr, shape, device, seed):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    q, r, dom = aliased(2, 12, seed, device)
    pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=seed + 1)
    T = tangents(c.P, seed=seed + 2)
    ref = jacobianJVP(c.fn, c.inputs(), c.tangentList(T))
    f32 = torch.float32
    q32 = ParticleState(q.positions.to(f32), q.supports.to(f32), q.masses.to(f32), q.kinds,
                        q.densities.to(f32))
    c32 = Case(q32, None, makeDomain(2, f32, device), pr, "csr", "none", shape, seed=seed + 1)
    c32.P = {k: v.to(f32) for k, v in c.P.items()}
    c32.names = list(c32.P)
    out = c32.jvp({k: v.to(f32) for k, v in T.items()})
    assert out.dtype == f32
    assertClose(out.double(), ref, rtol=1e-4, atol=1e-5, what="float32")


def checkReverseOverForward(lscheme, gscheme, corr, shape, device, seed, distinctSets,
                            extra=()):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the frozen values, the
    position tangent and the correction tangents named in `extra` (Poly6: smooth at the self
    pair)."""
    if distinctSets:
        q, r, dom = distinct(2, 4, 5, seed, device)
        pn, hn, vn = "qpos", "rh", "fr"
        tn = ["qpos", "rpos"]
    else:
        q, r, dom = aliased(2, 6, seed, device)
        pn, hn, vn = "pos", "h", "f"
        tn = ["pos"]
    pr = props(LAP, kernel=KernelFunctions.Poly6, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", corr, shape, seed=seed + 1)
    T0 = tangents(c.P, seed=seed + 2, names=tn + list(extra))
    live = [tn[0]] + list(extra)
    inputs = [t.detach().clone().requires_grad_() for t in
              [c.P[pn], c.P[hn], c.P[vn]] + [T0[n] for n in live]]

    def fn(x, h, f, *ts):
        P = dict(c.P, **{pn: x, hn: h, vn: f})
        T = dict(T0, **dict(zip(live, ts)))
        return c.jvp(T, P=P)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def checkCoincident(lscheme, gscheme, shape, device, seed):
    """Coincident pairs with CRK (G(0) != 0, the r > 0 guard, W12): a distinct reference set
    cloned from the query coordinates, every query on its reference twin, with the reference
    position tangent equal to the query's (the pair stays at r = 0; moving a twin alone is
    not differentiable under CRK). The guarded pairs contribute 0 with tangent 0; Poly6 is
    smooth at the origin. Also the self pairs of an aliased set under CRK."""
    q, r, dom = distinct(2, 6, 6, seed, device, cloned=True)
    pr = props(LAP, kernel=KernelFunctions.Poly6, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", shape, seed=seed + 1)
    T = tangents(c.P, seed=seed + 2)
    T["rpos"] = T["qpos"]
    out = c.check(T, what="cloned coincident")
    assert torch.isfinite(out).all() and float(out.abs().max()) > 0.0
    q, r, dom = aliased(2, 8, seed + 3, device)
    c = Case(q, r, dom, pr, "grid", "crk+renorm+volumes", shape, seed=seed + 4)
    c.check(tangents(c.P, seed=seed + 5), what="aliased self pairs with CRK")


def _awayFromSwitching(x, seed, n, d):
    """A field [n, d] whose x_ij . (f_j - f_i) keeps a 1e-3 margin from 0 on every distinct
    pair with both signs present (the positiveDivergence selection is frozen)."""
    import numpy as np

    g = torch.Generator().manual_seed(seed)
    off = ~np.eye(n, dtype=bool)
    for _ in range(2000):
        f = torch.randn(n, d, generator=g, dtype=F64)
        fn = f.numpy()
        sgn = np.einsum("ijc,ijc->ij", x, fn[None, :, :] - fn[:, None, :])[off]
        if np.min(np.abs(sgn)) > 1e-3 and 0 < np.sum(sgn < 0) < sgn.size:
            return f
    raise AssertionError("no field away from the positiveDivergence switching surface")


def checkPositiveDivergence(lscheme, device, seed):
    """positiveDivergence through the public routes (explicit and dual): the Laplacian is then
    not linear in its values (they select the pairs), so its JVP keeps the primal's pair
    selection and differentiates the kept pairs. Checked away from the switching surface
    against J·v and central differences: value tangents alone (not the operator on the
    tangent values, which would select by the tangent's sign), geometry tangents alone and
    both; the selection matters (the unselected JVP differs)."""
    from sph_reference import pairVectors

    q, r, dom = aliased(2, 8, seed, device)
    pos = q.positions.cpu().numpy()
    x = pairVectors(pos, pos, [-1.0, -1.0], [1.0, 1.0], [False, False])
    f = _awayFromSwitching(x, seed + 1, 8, 2).to(device)
    outs = []
    for positive in (True, False):
        pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Difference,
                   supportMode=SupportScheme.KernelMeanSymmetric, positiveDivergence=positive)
        corr = "volumes" if lscheme == LaplacianScheme.Naive else "crk+renorm+volumes"
        c = Case(q, r, dom, pr, "csr", corr, (2,), seed=seed + 2)
        c.P["f"] = f
        T = tangents(c.P, seed=seed + 3)
        out = c.check(T, what=f"positiveDivergence={positive}")
        outs.append(out)
        if positive:
            for names in (["f"], [n for n in c.names if n != "f"]):
                Tn = {n: T[n] for n in names}
                c.check(Tn, what=f"positiveDivergence, tangents {names}")
            # the value JVP is not the operator on the tangent values
            qs, kw = callArgs(dict(c.P, f=T["f"]), q, r)
            relaunched = warpOperation(qs, pr, dom, adjacency=c.adj, **kw)
            assert float((c.jvp({"f": T["f"]}) - relaunched).abs().max()) > 1e-6
    assert float((outs[0] - outs[1]).abs().max()) > 1e-3 * float(outs[1].abs().max())


__all__ = ["F64", "LAP", "SUPPORTS", "TIGHT", "Case", "aliased", "distinct", "primals",
           "tangents", "callArgs", "tangentArgs", "valueNames", "checkTraversals",
           "checkCombined", "checkKinds", "checkFloat32", "checkReverseOverForward",
           "checkCoincident", "checkPositiveDivergence"]
