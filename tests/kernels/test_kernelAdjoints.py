"""Warp-tape adjoints of the kernel layer.

* At coincident points (r = 0) the custom adjoint of grad W returns the closed-form
  H(0) = k2(0) I (x) and d(grad W)/dh(0) = 0 (h); the custom adjoint of d(grad W)/dh returns
  dH/dh(0) = dk2/dh(0) I; Warp's automatic adjoint would return 0 for both x-adjoints.
  Checked in 1D/2D/3D, float64 and float32 (the concrete overloads are picked from the
  generic harness kernel by Warp's overload resolution).
* At generic r every differentiated quantity (single-support and `_ij`, values, JVP helpers,
  Hessian) has a tape adjoint equal to central differences of its own forward value along a
  random direction in (x, h_i, h_j, dx, dh_i, dh_j).
"""

from __future__ import annotations

import kernel_reference as R
import numpy as np
import pytest
import torch
from kernel_eval_harness import evaluate
from kernel_tape_harness import M_TERMS, S_TERMS, V_TERMS, adjoints

F64 = torch.float64

#: k'(0) = 0: finite Hessian at the origin
SMOOTH = (R.W2, R.W4, R.W6, R.CUBIC, R.QUARTIC, R.QUINTIC, R.B7, R.B8, R.GAUSSIAN, R.POLY6)


def _npT(dtype):
    return np.float32 if dtype == torch.float32 else np.float64


def _k2_0(k, d, h):
    """k2(0) = C_d k''(0) / h^(d+2) and its h-derivative -(d+2) k2(0) / h."""
    C = R.C_D[k][d - 1]
    k2 = float(R.shape(k, d, np.array(0.0))[2])
    v = C * k2 / h ** (d + 2)
    return v, -(d + 2) * v / h


def test_gradient_adjoint_at_coincident_points(device, dtype, dim):
    rng = np.random.default_rng(1 + dim)
    n = len(SMOOTH)
    h = rng.uniform(0.6, 1.8, n).astype(_npT(dtype))
    w = rng.normal(size=(n, dim)).astype(_npT(dtype))
    kernels = np.array(SMOOTH, np.int32)
    x = np.zeros((n, dim))
    tol = 1e-13 if dtype == F64 else 1e-6
    hh = h.astype(np.float64)
    H0, dH0 = zip(*(_k2_0(k, dim, hh[i]) for i, k in enumerate(SMOOTH)))
    H0, dH0 = np.array(H0), np.array(dH0)

    g = adjoints(device, dtype, dim, "gradW", w, x=x, h=h, kernel=kernels)
    np.testing.assert_allclose(g["x"], H0[:, None] * w, rtol=tol, atol=0)
    assert np.all(g["h"] == 0.0)

    g = adjoints(device, dtype, dim, "dGraddh", w, x=x, h=h, kernel=kernels)
    np.testing.assert_allclose(g["x"], dH0[:, None] * w, rtol=tol, atol=0)
    assert np.all(g["h"] == 0.0)

    # W's automatic adjoint at r = 0 is grad W(0) = 0 (and dW/dh for h)
    g = adjoints(device, dtype, dim, "W", np.ones(n), x=x, h=h, kernel=kernels)
    assert np.all(g["x"] == 0.0)

    # pairwise grad W: averaged H(0) for KernelMeanSymmetric/SuperSymmetric, else at h_ij
    hj = (h * 1.3).astype(_npT(dtype))
    for mode in R.SUPPORT_MODES:
        g = adjoints(device, dtype, dim, "gradW_ij", w, x=x, h=h, hj=hj, mode=mode, kernel=kernels)
        hij = R.pairSupport(mode, hh, hj.astype(np.float64))
        if mode in (R.KMS, R.SUPER):
            Hi = np.array([_k2_0(k, dim, hh[i])[0] for i, k in enumerate(SMOOTH)])
            Hj = np.array([_k2_0(k, dim, float(hj[i]))[0] for i, k in enumerate(SMOOTH)])
            expected = 0.5 * (Hi + Hj)
        else:
            expected = np.array([_k2_0(k, dim, hij[i])[0] for i, k in enumerate(SMOOTH)])
        np.testing.assert_allclose(g["x"], expected[:, None] * w, rtol=tol, atol=0)
        assert np.all(g["h"] == 0.0) and np.all(g["hj"] == 0.0)


def test_second_order_adjoints_at_coincident_points(device, dtype, dim):
    """Reverse over the gradient JVP and the Hessian at r = 0: d/dx[H dx + dgradW/dh dh] =
    dH/dh(0) dh (T(0) = 0), d/d(dx) = H(0); the Hessian's x-adjoint is T(0) : G = 0 and its
    h-adjoint dk2/dh(0) tr G."""
    rng = np.random.default_rng(9 + dim)
    n = len(SMOOTH)
    npT = _npT(dtype)
    h = rng.uniform(0.6, 1.8, n).astype(npT)
    w = rng.normal(size=(n, dim)).astype(npT)
    dx = rng.normal(size=(n, dim)).astype(npT)
    dh = rng.normal(size=n).astype(npT)
    G = rng.normal(size=(n, dim, dim)).astype(npT)
    kernels = np.array(SMOOTH, np.int32)
    x = np.zeros((n, dim))
    hh = h.astype(np.float64)
    H0, dH0 = (np.array(v) for v in zip(*(_k2_0(k, dim, hh[i]) for i, k in enumerate(SMOOTH))))
    tol = 1e-12 if dtype == F64 else 2e-6

    g = adjoints(device, dtype, dim, "gradJVP", w, x=x, h=h, dx=dx, dh=dh, kernel=kernels)
    scale = np.abs(dH0 * dh)[:, None] * np.abs(w)
    np.testing.assert_allclose(
        g["x"], (dH0 * dh.astype(np.float64))[:, None] * w, rtol=tol, atol=tol * scale.max()
    )
    np.testing.assert_allclose(g["dx"], H0[:, None] * w, rtol=tol, atol=0)
    np.testing.assert_allclose(
        g["h"], dH0 * np.einsum("na,na->n", w.astype(np.float64), dx), rtol=1e-5, atol=0
    )
    assert np.all(g["dh"] == 0.0)

    g = adjoints(device, dtype, dim, "jvpW", np.ones(n), x=x, h=h, dx=dx, dh=dh, kernel=kernels)
    np.testing.assert_allclose(g["x"], H0[:, None] * dx, rtol=tol, atol=0)
    assert np.all(g["dx"] == 0.0)

    g = adjoints(device, dtype, dim, "H", G, x=x, h=h, kernel=kernels)
    assert np.all(g["x"] == 0.0)
    np.testing.assert_allclose(g["h"], dH0 * np.trace(G, axis1=1, axis2=2), rtol=1e-5, atol=0)


def _generic_rows(rng, dim, per_mode=2):
    """Rows at generic separations, away from knots and from the support boundary."""
    rows = {k: [] for k in ("x", "h", "hj", "dx", "dh", "dhj", "kernel", "mode")}
    for k in R.SPH_KERNELS:
        for mode in R.SUPPORT_MODES:
            got = 0
            while got < per_mode:
                hi = rng.uniform(0.7, 1.6)
                hj = hi * rng.choice([0.6, 1.5])
                e = rng.normal(size=dim)
                e /= np.linalg.norm(e)
                r = rng.uniform(0.08, 0.95) * min(hi, hj)
                ok = True
                for q in (r / hi, r / hj):
                    for t in (*R.KNOTS.get(k, ()), 1.0):
                        ok &= abs(q - t) > 1e-3
                if not ok:
                    continue
                rows["x"].append(e * r)
                rows["h"].append(hi)
                rows["hj"].append(hj)
                rows["dx"].append(rng.normal(size=dim))
                rows["dh"].append(rng.normal())
                rows["dhj"].append(rng.normal())
                rows["kernel"].append(k)
                rows["mode"].append(mode)
                got += 1
    out = {k: np.array(v) for k, v in rows.items()}
    out["kernel"] = out["kernel"].astype(np.int32)
    out["mode"] = out["mode"].astype(np.int32)
    return out


@pytest.mark.parametrize("term", S_TERMS + V_TERMS + M_TERMS)
def test_adjoints_vs_finite_differences(device, term):
    """<tape adjoint, v> equals the central difference of the loss along v (float64), for
    every differentiated quantity, in 1D/2D/3D."""
    for dim in (1, 2, 3):
        rng = np.random.default_rng(1000 * dim + (S_TERMS + V_TERMS + M_TERMS).index(term))
        rows = _generic_rows(rng, dim)
        n = len(rows["h"])
        if term in S_TERMS:
            w = rng.normal(size=n)
        elif term in V_TERMS:
            w = rng.normal(size=(n, dim))
        else:
            w = rng.normal(size=(n, dim, dim))
        v = {
            "x": rng.normal(size=(n, dim)),
            "h": rng.normal(size=n) * 0.1,
            "hj": rng.normal(size=n) * 0.1,
            "dx": rng.normal(size=(n, dim)),
            "dh": rng.normal(size=n),
            "dhj": rng.normal(size=n),
        }
        delta = 1e-6
        stacked = {}
        for key, val in rows.items():
            if key in v:
                stacked[key] = np.concatenate([val, val + delta * v[key], val - delta * v[key]])
            else:
                stacked[key] = np.concatenate([val, val, val])
        wt = np.concatenate([w, w, w])
        g = adjoints(device, F64, dim, term, wt, **stacked)
        loss = g["loss"]
        fd = (loss[n : 2 * n] - loss[2 * n :]) / (2 * delta)
        directional = np.zeros(n)
        for key, val in v.items():
            directional += np.sum((g[key][:n] * val).reshape(n, -1), axis=1)
        scale = max(np.max(np.abs(directional)), 1e-300)
        np.testing.assert_allclose(
            directional, fd, rtol=1e-6, atol=1e-7 * scale, err_msg=f"{term} d={dim}"
        )


def test_hessian_adjoint_is_third_derivative(device, dim):
    """The Hessian's x-adjoint for an adjoint G equals T : G and its h-adjoint <G, dH/dh>
    (generic r, float64)."""
    rng = np.random.default_rng(77 + dim)
    rows = _generic_rows(rng, dim, per_mode=1)
    n = len(rows["h"])
    G = rng.normal(size=(n, dim, dim))
    g = adjoints(device, F64, dim, "H", G, **rows)
    ev = evaluate(device, F64, dim, G=G, **rows)
    scale = np.max(np.abs(ev["TG"]))
    np.testing.assert_allclose(g["x"], ev["TG"], rtol=1e-9, atol=1e-10 * scale)
    ref_h = np.einsum("nab,nab->n", G, ev["dHdh"])
    np.testing.assert_allclose(g["h"], ref_h, rtol=1e-9, atol=1e-10 * np.max(np.abs(ref_h)))


def test_float32_adjoints_agree_with_float64(device, dim):
    """The float32 overloads of the custom adjoints give the float64 values to float32
    precision at generic r."""
    rng = np.random.default_rng(5 * dim)
    rows = _generic_rows(rng, dim, per_mode=1)
    rows = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in rows.items()}
    n = len(rows["h"])
    w = rng.normal(size=(n, dim)).astype(np.float32)
    for term in ("gradW", "dGraddh", "gradW_ij", "gradJVP_ij"):
        g32 = adjoints(device, torch.float32, dim, term, w, **rows)
        g64 = adjoints(device, F64, dim, term, w, **rows)
        for key in ("x", "h", "hj", "dx", "dh", "dhj"):
            a, b = g32[key].astype(np.float64), g64[key]
            scale = max(np.max(np.abs(b)), 1e-300)
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * scale, err_msg=f"{term} {key}")


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_position_only_tangents(device, dtype, dim):
    """The position-only tangents the JVP kernels use without support tangents:
    `sphKernelHessianDot` (H u without forming H) equals the Hessian applied to u, and
    `sphKernelGradientJVPPositions_ij` / `sphKernelJVPPositions_ij` equal the full tangents with
    dh_i = dh_j = 0, in value and in every tape adjoint (x, h_i, h_j, dx), at generic
    separations and at r = 0 and r << eps h (the q < eps branch of the Hessian)."""
    rng = np.random.default_rng(70 + dim)
    npT = _npT(dtype)
    rows = _generic_rows(rng, dim, per_mode=1)
    n = len(rows["h"])
    rows["x"][: n // 3] = 0.0
    rows["x"][n // 3: n // 2] *= 1e-18
    rows = {k: (v.astype(npT) if v.dtype.kind == "f" else v) for k, v in rows.items()}
    zero = np.zeros(n, npT)
    rows["dh"], rows["dhj"] = zero, zero
    u = rng.normal(size=(n, dim)).astype(npT)
    o = evaluate(device, dtype, dim, u=u, **rows)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == F64 else dict(rtol=2e-5, atol=1e-5)
    for got, want in ((o["Hu"], np.einsum("nab,nb->na", o["H"], u)),
                      (o["gradJVPPos_ij"], o["gradJVP_ij"]), (o["jvpWPos_ij"], o["jvpW_ij"])):
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)
    w = rng.normal(size=(n, dim)).astype(npT)
    for pos, full, weight in (("gradJVPPos_ij", "gradJVP_ij", w),
                              ("jvpWPos_ij", "jvpW_ij", np.ones(n, npT))):
        a = adjoints(device, dtype, dim, pos, weight, **rows)
        b = adjoints(device, dtype, dim, full, weight, **rows)
        for key in ("x", "h", "hj", "dx"):
            scale = max(1.0, float(np.max(np.abs(b[key]))))
            np.testing.assert_allclose(a[key], b[key], rtol=tol["rtol"],
                                       atol=tol["atol"] * scale, err_msg=f"{pos} {key}")
