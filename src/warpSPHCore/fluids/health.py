"""Health checks of a running simulation, without host synchronisation of their own.

A `HealthMonitor` computes a handful of device flags from a state: a non-finite field
(positions, velocities, densities), a particle outside the domain on a non-periodic axis, a
fluid particle through a wall face of its container, and a time step above the stable
limit of the state. `VerletNeighbours` folds these flags into the one value it reads back
at every rate evaluation anyway (`fluids.neighbours`), so a simulation is checked at every
rate evaluation for free; ``every = k`` checks every k-th evaluation only.

Only when a flag is set does the monitor read back what it needs to say what went wrong:
the field, the first particle index, its kind and its values, how many particles are
affected, and the time. What then happens depends on the check:

==================  ======================  ==============================================
check               default                 why
==================  ======================  ==============================================
non-finite field    raise                   the run is lost; the message names the field
                                            and the first particle, whose inputs are the
                                            place to look
time step           raise                   above the acoustic / viscous / body-force
                                            limit an explicit step gives finite garbage
                                            (docs/fluids.md, "Stable defaults")
wall crossing       warn (once)             a fluid particle whose centre is beyond a wall
                                            face of its container; recorded in ``events``
leaving the domain  warn (once)             e.g. a splash above an open tank; recorded
==================  ======================  ==============================================

``raise`` raises `SimulationHealthError` (a `ValueError`); ``warn`` issues a
`SimulationHealthWarning` the first time and records every event in ``events``; ``off``
skips the check.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from ..enumTypes import ParticleType

__all__ = ["HealthMonitor", "HealthEvent", "SimulationHealthError", "SimulationHealthWarning",
           "firstNonFinite", "boxContainer"]

_ACTIONS = ("raise", "warn", "off")
_FIELDS = ("positions", "velocities", "densities")


class SimulationHealthError(ValueError):
    """A health check of a simulation failed (`HealthMonitor`)."""


class SimulationHealthWarning(UserWarning):
    """A health check of a simulation reported an event (`HealthMonitor`)."""


@dataclass(frozen=True)
class HealthEvent:
    """One failed check: its name, the time, the first particle (its original index when
    the simulation sorted its particles), how many particles, the
    message, and for a wall crossing or a particle leaving the domain the largest distance
    beyond the face (NaN for the other checks)."""

    check: str
    time: float
    particle: int
    count: int
    message: str
    distance: float = math.nan


def _kindName(kinds, i: int) -> str:
    if kinds is None:
        return ""
    k = int(kinds[i])
    try:
        return f" ({ParticleType(k).name})"
    except ValueError:
        return f" (kind {k})"


def _values(t: torch.Tensor, i: int) -> str:
    row = t[i].detach().cpu().double()
    if row.dim() == 0:
        return f"{float(row):.6g}"
    return "[" + ", ".join(f"{float(v):.6g}" for v in row) + "]"


def _time(state) -> float:
    t = state.time
    return float(t.detach()) if isinstance(t, torch.Tensor) else float(t)


def firstNonFinite(name: str, t: torch.Tensor, kinds=None, ids=None) -> str | None:
    """A message naming the first non-finite row of the per-particle tensor `t` (its
    index, kind and values, and how many rows are affected), or None when all are finite.
    With `ids` (``[N]``, the original index of each row of a sorted set) the particle is
    named by its original index. Reads back (a diagnosis, not a per-step check)."""
    bad = ~torch.isfinite(t.detach())
    if bad.dim() > 1:
        bad = bad.flatten(1).any(1)
    rows = torch.nonzero(bad).flatten()
    if rows.numel() == 0:
        return None
    i = int(rows[0])
    return (f"{name} are not finite: particle {_particleName(ids, i)}{_kindName(kinds, i)} "
            f"has {name} {_values(t, i)}; {rows.numel()} of {t.shape[0]} particles affected")


def _particleName(ids, i: int) -> str:
    """Row i's particle: its index, or with `ids` its original index (and the row)."""
    return str(i) if ids is None else f"{int(ids[i])} (row {i} of the sorted set)"


class HealthMonitor:
    """Device flags of a state and what to do when one is set (module docstring).

    Args:
        domain: `DomainDescription`: particles outside [min, max] on its non-periodic axes
            are reported ("leaving the domain"); None: not checked.
        kinds: ``[N]`` int32 kinds (names in messages; the fluid rows of the wall check).
        container: ``(lower, upper)``, each ``[d]``: the wall faces a fluid particle must
            stay inside (``-inf`` / ``inf`` on an open side, e.g. `boxContainer`); None:
            not checked.
        timeStepLimit: ``limit(state) -> 0-dim tensor``, the stable time step of a state
            (e.g. `Scheme.timeStepLimit`); checked against ``dt``; None: not checked.
        timeStepTolerance: the check fires when dt > tolerance x the limit (a running
            state's speeds may exceed the expected ones a little; `Scheme.monitor` uses 1.5).
        dt: the time step of the run (set by `Simulation`).
        every: check every k-th rate evaluation (1: every one).
        nonFinite: "raise", "warn" or "off" (the module docstring's table).
        timeStep: "raise", "warn" or "off".
        wallCrossing: "raise", "warn" or "off".
        leavingDomain: "raise", "warn" or "off".
        openBoundary: a `fluids.openboundary.OpenBoundary` whose starved inflow (a lane's
            reservoir empty: its inflow would have a hole) is a seventh flag, with `kinds`
            the static kinds; None: not checked.
        inflow: the action on a starved inflow, "raise", "warn" or "off".
    """

    def __init__(self, *, domain=None, kinds=None, container=None, timeStepLimit=None,
                 timeStepTolerance: float = 1.0, dt=None, every: int = 1, nonFinite: str = "raise", timeStep: str = "raise",
                 wallCrossing: str = "warn", leavingDomain: str = "warn", openBoundary=None,
                 inflow: str = "raise"):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"HealthMonitor: every={every!r}; accepted: an int >= 1")
        actions = {"nonFinite": nonFinite, "timeStep": timeStep, "wallCrossing": wallCrossing,
                   "leavingDomain": leavingDomain, "inflow": inflow}
        for name, action in actions.items():
            if action not in _ACTIONS:
                raise ValueError(f"HealthMonitor: {name}={action!r}; accepted: "
                                 f"{', '.join(_ACTIONS)}")
        self.actions = actions
        self.domain, self.kinds, self.dt, self.every = domain, kinds, dt, every
        self.timeStepLimit = timeStepLimit
        if not (isinstance(timeStepTolerance, (int, float)) and timeStepTolerance >= 1.0
                and math.isfinite(timeStepTolerance)):
            raise ValueError(f"HealthMonitor: timeStepTolerance={timeStepTolerance!r}; "
                             "accepted: a finite number >= 1")
        self.timeStepTolerance = float(timeStepTolerance)
        self.container = None
        if container is not None:
            lower, upper = container
            self.container = (torch.as_tensor(lower), torch.as_tensor(upper))
        self.fluid = None if kinds is None else kinds == int(ParticleType.Fluid)
        if openBoundary is not None and kinds is None:
            raise ValueError("HealthMonitor: openBoundary needs kinds (the static kinds)")
        self.openBoundary = openBoundary
        if openBoundary is not None:
            # the particles that are not walls change roles with their positions: the
            # container check applies to the fluid zone only (`_throughWall`)
            self.fluid = None
        self.events: list[HealthEvent] = []
        self._warned: set = set()
        self._calls = 0
        #: ``[N]`` original index of each row when the simulation sorted its particles
        #: (`reorder`): messages and events name particles by it; None: the row is the index
        self.ids = None

    def reorder(self, step: torch.Tensor, ids: torch.Tensor) -> None:
        """Follow a sort of the particles (`Simulation.sort`): the per-particle kinds and
        fluid rows taken in the rows' new order `step`, and `ids` (the original index of
        each new row) naming the particles in messages and events."""
        if self.kinds is not None:
            self.kinds = self.kinds[step.to(self.kinds.device)]
        if self.fluid is not None:
            self.fluid = self.fluid[step.to(self.fluid.device)]
        self.ids = ids

    # -- the device side ----------------------------------------------------------------
    def due(self) -> bool:
        """Whether this rate evaluation is checked (every k-th)."""
        self._calls += 1
        return (self._calls - 1) % self.every == 0

    def flags(self, state) -> torch.Tensor:
        """``[6]`` flags (0 or 1, the positions' dtype): non-finite positions, velocities,
        densities; outside the domain; through a wall; time step above the limit; and with
        an open boundary a seventh, a starved inflow. No readback."""
        x = state.positions.detach()
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        out = [zero] * 6
        if self.actions["nonFinite"] != "off":
            out[0] = (~torch.isfinite(x)).any().to(x.dtype)
            out[1] = (~torch.isfinite(state.velocities.detach())).any().to(x.dtype)
            if state.densities is not None:
                out[2] = (~torch.isfinite(state.densities.detach())).any().to(x.dtype)
        if self.domain is not None and self.actions["leavingDomain"] != "off":
            out[3] = self._outsideDomain(x).any().to(x.dtype)
        if self.container is not None and self.actions["wallCrossing"] != "off":
            out[4] = self._throughWall(x).any().to(x.dtype)
        if self.timeStepLimit is not None and self.dt is not None \
                and self.actions["timeStep"] != "off":
            limit = self.timeStepLimit(state) * (self.timeStepTolerance * (1.0 + 1e-9))
            out[5] = (self._dt(x) > limit).to(x.dtype)
        if self.openBoundary is not None:
            starved = self.openBoundary.starved(x, self.kinds.to(x.device)).to(x.dtype)
            out.append(starved if self.actions["inflow"] != "off" else zero)
        return torch.stack(out)

    def _dt(self, like):
        dt = self.dt
        return dt.detach().to(like) if isinstance(dt, torch.Tensor) else \
            torch.as_tensor(float(dt), dtype=like.dtype, device=like.device)

    def _outsideDomain(self, x):
        lo, hi = self.domain.min.to(x), self.domain.max.to(x)
        periodic = torch.as_tensor(self.domain.periodic, device=x.device)
        return (((x < lo) | (x > hi)) & ~periodic).any(1)

    def _throughWall(self, x):
        lo, hi = (t.to(x) for t in self.container)
        out = ((x < lo) | (x > hi)).any(1)
        if self.openBoundary is not None:
            return out & self.openBoundary.zones(x, self.kinds.to(x.device)).fluid
        return out if self.fluid is None else out & self.fluid.to(x.device)

    # -- the host side ------------------------------------------------------------------
    def check(self, state) -> None:
        """Compute the flags, read them back (one readback) and `report`."""
        values = self.flags(state).tolist()
        if any(values):
            self.report(state, values)

    def report(self, state, values) -> None:
        """Diagnose the set flags `values` (from `flags`) and raise, warn or record (module
        docstring)."""
        t = _time(state)
        kinds = self.kinds
        for k, name in enumerate(_FIELDS):
            if not values[k]:
                continue
            field = getattr(state, name)
            message = firstNonFinite(name, field, kinds, self.ids) or \
                f"{name} are not finite"
            self._act("nonFinite", t, -1, 0, f"at t = {t:.6g}: {message}")
        x = state.positions.detach()
        if values[3]:
            lo, hi = self.domain.min.to(x), self.domain.max.to(x)
            periodic = torch.as_tensor(self.domain.periodic, device=x.device)
            self._located("leavingDomain", state, self._outsideDomain(x), lo, hi, ~periodic,
                          t, "outside the domain", "its boundary")
        if values[4]:
            lo, hi = (v.to(x) for v in self.container)
            self._located("wallCrossing", state, self._throughWall(x), lo, hi,
                          torch.isfinite(lo) | torch.isfinite(hi), t,
                          "beyond a wall face of its container", "the wall face")
        if len(values) > 6 and values[6]:
            ob = self.openBoundary
            lanes = ob.starvedLanes(x, self.kinds.to(x.device))
            self._act("inflow", t, -1, len(lanes),
                      f"at t = {t:.6g}: the inflow lane{'s' if len(lanes) != 1 else ''} "
                      f"{lanes[:8]}{' ...' if len(lanes) > 8 else ''} ran out of particles: "
                      "the pool beyond the outlet was empty when they needed one, so the "
                      "inlet buffer has a hole; give the channel more spare particles "
                      "(openChannel(..., spareLayers=...))")
        if values[5]:
            limit = float(self.timeStepLimit(state))
            dt = float(self._dt(x))
            tol = self.timeStepTolerance
            bound = f"{tol:g} times the stable limit" if tol != 1.0 else "the stable limit"
            self._act("timeStep", t, -1, 0,
                      f"at t = {t:.6g}: the time step {dt:.6g} is above {bound} of this "
                      f"state, {limit:.6g} ({dt / limit:.3g} times the limit); an explicit "
                      "step beyond it gives finite garbage. Use dt <= the limit (e.g. "
                      "Scheme.timeStep), or pass a monitor with timeStep='warn' or 'off' to "
                      "overrule")

    def _located(self, check: str, state, bad, lo, hi, axes, t: float, what: str,
                 face: str) -> None:
        rows = torch.nonzero(bad).flatten()
        if rows.numel() == 0:
            return
        i = int(rows[0])
        x = state.positions.detach()[i].cpu().double()
        lo, hi, axes = lo.cpu().double(), hi.cpu().double(), axes.cpu()
        where = ""
        for k in range(x.shape[0]):
            name = "xyz"[k] if x.shape[0] <= 3 else f"axis {k}"
            if axes[k] and x[k] < lo[k]:
                where = f" ({face} {name} = {float(lo[k]):.6g}, side -{name}, by " \
                        f"{float(lo[k] - x[k]):.3g})"
                break
            if axes[k] and x[k] > hi[k]:
                where = f" ({face} {name} = {float(hi[k]):.6g}, side +{name}, by " \
                        f"{float(x[k] - hi[k]):.3g})"
                break
        count = rows.numel()
        xs = state.positions.detach()[rows].cpu().double()
        beyond = torch.where(axes, torch.maximum(lo - xs, xs - hi), torch.zeros_like(xs))
        distance = float(beyond.clamp(min=0.0).amax())
        particle = i if self.ids is None else int(self.ids[i])
        self._act(check, t, particle, count,
                  f"at t = {t:.6g}: particle {_particleName(self.ids, i)}"
                  f"{_kindName(self.kinds, i)} at "
                  f"{_values(state.positions, i)} is {what}{where}; {count} "
                  f"particle{'s' if count != 1 else ''} affected", distance)

    def _act(self, check: str, t: float, particle: int, count: int, message: str,
             distance: float = math.nan) -> None:
        action = self.actions[check]
        if action == "raise":
            raise SimulationHealthError(f"simulation health check ({check}) failed " + message)
        self.events.append(HealthEvent(check, t, particle, count, message, distance))
        if check not in self._warned:
            self._warned.add(check)
            warnings.warn(f"simulation health check ({check}): {message} (reported once; "
                          "every event is in HealthMonitor.events)", SimulationHealthWarning,
                          stacklevel=4)


def boxContainer(lower, upper, walls="all", *, dtype=torch.float64, device="cpu"):
    """The ``(lower, upper)`` container of `HealthMonitor` for a `boxParticles` tank: the
    wall faces on the walled sides, ``-inf`` / ``inf`` on the open ones.

    Args:
        lower: ``[d]`` lower corner of the fluid box (as given to `boxParticles`).
        upper: ``[d]`` upper corner.
        walls: "all" or the walled sides, e.g. ("-x", "+x", "-y").
        dtype: of the returned tensors.
        device: of the returned tensors.

    Returns:
        ``(lower [d], upper [d])`` tensors.
    """
    d = len(lower)
    axes = "xyz"[:d]
    sides = [f"{s}{a}" for a in axes for s in "-+"] if walls == "all" else list(walls)
    lo = [float(lower[k]) if f"-{axes[k]}" in sides else -math.inf for k in range(d)]
    hi = [float(upper[k]) if f"+{axes[k]}" in sides else math.inf for k in range(d)]
    return (torch.tensor(lo, dtype=dtype, device=device),
            torch.tensor(hi, dtype=dtype, device=device))

