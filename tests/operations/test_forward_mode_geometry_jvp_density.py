"""Density geometry JVP: the Tier-2 kernel
`densityJVPKernel`, drho_i = N sum_j (dm_j W_ij + m_j dW_ij).

Oracles (`jvp_helpers`): J·v of the reverse-mode Jacobian of `warpOperation` (rtol 1e-8) and
central differences (rtol 1e-5); the dual-tensor route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit `warpOperationJVP` route.

Matrix: position, support and reference-mass tangents on ±15 % supports; every support scheme
in 1D (with and without lattice calibration), Gather in 2D (aliased and distinct sets, with
calibration), grid / on-the-fly traversals, periodic, 3D (slow); coincident points; grid ==
CSR and adjacency=None == explicit list; mixed kinds in three modes (masked rows exactly 0);
the scope matrix's rejections (value, density, query-mass and query-volume tangents); the dual
route's dropped channels (dual `masses` in a self-interaction call, dual densities / volumes
that Density ignores); reverse over forward (gradcheck of the JVP output); float32 against the
float64 J·v. Neighbour structures are frozen with a 1e-3 h margin.
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, checkJVP, dualJVP, jacobianJVP, randomTangents
from sph_reference import (
    GRADCHECK,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    masks,
    neighbourStructure,
    props,
)

from warpSPHCore import (
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
DENSITY = WarpOperation.Density
EXACT = dict(rtol=1e-12, atol=1e-13)


def _rand(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device)


def _tangents(inputs, seed, supportIndices):
    """Standard-normal tangents; supports scaled by 0.1 (small relative changes)."""
    scales = [0.1 if k in supportIndices else 1.0 for k in range(len(inputs))]
    return randomTangents(inputs, seed, scales)


# --- case builders: (fn, inputs, jvp(tangents, **kw)) -------------------------------------


def _aliased(q, dom, pr, adj):
    """Self-interaction call: inputs (positions, supports, masses); one tangent per input
    drives both roles (the mass tangent is a reference-side tangent)."""
    inputs = [q.positions, q.supports, q.masses]

    def fn(pos, h, m):
        return warpOperation(ParticleState(pos, h, m, q.kinds, q.densities), pr, dom,
                             adjacency=adj)

    def jvp(tans, **kw):
        dpos, dh, dm = tans
        args = dict(queryTangentState=ParticleTangentState(positions=dpos, supports=dh),
                    referenceTangentState=ParticleTangentState(positions=dpos, supports=dh,
                                                               masses=dm),
                    adjacency=adj)
        args.update(kw)
        return warpOperationJVP(q, pr, dom, **args)

    return fn, inputs, jvp


def _distinct(q, r, dom, pr, adj):
    """Distinct reference set: inputs (query positions, supports, reference positions,
    supports, masses)."""
    inputs = [q.positions, q.supports, r.positions, r.supports, r.masses]

    def fn(qp, qh, rp, rh, rm):
        query = ParticleState(qp, qh, q.masses, q.kinds, q.densities)
        ref = ParticleState(rp, rh, rm, r.kinds, r.densities)
        return warpOperation(query, pr, dom, referenceParticles=ref, adjacency=adj)

    def jvp(tans, **kw):
        dqp, dqh, drp, drh, drm = tans
        args = dict(queryTangentState=ParticleTangentState(positions=dqp, supports=dqh),
                    referenceTangentState=ParticleTangentState(positions=drp, supports=drh,
                                                               masses=drm),
                    referenceParticles=r, adjacency=adj)
        args.update(kw)
        return warpOperationJVP(q, pr, dom, **args)

    return fn, inputs, jvp


def _verify(fn, inputs, tans, jvp, fd=True, dual=True, what=""):
    out = jvp(tans)
    assert out.shape == fn(*inputs).shape
    checkJVP(fn, inputs, tans, out, fd=fd, what=what)
    if dual:
        assertClose(dualJVP(fn, inputs, tans), out, what=f"{what} dual route", **EXACT)
    return out


# --- J·v, central differences and the dual route ----------------------------------------


@pytest.mark.parametrize("calibrate", [False, True], ids=["plain", "calibrated"])
@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_density_jvp_1d_schemes(device, scheme, calibrate):
    dom = makeDomain(1, F64, device)
    q = marginCloud(10, 1, F64, device, seed=100, domain=dom)
    kw = dict(n_h=3.0, calibrateNormalization=True) if calibrate else {}
    fn, inputs, jvp = _aliased(q, dom, props(DENSITY, supportMode=scheme, **kw),
                               neighbourStructure("csr", q, dom))
    tans = _tangents(inputs, seed=int(scheme) + 10 * calibrate, supportIndices=(1,))
    _verify(fn, inputs, tans, jvp, what=f"Density 1D {scheme.name}")


@pytest.mark.parametrize("traversal, calibrate, periodic", [
    ("csr", False, False), ("csr", True, False), ("grid", False, False),
    ("none", True, False), ("grid", True, True)],
    ids=["csr", "csr-calibrated", "grid", "none-calibrated", "grid-periodic"])
def test_density_jvp_2d_gather(device, traversal, calibrate, periodic):
    dom = makeDomain(2, F64, device, periodic=periodic)
    q = marginCloud(16, 2, F64, device, seed=200, domain=dom)
    kw = dict(n_h=3.0, calibrateNormalization=True) if calibrate else {}
    fn, inputs, jvp = _aliased(q, dom, props(DENSITY, supportMode=SupportScheme.Gather, **kw),
                               neighbourStructure(traversal, q, dom))
    _verify(fn, inputs, _tangents(inputs, 201, (1,)), jvp, what=f"Density 2D {traversal}")


@pytest.mark.parametrize("traversal, scheme", [
    ("csr", SupportScheme.Gather), ("grid", SupportScheme.MeanSymmetric),
    ("none", SupportScheme.KernelMeanSymmetric)], ids=["csr", "grid", "none"])
def test_density_jvp_2d_distinct(device, traversal, scheme):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(9, 11, 2, F64, device, seed=250, domain=dom)
    pr = props(DENSITY, supportMode=scheme, n_h=3.0, calibrateNormalization=True)
    fn, inputs, jvp = _distinct(q, r, dom, pr, neighbourStructure(traversal, q, dom, r))
    _verify(fn, inputs, _tangents(inputs, 251, (1, 3)), jvp, what=f"distinct {traversal}")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.SuperSymmetric],
                         ids=lambda s: s.name)
def test_density_jvp_3d(device, scheme):
    dom = makeDomain(3, F64, device)
    q, r = marginPair(8, 9, 3, F64, device, seed=300, domain=dom)
    fn, inputs, jvp = _distinct(q, r, dom, props(DENSITY, supportMode=scheme),
                                neighbourStructure("csr", q, dom, r))
    _verify(fn, inputs, _tangents(inputs, 301, (1, 3)), jvp, what="Density 3D")


def test_density_jvp_coincident(device):
    """A distinct pair at r = 0 (and the self pairs): dW = grad W(0) . dx + dW/dh dh."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=350, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    q = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    fn, inputs, jvp = _aliased(q, dom, props(DENSITY, supportMode=SupportScheme.Gather),
                               neighbourStructure("csr", q, dom))
    _verify(fn, inputs, _tangents(inputs, 351, (1,)), jvp, fd=False, what="coincident")


def test_density_jvp_separate_role_tangents(device):
    """Self-interaction call with different query and reference tangents (explicit API only):
    J·v of the primal with the query and reference roles as separate inputs."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=380, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENSITY, supportMode=SupportScheme.SuperSymmetric)
    inputs = [q.positions, q.supports, q.positions, q.supports, q.masses]

    def fn(qp, qh, rp, rh, rm):
        return warpOperation(ParticleState(qp, qh, q.masses, q.kinds), pr, dom, adjacency=adj,
                             referenceParticles=ParticleState(rp, rh, rm, q.kinds))

    tans = _tangents(inputs, seed=381, supportIndices=(1, 3))
    out = warpOperationJVP(q, pr, dom, adjacency=adj,
                           queryTangentState=ParticleTangentState(positions=tans[0],
                                                                  supports=tans[1]),
                           referenceTangentState=ParticleTangentState(
                               positions=tans[2], supports=tans[3], masses=tans[4]))
    checkJVP(fn, inputs, tans, out, what="separate role tangents")


# --- traversals -----------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2], ids=["1d", "2d"])
def test_density_jvp_traversals_agree(device, dim):
    """Grid traversal == CSR, adjacency=None == explicit list (explicit and dual routes)."""
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud(12, dim, F64, device, seed=400, domain=dom, hMean=0.6)
    pr = props(DENSITY, supportMode=SupportScheme.PartialSymmetric)
    outs, duals = {}, {}
    for traversal in ("csr", "grid", "none"):
        fn, inputs, jvp = _aliased(q, dom, pr, neighbourStructure(traversal, q, dom))
        tans = _tangents(inputs, seed=401, supportIndices=(1,))
        outs[traversal] = jvp(tans)
        duals[traversal] = dualJVP(fn, inputs, tans)
    assert outs["csr"].abs().max() > 0
    for traversal in ("grid", "none"):
        assertClose(outs[traversal], outs["csr"], what=f"{traversal} vs csr", **EXACT)
        assertClose(duals[traversal], outs["csr"], what=f"dual {traversal} vs csr", **EXACT)


# --- kinds ----------------------------------------------------------------------------------


def _kinds(n, shift=0):
    return [(k + shift) % 4 for k in range(n)]


@pytest.mark.parametrize("mode", [OperationDirection.FluidToFluid,
                                  OperationDirection.GhostToBoundary,
                                  OperationDirection.AllToAll], ids=lambda m: m.name)
def test_density_jvp_kinds(device, mode):
    """Mixed kinds: the JVP equals J·v of the masked primal; masked query rows are 0."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(14, 2, F64, device, seed=500, domain=dom, hMean=0.9, kinds=_kinds(14))
    pr = props(DENSITY, supportMode=SupportScheme.Scatter, operationMode=mode)
    fn, inputs, jvp = _aliased(q, dom, pr, neighbourStructure("csr", q, dom))
    out = _verify(fn, inputs, _tangents(inputs, 501, (1,)), jvp, fd=False,
                  what=f"kinds {mode.name}")
    qm, _ = masks(int(mode), q.kinds.cpu().numpy(), q.kinds.cpu().numpy())
    qm = torch.as_tensor(qm, device=out.device)
    assert torch.equal(out[~qm], torch.zeros_like(out[~qm]))
    assert out[qm].abs().max() > 0


def test_density_jvp_kinds_distinct(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(9, 10, 2, F64, device, seed=520, domain=dom, hMean=0.9)
    q = ParticleState(q.positions, q.supports, q.masses,
                      torch.tensor(_kinds(9), dtype=torch.int32, device=device))
    r = ParticleState(r.positions, r.supports, r.masses,
                      torch.tensor(_kinds(10, 1), dtype=torch.int32, device=device))
    pr = props(DENSITY, supportMode=SupportScheme.MeanSymmetric,
               operationMode=OperationDirection.FluidToAll)
    fn, inputs, jvp = _distinct(q, r, dom, pr, neighbourStructure("csr", q, dom, r))
    _verify(fn, inputs, _tangents(inputs, 521, (1, 3)), jvp, fd=False, what="kinds distinct")


# --- scope rejections -----------------------------------------------------------------------


def test_density_jvp_rejections(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=600, domain=dom)
    pr = props(DENSITY)
    adj = neighbourStructure("csr", q, dom)
    v = _rand(8, (2,), device, 601)
    base = dict(queryTangentState=ParticleTangentState(positions=v), adjacency=adj)
    f = _rand(8, (), device, 602)
    with pytest.raises(NotImplementedError, match="no value input"):
        warpOperationJVP(q, pr, dom, queryValues=f, tangentQueryValues=f, **base)
    with pytest.raises(NotImplementedError, match="no value input"):
        warpOperationJVP(q, pr, dom, queryValues=f, tangentQueryValues=f, adjacency=adj)
    for role in ("queryTangentState", "referenceTangentState"):
        with pytest.raises(NotImplementedError, match="densities"):
            warpOperationJVP(q, pr, dom, **{**base, role: ParticleTangentState(
                positions=v, densities=torch.ones_like(q.densities))})
    with pytest.raises(ValueError, match="query masses"):
        warpOperationJVP(q, pr, dom, **{**base, "queryTangentState": ParticleTangentState(
            positions=v, masses=torch.ones_like(q.masses))})
    vol = 0.1 + 0.0 * q.masses
    with pytest.raises(ValueError, match="tangentQueryVolumes"):
        warpOperationJVP(q, pr, dom, queryVolumes=vol, tangentQueryVolumes=vol, **base)


# --- dual route: dropped channels -------------------------------------------------------------


def test_density_dual_self_interaction_masses(device):
    """A dual `masses` tensor in a self-interaction call lights up the query-mass slot as
    well; it is dropped (no formula reads it) and the tangent matches J·v."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=700, domain=dom)
    fn, inputs, jvp = _aliased(q, dom, props(DENSITY, supportMode=SupportScheme.Scatter),
                               neighbourStructure("csr", q, dom))
    dm = _rand(12, (), device, 701)
    for tans in ([None, None, dm], [_rand(12, (2,), device, 702), None, dm]):
        out = dualJVP(fn, inputs, tans)
        assertClose(out, jacobianJVP(fn, inputs, tans), what="dual masses vs J.v")
        assertClose(out, jvp(tans), what="dual masses vs explicit", **EXACT)
        assert out.abs().max() > 0


def test_density_dual_ignored_channels(device):
    """Densities and volumes are accepted and ignored by Density: dual tensors there give a
    zero tangent (no raise), and add nothing to a position tangent."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=750, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENSITY)
    vol = 0.1 + 0.0 * q.masses

    def fn(pos, rho, V):
        return warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds, rho), pr, dom,
                             adjacency=adj, queryVolumes=V)

    inputs = [q.positions, q.densities, vol]
    drho, dV = _rand(10, (), device, 751), _rand(10, (), device, 752)
    zero = dualJVP(fn, inputs, [None, drho, dV])
    assert torch.equal(zero, torch.zeros_like(zero))
    v = _rand(10, (2,), device, 753)
    out = dualJVP(fn, inputs, [v, drho, dV])
    ref = warpOperationJVP(q, pr, dom, queryTangentState=ParticleTangentState(positions=v),
                           adjacency=adj)
    assertClose(out, ref, what="ignored channels", **EXACT)


# --- reverse over forward ---------------------------------------------------------------------


def test_density_jvp_reverse_over_forward(device):
    """gradcheck of the JVP output w.r.t. positions, supports, masses and the tangents."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=800, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENSITY, supportMode=SupportScheme.KernelMeanSymmetric)
    v, dh, dm = randomTangents([q.positions, q.supports, q.masses], seed=801,
                               scales=[1.0, 0.1, 1.0])
    inputs = leaves(q.positions, q.supports, q.masses, v, dh, dm)

    def fn(pos, h, m, tpos, th, tm):
        p = ParticleState(pos, h, m, q.kinds)
        return warpOperationJVP(p, pr, dom,
                                queryTangentState=ParticleTangentState(positions=tpos,
                                                                       supports=th),
                                referenceTangentState=ParticleTangentState(
                                    positions=tpos, supports=th, masses=tm),
                                adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_density_jvp_reverse_over_forward_1d_distinct(device):
    dom = makeDomain(1, F64, device)
    q, r = marginPair(5, 6, 1, F64, device, seed=850, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(DENSITY, supportMode=SupportScheme.MeanSymmetric, n_h=3.0,
               calibrateNormalization=True)
    v, w = randomTangents([q.positions, r.positions], seed=851)
    inputs = leaves(q.positions, r.positions, r.supports, v, w)

    def fn(qp, rp, rh, tq, tr):
        return warpOperationJVP(ParticleState(qp, q.supports, q.masses, q.kinds), pr, dom,
                                referenceParticles=ParticleState(rp, rh, r.masses, r.kinds),
                                queryTangentState=ParticleTangentState(positions=tq),
                                referenceTangentState=ParticleTangentState(positions=tr),
                                adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


# --- float32 ----------------------------------------------------------------------------------


def test_density_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    dom64 = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=900, domain=dom64)
    pr = props(DENSITY, supportMode=SupportScheme.SuperSymmetric)
    fn, inputs, _ = _aliased(q, dom64, pr, neighbourStructure("csr", q, dom64))
    tans = _tangents(inputs, seed=901, supportIndices=(1,))
    ref = jacobianJVP(fn, inputs, tans)
    f32 = torch.float32
    dom32 = makeDomain(2, f32, device)
    q32 = ParticleState(*(x.to(f32) for x in (q.positions, q.supports, q.masses)), q.kinds,
                        q.densities.to(f32))
    _, _, jvp32 = _aliased(q32, dom32, pr, neighbourStructure("csr", q32, dom32))
    out = jvp32([t.to(f32) for t in tans])
    assert out.dtype == f32
    assertClose(out.to(F64), ref, rtol=1e-4, atol=1e-5, what="float32")


# --- empty populations ------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["query", "reference"])
def test_density_jvp_empty(device, empty):
    """Zero queries: shape-correct empty tangent; zero references: finite zeros."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=1000, domain=dom)
    e = ParticleState(*(x[:0] for x in (q.positions, q.supports, q.masses, q.kinds)))
    a, b = (e, q) if empty == "query" else (q, e)
    out = warpOperationJVP(
        a, props(DENSITY), dom, referenceParticles=b,
        queryTangentState=ParticleTangentState(positions=torch.ones_like(a.positions)),
        referenceTangentState=ParticleTangentState(positions=torch.ones_like(b.positions),
                                                   masses=torch.ones_like(b.masses)))
    assert out.shape == (a.positions.shape[0],)
    assert torch.equal(out, torch.zeros_like(out))
