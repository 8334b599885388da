"""Cost against size (`make bench`): search + Density + Gradient forward + backward per edge
and memory per particle, from 16k to 1M particles, CSR list and grid traversal.

2D jittered periodic lattices of side 128, 256, 512 and 1024 (16,384 to 1,048,576
particles), float32, Wendland2 with H = 4 dx (about 50 neighbours), one thread. Each size and
traversal runs in a fresh process (`--one`), so its peak resident memory is its own:

* ``csr``: `radiusSearchCompactHashMap` (the stored CSR list), then Density and the
  Gradient forward + backward (d/d values and positions) on the list;
* ``grid``: `buildCompactHashMap` (the grid alone, no stored list), then the same operators
  traversing the grid's 3^d cells.

``nsPerEdge`` is the median over repeats of one whole pass (search or grid build, Density,
Gradient forward + backward) divided by the list's edge count (the same pairs either way);
``bytesPerParticle`` is the peak resident memory of the passes minus the resident memory
before them (particles, fields and the imported libraries), per particle (Linux: the peak
mark is reset before the passes). Particles are
in the lattice's row-major order (``--order lattice``), or (`ORDERS`) in `cellOrder`'s
order, shuffled at random, or shuffled and then sorted by `cellOrder`: `bench_order.py`
compares them.

Writes `benchmarks/results/scale.json` (per size and traversal: ``nsPerEdge``,
``bytesPerParticle``, seconds, edges) and prints the growth from 16k to 1M (target: ns per
edge at 1M <= 1.2x that at 16k; the grid traversal's bytes per particle <= 500).
Reproduce: ``.venv/bin/python benchmarks/bench_scale.py`` (``--sizes 128 256`` for a quick
look).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: particle orders of the lattice (module docstring)
ORDERS = {"lattice": "the lattice's row-major order",
          "cell": "sorted by cellOrder (Morton order of cells of side H)",
          "random": "shuffled (a seeded random permutation)",
          "sorted": "shuffled, then sorted by cellOrder"}
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _rssBytes() -> int:
    """The current resident set size (bytes), from /proc/self/statm."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resetPeak() -> None:
    """Reset the kernel's peak-resident mark of this process (Linux ``clear_refs`` 5), so
    that `_peakBytes` sees only what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peakBytes() -> int:
    """The peak resident set size since `_resetPeak` (VmHWM), else since the start."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def one(side: int, traversal: str, repeats: int, order: str) -> dict:
    """One size and traversal in this process (module docstring): a pass on a small set
    first (it loads the kernels), then the particles of `side`, the resident memory, and the
    passes."""
    small = _case(32, traversal, order)
    small()
    import gc

    gc.collect()
    passOnce, n, edges = _case(side, traversal, order, count=True)
    gc.collect()
    before = _rssBytes()
    _resetPeak()
    times = []
    for _ in range(repeats + 1):  # the first pass is the warm-up of this size
        start = time.perf_counter()
        passOnce()
        times.append(time.perf_counter() - start)
    peak = _peakBytes()
    seconds = statistics.median(times[1:])
    return {"particles": n, "edges": edges, "seconds": seconds,
            "nsPerEdge": seconds / edges * 1e9,
            "bytesPerParticle": max(0, peak - before) / n, "order": order}


def _case(side: int, traversal: str, order: str, count: bool = False):
    """The pass of one lattice (module docstring); with `count`, (pass, particles, edges)."""
    import torch

    from warpSPHCore import (
        DomainDescription,
        GradientScheme,
        KernelFunctions,
        OperationProperties,
        ParticleState,
        WarpOperation,
        buildCompactHashMap,
        getNextPrime,
        radiusSearchCompactHashMap,
    )
    from warpSPHCore.neighborhood.ordering import cellOrder
    from warpSPHCore.operations import warpOperation

    torch.set_num_threads(1)
    d, dt = 2, torch.float32
    dx = 2.0 / side
    g = torch.arange(side, dtype=torch.float64)
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, d)
    gen = torch.Generator().manual_seed(0)
    x = -1.0 + (x + 0.5 + 0.02 * (torch.rand(x.shape, generator=gen, dtype=torch.float64)
                                   - 0.5)) * dx
    if order in ("random", "sorted"):  # an order unrelated to space (a seeded shuffle)
        x = x[torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))]
    if order in ("cell", "sorted"):  # the library's spatial sort, cells of side H
        x = x[cellOrder(x, 4 * dx)]
    x = x.to(dt)
    n = x.shape[0]
    h = torch.full((n,), 4 * dx, dtype=dt)
    m = torch.full((n,), dx * dx, dtype=dt)
    kinds = torch.zeros(n, dtype=torch.int32)
    dom = DomainDescription(torch.full((d,), -1.0, dtype=dt), torch.full((d,), 1.0, dtype=dt),
                            [True, True])
    f = torch.randn(n, generator=gen, dtype=torch.float64).to(dt)
    seed = torch.randn(n, d, generator=gen, dtype=torch.float64).to(dt)
    kernel = KernelFunctions.Wendland2
    dens = OperationProperties(kernel, operation=WarpOperation.Density)
    grad = OperationProperties(kernel, operation=WarpOperation.Gradient,
                               gradientMode=GradientScheme.Naive)
    p = ParticleState(x, h, m, kinds)
    edges = int(radiusSearchCompactHashMap(p, dom).i.numel()) if count else 0

    def neighbours():
        if traversal == "csr":
            return radiusSearchCompactHashMap(p, dom)
        return buildCompactHashMap(x, x, h, h, dom.periodic, dom, hashMapLength=getNextPrime(n))

    def passOnce():
        structure = neighbours()
        with torch.no_grad():
            rho = warpOperation(p, dens, dom, adjacency=structure)
        pos = x.detach().requires_grad_(True)
        vals = f.detach().requires_grad_(True)
        out = warpOperation(ParticleState(pos, h, m, kinds, rho), grad, dom, queryValues=vals,
                            adjacency=structure)
        out.backward(seed)

    return (passOnce, n, edges) if count else passOnce


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024],
                    help="lattice sides (default: 16k, 65k, 262k and 1M particles)")
    ap.add_argument("--traversals", nargs="+", default=["csr", "grid"], choices=["csr", "grid"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--order", choices=list(ORDERS), default="lattice")
    ap.add_argument("--one", nargs=2, metavar=("SIDE", "TRAVERSAL"), default=None,
                    help=argparse.SUPPRESS)
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/scale.json"))
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1], args.repeats, args.order)))
        return 0
    results = {}
    for traversal in args.traversals:
        for side in args.sizes:
            cmd = [sys.executable, __file__, "--one", str(side), traversal, "--repeats",
                   str(args.repeats), "--order", args.order]
            run = subprocess.run(cmd, capture_output=True, text=True, check=True)
            row = json.loads(run.stdout.strip().splitlines()[-1])
            results.setdefault(traversal, {})[str(row["particles"])] = row
            print(f"{traversal:4s} {row['particles']:>9,d} particles {row['edges']:>11,d} edges "
                  f"{row['seconds'] * 1e3:9.1f} ms {row['nsPerEdge']:7.1f} ns/edge "
                  f"{row['bytesPerParticle']:8.0f} B/particle", flush=True)
    summary = {}
    for traversal, rows in results.items():
        sizes = sorted(rows, key=int)
        first, last = rows[sizes[0]], rows[sizes[-1]]
        summary[traversal] = {"growth": last["nsPerEdge"] / first["nsPerEdge"],
                              "from": int(sizes[0]), "to": int(sizes[-1])}
        print(f"{traversal}: ns per edge {first['nsPerEdge']:.1f} -> {last['nsPerEdge']:.1f} "
              f"({summary[traversal]['growth']:.2f}x, target <= 1.2); bytes per particle at "
              f"{int(sizes[-1]):,d}: {last['bytesPerParticle']:.0f}"
              + (" (target <= 500)" if traversal == "grid" else ""))
    from run import cpuInfo

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"machine": cpuInfo(), "order": args.order,
                                           "results": results, "summary": summary},
                                          indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
