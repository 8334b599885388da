"""A simulation across ranks (`warpSPHCore.distributed.DistributedSimulation`) against the
plain one-process loop (`Scheme.simulation`), on 1, 2 and 4 gloo ranks of this machine.

Case: the Taylor-Green vortex of ``warpsph run tgv`` (summation density, transport velocity,
periodic unit square, support 4 dx, Verlet skin 0.1), n x n particles (default 50: 2,500),
float64, one torch thread per process. Each rank is a process started by
`warpSPHCore.distributed.spawn`.

* ``plainMsPerStep``: `Scheme.simulation(...).run(steps)` in a spawned process of its own
  group of one (the same process conditions as the ranks);
* ``msPerStep``: `DistributedSimulation.run(steps)`, the slowest rank;
* per step, the slowest rank's seconds in migration (and rebalancing), halo build (the halo,
  the extended set's constants and its list) and the exchange of the fields at each rate
  evaluation; the owned and halo sizes; the rebuilds.

With one rank the halo is empty; the difference to the plain loop is the distributed path's
own cost (the collectives of an empty exchange, the step's all-reduce). ``oneRankOverhead`` =
msPerStep(1 rank) / plainMsPerStep, both medians of ``--repeats`` alternating runs in one
process. More ranks than cores share the cores: on a 2-core machine 4 ranks cannot run faster
than 2.

Prints a table and writes JSON (`--json`, default
`benchmarks/results/distributed_simulation.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _case(n: int, relax: int):
    from warpSPHCore.fluids import FluidState
    from warpSPHCore.fluids.cases import tgv

    case = tgv.setup(tgv.TaylorGreenConfig(n=n, relax=relax, t=0.1))
    return (case, tgv.taylorGreenScheme(case), tgv.taylorGreenParticles(case),
            FluidState(case.positions, case.velocities))


def _worker(rank, size, n, relax, steps, repeats, plain):
    import torch

    from warpSPHCore.distributed import DistributedSimulation
    from warpSPHCore.fluids import LoopOptions

    torch.manual_seed(0)
    case, scheme, particles, state = _case(n, relax)
    options = LoopOptions(progress=False)
    rows = {"plain": [], "distributed": []}
    timings = None
    with torch.no_grad():
        for _ in range(repeats):
            if plain:
                sim = scheme.simulation(particles, state, case.dt, options=options)
                sim.run(2)  # compile and first list outside the timing
                start = time.perf_counter()
                sim.run(steps)
                rows["plain"].append((time.perf_counter() - start) / steps)
            sim = DistributedSimulation(scheme, particles, state, case.dt, options=options,
                                        rebalanceEvery=4)
            sim.run(2)
            torch.distributed.barrier()
            for key in sim.seconds:
                sim.seconds[key] = 0.0
            first = sim.step
            start = time.perf_counter()
            sim.run(steps)
            rows["distributed"].append((time.perf_counter() - start) / steps)
            t = sim.timings
            done = sim.step - first
            timings = {k: v * sim.step / done for k, v in t.items() if k.endswith("PerStep")}
            timings.update({k: t[k] for k in ("owned", "halo", "builds", "rebalances",
                                              "depth")})
    return rows, timings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50, help="particles per axis (default 50)")
    ap.add_argument("--relax", type=int, default=50, help="relaxation steps of the start")
    ap.add_argument("--steps", type=int, default=60, help="timed steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs (medians)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/"
                                          "distributed_simulation.json"))
    args = ap.parse_args(argv)

    from warpSPHCore.distributed import spawn

    report = {"case": f"tgv n={args.n} ({args.n ** 2} particles), float64, support 4 dx, "
                      "skin 0.1, one torch thread per process",
              "steps": args.steps, "repeats": args.repeats, "device": "cpu", "ranks": {}}
    for P in args.ranks:
        out = spawn(_worker, P, args.n, args.relax, args.steps, args.repeats, P == 1)
        per = [statistics.median(max(o[0]["distributed"][k] for o in out)
                                 for k in range(args.repeats))]
        entry = {"msPerStep": 1e3 * per[0]}
        slow = {k: max(o[1][k] for o in out) for k in out[0][1]}
        entry.update({k.replace("SecondsPerStep", "MsPerStep"): 1e3 * v
                      for k, v in slow.items() if k.endswith("SecondsPerStep")})
        entry.update(owned=[o[1]["owned"] for o in out], halo=[o[1]["halo"] for o in out],
                     builds=slow["builds"], rebalances=slow["rebalances"], depth=slow["depth"])
        if P == 1:
            plain = statistics.median(out[0][0]["plain"])
            dist1 = statistics.median(out[0][0]["distributed"])
            report["plainMsPerStep"] = 1e3 * plain
            report["oneRankOverhead"] = dist1 / plain
        report["ranks"][str(P)] = entry

    print(f"DistributedSimulation, {report['case']}; {args.steps} steps, median of "
          f"{args.repeats}, slowest rank")
    print("| ranks | ms/step | migration | halo build | exchange | owned | halo | builds |")
    print("|---|---|---|---|---|---|---|---|")
    for P, e in report["ranks"].items():
        print(f"| {P} | {e['msPerStep']:.2f} | {e['migrationMsPerStep']:.3f} | "
              f"{e['haloBuildMsPerStep']:.3f} | {e['exchangeMsPerStep']:.3f} | "
              f"{max(e['owned'])} | {max(e['halo'])} | {e['builds']} |")
    if "plainMsPerStep" in report:
        print(f"plain loop {report['plainMsPerStep']:.2f} ms/step; one-rank overhead "
              f"{report['oneRankOverhead']:.3f}x")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
