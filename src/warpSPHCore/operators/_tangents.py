"""Pair building blocks of the Tier-2 JVP kernels (geometry tangents, docs/forward-mode.md) —
the exact derivatives of the primal pair functions with the values frozen and the neighbour
structure fixed. One definition each, shared by every operator's JVP kernel.

``t`` is the tangent pack (`arg_extract.structFor("tangent", d, s)`); every read of it is
gated by its presence flag.

* `pairTangent_ij(t, i, j, x_ij, h_i)` -> ``(dx_ij, dh_i, dh_j)``: ``dx_i - dx_j`` (the
  periodic wrap is not differentiated) and the support tangents (0 where absent).
* `correctedKernelJVP_ij(corr, ks, dom, t, i, x_ij, h_i, h_j, dx, dh_i, dh_j)` ->
  ``(W^R, dW^R)`` with ``dW^R = dA (1 + B.x) W + A (dB.x + B.dx) W + A (1 + B.x) dW``.
* `correctedGradientJVP_ij(...)` -> ``(G, dG)``: the product rule on the four CRK terms
  (`corrected.correctedGradient_ij`, ``(d grad B) x + grad B dx`` for the last), then
  ``d(L G) = dL G + L dG``.

The scheme coefficients' tangents (dV_j, dc_ij, the Laplacian's ds_ij and dq_ij) live beside
their values and adjoints in `_coefficients` (`apparentVolumeJVP_j`, `fieldCoefficientJVP_ij`,
`laplacianScaleJVP_ij`, `laplacianDifferenceJVP_ij`).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..kernels.support import (
    sphKernel_ij,
    sphKernelGradient_ij,
    sphKernelGradientJVP_ij,
    sphKernelGradientJVPPositions_ij,
    sphKernelJVP_ij,
    sphKernelJVPPositions_ij,
)
from .corrected import crkGradient

__all__ = ["pairTangent_ij", "supportTangentPresent", "coefficientTangentPresent",
           "kernelJVP_ij", "kernelGradientJVP_ij", "correctedKernelJVP_ij",
           "correctedGradientJVP_ij"]


@wp.func
def pairTangent_ij(t: Any, i: wp.int32, j: wp.int32, x_ij: Any, h_i: Any):
    """(dx_i - dx_j, dh_i, dh_j) from the pack; absent tangents are 0."""
    dx = type(x_ij)()
    if t.hasQPositions:
        dx = dx + t.qPositions[i]
    if t.hasRPositions:
        dx = dx - t.rPositions[j]
    dh_i = type(h_i)(0.0)
    dh_j = type(h_i)(0.0)
    if t.hasQSupports:
        dh_i = t.qSupports[i]
    if t.hasRSupports:
        dh_j = t.rSupports[j]
    return dx, dh_i, dh_j


@wp.func
def supportTangentPresent(t: Any):
    """True when either support carries a tangent (launch-constant flags). Without one the
    kernel tangents skip every d/dh evaluation (`sphKernel*JVPPositions_ij`)."""
    return t.hasQSupports or t.hasRSupports


@wp.func
def coefficientTangentPresent(t: Any):
    """True when a field coefficient c_ij can have a tangent: a value tangent, or a mass,
    density, reference-volume or Omega tangent. Otherwise dc_ij is identically 0 (not only its
    value: every input it reads is absent), so ``dc G`` and its adjoints vanish and G need not
    be evaluated."""
    return (t.hasValueTangent or t.hasRMasses or t.hasQDensities or t.hasRDensities
            or t.hasRVolumes or t.hasQOmegas or t.hasROmegas)


@wp.func
def kernelJVP_ij(x_ij: Any, h_i: Any, h_j: Any, dx: Any, dh_i: Any, dh_j: Any, ks: Any,
                 dom: Any, t: Any):
    """dW_ij for the pair tangents; the position-only form without support tangents."""
    res = type(h_i)(0.0)
    if supportTangentPresent(t):
        res = sphKernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks.supportMode,
                              ks.kernelFunction, dom.dim)
    else:
        res = sphKernelJVPPositions_ij(x_ij, h_i, h_j, dx, ks.supportMode, ks.kernelFunction,
                                       dom.dim)
    return res


@wp.func
def kernelGradientJVP_ij(x_ij: Any, h_i: Any, h_j: Any, dx: Any, dh_i: Any, dh_j: Any,
                         ks: Any, dom: Any, t: Any):
    """d grad W_ij for the pair tangents; H_ij dx without support tangents."""
    res = type(x_ij)()
    if supportTangentPresent(t):
        res = sphKernelGradientJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks.supportMode,
                                      ks.kernelFunction, dom.dim)
    else:
        res = sphKernelGradientJVPPositions_ij(x_ij, h_i, h_j, dx, ks.supportMode,
                                               ks.kernelFunction, dom.dim)
    return res


@wp.func
def correctedKernelJVP_ij(corr: Any, ks: Any, dom: Any, t: Any, i: wp.int32, x_ij: Any,
                          h_i: Any, h_j: Any, dx: Any, dh_i: Any, dh_j: Any):
    """(W^R_ij, dW^R_ij); CRK terms read behind the call's flag, their tangent behind the
    pack's."""
    W = sphKernel_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
    dW = kernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
    WR = W
    dWR = dW
    if corr.useCRK:
        A = corr.queryA[i]
        B = corr.queryB[i]
        s = type(W)(1.0) + wp.dot(B, x_ij)
        WR = A * s * W
        dWR = A * wp.dot(B, dx) * W + A * s * dW
        if t.hasCRK:
            dWR = dWR + t.A[i] * s * W + A * wp.dot(t.B[i], x_ij) * W
    return WR, dWR


@wp.func
def correctedGradientJVP_ij(corr: Any, ks: Any, dom: Any, t: Any, i: wp.int32, x_ij: Any,
                            h_i: Any, h_j: Any, dx: Any, dh_i: Any, dh_j: Any,
                            needG: wp.bool):
    """(G_ij, dG_ij) of `corrected.correctedGradient_ij` for the pair tangents (dx, dh_i,
    dh_j) and the pack's CRK / renormalization tangents. `needG` False: the caller only
    multiplies G by an identically-zero tangent (`coefficientTangentPresent`), so G is not
    evaluated unless dG itself needs it (CRK, a renormalization tangent) and 0 is returned."""
    G0 = type(x_ij)()
    if needG or corr.useCRK or (corr.useGradientRenormalization and t.hasRenormalization):
        G0 = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
    dG0 = kernelGradientJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
    G = G0
    dG = dG0
    if corr.useCRK:
        W = sphKernel_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
        dW = kernelJVP_ij(x_ij, h_i, h_j, dx, dh_i, dh_j, ks, dom, t)
        A = corr.queryA[i]
        B = corr.queryB[i]
        gA = corr.queryGradA[i]
        gB = corr.queryGradB[i]
        s = type(W)(1.0) + wp.dot(B, x_ij)
        ds = wp.dot(B, dx)
        dA = type(W)(0.0)
        dB = type(x_ij)()
        dgA = type(x_ij)()
        dgB = type(gB)()
        if t.hasCRK:
            dA = t.A[i]
            dB = t.B[i]
            dgA = t.gradA[i]
            dgB = t.gradB[i]
            ds = ds + wp.dot(dB, x_ij)
        G = crkGradient(A, B, gA, gB, x_ij, W, G0)
        dAW = dA * W + A * dW
        dG = (dAW * B + (A * W) * dB
              + (dA * s + A * ds) * G0 + (A * s) * dG0
              + (ds * W + s * dW) * gA + (s * W) * dgA
              + dAW * wp.mul(gB, x_ij) + (A * W) * (wp.mul(dgB, x_ij) + wp.mul(gB, dx)))
    if corr.useGradientRenormalization:
        L = corr.renormalizationMatrices[i]
        LdG = wp.mul(L, dG)
        if t.hasRenormalization:
            LdG = LdG + wp.mul(t.L[i], G)
        G = wp.mul(L, G)
        dG = LdG
    return G, dG
