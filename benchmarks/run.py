"""Neighbour-search benchmark (`make bench`): our full CSR search vs scipy's cKDTree.

Standard sets: jittered periodic lattices on [-1, 1]^d (2D 64^2 = 4096, 2D 128^2 = 16384,
3D 32^3 = 32768), jitter uniform in +-0.01 dx per axis (seeded), uniform support h with
V_d h^d = 50 dx^d (about 50 neighbours; Wendland2's support radius is h itself, so the kernel
choice does not change the search).

Timed, after one warm-up call (compile time excluded), in the same run and interleaved:

* ours: `radiusSearchCompactHashMap` (grid build + count + readback + collect), Gather;
* cKDTree: ``cKDTree(p, boxsize=2).sparse_distance_matrix(tree, h, output_type='coo_matrix')``
  on the positions wrapped into [0, 2) (tree build included).

Both must return the same number of pairs (exactly in float64; in float32 up to the few pairs
within rounding of r = h, since cKDTree measures in float64). ``--threads`` sets torch's
intra-op threads (Warp's CPU backend and cKDTree are single-threaded). Prints a table of medians and writes JSON to
``benchmarks/results/neighborhood.json`` (or ``--json PATH``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore.dataTypes.domain import DomainDescription  # noqa: E402
from warpSPHCore.enumTypes import SupportScheme  # noqa: E402
from warpSPHCore.neighborhood import radiusSearchCompactHashMap  # noqa: E402

SETS = [("2D 4096", 2, 64), ("2D 16384", 2, 128), ("3D 32768", 3, 32)]
UNIT_BALL = {1: 2.0, 2: math.pi, 3: 4.0 * math.pi / 3.0}
TARGET_NEIGHBORS = 50


def supportFor(dx: float, d: int, n: int = TARGET_NEIGHBORS) -> float:
    """h with V_d h^d = n dx^d (volumeToSupport arithmetic)."""
    return (n * dx**d / UNIT_BALL[d]) ** (1.0 / d)


def lattice(side: int, d: int, seed: int = 0):
    """Jittered lattice on [-1, 1]^d (float64, row-major), its spacing dx."""
    dx = 2.0 / side
    axes = [torch.arange(side, dtype=torch.float64)] * d
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, d)
    gen = torch.Generator().manual_seed(seed)
    jitter = (torch.rand(grid.shape, generator=gen, dtype=torch.float64) - 0.5) * 0.02 * dx
    return -1.0 + (grid + 0.5) * dx + jitter, dx


def cpuInfo() -> dict:
    info = {"platform": platform.platform(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        info["loadavg_before"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _pairsAgree(ours: int, kd: int, dtype) -> bool:
    """Exact agreement in float64; in float32 our distances are computed in float32 while
    cKDTree works in float64, so pairs within float32 rounding of r = h may differ."""
    if dtype == torch.float64:
        return ours == kd
    return abs(ours - kd) <= max(8, int(2e-5 * kd))


def runSet(name, d, side, device, dtype, repeats, useKDTree):
    pos64, dx = lattice(side, d)
    h = supportFor(dx, d)
    n = pos64.shape[0]
    pos = pos64.to(device=device, dtype=dtype)
    particles = SimpleNamespace(positions=pos, supports=torch.full((n,), h, dtype=dtype,
                                                                       device=device))
    domain = DomainDescription(torch.full((d,), -1.0, dtype=dtype, device=device),
                               torch.full((d,), 1.0, dtype=dtype, device=device), [True] * d)

    def ours():
        return radiusSearchCompactHashMap(particles, domain, mode=SupportScheme.Gather)

    wrapped = torch.remainder(pos64 + 1.0, 2.0).numpy()
    if useKDTree:
        from scipy.spatial import cKDTree

        def kdtree():
            tree = cKDTree(wrapped, boxsize=2.0)
            return tree.sparse_distance_matrix(tree, h, output_type="coo_matrix")

    adjacency = ours()  # warm-up (compiles on a cold cache)
    pairs = adjacency.numEdges
    kdPairs = kdtree().nnz if useKDTree else None
    oursTimes, kdTimes = [], []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        ours()
        _sync(device)
        oursTimes.append(time.perf_counter() - t0)
        if useKDTree:
            t0 = time.perf_counter()
            kdtree()
            kdTimes.append(time.perf_counter() - t0)
    oursMs = statistics.median(oursTimes) * 1e3
    kdMs = statistics.median(kdTimes) * 1e3 if useKDTree else None
    return {
        "set": name, "dim": d, "N": n, "h": h, "dx": dx, "dtype": str(dtype).replace("torch.", ""),
        "pairs": pairs, "pairs_ckdtree": kdPairs,
        "pairs_match": _pairsAgree(pairs, kdPairs, dtype) if useKDTree else None,
        "ours_median_ms": oursMs, "ours_min_ms": min(oursTimes) * 1e3,
        "ckdtree_median_ms": kdMs, "ckdtree_min_ms": min(kdTimes) * 1e3 if useKDTree else None,
        "ratio": (oursMs / kdMs) if useKDTree else None,
        "repeats": repeats,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="first set only, 3 repeats")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads for the run (default: torch's default)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "neighborhood.json"))
    args = parser.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    sets = SETS[:1] if args.quick else SETS
    repeats = 3 if args.quick else max(1, args.repeats)
    try:
        import scipy  # noqa: F401

        useKDTree = True
    except ImportError:
        useKDTree = False
        print("scipy not available: cKDTree column skipped")

    import warp as wp

    info = cpuInfo()
    meta = {"device": str(device), "dtype": args.dtype, "torch": torch.__version__,
            "warp": wp.config.version, "python": platform.python_version(), "host": info}
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)

    rows = [runSet(name, d, side, device, dtype, repeats, useKDTree) for name, d, side in sets]
    header = f"{'set':<10} {'N':>7} {'pairs':>9} {'ours ms':>9} {'cKDTree ms':>11} {'ratio':>6}"
    print(f"neighbour search, {device} {args.dtype}, median of {repeats} "
          f"({info.get('model', info['processor'])}, torch threads {info['torch_threads']})")
    print(header)
    print("-" * len(header))
    ok = True
    for r in rows:
        kd = f"{r['ckdtree_median_ms']:11.1f}" if r["ckdtree_median_ms"] is not None else f"{'-':>11}"
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] is not None else f"{'-':>6}"
        print(f"{r['set']:<10} {r['N']:>7} {r['pairs']:>9} {r['ours_median_ms']:9.1f} {kd} {ratio}")
        if r["pairs_match"] is False:
            ok = False
            print(f"  pair count mismatch: ours {r['pairs']}, cKDTree {r['pairs_ckdtree']}")
        elif r["pairs_ckdtree"] is not None and r["pairs_ckdtree"] != r["pairs"]:
            print(f"  ({r['pairs_ckdtree'] - r['pairs']:+d} pairs in cKDTree: float32 rounding "
                  "at r = h)")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "neighborhood": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
