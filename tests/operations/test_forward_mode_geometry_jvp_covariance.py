"""Covariance geometry JVP: the Tier-2 kernel
`covarianceJVPKernel`, the matrix tangent only,
dC_i = -sum_j (dV_j x_ij (x) G_ij + V_j dx_ij (x) G_ij + V_j x_ij (x) dG_ij).

Oracles (`jvp_helpers`): J·v of the reverse-mode Jacobian of `warpOperation` (rtol 1e-8) and
central differences (rtol 1e-5); the dual-tensor route (`torch.autograd.forward_ad` through
`warpOperation`) equals the explicit `warpOperationJVP` route.

Matrix: every support scheme on ±15 % supports (2D, aliased sets, CSR) with V_j = m_j / rho_j
and with reference volumes (+ their tangent); distinct reference sets (CSR / grid /
on-the-fly, calibration, periodic); 1D; 3D (slow); coincident points; grid == CSR and
adjacency=None == explicit list; the count output (no tangent) in the dual route; mixed kinds
in three modes (masked rows exactly 0); the scope matrix's rejections; the dual route's
dropped channels (dual `masses` in a self-interaction call, dual volumes); reverse over
forward (gradcheck of the JVP output); float32 against the float64 J·v. Neighbour structures
are frozen with a 1e-3 h margin.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
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
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
COV = WarpOperation.Covariance
EXACT = dict(rtol=1e-12, atol=1e-13)


def _rand(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device)


def _volumes(n, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (0.05 + 0.1 * torch.rand(n, generator=g, dtype=F64)).to(device)


def _tangents(inputs, seed, supportIndices):
    """Standard-normal tangents; supports scaled by 0.1 (small relative changes)."""
    scales = [0.1 if k in supportIndices else 1.0 for k in range(len(inputs))]
    return randomTangents(inputs, seed, scales)


# --- case builders: (fn, inputs, jvp(tangents, **kw)) -------------------------------------


def _aliased(q, dom, pr, adj, vol=None):
    """Self-interaction call: inputs (positions, supports, masses, densities[, volumes]); one
    tangent per input drives both roles."""
    inputs = [q.positions, q.supports, q.masses, q.densities]
    if vol is not None:
        inputs.append(vol)

    def fn(pos, h, m, rho, *v):
        p = ParticleState(pos, h, m, q.kinds, rho)
        kw = {"queryVolumes": v[0]} if v else {}
        return warpOperation(p, pr, dom, adjacency=adj, **kw)

    def jvp(tans, **kw):
        dpos, dh, dm, drho = tans[:4]
        dv = tans[4] if vol is not None else None
        qt = ParticleTangentState(positions=dpos, supports=dh, densities=drho)
        rt = ParticleTangentState(positions=dpos, supports=dh, masses=dm, densities=drho)
        args = dict(queryTangentState=qt, referenceTangentState=rt, referenceVolumes=vol,
                    tangentReferenceVolumes=dv, adjacency=adj)
        args.update(kw)
        return warpOperationJVP(q, pr, dom, **args)

    return fn, inputs, jvp


def _distinct(q, r, dom, pr, adj, vol=None):
    """Distinct reference set: inputs (query positions, supports, densities, reference
    positions, supports, masses, densities[, reference volumes])."""
    inputs = [q.positions, q.supports, q.densities, r.positions, r.supports, r.masses,
              r.densities]
    if vol is not None:
        inputs.append(vol)

    def fn(qp, qh, qrho, rp, rh, rm, rrho, *v):
        query = ParticleState(qp, qh, q.masses, q.kinds, qrho)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        return warpOperation(query, pr, dom, referenceParticles=ref,
                             referenceVolumes=v[0] if v else None, adjacency=adj)

    def jvp(tans, **kw):
        dqp, dqh, dqrho, drp, drh, drm, drrho = tans[:7]
        dv = tans[7] if vol is not None else None
        args = dict(queryTangentState=ParticleTangentState(positions=dqp, supports=dqh,
                                                           densities=dqrho),
                    referenceTangentState=ParticleTangentState(positions=drp, supports=drh,
                                                               masses=drm, densities=drrho),
                    referenceVolumes=vol, tangentReferenceVolumes=dv, referenceParticles=r,
                    adjacency=adj)
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


@pytest.mark.parametrize("volumes", [False, True], ids=["densities", "volumes"])
@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_covariance_jvp_schemes(device, scheme, volumes):
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=100, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    fn, inputs, jvp = _aliased(q, dom, props(COV, supportMode=scheme), adj,
                               _volumes(12, device, 101) if volumes else None)
    tans = _tangents(inputs, seed=int(scheme) + 10 * volumes, supportIndices=(1,))
    _verify(fn, inputs, tans, jvp, what=f"Covariance {scheme.name}")


@pytest.mark.parametrize("traversal, volumes, periodic", [
    ("csr", True, False), ("grid", False, False), ("none", True, False), ("grid", True, True)],
    ids=["csr-volumes", "grid-densities", "none-volumes", "grid-periodic"])
def test_covariance_jvp_distinct(device, traversal, volumes, periodic):
    dom = makeDomain(2, F64, device, periodic=periodic)
    q, r = marginPair(9, 11, 2, F64, device, seed=200, domain=dom)
    adj = neighbourStructure(traversal, q, dom, r)
    pr = props(COV, supportMode=SupportScheme.MeanSymmetric, n_h=3.0,
               calibrateNormalization=True)
    fn, inputs, jvp = _distinct(q, r, dom, pr, adj, _volumes(11, device, 201) if volumes else None)
    _verify(fn, inputs, _tangents(inputs, 202, (1, 4)), jvp,
            what=f"Covariance distinct {traversal}")


@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.Scatter,
                                    SupportScheme.SuperSymmetric], ids=lambda s: s.name)
def test_covariance_jvp_1d(device, scheme):
    dom = makeDomain(1, F64, device)
    q = marginCloud(10, 1, F64, device, seed=300, domain=dom)
    fn, inputs, jvp = _aliased(q, dom, props(COV, supportMode=scheme),
                               neighbourStructure("csr", q, dom))
    _verify(fn, inputs, _tangents(inputs, 301, (1,)), jvp, what=f"Covariance 1D {scheme.name}")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.KernelMeanSymmetric],
                         ids=lambda s: s.name)
def test_covariance_jvp_3d(device, scheme):
    dom = makeDomain(3, F64, device)
    q, r = marginPair(8, 9, 3, F64, device, seed=400, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    fn, inputs, jvp = _distinct(q, r, dom, props(COV, supportMode=scheme), adj,
                                _volumes(9, device, 401))
    _verify(fn, inputs, _tangents(inputs, 402, (1, 4)), jvp, what="Covariance 3D")


def test_covariance_jvp_coincident(device):
    """A distinct pair at r = 0 (and the self pairs): x_ij = 0 and G(0) = 0, so the pair's
    tangent is 0 whatever dx and dG are."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    q = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    adj = neighbourStructure("csr", q, dom)
    fn, inputs, jvp = _aliased(q, dom, props(COV, supportMode=SupportScheme.Gather), adj)
    _verify(fn, inputs, _tangents(inputs, 501, (1,)), jvp, fd=False, what="coincident")


# --- traversals, the count output ---------------------------------------------------------


def test_covariance_jvp_traversals_agree(device):
    """Grid traversal == CSR, adjacency=None == explicit list (explicit and dual routes)."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    vol = _volumes(12, device, 601)
    pr = props(COV, supportMode=SupportScheme.KernelMeanSymmetric)
    outs, duals = {}, {}
    for traversal in ("csr", "grid", "none"):
        fn, inputs, jvp = _aliased(q, dom, pr, neighbourStructure(traversal, q, dom), vol)
        tans = _tangents(inputs, seed=602, supportIndices=(1,))
        outs[traversal] = jvp(tans)
        duals[traversal] = dualJVP(fn, inputs, tans)
    assert outs["csr"].abs().max() > 0
    for traversal in ("grid", "none"):
        assertClose(outs[traversal], outs["csr"], what=f"{traversal} vs csr", **EXACT)
        assertClose(duals[traversal], outs["csr"], what=f"dual {traversal} vs csr", **EXACT)


def test_covariance_dual_with_count(device):
    """covarianceReturnNumNeighbors=True: the matrix gets the JVP, the int32 count none."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=650, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(COV, supportMode=SupportScheme.Scatter)
    fn, inputs, jvp = _aliased(q, dom, pr, adj)
    tans = _tangents(inputs, seed=651, supportIndices=(1,))
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, tans[0])
        h = fwAD.make_dual(q.supports, tans[1])
        C, n = warpOperation(ParticleState(pos, h, q.masses, q.kinds, q.densities), pr, dom,
                             adjacency=adj, covarianceReturnNumNeighbors=True)
        tC = fwAD.unpack_dual(C).tangent.clone()
        assert fwAD.unpack_dual(n).tangent is None
    assert n.dtype == torch.int32
    assertClose(tC, jvp([tans[0], tans[1], None, None]), what="dual with count", **EXACT)


# --- kinds ----------------------------------------------------------------------------------


def _kinds(n, shift=0):
    return [(k + shift) % 4 for k in range(n)]


@pytest.mark.parametrize("mode", [OperationDirection.FluidToFluid,
                                  OperationDirection.BoundaryToFluid,
                                  OperationDirection.AllToAll], ids=lambda m: m.name)
def test_covariance_jvp_kinds(device, mode):
    """Mixed kinds: the JVP equals J·v of the masked primal; masked query rows are 0."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(14, 2, F64, device, seed=800, domain=dom, hMean=0.9, kinds=_kinds(14))
    adj = neighbourStructure("csr", q, dom)
    pr = props(COV, supportMode=SupportScheme.Scatter, operationMode=mode)
    fn, inputs, jvp = _aliased(q, dom, pr, adj, _volumes(14, device, 801))
    out = _verify(fn, inputs, _tangents(inputs, 802, (1,)), jvp, fd=False,
                  what=f"kinds {mode.name}")
    qm, _ = masks(int(mode), q.kinds.cpu().numpy(), q.kinds.cpu().numpy())
    qm = torch.as_tensor(qm, device=out.device)
    assert torch.equal(out[~qm], torch.zeros_like(out[~qm]))
    assert out[qm].abs().max() > 0


def test_covariance_jvp_kinds_distinct(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(9, 10, 2, F64, device, seed=820, domain=dom, hMean=0.9)
    q = ParticleState(q.positions, q.supports, q.masses,
                      torch.tensor(_kinds(9), dtype=torch.int32, device=device), q.densities)
    r = ParticleState(r.positions, r.supports, r.masses,
                      torch.tensor(_kinds(10, 1), dtype=torch.int32, device=device),
                      r.densities)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(COV, supportMode=SupportScheme.SuperSymmetric,
               operationMode=OperationDirection.AllToFluid)
    fn, inputs, jvp = _distinct(q, r, dom, pr, adj)
    _verify(fn, inputs, _tangents(inputs, 821, (1, 4)), jvp, fd=False, what="kinds distinct")


# --- scope rejections -----------------------------------------------------------------------


def test_covariance_jvp_rejections(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=900, domain=dom)
    pr = props(COV)
    adj = neighbourStructure("csr", q, dom)
    v = _rand(8, (2,), device, 901)
    base = dict(queryTangentState=ParticleTangentState(positions=v), adjacency=adj)
    f = _rand(8, (), device, 902)
    with pytest.raises(NotImplementedError, match="no value input"):
        warpOperationJVP(q, pr, dom, queryValues=f, tangentQueryValues=f, **base)
    with pytest.raises(NotImplementedError, match="no value input"):
        warpOperationJVP(q, pr, dom, queryValues=f, tangentQueryValues=f)
    with pytest.raises(ValueError, match="query masses"):
        warpOperationJVP(q, pr, dom, **{**base, "queryTangentState": ParticleTangentState(
            positions=v, masses=torch.ones_like(q.masses))})
    vol = _volumes(8, device, 903)
    with pytest.raises(ValueError, match="tangentQueryVolumes"):
        warpOperationJVP(q, pr, dom, queryVolumes=vol, tangentQueryVolumes=vol, **base)
    with pytest.raises(ValueError, match="tangentReferenceVolumes"):
        warpOperationJVP(q, pr, dom, tangentReferenceVolumes=vol, **base)
    L = torch.eye(2, dtype=F64, device=device).expand(8, 2, 2).contiguous()
    # grad-h is never read: accepted and ignored (test_gradh_forward_mode.py)
    torch.testing.assert_close(
        warpOperationJVP(q, pr, dom, gradHState=torch.ones_like(q.masses) * 1.3, **base),
        warpOperationJVP(q, pr, dom, **base), rtol=0.0, atol=0.0)
    with pytest.raises(ValueError, match="renormalizationState"):
        warpOperationJVP(q, pr, dom, renormalizationTangentState=L, **base)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("corr", ["crk", "renorm", "crk+renorm+volumes"])
def test_covariance_jvp_corrections(device, corr, dim, traversal):
    """The corrected gradient (CRK, renormalization, both with volumes): positions,
    supports, masses, densities and the correction tangents against J·v and central
    differences; the dual route equals the explicit one."""
    q, r, dom = aliased(dim, 10, 930 + dim, device)
    c = Case(q, r, dom, props(COV), traversal, corr, (), seed=940)
    T = tangents(c.P, seed=941)
    T.pop("f")  # the Covariance reads no values
    out = c.check(T, what=f"{corr}/{dim}D/{traversal}")
    assert float(out.abs().max()) > 0.0


# --- dual route: dropped channels -------------------------------------------------------------


def test_covariance_dual_self_interaction_masses_and_volumes(device):
    """A dual `masses` tensor in a self-interaction call lights up the query-mass slot as
    well; it is dropped (no formula reads it) and the tangent matches J·v. Likewise a dual
    `queryVolumes` tensor (reference volumes default to it) and grad-h (ignored)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=1000, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(COV, supportMode=SupportScheme.KernelMeanSymmetric)
    fn, inputs, jvp = _aliased(q, dom, pr, adj)
    dm = _rand(12, (), device, 1001)
    tans = [None, None, dm, None]
    out = dualJVP(fn, inputs, tans)
    assertClose(out, jacobianJVP(fn, inputs, tans), what="dual masses vs J.v")
    assertClose(out, jvp(tans), what="dual masses vs explicit", **EXACT)
    assert out.abs().max() > 0
    vol = _volumes(12, device, 1002)
    fn, inputs, jvp = _aliased(q, dom, pr, adj, vol)
    dv = _rand(12, (), device, 1003)
    tans = [_rand(12, (2,), device, 1004), None, dm, None, dv]
    out = dualJVP(fn, inputs, tans)
    assertClose(out, jacobianJVP(fn, inputs, tans), what="dual volumes vs J.v")
    assertClose(out, jvp(tans), what="dual volumes vs explicit", **EXACT)
    # grad-h is accepted and ignored by Covariance: dropped from the dual route
    omega = 0.8 + 0.4 * torch.rand(12, generator=torch.Generator().manual_seed(1005),
                                   dtype=F64).to(device)
    outH = dualJVP(lambda pos: warpOperation(
        ParticleState(pos, q.supports, q.masses, q.kinds, q.densities), pr, dom, adjacency=adj,
        queryVolumes=vol, gradHState=omega), [q.positions], [tans[0]])
    assertClose(outH, jvp([tans[0], None, None, None, None]), what="grad-h dropped", **EXACT)


# --- reverse over forward ---------------------------------------------------------------------


def test_covariance_jvp_reverse_over_forward(device):
    """gradcheck of the JVP output w.r.t. positions, supports, reference volumes and the
    tangents."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=1100, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(COV, supportMode=SupportScheme.MeanSymmetric)
    vol = _volumes(7, device, 1101)
    v, dh, dv = randomTangents([q.positions, q.supports, vol], seed=1102,
                               scales=[1.0, 0.1, 1.0])
    inputs = leaves(q.positions, q.supports, vol, v, dh, dv)

    def fn(pos, h, V, tpos, th, tV):
        p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
        t = ParticleTangentState(positions=tpos, supports=th)
        return warpOperationJVP(p, pr, dom, queryTangentState=t, referenceVolumes=V,
                                tangentReferenceVolumes=tV, adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_covariance_jvp_reverse_over_forward_densities(device):
    """The same for V_j = m_j / rho_j w.r.t. masses, densities and their tangents."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=1150, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(COV, supportMode=SupportScheme.Gather)
    v, dm, drho = randomTangents([q.positions, q.masses, q.densities], seed=1151)
    inputs = leaves(q.positions, q.masses, q.densities, v, dm, drho)

    def fn(pos, m, rho, tpos, tm, trho):
        p = ParticleState(pos, q.supports, m, q.kinds, rho)
        return warpOperationJVP(p, pr, dom,
                                queryTangentState=ParticleTangentState(positions=tpos),
                                referenceTangentState=ParticleTangentState(
                                    positions=tpos, masses=tm, densities=trho),
                                adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


# --- float32 ----------------------------------------------------------------------------------


def test_covariance_jvp_float32(device):
    """float32 JVP against the float64 J·v (rtol 1e-4)."""
    dom64 = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=1200, domain=dom64)
    adj = neighbourStructure("csr", q, dom64)
    pr = props(COV, supportMode=SupportScheme.SuperSymmetric)
    vol = _volumes(12, device, 1201)
    fn, inputs, _ = _aliased(q, dom64, pr, adj, vol)
    tans = _tangents(inputs, seed=1202, supportIndices=(1,))
    ref = jacobianJVP(fn, inputs, tans)
    f32 = torch.float32
    dom32 = makeDomain(2, f32, device)
    q32 = ParticleState(*(x.to(f32) for x in (q.positions, q.supports, q.masses)), q.kinds,
                        q.densities.to(f32))
    _, _, jvp32 = _aliased(q32, dom32, pr, neighbourStructure("csr", q32, dom32), vol.to(f32))
    out = jvp32([t.to(f32) for t in tans])
    assert out.dtype == f32
    assertClose(out.to(F64), ref, rtol=1e-4, atol=1e-5, what="float32")


# --- empty populations ------------------------------------------------------------------------


@pytest.mark.parametrize("empty", ["query", "reference"])
def test_covariance_jvp_empty(device, empty):
    """Zero queries: shape-correct empty tangent; zero references: finite zeros."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=1300, domain=dom)
    e = ParticleState(*(x[:0] for x in (q.positions, q.supports, q.masses, q.kinds,
                                          q.densities)))
    a, b = (e, q) if empty == "query" else (q, e)
    out = warpOperationJVP(
        a, props(COV), dom, referenceParticles=b,
        queryTangentState=ParticleTangentState(positions=torch.ones_like(a.positions)),
        referenceTangentState=ParticleTangentState(positions=torch.ones_like(b.positions),
                                                   masses=torch.ones_like(b.masses)))
    assert out.shape == (a.positions.shape[0], 2, 2)
    assert torch.equal(out, torch.zeros_like(out))
