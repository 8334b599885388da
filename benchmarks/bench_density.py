"""Density benchmark (`make bench`): the bridged operator vs a lean hand-written Warp kernel
(the floor), same arrays, same run.

1. Throughput, 2D 16384 and 3D 32768 (jittered periodic lattices, Wendland2, ~50
   neighbours, CSR list): `warpOperation(Density)` without grad vs one `wp.launch` of
   `lean.leanDensity` (the sum m_j W(x_ij, h_i) written out by hand: plain arrays, Wendland2
   written out, dimension and scalar type fixed; `benchmarks/lean.py`) with prebuilt arrays.
   Target: ratio <= 1.3. Also shown: `floorDensity`, the same sum built from the
   library's generic kernel functions (kernel-id dispatch, `computeDistanceVec`).
2. Call overhead, 2D N = 256, repeated calls on the same tensors: `warpOperation` vs one bare
   `wp.launch` of the lean kernel with prebuilt arrays. Target: ratio <= 2. The bridged call
   is broken down into extract (`extractStateInfo`), convert (views of the flat list),
   build (`build_fn`, StateBundle structs) and launch (`launch_kernel` of the kernel the call
   uses), each timed alone.

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

from lean import LeanRunner  # noqa: E402
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
from warpSPHCore.autograd.specialize import specializedKernel  # noqa: E402
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


def setup(side, device, dtype, d=2):
    pos, dx = lattice(side, d)
    pos = pos.to(device=device, dtype=dtype)
    n = pos.shape[0]
    h = supportFor(dx, d)
    p = ParticleState(pos, torch.full((n,), h, dtype=dtype, device=device),
                      torch.full((n,), dx**d, dtype=dtype, device=device),
                      torch.zeros(n, dtype=torch.int32, device=device))
    dom = DomainDescription(torch.full((d,), -1.0, dtype=dtype, device=device),
                            torch.full((d,), 1.0, dtype=dtype, device=device), [True] * d)
    adj = radiusSearchCompactHashMap(p, dom)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    return p, dom, adj, props


def leanLauncher(p, dom, adj, device):
    lean = LeanRunner(p.positions, p.supports, p.masses, None, None, adj,
                      (dom.max - dom.min).tolist(), str(device))
    return lean.density, wp.to_torch(lean.rhoOut)


def floorLauncher(p, dom, adj, device):
    d, dt = p.positions.shape[1], p.positions.dtype
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
    kernel = specializedKernel(DENSITY_SPEC.specialize, build.config, DENSITY_SPEC.kernel)

    def launch():
        return launch_kernel(kernel, (n,), warpScalar(p.positions.dtype), *args)

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

    # 1. throughput at 2D 16384 and 3D 32768
    results["throughput"] = {}
    for side, d in ((128, 2), (32, 3)):
        p, dom, adj, props = setup(side, device, dtype, d)
        lean, leanOut = leanLauncher(p, dom, adj, device)
        floor, floorOut = floorLauncher(p, dom, adj, device)
        with torch.no_grad():
            ours = warpOperation(p, props, dom, adjacency=adj)
        lean()
        floor()
        _sync(device)
        err = (ours - leanOut).abs().max().item() / leanOut.abs().max().item()

        def call(p=p, props=props, dom=dom, adj=adj):
            with torch.no_grad():
                warpOperation(p, props, dom, adjacency=adj)

        tOurs = _median_ms(call, args.repeats, device)
        tLean = _median_ms(lean, args.repeats, device)
        tFloor = _median_ms(floor, args.repeats, device)
        results["throughput"][f"{d}D"] = {
            "N": int(p.positions.shape[0]), "pairs": int(adj.i.numel()), "ours_ms": tOurs,
            "lean_ms": tLean, "libfloor_ms": tFloor, "ratio": tOurs / tLean, "target": 1.3,
            "max_rel_diff_vs_lean": err}

    # 2. call overhead at N = 256
    p, dom, adj, props = setup(16, device, dtype)
    lean, _ = leanLauncher(p, dom, adj, device)

    def call():
        with torch.no_grad():
            warpOperation(p, props, dom, adjacency=adj)

    tOurs = _median_ms(call, args.repeats, device, inner=50)
    tLean = _median_ms(lean, args.repeats, device, inner=50)
    stages = breakdown(p, dom, adj, props, args.repeats, device)
    results["overhead"] = {"N": 256, "ours_ms": tOurs, "bare_launch_ms": tLean,
                           "ratio": tOurs / tLean, "target": 2.0, "breakdown_ms": stages}

    o = results["overhead"]
    print(f"Density (no grad), {device} {args.dtype}, median of {args.repeats} (ms)")
    print(f"{'case':28s} {'ours':>9s} {'lean':>9s} {'libfloor':>9s} {'ours/lean':>9s} "
          f"{'target':>7s}")
    print("-" * 76)
    for key, t in results["throughput"].items():
        print(f"{key + ' ' + str(t['N']) + ' CSR (throughput)':28s} {t['ours_ms']:9.3f} "
              f"{t['lean_ms']:9.3f} {t['libfloor_ms']:9.3f} {t['ratio']:9.2f} {'<= 1.3':>7s}")
    print(f"{'2D 256 (call overhead)':28s} {o['ours_ms']:9.4f} {o['bare_launch_ms']:9.4f} "
          f"{'':9s} {o['ratio']:9.2f} {'<= 2':>7s}")
    print("  breakdown of one bridged call (ms, each stage timed alone): "
          + ", ".join(f"{k} {v:.4f}" for k, v in stages.items()))
    print("  max relative difference ours vs lean: " + ", ".join(
        f"{k} {t['max_rel_diff_vs_lean']:.2e}" for k, t in results["throughput"].items()))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
