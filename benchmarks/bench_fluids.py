"""WCSPH term costs (`make bench`, issue 16): the calls one rate evaluation of a weakly
compressible Taylor-Green step makes, timed alone, at the issue's size (2,500 particles,
2D, float64, periodic unit square, dx = 1/50, Wendland2 with a support of 3 dx).

Each call gets new input tensors every time (a simulation step: no call plan replays it).
Prints medians (ms) and their sum, and writes JSON (`--json`, default
`benchmarks/results/fluids.json`). The figure to beat for a whole step is JAX-SPH's 27-30 ms
on the issue's machine (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)
from warpSPHCore.fluids import (  # noqa: E402
    continuityDensityRate,
    laminarViscosity,
    pressureAcceleration,
    taitPressure,
)

KERNEL = KernelFunctions.Wendland2


def _median_ms(fn, repeats):
    fn()
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "fluids.json"))
    args = ap.parse_args(argv)
    dt = torch.float64
    side, d = args.side, 2
    dx = 1.0 / side
    g = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=dt)] * d, indexing="ij"),
                    -1).reshape(-1, d)
    pos = (g + 0.5) * dx
    n = pos.shape[0]
    h = torch.full((n,), 3 * dx, dtype=dt)
    m = torch.full((n,), dx * dx, dtype=dt)
    kinds = torch.zeros(n, dtype=torch.int32)
    dom = DomainDescription(torch.zeros(d, dtype=dt), torch.ones(d, dtype=dt), [True, True])
    v = torch.stack([-torch.cos(2 * math.pi * pos[:, 0]) * torch.sin(2 * math.pi * pos[:, 1]),
                     torch.sin(2 * math.pi * pos[:, 0]) * torch.cos(2 * math.pi * pos[:, 1])],
                    1)

    def state(rho=None):
        return ParticleState(pos.clone(), h, m, kinds, rho)

    with torch.no_grad():
        adj = radiusSearchCompactHashMap(state(), dom, mode=SupportScheme.Gather)
        density = OperationProperties(KERNEL, operation=WarpOperation.Density)
        rho = warpOperation(state(), density, dom, adjacency=adj)
        p = taitPressure(rho, 1.0, 10.0)
        calls = {
            "neighbour search": lambda: radiusSearchCompactHashMap(state(), dom,
                                                                   mode=SupportScheme.Gather),
            "summation density": lambda: warpOperation(state(), density, dom, adjacency=adj),
            "pressure acceleration (symmetric)": lambda: pressureAcceleration(
                state(rho), p.clone(), dom, adj, kernel=KERNEL),
            "laminar viscosity (Morris)": lambda: laminarViscosity(
                state(rho), v.clone(), dom, adj, 0.01, kernel=KERNEL),
            "continuity density rate": lambda: continuityDensityRate(
                state(rho), v.clone(), dom, adj, kernel=KERNEL),
        }
        rows = {name: _median_ms(fn, args.repeats) for name, fn in calls.items()}
    print(f"WCSPH terms, {n} particles, 2D float64, {int(adj.i.numel())} pairs, median of "
          f"{args.repeats} (ms)")
    for name, ms in rows.items():
        print(f"  {name:36s} {ms:7.2f}")
    print(f"  {'sum':36s} {sum(rows.values()):7.2f}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"particles": n, "pairs": int(adj.i.numel()), "ms": rows,
                               "sum_ms": sum(rows.values())}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
