"""Bounds-checked run (issue "Reliability"): `debug_mode_matrix.py` runs every operator
(CSR list and grid, forward and backward), one JVP per operator, the Density HVP, the
correction builders and the neighbour search under Warp's debug mode -- on valid structures,
then on corrupted ones (indices outside the sets, rows past the edge list) -- in
which every array
access is bounds-checked and an out-of-bounds index aborts the process. The test runs it in
a subprocess with its own kernel cache (debug builds differ from release builds) and requires
a clean exit; a second subprocess shows that the check is live (an out-of-bounds read in a
toy kernel aborts)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent

_OOB = """
import warp as wp
wp.config.mode = "debug"
wp.init()
@wp.kernel
def k(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i + 5]
a = wp.zeros(3, dtype=float, device="cpu")
o = wp.zeros(3, dtype=float, device="cpu")
wp.launch(k, dim=3, inputs=[a], outputs=[o], device="cpu")
print("survived")
"""


def _env(tmp_path_factory):
    cache = os.environ.get("WARPSPHCORE_DEBUG_CACHE") or str(
        tmp_path_factory.getbasetemp() / "warp-debug-cache")
    return dict(os.environ, WARP_CACHE_PATH=cache)


@pytest.mark.slow
def test_debug_mode_matrix(tmp_path_factory):
    env = _env(tmp_path_factory)
    oob = subprocess.run([sys.executable, "-c", _OOB], env=env, capture_output=True,
                         text=True, timeout=600)
    assert oob.returncode != 0 and "survived" not in oob.stdout, oob.stdout + oob.stderr
    r = subprocess.run([sys.executable, str(HERE / "debug_mode_matrix.py")], env=env,
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "Assertion failed" not in out and "OK 14 operator calls" in r.stdout
    assert "OK mutated 15 calls reported" in r.stdout, out[-4000:]
