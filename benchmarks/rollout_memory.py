"""Peak memory of a 1,000-step reverse pass through `fluids.rollout`, plain and checkpointed.

The rollout: a weakly compressible flow of ``--side``^2 particles (default 100) on a jittered
lattice of the periodic unit square, float64, Taylor-Green velocities, summation density (a
new neighbour search at every rate evaluation), Tait pressure (c0 = 10), the symmetric
pressure acceleration, Morris viscosity and a body force; ``--steps`` kick-drift-kick steps
(default 1,000); the gradient of the final kinetic energy with respect to the viscosity, the
initial velocity amplitude and the body force (tests/fluids/test_rollout_gradients.py checks
these gradients against central differences on a short rollout).

Each variant (plain; checkpointed in segments of k steps, ``--every``, default 32 and 100)
runs in a fresh process, which reports:

* ``peak RSS``: the peak resident set size during the forward and backward passes above the
  resident size just before them (Linux: ``/proc/self/status`` VmHWM, reset through
  ``/proc/self/clear_refs``), i.e. what the reverse pass costs in memory;
* ``saved``: the bytes of the tensors autograd saved for backward during the forward pass
  (``torch.autograd.graph.saved_tensors_hooks``): deterministic, but blind to what an autograd
  function keeps on its context object outside ``save_for_backward``;
* the forward and backward wall times, and whether the gradients equal the plain ones
  bitwise.

Run: ``python benchmarks/rollout_memory.py [--side 10] [--steps 1000] [--every 32 100]
[--threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
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
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)
from warpSPHCore.fluids import (  # noqa: E402
    FluidState,
    Rates,
    bodyAcceleration,
    laminarViscosity,
    pressureAcceleration,
    rollout,
    taitPressure,
)

F64 = torch.float64
C0 = 10.0
DENSITY = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)


def _status(key: str) -> int:
    """A ``/proc/self/status`` entry in bytes (kB there)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _resetPeak() -> None:
    """Reset VmHWM to the current resident size (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def _problem(side: int):
    dx = 1.0 / side
    g = (torch.arange(side, dtype=F64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    x = x + 0.2 * dx * (torch.rand(x.shape, generator=torch.Generator().manual_seed(5),
                                   dtype=F64) - 0.5)
    N = x.shape[0]
    H = torch.full((N,), 3.0 * dx, dtype=F64)
    m = torch.full((N,), dx * dx, dtype=F64)
    kinds = torch.zeros(N, dtype=torch.int32)
    dom = DomainDescription(torch.zeros(2, dtype=F64), torch.ones(2, dtype=F64), [True, True])
    return x, H, m, kinds, dom, 0.25 * dx / (C0 + 1.0)


def _worker(args) -> dict:
    torch.set_num_threads(args.threads)
    x0, H, m, kinds, dom, dt = _problem(args.side)
    mu = torch.tensor(0.05, dtype=F64, requires_grad=True)
    amplitude = torch.tensor(1.0, dtype=F64, requires_grad=True)
    gravity = torch.tensor([0.0, -0.1], dtype=F64, requires_grad=True)

    def search(state):  # a new search at every rate evaluation
        return radiusSearchCompactHashMap(ParticleState(state.positions.detach(), H, m, kinds),
                                          dom)

    def rates(state, adj):
        x = state.positions
        rho = warpOperation(ParticleState(x, H, m, kinds), DENSITY, dom, adjacency=adj)
        p = ParticleState(x, H, m, kinds, rho)
        a = pressureAcceleration(p, taitPressure(rho, 1.0, C0), dom, adj) \
            + laminarViscosity(p, state.velocities, dom, adj, mu) + bodyAcceleration(gravity, x)
        return Rates(a)

    s, c = torch.sin(2 * math.pi * x0), torch.cos(2 * math.pi * x0)
    field = torch.stack([-c[:, 0] * s[:, 1], s[:, 0] * c[:, 1]], 1)
    every = None if args.worker == "plain" else int(args.worker)
    # warm-up (kernel loading, allocator pools) outside the measurement
    warm = rollout(FluidState(x0, amplitude * field), dt, 3, rates, search,
                   checkpointEvery=every).state
    torch.autograd.grad((warm.velocities**2).sum(), [mu, amplitude, gravity])
    del warm
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    base = _status("VmRSS")
    _resetPeak()
    t0 = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        final = rollout(FluidState(x0, amplitude * field), dt, args.steps, rates, search,
                        checkpointEvery=every).state
        loss = 0.5 * (m[:, None] * final.velocities**2).sum()
    t1 = time.perf_counter()
    afterForward = _status("VmHWM")
    grads = torch.autograd.grad(loss, [mu, amplitude, gravity])
    t2 = time.perf_counter()
    peak = _status("VmHWM")
    return {"variant": args.worker, "particles": x0.shape[0], "steps": args.steps,
            "peakBytes": peak - base, "forwardPeakBytes": afterForward - base,
            "savedBytes": saved[0], "forwardSeconds": t1 - t0, "backwardSeconds": t2 - t1,
            "loss": float(loss).hex(),
            "gradients": [v.hex() for g in grads for v in g.reshape(-1).tolist()],
            "gradientValues": [v for g in grads for v in g.reshape(-1).tolist()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=10, help="particles per axis")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, nargs="+", default=[32, 100],
                    help="checkpoint segment lengths")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per worker")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(_worker(args)))
        return
    rows = []
    for variant in ["plain"] + [str(k) for k in args.every]:
        cmd = [sys.executable, __file__, "--worker", variant, "--side", str(args.side),
               "--steps", str(args.steps), "--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  {variant}: done", file=sys.stderr)
    plain = rows[0]
    mib = 1024.0**2
    print(f"\n{plain['particles']} particles, {plain['steps']} kick-drift-kick steps, float64, "
          f"{args.threads} thread(s); gradient of the final kinetic energy in (mu, amplitude, "
          f"g); grads {plain['gradientValues']}")
    print("| rollout | peak RSS, forward + backward (MiB) | peak RSS after forward (MiB) | "
          "saved tensors (MiB) | forward (s) | backward (s) | gradients bitwise the plain |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = "plain" if r["variant"] == "plain" else f"checkpointed, k = {r['variant']}"
        same = r["gradients"] == plain["gradients"] and r["loss"] == plain["loss"]
        print(f"| {name} | {r['peakBytes'] / mib:.1f} | {r['forwardPeakBytes'] / mib:.1f} | "
              f"{r['savedBytes'] / mib:.2f} | {r['forwardSeconds']:.1f} | "
              f"{r['backwardSeconds']:.1f} | {same} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
