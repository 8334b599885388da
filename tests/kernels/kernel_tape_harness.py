"""Test harness: ONE differentiable Warp kernel for Warp-tape adjoints of the kernel layer.

Per row it evaluates the loss
    L_i = sum_k wS[i, k] s_k + sum_k wV[i, k] . v_k + sum_k wM[i, k] : M_k
over the scalar, vector and matrix quantities listed in `S_TERMS`, `V_TERMS`, `M_TERMS`, and
`adjoints` returns dL_i / d(x, h, hj, dx, dh, dhj) from `wp.Tape`. A test selects one
quantity by giving it a non-zero weight. All six (d, dtype) overloads are registered up
front so the module compiles once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import warp as wp

from warpSPHCore.kernels import (
    sphGradientDkDh,
    sphGradientDkDh_ij,
    sphKernel,
    sphKernel_ij,
    sphKernelDkDh,
    sphKernelDkDh_ij,
    sphKernelGradient,
    sphKernelGradient_ij,
    sphKernelGradientJVP,
    sphKernelGradientJVP_ij,
    sphKernelGradientJVPPositions_ij,
    sphKernelHessian,
    sphKernelHessian_ij,
    sphKernelJVP,
    sphKernelJVP_ij,
    sphKernelJVPPositions_ij,
    sphKernelLaplacian,
    sphKernelLaplacian_ij,
    sphKernelLaplacianGradient,
    sphKernelLaplacianJVP,
    sphKernelLaplacianJVP_ij,
)
from warpSPHCore.util.warpContext import warpDevice

# -O0: compiled cold by every fresh checkout.
wp.set_module_options({"enable_backward": True, "optimization_level": 0})

S_TERMS = "W dWdh lap jvpW lapJVP W_ij jvpW_ij lap_ij lapJVP_ij dWdh_ij jvpWPos_ij".split()
V_TERMS = ("gradW dGraddh gradJVP lapGrad gradW_ij gradJVP_ij dGraddh_ij gradJVPPos_ij"
           .split())
M_TERMS = "H H_ij".split()


@wp.kernel
def lossKernel(
    x: wp.array(dtype=Any),
    h: wp.array(dtype=Any),
    hj: wp.array(dtype=Any),
    dx: wp.array(dtype=Any),
    dh: wp.array(dtype=Any),
    dhj: wp.array(dtype=Any),
    kernel: wp.array(dtype=wp.int32),
    mode: wp.array(dtype=wp.int32),
    d: wp.int32,
    wS: wp.array2d(dtype=Any),
    wV: wp.array2d(dtype=Any),
    wM: wp.array2d(dtype=Any),
    out: wp.array(dtype=Any),
):
    i = wp.tid()
    xi = x[i]
    hi = h[i]
    hji = hj[i]
    dxi = dx[i]
    dhi = dh[i]
    dhji = dhj[i]
    k = kernel[i]
    m = mode[i]

    L = wS[i, 0] * sphKernel(xi, hi, k, d)
    L += wS[i, 1] * sphKernelDkDh(xi, hi, k, d)
    L += wS[i, 2] * sphKernelLaplacian(xi, hi, k, d)
    L += wS[i, 3] * sphKernelJVP(xi, hi, dxi, dhi, k, d)
    L += wS[i, 4] * sphKernelLaplacianJVP(xi, hi, dxi, dhi, k, d)
    L += wS[i, 5] * sphKernel_ij(xi, hi, hji, m, k, d)
    L += wS[i, 6] * sphKernelJVP_ij(xi, hi, hji, dxi, dhi, dhji, m, k, d)
    L += wS[i, 7] * sphKernelLaplacian_ij(xi, hi, hji, m, k, d)
    L += wS[i, 8] * sphKernelLaplacianJVP_ij(xi, hi, hji, dxi, dhi, dhji, m, k, d)
    L += wS[i, 9] * sphKernelDkDh_ij(xi, hi, hji, m, k, d)
    L += wS[i, 10] * sphKernelJVPPositions_ij(xi, hi, hji, dxi, m, k, d)

    L += wp.dot(wV[i, 0], sphKernelGradient(xi, hi, k, d))
    L += wp.dot(wV[i, 1], sphGradientDkDh(xi, hi, k, d))
    L += wp.dot(wV[i, 2], sphKernelGradientJVP(xi, hi, dxi, dhi, k, d))
    L += wp.dot(wV[i, 3], sphKernelLaplacianGradient(xi, hi, k, d))
    L += wp.dot(wV[i, 4], sphKernelGradient_ij(xi, hi, hji, m, k, d))
    L += wp.dot(wV[i, 5], sphKernelGradientJVP_ij(xi, hi, hji, dxi, dhi, dhji, m, k, d))
    L += wp.dot(wV[i, 6], sphGradientDkDh_ij(xi, hi, hji, m, k, d))
    L += wp.dot(wV[i, 7], sphKernelGradientJVPPositions_ij(xi, hi, hji, dxi, m, k, d))

    L += wp.ddot(wM[i, 0], sphKernelHessian(xi, hi, k, d))
    L += wp.ddot(wM[i, 1], sphKernelHessian_ij(xi, hi, hji, m, k, d))
    out[i] = L


SCALARS = {torch.float32: wp.float32, torch.float64: wp.float64}
NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def _types(d, dtype):
    s = SCALARS[dtype]
    return s, wp.types.vector(length=d, dtype=s), wp.types.matrix(shape=(d, d), dtype=s)


def _registerOverloads():
    for dtype in SCALARS:
        for d in (1, 2, 3):
            s, v, m = _types(d, dtype)
            wp.overload(
                lossKernel,
                {
                    "x": wp.array(dtype=v),
                    "h": wp.array(dtype=s),
                    "hj": wp.array(dtype=s),
                    "dx": wp.array(dtype=v),
                    "dh": wp.array(dtype=s),
                    "dhj": wp.array(dtype=s),
                    "wS": wp.array2d(dtype=s),
                    "wV": wp.array2d(dtype=v),
                    "wM": wp.array2d(dtype=m),
                    "out": wp.array(dtype=s),
                },
            )


_registerOverloads()


def adjoints(device, dtype, d, term, weight, **rows):
    """Warp-tape adjoints of `weight . term` per row.

    `term` names one entry of S_TERMS / V_TERMS / M_TERMS; `weight` broadcasts to [n],
    [n, d] or [n, d, d] accordingly. Rows as in `kernel_eval_harness.evaluate` (x, h, hj,
    dx, dh, dhj, kernel, mode). Returns dict with the loss and its adjoints (NumPy).
    """
    n = max(np.asarray(v).shape[0] if np.ndim(v) > 0 else 1 for v in rows.values())
    npT = NP_DTYPES[dtype]
    r = {
        "x": np.zeros((n, d)),
        "h": np.ones(n),
        "hj": np.ones(n),
        "dx": np.zeros((n, d)),
        "dh": np.zeros(n),
        "dhj": np.zeros(n),
        "kernel": np.zeros(n, dtype=np.int32),
        "mode": np.full(n, 11, dtype=np.int32),
    }
    for key, val in rows.items():
        r[key] = np.broadcast_to(np.asarray(val), r[key].shape).copy()
    wS = np.zeros((n, len(S_TERMS)))
    wV = np.zeros((n, len(V_TERMS), d))
    wM = np.zeros((n, len(M_TERMS), d, d))
    if term in S_TERMS:
        wS[:, S_TERMS.index(term)] = np.broadcast_to(weight, (n,))
    elif term in V_TERMS:
        wV[:, V_TERMS.index(term)] = np.broadcast_to(weight, (n, d))
    else:
        wM[:, M_TERMS.index(term)] = np.broadcast_to(weight, (n, d, d))

    dev = warpDevice(device)
    s, v, m = _types(d, dtype)

    def arr(a, t, grad):
        return wp.array(np.ascontiguousarray(a, dtype=npT), dtype=t, device=dev, requires_grad=grad)

    diff = {
        "x": arr(r["x"], v, True),
        "h": arr(r["h"], s, True),
        "hj": arr(r["hj"], s, True),
        "dx": arr(r["dx"], v, True),
        "dh": arr(r["dh"], s, True),
        "dhj": arr(r["dhj"], s, True),
    }
    out = wp.zeros(n, dtype=s, device=dev, requires_grad=True)
    inputs = [
        *diff.values(),
        wp.array(np.ascontiguousarray(r["kernel"], dtype=np.int32), dtype=wp.int32, device=dev),
        wp.array(np.ascontiguousarray(r["mode"], dtype=np.int32), dtype=wp.int32, device=dev),
        wp.int32(d),
        arr(wS, s, False),
        arr(wV, v, False),
        arr(wM, m, False),
    ]
    tape = wp.Tape()
    with tape:
        wp.launch(lossKernel, dim=n, inputs=inputs, outputs=[out], device=dev)
    tape.backward(grads={out: wp.ones(n, dtype=s, device=dev)})
    res = {"loss": out.numpy().copy()}
    for key, a in diff.items():
        res[key] = a.grad.numpy().copy()
    tape.zero()
    return res
