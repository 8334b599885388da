"""Laplacian Brookshaw geometry JVP (Tier 2):
``d[-2 q_ij (G.n_ij) / D]`` with ``D = r + 1e-8 h_ij``, ``n_ij = x_ij / D``, differentiated
literally (dr = x.dx / r, dD = dr + 1e-8 dh_ij, dn = dx / D - x dD / D^2), G the corrected
gradient with its CRK and renormalization tangents; r = 0 pairs contribute 0 with tangent 0.

`warpOperationJVP` with every geometry tangent (positions, supports, reference masses,
densities, reference volumes, CRK A/B/gradA/gradB, L) and a fused value tangent against J·v
of the primal (rtol 1e-8) and central differences (rtol 1e-5), float64, frozen neighbour
structures (1e-3 h margin), ±15 % supports. 1D and 2D x the four gradient schemes with
corrections {none, CRK, renormalization, CRK + renormalization + volumes}, support schemes
Gather, MeanSymmetric, KernelMeanSymmetric and SuperSymmetric; single channels; coincident
points with CRK; the dual route equals the explicit route; grid == CSR == adjacency=None;
combined == sum; mixed kinds; float32; the scope's rejections (CRK and renormalization with
Naive); positiveDivergence through both routes (the primal's pair selection); reverse over
forward.
"""

from __future__ import annotations

import pytest
import torch
from laplacian_jvp_cases import (
    LAP,
    SUPPORTS,
    Case,
    aliased,
    callArgs,
    checkCoincident,
    checkCombined,
    checkFloat32,
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

BROOKSHAW = LaplacianScheme.Brookshaw
CORRS = ["none", "crk", "renorm", "crk+renorm+volumes"]


@pytest.mark.parametrize("gscheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
def test_brookshaw_jvp_schemes(device, dim, gscheme):
    """Every tangent live at once (CRK and renormalization tangents included); aliased and
    distinct sets, scalar and vector fields, calibration on and off."""
    k = int(gscheme) + 4 * (dim - 1)
    if k % 2:
        q, r, dom = distinct(dim, 7, 8, 200 + k, device)
    else:
        q, r, dom = aliased(dim, 10 if dim == 1 else 13, 200 + k, device)
    support = SUPPORTS[(k + 1) % 4]
    corr = CORRS[(k + dim) % 4]
    if gscheme == GradientScheme.Symmetric:
        corr = corr.replace("+volumes", "")
    pr = props(LAP, laplacianMode=BROOKSHAW, gradientMode=gscheme, supportMode=support,
               calibrateNormalization=bool((k // 2) % 2), n_h=3.0)
    shape = [(), (dim,)][(k // 4) % 2]
    c = Case(q, r, dom, pr, ["csr", "grid"][k % 2], corr, shape, seed=210 + k)
    out = c.check(tangents(c.P, seed=220 + k),
                  what=f"{dim}D {gscheme.name}/{support.name}/{corr}/{shape}")
    assert float(out.abs().max()) > 0.0


def test_brookshaw_jvp_single_channels(device):
    """One tangent channel at a time on distinct sets (each role and each CRK member
    separately), so a channel cannot hide behind another's error."""
    q, r, dom = distinct(2, 6, 8, 230, device)
    for gscheme, corr, names in (
            (GradientScheme.Difference, "crk+renorm+volumes",
             ["qpos", "rpos", "qh", "rh", "vol", "A", "B", "gA", "gB", "L", "fq", "fr"]),
            (GradientScheme.Symmetric, "none", ["rm", "qrho", "rrho"]),
            (GradientScheme.Summation, "none", ["rm", "rrho"])):
        pr = props(LAP, laplacianMode=BROOKSHAW, gradientMode=gscheme,
                   supportMode=SupportScheme.SuperSymmetric)
        c = Case(q, r, dom, pr, "csr", corr, (), seed=231)
        for n in names:
            out = c.check(tangents(c.P, seed=232, names=[n]), fd=False, dual=False,
                          what=f"{gscheme.name}: {n}")
            assert float(out.abs().max()) > 0.0, n


def test_brookshaw_jvp_coincident(device):
    checkCoincident(BROOKSHAW, GradientScheme.Naive, (), device, seed=240)


def test_brookshaw_jvp_traversals(device):
    checkTraversals(BROOKSHAW, GradientScheme.Summation, "crk+renorm+volumes", (), device,
                    seed=250)


def test_brookshaw_jvp_periodic(device):
    q, r, dom = aliased(2, 12, 255, device, periodic=True, hMean=0.6)
    pr = props(LAP, laplacianMode=BROOKSHAW, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "grid", "crk+renorm", (), seed=256)
    c.check(tangents(c.P, seed=257), dual=False, what="periodic")


def test_brookshaw_jvp_combined_is_sum(device):
    checkCombined(BROOKSHAW, ["crk+renorm+volumes", "renorm"], (2,), device, seed=260)


@pytest.mark.parametrize("mode", [3, 9, 13])
def test_brookshaw_jvp_kinds(device, mode):
    gscheme = {3: GradientScheme.Symmetric, 9: GradientScheme.Difference,
               13: GradientScheme.Naive}[mode]
    checkKinds(BROOKSHAW, gscheme, "crk+renorm", (), mode, device, seed=270 + mode)


def test_brookshaw_jvp_float32(device):
    checkFloat32(BROOKSHAW, GradientScheme.Symmetric, "crk+renorm", (), device, seed=290)


def test_brookshaw_jvp_rejections(device):
    """CRK and renormalization are accepted here but rejected with the Naive scheme."""
    q, r, dom = aliased(2, 10, 300, device)
    c = Case(q, r, dom, props(LAP, laplacianMode=BROOKSHAW), "csr", "crk+renorm", (2,),
             seed=301)
    qs, kw = callArgs(c.P, q, r)
    dx = torch.ones_like(q.positions)
    geo = dict(queryTangentState=ParticleTangentState(positions=dx))
    naive = props(LAP, laplacianMode=LaplacianScheme.Naive,
                  gradientMode=GradientScheme.Difference)
    crkT = CRKTangentState(*(torch.ones_like(c.P[k]) for k in ("A", "B", "gA", "gB")))
    for extra in (geo, dict(crkTangentState=crkT),
                  dict(renormalizationTangentState=torch.ones_like(c.P["L"]))):
        with pytest.raises(NotImplementedError, match="Naive"):
            warpOperationJVP(qs, naive, dom, adjacency=c.adj, **kw, **extra)
    # the same call with Brookshaw is accepted
    ok = props(LAP, laplacianMode=BROOKSHAW, gradientMode=GradientScheme.Difference)
    out = warpOperationJVP(qs, ok, dom, adjacency=c.adj, **kw, **geo, crkTangentState=crkT)
    assert torch.isfinite(out).all() and float(out.abs().max()) > 0.0


def test_brookshaw_jvp_positive_divergence(device):
    checkPositiveDivergence(BROOKSHAW, device, seed=310)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_brookshaw_jvp_reverse_over_forward(device, distinctSets):
    gscheme = GradientScheme.Symmetric if distinctSets else GradientScheme.Difference
    checkReverseOverForward(BROOKSHAW, gscheme, "crk+renorm", (), device, seed=320,
                            distinctSets=distinctSets, extra=("B", "L"))


@pytest.mark.slow
def test_brookshaw_jvp_3d(device):
    q, r, dom = distinct(3, 5, 6, 330, device)
    pr = props(LAP, laplacianMode=BROOKSHAW, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (), seed=331)
    c.check(tangents(c.P, seed=332), what="3D")
