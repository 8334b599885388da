"""Test harness: ONE forward-only Warp kernel that evaluates every Warp-level kernel
quantity for a batch of rows, and ONE differentiable "loss" kernel for Warp-tape adjoints.

Compile budget: the forward kernel lives in this module with
``enable_backward=False``; the loss kernel lives in `kernel_tape_harness` (backward on).
All six (d, dtype) overloads of each kernel are registered up front with `wp.overload`, so
each module compiles once instead of once per newly seen overload.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import warp as wp

from warpSPHCore.kernels import (
    computePairwiseSupport,
    computePairwiseSupportJVP,
    sphGradientD2kDh2,
    sphGradientDkDh,
    sphGradientDkDh_ij,
    sphKernel,
    sphKernel_ij,
    sphKernel_xi_warp,
    sphKernelC_d_warp,
    sphKernelDkDh,
    sphKernelDkDh_ij,
    sphKernelEps,
    sphKernelGradient,
    sphKernelGradient_ij,
    sphKernelGradientJVP,
    sphKernelGradientJVP_ij,
    sphKernelGradientJVPPositions_ij,
    sphKernelHessian,
    sphKernelHessian_ij,
    sphKernelHessianDkDh,
    sphKernelHessianDot,
    sphKernelHessianJVP,
    sphKernelJVP,
    sphKernelJVP_ij,
    sphKernelJVPPositions_ij,
    sphKernelLaplacian,
    sphKernelLaplacian_ij,
    sphKernelLaplacianDkDh,
    sphKernelLaplacianDkDh_ij,
    sphKernelLaplacianGradient,
    sphKernelLaplacianGradient_ij,
    sphKernelLaplacianJVP,
    sphKernelLaplacianJVP_ij,
    sphKernelN_H_warp,
    sphKernelScale_warp,
    sphKernelThirdDerivative,
    sphKernelThirdDerivativeContract,
    sphShape,
)
from warpSPHCore.util.warpContext import warpDevice

# Forward-only, and -O0: this module is compiled cold by every fresh checkout and the
# tested arithmetic does not depend on the optimisation level.
wp.set_module_options({"enable_backward": False, "optimization_level": 0})

# scalar output slots
S_NAMES = (
    "W dWdh lap lapDh jvpW lapJVP k k1 k2 k3 C_d W_ij jvpW_ij dWdh_ij lap_ij lapDh_ij "
    "lapJVP_ij h_ij dh_ij eps jvpWPos_ij"
).split()
# vector output slots
V_NAMES = (
    "gradW dGraddh d2Graddh2 lapGrad gradJVP TG gradW_ij gradJVP_ij dGraddh_ij lapGrad_ij "
    "Hu gradJVPPos_ij"
).split()
# matrix output slots
M_NAMES = "H dHdh Tu HJVP H_ij".split()
# float64 metadata slots
META_NAMES = "C_d64 scale xi N_H".split()

_S = {n: i for i, n in enumerate(S_NAMES)}
_V = {n: i for i, n in enumerate(V_NAMES)}
_M = {n: i for i, n in enumerate(M_NAMES)}


@wp.kernel
def evalAll(
    x: wp.array(dtype=Any),
    h: wp.array(dtype=Any),
    hj: wp.array(dtype=Any),
    dx: wp.array(dtype=Any),
    dh: wp.array(dtype=Any),
    dhj: wp.array(dtype=Any),
    u: wp.array(dtype=Any),
    G: wp.array(dtype=Any),
    q: wp.array(dtype=Any),
    kernel: wp.array(dtype=wp.int32),
    mode: wp.array(dtype=wp.int32),
    d: wp.int32,
    outS: wp.array2d(dtype=Any),
    outV: wp.array2d(dtype=Any),
    outM: wp.array2d(dtype=Any),
    outMeta: wp.array2d(dtype=wp.float64),
):
    i = wp.tid()
    xi = x[i]
    hi = h[i]
    k = kernel[i]
    m = mode[i]

    outS[i, 0] = sphKernel(xi, hi, k, d)
    outS[i, 1] = sphKernelDkDh(xi, hi, k, d)
    outS[i, 2] = sphKernelLaplacian(xi, hi, k, d)
    outS[i, 3] = sphKernelLaplacianDkDh(xi, hi, k, d)
    outS[i, 4] = sphKernelJVP(xi, hi, dx[i], dh[i], k, d)
    outS[i, 5] = sphKernelLaplacianJVP(xi, hi, dx[i], dh[i], k, d)
    s = sphShape(q[i], k, d)
    outS[i, 6] = s[0]
    outS[i, 7] = s[1]
    outS[i, 8] = s[2]
    outS[i, 9] = s[3]
    outS[i, 10] = type(hi)(sphKernelC_d_warp(k, d))
    outS[i, 11] = sphKernel_ij(xi, hi, hj[i], m, k, d)
    outS[i, 12] = sphKernelJVP_ij(xi, hi, hj[i], dx[i], dh[i], dhj[i], m, k, d)
    outS[i, 13] = sphKernelDkDh_ij(xi, hi, hj[i], m, k, d)
    outS[i, 14] = sphKernelLaplacian_ij(xi, hi, hj[i], m, k, d)
    outS[i, 15] = sphKernelLaplacianDkDh_ij(xi, hi, hj[i], m, k, d)
    outS[i, 16] = sphKernelLaplacianJVP_ij(xi, hi, hj[i], dx[i], dh[i], dhj[i], m, k, d)
    outS[i, 17] = computePairwiseSupport(hi, hj[i], m)
    outS[i, 18] = computePairwiseSupportJVP(hi, hj[i], dh[i], dhj[i], m)
    outS[i, 19] = sphKernelEps(hi)
    outS[i, 20] = sphKernelJVPPositions_ij(xi, hi, hj[i], dx[i], m, k, d)

    outV[i, 0] = sphKernelGradient(xi, hi, k, d)
    outV[i, 1] = sphGradientDkDh(xi, hi, k, d)
    outV[i, 2] = sphGradientD2kDh2(xi, hi, k, d)
    outV[i, 3] = sphKernelLaplacianGradient(xi, hi, k, d)
    outV[i, 4] = sphKernelGradientJVP(xi, hi, dx[i], dh[i], k, d)
    outV[i, 5] = sphKernelThirdDerivativeContract(xi, hi, G[i], k, d)
    outV[i, 6] = sphKernelGradient_ij(xi, hi, hj[i], m, k, d)
    outV[i, 7] = sphKernelGradientJVP_ij(xi, hi, hj[i], dx[i], dh[i], dhj[i], m, k, d)
    outV[i, 8] = sphGradientDkDh_ij(xi, hi, hj[i], m, k, d)
    outV[i, 9] = sphKernelLaplacianGradient_ij(xi, hi, hj[i], m, k, d)
    outV[i, 10] = sphKernelHessianDot(xi, hi, u[i], k, d)
    outV[i, 11] = sphKernelGradientJVPPositions_ij(xi, hi, hj[i], dx[i], m, k, d)

    outM[i, 0] = sphKernelHessian(xi, hi, k, d)
    outM[i, 1] = sphKernelHessianDkDh(xi, hi, k, d)
    outM[i, 2] = sphKernelThirdDerivative(xi, hi, u[i], k, d)
    outM[i, 3] = sphKernelHessianJVP(xi, hi, dx[i], dh[i], k, d)
    outM[i, 4] = sphKernelHessian_ij(xi, hi, hj[i], m, k, d)

    outMeta[i, 0] = sphKernelC_d_warp(k, d)
    outMeta[i, 1] = sphKernelScale_warp(k, d)
    outMeta[i, 2] = sphKernel_xi_warp(k, d)
    outMeta[i, 3] = sphKernelN_H_warp(k, d)


@wp.kernel
def evalPairUint32(
    x: wp.array(dtype=wp.vec3d),
    h: wp.array(dtype=wp.float64),
    hj: wp.array(dtype=wp.float64),
    mode: wp.array(dtype=wp.uint32),
    kernel: wp.array(dtype=wp.int32),
    W: wp.array(dtype=wp.float64),
    gradW: wp.array(dtype=wp.vec3d),
    lap: wp.array(dtype=wp.float64),
):
    """`supportMode` passed as uint32 (the bridge's encoding), 3D float64 only."""
    i = wp.tid()
    W[i] = sphKernel_ij(x[i], h[i], hj[i], mode[i], kernel[i], 3)
    gradW[i] = sphKernelGradient_ij(x[i], h[i], hj[i], mode[i], kernel[i], 3)
    lap[i] = sphKernelLaplacian_ij(x[i], h[i], hj[i], mode[i], kernel[i], 3)


def evaluatePairUint32(device, x, h, hj, mode, kernel):
    dev = warpDevice(device)
    n = len(x)
    W = wp.zeros(n, dtype=wp.float64, device=dev)
    gradW = wp.zeros(n, dtype=wp.vec3d, device=dev)
    lap = wp.zeros(n, dtype=wp.float64, device=dev)
    wp.launch(
        evalPairUint32,
        dim=n,
        inputs=[
            wp.array(np.ascontiguousarray(x, np.float64), dtype=wp.vec3d, device=dev),
            wp.array(np.ascontiguousarray(h, np.float64), dtype=wp.float64, device=dev),
            wp.array(np.ascontiguousarray(hj, np.float64), dtype=wp.float64, device=dev),
            wp.array(np.ascontiguousarray(mode, np.uint32), dtype=wp.uint32, device=dev),
            wp.array(np.ascontiguousarray(kernel, np.int32), dtype=wp.int32, device=dev),
        ],
        outputs=[W, gradW, lap],
        device=dev,
    )
    return W.numpy().copy(), gradW.numpy().copy(), lap.numpy().copy()


SCALARS = {torch.float32: wp.float32, torch.float64: wp.float64}
NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def vecType(d, dtype):
    return wp.types.vector(length=d, dtype=SCALARS[dtype])


def matType(d, dtype):
    return wp.types.matrix(shape=(d, d), dtype=SCALARS[dtype])


def _registerOverloads():
    for dtype, s in SCALARS.items():
        for d in (1, 2, 3):
            v = vecType(d, dtype)
            m = matType(d, dtype)
            wp.overload(
                evalAll,
                {
                    "x": wp.array(dtype=v),
                    "h": wp.array(dtype=s),
                    "hj": wp.array(dtype=s),
                    "dx": wp.array(dtype=v),
                    "dh": wp.array(dtype=s),
                    "dhj": wp.array(dtype=s),
                    "u": wp.array(dtype=v),
                    "G": wp.array(dtype=m),
                    "q": wp.array(dtype=s),
                    "outS": wp.array2d(dtype=s),
                    "outV": wp.array2d(dtype=v),
                    "outM": wp.array2d(dtype=m),
                },
            )


_registerOverloads()


def prepareRows(d, dtype, n, **rows):
    """Fill default inputs: zeros for tangents, h = hj = 1, Gather, kernel 0."""
    npT = NP_DTYPES[dtype]
    out = {
        "x": np.zeros((n, d)),
        "h": np.ones(n),
        "hj": np.ones(n),
        "dx": np.zeros((n, d)),
        "dh": np.zeros(n),
        "dhj": np.zeros(n),
        "u": np.zeros((n, d)),
        "G": np.zeros((n, d, d)),
        "q": np.zeros(n),
        "kernel": np.zeros(n, dtype=np.int32),
        "mode": np.full(n, 11, dtype=np.int32),
    }
    for key, val in rows.items():
        val = np.asarray(val)
        out[key] = np.broadcast_to(val, out[key].shape).copy()
    for key in out:
        if key in ("kernel", "mode"):
            out[key] = np.ascontiguousarray(out[key], dtype=np.int32)
        else:
            out[key] = np.ascontiguousarray(out[key], dtype=npT)
    return out


def evaluate(device, dtype, d, **rows):
    """Evaluate every quantity for the given rows; returns a dict of NumPy arrays.

    Row inputs (NumPy, broadcast to n rows): x [n, d], h, hj, dx [n, d], dh, dhj, u [n, d],
    G [n, d, d], q, kernel (int), mode (int). n is taken from the longest leading axis.
    """
    n = max(np.asarray(v).shape[0] if np.ndim(v) > 0 else 1 for v in rows.values())
    r = prepareRows(d, dtype, n, **rows)
    dev = warpDevice(device)
    s = SCALARS[dtype]
    v = vecType(d, dtype)
    m = matType(d, dtype)
    inputs = [
        wp.array(r["x"], dtype=v, device=dev),
        wp.array(r["h"], dtype=s, device=dev),
        wp.array(r["hj"], dtype=s, device=dev),
        wp.array(r["dx"], dtype=v, device=dev),
        wp.array(r["dh"], dtype=s, device=dev),
        wp.array(r["dhj"], dtype=s, device=dev),
        wp.array(r["u"], dtype=v, device=dev),
        wp.array(r["G"], dtype=m, device=dev),
        wp.array(r["q"], dtype=s, device=dev),
        wp.array(r["kernel"], dtype=wp.int32, device=dev),
        wp.array(r["mode"], dtype=wp.int32, device=dev),
        wp.int32(d),
    ]
    outS = wp.zeros((n, len(S_NAMES)), dtype=s, device=dev)
    outV = wp.zeros((n, len(V_NAMES)), dtype=v, device=dev)
    outM = wp.zeros((n, len(M_NAMES)), dtype=m, device=dev)
    outMeta = wp.zeros((n, len(META_NAMES)), dtype=wp.float64, device=dev)
    wp.launch(evalAll, dim=n, inputs=inputs, outputs=[outS, outV, outM, outMeta], device=dev)
    S = outS.numpy().copy()
    V = outV.numpy().copy()
    M = outM.numpy().copy()
    meta = outMeta.numpy().copy()
    res = {}
    for name, i in _S.items():
        res[name] = S[:, i]
    for name, i in _V.items():
        res[name] = V[:, i]
    for name, i in _M.items():
        res[name] = M[:, i]
    for i, name in enumerate(META_NAMES):
        res[name] = meta[:, i]
    return res
