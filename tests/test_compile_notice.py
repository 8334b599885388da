"""A first run that speaks: before Warp compiles one of the library's
modules on a device, one line on stderr says what, for which device, that it happens once
and where the cache is; nothing when the binary is cached; `warpsph precompile` warms the
cache (util/compileNotice)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import warp as wp

from warpSPHCore.cli import main
from warpSPHCore.precompile import precompile
from warpSPHCore.util import compileNotice
from warpSPHCore.util.warpContext import ensureWarp

ensureWarp()


@pytest.fixture
def fresh(monkeypatch):
    """Forget which (module, device) pairs this process has announced."""
    monkeypatch.setattr(compileNotice, "_SEEN", set())
    return compileNotice


def _densityKernel():
    from warpSPHCore.operators.density import densityKernel

    return densityKernel


def test_notice_when_not_cached(fresh, monkeypatch, capsys):
    monkeypatch.setattr(fresh, "_isCached", lambda module, device: False)
    fresh.announceCompile(_densityKernel(), "cpu")
    err = capsys.readouterr().err
    assert "warpSPHCore: compiling the Warp kernels of Density" in err
    assert "warpSPHCore.operators.density" in err and "for cpu" in err
    assert "happens once" in err and str(wp.config.kernel_cache_dir) in err
    assert "warpsph precompile" in err
    fresh.announceCompile(_densityKernel(), "cpu")  # once per module and device
    assert capsys.readouterr().err == ""


def test_only_rank_zero_announces(fresh, monkeypatch, capsys):
    """Several processes (torchrun's RANK, or an initialised torch.distributed group): only
    rank 0 prints the notices."""
    monkeypatch.setattr(fresh, "_isCached", lambda module, device: False)
    monkeypatch.setenv("RANK", "1")
    fresh.announceCompile(_densityKernel(), "cpu")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(fresh, "_SEEN", set())
    monkeypatch.setenv("RANK", "0")
    fresh.announceCompile(_densityKernel(), "cpu")
    assert "warpSPHCore: compiling" in capsys.readouterr().err


def test_notice_names_a_specialised_configuration(fresh, monkeypatch, capsys):
    """A per-configuration kernel (`operators._specialized`) is announced with its
    configuration, not as a whole operator module."""
    from warpSPHCore.operators._specialized import Configuration, _densityKernel

    kernel = _densityKernel(Configuration(3, wp.float64, 30, 16, 1, False, True))
    monkeypatch.setattr(fresh, "_isCached", lambda module, device: False)
    fresh.announceCompile(kernel, "cpu")
    err = capsys.readouterr().err
    assert ("compiling the Density (CubicSpline, PartialSymmetric supports, "
            "FluidQueriesFluidReferences, grid, calibrated, 3D float64) kernel specialised for "
            "this call's configuration") in err
    assert "happens once" in err and "kind mode" not in err
    assert fresh.specializedLabel("warpSPHCore_gradient_k0_gather_m9_g3_csr_2d_f32_abc") == (
        "Gradient (Wendland2, Gather supports, AllQueriesNonGhostReferences, Difference "
        "gradient, csr, 2D float32)")
    assert fresh.specializedLabel("warpSPHCore_Search_kernels_2d_f64_cpu_group") == (
        "Search kernels (2D float64)")
    assert fresh.specializedLabel("warpSPHCore_Search_kernels_3d_f32_filter_group") == (
        "Search kernels (3D float32, filter)")
    assert fresh.specializedLabel("warpSPHCore_laplacian_k1_gather_m9_l3_grid_3d_f32_ab") == (
        "Laplacian (Wendland4, Gather supports, AllQueriesNonGhostReferences, Dot Laplacian, "
        "grid, 3D float32)")
    assert fresh.specializedLabel(
        "warpSPHCore_momentum_k0_gather_m11_csr_2d_f64_e9f7a2bd") == (
        "Momentum (Wendland2, Gather supports, FluidQueriesNonGhostReferences, csr, 2D float64)")
    assert fresh.specializedLabel(
        "warpSPHCore_gradientAndVJP_k0_scatter_m2_g2_L_csr_2d_f64_pair") == (
        "Gradient + reverse (Wendland2, Scatter supports, BoundaryQueriesFluidReferences, "
        "Symmetric gradient, renormalized, csr, 2D float64)")


def test_no_notice_when_cached_or_silenced(fresh, monkeypatch, capsys):
    monkeypatch.setattr(fresh, "_isCached", lambda module, device: True)
    fresh.announceCompile(_densityKernel(), "cpu")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(fresh, "_SEEN", set())
    monkeypatch.setattr(fresh, "_isCached", lambda module, device: False)
    monkeypatch.setenv("WARPSPHCORE_COMPILE_NOTICE", "0")
    fresh.announceCompile(_densityKernel(), "cpu")
    assert capsys.readouterr().err == ""


def test_cache_probe_matches_warp(fresh):
    """After a precompile the probe finds each module's binary where Warp put it: the
    search's per-signature copies (`util.warpContext.concreteKernel`)."""
    from warpSPHCore.neighborhood import _kernels
    from warpSPHCore.util.warpContext import concreteKernel

    res = precompile(["cpu"], ["Search"], verbose=False, dims=(2,), dtypes=("float32",))
    entry = next(e for e in _kernels.CONCRETE_SIGNATURES
                 if e.kernel is _kernels.cellMajorSearchKernel and e.d == 2
                 and e.scalar == wp.float32)
    module = concreteKernel(entry.kernel, entry.types).module
    assert module.name in res["modules"]
    assert fresh._isCached(module, wp.get_device("cpu"))
    assert all(m.startswith("warpSPHCore_Search_") for m in res["modules"])
    assert not any("_1d_" in m or "_3d_" in m or "_f64_" in m for m in res["modules"])


def test_precompile_command(capsys):
    from warpSPHCore.neighborhood import _kernels
    from warpSPHCore.util.warpContext import concreteKernel

    assert main(["precompile", "--operators", "Search", "--device", "cpu"]) == 0
    out = capsys.readouterr()
    expected = {concreteKernel(e.kernel, e.types, group=e.tag).module.name
                for e in _kernels.CONCRETE_SIGNATURES if e.part != "cuda"}
    # per (dimension, scalar type) on the CPU: the grid build with the cell-major search, the
    # per-query search and the Verlet filter (`_kernels.ConcreteSignature`)
    assert f"{len(expected)} modules on cpu" in out.out and len(expected) == 18
    assert "Search kernels (3D float64)" in out.err
    assert "cached" in out.err or "compiling" in out.err
    assert main(["precompile", "--operators", "Density", "--dim", "2", "--dtype", "float32",
                 "--kernels", "Wendland2", "CubicSpline"]) == 0
    out = capsys.readouterr()
    # the generic Density and HVP modules + the specialised Density kernel of the default
    # configuration, CSR and grid, and (CSR on the CPU) the one that takes a symmetric
    # list's pairs once, for each smoothing kernel
    assert "8 modules on cpu" in out.out
    assert ("Density (CubicSpline, Gather supports, AllQueriesNonGhostReferences, grid, "
            "2D float32)") in out.err
    assert "kind mode" not in out.err
    assert main(["precompile", "--kernels", "Nope"]) == 2
    assert main(["precompile", "--operators", "Nope"]) == 2
    assert "unknown operators ['Nope']" in capsys.readouterr().err


def test_precompile_rejects_unknown_operator():
    with pytest.raises(ValueError, match="accepted: Density"):
        precompile(["cpu"], ["Nope"])


@pytest.mark.slow
def test_cold_cache_first_call_says_what_compiles(tmp_path):
    """A fresh WARP_CACHE_PATH: the first search and Density announce their modules before
    compiling them; a second process with the same cache says nothing."""
    code = textwrap.dedent("""
        import torch
        from warpSPHCore import (DomainDescription, KernelFunctions, OperationProperties,
                                 ParticleState, WarpOperation, radiusSearchCompactHashMap,
                                 warpOperation)
        pos = torch.rand(32, 2) * 2 - 1
        p = ParticleState(pos, torch.full((32,), 0.5), torch.full((32,), 0.1),
                          torch.zeros(32, dtype=torch.int32))
        dom = DomainDescription(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]))
        adj = radiusSearchCompactHashMap(p, dom)
        warpOperation(p, OperationProperties(KernelFunctions.Wendland2,
                                             operation=WarpOperation.Density), dom, adjacency=adj)
    """)
    env = dict(os.environ, WARP_CACHE_PATH=str(tmp_path / "cache"))
    env.pop("WARPSPHCORE_COMPILE_NOTICE", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("warpSPHCore: compiling")]
    assert any("the Search kernels (2D float32) for cpu" in x for x in lines)
    assert any("the Density (Wendland2, Gather supports" in x and "specialised" in x
               for x in lines)
    assert all(str(tmp_path / "cache") in x for x in lines)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0 and "compiling" not in r.stderr, r.stderr
