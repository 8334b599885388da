"""`scripts/benchmarks/count_host_syncs.py` runs and reports the allowed readbacks only: one
for the neighbour search (neighborhood/flags.py), one for the dual-tensor call
(stateAwareWarpFunction's liveness mask), 0 for every other stage of the step."""

from __future__ import annotations

import importlib.util
import pathlib

import torch

_PATH = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "benchmarks" / \
    "count_host_syncs.py"


def test_step_census():
    spec = importlib.util.spec_from_file_location("count_host_syncs", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    n, rows = mod.run(torch.device("cpu"), torch.float64, 12)
    assert n == 144
    counts = {name: (total, dict(sites)) for name, total, sites in rows}
    for name, (total, sites) in counts.items():
        if name == "neighbour search":
            assert total == 1 and all(s.startswith("/neighborhood/flags.py") for s in sites)
        elif name == "dual-tensor Gradient":
            assert total == 1 and all("_liveTangentMask" in s for s in sites)
        else:
            assert total == 0, (name, sites)
    assert len(counts) == 8
