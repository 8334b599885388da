"""The Gradient's hand-written reverse kernel (`gradient.gradientVJPKernel`,
`autograd.reverse`) against Warp's generated adjoint (the tape path, forced with
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``) and against finite differences.

* Route: eligible calls take the reverse kernel (``grad_fn.reverse_route``); CRK,
  renormalization, grad-h, a differentiable domain and the gate keep the tape.
* Equivalence, float64, every gradient of the call (positions, supports, masses, densities,
  values, reference volumes): 4 gradient schemes x 6 support schemes x {CSR, grid}; distinct
  and cloned reference sets; volumes; the 15 operation modes with mixed kinds; lattice
  calibration; periodic seams; 1D and 3D with vector and matrix fields; coincident points.
* gradcheck through the reverse kernel where the existing Gradient matrix used the tape
  (volumes without grad-h, distinct sets with volumes, operation modes).
* A retained graph gives the same gradients on a second backward (tape.zero()), and a
  float32 call agrees with the tape path to float32 rounding.
"""

from __future__ import annotations

import pytest
import torch
from reverse_helpers import GATE, assertSameAsTape, cloud2D, field, runCall
from sph_reference import (
    GRADCHECK,
    cloud,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
    reverseRoute,
)

from warpSPHCore import (
    CRKState,
    GradHState,
    GradientScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
GRAD = WarpOperation.Gradient


_run = runCall
_field = field
_cloud2D = cloud2D


def _assertSame(monkeypatch, *args, **kw):
    return assertSameAsTape(monkeypatch, "gradientVJPKernel", *args, **kw)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_schemes(device, monkeypatch, scheme, support, traversal):
    q, dom = _cloud2D(device)
    pr = props(GRAD, gradientMode=scheme, supportMode=support)
    g = _assertSame(monkeypatch, q, None, dom, pr, traversal)
    assert all(float(t.abs().max()) > 0 for t in g[:1] + g[4:])  # positions, values


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("volumes", [False, True], ids=["masses", "volumes"])
def test_reverse_kernel_matches_tape_distinct(device, monkeypatch, scheme, cloned, volumes):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(14, 19, 2, F64, device, 11, dom, cloned=cloned)
    pr = props(GRAD, gradientMode=scheme, supportMode=SupportScheme.SuperSymmetric)
    g = _assertSame(monkeypatch, q, r, dom, pr, "csr", shape=(2,), volumes=volumes)
    if volumes and scheme != GradientScheme.Symmetric:  # Symmetric reads masses, not V_j
        assert float(g[-1].abs().max()) > 0


@pytest.mark.parametrize("mode", range(15))
def test_reverse_kernel_matches_tape_operation_modes(device, monkeypatch, mode):
    dom = makeDomain(2, F64, device)
    kinds = [k % 3 for k in range(30)]
    q = marginCloud(30, 2, F64, device, 5, domain=dom, kinds=kinds)
    pr = props(GRAD, gradientMode=GradientScheme.Difference, operationMode=mode)
    _assertSame(monkeypatch, q, None, dom, pr, "csr")


def test_reverse_kernel_matches_tape_calibrated_periodic(device, monkeypatch):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(30, 2, F64, device, 7, domain=dom)
    pr = props(GRAD, gradientMode=GradientScheme.Summation, n_h=2.0, calibrateNormalization=True,
               supportMode=SupportScheme.Scatter)
    _assertSame(monkeypatch, q, None, dom, pr, "grid", shape=(2, 2))


@pytest.mark.parametrize("dim, traversal, shape", [(1, "csr", ()), (1, "grid", (2,)),
                                                   (3, "csr", (3,)), (3, "grid", ())])
def test_reverse_kernel_matches_tape_dimensions(device, monkeypatch, dim, traversal, shape):
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud({1: 12, 3: 24}[dim], dim, F64, device, 2, domain=dom)
    pr = props(GRAD, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.KernelMeanSymmetric)
    _assertSame(monkeypatch, q, None, dom, pr, traversal, shape=shape)


def test_reverse_kernel_matches_tape_coincident(device, monkeypatch):
    """r = 0 pairs: H(0) u from the q < eps rule (finite), d(grad W)/dh(0) = 0."""
    dom = makeDomain(2, F64, device)
    base = cloud(8, 2, F64, device, 4)
    pos = torch.cat([base.positions, base.positions[:3]])
    q = ParticleState(pos, torch.cat([base.supports, base.supports[:3] * 1.1]),
                      torch.cat([base.masses, base.masses[:3]]),
                      torch.zeros(11, dtype=torch.int32, device=device),
                      torch.cat([base.densities, base.densities[:3]]))
    for scheme in GradientScheme:
        g = _assertSame(monkeypatch, q, None, dom, props(GRAD, gradientMode=scheme), "csr")
        assert all(torch.isfinite(t).all() for t in g)


def test_reverse_route_selection(device, monkeypatch):
    q, dom = _cloud2D(device, n=12)
    n = q.positions.shape[0]
    pr = props(GRAD)
    c = randomCorrectionTensors(n, n, 2, device, seed=3)
    vol, om, A, B, gA, gB, L = c
    assert _run(monkeypatch, False, q, None, dom, pr, "csr")[0] == "gradientVJPKernel"
    assert _run(monkeypatch, False, q, None, dom, pr, "csr",
                extra=dict(crkState=CRKState(A, B, gA, gB)))[0] is None
    assert _run(monkeypatch, False, q, None, dom, pr, "csr",
                extra=dict(renormalizationState=L))[0] is None
    assert _run(monkeypatch, False, q, None, dom, pr, "csr",
                extra=dict(gradHState=GradHState(om)))[0] is None
    assert _run(monkeypatch, True, q, None, dom, pr, "csr")[0] is None
    # a differentiable domain bound: the reverse kernel does not write it
    monkeypatch.setenv(GATE, "0")
    lo = dom.min.clone().requires_grad_()
    dom2 = type(dom)(lo, dom.max, dom.periodic)
    out = warpOperation(q, pr, dom2, queryValues=_field(n, (), device, 1),
                        adjacency=neighbourStructure("csr", q, dom))
    assert reverseRoute(out) is None


def test_reverse_kernel_retained_graph(device, monkeypatch):
    monkeypatch.setenv(GATE, "0")
    q, dom = _cloud2D(device, n=20)
    pos = q.positions.detach().clone().requires_grad_()
    f = _field(20, (), device, 1).requires_grad_()
    out = warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds, q.densities),
                        props(GRAD), dom, queryValues=f,
                        adjacency=neighbourStructure("csr", q, dom))
    seed = _field(20, (2,), device, 2)
    first = torch.autograd.grad(out, (pos, f), seed, retain_graph=True)
    second = torch.autograd.grad(out, (pos, f), seed)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_reverse_kernel_float32(device, monkeypatch):
    dom = makeDomain(2, torch.float32, device)
    q = cloud(40, 2, torch.float32, device, 9)
    pr = props(GRAD, gradientMode=GradientScheme.Naive)
    rk, _, gk = _run(monkeypatch, False, q, None, dom, pr, "csr")
    rt, _, gt = _run(monkeypatch, True, q, None, dom, pr, "csr")
    assert rk == "gradientVJPKernel" and rt is None
    for a, b in zip(gk, gt):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


# --- gradcheck through the reverse kernel ----------------------------------------------------


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_gradcheck_volumes(device, monkeypatch, scheme):
    monkeypatch.setenv(GATE, "0")
    q, dom = _cloud2D(device, n=10)
    n = q.positions.shape[0]
    adj = neighbourStructure("csr", q, dom)
    vol = randomCorrectionTensors(n, n, 2, device, seed=3)[0]
    pr = props(GRAD, gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities, _field(n, (), device, 1),
                    vol)

    def fn(pos, h, m, rho, f, v):
        return warpOperation(ParticleState(pos, h, m, q.kinds, rho), pr, dom, queryValues=f,
                             referenceVolumes=v, adjacency=adj)

    assert reverseRoute(fn(*inputs)) == "gradientVJPKernel"
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("mode", [2, 10, 13])
def test_reverse_kernel_gradcheck_distinct_modes(device, monkeypatch, mode):
    monkeypatch.setenv(GATE, "0")
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 9, 2, F64, device, 21, dom, kinds=None)
    q = ParticleState(q.positions, q.supports, q.masses,
                      torch.tensor([k % 3 for k in range(8)], dtype=torch.int32, device=device),
                      q.densities)
    r = ParticleState(r.positions, r.supports, r.masses,
                      torch.tensor([k % 3 for k in range(9)], dtype=torch.int32, device=device),
                      r.densities)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(GRAD, gradientMode=GradientScheme.Symmetric, operationMode=mode,
               supportMode=SupportScheme.PartialSymmetric)
    inputs = leaves(q.positions, q.supports, q.densities, _field(8, (2,), device, 1),
                    r.positions, r.supports, r.masses, r.densities, _field(9, (2,), device, 2))

    def fn(qp, qh, qrho, fq, rp, rh, rm, rrho, fr):
        return warpOperation(ParticleState(qp, qh, q.masses, q.kinds, qrho), pr, dom,
                             queryValues=fq, referenceValues=fr, adjacency=adj,
                             referenceParticles=ParticleState(rp, rh, rm, r.kinds, rrho))

    assert reverseRoute(fn(*inputs)) == "gradientVJPKernel"
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


# --- a backward asked for no position or support adjoint ------------------------------------


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_without_geometry_adjoints(device, monkeypatch, scheme, traversal,
                                                  specialized):
    """Positions and supports without grad: the reverse kernel specialised without the
    Hessian terms (`Configuration.geometryAdjoint` False) gives the values', masses' and
    densities' gradients of the full reverse kernel and of the tape; the values alone take
    the kernel with the scheme fixed (`Configuration.valuesOnly`), with the same gradient;
    gradcheck holds."""
    from warpSPHCore.autograd import reverse as reverseModule
    from warpSPHCore.operators import _specialized

    q, dom = _cloud2D(device, n=16)
    n = q.positions.shape[0]
    adj = neighbourStructure(traversal, q, dom)
    pr = props(GRAD, gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric)
    x, h = q.positions.detach(), q.supports.detach()
    seed = _field(n, (2,), device, 7)

    def grads(positionsGrad, gate):
        monkeypatch.setenv(GATE, gate)
        pos = x.clone().requires_grad_(positionsGrad)
        m, rho, f = leaves(q.masses, q.densities, _field(n, (), device, 1))
        out = warpOperation(ParticleState(pos, h, m, q.kinds, rho), pr, dom, queryValues=f,
                            adjacency=adj)
        out.backward(seed)
        return reverseRoute(out), [m.grad, rho.grad, f.grad]

    asked = []
    original = reverseModule.geometryAdjointAsked
    monkeypatch.setattr(reverseModule, "geometryAdjointAsked",
                        lambda args: asked.append(original(args)) or asked[-1])
    route, without = grads(False, "0")
    assert route == "gradientVJPKernel" and asked == [False]
    assert any(name == "gradientVJP" and not cfg.geometryAdjoint
               for name, cfg in _specialized._BUILT)
    _, full = grads(True, "0")
    assert asked[-1] is True
    _, taped = grads(False, "1")
    for a, b, c in zip(without, full, taped):
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * scale)
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12 * scale)
    assert float(without[2].abs().max()) > 0
    # the values alone: the kernel with the scheme fixed and no run-time state tests
    def valuesGrad(gate):
        monkeypatch.setenv(GATE, gate)
        f = leaves(_field(n, (), device, 1))[0]
        out = warpOperation(ParticleState(x, h, q.masses, q.kinds, q.densities), pr, dom,
                            queryValues=f, adjacency=adj)
        out.backward(seed)
        return f.grad

    alone, alonetaped = valuesGrad("0"), valuesGrad("1")
    assert any(name == "gradientVJP" and cfg.valuesOnly and cfg.gradientScheme == int(scheme)
               for name, cfg in _specialized._BUILT)
    scale = max(1.0, float(full[2].abs().max()))
    torch.testing.assert_close(alone, full[2], rtol=1e-12, atol=1e-12 * scale)
    torch.testing.assert_close(alone, alonetaped, rtol=1e-12, atol=1e-12 * scale)

    monkeypatch.setenv(GATE, "0")
    inputs = leaves(q.masses, q.densities, _field(n, (), device, 1))

    def fn(m, rho, f):
        return warpOperation(ParticleState(x, h, m, q.kinds, rho), pr, dom, queryValues=f,
                             adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
