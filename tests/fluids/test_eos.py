"""Equations of state (`fluids.eos`) against NumPy closed forms written here, their inverses,
c^2 = dp/drho by autograd, float64 gradcheck and forward-mode JVPs, and the validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from warpSPHCore.fluids import (
    linearDensity,
    linearPressure,
    linearSoundSpeed,
    referenceSoundSpeed,
    taitDensity,
    taitPressure,
    taitSoundSpeed,
)

RHO0, C0 = 1000.0, 20.0


def _rho(dtype=torch.float64, n=64):
    g = torch.Generator().manual_seed(0)
    return RHO0 * (1.0 + 0.03 * (2 * torch.rand(n, generator=g, dtype=torch.float64) - 1)).to(dtype)


@pytest.mark.parametrize("gamma", [7.0, 1.4, 1.0])
@pytest.mark.parametrize("pb", [0.0, 123.5])
def test_tait_matches_numpy(gamma, pb):
    rho = _rho()
    r = rho.numpy()
    ref = RHO0 * C0**2 / gamma * ((r / RHO0) ** gamma - 1.0) + pb
    np.testing.assert_allclose(taitPressure(rho, RHO0, C0, gamma, pb).numpy(), ref, rtol=1e-13,
                               atol=1e-9)
    # the inverse recovers the densities
    back = taitDensity(taitPressure(rho, RHO0, C0, gamma, pb), RHO0, C0, gamma, pb)
    torch.testing.assert_close(back, rho, rtol=1e-13, atol=0)
    # c^2 = dp/drho
    x = rho.clone().requires_grad_(True)
    (dp,) = torch.autograd.grad(taitPressure(x, RHO0, C0, gamma, pb).sum(), x)
    torch.testing.assert_close(taitSoundSpeed(rho, RHO0, C0, gamma) ** 2, dp, rtol=1e-12, atol=0)


def test_tait_at_rest_density_is_background_pressure():
    rho = torch.full((5,), RHO0, dtype=torch.float64)
    assert torch.equal(taitPressure(rho, RHO0, C0, 7.0, 50.0), torch.full_like(rho, 50.0))
    assert torch.equal(taitSoundSpeed(rho, RHO0, C0), torch.full_like(rho, C0))


@pytest.mark.parametrize("pb", [0.0, -7.25])
def test_linear_matches_numpy(pb):
    rho = _rho()
    ref = C0**2 * (rho.numpy() - RHO0) + pb
    np.testing.assert_allclose(linearPressure(rho, RHO0, C0, pb).numpy(), ref, rtol=1e-13,
                               atol=1e-9)
    torch.testing.assert_close(linearDensity(linearPressure(rho, RHO0, C0, pb), RHO0, C0, pb),
                               rho, rtol=1e-14, atol=0)
    assert torch.equal(linearSoundSpeed(rho, RHO0, C0), torch.full_like(rho, C0))


def test_linear_is_the_first_order_tait():
    rho = RHO0 * (1.0 + torch.tensor([1e-6, -2e-6], dtype=torch.float64))
    torch.testing.assert_close(taitPressure(rho, RHO0, C0), linearPressure(rho, RHO0, C0),
                               rtol=1e-5, atol=0)


def test_gradcheck_and_forward_mode():
    rho = _rho(n=6).requires_grad_(True)
    c0 = torch.tensor(C0, dtype=torch.float64, requires_grad=True)
    pb = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda r, c, b: taitPressure(r, RHO0, c, 7.0, b),
                                    (rho, c0, pb))
    assert torch.autograd.gradcheck(lambda p: taitDensity(p, RHO0, C0, 7.0, 1.0),
                                    (taitPressure(rho.detach(), RHO0, C0).requires_grad_(True),))
    assert torch.autograd.gradcheck(lambda r, c: linearPressure(r, RHO0, c), (rho, c0))
    # forward mode equals the Jacobian applied to the tangent
    v = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    _, jvp = torch.func.jvp(lambda r: taitPressure(r, RHO0, C0), (rho.detach(),), (v,))
    J = torch.autograd.functional.jacobian(lambda r: taitPressure(r, RHO0, C0), rho.detach())
    torch.testing.assert_close(jvp, J @ v, rtol=1e-12, atol=0)


def test_float32_and_devices_follow_the_input():
    rho = _rho(torch.float32)
    p = taitPressure(rho, RHO0, C0)
    assert p.dtype == torch.float32 and p.device == rho.device


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_constants_are_validated(bad):
    rho = _rho()
    with pytest.raises(ValueError, match="rho0 must be a positive finite number"):
        taitPressure(rho, bad, C0)
    with pytest.raises(ValueError, match="c0 must be"):
        linearPressure(rho, RHO0, bad)
    with pytest.raises(ValueError, match="gamma must be"):
        taitSoundSpeed(rho, RHO0, C0, bad)


def test_reference_sound_speed():
    assert referenceSoundSpeed(1.0) == 10.0
    assert referenceSoundSpeed(0.5, gravity=9.81, height=1.0) == pytest.approx(
        10.0 * math.sqrt(2.0 * 9.81))
    # the dam break's rule: a column of height 2a
    assert referenceSoundSpeed(0.0, gravity=9.81, height=2.0) == pytest.approx(
        10.0 * math.sqrt(2.0 * 9.81 * 2.0), rel=1e-15)
    assert referenceSoundSpeed(2.0, factor=20.0) == 40.0
    with pytest.raises(ValueError, match="both 0"):
        referenceSoundSpeed(0.0)
    with pytest.raises(ValueError, match="maxVelocity must be"):
        referenceSoundSpeed(-1.0)
