"""Verlet (buffered) neighbour lists.

A Verlet list is a compact-hash search with supports multiplied by ``verletScale`` >= 1. It
stays valid while ``displacement + support drift <= (verletScale - 1) * minimum support``:
a pair excluded at build time had r0 > s h0, so it cannot have entered the true support
(conservative). The decision is branch-free torch on the device and costs exactly one
readback, or none inside `deferVerletChecks` (the flag is recorded instead).
"""

from __future__ import annotations

import contextlib
import logging
import threading

import torch

from ..dataTypes.adjacency import AdjacencyList, trustedConstruction
from ..enumTypes import SupportScheme
from ..util.conversion import toWarp
from ..util.errorFlags import siteId
from ..util.precision import warpVector
from ..util.warpContext import launch
from . import _kernels
from ._inputs import SearchInputs, modeUint
from .flags import computeFlags
from .grid import _gridStruct, gridSupport
from .hashLength import getNextPrime
from .search import finishCSR, search, searchInputs, symmetricList, symmetricTest
from .traversal import makeAdjacencyData

__all__ = ["buildVerletList", "deferVerletChecks", "filterVerletList", "verletBudget",
           "verletRebuildFlag"]

_log = logging.getLogger(__name__)
_deferred = threading.local()


def _deferStack() -> list:
    stack = getattr(_deferred, "stack", None)
    if stack is None:
        stack = []
        _deferred.stack = stack
    return stack


@contextlib.contextmanager
def deferVerletChecks():
    """Defer Verlet validity readbacks: inside the block `buildVerletList` appends its device
    rebuild flag (bool ``[1]``) to the yielded list and returns the prior list unchanged
    (zero readbacks). Inspect the flags afterwards; if any is set, re-run the step eagerly.

    A rebuild forced by host-known facts (no prior list, changed sizes, mode, scale, dtype
    or device) still happens eagerly (one readback) and records a False flag.

    Yields:
        list[torch.Tensor]: the recorded flags, in call order.
    """
    flags: list = []
    stack = _deferStack()
    stack.append(flags)
    try:
        yield flags
    finally:
        stack.pop()


def _scaledInputs(inp: SearchInputs, scale: float) -> SearchInputs:
    """Stored copies for a Verlet list: positions cloned (callers often update them in
    place), supports multiplied by the scale; aliasing preserved."""
    qPos = inp.qPos.clone()
    qSup = inp.qSup * scale
    if inp.aliased:
        rPos, rSup = qPos, qSup
    else:
        rPos = qPos if inp.rPos is inp.qPos else inp.rPos.clone()
        rSup = qSup if inp.rSup is inp.qSup else inp.rSup * scale
    return SearchInputs(qPos=qPos, rPos=rPos, qSup=qSup, rSup=rSup, periodic=inp.periodic,
                        dMin=inp.dMin, dMax=inp.dMax, dtype=inp.dtype, device=inp.device,
                        d=inp.d, aliased=inp.aliased, qScenes=inp.qScenes,
                        rScenes=inp.rScenes)


def _build(where: str, inp: SearchInputs, mode: int, scale: float) -> AdjacencyList:
    scaled = _scaledInputs(inp, scale)
    adjacency = search(where, scaled, mode, getNextPrime(inp.numReferences))
    adjacency.verletScale = scale
    return adjacency


def _hostRebuildReason(prior, inp: SearchInputs, mode: int, scale: float) -> str | None:
    if prior is None:
        return "no prior list"
    if not isinstance(prior, AdjacencyList):
        raise TypeError(f"buildVerletList: priorNeighborhood is a {type(prior).__name__}; "
                        "accepted: an AdjacencyList returned by buildVerletList, or None")
    if prior.queryPositions is None or prior.referencePositions is None \
            or prior.querySupports is None or prior.referenceSupports is None:
        return "the prior list stores no build-time positions/supports"
    if prior.numRows != inp.numQueries or prior.numCols != inp.numReferences:
        return (f"particle counts changed ({prior.numRows}x{prior.numCols} -> "
                f"{inp.numQueries}x{inp.numReferences})")
    if (prior.sceneIndex is None) != (inp.qScenes is None):
        return "scene indices added or removed"
    if int(prior.supportMode) != mode:
        return f"support mode changed ({prior.supportMode.name} -> {SupportScheme(mode).name})"
    if prior.verletScale != scale:
        return f"verletScale changed ({prior.verletScale} -> {scale})"
    if prior.queryPositions.dtype != inp.dtype:
        return f"dtype changed ({prior.queryPositions.dtype} -> {inp.dtype})"
    if prior.queryPositions.device != inp.device:
        return f"device changed ({prior.queryPositions.device} -> {inp.device})"
    if prior.queryPositions.shape[1] != inp.d:
        return f"dimension changed ({prior.queryPositions.shape[1]} -> {inp.d})"
    return None


def _maxDisplacement(now: torch.Tensor, before: torch.Tensor, inp: SearchInputs) -> torch.Tensor:
    """max_i |x_now - x_before| through the nearest periodic image (0-d, no sync)."""
    if now.shape[0] == 0:
        return torch.zeros((), dtype=inp.dtype, device=inp.device)
    delta = now - before
    extent = inp.dMax - inp.dMin
    half = extent * 0.5
    wrapped = (delta + half) - extent * torch.floor((delta + half) / extent) - half
    delta = torch.where(inp.periodic, wrapped, delta)
    return torch.linalg.vector_norm(delta, dim=1).amax()


def _supportStats(now: torch.Tensor, prior: torch.Tensor, scale: float, inp: SearchInputs):
    """(max |h_prior - h_now|, min over prior and current supports), 0-d tensors."""
    if now.shape[0] == 0:
        z = torch.zeros((), dtype=inp.dtype, device=inp.device)
        return z, torch.full((), float("inf"), dtype=inp.dtype, device=inp.device)
    before = prior / scale
    return (before - now).abs().amax(), torch.minimum(before.amin(), now.amin())


def verletRebuildFlag(prior: AdjacencyList, inp: SearchInputs, mode: int) -> torch.Tensor:
    """bool ``[1]`` device flag: rebuild iff NOT (displacement + drift <= buffer).

    NaN anywhere (e.g. non-finite positions) sets the flag, so the rebuild's search raises.
    """
    used, buffer = _verletBudget(prior, inp, mode)
    valid = used <= buffer
    return (~valid).reshape(1)


def verletBudget(prior: AdjacencyList, queryParticles, domain,
                 supportMode=SupportScheme.Gather, referenceParticles=None):
    """What a Verlet list's validity test compares, as 0-dim device tensors (no readback):
    ``(used, buffer)`` with ``used = max|dx_q| + max|dx_r| + drift`` and ``buffer =
    (verletScale - 1) * min support`` (`buildVerletList`); the list is valid while
    ``used <= buffer``. A caller that bounds the motion ahead (a decision read once every
    k steps) adds its bound to ``used``.

    Args:
        prior: a list returned by `buildVerletList`.
        queryParticles: the current query state (``.positions``/``.supports``).
        domain: `DomainDescription`.
        supportMode: `SupportScheme` of the test.
        referenceParticles: the current reference state (default: the query set).

    Returns:
        ``(used, buffer)``, 0-dim tensors of the positions' dtype.
    """
    where = "verletBudget"
    mode = modeUint(where, supportMode)
    inp = searchInputs(where, queryParticles, domain, referenceParticles)
    reason = _hostRebuildReason(prior, inp, mode, prior.verletScale if isinstance(
        prior, AdjacencyList) else 1.0)
    if reason is not None:
        raise ValueError(f"{where}: the prior list cannot be tested ({reason})")
    return _verletBudget(prior, inp, mode)


def _verletBudget(prior: AdjacencyList, inp: SearchInputs, mode: int):
    scale = prior.verletScale
    dispQ = _maxDisplacement(inp.qPos, prior.queryPositions, inp)
    sameNow = inp.rPos is inp.qPos
    samePrior = prior.referencePositions is prior.queryPositions
    dispR = dispQ if (sameNow and samePrior) else _maxDisplacement(inp.rPos,
                                                                    prior.referencePositions, inp)
    driftQ, minQ = _supportStats(inp.qSup, prior.querySupports, scale, inp)
    sameSup = inp.rSup is inp.qSup and prior.referenceSupports is prior.querySupports
    if sameSup:
        driftR, minR = driftQ, minQ
    else:
        driftR, minR = _supportStats(inp.rSup, prior.referenceSupports, scale, inp)
    if mode == SupportScheme.Gather:
        drift, minSup = driftQ, minQ
    elif mode == SupportScheme.Scatter:
        drift, minSup = driftR, minR
    else:
        drift, minSup = torch.maximum(driftQ, driftR), torch.minimum(minQ, minR)
    buffer = (scale - 1.0) * minSup
    return dispQ + dispR + drift, buffer


def buildVerletList(queryParticles, domain, verletScale=1.0, supportMode=SupportScheme.Gather,
                    priorNeighborhood=None, verbose=False, referenceParticles=None):
    """Buffered neighbour list: a search with supports scaled by ``verletScale``, reused
    while the motion stays inside the buffer.

    Rebuild from scratch when: no prior list; it stores no positions; N_q or N_r changed;
    ``supportMode``, ``verletScale``, dtype or device differ (host-known, free). Otherwise
    rebuild iff ``max|dx_q| + max|dx_r| + drift > (verletScale - 1) * min support`` (nearest
    periodic image; drift = max |h_prior - h_now| on the side of the mode, both sides for
    symmetric modes; prior supports = stored / verletScale).

    Args:
        queryParticles: `ParticleState` (or ``.positions``/``.supports`` bag).
        domain: `DomainDescription`.
        verletScale: support multiplier >= 1 (1.0: any motion rebuilds).
        supportMode: `SupportScheme` of the threshold.
        priorNeighborhood: a list previously returned by this function, or None.
        verbose: log rebuild decisions (only when the decision was read anyway).
        referenceParticles: reference set (default: the query set).

    Returns:
        AdjacencyList: the prior object itself when still valid, else a fresh buffered list
        (stores cloned build-time positions and the scaled supports). Readbacks: one per
        validity check (none inside `deferVerletChecks`) plus one per rebuild.
    """
    where = "buildVerletList"
    mode = modeUint(where, supportMode)
    if isinstance(verletScale, bool) or not isinstance(verletScale, (int, float)):
        raise TypeError(f"{where}: verletScale must be a Python float, found "
                        f"{type(verletScale).__name__}")
    scale = float(verletScale)
    if not (1.0 <= scale < float("inf")):
        raise ValueError(f"{where}: verletScale={verletScale!r}; accepted: a finite float >= 1")
    inp = searchInputs(where, queryParticles, domain, referenceParticles)
    stack = _deferStack()
    reason = _hostRebuildReason(priorNeighborhood, inp, mode, scale)
    if reason is not None:
        if verbose:
            _log.info("buildVerletList: rebuild (%s)", reason)
        if stack:
            stack[-1].append(torch.zeros(1, dtype=torch.bool, device=inp.device))
        return _build(where, inp, mode, scale)
    flag = verletRebuildFlag(priorNeighborhood, inp, mode)
    if stack:
        stack[-1].append(flag)
        return priorNeighborhood
    rebuild = flag.tolist()[0]  # the one readback of the check
    if verbose:
        _log.info("buildVerletList: %s", "rebuild (moved beyond the buffer)" if rebuild
                  else "prior list still valid")
    if rebuild:
        return _build(where, inp, mode, scale)
    return priorNeighborhood


def filterVerletList(queryParticles, domain, adjacency, supportMode=SupportScheme.Gather,
                     referenceParticles=None):
    """Tight list from a buffered one: keep the pairs with ``r_ij <= threshold`` under the
    current positions and supports (exact threshold of ``supportMode``, minimum image).

    Count pass -> device scan -> ONE readback (edge total + validity flags) -> collect pass.
    The result stores the current positions and unscaled supports, ``verletScale = 1``; it is
    not a Verlet list (do not pass it back as ``priorNeighborhood``). Pairs missing from the
    buffered list are not recovered (the buffer guarantees there are none while valid).

    Args:
        queryParticles: current query state.
        domain: `DomainDescription`.
        adjacency: the buffered `AdjacencyList` (numRows = N_q, numCols = N_r).
        supportMode: `SupportScheme` of the exact threshold.
        referenceParticles: current reference state (default: the query set).

    Returns:
        AdjacencyList with pairs in the buffered list's order.
    """
    where = "filterVerletList"
    mode = modeUint(where, supportMode)
    if not isinstance(adjacency, AdjacencyList):
        raise TypeError(f"{where}: adjacency is a {type(adjacency).__name__}; accepted: an "
                        "AdjacencyList")
    inp = searchInputs(where, queryParticles, domain, referenceParticles)
    nq, nr = inp.numQueries, inp.numReferences
    if adjacency.numRows != nq or adjacency.numCols != nr:
        raise ValueError(f"{where}: adjacency is {adjacency.numRows}x{adjacency.numCols} "
                         f"(numRows x numCols) but the particle sets are {nq}x{nr}")
    if adjacency.device != inp.device:
        raise ValueError(f"{where}: adjacency is on {adjacency.device}; the particles are on "
                         f"{inp.device}")
    if inp.qScenes is not None and adjacency.sceneIndex is None:
        raise ValueError(f"{where}: the particles carry scene indices but the list was built "
                         "without them (it may pair particles of different scenes); accepted: "
                         "a list from a search of particles with scenes")
    dev = inp.device
    counts = torch.zeros(nq, dtype=torch.int32, device=dev)
    if nq > 0 and nr > 0:
        hMax = gridSupport(mode, inp.qSup, inp.rSup)
        flags = computeFlags(inp.qPos, inp.rPos, inp.qSup, inp.rSup, inp.aliased, hMax,
                             inp.dMax - inp.dMin, inp.periodic)
    else:
        hMax = torch.zeros(1, dtype=inp.dtype, device=dev)
        flags = torch.zeros(1, dtype=torch.int32, device=dev)
    work = nq > 0 and nr > 0 and adjacency.numEdges > 0
    if work:
        vec = warpVector(inp.d, inp.dtype)
        adjStruct = makeAdjacencyData(adjacency, site=siteId("filterPairsKernel"))
        gridStruct = _gridStruct(inp, torch.ones(inp.d, dtype=torch.int32, device=dev))
        args = [toWarp(inp.qPos, vec), toWarp(inp.qSup), toWarp(inp.rPos, vec),
                toWarp(inp.rSup), adjStruct, gridStruct, mode]
        dummy32 = toWarp(torch.empty(0, dtype=torch.int32, device=dev))
        dummy64 = toWarp(torch.empty(0, dtype=torch.int64, device=dev))
        launch(_kernels.filterPairsKernel, dim=nq, inputs=args + [0],
               outputs=[toWarp(counts), dummy32, dummy64, dummy64], device=dev)
    test = symmetricTest(inp, mode) if adjacency.symmetric else None
    E, edgeOffsets, uniform = finishCSR(where, counts, flags, hMax, inp.dMin, inp.dMax,
                                        inp.aliased, SupportScheme(mode).name, test)
    i = torch.empty(E, dtype=torch.int64, device=dev)
    j = torch.empty(E, dtype=torch.int64, device=dev)
    if work and E > 0:
        launch(_kernels.filterPairsKernel, dim=nq, inputs=args + [1],
               outputs=[dummy32, toWarp(edgeOffsets), toWarp(i), toWarp(j)], device=dev)
    with trustedConstruction():
        return AdjacencyList(
            i=i, j=j, numNeighbors=counts, edgeOffsets=edgeOffsets, numRows=nq, numCols=nr,
            queryPositions=inp.qPos, referencePositions=inp.rPos, querySupports=inp.qSup,
            referenceSupports=inp.rSup, hashMap=None, supportMode=SupportScheme(mode),
            verletScale=1.0, sceneIndex=adjacency.sceneIndex,
            symmetric=adjacency.symmetric and symmetricList(inp, mode, uniform))
