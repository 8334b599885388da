"""`warpsph demo` at the tiny size: every part writes its figure and states results that the
run supports (testing what the report claims, not that it ran).

* accuracy: the corrected gradients converge at order > 1.3 and beat the plain one; the
  corrected gradients reproduce a linear field to 1e-10, the plain one does not;
* inverse: the loss falls by more than a factor 5, and keeps falling;
* jfnk: Newton reaches its tolerance with the JVP matvecs (every step), the dual-tensor and
  explicit JVP runs agree, and the residual histories fall monotonically;
* the whole command writes report.md embedding every figure and results.json.
"""

from __future__ import annotations

import json

import pytest

from warpSPHCore.cli import main
from warpSPHCore.demo import accuracy, inverse, jfnk

PNG = b"\x89PNG\r\n\x1a\n"


def _png(path):
    assert path.exists() and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == PNG


def test_accuracy_part(tmp_path):
    r = accuracy.run(tmp_path, "tiny", quiet=True)
    _png(tmp_path / "accuracy.png")
    o = r["orders"]
    for q in ("gradient", "divergence"):
        for m in ("CRK", "renormalized"):
            assert 1.3 < o[q][m] < 3.0, (q, m, o[q][m])
            assert r["errors"][q][m][-1] < r["errors"][q]["plain"][-1]
    assert r["linearMaxError"]["CRK"] < 1e-10
    assert r["linearMaxError"]["renormalized"] < 1e-10
    assert r["linearMaxError"]["plain"] > 1e-3
    assert "| gradient | CRK |" in r["report"]


def test_inverse_part(tmp_path):
    r = inverse.run(tmp_path, "tiny", quiet=True)
    _png(tmp_path / "inverse.png")
    assert r["finalLoss"] < r["losses"][0] / 5
    assert r["losses"][-1] < r["losses"][len(r["losses"]) // 2] < r["losses"][0]


def test_jfnk_part(tmp_path):
    r = jfnk.run(tmp_path, "tiny", quiet=True)
    _png(tmp_path / "jfnk.png")
    for kind in ("dual", "jvp"):
        s = r["stats"][kind]
        assert s["worstRelResidual"] <= jfnk.NEWTON_RTOL, (kind, s)
        h = r["firstStepHistory"][kind]
        assert all(b < a for a, b in zip(h, h[1:])), h
    assert r["stats"]["dual"]["newton"] == r["stats"]["jvp"]["newton"]
    assert r["stateDifference"] < 1e-8


def test_gmres_solves_a_small_system():
    import torch

    g = torch.Generator().manual_seed(0)
    A = torch.eye(30, dtype=torch.float64) + 0.1 * torch.randn(30, 30, generator=g,
                                                               dtype=torch.float64)
    b = torch.randn(30, generator=g, dtype=torch.float64)
    x, its, rel = jfnk.gmres(lambda w: A @ w, b, rtol=1e-12, restart=10, maxiter=300)
    assert rel <= 1e-12 and its > 10  # needed restarts
    torch.testing.assert_close(A @ x, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("part", ["accuracy", "inverse", "jfnk"])
def test_cli_part_writes_report(tmp_path, part, capsys):
    out = tmp_path / part
    assert main(["demo", part, "--size", "tiny", "--out", str(out), "--quiet"]) == 0
    report = (out / "report.md").read_text()
    assert f"({part}.png)" in report
    results = json.loads((out / "results.json").read_text())
    assert list(results) == [part]
    assert "warpSPHCore demo summary" in capsys.readouterr().out
