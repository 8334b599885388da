"""Momentum (`operators.momentum`): the fused pressure + viscosity +
transport-velocity momentum rate.

* forward values against an independent float64 NumPy brute force over every pair, written
  from the formula (minimum image, pairwise support rule, kinds masking, D = r + 1e-8 h_ij),
  in 1D/2D/3D, float32/float64, every support scheme, three traversals, periodic or not,
  self and distinct reference sets;
* float64 gradcheck w.r.t. positions, supports and the per-particle fields (query and
  reference), in every dimension, every traversal;
* forward mode: tests/operations/test_forward_mode_momentum.py;
* properties: zero on a uniform periodic lattice at rest with uniform pressure; Newton's third
  law (sum_i F_i = 0 for a symmetric support scheme); a masked query row is exactly 0;
* a field of the wrong width is a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    masks,
    momentumTestField,
    neighbourStructure,
    pairKernelGradient,
    pairVectors,
    props,
)

from warpSPHCore import (
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
MOM = WarpOperation.Momentum


def _np(t):
    return t.detach().cpu().to(F64).numpy()


def _field(n, d, seed, dtype=F64):
    return momentumTestField(n, d, seed, dtype)


def _pairSupport(hq, hr, mode):
    hq, hr = hq[:, None], hr[None, :]
    if mode == SupportScheme.Gather:
        return hq + 0 * hr
    if mode == SupportScheme.Scatter:
        return hr + 0 * hq
    if mode == SupportScheme.MeanSymmetric:
        return (hq + hr) / 2
    return np.maximum(hq, hr)


def momentumReference(query, domain, pr, fq, reference=None, fr=None):
    """(F_i, B_i) ``[N_q, 2, d]``: F_i = sum_j (V_i^2 + V_j^2) [-p~_ij G_ij
    + mu_ij u_ij (x_ij . G_ij) / D^2 + 1/2 (A_i + A_j) . G_ij], B_i = sum_j (V_i^2 + V_j^2)
    G_ij, brute force over all pairs (operators.momentum)."""
    ref = query if reference is None else reference
    fr = fq if fr is None else fr
    d = query.positions.shape[1]
    lo, hi = _np(domain.min), _np(domain.max)
    per = [bool(p) for p in domain.periodic.tolist()]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    hq, hr = _np(query.supports), _np(ref.supports)
    G = pairKernelGradient(pr.kernel, d, x, hq, hr, pr.supportMode)
    r = np.linalg.norm(x, axis=-1)
    D = r + 1e-8 * _pairSupport(hq, hr, pr.supportMode)
    a, b = _np(fq), _np(fr)

    def split(f):
        return f[:, 0], f[:, 1], f[:, 2], f[:, 3], f[:, 4:4 + d], f[:, 4 + d:]

    p_i, rho_i, V_i, mu_i, u_i, ut_i = (c[:, None] if c.ndim == 1 else c[:, None, :]
                                        for c in split(a))
    p_j, rho_j, V_j, mu_j, u_j, ut_j = (c[None, :] if c.ndim == 1 else c[None, :, :]
                                        for c in split(b))
    w = V_i**2 + V_j**2
    pt = (rho_j * p_i + rho_i * p_j) / (rho_i + rho_j)
    mu = 2 * mu_i * mu_j / (mu_i + mu_j)
    xg = np.einsum("ijk,ijk->ij", x, G)
    with np.errstate(divide="ignore", invalid="ignore"):
        visc = np.where(r > 0, mu * xg / D**2, 0.0)
    A_i = rho_i[..., None] * np.einsum("ijk,ijk->ij", ut_i - u_i, G)[..., None] * u_i
    A_j = rho_j[..., None] * np.einsum("ijk,ijk->ij", ut_j - u_j, G)[..., None] * u_j
    term = w[..., None] * (visc[..., None] * (u_i - u_j) - pt[..., None] * G
                           + 0.5 * (A_i + A_j))
    qm, rm = masks(pr.operationMode, _np(query.kinds), _np(ref.kinds))
    keep = rm[None, :, None] & (r > 0)[..., None]
    F = (term * keep).sum(axis=1) * qm[:, None]
    B = (w[..., None] * G * keep).sum(axis=1) * qm[:, None]
    return np.stack([F, B], axis=1)


def _kinds(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (n,), generator=g, dtype=torch.int32)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_momentum_brute_force(d, dtype, traversal):
    """Every support scheme, periodic and walled, kinds masking (modes 9 and 13), self and
    distinct reference sets, against the NumPy brute force."""
    for s, mode in enumerate(SupportScheme):
        periodic = s % 2 == 0
        dom = makeDomain(d, dtype, "cpu", periodic=periodic)
        n = {1: 12, 2: 30, 3: 40}[d]
        q = marginCloud(n, d, dtype, "cpu", 10 * s + d, domain=dom, kinds=_kinds(n, s),
                        hMean=0.45 if periodic else None)
        opMode = 13 if s % 3 == 1 else 9
        pr = props(MOM, supportMode=mode, operationMode=opMode,
                   kernel=(KernelFunctions.Wendland2, KernelFunctions.QuinticSpline)[s % 2])
        fq = _field(n, d, s, dtype)
        out = warpOperation(q, pr, dom, queryValues=fq,
                            adjacency=neighbourStructure(traversal, q, dom))
        ref = momentumReference(q, dom, pr, fq)
        scale = np.abs(ref).max()
        tol = 1e-12 if dtype == F64 else 2e-5
        assert out.shape == (n, 2, d) and out.dtype == dtype
        np.testing.assert_allclose(_np(out), ref, rtol=0, atol=tol * scale, err_msg=mode.name)
    # distinct reference set (its own field)
    dom = makeDomain(d, dtype, "cpu")
    q, r = marginPair(9, 14, d, dtype, "cpu", 3, dom)
    pr = props(MOM, supportMode=SupportScheme.MeanSymmetric)
    fq, fr = _field(9, d, 5, dtype), _field(14, d, 6, dtype)
    out = warpOperation(q, pr, dom, queryValues=fq, referenceValues=fr, referenceParticles=r,
                        adjacency=neighbourStructure(traversal, q, dom, r))
    ref = momentumReference(q, dom, pr, fq, r, fr)
    tol = 1e-12 if dtype == F64 else 2e-5
    np.testing.assert_allclose(_np(out), ref, rtol=0, atol=tol * np.abs(ref).max())


def _gradcheckCase(d, seed, traversal, distinct):
    dom = makeDomain(d, F64, "cpu")
    if distinct:
        q, r = marginPair(6, 7, d, F64, "cpu", seed, dom)
    else:
        q = marginCloud({1: 6, 2: 8, 3: 9}[d], d, F64, "cpu", seed, domain=dom)
        r = None
    return dom, q, r, neighbourStructure(traversal, q, dom, r)


def _gradcheckOne(d, traversal, distinct, mode):
    dom, q, r, adj = _gradcheckCase(d, 7 + d, traversal, distinct)
    pr = props(MOM, supportMode=mode)
    fq = _field(q.positions.shape[0], d, 1)
    if not distinct:
        def fn(x, h, f):
            return warpOperation(ParticleState(x, h, q.masses, q.kinds), pr, dom,
                                 queryValues=f, adjacency=adj)

        return torch.autograd.gradcheck(fn, tuple(leaves(q.positions, q.supports, fq)),
                                        **GRADCHECK)
    fr = _field(r.positions.shape[0], d, 2)

    def fn2(xq, hq, fq_, xr, hr, fr_):
        return warpOperation(ParticleState(xq, hq, q.masses, q.kinds), pr, dom,
                             queryValues=fq_, referenceValues=fr_, adjacency=adj,
                             referenceParticles=ParticleState(xr, hr, r.masses, r.kinds))

    inputs = leaves(q.positions, q.supports, fq, r.positions, r.supports, fr)
    return torch.autograd.gradcheck(fn2, tuple(inputs), **GRADCHECK)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_momentum_gradcheck(d, traversal):
    """float64 gradcheck w.r.t. positions, supports and fields, self (Gather) and distinct
    (SuperSymmetric) sets."""
    assert _gradcheckOne(d, traversal, False, SupportScheme.Gather)
    assert _gradcheckOne(d, traversal, True, SupportScheme.SuperSymmetric)


@pytest.mark.parametrize("d", [2, 3])
def test_momentum_lattice_at_rest_and_newton(d):
    """Uniform pressure on a periodic lattice at rest: F = B = 0 (the sum of G_ij vanishes by
    symmetry). Random fields under a symmetric support scheme: sum_i F_i = sum_i B_i = 0 when
    the transport velocity equals the velocity (every pair term is antisymmetric in i, j)."""
    n = 6
    dom = makeDomain(d, F64, "cpu", lo=0.0, hi=1.0, periodic=True)
    g = (torch.arange(n, dtype=F64) + 0.5) / n
    x = torch.stack(torch.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)
    N = x.shape[0]
    q = ParticleState(x, torch.full((N,), 2.5 / n, dtype=F64), torch.ones(N, dtype=F64),
                      torch.zeros(N, dtype=torch.int32))
    f = torch.zeros(N, 4 + 2 * d, dtype=F64)
    f[:, 0], f[:, 1], f[:, 2], f[:, 3] = 3.0, 1.0, n ** -d, 0.1
    out = warpOperation(q, props(MOM), dom, queryValues=f)
    assert out.abs().max() < 1e-9  # F and B
    jitter = torch.Generator().manual_seed(d)
    xj = x + 0.1 / n * (torch.rand(x.shape, generator=jitter, dtype=F64) - 0.5)
    f = _field(N, d, 3)
    f[:, 4 + d:] = f[:, 4:4 + d]
    qj = ParticleState(xj, q.supports * (1 + 0.1 * torch.rand(N, generator=jitter, dtype=F64)),
                       q.masses, q.kinds)
    out = warpOperation(qj, props(MOM, supportMode=SupportScheme.MeanSymmetric), dom,
                        queryValues=f)
    assert out[:, 0].abs().max() > 1e-3 and out[:, 1].abs().max() > 1e-6
    for row in (0, 1):
        assert out[:, row].sum(0).abs().max() < 1e-10 * out[:, row].abs().max() * N


def test_momentum_masked_query_and_bad_field():
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(10, 2, F64, "cpu", 1, domain=dom,
                    kinds=torch.tensor([0, 1] * 5, dtype=torch.int32))
    f = _field(10, 2, 1)
    out = warpOperation(q, props(MOM, operationMode=11), dom, queryValues=f)
    assert torch.all(out[1::2] == 0) and out[0::2].abs().max() > 0
    assert out.shape == (10, 2, 2)
    with pytest.raises(ValueError, match=r"Momentum of a field of shape \[N, 7\] in 2D.*"
                                         r"\[N, 8\]"):
        warpOperation(q, props(MOM), dom, queryValues=f[:, :7])
    with pytest.raises(ValueError, match="Momentum"):
        warpOperation(q, props(MOM), dom, queryValues=f[:, 0])
