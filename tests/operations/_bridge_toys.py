"""Toy Warp kernels driven through `StateAwareWarpFunction` for the bridge tests.

The toy operator is a CSR weighted sum, the shape of every SPH operator:

    out_i = y_i * sum_{e in [off_i, off_{i+1})} w_e * x_{nbr_e}

with ``w``, ``x``, ``y`` differentiable and ``off``/``nbr`` integer structure. ``x`` and
``y`` may be the same tensor (an aliased role, like query/reference positions).
An independent torch reference (`reference`) and a torch forward-mode rule (`toyJvpFn`)
are written here from the formula, not from the library.
"""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from warpSPHCore.autograd import launch_kernel
from warpSPHCore.autograd.stateAwareWarpFunction import StateAwareWarpFunction
from warpSPHCore.util.precision import warpScalar, warpVector
from warpSPHCore.util.stateBundle import makeStruct
from warpSPHCore.util.warpContext import ensureWarp

ensureWarp()


@wp.func
def _rowSum(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
            w: wp.array(dtype=Any), x: wp.array(dtype=Any), i: wp.int32):
    # the loop only accumulates; the nonlinear use happens in the caller
    acc = w.dtype(0.0)
    for e in range(off[i], off[i + 1]):
        acc += w[e] * x[nbr[e]]
    return acc


@wp.kernel
def toyCsrKernel(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
                 w: wp.array(dtype=Any), x: wp.array(dtype=Any), y: wp.array(dtype=Any),
                 out: wp.array(dtype=Any)):
    i = wp.tid()
    s = _rowSum(off, nbr, w, x, i)
    out[i] = y[i] * s


@wp.func
def _rowSumVec(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
               w: wp.array(dtype=Any), x: wp.array(dtype=Any), i: wp.int32):
    acc = x.dtype()
    for e in range(off[i], off[i + 1]):
        acc += w[e] * x[nbr[e]]
    return acc


@wp.kernel
def toyCsrVecKernel(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
                    w: wp.array(dtype=Any), x: wp.array(dtype=Any), y: wp.array(dtype=Any),
                    out: wp.array(dtype=Any)):
    i = wp.tid()
    s = _rowSumVec(off, nbr, w, x, i)
    out[i] = y[i] * s


@wp.kernel
def toyMultiKernel(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
                   w: wp.array(dtype=Any), x: wp.array(dtype=Any), y: wp.array(dtype=Any),
                   out: wp.array(dtype=Any), count: wp.array(dtype=wp.int32)):
    i = wp.tid()
    s = _rowSum(off, nbr, w, x, i)
    out[i] = y[i] * s
    count[i] = off[i + 1] - off[i]


@wp.kernel
def toyOptionalKernel(off: wp.array(dtype=wp.int32), nbr: wp.array(dtype=wp.int32),
                      w: wp.array(dtype=Any), x: wp.array(dtype=Any), y: wp.array(dtype=Any),
                      useY: wp.int32, out: wp.array(dtype=Any)):
    # y is a disabled slot (a null Field) unless useY: it is read only behind the flag
    i = wp.tid()
    s = _rowSum(off, nbr, w, x, i)
    if useY != 0:
        out[i] = y[i] * s
    else:
        out[i] = s


@wp.struct
class ToyCsr64:
    off: wp.array(dtype=wp.int32)
    nbr: wp.array(dtype=wp.int32)
    w: wp.array(dtype=wp.float64)
    x: wp.array(dtype=wp.float64)


@wp.func
def _rowSumStruct(s: ToyCsr64, i: wp.int32):
    acc = wp.float64(0.0)
    for e in range(s.off[i], s.off[i + 1]):
        acc += s.w[e] * s.x[s.nbr[e]]
    return acc


@wp.kernel
def toyStructKernel(s: ToyCsr64, y: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    acc = _rowSumStruct(s, i)
    out[i] = y[i] * acc


# ------------------------------------------------------------------------------ problem


def makeProblem(n=6, dtype=torch.float64, device="cpu", seed=0, width=None):
    """Tiny CSR problem: every row has 1..3 neighbours (row 0 includes itself)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        k = 1 + (i % 3)
        rows.append(sorted({(i + 2 * m) % n for m in range(k)}))
    off = torch.tensor([0] + list(torch.tensor([len(r) for r in rows]).cumsum(0)),
                       dtype=torch.int32)
    nbr = torch.tensor([j for r in rows for j in r], dtype=torch.int32)
    E = int(nbr.numel())
    w = torch.rand(E, generator=g, dtype=torch.float64) + 0.5
    xs = (n,) if width is None else (n, width)
    x = torch.randn(xs, generator=g, dtype=torch.float64)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    cast = dict(dtype=dtype, device=device)
    return (off.to(device), nbr.to(device), w.to(**cast), x.to(**cast), y.to(**cast))


def reference(off, nbr, w, x, y):
    """Independent torch reference of the toy operator."""
    n = off.numel() - 1
    rowOf = torch.repeat_interleave(torch.arange(n, device=off.device),
                                    (off[1:] - off[:-1]).long(), output_size=nbr.numel())
    terms = w.reshape((-1,) + (1,) * (x.dim() - 1)) * x[nbr.long()]
    s = torch.zeros((n,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    s = s.index_add(0, rowOf, terms)
    return y.reshape((-1,) + (1,) * (x.dim() - 1)) * s


def _identityBuild(wa, use_bundle=False):
    return list(wa)


def toyApply(off, nbr, w, x, y, jvp_fn=None, build_fn=_identityBuild, kernel=None,
             dtype=None):
    """out = toy(off, nbr, w, x, y) through the bridge (x, y may be prebuilt scalar views,
    then `dtype` gives the torch dtype)."""
    n = off.numel() - 1
    if not isinstance(x, torch.Tensor):
        kernel = kernel or toyCsrKernel
        dtype = warpScalar(dtype)
    elif x.dim() == 1:
        kernel = kernel or toyCsrKernel
        dtype = warpScalar(x.dtype)
    else:
        kernel = kernel or toyCsrVecKernel
        dtype = warpVector(x.shape[1], x.dtype)
    return StateAwareWarpFunction.apply(jvp_fn, build_fn, launch_kernel, kernel, (n,), dtype,
                                        off, nbr, w, x, y)


def toyMultiApply(off, nbr, w, x, y, jvp_fn=None):
    n = off.numel() - 1
    return StateAwareWarpFunction.apply(
        jvp_fn, _identityBuild, launch_kernel, toyMultiKernel, ((n,), (n,)),
        (warpScalar(x.dtype), wp.int32), off, nbr, w, x, y)


def structBuild(wa, use_bundle=False):
    s = makeStruct(ToyCsr64, {"off": wa[0], "nbr": wa[1], "w": wa[2], "x": wa[3]},
                   use_bundle=use_bundle, key="toy-struct")
    return [s, wa[4]]


def toyStructApply(off, nbr, w, x, y, build_fn=structBuild):
    n = off.numel() - 1
    return StateAwareWarpFunction.apply(None, build_fn, launch_kernel, toyStructKernel, (n,),
                                        wp.float64, off, nbr, w, x, y)


def toyJvpFn(ctx, flat_tangents):
    """Forward-mode rule of the toy, in torch: d out = dy s + y sum(dw x + w dx)."""
    off, nbr, w, x, y = ctx.saved_tensors
    dw, dx, dy = flat_tangents[2], flat_tangents[3], flat_tangents[4]
    z = torch.zeros_like
    dw = z(w) if dw is None else dw
    dx = z(x) if dx is None else dx
    dy = z(y) if dy is None else dy
    s = reference(off, nbr, w, x, torch.ones_like(y))
    ds = reference(off, nbr, dw, x, torch.ones_like(y)) + reference(off, nbr, w, dx,
                                                                     torch.ones_like(y))
    return dy * s + y * ds


def toyOptionalApply(off, nbr, w, x, y):
    """The toy with an optional y: ``y`` may be a null `Field` (then out_i = s_i)."""
    from warpSPHCore.util.fieldRegistry import Field  # noqa: PLC0415

    useY = 0 if isinstance(y, Field) else 1

    def build(wa, use_bundle=False):
        return list(wa) + [wp.int32(useY)]

    n = off.numel() - 1
    return StateAwareWarpFunction.apply(None, build, launch_kernel, toyOptionalKernel, (n,),
                                        warpScalar(x.dtype), off, nbr, w, x, y)
