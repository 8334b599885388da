"""Halo exchange (`Halo`): the reference particles a rank needs from the others.

Halo width rule. A pair (i, j) interacts when ``r_ij`` is below its pair support: h_i
(Gather), h_j (Scatter) or a mean or maximum of the two (Symmetric); each is at most the
largest support in play, ``hMax`` (the maximum over every rank, taken per build). A rank's
queries are its owned particles, so it needs every particle within ``hMax`` of its block:
that is the halo of ``depth = 1``. Quantities that are themselves neighbour sums over the
references, evaluated on the halo rank (the reference volumes of `computeCRKFactors`, a
density computed on the references), need ``depth = 2``. The usual way needs only depth 1:
compute the quantity for the owned particles, then `extend` it (one more exchange, exact,
differentiable).

Build (collective, one host readback):

1. ``hMax`` = all-reduce max of the supports; reach = depth hMax;
2. for each owned particle and each other rank: the distance from the particle to that
   rank's block, over the periodic images (shifts of 0 or +-E_k on periodic axes; blocks at
   a non-periodic domain face extend to infinity, as ownership clamps there); the particle
   is sent when the distance is <= reach, once per destination, with the image shift of the
   smallest distance (so the halo lies next to the block it serves: periodic images are
   shifted by the box length);
3. counts first (an all-to-all of ``[P]`` counts), one readback of both counts and hMax;
   the width check; then the rows, grouped by destination (`Route`).

A rank never sends to itself: the operators' own minimum image handles a rank's particles
across a periodic face it spans alone. The operators run unchanged: queries = the owned
particles, references = `particles` (owned rows first, then the halo).
"""

from __future__ import annotations

import math

import torch

from ..dataTypes.particleState import ParticleState
from ._comm import (
    Route,
    checkCodes,
    collective,
    commDevice,
    consistencyCode,
    exchangeCounts,
    processGroup,
)

__all__ = ["Halo"]


class Halo:
    """A built halo (`build`); see the module docstring.

    Attributes:
        route: the `Route` owned rows -> halo rows.
        ownedCount: owned particles on this rank.
        haloCount: halo particles received.
        shifts: ``[H, d]`` periodic image shift added to each received position.
        kinds: int32 ``[H]`` kinds of the halo particles.
        ids: int64 ``[H]`` global ids of the halo particles (when `build` was given ids).
        sources: int64 ``[H]`` the rank each halo particle came from.
        hMax: the largest support over the ranks at build time.
        reach: ``(depth + skin) * hMax``.
    """

    def __init__(self, route, shifts, kinds, ids, sources, hMax, reach, depth):
        self.route = route
        self.shifts = shifts
        self.kinds = kinds
        self.ids = ids
        self.sources = sources
        self.hMax = hMax
        self.reach = reach
        self.depth = depth

    @property
    def ownedCount(self) -> int:
        return self.route.sourceRows

    @property
    def haloCount(self) -> int:
        return self.route.received

    @classmethod
    def build(cls, decomposition, particles: ParticleState, *, depth: int = 1,
              ids: torch.Tensor | None = None, skin: float = 0.0) -> Halo:
        """Build the halo of this rank's owned `particles` (collective; module docstring).

        Args:
            decomposition: the `Decomposition` the particles are owned by.
            particles: the owned `ParticleState` (positions, supports, masses, kinds).
            depth: halo depth in units of hMax (1, or 2 for references whose own neighbour
                sums are evaluated on this rank).
            ids: optional int64 ``[N]`` global ids, carried to the halo (`ids`).
            skin: extra reach as a fraction of hMax (>= 0): the halo then holds every
                particle within ``(depth + skin) hMax`` of the block, so it stays complete
                while no particle moves more than ``skin hMax / 2`` (a Verlet buffer).

        Raises:
            RuntimeError: no initialised process group.
            TypeError: the ranks disagree on dtype, device type or dimension.
            ValueError: depth hMax wider than a subdomain (the halo would need more than
                the adjacent ranks); a decomposition of another size or dimension.
        """
        where = "Halo.build"
        import torch.distributed as dist

        group = decomposition.group
        group, rank, size = processGroup(where, group)
        named = f"{where} (rank {rank})"  # errors name the rank; calls do not
        x = particles.positions
        n, d = int(x.shape[0]), int(x.shape[1])
        if size != decomposition.size or d != decomposition.dim:
            raise ValueError(f"{named}: the decomposition has {decomposition.size} ranks and "
                             f"d = {decomposition.dim}; this group has {size} ranks and the "
                             f"particles d = {d}")
        if isinstance(depth, bool) or depth not in (1, 2, 3, 4, 5):
            raise ValueError(f"{named}: depth={depth!r}; accepted: 1, 2, 3, 4 or 5")
        if not (isinstance(skin, (int, float)) and math.isfinite(skin) and skin >= 0):
            raise ValueError(f"{named}: skin={skin!r}; accepted: a finite number >= 0")
        width = depth + float(skin)
        if ids is not None and (ids.shape != (n,) or ids.dtype != torch.int64):
            raise ValueError(f"{named}: ids must be int64 [{n}] (got {ids.dtype} "
                             f"{tuple(ids.shape)})")
        device, dtype = x.device, x.dtype
        h = particles.supports.detach()
        comm = commDevice(group, device)
        hMax = (h.amax() if n else h.new_zeros(())).to(comm, torch.float64).reshape(1)
        # one all-reduce: the largest support and the ranks' dtype / device / d agreement
        reduced = torch.cat([hMax, consistencyCode(dtype, device, d, comm)])
        with collective(f"{where} (reach)", group, (3,), comm):
            dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=group)
        reach = (width * reduced[0]).to(device, dtype)

        # distance of every owned particle to every block, over the periodic images
        lower = torch.tensor(decomposition.lower, dtype=dtype, device=device)
        upper = torch.tensor(decomposition.upper, dtype=dtype, device=device)
        extent = upper - lower
        periodic = torch.tensor(decomposition.periodic, dtype=torch.bool, device=device)
        xd = x.detach()
        wrapped = torch.where(periodic, xd - extent * torch.floor((xd - lower) / extent), xd)
        lo, hi = decomposition.reachBounds(dtype, device)  # [P, d], +-inf at walled faces
        # per axis the gap to each block for the images 0, -E, +E (equal on walled axes),
        # the smallest of the three (0 first on ties) and its shift
        xw = wrapped[:, None, :]  # [N, 1, d]
        gap0 = torch.relu(lo - xw) + torch.relu(xw - hi)  # [N, P, d]
        gapMinus = torch.relu(lo - (xw - extent)) + torch.relu(xw - extent - hi)
        gapPlus = torch.relu(lo - (xw + extent)) + torch.relu(xw + extent - hi)
        usePlus = periodic & (gapPlus < gapMinus) & (gapPlus < gap0)
        useMinus = periodic & ~usePlus & (gapMinus < gap0)
        gapBest = torch.where(usePlus, gapPlus, torch.where(useMinus, gapMinus, gap0))
        dist2 = (gapBest * gapBest).sum(dim=2)  # [N, P]
        send = dist2 <= reach * reach
        send[:, rank] = False
        shift = (usePlus.to(dtype) - useMinus.to(dtype)) * extent  # [N, P, d]
        shift = shift + (wrapped - xd)[:, None, :]

        counts = send.sum(dim=0).to(torch.int64)
        sendCounts, recvCounts, extra = exchangeCounts(counts, group, reduced, where)
        hMaxHost = extra[0]
        checkCodes(named, extra[1:], dtype, device, d)
        cls._checkWidth(named, decomposition, width, hMaxHost)

        total = sum(sendCounts)
        flat = send.t().reshape(-1)  # destination-major
        order = torch.argsort((~flat).to(torch.int8), stable=True)[:total]
        sendIndex = order % max(n, 1)
        dest = order // max(n, 1)
        route = Route(sendIndex, sendCounts, recvCounts, n, group, "halo")
        sendShift = shift[sendIndex, dest]  # [S, d], already grouped by destination
        shifts = Route(torch.arange(total, device=device), sendCounts, recvCounts, total,
                       group, "halo build").forwardRows(sendShift)
        kinds = route.forwardRows(particles.kinds)
        haloIds = route.forwardRows(ids) if ids is not None else None
        sources = torch.repeat_interleave(
            torch.arange(size, device=device),
            torch.tensor(recvCounts, dtype=torch.int64, device=device),
            output_size=sum(recvCounts))
        return cls(route, shifts, kinds, haloIds, sources, hMaxHost, width * hMaxHost, depth)

    @staticmethod
    def _checkWidth(where, decomposition, width, hMax):
        reach = width * hMax
        for r in range(decomposition.size):
            lo, hi = decomposition.blocks[r]
            ext = decomposition.extents(r)
            for k in range(decomposition.dim):
                cut = lo[k] > 0 or hi[k] < decomposition.cells[k]
                if cut and reach > ext[k] * (1 + 1e-12):
                    raise ValueError(
                        f"{where}: the halo width {width:g} x hMax = {reach:.6g} exceeds rank "
                        f"{r}'s subdomain extent {ext[k]:.6g} along axis {k}: the halo would "
                        "need more than the adjacent ranks; accepted: (depth + skin) x hMax <= every "
                        "subdomain extent (fewer ranks, smaller supports, or decompose with a "
                        "larger cellSize)")

    # ---------------------------------------------------------------- data movement

    def exchange(self, *tensors):
        """The halo rows of owned per-particle tensors ``[N_own, *S]`` -> ``[H, *S]``;
        differentiable in reverse and forward mode (float tensors of one dtype travel in one
        exchange)."""
        return self.route.gather(*tensors)

    def extend(self, *tensors):
        """Owned rows followed by their halo rows, ``[N_own + H, *S]`` each (None stays
        None); differentiable."""
        moved = self.exchange(*tensors)
        if len(tensors) == 1:
            moved = (moved,)
        out = tuple(None if t is None else torch.cat([t, m], dim=0)
                    for t, m in zip(tensors, moved))
        return out[0] if len(tensors) == 1 else out

    def scatterAdd(self, haloRows: torch.Tensor) -> torch.Tensor:
        """Halo rows ``[H, *S]`` sent back to their owners and summed into ``[N_own, *S]``
        (the adjoint of `exchange`); differentiable."""
        return self.route.scatterAdd(haloRows)

    def particles(self, owned: ParticleState) -> ParticleState:
        """The reference set: the owned particles followed by the halo (positions with their
        image shifts), every float field in one differentiable exchange."""
        pos, h, m, rho = self.extend(owned.positions, owned.supports, owned.masses,
                                     owned.densities)
        n = self.ownedCount
        pos = torch.cat([pos[:n], pos[n:] + self.shifts.to(pos.dtype)], dim=0)
        kinds = torch.cat([owned.kinds, self.kinds])
        return ParticleState(pos, h, m, kinds, rho)

    def bytesPerExchange(self, columns: int, itemsize: int) -> int:
        """Bytes this rank sends in one exchange of `columns` values of `itemsize` bytes per
        particle."""
        return self.route.sent * columns * itemsize
