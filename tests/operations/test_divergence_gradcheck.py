"""Divergence reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. positions, supports, masses, densities, values, reference volumes,
Omega (query and reference: grad-h divides f_i and f_j), CRK A, B, gradA, gradB and L.

Matrix: 4 gradient schemes x corrections {none, volumes+grad-h, CRK, CRK+renorm} (2D, CSR,
aliased; contraction mode and consistent mode alternate); consistent mode x both contraction
modes with and without volumes on distinct sets; renormalization alone; grid and on-the-fly
traversals; distinct and cloned reference sets; periodic; 1D and 3D; coincident points with
CRK; grid vs CSR gradients. Neighbour structures are frozen (1e-3 h margin).
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
DIV = WarpOperation.Divergence
SUPPORTS = list(SupportScheme)


def field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=g, dtype=F64).to(device)


def aliasedCheck(q, dom, pr, traversal, shape, corr="none", **opKw):
    """gradcheck w.r.t. positions, supports, masses, densities, values and the correction
    tensors of `corr` (one population in both roles; Omega a bare tensor for both)."""
    n, d = q.positions.shape
    adj = neighbourStructure(traversal, q, dom)
    f = field(n, shape, q.positions.device, seed=1)
    c = randomCorrectionTensors(n, n, d, q.positions.device, seed=3)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities, f, *correctionInputs(corr, c))

    def fn(pos, h, m, rho, values, *ct):
        p = ParticleState(pos, h, m, q.kinds, rho)
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                             **correctionKwargs(corr, ct), **opKw)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def distinctCheck(q, r, dom, pr, traversal, shape, corr, **opKw):
    """gradcheck on distinct query and reference sets, query Omegas a separate leaf."""
    nq, d = q.positions.shape
    nr = r.positions.shape[0]
    dev = q.positions.device
    adj = neighbourStructure(traversal, q, dom, r)
    fq = field(nq, shape, dev, seed=4)
    fr = field(nr, shape, dev, seed=5)
    c = randomCorrectionTensors(nq, nr, d, dev, seed=6)
    qOm = 0.9 + 0.2 * torch.rand(nq, generator=torch.Generator().manual_seed(9), dtype=F64)
    extra = [qOm.to(dev)] if "gradH" in corr else []
    inputs = leaves(q.positions, q.supports, q.densities, fq, r.positions, r.supports, r.masses,
                    r.densities, fr, *extra, *correctionInputs(corr, c))

    def fn(qp, qh, qrho, fqv, rp, rh, rm, rrho, frv, *ct):
        query = ParticleState(qp, qh, q.masses, q.kinds, qrho)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        if "gradH" in corr:
            qo, *ct = ct
        kw = correctionKwargs(corr, ct)
        if "gradH" in corr:
            kw["gradHState"] = (qo, kw["gradHState"])
        return warpOperation(query, pr, dom, queryValues=fqv, referenceValues=frv,
                             adjacency=adj, referenceParticles=ref, **kw, **opKw)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("corr", ["none", "volumes+gradH", "crk", "crk+renorm"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_divergence_gradcheck_schemes(device, scheme, corr):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=100, domain=dom)
    k = int(scheme) * 5 + len(corr)
    dotMode = bool(k % 2)
    pr = props(DIV, gradientMode=scheme, divergenceDotMode=dotMode,
               supportMode=SUPPORTS[k % len(SUPPORTS)])
    aliasedCheck(q, dom, pr, "csr", (2,) if k % 3 else (2, 3) if not dotMode else (3, 2),
                 corr, consistentDivergence=bool((k // 2) % 2))


@pytest.mark.parametrize("volumes", [False, True], ids=["masses", "volumes"])
@pytest.mark.parametrize("dotMode", [False, True], ids=["default", "dot"])
def test_divergence_gradcheck_consistent(device, dotMode, volumes):
    """V_j -> vol_j rho_j / rho_i or m_j / rho_i: derivatives w.r.t. rho_i, rho_j, m_j, vol."""
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=210, domain=dom)
    pr = props(DIV, gradientMode=GradientScheme.Difference, divergenceDotMode=dotMode,
               supportMode=SupportScheme.Scatter)
    distinctCheck(q, r, dom, pr, "csr", (2, 2), "volumes+gradH" if volumes else "gradH",
                  consistentDivergence=True)


def test_divergence_gradcheck_renorm_only(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=101, domain=dom)
    aliasedCheck(q, dom, props(DIV, gradientMode=GradientScheme.Naive), "csr", (2,), "renorm")


@pytest.mark.parametrize("traversal", ["grid", "none"])
def test_divergence_gradcheck_traversals(device, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=110, domain=dom)
    pr = props(DIV, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.PartialSymmetric, divergenceDotMode=True)
    aliasedCheck(q, dom, pr, traversal, (2,), "crk+renorm+volumes+gradH",
                 consistentDivergence=True)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
def test_divergence_gradcheck_distinct(device, cloned, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    scheme = list(GradientScheme)[(TRAVERSALS.index(traversal) + 2 * int(cloned)) % 4]
    # cloned coordinates put every query on its reference twin (r = 0): Poly6 is smooth there
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(DIV, kernel=kernel, gradientMode=scheme, supportMode=SupportScheme.MeanSymmetric,
               n_h=3.0, calibrateNormalization=True, divergenceDotMode=cloned)
    corr = "crk+renorm+volumes+gradH" if scheme != GradientScheme.Symmetric else "crk+gradH"
    distinctCheck(q, r, dom, pr, traversal, (2,), corr, consistentDivergence=not cloned)


def test_divergence_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(8, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    pr = props(DIV, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.SuperSymmetric)
    aliasedCheck(q, dom, pr, "grid", (2,), "crk+renorm")


@pytest.mark.parametrize("dim, traversal, shape, scheme, dotMode", [
    (1, "csr", (), GradientScheme.Symmetric, False),
    (1, "grid", (1,), GradientScheme.Difference, True),
    (3, "none", (3,), GradientScheme.Naive, False),
    (3, "csr", (2, 3), GradientScheme.Summation, True),
])
def test_divergence_gradcheck_dimensions(device, dim, traversal, shape, scheme, dotMode):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(5, 6, dim, F64, device, seed=400, domain=dom)
    pr = props(DIV, gradientMode=scheme, supportMode=SupportScheme.KernelMeanSymmetric,
               divergenceDotMode=dotMode)
    distinctCheck(q, r, dom, pr, traversal, shape, "crk+renorm+gradH",
                  consistentDivergence=dotMode)


@pytest.mark.parametrize("corr", ["none", "crk+renorm"])
def test_divergence_gradcheck_coincident(device, corr):
    """Self pair and a coincident distinct pair (r = 0; CRK makes G(0) != 0)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    aliasedCheck(c, dom, props(DIV, gradientMode=GradientScheme.Naive), "csr", (2,), corr)


def test_divergence_grid_gradients_equal_csr(device):
    """Grid traversal (nested loop, W72) and CSR give the same gradients, value by value."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(12, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    f = field(12, (2, 3), q.positions.device, seed=7)
    c = randomCorrectionTensors(12, 12, 2, q.positions.device, seed=8)
    corr = "crk+renorm+volumes+gradH"
    grads = {}
    for traversal in TRAVERSALS:
        adj = neighbourStructure(traversal, q, dom)
        inputs = leaves(q.positions, q.supports, q.masses, q.densities, f,
                        *correctionInputs(corr, c))
        pos, h, m, rho, values, *ct = inputs
        p = ParticleState(pos, h, m, q.kinds, rho)
        pr = props(DIV, gradientMode=GradientScheme.Difference,
                   supportMode=SupportScheme.KernelMeanSymmetric)
        out = warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                            consistentDivergence=True, **correctionKwargs(corr, ct))
        w = torch.linspace(0.3, 1.7, out.numel(), dtype=F64, device=device).reshape(out.shape)
        (out * w).sum().backward()
        grads[traversal] = [t.grad for t in inputs]
    for traversal in ("grid", "none"):
        for g0, g1 in zip(grads["csr"], grads[traversal]):
            if g0 is None:
                assert g1 is None or torch.equal(g1, torch.zeros_like(g1))
            else:
                torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-13)
