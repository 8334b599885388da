"""`warpsph dataset tgv2d --size tiny`: the files follow LagrangeBench's layout and read back
with plain h5py as the loader's windows; the statistics in metadata.json are those of the
positions (recomputed here with numpy, periodic displacements); an interrupted run resumes to
the files of an uninterrupted one; bad input says what is accepted."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from warpSPHCore.cli import main
from warpSPHCore.datasets import (
    DATASET_CASES,
    DatasetError,
    TrajectoryWindows,
    generateDataset,
    simulateSeeds,
)
from warpSPHCore.datasets import generate as generateModule

SPLITS = ("train", "valid", "test")
TINY = DATASET_CASES["tgv2d"].sizes["tiny"]
COUNTS = dict(zip(SPLITS, TINY.trajectories))
N = TINY.n * TINY.n
T = TINY.frames

# the keys of LagrangeBench's metadata.json (its generator and its readers), and ours
LAGRANGEBENCH_KEYS = {
    "case", "solver", "density_evolution", "dim", "dx", "dt", "t_end", "viscosity",
    "p_bg_factor", "g_ext_magnitude", "artificial_alpha", "free_slip", "write_every",
    "is_bc_trick", "sequence_length_train", "num_trajs_train", "sequence_length_test",
    "num_trajs_test", "num_particles_max", "periodic_boundary_conditions", "bounds",
    "default_connectivity_radius", "vel_mean", "vel_std", "acc_mean", "acc_std"}
OUR_KEYS = {"density", "is_bc_present", "num_trajs_valid", "warpSPHCore"}


class Interrupted(Exception):
    """The interruption the resume test injects."""


def _run(out, *extra):
    return main(["dataset", "tgv2d", "--size", "tiny", "--out", str(out), "--quiet", *extra])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("tgv2d") / "2D_TGV_100_tiny"
    assert _run(out) == 0
    return out


def _read(path):
    """Every trajectory of a split file with plain h5py: {group: (position, type, attrs)}."""
    with h5py.File(path, "r") as f:
        return {k: (f[k]["position"][()], f[k]["particle_type"][()], dict(f[k].attrs))
                for k in f}


def test_layout(dataset):
    names = sorted(p.name for p in dataset.iterdir())
    assert names == ["generation.json", "metadata.json", "test.h5", "train.h5", "valid.h5"]
    seeds = []
    for split in SPLITS:
        with h5py.File(dataset / f"{split}.h5", "r") as f:
            assert list(f.keys()) == [f"{k:05d}" for k in range(COUNTS[split])]
            for key in f:
                g = f[key]
                assert set(g.keys()) == {"position", "particle_type"}
                assert g["position"].shape == (T, N, 2)
                assert g["position"].dtype == np.float32
                assert g["particle_type"].shape == (N,)
                assert g["particle_type"].dtype == np.int64
                assert (g["particle_type"][()] == 0).all()  # all fluid
                x = g["position"][()]
                assert np.isfinite(x).all() and (x >= 0).all() and (x <= 1).all()
                assert g.attrs["complete"]
                seeds.append(int(g.attrs["seed"]))
    assert seeds == list(range(sum(COUNTS.values())))  # one seed per trajectory
    # different seeds, different starts
    train = _read(dataset / "train.h5")
    assert not np.array_equal(train["00000"][0][0], train["00001"][0][0])


def test_metadata(dataset):
    meta = json.loads((dataset / "metadata.json").read_text())
    assert LAGRANGEBENCH_KEYS | OUR_KEYS <= set(meta)
    dx = 1.0 / TINY.n
    assert meta["case"] == "TGV" and meta["dim"] == 2
    assert meta["dx"] == pytest.approx(dx)
    # dt is the solver step, write_every the steps between stored frames (LagrangeBench)
    assert meta["dt"] == pytest.approx(0.02 * dx) and meta["write_every"] == TINY.writeEvery
    assert meta["dt"] * meta["write_every"] == pytest.approx(0.04)
    assert meta["t_end"] == pytest.approx((T - 1) * meta["dt"] * meta["write_every"])
    assert meta["sequence_length_train"] == meta["sequence_length_test"] == T
    assert (meta["num_trajs_train"], meta["num_trajs_valid"], meta["num_trajs_test"]) \
        == TINY.trajectories
    assert meta["num_particles_max"] == N
    assert meta["periodic_boundary_conditions"] == [True, True]
    assert meta["bounds"] == [[0.0, 1.0], [0.0, 1.0]]
    assert meta["default_connectivity_radius"] == pytest.approx(0.14)  # 1.45 dx, 2 digits
    assert meta["viscosity"] == pytest.approx(0.01) and meta["density"] == 1.0
    assert meta["is_bc_present"] is False and meta["g_ext_magnitude"] == 0.0
    for key in ("vel_mean", "vel_std", "acc_mean", "acc_std"):
        assert len(meta[key]) == 2 and all(np.isfinite(meta[key]))
    assert meta["warpSPHCore"]["seeds"] == {"train": [0, 1], "valid": [2], "test": [3]}


def _statistics(dataset, bounds):
    """LagrangeBench's statistics, written out independently: fluid rows, per-frame
    displacements with the minimum image, every trajectory one weight, all three splits."""
    box = np.array(bounds)
    L = box[:, 1] - box[:, 0]
    vels, accs = [], []
    for split in SPLITS:
        for x, types, _ in _read(dataset / f"{split}.h5").values():
            x = x[:, types == 0].astype(np.float64)
            v = x[1:] - x[:-1]
            v = v - L * np.round(v / L)
            vels.append(v)
            accs.append(v[1:] - v[:-1])
    out = {}
    for name, series in (("vel", vels), ("acc", accs)):
        mean = np.mean([s.mean(axis=(0, 1)) for s in series], axis=0)
        std = np.sqrt(np.mean([((s - mean) ** 2).mean(axis=(0, 1)) for s in series], axis=0))
        out[f"{name}_mean"], out[f"{name}_std"] = mean, std
    return out


def test_statistics_match_the_positions(dataset):
    meta = json.loads((dataset / "metadata.json").read_text())
    expected = _statistics(dataset, meta["bounds"])
    for key, value in expected.items():
        np.testing.assert_allclose(meta[key], value, rtol=1e-9, atol=1e-15, err_msg=key)
    # the periodic correction matters: some particle crossed a face between two frames,
    # and without the correction the velocity spread would be of the box size
    crossed = False
    for split in SPLITS:
        for x, _, _ in _read(dataset / f"{split}.h5").values():
            crossed |= bool((np.abs(np.diff(x.astype(np.float64), axis=0)) > 0.5).any())
    assert crossed
    # per-frame displacements of a vortex with U = 1: |v| of order U dt write_every
    assert 0.005 < max(meta["vel_std"]) < 0.04


def test_windows_equal_the_files(dataset):
    train = _read(dataset / "train.h5")
    ds = TrajectoryWindows(dataset, "train", inputLength=6)
    assert ds.mode == "windows" and ds.length == 7
    assert len(ds) == COUNTS["train"] * (T - 7 + 1)
    for i in range(len(ds)):
        key, start = ds.locate(i)
        item = ds[i]
        x, types, _ = train[key]
        assert item.history.shape == (N, 6, 2) and item.target.shape == (N, 1, 2)
        np.testing.assert_array_equal(item.history.numpy(), x[start:start + 6].transpose(1, 0, 2))
        np.testing.assert_array_equal(item.target.numpy(), x[start + 6:start + 7].transpose(1, 0, 2))
        np.testing.assert_array_equal(item.particleType.numpy(), types)
    assert [ds.locate(i) for i in range(len(ds))] == [
        ("00000", 0), ("00000", 1), ("00001", 0), ("00001", 1)]
    # push-forward: extra frames after the target
    ds = TrajectoryWindows(dataset, "train", inputLength=3, extraLength=2)
    assert len(ds) == COUNTS["train"] * (T - 6 + 1) and ds[0].target.shape == (N, 3, 2)
    # valid / test: non-overlapping sub-trajectories of inputLength + extraLength frames
    with TrajectoryWindows(dataset, "valid", inputLength=2, extraLength=2) as ds:
        assert ds.mode == "rollout" and len(ds) == T // 4
        x = _read(dataset / "valid.h5")["00000"][0]
        item = ds[1]
        assert ds.locate(1) == ("00000", 4)
        np.testing.assert_array_equal(torch.cat([item.history, item.target], 1).numpy(),
                                      x[4:8].transpose(1, 0, 2))
    # a DataLoader batches them
    loader = torch.utils.data.DataLoader(TrajectoryWindows(dataset, "train"), batch_size=2)
    batch = next(iter(loader))
    assert batch.history.shape == (2, N, 6, 2) and batch.particleType.shape == (2, N)


def test_resume_after_an_interruption(dataset, tmp_path, monkeypatch):
    """Interrupted after the first trajectory is complete and while the second is written
    (datasets on disk, no completion mark): the rerun keeps the first, rewrites the second,
    simulates only the missing seeds, and the files equal the uninterrupted run's."""
    out = tmp_path / "resumed"
    real = generateModule._markComplete
    calls = []

    def interrupt(group):
        calls.append(group.name)
        if len(calls) == 2:
            raise Interrupted("interrupted while writing the second trajectory")
        real(group)

    monkeypatch.setattr(generateModule, "_markComplete", interrupt)
    with pytest.raises(Interrupted):
        _run(out)
    with h5py.File(out / "train.h5", "r") as f:
        assert list(f.keys()) == ["00000", "00001"]
        assert f["00000"].attrs["complete"] and "complete" not in f["00001"].attrs
    assert not (out / "metadata.json").exists()
    monkeypatch.setattr(generateModule, "_markComplete", real)

    simulated = []
    realSimulate = generateModule.simulateSeeds

    def record(case, seeds, *args, **kwargs):
        simulated.append(list(seeds))
        return realSimulate(case, seeds, *args, **kwargs)

    monkeypatch.setattr(generateModule, "simulateSeeds", record)
    assert _run(out) == 0
    assert simulated == [[1], [2], [3]]  # seed 0 was complete; one call per split
    for split in SPLITS:
        a, b = _read(dataset / f"{split}.h5"), _read(out / f"{split}.h5")
        assert a.keys() == b.keys()
        for key in a:
            # the resumed batch holds other scenes than the uninterrupted one: equal to the
            # rounding of the stored float32 positions (docs/datasets.md, "Resume")
            np.testing.assert_allclose(a[key][0], b[key][0], rtol=0, atol=1e-6)
            np.testing.assert_array_equal(a[key][1], b[key][1])
            assert a[key][2] == b[key][2]
    metaA = json.loads((dataset / "metadata.json").read_text())
    metaB = json.loads((out / "metadata.json").read_text())
    assert metaA == metaB
    # a complete dataset: nothing is simulated again
    simulated.clear()
    assert _run(out) == 0 and simulated == []


def test_resume_refuses_another_dataset(dataset, capsys):
    assert _run(dataset, "--seed", "7") == 2
    err = capsys.readouterr().err
    assert "holds another dataset" in err and "seeds" in err
    assert _run(dataset, "--dtype", "float64") == 2
    assert "dtype" in capsys.readouterr().err
    # a folder with LagrangeBench-like files that this command did not write
    (dataset.parent / "foreign").mkdir()
    (dataset.parent / "foreign" / "metadata.json").write_text("{}")
    assert _run(dataset.parent / "foreign") == 2
    assert "without generation.json" in capsys.readouterr().err


def test_bad_input_says_what_is_accepted(tmp_path, capsys):
    assert main(["dataset", "tgv3d", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown case 'tgv3d'" in err and "tgv2d, rpf2d, dam2d" in err
    assert not (tmp_path / "x").exists()
    assert main(["dataset", "tgv2d", "--size", "tiny", "--trajectories", "2", "0", "1",
                 "--out", str(tmp_path / "y"), "--quiet"]) == 2
    assert "three ints >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["dataset", "tgv2d", "--size", "huge"])
    assert "invalid choice: 'huge'" in capsys.readouterr().err
    with pytest.raises(DatasetError, match="accepted: tgv2d, rpf2d, dam2d"):
        simulateSeeds("poiseuille", [0])
    with pytest.raises(DatasetError, match="accepted: tiny, small, full"):
        generateDataset("rpf2d", tmp_path / "z", size="medium")
    with pytest.raises(DatasetError, match="accepted: float32, float64"):
        generateDataset("rpf2d", tmp_path / "z", dtype="float16")


def test_loader_bad_input(dataset):
    with pytest.raises(ValueError, match="accepted: train, valid, test"):
        TrajectoryWindows(dataset, "training")
    with pytest.raises(ValueError, match="fewer than the 9"):
        TrajectoryWindows(dataset, "train", inputLength=8)
    with pytest.raises(ValueError, match="extraLength"):
        TrajectoryWindows(dataset, "valid", extraLength=0)
    with pytest.raises(ValueError, match="inputLength"):
        TrajectoryWindows(dataset, "train", inputLength=1)
    with pytest.raises(FileNotFoundError, match="train.h5"):
        TrajectoryWindows(dataset / "missing", "train")
