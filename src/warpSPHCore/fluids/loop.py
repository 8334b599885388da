"""The simulation loop (issue 16, item 3): a neighbour list with a Verlet skin, frames, progress
and restarts around the integrators.

`Simulation` advances a `FluidState` by a *stepper* (default `integrators.kickDriftKick`).
Its rate function receives the neighbour list as a second argument::

    def rates(state: FluidState, adjacency: AdjacencyList) -> Rates: ...

    sim = Simulation(state, rates, domain, supports, dt, options=LoopOptions(skin=0.1))
    sim.run(until=1.0)                 # or sim.run(steps=100); sim.state is the result
    sim.save("restart.pt")             # ... later, in another process:
    sim = Simulation.resume("restart.pt", rates, domain, supports)

* **Neighbour list.** `VerletNeighbours` searches with supports scaled by s = 1 + skin
  (`neighborhood.buildVerletList`) and reuses the list while every particle has moved less
  than half the buffer: the list is rebuilt iff ``2 max_i |x_i - x_i^build| + support drift >
  skin min H``. The decision is `buildVerletList`'s own, one readback per rate evaluation
  (plus the search's readback when it rebuilds). The list holds every pair with r_ij <=
  s H, so a rate function must give the pairs beyond its support zero weight; every compact
  kernel does (q > 1: W = 0, grad W = 0), so the library's operators and kernel-weighted
  edge sums accept it as it is.
* **Periodic positions.** With ``LoopOptions.wrap`` (default) the positions on the periodic
  axes are wrapped into ``[min, max)`` before each rate evaluation and after each step
  (``x <- min + (x - min) mod extent``: differentiable, gradient 1).
* **No host syncs per step** beyond the Verlet check: the time step is a Python number or a
  0-dim tensor (a tensor is never read back; ``run(until=...)`` reads it once per call to
  count the steps), the step counter lives on the host, progress only counts steps. Frames
  and restart files copy the state to the host, every k steps.
* **Frames** every ``LoopOptions.frameEvery`` steps go through a writer with the signature
  of `warpSPHCore.io.writeParticles` (``frame_000120.vtu``: positions, velocities,
  densities, accelerations and the fields of ``frameFields(state, rates)``). The writer is
  passed in by the caller (the command line passes `writeParticles`): `warpSPHCore.io`
  sits in the entry-point layer above `fluids` (pyproject's import-linter contract).
* **Restarts.** `Simulation.save` writes one ``torch.save`` file with the state, the carried
  rates (the next step's first kick), the step, the time step and the neighbour list (its
  pairs *and* build positions): a run resumed from it continues bitwise as the uninterrupted
  run (tests/fluids/test_loop.py), because every step after it sees the same tensors, the
  same list and the same rebuild decisions. The state and rates types may be subclasses of
  `FluidState` and `Rates` (e.g. the transport-velocity state of `fluids.cases`); their
  dataclass fields are stored and the types restored by name.

The loop differentiates like the integrators (the neighbour list is integer data); for
reverse mode over long rollouts use `fluids.rollout` with its checkpointing.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..dataTypes.adjacency import AdjacencyList
from ..enumTypes import SupportScheme
from ..io import writeParticles
from ..neighborhood.verlet import buildVerletList
from .integrators import FluidState, Rates, kickDriftKick

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
    """

    skin: float = 0.1
    supportMode: SupportScheme = SupportScheme.Gather
    wrap: bool = True
    frameEvery: int = 0
    frameFormat: str = "vtu"
    restartEvery: int = 0
    progress: bool = True

    def __post_init__(self):
        if not (isinstance(self.skin, (int, float)) and math.isfinite(self.skin)
                and self.skin >= 0):
            raise ValueError(f"LoopOptions: skin={self.skin!r}; accepted: a finite number >= 0")
        for name in ("frameEvery", "restartEvery"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"LoopOptions: {name}={v!r}; accepted: an int >= 0 (0: off)")
        if self.frameFormat not in _FRAME_FORMATS:
            raise ValueError(f"LoopOptions: frameFormat={self.frameFormat!r}; accepted: "
                             f"{', '.join(_FRAME_FORMATS)}")


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
    """The positions/supports bag the neighbour search accepts."""

    __slots__ = ("positions", "supports")

    def __init__(self, positions, supports):
        self.positions, self.supports = positions, supports


class VerletNeighbours:
    """The Verlet-skin rebuild policy: ``neighbours(positions) -> AdjacencyList``.

    Each call hands the positions to `buildVerletList` with the prior list, which returns the
    prior list while it is valid (one readback) and rebuilds it otherwise (module
    docstring). ``builds`` counts the searches, ``calls`` the calls.

    Args:
        domain: `DomainDescription`.
        supports: ``[N]`` compact supports H (the unscaled ones).
        skin: buffer as a fraction of the support (>= 0).
        supportMode: `SupportScheme` of the search.
    """

    def __init__(self, domain, supports: torch.Tensor, skin: float = 0.1,
                 supportMode=SupportScheme.Gather):
        if not (isinstance(skin, (int, float)) and math.isfinite(skin) and skin >= 0):
            raise ValueError(f"VerletNeighbours: skin={skin!r}; accepted: a finite number >= 0")
        self.domain = domain
        self.supports = supports.detach()
        self.scale = 1.0 + float(skin)
        self.supportMode = SupportScheme(supportMode)
        self.adjacency: AdjacencyList | None = None
        self.builds = 0
        self.calls = 0

    def __call__(self, positions: torch.Tensor) -> AdjacencyList:
        prior = self.adjacency
        adjacency = buildVerletList(_Probe(positions.detach(), self.supports), self.domain,
                                    self.scale, self.supportMode, prior)
        self.calls += 1
        if adjacency is not prior:
            self.builds += 1
        self.adjacency = adjacency
        return adjacency

    def stateDict(self) -> dict | None:
        """The current list as plain tensors and numbers (None before the first call)."""
        a = self.adjacency
        if a is None:
            return None
        return {"i": a.i, "j": a.j, "numNeighbors": a.numNeighbors, "edgeOffsets": a.edgeOffsets,
                "numRows": a.numRows, "numCols": a.numCols,
                "queryPositions": a.queryPositions, "querySupports": a.querySupports,
                "referencePositions": None if a.referencePositions is a.queryPositions
                else a.referencePositions,
                "referenceSupports": None if a.referenceSupports is a.querySupports
                else a.referenceSupports,
                "supportMode": int(a.supportMode), "verletScale": float(a.verletScale)}

    def loadStateDict(self, d: dict | None) -> None:
        """Restore a list saved by `stateDict` (the aliasing of the query and reference sets
        included), on the device of the supports."""
        if d is None:
            self.adjacency = None
            return
        dev = self.supports.device

        def on(t):
            return None if t is None else t.to(dev)

        qPos, qSup = on(d["queryPositions"]), on(d["querySupports"])
        rPos = qPos if d["referencePositions"] is None else on(d["referencePositions"])
        rSup = qSup if d["referenceSupports"] is None else on(d["referenceSupports"])
        self.adjacency = AdjacencyList(
            i=on(d["i"]), j=on(d["j"]), numNeighbors=on(d["numNeighbors"]),
            edgeOffsets=on(d["edgeOffsets"]), numRows=int(d["numRows"]),
            numCols=int(d["numCols"]), queryPositions=qPos, referencePositions=rPos,
            querySupports=qSup, referenceSupports=rSup,
            supportMode=SupportScheme(int(d["supportMode"])),
            verletScale=float(d["verletScale"]))


@dataclass(frozen=True)
class Restart:
    """The contents of a restart file (`loadRestart`)."""

    state: FluidState
    rates: Rates | None
    step: int
    dt: float | torch.Tensor
    neighbours: dict | None


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
                neighbours: VerletNeighbours | None = None) -> Path:
    """Write a restart file (module docstring): the state's and the rates' dataclass fields
    (detached), their types by name, the step, the time step and the neighbour list.

    Args:
        path: the file to write (its folder is created).
        state: the `FluidState` (or subclass) at `step`.
        rates: the carried rates at `state`, or None.
        step: the step number.
        dt: the time step (number or 0-dim tensor).
        neighbours: the `VerletNeighbours` whose list to store, or None.

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
           "neighbours": None if neighbours is None else neighbours.stateDict()}
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
    return Restart(state, rates, int(doc["step"]), doc["dt"], doc["neighbours"])


class Simulation:
    """A `FluidState` advanced step by step (module docstring).

    Args:
        state: the initial `FluidState` (or a subclass).
        rateFn: ``rates(state, adjacency) -> Rates``; `adjacency` is the Verlet list.
        domain: `DomainDescription` (the search's domain; periodic axes are wrapped).
        supports: ``[N]`` compact supports H of the neighbour search.
        dt: the time step, a Python number or a 0-dim tensor (fixed; never read back per
            step).
        stepper: ``stepper(state, dt, rateFn, rates) -> (state, rates)`` (default
            `kickDriftKick`; `fluids.cases.transport.transportKickDriftKick` for the
            transport-velocity scheme).
        options: `LoopOptions`.
        out: folder of the frames and restart files (created on first use), or None.
        writer: the frame writer, a function with the signature of
            `warpSPHCore.io.writeParticles` (None: that function).
        frameFields: ``(state, rates) -> dict`` of extra per-particle fields in the frames.

    Attributes:
        state, rates: the current state and the carried rates at it (None before the first
            step).
        step: the number of steps taken (int).
        neighbours: the `VerletNeighbours` policy.
        frames: the frame files written, in order.
    """

    def __init__(self, state: FluidState, rateFn, domain, supports, dt, *,
                 stepper=kickDriftKick, options: LoopOptions | None = None, out=None,
                 writer=None, frameFields=None):
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
        self.state, self.rates, self.step = state, None, 0
        self.rateFn, self.domain, self.dt = rateFn, domain, dt
        self.stepper, self.options = stepper, options
        self.out = None if out is None else Path(out)
        self.writer = writeParticles if writer is None else writer
        self.frameFields = frameFields
        self.neighbours = VerletNeighbours(domain, supports, options.skin, options.supportMode)
        self.frames: list[Path] = []
        self._framed: int | None = None
        if options.wrap:
            self.state = replace(state, positions=wrapPeriodic(state.positions, domain))

    @classmethod
    def resume(cls, path, rateFn, domain, supports, dt=None, **kwargs) -> Simulation:
        """A simulation continued from a restart file: the state, carried rates, step and
        neighbour list of the file.

        Args:
            path: the restart file (`save`, `saveRestart`).
            rateFn: the rate function of the original run.
            domain: the `DomainDescription` of the original run.
            supports: ``[N]`` supports (their device is where the file is loaded).
            dt: the time step (None: the file's).
            **kwargs: as `Simulation`; use the options of the original run (another skin
                rebuilds the list: correct, but not bitwise the uninterrupted run).

        Returns:
            The `Simulation` at the file's step.
        """
        r = loadRestart(path, supports.device)
        sim = cls(r.state, rateFn, domain, supports, r.dt if dt is None else dt, **kwargs)
        sim.state, sim.rates, sim.step = r.state, r.rates, r.step
        sim.neighbours.loadStateDict(r.neighbours)
        sim._framed = r.step  # that frame was written by the run that saved the file
        return sim

    def _evaluate(self, state: FluidState) -> Rates:
        if self.options.wrap:
            state = replace(state, positions=wrapPeriodic(state.positions, self.domain))
        return self.rateFn(state, self.neighbours(state.positions))

    def advance(self) -> FluidState:
        """One step of the stepper; returns the new state."""
        state, self.rates = self.stepper(self.state, self.dt, self._evaluate, self.rates)
        if self.options.wrap:
            state = replace(state, positions=wrapPeriodic(state.positions, self.domain))
        self.state = state
        self.step += 1
        return state

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
        self._frame()
        with tqdm(total=n, desc="simulate", unit="step", disable=not opts.progress) as bar:
            for _ in range(n):
                self.advance()
                bar.update()
                if callback is not None:
                    callback(self)
                self._frame()
                if opts.restartEvery and self.step % opts.restartEvery == 0:
                    self.save(self.out / "restart.pt")
        return self.state

    def save(self, path) -> Path:
        """Write a restart file (`saveRestart`) of the current step.

        Args:
            path: the file to write.

        Returns:
            The `pathlib.Path` written.
        """
        return saveRestart(path, self.state, self.rates, self.step, self.dt, self.neighbours)

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
        path = self.out / f"frame_{self.step:06d}.{self.options.frameFormat}"
        self.out.mkdir(parents=True, exist_ok=True)
        self.writer(path, fields=fields, domain=self.domain, time=s.time)
        self.frames.append(path)
        self._framed = self.step


def simulate(state: FluidState, rateFn, domain, supports, dt, *, steps=None, until=None,
             callback=None, **kwargs) -> Simulation:
    """Build a `Simulation` and run it for `steps` steps or to the time `until`.

    Args:
        state: the initial `FluidState`.
        rateFn: ``rates(state, adjacency) -> Rates``.
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
