"""`warpsph demo` at the tiny size: every part writes its figure and states results that the
run supports (testing what the report claims, not that it ran).

* accuracy: the corrected gradients converge at order > 1.3 and beat the plain one; the
  corrected gradients reproduce a linear field to 1e-10, the plain one does not; the
  consistent Laplacian converges at order >= 1 where Brookshaw's plain one does not,
  reproduces a quadratic to 1e-9 on the rows it keeps (its Hessian too; the wall rows fall
  back to Brookshaw) where Brookshaw's is off by O(1), and
  its heat-equation solution converges at order >= 1 with a smaller error than Brookshaw's;
* inverse: the loss falls by more than a factor 5, and keeps falling;
* jfnk (both problems, float32 and float64): the exact JVP matvecs (dual tensors and
  warpOperationJVP) reach Newton's tolerance in every step and agree; in float64 the
  sqrt(eps) finite differences are as good and the hard-coded 1e-8 step works; in float32 the
  1e-8 step fails by 10x or more while the exact JVPs converge; the report states exactly
  these claims;
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
    # the consistent Laplacian: order >= 1 on the jittered lattices, below
    # Brookshaw's error; quadratics to rounding; the heat equation solved more accurately
    lap = r["errors"]["Laplacian"]
    assert o["Laplacian"]["consistent"] >= 1.0, o["Laplacian"]
    assert o["Laplacian"]["plain"] < 0.5, o["Laplacian"]
    assert lap["consistent"][-1] < lap["plain"][-1] / 3
    quad = r["quadraticLaplacianInteriorMaxRelError"]  # the rows the scheme keeps
    assert quad["consistent"] <= 1e-9, quad
    assert quad["plain"] > 1e-1, quad
    assert r["quadraticHessianMaxRelError"] <= 1e-9
    assert 0 < r["quadraticFallbackRows"] < 400 // 2  # the wall rows of the 20^2 box
    heat = r["heatErrors"]
    assert heat["consistent"][-1] < heat["plain"][-1], heat
    assert r["heatOrders"]["consistent"] >= 1.0, r["heatOrders"]
    assert "| Laplacian | consistent |" in r["report"]


def test_inverse_part(tmp_path):
    r = inverse.run(tmp_path, "tiny", quiet=True)
    _png(tmp_path / "inverse.png")
    assert r["finalLoss"] < r["losses"][0] / 5
    assert r["losses"][-1] < r["losses"][len(r["losses"]) // 2] < r["losses"][0]


@pytest.fixture(scope="module")
def jfnkTiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jfnk")
    return out, jfnk.run(out, "tiny", quiet=True)


def test_jfnk_part(jfnkTiny):
    out, r = jfnkTiny
    _png(out / "jfnk.png")
    assert set(r["stats"]) == set(jfnk.PROBLEMS) == {"wave", "lagrange"}
    for prob in jfnk.PROBLEMS:
        for dn in ("float32", "float64"):
            st, c = r["stats"][prob][dn], r["claims"][f"{prob}/{dn}"]
            assert set(st) == set(jfnk.KINDS)
            for kind in ("dual", "jvp"):  # the exact products reach the tolerance every step
                s = st[kind]
                assert s["converged"] and s["stepsDone"] == r["problems"][prob]["steps"]
                assert s["worstRelResidual"] <= jfnk.NEWTON_RTOL[dn], (prob, dn, kind, s)
                h = r["firstStepHistory"][prob][dn][kind]
                assert all(b < a for a, b in zip(h, h[1:])), h
            assert c["exactConverged"] and c["dualJvpSameNewton"]
            # the two exact routes round differently in float32 (small: 392 vs 391 GMRES its)
            assert abs(st["dual"]["gmres"] - st["jvp"]["gmres"]) <= 0.02 * st["jvp"]["gmres"]
            assert r["stateDifference"][prob][dn]["jvp"] < (1e-12 if dn == "float64" else 1e-5)
            assert c["exactProductError"] < (1e-13 if dn == "float64" else 1e-5)
            assert st["fd"]["converged"]  # the sensible step works in both precisions


def test_jfnk_float64_finite_differences_as_good(jfnkTiny):
    _, r = jfnkTiny
    for prob in jfnk.PROBLEMS:
        c = r["claims"][f"{prob}/float64"]
        st = r["stats"][prob]["float64"]
        assert c["fdAsGood"], c
        assert st["fd"]["worstRelResidual"] <= jfnk.NEWTON_RTOL["float64"]
        assert c["fdProductError"] < jfnk.GMRES_RTOL  # below the GMRES tolerance
        assert c["fdBadConverged"]  # 1e-8 is a sensible step in float64


def test_jfnk_float32_bad_step_fails_where_exact_jvps_converge(jfnkTiny):
    _, r = jfnkTiny
    tol = jfnk.NEWTON_RTOL["float32"]
    for prob in jfnk.PROBLEMS:
        c = r["claims"][f"{prob}/float32"]
        st = r["stats"][prob]["float32"]
        assert c["fdBadFails"] and not st["fdBad"]["converged"], c
        assert st["fdBad"]["worstRelResidual"] >= 10 * tol
        assert st["fdBad"]["worstRelResidual"] >= 10 * c["exactWorstResidual"]
        assert c["fdBadProductError"] > 0.1  # the product is rounding noise
        # the sensible step's product error is ~sqrt(eps): above the GMRES tolerance, far above
        # the exact products' rounding
        assert c["fdProductError"] > max(jfnk.GMRES_RTOL, 100 * c["exactProductError"])
    # coordinates ~ 0.1..1 in float32: x + 1e-8 w rounds back to x in (almost) every entry
    assert r["claims"]["lagrange/float32"]["fdBadUnchangedFraction"] >= 0.99


def test_jfnk_report_states_the_computed_claims(jfnkTiny):
    _, r = jfnkTiny
    rep = r["report"]
    rows = [ln for ln in rep.splitlines() if ln.startswith(("| wave |", "| lagrange |"))]
    assert len(rows) == len(jfnk.PROBLEMS) * 2 * len(jfnk.KINDS)
    for prob in jfnk.PROBLEMS:
        for dn in ("float32", "float64"):
            c = r["claims"][f"{prob}/{dn}"]
            line = next(ln for ln in rep.splitlines() if ln.startswith(f"* **{prob}, {dn}:**"))
            assert ("sqrt(eps) step are as good" in line) == c["fdAsGood"], line
            assert ("1e-8 fails" in line) == c["fdBadFails"], line
            assert ("1e-8 converges as well" in line) == c["fdBadConverged"], line
            assert "reach the tolerance" in line
    assert "Finite differences with a sensible step are as good as the exact JVPs for" in rep
    assert "wave/float64" in rep and "lagrange/float64" in rep
    assert "A badly chosen step breaks finite differences for wave/float32, " \
           "lagrange/float32" in rep
    assert "reach the tolerance in every case" in rep


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
