"""Lattice calibration and the host shape functions.

References are written here independently: the 1/L tables, brute-force lattice sums
over Z^d with test-local shape functions, closed-form Fourier transforms and lattice zeta
values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from warpSPHCore.enumTypes import KernelFunctions as K
from warpSPHCore.kernels import lattice as latticeModule
from warpSPHCore.kernels.hostShapes import hostShape, hostShapeKnots
from warpSPHCore.kernels.lattice import (
    epsteinZeta,
    jacobiR2,
    kernelFourierTransform,
    latticeDensity,
    latticeDensityClosed,
    latticeDensityFactor,
    latticeDensityFourier,
    latticeDensityIsStrictlyAbove1,
    latticeDensityShells,
    shellCounts,
)

PI = math.pi
WENDLAND = (K.Wendland2, K.Wendland4, K.Wendland6)
UNDEFINED = (K.ViscosityKernel, K.AdhesionKernel)
CALIBRATABLE = tuple(k for k in K if k not in UNDEFINED)

# --------------------------------------------------------------------------------------
# independent test-local shape functions and C_d


def _p(a):
    return np.maximum(a, 0.0)


def refShape(kernel, q, d):
    q = np.asarray(q, dtype=np.float64)
    if kernel == K.Wendland2:
        k = _p(1 - q) ** 3 * (1 + 3 * q) if d == 1 else _p(1 - q) ** 4 * (1 + 4 * q)
    elif kernel == K.Wendland4:
        k = (_p(1 - q) ** 5 * (1 + 5 * q + 8 * q * q) if d == 1
             else _p(1 - q) ** 6 * (1 + 6 * q + 35 / 3 * q * q))
    elif kernel == K.CubicSpline:
        k = _p(1 - q) ** 3 - 4 * _p(0.5 - q) ** 3
    elif kernel == K.Gaussian:
        k = np.exp(-128 * q * q)
    elif kernel == K.HOCT4:
        a, P, Q = 0.214108111463, -2.154228492776, 0.981018558675
        outer = _p(1 - q) ** 4 + 3.2 * _p(0.75 - q) ** 4 - 18.8 * _p(0.5 - q) ** 4
        k = np.where(q <= a, P * q + Q, outer)
    elif kernel == K.Poly6:
        k = (1 - q * q) ** 3
    elif kernel == K.CohesionKernel:
        base = (1 - q) ** 3 * q**3
        k = np.where(q < 0.5, 2 * base - 1 / 64, base)
    else:
        raise NotImplementedError(kernel)
    return np.where(q > 1, 0.0, k)


REF_C = {
    K.Wendland2: (5 / 4, 7 / PI, 21 / (2 * PI)),
    K.Wendland4: (3 / 2, 9 / PI, 495 / (32 * PI)),
    K.CubicSpline: (8 / 3, 80 / (7 * PI), 16 / PI),
    K.Gaussian: ((128 / PI) ** 0.5, 128 / PI, (128 / PI) ** 1.5),
    K.HOCT4: (2.0684349363, 3.7158334191, 6.5150499306),
    K.Poly6: (35 / 32, 4 / PI, 315 / (64 * PI)),
    K.CohesionKernel: (32 / PI, 32 / PI, 32 / PI),
}


def bruteForceL(kernel, n_h, d):
    """(C_d / n_h^d) Σ_{n ∈ Z^d, |n| ≤ n_h} k(|n|/n_h) by enumerating a cube of Z^d."""
    R = int(math.floor(n_h)) + 1
    g = np.arange(-R, R + 1)
    pts = np.stack(np.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)
    r = np.sqrt((pts.astype(np.float64) ** 2).sum(1))
    return REF_C[kernel][d - 1] / n_h**d * refShape(kernel, r / n_h, d).sum()


# --------------------------------------------------------------------------------------
# reference tables of 1/L

TABLE = {
    (K.Wendland2, 1): (0.984615385, 0.996923077, 0.999024390),
    (K.Wendland2, 2): (0.963760869, 0.994883968, 0.998795656),
    (K.Wendland2, 3): (0.967264847, 0.996868753, 0.999451684),
    (K.Wendland4, 1): (0.992248062, 0.999314599, 0.999877945),
    (K.Wendland4, 2): (0.956173201, 0.997029161, 0.999584422),
    (K.Wendland4, 3): (0.937510324, 0.997110136, 0.999694198),
    (K.CubicSpline, 2): (0.999138909, 0.996571399, 1.000042389),
    (K.HOCT4, 1): (0.854906069, 0.926773490, 0.955086571),
    (K.HOCT4, 2): (0.821423296, 0.941725734, 0.971792770),
    (K.HOCT4, 3): (0.806764600, 0.962171307, 0.985438725),
    (K.Gaussian, 1): (0.313328534, 0.469992176, 0.626236910),
    (K.Gaussian, 2): (0.098174770, 0.220892645, 0.392172668),
    (K.Gaussian, 3): (0.030760957, 0.103817815, 0.245593000),
}
TABLE_CASES = [(k, d, n_h, v) for (k, d), row in TABLE.items() for n_h, v in zip((2, 3, 4), row)]


@pytest.mark.parametrize(
    "kernel,d,n_h,expected", TABLE_CASES, ids=[f"{k.name}-{d}d-nh{n}" for k, d, n, _ in TABLE_CASES]
)
def test_factor_reference_table(kernel, d, n_h, expected):
    assert abs(latticeDensityFactor(kernel, n_h, d) - expected) <= 1e-9
    assert abs(1.0 / latticeDensity(kernel, float(n_h), d) - expected) <= 1e-9


def test_factor_wendland2_2d_non_integer_n_h():
    assert abs(latticeDensityFactor(K.Wendland2, 4.5, 2) - 0.9992570437) <= 1e-9


# --------------------------------------------------------------------------------------
# shells against brute force; calibrated lattice density equals rho0


@pytest.mark.parametrize("kernel", list(REF_C), ids=lambda k: k.name)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_shells_match_brute_force(kernel, d):
    for n_h in (0.7, 1.0, 1.5, 2.0, math.sqrt(5.0), 2.9, 3.0, 4.25):
        ref = bruteForceL(kernel, n_h, d)
        assert latticeDensityShells(kernel, n_h, d) == pytest.approx(ref, rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("kernel", [K.Wendland2, K.Wendland4, K.CubicSpline, K.HOCT4, K.Poly6],
                         ids=lambda k: k.name)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_calibrated_periodic_lattice_density_equals_rho0(kernel, d):
    """Host version of the Density check: a periodic cubic lattice with
    spacing s, masses rho0 s^d and h = n_h s < box/2 gives rho0 after calibration."""
    s, rho0, n_h = 0.1, 1000.0, 2.6
    M = 8 if d < 3 else 7  # particles per axis; box = M s > 2 h
    box = M * s
    h = n_h * s
    grid = np.arange(M) * s
    pts = np.stack(np.meshgrid(*([grid] * d), indexing="ij"), -1).reshape(-1, d)
    for i in (0, len(pts) // 2 + 1):
        delta = pts - pts[i]
        delta -= box * np.round(delta / box)  # minimum image
        r = np.sqrt((delta**2).sum(1))
        W = REF_C[kernel][d - 1] * refShape(kernel, r / h, d) / h**d
        rho = (rho0 * s**d * W).sum()
        assert latticeDensityFactor(kernel, n_h, d) * rho == pytest.approx(rho0, rel=1e-12)


# --------------------------------------------------------------------------------------
# shell counts


def test_shell_counts_match_enumeration():
    jmax = 200
    for d in (1, 2, 3):
        R = math.isqrt(jmax)
        g = np.arange(-R, R + 1)
        pts = np.stack(np.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)
        j = (pts**2).sum(1)
        ref = np.bincount(j[j <= jmax], minlength=jmax + 1)
        got = shellCounts(jmax, d)
        assert got.dtype == np.int64 and got.shape == (jmax + 1,)
        np.testing.assert_array_equal(got, ref)


def test_jacobi_r2_matches_shell_counts():
    jmax = 2000
    counts = shellCounts(jmax, 2)
    assert [jacobiR2(j) for j in range(jmax + 1)] == counts.tolist()
    np.testing.assert_array_equal(jacobiR2(np.arange(jmax + 1)), counts)
    assert jacobiR2(0) == 1 and jacobiR2(1) == 4 and jacobiR2(3) == 0 and jacobiR2(25) == 12


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_shell_helpers_validate(bad):
    with pytest.raises(ValueError):
        shellCounts(bad, 2)
    with pytest.raises(ValueError):
        jacobiR2(bad)


def test_shell_counts_validate_dimension():
    for d in (0, 4, 2.0):
        with pytest.raises(ValueError):
            shellCounts(10, d)


# --------------------------------------------------------------------------------------
# Fourier transform and the Poisson-sum cross-check


@pytest.mark.parametrize("d", [1, 2, 3])
def test_fourier_transform_of_gaussian(d):
    # C_d exp(-128 r^2) truncated at r = 1 (truncation ~ e^-128): FT = exp(-s^2 / 512)
    s = np.concatenate([[0.0], np.linspace(0.5, 150.0, 37)])
    np.testing.assert_allclose(
        kernelFourierTransform(K.Gaussian, s, d), np.exp(-s * s / 512.0), rtol=0, atol=2e-14
    )


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("kernel", [K.Wendland2, K.CubicSpline, K.HOCT4], ids=lambda k: k.name)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_fourier_transform_matches_scipy_quadrature(kernel, d):
    integrate = pytest.importorskip("scipy.integrate")
    special = pytest.importorskip("scipy.special")
    C = REF_C[kernel][d - 1]
    knots = {K.CubicSpline: [0.5], K.HOCT4: [0.214108111463, 0.5, 0.75]}.get(kernel, [])

    def integrand(r, s):
        base = C * refShape(kernel, r, d)
        if d == 1:
            return 2 * base * np.cos(s * r)
        if d == 2:
            return 2 * PI * base * special.j0(s * r) * r
        return 4 * PI * base * r * r * np.sinc(s * r / PI)

    for s in (0.0, 3.7, 25.0, 90.0):
        ref, _ = integrate.quad(integrand, 0.0, 1.0, args=(s,), points=knots or None, limit=500,
                                epsabs=1e-14, epsrel=1e-12)
        got = float(kernelFourierTransform(kernel, s, d))
        assert got == pytest.approx(ref, rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("kernel", [k for k in CALIBRATABLE if k != K.CohesionKernel],
                         ids=lambda k: k.name)
def test_fourier_transform_at_zero_is_the_integral(kernel):
    for d in (1, 2, 3):
        # 1e-10: HOCT4's C_d is published to 10 digits (its published normalisation)
        assert float(kernelFourierTransform(kernel, 0.0, d)) == pytest.approx(1.0, abs=1e-10)


def test_fourier_transform_shape_and_validation():
    s = np.linspace(0.0, 10.0, 12).reshape(3, 4)
    out = kernelFourierTransform(K.Wendland2, s, 2)
    assert out.shape == (3, 4) and out.dtype == np.float64
    np.testing.assert_array_equal(kernelFourierTransform(K.Wendland2, -s, 2), out)
    for kernel in UNDEFINED:
        with pytest.raises(ValueError, match="undefined"):
            kernelFourierTransform(kernel, 1.0, 3)
    with pytest.raises(ValueError):
        kernelFourierTransform(K.Wendland2, [np.nan], 3)


# documented agreement with shells for n_h in [1.3, 6] (lattice.py module docstring)
FOURIER_TOL = {
    K.Wendland2: 5e-5,
    K.CohesionKernel: 1.5e-5,
    K.Poly6: 5e-6,
    K.CubicSpline: 5e-6,
    K.QuarticSpline: 5e-6,
    K.Wendland4: 5e-7,
    K.Wendland6: 1e-8,
    K.QuinticSpline: 5e-8,
    K.B7: 1e-8,
    K.B8: 1e-8,
    K.Gaussian: 1e-13,
    K.Spiky: 6e-2,
    K.HOCT4: 6e-2,
}


@pytest.mark.parametrize("kernel", list(FOURIER_TOL), ids=lambda k: k.name)
def test_fourier_agrees_with_shells(kernel):
    for d in (1, 2, 3):
        for n_h in (1.3, 2.0, 3.5, 6.0):
            diff = latticeDensityFourier(kernel, n_h, d) - latticeDensityShells(kernel, n_h, d)
            assert abs(diff) <= FOURIER_TOL[kernel], (d, n_h, diff)


def test_fourier_truncation_converges():
    ref = latticeDensityShells(K.Wendland2, 2.0, 3)
    errs = [abs(latticeDensityFourier(K.Wendland2, 2.0, 3, sMax=s) - ref) for s in (50, 150, 400)]
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 2e-6


# --------------------------------------------------------------------------------------
# Epstein zeta and the closed (Wendland-only) form


def test_epstein_zeta_known_values():
    # 1D: 2 zeta(s); 2D: 4 zeta(2) G (Catalan) for s = 4 (Σ r_2(j) j^-σ = 4 ζ(σ) β(σ))
    assert epsteinZeta(4, 1) == pytest.approx(2 * PI**4 / 90, rel=1e-13)
    assert epsteinZeta(6, 1) == pytest.approx(2 * PI**6 / 945, rel=1e-13)
    catalan = 0.915965594177219015054603514932
    assert epsteinZeta(4, 2) == pytest.approx(4 * (PI**2 / 6) * catalan, rel=1e-13)
    # large s: dominated by the 2d nearest lattice points
    assert epsteinZeta(60, 3) == pytest.approx(6 + 12 * 2.0**-30, rel=1e-14)
    assert epsteinZeta(30, 3) == pytest.approx(
        6 + 12 * 2.0**-15 + 8 * 3.0**-15 + 6 * 4.0**-15 + 24 * 5.0**-15 + 24 * 6.0**-15
        + 12 * 8.0**-15 + 30 * 9.0**-15, rel=1e-14)
    # the two evaluation branches (theta splitting below s = 2d + 30, direct sum above) agree
    assert epsteinZeta(36.0 - 1e-9, 3) == pytest.approx(epsteinZeta(36.0, 3), rel=1e-12)


@pytest.mark.parametrize("d,s", [(2, 5.0), (2, 7.0), (3, 4.0), (3, 6.0), (3, 8.0)])
def test_epstein_zeta_brute_force(d, s):
    """Direct sum over |m| <= R plus the continuum tail S_{d-1} R^(d-s)/(s-d)."""
    R = 300 if d == 2 else 70
    g = np.arange(-R, R + 1, dtype=np.float64)
    pts = np.stack(np.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)
    r2 = (pts**2).sum(1)
    r2 = r2[(r2 > 0) & (r2 <= R * R)]
    sphere = 2 * PI if d == 2 else 4 * PI
    ref = (r2 ** (-s / 2)).sum() + sphere * R ** (d - s) / (s - d)
    assert epsteinZeta(s, d) == pytest.approx(ref, rel=2e-6)


def test_epstein_zeta_validates():
    for s, d in ((3.0, 3), (2.0, 2), (0.5, 1), (-1.0, 2), (math.inf, 2)):
        with pytest.raises(ValueError):
            epsteinZeta(s, d)


@pytest.mark.parametrize("kernel", WENDLAND, ids=lambda k: k.name)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_closed_form_tracks_the_n_h_average(kernel, d):
    """'closed' is the non-oscillatory part of L - 1: averaged over a unit window of n_h it
    matches the shells sum (documented <= 1 % for n_h >= 6), and pointwise it stays within
    the documented band of the oscillating edge terms (<= 50 %)."""
    xs = np.linspace(6.0, 7.0, 101)[:-1]
    shells = np.array([latticeDensityShells(kernel, x, d) for x in xs]) - 1.0
    closed = np.array([latticeDensityClosed(kernel, x, d) for x in xs]) - 1.0
    assert np.all(closed > 0.0)
    assert abs(shells.mean() - closed.mean()) <= 1e-2 * closed.mean()
    for n_h in (3.0, 4.5, 8.0):
        c = latticeDensityClosed(kernel, n_h, d) - 1.0
        assert abs(latticeDensityShells(kernel, n_h, d) - 1.0 - c) <= 0.55 * c


def test_closed_form_leading_scaling():
    # Wendland2 3D: k = 1 - 10 q^2 + 20 q^3 - 15 q^4 + 4 q^5; the q^3 term dominates, so
    # (L - 1) n_h^6 tends to C_3 * 20 * c(3, 3) * Z_3(6) / (2 pi)^6 (c(3,3) = 96 pi).
    lead = 21 / (2 * PI) * 20 * 96 * PI * 8.401923974827539 / (2 * PI) ** 6
    for n_h in (20.0, 40.0):
        assert (latticeDensityClosed(K.Wendland2, n_h, 3) - 1) * n_h**6 == pytest.approx(
            lead, rel=0.02 * (20.0 / n_h) ** 2
        )


@pytest.mark.parametrize("kernel", [k for k in K if k not in WENDLAND], ids=lambda k: k.name)
def test_closed_form_rejects_non_wendland(kernel):
    with pytest.raises(ValueError):
        latticeDensityClosed(kernel, 3.0, 2)
    with pytest.raises(ValueError):
        latticeDensity(kernel, 3.0, 2, method="closed")


# --------------------------------------------------------------------------------------
# API behaviour: methods, caching, coverage, errors


def test_methods_dispatch_and_factor():
    for d in (1, 2, 3):
        assert latticeDensity(K.Wendland4, 2.7, d) == latticeDensityShells(K.Wendland4, 2.7, d)
        assert latticeDensity(K.Wendland4, 2.7, d, "fourier") == latticeDensityFourier(
            K.Wendland4, 2.7, d)
        assert latticeDensity(K.Wendland4, 2.7, d, "closed") == latticeDensityClosed(
            K.Wendland4, 2.7, d)
        assert latticeDensityFactor(K.Wendland4, 2.7, d) == 1.0 / latticeDensity(
            K.Wendland4, 2.7, d)
    # the int value of the enum is accepted
    assert latticeDensity(0, 3, 2) == latticeDensity(K.Wendland2, 3.0, 2)


def test_latticeDensity_is_cached(monkeypatch):
    calls = []
    original = latticeModule.latticeDensityShells

    def counting(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(latticeModule, "latticeDensityShells", counting)
    n_h = 3.14159265358979  # not used by any other test
    first = latticeDensity(K.QuinticSpline, n_h, 3)
    second = latticeDensity(K.QuinticSpline, n_h, 3)
    assert first == second and len(calls) == 1
    latticeDensity(K.QuinticSpline, n_h, 2)
    assert len(calls) == 2


@pytest.mark.parametrize("kernel", CALIBRATABLE, ids=lambda k: k.name)
def test_factor_defined_for_every_calibratable_kernel(kernel):
    for d in (1, 2, 3):
        for n_h in (2.0, 3.0, 4.0):
            f = latticeDensityFactor(kernel, n_h, d)
            assert math.isfinite(f)
            if kernel != K.CohesionKernel:
                assert f > 0.0


def test_cohesion_lattice_density_can_be_negative():
    # k(0) = -1/64 and no other lattice point inside the support for n_h < 1
    L = latticeDensity(K.CohesionKernel, 0.5, 2)
    assert L == pytest.approx(32 / PI * (-1 / 64) / 0.25, rel=1e-14)
    assert latticeDensityFactor(K.CohesionKernel, 0.5, 2) < 0.0


@pytest.mark.parametrize("kernel", UNDEFINED, ids=lambda k: k.name)
def test_viscosity_and_adhesion_raise(kernel):
    for fn in (latticeDensity, latticeDensityFactor, latticeDensityShells,
               latticeDensityFourier):
        with pytest.raises(ValueError, match="undefined"):
            fn(kernel, 3.0, 3)
    with pytest.raises(ValueError, match="undefined"):
        latticeDensityClosed(kernel, 3.0, 3)


@pytest.mark.parametrize(
    "args",
    [
        (K.Wendland2, 0.0, 2),
        (K.Wendland2, -1.0, 2),
        (K.Wendland2, math.nan, 2),
        (K.Wendland2, math.inf, 2),
        (K.Wendland2, True, 2),
        (K.Wendland2, "3", 2),
        (K.Wendland2, 3.0, 0),
        (K.Wendland2, 3.0, 4),
        (99, 3.0, 2),
        ("Wendland2", 3.0, 2),
    ],
)
def test_latticeDensity_validation(args):
    with pytest.raises(ValueError):
        latticeDensity(*args)
    with pytest.raises(ValueError):
        latticeDensityFactor(*args)


def test_latticeDensity_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        latticeDensity(K.Wendland2, 3.0, 2, method="exact")


def test_strictly_above_1():
    for kernel in K:
        assert latticeDensityIsStrictlyAbove1(kernel) == (kernel in WENDLAND)
    for kernel in WENDLAND:
        for d in (1, 2, 3):
            for n_h in np.linspace(0.5, 8.0, 61):
                assert latticeDensityShells(kernel, n_h, d) > 1.0
    # a spline that crosses 1 (CubicSpline 2D, n_h = 4)
    assert latticeDensityShells(K.CubicSpline, 4.0, 2) < 1.0
    with pytest.raises(ValueError):
        latticeDensityIsStrictlyAbove1(123)


# --------------------------------------------------------------------------------------
# host shape functions (the kernel tests cross-check them against the Warp functions)

SAMPLE_K_2D = {  # q = 0, 0.3, 0.6 (0.9 omitted: rounded entries)
    K.Wendland2: (1, 0.52822, 0.08704),
    K.Wendland4: (1, 0.45294865, 0.0360448),
    K.Wendland6: (1, 0.3755191371, 0.01422917632),
    K.CubicSpline: (0.5, 0.311, 0.064),
    K.QuarticSpline: (0.368, 0.1996, 0.0256),
    K.QuinticSpline: (0.2716049383, 0.1283049383, 0.01023209877),
    K.B7: (0.2001546974, 0.08235245701, 0.004080402689),
    K.B8: (0.1474609375, 0.05281914375, 0.00162473125),
    K.HOCT4: (0.9810185587, 0.34124, 0.02722),
    K.Poly6: (1, 0.753571, 0.262144),
    K.Spiky: (1, 0.343, 0.064),
}


@pytest.mark.parametrize("kernel", list(SAMPLE_K_2D), ids=lambda k: k.name)
def test_host_shape_sample_values(kernel):
    got = hostShape(kernel, [0.0, 0.3, 0.6], 2)
    np.testing.assert_allclose(got, SAMPLE_K_2D[kernel], rtol=0, atol=1e-10)
    assert hostShape(kernel, 0.9, 2) == pytest.approx(
        {K.Wendland2: 0.00046, K.Wendland4: 1.585e-5, K.Wendland6: 5.1778e-7,
         K.CubicSpline: 0.001, K.QuarticSpline: 1e-4, K.QuinticSpline: 1e-5, K.B7: 1e-6,
         K.B8: 1e-7, K.HOCT4: 1e-4, K.Poly6: 0.006859, K.Spiky: 0.001}[kernel], rel=1e-3)


@pytest.mark.parametrize("kernel", [k for k in K if k != K.ViscosityKernel], ids=lambda k: k.name)
def test_host_shape_compact_support(kernel):
    for d in (1, 2, 3):
        out = hostShape(kernel, [1.0 + 1e-12, 1.5, 10.0], d)
        assert np.all(out == 0.0)


def test_host_shape_special_values():
    assert hostShape(K.ViscosityKernel, 0.0, 3) == math.inf
    assert hostShape(K.ViscosityKernel, 0.5, 3) == pytest.approx(-0.0625 + 0.25 + 1 - 1)
    assert hostShape(K.CohesionKernel, 0.0, 2) == -1 / 64
    assert hostShape(K.AdhesionKernel, 0.4, 2) == 0.0
    assert hostShape(K.AdhesionKernel, 0.75, 2) == pytest.approx(0.25**0.25)
    assert hostShape(K.Gaussian, 0.3, 1) == pytest.approx(math.exp(-11.52), rel=1e-15)
    # B7 knots are float64-exact: k(1/7) = (6/7)^6 - 7 (4/7)^6 + 21 (2/7)^6
    ref = (6 / 7) ** 6 - 7 * (4 / 7) ** 6 + 21 * (2 / 7) ** 6
    assert hostShape(K.B7, 1 / 7, 3) == pytest.approx(ref, rel=1e-15)
    assert hostShapeKnots(K.CubicSpline, 2) == (0.5,)
    assert hostShapeKnots(K.Wendland2, 2) == ()
    with pytest.raises(ValueError):
        hostShape(77, 0.5, 2)
    with pytest.raises(ValueError):
        hostShape(K.Wendland2, 0.5, 4)


SPH = (K.Wendland2, K.Wendland4, K.Wendland6, K.CubicSpline, K.QuarticSpline,
       K.QuinticSpline, K.B7, K.B8, K.HOCT4, K.Gaussian, K.Poly6, K.Spiky)
C_LITERAL = {  # the published C_d (independent of kernels/constants.py)
    K.Wendland6: (55 / 32, 78 / (7 * PI), 1365 / (64 * PI)),
    K.QuarticSpline: (3125 / 768, 46875 / (2398 * PI), 15625 / (512 * PI)),
    K.QuinticSpline: (243 / 40, 15309 / (478 * PI), 2187 / (40 * PI)),
    K.B7: (823543 / 92160, 5764801 / (113149 * PI), 5764801 / (61440 * PI)),
    K.B8: (4096 / 315, 589824 / (7435 * PI), 16384 / (105 * PI)),
    K.Spiky: (2.0, 10 / PI, 15 / PI),
    **REF_C,
}


@pytest.mark.parametrize("kernel", SPH, ids=lambda k: k.name)
@pytest.mark.parametrize("d", [1, 2, 3])
def test_host_shape_normalisation(kernel, d):
    """d V_d C_d ∫_0^1 k(q) q^(d-1) dq = 1, Gauss-Legendre split at the knots."""
    breaks = np.unique(np.concatenate([[0.0, 1.0], hostShapeKnots(kernel, d),
                                       np.linspace(0, 1, 9)]))
    x, w = np.polynomial.legendre.leggauss(30)
    total = 0.0
    for a, b in zip(breaks[:-1], breaks[1:]):
        q = (a + b) / 2 + (b - a) / 2 * x
        total += ((b - a) / 2 * w * hostShape(kernel, q, d) * q ** (d - 1)).sum()
    surface = (2.0, 2 * PI, 4 * PI)[d - 1]
    assert surface * C_LITERAL[kernel][d - 1] * total == pytest.approx(1.0, abs=1e-10)
