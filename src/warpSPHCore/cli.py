"""The `warpsph` command line (also `python -m warpSPHCore`).

    warpsph info                       versions, Warp devices, kernels
    warpsph precompile [options]       compile the Warp kernels ahead of time (parallel),
                                       for users, containers and CI
    warpsph demo [PART] [options]      the demo (`demo/runner.py`): PART is all (default),
                                       accuracy, inverse, jfnk, tgv, viscosity, learn or
                                       search
    warpsph run CASE [options]         a validation case of `fluids.cases` (CASES): tgv,
                                       poiseuille, cavity or dambreak;
                                       its options are the fields of the case's config
    warpsph distributed-check --nproc N
                                       every operator, gradient and JVP on N local gloo
                                       ranks against one process (`distributed.check`)
    warpsph dataset CASE --out DIR     SPH trajectories in LagrangeBench's layout
                                       (`datasets`): tgv2d, rpf2d or dam2d; resumable

`warpsph demo` writes figures, ``results.json`` and ``report.md`` to ./warpsph-out/ unless
--out says otherwise, and prints a summary table. `warpsph run CASE` writes the case's
``results.json`` and figures (and particle frames with --frames K) to ./warpsph-out/CASE/
unless --out says otherwise, and prints the scalar results.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _info(args) -> int:
    import numpy as np
    import torch
    import warp as wp

    from . import __version__
    from .enumTypes import KernelFunctions
    from .kernels.constants import C_D, SPH_KERNELS
    from .util.warpContext import ensureWarp

    ensureWarp()
    print(f"warpSPHCore {__version__}")
    print(f"python      {platform.python_version()} ({platform.machine()})")
    print(f"warp-lang   {wp.config.version}")
    print(f"torch       {torch.__version__} (CUDA available: {torch.cuda.is_available()})")
    print(f"numpy       {np.__version__}")
    print("Warp devices:")
    for dev in wp.get_devices():
        print(f"  {dev.alias:8s} {dev.name}")
    print("Kernels (C_d for 1D / 2D / 3D):")
    for k in KernelFunctions:
        tag = "SPH" if k in SPH_KERNELS else "   "
        c = C_D[k]
        print(f"  {k.value:3d} {k.name:16s} {tag}  {c[0]:.6g} / {c[1]:.6g} / {c[2]:.6g}")
    return 0


def _precompile(args) -> int:
    """Warm Warp's kernel cache for the chosen devices and operators (`util.compileNotice`)."""
    from .precompile import precompile
    from .util.compileNotice import OPERATOR_MODULES

    ops = None if args.operators in (None, ["all"]) else args.operators
    if ops is not None:
        unknown = [o for o in ops if o not in OPERATOR_MODULES]
        if unknown:
            print(f"warpsph precompile: unknown operators {unknown}; accepted: all, "
                  f"{', '.join(OPERATOR_MODULES)}", file=sys.stderr)
            return 2
    from .enumTypes import KernelFunctions

    unknownK = [k for k in args.kernels if k not in KernelFunctions.__members__]
    if unknownK:
        print(f"warpsph precompile: unknown kernels {unknownK}; accepted: "
              f"{', '.join(KernelFunctions.__members__)}", file=sys.stderr)
        return 2
    res = precompile(devices=args.device, operators=ops, workers=args.workers,
                     dims=tuple(args.dim), dtypes=tuple(args.dtype),
                     kernels=tuple(int(KernelFunctions[k]) for k in args.kernels))
    print(f"{len(res['modules'])} modules on {', '.join(res['devices'])}: "
          f"{res['seconds']:.1f} s")
    return 0


def _demo(args) -> int:
    """The demo parts (module docstring); ``search`` is the neighbour-search check."""
    from .demo.runner import PARTS, printSummary, runParts, writeReport

    if args.part == "search":
        return _search(args)
    names = list(PARTS) if args.part == "all" else [args.part]
    out = Path(args.out)
    results = runParts(names, out, size=args.size, device=args.device, quiet=args.quiet)
    rc = 0
    extra = None
    if args.part == "all":
        rc = _search(args)
        summary = json.loads((out / "demo.json").read_text())
        extra = "\n".join([
            "## 7. Neighbour search", "",
            f"{summary['particles']} particles, {summary['pairs']} pairs (mean "
            f"{summary['meanNeighbors']:.1f} neighbours), median search "
            f"{summary['medianSearchMs']:.2f} ms; brute force agrees on "
            f"{summary['bruteForceRowsChecked']} rows: {summary['bruteForceAgrees']}.", "",
            "![neighbour counts](neighbor_counts.png)", ""])
    report = writeReport(results, out, args.size, args.device, extra)
    printSummary(results)
    print(f"\nreport: {report}")
    return rc


def _search(args) -> int:
    """Neighbour search on a jittered periodic 2D lattice; writes a neighbour-count plot."""
    import numpy as np
    import torch
    from tqdm import tqdm

    from .dataTypes.domain import DomainDescription
    from .dataTypes.particleState import ParticleState
    from .kernels.metadata import volumeToSupport
    from .neighborhood import radiusNaive, radiusSearchCompactHashMap

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    dtype = torch.float64 if args.precision == "float64" else torch.float32
    n = args.nx
    dx = 2.0 / n
    rng = np.random.default_rng(args.seed)
    g = (np.arange(n) + 0.5) * dx - 1.0
    X, Y = np.meshgrid(g, g, indexing="xy")
    pos = np.stack([X.ravel(), Y.ravel()], axis=1)
    pos += rng.uniform(-0.5, 0.5, pos.shape) * args.jitter * dx
    N = pos.shape[0]
    h = volumeToSupport(dx * dx, args.neighbors, 2)
    positions = torch.tensor(pos, dtype=dtype, device=device)
    particles = ParticleState(
        positions,
        torch.full((N,), h, dtype=dtype, device=device),
        torch.full((N,), dx * dx, dtype=dtype, device=device),
        torch.zeros(N, dtype=torch.int32, device=device),
    )
    domain = DomainDescription(
        torch.full((2,), -1.0, dtype=dtype, device=device),
        torch.full((2,), 1.0, dtype=dtype, device=device),
        [True, True],
    )
    steps = ["compile + first search", "timed searches", "brute-force check", "plot"]
    checked = None
    times = []
    with tqdm(total=len(steps), desc="demo", disable=args.quiet) as bar:
        bar.set_postfix_str(steps[0])
        adjacency = radiusSearchCompactHashMap(particles, domain)
        bar.update()
        bar.set_postfix_str(steps[1])
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            adjacency = radiusSearchCompactHashMap(particles, domain)
            times.append(time.perf_counter() - t0)
        bar.update()
        bar.set_postfix_str(steps[2])
        counts = adjacency.numNeighbors.cpu().numpy()
        # brute force (dense, O(n N) memory) on a random sample of query rows
        sample = torch.from_numpy(
            np.sort(rng.choice(N, size=min(N, args.check), replace=False))
        ).to(device)
        ii, jj = radiusNaive(
            positions[sample], positions, particles.supports[sample], particles.supports,
            periodic=domain.periodic, minDomain=domain.min, maxDomain=domain.max,
        )
        bf = {(int(sample[a]), int(b)) for a, b in zip(ii.tolist(), jj.tolist())}
        rows = torch.zeros(N, dtype=torch.bool, device=device)
        rows[sample] = True
        keep = rows[adjacency.i]
        ours = set(zip(adjacency.i[keep].tolist(), adjacency.j[keep].tolist()))
        checked = ours == bf
        bar.update()
        bar.set_postfix_str(steps[3])
        png = out / "neighbor_counts.png"
        _plotCounts(pos, counts, h, png)
        bar.update()

    summary = {
        "particles": int(N),
        "dx": dx,
        "support": h,
        "pairs": int(adjacency.i.numel()),
        "meanNeighbors": float(counts.mean()),
        "minNeighbors": int(counts.min()),
        "maxNeighbors": int(counts.max()),
        "medianSearchMs": float(np.median(times) * 1e3) if times else None,
        "bruteForceRowsChecked": int(min(N, args.check)),
        "bruteForceAgrees": checked,
        "device": str(device),
        "dtype": str(dtype),
        "figure": str(png),
    }
    (out / "demo.json").write_text(json.dumps(summary, indent=2))
    print()
    print("warpSPHCore demo: neighbour search on a jittered periodic 2D lattice")
    width = max(len(k) for k in summary)
    for k, v in summary.items():
        print(f"  {k:{width}s}  {v}")
    return 0 if checked else 1


def _plotCounts(pos, counts, h, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4.4))
    sc = ax0.scatter(pos[:, 0], pos[:, 1], c=counts, s=4, cmap="viridis")
    ax0.set_aspect("equal")
    ax0.set_title(f"neighbours per particle (h = {h:.3g})")
    fig.colorbar(sc, ax=ax0, shrink=0.85)
    import numpy as np

    ax1.hist(counts, bins=np.arange(counts.min() - 0.5, counts.max() + 1.5), color="C0",
             edgecolor="white")
    ax1.set_xlabel("neighbour count (self included)")
    ax1.set_ylabel("particles")
    ax1.set_title("distribution")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _runParser(sub) -> None:
    """``warpsph run CASE``: one sub-command per registered case, its options generated from
    the fields of the case's config dataclass (name, type and default of each field)."""
    import dataclasses

    from .fluids.cases import CASES

    r = sub.add_parser("run", help="run a validation case (results.json and figures in --out)")
    cases = r.add_subparsers(dest="case", required=True, metavar="CASE")
    for name, case in CASES.items():
        c = cases.add_parser(name, help=case.summary, description=case.summary)
        for f in dataclasses.fields(case.config):
            kind = type(f.default)
            text = f"{f.metadata.get('help', '')} (default: {f.default})"
            if kind is bool:
                c.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction,
                               default=f.default, help=text)
            else:
                c.add_argument(f"--{f.name}", type=kind, default=f.default, help=text)
        c.add_argument("--out", default=None, help=f"output folder (default: warpsph-out/{name})")
        c.add_argument("--quiet", action="store_true", help="no progress bar")
        c.add_argument("--nproc", type=int, default=1,
                       help="run across N local gloo processes (default 1: this process); "
                       "under torchrun the launcher's processes are used instead")
        c.add_argument("--rebalance", type=int, default=0,
                       help="across processes: a new bisection at every k-th neighbour "
                       "rebuild (default 0: never)")
        c.add_argument("--verlet-check-every", type=int, default=1, metavar="K",
                       help="read the neighbour list's rebuild decision once every K steps "
                       "(default 1: at every rate evaluation; K > 1: no host sync between "
                       "decisions; one process only)")
        c.add_argument("--capture", action="store_true",
                       help="replay the K steps between decisions as one CUDA graph (CUDA "
                       "devices; needs --verlet-check-every K >= 2)")


def _run(args) -> int:
    """Run a registered case (`fluids.cases.CASES`) and print its scalar results."""
    import dataclasses

    from .fluids.cases import CASES
    from .io import writeParticles

    case = CASES[args.case]
    config = case.config(**{f.name: getattr(args, f.name)
                            for f in dataclasses.fields(case.config)})
    out = Path(args.out) if args.out else Path("warpsph-out") / args.case
    if args.nproc < 1:
        raise SystemExit(f"warpsph run: --nproc {args.nproc}; accepted: >= 1")
    import torch.distributed as dist

    from .fluids.cases._common import loopOptions

    loop = {}
    if args.verlet_check_every != 1 or args.capture:
        distributed = args.nproc > 1 or (dist.is_available() and dist.is_torchelastic_launched())
        if distributed:
            raise SystemExit("warpsph run: --verlet-check-every and --capture run in one "
                             "process; across processes the ranks decide once per step")
        loop = {"verletCheckEvery": args.verlet_check_every, "capture": args.capture}
        from .fluids.loop import LoopOptions

        try:
            LoopOptions(**loop)  # validated before the case is set up
        except ValueError as e:
            raise SystemExit(f"warpsph run: {e}") from None

    if dist.is_available() and dist.is_torchelastic_launched():
        from .distributed.cases import runCase

        dist.init_process_group("gloo")
        try:
            results = runCase(args.case, config, out, writer=writeParticles, quiet=args.quiet,
                              rebalanceEvery=args.rebalance)
            rank = dist.get_rank()
        finally:
            dist.destroy_process_group()  # before exit, or gloo aborts the process
        if rank != 0:
            return 0
    elif args.nproc > 1:
        from .distributed.cases import spawnCase

        results = spawnCase(args.case, config, out, args.nproc, writer=writeParticles,
                            quiet=args.quiet, rebalanceEvery=args.rebalance)
    else:
        with loopOptions(**loop):
            results = case.run(config, out, writer=writeParticles, quiet=args.quiet)
    rows = [(k, v) for k, v in results.items() if isinstance(v, (int, float, str))]
    width = max(len(k) for k, _ in rows)
    print(f"\nwarpsph run {args.case}: {case.summary}")
    for k, v in rows:
        print(f"  {k:{width}s}  {v:.6g}" if isinstance(v, float) else f"  {k:{width}s}  {v}")
    print(f"results: {out / 'results.json'}")
    return 0


def _distributedCheck(args) -> int:
    """Spawn N gloo processes, compare with one process, print the table (and JSON)."""
    from .distributed.check import (
        CheckConfig,
        RolloutConfig,
        formatTable,
        runCheck,
        toJSON,
        worst,
    )

    configs = [CheckConfig(dim, boundary == "periodic", args.n2 if dim == 2 else args.n3,
                           2.6 if dim == 2 else 2.0, device=args.device)
               for dim in args.dims for boundary in args.boundaries]
    rollout = None if args.steps == 0 else RolloutConfig(
        CheckConfig(2, True, args.n2, device=args.device), steps=args.steps,
        rebalanceAt=max(1, args.steps // 2))
    start = time.perf_counter()
    report = runCheck(args.nproc, configs, rollout)
    report["seconds"] = time.perf_counter() - start
    report["tolerance"] = args.tol
    report["worst"] = worst(report)
    conserved = "rollout" not in report or (report["rollout"]["countConserved"]
                                            and report["rollout"]["massConserved"])
    report["passed"] = report["worst"] <= args.tol and conserved
    print(f"warpsph distributed-check: {args.nproc} gloo ranks against one process, "
          "largest relative difference max|a - b| / max|b| per quantity")
    print(formatTable(report))
    print(f"\nworst {report['worst']:.2e} (tolerance {args.tol:g}); "
          f"{'PASSED' if report['passed'] else 'FAILED'} in {report['seconds']:.0f} s")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(toJSON(report))
        print(f"json: {args.json}")
    return 0 if report["passed"] else 1


def _datasetParser(sub) -> None:
    """``warpsph dataset CASE``: trajectories of a dataset case in LagrangeBench's layout
    (`datasets.generateDataset`, docs/datasets.md)."""
    t = sub.add_parser("dataset", help="SPH trajectories in LagrangeBench's layout (train/"
                       "valid/test.h5, metadata.json) for training graph networks; resumable",
                       description="SPH trajectories in LagrangeBench's on-disk layout "
                       "(docs/datasets.md). An interrupted run resumes: rerun the same "
                       "command.")
    # the case is checked by the handler, whose message names the accepted ones
    t.add_argument("case", metavar="CASE", help="tgv2d, rpf2d or dam2d")
    t.add_argument("--out", default=None,
                   help="output folder (default: warpsph-out/datasets/CASE-SIZE)")
    t.add_argument("--size", choices=["tiny", "small", "full"], default="small",
                   help="tiny: seconds on one CPU thread; full: LagrangeBench's resolution "
                        "and counts (default: small)")
    t.add_argument("--seed", type=int, default=0,
                   help="first seed: trajectory k (train, valid, then test) has seed + k")
    t.add_argument("--trajectories", type=int, nargs=3, default=None,
                   metavar=("TRAIN", "VALID", "TEST"),
                   help="trajectories per split instead of the size's")
    t.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="stored positions (default: float32, as LagrangeBench)")
    t.add_argument("--sim-dtype", choices=["float64", "float32"], default="float64",
                   help="simulation precision (default: float64)")
    t.add_argument("--device", default="cpu", help="torch device of the simulation")
    t.add_argument("--batch", type=int, default=0,
                   help="seeds simulated together (0: a whole split; smaller: finer resume)")
    t.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads during the run (0: leave torch's setting)")
    t.add_argument("--stats-from", choices=["all", "train"], default="all",
                   help="splits of the velocity/acceleration statistics (default: all, as "
                        "LagrangeBench's generator)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")


def _dataset(args) -> int:
    """Generate (or resume) a dataset and print what was written."""
    from .datasets import DATASET_CASES, DatasetError, generateDataset

    if args.case not in DATASET_CASES:
        print(f"warpsph dataset: unknown case {args.case!r}; accepted: "
              f"{', '.join(DATASET_CASES)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("warpsph-out") / "datasets" / \
        f"{args.case}-{args.size}"
    try:
        meta = generateDataset(args.case, out, size=args.size, seed=args.seed,
                               trajectories=args.trajectories, dtype=args.dtype,
                               simulationDtype=args.sim_dtype, device=args.device,
                               batch=args.batch, threads=args.threads,
                               statisticsFrom=args.stats_from, progress=not args.quiet)
    except DatasetError as err:
        print(f"warpsph dataset: {err}", file=sys.stderr)
        return 2
    run = meta["generation"]
    speed = run["particleStepsPerSecond"]
    print(f"\nwarpsph dataset {args.case} ({args.size}): {out}")
    print(f"  trajectories  {meta['num_trajs_train']} train, {meta['num_trajs_valid']} valid, "
          f"{meta['num_trajs_test']} test; {run['trajectories']} simulated now")
    print(f"  frames        {meta['sequence_length_train']} of {meta['num_particles_max']} "
          f"particles, every {meta['write_every']} steps of dt = {meta['dt']:.6g}")
    print(f"  speed         {speed:.4g} particle-steps/s" if speed else
          "  speed         (nothing simulated)")
    print(f"  seconds       {run['seconds']:.1f}")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warpsph", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, Warp devices and kernels")
    d = sub.add_parser("demo", help="accuracy study, inverse problem, JFNK, Taylor-Green "
                       "vortex, viscosity recovery through a rollout, a learned closure "
                       "trained through the solver and neighbour search; "
                       "figures and report.md in --out")
    d.add_argument("part", nargs="?", default="all",
                   choices=["all", "accuracy", "inverse", "jfnk", "tgv", "viscosity", "learn",
                            "search"],
                   help="which part to run (default: all)")
    d.add_argument("--size", choices=["tiny", "small", "default"], default="default",
                   help="problem sizes of the accuracy, inverse, jfnk, tgv, viscosity and learn "
                   "parts")
    d.add_argument("--nx", type=int, default=128,
                   help="search part: particles per axis (default 128)")
    d.add_argument("--neighbors", type=float, default=50.0, help="target neighbour count")
    d.add_argument("--jitter", type=float, default=0.1, help="jitter as a fraction of dx")
    d.add_argument("--device", default="cpu")
    d.add_argument("--precision", choices=["float32", "float64"], default="float32",
                   help="search part: precision")
    d.add_argument("--repeats", type=int, default=5)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--check", type=int, default=512,
                   help="query rows compared with the brute-force search (default 512)")
    d.add_argument("--out", default="warpsph-out")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    _runParser(sub)
    k = sub.add_parser("distributed-check", help="every operator (plain and corrected), its "
                       "gradients and JVPs on N local gloo ranks against one process")
    k.add_argument("--nproc", type=int, default=2, help="gloo processes (default 2)")
    k.add_argument("--dims", nargs="+", type=int, default=[2, 3], choices=[2, 3])
    k.add_argument("--boundaries", nargs="+", default=["periodic", "walled"],
                   choices=["periodic", "walled"])
    k.add_argument("--n2", type=int, default=16, help="2D particles per axis (default 16)")
    k.add_argument("--n3", type=int, default=10, help="3D particles per axis (default 10)")
    k.add_argument("--steps", type=int, default=20,
                   help="rollout steps with migration and one rebalance (0: no rollout)")
    k.add_argument("--tol", type=float, default=1e-12, help="pass threshold (default 1e-12)")
    k.add_argument("--device", default="cpu",
                   help="tensor device of every rank (cuda:0: gloo with CUDA tensors)")
    k.add_argument("--json", default=None, help="write the report as JSON to this path")
    _datasetParser(sub)
    c = sub.add_parser("precompile", help="compile the Warp kernels ahead of time (Warp's "
                       "parallel module loading) into Warp's kernel cache")
    c.add_argument("--device", nargs="+", default=["cpu"],
                   help="Warp devices, e.g. cpu cuda:0 (default: cpu)")
    c.add_argument("--operators", nargs="+", default=None,
                   help="all (default) or names: Density Interpolate Gradient Divergence "
                        "Curl Laplacian Covariance CRK Renormalization GradH ConsistentLaplacian "
                        "Search")
    c.add_argument("--workers", type=int, default=None,
                   help="parallel compile threads (default: Warp's, at most 4)")
    c.add_argument("--dim", nargs="+", type=int, default=[1, 2, 3], choices=[1, 2, 3],
                   help="dimensions of the per-configuration kernels (default: 1 2 3)")
    c.add_argument("--dtype", nargs="+", default=["float32", "float64"],
                   choices=["float32", "float64"],
                   help="scalar types of the per-configuration kernels (default: both)")
    c.add_argument("--kernels", nargs="+", default=["Wendland2"],
                   help="smoothing kernels (KernelFunctions names) whose specialised "
                        "Density/Gradient kernels to build for the default call "
                        "configuration (default: Wendland2)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "info":
        return _info(args)
    if args.command == "precompile":
        return _precompile(args)
    if args.command == "run":
        return _run(args)
    if args.command == "distributed-check":
        return _distributedCheck(args)
    if args.command == "dataset":
        return _dataset(args)
    return _demo(args)


if __name__ == "__main__":
    sys.exit(main())
