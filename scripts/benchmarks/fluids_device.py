"""The fluids cases on a device (the TGV and the dam break on cuda:0, time per step at 2,500
and 1M particles), for `make gpu-check` (scripts/gpu_check.sh) and, with ``--device cpu
--tiny``, for a quick check here.

1. `warpsph run tgv` at 50 x 50 (2,500 particles) to a short end time on the device: its
   errors against the analytic decay and ms per step;
2. `warpsph run dambreak` at its default resolution to a short end time: the front error so
   far and ms per step;
3. the Taylor-Green transport-velocity step (search, number-density volumes, fused Momentum,
   kick-drift-kick; `benchmarks/bench_fluids.py`'s step) at 2,500 and 1,000,000 particles
   (``--big`` particles per axis, default 1000), synchronised medians.

Prints a table and writes JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    radiusSearchCompactHashMap,
)
from warpSPHCore.fluids import (  # noqa: E402
    numberDensityVolumes,
    transportVelocityAccelerations,
)
from warpSPHCore.fluids.cases import dambreak, tgv  # noqa: E402


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def stepTime(side: int, device, repeats: int) -> dict:
    """Median ms of one transport-velocity Taylor-Green step at side^2 particles."""
    f64, K = torch.float64, KernelFunctions.Wendland2
    t = dict(dtype=f64, device=device)
    dx = 1.0 / side
    c0, pb, dt = 10.0, 100.0, 0.25 * dx / 11.0
    g = (torch.arange(side, **t) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    n = x.shape[0]
    H, m = torch.full((n,), 4 * dx, **t), torch.full((n,), dx * dx, **t)
    kinds = torch.zeros(n, dtype=torch.int32, device=device)
    dom = DomainDescription(torch.zeros(2, **t), torch.ones(2, **t), [True, True])
    s, c = torch.sin(2 * math.pi * x), torch.cos(2 * math.pi * x)
    u = torch.stack([-c[:, 0] * s[:, 1], s[:, 0] * c[:, 1]], 1)

    def rates(x, u, ut):
        adj = radiusSearchCompactHashMap(ParticleState(x, H, m, kinds), dom,
                                         mode=SupportScheme.Gather)
        V = numberDensityVolumes(ParticleState(x, H, m, kinds), dom, adj, kernel=K)
        rho = m / V
        return transportVelocityAccelerations(
            ParticleState(x, H, m, kinds, rho), c0 * c0 * (rho - 1.0), u, dom, adj,
            backgroundPressure=pb, dynamicViscosity=0.01, transportVelocities=ut, volumes=V,
            kernel=K)

    def step(x, u, a, ab):
        uh = u + 0.5 * dt * a
        ut = uh + 0.5 * dt * ab
        x = torch.remainder(x + dt * ut, 1.0)
        a, ab = rates(x, uh, ut)
        return x, uh + 0.5 * dt * a, a, ab

    with torch.no_grad():
        a, ab = rates(x, u, u)
        state = (x, u, a, ab)
        ts = []
        for k in range(repeats + 2):
            _sync(device)
            t0 = time.perf_counter()
            state = step(*state)
            _sync(device)
            if k >= 2:
                ts.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(ts)
    return {"particles": n, "msPerStep": ms, "particleStepsPerSecond": n / ms * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--tiny", action="store_true", help="small sizes (a CPU smoke run)")
    ap.add_argument("--big", type=int, default=1000, help="particles per axis of the big step")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = args.device
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = tgv.TaylorGreenConfig(n=12 if args.tiny else 50, t=0.02 if args.tiny else 0.2,
                                    relax=20 if args.tiny else 300, device=dev)
        r = tgv.run(cfg, Path(tmp) / "tgv", quiet=True)
        rows["tgv"] = {k: r[k] for k in ("particles", "steps", "msPerStep", "kineticEnergyRelErr",
                                         "velocityL2RelErr")}
        cfg = dambreak.DamBreakConfig(n=6 if args.tiny else 20, tEnd=0.3 if args.tiny else 1.0,
                                      device=dev)
        r = dambreak.run(cfg, Path(tmp) / "dambreak", quiet=True)
        rows["dambreak"] = {k: r.get(k) for k in ("particles", "steps", "msPerStep",
                                                  "frontMaxRelErr")}
    for side in ((12, 20) if args.tiny else (50, args.big)):
        rows[f"tgv step {side * side}"] = stepTime(side, dev, args.repeats)
    print(f"fluids on {dev}")
    for name, r in rows.items():
        print(f"  {name:20s} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in r.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev, **rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
