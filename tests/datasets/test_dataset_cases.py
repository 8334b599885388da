"""`rpf2d` and `dam2d` at --size tiny (one trajectory per split): the layout, the particle
types, the bounds and the force.py that LagrangeBench loads; `simulateSeeds` returns the
frames the files store; LagrangeBench's particle counts at the full size."""

from __future__ import annotations

import json
import sys
import types

import h5py
import numpy as np
import pytest
import torch

from warpSPHCore.cli import main
from warpSPHCore.datasets import (
    DATASET_CASES,
    lagrangeBenchTypes,
    simulateSeeds,
    velocityStatistics,
)
from warpSPHCore.datasets.cases import reversePoiseuilleForce
from warpSPHCore.enumTypes import ParticleType

SPLITS = ("train", "valid", "test")


def _generate(case, out, *extra):
    assert main(["dataset", case, "--size", "tiny", "--trajectories", "1", "1", "1", "--out",
                 str(out), "--quiet", *extra]) == 0
    return json.loads((out / "metadata.json").read_text())


def _forceFn(path, monkeypatch):
    """force_fn of a written force.py, with numpy standing in for jax.numpy."""
    jax = types.ModuleType("jax")
    jax.numpy = np
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax.numpy", np)
    scope = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)
    return scope["force_fn"]


def _layout(out, meta, dtype):
    T, N = meta["sequence_length_train"], meta["num_particles_max"]
    lo, hi = np.array(meta["bounds"]).T
    for split in SPLITS:
        with h5py.File(out / f"{split}.h5", "r") as f:
            assert list(f.keys()) == ["00000"]
            g = f["00000"]
            assert set(g.keys()) == {"position", "particle_type"}
            assert g["position"].shape == (T, N, 2) and g["position"].dtype == dtype
            assert g["particle_type"].shape == (N,) and g["particle_type"].dtype == np.int64
            x = g["position"][()]
            assert np.isfinite(x).all() and (x >= lo).all() and (x <= hi).all()
            yield x, g["particle_type"][()]


def test_rpf2d_tiny(tmp_path, monkeypatch):
    out = tmp_path / "rpf"
    meta = _generate("rpf2d", out, "--dtype", "float64", "--stats-from", "train")
    size = DATASET_CASES["rpf2d"].sizes["tiny"]
    assert meta["case"] == "RPF" and meta["num_particles_max"] == 2 * size.n ** 2
    assert meta["bounds"] == [[0.0, 1.0], [0.0, 2.0]]
    assert meta["periodic_boundary_conditions"] == [True, True]
    assert meta["sequence_length_train"] == size.frames
    assert meta["g_ext_magnitude"] == 1.0 and meta["viscosity"] == pytest.approx(0.1)
    files = list(_layout(out, meta, np.float64))
    assert all((types_ == 0).all() for _, types_ in files)
    # the flow runs along x, positive below y = 1 and negative above: the mean x-velocity
    # of the lower half is positive
    x = files[0][0]
    lower = x[0, :, 1] < 1.0
    step = x[1:, :, 0] - x[:-1, :, 0]
    step -= np.round(step)  # the periodic x axis has length 1
    assert step[:, lower].mean() > 0.5 * step.std() and step[:, ~lower].mean() < 0
    # --stats-from train: the statistics of the training file only
    assert meta["warpSPHCore"]["statisticsFrom"] == ["train"]
    train = files[0]
    expected = velocityStatistics([train], meta["bounds"], [True, True])
    for key, value in expected.items():
        np.testing.assert_allclose(meta[key], value, rtol=1e-12, err_msg=key)
    force = _forceFn(out / "force.py", monkeypatch)
    probe = torch.tensor([[0.3, 0.2], [0.3, 1.0], [0.3, 1.01], [0.7, 1.9]], dtype=torch.float64)
    ours = reversePoiseuilleForce(probe).numpy()
    theirs = np.stack([np.asarray(force(r)) for r in probe.numpy()])
    np.testing.assert_array_equal(theirs, ours)
    assert ours[:, 0].tolist() == [1.0, 1.0, -1.0, -1.0]


def test_dam2d_tiny(tmp_path, monkeypatch):
    out = tmp_path / "dam"
    meta = _generate("dam2d", out)
    size = DATASET_CASES["dam2d"].sizes["tiny"]
    fluid = 2 * size.n * size.n
    length, height = round(5.366 * size.n), 2 * size.n
    walls = 2 * (length + 2) + 2 * height  # the innermost layer of a closed tank
    assert meta["case"] == "DAM" and meta["num_particles_max"] == fluid + walls
    assert meta["periodic_boundary_conditions"] == [False, False]
    assert meta["is_bc_present"] is True and meta["density_evolution"] is True
    dx = meta["dx"]
    for x, types_ in _layout(out, meta, np.float32):
        assert (types_[:fluid] == 0).all() and (types_[fluid:] == 1).all()
        # walls stay in place; the innermost layer sits dx / 2 outside the tank, which
        # starts 3 dx (the wall thickness) inside the bounds
        np.testing.assert_array_equal(x[0, fluid:], x[-1, fluid:])
        w = x[0, fluid:]
        assert np.isclose(w.min(), 2.5 * dx, atol=1e-6)
    # gravity: the fluid moves down on average
    assert (x[-1, :fluid, 1] - x[0, :fluid, 1]).mean() < 0
    force = _forceFn(out / "force.py", monkeypatch)
    np.testing.assert_array_equal(np.asarray(force(np.array([1.0, 0.5]))), [0.0, -1.0])
    assert json.loads((out / "generation.json").read_text())["plan"]["case"] == "dam2d"


def test_simulate_seeds_returns_the_stored_frames():
    size = DATASET_CASES["tgv2d"].sizes["tiny"]
    calls = []
    x, types_, meta = simulateSeeds("tgv2d", [5, 6], "tiny", progress=calls.append)
    assert x.shape == (2, size.frames, size.n ** 2, 2) and x.dtype == torch.float64
    assert types_.dtype == torch.int64 and (types_ == 0).all()
    assert sum(calls) == 2 * (size.frames - 1) * size.writeEvery
    assert meta["particleSteps"] == 2 * size.n ** 2 * (size.frames - 1) * size.writeEvery
    assert meta["dt"] == pytest.approx(0.02 / size.n) and meta["bounds"] == [[0, 1], [0, 1]]
    again, _, _ = simulateSeeds("tgv2d", [6], "tiny")
    # a seed is its trajectory, alone or in a batch: to rounding (a batch rebuilds its
    # neighbour list when any of its scenes needs it, so the order of the sums may differ)
    torch.testing.assert_close(again[0], x[1], rtol=0, atol=1e-12)


def test_full_sizes_are_lagrangebench_setups():
    """The full sizes have LagrangeBench's particle counts, time steps, frame intervals and
    connectivity radii (no simulation: the scenes are only built)."""
    cases = DATASET_CASES
    tgv = cases["tgv2d"].metadata(cases["tgv2d"].sizes["full"])
    assert (tgv["dx"], tgv["dt"], tgv["write_every"], tgv["default_connectivity_radius"]) \
        == (0.02, pytest.approx(4e-4), 100, 0.029)
    assert cases["tgv2d"].sizes["full"].frames == 126 and tgv["t_end"] == pytest.approx(5.0)
    rpf = cases["rpf2d"].metadata(cases["rpf2d"].sizes["full"])
    assert (rpf["dx"], rpf["dt"], rpf["default_connectivity_radius"]) \
        == (0.025, pytest.approx(5e-4), 0.036)
    size = cases["dam2d"].sizes["full"]
    scene = cases["dam2d"].scene(size, 0, torch.float64, torch.device("cpu"))
    kinds = scene.particles.kinds
    assert int((kinds == 0).sum()) == 5000 and scene.keep.numel() == 5740
    assert scene.dt == pytest.approx(3e-4)
    dam = cases["dam2d"].metadata(size)
    assert dam["bounds"] == [[0.0, pytest.approx(5.48)], [0.0, pytest.approx(2.12)]]


def test_particle_type_mapping():
    kinds = torch.tensor([int(ParticleType.Fluid), int(ParticleType.Boundary)],
                         dtype=torch.int32)
    assert lagrangeBenchTypes(kinds).tolist() == [0, 1]
    with pytest.raises(ValueError, match="accepted: Fluid"):
        lagrangeBenchTypes(torch.tensor([int(ParticleType.Ghost)]))


def test_statistics_weigh_trajectories_and_wrap():
    """Hand-made trajectories: a particle crossing the periodic face moves by +0.1 per frame,
    not by -0.9; every trajectory weighs the same whatever its length; walls do not count;
    a component that never moves gets std 1."""
    bounds, periodic = [[0.0, 1.0], [0.0, 1.0]], [True, True]
    t = np.arange(5.0)[:, None]  # [5, 1]: frames of one particle
    half = np.full_like(t, 0.5)
    a = np.stack([np.remainder(0.85 + 0.1 * t, 1.0), half], -1)  # [5, 1, 2], crosses x = 1
    a = np.concatenate([a, np.full((5, 1, 2), 0.25)], 1)  # [5, 2, 2]: a fluid row and a wall
    b = np.stack([0.2 + 0.03 * t ** 2, half], -1)[:3]  # [3, 1, 2]: v = 0.03, 0.09; a = 0.06
    stats = velocityStatistics([(a, np.array([0, 1])), (b, np.array([0]))], bounds, periodic)
    va, vb = np.full(4, 0.1), np.array([0.03, 0.09])
    mean = (va.mean() + vb.mean()) / 2
    var = (((va - mean) ** 2).mean() + ((vb - mean) ** 2).mean()) / 2
    np.testing.assert_allclose(stats["vel_mean"], [mean, 0.0], atol=1e-15)
    np.testing.assert_allclose(stats["vel_std"], [np.sqrt(var), 1.0], rtol=1e-12)
    accMean = (0.0 + 0.06) / 2
    accVar = ((0.0 - accMean) ** 2 + (0.06 - accMean) ** 2) / 2
    np.testing.assert_allclose(stats["acc_mean"], [accMean, 0.0], atol=1e-15)
    np.testing.assert_allclose(stats["acc_std"], [np.sqrt(accVar), 1.0], rtol=1e-9)
    with pytest.raises(ValueError, match="at least 3 frames"):
        velocityStatistics([(a[:2], np.array([0, 1]))], bounds, periodic)
