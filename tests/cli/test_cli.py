"""The `warpsph` command line: `info` lists versions and kernels; `demo search` writes a figure
and a JSON summary whose numbers are consistent with a brute-force search (the other demo
parts: `test_demo.py`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from warpSPHCore.cli import main


def test_info_lists_versions_and_every_kernel(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "warp-lang   1.19" in out
    for name in ("Wendland2", "B7", "HOCT4", "Gaussian", "AdhesionKernel"):
        assert name in out
    assert '"cpu"' in out or "cpu" in out


def test_demo_writes_outputs(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["demo", "search", "--nx", "24", "--repeats", "1", "--out", str(out), "--quiet",
               "--precision", "float64", "--check", "10000"])
    assert rc == 0
    summary = json.loads((out / "demo.json").read_text())
    png = out / "neighbor_counts.png"
    assert png.exists() and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["particles"] == 24 * 24
    assert summary["bruteForceAgrees"] is True
    assert summary["bruteForceRowsChecked"] == 24 * 24  # every row at this size
    # jittered lattice with 50 target neighbours: the mean count is close to 50
    assert abs(summary["meanNeighbors"] - 50.0) < 5.0
    assert summary["pairs"] == round(summary["meanNeighbors"] * summary["particles"])
    assert math.isclose(summary["support"], math.sqrt(50.0 * (2 / 24) ** 2 / math.pi))
    assert "neighbour search" in capsys.readouterr().out


def test_module_entry_point():
    r = subprocess.run([sys.executable, "-m", "warpSPHCore", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "demo" in r.stdout
