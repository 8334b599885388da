"""The float64 reference for the consistent second derivatives
(`consistent_laplacian_reference.py`): its kernel and conventions against the library, the
exactness of the consistent Hessian/Laplacian for quadratic fields (1D/2D/3D, jittered
lattices with jitter 0.3 dx, free boundaries and periodic seams), Brookshaw's failure on the
same fields, and the convergence orders on a smooth periodic 2D field.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from consistent_laplacian_reference import (
    Box,
    applyPairCoefficients,
    brookshawLaplacian,
    brookshawPairCoefficients,
    consistentHessian,
    consistentLaplacian,
    findPairs,
    fitOrder,
    gradW,
    jitteredLattice,
    laplacianPairCoefficients,
    renormalizationMatrices,
    renormalizedGradient,
    shepardVolumes,
    wendland2,
    wendland2Derivative,
)

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationProperties,
    ParticleState,
    WarpOperation,
)
from warpSPHCore.corrections import computeRenormalizationMatrices
from warpSPHCore.kernels.constants import C_D
from warpSPHCore.kernels.hostShapes import hostShape
from warpSPHCore.neighborhood import radiusSearchCompactHashMap
from warpSPHCore.operations import warpOperation

F64 = torch.float64
#: particles per axis of the quadratic cases
NQUAD = {1: 40, 2: 14, 3: 7}


def _randomQuadratic(rng, d, F=None):
    """``f(x) = c + g·x + ½ xᵀHx`` (per component when F is given) and its Hessian."""
    shape = () if F is None else (F,)
    A = rng.normal(size=shape + (d, d))
    H = A + np.swapaxes(A, -1, -2)
    g = rng.normal(size=shape + (d,))
    c = rng.normal(size=shape)

    def f(x):
        return c + np.einsum("...a,na->n...", g, x) + 0.5 * np.einsum(
            "na,...ab,nb->n...", x, H, x)

    return f, H


def _quadraticCase(d, boundary, seed):
    """Particles, volumes, support, domain and the coordinates the field is evaluated at.

    ``free``: a jittered lattice of [0, 1]^d, no periodicity. ``periodic``: the same lattice
    shifted to straddle the corner of the periodic box [0, 1.6)^d (wrapped into the box), with
    the field evaluated at the unwrapped coordinates, so every pair across the seam needs the
    minimum image. ``mixed`` (2D): periodic in x only.
    """
    rng = np.random.default_rng(seed)
    x, dx, h = jitteredLattice(NQUAD[d], d, jitter=0.3, hOverDx=2.5, seed=seed)
    if boundary == "free":
        return x, x, dx, h, None, rng
    periodic = np.ones(d, bool) if boundary == "periodic" else np.array([True, False])
    unwrapped = x - 0.5 * periodic  # the cloud covers [-0.5, 0.5] on periodic axes
    box = Box(np.zeros(d), np.full(d, 1.6), periodic)
    stored = np.where(periodic, np.mod(unwrapped, 1.6), unwrapped)
    return stored, unwrapped, dx, h, box, rng


CASES = [(d, b) for d in (1, 2, 3) for b in ("free", "periodic")] + [(2, "mixed")]


@pytest.mark.parametrize("d,boundary", CASES, ids=[f"{d}D-{b}" for d, b in CASES])
def test_quadratic_fields_are_reproduced(d, boundary):
    x, xu, dx, h, box, rng = _quadraticCase(d, boundary, seed=10 * d + len(boundary))
    V = dx**d * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, len(x)))  # any positive volumes
    pairs = findPairs(x, h, box)
    for _ in range(3):
        f, H = _randomQuadratic(rng, d)
        fv = f(xu)
        Hn, diag = consistentHessian(x, V, h, fv, box, pairs, returnDiagnostics=True)
        lap = consistentLaplacian(x, V, h, fv, box, pairs)
        scale = np.abs(H).max()
        assert diag["exact"].all()
        assert Hn.shape == (len(x), d, d)
        assert np.abs(Hn - H).max() < 1e-8 * scale
        assert lap.shape == (len(x),)
        assert np.abs(lap - np.trace(H)).max() < 1e-8 * scale
        assert np.abs(lap - np.trace(Hn, axis1=-2, axis2=-1)).max() < 1e-9 * scale
        # Brookshaw (plain and renormalized) on the same field: errors of order one or more
        L = renormalizationMatrices(x, V, h, box, pairs)
        for Lb in (None, L):
            br = brookshawLaplacian(x, V, h, fv, box, L=Lb, pairs=pairs)
            assert np.abs(br - np.trace(H)).max() > 0.1 * scale


def test_vector_field_shapes_and_exactness():
    d, F = 2, 3
    x, xu, dx, h, box, rng = _quadraticCase(d, "periodic", seed=5)
    V = np.full(len(x), dx**d)
    f, H = _randomQuadratic(rng, d, F)
    fv = f(xu)
    assert fv.shape == (len(x), F)
    Hn = consistentHessian(x, V, h, fv, box)
    lap = consistentLaplacian(x, V, h, fv, box)
    assert Hn.shape == (len(x), F, d, d) and lap.shape == (len(x), F)
    assert np.abs(Hn - H).max() < 1e-8 * np.abs(H).max()
    assert np.abs(lap - np.trace(H, axis1=-2, axis2=-1)).max() < 1e-8 * np.abs(H).max()
    assert brookshawLaplacian(x, V, h, fv, box).shape == (len(x), F)


@pytest.mark.parametrize("d", (2, 3))
def test_single_pair_pass_forms_agree(d):
    """``Σ_j a_ij (f_j − f_i)`` (what a one-pass Warp kernel computes after the geometry pass)
    equals the staged evaluation, for the consistent scheme and for Brookshaw."""
    x, xu, dx, h, box, rng = _quadraticCase(d, "periodic", seed=7 + d)
    V = dx**d * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, len(x)))
    pairs = findPairs(x, h, box)
    f = np.sin(3.0 * xu[:, 0]) * np.exp(xu[:, -1]) + xu[:, 0] ** 3
    ref = consistentLaplacian(x, V, h, f, box, pairs)
    p, a = laplacianPairCoefficients(x, V, h, box, pairs)
    assert np.allclose(applyPairCoefficients(p, a, f), ref, rtol=1e-9,
                       atol=1e-10 * np.abs(ref).max())
    L = renormalizationMatrices(x, V, h, box, pairs)
    for Lb in (None, L):
        ref = brookshawLaplacian(x, V, h, f, box, L=Lb, pairs=pairs)
        p, a = brookshawPairCoefficients(x, V, h, box, pairs, L=Lb)
        assert np.allclose(applyPairCoefficients(p, a, f), ref, rtol=1e-12,
                           atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("d", (1, 2, 3))
def test_renormalized_gradient_is_exact_for_linear_fields(d):
    x, xu, dx, h, box, rng = _quadraticCase(d, "periodic", seed=d)
    V = dx**d * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, len(x)))
    g = rng.normal(size=d)
    grad = renormalizedGradient(x, V, h, xu @ g + 0.3, box)
    assert grad.shape == (len(x), d)
    assert np.abs(grad - g).max() < 1e-10 * np.abs(g).max()


@pytest.mark.parametrize("d", (1, 2, 3))
def test_wendland2_is_the_library_kernel(d):
    h = 0.37
    r = np.linspace(0.0, 1.2 * h, 241)
    expected = C_D[KernelFunctions.Wendland2][d - 1] * hostShape(
        KernelFunctions.Wendland2, r / h, d) / h**d
    assert np.allclose(wendland2(r, h, d), expected, rtol=1e-14, atol=0.0)
    # dW/dr against central differences, and the unit normalisation (radial quadrature)
    rr, e = np.linspace(0.01 * h, 0.99 * h, 50), 1e-6 * h
    fd = (wendland2(rr + e, h, d) - wendland2(rr - e, h, d)) / (2.0 * e)
    assert np.allclose(wendland2Derivative(rr, h, d), fd, rtol=1e-6, atol=1e-8 / h ** (d + 1))
    s = np.linspace(0.0, h, 20001)
    shell = (2.0, 2.0 * math.pi * s, 4.0 * math.pi * s**2)[d - 1]
    assert abs(np.trapezoid(shell * wendland2(s, h, d), s) - 1.0) < 1e-6
    # ∇W points along x_ij with dW/dr, and vanishes at r = 0
    xij = np.array([[0.1, -0.05, 0.02][:d], [0.0] * d])
    G = gradW(xij, h, d)
    rn = np.linalg.norm(xij[0])
    assert np.allclose(G[0], xij[0] / rn * wendland2Derivative(rn, h, d), rtol=1e-14)
    assert np.all(G[1] == 0.0)


def test_brookshaw_and_renormalization_match_the_library():
    """Pins the conventions (x_ij = x_i − x_j, C_i, L_i, the Brookshaw factor) against the
    library's Laplacian and `computeRenormalizationMatrices` on a periodic 2D set."""
    x, dx, h = jitteredLattice(12, 2, jitter=0.3, hOverDx=2.5, seed=4)
    box = Box(np.zeros(2), np.ones(2), np.array([True, True]))
    rng = np.random.default_rng(4)
    V = dx * dx * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, len(x)))
    f = np.sin(2 * np.pi * x[:, 0]) + x[:, 1] ** 2
    N = len(x)
    t = lambda a: torch.tensor(a, dtype=F64)  # noqa: E731
    p = ParticleState(t(x), torch.full((N,), h, dtype=F64), t(V), torch.zeros(N, dtype=torch.int32),
                      torch.ones(N, dtype=F64))
    dom = DomainDescription(t(box.lo), t(box.hi), [True, True])
    adj = radiusSearchCompactHashMap(p, dom)

    def props(op):
        return OperationProperties(KernelFunctions.Wendland2, operation=op,
                                   gradientMode=GradientScheme.Difference,
                                   laplacianMode=LaplacianScheme.Brookshaw)

    _, _, Lstate = computeRenormalizationMatrices(p, props(WarpOperation.Gradient), dom,
                                                  referenceVolumes=t(V), adjacency=adj)
    Llib = Lstate.renormalizationMatrices.numpy()
    L = renormalizationMatrices(x, V, h, box)
    assert np.allclose(L, Llib, rtol=1e-10, atol=1e-12 * np.abs(L).max())
    for Lref, state in ((None, None), (L, Lstate)):
        lib = warpOperation(p, props(WarpOperation.Laplacian), dom, queryValues=t(f),
                            adjacency=adj, referenceVolumes=t(V), renormalizationState=state)
        ref = brookshawLaplacian(x, V, h, f, box, L=Lref)
        assert np.allclose(ref, lib.numpy(), rtol=1e-10, atol=1e-10 * np.abs(ref).max())


def test_convergence_orders_on_a_periodic_field():
    """f = sin(2πx) cos(2πy) on [0, 1)², jitter 0.3 dx, h = 2.5 dx, V = 1/ΣW, n = 16, 24, 32:
    the consistent Laplacian converges at order ≥ 1 (RMS and max); Brookshaw diverges."""
    box = Box(np.zeros(2), np.ones(2), np.array([True, True]))
    k = 2.0 * np.pi
    dxs, errs = [], {"consistent": [], "Brookshaw": []}
    for n in (16, 24, 32):
        x, dx, h = jitteredLattice(n, 2, jitter=0.3, hOverDx=2.5, seed=0)
        pairs = findPairs(x, h, box)
        V = shepardVolumes(x, h, box, pairs)
        f = np.sin(k * x[:, 0]) * np.cos(k * x[:, 1])
        exact = -2.0 * k * k * f
        dxs.append(dx)
        for name, out in (("consistent", consistentLaplacian(x, V, h, f, box, pairs)),
                          ("Brookshaw", brookshawLaplacian(x, V, h, f, box, pairs=pairs))):
            e = out - exact
            errs[name].append((np.sqrt(np.mean(e**2)) / np.sqrt(np.mean(exact**2)),
                               np.abs(e).max() / np.abs(exact).max()))
    cons, brook = np.array(errs["consistent"]), np.array(errs["Brookshaw"])
    assert fitOrder(dxs, cons[:, 0]) >= 1.0 and fitOrder(dxs, cons[:, 1]) >= 1.0
    assert cons[-1, 0] < 0.02
    assert fitOrder(dxs, brook[:, 0]) < 0.0 and fitOrder(dxs, brook[:, 1]) < 0.0
    assert brook[-1, 0] > 10.0 * cons[-1, 0]
