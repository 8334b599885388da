"""Gradient benchmark (`make bench`): the bridged operator vs a lean hand-written Warp kernel,
the library-function floor and a pure-torch edge-list implementation, same CSR, same run.

1. Throughput, 2D 16384 and 3D 32768 (jittered periodic lattices, Wendland2, ~50 neighbours,
   CSR list), a scalar field, Naive scheme with V_j = m_j / rho_j, gradients w.r.t. the
   values and the positions:
   * ours: `warpOperation(Gradient)` forward, then `backward` of a fixed seed; the forward
     alone (no grad) repeated on the same state and values, as a loop at fixed inputs (from
     the third call a call plan replays it, `autograd.callPlan`), and, in the row "fwd, new
     inputs", with new tensors and state every call (the full call path of a simulation
     step);
   * lean: `lean.leanGradient`, the same sum written out by hand (plain arrays, Wendland2
     written out, dimension and scalar type fixed; `benchmarks/lean.py`), recorded on a
     `wp.Tape` whose `backward` (Warp's generated adjoint) gives the same two gradients. This
     is the floor of the targets: forward <= 1.3x, forward + backward <= 1.5x;
   * libfloor: `floorGradient`, the same sum built from the library's generic kernel
     functions (`sphKernelGradient` with its kernel-id dispatch, `computeDistanceVec`), on a
     tape: what a user writing a kernel with the library's building blocks gets;
   * torch: an edge list (i, j) from the same CSR, x_ij with the minimum image, the Wendland2
     gradient written in torch, `index_add_` per query, autograd backward.
   The results are compared element by element with ours (max relative difference).
2. Memory, 3D 32768 (float32): bytes that the tensors saved for backward keep alive beyond
   the caller's own (counted with `torch.autograd.graph.saved_tensors_hooks`: each distinct
   storage once, the particles, values, neighbour list and domain excluded), per edge, ours
   vs the torch edge list. The bridged backward must not store per-edge tensors (ours stays
   O(N)).

Prints a table of medians and writes JSON (`--json`, default
`benchmarks/results/gradient.json`).
"""

from __future__ import annotations

import argparse
import dataclasses
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
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
)

# through the package: the access registers grad W's custom adjoint (the floor is taped)
from warpSPHCore.kernels import sphKernelGradient  # noqa: E402
from warpSPHCore.kernels.constants import C_D  # noqa: E402
from warpSPHCore.kernels.geometry import computeDistanceVec  # noqa: E402
from warpSPHCore.operations import warpOperation  # noqa: E402
from warpSPHCore.util.precision import warpScalar, warpVector  # noqa: E402
from warpSPHCore.util.warpContext import warpDevice  # noqa: E402

KERNEL = KernelFunctions.Wendland2


@wp.kernel
def floorGradient(x: wp.array(dtype=Any), h: wp.array(dtype=Any), m: wp.array(dtype=Any),
                  rho: wp.array(dtype=Any), f: wp.array(dtype=Any), nbr: wp.array(dtype=wp.int64),
                  off: wp.array(dtype=wp.int32), cnt: wp.array(dtype=wp.int32),
                  lo: wp.array(dtype=Any), hi: wp.array(dtype=Any), per: wp.array(dtype=wp.bool),
                  dim: wp.int32, kernel: wp.int32, out: wp.array(dtype=Any)):
    """out_i = sum_j f_j (m_j / rho_j) grad W(x_ij, h_i) — the Naive Gradient of a scalar from
    the same inputs as ours (V_j = m_j / rho_j per pair), nothing else."""
    i = wp.tid()
    out[i] = _floorRow(x, h, m, rho, f, nbr, off[i], cnt[i], lo, hi, per, dim, kernel, i)


@wp.func
def _floorRow(x: wp.array(dtype=Any), h: wp.array(dtype=Any), m: wp.array(dtype=Any),
              rho: wp.array(dtype=Any), f: wp.array(dtype=Any), nbr: wp.array(dtype=wp.int64), first: wp.int32,
              count: wp.int32, lo: wp.array(dtype=Any), hi: wp.array(dtype=Any),
              per: wp.array(dtype=wp.bool), dim: wp.int32, kernel: wp.int32, i: wp.int32):
    acc = x[i] * type(h[i])(0.0)
    for e in range(first, first + count):
        j = wp.int32(nbr[e])
        x_ij = computeDistanceVec(x[i], x[j], lo, hi, per, dim)
        acc += (f[j] * (m[j] / rho[j])) * sphKernelGradient(x_ij, h[i], kernel, dim)
    return acc


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def setup(side, d, device, dtype):
    pos, dx = lattice(side, d)
    pos = pos.to(device=device, dtype=dtype)
    n = pos.shape[0]
    h = supportFor(dx, d)
    kinds = torch.zeros(n, dtype=torch.int32, device=device)
    p = ParticleState(pos, torch.full((n,), h, dtype=dtype, device=device),
                      torch.full((n,), dx**d, dtype=dtype, device=device), kinds)
    dom = DomainDescription(torch.full((d,), -1.0, dtype=dtype, device=device),
                            torch.full((d,), 1.0, dtype=dtype, device=device), [True] * d)
    adj = radiusSearchCompactHashMap(p, dom)
    with torch.no_grad():
        rho = warpOperation(p, OperationProperties(KERNEL, operation=WarpOperation.Density),
                            dom, adjacency=adj)
    p = ParticleState(pos, p.supports, p.masses, kinds, rho)
    gen = torch.Generator().manual_seed(1)
    f = torch.randn(n, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    seed = torch.randn(n, d, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    props = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                                gradientMode=GradientScheme.Naive)
    return p, dom, adj, props, f, seed


def oursRunner(p, dom, adj, props, f, seed):
    def forward(grad=True):
        pos = p.positions.detach().requires_grad_(grad)
        vals = f.detach().requires_grad_(grad)
        q = ParticleState(pos, p.supports, p.masses, p.kinds, p.densities)
        return warpOperation(q, props, dom, queryValues=vals, adjacency=adj), pos, vals

    def fwdBwd():
        out, pos, vals = forward()
        out.backward(seed)
        return out.detach(), pos.grad, vals.grad

    def fwdBwdValues():
        """Forward + backward asked only for d/d values (the positions need no grad)."""
        vals = f.detach().requires_grad_(True)
        q = ParticleState(p.positions.detach(), p.supports, p.masses, p.kinds, p.densities)
        out = warpOperation(q, props, dom, queryValues=vals, adjacency=adj)
        out.backward(seed)
        return out.detach(), vals.grad

    # the no-grad forward repeated on the same objects (as a user's loop at fixed inputs, and
    # as the Density benchmark): from the third call it is replayed from its call plan
    qFixed = ParticleState(p.positions, p.supports, p.masses, p.kinds, p.densities)

    def fwdOnly():
        with torch.no_grad():
            return warpOperation(qFixed, props, dom, queryValues=f, adjacency=adj)

    def fwdOnlyNew():
        """New tensors and state every call (a simulation step): the full call path."""
        with torch.no_grad():
            return forward(grad=False)[0]

    return fwdBwd, fwdOnly, fwdOnlyNew, fwdBwdValues


def floorRunner(p, dom, adj, f, seed, device):
    n, d = p.positions.shape
    dt = p.positions.dtype
    Vt, S = warpVector(d, dt), warpScalar(dt)
    wdev = warpDevice(device)
    x = wp.from_torch(p.positions.detach().clone(), dtype=Vt, requires_grad=True)
    fv = wp.from_torch(f.detach().clone(), dtype=S, requires_grad=True)
    m = wp.from_torch(p.masses.detach(), dtype=S)
    rho = wp.from_torch(p.densities.detach(), dtype=S)
    h = wp.from_torch(p.supports.detach(), dtype=S)
    out = wp.zeros(n, dtype=Vt, device=wdev, requires_grad=True)
    seedW = wp.from_torch(seed.detach().contiguous(), dtype=Vt)
    inputs = [x, h, m, rho, fv, wp.from_torch(adj.j), wp.from_torch(adj.edgeOffsets),
              wp.from_torch(adj.numNeighbors), wp.from_torch(dom.min, dtype=S),
              wp.from_torch(dom.max, dtype=S), wp.from_torch(dom.periodic), d, int(KERNEL)]

    def fwdOnly():
        wp.launch(floorGradient, dim=n, inputs=inputs, outputs=[out], device=wdev)
        return out

    def fwdBwd():
        tape = wp.Tape()
        with tape:
            wp.launch(floorGradient, dim=n, inputs=inputs, outputs=[out], device=wdev)
        tape.backward(grads={out: seedW})
        result = (wp.to_torch(out).clone(), wp.to_torch(x.grad).clone(),
                  wp.to_torch(fv.grad).clone())
        tape.zero()
        return result

    return fwdBwd, fwdOnly


def leanRunner(p, dom, adj, f, seed, device):
    """The lean hand-written kernel (`lean.leanGradient`) on the same arrays."""
    lean = LeanRunner(p.positions, p.supports, p.masses, p.densities, f, adj,
                      (dom.max - dom.min).tolist(), str(device))
    seedW = wp.from_torch(seed.detach().contiguous(), dtype=lean.V)

    def fwdBwd():
        return lean.gradientTaped(seedW)

    def fwdOnly():
        return lean.gradient()

    def fwdBwdValues():
        return lean.gradientValuesOnly(seedW)

    return fwdBwd, fwdOnly, fwdBwdValues


def torchWendland2Gradient(x_ij, h, d):
    """grad W of Wendland2 in d dimensions: C_d k'(q) / h^(d+1) x / r, k = (1-q)^4 (1+4q) for
    d >= 2 (k' = -20 q (1-q)^3), so grad W = -20 C_d (1-q)^3 x / h^(d+2) inside the support."""
    r = x_ij.norm(dim=1)
    q = r / h
    c = -20.0 * C_D[KERNEL][d - 1] * torch.clamp(1.0 - q, min=0.0) ** 3 / h ** (d + 2)
    return c[:, None] * x_ij


def torchRunner(p, dom, adj, f, seed):
    """Pure-torch edge-list Gradient (index_add_ over the CSR's (i, j) pairs, autograd)."""
    n, d = p.positions.shape
    i, j = adj.i.long(), adj.j.long()
    L = (dom.max - dom.min)
    V = (p.masses / p.densities).detach()
    h = p.supports.detach()[i]

    def forward(grad=True):
        pos = p.positions.detach().requires_grad_(grad)
        vals = f.detach().requires_grad_(grad)
        x_ij = pos[i] - pos[j]
        x_ij = x_ij - L * torch.round(x_ij / L)  # minimum image (every axis periodic)
        g = (vals[j] * V[j])[:, None] * torchWendland2Gradient(x_ij, h, d)
        out = torch.zeros(n, d, dtype=pos.dtype, device=pos.device).index_add_(0, i, g)
        return out, pos, vals

    def fwdBwd():
        out, pos, vals = forward()
        out.backward(seed)
        return out.detach(), pos.grad, vals.grad

    def fwdOnly():
        with torch.no_grad():
            return forward(grad=False)[0]

    return fwdBwd, fwdOnly, forward


def _interleavedMedians(impls, repeats, device):
    """{name: {"fwd_bwd_ms", "fwd_ms"}}: medians over `repeats` rounds, every implementation
    timed once per round."""
    times = {name: {"fwd_bwd_ms": [], "fwd_ms": []} for name in impls}
    for fb, fw in impls.values():  # warm-up
        fb()
        fw()
    for _ in range(repeats):
        for name, (fb, fw) in impls.items():
            for key, fn in (("fwd_bwd_ms", fb), ("fwd_ms", fw)):
                _sync(device)
                t0 = time.perf_counter()
                fn()
                _sync(device)
                times[name][key].append((time.perf_counter() - t0) * 1e3)
    return {name: {k: statistics.median(v) for k, v in d.items()} for name, d in times.items()}


def _relDiff(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _tensorsOf(*objects):
    """The tensors among `objects` and their dataclass fields (one level)."""
    found = []
    for o in objects:
        if isinstance(o, torch.Tensor):
            found.append(o)
        elif dataclasses.is_dataclass(o):
            found += [v for v in (getattr(o, f.name) for f in dataclasses.fields(o))
                      if isinstance(v, torch.Tensor)]
    return found


def savedBytes(fn, inputs=()):
    """Bytes that autograd's saved tensors keep alive while `fn` runs beyond the caller's own
    tensors: every distinct storage saved for backward, once, except the storages of
    `inputs` (the particles, values, neighbour list and domain the caller holds anyway)."""
    own = {t.untyped_storage().data_ptr() for t in _tensorsOf(*inputs)}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "gradient.json"))
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    results = {"meta": {"device": str(device), "dtype": args.dtype, "host": cpuInfo(),
                        "torch": torch.__version__, "warp": wp.config.version}}

    # 1. throughput, 2D 16384 and 3D 32768
    results["throughput"] = {}
    for side, d in ((128, 2), (32, 3)):
        p, dom, adj, props, f, seed = setup(side, d, device, dtype)
        ours, oursFwd, oursFwdNew, oursValues = oursRunner(p, dom, adj, props, f, seed)
        lean, leanFwd, leanValues = leanRunner(p, dom, adj, f, seed, device)
        floor, floorFwd = floorRunner(p, dom, adj, f, seed, device)
        tor, torFwd, _ = torchRunner(p, dom, adj, f, seed)
        o = ours()
        diffs = {name: [_relDiff(a, b) for a, b in zip(fn(), o)]
                 for name, fn in (("lean", lean), ("libfloor", floor), ("torch", tor))}
        # Interleaved rounds (each implementation once per round, medians over rounds): slow
        # drifts of a shared machine hit every implementation alike.
        diffs["lean (d/d values only)"] = [_relDiff(a, b) for a, b in
                                           zip(leanValues(), oursValues())]
        impls = {"ours": (ours, oursFwd), "ours_new": (lambda: None, oursFwdNew),
                 "lean": (lean, leanFwd),
                 "ours_values": (oursValues, lambda: None),
                 "lean_values": (leanValues, lambda: None),
                 "libfloor": (floor, floorFwd), "torch": (tor, torFwd)}
        rows = _interleavedMedians(impls, args.repeats, device)
        results["throughput"][f"{d}D"] = {
            "N": int(p.positions.shape[0]), "pairs": int(adj.i.numel()), "rows": rows,
            "fwd_ratio_lean": rows["ours"]["fwd_ms"] / rows["lean"]["fwd_ms"],
            "fwd_new_ratio_lean": rows["ours_new"]["fwd_ms"] / rows["lean"]["fwd_ms"],
            "fwd_bwd_ratio_lean": rows["ours"]["fwd_bwd_ms"] / rows["lean"]["fwd_bwd_ms"],
            "fwd_bwd_values_ratio_lean": (rows["ours_values"]["fwd_bwd_ms"]
                                          / rows["lean_values"]["fwd_bwd_ms"]),
            "fwd_ratio_libfloor": rows["ours"]["fwd_ms"] / rows["libfloor"]["fwd_ms"],
            "fwd_bwd_ratio_libfloor": rows["ours"]["fwd_bwd_ms"] / rows["libfloor"]["fwd_bwd_ms"],
            "fwd_bwd_ratio_torch": rows["ours"]["fwd_bwd_ms"] / rows["torch"]["fwd_bwd_ms"],
            "max_rel_diff (out, d/dx, d/df) vs ours": diffs,
        }
    results["meta"]["torch_threads"] = torch.get_num_threads()

    # 2. memory saved for backward, 3D 32768 float32
    p3, dom3, adj3, props3, f3, seed3 = setup(32, 3, device, torch.float32)
    ours3, _, _, _ = oursRunner(p3, dom3, adj3, props3, f3, seed3)
    _, _, torForward3 = torchRunner(p3, dom3, adj3, f3, seed3)
    edges = int(adj3.i.numel())
    held = (p3, dom3, adj3, f3, seed3)
    oursSaved = savedBytes(ours3, held)
    torchSaved = savedBytes(lambda: torForward3(), held)
    results["memory"] = {"N": int(p3.positions.shape[0]), "pairs": edges,
                         "ours_saved_bytes": oursSaved, "torch_saved_bytes": torchSaved,
                         "ours_bytes_per_edge": oursSaved / edges,
                         "torch_bytes_per_edge": torchSaved / edges}

    print(f"Gradient of a scalar (Naive), {device} {args.dtype}, median of {args.repeats} "
          "interleaved rounds (ms)")
    print(f"{'case':24s} {'ours':>8s} {'lean':>8s} {'libfloor':>8s} {'torch':>8s} "
          f"{'ours/lean':>9s} {'target':>7s}")
    print("-" * 78)
    for key, t in results["throughput"].items():
        r = t["rows"]
        for label, col, ratio, target in (("forward", "fwd_ms", "fwd_ratio_lean", "<= 1.3"),
                                          ("forward+backward", "fwd_bwd_ms",
                                           "fwd_bwd_ratio_lean", "<= 1.5")):
            print(f"{key + ' ' + str(t['N']) + ' ' + label:24s} {r['ours'][col]:8.2f} "
                  f"{r['lean'][col]:8.2f} {r['libfloor'][col]:8.2f} {r['torch'][col]:8.2f} "
                  f"{t[ratio]:9.2f} {target:>7s}")
        print(f"{key + ' ' + str(t['N']) + ' f+b d/d values':24s} "
              f"{r['ours_values']['fwd_bwd_ms']:8.2f} {r['lean_values']['fwd_bwd_ms']:8.2f} "
              f"{'':8s} {'':8s} {t['fwd_bwd_values_ratio_lean']:9.2f} {'<= 1.2':>7s}")
        print(f"{key + ' ' + str(t['N']) + ' fwd, new inputs':24s} "
              f"{r['ours_new']['fwd_ms']:8.2f} {r['lean']['fwd_ms']:8.2f} {'':8s} {'':8s} "
              f"{t['fwd_new_ratio_lean']:9.2f}")
        fmt = ", ".join
        print(f"  {key} max relative difference vs ours (out, d/dx, d/df): " + "; ".join(
            f"{name} " + fmt(f"{v:.1e}" for v in vals)
            for name, vals in t["max_rel_diff (out, d/dx, d/df) vs ours"].items()))
    print(f"  torch ran on {results['meta']['torch_threads']} threads, Warp's CPU kernels on one")
    m = results["memory"]
    print(f"Saved for backward, 3D {m['N']} float32, {m['pairs']} pairs: ours "
          f"{m['ours_saved_bytes'] / 2**20:.2f} MiB ({m['ours_bytes_per_edge']:.2f} B/edge), "
          f"torch edge list {m['torch_saved_bytes'] / 2**20:.1f} MiB "
          f"({m['torch_bytes_per_edge']:.1f} B/edge)")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
