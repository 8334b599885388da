"""On a machine without CUDA, `import warpSPHCore` and a first CPU operator call print nothing
(no Warp greeting, no native "Could not find or load the NVIDIA CUDA driver" line), while a
request for a CUDA device still says that CUDA is missing (util/warpContext.ensureWarp)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from warpSPHCore.util.warpContext import warpDevice

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="checks the quiet start of a machine without CUDA")

# a neighbour search and a Density on 64 particles (2D, float32): the first CPU operator call
TINY_CPU_CALL = textwrap.dedent("""
    import torch
    from warpSPHCore import (DomainDescription, KernelFunctions, OperationProperties,
                             ParticleState, SupportScheme, WarpOperation,
                             radiusSearchCompactHashMap, warpOperation)
    n, dx = 8, 0.25
    g = (torch.arange(n, dtype=torch.float32) + 0.5) * dx - 1.0
    x, y = torch.meshgrid(g, g, indexing="xy")
    pos = torch.stack([x.flatten(), y.flatten()], dim=1)
    N = pos.shape[0]
    p = ParticleState(positions=pos, supports=torch.full((N,), 3 * dx),
                      masses=torch.full((N,), dx * dx), kinds=torch.zeros(N, dtype=torch.int32))
    dom = DomainDescription(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]),
                            periodic=[True, True])
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.Gather)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    rho = warpOperation(p, props, dom, adjacency=adj)
    assert rho.shape == (N,) and bool(torch.isfinite(rho).all())
""")


def _run(code, tmp_path, **env):
    full = {k: v for k, v in os.environ.items() if k != "WARPSPHCORE_VERBOSE_WARP"}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=300)


def test_import_prints_nothing(tmp_path):
    r = _run("import warpSPHCore", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert r.stderr == ""


def test_first_cpu_call_prints_nothing(tmp_path):
    """Nothing but the library's own compile notices (a cold kernel cache, as in CI, compiles
    the search and Density modules and says so: util/compileNotice)."""
    r = _run(TINY_CPU_CALL, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    other = [line for line in r.stderr.splitlines()
             if not line.startswith("warpSPHCore: compiling the Warp kernels of ")]
    assert other == []
    r = _run(TINY_CPU_CALL, tmp_path, WARPSPHCORE_COMPILE_NOTICE="0")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


def test_verbose_warp_restores_the_output(tmp_path):
    """The control: the same start with WARPSPHCORE_VERBOSE_WARP=1 prints Warp's greeting."""
    code = "from warpSPHCore.util.warpContext import ensureWarp; ensureWarp()"
    r = _run(code, tmp_path, WARPSPHCORE_VERBOSE_WARP="1")
    assert r.returncode == 0, r.stderr
    assert "Warp" in r.stdout + r.stderr


def test_cuda_request_names_cuda():
    with pytest.raises(RuntimeError, match="CUDA"):
        warpDevice("cuda:0")
