"""The JFNK demo's building blocks (`warpSPHCore.demo.jfnk`): the three products ``J w`` of
each problem agree with each other and with central differences, GMRES survives the failure
modes the finite-difference variants produce, and Newton converges quadratically with the
exact products.

* lagrange: the Jacobian through the geometry, by hand (Density JVP -> densities tangent and
  value tangent of the Gradient JVP) equals the dual-tensor route and a float64 central
  difference; the float32 products agree with the float64 ones to float32 rounding;
* wave: the same for the value-tangent product;
* gmres: a zero operator (a breakdown) returns x = 0 without dividing by zero; an operator
  with O(1e-3) noise stops at the first restart that does not halve the true residual;
  tensors of any shape.
"""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore.demo import jfnk


def _setup(prob, dtype, n):
    cls = jfnk.WaveStep if prob == "wave" else jfnk.LagrangeStep
    step = cls(n, "cpu", dtype)
    u = step.begin(step.initial())
    g = torch.Generator().manual_seed(3)
    w = torch.randn(u.shape, generator=g, dtype=torch.float64).to(dtype)
    return step, u, w


@pytest.mark.parametrize("prob", ["wave", "lagrange"])
def test_products_agree_float64(prob):
    step, u, w = _setup(prob, torch.float64, 10)
    dual = step.dualMatvec(u)(w)
    jvp = step.jvpMatvec(u)(w)
    torch.testing.assert_close(dual, jvp, rtol=1e-12, atol=1e-12 * float(jvp.abs().max()))
    e = 1e-6
    central = (step.residual(u + e * w) - step.residual(u - e * w)) / (2 * e)
    err = float(torch.linalg.vector_norm(central - jvp) / torch.linalg.vector_norm(jvp))
    assert err < 1e-7, err
    # the product is not the identity: the operator part is resolved
    assert float(torch.linalg.vector_norm(jvp - w) / torch.linalg.vector_norm(w)) > 1e-2


@pytest.mark.parametrize("prob", ["wave", "lagrange"])
def test_products_float32_match_float64(prob):
    s64, u64, w64 = _setup(prob, torch.float64, 10)
    s32, u32, w32 = _setup(prob, torch.float32, 10)
    ref = s64.jvpMatvec(u64)(w64)
    for mv in (s32.dualMatvec(u32), s32.jvpMatvec(u32)):
        err = float(torch.linalg.vector_norm(mv(w32).double() - ref)
                    / torch.linalg.vector_norm(ref))
        assert err < 1e-5, err


def test_lagrange_newton_converges_quadratically():
    step, x, _ = _setup("lagrange", torch.float64, 10)
    _, hist, gm = jfnk.newton(step, x, "jvp", 1e-12)
    rel = [h / hist[0] for h in hist]
    assert rel[-1] <= 1e-12 and gm > 0
    # superlinear: the last reductions are much larger than the first
    assert rel[-1] / rel[-2] < 1e-2 * (rel[1] / rel[0]), rel


def test_gmres_zero_operator_breaks_down_cleanly():
    b = torch.ones(20, dtype=torch.float32)
    x, its, rel = jfnk.gmres(lambda w: torch.zeros_like(w), b)
    assert torch.count_nonzero(x) == 0 and its == 1 and rel == 1.0


def test_gmres_stops_on_a_noisy_operator():
    g = torch.Generator().manual_seed(0)
    A = torch.eye(40, dtype=torch.float64) + 0.05 * torch.randn(40, 40, generator=g,
                                                                dtype=torch.float64)
    b = torch.randn(40, generator=g, dtype=torch.float64)
    x, its, rel = jfnk.gmres(lambda w: A @ w, b, rtol=1e-12, restart=10, maxiter=400)
    assert rel <= 1e-12 and its > 10  # the exact operator: restarts, not cut by the rule

    def noisy(w):  # a deterministic relative error of 1e-3, nonlinear in w
        return A @ w + 1e-3 * torch.linalg.vector_norm(w) * torch.sin(1e3 * w)

    x, its, _ = jfnk.gmres(noisy, b, rtol=1e-12, restart=10, maxiter=400)
    assert its < 100  # stopped by stagnation, not by the cap
    true = float(torch.linalg.vector_norm(b - A @ x) / torch.linalg.vector_norm(b))
    assert true < 1e-2


def test_gmres_any_shape():
    g = torch.Generator().manual_seed(1)
    b = torch.randn(15, 2, generator=g, dtype=torch.float64)
    x, its, rel = jfnk.gmres(lambda w: 2.0 * w + 0.1 * w.flip(0), b, rtol=1e-12)
    assert x.shape == b.shape and rel <= 1e-12
    torch.testing.assert_close(2.0 * x + 0.1 * x.flip(0), b, rtol=0, atol=1e-10)
    assert math.isfinite(rel) and its <= 30
