"""Compile every Warp module of warpSPHCore for one device, in parallel, and report the time
(`warpsph precompile` with a JSON report, for `make gpu-check`).

Used by ``make gpu-check`` to warm the kernel cache on a lent CUDA machine before the
CUDA-marked tests, and to measure the cold compile time of the whole library on that device.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    import warp as wp

    from warpSPHCore.precompile import precompile

    t_import = time.perf_counter() - t0
    out = precompile([args.device], workers=args.workers)
    res = {"device": args.device, "workers": args.workers, "modules": len(out["modules"]),
           "import_s": t_import, "compile_s": out["seconds"],
           "kernel_cache": str(wp.config.kernel_cache_dir)}
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
