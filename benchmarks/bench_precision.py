"""float32 against float64 (`make bench`): every operator and a whole simulation step, the
same particles in both precisions, same run, one thread.

1. Operators, 2D 16384 and 3D 32768 (jittered periodic lattices, Wendland2, ~50 neighbours,
   CSR list): Density, Interpolate (scalar), Gradient (scalar), Divergence (vector), Curl
   (vector; in 2D the scalar curl), Laplacian (scalar), Covariance; the forward without grad
   (median of repeated calls on new value tensors), and the forward + backward w.r.t. the
   values and the positions.
2. A Taylor-Green step, 2,500 particles (the `warpsph run tgv` case: transport velocity,
   Verlet list), median milliseconds per step over blocks of steps.

The ratio float32 / float64 should be <= 1 everywhere (float32 moves half the bytes; the
arithmetic costs the same on one CPU thread). Prints a table and writes JSON (`--json`,
default `benchmarks/results/precision.json`). Reproduce: ``.venv/bin/python
benchmarks/bench_precision.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from run import cpuInfo, lattice, supportFor  # noqa: E402

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
)
from warpSPHCore.operations import warpOperation  # noqa: E402

KERNEL = KernelFunctions.Wendland2
OPERATORS = ("Density", "Interpolate", "Gradient", "Divergence", "Curl", "Laplacian",
             "Covariance")


def _setup(side, d, dtype):
    pos, dx = lattice(side, d)
    pos = pos.to(dtype)
    n = pos.shape[0]
    h = supportFor(dx, d)
    kinds = torch.zeros(n, dtype=torch.int32)
    p = ParticleState(pos, torch.full((n,), h, dtype=dtype), torch.full((n,), dx**d,
                                                                        dtype=dtype), kinds)
    dom = DomainDescription(torch.full((d,), -1.0, dtype=dtype),
                            torch.full((d,), 1.0, dtype=dtype), [True] * d)
    adj = radiusSearchCompactHashMap(p, dom)
    with torch.no_grad():
        rho = warpOperation(p, OperationProperties(KERNEL, operation=WarpOperation.Density),
                            dom, adjacency=adj)
    return ParticleState(pos, p.supports, p.masses, kinds, rho), dom, adj


def _values(name, n, d, dtype):
    gen = torch.Generator().manual_seed(1)
    if name == "Density" or name == "Covariance":
        return None
    vector = name in ("Divergence", "Curl")
    shape = (n, d) if vector else (n,)
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def _props(name):
    extra = {"gradientMode": GradientScheme.Naive} if name == "Gradient" else {}
    return OperationProperties(KERNEL, operation=WarpOperation[name], **extra)


def _median(fn, repeats):
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def operatorRows(side, d, repeats):
    rows = []
    sets = {dt: _setup(side, d, dt) for dt in (torch.float64, torch.float32)}
    for name in OPERATORS:
        row = {"operator": name, "d": d, "n": side**d}
        for dtype, (p, dom, adj) in sets.items():
            props = _props(name)
            f = _values(name, p.positions.shape[0], d, dtype)

            def forward(p=p, dom=dom, adj=adj, props=props, f=f):
                with torch.no_grad():
                    warpOperation(p, props, dom, None if f is None else f.clone(),
                                  adjacency=adj)

            def backward(p=p, dom=dom, adj=adj, props=props, f=f):
                x = p.positions.detach().requires_grad_(True)
                q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
                v = None if f is None else f.detach().requires_grad_(True)
                out = warpOperation(q, props, dom, v, adjacency=adj)
                out.backward(torch.ones_like(out))

            tag = "float32" if dtype == torch.float32 else "float64"
            row[f"forward_{tag}"] = _median(forward, repeats)
            row[f"forwardBackward_{tag}"] = _median(backward, max(3, repeats // 2))
        for what in ("forward", "forwardBackward"):
            row[f"{what}Ratio"] = row[f"{what}_float32"] / row[f"{what}_float64"]
        rows.append(row)
    return rows


def tgvRow(steps, blocks):
    from warpSPHCore.fluids import FluidState
    from warpSPHCore.fluids.cases import tgv
    from warpSPHCore.fluids.loop import LoopOptions, Simulation
    from warpSPHCore.fluids.transport import transportKickDriftKick

    sims = {}
    for tag in ("float64", "float32"):
        case = tgv.setup(tgv.TaylorGreenConfig(n=50, t=1.0, relax=0, dtype=tag))
        sims[tag] = Simulation(FluidState(case.positions, case.velocities),
                               tgv.taylorGreenRates(case), case.domain, case.supports, case.dt,
                               stepper=transportKickDriftKick,
                               options=LoopOptions(progress=False))
        sims[tag].run(10)
    times = {tag: [] for tag in sims}
    for _ in range(blocks):  # interleaved: the machine's drift hits both alike
        for tag, sim in sims.items():
            start = time.perf_counter()
            sim.run(steps)
            times[tag].append((time.perf_counter() - start) / steps * 1e3)
    row = {"operator": "TGV step", "d": 2, "n": 2500}
    for tag, t in times.items():
        row[f"forward_{tag}"] = statistics.median(t)
    row["forwardRatio"] = row["forward_float32"] / row["forward_float64"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--size", choices=["small", "default"], default="default",
                    help="small: 2D 4096 / 3D 4096 (a quick look)")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/precision.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [(64, 2), (16, 3)] if args.size == "small" else [(128, 2), (32, 3)]
    rows = []
    for side, d in sizes:
        rows += operatorRows(side, d, args.repeats)
    rows.append(tgvRow(20 if args.size == "small" else 50, 5))
    print(f"float32 / float64, one thread ({cpuInfo().get('model', '?')})")
    print(f"{'case':<22}{'fwd f64':>10}{'fwd f32':>10}{'ratio':>8}{'f+b f64':>10}"
          f"{'f+b f32':>10}{'ratio':>8}")
    for r in rows:
        name = f"{r['operator']} {r['d']}D {r['n']}"
        line = (f"{name:<22}{r['forward_float64']:>10.2f}{r['forward_float32']:>10.2f}"
                f"{r['forwardRatio']:>8.2f}")
        if "forwardBackwardRatio" in r:
            line += (f"{r['forwardBackward_float64']:>10.2f}"
                     f"{r['forwardBackward_float32']:>10.2f}{r['forwardBackwardRatio']:>8.2f}")
        print(line)
    worst = max(max(r["forwardRatio"], r.get("forwardBackwardRatio", 0)) for r in rows)
    print(f"largest ratio: {worst:.2f} (target <= 1)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"machine": cpuInfo(), "rows": rows,
                                           "largestRatio": worst}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
