"""Pairwise support schemes (`SupportScheme`) as Warp functions.

Argument pattern of every `_ij` function:
``(x_ij, h_i, h_j, supportMode, kernel, d)`` (tangent helpers add ``dx_ij, dh_i, dh_j``
after ``h_j``), where `supportMode` is a `SupportScheme` value (11..16) as int32 or uint32,
`kernel` the int32 `KernelFunctions` value and `d` the int32 dimension. Scalars follow the
type of `h_i`; `x_ij` is a vector of length d. All results are unnormalised (N = 1, see
`kernels/evaluation.py`).

Three columns:

* W and grad W (`sphKernel_ij`, `sphKernelGradient_ij`): Gather/Scatter/MeanSymmetric at
  h_ij; KernelMeanSymmetric and SuperSymmetric average the two single-support values
  (SuperSymmetric's 1/2[grad W(x, h_i) - grad W(-x, h_j)] is bitwise the same average,
  because grad W is exactly odd in x); PartialSymmetric at max(h_i, h_j).
* Their tangents (`sphKernelJVP_ij`, `sphKernelGradientJVP_ij`) follow the exact derivative
  rule: the averages of the two single-support tangents, each with its own support tangent,
  for KernelMeanSymmetric/SuperSymmetric; the tangent at h_ij with dh_ij otherwise. (The
  Density HVP's H_ij is `sphKernelGradientJVP_ij` with dh_i = dh_j = 0.)
* Their cotangents (`sphKernelGradientVJP_ij`): G, H_ij u and the two support adjoints, the
  exact transpose of `sphKernelGradientJVP_ij`, for hand-written reverse kernels.
* Helper column (Hessian, kernel Laplacian with its x/h-derivatives and tangent, dW/dh,
  d(grad W)/dh): SuperSymmetric averages 1/2[f(h_i) + f(h_j)]; every other scheme evaluates
  at h_ij, which is max(h_i, h_j) for KernelMeanSymmetric and PartialSymmetric.

h_ij = `computePairwiseSupport(h_i, h_j, supportMode)`: h_i (Gather, 11), h_j (Scatter, 12),
(h_i + h_j)/2 (MeanSymmetric, 13), max(h_i, h_j) otherwise; its tangent
`computePairwiseSupportJVP` is dh_i, dh_j, (dh_i + dh_j)/2, or the tangent of the larger
support with dh_i on a tie. The max is an explicit branch (not `wp.max`) so that the reverse
mode also sends a tie to h_i, consistently with the tangent.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from .evaluation import (
    sphGradientDkDh,
    sphKernel,
    sphKernelDkDh,
    sphKernelGradient,
    sphKernelGradientJVP,
    sphKernelGradientVJP,
    sphKernelHessian,
    sphKernelHessianDot,
    sphKernelJVP,
    sphKernelLaplacian,
    sphKernelLaplacianDkDh,
    sphKernelLaplacianGradient,
    sphKernelLaplacianJVP,
    sphKernelValueVJP,
)

__all__ = [
    "computePairwiseSupport",
    "computePairwiseSupportJVP",
    "sphKernel_ij",
    "sphKernelGradient_ij",
    "sphKernelJVP_ij",
    "sphKernelGradientJVP_ij",
    "sphKernelJVPPositions_ij",
    "sphKernelGradientJVPPositions_ij",
    "sphKernelGradientVJP_ij",
    "sphKernelVJP_ij",
    "sphKernelDkDh_ij",
    "sphGradientDkDh_ij",
    "sphKernelHessian_ij",
    "sphKernelLaplacian_ij",
    "sphKernelLaplacianGradient_ij",
    "sphKernelLaplacianDkDh_ij",
    "sphKernelLaplacianJVP_ij",
]


@wp.func
def computePairwiseSupport(h_i: Any, h_j: Any, supportMode: Any):
    """h_ij: h_i (11), h_j (12), (h_i + h_j)/2 (13), max(h_i, h_j) otherwise."""
    mode = wp.int32(supportMode)
    res = h_i
    if mode == 12:
        res = h_j
    elif mode == 13:
        res = (h_i + h_j) * type(h_i)(0.5)
    elif mode != 11:
        if h_j > h_i:
            res = h_j
    return res


@wp.func
def computePairwiseSupportJVP(h_i: Any, h_j: Any, dh_i: Any, dh_j: Any, supportMode: Any):
    """Tangent dh_ij of `computePairwiseSupport` (max: the larger support's, dh_i on a tie)."""
    mode = wp.int32(supportMode)
    res = dh_i
    if mode == 12:
        res = dh_j
    elif mode == 13:
        res = (dh_i + dh_j) * type(h_i)(0.5)
    elif mode != 11:
        if h_j > h_i:
            res = dh_j
    return res


@wp.func
def _averaged(supportMode: Any):
    """True for KernelMeanSymmetric (14) and SuperSymmetric (15): W, grad W are averaged."""
    mode = wp.int32(supportMode)
    return mode == 14 or mode == 15


# --- W, grad W and their exact tangents --------------------------------------------------
#
# Every `_ij` function below evaluates its single-support function at most twice: at the
# first support h_a (h_i when averaging, h_ij otherwise) and, when averaging, at h_j. Two call
# sites instead of three keep the inlined code (and the compile time) small.


@wp.func
def _firstSupport(h_i: Any, h_j: Any, supportMode: Any, average: wp.bool):
    res = h_i
    if not average:
        res = computePairwiseSupport(h_i, h_j, supportMode)
    return res


@wp.func
def _firstTangent(h_i: Any, h_j: Any, dh_i: Any, dh_j: Any, supportMode: Any, average: wp.bool):
    res = dh_i
    if not average:
        res = computePairwiseSupportJVP(h_i, h_j, dh_i, dh_j, supportMode)
    return res


@wp.func
def sphKernel_ij(x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32):
    """W_ij under the pairwise support rule (see the module docstring)."""
    avg = _averaged(supportMode)
    res = sphKernel(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernel(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelGradient_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """grad W_ij under the pairwise support rule (custom adjoint via `sphKernelGradient`)."""
    avg = _averaged(supportMode)
    res = sphKernelGradient(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelGradient(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelJVP_ij(
    x_ij: Any,
    h_i: Any,
    h_j: Any,
    dx_ij: Any,
    dh_i: Any,
    dh_j: Any,
    supportMode: Any,
    kernel: wp.int32,
    d: wp.int32,
):
    """dW_ij for tangents (dx_ij, dh_i, dh_j): the exact derivative of `sphKernel_ij`."""
    avg = _averaged(supportMode)
    res = sphKernelJVP(
        x_ij,
        _firstSupport(h_i, h_j, supportMode, avg),
        dx_ij,
        _firstTangent(h_i, h_j, dh_i, dh_j, supportMode, avg),
        kernel,
        d,
    )
    if avg:
        res = (res + sphKernelJVP(x_ij, h_j, dx_ij, dh_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelGradientJVP_ij(
    x_ij: Any,
    h_i: Any,
    h_j: Any,
    dx_ij: Any,
    dh_i: Any,
    dh_j: Any,
    supportMode: Any,
    kernel: wp.int32,
    d: wp.int32,
):
    """d(grad W_ij) for tangents (dx_ij, dh_i, dh_j): the exact derivative of
    `sphKernelGradient_ij` (averaged Hessians for KernelMeanSymmetric/SuperSymmetric)."""
    avg = _averaged(supportMode)
    res = sphKernelGradientJVP(
        x_ij,
        _firstSupport(h_i, h_j, supportMode, avg),
        dx_ij,
        _firstTangent(h_i, h_j, dh_i, dh_j, supportMode, avg),
        kernel,
        d,
    )
    if avg:
        res = (res + sphKernelGradientJVP(x_ij, h_j, dx_ij, dh_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelJVPPositions_ij(x_ij: Any, h_i: Any, h_j: Any, dx_ij: Any, supportMode: Any,
                             kernel: wp.int32, d: wp.int32):
    """`sphKernelJVP_ij` for supports without tangent: grad W_ij . dx_ij (no dW/dh
    evaluation; the JVP kernels select it when no support tangent is present)."""
    return wp.dot(sphKernelGradient_ij(x_ij, h_i, h_j, supportMode, kernel, d), dx_ij)


@wp.func
def sphKernelGradientJVPPositions_ij(x_ij: Any, h_i: Any, h_j: Any, dx_ij: Any,
                                     supportMode: Any, kernel: wp.int32, d: wp.int32):
    """`sphKernelGradientJVP_ij` for supports without tangent: H_ij dx_ij under the same
    support rule (`evaluation.sphKernelHessianDot`; no d(grad W)/dh evaluation)."""
    avg = _averaged(supportMode)
    res = sphKernelHessianDot(x_ij, _firstSupport(h_i, h_j, supportMode, avg), dx_ij, kernel,
                              d)
    if avg:
        res = (res + sphKernelHessianDot(x_ij, h_j, dx_ij, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def _supportAdjoint(g: Any, h_i: Any, h_j: Any, supportMode: Any):
    """(g dh_ij/dh_i, g dh_ij/dh_j): a derivative g with respect to the pair support h_ij of
    a non-averaged scheme sent to h_i and h_j (`computePairwiseSupportJVP` with unit
    tangents, so a max tie goes to h_i)."""
    one = type(h_i)(1.0)
    zero = type(h_i)(0.0)
    g_i = g * computePairwiseSupportJVP(h_i, h_j, one, zero, supportMode)
    g_j = g * computePairwiseSupportJVP(h_i, h_j, zero, one, supportMode)
    return g_i, g_j


@wp.func
def sphKernelGradientVJP_ij(x_ij: Any, h_i: Any, h_j: Any, u: Any, supportMode: Any,
                            kernel: wp.int32, d: wp.int32):
    """(G, H_ij u, u . dG/dh_i, u . dG/dh_j) with G = `sphKernelGradient_ij` for a cotangent u:
    the exact transpose of `sphKernelGradientJVP_ij` (averaged schemes: half of each
    single-support term; otherwise the tangent of h_ij, `computePairwiseSupportJVP`, with
    unit tangents, so a max tie goes to h_i in both modes). One shape evaluation per
    single support (`evaluation.sphKernelGradientVJP`)."""
    avg = _averaged(supportMode)
    zero = type(h_i)(0.0)
    G, Hu, gh = sphKernelGradientVJP(x_ij, _firstSupport(h_i, h_j, supportMode, avg), u,
                                     kernel, d)
    gh_i = gh
    gh_j = zero
    if avg:
        half = type(h_i)(0.5)
        G2, Hu2, gh2 = sphKernelGradientVJP(x_ij, h_j, u, kernel, d)
        G = (G + G2) * half
        Hu = (Hu + Hu2) * half
        gh_i = gh * half
        gh_j = gh2 * half
    else:
        gh_i, gh_j = _supportAdjoint(gh, h_i, h_j, supportMode)
    return G, Hu, gh_i, gh_j


@wp.func
def sphKernelVJP_ij(x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32,
                    d: wp.int32):
    """(W, grad W, dW/dh_i, dW/dh_j) with W = `sphKernel_ij`: the exact transpose of
    `sphKernelJVP_ij` (averaged schemes: half of each single-support term; otherwise the
    tangent of h_ij, `computePairwiseSupportJVP`, with unit tangents, so a max tie goes to
    h_i in both modes). One shape evaluation per single support
    (`evaluation.sphKernelValueVJP`)."""
    avg = _averaged(supportMode)
    zero = type(h_i)(0.0)
    W, G, wh = sphKernelValueVJP(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    wh_i = wh
    wh_j = zero
    if avg:
        half = type(h_i)(0.5)
        W2, G2, wh2 = sphKernelValueVJP(x_ij, h_j, kernel, d)
        W = (W + W2) * half
        G = (G + G2) * half
        wh_i = wh * half
        wh_j = wh2 * half
    else:
        wh_i, wh_j = _supportAdjoint(wh, h_i, h_j, supportMode)
    return W, G, wh_i, wh_j


# --- helper column: SuperSymmetric averaged, every other scheme at h_ij --------------------


@wp.func
def _superSymmetric(supportMode: Any):
    return wp.int32(supportMode) == 15


@wp.func
def sphKernelDkDh_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """dW/dh helper (KernelMeanSymmetric at max, SuperSymmetric averaged)."""
    avg = _superSymmetric(supportMode)
    res = sphKernelDkDh(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelDkDh(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphGradientDkDh_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """d(grad W)/dh helper (KernelMeanSymmetric at max, SuperSymmetric averaged)."""
    avg = _superSymmetric(supportMode)
    res = sphGradientDkDh(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphGradientDkDh(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelHessian_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """Hessian helper (KernelMeanSymmetric at max, SuperSymmetric averaged).

    Not the derivative of grad W_ij under KernelMeanSymmetric; for that use
    `sphKernelGradientJVP_ij`.
    """
    avg = _superSymmetric(supportMode)
    res = sphKernelHessian(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelHessian(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelLaplacian_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """Kernel Laplacian helper (KernelMeanSymmetric at max, SuperSymmetric averaged); the
    pair kernel of `LaplacianScheme.Naive`."""
    avg = _superSymmetric(supportMode)
    res = sphKernelLaplacian(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelLaplacian(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelLaplacianGradient_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """grad_x of `sphKernelLaplacian_ij`."""
    avg = _superSymmetric(supportMode)
    res = sphKernelLaplacianGradient(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelLaplacianGradient(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelLaplacianDkDh_ij(
    x_ij: Any, h_i: Any, h_j: Any, supportMode: Any, kernel: wp.int32, d: wp.int32
):
    """d/dh of the kernel Laplacian at the helper support (SuperSymmetric: average of the
    two single-support derivatives; each is the derivative w.r.t. its own support)."""
    avg = _superSymmetric(supportMode)
    res = sphKernelLaplacianDkDh(x_ij, _firstSupport(h_i, h_j, supportMode, avg), kernel, d)
    if avg:
        res = (res + sphKernelLaplacianDkDh(x_ij, h_j, kernel, d)) * type(h_i)(0.5)
    return res


@wp.func
def sphKernelLaplacianJVP_ij(
    x_ij: Any,
    h_i: Any,
    h_j: Any,
    dx_ij: Any,
    dh_i: Any,
    dh_j: Any,
    supportMode: Any,
    kernel: wp.int32,
    d: wp.int32,
):
    """Exact tangent of `sphKernelLaplacian_ij` for (dx_ij, dh_i, dh_j)."""
    avg = _superSymmetric(supportMode)
    res = sphKernelLaplacianJVP(
        x_ij,
        _firstSupport(h_i, h_j, supportMode, avg),
        dx_ij,
        _firstTangent(h_i, h_j, dh_i, dh_j, supportMode, avg),
        kernel,
        d,
    )
    if avg:
        res = (res + sphKernelLaplacianJVP(x_ij, h_j, dx_ij, dh_j, kernel, d)) * type(h_i)(0.5)
    return res
