"""Minimum image and kind tests of `kernels/geometry.py`: values against an independent torch
reference, and the adjoint of x_ij w.r.t. x_i / x_j is exactly +I / -I (a double-counting
adjoint was a real bug, W74 family)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import warp as wp

from warpSPHCore.enumTypes import OperationDirection
from warpSPHCore.kernels.geometry import (
    checkDirectionality_i,
    checkDirectionality_j,
    computeDistanceVec,
)
from warpSPHCore.util.precision import warpScalar, warpVector
from warpSPHCore.util.warpContext import warpDevice


@wp.kernel(enable_backward=True)
def _distanceKernel(x: wp.array(dtype=Any), y: wp.array(dtype=Any), lo: wp.array(dtype=Any),
                    hi: wp.array(dtype=Any), per: wp.array(dtype=wp.bool), dim: wp.int32,
                    out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = computeDistanceVec(x[i], y[i], lo, hi, per, dim)


@wp.kernel
def _directionKernel(modes: wp.array(dtype=wp.int32), kinds: wp.array(dtype=wp.int32),
                     outI: wp.array(dtype=wp.int32), outJ: wp.array(dtype=wp.int32)):
    t = wp.tid()
    a = 0
    b = 0
    if checkDirectionality_i(modes[t], kinds[t]):
        a = 1
    if checkDirectionality_j(modes[t], kinds[t]):
        b = 1
    outI[t] = a
    outJ[t] = b


def _launchDistance(x, y, lo, hi, per, device, tape=None):
    d = x.shape[1]
    V, S = warpVector(d, x.dtype), warpScalar(x.dtype)
    wdev = warpDevice(device)
    xa = wp.from_torch(x, dtype=V, requires_grad=True)
    ya = wp.from_torch(y, dtype=V, requires_grad=True)
    out = wp.zeros(x.shape[0], dtype=V, device=wdev, requires_grad=True)
    args = [xa, ya, wp.from_torch(lo, dtype=S), wp.from_torch(hi, dtype=S),
            wp.from_torch(per, dtype=wp.bool), d]
    if tape is None:
        wp.launch(_distanceKernel, dim=x.shape[0], inputs=args, outputs=[out], device=wdev)
    else:
        with tape:
            wp.launch(_distanceKernel, dim=x.shape[0], inputs=args, outputs=[out], device=wdev)
    return xa, ya, out


def test_minimum_image_values(device, dtype, dim):
    rng = np.random.default_rng(dim)
    x = torch.tensor(rng.uniform(-7, 7, (40, dim)), dtype=dtype, device=device)
    y = torch.tensor(rng.uniform(-7, 7, (40, dim)), dtype=dtype, device=device)
    lo = torch.full((dim,), -1.0, dtype=dtype, device=device)
    hi = torch.full((dim,), 2.0, dtype=dtype, device=device)
    per = torch.tensor([k % 2 == 0 for k in range(dim)], device=device)
    _, _, out = _launchDistance(x, y, lo, hi, per, device)
    ref = (x - y).double()
    L = 3.0
    ref[:, per] = ref[:, per] - L * torch.round(ref[:, per] / L)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert torch.allclose(wp.to_torch(out).double(), ref, atol=tol)


def test_minimum_image_adjoint_is_identity(device, dtype, dim):
    x = torch.rand(5, dim, dtype=dtype, device=device) * 4 - 2
    y = torch.rand(5, dim, dtype=dtype, device=device) * 4 - 2
    lo = torch.full((dim,), -1.0, dtype=dtype, device=device)
    hi = torch.full((dim,), 1.0, dtype=dtype, device=device)
    per = torch.tensor([True] * dim, device=device)
    tape = wp.Tape()
    xa, ya, out = _launchDistance(x, y, lo, hi, per, device, tape)
    seed = torch.randn(5, dim, dtype=dtype, device=device)
    tape.backward(grads={out: wp.from_torch(seed, dtype=out.dtype)})
    assert torch.equal(wp.to_torch(xa.grad), seed)
    assert torch.equal(wp.to_torch(ya.grad), -seed)


@pytest.mark.parametrize("mode", list(OperationDirection))
def test_directionality_table(mode, device):
    # (query test, reference test) per operators.md section 6; "any" and "!= 2" admit every
    # other code too (7 is not a ParticleType but the table's tests are literal)
    def any_(k):
        return True

    def notGhost(k):
        return k != 2

    def eq(v):
        return lambda k: k == v

    table = {
        0: (any_, any_), 1: (eq(0), eq(0)), 2: (eq(1), eq(0)), 3: (eq(0), eq(1)),
        4: (eq(1), eq(1)), 5: (eq(2), eq(0)), 6: (eq(0), eq(2)), 7: (eq(2), eq(1)),
        8: (eq(1), eq(2)), 9: (any_, notGhost), 10: (eq(2), notGhost), 11: (eq(0), notGhost),
        12: (eq(1), notGhost), 13: (notGhost, eq(0)), 14: (notGhost, eq(1)),
    }
    kinds = torch.tensor([0, 1, 2, 3, 7], dtype=torch.int32, device=device)
    modes = torch.full((5,), int(mode), dtype=torch.int32, device=device)
    oi = torch.zeros(5, dtype=torch.int32, device=device)
    oj = torch.zeros(5, dtype=torch.int32, device=device)
    wp.launch(_directionKernel, dim=5, inputs=[wp.from_torch(modes), wp.from_torch(kinds)],
              outputs=[wp.from_torch(oi), wp.from_torch(oj)], device=warpDevice(device))
    qa, ra = table[int(mode)]
    for t, kind in enumerate([0, 1, 2, 3, 7]):
        assert bool(oi[t]) == qa(kind), (mode, kind)
        assert bool(oj[t]) == ra(kind), (mode, kind)
