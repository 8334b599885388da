"""Single-support kernel quantities.

W, grad W, dW/dh, d(grad W)/dh, the Hessian and its derivatives, the kernel Laplacian and
its derivatives and the JVP helpers, all evaluated through the Warp functions by the one
forward harness kernel (`kernel_eval_harness.evalAll`). Output dtype follows input: the
harness writes every result into arrays of the call's scalar type, and Warp rejects a store
of another scalar type at compile time, so each float32 overload compiling proves it.
"""

from __future__ import annotations

import kernel_reference as R
import numpy as np
import pytest
import torch
from kernel_eval_harness import evaluate

F64 = torch.float64


def _npT(dtype):
    return np.float32 if dtype == torch.float32 else np.float64


def _unit(rng, n, dim):
    e = rng.normal(size=(n, dim))
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def _keep(kernel, q, gap=1e-3):
    keep = np.ones_like(q, dtype=bool)
    for t in R.KNOTS.get(kernel, ()):
        keep &= np.abs(q - t) > gap
    if kernel == R.VISCOSITY:
        keep &= q > 0.1
    if kernel == R.ADHESION:
        keep &= (q > 0.55) & (q < 0.97)
    return keep


def _batch(kernels, per):
    """Stack per-kernel row dicts into one launch; returns (rows, slices)."""
    rows, slices, start = {}, {}, 0
    for k in kernels:
        r = per(k)
        n = len(r["x"])
        r["kernel"] = np.full(n, k, dtype=np.int32)
        for key, v in r.items():
            rows.setdefault(key, []).append(v)
        slices[k] = slice(start, start + n)
        start += n
    return {k: np.concatenate(v) for k, v in rows.items()}, slices


#: quantities that carry the O(1/r) cancellation of (k2 - k1/r)/r (third derivatives, the
#: Laplacian's x-derivative) or, in float32, an O(eps/q) regulariser effect (eps = 1e-7):
#: compared at tight tolerance only for q >= Q_MIN[dtype]
SENSITIVE = {
    "lapGrad",
    "lapJVP",
    "Tu",
    "TG",
    "HJVP",
    "lap",
    "lapDh",
    "lap_ij",
    "lapDh_ij",
    "lapGrad_ij",
    "lapJVP_ij",
}
Q_MIN = {torch.float64: 0.01, torch.float32: 0.1}


def _qmask(name, dtype, x, h, kernel):
    q = np.linalg.norm(np.asarray(x, dtype=np.float64), axis=-1) / np.asarray(h, np.float64)
    if name in SENSITIVE:
        qmin = Q_MIN[dtype]
        if kernel == R.VISCOSITY and dtype == torch.float32:
            qmin = 0.3  # its Laplacian 6 - 6q is a cancellation of 1/q^3 terms
        return q >= qmin
    return np.ones_like(q, dtype=bool)


def _close(a, b, tol, msg):
    scale = max(np.max(np.abs(b)) if b.size else 0.0, 1e-300)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale, err_msg=msg)


def test_quantities_match_reference(device, dtype, dim):
    """W, grad W, dW/dh, d(grad W)/dh, H, kernel Laplacian and its derivatives against the
    NumPy statement (same rounded inputs), q in [0, 1.2], all 15 kernels."""
    rng = np.random.default_rng(11 + dim)
    npT = _npT(dtype)
    eps = R.EPS[npT]
    n = 40

    def per(k):
        q = rng.uniform(0.0, 1.2, n)
        q = q[_keep(k, q, 1e-4)]
        h = rng.uniform(0.5, 2.0, len(q))
        x = _unit(rng, len(q), dim) * (q * h)[:, None]
        return {"x": x.astype(npT), "h": h.astype(npT)}

    rows, sl = _batch(R.ALL_KERNELS, per)
    out = evaluate(device, dtype, dim, **rows)
    tol = 1e-12 if dtype == F64 else 3e-5
    x = rows["x"].astype(np.float64)
    h = rows["h"].astype(np.float64)
    for k in R.ALL_KERNELS:
        s = sl[k]
        xs, hs = x[s], h[s]
        lap, lapGrad, lapDh = R.laplacian(k, dim, xs, hs, eps)
        ref = {
            "W": R.W(k, dim, xs, hs),
            "gradW": R.gradW(k, dim, xs, hs, eps),
            "dWdh": R.dWdh(k, dim, xs, hs),
            "dGraddh": R.dGradWdh(k, dim, xs, hs, eps),
            "H": R.hessian(k, dim, xs, hs, eps),
            "lap": lap,
            "lapGrad": lapGrad,
            "lapDh": lapDh,
        }
        for name, v in ref.items():
            keep = _qmask(name, dtype, xs, hs, k)
            _close(out[name][s][keep], v[keep], tol, f"{R.NAMES[k]} d={dim} {name}")


ALL_OUTPUTS = (
    "W dWdh lap lapDh jvpW lapJVP gradW dGraddh d2Graddh2 lapGrad gradJVP TG H dHdh Tu HJVP "
    "W_ij jvpW_ij dWdh_ij lap_ij lapDh_ij lapJVP_ij gradW_ij gradJVP_ij dGraddh_ij lapGrad_ij "
    "H_ij"
).split()


def test_compact_support(device, dtype, dim):
    """Every quantity is exactly 0 at q = 1 + 1e-12 (float32: 1 + 5e-7), 1.5 and 10."""
    rng = np.random.default_rng(3)
    npT = _npT(dtype)
    q_above = 1.0 + (1e-12 if dtype == F64 else 5e-7)
    qs = np.array([q_above, 1.5, 10.0])

    def per(k):
        m = len(qs)
        return {
            "x": _unit(rng, m, dim) * qs[:, None],
            "h": np.ones(m),
            "hj": np.ones(m),
            "dx": rng.normal(size=(m, dim)),
            "dh": rng.normal(size=m),
            "dhj": rng.normal(size=m),
            "u": rng.normal(size=(m, dim)),
            "G": rng.normal(size=(m, dim, dim)),
        }

    rows, _ = _batch(R.ALL_KERNELS, per)
    rows = {k: (v.astype(npT) if k != "kernel" else v) for k, v in rows.items()}
    for mode in R.SUPPORT_MODES:
        out = evaluate(device, dtype, dim, mode=mode, **rows)
        for name in ALL_OUTPUTS:
            assert np.all(out[name] == 0.0), (name, mode)


SMOOTH_AT_ORIGIN = (
    R.W2,
    R.W4,
    R.W6,
    R.CUBIC,
    R.QUARTIC,
    R.QUINTIC,
    R.B7,
    R.B8,
    R.GAUSSIAN,
    R.POLY6,
    R.COHESION,
)


def test_origin(device, dtype, dim):
    """grad W(0) = 0 exactly for every kernel (Viscosity: W = +inf and grad W = NaN);
    H(0) = k2(0) I where k'(0) = 0; the Laplacian and T vanish at q < eps."""
    kernels = [k for k in R.ALL_KERNELS]
    h = np.linspace(0.7, 1.6, len(kernels))
    out = evaluate(
        device,
        dtype,
        dim,
        x=np.zeros((len(kernels), dim)),
        h=h,
        u=np.ones(dim),
        G=np.eye(dim),
        kernel=np.array(kernels, dtype=np.int32),
    )
    h = h.astype(_npT(dtype)).astype(np.float64)
    tol = 1e-13 if dtype == F64 else 2e-6
    for i, k in enumerate(kernels):
        if k == R.VISCOSITY:
            assert out["W"][i] == np.inf
            assert np.all(np.isnan(out["gradW"][i]))
            continue
        assert np.all(out["gradW"][i] == 0.0), R.NAMES[k]
        assert np.all(out["dGraddh"][i] == 0.0), R.NAMES[k]
        assert out["lap"][i] == 0.0 and np.all(out["lapGrad"][i] == 0.0)
        assert np.all(out["Tu"][i] == 0.0) and np.all(out["TG"][i] == 0.0)
        C = R.C_D[k][dim - 1]
        k0, _, k2, _ = (float(v) for v in R.shape(k, dim, np.array(0.0)))
        assert out["W"][i] == pytest.approx(C * k0 / h[i] ** dim, rel=tol, abs=1e-300)
        if k in SMOOTH_AT_ORIGIN:
            H0 = C * k2 / h[i] ** (dim + 2) * np.eye(dim)
            np.testing.assert_allclose(out["H"][i], H0, rtol=tol, atol=0)
            dH0 = -(C / h[i] ** (dim + 3)) * (dim + 2) * k2 * np.eye(dim)
            np.testing.assert_allclose(out["dHdh"][i], dH0, rtol=tol, atol=1e-300)


def test_finite_differences(device, dim):
    """Every derivative against central differences of the Warp values (float64):
    grad W, H, T.u, T:G, grad(lap) in x; dW/dh, d(grad W)/dh, d^2(grad W)/dh^2, dH/dh,
    d(lap)/dh in h; and the JVP helpers (W, grad W, H, lap) along (dx, dh)."""
    rng = np.random.default_rng(5 + dim)
    delta = 1e-6
    n = 12

    def per(k):
        q = rng.uniform(0.03, 0.97, 3 * n)
        q = q[_keep(k, q, 20 * delta)][:n]
        m = len(q)
        h = rng.uniform(0.8, 1.5, m)
        e = _unit(rng, m, dim)
        x = _unit(rng, m, dim) * (q * h)[:, None]
        eta = rng.uniform(-1.0, 1.0, m)
        G = rng.normal(size=(m, dim, dim))
        xs = [x, x + delta * e, x - delta * e, x, x, x + delta * e, x - delta * e]
        hs = [h, h, h, h + delta, h - delta, h + delta * eta, h - delta * eta]
        return {
            "x": np.concatenate(xs),
            "h": np.concatenate(hs),
            "dx": np.tile(e, (7, 1)),
            "dh": np.tile(eta, 7),
            "u": np.tile(e, (7, 1)),
            "G": np.tile(G, (7, 1, 1)),
        }

    rows, sl = _batch(R.ALL_KERNELS, per)
    out = evaluate(device, F64, dim, **rows)
    for k in R.ALL_KERNELS:
        s = sl[k]
        m = (s.stop - s.start) // 7

        def part(name, j, s=s, m=m):
            return out[name][s][j * m : (j + 1) * m]

        def fd(name, plus, minus):
            return (part(name, plus) - part(name, minus)) / (2 * delta)

        e = rows["dx"][s][:m]
        HG = np.einsum("nab,nab->n", out["H"][s], rows["G"][s])
        HG_parts = [HG[j * m : (j + 1) * m] for j in range(7)]
        checks = {
            "gradW.e": (np.einsum("na,na->n", part("gradW", 0), e), fd("W", 1, 2)),
            "H.e": (np.einsum("nab,nb->na", part("H", 0), e), fd("gradW", 1, 2)),
            "T.u": (part("Tu", 0), fd("H", 1, 2)),
            "T:G.e": (
                np.einsum("na,na->n", part("TG", 0), e),
                (HG_parts[1] - HG_parts[2]) / (2 * delta),
            ),
            "lapGrad.e": (np.einsum("na,na->n", part("lapGrad", 0), e), fd("lap", 1, 2)),
            "dWdh": (part("dWdh", 0), fd("W", 3, 4)),
            "dGraddh": (part("dGraddh", 0), fd("gradW", 3, 4)),
            "d2Graddh2": (part("d2Graddh2", 0), fd("dGraddh", 3, 4)),
            "dHdh": (part("dHdh", 0), fd("H", 3, 4)),
            "lapDh": (part("lapDh", 0), fd("lap", 3, 4)),
            "jvpW": (part("jvpW", 0), fd("W", 5, 6)),
            "gradJVP": (part("gradJVP", 0), fd("gradW", 5, 6)),
            "HJVP": (part("HJVP", 0), fd("H", 5, 6)),
            "lapJVP": (part("lapJVP", 0), fd("lap", 5, 6)),
        }
        for name, (analytic, numeric) in checks.items():
            _close(numeric, analytic, 1e-6, f"{R.NAMES[k]} d={dim} {name}")


def test_laplacian_is_trace_of_hessian(device, dtype, dim):
    """The kernel Laplacian equals tr H for q > eps (both regularisations agree to O(eps/q))."""
    rng = np.random.default_rng(17)
    npT = _npT(dtype)

    def per(k):
        q = rng.uniform(0.05, 1.0, 30)
        q = q[_keep(k, q)]
        h = rng.uniform(0.5, 2.0, len(q))
        return {"x": (_unit(rng, len(q), dim) * (q * h)[:, None]).astype(npT), "h": h}

    rows, sl = _batch(R.ALL_KERNELS, per)
    out = evaluate(device, dtype, dim, **rows)
    tol = 1e-11 if dtype == F64 else 1e-4
    for k in R.ALL_KERNELS:
        s = sl[k]
        trace = np.trace(out["H"][s], axis1=1, axis2=2)
        _close(out["lap"][s].astype(np.float64), trace.astype(np.float64), tol, R.NAMES[k])


def test_float32_agrees_with_float64(device, dim):
    """The float32 overloads give the float64 values to float32 precision (same inputs)."""
    rng = np.random.default_rng(23)

    def per(k):
        q = rng.uniform(0.0, 1.1, 30)
        q = q[_keep(k, q, 1e-3)]
        m = len(q)
        h = rng.uniform(0.5, 2.0, m)
        return {
            "x": (_unit(rng, m, dim) * (q * h)[:, None]).astype(np.float32),
            "h": h.astype(np.float32),
            "hj": rng.uniform(0.5, 2.0, m).astype(np.float32),
            "dx": rng.normal(size=(m, dim)).astype(np.float32),
            "dh": rng.normal(size=m).astype(np.float32),
            "dhj": rng.normal(size=m).astype(np.float32),
            "u": rng.normal(size=(m, dim)).astype(np.float32),
            "G": rng.normal(size=(m, dim, dim)).astype(np.float32),
            "mode": rng.integers(11, 17, m).astype(np.int32),
        }

    rows, sl = _batch(R.ALL_KERNELS, per)
    o32 = evaluate(device, torch.float32, dim, **rows)
    o64 = evaluate(device, F64, dim, **rows)
    for name in ALL_OUTPUTS:
        assert o32[name].dtype == np.float32 and o64[name].dtype == np.float64
        for k in R.ALL_KERNELS:
            s = sl[k]
            keep = _qmask(name, torch.float32, rows["x"][s], rows["h"][s], k)
            _close(
                o32[name][s][keep].astype(np.float64),
                o64[name][s][keep],
                1e-4,
                f"{R.NAMES[k]} d={dim} {name}",
            )


def test_unknown_kernel_is_nan(device, dtype, dim):
    out = evaluate(device, dtype, dim, x=np.full((2, dim), 0.1), kernel=np.array([5, 99], np.int32))
    assert np.all(np.isnan(out["W"])) and np.all(np.isnan(out["gradW"]))
