"""Laplacian Naive geometry JVP (Tier 2):
``d(q_ij lap W_ij) = dq_ij lap W_ij + q_ij d(lap W_ij)`` with the helper support rule
(KernelMeanSymmetric at max(h_i, h_j), SuperSymmetric averaged).

`warpOperationJVP` with every geometry tangent (positions, supports, reference masses,
densities of both sets, reference volumes) and a fused value tangent against J·v of the
primal (reverse-mode Jacobian, rtol 1e-8) and central differences (rtol 1e-5), float64,
frozen neighbour structures (1e-3 h margin), ±15 % supports. 1D and 2D x the four gradient
schemes, aliased and distinct sets, the support schemes Gather, MeanSymmetric,
KernelMeanSymmetric and SuperSymmetric (the last two must differ); the dual route equals the
explicit route; grid == CSR == adjacency=None; combined value + geometry == the sum; mixed
kinds; CRK / renormalization rejected by the explicit API (the dual route drops them, as the
primal ignores them); positiveDivergence through both routes; reverse over forward
(gradcheck).
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, jacobianJVP
from laplacian_jvp_cases import (
    LAP,
    SUPPORTS,
    Case,
    aliased,
    callArgs,
    checkCombined,
    checkKinds,
    checkPositiveDivergence,
    checkReverseOverForward,
    checkTraversals,
    distinct,
    tangents,
)
from sph_reference import props

from warpSPHCore import (
    CRKTangentState,
    GradientScheme,
    LaplacianScheme,
    ParticleTangentState,
    SupportScheme,
)
from warpSPHCore.operations import warpOperationJVP

NAIVE = LaplacianScheme.Naive


@pytest.mark.parametrize("gscheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
def test_naive_jvp_schemes(device, dim, gscheme):
    """Every tangent live at once; aliased and distinct sets, scalar and vector fields,
    volumes on and off, calibration on and off."""
    k = int(gscheme) + 4 * (dim - 1)
    if k % 2:
        q, r, dom = distinct(dim, 7, 8, 10 + k, device)
    else:
        q, r, dom = aliased(dim, 10 if dim == 1 else 13, 10 + k, device)
    support = SUPPORTS[k % 4]
    pr = props(LAP, laplacianMode=NAIVE, gradientMode=gscheme, supportMode=support,
               calibrateNormalization=bool((k // 2) % 2), n_h=3.0)
    corr = "volumes" if (k // 2) % 2 and gscheme != GradientScheme.Symmetric else "none"
    shape = [(), (dim,)][(k // 4) % 2]
    c = Case(q, r, dom, pr, ["csr", "grid"][k % 2], corr, shape, seed=20 + k)
    out = c.check(tangents(c.P, seed=30 + k),
                  what=f"{dim}D {gscheme.name}/{support.name}/{corr}/{shape}")
    assert float(out.abs().max()) > 0.0


def test_naive_jvp_kernel_mean_vs_super_symmetric(device):
    """KernelMeanSymmetric evaluates lap W at max(h_i, h_j), SuperSymmetric averages the two
    single-support Laplacians: both JVPs match J·v and they differ."""
    q, r, dom = aliased(2, 13, 40, device)
    outs = {}
    for support in (SupportScheme.KernelMeanSymmetric, SupportScheme.SuperSymmetric):
        pr = props(LAP, laplacianMode=NAIVE, gradientMode=GradientScheme.Difference,
                   supportMode=support)
        c = Case(q, r, dom, pr, "csr", "none", (), seed=41)
        T = tangents(c.P, seed=42, names=["pos", "h"])
        outs[support] = c.check(T, fd=False, dual=False, what=support.name)
    a, b = outs.values()
    assert float((a - b).abs().max()) > 1e-3 * float(a.abs().max())


def test_naive_jvp_single_channels(device):
    """One tangent channel at a time on distinct sets (each role separately)."""
    q, r, dom = distinct(2, 6, 8, 50, device)
    for gscheme, corr, names in (
            (GradientScheme.Difference, "volumes", ["qpos", "rpos", "qh", "rh", "vol"]),
            (GradientScheme.Symmetric, "none", ["rm", "qrho", "rrho", "fq", "fr"]),
            (GradientScheme.Naive, "none", ["rm", "rrho"])):
        pr = props(LAP, laplacianMode=NAIVE, gradientMode=gscheme,
                   supportMode=SupportScheme.MeanSymmetric)
        c = Case(q, r, dom, pr, "csr", corr, (2,), seed=51)
        for n in names:
            out = c.check(tangents(c.P, seed=52, names=[n]), fd=False, dual=False,
                          what=f"{gscheme.name}: {n}")
            assert float(out.abs().max()) > 0.0, n


def test_naive_jvp_traversals(device):
    checkTraversals(NAIVE, GradientScheme.Summation, "volumes", (2,), device, seed=60)


def test_naive_jvp_periodic(device):
    q, r, dom = aliased(2, 12, 65, device, periodic=[True, False], hMean=0.6)
    pr = props(LAP, laplacianMode=NAIVE, gradientMode=GradientScheme.Naive,
               supportMode=SupportScheme.Gather)
    c = Case(q, r, dom, pr, "grid", "none", (), seed=66)
    c.check(tangents(c.P, seed=67), dual=False, what="periodic")


def test_naive_jvp_combined_is_sum(device):
    checkCombined(NAIVE, ["none", "volumes"], (), device, seed=70)


@pytest.mark.parametrize("mode", [3, 9, 13])
def test_naive_jvp_kinds(device, mode):
    gscheme = {3: GradientScheme.Difference, 9: GradientScheme.Symmetric,
               13: GradientScheme.Naive}[mode]
    checkKinds(NAIVE, gscheme, "none", (), mode, device, seed=80 + mode)


def test_naive_jvp_rejections(device):
    """CRK and renormalization (with or without tangents) raise in the explicit API; the dual route drops the ignored CRK/renormalization states (their
    tangents contribute exactly 0, as the primal never reads them)."""
    q, r, dom = aliased(2, 10, 90, device)
    pr = props(LAP, laplacianMode=NAIVE, gradientMode=GradientScheme.Difference)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=91)
    qs, kw = callArgs(c.P, q, r)
    geo = dict(queryTangentState=ParticleTangentState(positions=torch.ones_like(q.positions)))
    crkT = CRKTangentState(*(torch.ones_like(c.P[k]) for k in ("A", "B", "gA", "gB")))
    crkOnly = {k: v for k, v in kw.items() if k != "renormalizationState"}
    renormOnly = {k: v for k, v in kw.items() if k != "crkState"}
    for extra, args in ((geo, crkOnly), (dict(crkTangentState=crkT), crkOnly),
                        (geo, renormOnly),
                        (dict(renormalizationTangentState=torch.ones_like(c.P["L"])),
                         renormOnly)):
        with pytest.raises(NotImplementedError, match="Naive"):
            warpOperationJVP(qs, pr, dom, adjacency=c.adj, **args, **extra)
    # value tangents alone stay Tier 1 (no raise) with the ignored states
    warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw,
                     tangentQueryValues=torch.ones_like(c.P["f"]))
    # the dual route: CRK and L ignored; dual A/B/L tangents change nothing
    T = tangents(c.P, seed=92, names=["pos", "h", "A", "B", "L"])
    ref = jacobianJVP(c.fn, c.inputs(), c.tangentList(T))
    dual = c.dual(T)
    assertClose(dual, ref, what="dual route with ignored CRK/L")
    Tgeo = {n: T[n] for n in ("pos", "h")}
    Cb = Case(q, r, dom, pr, "csr", "none", (), seed=91)
    assert torch.equal(dual, Cb.jvp(Tgeo))


def test_naive_jvp_positive_divergence(device):
    checkPositiveDivergence(NAIVE, device, seed=95)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_naive_jvp_reverse_over_forward(device, distinctSets):
    gscheme = GradientScheme.Symmetric if distinctSets else GradientScheme.Summation
    checkReverseOverForward(NAIVE, gscheme, "none", (), device, seed=100,
                            distinctSets=distinctSets)


@pytest.mark.slow
def test_naive_jvp_3d(device):
    q, r, dom = distinct(3, 5, 6, 110, device)
    pr = props(LAP, laplacianMode=NAIVE, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "csr", "volumes", (3,), seed=111)
    c.check(tangents(c.P, seed=112), what="3D")
