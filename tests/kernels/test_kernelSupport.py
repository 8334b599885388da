"""Pairwise support schemes.

The `_ij` Warp functions for all six SupportSchemes with non-uniform supports h_i != h_j
(both orders) and ties, against an independent float64 NumPy re-statement of the support tables
(`kernel_reference.pairValue` / `pairHelper`) and, for the tangents, against finite
differences.
"""

from __future__ import annotations

import kernel_reference as R
import numpy as np
import torch
from kernel_eval_harness import evaluate, evaluatePairUint32

F64 = torch.float64


def _unit(rng, n, dim):
    e = rng.normal(size=(n, dim))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _rows(rng, dim, npT, n=8, qmin=0.1, tie=True):
    """For every SPH kernel and mode: h_i < h_j, h_i > h_j (and a tie), |x| in
    [qmin, 1.15] * max(h_i, h_j)."""
    rows, slices, start = {}, {}, 0
    for k in R.SPH_KERNELS:
        for mode in R.SUPPORT_MODES:
            hi = rng.uniform(0.5, 2.0, n)
            hj = hi * rng.choice([0.6, 1.5], n)
            if tie:
                hj[0] = hi[0]
            r = rng.uniform(qmin, 1.15, n) * np.maximum(hi, hj)
            block = {
                "x": _unit(rng, n, dim) * r[:, None],
                "h": hi,
                "hj": hj,
                "dx": rng.normal(size=(n, dim)),
                "dh": rng.normal(size=n),
                "dhj": rng.normal(size=n),
                "kernel": np.full(n, k, np.int32),
                "mode": np.full(n, mode, np.int32),
            }
            for key, v in block.items():
                v = v.astype(npT) if v.dtype.kind == "f" else v
                rows.setdefault(key, []).append(v)
            slices[(k, mode)] = slice(start, start + n)
            start += n
    return {k: np.concatenate(v) for k, v in rows.items()}, slices


def _reference(k, mode, d, x, hi, hj, dx, dhi, dhj, eps):
    hij = R.pairSupport(mode, hi, hj)
    dhij = R.pairSupportTangent(mode, hi, hj, dhi, dhj)

    def jvpW(hh, dh):
        return np.einsum("na,na->n", R.gradW(k, d, x, hh, eps), dx) + R.dWdh(k, d, x, hh) * dh

    def jvpGrad(hh, dh):
        return (
            np.einsum("nab,nb->na", R.hessian(k, d, x, hh, eps), dx)
            + R.dGradWdh(k, d, x, hh, eps) * dh[:, None]
        )

    def jvpLap(hh, dh):
        _, g, dlh = R.laplacian(k, d, x, hh, eps)
        return np.einsum("na,na->n", g, dx) + dlh * dh

    if mode in (R.KMS, R.SUPER):  # exact derivative rule: average of the two tangents
        dW = 0.5 * (jvpW(hi, dhi) + jvpW(hj, dhj))
        dG = 0.5 * (jvpGrad(hi, dhi) + jvpGrad(hj, dhj))
    else:
        dW = jvpW(hij, dhij)
        dG = jvpGrad(hij, dhij)
    if mode == R.SUPER:  # helper column
        dL = 0.5 * (jvpLap(hi, dhi) + jvpLap(hj, dhj))
    else:
        dL = jvpLap(hij, dhij)
    return {
        "h_ij": hij,
        "dh_ij": dhij,
        "W_ij": R.pairValue(lambda hh: R.W(k, d, x, hh), mode, hi, hj),
        "gradW_ij": R.pairValue(lambda hh: R.gradW(k, d, x, hh, eps), mode, hi, hj),
        "dWdh_ij": R.pairHelper(lambda hh: R.dWdh(k, d, x, hh), mode, hi, hj),
        "dGraddh_ij": R.pairHelper(lambda hh: R.dGradWdh(k, d, x, hh, eps), mode, hi, hj),
        "H_ij": R.pairHelper(lambda hh: R.hessian(k, d, x, hh, eps), mode, hi, hj),
        "lap_ij": R.pairHelper(lambda hh: R.laplacian(k, d, x, hh, eps)[0], mode, hi, hj),
        "lapGrad_ij": R.pairHelper(lambda hh: R.laplacian(k, d, x, hh, eps)[1], mode, hi, hj),
        "lapDh_ij": R.pairHelper(lambda hh: R.laplacian(k, d, x, hh, eps)[2], mode, hi, hj),
        "jvpW_ij": dW,
        "gradJVP_ij": dG,
        "lapJVP_ij": dL,
    }


def test_pairwise_tables(device, dtype, dim):
    """Every `_ij` quantity and h_ij / dh_ij, all 12 SPH kernels x 6 schemes, h_i != h_j."""
    rng = np.random.default_rng(31 + dim)
    npT = np.float32 if dtype == torch.float32 else np.float64
    rows, sl = _rows(rng, dim, npT)
    out = evaluate(device, dtype, dim, **rows)
    f = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in rows.items()}
    tol = 1e-11 if dtype == F64 else 5e-5
    eps = R.EPS[npT]
    for (k, mode), s in sl.items():
        ref = _reference(
            k, mode, dim, f["x"][s], f["h"][s], f["hj"][s], f["dx"][s], f["dh"][s], f["dhj"][s], eps
        )
        for name, v in ref.items():
            got = out[name][s].astype(np.float64)
            scale = max(np.max(np.abs(v)), 1e-300)
            np.testing.assert_allclose(
                got,
                v,
                rtol=tol,
                atol=tol * scale,
                err_msg=f"{R.NAMES[k]} mode={mode} d={dim} {name}",
            )


def test_pairwise_support_exact(device, dtype):
    """h_ij and its tangent are exact (ties go to h_i / dh_i); modes 14 and 15 give the same
    W and grad W bitwise (grad W is exactly odd)."""
    hi = np.array([1.0, 2.0, 1.5, 1.25])
    hj = np.array([2.0, 1.0, 1.5, 0.75])
    dhi = np.array([0.1, 0.2, 0.3, 0.4])
    dhj = np.array([-1.0, -2.0, -3.0, -4.0])
    x = np.full((4, 2), 0.3)
    for mode in R.SUPPORT_MODES:
        out = evaluate(device, dtype, 2, x=x, h=hi, hj=hj, dh=dhi, dhj=dhj, mode=mode)
        assert np.array_equal(out["h_ij"], R.pairSupport(mode, hi, hj))
        npT = out["h_ij"].dtype
        exp = R.pairSupportTangent(mode, hi, hj, dhi.astype(npT), dhj.astype(npT))
        assert np.array_equal(out["dh_ij"], exp.astype(npT))
    a = evaluate(device, dtype, 2, x=x, h=hi, hj=hj, mode=14)
    b = evaluate(device, dtype, 2, x=x, h=hi, hj=hj, mode=15)
    assert np.array_equal(a["W_ij"], b["W_ij"]) and np.array_equal(a["gradW_ij"], b["gradW_ij"])


def test_pairwise_tangents_vs_finite_differences(device, dim):
    """The exact derivative rule: JVPs of W_ij, grad W_ij and the Naive-Laplacian pair term
    against central differences along (dx, dh_i, dh_j), h_i != h_j (float64)."""
    rng = np.random.default_rng(41 + dim)
    rows, sl = _rows(rng, dim, np.float64, n=6, qmin=0.1, tie=False)
    delta = 1e-6
    plus = dict(rows)
    minus = dict(rows)
    for key, tang in (("x", "dx"), ("h", "dh"), ("hj", "dhj")):
        plus[key] = rows[key] + delta * rows[tang]
        minus[key] = rows[key] - delta * rows[tang]
    o0 = evaluate(device, F64, dim, **rows)
    op = evaluate(device, F64, dim, **plus)
    om = evaluate(device, F64, dim, **minus)
    q_i = np.linalg.norm(rows["x"], axis=1) / rows["h"]
    q_j = np.linalg.norm(rows["x"], axis=1) / rows["hj"]
    for (k, mode), s in sl.items():
        keep = np.ones(s.stop - s.start, dtype=bool)
        for t in (*R.KNOTS.get(k, ()), 1.0):
            keep &= (np.abs(q_i[s] - t) > 1e-4) & (np.abs(q_j[s] - t) > 1e-4)
        for value, tangent in (
            ("W_ij", "jvpW_ij"),
            ("gradW_ij", "gradJVP_ij"),
            ("lap_ij", "lapJVP_ij"),
        ):
            fd = (op[value][s] - om[value][s]) / (2 * delta)
            exact = o0[tangent][s]
            scale = max(np.max(np.abs(exact)), 1e-300)
            np.testing.assert_allclose(
                fd[keep],
                exact[keep],
                rtol=1e-6,
                atol=1e-6 * scale,
                err_msg=f"{R.NAMES[k]} mode={mode} d={dim} {tangent}",
            )


def test_support_mode_as_uint32(device):
    """`supportMode` may be uint32 (as the bridge passes it): same values as int32."""
    rng = np.random.default_rng(2)
    rows, sl = _rows(rng, 3, np.float64, n=3)
    ref = evaluate(device, F64, 3, **rows)
    W, g, lap = evaluatePairUint32(
        device, rows["x"], rows["h"], rows["hj"], rows["mode"], rows["kernel"]
    )
    assert np.array_equal(W, ref["W_ij"])
    assert np.array_equal(g, ref["gradW_ij"])
    assert np.array_equal(lap, ref["lap_ij"])
