"""Step times of the shipped cases (`make bench`): each case at its default particle count,
run for a short time through ``warpsph run``'s own code path (`fluids.cases.CASES`), one CPU
thread, float64; prints ``msPerStep`` (the case's own measure: the steps' wall time over
their count, search and health checks included) and writes JSON (`--json`, default
`benchmarks/results/cases.json`).

The script uses only the cases' configs and ``run`` and their ``results.json`` keys, so the
same command compares two checkouts of the library on one machine (``PYTHONPATH=other/src
python benchmarks/bench_cases.py``), e.g. before and after a change to the solver layer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--keep-path" not in sys.argv:
    sys.path.insert(0, str(ROOT / "src"))

#: case -> the short-run overrides of its config (the default particle count is kept)
RUNS = {
    "tgv": {"t": 0.05, "relax": 0},
    "poiseuille": {"t": 0.05},
    "cavity": {"t": 0.2},
    "hydrostatic": {"tEnd": 0.5},
    "dambreak": {"tEnd": 0.5},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(RUNS))
    ap.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    ap.add_argument("--keep-path", action="store_true",
                    help="import warpSPHCore from PYTHONPATH, not this checkout")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "cases.json"))
    args = ap.parse_args(argv)
    import statistics

    from warpSPHCore.fluids.cases import CASES

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases:
            if name not in CASES:
                print(f"  {name:12s} (not in this version)")
                continue
            case = CASES[name]
            fields = {f.name for f in dataclasses.fields(case.config)}
            overrides = {k: v for k, v in RUNS.get(name, {}).items() if k in fields}
            config = case.config(**overrides)
            case.run(config, Path(tmp) / name, quiet=True)  # warm-up: kernels, allocator
            times = [case.run(config, Path(tmp) / name, quiet=True)
                     for _ in range(args.repeats)]
            ms = statistics.median(r["msPerStep"] for r in times)
            rows[name] = {"msPerStep": ms, "particles": times[0]["particles"],
                          "steps": times[0]["steps"], "stepper": times[0].get("stepper")}
            print(f"  {name:12s} {times[0]['particles']:6d} particles  {ms:8.2f} ms per step "
                  f"({times[0]['steps']} steps, median of {args.repeats})", flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
