"""Curl geometry JVP (Tier 2): 2D, 3D and 1D.

`warpOperationJVP` with geometry tangents (positions, supports, reference masses, densities of
both sets, reference volumes, CRK and renormalization tangents) and a fused value tangent,
against J·v of the primal `warpOperation` (reverse-mode Jacobian, rtol 1e-8) and central
differences (rtol 1e-5), float64, 2D (``G_x c_y - G_y c_x``: vector ``[N, 2] -> [N, 1]`` and
matrix ``[N, 2, F'] -> [N, F']`` fields), frozen neighbour structures with a 1e-3 h margin,
±15 % supports.

Matrix: two operation modes (kinds 0..3 cycled) x four gradient schemes, support schemes
cycled, corrections cycled through {none, volumes, CRK, renorm, CRK + renorm + volumes};
CRK (+ tangent), renormalization (+ tangent), both, volumes (+ tangent), each correction
tangent alone and frozen corrections; distinct and cloned reference sets; grid == CSR and
adjacency=None == explicit list; the dual route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit route; combined value + geometry == the sum and a zero
value tangent leaves the geometry result bit-unchanged; calibration; float32 against the
float64 J·v; 3D (every gradient scheme, with and without CRK + renormalization + volumes, CSR
and grid) against J·v and central differences; 1D exactly zero; rejections (query-mass
tangents, correction tangents without their state); a float64 reverse-over-forward
gradcheck.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import (
    makeDomain,
    marginPair,
    neighbourStructure,
    props,
)
from value_jvp_cases import (
    F64,
    Case,
    aliased,
    callArgs,
    tangents,
)
from vector_jvp_checks import (
    checkCombinedIsSum,
    checkCorrections,
    checkDistinct,
    checkFloat32,
    checkModesSchemes,
    checkPeriodic,
    checkReverseOverForward,
    checkSingleChannels,
    checkTraversals,
)

from warpSPHCore import (
    CRKTangentState,
    GradientScheme,
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

OP = WarpOperation.Curl
MODES = [OperationDirection.AllToAll, OperationDirection.FluidToAll]


# --------------------------------------------------------------------------------------
# J·v and central differences
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_curl_jvp_modes_schemes(device, scheme, mode):
    """Every tangent live at once on a mixed-kinds cloud; masked query rows are exactly 0;
    the dual route gives the same tangent."""
    checkModesSchemes(OP, MODES, device, scheme, mode)


@pytest.mark.parametrize("corr", ["crk", "renorm", "crk+renorm", "volumes"])
def test_curl_jvp_corrections(device, corr):
    """Each correction with all tangents, with only its own tangent (each member alone), and
    frozen (no correction tangent)."""
    checkCorrections(OP, device, corr)


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_curl_jvp_distinct(device, scheme, cloned):
    """Distinct query and reference sets (cloned: the reference repeats the query coordinates,
    coincident pairs r = 0 with CRK, where G(0) != 0; Poly6 is smooth there)."""
    checkDistinct(OP, device, scheme, cloned)


@pytest.mark.parametrize("which", ["positions", "supports", "masses", "densities"])
def test_curl_jvp_single_channels(device, which):
    """One particle tangent channel of one role at a time (distinct sets)."""
    checkSingleChannels(OP, device, which)


# --------------------------------------------------------------------------------------
# traversals, combined tangents, float32
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_curl_jvp_traversals(device, distinctSets):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's)."""
    checkTraversals(OP, device, distinctSets)


def test_curl_jvp_periodic(device):
    checkPeriodic(OP, device)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_curl_jvp_combined_is_sum(device, distinctSets):
    """value + geometry == value-only (Tier 1) + geometry-only; adding a zero value tangent
    leaves the geometry-only result bit-unchanged; the value-only part is the primal on the
    tangent values (bit-exact)."""
    checkCombinedIsSum(OP, device, distinctSets)


def test_curl_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    checkFloat32(OP, device)


# --------------------------------------------------------------------------------------
# scope
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("corr", ["none", "crk+renorm+volumes"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_curl_jvp_3d(device, scheme, corr, traversal):
    """3D (out = G x c per component, the primal's index map): every tangent live (positions,
    supports, masses, densities, values, and with corrections CRK, L and volumes) against
    J·v and central differences; the dual route equals the explicit one."""
    k = int(scheme)
    q, r, dom = aliased(3, 10, 180 + k, device)
    pr = props(OP, gradientMode=scheme)
    c = Case(q, r, dom, pr, traversal, corr, (3,), seed=190 + k)
    out = c.check(tangents(c.P, seed=200 + k), what=f"3D {scheme.name}/{corr}/{traversal}")
    assert out.shape == (10, 3) and float(out.abs().max()) > 0.0


def test_curl_jvp_1d_is_zero(device):
    """1D: the Curl is exactly 0 and so is every tangent (explicit and dual routes)."""
    dom = makeDomain(1, F64, device)
    q, r = marginPair(6, 7, 1, F64, device, seed=176, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(OP, gradientMode=GradientScheme.Difference)
    f = torch.randn(6, generator=torch.Generator().manual_seed(177), dtype=F64).to(device)
    dx = torch.ones_like(q.positions)
    out = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                           queryTangentState=ParticleTangentState(positions=dx))
    assert torch.equal(out, torch.zeros_like(out))
    with fwAD.dual_level():
        dq = ParticleState(fwAD.make_dual(q.positions, dx), q.supports, q.masses, q.kinds,
                           q.densities)
        t = fwAD.unpack_dual(warpOperation(dq, pr, dom, queryValues=f, adjacency=adj)).tangent
    assert t is None or torch.equal(t, torch.zeros_like(t))


def test_curl_jvp_rejections(device):
    q, r, dom = aliased(2, 8, 170, device)
    pr = props(OP, gradientMode=GradientScheme.Naive)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2,), seed=171)
    qs, kw = callArgs(c.P, q, r)
    dx = torch.ones_like(q.positions)
    geo = dict(queryTangentState=ParticleTangentState(positions=dx))
    omega = torch.full_like(q.supports, 1.1)
    # grad-h with a geometry tangent (test_gradh_forward_mode.py checks the values): the
    # explicit route equals the dual route
    explicit = warpOperationJVP(qs, pr, dom, adjacency=c.adj, gradHState=omega, **kw, **geo)
    with fwAD.dual_level():
        dq = ParticleState(fwAD.make_dual(q.positions, dx), q.supports, q.masses, q.kinds,
                           q.densities)
        out = warpOperation(dq, pr, dom, adjacency=c.adj, gradHState=omega, **kw)
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent, explicit, rtol=1e-12,
                                   atol=1e-12)
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
# reverse over forward ("JVP outputs")
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_curl_jvp_reverse_over_forward(device, distinctSets):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the frozen values, the
    position tangent and a CRK tangent member (Poly6: smooth at the self pair)."""
    checkReverseOverForward(OP, device, distinctSets)
