"""Divergence geometry JVP (Tier 2).

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
float64 J·v; dot mode (every scheme, corrections, 2D/3D); rejections (consistent divergence,
query-mass tangents,
correction tangents without their state); a float64 reverse-over-forward gradcheck.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose, checkJVP, dualJVP
from sph_reference import (
    makeDomain,
    marginCloud,
    marginPair,
    props,
)
from value_jvp_cases import (
    F64,
    TIGHT,
    Case,
    aliased,
    callArgs,
    tangents,
)
from vector_jvp_checks import (
    SUPPORTS,
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

OP = WarpOperation.Divergence
MODES = [OperationDirection.AllToAll, OperationDirection.AllToFluid,
         OperationDirection.BoundaryToAll]


# --------------------------------------------------------------------------------------
# J·v and central differences
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_modes_schemes(device, scheme, mode):
    """Every tangent live at once on a mixed-kinds cloud; masked query rows are exactly 0;
    the dual route gives the same tangent."""
    checkModesSchemes(OP, MODES, device, scheme, mode)


@pytest.mark.parametrize("corr", ["crk", "renorm", "crk+renorm", "volumes"])
def test_divergence_jvp_corrections(device, corr):
    """Each correction with all tangents, with only its own tangent (each member alone), and
    frozen (no correction tangent)."""
    checkCorrections(OP, device, corr)


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_distinct(device, scheme, cloned):
    """Distinct query and reference sets (cloned: the reference repeats the query coordinates,
    coincident pairs r = 0 with CRK, where G(0) != 0; Poly6 is smooth there)."""
    checkDistinct(OP, device, scheme, cloned)


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
        c.check(tangents(c.P, seed=107 + k), what=f"{dim}D {shape}")


@pytest.mark.parametrize("which", ["positions", "supports", "masses", "densities"])
def test_divergence_jvp_single_channels(device, which):
    """One particle tangent channel of one role at a time (distinct sets)."""
    checkSingleChannels(OP, device, which)


# --------------------------------------------------------------------------------------
# traversals, combined tangents, float32
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_traversals(device, distinctSets):
    """Grid traversal == CSR list == adjacency=None (a grid built like the primal's)."""
    checkTraversals(OP, device, distinctSets)


def test_divergence_jvp_periodic(device):
    checkPeriodic(OP, device)


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_combined_is_sum(device, distinctSets):
    """value + geometry == value-only (Tier 1) + geometry-only; adding a zero value tangent
    leaves the geometry-only result bit-unchanged; the value-only part is the primal on the
    tangent values (bit-exact)."""
    checkCombinedIsSum(OP, device, distinctSets)


def test_divergence_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    checkFloat32(OP, device)


# --------------------------------------------------------------------------------------
# scope
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("corr", ["none", "crk+renorm+volumes"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_dot_mode(device, scheme, corr, dim):
    """divergenceDotMode (the contraction over the last field axis): every tangent live
    against J·v and central differences, vector and matrix fields; the dual route equals the
    explicit one."""
    k = int(scheme) + 4 * dim
    q, r, dom = aliased(dim, 10, 160 + k, device)
    pr = props(OP, gradientMode=scheme, divergenceDotMode=True)
    for shape in ((dim,), (3, dim)):
        c = Case(q, r, dom, pr, "csr", corr, shape, seed=165 + k)
        out = c.check(tangents(c.P, seed=166 + k), what=f"dot {scheme.name}/{corr}/{shape}")
        assert float(out.abs().max()) > 0.0


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("corr", ["none", "volumes", "crk+renorm+volumes"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_jvp_consistent(device, scheme, corr, dim):
    """consistentDivergence (V_j = vol_j rho_j / rho_i with volumes, else m_j / rho_i): every
    tangent live (densities of both sets, masses, volumes, values, positions, supports,
    corrections) against J·v and central differences; the dual route equals the explicit
    one."""
    k = int(scheme) + 4 * dim
    q, r, dom = aliased(dim, 10, 260 + k, device)
    pr = props(OP, gradientMode=scheme)
    c = Case(q, r, dom, pr, "csr", corr, (dim,), seed=265 + k)

    def fn(*xs):
        qs, kw = callArgs(dict(zip(c.names, xs)), q, r)
        return warpOperation(qs, pr, dom, adjacency=c.adj, consistentDivergence=True, **kw)

    T = tangents(c.P, seed=266 + k)
    out = c.jvp(T, consistentDivergence=True)
    what = f"consistent {scheme.name}/{corr}/{dim}D"
    checkJVP(fn, c.inputs(), c.tangentList(T), out, what=what)
    assertClose(dualJVP(fn, c.inputs(), c.tangentList(T)), out, **TIGHT,
                what=f"{what}: dual route vs explicit")
    assert float(out.abs().max()) > 0.0


def test_divergence_jvp_rejections(device):
    q, r, dom = aliased(2, 8, 170, device)
    pr = props(OP, gradientMode=GradientScheme.Naive)
    c = Case(q, r, dom, pr, "csr", "crk+renorm+volumes", (2,), seed=171)
    qs, kw = callArgs(c.P, q, r)
    dx = torch.ones_like(q.positions)
    geo = dict(queryTangentState=ParticleTangentState(positions=dx))
    dot = props(OP, gradientMode=GradientScheme.Naive, divergenceDotMode=True)
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
# reverse over forward ("JVP outputs")
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("distinctSets", [False, True], ids=["aliased", "distinct"])
def test_divergence_jvp_reverse_over_forward(device, distinctSets):
    """float64 gradcheck of the JVP output w.r.t. positions, supports, the frozen values, the
    position tangent and a CRK tangent member (Poly6: smooth at the self pair)."""
    checkReverseOverForward(OP, device, distinctSets)
