"""The consistent Laplacian and Hessian (`corrections.consistentLaplacian`).

They are checked against:

- the independent float64 NumPy reference (`consistent_laplacian_reference`), in 1D, 2D and
  3D, periodic and free;
- quadratic fields, which must be reproduced to rounding (Laplacian and Hessian), and the
  identity trace(H) = Laplacian;
- both traversals (neighbour list and grid), explicit volumes against m / rho, float32;
- gradcheck (positions through the builder and the two operator calls, and values);
- value JVPs (dual tensors) against the operator applied to the tangent (the scheme is
  linear in the values);
- convergence of order >= 1 on jittered lattices where Brookshaw's scheme diverges.

The host-sync census of the builder must read 0, and degenerate rows must fall back to
Brookshaw.
"""

from __future__ import annotations

import math

import consistent_laplacian_reference as ref
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD

from warpSPHCore import DomainDescription, KernelFunctions, OperationProperties, ParticleState
from warpSPHCore.corrections import (
    computeLaplacianCorrection,
    consistentHessian,
    consistentLaplacian,
)
from warpSPHCore.enumTypes import LaplacianScheme, WarpOperation
from warpSPHCore.neighborhood import radiusSearchCompactHashMap
from warpSPHCore.operations import warpOperation

PROPS = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Laplacian)
SIZES = {1: 24, 2: 12, 3: 7}


def _setup(d, periodic, n=None, dtype=torch.float64, seed=1, jitter=0.3):
    x, dx, h = ref.jitteredLattice(n or SIZES[d], d, jitter=jitter, hOverDx=2.5, seed=seed)
    x = torch.tensor(x, dtype=dtype)
    N = x.shape[0]
    H = torch.full((N,), h, dtype=dtype)
    V = torch.full((N,), dx ** d, dtype=dtype)
    dom = DomainDescription(torch.zeros(d, dtype=dtype), torch.ones(d, dtype=dtype),
                            [periodic] * d)
    q = ParticleState(x, H, V.clone(), torch.zeros(N, dtype=torch.int32))
    return x, H, V, dom, q


def _quadratic(x, d, seed=0):
    g = np.random.default_rng(seed)
    Hq = g.normal(size=(d, d))
    Hq = Hq + Hq.T
    gq = g.normal(size=d)
    xn = x.detach().double().numpy()
    f = 0.5 * np.einsum("na,ab,nb->n", xn, Hq, xn) + xn @ gq + 0.7
    return torch.tensor(f, dtype=x.dtype), Hq


@pytest.mark.parametrize("d,periodic", [(1, False), (1, True), (2, False), (2, True),
                                        (3, False), (3, True)])
def test_matches_reference(d, periodic):
    x, H, V, dom, q = _setup(d, periodic)
    f = torch.sin(2 * math.pi * x[:, 0]) + 0.3 * torch.cos(2 * math.pi * x[:, -1])
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    lap = consistentLaplacian(q, PROPS, dom, state, f, queryVolumes=V)
    hess = consistentHessian(q, PROPS, dom, state, f, queryVolumes=V)
    box = ref.asBox(dom, d) if periodic else None
    want = ref.consistentLaplacian(x.numpy(), V.numpy(), H.numpy(), f.numpy(), box)
    wantH = ref.consistentHessian(x.numpy(), V.numpy(), H.numpy(), f.numpy(), box)
    ok = ~state.fallback
    if periodic:
        assert ok.all(), "no fallback rows on a periodic lattice"
    else:  # ill-conditioned rows near free walls fall back to Brookshaw
        assert 0 < int(ok.sum()) < x.shape[0]
    scale = float(np.abs(want).max())
    # the operator regularises r with 1e-8 h (Brookshaw's D), the reference does not; the
    # K x K solve amplifies that by its condition (largest at free corners, ~1e3)
    assert float((lap - torch.tensor(want))[ok].abs().max()) <= 2e-6 * scale
    assert float((hess - torch.tensor(wantH))[ok].abs().max()) <= 2e-6 * np.abs(wantH).max()
    trace = hess.diagonal(dim1=-2, dim2=-1).sum(-1)
    assert float((trace - lap)[ok].abs().max()) <= 1e-12 * scale


@pytest.mark.parametrize("d", [1, 2, 3])
def test_quadratic_fields_to_rounding(d):
    x, H, V, dom, q = _setup(d, False)
    f, Hq = _quadratic(x, d)
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    lap = consistentLaplacian(q, PROPS, dom, state, f, queryVolumes=V)
    hess = consistentHessian(q, PROPS, dom, state, f, queryVolumes=V)
    scale = float(np.abs(Hq).max()) * d
    ok = ~state.fallback
    assert int(ok.sum()) > 0
    assert float((lap - float(np.trace(Hq)))[ok].abs().max()) <= 1e-9 * scale
    assert float((hess - torch.tensor(Hq))[ok].abs().max()) <= 1e-9 * scale
    # with the conditioning limit lifted every row is exact, even at the walls
    raw = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V, bLimit=math.inf)
    assert not bool(raw.fallback.any())
    lapRaw = consistentLaplacian(q, PROPS, dom, raw, f, queryVolumes=V)
    assert float((lapRaw - float(np.trace(Hq))).abs().max()) <= 1e-7 * scale
    # Brookshaw does not reproduce them (the test can fail)
    brook = warpOperation(q, OperationProperties(KernelFunctions.Wendland2,
                                                 operation=WarpOperation.Laplacian,
                                                 laplacianMode=LaplacianScheme.Brookshaw),
                          dom, queryValues=f, queryVolumes=V)
    assert float((brook - float(np.trace(Hq))).abs().max()) > 1e-2 * scale


def test_vector_field_and_traversals():
    x, H, V, dom, q = _setup(2, True)
    u = torch.stack([torch.sin(2 * math.pi * x[:, 0]), torch.cos(2 * math.pi * x[:, 1])], 1)
    grid = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    adjacency = radiusSearchCompactHashMap(q, dom)
    csr = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V, adjacency=adjacency)
    a = consistentLaplacian(q, PROPS, dom, grid, u, queryVolumes=V)
    b = consistentLaplacian(q, PROPS, dom, csr, u, queryVolumes=V, adjacency=adjacency)
    assert a.shape == (x.shape[0], 2)
    assert float((a - b).abs().max()) <= 1e-12 * float(a.abs().max())
    for k in range(2):  # each component is the scalar scheme
        s = consistentLaplacian(q, PROPS, dom, grid, u[:, k].contiguous(), queryVolumes=V)
        assert float((s - a[:, k]).abs().max()) <= 1e-12 * float(a.abs().max())
    assert consistentHessian(q, PROPS, dom, grid, u, queryVolumes=V).shape == (x.shape[0], 2,
                                                                               2, 2)


def test_densities_as_volumes_and_float32():
    x, H, V, dom, q = _setup(2, False)
    rho = torch.full_like(V, 1000.0)
    qm = ParticleState(q.positions, q.supports, V * 1000.0, q.kinds, rho)
    f, Hq = _quadratic(x, 2, seed=3)
    lapV = consistentLaplacian(q, PROPS, dom, computeLaplacianCorrection(q, PROPS, dom,
                                                                         queryVolumes=V),
                               f, queryVolumes=V)
    lapM = consistentLaplacian(qm, PROPS, dom, computeLaplacianCorrection(qm, PROPS, dom), f)
    assert float((lapV - lapM).abs().max()) <= 1e-10 * float(lapV.abs().max())
    x32, H32, V32, dom32, q32 = _setup(2, False, dtype=torch.float32)
    f32 = f.float()
    lap32 = consistentLaplacian(q32, PROPS, dom32, computeLaplacianCorrection(
        q32, PROPS, dom32, queryVolumes=V32), f32, queryVolumes=V32)
    assert lap32.dtype == torch.float32
    ok = ~computeLaplacianCorrection(q32, PROPS, dom32, queryVolumes=V32).fallback
    assert float((lap32.double() - float(np.trace(Hq)))[ok].abs().max()) <= 1e-2 * abs(
        float(np.trace(Hq))) + 1e-2


def test_gradcheck_positions_and_values():
    x, H, V, dom, q = _setup(2, True, n=5)
    x = x.clone().requires_grad_(True)
    f = torch.rand(x.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    f.requires_grad_(True)

    def lapOf(xx, ff):
        qq = ParticleState(xx, H, V.clone(), q.kinds)
        state = computeLaplacianCorrection(qq, PROPS, dom, queryVolumes=V)
        return consistentLaplacian(qq, PROPS, dom, state, ff, queryVolumes=V)

    assert torch.autograd.gradcheck(lapOf, (x, f), eps=1e-7, atol=1e-5, rtol=1e-4)


def test_value_jvp_dual_tensors():
    x, H, V, dom, q = _setup(2, True)
    g = torch.Generator().manual_seed(1)
    f = torch.rand(x.shape[0], dtype=torch.float64, generator=g)
    t = torch.rand(x.shape[0], dtype=torch.float64, generator=g)
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    with fwAD.dual_level():
        y = consistentLaplacian(q, PROPS, dom, state, fwAD.make_dual(f, t), queryVolumes=V)
        tangent = fwAD.unpack_dual(y).tangent
    want = consistentLaplacian(q, PROPS, dom, state, t, queryVolumes=V)  # linear in f
    assert float((tangent - want).abs().max()) <= 1e-12 * float(want.abs().max())
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="forward-mode"):
        dual = ParticleState(fwAD.make_dual(x, torch.ones_like(x)), H, V.clone(), q.kinds)
        computeLaplacianCorrection(dual, PROPS, dom, queryVolumes=V)


def test_converges_where_brookshaw_diverges():
    errs, errsB, dxs = [], [], []
    for n in (12, 16, 24):
        x, H, V, dom, q = _setup(2, True, n=n, seed=0)
        k = 2 * math.pi
        f = torch.sin(k * x[:, 0]) * torch.cos(k * x[:, 1])
        exact = -2 * k * k * f
        state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
        lap = consistentLaplacian(q, PROPS, dom, state, f, queryVolumes=V)
        brook = warpOperation(q, OperationProperties(KernelFunctions.Wendland2,
                                                     operation=WarpOperation.Laplacian,
                                                     laplacianMode=LaplacianScheme.Brookshaw),
                              dom, queryValues=f, queryVolumes=V)
        norm = float(exact.norm())
        errs.append(float((lap - exact).norm()) / norm)
        errsB.append(float((brook - exact).norm()) / norm)
        dxs.append(1.0 / n)
    order = ref.fitOrder(np.array(dxs), np.array(errs))
    orderB = ref.fitOrder(np.array(dxs), np.array(errsB))
    assert order >= 1.0 and orderB < 0.5, (order, orderB, errs, errsB)


def test_degenerate_rows_fall_back_to_brookshaw():
    # supports of one spacing: too few neighbours for the K x K solve
    x, _, V, dom, _ = _setup(2, True, n=8)
    H = torch.full((x.shape[0],), 1.0 / 8, dtype=torch.float64)
    q = ParticleState(x, H, V.clone(), torch.zeros(x.shape[0], dtype=torch.int32))
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    assert bool(state.fallback.all())
    f = torch.sin(2 * math.pi * x[:, 0])
    lap = consistentLaplacian(q, PROPS, dom, state, f, queryVolumes=V)
    brook = warpOperation(q, OperationProperties(KernelFunctions.Wendland2,
                                                 operation=WarpOperation.Laplacian,
                                                 laplacianMode=LaplacianScheme.Brookshaw),
                          dom, queryValues=f, queryVolumes=V,
                          renormalizationState=state.L)
    assert torch.isfinite(lap).all()
    # fallback rows: B = -2 I (Brookshaw's pair sum with plain G), beta = 0
    plain = warpOperation(q, OperationProperties(KernelFunctions.Wendland2,
                                                 operation=WarpOperation.Laplacian,
                                                 laplacianMode=LaplacianScheme.Brookshaw),
                          dom, queryValues=f, queryVolumes=V)
    assert float((lap - plain).abs().max()) <= 1e-12 * float(plain.abs().max())
    assert brook.shape == lap.shape


def test_builder_is_sync_free():
    from warpSPHCore.util.hostSyncCensus import Census

    x, H, V, dom, q = _setup(2, True)
    computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)  # compile / warm
    c = Census()
    with c.patched():
        state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
        consistentLaplacian(q, PROPS, dom, state, x[:, 0].contiguous(), queryVolumes=V)
    assert c.total == 0, c.bySite()


def test_kinds_mode_and_empty_population():
    import dataclasses

    from warpSPHCore.enumTypes import OperationDirection

    # FluidToFluid on a mixed set equals the fluid-only set for the fluid rows
    x, H, V, dom, q = _setup(2, True)
    kinds = (torch.arange(x.shape[0]) % 5 == 0).to(torch.int32)  # every fifth a boundary
    mixed = ParticleState(x, H, V.clone(), kinds)
    props = dataclasses.replace(PROPS, operationMode=OperationDirection.FluidToFluid)
    f = torch.sin(2 * math.pi * x[:, 0])
    lap = consistentLaplacian(mixed, props, dom, computeLaplacianCorrection(
        mixed, props, dom, queryVolumes=V), f, queryVolumes=V)
    fluid = kinds == 0
    qf = ParticleState(x[fluid], H[fluid], V[fluid].clone(), kinds[fluid])
    lapF = consistentLaplacian(qf, PROPS, dom, computeLaplacianCorrection(
        qf, PROPS, dom, queryVolumes=V[fluid]), f[fluid].contiguous(), queryVolumes=V[fluid])
    assert float((lap[fluid] - lapF).abs().max()) <= 1e-10 * float(lapF.abs().max())
    assert float(lap[~fluid].abs().max()) == 0.0  # masked queries are 0
    # an empty query set
    empty = ParticleState(x[:0], H[:0], V[:0], kinds[:0])
    state = computeLaplacianCorrection(empty, PROPS, dom, queryVolumes=V[:0],
                                       referenceParticles=mixed, referenceVolumes=V)
    out = consistentLaplacian(empty, PROPS, dom, state, f[:0], referenceValues=f,
                              queryVolumes=V[:0], referenceVolumes=V,
                              referenceParticles=mixed)
    assert out.shape == (0,)


@pytest.mark.parametrize("d,periodic", [(2, True), (2, False), (3, True)])
def test_geometry_jvp_against_finite_differences_and_reverse_mode(d, periodic):
    from warpSPHCore.corrections import computeLaplacianCorrectionJVP, consistentLaplacianJVP
    from warpSPHCore.dataTypes.particleState import ParticleTangentState

    x, H, V, dom, q = _setup(d, periodic, n={2: 8, 3: 5}[d])  # (a 5^3 free box has
    N = x.shape[0]                                              # near-singular corners)
    g = torch.Generator().manual_seed(2)
    f = torch.rand(N, dtype=torch.float64, generator=g)
    tf = torch.rand(N, dtype=torch.float64, generator=g)
    tx = torch.rand(N, d, dtype=torch.float64, generator=g) - 0.5
    th = 0.1 * H * (torch.rand(N, dtype=torch.float64, generator=g) - 0.5)

    def lapOf(xx, hh, ff):
        qq = ParticleState(xx, hh, V.clone(), q.kinds)
        state = computeLaplacianCorrection(qq, PROPS, dom, queryVolumes=V)
        return consistentLaplacian(qq, PROPS, dom, state, ff, queryVolumes=V)

    tangent = ParticleTangentState(positions=tx, supports=th)
    state, dstate = computeLaplacianCorrectionJVP(q, PROPS, dom, tangent, queryVolumes=V)
    jvp = consistentLaplacianJVP(q, PROPS, dom, state, dstate, f, tangentQueryValues=tf,
                                 queryTangentState=tangent, queryVolumes=V)
    eps = 1e-6
    fd = (lapOf(x + eps * tx, H + eps * th, f + eps * tf)
          - lapOf(x - eps * tx, H - eps * th, f - eps * tf)) / (2 * eps)
    assert float((jvp - fd).abs().max()) <= 1e-7 * float(fd.abs().max())
    # <w, J t> = <J^T w, t> against reverse mode
    xr, hr, fr = (t.clone().requires_grad_(True) for t in (x, H, f))
    w = torch.rand(N, dtype=torch.float64, generator=g)
    gx, gh, gf = torch.autograd.grad((lapOf(xr, hr, fr) * w).sum(), (xr, hr, fr))
    lhs = float((w * jvp).sum())
    rhs = float((gx * tx).sum() + (gh * th).sum() + (gf * tf).sum())
    assert abs(lhs - rhs) <= 1e-10 * abs(rhs)


def test_free_walls_stay_stable():
    # without the conditioning limit, wall rows get |B| ~ 1e3-1e5 and eigenvalues with a
    # large positive real part (a heat solve would blow up); with it they fall back
    x, H, V, dom, q = _setup(2, False, n=12, seed=0, jitter=0.2)
    N = x.shape[0]
    eye = torch.eye(N, dtype=torch.float64)
    dx2 = (1.0 / 12) ** 2
    limited = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    raw = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V, bLimit=math.inf)
    evLimited = np.linalg.eigvals(consistentLaplacian(q, PROPS, dom, limited, eye,
                                                      queryVolumes=V).numpy().T) * dx2
    evRaw = np.linalg.eigvals(consistentLaplacian(q, PROPS, dom, raw, eye,
                                                  queryVolumes=V).numpy().T) * dx2
    assert evLimited.real.max() <= 1e-8 and evRaw.real.max() > 1.0
    assert int(limited.fallback.sum()) < N // 2


@pytest.mark.usefixtures("specialized")  # conftest: specialised kernels on for this test
@pytest.mark.parametrize("d,periodic,dtype", [(1, False, torch.float64), (2, False, torch.float64),
                                              (3, True, torch.float64), (2, True, torch.float32)])
def test_specialised_moments_kernel_matches_generic(d, periodic, dtype):
    from warpSPHCore.autograd.specialize import setSpecialization
    from warpSPHCore.corrections import secondDerivatives as SD
    from warpSPHCore.operators import _specialized

    x, H, V, dom, q = _setup(d, periodic, dtype=dtype)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    tol = {torch.float64: 1e-13, torch.float32: 1e-4}[dtype]
    for adjacency in (None, radiusSearchCompactHashMap(q, dom)):
        with torch.no_grad():
            fast = SD._moments(q, props, dom, V, None, adjacency, None)[1:]
            previous = setSpecialization(False)
            try:
                generic = SD._moments(q, props, dom, V, None, adjacency, None)[1:]
            finally:
                setSpecialization(previous)
        for a, b in zip(fast, generic):
            # the same arithmetic up to the compiler's contractions (and, on periodic axes,
            # the generic minimum image's wrap of both coordinates)
            assert float((a - b).abs().max()) <= tol * float(b.abs().max())
    assert any(name == "laplacianMoments" and cfg.dim == d for name, cfg in _specialized._BUILT)


def test_hessian_gradcheck_positions_and_values():
    x, H, V, dom, q = _setup(2, True, n=5)
    f = torch.rand(x.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(5))

    def hessOf(xx, ff):
        qq = ParticleState(xx, H, V.clone(), q.kinds)
        state = computeLaplacianCorrection(qq, PROPS, dom, queryVolumes=V)
        return consistentHessian(qq, PROPS, dom, state, ff, queryVolumes=V)

    inputs = (x.clone().requires_grad_(True), f.clone().requires_grad_(True))
    assert torch.autograd.gradcheck(hessOf, inputs, eps=1e-7, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("d,periodic", [(2, True), (3, True)])
def test_hessian_geometry_jvp_against_finite_differences_and_reverse_mode(d, periodic):
    from warpSPHCore.corrections import computeLaplacianCorrectionJVP, consistentHessianJVP
    from warpSPHCore.dataTypes.particleState import ParticleTangentState

    x, H, V, dom, q = _setup(d, periodic, n={2: 8, 3: 6}[d])
    N = x.shape[0]
    g = torch.Generator().manual_seed(6)
    f = torch.rand(N, 2, dtype=torch.float64, generator=g)  # a vector field: [N, 2, d, d]
    tf = torch.rand(N, 2, dtype=torch.float64, generator=g)
    tx = torch.rand(N, d, dtype=torch.float64, generator=g) - 0.5
    th = 0.1 * H * (torch.rand(N, dtype=torch.float64, generator=g) - 0.5)

    def hessOf(xx, hh, ff):
        qq = ParticleState(xx, hh, V.clone(), q.kinds)
        state = computeLaplacianCorrection(qq, PROPS, dom, queryVolumes=V)
        return consistentHessian(qq, PROPS, dom, state, ff, queryVolumes=V)

    tangent = ParticleTangentState(positions=tx, supports=th)
    state, dstate = computeLaplacianCorrectionJVP(q, PROPS, dom, tangent, queryVolumes=V)
    jvp = consistentHessianJVP(q, PROPS, dom, state, dstate, f, tangentQueryValues=tf,
                               queryTangentState=tangent, queryVolumes=V)
    assert jvp.shape == (N, 2, d, d)
    eps = 1e-6
    fd = (hessOf(x + eps * tx, H + eps * th, f + eps * tf)
          - hessOf(x - eps * tx, H - eps * th, f - eps * tf)) / (2 * eps)
    assert float((jvp - fd).abs().max()) <= 1e-7 * float(fd.abs().max())
    xr, hr, fr = (t.clone().requires_grad_(True) for t in (x, H, f))
    w = torch.rand(jvp.shape, dtype=torch.float64, generator=g)
    gx, gh, gf = torch.autograd.grad((hessOf(xr, hr, fr) * w).sum(), (xr, hr, fr))
    lhs = float((w * jvp).sum())
    rhs = float((gx * tx).sum() + (gh * th).sum() + (gf * tf).sum())
    assert abs(lhs - rhs) <= 1e-10 * abs(rhs)
    # value tangents alone with a frozen state: the Hessian of the tangent (linear in f)
    frozen = consistentHessianJVP(q, PROPS, dom, state, None, f, tangentQueryValues=tf,
                                  queryVolumes=V)
    want = consistentHessian(q, PROPS, dom, state, tf, queryVolumes=V)
    assert float((frozen - want).abs().max()) <= 1e-12 * float(want.abs().max())
