"""The simulation loop: a neighbour list with a Verlet skin, health checks, frames, progress
and restarts around the steppers.

`Simulation` advances a `FluidState` by a *stepper* (default `integrators.defaultStepper`
of the state). Its rate function has the one signature of the fluids layer::

    def rates(state: FluidState, neighbours: AdjacencyList) -> Rates: ...

    sim = Simulation(state, rates, domain, supports, dt, options=LoopOptions(skin=0.1))
    sim.run(until=1.0)                 # or sim.run(steps=100); sim.state is the result
    sim.save("restart.pt")             # ... later, in another process:
    sim = Simulation.resume("restart.pt", rates, domain, supports)

A `Scheme` builds the rates, the stepper, the time step and the health checks of a case
(`Scheme.simulation`).

* **Neighbour list.** `VerletNeighbours` (`fluids.neighbours`) searches with supports
  scaled by s = 1 + skin and reuses the list while every particle has moved less than half
  the buffer: one readback per rate evaluation (plus the search's readback when it
  rebuilds). `rollout` takes the same policy and reuses the lists the same way.
* **Periodic positions.** With ``LoopOptions.wrap`` (default) the positions on the periodic
  axes are wrapped into ``[min, max)`` before each rate evaluation and after each step
  (``x <- min + (x - min) mod extent``: differentiable, gradient 1).
* **Health checks** (`fluids.health.HealthMonitor`) ride on the Verlet readback: a
  non-finite field raises with the field and the first particle, a particle leaving the
  domain or crossing a wall is reported, a time step above the stable limit raises. The
  initial state is checked when the simulation is built.
* **No host syncs per step** beyond the Verlet check (none at all between decisions read
  every k steps, below): the time step is a Python number or a
  0-dim tensor (a tensor is never read back; ``run(until=...)`` reads it once per call to
  count the steps), the step counter lives on the host, progress only counts steps. Frames
  and restart files copy the state to the host, every k steps.
* **Decisions every k steps.** With ``LoopOptions.verletCheckEvery = k > 1`` the list's
  rebuild decision is read once every k steps (`VerletNeighbours.decide`: the validity flags
  recorded on the device since the last decision, the health checks, and a test ahead over
  the next k steps, rebuilding when it fails); the steps in between make no host
  synchronisation (tests/fluids/test_loop.py counts 0). When the flags say a list was used
  beyond its buffer, the simulation goes back to the state, carried rates and step of the
  last decision, searches afresh there and takes those k steps again with a check at each
  rate evaluation (``replays`` counts it; frames are written again, callbacks see the steps
  again): the answer is the one of a check per evaluation, never a stale list's.
* **CUDA graphs.** ``LoopOptions(capture=True)`` records the k steps between two decisions
  as one CUDA graph (on static copies of the state and carried rates; the time becomes a
  0-dim float64 tensor) and replays it while the list holds: the first segment on a new list
  runs eagerly (it compiles the kernels and warms the caches), the next is captured, the
  following ones replay. The replay equals the eager steps bitwise (a CUDA test of ``make
  gpu-check``). Callbacks run once per segment; frames and restarts fall on segment ends.
* **Particle order.** With ``LoopOptions.sortEvery = k`` the particles are put in spatial
  order every k steps (`Simulation.sort`: `neighborhood.cellOrder` with cells of the largest
  support, scenes kept together), so that a flow that mixes them keeps its neighbours close
  in memory (a shuffled set of 262k-1M particles costs 2-5x a sorted one on the CPU). The
  state, the carried rates, the neighbour policy's supports, scenes and kinds and the
  monitor's kinds follow; the rate function is rebuilt for the sorted set by the
  simulation's ``reorder`` function (`Scheme.simulation` passes one); a fresh search
  follows (its readback). ``order`` holds the original index of each row and
  `inOriginalOrder` maps a tensor or a state back; frames are written in the original
  numbering and health messages name particles by their original index. Results equal an
  unsorted run to rounding (sums over a row run in another order), not bitwise. With
  deferred decisions the sort follows the decision (k a multiple of ``verletCheckEvery``).
  Not with an open boundary.
* **Frames** every ``LoopOptions.frameEvery`` steps go through a writer with the signature
  of `warpSPHCore.io.writeParticles` (``frame_000120.vtu``: positions, velocities,
  densities, accelerations and the fields of ``frameFields(state, rates)``).
* **Restarts.** `Simulation.save` writes one ``torch.save`` file with the state, the carried
  rates (the next step's first kick), the step, the time step and the neighbour list (its
  pairs *and* build positions): a run resumed from it continues bitwise as the uninterrupted
  run (tests/fluids/test_loop.py), because every step after it sees the same tensors, the
  same list and the same rebuild decisions. A sorted run's file holds its particles in the
  sorted order and that order; `Simulation.resume` needs the run's ``reorder`` then. The
  state and rates types may be subclasses of
  `FluidState` and `Rates` (e.g. the transport velocity's `TransportState`); their
  dataclass fields are stored and the types restored by name.

The loop differentiates like the steppers (the neighbour list is integer data); for
reverse mode over long rollouts use `fluids.rollout` with its checkpointing.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..enumTypes import SupportScheme
from ..io import writeParticles
from ..neighborhood.ordering import cellOrder, inverseOrder, reorder
from .health import HealthMonitor
from .integrators import FluidState, Rates, advance, defaultStepper
from .neighbours import VerletNeighbours, wrapPeriodic

__all__ = ["LoopOptions", "VerletNeighbours", "Simulation", "simulate", "wrapPeriodic",
           "saveRestart", "loadRestart", "Restart"]

_FORMAT = "warpSPHCore.fluids.loop/1"
_FRAME_FORMATS = ("vtu", "h5", "hdf5")


@dataclass(frozen=True)
class LoopOptions:
    """Options of `Simulation` (module docstring).

    Attributes:
        skin: Verlet buffer as a fraction of the support (s = 1 + skin; 0: a new search
            at every rate evaluation). The scaled support must stay below half the extent of
            each periodic axis (the search's rule).
        supportMode: `SupportScheme` of the neighbour search.
        wrap: wrap the positions into the periodic axes of the domain.
        frameEvery: write a frame every k steps (0: none); needs ``out`` and a writer.
        frameFormat: ``"vtu"`` (ParaView; meshio) or ``"h5"`` (h5py).
        restartEvery: write ``out/restart.pt`` every k steps (0: never).
        progress: show a tqdm progress bar.
        checkEvery: the default health checks (`fluids.health.HealthMonitor`: non-finite
            fields, particles leaving the domain) every k rate evaluations, on the Verlet
            readback (0: none; a monitor given to `Simulation` has its own interval).
        verletCheckEvery: read the neighbour list's rebuild decision once every k steps
            (1: at every rate evaluation). With k > 1 the steps between decisions make no
            host synchronisation; the health checks ride on the decision's readback (every
            k steps); a segment whose list went past its buffer is taken again with a check
            per step (module docstring, "Decisions every k steps").
        capture: record a segment of ``verletCheckEvery`` steps as one CUDA graph and
            replay it while the list holds (needs CUDA tensors that do not require grad,
            ``verletCheckEvery`` > 1, and ``frameEvery`` / ``restartEvery`` multiples of
            it; callbacks run once per segment).
        sortEvery: put the particles in spatial order (`neighborhood.cellOrder`, cells of
            the largest support) every k steps, with a fresh search (0: never; module
            docstring, "Particle order"). Needs the simulation's ``reorder`` function
            (`Scheme.simulation` passes one) and, with ``verletCheckEvery`` > 1, a multiple
            of it.
    """

    skin: float = 0.1
    supportMode: SupportScheme = SupportScheme.Gather
    wrap: bool = True
    frameEvery: int = 0
    frameFormat: str = "vtu"
    restartEvery: int = 0
    progress: bool = True
    checkEvery: int = 1
    verletCheckEvery: int = 1
    capture: bool = False
    sortEvery: int = 0

    def __post_init__(self):
        if not (isinstance(self.skin, (int, float)) and math.isfinite(self.skin)
                and self.skin >= 0):
            raise ValueError(f"LoopOptions: skin={self.skin!r}; accepted: a finite number >= 0")
        for name in ("frameEvery", "restartEvery", "checkEvery", "sortEvery"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"LoopOptions: {name}={v!r}; accepted: an int >= 0 (0: off)")
        k = self.verletCheckEvery
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"LoopOptions: verletCheckEvery={k!r}; accepted: an int >= 1")
        if not isinstance(self.capture, bool):
            raise ValueError(f"LoopOptions: capture={self.capture!r}; accepted: True or False")
        if self.capture:
            if k < 2:
                raise ValueError("LoopOptions: capture=True records the steps between two "
                                 "rebuild decisions; set verletCheckEvery >= 2 (the steps "
                                 "in one graph)")
            for name in ("frameEvery", "restartEvery"):
                v = getattr(self, name)
                if v % k:
                    raise ValueError(f"LoopOptions: {name}={v} with capture=True; accepted: "
                                     f"a multiple of verletCheckEvery={k} (a captured "
                                     "segment is replayed whole)")
        if self.sortEvery and self.sortEvery % k:
            raise ValueError(f"LoopOptions: sortEvery={self.sortEvery} with "
                             f"verletCheckEvery={k}; accepted: a multiple of verletCheckEvery "
                             "(the particles are sorted right after a rebuild decision)")
        if self.frameFormat not in _FRAME_FORMATS:
            raise ValueError(f"LoopOptions: frameFormat={self.frameFormat!r}; accepted: "
                             f"{', '.join(_FRAME_FORMATS)}")


@dataclass(frozen=True)
class Restart:
    """The contents of a restart file (`loadRestart`)."""

    state: FluidState
    rates: Rates | None
    step: int
    dt: float | torch.Tensor
    neighbours: dict | None
    #: ``[N]`` int64: the original index of each row of the state (a run with
    #: ``LoopOptions.sortEvery``), or None (the original numbering)
    order: torch.Tensor | None = None


def _typeName(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolveType(name: str, base: type) -> type:
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise TypeError(f"loadRestart: {name} is not a subclass of {base.__name__}")
    return obj


def _fields(obj) -> dict:
    """The dataclass fields of `obj`, tensors detached."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = v.detach() if isinstance(v, torch.Tensor) else v
    return out


def saveRestart(path, state: FluidState, rates: Rates | None, step: int, dt,
                neighbours: VerletNeighbours | None = None,
                order: torch.Tensor | None = None) -> Path:
    """Write a restart file (module docstring): the state's and the rates' dataclass fields
    (detached), their types by name, the step, the time step, the neighbour list and the
    particle order.

    Args:
        path: the file to write (its folder is created).
        state: the `FluidState` (or subclass) at `step`.
        rates: the carried rates at `state`, or None.
        step: the step number.
        dt: the time step (number or 0-dim tensor).
        neighbours: the `VerletNeighbours` whose list to store, or None.
        order: ``[N]`` int64 original index of each row of `state` (a sorted run), or None.

    Returns:
        The `pathlib.Path` written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": _FORMAT, "step": int(step),
           "dt": dt.detach() if isinstance(dt, torch.Tensor) else float(dt),
           "stateType": _typeName(type(state)), "state": _fields(state),
           "ratesType": None if rates is None else _typeName(type(rates)),
           "rates": None if rates is None else _fields(rates),
           "neighbours": None if neighbours is None else neighbours.stateDict(),
           "order": None if order is None else order.detach()}
    torch.save(doc, path)
    return path


def loadRestart(path, device=None) -> Restart:
    """Read a file written by `saveRestart` (``torch.load`` with ``weights_only=True``),
    its tensors moved to `device` when given.

    Args:
        path: the restart file.
        device: where to load the tensors (None: where they were saved).

    Returns:
        `Restart`.
    """
    doc = torch.load(Path(path), map_location=device, weights_only=True)
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise ValueError(f"loadRestart: {path} is not a restart file of {_FORMAT}")
    state = _resolveType(doc["stateType"], FluidState)(**doc["state"])
    rates = None if doc["rates"] is None else \
        _resolveType(doc["ratesType"], Rates)(**doc["rates"])
    return Restart(state, rates, int(doc["step"]), doc["dt"], doc["neighbours"],
                   doc.get("order"))


class Simulation:
    """A `FluidState` advanced step by step (module docstring).

    Args:
        state: the initial `FluidState` (or a subclass).
        rates: ``rates(state, neighbours) -> Rates``; `neighbours` is the Verlet list.
        domain: `DomainDescription` (the search's domain; periodic axes are wrapped).
        supports: ``[N]`` compact supports H of the neighbour search.
        dt: the time step, a Python number or a 0-dim tensor (fixed; never read back per
            step).
        stepper: ``stepper(state, dt, rates, neighbours, carried) -> (state, carried)``
            (default `integrators.defaultStepper` of the state: kick-drift-kick with
            summation density, predictor-corrector with integrated densities;
            `transportKickDriftKick` for the transport-velocity scheme; a `Scheme` names
            its own).
        options: `LoopOptions`.
        out: folder of the frames and restart files (created on first use), or None.
        writer: the frame writer, a function with the signature of
            `warpSPHCore.io.writeParticles` (None: that function).
        frameFields: ``(state, rates) -> dict`` of extra per-particle fields in the frames.
        monitor: the `HealthMonitor` whose checks ride on the Verlet readback (None: one
            that checks for non-finite fields and particles leaving the domain, every
            ``options.checkEvery`` rate evaluations; ``options.checkEvery = 0``: none). The
            initial state is checked at once.
        scenes: ``[N]`` int32 scene indices of a batch of independent scenes (the
            neighbour search never pairs particles of different scenes), or None.
        openBoundary: a `fluids.openboundary.OpenBoundary` applied after every step (and
            to the initial state), or None.
        kinds: ``[N]`` int32 static kinds (with `openBoundary`; also permuted with the
            particles when they are sorted).
        reorder: ``reorder(order) -> rates``: the rate function of the particles taken in
            the order `order` (``[N]`` int64, the original index of each new row), for
            ``LoopOptions.sortEvery``; `Scheme.simulation` passes one. None: the particles
            keep their order.

    Attributes:
        state, rates: the current state and what the stepper carries at it (kick-drift-
            kick: its end-of-step rates; None before the first step and for steppers that
            carry nothing).
        step: the number of steps taken (int).
        neighbours: the `VerletNeighbours` policy.
        monitor: the `HealthMonitor` (or None).
        frames: the frame files written, in order.
        replays: the segments taken again because a list went past its buffer (with
            ``verletCheckEvery`` > 1).
        captures: the CUDA graphs recorded (with ``capture``).
        order: ``[N]`` int64, the original index of each row of the state (the identity until
            a sort, ``LoopOptions.sortEvery``); `inOriginalOrder` maps a tensor or state
            back.
        sorts: the sorts done.
    """

    def __init__(self, state: FluidState, rates, domain, supports, dt, *,
                 stepper=None, options: LoopOptions | None = None, out=None,
                 writer=None, frameFields=None, monitor=None, scenes=None, openBoundary=None,
                 kinds=None, reorder=None):
        options = LoopOptions() if options is None else options
        if not isinstance(state, FluidState):
            raise TypeError(f"Simulation: state is a {type(state).__name__}; accepted: a "
                            "FluidState")
        if options.frameEvery and out is None:
            raise ValueError("Simulation: frameEvery > 0 needs out (a folder)")
        if options.restartEvery and out is None:
            raise ValueError("Simulation: restartEvery > 0 needs out (a folder)")
        if not isinstance(dt, torch.Tensor) and not (isinstance(dt, (int, float))
                                                     and math.isfinite(dt) and dt > 0):
            raise ValueError(f"Simulation: dt={dt!r}; accepted: a positive finite number or "
                             "a 0-dim tensor")
        if not callable(rates):
            raise TypeError(f"Simulation: rates is a {type(rates).__name__}; accepted: a "
                            "function rates(state, neighbours) -> Rates")
        if supports.shape != (state.positions.shape[0],):
            raise ValueError(f"Simulation: supports has shape {tuple(supports.shape)}; "
                             f"accepted: [{state.positions.shape[0]}] (one per particle)")
        if options.sortEvery:
            if reorder is None:
                raise ValueError("Simulation: LoopOptions(sortEvery=...) needs reorder, the "
                                 "rate function of the particles in a new order "
                                 "(reorder(order) -> rates); Scheme.simulation passes one")
            if openBoundary is not None:
                raise ValueError("Simulation: LoopOptions(sortEvery=...) with an open "
                                 "boundary, whose inlet and outlet pools keep an order of "
                                 "their own; accepted: sortEvery=0 with an openBoundary")
        if reorder is not None and not callable(reorder):
            raise TypeError(f"Simulation: reorder is a {type(reorder).__name__}; accepted: a "
                            "function reorder(order) -> rates, or None")
        self.state, self.rates, self.step = state, None, 0
        self.rateFn, self.domain, self.dt = rates, domain, dt
        self.stepper = defaultStepper(state) if stepper is None else stepper
        self.options = options
        self.out = None if out is None else Path(out)
        self.writer = writeParticles if writer is None else writer
        self.frameFields = frameFields
        if monitor is None and options.checkEvery:
            monitor = HealthMonitor(domain=domain, every=options.checkEvery)
        if monitor is not None:
            monitor.dt = dt
        self.monitor = monitor
        self.neighbours = VerletNeighbours(domain, supports, options.skin, options.supportMode,
                                           wrap=options.wrap, monitor=monitor, scenes=scenes,
                                           openBoundary=openBoundary, kinds=kinds)
        self.frames: list[Path] = []
        self._framed: int | None = None
        self.replays = 0
        self.captures = 0
        self.neighbours.deferred = options.verletCheckEvery > 1
        self._decided = None  # (state, rates, step) of the last deferred decision
        self._decidedAt = None  # its step
        self._eagerUntil = 0  # a replayed segment checks at every evaluation up to this step
        self._segment = None  # the captured segment (`_Segment`)
        self._warmList = None  # the list the last eager segment ran on (capture warms on it)
        self.reorderFn = reorder
        # the per-particle inputs in the original numbering (a sort permutes from these)
        self._originals = (supports.detach(), scenes, kinds)
        self.order = torch.arange(state.positions.shape[0], device=state.positions.device)
        self.sorts = 0
        self._sortedAt: int | None = None
        self._permuted = False
        self._cellSize: float | None = None  # cellOrder's cells: the largest support
        if options.wrap:
            self.state = replace(state, positions=wrapPeriodic(state.positions, domain))
        if openBoundary is not None:
            self.state = openBoundary.place(self.state, kinds)
        if monitor is not None:
            monitor.check(self.state)

    @classmethod
    def resume(cls, path, rates, domain, supports, dt=None, **kwargs) -> Simulation:
        """A simulation continued from a restart file: the state, carried rates, step and
        neighbour list of the file.

        Args:
            path: the restart file (`save`, `saveRestart`).
            rates: the rate function of the original run.
            domain: the `DomainDescription` of the original run.
            supports: ``[N]`` supports (their device is where the file is loaded).
            dt: the time step (None: the file's).
            **kwargs: as `Simulation`; use the options of the original run (another skin
                rebuilds the list: correct, but not bitwise the uninterrupted run), and its
                ``reorder`` when it sorted the particles (the file holds them in the sorted
                order; `rates` and `supports` are given in the original numbering).

        Returns:
            The `Simulation` at the file's step.
        """
        r = loadRestart(path, supports.device)
        dt = r.dt if dt is None else dt
        if r.order is None:
            sim = cls(r.state, rates, domain, supports, dt, **kwargs)
        else:  # a sorted run: built in the original numbering, then put in the file's order
            if kwargs.get("reorder") is None:
                raise ValueError(f"Simulation.resume: {path} holds particles in a sorted "
                                 "order; pass reorder (the rate function of the particles "
                                 "in a new order), as the original run had")
            sim = cls(reorder(r.state, inverseOrder(r.order)), rates, domain, supports, dt,
                      **kwargs)
            sim._applyOrder(r.order.to(sim.order.device))
        sim.state, sim.rates, sim.step = r.state, r.rates, r.step
        sim.neighbours.loadStateDict(r.neighbours)
        sim._framed = r.step  # that frame was written by the run that saved the file
        return sim

    def advance(self) -> FluidState:
        """One step of the stepper (`integrators.advance`); returns the new state. With
        ``verletCheckEvery`` = k > 1 a step whose number is a multiple of k first reads the
        rebuild decision (module docstring); when that goes back to the last decision, the
        step returned is the first step taken again."""
        k = self.options.verletCheckEvery
        if k > 1 and self.step % k == 0 and self.step >= self._eagerUntil \
                and self._decidedAt != self.step:
            self._decide()
        self._sortIfDue()
        self._step()
        return self.state

    def _sortIfDue(self) -> None:
        every = self.options.sortEvery
        if every and self.step and self.step % every == 0 and self._sortedAt != self.step:
            self.sort()

    def sort(self) -> torch.Tensor:
        """Put the particles in spatial order now (`neighborhood.cellOrder`, cells of the
        largest support, scenes kept together): the state, the carried rates, the rate
        function (``reorder``), the neighbour policy's supports, scenes and kinds and the
        health monitor's kinds, then a fresh search (its readback). ``order`` records the
        original index of each row. Returns this sort's permutation of the rows."""
        if self.reorderFn is None:
            raise ValueError("Simulation.sort: this simulation has no reorder function (the "
                             "rate function of the particles in a new order); build it "
                             "with Simulation(..., reorder=...) or Scheme.simulation")
        if self.neighbours.openBoundary is not None:
            raise ValueError("Simulation.sort: this simulation has an open boundary, whose "
                             "inlet and outlet pools keep an order of their own")
        supports, scenes, _ = self._originals
        if self._cellSize is None:  # the largest support, read once
            self._cellSize = float(supports.max())
        scenes = None if scenes is None else scenes[self.order]
        step = cellOrder(self.state.positions.detach(), self._cellSize, scenes)
        self._applyOrder(self.order[step], step)
        self.neighbours.rebuild(self.state)
        self.sorts += 1
        self._sortedAt = self.step
        if self._decidedAt == self.step:  # the decision's snapshot, in the new order
            self._decided = (self.state, self.rates, self.step)
        return step

    def _applyOrder(self, order: torch.Tensor, step: torch.Tensor | None = None) -> None:
        """The particles in the original numbering's `order`: `step` (default: from the
        current order) permutes the state and the carried rates; everything per particle
        is taken from the originals."""
        if step is None:
            step = inverseOrder(self.order)[order]
        # the rate function first: if building it fails, nothing has changed yet
        self.rateFn = self.reorderFn(order)
        self.state = reorder(self.state, step)
        if self.rates is not None:
            self.rates = reorder(self.rates, step)
        self.order = order
        self._permuted = True
        supports, scenes, kinds = self._originals
        nb = self.neighbours
        nb.supports = supports[order]
        nb.scenes = None if scenes is None else scenes[order]
        nb.kinds = None if kinds is None else kinds[order]
        nb.adjacency = None
        if self.monitor is not None:
            self.monitor.reorder(step, order)
        self._segment = None
        self._warmList = None

    def inOriginalOrder(self, obj):
        """`obj` (a per-particle tensor ``[N, ...]`` in the current order, or a dataclass of
        them such as ``sim.state``) in the original numbering (`neighborhood.reorder` with
        the inverse of ``order``; `obj` itself while the particles were never sorted)."""
        return reorder(obj, inverseOrder(self.order)) if self._permuted else obj

    def settle(self) -> bool:
        """Read the deferred rebuild decision now, unless it was read at this step (`run`
        ends with it, so the state it returns was computed with valid lists; after calling
        `advance` alone, call this before trusting the state). When a list had gone past its
        buffer the steps since the last decision are taken back (the state returns to it)
        and True is returned: advance to the step again. No-op (False) with
        ``verletCheckEvery`` = 1."""
        if self.options.verletCheckEvery == 1 or self._decidedAt == self.step:
            return False
        return self._decide(ahead=False)

    def _step(self) -> None:
        self.neighbours.deferred = (self.options.verletCheckEvery > 1
                                    and self.step >= self._eagerUntil)
        self.state, self.rates = advance(self.stepper, self.state, self.dt, self.rateFn,
                                         self.neighbours, self.rates)
        self.step += 1

    def _decide(self, ahead: bool = True) -> bool:
        """The deferred decision at a multiple of k (`ahead`: with the test ahead and its
        rebuild; else only the check of the steps taken, `settle`); on a list used past its
        buffer, back to the last decision (returns True)."""
        k = self.options.verletCheckEvery
        dt = self.dt.detach() if isinstance(self.dt, torch.Tensor) else self.dt
        if not self.neighbours.decide(self.state, k * dt if ahead else None):
            self._decided = (self.state, self.rates, self.step)
            self._decidedAt = self.step
            return False
        if self._decided is None:
            raise RuntimeError(
                f"Simulation: at step {self.step} a neighbour list had been used beyond its "
                "buffer, and the state of the last decision is not held (the run was resumed "
                "from a restart file since): the steps since may have missed pairs. Resume "
                "from an earlier restart with a smaller verletCheckEvery or a larger skin")
        self.state, self.rates, self.step = self._decided
        self._decidedAt = None
        self.neighbours.rebuild(self.state)
        self._eagerUntil = self.step + k
        self.replays += 1
        return True

    def stepsUntil(self, time) -> int:
        """The number of steps from the current time to `time` (the last step may end up to
        one rounding past it; choose ``dt = T / steps`` to land on T). Reads a tensor time
        step or time back once.

        Args:
            time: the end time.

        Returns:
            The number of steps (int >= 0).
        """
        t0 = self.state.time
        t0 = float(t0) if isinstance(t0, torch.Tensor) else t0
        dt = float(self.dt) if isinstance(self.dt, torch.Tensor) else self.dt
        return max(0, math.ceil((float(time) - t0) / dt - 1e-9))

    def run(self, steps: int | None = None, *, until=None, callback=None) -> FluidState:
        """Advance by `steps` steps, or to the time `until` (`stepsUntil`).

        Args:
            steps: the number of steps (exactly one of steps and until).
            until: the end time.
            callback: ``callback(simulation)`` after every step (e.g. to record 0-dim
                tensors of diagnostics without reading them back).

        Returns:
            The final state (also ``self.state``).
        """
        if (steps is None) == (until is None):
            raise ValueError("Simulation.run: give exactly one of steps and until")
        n = self.stepsUntil(until) if until is not None else steps
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"Simulation.run: steps={steps!r}; accepted: an int >= 0")
        from tqdm import tqdm

        opts = self.options
        target = self.step + n
        self._frame()
        with tqdm(total=n, desc="simulate", unit="step", disable=not opts.progress) as bar:
            while self.step < target or self.settle():
                before = self.step
                if opts.capture:
                    self._captureOrAdvance(target)
                else:
                    self.advance()
                bar.update(max(0, self.step - before))
                if callback is not None:
                    callback(self)
                self._frame()
                if opts.restartEvery and self.step % opts.restartEvery == 0:
                    self.save(self.out / "restart.pt")
        return self.state

    def _captureOrAdvance(self, target: int) -> None:
        """With ``capture``: a whole segment of k steps (eager on a new list, then captured
        and replayed), or one eager step where no whole segment fits."""
        k = self.options.verletCheckEvery
        if self.step % k or target - self.step < k or self.step < self._eagerUntil:
            self.advance()
            return
        _capturable(self.state, self.rates)
        if self._decidedAt != self.step and self._decide():
            return
        self._sortIfDue()
        adjacency = self.neighbours.adjacency
        if adjacency is None or self._warmList is not adjacency:
            for _ in range(k):  # the first segment on a list: eager (compiles, warms)
                self._step()
            self._warmList = self.neighbours.adjacency
            return
        if self._segment is None or self._segment.adjacency is not adjacency:
            self._segment = _Segment(self, k)
            self.captures += 1
        self.state, self.rates = self._segment.replay(self.state, self.rates)
        self.step += k
        self.neighbours.calls += self._segment.calls

    def save(self, path) -> Path:
        """Write a restart file (`saveRestart`) of the current step.

        Args:
            path: the file to write.

        Returns:
            The `pathlib.Path` written.
        """
        return saveRestart(path, self.state, self.rates, self.step, self.dt, self.neighbours,
                           self.order if self._permuted else None)

    def _frame(self) -> None:
        every = self.options.frameEvery
        if not every or self.step % every or self._framed == self.step:
            return
        s = self.state
        fields = {"positions": s.positions, "velocities": s.velocities}
        if s.densities is not None:
            fields["densities"] = s.densities
        if self.rates is not None:
            fields["accelerations"] = self.rates.accelerations
        if self.frameFields is not None:
            fields.update(self.frameFields(s, self.rates))
        if self._permuted:  # frames keep the original numbering
            back = inverseOrder(self.order)
            n = back.shape[0]
            fields = {k: v[back] if isinstance(v, torch.Tensor) and v.dim() >= 1
                      and v.shape[0] == n else v for k, v in fields.items()}
        path = self.out / f"frame_{self.step:06d}.{self.options.frameFormat}"
        self.out.mkdir(parents=True, exist_ok=True)
        self.writer(path, fields=fields, domain=self.domain, time=s.time)
        if path not in self.frames:  # a replayed segment writes its frames again
            self.frames.append(path)
        self._framed = self.step


def _capturable(state, rates) -> None:
    """Raise unless `state` and `rates` can be recorded in a CUDA graph."""
    x = state.positions
    if x.device.type != "cuda" and _graphFactory is _cudaGraph:
        raise ValueError(f"Simulation: LoopOptions(capture=True) records CUDA graphs; the "
                         f"state is on {x.device} (run it on a CUDA device, or without "
                         "capture)")
    grads = [prefix + f.name for prefix, obj in (("", state), ("rates.", rates))
             if obj is not None for f in dataclasses.fields(obj)
             if isinstance(getattr(obj, f.name), torch.Tensor)
             and getattr(obj, f.name).requires_grad]
    if grads and torch.is_grad_enabled():
        raise ValueError(f"Simulation: LoopOptions(capture=True) records no autograd graph, "
                         f"and {', '.join(grads)} require grad; run without capture to "
                         "differentiate, or under torch.no_grad()")


def _cloned(obj):
    """`obj` (a dataclass of tensors, or None) with every tensor field a detached copy."""
    if obj is None:
        return None
    return replace(obj, **{n: v.clone() for n, v in _fields(obj).items()
                           if isinstance(v, torch.Tensor)})


class _EagerGraph:
    """The stand-in of a CUDA graph where there is none: `capture` keeps the function,
    `replay` calls it (the tests run the segment logic on the CPU with it)."""

    def __init__(self, device):
        self.fn = None

    def capture(self, fn) -> None:
        self.fn = fn

    def replay(self) -> None:
        self.fn()


class _cudaGraph:
    """A ``torch.cuda.CUDAGraph`` holding torch and Warp work (`torchWarpCapture`)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.graph = None

    def capture(self, fn) -> None:
        from ..autograd.stream import torchWarpCapture, torchWarpStream

        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(side), torchWarpStream(self.device), torchWarpCapture(graph):
            fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph = graph

    def replay(self) -> None:
        self.graph.replay()


_graphFactory = _cudaGraph


class _Segment:
    """k steps of a `Simulation` recorded once (a CUDA graph) on static copies of the state
    and the carried rates, replayed while the list it was recorded with holds."""

    def __init__(self, sim: Simulation, k: int):
        self.adjacency = sim.neighbours.adjacency
        state, rates = sim.state, sim.rates
        time = state.time
        if not isinstance(time, torch.Tensor):
            time = torch.tensor(float(time), dtype=torch.float64, device=state.positions.device)
        self.state = _cloned(replace(state, time=time))
        self.rates = _cloned(rates)
        calls = sim.neighbours.calls

        def segment():
            s, r = self.state, self.rates
            for _ in range(k):
                s, r = advance(sim.stepper, s, sim.dt, sim.rateFn, sim.neighbours, r)
            _copyInto(self.state, s)
            _copyInto(self.rates, r)

        self.graph = _graphFactory(state.positions.device)
        with torch.no_grad():
            self.graph.capture(segment)
        self.calls = sim.neighbours.calls - calls
        sim.neighbours.calls = calls

    def replay(self, state, rates):
        """The state and carried rates k steps after (`state`, `rates`), as new tensors."""
        with torch.no_grad():
            _copyInto(self.state, state)
            _copyInto(self.rates, rates)
            self.graph.replay()
        return _cloned(self.state), _cloned(self.rates)


def _copyInto(static, values) -> None:
    """Copy the tensor fields of `values` into those of `static` (in place)."""
    if static is None:
        return
    for f in dataclasses.fields(static):
        dst, src = getattr(static, f.name), getattr(values, f.name)
        if isinstance(dst, torch.Tensor):
            if not isinstance(src, torch.Tensor):
                src = torch.as_tensor(src, dtype=dst.dtype, device=dst.device)
            dst.copy_(src)


def simulate(state: FluidState, rateFn, domain, supports, dt, *, steps=None, until=None,
             callback=None, **kwargs) -> Simulation:
    """Build a `Simulation` and run it for `steps` steps or to the time `until`.

    Args:
        state: the initial `FluidState`.
        rateFn: ``rates(state, neighbours) -> Rates``.
        domain: `DomainDescription`.
        supports: ``[N]`` supports of the neighbour search.
        dt: the time step (number or 0-dim tensor).
        steps: the number of steps (or `until`).
        until: the end time (or `steps`).
        callback: ``callback(simulation)`` after every step.
        **kwargs: the keyword arguments of `Simulation` (stepper, options, out, writer,
            frameFields).

    Returns:
        The `Simulation` after the run (``.state`` the final state, ``.rates``, ``.step``,
        ``.neighbours.builds``, ``.frames``).
    """
    sim = Simulation(state, rateFn, domain, supports, dt, **kwargs)
    sim.run(steps, until=until, callback=callback)
    return sim
