"""Particle order: a spatial sort that keeps neighbours close in memory.

An operator's kernel reads, for each query, the positions and fields of its neighbours.
When the particles are stored in an order unrelated to space (read from a file, sampled at
random, or mixed by a flow after many steps), consecutive queries read scattered memory and
the traversal waits on it: at 262,144 particles in 2D (CSR list, search + Density + Gradient
forward and backward, one CPU thread) a random order costs about twice the lattice order
(docs/performance.md, "Particle order"). Sorting the particles by cell restores the speed.

* `cellOrder(positions, cellSize, scenes=None)`: the permutation that sorts the particles by
  the Morton (Z-order) index of cells of side `cellSize` (the support is a good choice), so
  that particles of one cell are consecutive and nearby cells are mostly nearby in memory; with
  scene indices, each scene's particles stay together (scene first, then cell). Ties keep the
  input order (a stable sort), so the result depends only on the positions.
* `reorder(obj, order)`: a tensor, or a dataclass such as `ParticleState`, `fluids.FluidState`,
  `fluids.ParticleSet` or `fluids.Rates`, with every per-particle tensor (first dimension N)
  taken in the new order (``t[order]``: differentiable, gradients flow back to the old order).
* `inverseOrder(order)`: the permutation back, ``reorder(reorder(x, order), inverseOrder(order))
  == x``.

``order[k]`` is the old index of the particle now in slot k: keep it to map results back to
the particles' original numbering (compose two sorts as ``order1[order2]``). No host
synchronisation: everything stays on the positions' device.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["cellOrder", "reorder", "inverseOrder"]

# bits per axis of the Morton index (d * bits <= 63 keeps it a non-negative int64)
_BITS = {1: 62, 2: 31, 3: 21}


def _spread2(v: torch.Tensor) -> torch.Tensor:
    """The 31 low bits of v on the even bit positions of an int64."""
    v = v & 0x7FFFFFFF
    v = (v | (v << 16)) & 0x0000FFFF0000FFFF
    v = (v | (v << 8)) & 0x00FF00FF00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0F
    v = (v | (v << 2)) & 0x3333333333333333
    return (v | (v << 1)) & 0x5555555555555555


def _spread3(v: torch.Tensor) -> torch.Tensor:
    """The 21 low bits of v on every third bit position of an int64."""
    v = v & 0x1FFFFF
    v = (v | (v << 32)) & 0x1F00000000FFFF
    v = (v | (v << 16)) & 0x1F0000FF0000FF
    v = (v | (v << 8)) & 0x100F00F00F00F00F
    v = (v | (v << 4)) & 0x10C30C30C30C30C3
    return (v | (v << 2)) & 0x1249249249249249


def mortonKey(cells: torch.Tensor) -> torch.Tensor:
    """``[N]`` int64 Morton index of non-negative int64 cell coordinates ``[N, d]`` (d <= 3;
    coordinates are clamped to the index's bits per axis)."""
    d = cells.shape[1]
    c = cells.clamp(0, (1 << _BITS[d]) - 1)
    if d == 1:
        return c[:, 0]
    if d == 2:
        return _spread2(c[:, 0]) | (_spread2(c[:, 1]) << 1)
    return _spread3(c[:, 0]) | (_spread3(c[:, 1]) << 1) | (_spread3(c[:, 2]) << 2)


def cellOrder(positions: torch.Tensor, cellSize, scenes: torch.Tensor | None = None
              ) -> torch.Tensor:
    """The permutation that sorts particles by cell in Morton order (module docstring).

    Args:
        positions: ``[N, d]`` positions, d = 1, 2 or 3 (float32 or float64).
        cellSize: the side of the cells, a positive number (e.g. the largest support).
        scenes: ``[N]`` int32 scene indices (each scene's particles kept together, scenes in
            increasing order), or None.

    Returns:
        ``[N]`` int64 on the positions' device: ``order[k]`` is the old index of the particle
        placed in slot k (apply it with `reorder`).

    Raises:
        ValueError: positions not ``[N, d]`` with d in 1..3, a cell size that is not a
            positive finite number, or scenes not ``[N]``.
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() != 2 \
            or positions.shape[1] not in _BITS or not positions.is_floating_point():
        what = (f"a tensor of shape {tuple(positions.shape)} and dtype {positions.dtype}"
                if isinstance(positions, torch.Tensor) else f"a {type(positions).__name__}")
        raise ValueError(f"cellOrder: positions is {what}; accepted: a floating tensor "
                         "[N, d] with d = 1, 2 or 3")
    size = float(cellSize) if isinstance(cellSize, (int, float)) and \
        not isinstance(cellSize, bool) else None
    if size is None or not size > 0 or size == float("inf"):
        raise ValueError(f"cellOrder: cellSize={cellSize!r}; accepted: a positive finite "
                         "number (e.g. the largest support)")
    n = positions.shape[0]
    if scenes is not None and (not isinstance(scenes, torch.Tensor)
                               or tuple(scenes.shape) != (n,)):
        shape = tuple(scenes.shape) if isinstance(scenes, torch.Tensor) else type(scenes).__name__
        raise ValueError(f"cellOrder: scenes has shape {shape}; accepted: [{n}] scene "
                         "indices or None")
    if n == 0:
        return torch.zeros(0, dtype=torch.int64, device=positions.device)
    x = positions.detach().to(torch.float64)
    cells = torch.floor((x - x.min(0).values) / size).to(torch.int64)
    order = torch.argsort(mortonKey(cells), stable=True)
    if scenes is not None:
        order = order[torch.argsort(scenes.to(torch.int64)[order], stable=True)]
    return order


def inverseOrder(order: torch.Tensor) -> torch.Tensor:
    """The permutation that undoes `order` (``inverse[order[k]] = k``).

    Args:
        order: ``[N]`` int64 permutation (`cellOrder`).

    Returns:
        ``[N]`` int64 on the same device.
    """
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.shape[0], dtype=order.dtype, device=order.device)
    return inverse


def reorder(obj, order: torch.Tensor):
    """`obj` with its particles taken in the order `order` (module docstring).

    Args:
        obj: a tensor ``[N, ...]``, or a dataclass whose per-particle fields are tensors with
            first dimension N (other fields, such as a domain, a spacing or a 0-dim time,
            are kept as they are; nested dataclasses are not entered).
        order: ``[N]`` int64 permutation (`cellOrder`, `inverseOrder`).

    Returns:
        A new object of the same type (a frozen dataclass is rebuilt, so its checks run again).

    Raises:
        ValueError: `order` not ``[N]`` int64, a tensor whose first dimension is not N, or a
            particle set with an open boundary (its inlet and outlet pools have an order of
            their own).
        TypeError: `obj` neither a tensor nor a dataclass.
    """
    if not isinstance(order, torch.Tensor) or order.dim() != 1 or order.dtype != torch.int64:
        what = (f"a {order.dtype} tensor of shape {tuple(order.shape)}"
                if isinstance(order, torch.Tensor) else f"a {type(order).__name__}")
        raise ValueError(f"reorder: order is {what}; accepted: an int64 [N] permutation "
                         "(cellOrder)")
    n = order.shape[0]
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0 or obj.shape[0] != n:
            raise ValueError(f"reorder: the tensor has shape {tuple(obj.shape)}; accepted: "
                             f"[N, ...] with N = {n} (the order's length)")
        return obj[order.to(obj.device)]
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"reorder: obj is a {type(obj).__name__}; accepted: a tensor or a "
                        "dataclass of per-particle tensors")
    if getattr(obj, "openBoundary", None) is not None:
        raise ValueError(f"reorder: this {type(obj).__name__} has an open boundary, whose "
                         "inlet and outlet pools keep an order of their own; accepted: a "
                         "particle set without openBoundary")
    changes = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n:
            changes[f.name] = v[order.to(v.device)]
    return dataclasses.replace(obj, **changes)
