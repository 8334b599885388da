"""Corrected kernel and corrected kernel gradient — the pair functions shared by every
gradient-family operator.

* `correctedKernel_ij(corr, i, x_ij, W_ij)`: ``W^R_ij = A_i (1 + B_i . x_ij) W_ij`` with CRK,
  else ``W_ij``.
* `correctedGradient_ij(corr, ks, dom, i, x_ij, h_i, h_j)`: G_ij —
  1. ``G = grad W_ij`` under the call's support scheme (`SupportScheme`, docs/kernels.md);
  2. with CRK: ``G = grad W^R_ij = A W B + A (1 + B.x) grad W + (1 + B.x) W grad A
     + A W (grad B x)`` with ``(grad B x)_g = sum_c gradB[g, c] x_c`` (matrix times vector,
     never the transpose);
  3. with renormalization: ``G = L_i G`` (matrix times vector).
  Only the query particle's CRK terms and L_i are read, each behind its correction's flag
  (so no placeholder is ever indexed, and a disabled correction costs one flag test per
  pair: reading them unconditionally through the accessors made the uncorrected Gradient's
  forward + backward ~1.15x slower, docs/performance.md).

The lattice calibration factor is NOT applied here; operators multiply their sums by it.
Every contraction goes through Warp's tested helpers (`wp.dot`, matrix x vector) and every
accumulation is whole-vector: Warp gives a wrong adjoint to a hand-written index loop and
double-counts the adjoint of a component update ``v[k] = v[k] + x`` of a local vector.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from ..autograd.arg_extract import getCRK_i
from ..kernels.support import sphKernel_ij, sphKernelGradient_ij

__all__ = ["correctedKernel_ij", "crkGradient", "correctedGradient_ij"]


@wp.func
def correctedKernel_ij(corr: Any, i: wp.int32, x_ij: Any, W_ij: Any):
    """W^R_ij = A_i (1 + B_i . x_ij) W_ij with CRK, else W_ij."""
    useCRK, A_i, B_i = getCRK_i(corr, i)
    res = W_ij
    if useCRK:
        res = A_i * (type(W_ij)(1.0) + wp.dot(B_i, x_ij)) * W_ij
    return res


@wp.func
def crkGradient(A_i: Any, B_i: Any, gA_i: Any, gB_i: Any, x_ij: Any, W_ij: Any, G: Any):
    """grad W^R_ij = A W B + A (1 + B.x) grad W + (1 + B.x) W grad A + A W (grad B x), from
    G = grad W_ij and the query's CRK terms (plain values: no struct crosses the call)."""
    s = type(W_ij)(1.0) + wp.dot(B_i, x_ij)
    gBx = wp.mul(gB_i, x_ij)
    return (A_i * W_ij) * B_i + (A_i * s) * G + (s * W_ij) * gA_i + (A_i * W_ij) * gBx


@wp.func
def correctedGradient_ij(corr: Any, ks: Any, dom: Any, i: wp.int32, x_ij: Any, h_i: Any,
                         h_j: Any):
    """G_ij: grad W_ij, CRK-corrected (query-side A, B, grad A, grad B), then L_i G; each
    correction read behind its flag."""
    G = sphKernelGradient_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
    if corr.useCRK:
        W_ij = sphKernel_ij(x_ij, h_i, h_j, ks.supportMode, ks.kernelFunction, dom.dim)
        G = crkGradient(corr.queryA[i], corr.queryB[i], corr.queryGradA[i], corr.queryGradB[i],
                        x_ij, W_ij, G)
    if corr.useGradientRenormalization:
        G = wp.mul(corr.renormalizationMatrices[i], G)
    return G
