"""Run every script in examples/ as a user would: `python examples/NAME.py --out DIR`.

Each script asserts its own numbers and prints "OK" last; here we check the exit code, that
last line, and that its output files went to the --out directory (pytest's tmp_path).
Marked slow: each run starts a fresh interpreter (imports, Warp initialisation; a cold Warp
kernel cache compiles kernels on first use).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
TIMEOUT_S = 600  # generous: a cold kernel cache compiles for up to a minute per script


def runExample(name: str, outDir: pathlib.Path, *extra: str) -> str:
    outDir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--out", str(outDir), *extra],
        cwd=outDir, capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"{name} exited with {proc.returncode}\n--- stdout ---\n{proc.stdout}\n"
        f"--- stderr ---\n{proc.stderr}")
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1] == "OK", f"{name}: last line is not OK\n{proc.stdout}"
    return proc.stdout


def outputFiles(outDir: pathlib.Path) -> set[str]:
    return {p.name for p in outDir.iterdir() if p.is_file()}


@pytest.mark.slow
def test_neighbor_search_density(tmp_path):
    stdout = runExample("neighbor_search_density.py", tmp_path)
    assert "identical: True" in stdout
    assert outputFiles(tmp_path) == {"density.npz"}


@pytest.mark.slow
def test_operators_tour(tmp_path):
    stdout = runExample("operators_tour.py", tmp_path)
    assert "Laplacian u [Dot]" in stdout and "Covariance" in stdout
    assert outputFiles(tmp_path) == {"operator_errors.json"}


@pytest.mark.slow
def test_crk_and_renormalization(tmp_path):
    stdout = runExample("crk_and_renormalization.py", tmp_path)
    assert "CRK Naive" in stdout and "renormalized Difference" in stdout
    assert outputFiles(tmp_path) == {"gradients.npz"}


@pytest.mark.slow
def test_reverse_mode_optimisation(tmp_path):
    stdout = runExample("reverse_mode_optimisation.py", tmp_path)
    assert "loss: initial" in stdout
    assert outputFiles(tmp_path) == {"optimisation.npz"}


@pytest.mark.slow
def test_dual_tensor_jvp(tmp_path):
    stdout = runExample("dual_tensor_jvp.py", tmp_path)
    assert "dual vs warpOperationJVP" in stdout
    assert outputFiles(tmp_path) == {"jvp.npz"}


@pytest.mark.slow
def test_density_hvp_newton(tmp_path):
    stdout = runExample("density_hvp_newton.py", tmp_path)
    assert "warpOperationHVP assembly vs autograd.hvp" in stdout
    assert outputFiles(tmp_path) == {"newton_history.json"}


@pytest.mark.slow
def test_export_paraview(tmp_path):
    # the default writer (warpSPHCore.io when importable, else the legacy fallback) ...
    stdout = runExample("export_paraview.py", tmp_path / "default", "--frames", "2")
    suffix = ".vtu" if "warpSPHCore.io (VTU)" in stdout else ".vtk"
    assert outputFiles(tmp_path / "default") == {f"step_000{k}{suffix}" for k in range(2)}
    # ... and the numpy legacy-VTK fallback, forced
    stdout = runExample("export_paraview.py", tmp_path / "legacy", "--frames", "2", "--legacy")
    assert "legacy ASCII VTK" in stdout
    assert outputFiles(tmp_path / "legacy") == {"step_0000.vtk", "step_0001.vtk"}


@pytest.mark.slow
def test_wcsph_taylor_green(tmp_path):
    stdout = runExample("wcsph_taylor_green.py", tmp_path)
    assert "decay rate" in stdout and "900 particles" in stdout
    assert outputFiles(tmp_path) == {"taylor_green.json"}


@pytest.mark.slow
def test_distributed_density_gradient(tmp_path):
    stdout = runExample("distributed_density_gradient.py", tmp_path, "--processes", "2")
    assert "2 ranks (spawn)" in stdout and "max relative difference" in stdout
    assert outputFiles(tmp_path) == {"distributed_step.json"}


@pytest.mark.slow
def test_distributed_optimize(tmp_path):
    stdout = runExample("distributed_optimize.py", tmp_path, "--processes", "2")
    assert "reverse mode vs central FD" in stdout and "closer by" in stdout
    assert outputFiles(tmp_path) == {"distributed_optimize.json"}


@pytest.mark.slow
def test_batched_scene_inference(tmp_path):
    stdout = runExample("batched_scene_inference.py", tmp_path)
    assert "recovered" in stdout
    assert "batched_scene_inference.json" in outputFiles(tmp_path)


@pytest.mark.slow
def test_learned_closure(tmp_path):
    stdout = runExample("learned_closure.py", tmp_path)
    assert "central difference" in stdout and "held-out velocity error" in stdout
    assert outputFiles(tmp_path) == {"learned_closure.json"}


@pytest.mark.slow
def test_cylinder_array_drag(tmp_path):
    stdout = runExample("cylinder_array_drag.py", tmp_path)
    assert "drag / (M F)" in stdout
    assert outputFiles(tmp_path) == {"cylinder_array_drag.json"}
