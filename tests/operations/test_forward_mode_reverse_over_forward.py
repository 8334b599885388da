"""Reverse-over-forward Hessian-vector products.

`warpSPHCore.autograd.jvpCommon.hvp(fn, primals, tangents)` makes the primals dual, runs the
scalar loss through the operators' forward-mode route (the Tier-2 JVP kernels, themselves
launched through the bridge) and back-propagates the tangent: H v = grad <grad L, v>. Checked
against Richardson-extrapolated central differences (eps 1e-5, rtol 1e-6) of the reverse-mode
gradient of the same loss.

Each operator is one entry of `CASES` (a builder returning the loss, its primals and
tangents); an entry whose operator has no geometry JVP kernel yet is skipped. Also pinned:
reverse over reverse (`create_graph=True`, `torch.autograd.functional.vhp`/`jvp`) equals
these products, and forward-over-reverse raises `NotImplementedError` (never zeros).
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose
from sph_reference import (
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.autograd.jvpCommon import hvp
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import operatorEntry

F64 = torch.float64
EPS, RTOL, ATOL = 1e-5, 1e-6, 1e-8
KMS = SupportScheme.KernelMeanSymmetric


def _randn(shape, g, scale=1.0):
    return scale * torch.randn(shape, generator=g, dtype=F64)


# --- cases: build(seed) -> (fn, primals, tangents) ------------------------------------------


def _densityShared(dim):
    def build(seed):
        dom = makeDomain(dim, F64, "cpu")
        q = marginCloud({1: 10, 2: 12}[dim], dim, F64, "cpu", seed=seed, domain=dom)
        adj = neighbourStructure("csr", q, dom)
        pr = props(WarpOperation.Density, supportMode=KMS)

        def fn(x, h, m):
            rho = warpOperation(ParticleState(x, h, m, q.kinds), pr, dom, adjacency=adj)
            return (rho ** 2).sum()

        g = torch.Generator().manual_seed(seed)
        prim = (q.positions, q.supports, q.masses)
        tang = (_randn(q.positions.shape, g), _randn(q.supports.shape, g, 0.01),
                _randn(q.masses.shape, g))
        return fn, prim, tang
    return build


def _densityDistinct(seed):
    dom = makeDomain(2, F64, "cpu")
    q, r = marginPair(8, 9, 2, F64, "cpu", seed=seed, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(WarpOperation.Density, supportMode=SupportScheme.MeanSymmetric)

    def fn(xq, xr, mr):
        rho = warpOperation(ParticleState(xq, q.supports, q.masses, q.kinds), pr, dom,
                            adjacency=adj,
                            referenceParticles=ParticleState(xr, r.supports, mr, r.kinds))
        return (rho ** 2).sum()

    g = torch.Generator().manual_seed(seed)
    prim = (q.positions, r.positions, r.masses)
    tang = tuple(_randn(p.shape, g) for p in prim)
    return fn, prim, tang


def _fieldCase(op, corrections=False, **kw):
    """sum(op(f)^2) of a scalar field f w.r.t. positions (and supports, f)."""
    def build(seed):
        dom = makeDomain(2, F64, "cpu")
        q = marginCloud(12, 2, F64, "cpu", seed=seed, domain=dom)
        adj = neighbourStructure("csr", q, dom)
        pr = props(op, supportMode=KMS, **kw)
        g = torch.Generator().manual_seed(seed)
        f0 = _randn((12,), g)
        extra = {}
        if corrections:
            _, _, A, B, gA, gB, L = randomCorrectionTensors(12, 12, 2, "cpu", seed)
            extra = dict(crkState=CRKState(A, B, gA, gB), renormalizationState=L)

        def fn(x, h, f):
            out = warpOperation(ParticleState(x, h, q.masses, q.kinds, q.densities), pr, dom,
                                queryValues=f, adjacency=adj, **extra)
            return (out ** 2).sum()

        prim = (q.positions, q.supports, f0)
        tang = (_randn(q.positions.shape, g), _randn(q.supports.shape, g, 0.01),
                _randn(f0.shape, g))
        return fn, prim, tang
    return build


CASES = {
    "density-2d": (WarpOperation.Density, _densityShared(2)),
    "density-1d": (WarpOperation.Density, _densityShared(1)),
    "density-distinct": (WarpOperation.Density, _densityDistinct),
    "gradient": (WarpOperation.Gradient,
                 _fieldCase(WarpOperation.Gradient, gradientMode=GradientScheme.Difference)),
    "gradient-crk-renorm": (WarpOperation.Gradient,
                            _fieldCase(WarpOperation.Gradient, corrections=True,
                                       gradientMode=GradientScheme.Symmetric)),
    "laplacian": (WarpOperation.Laplacian,
                  _fieldCase(WarpOperation.Laplacian, laplacianMode=LaplacianScheme.Brookshaw)),
    "laplacian-crk-renorm": (WarpOperation.Laplacian,
                             _fieldCase(WarpOperation.Laplacian, corrections=True,
                                        laplacianMode=LaplacianScheme.Default)),
}


def _hasGeometryJVP(op) -> bool:
    jvp = operatorEntry(op).spec.jvp
    return jvp is not None and jvp.geometryKernel is not None


def _reverseGradient(fn, primals):
    leaves = [p.detach().clone().requires_grad_(True) for p in primals]
    return torch.autograd.grad(fn(*leaves), leaves)


def _fdOfGradient(fn, primals, tangents, eps=EPS):
    """Richardson-extrapolated central differences of the reverse-mode gradient along the
    tangents: (4 D(eps/2) - D(eps)) / 3."""

    def central(e):
        plus = _reverseGradient(fn, [p + e * t for p, t in zip(primals, tangents)])
        minus = _reverseGradient(fn, [p - e * t for p, t in zip(primals, tangents)])
        return [(a - b) / (2 * e) for a, b in zip(plus, minus)]

    return [(4 * a - b) / 3 for a, b in zip(central(eps / 2), central(eps))]


@pytest.mark.parametrize("case", list(CASES))
def test_reverse_over_forward_hvp(case):
    op, build = CASES[case]
    if not _hasGeometryJVP(op):
        pytest.skip(f"{op.name} has no geometry JVP kernel yet")
    fn, primals, tangents = build(101)
    value, Hv = hvp(fn, primals, tangents)
    assertClose(value, fn(*primals).detach(), 1e-14, 1e-15, "value")
    fd = _fdOfGradient(fn, primals, tangents)
    assert len(Hv) == len(primals)
    for k, (a, e) in enumerate(zip(Hv, fd)):
        assert a.shape == primals[k].shape
        assertClose(a, e, RTOL, ATOL, f"{case}: H v w.r.t. primal {k}")
    assert max(float(a.abs().max()) for a in Hv) > 0


def test_hvp_single_primal_and_linearity():
    """One tensor in, one tensor out; H(a v + b w) = a H v + b H w (shared Density)."""
    fn3, (x, h, m), (v, _, _) = _densityShared(2)(102)

    def fn(p):
        return fn3(p, h, m)

    w = torch.randn(v.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    _, Hv = hvp(fn, x, v)
    _, Hw = hvp(fn, x, w)
    _, Hvw = hvp(fn, x, 2.0 * v - 0.5 * w)
    assert isinstance(Hv, torch.Tensor) and Hv.shape == x.shape
    assertClose(Hvw, 2.0 * Hv - 0.5 * Hw, 1e-12, 1e-13, "linearity")
    assertClose(Hv, _fdOfGradient(fn, [x], [v])[0], RTOL, ATOL, "single primal vs FD")


# --- unsupported second-order routes raise ---------------------------------------------------


def _densityLoss():
    fn3, (x, h, m), (v, _, _) = _densityShared(2)(103)

    def fn(p):
        return fn3(p, h, m)

    return fn, x, v


def test_reverse_over_reverse_equals_reverse_over_forward():
    """A gradient taken with ``create_graph=True`` and differentiated again (reverse over
    reverse) gives the Hessian-vector product of `hvp` (reverse over forward)."""
    fn, x, v = _densityLoss()
    xl = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(xl), xl, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), xl)
    _, ref = hvp(fn, x, v)
    assertClose(hv, ref, 1e-12, 1e-13, "reverse over reverse vs reverse over forward")
    assert float(ref.abs().max()) > 0


@pytest.mark.parametrize("which", ["vhp", "jvp"])
def test_functional_second_order(which):
    """``torch.autograd.functional.vhp`` (reverse over reverse) and ``jvp`` (a backward
    differentiated with respect to its cotangents) go through; ``hvp`` needs a third-order
    graph and raises (`test_double_backward`)."""
    fn, x, v = _densityLoss()
    _, out = getattr(torch.autograd.functional, which)(fn, x.detach().clone(), v)
    if which == "vhp":
        _, ref = hvp(fn, x, v)
    else:
        with fwAD.dual_level():
            ref = fwAD.unpack_dual(fn(fwAD.make_dual(x.detach().clone(), v))).tangent
    assertClose(out, ref, 1e-12, 1e-13, which)


def test_forward_over_reverse_raises():
    fn, x, v = _densityLoss()
    xl = x.detach().clone().requires_grad_(True)
    loss = fn(xl)
    with fwAD.dual_level():
        seed = fwAD.make_dual(torch.ones_like(loss), torch.ones_like(loss))
        with pytest.raises(NotImplementedError, match="forward-over-reverse"):
            torch.autograd.grad(loss, xl, grad_outputs=seed)
