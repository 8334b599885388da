"""Gradient renormalization reverse mode: float64 `torch.autograd.gradcheck` of L (and the
identity-replaced C) through `computeRenormalizationMatrices` (Covariance + the bridged
pseudo-inverse kernels) w.r.t. positions, supports, masses, densities, volumes and CRK
tensors, over CSR / grid / on-the-fly traversals in 1D/2D/3D; an exactly uniform periodic
grid (isotropic C, W9); L computed in-graph and chained into `warpOperation(Gradient)`; the
pseudo-inverse helpers on their branch cases (1x1 cutoff, 2x2 non-symmetric / isotropic /
rank-1 eigen-reconstruction, 3x3 full rank / truncated) and the exactly-zero gradient of the
low-neighbour identity fallback. Neighbour structures are frozen (1e-3 h margin).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    leaves,
    makeDomain,
    marginCloud,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import CRKState, GradientScheme, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.corrections import (
    computeRenormalizationMatrices,
    pinv1x1,
    pinv2x2_warpBackend,
    pinv_warp,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
NPART = {1: 8, 2: 8, 3: 7}
HMEAN = {1: 0.7, 2: 0.9, 3: 1.5}


def _cloud(d, device, seed):
    dom = makeDomain(d, F64, device)
    return marginCloud(NPART[d], d, F64, device, seed=seed, domain=dom, hMean=HMEAN[d]), dom


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_renorm_gradcheck_traversals(device, dim, traversal):
    q, dom = _cloud(dim, device, seed=21)
    adj = neighbourStructure(traversal, q, dom)
    pr = props(supportMode=SupportScheme.Scatter)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities)

    def fn(pos, h, m, rho):
        p = ParticleState(pos, h, m, q.kinds, rho)
        C, ev, state = computeRenormalizationMatrices(p, pr, dom, adjacency=adj)
        return state.renormalizationMatrices, C

    L, _ = fn(*inputs)
    assert not torch.equal(L, torch.eye(dim, dtype=F64, device=device).expand_as(L))
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_renorm_gradcheck_volumes_and_crk(device, dim):
    q, dom = _cloud(dim, device, seed=22)
    n = q.positions.shape[0]
    adj = neighbourStructure("csr", q, dom)
    vol, _, A, B, gA, gB, _ = randomCorrectionTensors(n, n, dim, device, seed=4)
    inputs = leaves(q.positions, q.supports, vol, A, 0.3 * B, gA, gB)

    def fn(pos, h, v, a, b, ga, gb):
        p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
        _, _, state = computeRenormalizationMatrices(p, props(), dom, queryVolumes=v,
                                                     adjacency=adj,
                                                     crkState=CRKState(a, b, ga, gb))
        return state.renormalizationMatrices

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_renorm_gradcheck_given_renormalization(device):
    """A prior L enters C (G <- L G) and is differentiated too."""
    q, dom = _cloud(2, device, seed=23)
    n = q.positions.shape[0]
    L0 = randomCorrectionTensors(n, n, 2, device, seed=5)[-1]
    inputs = leaves(q.positions, L0)

    def fn(pos, l0):
        p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
        return computeRenormalizationMatrices(p, props(), dom, renormalizationState=l0,
                                              returnEigVals=False).renormalizationMatrices

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _uniformGrid(d, k, device, h):
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


@pytest.mark.parametrize("d,k,h", [(2, 5, 0.43), (3, 3, 0.45)])
def test_renorm_gradcheck_uniform_grid(device, d, k, h):
    """Exactly uniform periodic grid (isotropic C): finite, correct gradients of L and of
    the renormalized Gradient (W9: sqrt adjoint 0 at 0; plain-inverse branch)."""
    p, dom = _uniformGrid(d, k, device, h)
    n = p.positions.shape[0]
    g = torch.Generator().manual_seed(d)
    wL = torch.randn(n, d, d, generator=g, dtype=F64).to(device)
    f = torch.randn(n, generator=g, dtype=F64).to(device)
    wG = torch.randn(n, d, generator=g, dtype=F64).to(device)
    pr = props(op=WarpOperation.Gradient, gradientMode=GradientScheme.Difference)
    inputs = leaves(p.positions, p.supports)

    def fn(pos, hh):
        s = ParticleState(pos, hh, p.masses, p.kinds, p.densities)
        C, ev, state = computeRenormalizationMatrices(s, pr, dom)
        grad = warpOperation(s, pr, dom, queryValues=f, renormalizationState=state)
        return (state.renormalizationMatrices * wL).sum() + (grad * wG).sum()

    out = fn(*inputs)
    out.backward()
    assert all(torch.isfinite(t.grad).all() for t in inputs)
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def test_renorm_in_graph_chained_into_gradient(device, dim):
    q, dom = _cloud(dim, device, seed=24)
    n = q.positions.shape[0]
    adj = neighbourStructure("csr", q, dom)
    f = torch.randn(n, generator=torch.Generator().manual_seed(3), dtype=F64).to(device)
    pr = props(op=WarpOperation.Gradient, gradientMode=GradientScheme.Difference)
    inputs = leaves(q.positions, q.supports, q.densities, f)

    def fn(pos, h, rho, values):
        p = ParticleState(pos, h, q.masses, q.kinds, rho)
        state = computeRenormalizationMatrices(p, pr, dom, adjacency=adj, returnEigVals=False)
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                             renormalizationState=state)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
    assert pr.operation == WarpOperation.Gradient


# --- helpers -------------------------------------------------------------------------------


def test_pinv1x1_gradcheck(device):
    C = torch.tensor([2.0, -3.0, 0.5], dtype=F64, device=device).reshape(3, 1, 1)
    inputs = leaves(C)
    assert torch.autograd.gradcheck(lambda c: pinv1x1(c), inputs, **GRADCHECK)
    L, _ = pinv1x1(inputs[0])
    L.sum().backward()
    torch.testing.assert_close(inputs[0].grad.reshape(3),
                               torch.tensor([-0.25, 0.0, -4.0], dtype=F64, device=device))


@pytest.mark.parametrize("case", ["nonsymmetric", "isotropic", "rank1", "indefinite"])
def test_pinv2x2_gradcheck(device, case):
    C = {
        "nonsymmetric": [[2.0, 0.3], [0.1, 1.5]],
        "isotropic": [[1.7, 0.0], [0.0, 1.7]],
        "rank1": [[10.0, 20.0], [20.0, 40.0]],
        "indefinite": [[-2.0, 0.5], [0.5, 1.0]],
    }[case]
    inputs = leaves(torch.tensor([C], dtype=F64, device=device))
    assert torch.autograd.gradcheck(lambda c: pinv2x2_warpBackend(c), inputs, **GRADCHECK)
    L, ev = pinv2x2_warpBackend(inputs[0])
    (L.sum() + ev.sum()).backward()
    assert torch.isfinite(inputs[0].grad).all()


def test_pinv2x2_isotropic_gradient_is_minus_L_dC_L(device):
    C = leaves(torch.tensor([[[1.7, 0.0], [0.0, 1.7]]], dtype=F64, device=device))[0]
    L, _ = pinv2x2_warpBackend(C)
    W = torch.tensor([[[0.3, -1.2], [0.7, 2.0]]], dtype=F64, device=device)
    (L * W).sum().backward()
    Ld = L.detach()[0]
    # dL = -L dC_sym L: the adjoint of the symmetrised inverse
    G = -(Ld.T @ W[0] @ Ld.T)
    torch.testing.assert_close(C.grad[0], 0.5 * (G + G.T), rtol=1e-13, atol=1e-13)


def test_pinv_low_neighbour_identity_has_zero_gradient(device, dim):
    g = torch.Generator().manual_seed(dim)
    C = leaves((torch.eye(dim, dtype=F64) + 0.3 * torch.randn(3, dim, dim, generator=g,
                                                              dtype=F64)).to(device))[0]
    n = torch.tensor([9, dim + 1, 9], dtype=torch.int32, device=device)
    L, ev = pinv_warp(C, n)
    (L.sum() + (ev.sum() if ev.requires_grad else 0.0)).backward()
    assert torch.equal(C.grad[1], torch.zeros(dim, dim, dtype=F64, device=device))
    assert (C.grad[0] != 0).any() and (C.grad[2] != 0).any()
    if dim == 2:
        L2, _ = pinv2x2_warpBackend(C.detach().clone().requires_grad_(), n)
        assert torch.equal(L2[1], torch.eye(2, dtype=F64, device=device))
    assert torch.autograd.gradcheck(lambda c: pinv_warp(c, n)[0], (C,), **GRADCHECK)


@pytest.mark.parametrize("sig", [(3.0, 2.0, 1.0), (10.0, 3.0, 1e-9), (5.0, -2.0, 0.7)],
                         ids=["full", "truncated", "negdet"])
def test_pinv3x3_gradcheck(device, sig):
    g = torch.Generator().manual_seed(7)
    U, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=F64))
    V, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=F64))
    C = (U @ torch.diag(torch.tensor(sig, dtype=F64)) @ V.T)[None].to(device)
    inputs = leaves(C)
    assert torch.autograd.gradcheck(lambda c: pinv_warp(c)[0], inputs, **GRADCHECK)
    # the spec's definition (torch.linalg.pinv, rtol 1e-6) as a test reference, with its
    # own autograd
    ref = leaves(C)[0]
    W = torch.randn(1, 3, 3, generator=g, dtype=F64).to(device)
    (torch.linalg.pinv(ref, rtol=1e-6) * W).sum().backward()
    (pinv_warp(inputs[0])[0] * W).sum().backward()
    torch.testing.assert_close(inputs[0].grad, ref.grad, rtol=1e-7, atol=1e-8)
