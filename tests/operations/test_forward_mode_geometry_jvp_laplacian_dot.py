"""Laplacian Dot geometry JVP (Tier 2):
``d{phi_ij [q_ij - (d + 2) (q_ij.n_ij) n_ij]}`` with ``phi_ij = (G.n_ij) / D``,
``D = r + 1e-8 h_ij``, the projection blockwise over consecutive d-blocks of the flat field;
n_ij, r and D differentiated literally, G the corrected gradient with its CRK and
renormalization tangents; r = 0 pairs contribute 0 with tangent 0.

`warpOperationJVP` with every geometry tangent and a fused value tangent against J·v of the
primal (rtol 1e-8) and central differences (rtol 1e-5), float64, frozen neighbour structures
(1e-3 h margin), ±15 % supports: 1D scalar (and 1D multi-component) fields, 2D vector and
2D matrix (two d-blocks) fields, x the four gradient schemes with CRK + renormalization
(+ volumes) among the corrections; scalar fields in 2D rejected; single channels; coincident
points with CRK; the dual route equals the explicit route; grid == CSR == adjacency=None;
combined == sum; mixed kinds; the scope's rejections; reverse over forward.
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
    checkKinds,
    checkPositiveDivergence,
    checkReverseOverForward,
    checkTraversals,
    distinct,
    tangents,
)
from sph_reference import props

from warpSPHCore import GradientScheme, LaplacianScheme, ParticleTangentState, SupportScheme
from warpSPHCore.operations import warpOperation, warpOperationJVP

DOT = LaplacianScheme.Dot
CORRS = ["none", "crk+renorm", "crk+renorm+volumes", "renorm"]


@pytest.mark.parametrize("gscheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("dim, shape", [(1, ()), (2, (2,))], ids=["1d-scalar", "2d-vector"])
def test_dot_jvp_schemes(device, dim, shape, gscheme):
    """Every tangent live at once (CRK and renormalization tangents included); aliased and
    distinct sets, calibration on and off."""
    k = int(gscheme) + 4 * (dim - 1)
    if k % 2:
        q, r, dom = distinct(dim, 7, 8, 400 + k, device)
    else:
        q, r, dom = aliased(dim, 10 if dim == 1 else 13, 400 + k, device)
    support = SUPPORTS[(k + 2) % 4]
    corr = CORRS[(k + dim) % 4]
    if gscheme == GradientScheme.Symmetric:
        corr = corr.replace("+volumes", "")
    pr = props(LAP, laplacianMode=DOT, gradientMode=gscheme, supportMode=support,
               calibrateNormalization=bool((k // 2) % 2), n_h=3.0)
    c = Case(q, r, dom, pr, ["csr", "grid"][k % 2], corr, shape, seed=410 + k)
    out = c.check(tangents(c.P, seed=420 + k),
                  what=f"{dim}D {gscheme.name}/{support.name}/{corr}/{shape}")
    assert float(out.abs().max()) > 0.0


@pytest.mark.parametrize("dim, shape", [(2, (2, 2)), (1, (3,))], ids=["2d-matrix", "1d-vec3"])
def test_dot_jvp_blocks(device, dim, shape):
    """Several d-blocks per row: a 2D 2x2 field (two blocks of d = 2) and a 1D field with three
    components (three blocks of d = 1)."""
    q, r, dom = distinct(dim, 6, 7, 430 + dim, device)
    pr = props(LAP, laplacianMode=DOT, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.KernelMeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", shape, seed=432 + dim)
    out = c.check(tangents(c.P, seed=434 + dim), what=f"{dim}D blocks {shape}")
    assert out.shape == (6,) + shape and float(out.abs().max()) > 0.0


def test_dot_jvp_single_channels(device):
    """One tangent channel at a time on distinct sets (each role and each CRK member
    separately)."""
    q, r, dom = distinct(2, 6, 8, 440, device)
    for gscheme, corr, names in (
            (GradientScheme.Summation, "crk+renorm+volumes",
             ["qpos", "rpos", "qh", "rh", "vol", "A", "B", "gA", "gB", "L", "fq", "fr"]),
            (GradientScheme.Symmetric, "none", ["rm", "qrho", "rrho"]),
            (GradientScheme.Naive, "none", ["rm", "rrho"])):
        # not Gather: there the reference supports do not enter (their tangent gives 0)
        pr = props(LAP, laplacianMode=DOT, gradientMode=gscheme,
                   supportMode=SupportScheme.MeanSymmetric)
        c = Case(q, r, dom, pr, "csr", corr, (2,), seed=441)
        for n in names:
            out = c.check(tangents(c.P, seed=442, names=[n]), fd=False, dual=False,
                          what=f"{gscheme.name}: {n}")
            assert float(out.abs().max()) > 0.0, n


def test_dot_jvp_scalar_2d_rejected(device):
    """Dot needs a flat width that is a multiple of d for d > 1: a scalar field in 2D raises
    ValueError in the explicit API, the dual route and the primal alike."""
    q, r, dom = aliased(2, 8, 450, device)
    pr = props(LAP, laplacianMode=DOT, gradientMode=GradientScheme.Difference)
    c = Case(q, r, dom, pr, "csr", "none", (2,), seed=451)
    f = torch.ones_like(q.masses)
    qs, kw = callArgs(dict(c.P, f=f), q, r)
    dx = torch.ones_like(q.positions)
    with pytest.raises(ValueError, match="Dot"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw,
                         queryTangentState=ParticleTangentState(positions=dx))
    with pytest.raises(ValueError, match="Dot"):
        warpOperationJVP(qs, pr, dom, adjacency=c.adj, **kw, tangentQueryValues=f)
    with torch.autograd.forward_ad.dual_level():
        qd, kwd = callArgs(dict(c.P, f=f, pos=torch.autograd.forward_ad.make_dual(
            q.positions, dx)), q, r)
        with pytest.raises(ValueError, match="Dot"):
            warpOperation(qd, pr, dom, adjacency=c.adj, **kwd)


def test_dot_jvp_coincident(device):
    checkCoincident(DOT, GradientScheme.Summation, (2,), device, seed=460)


def test_dot_jvp_traversals(device):
    checkTraversals(DOT, GradientScheme.Difference, "crk+renorm+volumes", (2,), device,
                    seed=470)


def test_dot_jvp_combined_is_sum(device):
    checkCombined(DOT, ["crk+renorm", "volumes"], (2,), device, seed=480)


@pytest.mark.parametrize("mode", [3, 9, 13])
def test_dot_jvp_kinds(device, mode):
    gscheme = {3: GradientScheme.Naive, 9: GradientScheme.Summation,
               13: GradientScheme.Symmetric}[mode]
    checkKinds(DOT, gscheme, "crk+renorm", (2,), mode, device, seed=490 + mode)


def test_dot_jvp_positive_divergence(device):
    checkPositiveDivergence(DOT, device, seed=510)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_dot_jvp_reverse_over_forward(device, distinctSets):
    """The Dot projection reuses a loop-accumulated sum nonlinearly: its adjoint through
    the JVP kernel is checked here."""
    gscheme = GradientScheme.Naive if distinctSets else GradientScheme.Symmetric
    checkReverseOverForward(DOT, gscheme, "crk+renorm", (2,), device, seed=520,
                            distinctSets=distinctSets, extra=("gB", "L"))


@pytest.mark.slow
def test_dot_jvp_3d(device):
    q, r, dom = distinct(3, 5, 6, 530, device)
    pr = props(LAP, laplacianMode=DOT, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.MeanSymmetric)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (3,), seed=531)
    c.check(tangents(c.P, seed=532), what="3D")
