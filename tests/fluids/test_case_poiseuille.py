"""The Poiseuille case (`fluids.cases.poiseuille`): the start-up series of Morris et al.
(1997) (zero at t = 0, the parabola as t -> inf, the diffusion equation in between), the
binned profile, and a tiny run whose profiles follow the series and whose results.json has
the documented keys."""

from __future__ import annotations

import json
import math

import pytest
import torch

from warpSPHCore.fluids.cases import poiseuille
from warpSPHCore.fluids.cases.poiseuille import poiseuilleVelocity

F64 = torch.float64


def test_series_starts_at_rest_and_converges_to_the_parabola():
    F, nu, L = 8.0, 1.0, 1.0
    y = torch.linspace(0.0, L, 41, dtype=F64)
    parabola = F / (2 * nu) * y * (L - y)
    assert torch.allclose(poiseuilleVelocity(y, math.inf, F, nu), parabola)
    assert parabola.max() == pytest.approx(1.0)  # u_max = F L^2 / (8 nu)
    # t = 0: the sine series of the parabola cancels it (terms fall as 1 / k^3)
    assert poiseuilleVelocity(y, 0.0, F, nu, terms=4000).abs().max() < 1e-6
    # late times: the slowest mode exp(-pi^2 nu t / L^2)
    for t in (0.5, 1.0, 2.0):
        gap = (poiseuilleVelocity(y, t, F, nu) - parabola).abs().max()
        bound = 32 / math.pi**3 * math.exp(-math.pi**2 * nu * t / L**2) * 1.001
        assert 0 < gap <= bound
    # monotone start-up of the centre-line speed
    u = [float(poiseuilleVelocity(0.5, t, F, nu)) for t in (0.01, 0.05, 0.1, 0.3, 1.0)]
    assert all(a < b for a, b in zip(u, u[1:]))


def test_series_solves_the_start_up_equation():
    """du/dt = F + nu d^2u/dy^2 in the channel, u = 0 on both walls (central differences)."""
    F, nu, L, t = 2.0, 0.3, 1.5, 0.2
    y = torch.tensor([0.2, 0.5, 0.75, 1.1], dtype=F64)
    e = 1e-4
    dudt = (poiseuilleVelocity(y, t + e, F, nu, L) - poiseuilleVelocity(y, t - e, F, nu, L)) \
        / (2 * e)
    d2u = (poiseuilleVelocity(y + e, t, F, nu, L) - 2 * poiseuilleVelocity(y, t, F, nu, L)
           + poiseuilleVelocity(y - e, t, F, nu, L)) / e**2
    torch.testing.assert_close(dudt, F + nu * d2u, rtol=0, atol=1e-4)
    walls = poiseuilleVelocity(torch.tensor([0.0, L], dtype=F64), t, F, nu, L)
    assert walls.abs().max() < 1e-12


def test_binned_profile():
    x = torch.tensor([[0.1, 0.05], [0.3, 0.15], [0.2, 0.12], [0.0, 0.95]], dtype=F64)
    u = torch.tensor([1.0, 2.0, 4.0, 7.0], dtype=F64)
    yb, ub, count = poiseuille.binnedProfile(x, u, 0.0, 0.1, 10)
    assert count.tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    assert ub[[0, 1, 9]].tolist() == [1.0, 3.0, 7.0]
    assert yb[1].item() == pytest.approx(0.135)


def test_config_validation():
    with pytest.raises(ValueError, match="periodic length"):
        poiseuille.PoiseuilleConfig(nx=4, support=3.0)
    with pytest.raises(ValueError, match="snapshots"):
        poiseuille.PoiseuilleConfig(snapshots="0.1,x")
    with pytest.raises(ValueError, match="dtype"):
        poiseuille.PoiseuilleConfig(dtype="float16")


def test_tiny_run_follows_the_start_up_series(tmp_path):
    torch.set_num_threads(1)
    config = poiseuille.PoiseuilleConfig(ny=10, nx=8, t=0.1, snapshots="0.05")
    r = poiseuille.run(config, tmp_path, quiet=True)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "poiseuille.png").is_file()
    for key in ("profileL2RelErr", "profileMaxRelErr", "profileL2RelErrSteady",
                "transientL2RelErr", "msPerStep", "particles", "particleStepsPerSecond",
                "steps", "dt", "profile", "history", "config"):
        assert key in saved, key
    assert saved["particles"] == 8 * 10 + 2 * 3 * 8 == r["particles"]
    assert saved["steps"] == 80 and saved["msPerStep"] > 0
    # the transient profile at t = 0.05 and 0.1 (u(L/2) = 0.36 and 0.61) within 3 % of u_max
    assert saved["transientL2RelErr"] < 0.03
    assert saved["profileL2RelErr"] < 0.03
    assert saved["profileL2RelErrSteady"] > 0.2  # still far from the steady state
    # a parallel flow: no transverse motion, the walls at rest
    assert saved["maxTransverseVelocity"] < 1e-3
    assert saved["wallDisplacement"] == 0.0
    assert saved["centreVelocity"] == pytest.approx(saved["centreVelocityExact"], abs=0.03)
