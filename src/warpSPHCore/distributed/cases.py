"""The validation cases of ``warpsph run`` across ranks (`runCase`): each rank runs the
case's own code, whose simulation is a `DistributedSimulation` (`fluids.cases._common.
simulationFactory`); the cases read the gathered state, so their results are those of one
process to rounding. Rank 0 writes the results and figures (with a ``distributed`` entry:
the ranks' sizes and seconds per step of migration, halo build and exchange); the other
ranks write into a temporary folder that is removed.

Under torchrun (``torchrun --nproc-per-node N -- warpsph run CASE ...``: the ``--`` keeps
torchrun from reading the case's options as abbreviations of its own) the process group is
the launcher's; ``warpsph run CASE --nproc N`` spawns N local gloo processes (`spawn`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ._comm import processGroup
from .simulation import DistributedSimulation
from .spawn import spawn

__all__ = ["runCase", "spawnCase"]


def runCase(name: str, config, out, *, writer=None, quiet: bool = False,
            rebalanceEvery: int = 0, group=None) -> dict:
    """Run the registered case `name` with `config` on every rank of the initialised
    process group (collective). Returns the results (on every rank; rank 0 writes them to
    ``out/results.json``).

    Raises:
        ValueError: an unknown case; a case the distributed simulation does not run (open
            boundaries), naming the rank.
    """
    from ..fluids.cases import CASES
    from ..fluids.cases._common import simulationFactory

    _, rank, size = processGroup("runCase", group)
    if name not in CASES:
        raise ValueError(f"runCase (rank {rank}): no case {name!r}; accepted: "
                         f"{', '.join(CASES)}")
    made = []

    def factory(scheme, particles, state, dt, **keywords):
        sim = DistributedSimulation(scheme, particles, state, dt,
                                    rebalanceEvery=rebalanceEvery, group=group, **keywords)
        made.append(sim)
        return sim

    target = Path(out) if rank == 0 else Path(tempfile.mkdtemp(prefix=f"warpsph-rank{rank}-"))
    try:
        with simulationFactory(factory):
            results = CASES[name].run(config, target, writer=writer, quiet=quiet or rank != 0)
        import torch.distributed as dist

        timings = [None] * size
        dist.all_gather_object(timings, made[-1].timings if made else None, group=group)
    finally:
        if rank != 0:
            shutil.rmtree(target, ignore_errors=True)
    results["distributed"] = {"ranks": size, "rebalanceEvery": rebalanceEvery,
                              "perRank": timings}
    if rank == 0:
        (target / "results.json").write_text(json.dumps(results, indent=2))
    return results


def _spawned(rank, size, name, config, out, writer, quiet, rebalanceEvery):
    return runCase(name, config, out, writer=writer, quiet=quiet,
                   rebalanceEvery=rebalanceEvery)


def spawnCase(name: str, config, out, nproc: int, *, writer=None, quiet: bool = False,
              rebalanceEvery: int = 0) -> dict:
    """`runCase` on `nproc` spawned local gloo processes (`spawn`); returns rank 0's
    results."""
    return spawn(_spawned, nproc, name, config, str(out), writer, quiet, rebalanceEvery,
                 threads=max(1, int(getattr(config, "threads", 1) or 1)))[0]
