"""Neighbour lists for the rate functions: the Verlet-skin rebuild policy shared by
`Simulation`, `rollout` and every stepper, and the periodic wrap of positions.

A rate function receives its neighbour list as its second argument::

    def rates(state: FluidState, neighbours: AdjacencyList) -> Rates: ...

and a stepper evaluates it through `evaluateRates(rates, state, neighbours)`, where
`neighbours` is the *policy* that produces the list for a state:

* a `VerletNeighbours` (what `Simulation` and `rollout` use): a search with supports
  scaled by s = 1 + skin (`neighborhood.buildVerletList`), reused while every particle has
  moved less than half the buffer. The list is rebuilt iff ``2 max_i |x_i - x_i^build| +
  support drift > skin min H``: one readback per rate evaluation (plus the search's own
  readback when it rebuilds). The list holds every pair with r_ij <= s H, so a rate
  function must give the pairs beyond its support zero weight; every compact kernel does
  (q > 1: W = 0, grad W = 0), so the library's operators and kernel-weighted edge sums take
  the list as it is. With ``wrap`` (default) the positions on the periodic axes are wrapped
  into ``[min, max)`` before the rates see them (`wrapPeriodic`).
* an `AdjacencyList`: one fixed list for every evaluation (a frozen graph, e.g. a learned
  model's), no readback;
* any callable ``neighbours(state) -> AdjacencyList``.

**Health checks ride on the Verlet readback.** A `VerletNeighbours` given a ``monitor``
(`fluids.health.HealthMonitor`) folds the monitor's device flags (non-finite fields,
particles outside the domain or through a wall, a time step above the stable limit) into
the one value it reads back anyway, so the checks cost no host synchronisation of their
own. When a flag is set the monitor names the field, the first particle and its values
(reading back what it needs, once, on the failing path only).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from ..dataTypes.adjacency import AdjacencyList
from ..enumTypes import SupportScheme
from ..neighborhood.verlet import buildVerletList, deferVerletChecks

__all__ = ["VerletNeighbours", "wrapPeriodic", "neighbourList", "adjacencyStateDict",
           "adjacencyFromStateDict"]


def wrapPeriodic(positions: torch.Tensor, domain) -> torch.Tensor:
    """``[N, d]`` positions with the periodic axes of `domain` wrapped into [min, max):
    ``min + (x - min) mod (max - min)``; the other axes unchanged. Differentiable (gradient
    1), no host sync.

    Args:
        positions: ``[N, d]`` positions.
        domain: `DomainDescription` (``min``, ``max``, ``periodic``).

    Returns:
        ``[N, d]`` wrapped positions.
    """
    lo = domain.min.to(positions)
    extent = domain.max.to(positions) - lo
    periodic = torch.as_tensor(domain.periodic, device=positions.device)
    return torch.where(periodic, lo + torch.remainder(positions - lo, extent), positions)


class _Probe:
    """The positions/supports (and scene indices) bag the neighbour search accepts."""

    __slots__ = ("positions", "supports", "scenes")

    def __init__(self, positions, supports, scenes=None):
        self.positions, self.supports, self.scenes = positions, supports, scenes


class VerletNeighbours:
    """The Verlet-skin rebuild policy (module docstring): ``neighbours(state) ->
    AdjacencyList``.

    Each call hands the positions to `buildVerletList` with the prior list, which is kept
    while it is valid (one readback) and rebuilt otherwise. ``builds`` counts the searches,
    ``calls`` the calls.

    Args:
        domain: `DomainDescription`.
        supports: ``[N]`` compact supports H (the unscaled ones).
        skin: buffer as a fraction of the support (>= 0; 0: a new search whenever a
            particle moved).
        supportMode: `SupportScheme` of the search.
        wrap: wrap the positions on periodic axes before the rates see them (`place`).
        monitor: a `fluids.health.HealthMonitor` whose flags share the readback, or None.
        scenes: ``[N]`` int32 scene indices (particles of different scenes never pair), or
            None (one scene).
        openBoundary: a `fluids.openboundary.OpenBoundary`: `place` applies it after every
            step and the rebuild test leaves out the moves of its Ghost rows (the pool and
            the reservoir, `OpenBoundary.held`); None: none.
        kinds: ``[N]`` int32 static kinds (with `openBoundary`).
    """

    def __init__(self, domain, supports: torch.Tensor, skin: float = 0.1,
                 supportMode=SupportScheme.Gather, *, wrap: bool = True, monitor=None,
                 scenes: torch.Tensor | None = None, openBoundary=None, kinds=None):
        if not (isinstance(skin, (int, float)) and math.isfinite(skin) and skin >= 0):
            raise ValueError(f"VerletNeighbours: skin={skin!r}; accepted: a finite number >= 0")
        self.domain = domain
        self.supports = supports.detach()
        self.scale = 1.0 + float(skin)
        self.supportMode = SupportScheme(supportMode)
        self.wrap = bool(wrap)
        self.monitor = monitor
        self.scenes = scenes
        self.openBoundary, self.kinds = openBoundary, kinds
        if openBoundary is not None:
            if kinds is None:
                raise ValueError("VerletNeighbours: openBoundary needs kinds (the static "
                                 "kinds: walls Boundary)")
            openBoundary.checkReservoir(float(skin), float(self.supports.max()),
                                        "VerletNeighbours")
        self.adjacency: AdjacencyList | None = None
        self.builds = 0
        self.calls = 0

    def place(self, state):
        """`state` with its positions wrapped into the periodic axes (when ``wrap``) and the
        open boundary applied (`OpenBoundary.place`)."""
        if self.wrap:
            state = replace(state, positions=wrapPeriodic(state.positions, self.domain))
        if self.openBoundary is not None and not isinstance(state, torch.Tensor):
            state = self.openBoundary.place(state, self.kinds)
        return state

    def __call__(self, state) -> AdjacencyList:
        """The list for `state` (a `FluidState`, or an ``[N, d]`` positions tensor)."""
        positions = state if isinstance(state, torch.Tensor) else state.positions
        prior = self.adjacency
        probe = _Probe(positions.detach(), self.supports, self.scenes)
        monitor = None if isinstance(state, torch.Tensor) else self.monitor
        if monitor is not None and not monitor.due():
            monitor = None
        held = None
        if self.openBoundary is not None and prior is not None:
            held = self.openBoundary.held(probe.positions, self.kinds)
        if (monitor is None and held is None) or prior is None:
            adjacency = buildVerletList(probe, self.domain, self.scale, self.supportMode, prior)
            if monitor is not None:
                monitor.check(state)  # the first list: a readback of its own, once
        else:
            test = probe
            if held is not None and prior.queryPositions.shape == probe.positions.shape:
                # the Ghost rows' moves do not count (their entries are never read)
                test = _Probe(torch.where(held[:, None], prior.queryPositions.to(
                    probe.positions), probe.positions), self.supports, self.scenes)
            with deferVerletChecks() as flags:
                adjacency = buildVerletList(test, self.domain, self.scale, self.supportMode,
                                            prior)
            health = (monitor.flags(state) if monitor is not None
                      else torch.zeros(0, dtype=positions.dtype, device=positions.device))
            values = torch.cat([flags[0].to(health.dtype), health]).tolist()  # one readback
            if any(values[1:]):
                monitor.report(state, values[1:])
            if (adjacency is prior and values[0]) or (adjacency is not prior
                                                      and test is not probe):
                adjacency = buildVerletList(probe, self.domain, self.scale, self.supportMode,
                                            None)
        self.calls += 1
        if adjacency is not prior:
            self.builds += 1
        self.adjacency = adjacency
        return adjacency

    def stateDict(self) -> dict | None:
        """The current list as plain tensors and numbers (None before the first call)."""
        return adjacencyStateDict(self.adjacency)

    def loadStateDict(self, d: dict | None) -> None:
        """Restore a list saved by `stateDict` (the aliasing of the query and reference sets
        included), on the device of the supports."""
        self.adjacency = adjacencyFromStateDict(d, self.supports.device)


def adjacencyStateDict(a: AdjacencyList | None) -> dict | None:
    """An `AdjacencyList` as plain tensors and numbers (None stays None), for a restart
    file."""
    if a is None:
        return None
    return {"i": a.i, "j": a.j, "numNeighbors": a.numNeighbors, "edgeOffsets": a.edgeOffsets,
            "numRows": a.numRows, "numCols": a.numCols,
            "queryPositions": a.queryPositions, "querySupports": a.querySupports,
            "referencePositions": None if a.referencePositions is a.queryPositions
            else a.referencePositions,
            "referenceSupports": None if a.referenceSupports is a.querySupports
            else a.referenceSupports,
            "supportMode": int(a.supportMode), "verletScale": float(a.verletScale),
            "sceneIndex": a.sceneIndex}


def adjacencyFromStateDict(d: dict | None, device) -> AdjacencyList | None:
    """The `AdjacencyList` of `adjacencyStateDict` on `device` (the aliasing of the query
    and reference sets included)."""
    if d is None:
        return None

    def on(t):
        return None if t is None else t.to(device)

    qPos, qSup = on(d["queryPositions"]), on(d["querySupports"])
    rPos = qPos if d["referencePositions"] is None else on(d["referencePositions"])
    rSup = qSup if d["referenceSupports"] is None else on(d["referenceSupports"])
    return AdjacencyList(
        i=on(d["i"]), j=on(d["j"]), numNeighbors=on(d["numNeighbors"]),
        edgeOffsets=on(d["edgeOffsets"]), numRows=int(d["numRows"]),
        numCols=int(d["numCols"]), queryPositions=qPos, referencePositions=rPos,
        querySupports=qSup, referenceSupports=rSup,
        supportMode=SupportScheme(int(d["supportMode"])),
        verletScale=float(d["verletScale"]), sceneIndex=on(d.get("sceneIndex")))


def neighbourList(neighbours, state):
    """``(state placed, its list)`` from a neighbour policy (module docstring): a
    `VerletNeighbours` or any object with ``place``, an `AdjacencyList`, or a callable."""
    if isinstance(neighbours, AdjacencyList):
        return state, neighbours
    place = getattr(neighbours, "place", None)
    if place is not None:
        state = place(state)
    if not callable(neighbours):
        raise TypeError(f"neighbours is a {type(neighbours).__name__}; accepted: a "
                        "VerletNeighbours, an AdjacencyList or a callable state -> "
                        "AdjacencyList")
    return state, neighbours(state)
