"""Laplacian reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. positions, supports, masses, densities, values, reference volumes,
Omega (query and reference), CRK A, B, gradA, gradB and L.

Matrix: 4 Laplacian schemes x 4 gradient schemes x corrections {none, volumes+grad-h, CRK,
renorm, CRK+renorm+volumes+grad-h} (Naive: the CRK/renorm states are accepted and ignored, so
only none and volumes+grad-h; 2D, CSR, aliased, scalar field or vector for Dot; support
schemes cycled); grid and on-the-fly traversals; distinct and cloned reference sets;
positiveDivergence away from its switching surface; periodic; 1D and 3D; coincident points
(r = 0) with CRK; grid vs CSR gradients value by value. Neighbour structures are frozen
(1e-3 h margin).
"""

from __future__ import annotations

import numpy as np
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
    pairVectors,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import operatorEntry  # noqa: E402

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

F64 = torch.float64
LAP = WarpOperation.Laplacian
SUPPORTS = list(SupportScheme)
CORRECTIONS = ("none", "volumes+gradH", "crk", "renorm", "crk+renorm+volumes+gradH")
NAIVE = LaplacianScheme.Naive


def _field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=g, dtype=F64).to(device)


def _fieldShape(lscheme, d):
    return (d,) if lscheme == LaplacianScheme.Dot and d > 1 else ()


def _aliasedCheck(q, dom, pr, traversal, shape=(), corr="none", field=None):
    n, d = q.positions.shape
    adj = neighbourStructure(traversal, q, dom)
    f = _field(n, shape, q.positions.device, seed=1) if field is None else field
    c = randomCorrectionTensors(n, n, d, q.positions.device, seed=3)
    inputs = leaves(q.positions, q.supports, q.masses, q.densities, f, *correctionInputs(corr, c))

    def fn(pos, h, m, rho, values, *ct):
        p = ParticleState(pos, h, m, q.kinds, rho)
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                             **correctionKwargs(corr, ct))

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _distinctCheck(q, r, dom, pr, traversal, shape, corr, tied=False):
    """Distinct query/reference sets; grad-h with separate query and reference Omegas.

    tied: the reference positions are the query position leaf (cloned coordinates, every
    query on its reference twin at r = 0 under every perturbation)."""
    nq, d = q.positions.shape
    nr = r.positions.shape[0]
    dev = q.positions.device
    adj = neighbourStructure(traversal, q, dom, r)
    fq = _field(nq, shape, dev, seed=4)
    fr = _field(nr, shape, dev, seed=5)
    c = randomCorrectionTensors(nq, nr, d, dev, seed=6)
    extra = []
    if "gradH" in corr:
        extra = [0.8 + 0.4 * torch.rand(nq, generator=torch.Generator().manual_seed(9),
                                        dtype=F64).to(dev)]
    inputs = leaves(q.positions, q.supports, q.densities, fq, r.positions, r.supports, r.masses,
                    r.densities, fr, *extra, *correctionInputs(corr, c))
    if tied:
        del inputs[4]

    def fn(qp, qh, qrho, fqv, *rest):
        if tied:
            rp, (rh, rm, rrho, frv, *ct) = qp, rest
        else:
            rp, rh, rm, rrho, frv, *ct = rest
        query = ParticleState(qp, qh, q.masses, q.kinds, qrho)
        ref = ParticleState(rp, rh, rm, r.kinds, rrho)
        if "gradH" in corr:
            qOmega, ct = ct[0], ct[1:]
        kw = correctionKwargs(corr, ct)
        if "gradH" in corr:
            kw["gradHState"] = (qOmega, kw["gradHState"])
        return warpOperation(query, pr, dom, queryValues=fqv, referenceValues=frv,
                             adjacency=adj, referenceParticles=ref, **kw)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _schemeCases():
    cases = []
    for lscheme in STATELESS_LAPLACIAN:
        for gscheme in GradientScheme:
            for corr in CORRECTIONS:
                if lscheme == NAIVE and ("crk" in corr or "renorm" in corr):
                    continue
                # a representative subset in the default run (every Laplacian scheme with
                # every gradient scheme and every correction at least once); the rest is slow
                fast = (int(gscheme) + CORRECTIONS.index(corr) + int(lscheme)) % 4 == 0 \
                    or (lscheme == NAIVE and int(gscheme) + CORRECTIONS.index(corr) in (1, 4))
                marks = () if fast else (pytest.mark.slow,)
                cases.append(pytest.param(lscheme, gscheme, corr, marks=marks,
                                          id=f"{lscheme.name}-{gscheme.name}-{corr}"))
    return cases


@pytest.mark.parametrize("lscheme, gscheme, corr", _schemeCases())
def test_laplacian_gradcheck_schemes(device, lscheme, gscheme, corr):
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=100, domain=dom)
    support = SUPPORTS[(int(lscheme) * 7 + int(gscheme) * 5 + len(corr)) % len(SUPPORTS)]
    pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme, supportMode=support)
    _aliasedCheck(q, dom, pr, "csr", _fieldShape(lscheme, 2), corr)


@pytest.mark.parametrize("traversal", ["grid", "none"])
@pytest.mark.parametrize("lscheme", [LaplacianScheme.Naive, LaplacianScheme.Dot],
                         ids=lambda s: s.name)
def test_laplacian_gradcheck_traversals(device, traversal, lscheme):
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=110, domain=dom)
    pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.PartialSymmetric)
    corr = "volumes+gradH" if lscheme == NAIVE else "crk+renorm+volumes+gradH"
    _aliasedCheck(q, dom, pr, traversal, (2,), corr)


@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
@pytest.mark.parametrize("lscheme", STATELESS_LAPLACIAN, ids=lambda s: s.name)
def test_laplacian_gradcheck_distinct(device, lscheme, cloned):
    """Distinct reference sets (separate query/reference Omegas, masses, densities) and cloned
    coordinates (every query on its reference twin, r = 0; the reference positions are the
    query leaf, since with CRK the Brookshaw/Dot/Default terms grow like G(0).x_hat / r when a
    twin moves off its query: not differentiable there, the r > 0 guard defines the value 0).
    """
    dom = makeDomain(2, F64, device)
    q, r = marginPair(5, 6, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    traversal = TRAVERSALS[(int(lscheme) + int(cloned)) % 3]
    gscheme = list(GradientScheme)[(int(lscheme) + 2 * int(cloned)) % 4]
    # r = 0 pairs: Poly6 is smooth at the origin (central differences of G stay second order)
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(LAP, kernel=kernel, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.MeanSymmetric, n_h=3.0, calibrateNormalization=True)
    corr = "volumes+gradH" if lscheme == NAIVE else "crk+renorm+volumes+gradH"
    if gscheme == GradientScheme.Symmetric:
        corr = corr.replace("volumes+", "")
    _distinctCheck(q, r, dom, pr, traversal, _fieldShape(lscheme, 2), corr, tied=cloned)


@pytest.mark.parametrize("lscheme", STATELESS_LAPLACIAN, ids=lambda s: s.name)
def test_laplacian_gradcheck_positive_divergence(device, lscheme):
    """positiveDivergence, with a field whose x_ij . q_ij stays away from 0 on every pair
    (the pair selection is frozen under the finite differences)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(7, 2, F64, device, seed=150, domain=dom)
    n = 7
    g = torch.Generator().manual_seed(11)
    # V_j > 0 and no grad-h, so the sign of x_ij . q_ij is that of x_ij . (f_j - f_i): draw
    # fields until every distinct pair keeps a margin and both signs occur
    pos = q.positions.cpu().numpy()
    x = pairVectors(pos, pos, [-1.0, -1.0], [1.0, 1.0], [False, False])
    off = ~np.eye(n, dtype=bool)
    for _ in range(2000):
        f = torch.randn(n, 2, generator=g, dtype=F64)
        fn = f.numpy()
        s = np.einsum("ijc,ijc->ij", x, fn[None, :, :] - fn[:, None, :])[off]
        if np.min(np.abs(s)) > 1e-3 and 0 < np.sum(s < 0) < s.size:
            break
    else:
        raise AssertionError("no field away from the positiveDivergence switching surface")
    pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Difference,
               positiveDivergence=True)
    corr = "volumes" if lscheme == NAIVE else "crk+renorm+volumes"
    _aliasedCheck(q, dom, pr, "csr", (2,), corr, field=f.to(device))


def test_laplacian_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(7, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    pr = props(LAP, laplacianMode=LaplacianScheme.Brookshaw,
               gradientMode=GradientScheme.Difference, supportMode=SupportScheme.SuperSymmetric)
    _aliasedCheck(q, dom, pr, "grid", (), "crk+renorm")


def _dimCase(dim, traversal, lscheme, gscheme, slow=False):
    return pytest.param(dim, traversal, lscheme, gscheme,
                        marks=(pytest.mark.slow,) if slow else (),
                        id=f"{dim}d-{traversal}-{lscheme.name}-{gscheme.name}")


@pytest.mark.parametrize("dim, traversal, lscheme, gscheme", [
    _dimCase(1, "csr", LaplacianScheme.Naive, GradientScheme.Symmetric),
    _dimCase(1, "grid", LaplacianScheme.Dot, GradientScheme.Difference),
    _dimCase(3, "none", LaplacianScheme.Default, GradientScheme.Naive),
    _dimCase(3, "csr", LaplacianScheme.Dot, GradientScheme.Summation),
    _dimCase(3, "csr", LaplacianScheme.Naive, GradientScheme.Naive, slow=True),
    _dimCase(1, "csr", LaplacianScheme.Brookshaw, GradientScheme.Symmetric, slow=True),
])
def test_laplacian_gradcheck_dimensions(device, dim, traversal, lscheme, gscheme):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(4, 5, dim, F64, device, seed=400, domain=dom)
    pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
               supportMode=SupportScheme.SuperSymmetric if lscheme == NAIVE
               else SupportScheme.KernelMeanSymmetric)
    corr = "gradH" if lscheme == NAIVE else "crk+renorm+gradH"
    _distinctCheck(q, r, dom, pr, traversal, (dim,) if lscheme == LaplacianScheme.Dot else (),
                   corr)


@pytest.mark.parametrize("lscheme", STATELESS_LAPLACIAN, ids=lambda s: s.name)
def test_laplacian_gradcheck_coincident(device, lscheme):
    """Self pairs and a coincident distinct pair (r = 0) with CRK, G(0) != 0: the
    backward is finite and exact. Particles 0 and 1 share one position leaf row, so the pair
    stays at r = 0 under every perturbation (moving one of them alone is not differentiable
    with CRK: the term grows like G(0).x_hat / r). Poly6 keeps central differences second
    order at r = 0."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    n = 6
    f = _field(n, _fieldShape(lscheme, 2), device, seed=1)
    c = randomCorrectionTensors(n, n, 2, device, seed=3)
    corr = "volumes+gradH" if lscheme == NAIVE else "crk+renorm+volumes+gradH"
    pr = props(LAP, kernel=KernelFunctions.Poly6, laplacianMode=lscheme,
               gradientMode=GradientScheme.Naive)
    adj = neighbourStructure("csr", q, dom)
    inputs = leaves(q.positions[1:], q.supports, q.masses, q.densities, f,
                    *correctionInputs(corr, c))

    def fn(z, h, m, rho, values, *ct):
        pos = torch.cat((z[:1], z), dim=0)  # particle 1 sits on particle 0
        p = ParticleState(pos, h, m, q.kinds, rho)
        return warpOperation(p, pr, dom, queryValues=values, adjacency=adj,
                             **correctionKwargs(corr, ct))

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
    out = fn(*inputs)
    (out * torch.linspace(0.5, 1.5, out.numel(), dtype=F64, device=device).reshape(
        out.shape)).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in inputs)


def test_laplacian_grid_gradients_equal_csr(device):
    """Grid traversal (nested loop, W72) and CSR give the same gradients, value by value."""
    dom = makeDomain(2, F64, device, periodic=[True, False])
    q = marginCloud(10, 2, F64, device, seed=600, domain=dom, hMean=0.6)
    f = _field(10, (2,), q.positions.device, seed=7)
    c = randomCorrectionTensors(10, 10, 2, q.positions.device, seed=8)
    corr = "crk+renorm+volumes+gradH"
    for lscheme in (LaplacianScheme.Dot, LaplacianScheme.Default):
        grads = {}
        for traversal in TRAVERSALS:
            adj = neighbourStructure(traversal, q, dom)
            inputs = leaves(q.positions, q.supports, q.masses, q.densities, f,
                            *correctionInputs(corr, c))
            pos, h, m, rho, values, *ct = inputs
            p = ParticleState(pos, h, m, q.kinds, rho)
            pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Difference,
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
