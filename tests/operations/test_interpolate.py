"""Interpolate forward values and the
`warpOperation` validation rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    interpolateReference,
    kr,
    makeDomain,
    neighbourStructure,
    pairVectors,
    props,
    tolerances,
)

from warpSPHCore import (
    CRKState,
    DomainDescription,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation

INTERP = WarpOperation.Interpolate
TV_INTERPOLATE = [11.0678488606, 15.8372196505, 12.0443815929, 16.5427477958]


def fieldShapes(d):
    """scalar, vector, matrix and a rank-3 field (trailing shapes S)."""
    return [(), (d,), (d, d), (2, d, 3)]


def randomField(n, shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=gen, dtype=torch.float64).to(dtype=dtype,
                                                                              device=device)


def randomCRK(n, d, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    A = 1.0 + 0.2 * torch.rand(n, generator=gen, dtype=torch.float64)
    B = 0.3 * torch.randn(n, d, generator=gen, dtype=torch.float64)
    return A.to(dtype=dtype, device=device), B.to(dtype=dtype, device=device)


def test_interpolate_test_vector(device):
    cast = dict(dtype=torch.float64, device=device)
    p = ParticleState(torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.25, 0.35]], **cast),
                      torch.tensor([1.0, 0.8, 1.2, 0.9], **cast),
                      torch.tensor([1.0, 2.0, 1.5, 0.5], **cast),
                      torch.zeros(4, dtype=torch.int32, device=device),
                      torch.tensor([1.0, 1.2, 0.9, 1.1], **cast))
    dom = DomainDescription(torch.tensor([-2.0, -2.0], **cast), torch.tensor([2.0, 2.0], **cast),
                            [False, False])
    f = torch.tensor([1.0, 2.0, 3.0, 4.0], **cast)
    out = warpOperation(p, props(INTERP), dom, queryValues=f)
    np.testing.assert_allclose(out.cpu().numpy(), TV_INTERPOLATE, rtol=0, atol=2e-10)
    ref = interpolateReference(p, dom, props(INTERP), f)
    np.testing.assert_allclose(ref, TV_INTERPOLATE, rtol=0, atol=2e-10)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_interpolate_brute_force(device, dtype, dim, traversal, periodic):
    n = {1: 10, 2: 20, 3: 24}[dim]
    dom = makeDomain(dim, dtype, device, periodic=periodic)
    hMean = 0.6 if periodic else None
    q = cloud(n, dim, dtype, device, seed=30 + dim, hMean=hMean)
    r = cloud(n + 2, dim, dtype, device, seed=40 + dim, hMean=hMean)
    A, B = randomCRK(n, dim, dtype, device, seed=7)
    for reference in (None, r):
        nr = n if reference is None else n + 2
        adj = neighbourStructure(traversal, q, dom, reference)
        vol = (0.5 + torch.rand(nr, generator=torch.Generator().manual_seed(9),
                                dtype=torch.float64)).to(dtype=dtype, device=device)
        for si, shape in enumerate(fieldShapes(dim)):
            f = randomField(nr, shape, dtype, device, seed=si)
            schemes = list(SupportScheme) if shape == () else [SupportScheme.Gather,
                                                                SupportScheme.SuperSymmetric]
            for scheme in schemes:
                for volumes in (None, vol):
                    for crk in (None, (A, B)):
                        pr = props(INTERP, supportMode=scheme)
                        out = warpOperation(q, pr, dom, referenceValues=f,
                                            referenceVolumes=volumes, adjacency=adj,
                                            referenceParticles=reference,
                                            crkState=None if crk is None else CRKState(*crk))
                        assert out.shape == (n,) + shape and out.dtype == dtype
                        ref = interpolateReference(q, dom, pr, f, reference, volumes, crk)
                        rtol, atol = tolerances(dtype, float(np.abs(ref).max()))
                        np.testing.assert_allclose(
                            out.cpu().double().numpy(), ref, rtol=rtol, atol=atol,
                            err_msg=f"{scheme.name} S={shape} vol={volumes is not None} "
                                    f"crk={crk is not None} ref={reference is not None}")


def test_interpolate_query_values_default(device):
    """queryValues serves as referenceValues; queryVolumes fill referenceVolumes."""
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    q = cloud(15, 2, dt, device, seed=2)
    f = randomField(15, (2,), dt, device, seed=1)
    vol = torch.full((15,), 0.1, dtype=dt, device=device)
    a = warpOperation(q, props(INTERP), dom, queryValues=f, queryVolumes=vol)
    b = warpOperation(q, props(INTERP), dom, referenceValues=f, referenceVolumes=vol)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_interpolate_calibration_factor(device, dtype, traversal):
    dom = makeDomain(3, dtype, device)
    q = cloud(20, 3, dtype, device, seed=5)
    f = randomField(20, (3,), dtype, device, seed=2)
    adj = neighbourStructure(traversal, q, dom)
    plain = warpOperation(q, props(INTERP, n_h=2.5), dom, queryValues=f, adjacency=adj)
    cal = warpOperation(q, props(INTERP, n_h=2.5, calibrateNormalization=True), dom,
                        queryValues=f, adjacency=adj)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 2.5, 3)
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(cal, plain * factor, rtol=rtol, atol=1e-7 if rtol > 1e-10 else 0)


def _crkFromMoments(p, dom):
    """A, B and V of the CRK construction (steps 1, 2, 4) in NumPy (Gather volumes, Scatter
    moments) — the test's own CRK, used as a reproducing-property oracle."""
    x = pairVectors(p.positions.cpu().numpy(), p.positions.cpu().numpy(),
                    dom.min.cpu().numpy(), dom.max.cpu().numpy(),
                    [bool(v) for v in dom.periodic.cpu()])
    n, d = x.shape[0], x.shape[2]
    h = p.supports.cpu().numpy()
    Wg = kr.W(0, d, x.reshape(-1, d), np.repeat(h, n)).reshape(n, n)  # h_i (Gather)
    V = 1.0 / Wg.sum(axis=1)
    Ws = kr.W(0, d, x.reshape(-1, d), np.tile(h, n)).reshape(n, n)  # h_j (Scatter)
    m0 = (Ws * V[None, :]).sum(1)
    m1 = np.einsum("ij,ijc->ic", Ws * V[None, :], x)
    m2 = np.einsum("ij,ija,ijb->iab", Ws * V[None, :], x, x)
    M = np.linalg.inv(m2)
    A = 1.0 / (m0 - np.einsum("ia,iab,ib->i", m1, M, m1))
    B = -np.einsum("iab,ib->ia", M, m1)
    return A, B, V


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_interpolate_crk_reproduces_linear_fields(device, dim, traversal):
    dt = torch.float64
    dom = makeDomain(dim, dt, device, lo=-3.0, hi=3.0)
    side = {1: 11, 2: 6, 3: 4}[dim]
    gen = torch.Generator().manual_seed(4)
    axes = [torch.linspace(-1.0, 1.0, side, dtype=dt)] * dim
    pos = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1).reshape(-1, dim)
    pos = pos + 0.05 * torch.randn(pos.shape, generator=gen, dtype=dt)
    n = pos.shape[0]
    h = (2.0 / (side - 1)) * 2.6 * (1.0 + 0.3 * (torch.rand(n, generator=gen, dtype=dt) - 0.5))
    p = ParticleState(pos.to(device), h.to(device), torch.ones(n, dtype=dt, device=device),
                      torch.zeros(n, dtype=torch.int32, device=device))
    A, B, V = _crkFromMoments(p, dom)
    crk = CRKState(torch.tensor(A, device=device), torch.tensor(B, device=device))
    coeff = torch.tensor([0.7, -1.3, 2.1][:dim], dtype=dt, device=device)
    f = 1.5 + p.positions @ coeff
    adj = neighbourStructure(traversal, p, dom)
    out = warpOperation(p, props(INTERP, supportMode=SupportScheme.Scatter), dom, queryValues=f,
                        referenceVolumes=torch.tensor(V, device=device), crkState=crk,
                        adjacency=adj)
    torch.testing.assert_close(out, f, rtol=0, atol=1e-12)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_interpolate_empty_populations(device, dim, traversal):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    full = cloud(5, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    for shape in fieldShapes(dim):
        # zero queries: trailing axes kept
        f = randomField(5, shape, dt, device, seed=0)
        adj = neighbourStructure(traversal, empty, dom, full)
        out = warpOperation(empty, props(INTERP), dom, referenceValues=f, adjacency=adj,
                            referenceParticles=full)
        assert out.shape == (0,) + shape
        # zero references: zeros of the full shape, backward works
        f0 = randomField(0, shape, dt, device, seed=0).requires_grad_()
        pos = full.positions.clone().requires_grad_()
        q = ParticleState(pos, full.supports, full.masses, full.kinds, full.densities)
        adj = neighbourStructure(traversal, full, dom, empty)
        out = warpOperation(q, props(INTERP), dom, referenceValues=f0, adjacency=adj,
                            referenceParticles=empty)
        assert out.shape == (5,) + shape
        assert torch.equal(out, torch.zeros_like(out))
        out.sum().backward()
        assert pos.grad is None or torch.equal(pos.grad, torch.zeros_like(pos))


# --- validation ------------------------------------


def _simple(device, dtype=torch.float64, n=6, d=2):
    return cloud(n, d, dtype, device, seed=0), makeDomain(d, dtype, device)


def test_mixed_dtypes_raise_type_error(device):
    p, dom = _simple(device)
    f32 = torch.ones(6, dtype=torch.float32, device=device)
    with pytest.raises(TypeError, match="queryValues"):
        warpOperation(p, props(INTERP), dom, queryValues=f32)
    with pytest.raises(TypeError):
        warpOperation(p, props(INTERP), makeDomain(2, torch.float32, device),
                      queryValues=p.masses)


def test_half_precision_rejected(device):
    p, dom = _simple(device)
    with pytest.raises(TypeError):
        warpOperation(p, props(INTERP), dom, queryValues=p.masses.half())


def test_missing_inputs_raise(device):
    p, dom = _simple(device)
    with pytest.raises(ValueError, match="pre-scattered"):
        warpOperation(p, props(INTERP), dom)
    nodens = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    with pytest.raises(ValueError, match="densities"):
        warpOperation(nodens, props(INTERP), dom, queryValues=p.masses)
    with pytest.raises(NotImplementedError):
        warpOperation(p, props(INTERP), dom, queryValues=p.masses,
                      preScatteredQuantities=p.masses)


def test_shape_errors(device):
    p, dom = _simple(device)
    with pytest.raises(ValueError, match="queryValues has shape"):
        warpOperation(p, props(INTERP), dom, queryValues=torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="field shapes"):
        warpOperation(p, props(INTERP), dom, queryValues=torch.ones(6, 2, dtype=torch.float64),
                      referenceValues=torch.ones(6, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="referenceVolumes"):
        warpOperation(p, props(INTERP), dom, queryValues=p.masses,
                      referenceVolumes=torch.ones(4, dtype=torch.float64))


def test_operation_dispatch_errors(device):
    p, dom = _simple(device)
    with pytest.raises(ValueError, match="Custom"):
        warpOperation(p, props(WarpOperation.Custom), dom, queryValues=p.masses)
    for op in (WarpOperation.Divergence, WarpOperation.Curl):  # scalar field in 2D
        with pytest.raises(ValueError, match=f"{op.name}.*scalar"):
            warpOperation(p, props(op), dom, queryValues=p.masses)
    with pytest.raises(TypeError, match="adjacency"):
        warpOperation(p, props(), dom, adjacency=object())
    with pytest.raises(ValueError, match="gradHState"):
        warpOperation(p, props(), dom, gradHState="bad")


def test_functorch_jacrev_equals_autograd(device):
    p, dom = _simple(device)

    def fn(x):
        q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
        return warpOperation(q, props(), dom)

    jac = torch.func.jacrev(fn)(p.positions)
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(fn, p.positions),
                               rtol=1e-10, atol=1e-12)
