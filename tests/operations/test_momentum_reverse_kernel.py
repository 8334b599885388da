"""The Momentum's hand-written reverse kernel (`_specialized.momentumVJPSpecialized`) against
Warp's generated adjoint (the tape path, forced with ``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``)
and against finite differences.

* Route: eligible calls take the reverse kernel (``grad_fn.reverse_route``), also with
  masses and densities that require grad (never read: their gradient is exactly zero); the
  gate keeps the tape.
* Equivalence, float64, every gradient of the call (positions, supports and the field, both
  sets): 6 support schemes x {CSR, grid}; distinct sets; mixed kinds under masking modes;
  lattice calibration; a periodic domain; 1D, 2D and 3D (the default suite: two schemes and
  2D; the rest is marked slow, each configuration compiling modules of its own).
* gradcheck through the reverse kernel.
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    momentumTestField,
    neighbourStructure,
    props,
    reverseRoute,
)

from warpSPHCore import OperationDirection, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

# the reverse kernel is specialised per configuration: specialisation on for every test
pytestmark = pytest.mark.usefixtures("specialized")

F64 = torch.float64
MOM = WarpOperation.Momentum
GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"


def _field(n, d, seed):
    return momentumTestField(n, d, seed)


def _run(monkeypatch, tape, q, r, dom, pr, traversal, seed=0, massGrad=False):
    monkeypatch.setenv(GATE, "1" if tape else "0")
    d = q.positions.shape[1]
    qx, qh, fq = leaves(q.positions, q.supports, _field(q.positions.shape[0], d, seed + 1))
    qm = q.masses.clone().requires_grad_(massGrad)
    grads = [qx, qh, fq] + ([qm] if massGrad else [])
    kw = dict(queryValues=fq)
    if r is not None:
        rx, rh, fr = leaves(r.positions, r.supports, _field(r.positions.shape[0], d, seed + 2))
        kw.update(referenceParticles=ParticleState(rx, rh, r.masses, r.kinds), referenceValues=fr)
        grads += [rx, rh, fr]
    adj = neighbourStructure(traversal, q, dom, r)
    out = warpOperation(ParticleState(qx, qh, qm, q.kinds), pr, dom, adjacency=adj, **kw)
    seedT = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 7), dtype=F64)
    out.backward(seedT)
    return reverseRoute(out), out.detach(), [g.grad for g in grads]


def _assertSame(monkeypatch, *args, **kw):
    routeK, outK, gK = _run(monkeypatch, False, *args, **kw)
    routeT, outT, gT = _run(monkeypatch, True, *args, **kw)
    assert routeK == "momentumVJPKernel"
    assert routeT is None
    torch.testing.assert_close(outK, outT, rtol=1e-12,
                               atol=1e-12 * max(1.0, float(outT.abs().max())))
    for k, (a, b) in enumerate(zip(gK, gT)):
        a = torch.zeros_like(b) if a is None and b is not None else a
        b = torch.zeros_like(a) if b is None and a is not None else b
        if a is None:
            continue
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11 * scale, msg=f"leaf {k}")


# the default suite compiles two configurations (each a kernel module of its own, several
# seconds cold); `make test-all` runs every support scheme on both traversals
_DEFAULT = {(SupportScheme.Gather, "csr"), (SupportScheme.SuperSymmetric, "grid")}
_SCHEMES = [pytest.param(m, t, id=f"{m.name}-{t}",
                         marks=() if (m, t) in _DEFAULT else pytest.mark.slow)
            for m in SupportScheme for t in ("csr", "grid")]


@pytest.mark.parametrize("mode,traversal", _SCHEMES)
def test_reverse_kernel_equals_tape_every_support_scheme(monkeypatch, mode, traversal):
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(24, 2, F64, "cpu", 3, domain=dom)
    _assertSame(monkeypatch, q, None, dom, props(MOM, supportMode=mode), traversal)


@pytest.mark.parametrize("d", [pytest.param(1, marks=pytest.mark.slow), 2,
                               pytest.param(3, marks=pytest.mark.slow)])
def test_reverse_kernel_equals_tape_distinct_sets_and_dimensions(monkeypatch, d):
    dom = makeDomain(d, F64, "cpu")
    q, r = marginPair(14, 17, d, F64, "cpu", 5 + d, dom)
    _assertSame(monkeypatch, q, r, dom, props(MOM, supportMode=SupportScheme.SuperSymmetric),
                "csr")


def test_reverse_kernel_equals_tape_kinds_calibration_periodic(monkeypatch):
    dom = makeDomain(2, F64, "cpu", periodic=True)
    q = marginCloud(30, 2, F64, "cpu", 11, domain=dom)
    kinds = torch.tensor([0, 1, 2, 0, 1] * 6, dtype=torch.int32)
    q = ParticleState(q.positions, q.supports, q.masses, kinds, q.densities)
    for direction in (OperationDirection.FluidQueriesNonGhostReferences,
                      OperationDirection.AllQueriesNonGhostReferences):
        _assertSame(monkeypatch, q, None, dom,
                    props(MOM, supportMode=SupportScheme.Gather, operationMode=direction),
                    "csr")
    _assertSame(monkeypatch, q, None, dom,
                props(MOM, calibrateNormalization=True, n_h=2.0), "grid")


def test_unread_masses_with_grad_take_the_kernel_and_get_zero(monkeypatch):
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(12, 2, F64, "cpu", 2, domain=dom)
    _assertSame(monkeypatch, q, None, dom, props(MOM), "csr", massGrad=True)


def test_gradcheck_through_the_reverse_kernel(monkeypatch):
    monkeypatch.setenv(GATE, "0")
    dom = makeDomain(2, F64, "cpu", periodic=True)
    q = marginCloud(8, 2, F64, "cpu", 4, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(MOM, supportMode=SupportScheme.MeanSymmetric)
    f = _field(8, 2, 3)

    def fn(x, h, values):
        return warpOperation(ParticleState(x, h, q.masses, q.kinds), pr, dom,
                             queryValues=values, adjacency=adj)

    inputs = tuple(leaves(q.positions, q.supports, f))
    assert reverseRoute(fn(*inputs)) == "momentumVJPKernel"
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
