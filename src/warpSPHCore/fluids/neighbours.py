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

**A decision read once every k steps.** A `VerletNeighbours` set ``deferred`` (what
``LoopOptions(verletCheckEvery=k)`` does) makes no readback when it hands out its list: it
records on the device whether the list was still valid (an in-place OR into one flag) and
returns it. Its owner calls `decide` once every k steps: one readback of that flag, of the
health flags and of the test ahead, ``used + 2 x 1.5 x (k dt) x fastest speed <= buffer``
(`STEP_REACH`: the particles would have to speed up by half within the k steps to go past
it); when the test ahead fails the list is rebuilt there. A set flag means a list was used
beyond its buffer: `decide` says so and the owner takes the steps again from where it last
decided (`Simulation` does; never a silent stale list). Between decisions a step makes no
host synchronisation, so a segment of k steps can be captured as one CUDA graph.

**Health checks ride on the Verlet readback.** A `VerletNeighbours` given a ``monitor``
(`fluids.health.HealthMonitor`) folds the monitor's device flags (non-finite fields,
particles outside the domain or through a wall, a time step above the stable limit) into
the one value it reads back anyway, so the checks cost no host synchronisation of their
own. When a flag is set the monitor names the field, the first particle and its values
(reading back what it needs, once, on the failing path only).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace

import torch

from ..dataTypes.adjacency import AdjacencyList
from ..enumTypes import SupportScheme
from ..neighborhood.search import partitionRows
from ..neighborhood.verlet import buildVerletList, deferVerletChecks, verletBudget

__all__ = ["VerletNeighbours", "wrapPeriodic", "neighbourList", "adjacencyStateDict",
           "adjacencyFromStateDict", "STEP_REACH"]

# the bound ahead of a deferred decision: the motion of the k steps to the next decision is
# taken as this many times the distance the fastest particle covers in them
STEP_REACH = 1.5


def wrapPeriodic(positions: torch.Tensor, domain) -> torch.Tensor:
    """``[N, d]`` positions with the periodic axes of `domain` wrapped into [min, max):
    ``x - L floor((x - min) / L)`` with ``L = max - min``; the other axes, and every position
    already inside, unchanged (bit for bit). Differentiable (gradient 1: the shift is a
    constant of the positions' graph, one subtraction), no host sync.

    Args:
        positions: ``[N, d]`` positions.
        domain: `DomainDescription` (``min``, ``max``, ``periodic``).

    Returns:
        ``[N, d]`` wrapped positions.
    """
    with torch.no_grad():
        lo = domain.min.to(positions)
        extent = domain.max.to(positions) - lo
        periodic = torch.as_tensor(domain.periodic, device=positions.device)
        shift = torch.where(periodic, extent * torch.floor((positions - lo) / extent), 0.0)
    return positions - shift


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
        self.deferred = False
        self._violation: torch.Tensor | None = None
        # `place`'s last positions: (a weak reference to its input, the input's in-place
        # version, the output, the output's version)
        self._placed: tuple | None = None

    def place(self, state):
        """`state` with its positions wrapped into the periodic axes (when ``wrap``) and the
        open boundary applied (`OpenBoundary.place`).

        Wrapping is a function of the positions alone, and a step places the same positions
        twice (its rate evaluation places the drifted state, and the step's result carries
        the drifted positions): without an open boundary the last call's input (weakly) and
        output are kept with their in-place versions until the next call, so positions seen
        last come back as the tensor they gave then, and positions this policy returned are
        returned as they are."""
        if self.openBoundary is not None or isinstance(state, torch.Tensor):
            return self._place(state)
        x = state.positions
        memo = self._placed
        if memo is not None:
            inRef, inVersion, out, outVersion = memo
            if x is out and x._version == outVersion:
                return state
            if inRef() is x and x._version == inVersion and out._version == outVersion:
                return replace(state, positions=out)
        placed = self._place(state)
        y = placed.positions
        self._placed = (weakref.ref(x), x._version, y, y._version)
        return placed

    def _place(self, state):
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
        if self.deferred and prior is not None:
            return self._deferredList(probe, prior)
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
            test = self._testProbe(probe, prior, held)
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

    def _testProbe(self, probe, prior, held=None):
        """The positions the validity test sees: the Ghost rows of an open boundary (the
        pool and the reservoir, whose entries are never read) at their build positions."""
        if held is None and self.openBoundary is not None:
            held = self.openBoundary.held(probe.positions, self.kinds)
        if held is None or prior.queryPositions.shape != probe.positions.shape:
            return probe
        return _Probe(torch.where(held[:, None], prior.queryPositions.to(probe.positions),
                                  probe.positions), self.supports, self.scenes)

    def _flag(self, device) -> torch.Tensor:
        """The deferred validity flag (bool ``[1]``, updated in place: a captured segment
        writes the same buffer)."""
        if self._violation is None or self._violation.device != torch.device(device):
            self._violation = torch.zeros(1, dtype=torch.bool, device=device)
        return self._violation

    def _deferredList(self, probe, prior) -> AdjacencyList:
        """The list handed out between decisions: no readback, its validity ORed into the
        device flag."""
        test = self._testProbe(probe, prior)
        with deferVerletChecks() as flags:
            adjacency = buildVerletList(test, self.domain, self.scale, self.supportMode, prior)
        if adjacency is prior:
            self._flag(prior.i.device).logical_or_(flags[0])
        else:  # a host-known reason (sizes, dtype, device): a fresh search, eagerly
            if test is not probe:
                adjacency = buildVerletList(probe, self.domain, self.scale, self.supportMode,
                                            None)
            self.builds += 1
        self.calls += 1
        self.adjacency = adjacency
        return adjacency

    def decide(self, state, horizon) -> bool:
        """The deferred decision (module docstring), one readback: the health checks of
        `state`, whether a list was used beyond its buffer since the last decision, and the
        test ahead over `horizon` (the time to the next decision); the list is rebuilt when
        the test ahead fails (the search's own readback); `horizon` None: no test ahead and
        no rebuild (a check of the steps taken, which leaves the rebuild schedule as it
        was). Returns True when a list was used beyond its buffer: the steps since the last
        decision must be taken again (the flag is cleared)."""
        prior = self.adjacency
        monitor = self.monitor
        x = state.positions.detach()
        if prior is None:
            if monitor is not None:
                monitor.check(state)
            return False
        values = [self._flag(x.device).to(x.dtype)]
        if horizon is None:
            values.append(torch.zeros(1, dtype=x.dtype, device=x.device))
        else:
            held = None if self.openBoundary is None else self.openBoundary.held(x, self.kinds)
            probe = self._testProbe(_Probe(x, self.supports, self.scenes), prior, held)
            used, buffer = verletBudget(prior, probe, self.domain, self.supportMode)
            speed = self._fastest(state, held)
            h = horizon.detach().to(x) if isinstance(horizon, torch.Tensor) \
                else float(horizon)
            ahead = used + (2.0 * STEP_REACH) * h * speed
            values.append((~(ahead <= buffer)).to(x.dtype).reshape(1))
        if monitor is not None:
            values.append(monitor.flags(state))
        host = torch.cat(values).tolist()  # the decision's one readback
        if monitor is not None and any(host[2:]):
            monitor.report(state, host[2:])
        self._violation.zero_()
        if host[0]:
            return True
        if host[1]:
            self.rebuild(state)
        return False

    @staticmethod
    def _fastest(state, held=None) -> torch.Tensor:
        """The largest speed of the rows the test counts (velocities and, where a state
        carries them, transport velocities; not the `held` rows of an open boundary),
        0-dim."""
        v = state.velocities.detach()
        speeds = [torch.linalg.vector_norm(v, dim=1)]
        transport = getattr(state, "transportVelocities", None)
        if transport is not None:
            speeds.append(torch.linalg.vector_norm(transport.detach(), dim=1))
        speed = torch.stack(speeds).amax(0)
        if held is not None:
            speed = torch.where(held, 0.0, speed)
        if speed.shape[0] == 0:
            return torch.zeros((), dtype=v.dtype, device=v.device)
        return speed.amax().to(v.dtype)

    def rebuild(self, state) -> AdjacencyList:
        """A fresh search at `state` (its own readback); the deferred flag cleared."""
        x = state if isinstance(state, torch.Tensor) else state.positions
        self.adjacency = buildVerletList(_Probe(x.detach(), self.supports, self.scenes),
                                         self.domain, self.scale, self.supportMode, None)
        self.builds += 1
        if self._violation is not None:
            self._violation.zero_()
        return self.adjacency

    def stateDict(self) -> dict | None:
        """The current list as plain tensors and numbers (None before the first call), with
        the deferred validity flag."""
        d = adjacencyStateDict(self.adjacency)
        if d is not None and self._violation is not None:
            d["violation"] = self._violation.clone()
        return d

    def loadStateDict(self, d: dict | None) -> None:
        """Restore a list saved by `stateDict` (the aliasing of the query and reference sets
        included), on the device of the supports."""
        self.adjacency = adjacencyFromStateDict(d, self.supports.device)
        if d is not None and d.get("violation") is not None:
            self._flag(self.supports.device).copy_(d["violation"])


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
            "sceneIndex": a.sceneIndex, "symmetric": bool(a.symmetric)}


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
    adjacency = AdjacencyList(
        i=on(d["i"]), j=on(d["j"]), numNeighbors=on(d["numNeighbors"]),
        edgeOffsets=on(d["edgeOffsets"]), numRows=int(d["numRows"]),
        numCols=int(d["numCols"]), queryPositions=qPos, referencePositions=rPos,
        querySupports=qSup, referenceSupports=rSup,
        supportMode=SupportScheme(int(d["supportMode"])),
        verletScale=float(d["verletScale"]), sceneIndex=on(d.get("sceneIndex")))
    # the restart file's own record of how the search built the list (the library wrote it);
    # its rows put in the order a symmetric list promises, on a copy (a file written before
    # that order was kept; a list that keeps it is left as it is)
    if bool(d.get("symmetric", False)):
        d_, dtype = (1, torch.float64) if qPos is None else (int(qPos.shape[1]), qPos.dtype)
        adjacency.j = adjacency.j.clone()
        partitionRows(adjacency.j, adjacency.numNeighbors, adjacency.edgeOffsets, d_, dtype)
        adjacency.symmetric = True
    return adjacency


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
