"""`torch.func` benchmark (`make bench`): `torch.func.vmap` over B value fields of one
operator call against one call on one field and against B calls, same run.

2D 16384 (jittered periodic lattice, Wendland2, ~50 neighbours, CSR), float32 and float64,
Interpolate, Gradient and Laplacian (Brookshaw) of scalar fields, no grad. The vmap of
``lambda f: warpOperation(..., queryValues=f)`` over a ``[B, N]`` batch makes one call with
the batch as a field axis (one neighbour traversal for every field, `autograd.functorch`);
its output is compared with the B separate calls element by element. Target: the vmap over
8 fields <= 2x one call. Prints a table of medians over interleaved rounds and writes JSON
(``--json``, default ``benchmarks/results/func.json``).
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

from bench_gradient import _sync, setup  # noqa: E402
from run import cpuInfo  # noqa: E402

from warpSPHCore import LaplacianScheme, OperationProperties, WarpOperation  # noqa: E402
from warpSPHCore.operations import warpOperation  # noqa: E402


def _runners(p, props, dom, adj, batch):
    """One call on one field, the vmap over the batch, and one call per field."""
    def call(v):
        return warpOperation(p, props, dom, queryValues=v, adjacency=adj)

    def one():
        with torch.no_grad():
            return call(batch[0])

    def vmapped():
        with torch.no_grad():
            return torch.func.vmap(call)(batch)

    def loop():
        with torch.no_grad():
            return torch.stack([call(batch[b]) for b in range(batch.shape[0])])

    return one, vmapped, loop


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=128, help="particles per axis (2D)")
    ap.add_argument("--fields", type=int, default=8, help="B, fields in the vmap")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "func.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    rows, worst = [], 0.0
    for dtype in (torch.float32, torch.float64):
        p, dom, adj, gradProps, f, _ = setup(args.side, 2, device, dtype)
        kernel = gradProps.kernel
        ops = {"Interpolate": OperationProperties(kernel, operation=WarpOperation.Interpolate),
               "Gradient": gradProps,
               "Laplacian": OperationProperties(kernel, operation=WarpOperation.Laplacian,
                                                laplacianMode=LaplacianScheme.Brookshaw)}
        gen = torch.Generator().manual_seed(2)
        batch = torch.randn(args.fields, f.shape[0], generator=gen,
                            dtype=torch.float64).to(device=device, dtype=dtype)
        for name, props in ops.items():
            one, vmapped, loop = _runners(p, props, dom, adj, batch)
            runners = {"one": one, "vmap": vmapped, "loop": loop}
            for fn in runners.values():
                fn()  # warm-up: kernels, caches
            times = {k: [] for k in runners}
            for _ in range(args.rounds):
                for k, fn in runners.items():
                    _sync(device)
                    t0 = time.perf_counter()
                    fn()
                    _sync(device)
                    times[k].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            err = float((vmapped() - loop()).abs().max())
            ratio = med["vmap"] / med["one"]
            worst = max(worst, ratio)
            rows.append({"operator": name, "dtype": str(dtype).replace("torch.", ""),
                         "oneMs": med["one"], "vmapMs": med["vmap"], "loopMs": med["loop"],
                         "vmapOverOne": ratio, "loopOverVmap": med["loop"] / med["vmap"],
                         "maxAbsDiff": err})
    print(f"torch.func.vmap over {args.fields} fields, 2D {args.side ** 2} particles, "
          f"{device}, one thread (medians of {args.rounds})")
    print("| operator | dtype | one call | vmap of B | B calls | vmap / one | max |diff| |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['operator']} | {r['dtype']} | {r['oneMs']:.2f} ms | {r['vmapMs']:.2f} ms |"
              f" {r['loopMs']:.2f} ms | {r['vmapOverOne']:.2f} | {r['maxAbsDiff']:.1e} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(device), "cpu": cpuInfo(), "fields": args.fields,
                               "particles": args.side ** 2, "rows": rows,
                               "worstVmapOverOne": worst,
                               "command": "python benchmarks/bench_func.py " +
                               " ".join(argv or sys.argv[1:])}, indent=2) + "\n")
    print(f"worst vmap / one call: {worst:.2f} (target <= 2); wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
