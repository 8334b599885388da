"""Domain-decomposition costs (`warpSPHCore.distributed`): the halo against the operators,
on 1, 2 and 4 gloo ranks of this machine, and a model of the halo fraction beyond it.

Cases: a jittered periodic lattice (jitter 0.2 dx) in the unit square, 100 x 100 = 10,000
particles, and in the unit cube, 22^3 = 10,648 particles; float64, Wendland2, support
H = 3 dx. The global set is decomposed with `decompose` (recursive coordinate bisection
along search cells of size H, each split in 4 per axis) and each rank, spawned with `warpSPHCore.distributed.spawn` (one
torch thread per process), times, per step:

* ``build``: `Halo.build` of its owned particles (collective, one host readback);
* ``extend``: ``halo.extend(f)`` of one scalar field (one differentiable exchange);
* ``operators``: Density + symmetric Gradient of f with the owned particles as queries and
  ``halo.particles(owned)`` as references (pre-assembled: the compute alone);
* ``step``: the whole distributed step, build + `halo.particles` + Density +
  `halo.particles` (densities) + `extend` + Gradient;
* bytes this rank sends per step for positions, supports, masses, densities and one scalar
  field (``halo.bytesPerExchange(d + 4, 8)``; the build's kinds, ids and image shifts not
  counted).

Every timed call starts after a barrier; per repeat the maximum over the ranks, then the
median over the repeats (ms). With one rank the halo is empty (nothing to send: the
operators' own periodic minimum image covers the box; the build still makes its collectives
and its readback). The bisection moves cuts by whole cells of H / 4 (`--cell` sets the
search cell in units of H). The machine's cores bound what the timings mean: 4 ranks on a 2-core machine
share the cores (a rank's operator time is then not a quarter of the 1-rank time).

The model (for sizes beyond this machine): a cubic block of n particles per rank, spacing
dx, side L = n^(1/d) dx, halo width H = 3 dx, receives about
``((L + 2 H)^d - L^d) / dx^d`` halo particles (square corners: it overcounts the rounded
corners of the true reach region). A slab of a 1D decomposition (one axis cut) receives
2 H / dx layers of its cross-section, a fraction 2 (H / dx) / (its layers). The measured
halo counts are compared with the box formula for each rank's actual block (the grown
extent on the cut axes only).

Prints tables and writes JSON (`--json`, default `benchmarks/results/distributed.json`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore import distributed as wd  # noqa: E402
from warpSPHCore.dataTypes.domain import DomainDescription  # noqa: E402
from warpSPHCore.dataTypes.operationProperties import OperationProperties  # noqa: E402
from warpSPHCore.dataTypes.particleState import ParticleState  # noqa: E402
from warpSPHCore.enumTypes import GradientScheme, KernelFunctions, WarpOperation  # noqa: E402
from warpSPHCore.operations import warpOperation  # noqa: E402

KERNEL = KernelFunctions.Wendland2
SUPPORT = 3.0  # H / dx


def lattice(d: int, side: int):
    """The replicated jittered periodic lattice of a case."""
    f64 = torch.float64
    dx = 1.0 / side
    axis = (torch.arange(side, dtype=f64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(*[axis] * d, indexing="ij"), -1).reshape(-1, d)
    g = torch.Generator().manual_seed(0)
    x = x + 0.2 * dx * (torch.rand(x.shape, generator=g, dtype=f64) - 0.5)
    n = x.shape[0]
    h = torch.full((n,), SUPPORT * dx, dtype=f64)
    m = torch.full((n,), dx ** d, dtype=f64)
    f = torch.sin(2 * math.pi * x).sum(dim=1)
    dom = DomainDescription(torch.zeros(d, dtype=f64), torch.ones(d, dtype=f64), [True] * d)
    return x, h, m, f, dom


def worker(rank, size, d, side, repeats, cell):
    """One rank: its timings per repeat (ms), counts and bytes."""
    import torch.distributed as dist

    density = OperationProperties(KERNEL, operation=WarpOperation.Density)
    gradient = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                                   gradientMode=GradientScheme.Symmetric)
    x, h, m, f, dom = lattice(d, side)
    ids = torch.arange(x.shape[0])
    dec = wd.decompose(dom, x, h, replicated=True,
                       cellSize=None if cell is None else cell * SUPPORT / side)
    own = wd.ownedSelection(dec, x)
    xo, ho, mo, fo, io = (t[own].contiguous() for t in (x, h, m, f, ids))
    kinds = torch.zeros(xo.shape[0], dtype=torch.int32)
    owned = ParticleState(xo, ho, mo, kinds)
    note = ""

    def build():
        return wd.Halo.build(dec, owned, ids=io)  # one rank: an empty halo

    def particles(halo, q):
        return q if halo is None else halo.particles(q)

    def extend(halo, t):
        return t if halo is None else halo.extend(t)

    def operators(q, refs, fRef):
        rho = warpOperation(q, density, dom, referenceParticles=refs)
        return rho, warpOperation(q, gradient, dom, queryValues=fo, referenceValues=fRef,
                                  referenceParticles=refs)

    def step():
        halo = build()
        rho = warpOperation(owned, density, dom, referenceParticles=particles(halo, owned))
        q = ParticleState(xo, ho, mo, kinds, rho)
        return warpOperation(q, gradient, dom, queryValues=fo, referenceValues=extend(halo, fo),
                             referenceParticles=particles(halo, q))

    def timed(fn):
        dist.barrier()
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    with torch.no_grad():
        halo = build()
        rho = warpOperation(owned, density, dom, referenceParticles=particles(halo, owned))
        q = ParticleState(xo, ho, mo, kinds, rho)
        refs, fRef = particles(halo, q), extend(halo, fo)
        for _ in range(2):  # warm-up (kernel loads, first-call allocations)
            operators(q, refs, fRef)
            step()
        ms = {"build": [], "extend": [], "operators": [], "step": []}
        for _ in range(repeats):
            ms["build"].append(timed(build))
            ms["extend"].append(timed(lambda: extend(halo, fo)))
            ms["operators"].append(timed(lambda: operators(q, refs, fRef)))
            ms["step"].append(timed(step))
    lo, hi = dec.bounds(rank)
    cut = [dec.blocks[rank][0][k] > 0 or dec.blocks[rank][1][k] < dec.cells[k]
           for k in range(d)]
    return {"rank": rank, "owned": int(xo.shape[0]), "halo": 0 if halo is None else halo.haloCount,
            "sent": 0 if halo is None else halo.route.sent,
            "bytesPerStep": 0 if halo is None else halo.bytesPerExchange(d + 4, 8),
            "extent": [b - a for a, b in zip(lo, hi)], "cut": cut, "ms": ms, "note": note}


def boxHalo(extents, cut, dx, H):
    """Box-formula halo particles of a block (its extents; only cut axes get a halo)."""
    grown = math.prod(e + (2 * H if c else 0.0) for e, c in zip(extents, cut))
    return (grown - math.prod(extents)) / dx ** len(extents)


def cubicModel(d, n, H=SUPPORT):
    """Halo particles of a cubic block of n particles (spacing 1, halo width H)."""
    L = n ** (1.0 / d)
    return (L + 2 * H) ** d - L ** d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side2d", type=int, default=100)
    ap.add_argument("--side3d", type=int, default=22)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cell", type=float, default=None,
                    help="bisection cell size in units of H (default: decompose's, H itself)")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    args = ap.parse_args(argv)

    rows = []
    t0 = time.perf_counter()
    for d, side in ((2, args.side2d), (3, args.side3d)):
        for P in args.ranks:
            res = wd.spawn(worker, P, d, side, args.repeats, args.cell, threads=1)
            med = {k: statistics.median(max(r["ms"][k][i] for r in res)
                                        for i in range(args.repeats))
                   for k in ("build", "extend", "operators", "step")}
            dx = 1.0 / side
            model = [boxHalo(r["extent"], r["cut"], dx, SUPPORT * dx) for r in res]
            rows.append({
                "d": d, "side": side, "particles": side ** d, "ranks": P, "ms": med,
                "exchangeOverOperators": med["extend"] / med["operators"],
                "owned": [r["owned"] for r in res], "halo": [r["halo"] for r in res],
                "sent": [r["sent"] for r in res],
                "bytesPerStep": [r["bytesPerStep"] for r in res],
                "haloModelBox": model, "notes": sorted({r["note"] for r in res if r["note"]})})
    wall = time.perf_counter() - t0

    print(f"Halo vs operators, jittered periodic lattice, float64, Wendland2, H = {SUPPORT:g} dx, "
          f"gloo ranks of this machine, one thread each; median of {args.repeats}, max over "
          "ranks (ms)")
    print("| case | ranks | owned (max) | halo (max) | halo/owned | build | extend | operators "
          "| step | extend/operators | KiB sent/step (max) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        i = max(range(r["ranks"]), key=lambda k: r["halo"][k])
        ratio = r["halo"][i] / r["owned"][i]
        empty = bool(r["notes"])  # no Halo object: nothing was built or exchanged
        build = "-" if empty else f"{r['ms']['build']:.2f}"
        extend = "-" if empty else f"{r['ms']['extend']:.2f}"
        ratio2 = "-" if empty else f"{r['exchangeOverOperators']:.3f}"
        print(f"| {r['d']}D {r['particles']:,} | {r['ranks']} | {max(r['owned']):,} | "
              f"{max(r['halo']):,} | {ratio:.2f} | {build} | {extend} | "
              f"{r['ms']['operators']:.1f} | {r['ms']['step']:.1f} | {ratio2} | "
              f"{max(r['bytesPerStep']) / 1024:.1f} |")
    for r in rows:
        for note in r["notes"]:
            print(f"  note ({r['d']}D, {r['ranks']} rank): {note}; the halo is empty (the "
                  "step is the operators alone)")

    print("\nMeasured halo per rank vs the box formula for each rank's block (cut axes only):")
    print("| case | ranks | measured halo per rank | box model per rank | measured/model |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["ranks"] == 1:
            continue
        meas, mod = r["halo"], r["haloModelBox"]
        print(f"| {r['d']}D {r['particles']:,} | {r['ranks']} | {meas} | "
              f"{[round(v) for v in mod]} | {sum(meas) / sum(mod):.3f} |")

    sizes = [10 ** k for k in range(3, 8)]
    model = {d: [{"perRank": n, "halo": cubicModel(d, n), "fraction": cubicModel(d, n) / n}
                 for n in sizes] for d in (2, 3)}
    print(f"\nModel: halo fraction (halo / owned) of a cubic block of n particles per rank, "
          f"H = {SUPPORT:g} dx, ((L + 2H)^d - L^d) / dx^d with L = n^(1/d) dx")
    print("| particles per rank | L / dx (2D) | 2D halo / owned | L / dx (3D) | 3D halo / owned |")
    print("|---|---|---|---|---|")
    for k, n in enumerate(sizes):
        print(f"| {n:.0e} | {n ** 0.5:.0f} | {model[2][k]['fraction']:.3f} | "
              f"{n ** (1 / 3):.0f} | {model[3][k]['fraction']:.3f} |")
    print(f"(whole benchmark {wall:.0f} s)")

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"support_over_dx": SUPPORT, "repeats": args.repeats,
                               "threadsPerRank": 1,
                               "cellOverH": args.cell, "cases": rows, "model": model,
                               "wall_s": wall}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
