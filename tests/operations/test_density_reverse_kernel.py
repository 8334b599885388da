"""The Density's hand-written reverse kernel (`density.densityVJPKernel`, its specialised
copy in `operators._specialized`, `autograd.reverse`) against Warp's generated adjoint (the
tape path, forced with ``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``) and against finite
differences.

* Route: eligible calls take the reverse kernel (``grad_fn.reverse_route``); a
  differentiable domain, volumes that require grad and the gate keep the tape.
* Equivalence, float64, every gradient of the call (query and reference positions,
  supports and masses): four kernels and the six support schemes (every kernel but the
  Viscosity kernel, whose W(0) is infinite, x every support scheme x {CSR, grid} under
  ``-m slow``); distinct and cloned reference sets; operation modes with mixed kinds;
  lattice calibration; periodic seams; 1D and 3D; coincident points (mostly one kernel and
  the grid traversal, so that the tests share their compiled modules); with the specialised
  kernels and without them (the generic reverse kernel).
* gradcheck through the reverse kernel (aliased and distinct sets, operation modes).
* float32 agrees with the tape path to float32 rounding.
"""

from __future__ import annotations

import pytest
import torch
from reverse_helpers import compareWithTape
from sph_reference import (
    GRADCHECK,
    cloud,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    reverseRoute,
)

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.autograd.specialize import setSpecialization
from warpSPHCore.operations import warpOperation

F64 = torch.float64
DENSITY = WarpOperation.Density
GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"
ROUTE = "densityVJPKernel"


def _seed(n, device, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=F64).to(device=device, dtype=dtype)


def _run(monkeypatch, tape, q, r, dom, pr, traversal, seed=0, extra=None):
    """Forward + backward of one Density call with every float input of the particle
    states a leaf; returns (route, output, gradients)."""
    monkeypatch.setenv(GATE, "1" if tape else "0")
    qLeaves = leaves(q.positions, q.supports, q.masses)
    grads = list(qLeaves)
    kw = dict(extra or {})
    if r is not None:
        rLeaves = leaves(r.positions, r.supports, r.masses)
        kw["referenceParticles"] = ParticleState(*rLeaves, r.kinds)
        grads += rLeaves
    adj = neighbourStructure(traversal, q, dom, r)
    out = warpOperation(ParticleState(*qLeaves, q.kinds), pr, dom, adjacency=adj, **kw)
    out.backward(_seed(out.numel(), out.device, out.dtype, seed + 7))
    return reverseRoute(out), out.detach(), [g.grad for g in grads]


def _assertSame(monkeypatch, *args, specialise=True, **kw):
    previous = setSpecialization(specialise)
    try:
        kernel = _run(monkeypatch, False, *args, **kw)
        tape = _run(monkeypatch, True, *args, **kw)
    finally:
        setSpecialization(previous)
    return compareWithTape(ROUTE, kernel, tape)


def _cloud2D(device, n=28, seed=3, **kw):
    dom = makeDomain(2, F64, device)
    return marginCloud(n, 2, F64, device, seed, domain=dom, **kw), dom


# the Viscosity kernel's W is infinite at r = 0: a Density with it has no gradient to compare
KERNELS = [k for k in KernelFunctions if k != KernelFunctions.ViscosityKernel]
QUICK_KERNELS = [KernelFunctions.CubicSpline, KernelFunctions.Gaussian]
# one kernel and traversal for most tests, so that they share the specialised modules a cold
# run compiles (about a second each on two cores)
BASE = dict(kernel=KernelFunctions.Wendland4)
TRAVERSAL = "grid"


def _kernelsAndSupports(device, monkeypatch, kernel, support, traversal):
    q, dom = _cloud2D(device)
    g = _assertSame(monkeypatch, q, None, dom, props(DENSITY, kernel, supportMode=support),
                    traversal)
    assert all(float(t.abs().max()) > 0 for t in g)  # positions, supports, masses


@pytest.mark.parametrize("kernel", QUICK_KERNELS, ids=lambda k: k.name)
def test_reverse_kernel_matches_tape_kernels(device, monkeypatch, kernel):
    _kernelsAndSupports(device, monkeypatch, kernel, SupportScheme.Gather, TRAVERSAL)


@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_supports(device, monkeypatch, support):
    _kernelsAndSupports(device, monkeypatch, BASE["kernel"], support, TRAVERSAL)


@pytest.mark.slow
@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_reverse_kernel_matches_tape_every_kernel_and_support(device, monkeypatch, kernel,
                                                              support, traversal):
    _kernelsAndSupports(device, monkeypatch, kernel, support, traversal)


@pytest.mark.parametrize("support", [SupportScheme.Gather, SupportScheme.SuperSymmetric],
                         ids=lambda s: s.name)
def test_generic_reverse_kernel_matches_tape(device, monkeypatch, support):
    """With the specialised kernels off, the generic reverse kernel."""
    q, dom = _cloud2D(device, n=20)
    _assertSame(monkeypatch, q, None, dom, props(DENSITY, supportMode=support, **BASE),
                TRAVERSAL, specialise=False)


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("support", [SupportScheme.Scatter, SupportScheme.SuperSymmetric],
                         ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_distinct(device, monkeypatch, cloned, support):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(14, 19, 2, F64, device, 11, dom, cloned=cloned)
    _assertSame(monkeypatch, q, r, dom, props(DENSITY, supportMode=support, **BASE), TRAVERSAL)


@pytest.mark.parametrize("mode", [2, 13])
def test_reverse_kernel_matches_tape_operation_modes(device, monkeypatch, mode):
    dom = makeDomain(2, F64, device)
    kinds = [k % 3 for k in range(30)]
    q = marginCloud(30, 2, F64, device, 5, domain=dom, kinds=kinds)
    _assertSame(monkeypatch, q, None, dom, props(DENSITY, operationMode=mode,
                                                 supportMode=SupportScheme.PartialSymmetric,
                                                 **BASE), TRAVERSAL)


def test_reverse_kernel_matches_tape_calibrated_periodic(device, monkeypatch):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(30, 2, F64, device, 7, domain=dom)
    pr = props(DENSITY, n_h=2.0, calibrateNormalization=True, supportMode=SupportScheme.Scatter,
               **BASE)
    _assertSame(monkeypatch, q, None, dom, pr, TRAVERSAL)


@pytest.mark.parametrize("dim, traversal", [(1, "grid"), (3, "csr")])
def test_reverse_kernel_matches_tape_dimensions(device, monkeypatch, dim, traversal):
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud({1: 12, 3: 24}[dim], dim, F64, device, 2, domain=dom)
    _assertSame(monkeypatch, q, None, dom,
                props(DENSITY, supportMode=SupportScheme.KernelMeanSymmetric, **BASE), traversal)


def test_reverse_kernel_matches_tape_coincident(device, monkeypatch):
    """r = 0 pairs (duplicated points, one with a larger support): grad W(0) = 0, dW/dh(0)
    finite."""
    dom = makeDomain(2, F64, device)
    base = cloud(8, 2, F64, device, 4)
    q = ParticleState(torch.cat([base.positions, base.positions[:3]]),
                      torch.cat([base.supports, base.supports[:3] * 1.1]),
                      torch.cat([base.masses, base.masses[:3]]),
                      torch.zeros(11, dtype=torch.int32, device=device))
    for support in (SupportScheme.Gather, SupportScheme.KernelMeanSymmetric):
        g = _assertSame(monkeypatch, q, None, dom, props(DENSITY, supportMode=support, **BASE),
                        TRAVERSAL)
        assert all(torch.isfinite(t).all() for t in g)


def test_reverse_route_selection(device, monkeypatch):
    q, dom = _cloud2D(device, n=12)
    pr = props(DENSITY, **BASE)
    assert _run(monkeypatch, False, q, None, dom, pr, TRAVERSAL)[0] == ROUTE
    assert _run(monkeypatch, True, q, None, dom, pr, TRAVERSAL)[0] is None
    # volumes that require grad: the reverse kernel does not write them (the Density never
    # reads them, so the tape's gradient is zero)
    vol = torch.full((12,), 0.1, dtype=F64, device=device, requires_grad=True)
    route, _, _ = _run(monkeypatch, False, q, None, dom, pr, TRAVERSAL,
                       extra=dict(referenceVolumes=vol))
    assert route is None
    # a differentiable domain bound
    monkeypatch.setenv(GATE, "0")
    lo = dom.min.clone().requires_grad_()
    out = warpOperation(q, pr, type(dom)(lo, dom.max, dom.periodic),
                        adjacency=neighbourStructure(TRAVERSAL, q, dom))
    assert reverseRoute(out) is None


def test_reverse_kernel_float32(device, monkeypatch):
    dom = makeDomain(2, torch.float32, device)
    q = cloud(40, 2, torch.float32, device, 9)
    pr = props(DENSITY, supportMode=SupportScheme.MeanSymmetric, **BASE)
    rk, _, gk = _run(monkeypatch, False, q, None, dom, pr, TRAVERSAL)
    rt, _, gt = _run(monkeypatch, True, q, None, dom, pr, TRAVERSAL)
    assert rk == ROUTE and rt is None
    for a, b in zip(gk, gt):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


# --- gradcheck through the reverse kernel ----------------------------------------------------


@pytest.mark.parametrize("support", [SupportScheme.Gather, SupportScheme.MeanSymmetric,
                                     SupportScheme.SuperSymmetric], ids=lambda s: s.name)
def test_reverse_kernel_gradcheck(device, monkeypatch, support):
    monkeypatch.setenv(GATE, "0")
    q, dom = _cloud2D(device, n=10)
    adj = neighbourStructure(TRAVERSAL, q, dom)
    pr = props(DENSITY, supportMode=support, **BASE)
    inputs = leaves(q.positions, q.supports, q.masses)

    def fn(pos, h, m):
        return warpOperation(ParticleState(pos, h, m, q.kinds), pr, dom, adjacency=adj)

    assert reverseRoute(fn(*inputs)) == ROUTE
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("mode", [2, 13])
def test_reverse_kernel_gradcheck_distinct_modes(device, monkeypatch, mode):
    monkeypatch.setenv(GATE, "0")
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 9, 2, F64, device, 21, dom, kinds=None)
    qk = torch.tensor([k % 3 for k in range(8)], dtype=torch.int32, device=device)
    rk = torch.tensor([k % 3 for k in range(9)], dtype=torch.int32, device=device)
    adj = neighbourStructure(TRAVERSAL, q, dom, r)
    pr = props(DENSITY, operationMode=mode, supportMode=SupportScheme.PartialSymmetric, **BASE)
    inputs = leaves(q.positions, q.supports, r.positions, r.supports, r.masses)

    def fn(qp, qh, rp, rh, rm):
        return warpOperation(ParticleState(qp, qh, q.masses, qk), pr, dom, adjacency=adj,
                             referenceParticles=ParticleState(rp, rh, rm, rk))

    assert reverseRoute(fn(*inputs)) == ROUTE
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
