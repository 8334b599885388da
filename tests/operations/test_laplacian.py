"""Laplacian forward values against the
independent float64 reference `sph_reference.laplacianReference`, and Laplacian validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    laplacianReference,
    makeDomain,
    masks,
    neighbourStructure,
    props,
    randomCorrections,
    tolerances,
)

from warpSPHCore import (
    CRKState,
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    ParticleState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import operatorEntry  # noqa: E402

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

LAP = WarpOperation.Laplacian
SUPPORTS = list(SupportScheme)
TV_LAPLACIAN_F = {
    LaplacianScheme.Naive: (-15.2249098534, 40.4586957151, -0.3292533172, 15.2907469678),
    LaplacianScheme.Brookshaw: (137.6160073293, 0.3799089594, -30.1471585653, -242.704835888),
    LaplacianScheme.Default: (137.6160111546, 0.3799086267, -30.1471592215, -242.7048426234),
}
TV_LAPLACIAN_G_DOT_ROW0 = (34.8840722374, -64.3125914771)
# every correction set for the non-Naive schemes; Naive is never CRK/renorm-corrected
CORRECTIONS = ("none", "volumes", "gradH", "crk", "renorm", "crk+renorm")
NAIVE_CORRECTIONS = ("none", "volumes", "gradH")


def randomField(n, shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + shape, generator=gen, dtype=torch.float64).to(dtype=dtype,
                                                                              device=device)


def _omegas(nq, c, dtype, device, reference):
    """(query, reference) Omegas; the same tensor for an aliased reference set."""
    if reference is None:
        return c["omegas"], c["omegas"]
    g = torch.Generator().manual_seed(77)
    qo = 0.8 + 0.4 * torch.rand(nq, generator=g, dtype=torch.float64)
    return qo.to(dtype=dtype, device=device), c["omegas"]


def _call(q, pr, dom, fq, fr, reference, adj, corr, c):
    """(warpOperation, reference) for the correction set `corr` (names joined by '+')."""
    nq = q.positions.shape[0]
    vol = c["vol"] if "volumes" in corr else None
    crk = c["crk"] if "crk" in corr else None
    om = _omegas(nq, c, q.positions.dtype, q.positions.device, reference) \
        if "gradH" in corr else None
    L = c["L"] if "renorm" in corr else None
    out = warpOperation(q, pr, dom, queryValues=fq, referenceValues=fr, referenceVolumes=vol,
                        adjacency=adj, referenceParticles=reference,
                        crkState=None if crk is None else CRKState(*crk), gradHState=om,
                        renormalizationState=L)
    eps = 1e-7 if q.positions.dtype == torch.float32 else 1e-15
    ref = laplacianReference(q, dom, pr, fq, fr, reference, vol, crk, om, L, eps=eps)
    return out, ref


def _assertClose(out, ref, dtype, msg=""):
    rtol, atol = tolerances(dtype, max(float(np.abs(ref).max()), 1.0))
    np.testing.assert_allclose(out.detach().cpu().double().numpy(), ref, rtol=rtol, atol=atol,
                               err_msg=msg)


def _testVectorState(device):
    cast = dict(dtype=torch.float64, device=device)
    p = ParticleState(torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4], [0.25, 0.35]], **cast),
                      torch.tensor([1.0, 0.8, 1.2, 0.9], **cast),
                      torch.tensor([1.0, 2.0, 1.5, 0.5], **cast),
                      torch.zeros(4, dtype=torch.int32, device=device),
                      torch.tensor([1.0, 1.2, 0.9, 1.1], **cast))
    dom = DomainDescription(torch.tensor([-2.0, -2.0], **cast), torch.tensor([2.0, 2.0], **cast),
                            [False, False])
    return p, dom


def _directTestVector(p, f, scheme, dot=False):
    """A direct float64 evaluation of the Laplacian over all 16 pairs of the test vector (Wendland2,
    Gather, V_j = m_j / rho_j), written out per pair without the reference helpers."""
    x = p.positions.detach().cpu().double().numpy()
    h = p.supports.detach().cpu().double().numpy()
    V = (p.masses / p.densities).detach().cpu().double().numpy()
    f = f.detach().cpu().double().numpy().reshape(4, -1)
    C = 7.0 / np.pi
    out = np.zeros_like(f)
    for i in range(4):
        for j in range(4):
            xij = x[i] - x[j]
            r = np.linalg.norm(xij)
            hh = h[i]
            q = r / hh
            if q > 1.0:
                continue
            qij = (f[j] - f[i]) * V[j]
            if scheme == LaplacianScheme.Naive:
                if q < 1e-15:
                    continue
                k1 = C / hh**3 * (-20.0 * q * (1 - q) ** 3)
                k2 = C / hh**4 * (20.0 * (1 - q) ** 2 * (4 * q - 1))
                re = r + 1e-15 * hh
                out[i] += qij * ((r**2 / re**2) * k2 + (-(r**2) / re**3 + 2 / re) * k1)
                continue
            if r == 0.0:
                continue
            G = xij / r * C / hh**3 * (-20.0 * q * (1 - q) ** 3)
            D = r + 1e-8 * hh
            n = xij / D
            if dot:
                out[i] += (G @ n) / D * (qij - 4.0 * (qij @ n) * n)
            else:
                reg = 1e-12 if scheme == LaplacianScheme.Default else 1e-8
                out[i] += -2.0 * qij * (G @ n) / (r + reg * hh)
    return out


def test_laplacian_test_vector(device):
    """The test vector: Laplacian f (Naive, Brookshaw, Default) and Laplacian g Dot, row 0; the same for
    the Naive, Difference and Summation gradient schemes; a direct evaluation reproduces them."""
    p, dom = _testVectorState(device)
    f = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, device=device)
    for scheme, expected in TV_LAPLACIAN_F.items():
        for gscheme in (GradientScheme.Naive, GradientScheme.Difference, GradientScheme.Summation):
            pr = props(LAP, laplacianMode=scheme, gradientMode=gscheme)
            out = warpOperation(p, pr, dom, queryValues=f)
            assert out.shape == (4,) and out.dtype == torch.float64
            np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=0, atol=2e-9,
                                       err_msg=f"{scheme.name} {gscheme.name}")
            np.testing.assert_allclose(laplacianReference(p, dom, pr, f), expected, rtol=0,
                                       atol=2e-9)
        np.testing.assert_allclose(_directTestVector(p, f, scheme)[:, 0], expected, rtol=0,
                                   atol=2e-9)
    pos = p.positions
    g = torch.stack((2 * pos[:, 0] + pos[:, 1], pos[:, 0] - 3 * pos[:, 1]), dim=1)
    pr = props(LAP, laplacianMode=LaplacianScheme.Dot)
    out = warpOperation(p, pr, dom, queryValues=g)
    assert out.shape == (4, 2)
    np.testing.assert_allclose(out[0].cpu().numpy(), TV_LAPLACIAN_G_DOT_ROW0, rtol=0, atol=2e-9)
    np.testing.assert_allclose(laplacianReference(p, dom, pr, g)[0], TV_LAPLACIAN_G_DOT_ROW0,
                               rtol=0, atol=2e-9)
    np.testing.assert_allclose(_directTestVector(p, g, LaplacianScheme.Dot, dot=True)[0],
                               TV_LAPLACIAN_G_DOT_ROW0, rtol=0, atol=2e-9)


def _shapes(dim, scheme):
    if scheme == LaplacianScheme.Dot and dim > 1:
        return [(dim,), (dim, dim), (2 * dim,)]
    return [(), (dim,), (dim, dim)]


def test_laplacian_brute_force(device, dtype, dim):
    """4 Laplacian schemes x 4 gradient schemes x every correction set (field shape, aliased
    or distinct reference set and support scheme cycled), CSR traversal."""
    n = {1: 7, 2: 10, 3: 10}[dim]
    dom = makeDomain(dim, dtype, device)
    q = cloud(n, dim, dtype, device, seed=30 + dim)
    r = cloud(n + 2, dim, dtype, device, seed=40 + dim)
    setups = []
    for reference in (None, r):
        nr = n if reference is None else n + 2
        setups.append((reference, randomCorrections(n, nr, dim, dtype, device, seed=12),
                       neighbourStructure("csr", q, dom, reference), nr))
    count = 0
    for lscheme in STATELESS_LAPLACIAN:
        for gscheme in GradientScheme:
            corrs = NAIVE_CORRECTIONS if lscheme == LaplacianScheme.Naive else CORRECTIONS
            for corr in corrs:
                reference, c, adj, nr = setups[count % 2]
                shapes = _shapes(dim, lscheme)
                shape = shapes[count % len(shapes)]
                fr = randomField(nr, shape, dtype, device, seed=count)
                fq = fr if reference is None else randomField(n, shape, dtype, device,
                                                              seed=count + 500)
                pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
                           supportMode=SUPPORTS[count % len(SUPPORTS)])
                count += 1
                out, ref = _call(q, pr, dom, fq, None if reference is None else fr, reference,
                                 adj, corr, c)
                assert out.shape == (n,) + shape and out.dtype == dtype
                _assertClose(out, ref, dtype, f"{lscheme.name} {gscheme.name} {corr} S={shape} "
                             f"{pr.supportMode.name} ref={reference is not None}")


@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
def test_laplacian_traversals_agree(device, dim, periodic):
    """CSR, grid and on-the-fly traversals agree with the reference (distinct reference set,
    every correction, every scheme)."""
    dt = torch.float64
    n = {1: 7, 2: 10, 3: 9}[dim]
    hMean = 0.6 if periodic else None
    dom = makeDomain(dim, dt, device, periodic=periodic)
    q = cloud(n, dim, dt, device, seed=50 + dim, hMean=hMean)
    r = cloud(n + 1, dim, dt, device, seed=55 + dim, hMean=hMean)
    c = randomCorrections(n, n + 1, dim, dt, device, seed=13)
    fq = randomField(n, (dim,), dt, device, seed=1)
    fr = randomField(n + 1, (dim,), dt, device, seed=2)
    for traversal in TRAVERSALS:
        adj = neighbourStructure(traversal, q, dom, r)
        for lscheme in STATELESS_LAPLACIAN:
            corr = ("volumes+gradH" if lscheme == LaplacianScheme.Naive
                    else "volumes+gradH+crk+renorm")
            pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Difference,
                       supportMode=SupportScheme.KernelMeanSymmetric)
            out, ref = _call(q, pr, dom, fq, fr, r, adj, corr, c)
            _assertClose(out, ref, dt, f"{traversal} {lscheme.name}")


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_laplacian_positive_divergence(device, dtype, dim, traversal):
    """positiveDivergence keeps pairs with x_ij . q_ij >= 0, for every Laplacian scheme (vector
    fields; a scalar in 1D); some pairs are dropped."""
    n = {1: 8, 2: 10, 3: 10}[dim]
    dom = makeDomain(dim, dtype, device)
    q = cloud(n, dim, dtype, device, seed=80 + dim)
    c = randomCorrections(n, n, dim, dtype, device, seed=14)
    adj = neighbourStructure(traversal, q, dom)
    shapes = [(dim,), ()] if dim == 1 else [(dim,)]
    for si, shape in enumerate(shapes):
        f = randomField(n, shape, dtype, device, seed=3 + si)
        for lscheme in STATELESS_LAPLACIAN:
            for gscheme in (GradientScheme.Naive, GradientScheme.Symmetric):
                corr = "gradH" if lscheme == LaplacianScheme.Naive else "crk+renorm+volumes"
                pr = props(LAP, laplacianMode=lscheme, gradientMode=gscheme,
                           positiveDivergence=True)
                out, ref = _call(q, pr, dom, f, None, None, adj, corr, c)
                assert out.shape == (n,) + shape
                _assertClose(out, ref, dtype, f"{lscheme.name} {gscheme.name} S={shape}")
                full = laplacianReference(q, dom, props(LAP, laplacianMode=lscheme,
                                                        gradientMode=gscheme), f,
                                          volumes=c["vol"] if "volumes" in corr else None,
                                          crk=c["crk"] if "crk" in corr else None,
                                          omegas=(c["omegas"],) * 2 if "gradH" in corr
                                          else None,
                                          renorm=c["L"] if "renorm" in corr else None)
                assert not np.allclose(full, ref), "no pair was dropped"


@pytest.mark.parametrize("mode", [0, 1, 3, 9, 13])
def test_laplacian_operation_modes(device, mode):
    """Mixed kinds: masked query rows are exactly 0, masked references are skipped."""
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    kinds = [0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 3, 0]
    q = cloud(12, 2, dt, device, seed=3, kinds=kinds)
    f = randomField(12, (2,), dt, device, seed=1)
    c = randomCorrections(12, 12, 2, dt, device, seed=2)
    for lscheme in STATELESS_LAPLACIAN:
        corr = "volumes+gradH" if lscheme == LaplacianScheme.Naive else "crk+renorm+gradH"
        pr = props(LAP, laplacianMode=lscheme, operationMode=mode)
        out, ref = _call(q, pr, dom, f, None, None, None, corr, c)
        _assertClose(out, ref, dt, lscheme.name)
        qm = masks(mode, kinds, kinds)[0]
        zero = torch.as_tensor(~np.asarray(qm, dtype=bool), device=device)
        assert torch.equal(out[zero], torch.zeros_like(out[zero]))


def test_laplacian_periodic_seam_shift(device, dtype):
    """On a periodic box, translating the cloud across the seam (wrapped) and shifting
    particles by whole boxes (unwrapped) leave the result unchanged; both match the
    minimum-image reference."""
    dom = makeDomain(2, dtype, device, periodic=True)
    q = cloud(12, 2, dtype, device, seed=90, hMean=0.6)
    f = randomField(12, (2,), dtype, device, seed=4)
    c = randomCorrections(12, 12, 2, dtype, device, seed=15)
    L = 2.0
    shifted = torch.remainder(q.positions + 0.77 + 1.0, L) - 1.0  # across the seam, wrapped
    boxes = torch.tensor([[1.0, -2.0]], dtype=dtype, device=device) * L
    unwrapped = q.positions + boxes * (torch.arange(12, device=device)[:, None] % 3 - 1)
    for lscheme in STATELESS_LAPLACIAN:
        corr = "volumes" if lscheme == LaplacianScheme.Naive else "crk+volumes"
        pr = props(LAP, laplacianMode=lscheme, supportMode=SupportScheme.SuperSymmetric)
        base, ref = _call(q, pr, dom, f, None, None, None, corr, c)
        _assertClose(base, ref, dtype, lscheme.name)
        for pos in (shifted, unwrapped):
            p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
            out, ref2 = _call(p, pr, dom, f, None, None, neighbourStructure("csr", p, dom),
                              corr, c)
            _assertClose(out, ref2, dtype, lscheme.name)
            rtol, atol = tolerances(dtype, float(np.abs(ref).max()))
            torch.testing.assert_close(out, base, rtol=100 * rtol, atol=100 * atol)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_laplacian_calibration_factor(device, dtype, traversal):
    dom = makeDomain(3, dtype, device)
    q = cloud(10, 3, dtype, device, seed=5)
    f = randomField(10, (3,), dtype, device, seed=2)
    adj = neighbourStructure(traversal, q, dom)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 2.5, 3)
    for lscheme in STATELESS_LAPLACIAN:
        plain = warpOperation(q, props(LAP, n_h=2.5, laplacianMode=lscheme), dom, queryValues=f,
                              adjacency=adj)
        cal = warpOperation(q, props(LAP, n_h=2.5, laplacianMode=lscheme,
                                     calibrateNormalization=True), dom, queryValues=f,
                            adjacency=adj)
        rtol = 1e-6 if dtype == torch.float32 else 1e-14
        atol = rtol * float(plain.abs().max() * factor)
        torch.testing.assert_close(cal, plain * factor, rtol=rtol, atol=atol)
        ref = laplacianReference(q, dom, props(LAP, laplacianMode=lscheme), f, factor=factor,
                                 eps=1e-7 if dtype == torch.float32 else 1e-15)
        _assertClose(cal, ref, dtype, lscheme.name)


def test_laplacian_naive_ignores_crk_and_renorm(device, dim):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    q = cloud(9, dim, dt, device, seed=6)
    f = randomField(9, (dim,), dt, device, seed=5)
    c = randomCorrections(9, 9, dim, dt, device, seed=16)
    for gscheme in GradientScheme:
        pr = props(LAP, laplacianMode=LaplacianScheme.Naive, gradientMode=gscheme)
        plain = warpOperation(q, pr, dom, queryValues=f, queryVolumes=c["vol"])
        both = warpOperation(q, pr, dom, queryValues=f, queryVolumes=c["vol"],
                             crkState=CRKState(*c["crk"]), renormalizationState=c["L"])
        crkOnly = warpOperation(q, pr, dom, queryValues=f, queryVolumes=c["vol"],
                                crkState=CRKState(c["crk"][0], c["crk"][1]))  # no gradA/gradB
        assert torch.equal(plain, both) and torch.equal(plain, crkOnly)
        # ... whereas Brookshaw uses them
        prB = props(LAP, laplacianMode=LaplacianScheme.Brookshaw, gradientMode=gscheme)
        a = warpOperation(q, prB, dom, queryValues=f, queryVolumes=c["vol"])
        b = warpOperation(q, prB, dom, queryValues=f, queryVolumes=c["vol"],
                          crkState=CRKState(*c["crk"]), renormalizationState=c["L"])
        assert not torch.allclose(a, b)


def test_laplacian_symmetric_ignores_volumes(device):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    q = cloud(10, 2, dt, device, seed=4)
    f = randomField(10, (), dt, device, seed=1)
    for lscheme in (LaplacianScheme.Naive, LaplacianScheme.Default):
        pr = props(LAP, laplacianMode=lscheme, gradientMode=GradientScheme.Symmetric)
        a = warpOperation(q, pr, dom, queryValues=f)
        b = warpOperation(q, pr, dom, queryValues=f,
                          queryVolumes=torch.full((10,), 7.0, dtype=dt, device=device))
        assert torch.equal(a, b)


def test_laplacian_coincident_points(device):
    """Self pairs and a coincident distinct pair (r = 0) contribute 0 for every scheme, also
    with CRK (G(0) != 0): the result equals the reference, which skips r = 0."""
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    q = cloud(8, 2, dt, device, seed=7)
    pos = q.positions.clone()
    pos[1] = pos[0]
    p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    f = randomField(8, (2,), dt, device, seed=6)
    c = randomCorrections(8, 8, 2, dt, device, seed=17)
    for lscheme in STATELESS_LAPLACIAN:
        corr = "none" if lscheme == LaplacianScheme.Naive else "crk+renorm"
        out, ref = _call(p, props(LAP, laplacianMode=lscheme), dom, f, None, None, None, corr, c)
        assert torch.isfinite(out).all()
        _assertClose(out, ref, dt, lscheme.name)


def test_laplacian_1d_shapes(device):
    dt = torch.float64
    dom = makeDomain(1, dt, device)
    q = cloud(6, 1, dt, device, seed=1)
    f = randomField(6, (), dt, device, seed=1)
    for lscheme in STATELESS_LAPLACIAN:
        a = warpOperation(q, props(LAP, laplacianMode=lscheme), dom, queryValues=f)
        b = warpOperation(q, props(LAP, laplacianMode=lscheme), dom, queryValues=f[:, None])
        assert a.shape == (6,) and b.shape == (6, 1)
        torch.testing.assert_close(a, b[:, 0], rtol=0, atol=0)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_laplacian_empty_populations(device, traversal):
    dt = torch.float64
    dim = 2
    dom = makeDomain(dim, dt, device)
    full = cloud(5, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    for lscheme in STATELESS_LAPLACIAN:
        pr = props(LAP, laplacianMode=lscheme)
        adj = neighbourStructure(traversal, empty, dom, full)
        out = warpOperation(empty, pr, dom, queryValues=randomField(0, (dim,), dt, device, 0),
                            referenceValues=randomField(5, (dim,), dt, device, 0),
                            adjacency=adj, referenceParticles=full)
        assert out.shape == (0, dim)
        fq = randomField(5, (dim,), dt, device, seed=1).requires_grad_()
        adj = neighbourStructure(traversal, full, dom, empty)
        out = warpOperation(full, pr, dom, queryValues=fq,
                            referenceValues=randomField(0, (dim,), dt, device, 0),
                            adjacency=adj, referenceParticles=empty)
        assert out.shape == (5, dim) and torch.equal(out, torch.zeros_like(out))
        out.sum().backward()
        assert fq.grad is None or torch.equal(fq.grad, torch.zeros_like(fq))


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("dim, shape", [(2, ()), (3, ()), (2, (3,)), (3, (2, 2)), (3, (4,))])
def test_laplacian_dot_shape_errors(device, dim, shape):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    q = cloud(5, dim, dt, device, seed=1)
    f = randomField(5, shape, dt, device, seed=1)
    with pytest.raises(ValueError) as e:
        warpOperation(q, props(LAP, laplacianMode=LaplacianScheme.Dot), dom, queryValues=f)
    msg = str(e.value)
    found = f"[N, {', '.join(map(str, shape))}]" if shape else "scalar [N]"
    assert "Laplacian (Dot)" in msg and found in msg and f"{dim}D" in msg
    assert f"multiple of d = {dim}" in msg


@pytest.mark.parametrize("dim, shape", [(2, ()), (2, (2, 2)), (3, (2,)), (1, (2,)),
                                        (1, (3,))])
def test_laplacian_positive_divergence_shape_errors(device, dim, shape):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    q = cloud(5, dim, dt, device, seed=1)
    f = randomField(5, shape, dt, device, seed=1)
    for lscheme in STATELESS_LAPLACIAN:
        pr = props(LAP, laplacianMode=lscheme, positiveDivergence=True)
        with pytest.raises(ValueError) as e:
            warpOperation(q, pr, dom, queryValues=f)
        msg = str(e.value)
        if lscheme == LaplacianScheme.Dot and dim > 1 and math.prod(shape) % dim != 0:
            continue  # the Dot shape rule fires first
        found = f"[N, {', '.join(map(str, shape))}]" if shape else "scalar [N]"
        assert "positiveDivergence" in msg and found in msg and f"{dim}D" in msg
        assert f"[N, {dim}]" in msg


def test_laplacian_dot_1d_accepts_every_field(device):
    dt = torch.float64
    dom = makeDomain(1, dt, device)
    q = cloud(6, 1, dt, device, seed=2)
    pr = props(LAP, laplacianMode=LaplacianScheme.Dot)
    for shape in [(), (1,), (3,), (2, 2)]:
        f = randomField(6, shape, dt, device, seed=1)
        out = warpOperation(q, pr, dom, queryValues=f)
        assert out.shape == (6,) + shape
        _assertClose(out, laplacianReference(q, dom, pr, f), dt, str(shape))


def test_laplacian_validation(device):
    dt = torch.float64
    dom = makeDomain(2, dt, device)
    p = cloud(6, 2, dt, device, seed=0)
    nodens = ParticleState(p.positions, p.supports, p.masses, p.kinds)
    vol = torch.ones(6, dtype=dt, device=device)
    f = p.positions
    sym = props(LAP, gradientMode=GradientScheme.Symmetric)
    with pytest.raises(ValueError, match="queryParticles.densities"):
        warpOperation(nodens, sym, dom, queryValues=f, queryVolumes=vol)
    with pytest.raises(ValueError, match="densities"):
        warpOperation(nodens, props(LAP), dom, queryValues=f)
    warpOperation(nodens, props(LAP), dom, queryValues=f, queryVolumes=vol)  # fine
    A, B = torch.ones(6, dtype=dt), torch.zeros(6, 2, dtype=dt)
    with pytest.raises(ValueError, match="gradA"):
        warpOperation(p, props(LAP), dom, queryValues=f, crkState=CRKState(A, B))
    with pytest.raises(ValueError, match="Omegas"):
        warpOperation(p, props(LAP), dom, queryValues=f, gradHState=torch.ones(5, dtype=dt))
    other = cloud(7, 2, dt, device, seed=1)
    with pytest.raises(ValueError, match="both queryValues and referenceValues"):
        warpOperation(p, props(LAP), dom, referenceValues=other.positions,
                      referenceParticles=other)
