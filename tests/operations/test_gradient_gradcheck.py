"""Gradient reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. positions, supports, masses, densities, values, reference volumes,
Omega, CRK A, B, gradA, gradB and L — which also checks the shared pair function
`corrected.correctedGradient_ij` (CRK, then renormalization).

Matrix: 4 gradient schemes x corrections {none, volumes+grad-h, CRK, CRK+renorm} (2D, CSR,
aliased, scalar field; support schemes cycled); renormalization alone; grid and on-the-fly
traversals with vector fields; distinct and cloned reference sets with matrix fields and
calibration; periodic; 1D and 3D; coincident points with and without CRK; grid vs CSR
gradients value by value. Neighbour structures are frozen (1e-3 h margin).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    correctionInputs,
    correctionKwargs,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    GradientScheme,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation

F64 = torch.float64
GRAD = WarpOperation.Gradient
SUPPORTS = list(SupportScheme)


def _field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=g, dtype=F64).to(device)


def _aliasedCheck(q, dom, pr, traversal, shape=(), corr="none"):
    n, d = q.positions.shape
    adj = neighbourStructure(traversal, q, dom)
    f = _field(n, shape, q.positions.device, seed=1)
    c = randomCorrectionTensors(n, n, d, q.positions.device, seed=3)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities, f, *correctionInputs(corr, c))

    def fn(pos, h, m, rho, values, *ct):
        p = ParticleState(pos, h, m, q.kinds, rho)
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                             **correctionKwargs(corr, ct))

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _distinctCheck(q, r, dom, pr, traversal, shape, corr):
    nq, d = q.positions.shape
    nr = r.positions.shape[0]
    dev = q.positions.device
    adj = neighbourStructure(traversal, q, dom, r)
    fq = _field(nq, shape, dev, seed=4)
    fr = _field(nr, shape, dev, seed=5)
    c = randomCorrectionTensors(nq, nr, d, dev, seed=6)
    inputs = leaves(q.positions, q.supports, q.densities, fq, r.positions, r.supports, r.masses,
                    r.densities, fr, *correctionInputs(corr, c))

    def fn(qp, qh, qrho, fqv, rp, rh, rm, rrho, frv, *ct):
        query = ParticleState(qp, qh, q.masses, q.kinds, qrho)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        kw = correctionKwargs(corr, ct)
        if "gradH" in corr:  # query Omegas are never read by Gradient
            kw["gradHState"] = (torch.ones(nq, dtype=F64, device=dev), kw["gradHState"])
        return warpOperation(query, pr, dom, queryValues=fqv, referenceValues=frv,
                             adjacency=adj, referenceParticles=ref, **kw)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("corr", ["none", "volumes+gradH", "crk", "crk+renorm"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_gradient_gradcheck_schemes(device, scheme, corr):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=100, domain=dom)
    support = SUPPORTS[(int(scheme) * 5 + len(corr)) % len(SUPPORTS)]
    _aliasedCheck(q, dom, props(GRAD, gradientMode=scheme, supportMode=support), "csr", (),
                  corr)


def test_gradient_gradcheck_renorm_only(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=101, domain=dom)
    _aliasedCheck(q, dom, props(GRAD, gradientMode=GradientScheme.Difference), "csr", (2,),
                  "renorm")


@pytest.mark.parametrize("traversal", ["grid", "none"])
def test_gradient_gradcheck_traversals(device, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=110, domain=dom)
    pr = props(GRAD, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.PartialSymmetric)
    _aliasedCheck(q, dom, pr, traversal, (2,), "crk+renorm+volumes")


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
def test_gradient_gradcheck_distinct(device, cloned, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    scheme = list(GradientScheme)[(TRAVERSALS.index(traversal) + 2 * int(cloned)) % 4]
    # Cloned coordinates put every query on its reference twin (r = 0): Wendland2's q^3 term
    # makes grad W ~ |x| x there, so central differences of G carry an O(eps) error; Poly6 is
    # smooth at the origin (second order at r = 0).
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(GRAD, kernel=kernel, gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric,
               n_h=3.0, calibrateNormalization=True)
    corr = "crk+renorm+volumes+gradH" if scheme != GradientScheme.Symmetric else "crk+gradH"
    _distinctCheck(q, r, dom, pr, traversal, (2, 2) if traversal == "csr" else (), corr)


@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_gradient_gradcheck_distinct_densities(device, scheme):
    """V_j = m_j / rho_j (no volumes) and the Symmetric rho_i, rho_j on distinct sets."""
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=210, domain=dom)
    _distinctCheck(q, r, dom, props(GRAD, gradientMode=scheme,
                                    supportMode=SupportScheme.Scatter), "csr", (), "gradH")


def test_gradient_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(8, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    pr = props(GRAD, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.SuperSymmetric)
    _aliasedCheck(q, dom, pr, "grid", (2,), "crk+renorm")


@pytest.mark.parametrize("dim, traversal, shape, scheme", [
    (1, "csr", (), GradientScheme.Symmetric),
    (1, "grid", (1,), GradientScheme.Difference),
    (3, "none", (), GradientScheme.Naive),
    (3, "csr", (3,), GradientScheme.Summation),
])
def test_gradient_gradcheck_dimensions(device, dim, traversal, shape, scheme):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(5, 6, dim, F64, device, seed=400, domain=dom)
    pr = props(GRAD, gradientMode=scheme, supportMode=SupportScheme.KernelMeanSymmetric)
    _distinctCheck(q, r, dom, pr, traversal, shape, "crk+renorm+gradH")


@pytest.mark.parametrize("corr", ["none", "crk+renorm"])
def test_gradient_gradcheck_coincident(device, corr):
    """Self pair and a coincident distinct pair (r = 0; CRK makes G(0) != 0)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    _aliasedCheck(c, dom, props(GRAD, gradientMode=GradientScheme.Naive), "csr", (), corr)


def test_gradient_grid_gradients_equal_csr(device):
    """Grid traversal (nested loop, W72) and CSR give the same gradients, value by value."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    f = _field(12, (2,), q.positions.device, seed=7)
    c = randomCorrectionTensors(12, 12, 2, q.positions.device, seed=8)
    corr = "crk+renorm+volumes+gradH"
    grads = {}
    for traversal in TRAVERSALS:
        adj = neighbourStructure(traversal, q, dom)
        inputs = leaves(q.positions, q.supports, q.masses, q.densities, f,
                        *correctionInputs(corr, c))
        pos, h, m, rho, values, *ct = inputs
        p = ParticleState(pos, h, m, q.kinds, rho)
        pr = props(GRAD, gradientMode=GradientScheme.Difference,
                   supportMode=SupportScheme.KernelMeanSymmetric)
        out = warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                            **correctionKwargs(corr, ct))
        w = torch.linspace(0.3, 1.7, out.numel(), dtype=F64, device=device).reshape(out.shape)
        (out * w).sum().backward()
        grads[traversal] = [t.grad for t in inputs]
    for traversal in ("grid", "none"):
        for g0, g1 in zip(grads["csr"], grads[traversal]):
            if g0 is None:
                assert g1 is None or torch.equal(g1, torch.zeros_like(g1))
            else:
                torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-13)
