"""Corrected kernel and corrected kernel gradient (`operators.md` §2.0, §4.3, §4.4) — the pair
functions shared by every gradient-family operator.

* `correctedKernel_ij(corr, i, x_ij, W_ij)`: ``W^R_ij = A_i (1 + B_i . x_ij) W_ij`` with CRK,
  else ``W_ij``.
* `correctedGradient_ij(corr, ks, dom, i, x_ij, h_i, h_j)`: G_ij —
  1. ``G = grad W_ij`` under the call's support scheme (`kernels.md` §6);
  2. with CRK: ``G = grad W^R_ij = A W B + A (1 + B.x) grad W + (1 + B.x) W grad A
     + A W (grad B x)`` with ``(grad B x)_g = sum_c gradB[g, c] x_c`` (matrix times vector,
     never the transpose, W2);
  3. with renormalization: ``G = L_i G`` (matrix times vector).
  Only the query particle's CRK terms and L_i are read (through the correction accessors,
  which return zeros when a correction is off, so no placeholder is ever indexed).

The lattice calibration factor is NOT applied here; operators multiply their sums by it.
Every contraction goes through Warp's tested helpers (`wp.dot`, matrix x vector) and every
accumulation is whole-vector (W2, W74).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import getCRK_i, getCRKGrad_i, getL_i
from ..kernels.support import sphKernel_ij, sphKernelGradient_ij

__all__ = ["correctedKernel_ij", "correctedGradient_ij"]


@wp.func
def correctedKernel_ij(corr: Any, i: wp.int32, x_ij: Any, W_ij: Any):
    """W^R_ij = A_i (1 + B_i . x_ij) W_ij with CRK, else W_ij."""
    useCRK, A_i, B_i = getCRK_i(corr, i)
    res = W_ij
    if useCRK:
        res = A_i * (type(W_ij)(1.0) + wp.dot(B_i, x_ij)) * W_ij
    return res


@wp.func
def correctedGradient_ij(corr: Any, ks: Any, dom: Any, i: wp.int32, x_ij: Any, h_i: Any,
                         h_j: Any):
    """G_ij: grad W_ij, CRK-corrected (query-side A, B, grad A, grad B), then L_i G."""
    G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
    useCRK, A_i, B_i = getCRK_i(corr, i)
    if useCRK:
        useGrad, gA_i, gB_i = getCRKGrad_i(corr, i)
        W_ij = sphKernel_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
        s = type(W_ij)(1.0) + wp.dot(B_i, x_ij)
        gBx = wp.mul(gB_i, x_ij)
        G = (A_i * W_ij) * B_i + (A_i * s) * G + (s * W_ij) * gA_i + (A_i * W_ij) * gBx
    useL, L_i = getL_i(corr, i)
    if useL:
        G = wp.mul(L_i, G)
    return G
