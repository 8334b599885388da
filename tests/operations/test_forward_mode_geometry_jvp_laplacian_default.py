"""Laplacian Default geometry JVP (Tier 2):
``d[-2 q_ij (G.n_ij) / (r + 1e-12 h_ij)]`` with ``n_ij = x_ij / (r + 1e-8 h_ij)``: Brookshaw
with a different second regulariser, both denominators differentiated literally; G the
corrected gradient with its CRK and renormalization tangents; r = 0 pairs contribute 0 with
tangent 0.

`warpOperationJVP` with every geometry tangent and a fused value tangent against J·v of the
primal (rtol 1e-8) and central differences (rtol 1e-5), float64, frozen neighbour structures
(1e-3 h margin), ±15 % supports: 1D and 2D x the four gradient schemes, CRK and
renormalization together (with their tangents) among the corrections; single channels;
coincident points with CRK; the dual route equals the explicit route; grid == CSR ==
adjacency=None; combined == sum; mixed kinds; float32; Default's JVP is not Brookshaw's;
positiveDivergence through both routes; grad-h with geometry tangents; reverse
over forward.
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose
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

from warpSPHCore import GradientScheme, LaplacianScheme, ParticleTangentState, SupportScheme
from warpSPHCore.operations import warpOperationJVP

DEFAULT = LaplacianScheme.Default
CORRS = ["crk+renorm", "none", "crk+renorm+volumes", "volumes"]


@pytest.mark.parametrize("gscheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
def test_default_jvp_schemes(device, dim, gscheme):
    """Every tangent live at once (CRK and renormalization tangents included); aliased and
    distinct sets, scalar and vector fields, calibration on and off."""
    k = int(gscheme) + 4 * (dim - 1)
    if k % 2 == 0:
        q, r, dom = distinct(dim, 7, 8, 600 + k, device)
    else:
        q, r, dom = aliased(dim, 10 if dim == 1 else 13, 600 + k, device)
    support = SUPPORTS[(k + 3) % 4]
    corr = CORRS[k % 4]
    if gscheme == GradientScheme.Symmetric:
        corr = corr.replace("+volumes", "").replace("volumes", "none")
    pr = props(LAP, laplacianMode=DEFAULT, gradientMode=gscheme, supportMode=support,
               calibrateNormalization=bool((k // 2) % 2), n_h=3.0)
    shape = [(dim,), ()][(k // 4) % 2]
    c = Case(q, r, dom, pr, ["grid", "csr"][k % 2], corr, shape, seed=610 + k)
    out = c.check(tangents(c.P, seed=620 + k),
                  what=f"{dim}D {gscheme.name}/{support.name}/{corr}/{shape}")
    assert float(out.abs().max()) > 0.0


def test_default_jvp_single_channels(device):
    """One tangent channel at a time on distinct sets (each role and each CRK member
    separately)."""
    q, r, dom = distinct(2, 6, 8, 630, device)
    for gscheme, corr, names in (
            (GradientScheme.Naive, "crk+renorm+volumes",
             ["qpos", "rpos", "qh", "rh", "vol", "A", "B", "gA", "gB", "L", "fq", "fr"]),
            (GradientScheme.Symmetric, "crk", ["rm", "qrho", "rrho"]),
            (GradientScheme.Difference, "none", ["rm", "rrho"])):
        pr = props(LAP, laplacianMode=DEFAULT, gradientMode=gscheme,
                   supportMode=SupportScheme.KernelMeanSymmetric)
        c = Case(q, r, dom, pr, "csr", corr, (), seed=631)
        for n in names:
            out = c.check(tangents(c.P, seed=632, names=[n]), fd=False, dual=False,
                          what=f"{gscheme.name}: {n}")
            assert float(out.abs().max()) > 0.0, n


def test_default_jvp_is_not_brookshaw(device):
    """Default and Brookshaw differ only by the second regulariser (1e-12 vs 1e-8 h_ij): the
    two JVPs agree to ~1e-7 relative but are not the same numbers."""
    q, r, dom = aliased(2, 12, 640, device)
    outs = []
    for lscheme in (DEFAULT, LaplacianScheme.Brookshaw):
        pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Difference,
                   supportMode=SupportScheme.MeanSymmetric)
        c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=641)
        outs.append(c.jvp(tangents(c.P, seed=642)))
    assert not torch.equal(outs[0], outs[1])
    assertClose(outs[0], outs[1], rtol=1e-6, atol=1e-7, what="Default vs Brookshaw")


def test_default_jvp_coincident(device):
    checkCoincident(DEFAULT, GradientScheme.Difference, (2,), device, seed=650)


def test_default_jvp_traversals(device):
    checkTraversals(DEFAULT, GradientScheme.Naive, "crk+renorm+volumes", (2,), device,
                    seed=660)


def test_default_jvp_combined_is_sum(device):
    checkCombined(DEFAULT, ["crk+renorm+volumes", "crk+renorm"], (), device, seed=670)


@pytest.mark.parametrize("mode", [3, 9, 13])
def test_default_jvp_kinds(device, mode):
    gscheme = {3: GradientScheme.Summation, 9: GradientScheme.Naive,
               13: GradientScheme.Difference}[mode]
    checkKinds(DEFAULT, gscheme, "crk+renorm", (2,), mode, device, seed=680 + mode)


def test_default_jvp_float32(device):
    checkFloat32(DEFAULT, GradientScheme.Difference, "crk+renorm", (2,), device, seed=700)


def test_default_jvp_rejections(device):
    q, r, dom = aliased(2, 8, 710, device)
    pr = props(LAP, laplacianMode=DEFAULT, gradientMode=GradientScheme.Difference)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (2,), seed=711)
    qs, kw = callArgs(c.P, q, r)
    geo = dict(queryTangentState=ParticleTangentState(positions=torch.ones_like(q.positions)))
    # grad-h with a geometry tangent is in scope (test_gradh_forward_mode.py): the tangent
    # differs from the one without Omega
    ok = props(LAP, laplacianMode=DEFAULT, gradientMode=GradientScheme.Difference)
    withH = warpOperationJVP(qs, ok, dom, adjacency=c.adj, **kw, **geo,
                             gradHState=torch.full_like(q.supports, 1.1))
    without = warpOperationJVP(qs, ok, dom, adjacency=c.adj, **kw, **geo)
    torch.testing.assert_close(withH, without / 1.1, rtol=1e-12, atol=1e-12)


def test_default_jvp_positive_divergence(device):
    checkPositiveDivergence(DEFAULT, device, seed=720)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_default_jvp_reverse_over_forward(device, distinctSets):
    gscheme = GradientScheme.Summation if distinctSets else GradientScheme.Naive
    checkReverseOverForward(DEFAULT, gscheme, "crk+renorm", (), device, seed=730,
                            distinctSets=distinctSets, extra=("A", "gA", "L"))


@pytest.mark.slow
def test_default_jvp_3d(device):
    q, r, dom = distinct(3, 5, 6, 740, device)
    pr = props(LAP, laplacianMode=DEFAULT, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.SuperSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm", (), seed=741)
    c.check(tangents(c.P, seed=742), what="3D")
