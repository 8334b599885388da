"""Migration (`migrate`): after particles move, each goes to the rank that owns its new
position, with every per-particle field.

Collective, one host readback (the counts). The rows a rank keeps travel through the same
all-to-all (its own slot), so the result does not depend on which particles stayed. With
global ids the received particles are sorted by id, which makes the local order, and with it
every result, independent of the order the particles arrived in. Differentiable in reverse
and forward mode (a migration is a permutation of rows across the ranks): a rollout with
migrations between the steps differentiates through them.
"""

from __future__ import annotations

import torch

from ._comm import (
    Route,
    checkCodes,
    collective,
    commDevice,
    consistencyCode,
    exchangeCounts,
    processGroup,
)

__all__ = ["migrate", "ownedSelection", "rebalance"]


def migrate(decomposition, positions: torch.Tensor, *fields, ids: torch.Tensor | None = None):
    """Send every particle to the owner of `positions` (module docstring).

    Args:
        decomposition: the `Decomposition` that defines ownership.
        positions: ``[N, d]`` current positions on this rank.
        *fields: other per-particle tensors ``[N, ...]`` (any dtype; None stays None).
        ids: int64 ``[N]`` global ids; the result is sorted by them.

    Returns:
        ``(positions, *fields, ids)`` on the new owners (``ids`` last when given).

    Raises:
        RuntimeError: no initialised process group.
        TypeError: the ranks disagree on dtype, device type or dimension.
        ValueError: a field whose first dimension is not N.
    """
    where = "migrate"
    group, rank, size = processGroup(where, decomposition.group)
    named = f"{where} (rank {rank})"  # errors name the rank; calls do not
    import torch.distributed as dist

    n, d = int(positions.shape[0]), int(positions.shape[1])
    for k, f in enumerate(fields):
        if f is not None and f.shape[0] != n:
            raise ValueError(f"{named}: field {k} has {f.shape[0]} rows; accepted: {n} (the "
                             "rows of positions)")
    if ids is not None and (ids.shape != (n,) or ids.dtype != torch.int64):
        raise ValueError(f"{named}: ids must be int64 [{n}] (got {ids.dtype} {tuple(ids.shape)})")
    owner = decomposition.owners(positions)
    sendIndex = torch.argsort(owner, stable=True)
    counts = torch.zeros(size, dtype=torch.int64, device=owner.device)
    counts.scatter_add_(0, owner, torch.ones_like(owner))
    code = consistencyCode(positions.dtype, positions.device, d,
                           commDevice(group, positions.device))
    with collective(f"{where} (agreement)", group, (2,), code.device):
        dist.all_reduce(code, op=dist.ReduceOp.MAX, group=group)
    sendCounts, recvCounts, extra = exchangeCounts(counts, group, code, where)  # one readback
    checkCodes(named, extra, positions.dtype, positions.device, d)
    route = Route(sendIndex, sendCounts, recvCounts, n, group, "migration")
    tensors = (positions,) + tuple(fields) + ((ids,) if ids is not None else ())
    moved = route.gather(*tensors)
    if len(tensors) == 1:
        moved = (moved,)
    if ids is not None:
        order = torch.argsort(moved[-1])
        moved = tuple(None if t is None else t.index_select(0, order) for t in moved)
    return moved


def rebalance(decomposition, positions: torch.Tensor, *fields,
              ids: torch.Tensor | None = None, weights: torch.Tensor | None = None):
    """Rebalance on request: a new bisection of the particles as they are now (the same
    search cell, subdivision and minimum width; `weights` a cost per particle, default the
    count), then `migrate` to it. Collective.

    Returns:
        ``(newDecomposition, positions, *fields[, ids])``.
    """
    from .decomposition import decompose

    new = decompose(decomposition.domain(positions.dtype, positions.device), positions,
                    weights=weights, cellSize=decomposition.cellSize,
                    subdivide=decomposition.subdivide, minWidth=decomposition.minWidth,
                    group=decomposition.group)
    return (new,) + tuple(migrate(new, positions, *fields, ids=ids))


def ownedSelection(decomposition, positions: torch.Tensor) -> torch.Tensor:
    """Bool ``[N]``: the rows of a replicated set (the same particles on every rank) that
    this rank owns; select them instead of migrating a replicated start."""
    return decomposition.owners(positions) == decomposition.rank
