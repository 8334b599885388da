"""Forward-mode benchmark (`make bench`): the Gradient's geometry JVP against our own
primal and torch forward-mode AD over a pure-torch edge list, same CSR, same run.

2D 16384 (jittered periodic lattice, Wendland2, ~50 neighbours, CSR), a scalar field, Naive
scheme with V_j = m_j / rho_j, tangent on the positions:

* primal: `warpOperation(Gradient)` without grad (the reference time);
* ours JVP: `warpOperationJVP(queryTangentState=ParticleTangentState(positions=v))`;
* ours dual: the same through `torch.autograd.forward_ad` dual positions and `warpOperation`
  (one liveness readback, then the same kernel);
* torch forward AD: the edge-list Gradient of `bench_gradient.torchRunner` evaluated on dual
  positions (torch's forward-mode rules for gather, norm, pow, index_add_);
* nothing live: `warpOperation` with dual positions whose tangent is zero (pruning and the
  batched mask; the tangent returned is an exact zero).

Targets: JVP <= 3x our primal forward, <= 0.5x torch forward AD; nothing-live dual call
<= 1.5x the no-grad primal. Tangents are compared element by element. Prints a table of
medians over interleaved rounds and writes JSON (`--json`, default
`benchmarks/results/jvp.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.autograd.forward_ad as fwAD
import warp as wp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_gradient import _sync, setup, torchWendland2Gradient  # noqa: E402
from run import cpuInfo  # noqa: E402

from warpSPHCore import ParticleState, ParticleTangentState  # noqa: E402
from warpSPHCore.operations import warpOperation, warpOperationJVP  # noqa: E402


def runners(p, dom, adj, props, f, v):
    n, d = p.positions.shape
    i, j = adj.i.long(), adj.j.long()
    L = dom.max - dom.min
    V = (p.masses / p.densities).detach()
    h = p.supports.detach()[i]

    def primal():
        with torch.no_grad():
            return warpOperation(p, props, dom, queryValues=f, adjacency=adj)

    def jvp():
        with torch.no_grad():
            return warpOperationJVP(p, props, dom, queryValues=f, adjacency=adj,
                                    queryTangentState=ParticleTangentState(positions=v))

    def dual(tangent=v):
        with torch.no_grad(), fwAD.dual_level():
            pos = fwAD.make_dual(p.positions, tangent)
            q = ParticleState(pos, p.supports, p.masses, p.kinds, p.densities)
            out = warpOperation(q, props, dom, queryValues=f, adjacency=adj)
            return fwAD.unpack_dual(out).tangent

    def deadDual():
        return dual(torch.zeros_like(v))

    def torchForwardAD():
        with torch.no_grad(), fwAD.dual_level():
            pos = fwAD.make_dual(p.positions, v)
            x_ij = pos[i] - pos[j]
            x_ij = x_ij - L * torch.round(x_ij / L)
            g = (f[j] * V[j])[:, None] * torchWendland2Gradient(x_ij, h, d)
            out = torch.zeros(n, d, dtype=p.positions.dtype,
                              device=p.positions.device).index_add(0, i, g)
            return fwAD.unpack_dual(out).tangent

    return {"primal": primal, "jvp": jvp, "dual": dual, "dead_dual": deadDual,
            "torch_fwd_ad": torchForwardAD}


def interleavedMedians(fns, repeats, device):
    times = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    _sync(device)
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "jvp.json"))
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    p, dom, adj, props, f, _ = setup(128, 2, device, dtype)
    v = torch.randn(p.positions.shape, generator=torch.Generator().manual_seed(7),
                    dtype=torch.float64).to(device=device, dtype=dtype)
    fns = runners(p, dom, adj, props, f, v)
    ref = fns["torch_fwd_ad"]()
    ours = fns["jvp"]()
    diff = {k: float((fns[k]() - ref).abs().max() / ref.abs().max()) for k in ("jvp", "dual")}
    dead = fns["dead_dual"]()
    ms = interleavedMedians(fns, args.repeats, device)
    res = {
        "meta": {"dtype": args.dtype, "device": str(device), "host": cpuInfo(), "torch": torch.__version__,
                 "warp": wp.config.version, "torch_threads": torch.get_num_threads()},
        "N": int(p.positions.shape[0]), "pairs": int(adj.i.numel()), "median_ms": ms,
        "jvp_over_primal": ms["jvp"] / ms["primal"],
        "jvp_over_torch_fwd_ad": ms["jvp"] / ms["torch_fwd_ad"],
        "dual_over_primal": ms["dual"] / ms["primal"],
        "dead_dual_over_primal": ms["dead_dual"] / ms["primal"],
        "max_rel_diff_vs_torch": diff, "dead_dual_tangent_is_zero": bool((dead == 0).all()),
        "jvp_shape": list(ours.shape),
    }
    print(f"Gradient JVP (positions), 2D {res['N']}, {res['pairs']} pairs, {device} {args.dtype}, "
          f"median of {args.repeats} interleaved rounds")
    print(f"{'case':28s} {'ms':>9s} {'ratio':>8s} {'target':>22s}")
    print("-" * 70)
    print(f"{'primal forward (no grad)':28s} {ms['primal']:9.2f} {1.0:8.2f}")
    print(f"{'warpOperationJVP':28s} {ms['jvp']:9.2f} {res['jvp_over_primal']:8.2f} "
          f"{'<= 3x primal':>22s}")
    print(f"{'dual tensors (1 readback)':28s} {ms['dual']:9.2f} {res['dual_over_primal']:8.2f}")
    print(f"{'torch forward AD, edge list':28s} {ms['torch_fwd_ad']:9.2f} "
          f"{ms['torch_fwd_ad'] / ms['primal']:8.2f}")
    print(f"{'  ours JVP / torch fwd AD':28s} {'':9s} {res['jvp_over_torch_fwd_ad']:8.2f} "
          f"{'<= 0.5x':>22s}")
    print(f"{'dual call, nothing live':28s} {ms['dead_dual']:9.2f} "
          f"{res['dead_dual_over_primal']:8.2f} {'<= 1.5x primal':>22s}")
    print(f"  torch ran on {res['meta']['torch_threads']} threads, Warp's CPU kernels on one; "
          f"max relative difference vs torch: JVP {diff['jvp']:.1e}, dual {diff['dual']:.1e}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
