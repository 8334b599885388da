"""Oracles for the forward-mode tests: J·v from the reverse-mode
Jacobian of the primal (itself gradcheck-verified), central finite differences, the
dual-tensor route, and finite differences of reverse-mode gradients for HVPs.

Every helper takes ``fn(*inputs) -> tensor`` (float64 inputs) and matching ``tangents``
(None = zero tangent for that input).
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

RTOL_JV, ATOL_JV = 1e-8, 1e-10   # JVP vs J·v (float64), atol x output scale
EPS_FD, RTOL_FD = 1e-6, 1e-5     # JVP vs central differences (float64)


def jacobianJVP(fn, inputs, tangents):
    """sum_k J_k v_k with J_k from `torch.autograd.functional.jacobian` (reverse mode)."""
    inputs = tuple(inputs)
    J = torch.autograd.functional.jacobian(fn, inputs)
    out = fn(*inputs)
    res = torch.zeros(out.numel(), dtype=out.dtype, device=out.device)
    for Jk, x, v in zip(J, inputs, tangents):
        if v is None:
            continue
        res = res + Jk.reshape(out.numel(), x.numel()) @ v.reshape(-1).to(out.dtype)
    return res.reshape(out.shape)


def centralFD(fn, inputs, tangents, eps=EPS_FD):
    """(f(x + eps v) - f(x - eps v)) / (2 eps)."""
    with torch.no_grad():
        plus = [x + eps * v if v is not None else x for x, v in zip(inputs, tangents)]
        minus = [x - eps * v if v is not None else x for x, v in zip(inputs, tangents)]
        return (fn(*plus) - fn(*minus)) / (2 * eps)


def dualJVP(fn, inputs, tangents):
    """The tangent of fn through `torch.autograd.forward_ad` dual tensors (first output's
    tangent when fn returns a tuple)."""
    with fwAD.dual_level():
        args = [fwAD.make_dual(x, v) if v is not None else x for x, v in zip(inputs, tangents)]
        out = fn(*args)
        if isinstance(out, tuple):
            out = out[0]
        t = fwAD.unpack_dual(out).tangent
        return torch.zeros_like(fwAD.unpack_dual(out).primal) if t is None else t.clone()


def assertClose(actual, expected, rtol=RTOL_JV, atol=ATOL_JV, what=""):
    """|a - e| <= atol * max(1, scale) + rtol |e| elementwise, scale = max |e|."""
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    err = (actual - expected).abs()
    bound = atol * scale + rtol * expected.abs()
    ok = bool((err <= bound).all())
    assert ok, (f"{what}: max error {float(err.max()):.3e} (scale {scale:.3e}, rtol {rtol}, "
                f"atol {atol})")


def checkJVP(fn, inputs, tangents, jvp, fd=True, what=""):
    """`jvp` against J·v (rtol 1e-8) and, with `fd`, central differences (rtol 1e-5)."""
    assertClose(jvp, jacobianJVP(fn, inputs, tangents), what=f"{what} vs J.v")
    if fd:
        assertClose(jvp, centralFD(fn, inputs, tangents), rtol=RTOL_FD, atol=1e-7,
                    what=f"{what} vs central FD")


def randomTangents(inputs, seed, scales=None):
    """Standard-normal tangents shaped like `inputs` (optionally scaled per input)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, x in enumerate(inputs):
        v = torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)
        if scales is not None:
            v = v * scales[k]
        out.append(v)
    return out
