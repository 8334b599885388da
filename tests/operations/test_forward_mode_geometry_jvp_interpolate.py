"""Interpolate geometry JVP: the Tier-2 kernel
`interpolateJVPKernel` with the value tangent fused, d fbar_i = sum_j (f_j (dV_j W_ij +
V_j dW_ij) + df_j V_j W_ij).

Oracles (`jvp_helpers`): J·v of the reverse-mode Jacobian of `warpOperation` (rtol 1e-8) and
central differences (rtol 1e-5); the dual-tensor route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit `warpOperationJVP` route.

Matrix: every support scheme on ±15 % supports (2D, aliased sets, CSR) with V_j = m_j / rho_j
and with reference volumes (+ their tangent); distinct reference sets (CSR / grid / on-the-fly,
calibration, periodic, matrix fields); 1D; 3D (slow); coincident points; grid == CSR and
adjacency=None == explicit list; combined value + geometry == sum of both and a zero value
tangent leaves the geometry JVP bit-unchanged; mixed kinds in four modes (masked rows exactly
0); the scope matrix's rejections; the dual route's dropped channels (dual `masses` in a
self-interaction call, dual volumes); reverse over forward (gradcheck of the JVP output);
float32 against the float64 J·v. Neighbour structures are frozen with a 1e-3 h margin.
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
from value_jvp_cases import Case, aliased, tangents

from warpSPHCore import (
    CRKState,
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.dataTypes.corrections import CRKTangentState
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
INTERP = WarpOperation.Interpolate
EXACT = dict(rtol=1e-12, atol=1e-13)


def _field(n, shape, device, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device=device,
                                                                     dtype=dtype)


def _volumes(n, device, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return (0.05 + 0.1 * torch.rand(n, generator=g, dtype=F64)).to(device=device, dtype=dtype)


def _tangents(inputs, seed, supportIndices):
    """Standard-normal tangents; supports scaled by 0.1 (small relative changes)."""
    scales = [0.1 if k in supportIndices else 1.0 for k in range(len(inputs))]
    return randomTangents(inputs, seed, scales)


# --- case builders: (fn, inputs, jvp(tangents, **kw)) ---------------------------------
# fn(*inputs) is the primal; jvp maps tangents in the order of `inputs` (None = zero) to
# warpOperationJVP's explicit arguments.


def _aliased(q, dom, pr, adj, f, vol=None):
    """Self-interaction call: inputs (positions, supports, masses, densities, values[,
    volumes]); one tangent per input drives both roles."""
    inputs = [q.positions, q.supports, q.masses, q.densities, f]
    if vol is not None:
        inputs.append(vol)

    def fn(pos, h, m, rho, values, *v):
        p = ParticleState(pos, h, m, q.kinds, rho)
        kw = {"queryVolumes": v[0]} if v else {}
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj, **kw)

    def jvp(tans, **kw):
        dpos, dh, dm, drho, df = tans[:5]
        dv = tans[5] if vol is not None else None
        qt = ParticleTangentState(positions=dpos, supports=dh, densities=drho)
        rt = ParticleTangentState(positions=dpos, supports=dh, masses=dm, densities=drho)
        args = dict(queryTangentState=qt, referenceTangentState=rt, queryValues=f,
                    tangentQueryValues=df, referenceVolumes=vol, tangentReferenceVolumes=dv,
                    adjacency=adj)
        args.update(kw)
        return warpOperationJVP(q, pr, dom, **args)

    return fn, inputs, jvp


def _distinct(q, r, dom, pr, adj, f, vol=None):
    """Distinct reference set: inputs (query positions, supports, densities, reference
    positions, supports, masses, densities, reference values[, reference volumes])."""
    inputs = [q.positions, q.supports, q.densities, r.positions, r.supports, r.masses,
              r.densities, f]
    if vol is not None:
        inputs.append(vol)

    def fn(qp, qh, qrho, rp, rh, rm, rrho, values, *v):
        query = ParticleState(qp, qh, q.masses, q.kinds, qrho)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        return warpOperation(query, pr, dom, referenceValues=values, referenceParticles=ref,
                             referenceVolumes=v[0] if v else None, adjacency=adj)

    def jvp(tans, **kw):
        dqp, dqh, dqrho, drp, drh, drm, drrho, df = tans[:8]
        dv = tans[8] if vol is not None else None
        args = dict(queryTangentState=ParticleTangentState(positions=dqp, supports=dqh,
                                                           densities=dqrho),
                    referenceTangentState=ParticleTangentState(positions=drp, supports=drh,
                                                               masses=drm, densities=drrho),
                    referenceValues=f, tangentReferenceValues=df, referenceVolumes=vol,
                    tangentReferenceVolumes=dv, referenceParticles=r, adjacency=adj)
        args.update(kw)
        return warpOperationJVP(q, pr, dom, **args)

    return fn, inputs, jvp


def _verify(fn, inputs, tans, jvp, fd=True, dual=True, what=""):
    out = jvp(tans)
    checkJVP(fn, inputs, tans, out, fd=fd, what=what)
    if dual:
        assertClose(dualJVP(fn, inputs, tans), out, what=f"{what} dual route", **EXACT)
    return out


def _aliasedCase(device, d, n, seed, scheme, shape=(), volumes=False, traversal="csr", **kw):
    dom = makeDomain(d, F64, device)
    q = marginCloud(n, d, F64, device, seed=seed, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    f = _field(n, shape, device, seed + 1)
    vol = _volumes(n, device, seed + 2) if volumes else None
    return _aliased(q, dom, props(INTERP, supportMode=scheme, **kw), adj, f, vol)


# --- J·v, central differences and the dual route ----------------------------------------


@pytest.mark.parametrize("volumes", [False, True], ids=["densities", "volumes"])
@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_interpolate_jvp_schemes(device, scheme, volumes):
    fn, inputs, jvp = _aliasedCase(device, 2, 12, 100, scheme, (2,) if volumes else (),
                                   volumes)
    tans = _tangents(inputs, seed=int(scheme) + 10 * volumes, supportIndices=(1,))
    _verify(fn, inputs, tans, jvp, what=f"Interpolate {scheme.name}")


@pytest.mark.parametrize("traversal, volumes, periodic", [
    ("csr", True, False), ("grid", False, False), ("none", True, False), ("grid", True, True)],
    ids=["csr-volumes", "grid-densities", "none-volumes", "grid-periodic"])
def test_interpolate_jvp_distinct(device, traversal, volumes, periodic):
    dom = makeDomain(2, F64, device, periodic=periodic)
    q, r = marginPair(9, 11, 2, F64, device, seed=200, domain=dom)
    adj = neighbourStructure(traversal, q, dom, r)
    pr = props(INTERP, supportMode=SupportScheme.MeanSymmetric, n_h=3.0,
               calibrateNormalization=True)
    f = _field(11, (2, 2), device, 201)
    vol = _volumes(11, device, 202) if volumes else None
    fn, inputs, jvp = _distinct(q, r, dom, pr, adj, f, vol)
    tans = _tangents(inputs, seed=203, supportIndices=(1, 4))
    _verify(fn, inputs, tans, jvp, what=f"Interpolate distinct {traversal}")


@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.Scatter,
                                    SupportScheme.SuperSymmetric], ids=lambda s: s.name)
def test_interpolate_jvp_1d(device, scheme):
    fn, inputs, jvp = _aliasedCase(device, 1, 10, 300, scheme, (), volumes=False)
    tans = _tangents(inputs, seed=301, supportIndices=(1,))
    _verify(fn, inputs, tans, jvp, what=f"Interpolate 1D {scheme.name}")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.KernelMeanSymmetric],
                         ids=lambda s: s.name)
def test_interpolate_jvp_3d(device, scheme):
    dom = makeDomain(3, F64, device)
    q, r = marginPair(8, 9, 3, F64, device, seed=400, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    fn, inputs, jvp = _distinct(q, r, dom, props(INTERP, supportMode=scheme), adj,
                                _field(9, (3,), device, 401), _volumes(9, device, 402))
    _verify(fn, inputs, _tangents(inputs, 403, (1, 4)), jvp, what="Interpolate 3D")


def test_interpolate_jvp_coincident(device):
    """A distinct pair at r = 0 (and the self pairs): dW = grad W(0) . dx + dW/dh dh."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    q = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    adj = neighbourStructure("csr", q, dom)
    fn, inputs, jvp = _aliased(q, dom, props(INTERP, supportMode=SupportScheme.Gather), adj,
                               _field(10, (), device, 501))
    _verify(fn, inputs, _tangents(inputs, 502, (1,)), jvp, fd=False, what="coincident")


# --- traversals, combined tangents ----------------------------------------------------------


def test_interpolate_jvp_traversals_agree(device):
    """Grid traversal == CSR, adjacency=None == explicit list (explicit and dual routes)."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    f = _field(12, (3,), device, 601)
    vol = _volumes(12, device, 602)
    pr = props(INTERP, supportMode=SupportScheme.KernelMeanSymmetric)
    outs, duals = {}, {}
    for traversal in ("csr", "grid", "none"):
        fn, inputs, jvp = _aliased(q, dom, pr, neighbourStructure(traversal, q, dom), f, vol)
        tans = _tangents(inputs, seed=603, supportIndices=(1,))
        outs[traversal] = jvp(tans)
        duals[traversal] = dualJVP(fn, inputs, tans)
    assert outs["csr"].abs().max() > 0
    for traversal in ("grid", "none"):
        assertClose(outs[traversal], outs["csr"], what=f"{traversal} vs csr", **EXACT)
        assertClose(duals[traversal], outs["csr"], what=f"dual {traversal} vs csr", **EXACT)


def test_interpolate_jvp_combined(device):
    """value + geometry == the sum of the separate JVPs; a zero value tangent leaves the
    geometry-only result bit-unchanged; the value-only JVP is Tier 1 (the operator on the
    tangent values)."""
    fn, inputs, jvp = _aliasedCase(device, 2, 12, 700, SupportScheme.PartialSymmetric, (2,),
                                   volumes=True)
    tans = _tangents(inputs, seed=701, supportIndices=(1,))
    geometry = list(tans)
    geometry[4] = None
    value = [None] * len(tans)
    value[4] = tans[4]
    both = jvp(tans)
    geo = jvp(geometry)
    val = jvp(value)
    assert geo.abs().max() > 0 and val.abs().max() > 0
    assertClose(both, geo + val, what="combined vs sum", **EXACT)
    zeroValue = list(geometry)
    zeroValue[4] = torch.zeros_like(tans[4])
    assert torch.equal(jvp(zeroValue), geo)
    fnValue = lambda values: fn(*inputs[:4], values, *inputs[5:])  # noqa: E731
    assert torch.equal(val, fnValue(tans[4]))
    checkJVP(fn, inputs, geometry, geo, what="geometry only")


# --- kinds ----------------------------------------------------------------------------------


def _kinds(n, shift=0):
    return [(k + shift) % 4 for k in range(n)]


@pytest.mark.parametrize("mode", [OperationDirection.FluidToFluid,
                                  OperationDirection.BoundaryToFluid,
                                  OperationDirection.AllToAll,
                                  OperationDirection.FluidToAll], ids=lambda m: m.name)
def test_interpolate_jvp_kinds(device, mode):
    """Mixed kinds: the JVP equals J·v of the masked primal; masked query rows are 0."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(14, 2, F64, device, seed=800, domain=dom, hMean=0.9, kinds=_kinds(14))
    adj = neighbourStructure("csr", q, dom)
    pr = props(INTERP, supportMode=SupportScheme.Scatter, operationMode=mode)
    fn, inputs, jvp = _aliased(q, dom, pr, adj, _field(14, (), device, 801),
                               _volumes(14, device, 802))
    out = _verify(fn, inputs, _tangents(inputs, 803, (1,)), jvp, fd=False,
                  what=f"kinds {mode.name}")
    qm, _ = masks(int(mode), q.kinds.cpu().numpy(), q.kinds.cpu().numpy())
    qm = torch.as_tensor(qm, device=out.device)
    assert torch.equal(out[~qm], torch.zeros_like(out[~qm]))
    assert out[qm].abs().max() > 0


def test_interpolate_jvp_kinds_distinct(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(9, 10, 2, F64, device, seed=820, domain=dom, hMean=0.9)
    q = ParticleState(q.positions, q.supports, q.masses,
                      torch.tensor(_kinds(9), dtype=torch.int32, device=device), q.densities)
    r = ParticleState(r.positions, r.supports, r.masses,
                      torch.tensor(_kinds(10, 1), dtype=torch.int32, device=device),
                      r.densities)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(INTERP, supportMode=SupportScheme.SuperSymmetric,
               operationMode=OperationDirection.AllToFluid)
    fn, inputs, jvp = _distinct(q, r, dom, pr, adj, _field(10, (2,), device, 821))
    _verify(fn, inputs, _tangents(inputs, 822, (1, 4)), jvp, fd=False, what="kinds distinct")


# --- scope rejections -----------------------------------------------------------------------


def test_interpolate_jvp_rejections(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=900, domain=dom)
    pr = props(INTERP)
    f = _field(8, (), device, 901)
    adj = neighbourStructure("csr", q, dom)
    v = _field(8, (2,), device, 902)
    qt = ParticleTangentState(positions=v)
    base = dict(queryValues=f, queryTangentState=qt, adjacency=adj)
    with pytest.raises(ValueError, match="query masses"):
        warpOperationJVP(q, pr, dom, **{**base, "queryTangentState": ParticleTangentState(
            positions=v, masses=torch.ones_like(q.masses))})
    vol = _volumes(8, device, 903)
    with pytest.raises(ValueError, match="tangentQueryVolumes"):
        warpOperationJVP(q, pr, dom, queryVolumes=vol, tangentQueryVolumes=vol, **base)
    with pytest.raises(ValueError, match="tangentReferenceVolumes"):
        warpOperationJVP(q, pr, dom, tangentReferenceVolumes=vol, **base)
    A = 1.0 + 0.1 * _field(8, (), device, 904)
    B = 0.1 * _field(8, (2,), device, 905)
    crk = CRKState(A, B, torch.zeros_like(B), torch.zeros(8, 2, 2, dtype=F64, device=device))
    crkT = CRKTangentState(*(torch.zeros_like(x) for x in (crk.A, crk.B, crk.gradA,
                                                            crk.gradB)))
    with pytest.raises(ValueError, match="crkState"):
        warpOperationJVP(q, pr, dom, crkTangentState=crkT, **base)
    L = torch.eye(2, dtype=F64, device=device).expand(8, 2, 2).contiguous()
    with pytest.raises(NotImplementedError, match="renormalization"):
        warpOperationJVP(q, pr, dom, renormalizationState=L, **base)
    # grad-h is never read: accepted and ignored (test_gradh_forward_mode.py)
    torch.testing.assert_close(
        warpOperationJVP(q, pr, dom, gradHState=torch.ones_like(q.masses) * 1.3, **base),
        warpOperationJVP(q, pr, dom, **base), rtol=0.0, atol=0.0)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("corr", ["crk", "crk+volumes"])
def test_interpolate_jvp_crk(device, corr, dim, traversal):
    """CRK (W^R = A_i (1 + B_i . x_ij) W_ij): positions, supports, masses, densities, values
    and the A, B tangents (gradA and gradB, which the Interpolate never reads, with them)
    against J·v and central differences; the dual route equals the explicit one."""
    q, r, dom = aliased(dim, 10, 910 + dim, device)
    c = Case(q, r, dom, props(INTERP), traversal, corr, (2,) if dim == 2 else (), seed=920)
    out = c.check(tangents(c.P, seed=921), what=f"{corr}/{dim}D/{traversal}")
    assert float(out.abs().max()) > 0.0


# --- dual route: dropped channels -------------------------------------------------------------


def test_interpolate_dual_self_interaction_masses_and_volumes(device):
    """A dual `masses` tensor in a self-interaction call lights up the query-mass slot as
    well; it is dropped (no formula reads it) and the tangent matches J·v. Likewise a dual
    `queryVolumes` tensor (reference volumes default to it)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=1000, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(INTERP, supportMode=SupportScheme.KernelMeanSymmetric)
    f = _field(12, (), device, 1001)
    fn, inputs, jvp = _aliased(q, dom, pr, adj, f)
    dm = _field(12, (), device, 1002)
    tans = [None, None, dm, None, None]
    out = dualJVP(fn, inputs, tans)
    assertClose(out, jacobianJVP(fn, inputs, tans), what="dual masses vs J.v")
    assertClose(out, jvp(tans), what="dual masses vs explicit", **EXACT)
    assert out.abs().max() > 0
    vol = _volumes(12, device, 1003)
    fn, inputs, jvp = _aliased(q, dom, pr, adj, f, vol)
    dv = _field(12, (), device, 1004)
    tans = [None, None, dm, None, None, dv]
    out = dualJVP(fn, inputs, tans)
    assertClose(out, jacobianJVP(fn, inputs, tans), what="dual volumes vs J.v")
    assertClose(out, jvp(tans), what="dual volumes vs explicit", **EXACT)


# --- reverse over forward ---------------------------------------------------------------------


def test_interpolate_jvp_reverse_over_forward(device):
    """gradcheck of the JVP output w.r.t. positions, supports, values and the tangents."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=1100, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(INTERP, supportMode=SupportScheme.MeanSymmetric)
    f = _field(7, (), device, 1101)
    v, dh, df = randomTangents([q.positions, q.supports, f], seed=1102, scales=[1.0, 0.1, 1.0])
    inputs = leaves(q.positions, q.supports, f, v, dh, df)

    def fn(pos, h, values, tpos, th, tf):
        p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
        t = ParticleTangentState(positions=tpos, supports=th)
        return warpOperationJVP(p, pr, dom, queryValues=values, tangentQueryValues=tf,
                                queryTangentState=t, adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


# --- float32 ----------------------------------------------------------------------------------


def test_interpolate_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    dom64 = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=1200, domain=dom64)
    adj = neighbourStructure("csr", q, dom64)
    pr = props(INTERP, supportMode=SupportScheme.SuperSymmetric)
    f = _field(12, (2,), device, 1201)
    vol = _volumes(12, device, 1202)
    fn, inputs, jvp = _aliased(q, dom64, pr, adj, f, vol)
    tans = _tangents(inputs, seed=1203, supportIndices=(1,))
    ref = jacobianJVP(fn, inputs, tans)
    f32 = torch.float32
    dom32 = makeDomain(2, f32, device)
    q32 = ParticleState(*(x.to(f32) for x in (q.positions, q.supports, q.masses)), q.kinds,
                        q.densities.to(f32))
    adj32 = neighbourStructure("csr", q32, dom32)
    _, _, jvp32 = _aliased(q32, dom32, pr, adj32, f.to(f32), vol.to(f32))
    out = jvp32([t.to(f32) for t in tans])
    assert out.dtype == f32
    assertClose(out.to(F64), ref, rtol=1e-4, atol=1e-5, what="float32")


# --- empty populations ------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["query", "reference"])
def test_interpolate_jvp_empty(device, empty):
    """Zero queries: shape-correct empty tangent; zero references: finite zeros."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=1300, domain=dom)
    e = ParticleState(*(x[:0] for x in (q.positions, q.supports, q.masses, q.kinds,
                                          q.densities)))
    a, b = (e, q) if empty == "query" else (q, e)
    nr = b.positions.shape[0]
    out = warpOperationJVP(
        a, props(INTERP), dom, referenceParticles=b,
        referenceValues=_field(nr, (3,), device, 1301),
        tangentReferenceValues=_field(nr, (3,), device, 1302),
        queryTangentState=ParticleTangentState(positions=torch.ones_like(a.positions)),
        referenceTangentState=ParticleTangentState(positions=torch.ones_like(b.positions)))
    assert out.shape == (a.positions.shape[0], 3)
    assert torch.equal(out, torch.zeros_like(out))
