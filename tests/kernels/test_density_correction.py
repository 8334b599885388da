"""Density self-term correction.

The reference is an independent float64 NumPy evaluation of
ρ_corr = ρ − ε100 (N_H/100)^(−α) m C_d k(0) / h^d with N_H = V_d h^d ρ / m.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from warpSPHCore.enumTypes import KernelFunctions as K
from warpSPHCore.kernels.densityCorrection import (
    applyDensityCorrection,
    densityCorrectionConstants,
    selfTermW0,
)

PI = math.pi

TABLE = {
    (2, K.Wendland2): (0.0030233012061203278, 1.5016297296462702),
    (2, K.Wendland4): (0.00035064837551512925, 2.4815365353197136),
    (2, K.Wendland6): (8.005994569170169e-05, 3.4708508575608708),
    (3, K.Wendland2): (0.029488222560940334, 0.9989656162766523),
    (3, K.Wendland4): (0.013611521340766316, 1.6332544351850704),
    (3, K.Wendland6): (0.011308235376902351, 2.218472363304362),
}
C_WENDLAND = {  # C_d for d = 2, 3 (k(0) = 1)
    (2, K.Wendland2): 7 / PI,
    (3, K.Wendland2): 21 / (2 * PI),
    (2, K.Wendland4): 9 / PI,
    (3, K.Wendland4): 495 / (32 * PI),
    (2, K.Wendland6): 78 / (7 * PI),
    (3, K.Wendland6): 1365 / (64 * PI),
}
PAIRS = list(TABLE)
PAIR_IDS = [f"{k.name}-{d}d" for d, k in PAIRS]


@pytest.mark.parametrize("d,kernel", PAIRS, ids=PAIR_IDS)
def test_constants_table(d, kernel):
    assert densityCorrectionConstants(kernel, d) == TABLE[(d, kernel)]
    assert densityCorrectionConstants(int(kernel), d) == TABLE[(d, kernel)]


@pytest.mark.parametrize(
    "kernel,d",
    [(K.Wendland2, 1), (K.Wendland4, 1), (K.CubicSpline, 2), (K.CubicSpline, 3),
     (K.Gaussian, 3), (K.ViscosityKernel, 3), (K.Wendland2, 4), (K.Wendland2, "2")],
)
def test_unsupported_pairs_raise(kernel, d):
    with pytest.raises(ValueError) as info:
        densityCorrectionConstants(kernel, d)
    msg = str(info.value)
    assert "Wendland2, d=2" in msg and "Wendland6, d=3" in msg  # names the supported pairs
    t = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="accepted"):
        applyDensityCorrection(t, t, t, kernel, d)


def test_unknown_kernel_raises():
    with pytest.raises(ValueError, match="kernel"):
        densityCorrectionConstants(123, 2)


def test_selfTermW0_values():
    # W(0, h) = C_d k(0) / h^d
    assert selfTermW0(K.Wendland2, 2, 0.5) == pytest.approx(7 / PI / 0.25, rel=1e-15)
    assert selfTermW0(K.Wendland2, 3, 2.0) == pytest.approx(21 / (2 * PI) / 8, rel=1e-15)
    assert selfTermW0(K.CubicSpline, 1, 0.1) == pytest.approx(8 / 3 * 0.5 / 0.1, rel=1e-15)
    assert selfTermW0(K.QuarticSpline, 3, 1.0) == pytest.approx(15625 / (512 * PI) * 0.368)
    assert selfTermW0(K.B8, 2, 1.0) == pytest.approx(589824 / (7435 * PI) * 2416 / 16384)
    assert selfTermW0(K.HOCT4, 1, 1.0) == pytest.approx(2.0684349363 * 0.981018558675)
    assert selfTermW0(K.Gaussian, 2, 1.0) == pytest.approx(128 / PI)
    assert selfTermW0(K.CohesionKernel, 3, 1.0) == pytest.approx(32 / PI * (-1 / 64))
    assert selfTermW0(K.AdhesionKernel, 2, 1.0) == 0.0
    assert selfTermW0(K.ViscosityKernel, 3, 1.0) == math.inf
    assert isinstance(selfTermW0(K.Wendland4, 2, 3), float)


def test_selfTermW0_tensor(device, dtype):
    h = torch.tensor([0.1, 0.2, 0.7], dtype=dtype, device=device, requires_grad=True)
    for d, kernel in PAIRS:
        out = selfTermW0(kernel, d, h)
        assert out.dtype == dtype and out.device == h.device and out.shape == h.shape
        ref = C_WENDLAND[(d, kernel)] / np.array([0.1, 0.2, 0.7]) ** d
        rtol = 1e-14 if dtype == torch.float64 else 1e-6
        np.testing.assert_allclose(out.detach().cpu().double().numpy(), ref, rtol=rtol)
    out.sum().backward()  # differentiable in h
    ref = -3 * C_WENDLAND[(3, K.Wendland6)] / np.array([0.1, 0.2, 0.7]) ** 4
    np.testing.assert_allclose(h.grad.cpu().double().numpy(), ref, rtol=1e-5)


def test_selfTermW0_validation():
    for bad in (0.0, -1.0, math.nan, math.inf, "1", True, None):
        with pytest.raises(ValueError):
            selfTermW0(K.Wendland2, 2, bad)
    with pytest.raises(ValueError):
        selfTermW0(K.Wendland2, 0, 1.0)
    with pytest.raises(ValueError):
        selfTermW0(43, 2, 1.0)
    with pytest.raises(TypeError):
        selfTermW0(K.Wendland2, 2, torch.tensor([1], dtype=torch.int32))


def referenceCorrection(rho, m, h, kernel, d):
    eps100, alpha = TABLE[(d, kernel)]
    Vd = PI if d == 2 else 4 * PI / 3
    nH = Vd * h**d * rho / m
    epsC = eps100 * (nH / 100) ** (-alpha)
    return rho - epsC * m * C_WENDLAND[(d, kernel)] / h**d


def _inputs(n, d, rng):
    rho = rng.uniform(900.0, 1100.0, n)
    m = rng.uniform(0.8, 1.2, n) * 1e-3 * (0.5 if d == 3 else 1.0)
    # supports giving N_H in roughly [40, 400]
    nH = rng.uniform(40.0, 400.0, n)
    Vd = PI if d == 2 else 4 * PI / 3
    h = (nH * m / (rho * Vd)) ** (1.0 / d)
    return rho, m, h


@pytest.mark.parametrize("d,kernel", PAIRS, ids=PAIR_IDS)
def test_apply_density_correction_matches_reference(device, dtype, d, kernel):
    rng = np.random.default_rng(7)
    rho, m, h = _inputs(17, d, rng)
    T = lambda a: torch.tensor(a, dtype=dtype, device=device)  # noqa: E731
    out = applyDensityCorrection(T(rho), T(m), T(h), kernel, d)
    assert out.dtype == dtype and out.device == torch.device(device) and out.shape == (17,)
    ref = referenceCorrection(rho, m, h, kernel, d)
    rtol = 1e-12 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(out.cpu().double().numpy(), ref, rtol=rtol)
    assert np.all(ref < rho)  # the self term is removed, never added


def test_apply_density_correction_broadcasts_a_scalar_mass():
    rho = torch.tensor([1000.0, 1010.0], dtype=torch.float64)
    h = torch.tensor([0.05, 0.06], dtype=torch.float64)
    m = torch.tensor(0.01, dtype=torch.float64)
    out = applyDensityCorrection(rho, m, h, K.Wendland2, 2)
    ref = referenceCorrection(rho.numpy(), 0.01, h.numpy(), K.Wendland2, 2)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-13)


@pytest.mark.parametrize("d,kernel", PAIRS, ids=PAIR_IDS)
def test_apply_density_correction_gradcheck(d, kernel):
    rng = np.random.default_rng(3)
    rho, m, h = _inputs(6, d, rng)
    args = tuple(torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (rho, m, h))
    assert torch.autograd.gradcheck(
        lambda r, mm, hh: applyDensityCorrection(r, mm, hh, kernel, d), args,
        eps=1e-6, atol=1e-6, rtol=1e-4,
    )


def test_apply_density_correction_forward_mode():
    import torch.autograd.forward_ad as fwAD

    rng = np.random.default_rng(5)
    rho, m, h = (torch.tensor(a, dtype=torch.float64) for a in _inputs(5, 3, rng))
    tangent = torch.linspace(0.5, 1.5, 5, dtype=torch.float64) * 1e-3
    with fwAD.dual_level():
        out = applyDensityCorrection(rho, m, fwAD.make_dual(h, tangent), K.Wendland4, 3)
        jvp = fwAD.unpack_dual(out).tangent
    # element-wise map: the JVP is the reverse-mode diagonal times the tangent
    hh = h.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(applyDensityCorrection(rho, m, hh, K.Wendland4, 3).sum(), hh)
    np.testing.assert_allclose(jvp.numpy(), (grad * tangent).numpy(), rtol=1e-13)


def test_apply_density_correction_validation():
    f64 = torch.ones(4, dtype=torch.float64)
    f32 = torch.ones(4, dtype=torch.float32)
    with pytest.raises(TypeError):
        applyDensityCorrection(f64, f32, f64, K.Wendland2, 2)
    with pytest.raises(TypeError):
        applyDensityCorrection(f64, 1.0, f64, K.Wendland2, 2)
    with pytest.raises(TypeError):
        applyDensityCorrection(f64.half(), f64.half(), f64.half(), K.Wendland2, 2)
    with pytest.raises(ValueError, match="broadcast"):
        applyDensityCorrection(f64, torch.ones(3, dtype=torch.float64), f64, K.Wendland2, 2)
