"""Gradient renormalization forward: `computeRenormalizationMatrices`
and the pseudo-inverse helpers against the float64 NumPy references of `sph_reference`
(`covarianceReference` for C and n, `renormalizationReference` for the identity fallback, L
and eigVals: `np.linalg.eigh` / `np.linalg.pinv` with the spec's cutoffs and branches).

Cases: 1D/2D/3D over CSR, grid and on-the-fly traversals; CRK input; volumes; a distinct
reference set; a low-neighbour row (identity, eigVals 1); an exactly uniform periodic grid
(isotropic C); a rank-deficient 3D C (truncated branch); eigVals values, shape and dtype;
the helpers' edge cases (1x1 cutoff, 2x2 non-symmetric / isotropic / rank-1 / zero / < 4
neighbours, 3x3 full rank and truncated); the linear-exactness oracle (renormalized
Difference Gradient of a linear field, 1e-10, 2D and 3D); the caller's properties are left
unchanged; no host sync (census).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import (
    TRAVERSALS,
    covarianceReference,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
    renormalizationReference,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    ParticleState,
    RenormalizationState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.corrections import (
    computeRenormalizationMatrices,
    pinv1x1,
    pinv2x2_warpBackend,
    pinv_warp,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.util import hostSyncCensus as _census

F64 = torch.float64
COV = WarpOperation.Covariance
NPART = {1: 10, 2: 12, 3: 10}


def _np(t):
    return t.detach().cpu().to(F64).numpy()


def _check(q, dom, pr, out, reference=None, volumes=None, crk=None, tol=1e-12):
    C, ev, state = out
    Cref, nref = covarianceReference(q, dom, pr, reference=reference, volumes=volumes, crk=crk)
    Cr, Lr, evr = renormalizationReference(Cref, nref)
    N, d = q.positions.shape
    assert isinstance(state, RenormalizationState)
    L = state.renormalizationMatrices
    assert C.shape == (N, d, d) and L.shape == (N, d, d) and ev.shape == (N, d)
    assert C.dtype == L.dtype == ev.dtype == q.positions.dtype
    scale = max(1.0, float(np.abs(Lr).max()))
    np.testing.assert_allclose(_np(C), Cr, rtol=tol, atol=tol)
    np.testing.assert_allclose(_np(L), Lr, rtol=1e-10, atol=1e-10 * scale)
    np.testing.assert_allclose(_np(ev), evr, rtol=1e-10, atol=1e-12)
    return nref


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_renormalization_vs_reference(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q = marginCloud(NPART[dim], dim, F64, device, seed=5, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    pr = props(op=WarpOperation.Gradient, supportMode=SupportScheme.Scatter)
    nref = _check(q, dom, pr, computeRenormalizationMatrices(q, pr, dom, adjacency=adj))
    assert (nref >= dim + 2).any()


def test_renormalization_with_crk_and_volumes(device, dim):
    dom = makeDomain(dim, F64, device)
    q = marginCloud(NPART[dim], dim, F64, device, seed=7, domain=dom)
    n = q.positions.shape[0]
    vol, _, A, B, gA, gB, _ = randomCorrectionTensors(n, n, dim, device, seed=2)
    crk = CRKState(A, B, gA, gB)
    pr = props()
    out = computeRenormalizationMatrices(q, pr, dom, queryVolumes=vol, crkState=crk,
                                         adjacency=neighbourStructure("csr", q, dom))
    _check(q, dom, pr, out, volumes=vol, crk=(A, B, gA, gB))


@pytest.mark.parametrize("mode", [1, 3, 9])
def test_renormalization_kinds_masking(device, mode):
    """Masked queries have C = 0 and no neighbours: identity rows."""
    dom = makeDomain(2, F64, device)
    kinds = [0, 1, 2, 0, 0, 1, 0, 2, 0, 0, 1, 0]
    q = marginCloud(12, 2, F64, device, seed=5, domain=dom, kinds=kinds)
    pr = props(operationMode=mode)
    _check(q, dom, pr, computeRenormalizationMatrices(q, pr, dom))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_pinv_dual_route(device, d):
    """The pseudo-inverse launches carry the forward-mode rule dL = -L dC L: on well-conditioned
    matrices it equals J·v of the reverse-mode-verified pinv (L, and the 2D eigenvalues);
    the 3D eigenvalues are detached (no tangent)."""
    from jvp_helpers import jacobianJVP

    g = torch.Generator().manual_seed(40 + d)
    n = 5
    X = torch.randn(n, d, d, generator=g, dtype=F64)
    C = (X @ X.transpose(1, 2) + 0.5 * torch.eye(d, dtype=F64)).to(device)
    C = C + 0.1 * torch.randn(n, d, d, generator=g, dtype=F64).to(device)  # not symmetric
    V = torch.randn(n, d, d, generator=g, dtype=F64).to(device)
    with fwAD.dual_level():
        L, ev = pinv_warp(fwAD.make_dual(C, V))
        dL = fwAD.unpack_dual(L).tangent
        dev = fwAD.unpack_dual(ev).tangent
    ref = jacobianJVP(lambda c: pinv_warp(c)[0], [C], [V])
    assert float(ref.abs().max()) > 0
    torch.testing.assert_close(dL, ref, rtol=1e-10, atol=1e-12)
    if d < 3:
        refEv = jacobianJVP(lambda c: pinv_warp(c)[1], [C], [V])
        torch.testing.assert_close(dev, refEv, rtol=1e-10, atol=1e-12)
    else:
        assert dev is None or float(dev.abs().max()) == 0.0


@pytest.mark.parametrize("d", [1, 2, 3])
def test_renormalization_dual_route(device, d):
    """Dual tensors through computeRenormalizationMatrices (Covariance dual route, identity
    fallback in torch, the pinv rule) give computeRenormalizationMatricesJVP's dL; with a CRK
    state (the Covariance's corrected gradient) the tangent equals central differences."""
    from warpSPHCore import ParticleTangentState
    from warpSPHCore.corrections import computeRenormalizationMatricesJVP

    dom = makeDomain(d, F64, device)
    q = marginCloud(NPART[d], d, F64, device, seed=2, domain=dom,
                    hMean={1: 0.7, 2: 0.9, 3: 1.5}[d])
    g = torch.Generator().manual_seed(7)
    v = torch.randn(q.positions.shape, generator=g, dtype=F64).to(device)
    dh = 0.01 * torch.randn(q.supports.shape, generator=g, dtype=F64).to(device)
    pr = props(supportMode=SupportScheme.MeanSymmetric)
    _, _, _, tState = computeRenormalizationMatricesJVP(
        q, pr, dom, ParticleTangentState(positions=v, supports=dh))
    with fwAD.dual_level():
        p = ParticleState(fwAD.make_dual(q.positions, v), fwAD.make_dual(q.supports, dh),
                          q.masses, q.kinds, q.densities)
        state = computeRenormalizationMatrices(p, pr, dom, returnEigVals=False)
        dL = fwAD.unpack_dual(state.renormalizationMatrices).tangent
        assert float(dL.abs().max()) > 0
        torch.testing.assert_close(dL, tState.renormalizationMatrices, rtol=1e-12,
                                   atol=1e-12)
        _, _, A, B, gA, gB, _ = randomCorrectionTensors(NPART[d], NPART[d], d, device, 3)
        crk = CRKState(A, B, gA, gB)
        withCRK = computeRenormalizationMatrices(p, pr, dom, crkState=crk,
                                                 returnEigVals=False)
        dLcrk = fwAD.unpack_dual(withCRK.renormalizationMatrices).tangent
    # with a CRK state (the Covariance's corrected gradient): against central differences

    def L(e):
        pe = ParticleState(q.positions + e * v, q.supports + e * dh, q.masses, q.kinds,
                           q.densities)
        return computeRenormalizationMatrices(pe, pr, dom, crkState=crk,
                                              returnEigVals=False).renormalizationMatrices

    eps = 1e-6
    fd = (L(eps) - L(-eps)) / (2 * eps)
    assert float(dLcrk.abs().max()) > 0
    torch.testing.assert_close(dLcrk, fd, rtol=1e-5, atol=1e-7 * float(fd.abs().max()))


def test_renormalization_distinct_reference(device):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 11, 2, F64, device, seed=3, domain=dom)
    pr = props(supportMode=SupportScheme.MeanSymmetric)
    out = computeRenormalizationMatrices(q, pr, dom, referenceParticles=r,
                                         adjacency=neighbourStructure("csr", q, dom, r))
    _check(q, dom, pr, out, reference=r)


def test_renormalization_returnEigVals_false(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=1, domain=dom)
    state = computeRenormalizationMatrices(q, props(), dom, returnEigVals=False)
    assert isinstance(state, RenormalizationState)
    _, _, full = computeRenormalizationMatrices(q, props(), dom)
    torch.testing.assert_close(state.renormalizationMatrices, full.renormalizationMatrices,
                               rtol=0, atol=0)


def test_renormalization_low_neighbour_row_is_identity(device, dim):
    """An isolated particle (only itself in support) gets C = L = I and eigVals 1."""
    dom = makeDomain(dim, F64, device, lo=-4.0, hi=4.0)
    q = marginCloud(NPART[dim], dim, F64, device, seed=5, domain=makeDomain(dim, F64, device))
    far = torch.full((1, dim), 3.5, dtype=F64, device=device)
    p = ParticleState(torch.cat((q.positions, far)), torch.cat((q.supports, q.supports[:1])),
                      torch.cat((q.masses, q.masses[:1])), torch.cat((q.kinds, q.kinds[:1])),
                      torch.cat((q.densities, q.densities[:1])))
    C, ev, state = computeRenormalizationMatrices(p, props(), dom)
    eye = torch.eye(dim, dtype=F64, device=device)
    assert torch.equal(C[-1], eye) and torch.equal(state.renormalizationMatrices[-1], eye)
    assert torch.equal(ev[-1], torch.ones(dim, dtype=F64, device=device))
    _check(p, dom, props(), (C, ev, state))


def _uniformGrid(d, k, device, h=0.42):
    s = 1.0 / k
    axes = [torch.arange(k, dtype=F64) * s for _ in range(d)]
    pos = torch.stack([g.reshape(-1) for g in torch.meshgrid(*axes, indexing="ij")], dim=1)
    n = pos.shape[0]
    dom = makeDomain(d, F64, device, lo=0.0, hi=1.0, periodic=True)
    p = ParticleState(pos.to(device), torch.full((n,), h, dtype=F64, device=device),
                      torch.full((n,), s ** d, dtype=F64, device=device),
                      torch.zeros(n, dtype=torch.int32, device=device),
                      torch.ones(n, dtype=F64, device=device))
    return p, dom


def test_renormalization_uniform_grid_isotropic(device):
    """Exactly uniform periodic grid: every C is (numerically) c I, the 2D closed form
    takes the plain-inverse branch at (a - c)^2 + 4 b^2 ~ 0 and L = I / c."""
    p, dom = _uniformGrid(2, 6, device)
    C, ev, state = computeRenormalizationMatrices(p, props(), dom)
    c = C[:, 0, 0]
    torch.testing.assert_close(C, c[:, None, None] * torch.eye(2, dtype=F64, device=device),
                               rtol=0, atol=1e-14)
    _check(p, dom, props(), (C, ev, state))


def test_renormalization_rank_deficient_3d(device):
    """A planar cloud in 3D: C has a zero row and column, L is the truncated pinv."""
    dom2 = makeDomain(2, F64, device)
    q2 = marginCloud(12, 2, F64, device, seed=4, domain=dom2)
    z = torch.zeros(12, 1, dtype=F64, device=device)
    p = ParticleState(torch.cat((q2.positions, z), dim=1), q2.supports * 1.3, q2.masses,
                      q2.kinds, q2.densities)
    dom = makeDomain(3, F64, device)
    C, ev, state = computeRenormalizationMatrices(p, props(), dom)
    nref = _check(p, dom, props(), (C, ev, state))
    full = nref >= 5
    assert full.any()
    L = _np(state.renormalizationMatrices)[full]
    assert np.all(L[:, 2, :] == 0) and np.all(L[:, :, 2] == 0)
    assert np.all(np.abs(_np(ev)[full][:, 2]) < 1e-13 * np.abs(_np(ev)[full][:, 0]))


# --- helpers -------------------------------------------------------------------------------


def test_pinv1x1_cases(device):
    C = torch.tensor([2.0, 1e-11, -3.0, 0.0], dtype=F64, device=device).reshape(4, 1, 1)
    L, ev = pinv1x1(C)
    torch.testing.assert_close(L.reshape(4), torch.tensor([0.5, 0.0, 0.0, 0.0], dtype=F64,
                                                          device=device), rtol=0, atol=0)
    assert ev.shape == (4, 1) and torch.equal(ev, C.reshape(4, 1))


def _mats2(device):
    return torch.tensor([
        [[2.0, 0.3], [0.1, 1.5]],      # non-symmetric, well conditioned
        [[1.7, 0.0], [0.0, 1.7]],      # exactly isotropic
        [[1.0, 2.0], [2.0, 4.0]],      # rank 1: eigen-reconstruction, small dropped
        [[0.0, 0.0], [0.0, 0.0]],      # zero: both dropped
        [[-2.0, 0.5], [0.5, 1.0]],     # indefinite
        [[1.0, 0.0], [0.0, 1e-8]],     # small below 1e-6 big
        [[3.0, 1.0], [1.0, 0.5]],      # generic symmetric
    ], dtype=F64, device=device)


def test_pinv2x2_cases(device):
    C = _mats2(device)
    n = torch.tensor([9, 9, 9, 9, 9, 9, 3], dtype=torch.int32, device=device)
    L, ev = pinv2x2_warpBackend(C, n)
    Cr, Lr, evr = renormalizationReference(_np(C), n.cpu().numpy())
    np.testing.assert_allclose(_np(L), Lr, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(ev), evr, rtol=1e-12, atol=1e-14)
    assert torch.equal(L[-1], torch.eye(2, dtype=F64, device=device))
    assert torch.equal(ev[-1], torch.ones(2, dtype=F64, device=device))
    # without counts nothing is replaced
    L2, _ = pinv2x2_warpBackend(C)
    np.testing.assert_allclose(_np(L2)[:-1], Lr[:-1], rtol=1e-12, atol=1e-12)
    assert not torch.equal(L2[-1], torch.eye(2, dtype=F64, device=device))


def _mats3(device, seed=0):
    g = np.random.default_rng(seed)
    out = []
    for sig in ([3.0, 2.0, 1.0], [10.0, 3.0, 1e-9], [4.0, 1e-8, 1e-12], [5.0, 2.0, 0.0]):
        U, _ = np.linalg.qr(g.standard_normal((3, 3)))
        V, _ = np.linalg.qr(g.standard_normal((3, 3)))
        out.append(U @ np.diag(sig) @ V.T)
    out.append(np.diag([2.0, 2.0, 2.0]))
    out.append(np.zeros((3, 3)))
    return torch.tensor(np.array(out), dtype=F64, device=device)


def test_pinv3x3_cases(device):
    C = _mats3(device)
    n = torch.full((C.shape[0],), 9, dtype=torch.int32, device=device)
    L, ev = pinv_warp(C, n)
    ref = torch.linalg.pinv(C, rtol=1e-6)  # the spec's definition, as a test reference
    np.testing.assert_allclose(_np(L), _np(ref), rtol=1e-9, atol=1e-9 * 10)
    _, Lr, evr = renormalizationReference(_np(C), n.cpu().numpy())
    np.testing.assert_allclose(_np(L), Lr, rtol=1e-9, atol=1e-9 * 10)
    np.testing.assert_allclose(_np(ev), evr, rtol=1e-10, atol=1e-12)
    assert not ev.requires_grad


def test_pinv_warp_dispatch_and_fallback(device, dim):
    g = torch.Generator().manual_seed(dim)
    C = (torch.eye(dim, dtype=F64) + 0.3 * torch.randn(5, dim, dim, generator=g,
                                                       dtype=F64)).to(device)
    n = torch.tensor([9, dim + 1, dim + 2, 0, 9], dtype=torch.int32, device=device)
    L, ev = pinv_warp(C, n)
    _, Lr, evr = renormalizationReference(_np(C), n.cpu().numpy())
    np.testing.assert_allclose(_np(L), Lr, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_np(ev), evr, rtol=1e-10, atol=1e-12)
    eye = torch.eye(dim, dtype=F64, device=device)
    assert torch.equal(L[1], eye) and torch.equal(L[3], eye)
    assert ev.shape == (5, dim)


def test_pinv_float32(device, dim):
    C = (torch.eye(dim, dtype=F64) * 2.0 + 0.1).to(device).expand(3, dim, dim).contiguous()
    L, ev = pinv_warp(C.float())
    assert L.dtype == ev.dtype == torch.float32
    _, Lr, evr = renormalizationReference(_np(C), np.full(3, 9))
    np.testing.assert_allclose(_np(L), Lr, rtol=1e-5, atol=1e-6)


def test_pinv_shape_errors(device):
    with pytest.raises(ValueError, match="pinv2x2_warpBackend"):
        pinv2x2_warpBackend(torch.zeros(3, 3, 3, dtype=F64, device=device))
    with pytest.raises(ValueError, match="pinv_warp"):
        pinv_warp(torch.zeros(3, 4, 4, dtype=F64, device=device))


def test_pinv_torch_func_raises(device):
    C = torch.eye(2, dtype=F64, device=device).expand(3, 2, 2).contiguous()
    with pytest.raises(NotImplementedError, match="torch.func"):
        torch.func.grad(lambda c: pinv_warp(c)[0].sum())(C)


def test_renormalization_empty(device, dim):
    dom = makeDomain(dim, F64, device)
    e = torch.zeros(0, dtype=F64, device=device)
    p = ParticleState(torch.zeros(0, dim, dtype=F64, device=device), e, e,
                      torch.zeros(0, dtype=torch.int32, device=device), e)
    C, ev, state = computeRenormalizationMatrices(p, props(), dom)
    assert C.shape == (0, dim, dim) and ev.shape == (0, dim)
    assert state.renormalizationMatrices.shape == (0, dim, dim)


# --- oracle, caller objects, census ---------------------------------------------------------


def _jittered(d, k, device, seed, jitter=0.25):
    g = torch.Generator().manual_seed(seed)
    s = 2.0 / k
    axes = [-1.0 + (torch.arange(k, dtype=F64) + 0.5) * s for _ in range(d)]
    pos = torch.stack([a.reshape(-1) for a in torch.meshgrid(*axes, indexing="ij")], dim=1)
    pos = pos + jitter * s * (torch.rand(pos.shape, generator=g, dtype=F64) - 0.5)
    n = pos.shape[0]
    h = 2.6 * s * (1.0 + 0.2 * (torch.rand(n, generator=g, dtype=F64) - 0.5))
    m = (s ** d) * (0.8 + 0.4 * torch.rand(n, generator=g, dtype=F64))
    rho = 0.9 + 0.2 * torch.rand(n, generator=g, dtype=F64)
    return ParticleState(pos.to(device), h.to(device), m.to(device),
                         torch.zeros(n, dtype=torch.int32, device=device), rho.to(device))


@pytest.mark.parametrize("d,k", [(2, 7), (3, 4)])
@pytest.mark.parametrize("support", [SupportScheme.Gather, SupportScheme.SuperSymmetric])
def test_renormalized_difference_gradient_is_linear_exact(device, d, k, support):
    dom = makeDomain(d, F64, device)
    p = _jittered(d, k, device, seed=11)
    pr = props(op=WarpOperation.Gradient, gradientMode=GradientScheme.Difference,
               supportMode=support)
    C, ev, state = computeRenormalizationMatrices(p, pr, dom)
    a = torch.tensor([0.7, -1.3, 0.4][:d], dtype=F64, device=device)
    f = p.positions @ a + 0.25
    grad = warpOperation(p, pr, dom, queryValues=f, renormalizationState=state)
    _, n = warpOperation(p, dataclasses.replace(pr, operation=COV), dom,
                         covarianceReturnNumNeighbors=True)
    assert bool((n >= d + 2).all())
    torch.testing.assert_close(grad, a.expand_as(grad), rtol=0, atol=1e-10)


def test_renormalization_leaves_caller_properties_unchanged(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=2, domain=dom)
    pr = props(op=WarpOperation.Gradient, gradientMode=GradientScheme.Difference)
    before = dataclasses.asdict(pr)
    _, _, state = computeRenormalizationMatrices(q, pr, dom)
    assert dataclasses.asdict(pr) == before and pr.operation == WarpOperation.Gradient
    f = q.positions[:, 0] ** 2
    out = warpOperation(q, pr, dom, queryValues=f, renormalizationState=state)
    assert out.shape == (8, 2)
    assert not torch.equal(out, warpOperation(q, pr, dom, queryValues=2 * f))


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_renormalization_no_host_sync(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q = marginCloud(NPART[dim], dim, F64, device, seed=5, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    computeRenormalizationMatrices(q, props(), dom, adjacency=adj)  # warm-up (compile)
    with _census.census() as c:
        with torch.no_grad():
            computeRenormalizationMatrices(q, props(), dom, adjacency=adj)
    assert c.total == 0, (c.hits, c.sites)
    pos = q.positions.detach().clone().requires_grad_()
    p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    with _census.census() as c:
        C, ev, state = computeRenormalizationMatrices(p, props(), dom, adjacency=adj)
        (state.renormalizationMatrices.sum() + C.sum()).backward()
    assert c.total == 0, (c.hits, c.sites)
    assert torch.isfinite(pos.grad).all()
