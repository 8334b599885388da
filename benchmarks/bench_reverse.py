"""Reverse-mode cost of every value operator (`make bench`): forward, and forward + backward
by the hand-written reverse kernel and by Warp's generated adjoint (the tape,
``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``, switched in the same process), side by side.

2D 16384 particles (the jittered periodic lattice of `bench_gradient.setup`, Wendland2,
about 50 neighbours, CSR list), one CPU thread, float32 and float64. Each operator is
called on a field of its natural shape (a scalar for Interpolate, Gradient and Laplacian,
a 2-vector for Divergence and Curl), with the positions and the values requiring grad and
the backward of a fixed seed; Density and Covariance (no values) differentiate the
positions. The route column says
which backward a call took (the reverse kernel's name, or "tape" where none applies).
Prints medians of interleaved rounds and writes JSON (``--json``, default
``benchmarks/results/reverse.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_gradient import setup  # noqa: E402
from run import cpuInfo  # noqa: E402

from warpSPHCore import (  # noqa: E402
    GradientScheme,
    LaplacianScheme,
    OperationProperties,
    ParticleState,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation  # noqa: E402
from warpSPHCore.util import gates  # noqa: E402

GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"


def _route(out):
    fn = out.grad_fn
    while fn is not None and not hasattr(fn, "reverse_route"):
        fn = fn.next_functions[0][0]
    return getattr(fn, "reverse_route", None) or "tape"


def _measure(p, dom, adj, props, values, rounds):
    """Medians (ms) of the forward and of forward + backward by the route and on the tape,
    interleaved round by round; and the route the call took."""
    def call(pos, vals):
        q = ParticleState(pos, p.supports, p.masses, p.kinds, p.densities)
        kw = {} if vals is None else {"queryValues": vals}
        return warpOperation(q, props, dom, adjacency=adj, **kw)

    def forward():
        with torch.no_grad():
            return call(p.positions, values)

    routes = {}

    def forwardBackward(gate):
        os.environ[GATE] = gate
        gates.refreshGates()
        pos = p.positions.detach().clone().requires_grad_(True)
        vals = None if values is None else values.clone().requires_grad_(True)
        out = call(pos, vals)
        routes[gate] = _route(out)
        out.backward(torch.ones_like(out))
        return out

    runners = {"forward": forward, "kernel": lambda: forwardBackward("0"),
               "tape": lambda: forwardBackward("1")}
    for fn in runners.values():
        fn()  # warm-up: kernels, caches
    times = {k: [] for k in runners}
    for _ in range(rounds):
        for k, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    os.environ.pop(GATE, None)
    gates.refreshGates()
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}, routes["0"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=128, help="particles per axis (2D)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "reverse.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    rows = []
    for dtype in (torch.float32, torch.float64):
        p, dom, adj, gradProps, f, _ = setup(args.side, 2, device, dtype)
        kernel = gradProps.kernel
        n = p.positions.shape[0]
        gen = torch.Generator().manual_seed(3)
        scalar = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
        vector = torch.randn(n, 2, generator=gen, dtype=torch.float64).to(dtype)
        ops = {
            "Density": (OperationProperties(kernel, operation=WarpOperation.Density), None),
            "Interpolate": (OperationProperties(kernel, operation=WarpOperation.Interpolate),
                            scalar),
            "Gradient": (gradProps, scalar),
            "Divergence": (OperationProperties(kernel, operation=WarpOperation.Divergence,
                                               gradientMode=GradientScheme.Difference),
                           vector),
            "Curl": (OperationProperties(kernel, operation=WarpOperation.Curl,
                                         gradientMode=GradientScheme.Difference), vector),
            "Laplacian": (OperationProperties(kernel, operation=WarpOperation.Laplacian,
                                              laplacianMode=LaplacianScheme.Brookshaw),
                          scalar),
            "Covariance": (OperationProperties(kernel, operation=WarpOperation.Covariance),
                           None),
        }
        for name, (props, values) in ops.items():
            med, route = _measure(p, dom, adj, props, values, args.rounds)
            rows.append({"operator": name, "dtype": str(dtype).replace("torch.", ""),
                         "route": route, "forwardMs": med["forward"],
                         "forwardBackwardMs": med["kernel"], "tapeMs": med["tape"],
                         "backwardOverForward": (med["kernel"] - med["forward"])
                         / med["forward"],
                         "tapeOverRoute": med["tape"] / med["kernel"]})
    print(f"Reverse mode, 2D {args.side ** 2} particles, cpu, one thread "
          f"(medians of {args.rounds} interleaved rounds, ms)")
    print("| operator | dtype | route | forward | f+b | f+b on the tape | backward / forward "
          "| tape / route |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['operator']} | {r['dtype']} | {r['route']} | {r['forwardMs']:.2f} | "
              f"{r['forwardBackwardMs']:.2f} | {r['tapeMs']:.2f} | "
              f"{r['backwardOverForward']:.1f} | {r['tapeOverRoute']:.2f} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": "cpu", "cpu": cpuInfo(), "particles": args.side ** 2,
                               "rows": rows,
                               "command": "python benchmarks/bench_reverse.py " +
                               " ".join(argv or sys.argv[1:])}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
