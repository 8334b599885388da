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
* **No host syncs per step** beyond the Verlet check: the time step is a Python number or a
  0-dim tensor (a tensor is never read back; ``run(until=...)`` reads it once per call to
  count the steps), the step counter lives on the host, progress only counts steps. Frames
  and restart files copy the state to the host, every k steps.
* **Frames** every ``LoopOptions.frameEvery`` steps go through a writer with the signature
  of `warpSPHCore.io.writeParticles` (``frame_000120.vtu``: positions, velocities,
  densities, accelerations and the fields of ``frameFields(state, rates)``).
* **Restarts.** `Simulation.save` writes one ``torch.save`` file with the state, the carried
  rates (the next step's first kick), the step, the time step and the neighbour list (its
  pairs *and* build positions): a run resumed from it continues bitwise as the uninterrupted
  run (tests/fluids/test_loop.py), because every step after it sees the same tensors, the
  same list and the same rebuild decisions. The state and rates types may be subclasses of
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
    """

    skin: float = 0.1
    supportMode: SupportScheme = SupportScheme.Gather
    wrap: bool = True
    frameEvery: int = 0
    frameFormat: str = "vtu"
    restartEvery: int = 0
    progress: bool = True
    checkEvery: int = 1

    def __post_init__(self):
        if not (isinstance(self.skin, (int, float)) and math.isfinite(self.skin)
                and self.skin >= 0):
            raise ValueError(f"LoopOptions: skin={self.skin!r}; accepted: a finite number >= 0")
        for name in ("frameEvery", "restartEvery", "checkEvery"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"LoopOptions: {name}={v!r}; accepted: an int >= 0 (0: off)")
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
        kinds: ``[N]`` int32 static kinds (with `openBoundary`).

    Attributes:
        state, rates: the current state and what the stepper carries at it (kick-drift-
            kick: its end-of-step rates; None before the first step and for steppers that
            carry nothing).
        step: the number of steps taken (int).
        neighbours: the `VerletNeighbours` policy.
        monitor: the `HealthMonitor` (or None).
        frames: the frame files written, in order.
    """

    def __init__(self, state: FluidState, rates, domain, supports, dt, *,
                 stepper=None, options: LoopOptions | None = None, out=None,
                 writer=None, frameFields=None, monitor=None, scenes=None, openBoundary=None,
                 kinds=None):
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
                rebuilds the list: correct, but not bitwise the uninterrupted run).

        Returns:
            The `Simulation` at the file's step.
        """
        r = loadRestart(path, supports.device)
        sim = cls(r.state, rates, domain, supports, r.dt if dt is None else dt, **kwargs)
        sim.state, sim.rates, sim.step = r.state, r.rates, r.step
        sim.neighbours.loadStateDict(r.neighbours)
        sim._framed = r.step  # that frame was written by the run that saved the file
        return sim

    def advance(self) -> FluidState:
        """One step of the stepper (`integrators.advance`); returns the new state."""
        self.state, self.rates = advance(self.stepper, self.state, self.dt, self.rateFn,
                                         self.neighbours, self.rates)
        self.step += 1
        return self.state

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
