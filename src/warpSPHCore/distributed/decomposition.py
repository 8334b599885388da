"""Recursive coordinate bisection of a `DomainDescription` among the ranks of a process
group (`Decomposition`, `decompose`).

The box is divided into neighbour-search cells, ``max(1, floor(E_k / c))`` along axis k with
``c`` the cell size (default: the largest support over all ranks, the cell of the library's
hash grid), each split into `subdivide` slices per axis for a finer balance: ``n_k`` cells of
width ``w_k = E_k / n_k``. Every subdomain is a block of whole cells. Bisection, level by
level:

1. every block that still holds several ranks ``[r0, r1)`` is cut along its longest axis
   (in cells) that can give both parts at least `minWidth` (default c: one search cell)
   into a lower part for ``floor(P / 2)`` ranks and an upper part for the rest;
2. the cut is the cell boundary (keeping both parts at least `minWidth` wide) whose
   particle count (or cost, `weights`) below it is closest to the lower part's share
   ``floor(P / 2) / P`` of the block's total;
3. the counts are per-cell histograms along the cut axis, summed over the ranks with one
   all-reduce per level and read back once per level (a decomposition is a set-up step,
   not a per-step one).

Ownership (`Decomposition.owners`): a particle belongs to the block holding its cell. Cells
come from the position wrapped into the box on periodic axes and clamped on the others, so
every position has exactly one owner, including positions outside the box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._comm import checkConsistent, collective, commDevice, processGroup

__all__ = ["Decomposition", "decompose"]


@dataclass(frozen=True)
class Decomposition:
    """The subdomains of `decompose` (host data; identical on every rank).

    It holds no rank: `rank` is asked of the process group at each use, so a decomposition
    saved (pickled) by one process and loaded by another is that process's, and one made for
    a group of another size raises instead of selecting another rank's particles.

    Args:
        lower: the box's lower corner (d floats).
        upper: the box's upper corner.
        periodic: d bools.
        cells: cells per axis ``n_k``.
        blocks: per rank, ``(lo, hi)`` cell indices (d ints each, hi exclusive).
        cellSize: the search cell size c the grid was made from.
        group: the process group (None: the default group).
        subdivide: slices per search cell and axis.
        minWidth: the narrowest part a cut could leave.
    """

    lower: tuple
    upper: tuple
    periodic: tuple
    cells: tuple
    blocks: tuple
    cellSize: float
    group: object = None
    subdivide: int = 1
    minWidth: float = 0.0

    @property
    def size(self) -> int:
        return len(self.blocks)

    @property
    def rank(self) -> int:
        """This process's rank in the group (asked of the group, never stored).

        Raises:
            RuntimeError: no initialised process group.
            ValueError: the group's size is not the number of subdomains.
        """
        _, rank, size = processGroup("Decomposition.rank", self.group)
        if size != self.size:
            raise ValueError(f"Decomposition: it has {self.size} subdomains but the process "
                             f"group has {size} ranks (this is rank {rank}); accepted: a "
                             "decomposition made for a group of the same size (decompose "
                             "again, or rebalance, in this group)")
        return rank

    @property
    def dim(self) -> int:
        return len(self.cells)

    @property
    def cellWidth(self) -> tuple:
        return tuple((u - lo) / n for lo, u, n in zip(self.lower, self.upper, self.cells))

    def bounds(self, rank: int):
        """``(lo, hi)`` coordinates of `rank`'s block (d floats each)."""
        lo, hi = self.blocks[rank]
        w = self.cellWidth
        return (tuple(self.lower[k] + lo[k] * w[k] for k in range(self.dim)),
                tuple(self.lower[k] + hi[k] * w[k] if hi[k] < self.cells[k] else self.upper[k]
                      for k in range(self.dim)))

    def reachBounds(self, dtype, device):
        """``(lo, hi)`` ``[P, d]`` tensors of the blocks' coordinates, with -inf / +inf at a
        walled (non-periodic) domain face: ownership clamps there, so a block reaches
        past it."""
        lo, hi = [], []
        for r in range(self.size):
            blo, bhi = self.blocks[r]
            a, b = self.bounds(r)
            lo.append([-math.inf if blo[k] == 0 and not self.periodic[k] else a[k]
                       for k in range(self.dim)])
            hi.append([math.inf if bhi[k] == self.cells[k] and not self.periodic[k] else b[k]
                       for k in range(self.dim)])
        return (torch.tensor(lo, dtype=dtype, device=device),
                torch.tensor(hi, dtype=dtype, device=device))

    def extents(self, rank: int) -> tuple:
        lo, hi = self.bounds(rank)
        return tuple(b - a for a, b in zip(lo, hi))

    def cellIndices(self, positions: torch.Tensor) -> torch.Tensor:
        """int64 ``[N, d]`` cell of each position (wrapped on periodic axes, clamped on the
        others); no host synchronisation."""
        x = positions.detach()
        lower = torch.tensor(self.lower, dtype=x.dtype, device=x.device)
        upper = torch.tensor(self.upper, dtype=x.dtype, device=x.device)
        extent = upper - lower
        periodic = torch.tensor(self.periodic, dtype=torch.bool, device=x.device)
        wrapped = torch.where(periodic, x - extent * torch.floor((x - lower) / extent), x)
        n = torch.tensor(self.cells, dtype=torch.int64, device=x.device)
        c = torch.floor((wrapped - lower) / (extent / n.to(x.dtype))).to(torch.int64)
        return torch.minimum(torch.clamp(c, min=0), n - 1)

    def owners(self, positions: torch.Tensor) -> torch.Tensor:
        """int64 ``[N]`` owning rank of each position; no host synchronisation."""
        c = self.cellIndices(positions)
        lo = torch.tensor([b[0] for b in self.blocks], dtype=torch.int64, device=c.device)
        hi = torch.tensor([b[1] for b in self.blocks], dtype=torch.int64, device=c.device)
        inside = ((c[:, None, :] >= lo[None]) & (c[:, None, :] < hi[None])).all(dim=2)
        return inside.to(torch.int8).argmax(dim=1)

    def domain(self, dtype=torch.float64, device="cpu"):
        """The decomposed box as a `DomainDescription`."""
        from ..dataTypes.domain import DomainDescription

        return DomainDescription(torch.tensor(self.lower, dtype=dtype, device=device),
                                 torch.tensor(self.upper, dtype=dtype, device=device),
                                 list(self.periodic))

    def describe(self) -> str:
        lines = [f"{self.size} subdomains of a {'x'.join(map(str, self.cells))} cell grid "
                 f"(cell {self.cellSize:g}):"]
        for r in range(self.size):
            lo, hi = self.bounds(r)
            box = " x ".join(f"[{a:.4g}, {b:.4g})" for a, b in zip(lo, hi))
            lines.append(f"  rank {r}: {box}")
        return "\n".join(lines)


def _hostDomain(domain, where: str):
    lower = domain.min.detach().double().cpu().tolist()
    upper = domain.max.detach().double().cpu().tolist()
    periodic = [bool(p) for p in domain.periodic.cpu().tolist()]
    for k, (a, b) in enumerate(zip(lower, upper)):
        if not (math.isfinite(a) and math.isfinite(b) and b > a):
            raise ValueError(f"{where}: the domain's axis {k} is [{a}, {b}]; accepted: finite "
                             "bounds with max > min")
    return lower, upper, periodic


def decompose(domain, positions: torch.Tensor, supports: torch.Tensor | None = None, *,
              weights: torch.Tensor | None = None, cellSize: float | None = None,
              subdivide: int = 4, minWidth: float | None = None, replicated: bool = False,
              group=None) -> Decomposition:
    """Split `domain` among the ranks of `group` by recursive coordinate bisection (module
    docstring). Collective: every rank calls it.

    Args:
        domain: the global `DomainDescription`.
        positions: ``[N, d]`` particles this rank holds (any subset; or, with `replicated`,
            the whole set, identical on every rank).
        supports: ``[N]`` supports; their maximum over the ranks is the default cell size.
        weights: ``[N]`` cost per particle (default 1: balance by particle count).
        cellSize: the cell size c (default: the largest support).
        subdivide: slices per search cell and axis (the granularity of the cuts).
        minWidth: the narrowest part a cut may leave (default c); a halo of depth D needs
            blocks at least D hMax wide (`Halo.build` checks).
        replicated: every rank passes the same whole set (the counts are not summed).
        group: the process group (None: the default group).

    Returns:
        A `Decomposition`, the same on every rank.

    Raises:
        RuntimeError: no initialised process group.
        ValueError: no cell size (neither `supports` nor `cellSize`); a block of several ranks
            that no axis can cut into two parts of at least `minWidth`.
        TypeError: the ranks disagree on dtype, device type or dimension.
    """
    where = "decompose"
    import torch.distributed as dist

    group, rank, size = processGroup(where, group)
    named = f"{where} (rank {rank})"  # errors name the rank; calls do not
    d = int(positions.shape[1])
    checkConsistent(where, group, positions.dtype, positions.device, d)
    lower, upper, periodic = _hostDomain(domain, where)
    if len(lower) != d:
        raise ValueError(f"{named}: positions are {d}D and the domain {len(lower)}D")
    comm = commDevice(group, positions.device)
    if cellSize is None:
        if supports is None:
            raise ValueError(f"{named}: give supports (their maximum sets the cell size) or "
                             "cellSize")
        local = supports.detach().amax() if supports.numel() else supports.new_zeros(())
        hmax = local.to(comm, torch.float64).reshape(1)
        if not replicated:
            with collective(f"{where} (cell size)", group, (1,), comm):
                dist.all_reduce(hmax, op=dist.ReduceOp.MAX, group=group)
        cellSize = float(hmax.item())
    if not cellSize > 0:
        raise ValueError(f"{named}: cell size {cellSize}; accepted: > 0 (positive supports)")
    if subdivide < 1:
        raise ValueError(f"{named}: subdivide={subdivide}; accepted: >= 1")
    cells = tuple(max(1, int(math.floor((u - a) / cellSize + 1e-9))) * subdivide
                  for a, u in zip(lower, upper))
    width = minWidth if minWidth is not None else cellSize
    minCells = [max(1, int(math.ceil(width / ((u - a) / n) - 1e-9)))
                for a, u, n in zip(lower, upper, cells)]
    probe = Decomposition(tuple(lower), tuple(upper), tuple(periodic), cells,
                          ((tuple([0] * d), cells),), float(cellSize), group)
    c = probe.cellIndices(positions)
    w = (torch.ones(c.shape[0], dtype=torch.float64, device=c.device) if weights is None
         else weights.detach().to(torch.float64))

    # blocks: [r0, r1, lo, hi]
    blocks = [(0, size, [0] * d, list(cells))]
    while any(r1 - r0 > 1 for r0, r1, _, _ in blocks):
        split = [b for b in blocks if b[1] - b[0] > 1]
        axes = []
        for r0, r1, lo, hi in split:
            span = [hi[k] - lo[k] for k in range(d)]
            ok = [k for k in range(d) if span[k] >= 2 * minCells[k]]
            if not ok:
                ext = [round(span[k] * (upper[k] - lower[k]) / cells[k], 12) for k in range(d)]
                raise ValueError(
                    f"{named}: a block of {r1 - r0} ranks with extents {ext} cannot be cut into "
                    f"two parts at least {width:g} wide (minWidth); accepted: blocks at least "
                    "2 minWidth wide along some axis per split (use fewer ranks, smaller "
                    "supports, or a smaller minWidth)")
            axes.append(max(ok, key=lambda k: (span[k], -k)))
        nBins = max(b[3][a] - b[2][a] for b, a in zip(split, axes))
        hist = torch.zeros((len(split), nBins), dtype=torch.float64, device=c.device)
        for k, ((_, _, lo, hi), axis) in enumerate(zip(split, axes)):
            lo_t = torch.tensor(lo, device=c.device)
            hi_t = torch.tensor(hi, device=c.device)
            inside = ((c >= lo_t) & (c < hi_t)).all(dim=1)
            slot = (c[:, axis] - lo[axis]).clamp(0, nBins - 1)
            hist[k].scatter_add_(0, slot, torch.where(inside, w, torch.zeros_like(w)))
        hist = hist.to(comm)
        if not replicated:
            with collective(f"{where} (bisection level)", group, (len(split),), comm):
                dist.all_reduce(hist, group=group)
        counts = hist.cpu().tolist()  # one readback per level
        nxt = [b for b in blocks if b[1] - b[0] <= 1]
        for (r0, r1, lo, hi), axis, row in zip(split, axes, counts):
            n = hi[axis] - lo[axis]
            total = sum(row[:n])
            nLow = (r1 - r0) // 2
            target = total * nLow / (r1 - r0)
            m = minCells[axis]
            best, run = m, 0.0
            bestErr = math.inf
            for k in range(1, n - m + 1):
                run += row[k - 1]
                err = abs(run - target)
                if k >= m and err < bestErr - 1e-12:
                    best, bestErr = k, err
            cut = lo[axis] + best
            hiLow = list(hi)
            hiLow[axis] = cut
            loHigh = list(lo)
            loHigh[axis] = cut
            nxt.append((r0, r0 + nLow, list(lo), hiLow))
            nxt.append((r0 + nLow, r1, loHigh, list(hi)))
        blocks = nxt
    blocks.sort(key=lambda b: b[0])
    return Decomposition(tuple(lower), tuple(upper), tuple(periodic), cells,
                         tuple((tuple(lo), tuple(hi)) for _, _, lo, hi in blocks),
                         float(cellSize), group, subdivide, float(width))
