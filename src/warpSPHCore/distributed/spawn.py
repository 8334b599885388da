"""`spawn`: run a function on N local processes with an initialised gloo process group, the
way `torchrun --nproc-per-node N` would, for tests, the `warpsph distributed-check` command
and notebooks (no launcher needed).
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

__all__ = ["spawn"]


def _worker(rank, fn, size, store, out, args, threads, specialize, timeout):
    import datetime

    import torch
    import torch.distributed as dist

    from ..autograd.specialize import setSpecialization

    torch.set_num_threads(threads)
    setSpecialization(specialize)
    extra = {} if timeout is None else {"timeout": datetime.timedelta(seconds=timeout)}
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size,
                            **extra)
    try:
        result = fn(rank, size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(Path(out) / f"rank{rank}.pkl", "wb") as f:
        pickle.dump(result, f)


def spawn(fn, nproc: int, *args, threads: int = 1, timeout: float | None = None):
    """Run ``fn(rank, size, *args)`` on `nproc` spawned processes joined in a gloo group;
    return the list of their return values (picklable), in rank order.

    `fn` must be importable by name (a module-level function): the processes are started
    with the ``spawn`` method (a forked Warp or CUDA context is unsafe). An exception in
    any process is raised here (torch.multiprocessing's ProcessRaisedException, with the
    worker's traceback). `threads` sets torch's intra-op threads in each process. The
    processes inherit this process's specialised-kernel setting
    (`autograd.specialize.setSpecialization`), so they compile the same kernels, and its
    environment (``TORCH_DISTRIBUTED_DEBUG=DETAIL`` makes a collective that the ranks call
    differently raise at once, naming both: docs/troubleshooting.md). `timeout`: seconds a
    collective waits for the other ranks before it raises (the process group's timeout;
    default torch's, 30 minutes: a rank that compiles kernels cold keeps the others waiting).
    """
    import torch.multiprocessing as mp

    from ..autograd.specialize import specializationEnabled

    if nproc < 1:
        raise ValueError(f"spawn: nproc={nproc}; accepted: >= 1")
    with tempfile.TemporaryDirectory(prefix="warpsph-dist-") as tmp:
        store = os.path.join(tmp, "store")
        mp.start_processes(_worker, args=(fn, nproc, store, tmp, args, threads,
                                          specializationEnabled(), timeout),
                           nprocs=nproc, join=True, start_method="spawn")
        results = []
        for r in range(nproc):
            with open(Path(tmp) / f"rank{r}.pkl", "rb") as f:
                results.append(pickle.load(f))
    return results
