"""Time to a first result: one process, from interpreter start, through

1. ``import warpSPHCore``,
2. a neighbour search (``radiusSearchCompactHashMap``, Gather),
3. Density (no grad),
4. Gradient of a scalar field forward + backward w.r.t. the values and the positions,

on 4096 particles (2D jittered periodic lattice, Wendland2, float32 by default). Each step's
wall time is printed and written as JSON. With ``--fresh-cache`` the script re-runs itself in
a child process whose ``WARP_CACHE_PATH`` is a new empty folder, so the numbers include every
kernel compile the sequence needs (the cold first run of a new user); without it the current
kernel cache is used (warm).
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _lattice(side: int, device, dtype):
    """The jittered 2D lattice on [-1, 1]^2 of both sequences and its spacing."""
    import torch

    dx = 2.0 / side
    axes = [torch.arange(side, dtype=torch.float64)] * 2
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 2)
    gen = torch.Generator().manual_seed(0)
    jitter = (torch.rand(grid.shape, generator=gen, dtype=torch.float64) - 0.5) * 0.02 * dx
    return (-1.0 + (grid + 0.5) * dx + jitter).to(device=device, dtype=dtype), dx


def sequence(device_name: str, dtype_name: str, side: int) -> dict:
    steps: dict[str, float] = {}
    t = time.perf_counter()
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    import warpSPHCore
    from warpSPHCore import (
        DomainDescription,
        KernelFunctions,
        OperationProperties,
        ParticleState,
        SupportScheme,
        WarpOperation,
        radiusSearchCompactHashMap,
        warpOperation,
    )

    steps["import"] = time.perf_counter() - t
    device = torch.device(device_name)
    dtype = getattr(torch, dtype_name)
    pos, dx = _lattice(side, device, dtype)
    d, n = 2, pos.shape[0]
    h = (50 * dx**d / torch.pi) ** 0.5
    particles = ParticleState(
        positions=pos,
        supports=torch.full((n,), h, dtype=dtype, device=device),
        masses=torch.full((n,), dx * dx, dtype=dtype, device=device),
        kinds=torch.zeros(n, dtype=torch.int32, device=device),
    )
    domain = DomainDescription(torch.full((d,), -1.0, dtype=dtype, device=device),
                               torch.full((d,), 1.0, dtype=dtype, device=device), [True] * d)

    t = time.perf_counter()
    adjacency = radiusSearchCompactHashMap(particles, domain, mode=SupportScheme.Gather)
    _sync(device)
    steps["search"] = time.perf_counter() - t

    t = time.perf_counter()
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    with torch.no_grad():
        rho = warpOperation(particles, props, domain, adjacency=adjacency)
    _sync(device)
    steps["density"] = time.perf_counter() - t

    t = time.perf_counter()
    x = pos.clone().requires_grad_(True)
    f = torch.sin(torch.pi * pos[:, 0]).requires_grad_(True)
    state = ParticleState(positions=x, supports=particles.supports, masses=particles.masses,
                          kinds=particles.kinds, densities=rho)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Gradient)
    grad = warpOperation(state, props, domain, queryValues=f, adjacency=adjacency)
    grad.square().sum().backward()
    _sync(device)
    steps["gradient_fwd_bwd"] = time.perf_counter() - t

    steps["total_from_process_start"] = time.perf_counter() - T_START
    checks = {
        "density_mean": float(rho.mean()),
        "grad_finite": bool(torch.isfinite(grad).all()),
        "positions_grad_finite": bool(torch.isfinite(x.grad).all()),
        "pairs": int(adjacency.i.numel()),
    }
    import warp as wp

    return {"device": device_name, "dtype": dtype_name, "particles": n, "steps_s": steps,
            "checks": checks, "warp": wp.config.version,
            "kernel_cache": str(wp.config.kernel_cache_dir),
            "warpSPHCore": getattr(warpSPHCore, "__version__", "?")}


def leanSequence(device_name: str, dtype_name: str, side: int) -> dict:
    """The same four steps with lean hand-written Warp kernels (`benchmarks/lean.py`: a
    brute-force CSR search, Density, Gradient forward + backward on a `wp.Tape`), importing
    only torch and Warp: the floor of the cold-start target."""
    steps: dict[str, float] = {}
    t = time.perf_counter()
    import torch
    import warp as wp

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lean import LeanRunner, leanSearch

    wp.init()
    steps["import"] = time.perf_counter() - t
    device = torch.device(device_name)
    dtype = getattr(torch, dtype_name)
    pos, dx = _lattice(side, device, dtype)
    d, n = 2, pos.shape[0]
    h = torch.full((n,), (50 * dx**d / torch.pi) ** 0.5, dtype=dtype, device=device)
    m = torch.full((n,), dx * dx, dtype=dtype, device=device)

    t = time.perf_counter()
    csr = leanSearch(pos, h, (2.0, 2.0), str(device))
    _sync(device)
    steps["search"] = time.perf_counter() - t

    t = time.perf_counter()
    runner = LeanRunner(pos, h, m, None, None, csr, (2.0, 2.0), str(device))
    rho = wp.to_torch(runner.density()).clone()
    _sync(device)
    steps["density"] = time.perf_counter() - t

    t = time.perf_counter()
    f = torch.sin(torch.pi * pos[:, 0])
    runner = LeanRunner(pos, h, m, rho, f, csr, (2.0, 2.0), str(device))
    out = wp.to_torch(runner.gradient())
    seed = wp.from_torch((2.0 * out).contiguous(), dtype=runner.V)  # d/dout of sum(out^2)
    grad, gx, gf = runner.gradientTaped(seed)
    _sync(device)
    steps["gradient_fwd_bwd"] = time.perf_counter() - t
    steps["total_from_process_start"] = time.perf_counter() - T_START
    checks = {"density_mean": float(rho.mean()), "grad_finite": bool(torch.isfinite(grad).all()),
              "positions_grad_finite": bool(torch.isfinite(gx).all()),
              "pairs": int(csr.j.numel())}
    return {"device": device_name, "dtype": dtype_name, "particles": n, "steps_s": steps,
            "checks": checks, "warp": wp.config.version,
            "kernel_cache": str(wp.config.kernel_cache_dir), "lean": True}


def _child(args, lean: bool, cache: str, jsonPath: str) -> dict:
    env = dict(os.environ, WARP_CACHE_PATH=cache)
    cmd = [sys.executable, __file__, "--device", args.device, "--dtype", args.dtype,
           "--side", str(args.side), "--json", jsonPath] + (["--lean"] if lean else [])
    t = time.perf_counter()
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        raise SystemExit(rc)
    res = json.loads(Path(jsonPath).read_text())
    res["child_wall_s"] = time.perf_counter() - t
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--side", type=int, default=64, help="lattice side (side^2 particles)")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="run in a child process with an empty WARP_CACHE_PATH (cold start)")
    ap.add_argument("--lean", action="store_true",
                    help="the lean hand-written baseline (benchmarks/lean.py) instead of the "
                         "library")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.fresh_cache:
        # side by side, each in its own child with its own empty kernel cache
        with tempfile.TemporaryDirectory(prefix="warpsph-cold-") as tmp:
            ours = _child(args, False, os.path.join(tmp, "ours"), os.path.join(tmp, "o.json"))
            lean = _child(args, True, os.path.join(tmp, "lean"), os.path.join(tmp, "l.json"))
        print(f"cold start, fresh kernel caches, {args.device} {args.dtype}, "
              f"{ours['particles']} particles (s)")
        print(f"{'step':28s} {'ours':>8s} {'lean':>8s}")
        for k in ours["steps_s"]:
            print(f"{k:28s} {ours['steps_s'][k]:8.2f} {lean['steps_s'][k]:8.2f}")
        ratio = ours["steps_s"]["total_from_process_start"] / \
            lean["steps_s"]["total_from_process_start"]
        print(f"ours / lean (total): {ratio:.2f}   (targets: ours <= 30 s, "
              "ratio <= 1.5)")
        if args.json:
            Path(args.json).write_text(json.dumps({"ours": ours, "lean": lean,
                                                   "ratio_total": ratio}, indent=2))
        return 0
    res = (leanSequence if args.lean else sequence)(args.device, args.dtype, args.side)
    for k, v in res["steps_s"].items():
        print(f"{k:28s} {v:8.2f} s")
    print(json.dumps(res["checks"]))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
