"""Compile every Warp module of warpSPHCore for one device, in parallel, and report the time.

Imports every submodule of the package (so that every kernel and overload is registered),
then calls ``wp.force_load`` with ``--workers`` threads. Used by ``make gpu-check`` to warm
the kernel cache on a lent CUDA machine before the CUDA-marked tests, and to measure the cold
compile time of the whole library on that device.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
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

    import warpSPHCore

    for info in pkgutil.walk_packages(warpSPHCore.__path__, "warpSPHCore."):
        if ".demo" in info.name or info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    wp.init()
    t_import = time.perf_counter() - t0
    from warp._src.context import user_modules  # the registry of Warp modules

    mods = [m for name, m in user_modules.items() if name.startswith("warpSPHCore")]
    t1 = time.perf_counter()
    wp.force_load(device=args.device, modules=mods, max_workers=args.workers)
    t_load = time.perf_counter() - t1
    res = {"device": args.device, "workers": args.workers, "modules": len(mods),
           "import_s": t_import, "compile_s": t_load,
           "kernel_cache": str(wp.config.kernel_cache_dir)}
    print(json.dumps(res, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
