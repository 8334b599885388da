"""`LaplacianScheme.Consistent` as a registry scheme of `warpOperation`.

The scheme's pair term is ``q_ij G_ij . (B_i x_ij / D^2 - gamma_i)`` with the per-query
``B`` and ``gamma`` of a `LaplacianCorrectionState` (two appended flat slots). Its numerics
against the float64 NumPy reference, quadratic fields, convergence, the builder's forward
mode and the Hessian are in `test_consistent_laplacian.py` (which goes through the same
scheme by `consistentLaplacian`); this module checks what every registry scheme owes:

- forward values against the independent float64 reference through `warpOperation` itself,
  both traversals and a per-call grid, float32 against float64;
- float64 gradcheck of the kernel's reverse mode with respect to positions, supports,
  values, reference volumes and the state's B and gamma (the appended slots), both
  traversals, a distinct reference set;
- forward mode: `test_forward_mode_geometry_jvp_laplacian_consistent.py`;
- the specialised forward kernel against the generic (taped) kernel, bitwise;
- masked kinds, empty populations, the host-sync census;
- the call errors of the scheme's declaration (`operators.SchemeState`).
"""

from __future__ import annotations

import dataclasses
import math

import consistent_laplacian_reference as ref
import numpy as np
import pytest
import torch
from consistent_laplacian_reference import consistentLaplacian as consistentLaplacianReference
from test_consistent_laplacian import _setup

from warpSPHCore import DomainDescription, KernelFunctions, OperationProperties, ParticleState
from warpSPHCore.corrections import computeLaplacianCorrection
from warpSPHCore.dataTypes import (
    CRKState,
    LaplacianCorrectionTangentState,
    ParticleTangentState,
)
from warpSPHCore.enumTypes import GradientScheme, LaplacianScheme, OperationDirection, WarpOperation
from warpSPHCore.neighborhood import radiusSearchCompactHashMap
from warpSPHCore.operations import warpOperation, warpOperationJVP

CONSISTENT = LaplacianScheme.Consistent
PROPS = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Laplacian,
                            laplacianMode=CONSISTENT, gradientMode=GradientScheme.Difference)


def _lap(q, dom, state, f, props=PROPS, **kw):
    return warpOperation(q, props, dom, queryValues=f, laplacianCorrectionState=state, **kw)


@pytest.mark.parametrize("scheme", [LaplacianScheme.Consistent])
@pytest.mark.parametrize("d,periodic,n", [(1, True, 24), (2, False, 12), (3, True, 6)])
def test_consistent_scheme_matches_reference(d, periodic, n, scheme):
    assert PROPS.laplacianMode == scheme
    x, H, V, dom, q = _setup(d, periodic, n)
    f = torch.sin(2 * math.pi * x[:, 0]) + 0.3 * torch.cos(2 * math.pi * x[:, -1])
    csr = radiusSearchCompactHashMap(q, dom)
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    perCall = _lap(q, dom, state, f, queryVolumes=V)
    listed = _lap(q, dom, state, f, queryVolumes=V, adjacency=csr)
    box = ref.asBox(dom, d) if periodic else None
    want = torch.tensor(consistentLaplacianReference(x.numpy(), V.numpy(), H.numpy(),
                                                     f.numpy(), box))
    ok = ~state.fallback
    scale = float(want.abs().max())
    assert int(ok.sum()) > 0
    assert float((perCall - want)[ok].abs().max()) <= 2e-6 * scale
    assert float((listed - perCall).abs().max()) <= 1e-12 * scale
    # float32: the same scheme to single precision
    x32, H32, V32, dom32, q32 = _setup(d, periodic, n, dtype=torch.float32)
    s32 = computeLaplacianCorrection(q32, PROPS, dom32, queryVolumes=V32)
    lap32 = _lap(q32, dom32, s32, f.float(), queryVolumes=V32)
    assert lap32.dtype == torch.float32
    both = ok & ~s32.fallback
    assert float((lap32.double() - perCall)[both].abs().max()) <= 2e-3 * scale


@pytest.mark.parametrize("scheme", [LaplacianScheme.Consistent])
@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_consistent_scheme_gradcheck(traversal, scheme):
    assert PROPS.laplacianMode == scheme
    x, H, V, dom, q = _setup(2, True, 6)
    N = x.shape[0]
    g = torch.Generator().manual_seed(3)
    f = torch.rand(N, 2, dtype=torch.float64, generator=g)
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    adjacency = radiusSearchCompactHashMap(q, dom) if traversal == "csr" else None

    def lapOf(xx, hh, ff, VV, B, gamma):
        qq = ParticleState(xx, hh, V.clone(), q.kinds)
        st = dataclasses.replace(state, B=B, gamma=gamma)
        return _lap(qq, dom, st, ff, referenceVolumes=VV, adjacency=adjacency)

    inputs = tuple(t.clone().requires_grad_(True)
                   for t in (x, H, f, V, state.B, state.gamma))
    assert torch.autograd.gradcheck(lapOf, inputs, eps=1e-7, atol=1e-5, rtol=1e-4)


def test_consistent_scheme_gradcheck_distinct_reference_set():
    x, H, V, dom, q = _setup(2, False, 6)
    rng = torch.Generator().manual_seed(4)
    queries = torch.rand(5, 2, dtype=torch.float64, generator=rng) * 0.6 + 0.2
    qs = ParticleState(queries, torch.full((5,), float(H[0]), dtype=torch.float64),
                       torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.int32))
    Vq = torch.full((5,), float(V[0]), dtype=torch.float64)
    state = computeLaplacianCorrection(qs, PROPS, dom, queryVolumes=Vq, referenceVolumes=V,
                                       referenceParticles=q)
    f = torch.rand(x.shape[0], dtype=torch.float64, generator=rng)
    fq = torch.rand(5, dtype=torch.float64, generator=rng)

    def lapOf(xq, xr, fr, B, gamma):
        qq = ParticleState(xq, qs.supports, qs.masses, qs.kinds)
        rr = ParticleState(xr, H, V.clone(), q.kinds)
        st = dataclasses.replace(state, B=B, gamma=gamma)
        return _lap(qq, dom, st, fq, referenceValues=fr, queryVolumes=Vq, referenceVolumes=V,
                    referenceParticles=rr)

    inputs = tuple(t.clone().requires_grad_(True)
                   for t in (queries, x, f, state.B, state.gamma))
    assert torch.autograd.gradcheck(lapOf, inputs, eps=1e-7, atol=1e-5, rtol=1e-4)


@pytest.mark.usefixtures("specialized")  # conftest: specialised kernels on for this test
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_consistent_scheme_specialised_kernel_matches_generic(dtype):
    from warpSPHCore.operators import _specialized

    x, H, V, dom, q = _setup(2, False, 10, dtype=dtype)
    f = torch.sin(3 * x[:, 0]) * x[:, 1]
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    for adjacency in (None, radiusSearchCompactHashMap(q, dom)):
        with torch.no_grad():
            fast = _lap(q, dom, state, f, queryVolumes=V, adjacency=adjacency)  # specialised
        taped = _lap(q, dom, state, f.clone().requires_grad_(True), queryVolumes=V,
                     adjacency=adjacency)  # generic kernel, recorded for reverse mode
        assert torch.equal(fast, taped.detach())
    built = [cfg for name, cfg in _specialized._BUILT
             if name == "laplacian" and cfg.laplacianScheme == int(LaplacianScheme.Consistent)]
    assert {cfg.useAdjacency for cfg in built} >= {True, False}


def test_consistent_scheme_kinds_and_empty_populations():
    x, H, V, dom, q = _setup(2, True, 10)
    kinds = (torch.arange(x.shape[0]) % 4 == 0).to(torch.int32)
    mixed = ParticleState(x, H, V.clone(), kinds)
    props = dataclasses.replace(PROPS, operationMode=OperationDirection.FluidToFluid)
    f = torch.cos(2 * math.pi * x[:, 1])
    state = computeLaplacianCorrection(mixed, props, dom, queryVolumes=V)
    lap = _lap(mixed, dom, state, f, props=props, queryVolumes=V)
    fluid = kinds == 0
    qf = ParticleState(x[fluid], H[fluid], V[fluid].clone(), kinds[fluid])
    sf = computeLaplacianCorrection(qf, PROPS, dom, queryVolumes=V[fluid])
    want = _lap(qf, dom, sf, f[fluid].contiguous(), queryVolumes=V[fluid])
    assert float((lap[fluid] - want).abs().max()) <= 1e-10 * float(want.abs().max())
    assert float(lap[~fluid].abs().max()) == 0.0
    # no queries, and no references
    none = ParticleState(x[:0], H[:0], V[:0], kinds[:0])
    s0 = computeLaplacianCorrection(none, PROPS, dom, queryVolumes=V[:0],
                                    referenceParticles=mixed, referenceVolumes=V)
    out = _lap(none, dom, s0, f[:0], referenceValues=f, queryVolumes=V[:0],
               referenceVolumes=V, referenceParticles=mixed)
    assert out.shape == (0,)
    s1 = computeLaplacianCorrection(mixed, PROPS, dom, queryVolumes=V, referenceParticles=none,
                                    referenceVolumes=V[:0])
    lonely = _lap(mixed, dom, s1, f, referenceValues=f[:0], queryVolumes=V,
                  referenceVolumes=V[:0], referenceParticles=none)
    assert lonely.shape == (x.shape[0],) and float(lonely.abs().max()) == 0.0


def test_consistent_scheme_is_sync_free():
    from warpSPHCore.util.hostSyncCensus import Census

    x, H, V, dom, q = _setup(2, True, 8)
    f = x[:, 0].contiguous()
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    tangent = LaplacianCorrectionTangentState(B=torch.ones_like(state.B))
    for _ in range(2):  # compile, then count
        c = Census()
        with c.patched():
            _lap(q, dom, state, f, queryVolumes=V)
            warpOperationJVP(q, PROPS, dom, queryValues=f, queryVolumes=V,
                             queryTangentState=ParticleTangentState(positions=torch.ones_like(x)),
                             laplacianCorrectionState=state,
                             laplacianCorrectionTangentState=tangent)
    assert c.total == 0, c.bySite()


def test_consistent_scheme_call_errors():
    x, H, V, dom, q = _setup(2, True, 6)
    f = x[:, 0].contiguous()
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    with pytest.raises(ValueError, match="needs laplacianCorrectionState"):
        warpOperation(q, PROPS, dom, queryValues=f, queryVolumes=V)
    brook = dataclasses.replace(PROPS, laplacianMode=LaplacianScheme.Brookshaw)
    with pytest.raises(ValueError, match="only Laplacian with laplacianMode=Consistent"):
        _lap(q, dom, state, f, props=brook, queryVolumes=V)
    grad = dataclasses.replace(PROPS, operation=WarpOperation.Gradient)
    with pytest.raises(ValueError, match="Gradient reads no such state"):
        _lap(q, dom, state, f, props=grad, queryVolumes=V)
    for kw, what in ((dict(renormalizationState=state.L), "renormalization"),
                     (dict(gradHState=torch.ones_like(V)), "grad-h"),
                     (dict(crkState=CRKState(torch.ones_like(V), torch.zeros_like(x),
                                             torch.zeros_like(x), state.B)), "CRK")):
        with pytest.raises(ValueError, match=f"carries its own correction.*{what}"):
            _lap(q, dom, state, f, queryVolumes=V, **kw)
    sym = dataclasses.replace(PROPS, gradientMode=GradientScheme.Symmetric)
    with pytest.raises(ValueError, match="gradientMode=Symmetric"):
        _lap(q, dom, state, f, props=sym, queryVolumes=V)
    pos = dataclasses.replace(PROPS, positiveDivergence=True)
    with pytest.raises(ValueError, match="positiveDivergence=True"):
        _lap(q, dom, state, f, props=pos, queryVolumes=V)
    short = dataclasses.replace(state, gamma=state.gamma[:-1])
    with pytest.raises(ValueError, match=r"laplacianCorrectionState.gamma has shape"):
        _lap(q, dom, short, f, queryVolumes=V)
    with pytest.raises(TypeError, match="one dtype"):
        _lap(q, dom, dataclasses.replace(state, B=state.B.float()), f, queryVolumes=V)
    with pytest.raises(ValueError, match="laplacianCorrectionTangentState given without"):
        warpOperationJVP(q, brook, dom, queryValues=f, queryVolumes=V,
                         laplacianCorrectionTangentState=LaplacianCorrectionTangentState(
                             B=state.B))
    # the legacy flat entry point has no slot for the state
    from warpSPHCore.operations import sphOperation_warp

    with pytest.raises(ValueError, match="needs laplacianCorrectionState"):
        sphOperation_warp(x, x, H, H, V, V, None, None, f, f, dom,
                          operation=WarpOperation.Laplacian, laplacianMode=CONSISTENT,
                          queryKinds=q.kinds, referenceKinds=q.kinds, useVolume=True,
                          queryVolumes=V, referenceVolumes=V)
    # nothing was corrupted: the valid call still gives the same numbers
    a = _lap(q, dom, state, f, queryVolumes=V)
    b = _lap(q, dom, state, f, queryVolumes=V)
    assert torch.equal(a, b) and bool(torch.isfinite(a).all())
    assert np.isfinite(float(a.sum()))


def test_consistent_scheme_on_device_matches_cpu(device):
    """On every device of the run (cuda:0 under `make gpu-check`): the builder, the scheme
    (specialised and taped), its reverse mode to the values and the state, and a JVP with a
    state tangent, against the CPU."""
    x, H, V, dom, q = _setup(2, True, 8)
    f = torch.sin(2 * math.pi * x[:, 0]) * torch.cos(2 * math.pi * x[:, 1])

    def run(dev):
        qd = ParticleState(x.to(dev), H.to(dev), V.to(dev), q.kinds.to(dev))
        dd = DomainDescription(dom.min.to(dev), dom.max.to(dev), [True, True])
        Vd, fd = V.to(dev), f.to(dev)
        state = computeLaplacianCorrection(qd, PROPS, dd, queryVolumes=Vd)
        with torch.no_grad():
            fast = _lap(qd, dd, state, fd, queryVolumes=Vd)
        B = state.B.clone().requires_grad_(True)
        ff = fd.clone().requires_grad_(True)
        out = _lap(qd, dd, dataclasses.replace(state, B=B), ff, queryVolumes=Vd)
        gB, gf = torch.autograd.grad((out * out).sum(), (B, ff))
        jvp = warpOperationJVP(qd, PROPS, dd, queryValues=fd, queryVolumes=Vd,
                               queryTangentState=ParticleTangentState(
                                   positions=torch.ones_like(qd.positions)),
                               laplacianCorrectionState=state,
                               laplacianCorrectionTangentState=LaplacianCorrectionTangentState(
                                   gamma=torch.ones_like(state.gamma)))
        return [t.detach().cpu() for t in (state.B, state.gamma, fast, out, gB, gf, jvp)]

    for a, b in zip(run(device), run("cpu")):
        assert float((a - b).abs().max()) <= 1e-10 * max(1.0, float(b.abs().max()))
