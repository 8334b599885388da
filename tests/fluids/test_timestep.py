"""Time-step limits (`fluids.timestep`) against the three conditions computed by hand with
NumPy, each made the binding one in turn; the result stays a tensor on the input's device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from warpSPHCore.fluids import stableTimeStep


def _fields(vScale, aScale, n=50, d=2):
    g = torch.Generator().manual_seed(2)
    v = vScale * torch.randn(n, d, generator=g, dtype=torch.float64)
    a = aScale * torch.randn(n, d, generator=g, dtype=torch.float64)
    return v, a


def _reference(h, c0, v, nu, a, cfl=0.25, visc=0.125, force=0.25):
    vmax = np.linalg.norm(v.numpy(), axis=1).max()
    amax = np.linalg.norm(a.numpy(), axis=1).max()
    cands = [cfl * h / (c0 + vmax), force * np.sqrt(h / amax)]
    if nu > 0:
        cands.append(visc * h * h / nu)
    return min(cands), int(np.argmin(cands))


@pytest.mark.parametrize("vScale, nu, aScale, binding", [
    (1.0, 1e-6, 1e-3, 0),   # acoustic
    (1.0, 10.0, 1e-3, 2),   # viscous
    (1.0, 1e-6, 1e6, 1),    # body force
])
def test_each_limit_binds(vScale, nu, aScale, binding):
    h, c0 = 0.02, 20.0
    v, a = _fields(vScale, aScale)
    dt = stableTimeStep(h, c0, v, nu, a)
    ref, which = _reference(h, c0, v, nu, a)
    assert which == binding
    assert isinstance(dt, torch.Tensor) and dt.dim() == 0 and dt.dtype == torch.float64
    assert float(dt) == pytest.approx(ref, rel=1e-14)


def test_defaults_and_bounds():
    h, c0 = 0.01, 10.0
    assert float(stableTimeStep(h, c0)) == pytest.approx(0.25 * h / c0, rel=1e-15)
    assert float(stableTimeStep(h, c0, maxTimeStep=1e-5)) == 1e-5
    # a per-particle h uses its minimum; zero accelerations set no limit
    hs = torch.tensor([0.02, 0.01, 0.03], dtype=torch.float64)
    dt = stableTimeStep(hs, c0, accelerations=torch.zeros(3, 2, dtype=torch.float64))
    assert float(dt) == pytest.approx(0.25 * 0.01 / c0, rel=1e-15)
    # the coefficients are arguments
    assert float(stableTimeStep(h, c0, cfl=0.4)) == pytest.approx(0.4 * h / c0, rel=1e-15)


def test_differentiable_in_the_velocities():
    v, _ = _fields(1.0, 0.0, n=4)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda u: stableTimeStep(0.02, 20.0, u), (v,))


def test_follows_the_dtype_of_the_fields():
    v, a = _fields(1.0, 1.0)
    assert stableTimeStep(0.02, 20.0, v.float(), 0.0, a.float()).dtype == torch.float32


@pytest.mark.parametrize("name", ["cfl", "viscous", "force"])
def test_coefficients_are_validated(name):
    with pytest.raises(ValueError, match=f"{name} must be a positive finite number"):
        stableTimeStep(0.01, 10.0, **{name: 0.0})
