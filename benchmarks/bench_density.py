"""Density benchmark (`make bench`): the bridged operator vs a minimal hand-written Warp
kernel (the floor), same arrays, same run.

1. Throughput, 2D 16384 (jittered periodic lattice, Wendland2, ~50 neighbours, CSR list):
   `warpOperation(Density)` without grad vs one `wp.launch` of `floorDensity` (the same sum
   m_j W(x_ij, h_i) with the same kernel functions, no structs, no masking) with prebuilt
   arrays. Target: ratio <= 1.3.
2. Call overhead, 2D N = 256, repeated calls on the same tensors: `warpOperation` vs one bare
   `wp.launch` of the floor kernel with prebuilt arrays. Target: ratio <= 5. The bridged call
   is broken down into extract (`extractStateInfo`), convert (views of the flat list),
   build (`build_fn`, StateBundle structs) and launch (`launch_kernel`), each timed alone.

Prints a table of medians and writes JSON (`--json`, default
`benchmarks/results/density.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import warp as wp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from run import cpuInfo, lattice, supportFor  # noqa: E402

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
)
from warpSPHCore.autograd.arg_extract import extractStateInfo  # noqa: E402
from warpSPHCore.autograd.cache import getCachedWarpArray  # noqa: E402
from warpSPHCore.autograd.launcher import launch_kernel  # noqa: E402
from warpSPHCore.kernels.evaluation import sphKernel  # noqa: E402
from warpSPHCore.kernels.geometry import computeDistanceVec  # noqa: E402
from warpSPHCore.operations import warpOperation  # noqa: E402
from warpSPHCore.operators.density import DENSITY_SPEC  # noqa: E402
from warpSPHCore.util.precision import warpScalar, warpVector  # noqa: E402
from warpSPHCore.util.warpContext import warpDevice  # noqa: E402


@wp.kernel(enable_backward=False)
def floorDensity(x: wp.array(dtype=Any), h: wp.array(dtype=Any), m: wp.array(dtype=Any),
                 nbr: wp.array(dtype=wp.int64), off: wp.array(dtype=wp.int32),
                 cnt: wp.array(dtype=wp.int32), lo: wp.array(dtype=Any),
                 hi: wp.array(dtype=Any), per: wp.array(dtype=wp.bool), dim: wp.int32,
                 kernel: wp.int32, out: wp.array(dtype=Any)):
    i = wp.tid()
    acc = h[i] * type(h[i])(0.0)
    for e in range(off[i], off[i] + cnt[i]):
        j = wp.int32(nbr[e])
        x_ij = computeDistanceVec(x[i], x[j], lo, hi, per, dim)
        acc += m[j] * sphKernel(x_ij, h[i], kernel, dim)
    out[i] = acc


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn, repeats, device, inner=1):
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) / inner * 1e3)
    return statistics.median(times)


def setup(side, device, dtype):
    pos, dx = lattice(side, 2)
    pos = pos.to(device=device, dtype=dtype)
    n = pos.shape[0]
    h = supportFor(dx, 2)
    p = ParticleState(pos, torch.full((n,), h, dtype=dtype, device=device),
                      torch.full((n,), dx * dx, dtype=dtype, device=device),
                      torch.zeros(n, dtype=torch.int32, device=device))
    dom = DomainDescription(torch.full((2,), -1.0, dtype=dtype, device=device),
                            torch.full((2,), 1.0, dtype=dtype, device=device), [True, True])
    adj = radiusSearchCompactHashMap(p, dom)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    return p, dom, adj, props


def floorLauncher(p, dom, adj, device):
    d, dt = 2, p.positions.dtype
    V, S = warpVector(d, dt), warpScalar(dt)
    out = torch.zeros(p.positions.shape[0], dtype=dt, device=device)
    args = [wp.from_torch(p.positions, dtype=V), wp.from_torch(p.supports, dtype=S),
            wp.from_torch(p.masses, dtype=S), wp.from_torch(adj.j),
            wp.from_torch(adj.edgeOffsets), wp.from_torch(adj.numNeighbors),
            wp.from_torch(dom.min, dtype=S), wp.from_torch(dom.max, dtype=S),
            wp.from_torch(dom.periodic), d, int(KernelFunctions.Wendland2)]
    outs = [wp.from_torch(out, dtype=S)]
    wdev = warpDevice(device)
    n = p.positions.shape[0]

    def launch():
        wp.launch(floorDensity, dim=n, inputs=args, outputs=outs, device=wdev)

    return launch, out


def breakdown(p, dom, adj, props, repeats, device):
    """Median ms of each bridge stage of a no-grad Density call, timed alone."""
    def extract():
        return extractStateInfo(p, props, dom, adjacency=adj)

    flat, build = extract()
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]

    def convert():
        return [getCachedWarpArray(t) if isinstance(t, torch.Tensor) else t.array for t in flat]

    arrays = convert()

    def buildArgs():
        return build(arrays, use_bundle=True)

    args = buildArgs()
    n = p.positions.shape[0]

    def launch():
        return launch_kernel(DENSITY_SPEC.kernel, (n,), warpScalar(p.positions.dtype), *args)

    del tensors
    return {name: _median_ms(fn, repeats, device, inner=20)
            for name, fn in (("extract", extract), ("convert", convert), ("build", buildArgs),
                             ("launch", launch))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "density.json"))
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    results = {"meta": {"device": str(device), "dtype": args.dtype, "host": cpuInfo(),
                        "torch": torch.__version__, "warp": wp.config.version}}

    # 1. throughput at 2D 16384
    p, dom, adj, props = setup(128, device, dtype)
    floor, floorOut = floorLauncher(p, dom, adj, device)
    with torch.no_grad():
        ours = warpOperation(p, props, dom, adjacency=adj)
    floor()
    _sync(device)
    err = (ours - floorOut).abs().max().item() / floorOut.abs().max().item()
    tOurs = _median_ms(lambda: warpOperation(p, props, dom, adjacency=adj), args.repeats, device)
    tFloor = _median_ms(floor, args.repeats, device)
    results["throughput"] = {"N": 16384, "pairs": int(adj.i.numel()), "ours_ms": tOurs,
                             "floor_ms": tFloor, "ratio": tOurs / tFloor, "target": 1.3,
                             "max_rel_diff": err}

    # 2. call overhead at N = 256
    p, dom, adj, props = setup(16, device, dtype)
    floor, _ = floorLauncher(p, dom, adj, device)
    tOurs = _median_ms(lambda: warpOperation(p, props, dom, adjacency=adj), args.repeats,
                       device, inner=50)
    tFloor = _median_ms(floor, args.repeats, device, inner=50)
    stages = breakdown(p, dom, adj, props, args.repeats, device)
    results["overhead"] = {"N": 256, "ours_ms": tOurs, "bare_launch_ms": tFloor,
                           "ratio": tOurs / tFloor, "target": 5.0, "breakdown_ms": stages}

    t = results["throughput"]
    o = results["overhead"]
    print(f"Density (no grad), {device} {args.dtype}, median of {args.repeats}")
    print(f"{'case':28s} {'ours ms':>9s} {'floor ms':>9s} {'ratio':>6s} {'target':>7s}")
    print("-" * 63)
    print(f"{'2D 16384 CSR (throughput)':28s} {t['ours_ms']:9.3f} {t['floor_ms']:9.3f} "
          f"{t['ratio']:6.2f} {'<= 1.3':>7s}")
    print(f"{'2D 256 (call overhead)':28s} {o['ours_ms']:9.4f} {o['bare_launch_ms']:9.4f} "
          f"{o['ratio']:6.2f} {'<= 5':>7s}")
    print("  breakdown of one bridged call (ms, each stage timed alone): "
          + ", ".join(f"{k} {v:.4f}" for k, v in stages.items()))
    print(f"  max relative difference ours vs floor: {t['max_rel_diff']:.2e}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
