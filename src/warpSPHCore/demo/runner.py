"""`warpsph demo`: run the parts, write ``results.json`` and ``report.md`` next to the figures,
print a summary table.

Parts (each also alone: ``warpsph demo accuracy|inverse|jfnk|tgv|viscosity|learn|search``):

1. ``accuracy``: SPH derivatives on jittered lattices, plain vs CRK vs renormalized (and the
   consistent Laplacian), orders, quadratic reproduction and a heat equation;
2. ``inverse``: particle positions optimised with torch.optim (reverse mode) so that their
   density draws a ring;
3. ``jfnk``: two implicit problems (a nonlinear wave equation, a Lagrangian position step
   through geometry JVPs) by Newton-GMRES in float32 and float64, with matvecs from dual
   tensors, `warpOperationJVP` and finite differences (a sensible and a bad step);
4. ``tgv``: the Taylor-Green vortex case (``warpsph run tgv``) at a small size, into
   ``out/tgv`` (`demo.tgv`);
5. ``viscosity``: an inverse problem over a rollout: the viscosity of a Taylor-Green flow
   recovered from its velocity field by L-BFGS through reverse mode of the simulation
   (`demo.viscosity`);
6. ``learn``: a solver-in-the-loop result: a three-coefficient closure of a coarse scheme
   trained through batched differentiable rollouts, evaluated on held-out random flows
   against a fine run (`demo.learn`);
7. ``search``: the neighbour search on a jittered lattice against brute force (run by
   ``all`` too, at its small default size).
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import torch

from . import accuracy, inverse, jfnk, learn, tgv, viscosity

__all__ = ["PARTS", "runParts", "writeReport"]

PARTS = {"accuracy": accuracy.run, "inverse": inverse.run, "jfnk": jfnk.run, "tgv": tgv.run,
         "viscosity": viscosity.run, "learn": learn.run}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float):
        # strict JSON has no inf / nan (a diverged run): written as strings
        return x if math.isfinite(x) else str(x)
    if isinstance(x, (int, str, bool)) or x is None:
        return x
    return str(x)


def runParts(names, out: Path, size="default", device="cpu", quiet=False) -> dict:
    """Run the named parts (in order) and return ``{name: summary}`` with their wall times."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in names:
        t0 = time.perf_counter()
        res = PARTS[name](out, size=size, device=device, quiet=quiet)
        res["wallSeconds"] = time.perf_counter() - t0
        results[name] = res
    return results


def writeReport(results: dict, out: Path, size: str, device, extra=None) -> Path:
    """``report.md`` (the parts' sections, the figures embedded) and ``results.json``."""
    import warp as wp

    from .. import __version__

    out = Path(out)
    head = ["# warpSPHCore demo report", "",
            f"warpSPHCore {__version__}, torch {torch.__version__}, warp-lang {wp.config.version},"
            f" Python {platform.python_version()}, device {device}, size `{size}`, "
            f"{time.strftime('%Y-%m-%d %H:%M')}. Every number below was computed by this run "
            "(`results.json` has them all).", ""]
    body = [results[name]["report"] for name in results]
    times = ["## Run time", "", "| part | seconds |", "|---|---|"]
    times += [f"| {name} | {r['wallSeconds']:.1f} |" for name, r in results.items()]
    if extra:
        body.append(extra)
    path = out / "report.md"
    path.write_text("\n".join(head + body + times) + "\n")
    (out / "results.json").write_text(json.dumps(_jsonable(
        {name: {k: v for k, v in r.items() if k != "report"} for name, r in results.items()}),
        indent=2))
    return path


def printSummary(results: dict) -> None:
    rows = [(q, v) for r in results.values() for q, v in r.get("table", [])]
    rows += [(f"{name}: wall seconds", f"{r['wallSeconds']:.1f}") for name, r in results.items()]
    width = max(len(q) for q, _ in rows)
    print()
    print("warpSPHCore demo summary")
    print("-" * (width + 22))
    for q, v in rows:
        print(f"  {q:{width}s}  {v}")
