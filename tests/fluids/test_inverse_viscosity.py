"""The inverse problem over a rollout (`demo.viscosity`) at its tiny size: the
reverse-mode gradient through the whole checkpointed rollout agrees with a central
difference, and L-BFGS moves nu from 0.03 most of the way to the true 0.01."""

from __future__ import annotations

from warpSPHCore.demo import viscosity


def test_viscosity_is_recovered(tmp_path):
    r = viscosity.run(tmp_path, size="tiny", quiet=True)
    assert r["gradientVsCentralDifference"] < 1e-6
    assert min(r["losses"]) < 1e-2 * r["losses"][0]
    start = abs(viscosity.START_VISCOSITY - viscosity.TRUE_VISCOSITY)
    assert abs(r["recoveredViscosity"] - viscosity.TRUE_VISCOSITY) < 0.1 * start
    assert (tmp_path / "viscosity.png").stat().st_size > 0
