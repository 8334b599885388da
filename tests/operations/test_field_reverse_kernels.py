"""The hand-written reverse kernels of the Divergence (`divergence.divergenceVJPKernel`), the
Curl (`curl.curlVJPKernel`), the Laplacian's Brookshaw and Default schemes
(`laplacian.laplacianVJPKernel`) and the Covariance (`covariance.covarianceVJPKernel`, no
values) against Warp's generated adjoint (the tape path, forced with
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``) and by gradcheck, one table of cases.

* Route: eligible calls take the reverse kernel (``grad_fn.reverse_route``); CRK,
  renormalization, grad-h (which the Covariance ignores), the Divergence's consistent volumes, the Laplacian's Naive, Dot
  and Consistent schemes and positiveDivergence, and the gate keep the tape.
* Equivalence, float64, every gradient of the call (positions, supports, masses, densities,
  values, reference volumes): 4 gradient schemes x 6 support schemes x {CSR, grid}; distinct
  and cloned reference sets with volumes; the 15 operation modes with mixed kinds; lattice
  calibration on periodic seams with tensor fields (the Divergence's both contraction axes,
  the Curl's 2D and 3D index maps); 1D (the Curl exactly 0) and 3D; coincident points;
  float32 to float32 rounding; the kernels specialised per configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataField

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
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64


@dataclass(frozen=True)
class Case:
    """One reverse kernel: the operator's options, its route's name, the field shapes of the
    tensor-field test (d -> shapes, with extra options) and the calls that keep the tape."""

    operation: WarpOperation
    route: str
    options: dict = dataField(default_factory=dict)
    tensorFields: tuple = ()
    tapeOptions: tuple = ()
    values: bool = True
    specialised: bool = True

    def props(self, **kw):
        return props(self.operation, **{**self.options, **kw})


CASES = {
    "Divergence": Case(WarpOperation.Divergence, "divergenceVJPKernel",
                       tensorFields=((2, (2, 3), {}), (2, (3, 2), dict(divergenceDotMode=True)))),
    "Curl": Case(WarpOperation.Curl, "curlVJPKernel",
                 tensorFields=((2, (2, 3), {}), (3, (3, 3), {}))),
    "Laplacian-Brookshaw": Case(
        WarpOperation.Laplacian, "laplacianVJPKernel",
        dict(laplacianMode=LaplacianScheme.Brookshaw), ((2, (2, 3), {}),),
        (dict(laplacianMode=LaplacianScheme.Naive), dict(laplacianMode=LaplacianScheme.Dot),
         dict(positiveDivergence=True))),
    "Laplacian-Default": Case(WarpOperation.Laplacian, "laplacianVJPKernel",
                              dict(laplacianMode=LaplacianScheme.Default), ((2, (2, 3), {}),)),
    "Covariance": Case(WarpOperation.Covariance, "covarianceVJPKernel", values=False,
                       specialised=False),
}
NAMES = list(CASES)


def _shape(case, q, shape):
    if not case.values:
        return None
    return (q.positions.shape[1],) if shape is None else shape


def _run(monkeypatch, case, tape, q, r, dom, pr, traversal, shape=None, **kw):
    """`reverse_helpers.runCall` with a d-vector field by default (none for the
    Covariance)."""
    return runCall(monkeypatch, tape, q, r, dom, pr, traversal, shape=_shape(case, q, shape),
                   **kw)


def _assertSame(monkeypatch, case, q, r, dom, pr, traversal, shape=None, **kw):
    return assertSameAsTape(monkeypatch, case.route, q, r, dom, pr, traversal,
                            shape=_shape(case, q, shape), **kw)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("support", list(SupportScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_matches_tape_schemes(device, monkeypatch, scheme, support, traversal,
                                             name):
    case = CASES[name]
    q, dom = cloud2D(device)
    pr = case.props(gradientMode=scheme, supportMode=support)
    g = _assertSame(monkeypatch, case, q, None, dom, pr, traversal)
    # positions, supports, values
    assert all(float(t.abs().max()) > 0 for t in g[:2] + g[4:])
    if not case.values:  # the Covariance: V_j = m_j / rho_j
        assert float(g[2].abs().max()) > 0 and float(g[3].abs().max()) > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("volumes", [False, True], ids=["masses", "volumes"])
def test_reverse_kernel_matches_tape_distinct(device, monkeypatch, scheme, cloned, volumes,
                                              name):
    case = CASES[name]
    dom = makeDomain(2, F64, device)
    q, r = marginPair(14, 19, 2, F64, device, 11, dom, cloned=cloned)
    pr = case.props(gradientMode=scheme, supportMode=SupportScheme.SuperSymmetric)
    g = _assertSame(monkeypatch, case, q, r, dom, pr, "csr", volumes=volumes)
    if volumes and scheme != GradientScheme.Symmetric:  # Symmetric reads masses, not V_j
        assert float(g[-1].abs().max()) > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", range(15))
def test_reverse_kernel_matches_tape_operation_modes(device, monkeypatch, mode, name):
    case = CASES[name]
    dom = makeDomain(2, F64, device)
    kinds = [k % 3 for k in range(30)]
    q = marginCloud(30, 2, F64, device, 5, domain=dom, kinds=kinds)
    pr = case.props(gradientMode=GradientScheme.Difference, operationMode=mode)
    _assertSame(monkeypatch, case, q, None, dom, pr, "csr")


@pytest.mark.parametrize("name", NAMES)
def test_reverse_kernel_matches_tape_tensor_fields(device, monkeypatch, name):
    """Fields of several output columns per query (the Divergence's both contraction axes,
    the Curl's 2D and 3D index maps), calibrated, on periodic seams in 2D."""
    case = CASES[name]
    for d, shape, extra in case.tensorFields:
        dom = makeDomain(d, F64, device, periodic=d == 2)
        q = marginCloud({2: 30, 3: 24}[d], d, F64, device, 7, domain=dom)
        pr = case.props(gradientMode=GradientScheme.Summation, n_h=2.0,
                        calibrateNormalization=True, supportMode=SupportScheme.Scatter,
                        **extra)
        for traversal in ("csr", "grid"):
            _assertSame(monkeypatch, case, q, None, dom, pr, traversal, shape=shape)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dim, traversal, shape", [(1, "csr", ()), (1, "grid", (1,)),
                                                   (3, "csr", (3,)), (3, "grid", (3, 2))])
def test_reverse_kernel_matches_tape_dimensions(device, monkeypatch, dim, traversal, shape,
                                                name):
    case = CASES[name]
    dom = makeDomain(dim, F64, device, periodic=[True] + [False] * (dim - 1))
    q = marginCloud({1: 12, 3: 24}[dim], dim, F64, device, 2, domain=dom)
    pr = case.props(gradientMode=GradientScheme.Symmetric,
                    supportMode=SupportScheme.KernelMeanSymmetric)
    g = _assertSame(monkeypatch, case, q, None, dom, pr, traversal, shape=shape)
    if case.operation == WarpOperation.Curl and dim == 1:  # the 1D curl: exactly 0
        assert all(float(t.abs().max()) == 0 for t in g)


@pytest.mark.parametrize("name", NAMES)
def test_reverse_kernel_matches_tape_coincident(device, monkeypatch, name):
    """r = 0 pairs: H(0) g from the q < eps rule (finite), d(grad W)/dh(0) = 0; the
    Laplacian's guard skips them."""
    case = CASES[name]
    dom = makeDomain(2, F64, device)
    base = cloud(8, 2, F64, device, 4)
    pos = torch.cat([base.positions, base.positions[:3]])
    q = ParticleState(pos, torch.cat([base.supports, base.supports[:3] * 1.1]),
                      torch.cat([base.masses, base.masses[:3]]),
                      torch.zeros(11, dtype=torch.int32, device=device),
                      torch.cat([base.densities, base.densities[:3]]))
    for scheme in GradientScheme:
        g = _assertSame(monkeypatch, case, q, None, dom, case.props(gradientMode=scheme), "csr")
        assert all(torch.isfinite(t).all() for t in g)


@pytest.mark.parametrize("name", NAMES)
def test_reverse_route_selection(device, monkeypatch, name):
    case = CASES[name]
    q, dom = cloud2D(device, n=12)
    n = q.positions.shape[0]
    pr = case.props()
    vol, om, A, B, gA, gB, L = randomCorrectionTensors(n, n, 2, device, seed=3)
    assert _run(monkeypatch, case, False, q, None, dom, pr, "csr")[0] == case.route
    assert _run(monkeypatch, case, False, q, None, dom, pr, "csr", volumes=True)[0] == case.route
    extras = [dict(crkState=CRKState(A, B, gA, gB)), dict(renormalizationState=L),
              dict(gradHState=GradHState(om))]
    if case.operation == WarpOperation.Divergence:
        extras.append(dict(consistentDivergence=True, queryVolumes=vol))
    for extra in extras:
        assert _run(monkeypatch, case, False, q, None, dom, pr, "csr", extra=extra)[0] is None
    for options in case.tapeOptions:
        assert _run(monkeypatch, case, False, q, None, dom, case.props(**options), "csr")[0] is None
    assert _run(monkeypatch, case, True, q, None, dom, pr, "csr")[0] is None


@pytest.mark.parametrize("name", NAMES)
def test_reverse_kernel_float32(device, monkeypatch, name):
    case = CASES[name]
    dom = makeDomain(2, torch.float32, device)
    q = cloud(40, 2, torch.float32, device, 9)
    pr = case.props(gradientMode=GradientScheme.Difference)
    rk, _, gk = _run(monkeypatch, case, False, q, None, dom, pr, "csr")
    rt, _, gt = _run(monkeypatch, case, True, q, None, dom, pr, "csr")
    assert rk == case.route and rt is None
    for a, b in zip(gk, gt):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_specialised_reverse_kernel_matches_tape(device, monkeypatch, scheme, traversal, name,
                                                 specialized):
    """Specialisation on: the reverse kernel compiled for the call's configuration."""
    from warpSPHCore.operators import _specialized

    case = CASES[name]
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(28, 2, F64, device, 13, domain=dom, kinds=[k % 3 for k in range(28)])
    pr = case.props(gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric,
                    operationMode=9)
    _assertSame(monkeypatch, case, q, None, dom, pr, traversal, volumes=True)
    built = case.route.replace("Kernel", "")
    assert any(kind == built and cfg.dim == 2
               for kind, cfg in _specialized._BUILT) == case.specialised


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_reverse_kernel_gradcheck(device, monkeypatch, scheme, name):
    case = CASES[name]
    monkeypatch.setenv(GATE, "0")
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 9, 2, F64, device, 21, dom)
    adj = neighbourStructure("csr", q, dom, r)
    vol = randomCorrectionTensors(8, 9, 2, device, seed=3)[0]
    pr = case.props(gradientMode=scheme, supportMode=SupportScheme.PartialSymmetric)
    fields = (field(8, (2,), device, 1), field(9, (2,), device, 2)) if case.values else ()
    inputs = leaves(q.positions, q.supports, q.densities, r.positions, r.supports, r.masses,
                    r.densities, vol, *fields)

    def fn(qp, qh, qrho, rp, rh, rm, rrho, v, *f):
        kw = dict(queryValues=f[0], referenceValues=f[1]) if f else {}
        return warpOperation(ParticleState(qp, qh, q.masses, q.kinds, qrho), pr, dom,
                             adjacency=adj, referenceVolumes=v,
                             referenceParticles=ParticleState(rp, rh, rm, r.kinds, rrho), **kw)

    assert reverseRoute(fn(*inputs)) == case.route
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
