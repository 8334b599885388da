"""Curl forward values against the independent
float64 reference `sph_reference.curlReference` (Levi-Civita contraction), and Curl shape
validation.

Brute force: 4 gradient schemes x corrections {none, volumes, grad-h, CRK, renorm,
CRK+renorm} in 2D/3D x float32/float64 x CSR / grid / on-the-fly traversal x open/periodic;
vector, matrix and non-square fields (P != d) and the reference set (aliased / distinct)
cycled. 1D: zeros of shape [N] with zero gradients (the kernel writes them, so backward runs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    curlReference,
    makeDomain,
    neighbourStructure,
    props,
    randomCorrections,
    tolerances,
)
from test_divergence import (
    _testVectorState,
    queryOmegas,
    randomField,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation

CURL = WarpOperation.Curl
TV_CURL = [[-2.1391872937], [7.1792366123], [3.3338272802], [-0.5268137343]]
SUPPORTS = list(SupportScheme)
CORRECTIONS = ("none", "volumes", "gradH", "crk", "renorm", "crk+renorm")


def fieldShapes(dim):
    return [(dim,), (dim, dim), (dim, 3 if dim == 2 else 2)]


def outputShape(shape, dim):
    if dim == 1:
        return ()
    if dim == 2:
        return shape[1:] if len(shape) > 1 else (1,)
    return shape


def _call(q, pr, dom, fq, fr, reference, adj, corr, c):
    vol = c["vol"] if "volumes" in corr else None
    crk = c["crk"] if "crk" in corr else None
    L = c["L"] if "renorm" in corr else None
    nq = q.positions.shape[0]
    gh, om = None, None
    if "gradH" in corr:
        if reference is None:
            om = (c["omegas"], c["omegas"])
            gh = c["omegas"]
        else:
            om = (queryOmegas(nq, c["omegas"].dtype, c["omegas"].device), c["omegas"])
            gh = om
    out = warpOperation(q, pr, dom, queryValues=fq, referenceValues=fr, referenceVolumes=vol,
                        adjacency=adj, referenceParticles=reference,
                        crkState=None if crk is None else CRKState(*crk), gradHState=gh,
                        renormalizationState=L)
    ref = curlReference(q, dom, pr, fq, fr, reference, vol, crk, om, L)
    return out, ref


def test_curl_test_vector(device):
    p, dom, g = _testVectorState(device)
    pr = props(CURL, gradientMode=GradientScheme.Difference)
    out = warpOperation(p, pr, dom, queryValues=g)
    assert out.shape == (4, 1)
    np.testing.assert_allclose(out.cpu().numpy(), TV_CURL, rtol=0, atol=2e-9)
    ref = curlReference(p, dom, pr, g)
    np.testing.assert_allclose(ref, TV_CURL, rtol=0, atol=2e-9)
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)
    # direct evaluation: curl_i = sum_j (dW_x c_y - dW_y c_x), c = (g_j - g_i) m_j / rho_j,
    # Wendland2 2D under Gather, dW = sigma/h^3 (-20 q (1 - q)^3) x / r
    x, h = p.positions.cpu().numpy(), p.supports.cpu().numpy()
    m, rho, f = p.masses.cpu().numpy(), p.densities.cpu().numpy(), g.cpu().numpy()
    direct = np.zeros(4)
    for i in range(4):
        for j in range(4):
            xij = x[i] - x[j]
            r = np.linalg.norm(xij)
            qq = r / h[i]
            if r > 0.0 and qq < 1.0:
                G = 7.0 / np.pi / h[i] ** 3 * (-20.0 * qq * (1.0 - qq) ** 3) * xij / r
                cij = (f[j] - f[i]) * m[j] / rho[j]
                direct[i] += G[0] * cij[1] - G[1] * cij[0]
    np.testing.assert_allclose(direct, np.asarray(TV_CURL)[:, 0], rtol=0, atol=2e-9)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("periodic", [False, True], ids=["open", "periodic"])
@pytest.mark.parametrize("dim", [2, 3], ids=["2d", "3d"])
def test_curl_brute_force(device, dtype, dim, traversal, periodic):
    n = 10
    dom = makeDomain(dim, dtype, device, periodic=periodic)
    hMean = 0.6 if periodic else None
    q = cloud(n, dim, dtype, device, seed=40 + dim, hMean=hMean)
    r = cloud(n + 2, dim, dtype, device, seed=50 + dim, hMean=hMean)
    sets = []
    for reference in (None, r):
        nr = n if reference is None else n + 2
        sets.append((reference, nr, randomCorrections(n, nr, dim, dtype, device, seed=13),
                     neighbourStructure(traversal, q, dom, reference)))
    shapes = fieldShapes(dim)
    count = TRAVERSALS.index(traversal) + 3 * int(periodic)
    for _rep in range(2):
        for scheme in GradientScheme:
            for corr in CORRECTIONS:
                reference, nr, c, adj = sets[(count // len(shapes)) % 2]
                shape = shapes[count % len(shapes)]
                fr = randomField(nr, shape, dtype, device, seed=count)
                fq = fr if reference is None else randomField(n, shape, dtype, device,
                                                              seed=count + 500)
                pr = props(CURL, gradientMode=scheme, supportMode=SUPPORTS[count % len(SUPPORTS)])
                count += 1
                out, ref = _call(q, pr, dom, fq, fr if reference is not None else None,
                                 reference, adj, corr, c)
                assert out.shape == (n,) + outputShape(shape, dim) and out.dtype == dtype
                rtol, atol = tolerances(dtype, float(np.abs(ref).max()))
                np.testing.assert_allclose(
                    out.cpu().double().numpy(), ref, rtol=rtol, atol=atol,
                    err_msg=f"{scheme.name} {pr.supportMode.name} S={shape} {corr} "
                            f"ref={reference is not None}")


def test_curl_3d_vector_is_cross_product(device):
    """3D vector: out_i = sum_j G_ij x c_ij, checked with torch.linalg.cross on the
    reference's own G and c (layout [N, 3]); 3D matrix: column-wise ([N, 3, 3])."""
    dt = torch.float64
    dom = makeDomain(3, dt, device)
    q = cloud(8, 3, dt, device, seed=9)
    f = randomField(8, (3, 3), dt, device, seed=2)
    pr = props(CURL, gradientMode=GradientScheme.Summation)
    full = warpOperation(q, pr, dom, queryValues=f)
    assert full.shape == (8, 3, 3)
    for s in range(3):
        col = warpOperation(q, pr, dom, queryValues=f[:, :, s].contiguous())
        assert col.shape == (8, 3)
        torch.testing.assert_close(full[:, :, s], col, rtol=1e-13, atol=1e-13)


# float32 1D compiles a kernel overload used by nothing else in the default run: slow only.
@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, marks=pytest.mark.slow),
                                   torch.float64], ids=["f32", "f64"])
def test_curl_1d_zeros_and_backward(device, dtype):
    dom = makeDomain(1, dtype, device)
    q = cloud(6, 1, dtype, device, seed=1)
    pos = q.positions.clone().requires_grad_()
    h = q.supports.clone().requires_grad_()
    p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
    for shape in ((), (1,)):
        f = randomField(6, shape, dtype, device, seed=1).requires_grad_()
        for scheme in GradientScheme:
            out = warpOperation(p, props(CURL, gradientMode=scheme), dom, queryValues=f,
                                crkState=CRKState(*randomCorrections(6, 6, 1, dtype, device,
                                                                     seed=3)["crk"]))
            assert out.shape == (6,) and out.dtype == dtype
            assert torch.equal(out, torch.zeros_like(out))
            out.sum().backward()
            for t in (pos, h, f):
                assert t.grad is None or torch.equal(t.grad, torch.zeros_like(t))


@pytest.mark.parametrize("mode", [0, 1, 9, 12, 13])
def test_curl_operation_modes(device, mode):
    dt = torch.float64
    dom = makeDomain(3, dt, device)
    kinds = [0, 1, 2, 3, 0, 1, 2, 0, 0, 1]
    q = cloud(10, 3, dt, device, seed=3, kinds=kinds)
    f = randomField(10, (3,), dt, device, seed=1)
    c = randomCorrections(10, 10, 3, dt, device, seed=2)
    for scheme in GradientScheme:
        pr = props(CURL, gradientMode=scheme, operationMode=mode)
        out, ref = _call(q, pr, dom, f, None, None, None, "crk+renorm+volumes+gradH", c)
        np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)
        zeroRows = torch.as_tensor(np.all(ref == 0.0, axis=1))
        assert torch.equal(out[zeroRows], torch.zeros_like(out[zeroRows]))


def test_curl_calibration_factor(device, dtype):
    dom = makeDomain(2, dtype, device)
    q = cloud(12, 2, dtype, device, seed=5)
    f = randomField(12, (2, 2), dtype, device, seed=2)
    factor = latticeDensityFactor(KernelFunctions.Wendland2, 2.5, 2)
    plain = warpOperation(q, props(CURL, n_h=2.5), dom, queryValues=f)
    cal = warpOperation(q, props(CURL, n_h=2.5, calibrateNormalization=True), dom,
                        queryValues=f)
    rtol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(cal, plain * factor, rtol=rtol,
                               atol=1e-6 if rtol > 1e-10 else 1e-15)


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_curl_periodic_seam_shift(device, traversal):
    dt = torch.float64
    dom = makeDomain(2, dt, device, periodic=True)
    q = cloud(12, 2, dt, device, seed=8, hMean=0.6)
    f = randomField(12, (2,), dt, device, seed=3)
    pr = props(CURL, gradientMode=GradientScheme.Difference)
    base = warpOperation(q, pr, dom, queryValues=f,
                         adjacency=neighbourStructure(traversal, q, dom))
    wrapped = torch.remainder(q.positions + torch.tensor([0.73, -0.41], dtype=dt,
                                                         device=device) + 1.0, 2.0) - 1.0
    s = ParticleState(wrapped, q.supports, q.masses, q.kinds, q.densities)
    out = warpOperation(s, pr, dom, queryValues=f, adjacency=neighbourStructure(traversal, s,
                                                                                dom))
    torch.testing.assert_close(out, base, rtol=1e-11, atol=1e-12)
    assert base.abs().max() > 0


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_curl_empty_populations(device, dim):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    full = cloud(5, dim, dt, device, seed=1)
    empty = cloud(0, dim, dt, device, seed=1)
    shape = (dim,)
    out = warpOperation(empty, props(CURL), dom, queryValues=randomField(0, shape, dt, device, 0),
                        referenceValues=randomField(5, shape, dt, device, 0),
                        referenceParticles=full)
    assert out.shape == (0,) + outputShape(shape, dim)
    out = warpOperation(full, props(CURL), dom, queryValues=randomField(5, shape, dt, device, 1),
                        referenceValues=randomField(0, shape, dt, device, 0),
                        referenceParticles=empty)
    assert out.shape == (5,) + outputShape(shape, dim) and torch.equal(out, torch.zeros_like(out))


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_curl_shape_errors(device, dim):
    dt = torch.float64
    dom = makeDomain(dim, dt, device)
    p = cloud(6, dim, dt, device, seed=0)
    bad = [(2,), (1, 2), (2, 1)] if dim == 1 else [(), (dim + 1,), (4, dim), (dim + 1, dim)]
    for shape in bad:
        with pytest.raises(ValueError) as info:
            warpOperation(p, props(CURL), dom, queryValues=randomField(6, shape, dt, device, 0))
        msg = str(info.value)
        found = f"[N, {', '.join(map(str, shape))}]" if shape else "scalar [N]"
        assert "Curl" in msg and f"{dim}D" in msg and "accepted" in msg and found in msg, msg
