"""The DFG 2D-1 cylinder case (`warpsph run cylinder`) at a tiny size: the run's results and
figure, and the gradients of the time-averaged drag coefficient with respect to the inflow
speed and the cylinder's radius against central differences (float64)."""

from __future__ import annotations

import math

from warpSPHCore.fluids.cases.cylinder import CylinderConfig, dragGradients, run


def test_drag_gradients_match_central_differences():
    g = dragGradients(steps=6)
    assert g["dragGradientFDRelErr"] <= 1e-4, g
    assert abs(g["dCD_dUmax"]) > 1.0 and abs(g["dCD_dRadius"]) > 1.0


def test_tiny_cylinder_run(tmp_path):
    r = run(CylinderConfig(t=0.02, window=0.01, every=5, gradients=False), tmp_path,
            quiet=True)
    for name in ("dragCoefficient", "liftCoefficient", "pressureDifference", "dragRelErr",
                 "particleStepsPerSecond"):
        assert math.isfinite(r[name]), name
    assert r["dragCoefficient"] > 0.0  # the stream pushes the cylinder downstream
    assert r["pressureDifference"] > 0.0  # higher in front than behind
    assert r["fluidParticlesEnd"] > 8000
    assert (tmp_path / "cylinder.png").exists() and (tmp_path / "results.json").exists()
