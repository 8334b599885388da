"""`warpsph run CASE` and the `tgv` demo part at tiny sizes: the options come from the case's
config, results.json holds the documented keys with values the run supports, frames are
written through `writeParticles` and read back, and the demo report embeds the figure."""

from __future__ import annotations

import json

import pytest
import torch

from warpSPHCore.cli import main
from warpSPHCore.io import readParticles


def test_run_tgv_writes_results_and_frames(tmp_path, capsys):
    out = tmp_path / "tgv"
    assert main(["run", "tgv", "--n", "12", "--t", "0.02", "--relax", "10", "--frames", "5",
                 "--skin", "0.2", "--out", str(out), "--quiet"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["config"]["n"] == 12 and r["config"]["skin"] == 0.2 and r["t"] == 0.02
    assert r["particles"] == 144 and r["steps"] == 11
    # a barely relaxed start (10 steps): sane, not accurate (test_cases.py checks accuracy)
    assert abs(r["kineticEnergyRelErr"]) < 0.1 and r["velocityL2RelErr"] < 0.3
    assert r["msPerStep"] > 0 and r["particleStepsPerSecond"] > 0
    frames = sorted((out / "frames").glob("frame_*.vtu"))
    assert [f.name for f in frames] == ["frame_000000.vtu", "frame_000005.vtu",
                                        "frame_000010.vtu"]
    _, fields, meta = readParticles(frames[-1])
    assert fields["positions"].shape == (144, 2) and fields["velocities"].dtype == torch.float64
    assert meta["time"] == pytest.approx(10 * r["dt"], rel=1e-12)
    assert meta["domain"] is not None and meta["domain"].periodic.tolist() == [True, True]
    text = capsys.readouterr().out
    assert "warpsph run tgv" in text and "velocityL2RelErr" in text


def test_run_with_decisions_every_k_steps_gives_the_same_results(tmp_path, capsys):
    """``--verlet-check-every 4``: the loop reads the rebuild decision once every 4 steps;
    the case's errors equal those of a check per evaluation up to rounding."""
    results = []
    for k in ("1", "4"):
        out = tmp_path / k
        assert main(["run", "tgv", "--n", "12", "--t", "0.02", "--relax", "10", "--out",
                     str(out), "--quiet", "--verlet-check-every", k]) == 0
        results.append(json.loads((out / "results.json").read_text()))
    a, b = results
    assert a["steps"] == b["steps"] == 11
    assert b["velocityL2RelErr"] == pytest.approx(a["velocityL2RelErr"], rel=1e-9)
    with pytest.raises(SystemExit, match="one process"):
        main(["run", "tgv", "--nproc", "2", "--verlet-check-every", "4", "--quiet"])
    with pytest.raises(SystemExit, match="verletCheckEvery >= 2"):
        main(["run", "tgv", "--capture", "--quiet"])


def test_run_rejects_an_unknown_case_and_a_bad_config(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "nocase"])
    with pytest.raises(ValueError, match="half the box"):
        main(["run", "tgv", "--n", "6", "--out", str(tmp_path), "--quiet"])


def test_demo_tgv_part(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "tgv", "--size", "tiny", "--out", str(out), "--quiet"]) == 0
    report = (out / "report.md").read_text()
    assert "(tgv/tgv.png)" in report and "Taylor-Green" in report
    results = json.loads((out / "results.json").read_text())
    assert list(results) == ["tgv"]
    r = results["tgv"]
    assert r["particles"] == 144 and r["t"] == 0.05 and abs(r["kineticEnergyRelErr"]) < 0.03
    assert (out / "tgv" / "results.json").exists() and (out / "tgv" / "tgv.png").exists()
    assert "tgv: kinetic energy error" in capsys.readouterr().out
