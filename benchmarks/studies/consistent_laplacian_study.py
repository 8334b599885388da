"""Study: convergence of SPH Laplacians on jittered particles, Brookshaw (plain and
renormalized, the library's LaplacianScheme.Brookshaw) vs the first-order-consistent scheme
with the Fatehi & Manzari (2011, Comput. Math. Appl. 61: 482-498) structure, computed with the
float64 NumPy reference `tests/operations/consistent_laplacian_reference.py` (its docstring
states the formula), before any Warp kernel is written.

Setup: f = sin(2 pi x) cos(2 pi y) on the periodic unit square, lap f = -8 pi^2 f; n x n
cell-centred lattices moved by uniform(-1/2, 1/2) * jitter * dx per coordinate (the demo's
convention, fixed seed), Wendland2 with support radius h = 2.5 dx, volumes V_i = 1/sum_j W_ij.
Errors: relative RMS (||e||_2 / ||lap f||_2) and relative max (max|e| / max|lap f|) over all
particles (for the Hessian over all components); orders are least-squares slopes of
log(error) against log(dx). Also reported: the consistent Hessian's errors, the same
consistent Laplacian on the regular lattice (jitter 0), and, with --heat, the heat equation
u_t = lap u from u0 = f on the frozen particles (Heun steps, dt = 0.05 dx^2, to t = 0.01; the
exact solution decays by exp(-8 pi^2 t)).

Run: python benchmarks/studies/consistent_laplacian_study.py [--ns 16 24 32 48 64] [--heat]
Prints a table and writes benchmarks/results/consistent_laplacian.json (or --json PATH).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "consistent_laplacian_reference",
    ROOT / "tests" / "operations" / "consistent_laplacian_reference.py")
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

K = 2.0 * math.pi
SCHEMES = ("Brookshaw", "Brookshaw+L", "consistent")


def _field(x):
    f = np.sin(K * x[:, 0]) * np.cos(K * x[:, 1])
    hess = np.empty((len(x), 2, 2))
    hess[:, 0, 0] = hess[:, 1, 1] = -K * K * f
    hess[:, 0, 1] = hess[:, 1, 0] = -K * K * np.cos(K * x[:, 0]) * np.sin(K * x[:, 1])
    return f, -2.0 * K * K * f, hess


def _errors(out, exact):
    e = out - exact
    return (float(np.sqrt(np.mean(e**2)) / np.sqrt(np.mean(exact**2))),
            float(np.abs(e).max() / np.abs(exact).max()))


def _heat(p, a, u0, dx, tEnd=0.01):
    """Heun steps of u_t = sum_j a_ij (u_j - u_i); relative RMS error at tEnd."""
    steps = int(math.ceil(tEnd / (0.05 * dx * dx)))
    dt = tEnd / steps
    u = u0.copy()
    for _ in range(steps):
        k1 = ref.applyPairCoefficients(p, a, u)
        k2 = ref.applyPairCoefficients(p, a, u + dt * k1)
        u = u + 0.5 * dt * (k1 + k2)
    exact = u0 * math.exp(-2.0 * K * K * tEnd)
    return float(np.linalg.norm(u - exact) / np.linalg.norm(exact)), steps


def atResolution(n, jitter, hOverDx, seed, box, heat):
    x, dx, h = ref.jitteredLattice(n, 2, jitter=jitter, hOverDx=hOverDx, seed=seed)
    pairs = ref.findPairs(x, h, box)
    V = ref.shepardVolumes(x, h, box, pairs)
    f, lap, hess = _field(x)
    L = ref.renormalizationMatrices(x, V, h, box, pairs)
    outs = {
        "Brookshaw": ref.brookshawLaplacian(x, V, h, f, box, pairs=pairs),
        "Brookshaw+L": ref.brookshawLaplacian(x, V, h, f, box, L=L, pairs=pairs),
        "consistent": ref.consistentLaplacian(x, V, h, f, box, pairs),
    }
    res = {"n": n, "N": len(x), "dx": dx, "pairs": int(len(pairs.i)),
           "errors": {s: _errors(outs[s], lap) for s in SCHEMES}}
    H, diag = ref.consistentHessian(x, V, h, f, box, pairs, returnDiagnostics=True)
    res["hessianErrors"] = (float(np.linalg.norm(H - hess) / np.linalg.norm(hess)),
                            float(np.abs(H - hess).max() / np.abs(hess).max()))
    res["maxCondA"] = float(diag["cond"].max())
    if jitter > 0:
        xr, _, _ = ref.jitteredLattice(n, 2, jitter=0.0, hOverDx=hOverDx, seed=seed)
        pr = ref.findPairs(xr, h, box)
        fr, lapr, _ = _field(xr)
        res["regularLattice"] = _errors(
            ref.consistentLaplacian(xr, ref.shepardVolumes(xr, h, box, pr), h, fr, box, pr),
            lapr)
    if heat:
        pb, ab = ref.brookshawPairCoefficients(x, V, h, box, pairs)
        pc, ac = ref.laplacianPairCoefficients(x, V, h, box, pairs)
        res["heat"] = {"Brookshaw": _heat(pb, ab, f, dx)[0], "consistent": _heat(pc, ac, f, dx)[0]}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 24, 32, 48, 64],
                    help="particles per axis")
    ap.add_argument("--jitter", type=float, default=0.3, help="jitter width in dx")
    ap.add_argument("--h", type=float, default=2.5, help="support radius in dx")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heat", action="store_true", help="also run the heat-equation check")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" /
                    "consistent_laplacian.json")
    args = ap.parse_args()

    box = ref.Box(np.zeros(2), np.ones(2), np.array([True, True]))
    t0 = time.perf_counter()
    rows = [atResolution(n, args.jitter, args.h, args.seed, box, args.heat) for n in args.ns]
    seconds = time.perf_counter() - t0
    dxs = [r["dx"] for r in rows]
    orders = {s: {"rms": ref.fitOrder(dxs, [r["errors"][s][0] for r in rows]),
                  "max": ref.fitOrder(dxs, [r["errors"][s][1] for r in rows])} for s in SCHEMES}
    orders["consistent Hessian"] = {
        "rms": ref.fitOrder(dxs, [r["hessianErrors"][0] for r in rows]),
        "max": ref.fitOrder(dxs, [r["hessianErrors"][1] for r in rows])}
    if args.jitter > 0:
        orders["consistent, regular lattice"] = {
            "rms": ref.fitOrder(dxs, [r["regularLattice"][0] for r in rows]),
            "max": ref.fitOrder(dxs, [r["regularLattice"][1] for r in rows])}
    if args.heat:
        orders["heat"] = {s: ref.fitOrder(dxs, [r["heat"][s] for r in rows])
                          for s in ("Brookshaw", "consistent")}

    print(f"2D periodic, f = sin(2 pi x) cos(2 pi y), jitter {args.jitter} dx, "
          f"h = {args.h} dx, Wendland2, V = 1/sum W, seed {args.seed} ({seconds:.1f} s)")
    print("relative RMS / max error of the Laplacian:")
    head = f"{'n':>4} {'N':>6} " + " ".join(f"{s:>23}" for s in SCHEMES)
    head += f" {'consistent Hessian':>23}" + (f" {'regular':>10}" if args.jitter > 0 else "")
    print(head)
    for r in rows:
        line = f"{r['n']:>4} {r['N']:>6} " + " ".join(
            f"{r['errors'][s][0]:>11.3e} {r['errors'][s][1]:>11.3e}" for s in SCHEMES)
        line += f" {r['hessianErrors'][0]:>11.3e} {r['hessianErrors'][1]:>11.3e}"
        if args.jitter > 0:
            line += f" {r['regularLattice'][0]:>10.3e}"
        print(line)
    print("order " + "".ljust(6) + " ".join(
        f"{orders[s]['rms']:>11.2f} {orders[s]['max']:>11.2f}" for s in SCHEMES)
        + " " + " ".join(f"{orders['consistent Hessian'][k]:>11.2f}" for k in ("rms", "max"))
        + (f" {orders['consistent, regular lattice']['rms']:>10.2f}" if args.jitter > 0 else ""))
    if args.heat:
        print("heat equation to t = 0.01 (Heun, dt = 0.05 dx^2), relative RMS error:")
        for r in rows:
            print(f"{r['n']:>4}  Brookshaw {r['heat']['Brookshaw']:.3e}  "
                  f"consistent {r['heat']['consistent']:.3e}")
        print(f"order Brookshaw {orders['heat']['Brookshaw']:.2f}, "
              f"consistent {orders['heat']['consistent']:.2f}")

    out = {"meta": {"field": "sin(2 pi x) cos(2 pi y)", "domain": "periodic [0,1)^2",
                    "kernel": "Wendland2", "hOverDx": args.h, "jitter": args.jitter,
                    "seed": args.seed, "volumes": "1/sum_j W_ij", "dtype": "float64",
                    "errors": "relative (rms, max)", "seconds": seconds,
                    "numpy": np.__version__, "platform": platform.platform()},
           "rows": rows, "orders": orders}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
