"""The Laplacian's hand-written reverse kernel (`laplacian.laplacianVJPKernel`, Brookshaw and
Default,
`autograd.reverse`) against Warp's generated adjoint (the tape path, forced with
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``) and by gradcheck.

* Route: eligible calls take the reverse kernel (``grad_fn.reverse_route``); the Naive, Dot
  and Consistent schemes, positiveDivergence, CRK, renormalization, grad-h and the gate keep
  the tape.
* Equivalence, float64, every gradient of the call (positions, supports, masses, densities,
  values, reference volumes): both schemes x 4 gradient schemes (the pair difference's
  scale) x 6 support schemes x {CSR, grid}; distinct and cloned reference sets with volumes;
  the 15 operation modes with mixed kinds; lattice calibration on periodic seams; vector and
  matrix fields; 1D and 3D; coincident points (skipped by the r > 0 guard); float32 to
  float32 rounding.
* The specialised reverse kernel (specialisation on) against the generic one.
"""

from __future__ import annotations

import pytest
import torch
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
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
LAP = WarpOperation.Laplacian
GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"
ROUTE = "laplacianVJPKernel"
SCHEMES = [LaplacianScheme.Brookshaw, LaplacianScheme.Default]


def _field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device)


def _run(monkeypatch, tape, q, r, dom, pr, traversal, shape=None, volumes=False, seed=0,
         extra=None):
    """Forward + backward of one Laplacian call with every float input a leaf; returns
    (route, output, gradients). `shape`: the field's trailing shape (default (d,))."""
    monkeypatch.setenv(GATE, "1" if tape else "0")
    dev = q.positions.device
    d = q.positions.shape[1]
    shape = (d,) if shape is None else shape
    nq = q.positions.shape[0]
    qLeaves = leaves(q.positions, q.supports, q.masses, q.densities)
    qp, qh, qm, qrho = qLeaves
    dt = q.positions.dtype
    fq = leaves(_field(nq, shape, dev, seed + 1).to(dt))[0]
    query = ParticleState(qp, qh, qm, q.kinds, qrho)
    grads = qLeaves + [fq]
    kw = dict(queryValues=fq)
    if r is not None:
        nr = r.positions.shape[0]
        rLeaves = leaves(r.positions, r.supports, r.masses, r.densities)
        fr = leaves(_field(nr, shape, dev, seed + 2).to(dt))[0]
        kw.update(referenceParticles=ParticleState(*rLeaves[:3], r.kinds, rLeaves[3]),
                  referenceValues=fr)
        grads += rLeaves + [fr]
    nr = q.positions.shape[0] if r is None else r.positions.shape[0]
    if volumes:
        vol = leaves(0.05 + 0.1 * torch.rand(nr, generator=torch.Generator().manual_seed(seed),
                                             dtype=F64).to(dev).to(dt))[0]
        kw["referenceVolumes"] = vol
        grads.append(vol)
    if extra:
        kw.update(extra)
    adj = neighbourStructure(traversal, q, dom, r)
    out = warpOperation(query, pr, dom, adjacency=adj, **kw)
    seedT = _field(nq, out.shape[1:], dev, seed + 7).to(dt)
    out.backward(seedT)
    return reverseRoute(out), out.detach(), [g.grad for g in grads]


def _assertSame(monkeypatch, *args, **kw):
    routeK, outK, gK = _run(monkeypatch, False, *args, **kw)
    routeT, outT, gT = _run(monkeypatch, True, *args, **kw)
    assert routeK == ROUTE
    assert routeT is None
    torch.testing.assert_close(outK, outT, rtol=1e-12,
                               atol=1e-12 * max(1.0, float(outT.abs().max())))
    for k, (a, b) in enumerate(zip(gK, gT)):
        assert (a is None) == (b is None), k
        if a is None:
            continue
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * scale, msg=f"leaf {k}")
    return gK


def _cloud2D(device, n=28, seed=3, **kw):
    dom = makeDomain(2, F64, device)
    return marginCloud(n, 2, F64, device, seed, domain=dom, **kw), dom


@pytest.mark.parametrize("laplacian", SCHEMES, ids=lambda s: s.name)
@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_schemes(device, monkeypatch, scheme, support, traversal,
                                             laplacian):
    q, dom = _cloud2D(device)
    pr = props(LAP, gradientMode=scheme, supportMode=support, laplacianMode=laplacian)
    g = _assertSame(monkeypatch, q, None, dom, pr, traversal)
    assert all(float(t.abs().max()) > 0 for t in g[:2] + g[4:])  # positions, supports, values


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("volumes", [False, True], ids=["masses", "volumes"])
def test_reverse_kernel_matches_tape_distinct(device, monkeypatch, scheme, cloned, volumes):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(14, 19, 2, F64, device, 11, dom, cloned=cloned)
    pr = props(LAP, gradientMode=scheme, supportMode=SupportScheme.SuperSymmetric,
               laplacianMode=LaplacianScheme.Default)
    g = _assertSame(monkeypatch, q, r, dom, pr, "csr", volumes=volumes)
    if volumes and scheme != GradientScheme.Symmetric:  # Symmetric reads masses, not V_j
        assert float(g[-1].abs().max()) > 0


@pytest.mark.parametrize("mode", range(15))
def test_reverse_kernel_matches_tape_operation_modes(device, monkeypatch, mode):
    dom = makeDomain(2, F64, device)
    kinds = [k % 3 for k in range(30)]
    q = marginCloud(30, 2, F64, device, 5, domain=dom, kinds=kinds)
    pr = props(LAP, gradientMode=GradientScheme.Difference, operationMode=mode,
               laplacianMode=LaplacianScheme.Brookshaw)
    _assertSame(monkeypatch, q, None, dom, pr, "csr")


def test_reverse_kernel_matches_tape_tensor_fields(device, monkeypatch):
    """A field of 2 x 3 entries, both schemes, calibrated on periodic seams."""
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(30, 2, F64, device, 7, domain=dom)
    for laplacian in SCHEMES:
        pr = props(LAP, gradientMode=GradientScheme.Summation, n_h=2.0,
                   calibrateNormalization=True, supportMode=SupportScheme.Scatter,
                   laplacianMode=laplacian)
        for traversal in ("csr", "grid"):
            _assertSame(monkeypatch, q, None, dom, pr, traversal, shape=(2, 3))


@pytest.mark.parametrize("dim, traversal, shape", [(1, "csr", ()), (1, "grid", (1,)),
                                                   (3, "csr", (3,)), (3, "grid", (3, 2))])
def test_reverse_kernel_matches_tape_dimensions(device, monkeypatch, dim, traversal, shape):
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud({1: 12, 3: 24}[dim], dim, F64, device, 2, domain=dom)
    pr = props(LAP, gradientMode=GradientScheme.Symmetric,
               supportMode=SupportScheme.KernelMeanSymmetric,
               laplacianMode=LaplacianScheme.Brookshaw)
    _assertSame(monkeypatch, q, None, dom, pr, traversal, shape=shape)


def test_reverse_kernel_matches_tape_coincident(device, monkeypatch):
    """r = 0 pairs: H(0) g from the q < eps rule (finite), d(grad W)/dh(0) = 0."""
    dom = makeDomain(2, F64, device)
    base = cloud(8, 2, F64, device, 4)
    pos = torch.cat([base.positions, base.positions[:3]])
    q = ParticleState(pos, torch.cat([base.supports, base.supports[:3] * 1.1]),
                      torch.cat([base.masses, base.masses[:3]]),
                      torch.zeros(11, dtype=torch.int32, device=device),
                      torch.cat([base.densities, base.densities[:3]]))
    for scheme in GradientScheme:
        for laplacian in SCHEMES:
            g = _assertSame(monkeypatch, q, None, dom,
                            props(LAP, gradientMode=scheme, laplacianMode=laplacian), "csr")
            assert all(torch.isfinite(t).all() for t in g)


def test_reverse_route_selection(device, monkeypatch):
    q, dom = _cloud2D(device, n=12)
    n = q.positions.shape[0]
    pr = props(LAP, laplacianMode=LaplacianScheme.Brookshaw)
    vol, om, A, B, gA, gB, L = randomCorrectionTensors(n, n, 2, device, seed=3)
    assert _run(monkeypatch, False, q, None, dom, pr, "csr")[0] == ROUTE
    assert _run(monkeypatch, False, q, None, dom, pr, "csr", volumes=True)[0] == ROUTE
    for extra in (dict(crkState=CRKState(A, B, gA, gB)), dict(renormalizationState=L),
                  dict(gradHState=GradHState(om))):
        assert _run(monkeypatch, False, q, None, dom, pr, "csr", extra=extra)[0] is None
    for other in (props(LAP, laplacianMode=LaplacianScheme.Naive),
                  props(LAP, laplacianMode=LaplacianScheme.Dot),
                  props(LAP, laplacianMode=LaplacianScheme.Brookshaw, positiveDivergence=True)):
        assert _run(monkeypatch, False, q, None, dom, other, "csr")[0] is None
    assert _run(monkeypatch, True, q, None, dom, pr, "csr")[0] is None


def test_reverse_kernel_float32(device, monkeypatch):
    dom = makeDomain(2, torch.float32, device)
    q = cloud(40, 2, torch.float32, device, 9)
    pr = props(LAP, gradientMode=GradientScheme.Difference,
               laplacianMode=LaplacianScheme.Default)
    rk, _, gk = _run(monkeypatch, False, q, None, dom, pr, "csr")
    rt, _, gt = _run(monkeypatch, True, q, None, dom, pr, "csr")
    assert rk == ROUTE and rt is None
    for a, b in zip(gk, gt):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_specialised_reverse_kernel_matches_tape(device, monkeypatch, scheme, traversal,
                                                 specialized):
    """Specialisation on: the reverse kernel compiled for the call's configuration."""
    from warpSPHCore.operators import _specialized

    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(28, 2, F64, device, 13, domain=dom, kinds=[k % 3 for k in range(28)])
    pr = props(LAP, gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric,
               operationMode=9, laplacianMode=LaplacianScheme.Brookshaw)
    _assertSame(monkeypatch, q, None, dom, pr, traversal, volumes=True)
    assert any(name == "laplacianVJP" and cfg.dim == 2 for name, cfg in _specialized._BUILT)


# --- gradcheck through the reverse kernel ----------------------------------------------------


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_gradcheck(device, monkeypatch, scheme):
    monkeypatch.setenv(GATE, "0")
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 9, 2, F64, device, 21, dom)
    adj = neighbourStructure("csr", q, dom, r)
    vol = randomCorrectionTensors(8, 9, 2, device, seed=3)[0]
    pr = props(LAP, gradientMode=scheme, supportMode=SupportScheme.PartialSymmetric,
               laplacianMode=LaplacianScheme.Default)
    inputs = leaves(q.positions, q.supports, q.densities, _field(8, (2,), device, 1),
                    r.positions, r.supports, r.masses, r.densities, _field(9, (2,), device, 2),
                    vol)

    def fn(qp, qh, qrho, fq, rp, rh, rm, rrho, fr, v):
        return warpOperation(ParticleState(qp, qh, q.masses, q.kinds, qrho), pr, dom,
                             queryValues=fq, referenceValues=fr, adjacency=adj,
                             referenceParticles=ParticleState(rp, rh, rm, r.kinds, rrho),
                             referenceVolumes=v)

    assert reverseRoute(fn(*inputs)) == ROUTE
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
