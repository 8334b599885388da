"""Shape functions k, k', k'', k''' and C_d of the 15 kernels.

Values come from the Warp functions (`sphShape`, `sphKernelC_d_warp`, the metadata
functions) through the one forward harness kernel; references are the spec formulas
re-stated in NumPy (`kernel_reference.py`).
"""

from __future__ import annotations

import math
from fractions import Fraction

import kernel_reference as R
import numpy as np
import pytest
import torch
from kernel_eval_harness import evaluate

F64 = torch.float64


def _shapeRows(kernels, qs):
    kk = np.repeat(np.asarray(kernels, dtype=np.int32), len(qs))
    qq = np.tile(np.asarray(qs, dtype=np.float64), len(kernels))
    return kk, qq


def _shapes(device, dtype, d, kernels, qs):
    kk, qq = _shapeRows(kernels, qs)
    out = evaluate(device, dtype, d, q=qq, kernel=kk)
    n = len(qs)
    res = {}
    for i, k in enumerate(kernels):
        res[k] = np.stack([out[f][i * n : (i + 1) * n] for f in ("k", "k1", "k2", "k3")])
    return res


def _awayFromKnots(kernel, q, gap):
    keep = np.ones_like(q, dtype=bool)
    for t in R.KNOTS.get(kernel, ()):
        keep &= np.abs(q - t) > gap
    if kernel == R.VISCOSITY:
        keep &= q > 0.1
    if kernel == R.ADHESION:
        keep &= (q > 0.55) & (q < 0.97)
    return keep


def test_shapes_match_reference(device, dtype, dim):
    """All 15 kernels, k..k''' against the NumPy statement on a q grid in [0, 1]."""
    npT = np.float32 if dtype == torch.float32 else np.float64
    qs = np.linspace(0.0, 1.0, 101).astype(npT)
    qs = np.concatenate([qs, np.array([t for ts in R.KNOTS.values() for t in ts], dtype=npT)])
    got = _shapes(device, dtype, dim, R.ALL_KERNELS, qs)
    # float32: the spline sums cancel terms of size ~1 (relative to the kernel's scale)
    tol = 1e-12 if dtype == F64 else 1e-5
    for k in R.ALL_KERNELS:
        q = qs.astype(np.float64)  # the reference sees exactly the rounded inputs
        keep = np.ones_like(q, dtype=bool)
        if k == R.VISCOSITY:
            keep = q > 0.0
        if k == R.ADHESION:
            keep = (q < 0.5) | ((q > 0.5 + 1e-3) & (q < 1.0))
        ref = np.stack(R.shape(k, dim, q))
        for n in range(4):
            a, b = got[k][n][keep], ref[n][keep]
            scale = np.max(np.abs(b))
            np.testing.assert_allclose(
                a, b, rtol=tol, atol=tol * scale, err_msg=f"{R.NAMES[k]} d={dim} k^({n})"
            )


def test_shapes_cutoff_and_unknown(device, dtype, dim):
    """Exactly zero for q > 1 (every kernel, every derivative); NaN for an unknown id."""
    q_above = 1.0 + (1e-12 if dtype == F64 else 3e-7)
    qs = np.array([q_above, 1.5, 10.0])
    got = _shapes(device, dtype, dim, R.ALL_KERNELS, qs)
    for k in R.ALL_KERNELS:
        assert np.all(got[k] == 0.0), R.NAMES[k]
    unknown = _shapes(device, dtype, dim, [3, 99, -1], np.array([0.0, 0.5, 1.0]))
    for k, v in unknown.items():
        assert np.all(np.isnan(v)), k


# published table: k in 2D at q = 0, 0.3, 0.6, 0.9
SAMPLE_Q = (0.0, 0.3, 0.6, 0.9)
SAMPLE_K = {
    R.W2: (1, 0.52822, 0.08704, 0.00046),
    R.W4: (1, 0.45294865, 0.0360448, 1.585e-5),
    R.W6: (1, 0.3755191371, 0.01422917632, 5.1778e-7),
    R.CUBIC: (0.5, 0.311, 0.064, 0.001),
    R.QUARTIC: (0.368, 0.1996, 0.0256, 1e-4),
    R.QUINTIC: (0.2716049383, 0.1283049383, 0.01023209877, 1e-5),
    R.B7: (0.2001546974, 0.08235245701, 0.004080402689, 1e-6),
    R.B8: (0.1474609375, 0.05281914375, 0.00162473125, 1e-7),
    R.HOCT4: (0.9810185587, 0.34124, 0.02722, 1e-4),
    R.GAUSSIAN: (1, 9.929504306e-6, 9.72e-21, 9.4e-46),
    R.POLY6: (1, 0.753571, 0.262144, 0.006859),
    R.SPIKY: (1, 0.343, 0.064, 0.001),
}
K0 = {
    R.W2: 1.0,
    R.W4: 1.0,
    R.W6: 1.0,
    R.CUBIC: 0.5,
    R.QUARTIC: 0.368,
    R.QUINTIC: 0.2716049383,
    R.B7: 0.2001546974,
    R.B8: 0.1474609375,
    R.HOCT4: 0.981018558675,
    R.GAUSSIAN: 1.0,
    R.POLY6: 1.0,
    R.SPIKY: 1.0,
    R.VISCOSITY: math.inf,
    R.COHESION: -1.0 / 64.0,
    R.ADHESION: 0.0,
}


def test_sample_values_and_k0(device, dtype, dim):
    """The published table (2D) and every k(0) to 1e-10 absolute in float64."""
    atol = 1e-10 if dtype == F64 else 1e-6
    got = _shapes(device, dtype, dim, R.ALL_KERNELS, np.array([0.0]))
    for k, v in K0.items():
        val = got[k][0][0]
        if math.isinf(v):
            assert val == math.inf, R.NAMES[k]
        else:
            assert abs(val - v) <= atol, (R.NAMES[k], val, v)
    if dim != 2:
        return
    got = _shapes(device, dtype, 2, list(SAMPLE_K), np.array(SAMPLE_Q))
    for k, row in SAMPLE_K.items():
        np.testing.assert_allclose(got[k][0], row, rtol=0, atol=atol, err_msg=R.NAMES[k])
    # the tiny Gaussian entries against the exact formula
    gq = np.array(SAMPLE_Q).astype(np.float32 if dtype == torch.float32 else np.float64)
    exact = np.exp(-128.0 * gq.astype(np.float64) ** 2)
    rtol = 1e-13 if dtype == F64 else 2e-5
    if dtype == F64:
        np.testing.assert_allclose(got[R.GAUSSIAN][0], exact, rtol=rtol)
    else:  # below the float32 range the value flushes to 0
        tiny = exact < 1e-30
        np.testing.assert_allclose(got[R.GAUSSIAN][0][~tiny], exact[~tiny], rtol=rtol)


def test_C_d_exact(device, dtype, dim):
    """C_d as float64 (metadata function) bitwise equal to the spec fractions; the typed
    value is the correctly rounded conversion."""
    kernels = np.array(R.ALL_KERNELS, dtype=np.int32)
    out = evaluate(device, dtype, dim, kernel=kernels)
    ref = np.array([R.C_D[k][dim - 1] for k in R.ALL_KERNELS])
    assert np.array_equal(out["C_d64"], ref)
    npT = np.float32 if dtype == torch.float32 else np.float64
    assert np.array_equal(out["C_d"], ref.astype(npT))
    bad = evaluate(device, dtype, dim, kernel=np.array([99], dtype=np.int32))
    assert np.isnan(bad["C_d64"][0]) and np.isnan(bad["scale"][0]) and np.isnan(bad["N_H"][0])


def test_float64_exact_constants(device):
    """B7 at 0 and its knots and HOCT4 at alpha to 1e-15 relative (W6: fails if 1/7 ... were
    rounded to float32)."""
    sevenths = [Fraction(0), Fraction(1, 7), Fraction(3, 7), Fraction(5, 7)]

    def b7(q):
        def tp(t):
            return max(t - q, Fraction(0))

        return (
            (1 - q) ** 6
            - 7 * tp(Fraction(5, 7)) ** 6
            + 21 * tp(Fraction(3, 7)) ** 6
            - 35 * tp(Fraction(1, 7)) ** 6
        )

    qs = np.array([float(f) for f in sevenths])
    P = Fraction("-2.154228492776")
    Q = Fraction("0.981018558675")
    alpha = Fraction("0.214108111463")
    for d in (1, 2, 3):
        got = _shapes(device, F64, d, [R.B7, R.HOCT4], np.concatenate([qs, [float(alpha)]]))
        exact = np.array([float(b7(Fraction(q))) for q in qs])  # q is the float64 knot
        np.testing.assert_allclose(got[R.B7][0][:4], exact, rtol=1e-15, atol=0)
        hoct = float(P * Fraction(float(alpha)) + Q)
        np.testing.assert_allclose(got[R.HOCT4][0][4], hoct, rtol=1e-15, atol=0)


def test_derivatives_vs_finite_differences(device, dim):
    """k', k'', k''' against central differences of k, k', k'' away from knots (float64)."""
    rng = np.random.default_rng(7)
    base = np.sort(rng.uniform(0.02, 0.98, 40))
    delta = 1e-6
    qs = np.concatenate([base, base + delta, base - delta])
    got = _shapes(device, F64, dim, R.ALL_KERNELS, qs)
    n = len(base)
    for k in R.ALL_KERNELS:
        keep = _awayFromKnots(k, base, 10 * delta)
        v = got[k]
        for order in (1, 2, 3):
            fd = (v[order - 1][n : 2 * n] - v[order - 1][2 * n :]) / (2 * delta)
            exact = v[order][:n]
            scale = max(np.max(np.abs(exact[keep])), 1e-300)
            np.testing.assert_allclose(
                fd[keep],
                exact[keep],
                rtol=1e-7,
                atol=1e-7 * scale,
                err_msg=f"{R.NAMES[k]} d={dim} order {order}",
            )


def _gaussLegendre(kernel, n=24):
    """Nodes/weights on [0, 1] split at the kernel's knots (Gaussian: a finer split)."""
    cuts = [0.0, *sorted(R.KNOTS.get(kernel, ())), 1.0]
    if kernel == R.GAUSSIAN:
        cuts = list(np.linspace(0.0, 0.5, 21)) + [1.0]
    x, w = np.polynomial.legendre.leggauss(n)
    nodes, weights = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        nodes.append(0.5 * (b - a) * x + 0.5 * (b + a))
        weights.append(0.5 * (b - a) * w)
    return np.concatenate(nodes), np.concatenate(weights)


def test_normalisation_by_quadrature(device, dtype, dim):
    """d V_d C_d int_0^1 k(q) q^(d-1) dq = 1 for the 12 SPH kernels (1e-10 in float64);
    Viscosity integrates to 1/3 in 2D and 1 in 3D."""
    kernels = list(R.SPH_KERNELS) + ([R.VISCOSITY] if dim > 1 else [])
    factor = {1: 2.0, 2: 2.0 * math.pi, 3: 4.0 * math.pi}[dim]
    tol = 1e-10 if dtype == F64 else 2e-6
    for k in kernels:
        nodes, weights = _gaussLegendre(k)
        out = evaluate(device, dtype, dim, q=nodes, kernel=np.full(len(nodes), k, np.int32))
        qn = nodes.astype(np.float32 if dtype == torch.float32 else np.float64).astype(np.float64)
        integral = factor * out["C_d64"][0] * np.sum(weights * out["k"] * qn ** (dim - 1))
        expected = 1.0
        if k == R.VISCOSITY:
            expected = 1.0 / 3.0 if dim == 2 else 1.0
        assert abs(integral - expected) <= tol, (R.NAMES[k], dim, integral)


KERNEL_SCALE = {
    R.W2: (1.620185, 1.897367, 1.936492),
    R.W4: (1.936492, 2.171239, 2.207940),
    R.W6: (2.207940, 2.415230, 2.449490),
    R.CUBIC: (1.732051, 1.778002, 1.825742),
    R.QUARTIC: (1.936492, 1.977173, 2.018932),
    R.QUINTIC: (2.121321, 2.158131, 2.195775),
    R.B7: (2.291288, 2.325170, 2.359700),
    R.B8: (2.449490, 2.481044, 2.513123),
    R.HOCT4: (2.224323, 2.192463, 2.189684410),
    R.GAUSSIAN: (8.0, 8.0, 8.0),
}
N_H_EXAMPLES = {
    (2, R.W2): 25.008,
    (2, R.W4): 39.98,
    (2, R.W6): 63.81,
    (2, R.CUBIC): 17.164,
    (3, R.W2): 100.016,
    (3, R.W4): 199.97,
    (3, R.W6): 399.99,
    (3, R.CUBIC): 57.916,
}


def test_metadata_warp_functions(device, dim):
    """sphKernelScale_warp / sphKernel_xi_warp / sphKernelN_H_warp."""
    kernels = np.array(R.ALL_KERNELS, dtype=np.int32)
    out = evaluate(device, F64, dim, kernel=kernels)
    for i, k in enumerate(R.ALL_KERNELS):
        scale = KERNEL_SCALE.get(k, (1.0, 1.0, 1.0))[dim - 1]
        assert out["scale"][i] == scale, R.NAMES[k]
        vd = (2.0, math.pi, 4.0 * math.pi / 3.0)[dim - 1]
        assert out["N_H"][i] == pytest.approx(vd * out["xi"][i] ** dim, rel=1e-14)
        if (dim, k) in N_H_EXAMPLES:
            assert out["N_H"][i] == pytest.approx(N_H_EXAMPLES[(dim, k)], rel=1e-4), R.NAMES[k]
    eta = {R.W2: 1.487, R.CUBIC: 1.292 * 1.0175, R.B7: 1.595 * 1.1425, R.SPIKY: 1.0}
    for k, e in eta.items():
        i = R.ALL_KERNELS.index(k)
        assert out["xi"][i] == pytest.approx(e * out["scale"][i], rel=1e-15)
