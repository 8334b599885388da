"""Forward mode of the CRK builder: `computeCRKFactorsJVP`.

Every case compares ``(dV, dA, dB, dgradA, dgradB)`` with J·v of `computeCRKFactors` (its
reverse-mode Jacobian, itself gradcheck-verified in `test_crk_gradcheck.py`, rtol 1e-8) and,
on smooth cases, with central differences (rtol 1e-5): aliased and distinct reference sets,
CSR / grid / on-the-fly traversals, 1D/2D/3D, mixed kinds in three operation modes (J·v of
the masked primal), rows rejected by the limiter (count < 2, collinear neighbours, the Schur
test) with exactly zero tangent, V = dV = 0 for masked volume rows, traversal equivalence,
empty populations, argument errors, and a float64 reverse-over-forward gradcheck.
Neighbourhoods are frozen (1e-3 h margin from every support threshold).
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, centralFD, checkJVP, jacobianJVP, randomTangents
from sph_reference import GRADCHECK, cloud, leaves, makeDomain, neighbourStructure, supportMargin
from test_crk import SINGULAR_CASES, _block, _census, limiterCloud, singularMomentCase

from warpSPHCore import KernelFunctions, ParticleState, ParticleTangentState
from warpSPHCore.corrections import computeCRKFactors, computeCRKFactorsJVP

F64 = torch.float64
W2 = KernelFunctions.Wendland2
HMEAN = {1: 0.9, 2: 1.0, 3: 1.4}
NQ = {1: 9, 2: 12, 3: 9}


def _flat(V, crk):
    return torch.cat((V, crk.A, crk.B.reshape(-1), crk.gradA.reshape(-1),
                      crk.gradB.reshape(-1)))


def _wellConditioned(nq, nr, d, device, seed, dom, hMean, kinds=None, modes=(9,),
                     distinct=False, margin=1e-3):
    """(query, reference or None): every q-q, q-r and r-r pair keeps `margin` h from every
    support threshold, and every unlimited CRK row is well conditioned in each mode (|A| <
    20, every factor below 1e3: no row close to the limiter's switches)."""
    for s in range(seed, seed + 400):
        q = cloud(nq, d, F64, device, s, hMean=hMean, kinds=kinds, densities=False)
        r = cloud(nr, d, F64, device, s + 1000, hMean=hMean, densities=False) if distinct \
            else None
        if supportMargin(q, dom) < margin:
            continue
        if r is not None and (supportMargin(q, dom, r) < margin or supportMargin(r, dom) < margin):
            continue
        ok = True
        for mode in modes:
            V, _, crk = computeCRKFactors(q, dom, W2, operationMode=mode, referenceState=r)
            if float(crk.A.abs().max()) > 20.0 or float(_flat(V, crk).abs().max()) > 1e3:
                ok = False
        if ok:
            return q, r
    raise AssertionError("no well-conditioned frozen cloud")


def _fn(q, r, dom, adj, radj, mode=9):
    """The primal outputs as one flat tensor of (qPos, qSup[, rPos, rSup])."""

    def fn(qp, qh, *rest):
        query = ParticleState(qp, qh, q.masses, q.kinds)
        ref = None if r is None else ParticleState(rest[0], rest[1], r.masses, r.kinds)
        V, _, crk = computeCRKFactors(query, dom, W2, operationMode=mode, adjacency=adj,
                                      referenceState=ref, referenceAdjacency=radj)
        return _flat(V, crk)

    return fn


def _jvp(q, r, dom, adj, radj, tangents, mode=9):
    qt = ParticleTangentState(positions=tangents[0], supports=tangents[1])
    rt = None if r is None else ParticleTangentState(positions=tangents[2],
                                                     supports=tangents[3])
    V, dV, crk, dcrk = computeCRKFactorsJVP(q, dom, W2, qt, operationMode=mode, adjacency=adj,
                                            referenceState=r, referenceTangentState=rt,
                                            referenceAdjacency=radj)
    return V, dV, crk, dcrk


def _inputs(q, r):
    out = [q.positions, q.supports]
    if r is not None:
        out += [r.positions, r.supports]
    return out


def _scaledTangents(inputs, seed):
    """Positions O(1), supports O(0.1) (a support tangent moves h by ~10 %)."""
    return randomTangents(inputs, seed, scales=[1.0, 0.1, 1.0, 0.1][:len(inputs)])


def _structures(traversal, q, dom, r):
    adj = neighbourStructure(traversal, q, dom, r)
    radj = None if r is None else neighbourStructure(traversal, r, dom)
    return adj, radj


# --- J·v and central differences ---------------------------------------------------------


@pytest.mark.parametrize("dim, traversal", [(1, "csr"), (2, "csr"), (2, "grid"), (2, "none"),
                                            pytest.param(3, "grid", marks=pytest.mark.slow)])
def test_crk_jvp_aliased(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q, _ = _wellConditioned(NQ[dim], 1, dim, device, 10 * dim, dom, HMEAN[dim])
    adj, _ = _structures(traversal, q, dom, None)
    inputs = _inputs(q, None)
    v = _scaledTangents(inputs, 1)
    V, dV, crk, dcrk = _jvp(q, None, dom, adj, None, v)
    # the primal outputs are those of computeCRKFactors, bit for bit
    V0, _, crk0 = computeCRKFactors(q, dom, W2, adjacency=adj)
    assert torch.equal(_flat(V, crk), _flat(V0, crk0))
    fn = _fn(q, None, dom, adj, None)
    checkJVP(fn, inputs, v, _flat(dV, dcrk), what=f"CRK JVP {dim}D {traversal}")


@pytest.mark.parametrize("dim, traversal", [(1, "csr"), (2, "grid"), (2, "none")])
def test_crk_jvp_distinct(device, dim, traversal):
    """Distinct reference set (its own tangent; R -> R volume neighbourhood), including a
    zero query tangent (only the reference moves) and a zero reference tangent."""
    dom = makeDomain(dim, F64, device)
    q, r = _wellConditioned(6, 11, dim, device, 100 + dim, dom, HMEAN[dim], distinct=True)
    adj, radj = _structures(traversal, q, dom, r)
    inputs = _inputs(q, r)
    v = _scaledTangents(inputs, 2)
    fn = _fn(q, r, dom, adj, radj)
    _, dV, _, dcrk = _jvp(q, r, dom, adj, radj, v)
    checkJVP(fn, inputs, v, _flat(dV, dcrk), what=f"CRK JVP distinct {dim}D {traversal}")
    for keep in ((2, 3), (0, 1)):
        vk = [t if k in keep else torch.zeros_like(t) for k, t in enumerate(v)]
        _, dVk, _, dcrkk = _jvp(q, r, dom, adj, radj, vk)
        assertClose(_flat(dVk, dcrkk), jacobianJVP(fn, inputs, vk), what=f"keep {keep}")
    # with only the query moving, V (computed on R) has exactly zero tangent
    assert torch.equal(dVk, torch.zeros_like(dVk))


def test_crk_jvp_traversals_agree(device):
    """CSR, a prebuilt grid and adjacency=None give the same tangents (summation order
    only)."""
    dom = makeDomain(2, F64, device)
    q, _ = _wellConditioned(NQ[2], 1, 2, device, 40, dom, HMEAN[2])
    v = _scaledTangents(_inputs(q, None), 3)
    outs = [_flat(*_jvp(q, None, dom, neighbourStructure(t, q, dom), None, v)[1::2])
            for t in ("csr", "grid", "none")]
    for o in outs[1:]:
        assertClose(o, outs[0], rtol=1e-12, atol=1e-13, what="traversal")


def test_crk_jvp_float32(device):
    """The float32 overloads agree with float64 to float32 rounding (grid traversal)."""
    dom = makeDomain(2, F64, device)
    q, _ = _wellConditioned(NQ[2], 1, 2, device, 20, dom, HMEAN[2])
    v = _scaledTangents(_inputs(q, None), 11)
    ref = _flat(*_jvp(q, None, dom, None, None, v)[1::2])
    q32 = ParticleState(q.positions.float(), q.supports.float(), q.masses.float(), q.kinds)
    out = _flat(*_jvp(q32, None, makeDomain(2, torch.float32, device), None, None,
                      [t.float() for t in v])[1::2])
    assert out.dtype == torch.float32
    assertClose(out.double(), ref, rtol=1e-4, atol=1e-5, what="float32")


# --- kinds and modes ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [9, 13, 1])
def test_crk_jvp_mixed_kinds(device, mode):
    """Mixed fluid / boundary / ghost particles: AllToAll (ghost references masked),
    FluidToAll (ghost queries masked, fluid references only) and FluidToFluid; the JVP
    equals J·v of the primal in the same mode, masked query rows (identity) have exactly zero
    tangent, masked volume rows have V = dV = 0."""
    dom = makeDomain(2, F64, device)
    kinds = [0, 1, 2] * 7
    q, _ = _wellConditioned(21, 1, 2, device, 200, dom, 1.1, kinds=kinds, modes=(mode,))
    adj, _ = _structures("csr", q, dom, None)
    inputs = _inputs(q, None)
    v = _scaledTangents(inputs, 4)
    V, dV, crk, dcrk = _jvp(q, None, dom, adj, None, v, mode=mode)
    fn = _fn(q, None, dom, adj, None, mode=mode)
    checkJVP(fn, inputs, v, _flat(dV, dcrk), fd=False, what=f"CRK JVP mode {mode}")
    k = q.kinds
    maskedQuery = {9: torch.zeros_like(k, dtype=torch.bool), 13: k == 2, 1: k != 0}[mode]
    assert bool(maskedQuery.any()) or mode == 9
    for t in (dcrk.A, dcrk.B, dcrk.gradA, dcrk.gradB):
        assert torch.equal(t[maskedQuery], torch.zeros_like(t[maskedQuery]))
    # the volume step runs R -> R under the same mode: a masked j has V = dV = 0
    assert torch.equal(V[maskedQuery], torch.zeros_like(V[maskedQuery]))
    assert torch.equal(dV[maskedQuery], torch.zeros_like(dV[maskedQuery]))
    assert bool((dcrk.A[~maskedQuery] != 0).any())


# --- limiter -----------------------------------------------------------------------------


def _limited(crk):
    return (crk.A == 1.0) & (crk.B == 0).all(-1) & (crk.gradA == 0).all(-1) \
        & (crk.gradB == 0).flatten(1).all(-1)


def _assertZeroRows(dcrk, rows):
    for t in (dcrk.A, dcrk.B, dcrk.gradA, dcrk.gradB):
        assert torch.equal(t[rows], torch.zeros_like(t[rows]))


@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_crk_jvp_limited_rows(device, traversal):
    """An isolated particle (count < 2 with CSR, or no in-support pair) and a collinear
    triple (singular m2) among regular rows: the limited rows have exactly zero tangent for
    any direction (also one moving the collinear particles off their line), everything is
    finite, and the rest equals J·v (and central differences along a direction that keeps
    the triple collinear)."""
    dom = makeDomain(2, F64, device)
    p, iso, line = limiterCloud(device)
    adj, _ = _structures(traversal, p, dom, None)
    inputs = _inputs(p, None)
    v = _scaledTangents(inputs, 5)
    _, dV, crk, dcrk = _jvp(p, None, dom, adj, None, v)
    lim = _limited(crk)
    assert bool(lim[iso]) and bool(lim[line].all()) and not bool(lim[:iso].any())
    _assertZeroRows(dcrk, lim)
    assert torch.isfinite(_flat(dV, dcrk)).all()
    fn = _fn(p, None, dom, adj, None)
    assertClose(_flat(dV, dcrk), jacobianJVP(fn, inputs, v), what="limited J.v")
    v[0] = v[0].clone()
    v[0][line, 1] = 0.0
    _, dV, _, dcrk = _jvp(p, None, dom, adj, None, v)
    assertClose(_flat(dV, dcrk), centralFD(fn, inputs, v), rtol=1e-5, atol=1e-7,
                what="limited FD")


@pytest.mark.parametrize("case, dim", SINGULAR_CASES, ids=[c for c, _ in SINGULAR_CASES])
def test_crk_jvp_schur_limited_rows(device, case, dim):
    """Row 0 with an invertible m2 but a singular full moment matrix (the Schur limiter):
    exactly zero tangent; the regular rows equal J·v."""
    dom = makeDomain(dim, F64, device)
    q, r, mode, _ = singularMomentCase(case, device)
    adj, radj = _structures("csr", q, dom, r)
    inputs = _inputs(q, r)
    v = _scaledTangents(inputs, 6)
    _, dV, crk, dcrk = _jvp(q, r, dom, adj, radj, v, mode=mode)
    assert bool(_limited(crk)[0])
    _assertZeroRows(dcrk, 0)
    assert torch.isfinite(_flat(dV, dcrk)).all()
    fn = _fn(q, r, dom, adj, radj, mode=mode)
    assertClose(_flat(dV, dcrk), jacobianJVP(fn, inputs, v), what=f"Schur {case}")


# --- empty populations, no tangent, errors -------------------------------------------------


@pytest.mark.parametrize("traversal", ["csr", "none"])
def test_crk_jvp_empty_populations(device, traversal):
    dom = makeDomain(2, F64, device)
    q = cloud(5, 2, F64, device, 1, densities=False)
    e = cloud(0, 2, F64, device, 2, densities=False)
    zq = ParticleTangentState(positions=torch.ones_like(q.positions))
    ze = ParticleTangentState(positions=torch.ones_like(e.positions))
    # zero queries
    V, dV, crk, dcrk = computeCRKFactorsJVP(e, dom, W2, ze,
                                            adjacency=neighbourStructure(traversal, e, dom))
    assert V.shape == dV.shape == (0,) and dcrk.gradB.shape == (0, 2, 2)
    # zero references: V empty, identity rows with zero tangent
    V, dV, crk, dcrk = computeCRKFactorsJVP(
        q, dom, W2, zq, adjacency=neighbourStructure(traversal, q, dom, e), referenceState=e,
        referenceTangentState=ze, referenceAdjacency=neighbourStructure(traversal, e, dom))
    assert dV.shape == (0,) and torch.equal(crk.A, torch.ones_like(crk.A))
    _assertZeroRows(dcrk, slice(None))


def test_crk_jvp_no_tangent_and_linearity(device):
    """No tangent: zeros and the primal outputs; the JVP is linear in the direction."""
    dom = makeDomain(2, F64, device)
    q, _ = _wellConditioned(NQ[2], 1, 2, device, 60, dom, HMEAN[2])
    adj, _ = _structures("csr", q, dom, None)
    V, dV, crk, dcrk = computeCRKFactorsJVP(q, dom, W2, None, adjacency=adj)
    V0, _, crk0 = computeCRKFactors(q, dom, W2, adjacency=adj)
    assert torch.equal(_flat(V, crk), _flat(V0, crk0))
    assert torch.equal(_flat(dV, dcrk), torch.zeros_like(_flat(dV, dcrk)))
    a = _scaledTangents(_inputs(q, None), 7)
    b = _scaledTangents(_inputs(q, None), 8)
    fa = _flat(*_jvp(q, None, dom, adj, None, a)[1::2])
    fb = _flat(*_jvp(q, None, dom, adj, None, b)[1::2])
    fab = _flat(*_jvp(q, None, dom, adj, None, [x + y for x, y in zip(a, b)])[1::2])
    assertClose(fab, fa + fb, rtol=1e-12, atol=1e-13, what="linearity")
    # a direction with masses / densities only changes nothing that is returned
    qt = ParticleTangentState(masses=torch.ones_like(q.masses))
    _, dV, _, dcrk = computeCRKFactorsJVP(q, dom, W2, qt, adjacency=adj)
    assert torch.equal(_flat(dV, dcrk), torch.zeros_like(_flat(dV, dcrk)))


def test_crk_jvp_self_reference_object_and_dual_route(device):
    """``referenceState is queryParticles`` with no reference tangent: one set, one tangent
    (the aliased result up to summation order); a dual tensor given to `computeCRKFactors`
    raises, naming the explicit JVP (the entry point; no jvp() rule on the primal launches)."""
    import torch.autograd.forward_ad as fwAD

    dom = makeDomain(2, F64, device)
    q, _ = _wellConditioned(NQ[2], 1, 2, device, 70, dom, HMEAN[2])
    adj, _ = _structures("csr", q, dom, None)
    v = _scaledTangents(_inputs(q, None), 12)
    qt = ParticleTangentState(positions=v[0], supports=v[1])
    a = computeCRKFactorsJVP(q, dom, W2, qt, adjacency=adj)
    b = computeCRKFactorsJVP(q, dom, W2, qt, adjacency=adj, referenceState=q,
                             referenceAdjacency=adj)
    assertClose(_flat(b[1], b[3]), _flat(a[1], a[3]), rtol=1e-12, atol=1e-13, what="self")
    with fwAD.dual_level():
        p = ParticleState(fwAD.make_dual(q.positions, v[0]), q.supports, q.masses, q.kinds)
        with pytest.raises(NotImplementedError, match="computeCRKFactorsJVP"):
            computeCRKFactors(p, dom, W2, adjacency=adj)


def test_crk_jvp_argument_errors(device):
    dom = makeDomain(2, F64, device)
    q = cloud(6, 2, F64, device, 1, densities=False)
    r = cloud(4, 2, F64, device, 2, densities=False)
    qt = ParticleTangentState(positions=torch.zeros_like(q.positions))
    with pytest.raises(ValueError, match="referenceTangentState"):
        computeCRKFactorsJVP(q, dom, W2, qt,
                             referenceTangentState=ParticleTangentState(supports=q.supports))
    with pytest.raises(ValueError, match="shape"):
        computeCRKFactorsJVP(q, dom, W2, ParticleTangentState(positions=r.positions))
    with pytest.raises(ValueError, match="shape"):
        computeCRKFactorsJVP(q, dom, W2, qt, referenceState=r,
                             referenceTangentState=ParticleTangentState(supports=q.supports))
    with pytest.raises(TypeError, match="ParticleTangentState"):
        computeCRKFactorsJVP(q, dom, W2, q.positions)
    with pytest.raises(TypeError, match="dtype|float32"):
        computeCRKFactorsJVP(q, dom, W2, ParticleTangentState(positions=q.positions.float()))


@pytest.mark.parametrize("distinct", [False, True], ids=["aliased", "distinct"])
def test_crk_jvp_no_host_sync(device, distinct):
    dom = makeDomain(2, F64, device)
    q = cloud(10, 2, F64, device, seed=3, hMean=0.9, densities=False)
    r = cloud(11, 2, F64, device, seed=4, hMean=0.9, densities=False) if distinct else None
    v = _scaledTangents(_inputs(q, r), 10)
    _jvp(q, r, dom, None, None, v)  # warm-up outside the census
    with _census.census() as c:
        _jvp(q, r, dom, None, None, v)
    assert c.total == 0, c.sites


# --- reverse over forward ------------------------------------------------------------------


@pytest.mark.parametrize("traversal", ["csr", pytest.param("none", marks=pytest.mark.slow)])
def test_crk_jvp_reverse_over_forward(device, traversal):
    """float64 gradcheck of the JVP outputs w.r.t. positions, supports and the tangents (a
    jittered 3 x 3 block with h ~ 1.8 dx: O(1) second derivatives, so that the numerical
    Jacobian is not dominated by rounding)."""
    dom = makeDomain(2, F64, device)
    g = torch.Generator().manual_seed(1)
    pos = _block(2, -0.9, 3, 0.9, 5)
    h = 1.6 * (1 + 0.3 * (torch.rand(9, generator=g, dtype=F64) - 0.5))
    q = ParticleState(pos.to(device), h.to(device), torch.ones(9, dtype=F64, device=device),
                      torch.zeros(9, dtype=torch.int32, device=device))
    assert supportMargin(q, dom) > 1e-3
    adj, _ = _structures(traversal, q, dom, None)
    v = _scaledTangents(_inputs(q, None), 9)

    def fn(pos, h, vx, vh):
        p = ParticleState(pos, h, q.masses, q.kinds)
        _, dV, _, dcrk = computeCRKFactorsJVP(
            p, dom, W2, ParticleTangentState(positions=vx, supports=vh), adjacency=adj)
        return _flat(dV, dcrk)

    assert torch.autograd.gradcheck(fn, leaves(q.positions, q.supports, *v), **GRADCHECK)
