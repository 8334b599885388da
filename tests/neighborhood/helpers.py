"""Shared helpers of the neighbour-search tests (states, domains, pair-set comparison)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import radiusNaive

ALL_MODES = list(SupportScheme)


def particles(positions, supports):
    """Attribute bag accepted by the search entry points (no masses/kinds needed)."""
    return SimpleNamespace(positions=positions, supports=supports)


def domain(lo, hi, periodic, device, dtype):
    d = len(periodic)
    lo = torch.as_tensor(lo, dtype=dtype).expand(d).clone().to(device)
    hi = torch.as_tensor(hi, dtype=dtype).expand(d).clone().to(device)
    return DomainDescription(lo, hi, list(periodic))


def randomCloud(n, d, device, dtype, seed, lo=-1.0, hi=1.0, hMin=0.2, hMax=0.3):
    gen = torch.Generator().manual_seed(seed)
    pos = lo + (hi - lo) * torch.rand(n, d, generator=gen, dtype=torch.float64)
    h = hMin + (hMax - hMin) * torch.rand(n, generator=gen, dtype=torch.float64)
    return pos.to(device=device, dtype=dtype), h.to(device=device, dtype=dtype)


def pairKeys(ii, jj, numCols):
    """Sorted int64 keys i * numCols + j of a pair set (on the CPU)."""
    keys = ii.cpu().to(torch.int64) * max(numCols, 1) + jj.cpu().to(torch.int64)
    return torch.sort(keys).values


def searchPairs(adj):
    return pairKeys(adj.i, adj.j, adj.numCols)


def naivePairs(qPos, rPos, qSup, rSup, dom, mode):
    ii, jj = radiusNaive(qPos, rPos, qSup, rSup, dom.periodic, dom.min, dom.max, mode=mode)
    return pairKeys(ii, jj, rPos.shape[0])


def assertCSR(adj):
    """The CSR invariants of an `AdjacencyList`."""
    counts = adj.numNeighbors.cpu().to(torch.int64)
    offsets = adj.edgeOffsets.cpu().to(torch.int64)
    E = adj.i.shape[0]
    assert adj.i.dtype == torch.int64 and adj.j.dtype == torch.int64
    assert adj.numNeighbors.dtype == torch.int32 and adj.edgeOffsets.dtype == torch.int32
    assert counts.shape == (adj.numRows,) and offsets.shape == (adj.numRows,)
    assert int(counts.sum()) == E
    if adj.numRows:
        assert torch.equal(offsets, torch.cumsum(counts, 0) - counts)
    expectedI = torch.repeat_interleave(torch.arange(adj.numRows), counts)
    assert torch.equal(adj.i.cpu(), expectedI)
    if E:
        assert int(adj.j.min()) >= 0 and int(adj.j.max()) < adj.numCols
