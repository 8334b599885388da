"""Particle order (`make bench`): what a spatial sort buys, side by side in one run.

The pass of `bench_scale.py` (search + Density + Gradient forward + backward, 2D jittered
periodic lattice, float32, Wendland2 with H = 4 dx, CSR list, one thread, each case in a
fresh process) on the same particles stored in four orders (`bench_scale.ORDERS`): the
lattice's rows, `neighborhood.cellOrder`'s order, a random shuffle, and the shuffle sorted
again by `cellOrder` (what a user does with particles read in an arbitrary order). Prints ns
per edge and the ratio to the lattice order, and the cost of `cellOrder` itself plus the
gather of the positions; then a Taylor-Green simulation (``--tgv``, `warpsph run tgv`'s
scheme, float32) in the case's lattice order, shuffled, and shuffled with
``LoopOptions(sortEvery=50)``: ms per step. Writes ``benchmarks/results/order.json``.

Reproduce: ``.venv/bin/python benchmarks/bench_order.py`` (``--sides 128`` for a quick
look; the default sides 512 and 1024 take a few minutes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_scale import ORDERS  # noqa: E402


def sortCost(side: int, repeats: int) -> float:
    """Median seconds of `cellOrder` + gathering the positions of a shuffled lattice."""
    import torch

    from warpSPHCore.neighborhood.ordering import cellOrder

    torch.set_num_threads(1)
    dx = 2.0 / side
    g = torch.arange(side, dtype=torch.float32)
    x = (torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2) + 0.5) * dx - 1.0
    x = x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))]
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        x[cellOrder(x, 4 * dx)]
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def simulationSteps(n: int, steps: int, sortEvery: int) -> dict:
    """ms per step of `warpsph run tgv`'s scheme (float32, one thread) on an n x n Taylor-Green
    vortex stored in three orders: the case's lattice order, shuffled, and shuffled with
    ``LoopOptions(sortEvery)`` (the first sort at step 0, by `Simulation.sort`)."""
    import torch

    from warpSPHCore.fluids import FluidState, LoopOptions
    from warpSPHCore.fluids.cases.tgv import (
        TaylorGreenConfig,
        setup,
        taylorGreenParticles,
        taylorGreenScheme,
    )
    from warpSPHCore.neighborhood.ordering import reorder

    torch.set_num_threads(1)
    case = setup(TaylorGreenConfig(n=n, t=0.0, relax=0, dtype="float32"))
    scheme, particles = taylorGreenScheme(case), taylorGreenParticles(case)
    state = FluidState(case.positions, case.velocities)
    shuffle = torch.randperm(state.positions.shape[0], generator=torch.Generator().manual_seed(2))
    shuffled = (reorder(particles, shuffle), reorder(state, shuffle))
    out = {}
    for name, (p, s), every in (("lattice", (particles, state), 0), ("shuffled", shuffled, 0),
                                ("shuffled, sortEvery", shuffled, sortEvery)):
        sim = scheme.simulation(p, s, case.dt, maxSpeed=1.0,
                                options=LoopOptions(progress=False, sortEvery=every))
        if every:
            sim.sort()
        sim.run(2)  # warm-up: kernels, allocator
        t0 = time.perf_counter()
        sim.run(steps)
        out[name] = (time.perf_counter() - t0) / steps * 1e3
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sides", type=int, nargs="+", default=[512, 1024],
                    help="lattice sides (default: 262,144 and 1,048,576 particles)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tgv", type=int, default=320,
                    help="side of the Taylor-Green simulation timed (default 320: 102,400 "
                    "particles; 0: none)")
    ap.add_argument("--steps", type=int, default=20, help="steps of the simulation timed")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/order.json"))
    args = ap.parse_args(argv)
    results = {}
    for side in args.sides:
        rows = {}
        for order in ORDERS:
            cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--one",
                   str(side), "csr", "--repeats", str(args.repeats), "--order", order]
            run = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows[order] = json.loads(run.stdout.strip().splitlines()[-1])
        base = rows["lattice"]["nsPerEdge"]
        sort = sortCost(side, args.repeats)
        n = rows["lattice"]["particles"]
        print(f"{n:,d} particles, {rows['lattice']['edges']:,d} edges, CSR, float32, one thread")
        print("| order | ns per edge | / lattice |")
        print("|---|---|---|")
        for order, row in rows.items():
            row["ratioToLattice"] = row["nsPerEdge"] / base
            print(f"| {order}: {ORDERS[order]} | {row['nsPerEdge']:.1f} | "
                  f"{row['ratioToLattice']:.2f} |")
        print(f"cellOrder + gather of the positions: {sort * 1e3:.1f} ms "
              f"({sort / rows['lattice']['seconds']:.2f} of one lattice-order pass)")
        results[str(n)] = {"orders": rows, "sortSeconds": sort}
    steps = {}
    if args.tgv:
        steps = simulationSteps(args.tgv, args.steps, sortEvery=50)
        print(f"warpsph run tgv's scheme, {args.tgv ** 2:,d} particles, float32, one thread, "
              f"ms per step (mean of {args.steps}):")
        for name, ms in steps.items():
            print(f"| {name} | {ms:.1f} | {ms / steps['lattice']:.2f} |")
    from run import cpuInfo

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"machine": cpuInfo(), "results": results,
                                           "simulationMsPerStep": steps,
                                           "command": "python benchmarks/bench_order.py "
                                           + " ".join(argv or sys.argv[1:])}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
