"""The Interpolate's hand-written reverse kernel (`interpolate.interpolateVJPKernel`,
`autograd.reverse`) against Warp's generated adjoint (the tape path, forced with
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``) and gradcheck.

* Route: eligible calls take the reverse kernel; CRK and a differentiable domain keep the
  tape.
* Equivalence, float64, every gradient of the call (positions, supports, masses, densities,
  values, reference volumes): 6 support schemes x {CSR, grid}; distinct and cloned reference
  sets with volumes; interaction modes with mixed kinds; lattice calibration on a periodic
  box; 1D and 3D with vector fields; coincident points; the specialised kernel against the
  generic one.
* gradcheck through the reverse kernel (volumes; distinct sets).
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
    randomCorrectionTensors,
    reverseRoute,
)

from warpSPHCore import CRKState, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64
INTERP = WarpOperation.Interpolate
GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"
ROUTE = "interpolateVJPKernel"


def _field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device)


def _run(monkeypatch, tape, q, r, dom, pr, traversal, shape=(), volumes=False, seed=0,
         extra=None):
    """Forward + backward of one Interpolate call with every float input a leaf; returns
    (route, output, gradients)."""
    monkeypatch.setenv(GATE, "1" if tape else "0")
    dev = q.positions.device
    dt = q.positions.dtype
    qp, qh, qm, qrho = leaves(q.positions, q.supports, q.masses, q.densities)
    grads = [qp, qh, qm, qrho]
    kw = {}
    if r is None:
        nr = q.positions.shape[0]
        fr = leaves(_field(nr, shape, dev, seed + 1).to(dt))[0]
        kw["queryValues"] = fr
    else:
        nr = r.positions.shape[0]
        rLeaves = leaves(r.positions, r.supports, r.masses, r.densities)
        fr = leaves(_field(nr, shape, dev, seed + 2).to(dt))[0]
        kw.update(referenceParticles=ParticleState(*rLeaves[:3], r.kinds, rLeaves[3]),
                  referenceValues=fr)
        grads += rLeaves
    grads.append(fr)
    if volumes:
        vol = leaves(0.05 + 0.1 * torch.rand(nr, generator=torch.Generator().manual_seed(seed),
                                             dtype=F64).to(dev))[0]
        kw["referenceVolumes"] = vol
        grads.append(vol)
    if extra:
        kw.update(extra)
    adj = neighbourStructure(traversal, q, dom, r)
    out = warpOperation(ParticleState(qp, qh, qm, q.kinds, qrho), pr, dom, adjacency=adj,
                        **kw)
    seedT = _field(q.positions.shape[0], out.shape[1:], dev, seed + 7).to(dt)
    out.backward(seedT)
    return reverseRoute(out), out.detach(), [g.grad for g in grads]


def _assertSame(monkeypatch, *args, **kw):
    return compareWithTape(ROUTE, _run(monkeypatch, False, *args, **kw),
                           _run(monkeypatch, True, *args, **kw))


def _cloud2D(device, n=28, seed=3, **kw):
    dom = makeDomain(2, F64, device)
    return marginCloud(n, 2, F64, device, seed, domain=dom, **kw), dom


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_supports(device, monkeypatch, support, traversal):
    q, dom = _cloud2D(device)
    g = _assertSame(monkeypatch, q, None, dom, props(INTERP, supportMode=support), traversal)
    # positions, supports, masses, densities (the query set is the reference set) and values
    for k in (0, 1, 2, 3, 4):
        assert float(g[k].abs().max()) > 0, k


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("volumes", [False, True], ids=["masses", "volumes"])
def test_reverse_kernel_matches_tape_distinct(device, monkeypatch, cloned, volumes):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(14, 19, 2, F64, device, 11, dom, cloned=cloned)
    pr = props(INTERP, supportMode=SupportScheme.SuperSymmetric)
    g = _assertSame(monkeypatch, q, r, dom, pr, "csr", shape=(2,), volumes=volumes)
    assert float(g[2].abs().max()) == 0  # the query masses are never read
    if volumes:
        assert float(g[-1].abs().max()) > 0


@pytest.mark.parametrize("mode", [0, 2, 5, 9, 13])
def test_reverse_kernel_matches_tape_operation_modes(device, monkeypatch, mode):
    dom = makeDomain(2, F64, device)
    q = marginCloud(30, 2, F64, device, 5, domain=dom, kinds=[k % 3 for k in range(30)])
    _assertSame(monkeypatch, q, None, dom, props(INTERP, operationMode=mode), "csr")


def test_reverse_kernel_matches_tape_calibrated_periodic(device, monkeypatch):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(30, 2, F64, device, 7, domain=dom)
    pr = props(INTERP, n_h=2.0, calibrateNormalization=True, supportMode=SupportScheme.Scatter)
    _assertSame(monkeypatch, q, None, dom, pr, "grid", shape=(2, 2))


@pytest.mark.parametrize("dim, traversal, shape", [(1, "csr", ()), (1, "grid", (2,)),
                                                   (3, "csr", (3,)), (3, "grid", ())])
def test_reverse_kernel_matches_tape_dimensions(device, monkeypatch, dim, traversal, shape):
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud({1: 12, 3: 24}[dim], dim, F64, device, 2, domain=dom)
    pr = props(INTERP, supportMode=SupportScheme.KernelMeanSymmetric)
    _assertSame(monkeypatch, q, None, dom, pr, traversal, shape=shape)


def test_reverse_kernel_matches_tape_coincident(device, monkeypatch):
    """r = 0 pairs: grad W(0) = 0, dW/dh finite."""
    dom = makeDomain(2, F64, device)
    base = cloud(8, 2, F64, device, 4)
    pos = torch.cat([base.positions, base.positions[:3]])
    q = ParticleState(pos, torch.cat([base.supports, base.supports[:3] * 1.1]),
                      torch.cat([base.masses, base.masses[:3]]),
                      torch.zeros(11, dtype=torch.int32, device=device),
                      torch.cat([base.densities, base.densities[:3]]))
    g = _assertSame(monkeypatch, q, None, dom, props(INTERP), "csr")
    assert all(torch.isfinite(t).all() for t in g)


def test_reverse_route_selection(device, monkeypatch):
    q, dom = _cloud2D(device, n=12)
    n = q.positions.shape[0]
    vol, om, A, B, gA, gB, L = randomCorrectionTensors(n, n, 2, device, seed=3)
    pr = props(INTERP)
    assert _run(monkeypatch, False, q, None, dom, pr, "csr")[0] == ROUTE
    assert _run(monkeypatch, False, q, None, dom, pr, "csr",
                extra=dict(crkState=CRKState(A, B, gA, gB)))[0] is None
    assert _run(monkeypatch, True, q, None, dom, pr, "csr")[0] is None
    monkeypatch.setenv(GATE, "0")
    lo = dom.min.clone().requires_grad_()
    out = warpOperation(q, pr, type(dom)(lo, dom.max, dom.periodic),
                        queryValues=_field(n, (), device, 1),
                        adjacency=neighbourStructure("csr", q, dom))
    assert reverseRoute(out) is None


def test_specialised_reverse_kernel_matches_generic(device, monkeypatch, specialized):
    """The reverse kernel specialised on the configuration against the generic one (both
    through `autograd.reverse`), every gradient, float64, both traversals."""
    from warpSPHCore.autograd.specialize import setSpecialization
    from warpSPHCore.operators import _specialized

    dom = makeDomain(2, F64, device, periodic=True)
    q, r = marginPair(14, 19, 2, F64, device, 13, dom)
    for traversal in ("csr", "grid"):
        pr = props(INTERP, supportMode=SupportScheme.MeanSymmetric)
        routeS, outS, gS = _run(monkeypatch, False, q, r, dom, pr, traversal, shape=(2,),
                                volumes=True)
        previous = setSpecialization(False)
        try:
            routeG, outG, gG = _run(monkeypatch, False, q, r, dom, pr, traversal, shape=(2,),
                                    volumes=True)
        finally:
            setSpecialization(previous)
        assert routeS == routeG == ROUTE
        for a, b in zip(gS, gG):
            if b is None:
                continue
            scale = max(1.0, float(b.abs().max()))
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * scale)
    assert any(name == "interpolateVJP" for name, _ in _specialized._BUILT)


def test_reverse_kernel_gradcheck(device, monkeypatch):
    monkeypatch.setenv(GATE, "0")
    q, dom = _cloud2D(device, n=10)
    n = q.positions.shape[0]
    adj = neighbourStructure("csr", q, dom)
    vol = randomCorrectionTensors(n, n, 2, device, seed=3)[0]
    pr = props(INTERP, supportMode=SupportScheme.MeanSymmetric)
    inputs = leaves(q.positions, q.supports, _field(n, (2,), device, 1), vol)

    def fn(pos, h, f, v):
        return warpOperation(ParticleState(pos, h, q.masses, q.kinds, q.densities), pr, dom,
                             queryValues=f, referenceVolumes=v, adjacency=adj)

    assert reverseRoute(fn(*inputs)) == ROUTE
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)

    dom2 = makeDomain(2, F64, device)
    q2, r2 = marginPair(8, 9, 2, F64, device, 21, dom2)
    adj2 = neighbourStructure("csr", q2, dom2, r2)
    inputs2 = leaves(q2.positions, r2.positions, r2.masses, r2.densities, _field(9, (), device, 2))

    def fn2(xq, xr, m, rho, f):
        return warpOperation(q2.__class__(xq, q2.supports, q2.masses, q2.kinds, q2.densities),
                             pr, dom2, referenceParticles=ParticleState(xr, r2.supports, m,
                                                                        r2.kinds, rho),
                             referenceValues=f, adjacency=adj2)

    assert reverseRoute(fn2(*inputs2)) == ROUTE
    assert torch.autograd.gradcheck(fn2, inputs2, **GRADCHECK)
