"""Dataset generation: trajectories of a dataset case written in LagrangeBench's layout
(docs/datasets.md), resumable.

`generateDataset` draws one seed per trajectory (train first, then valid, then test:
``seed, seed + 1, ...``), simulates the seeds of each split that are not yet on disk with
`simulateSeeds` and writes them, one HDF5 group per trajectory, then computes the
normalisation statistics from the files (`statistics.velocityStatistics`) and writes
``metadata.json`` (and ``force.py`` for a case with a body force).

Layout of DIR::

    train.h5, valid.h5, test.h5   group "00000", "00001", ... per trajectory:
                                    position       float [T, N, d]  (gzip)
                                    particle_type  int64 [N]
                                    attributes: seed, complete (written last)
    metadata.json                 LagrangeBench's keys (docs/datasets.md), written at the end
    force.py                      force_fn(r) of rpf2d and dam2d (LagrangeBench convention)
    generation.json               what was asked (case, size, seeds, dtypes) and the runs

**Resume.** A trajectory is complete when its group carries ``complete = True``, the
attribute written after its datasets and flushed with them; a run into a folder that holds
``generation.json`` checks that it asks for the same dataset (else `DatasetError` names the
differences), keeps the complete trajectories, deletes incomplete groups and simulates only
the missing seeds. A run that finds everything complete only rewrites ``metadata.json``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ..fluids.cases._common import torchThreads
from .cases import DATASET_CASES, SPLITS, CaseSize, DatasetCase, lagrangeBenchTypes
from .statistics import velocityStatistics

__all__ = ["DatasetError", "simulateSeeds", "generateDataset", "resolveCase", "resolveSize",
           "FORMAT"]

#: the ``format`` of generation.json
FORMAT = "warpSPHCore.datasets/1"
_DTYPES = ("float32", "float64")
_STATS_FROM = ("all", "train")


class DatasetError(ValueError):
    """A dataset request that cannot be served: an unknown case, size or option, or an
    output folder that holds a different dataset. The message says what was wrong and what
    is accepted."""


def resolveCase(case) -> DatasetCase:
    """The `DatasetCase` of a name (or the case itself).

    Args:
        case: a name of `DATASET_CASES` or a `DatasetCase`.

    Returns:
        The `DatasetCase`.

    Raises:
        DatasetError: an unknown name (the message lists the accepted ones).
    """
    if isinstance(case, DatasetCase):
        return case
    if case not in DATASET_CASES:
        raise DatasetError(f"unknown case {case!r}; accepted: {', '.join(DATASET_CASES)}")
    return DATASET_CASES[case]


def resolveSize(case: DatasetCase, size) -> CaseSize:
    """The `CaseSize` of a size name of `case` (or the size itself).

    Args:
        case: the `DatasetCase`.
        size: ``"tiny"``, ``"small"``, ``"full"`` or a `CaseSize`.

    Returns:
        The `CaseSize`.

    Raises:
        DatasetError: an unknown size name or an invalid `CaseSize`.
    """
    if not isinstance(size, CaseSize):
        if size not in case.sizes:
            raise DatasetError(f"unknown size {size!r} for {case.name}; accepted: "
                               f"{', '.join(case.sizes)}")
        size = case.sizes[size]
    if (size.n < 1 or size.frames < 3 or size.writeEvery < 1 or size.relax < 0
            or size.warmup < 0 or len(size.trajectories) != 3
            or any(int(k) < 1 for k in size.trajectories)):
        raise DatasetError(f"{case.name}: size {size}; accepted: n >= 1, frames >= 3 (a "
                           "velocity and an acceleration), writeEvery >= 1, relax >= 0, "
                           "warmup >= 0, three trajectory counts >= 1 (train, valid, test)")
    return size




def simulateSeeds(case, seeds, size="small", *, dtype=torch.float64, device="cpu",
                  progress=None):
    """Simulate one trajectory per seed of a dataset case, the seeds as the scenes of one
    batch (`fluids.batchScenes`): the frames the files store.

    Args:
        case: a case name (``tgv2d``, ``rpf2d``, ``dam2d``) or a `DatasetCase`.
        seeds: the seeds (ints), one trajectory each.
        size: a size name of the case or a `CaseSize`.
        dtype: torch dtype of the simulation.
        device: torch device of the simulation.
        progress: ``progress(steps)`` called with the solver steps just taken, summed over
            the seeds (a progress bar's update), or None.

    Returns:
        ``(positions, particleType, meta)``: ``[S, T, N, d]`` positions of the stored rows
        (CPU, `dtype`; T = ``size.frames``, the first frame the start after the warm-up),
        ``[N]`` int64 LagrangeBench particle types, and a dict: the case's metadata keys
        (`DatasetCase.metadata`) plus ``simulatedParticles`` (rows simulated per seed, walls
        included), ``particleSteps`` (their sum over the steps of every seed) and
        ``seconds`` (set-up, relaxation and simulation).
    """
    case = resolveCase(case)
    size = resolveSize(case, size)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise DatasetError(f"simulateSeeds: no seeds for {case.name}; accepted: one or more "
                           "ints")
    steps = (size.warmup + size.frames - 1) * size.writeEvery
    start = time.perf_counter()
    scenes = [case.scene(size, seed, dtype, torch.device(device)) for seed in seeds]
    trajectories, types = _simulateScenes(case, size, seeds, scenes, progress)
    simulated = int(scenes[0].particles.supports.shape[0])
    meta = case.metadata(size)
    meta.update(simulatedParticles=simulated, particleSteps=simulated * steps * len(seeds),
                seconds=time.perf_counter() - start)
    return torch.stack(trajectories), lagrangeBenchTypes(types), meta


def _simulateScenes(case: DatasetCase, size: CaseSize, seeds, scenes, progress):
    """The seeds as the scenes of one batch (`fluids.batchScenes`): one simulation, one launch
    per operator for all of them. Returns the stored frames ``[T, K, d]`` per seed and the
    ``[K]`` kinds of the stored rows.

    The seeds of a case differ in their start only: one scheme, time step and skin (the first
    seed's; the others are checked). A batch rebuilds its neighbour list when any of its
    scenes needs it, so a seed's trajectory equals its run alone to rounding, not bitwise."""
    from ..fluids.loop import LoopOptions
    from ..fluids.scenes import batchScenes, splitScenes

    first = scenes[0]
    for seed, scene in zip(seeds, scenes):
        if (scene.dt, scene.skin, scene.wrap) != (first.dt, first.skin, first.wrap) or \
                scene.particles.supports.shape != first.particles.supports.shape:
            raise RuntimeError(f"simulateSeeds: {case.name} seed {seed} differs from seed "
                               f"{seeds[0]} in its time step, skin or particle count; the seeds "
                               "of one batch share them")
        if not torch.equal(scene.particles.kinds, first.particles.kinds):
            raise RuntimeError(f"simulateSeeds: {case.name} seed {seed} has other particle "
                               "types than the first seed; the files need one [N] per case")
    particles, state = batchScenes([(sc.particles, sc.state) for sc in scenes])
    options = LoopOptions(skin=first.skin, progress=False, wrap=first.wrap)
    with torch.no_grad():
        sim = first.scheme.simulation(particles, state, first.dt, maxSpeed=first.maxSpeed,
                                      options=options)
        for _ in range(size.warmup):
            sim.run(size.writeEvery)
            if progress is not None:
                progress(size.writeEvery * len(scenes))
        frames = [sim.state.positions.detach().clone()]
        for _ in range(size.frames - 1):
            sim.run(size.writeEvery)
            frames.append(sim.state.positions.detach().clone())
            if progress is not None:
                progress(size.writeEvery * len(scenes))
    x = torch.stack(frames, dim=1)  # [N_batch, T, d]
    out = []
    for seed, scene, rows in zip(seeds, scenes, splitScenes(x, particles)):
        xs = rows.transpose(0, 1)  # [T, N, d]
        if scene.keep is not None:
            xs = xs[:, scene.keep]
        if scene.offset is not None:
            xs = xs + scene.offset
        if not bool(torch.isfinite(xs).all()):
            raise RuntimeError(f"simulateSeeds: {case.name} seed {seed} produced non-finite "
                               "positions")
        out.append(xs.cpu())
    kinds = first.particles.kinds
    if first.keep is not None:
        kinds = kinds[first.keep]
    return out, kinds.cpu()


# ------------------------------------------------------------------------------- files
def _requireH5py():
    try:
        import h5py
    except ImportError as err:
        raise ImportError("warpSPHCore.datasets: writing and reading the dataset files needs "
                          "the 'h5py' package (the io extra), which is not installed; install "
                          "it with `pip install h5py`") from err
    return h5py


def _groupName(index: int) -> str:
    return f"{index:05d}"


def _writeTrajectory(f, index: int, positions, particleType, seed: int, dtype: str) -> None:
    """Write trajectory `index` of an open split file: its datasets, then the completion
    mark (`_markComplete`), then flush."""
    name = _groupName(index)
    if name in f:
        del f[name]
    g = f.create_group(name)
    g.create_dataset("position", data=positions.numpy().astype(dtype), compression="gzip")
    g.create_dataset("particle_type", data=particleType.numpy().astype("int64"))
    g.attrs["seed"] = int(seed)
    _markComplete(g)
    f.flush()


def _markComplete(group) -> None:
    group.attrs["complete"] = True


def _complete(f, index: int, seed: int, frames: int) -> bool:
    """Whether trajectory `index` is on disk, complete, of `seed` and with `frames` frames;
    an incomplete group is deleted."""
    name = _groupName(index)
    if name not in f:
        return False
    g = f[name]
    ok = (bool(g.attrs.get("complete", False)) and int(g.attrs.get("seed", -1)) == seed
          and "position" in g and "particle_type" in g
          and g["position"].ndim == 3 and g["position"].shape[0] == frames)
    if not ok:
        del f[name]
    return ok


def _writeJSON(path: Path, doc: dict) -> None:
    """Write `doc` to `path` atomically (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def _seeds(seed: int, counts) -> dict:
    out, k = {}, int(seed)
    for split, count in zip(SPLITS, counts):
        out[split] = list(range(k, k + int(count)))
        k += int(count)
    return out


def _checkPlan(out: Path, plan: dict) -> dict:
    """The generation record of `out`: a new one for `plan`, or the existing one when it asks
    for the same dataset; `DatasetError` names the differences otherwise."""
    path = out / "generation.json"
    if not path.exists():
        if (out / "metadata.json").exists() or any((out / f"{s}.h5").exists() for s in SPLITS):
            raise DatasetError(f"{out} holds dataset files without generation.json (not "
                               "written by warpsph dataset, or from an older format); use an "
                               "empty or new --out folder")
        return {"format": FORMAT, "plan": plan, "runs": []}
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise DatasetError(f"{path} has format {record.get('format')!r}; accepted: {FORMAT}")
    old = record.get("plan", {})
    diff = [f"{k}: {old.get(k)!r} on disk, {plan.get(k)!r} asked" for k in plan
            if old.get(k) != plan.get(k)]
    if diff:
        raise DatasetError(f"{out} holds another dataset ({'; '.join(diff)}); resume with the "
                           "same options or use another --out folder")
    return record


def _plan(case: DatasetCase, sizeName: str, size: CaseSize, seeds: dict, dtype: str,
          simDtype: str, statsFrom: str) -> dict:
    # round trip through JSON so that the comparison with the file sees lists, not tuples
    return json.loads(json.dumps({
        "case": case.name, "size": sizeName, "sizeParameters": asdict(size), "seeds": seeds,
        "dtype": dtype, "simulationDtype": simDtype, "statisticsFrom": statsFrom}))


def generateDataset(case, out, *, size="small", seed: int = 0, trajectories=None,
                    dtype: str = "float32", simulationDtype: str = "float64",
                    device="cpu", batch: int = 0, threads: int = 1,
                    statisticsFrom: str = "all", progress: bool = True) -> dict:
    """Generate (or resume) a dataset in LagrangeBench's layout (module docstring).

    Args:
        case: ``"tgv2d"``, ``"rpf2d"``, ``"dam2d"`` or a `DatasetCase`.
        out: the output folder (created).
        size: ``"tiny"``, ``"small"`` or ``"full"`` (`DatasetCase.sizes`), or a `CaseSize`.
        seed: the first seed; trajectory k of the dataset (train, then valid, then test)
            has seed ``seed + k``.
        trajectories: ``(train, valid, test)`` counts instead of the size's.
        dtype: ``"float32"`` (LagrangeBench's) or ``"float64"``: the stored positions.
        simulationDtype: ``"float64"`` or ``"float32"``: the simulation.
        device: torch device of the simulation.
        batch: seeds per `simulateSeeds` call (0: every missing seed of a split in one).
        threads: torch CPU threads during the run, restored after it (0: unchanged).
        statisticsFrom: ``"all"`` (LagrangeBench's generator: the three splits) or
            ``"train"``: the trajectories the statistics are computed from.
        progress: show a tqdm progress bar.

    Returns:
        The metadata written to ``metadata.json``, plus ``"generation"``: this run's
        trajectories simulated, particle steps, seconds and particle steps per second (not
        written to metadata.json; generation.json keeps them).

    Raises:
        DatasetError: an unknown case, size or option, or `out` holding another dataset.
    """
    case = resolveCase(case)
    sizeName = size if isinstance(size, str) else "custom"
    size = resolveSize(case, size)
    if trajectories is not None:
        counts = tuple(trajectories)
        if len(counts) != 3 or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                                   for k in counts):
            raise DatasetError(f"trajectories={trajectories!r}; accepted: three ints >= 1 "
                               "(train, valid, test)")
        size = replace(size, trajectories=counts)
    if dtype not in _DTYPES:
        raise DatasetError(f"dtype={dtype!r}; accepted: {', '.join(_DTYPES)}")
    if simulationDtype not in _DTYPES:
        raise DatasetError(f"simulationDtype={simulationDtype!r}; accepted: "
                           f"{', '.join(_DTYPES)}")
    if statisticsFrom not in _STATS_FROM:
        raise DatasetError(f"statisticsFrom={statisticsFrom!r}; accepted: "
                           f"{', '.join(_STATS_FROM)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise DatasetError(f"batch={batch!r}; accepted: an int >= 0 (0: a whole split)")
    h5py = _requireH5py()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = _seeds(seed, size.trajectories)
    plan = _plan(case, sizeName, size, seeds, dtype, simulationDtype, statisticsFrom)
    record = _checkPlan(out, plan)
    _writeJSON(out / "generation.json", record)

    start = time.perf_counter()
    simDtype = getattr(torch, simulationDtype)
    steps = (size.warmup + size.frames - 1) * size.writeEvery
    todo = {}
    for split in SPLITS:
        with h5py.File(out / f"{split}.h5", "a") as f:
            todo[split] = [(k, s) for k, s in enumerate(seeds[split])
                           if not _complete(f, k, s, size.frames)]
    total = sum(len(v) for v in todo.values())
    run = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "trajectories": total,
           "particleSteps": 0, "simulationSeconds": 0.0, "device": str(device),
           "threads": threads, "batch": batch}
    from tqdm import tqdm

    with torchThreads(threads), tqdm(total=total * steps, desc=f"dataset {case.name}",
                                 unit="step", disable=not progress) as bar:
        for split in SPLITS:
            pending = todo[split]
            chunk = len(pending) if batch == 0 else batch
            for i in range(0, len(pending), max(1, chunk)):
                part = pending[i:i + chunk]
                bar.set_postfix_str(f"{split} {len(part)} seed(s)")
                positions, types, meta = simulateSeeds(
                    case, [s for _, s in part], size, dtype=simDtype, device=device,
                    progress=bar.update)
                run["particleSteps"] += meta["particleSteps"]
                run["simulationSeconds"] += meta["seconds"]
                with h5py.File(out / f"{split}.h5", "a") as f:
                    for (k, s), x in zip(part, positions):
                        _writeTrajectory(f, k, x, types, s, dtype)

    metadata = _finish(case, size, out, seeds, statisticsFrom)
    run["seconds"] = time.perf_counter() - start
    run["particleStepsPerSecond"] = (run["particleSteps"] / run["simulationSeconds"]
                                     if run["simulationSeconds"] > 0 else None)
    record["runs"].append(run)
    _writeJSON(out / "generation.json", record)
    return dict(metadata, generation=run)


def _finish(case: DatasetCase, size: CaseSize, out: Path, seeds: dict, statsFrom: str):
    """Check every trajectory, compute the statistics from the files and write
    metadata.json (and force.py)."""
    h5py = _requireH5py()
    meta = case.metadata(size)
    lengths, counts, particles = {}, {}, set()
    for split in SPLITS:
        with h5py.File(out / f"{split}.h5", "r") as f:
            missing = [k for k, s in enumerate(seeds[split])
                       if _groupName(k) not in f
                       or not bool(f[_groupName(k)].attrs.get("complete", False))]
            if missing:
                raise RuntimeError(f"{out / (split + '.h5')}: trajectories {missing} are "
                                   "missing after the run")
            shapes = {f[_groupName(k)]["position"].shape for k in range(len(seeds[split]))}
            lengths[split] = {s[0] for s in shapes}
            counts[split] = len(seeds[split])
            particles |= {s[1] for s in shapes}
    if len(particles) != 1:
        raise RuntimeError(f"{out}: trajectories with different particle counts {particles}")

    def trajectories():
        for split in (SPLITS if statsFrom == "all" else ("train",)):
            with h5py.File(out / f"{split}.h5", "r") as f:
                for k in range(len(seeds[split])):
                    g = f[_groupName(k)]
                    yield g["position"][()], g["particle_type"][()]

    stats = velocityStatistics(trajectories(), meta["bounds"],
                               meta["periodic_boundary_conditions"])
    from .. import __version__

    scheme = meta.pop("scheme")
    metadata = dict(meta)
    metadata.update(
        sequence_length_train=max(lengths["train"]),
        num_trajs_train=counts["train"],
        sequence_length_test=max(lengths["test"]),
        num_trajs_test=counts["test"],
        num_trajs_valid=counts["valid"],
        num_particles_max=max(particles),
        **stats)
    metadata["warpSPHCore"] = {
        "version": __version__, "datasetCase": case.name, "size": asdict(size),
        "seeds": seeds, "statisticsFrom": list(SPLITS) if statsFrom == "all" else ["train"],
        "frameInterval": metadata["dt"] * metadata["write_every"],
        "particleTypes": {"0": "fluid (ParticleType.Fluid)",
                          "1": "solid wall (ParticleType.Boundary)"},
        "scheme": scheme}
    if not all(math.isfinite(v) for k in stats for v in stats[k]):
        raise RuntimeError(f"{out}: non-finite statistics {stats}")
    if case.force is not None:
        (out / "force.py").write_text(case.force(size))
    _writeJSON(out / "metadata.json", metadata)
    return metadata
