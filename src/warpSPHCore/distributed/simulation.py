"""A `fluids.Scheme` simulation whose particles are divided among the ranks of a
torch.distributed process group (`DistributedSimulation`).

Each rank owns the particles of its subdomain (`decompose`) and integrates them with the
scheme's own stepper. A rate evaluation runs the scheme's rate function unchanged on the
rank's *extended* set: the owned particles followed by a halo of copies of the particles
other ranks own within reach of the subdomain; the rates of the owned rows are kept.

Exactness. A rate is a chain of neighbour sums: with summation density the densities are
a sum, the wall values a sum over the fluid near each wall, the momentum a sum over those
(`stencilDepth` counts the chain for a scheme). A quantity k sums deep is exact on the
extended set at every particle whose k H neighbourhood the set holds, so a halo of depth
``stencilDepth`` supports makes every owned rate exact: the same pairs and the same
arithmetic as one process, only the order of the sums differs (rounding).

Reuse between rebuilds. The halo is built ``(depth + skin) hMax`` wide and the extended
set's Verlet list with the supports scaled by ``1 + skin``; both stay valid while no
particle has moved more than ``skin hMin / 2`` since they were built. The test is made once
per step, before the step, on all ranks at once (one all-reduce, one readback): the largest
displacement plus 1.5 times the distance the fastest particle covers in a step (`STEP_REACH`;
the particles would have to speed up by half within one step to go past it). When it fails,
the particles go to their owners (`migrate`, every `rebalanceEvery`-th time after a new
bisection, `rebalance`), and the halo, the extended set's constants, its list and the
scheme's rate function are built again. Between rebuilds a rate evaluation moves the owned
fields to the halo in one exchange (no readback). Every evaluation also records, on the
device, how far the particles have moved; the next step's readback raises if a list was
used beyond its buffer (it cannot be reached with the step's bound, but a silent stale list
would be a wrong answer).

Gathering. `gather` (and `state`) returns the whole system on every rank, in the particles'
global order (their ids, the rows of the start): frames, diagnostics and the cases read it.
It is collective.

Restart. `save` writes one file per rank (its owned rows, carried rates, halo, list and
decomposition); `resume` on the same number of ranks continues bitwise.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch

from ..dataTypes.particleState import ParticleState
from ..fluids.integrators import FluidState, Rates, advance
from ..fluids.loop import LoopOptions, _fields, _resolveType, _typeName
from ..fluids.neighbours import _Probe, adjacencyFromStateDict, adjacencyStateDict, wrapPeriodic
from ..fluids.scheme import ParticleSet, Scheme
from ..neighborhood.verlet import buildVerletList
from ._comm import Route, collective, commDevice, exchangeCounts, globalMin, processGroup
from .decomposition import Decomposition, decompose
from .halo import Halo
from .migration import migrate, ownedSelection, rebalance

__all__ = ["DistributedSimulation", "stencilDepth"]

# the step bound of the rebuild test: the largest displacement plus this many times the
# distance the fastest particle covers in one step
STEP_REACH = 1.5


def stencilDepth(scheme: Scheme) -> int:
    """The number of chained neighbour sums in a rate of `scheme` (the halo depth, in
    supports, that makes the owned rates exact): 1 for the momentum (and continuity) sums,
    +1 with summation density (the densities are sums), +1 with walls (their values are
    sums over the fluid), +1 with the Antuono density diffusion (renormalised density
    gradients at the neighbours), +1 with user terms (which may read any neighbour sum)."""
    depth = 1
    if scheme.density == "summation":
        depth += 1
    if scheme.walls is not None:
        depth += 1
    dd = scheme.densityDiffusion
    if dd is not None and dd.kind == "antuono":
        depth += 1
    if scheme.terms:
        depth += 1
    return depth


def _localScheme(scheme: Scheme, rows: torch.Tensor, N: int) -> Scheme:
    """`scheme` with its per-particle parameters (a viscosity ``[N]``, a wall velocity or
    acceleration ``[N, d]`` such as a lid's) taken at the global rows `rows` of a rank's
    extended set; the scheme itself when it has none."""
    changes = {}
    nu = scheme.viscosity
    if isinstance(nu, torch.Tensor) and nu.dim() == 1 and nu.shape[0] == N:
        changes["viscosity"] = nu[rows]
    w = scheme.walls
    if w is not None:
        per = {k: getattr(w, k)[rows] for k in ("velocity", "accelerations")
               if isinstance(getattr(w, k), torch.Tensor) and getattr(w, k).dim() == 2
               and getattr(w, k).shape[0] == N}
        if per:
            changes["walls"] = dataclasses.replace(w, **per)
    return dataclasses.replace(scheme, **changes) if changes else scheme


def _rowFields(obj, n: int) -> dict:
    """The per-particle tensor fields (``[n, ...]``) of a dataclass state or rates."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n:
            out[f.name] = v
    return out


class _Policy:
    """The neighbour policy the stepper sees: ``place`` wraps the owned positions into the
    periodic axes, a call returns the extended set's list and records the displacement.
    `frozen` binds a list and its build positions (a checkpointed step, recomputed after
    later rebuilds); its ``live`` entry is cleared once the forward pass is over, so the
    recomputation records nothing."""

    def __init__(self, sim: DistributedSimulation, frozen: dict | None = None):
        self.sim, self.frozen = sim, frozen

    def place(self, state):
        f = self.frozen
        if f is None:
            return self.sim._place(state)
        return self.sim._place(state, f["kinds"], f["ids"])

    def __call__(self, state):
        f = self.frozen
        if f is None:
            return self.sim._list(state)
        if f["live"]:
            self.sim._list(state)
        return f["adjacency"]


class _Neighbours:
    """What the cases read of a simulation's neighbour policy: ``builds``, ``calls`` and
    ``adjacency``, a list of the whole gathered state (built on request, for
    post-processing; collective)."""

    def __init__(self, sim: DistributedSimulation):
        self.sim = sim
        self._list = None

    @property
    def builds(self) -> int:
        return self.sim.builds

    @property
    def calls(self) -> int:
        return self.sim.calls

    def __call__(self, state=None):
        """The list of the whole gathered state (`adjacency`; `state` is not read)."""
        return self.adjacency

    @property
    def adjacency(self):
        sim = self.sim
        if self._list is None or self._list[0] != sim.step:
            x = sim.state.positions.detach()
            H = sim.gather([sim.supports])[0]
            self._list = (sim.step, buildVerletList(_Probe(x, H), sim.domain, 1.0 + sim.skin,
                                                    sim.options.supportMode, None))
        return self._list[1]


class DistributedSimulation:
    """A `Scheme` on `particles` advanced on every rank of a process group (module
    docstring). Collective: every rank constructs it with the same arguments (the whole
    start, identical on every rank) and calls its methods in the same order.

    Args:
        scheme: the `fluids.Scheme`.
        particles: the whole `ParticleSet` (no open boundary, no scenes).
        state: the whole initial `FluidState`.
        dt: the time step (None: `Scheme.timeStep` for `maxSpeed`; a number above it
            raises).
        maxSpeed: the expected largest speed of the time-step limit.
        options: `fluids.LoopOptions` (skin, wrap, frames, restarts, progress; its
            ``supportMode`` is the scheme's).
        stepper: another stepper than the scheme's, or None.
        depth: the halo depth in supports (None: `stencilDepth` of the scheme).
        rebalanceEvery: a new bisection at every k-th rebuild (0: never).
        checkpoint: recompute each step in the backward pass instead of storing it
            (`torch.utils.checkpoint`): a differentiable rollout's memory is one step's.
        out: folder of the frames (rank 0 writes them) and restart files.
        writer: the frame writer (`warpSPHCore.io.writeParticles` by default).
        frameFields: ``(state, rates) -> dict`` of extra fields in the frames (on the
            gathered state).
        decomposition: a `Decomposition` to start from (None: `decompose` the start).
            Per-particle parameters of the scheme (a viscosity ``[N]``, a lid's wall
            velocity ``[N, d]``) are taken at each rank's rows; user `Term`s see the rank's
            extended set (its state, list and fields), not the whole one.
        group: the process group (None: the default group).

    Attributes:
        owned: this rank's `FluidState` (its owned rows).
        ids: int64 ``[n]`` global ids of the owned rows (rows of the start).
        carried: what the stepper carries for the owned rows (or None).
        step: the number of steps taken.
        decomposition, halo: the current `Decomposition` and `Halo`.
        builds: rebuilds of the halo and the list (the first included); ``calls``: rate
            evaluations (also as ``neighbours.builds`` and ``neighbours.calls``, with
            ``neighbours.adjacency`` a list of the gathered state, as `fluids.Simulation`).
        frames: frame files written (rank 0).
        seconds: wall seconds spent in ``migration`` (and rebalancing), ``haloBuild``
            (halo, constants and the extended list), ``exchange`` (the fields moved at each
            rate evaluation) and ``step`` (whole steps); `timings` per step.
    """

    def __init__(self, scheme: Scheme, particles: ParticleSet, state: FluidState, dt=None, *,
                 maxSpeed: float = 0.0, options: LoopOptions | None = None, stepper=None,
                 depth: int | None = None, rebalanceEvery: int = 0, checkpoint: bool = False,
                 out=None, writer=None, frameFields=None,
                 decomposition: Decomposition | None = None, group=None):
        where = "DistributedSimulation"
        self._configure(where, scheme, particles, state, dt, maxSpeed, options, stepper,
                        depth, rebalanceEvery, checkpoint, out, writer, frameFields, group)
        scheme.checkKinds(particles)
        x = state.positions
        if self.options.wrap:
            state = dataclasses.replace(state, positions=wrapPeriodic(x, particles.domain))
        N = state.positions.shape[0]
        if decomposition is None:
            decomposition = decompose(particles.domain, state.positions.detach(),
                                      particles.supports, replicated=True, group=group)
        self.decomposition = decomposition
        own = ownedSelection(decomposition, state.positions.detach())
        self.ids = torch.arange(N, device=x.device)[own]
        self.owned = dataclasses.replace(state, **{k: v[own] for k, v in
                                                   _rowFields(state, N).items()})
        self.supports = particles.supports.detach()[own]
        self.masses = particles.masses.detach()[own]
        self.kinds = particles.kinds[own]
        self.carried = None
        if self.openBoundary is not None:
            self.owned = self._place(self.owned)
        self._rebuild(move=False)
        self._frame()

    # ------------------------------------------------------------------ set-up
    def _configure(self, where, scheme, particles, state, dt, maxSpeed, options, stepper,
                   depth, rebalanceEvery, checkpoint, out, writer, frameFields, group):
        if options is not None and (options.verletCheckEvery > 1 or options.capture):
            raise ValueError(f"{where}: LoopOptions(verletCheckEvery="
                             f"{options.verletCheckEvery}, capture={options.capture}); "
                             "accepted across ranks: verletCheckEvery=1, capture=False (the "
                             "ranks decide together once per step, in one all-reduce)")
        if options is not None and options.sortEvery:
            raise ValueError(f"{where}: LoopOptions(sortEvery={options.sortEvery}); accepted "
                             "across ranks: sortEvery=0 (each rank's particles are regrouped "
                             "by their migration, and the ranks' frames keep the global "
                             "numbering)")
        self.group, self.rank, self.size = processGroup(where, group)
        if not isinstance(scheme, Scheme):
            raise TypeError(f"{where}: scheme is a {type(scheme).__name__}; accepted: a "
                            "fluids.Scheme")
        if particles.scenes is not None:
            raise ValueError(f"{where} (rank {self.rank}): scenes do not run across ranks; "
                             "accepted: a ParticleSet without scenes (run a batch of scenes "
                             "on each process instead)")
        if (state.densities is None) != (scheme.density == "summation"):
            raise ValueError(f"{where} (rank {self.rank}): the state carries "
                             f"{'no ' if state.densities is None else ''}densities but the "
                             f"scheme's density is {scheme.density!r}; accepted: densities "
                             "exactly with density='continuity'")
        dt = scheme.checkedTimeStep(particles, dt, maxSpeed, f"{where} (rank {self.rank})")
        options = LoopOptions() if options is None else options
        self.options = dataclasses.replace(options, supportMode=scheme.supportMode)
        if self.options.frameEvery and out is None:
            raise ValueError(f"{where}: frameEvery > 0 needs out (a folder)")
        if self.options.restartEvery and out is None:
            raise ValueError(f"{where}: restartEvery > 0 needs out (a folder)")
        if isinstance(rebalanceEvery, bool) or not isinstance(rebalanceEvery, int) \
                or rebalanceEvery < 0:
            raise ValueError(f"{where}: rebalanceEvery={rebalanceEvery!r}; accepted: an int "
                             ">= 0 (0: never)")
        self.depth = stencilDepth(scheme) if depth is None else int(depth)
        self.scheme, self.particles, self.dt = scheme, particles, dt
        self.domain = particles.domain
        self.stepper = scheme.stepper if stepper is None else stepper
        self.rebalanceEvery = rebalanceEvery
        self.checkpoint = bool(checkpoint)
        self.out = None if out is None else Path(out)
        if writer is None:
            from ..io import writeParticles as writer
        self.writer, self.frameFields = writer, frameFields
        self.skin = float(self.options.skin)
        H = particles.supports.detach()
        ob = self.openBoundary = particles.openBoundary
        if ob is not None:
            # a pool particle placed in the reservoir is listed (it migrates) at the next
            # rebuild, before it reaches the inlet
            ob.checkReservoir(self.skin, float(H.max()), f"{where} (rank {self.rank})")
        self.limit = 0.5 * self.skin * float(H.min()) if H.numel() else 0.0  # one readback
        self.step, self.builds, self.calls, self.rebalances = 0, 0, 0, 0
        self.frames: list[Path] = []
        self._framed: int | None = None
        self._gathered = None
        self.seconds = {"migration": 0.0, "haloBuild": 0.0, "exchange": 0.0, "step": 0.0}
        self._policy = _Policy(self)
        self._moved = None
        self.neighbours = _Neighbours(self)
        self.monitor = None  # the step's readback checks non-finite fields (`_check`)

    # ------------------------------------------------------------------ the extended set
    def _rebuild(self, move: bool = True) -> None:
        """Owners (when `move`), halo, the extended set's constants, list and rates."""
        start = time.perf_counter()
        owned, carried = self.owned, self.carried
        n = owned.positions.shape[0]
        names = list(_rowFields(owned, n))
        carriedNames = [] if carried is None else list(_rowFields(carried, n))
        if move and self.size > 1:  # (one rank owns everything)
            tensors = [getattr(owned, k) for k in names[1:]]
            tensors += [getattr(carried, k) for k in carriedNames]
            tensors += [self.supports, self.masses, self.kinds]
            x = owned.positions
            if self.rebalanceEvery and self.builds % self.rebalanceEvery == 0:
                self.decomposition, *moved = rebalance(self.decomposition, x, *tensors,
                                                       ids=self.ids)
                self.rebalances += 1
            else:
                moved = list(migrate(self.decomposition, x, *tensors, ids=self.ids))
            self.ids = moved.pop()
            self.supports, self.masses, self.kinds = moved[-3:]
            k = len(names)
            self.owned = dataclasses.replace(owned, **dict(zip(names, moved[:k])))
            if carried is not None:
                self.carried = dataclasses.replace(carried, **dict(zip(
                    carriedNames, moved[k:k + len(carriedNames)])))
        middle = time.perf_counter()
        x = self.owned.positions.detach()
        n = x.shape[0]
        H, m, kinds = self.supports, self.masses, self.kinds
        self.halo = Halo.build(self.decomposition, ParticleState(x, H, m, kinds),
                               depth=self.depth, skin=self.skin, ids=self.ids)
        Hx, mx, xe = self.halo.extend(H, m, x)
        kx = torch.cat([kinds, self.halo.kinds])
        p = self.particles
        extended = ParticleSet(Hx, mx, kx, self.domain, p.spacing, p.container,
                               openBoundary=self.openBoundary)
        rows = torch.cat([self.ids, self.halo.ids])
        self.rateFn = _localScheme(self.scheme, rows, p.supports.shape[0]).rates(extended,
                                                                                 check=False)
        self.adjacency = buildVerletList(_Probe(xe, Hx), self.domain, 1.0 + self.skin,
                                         self.options.supportMode, None)
        self.buildPositions = x.clone()
        self._moved = torch.zeros((), dtype=x.dtype, device=x.device)
        # every rank's owned count (for `gather`), from the all-to-all of n to everyone
        self.counts = exchangeCounts(torch.full((self.size,), n, dtype=torch.int64,
                                                device=x.device), self.group,
                                     where="DistributedSimulation sizes")[1]
        self.builds += 1
        self._gathered = None
        end = time.perf_counter()
        self.seconds["migration"] += middle - start
        self.seconds["haloBuild"] += end - middle

    def _displacement(self, x: torch.Tensor) -> torch.Tensor:
        """The largest distance (nearest periodic image) of the owned rows from where they
        were when the list was built (0-dim, on the device)."""
        if x.shape[0] == 0:
            return torch.zeros((), dtype=x.dtype, device=x.device)
        d = x.detach() - self.buildPositions
        dom = self.domain
        periodic = torch.as_tensor(dom.periodic, device=x.device)
        E = (dom.max - dom.min).to(x)
        d = torch.where(periodic, d - E * torch.round(d / E), d)
        r = torch.linalg.vector_norm(d, dim=1)
        if self.openBoundary is not None:  # the reservoir and the pool (never read) are left
            r = torch.where(self.openBoundary.held(x.detach(), self.kinds), 0.0, r)
        return r.amax()

    def _place(self, state, kinds=None, ids=None):
        """The owned state wrapped into the periodic axes and with the open boundary applied
        (the rows' kinds and global ids: the current ones, or those a checkpointed step
        was taken with)."""
        if self.options.wrap:
            state = dataclasses.replace(state, positions=wrapPeriodic(state.positions,
                                                                      self.domain))
        if self.openBoundary is not None:
            kinds = self.kinds if kinds is None else kinds
            ids = self.ids if ids is None else ids
            state = self.openBoundary.place(state, kinds, backs=self._backs,
                                            poolRanks=lambda removed: self._poolRanks(removed,
                                                                                      ids))
        return state

    def _backs(self, local: torch.Tensor) -> torch.Tensor:
        """The lanes' rearmost positions over every rank (differentiable)."""
        if self.size == 1:
            return local
        return globalMin(local, self.group, "open boundary lanes")

    def _poolRanks(self, removed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """1-based place of each pool row among every rank's pool rows in global-id order
        (one all-reduce of a flag per particle; no readback)."""
        if self.size == 1:
            return torch.cumsum(removed.to(torch.int64), 0)
        import torch.distributed as dist

        N = self.particles.supports.shape[0]
        comm = commDevice(self.group, removed.device)
        flags = torch.zeros(N, dtype=torch.int32, device=removed.device)
        flags[ids[removed]] = 1
        flags = flags.to(comm)
        with collective("open boundary pool", self.group, (N,), comm):
            dist.all_reduce(flags, group=self.group)
        return torch.cumsum(flags.to(removed.device, torch.int64), 0)[ids]

    def _list(self, state):
        self.calls += 1
        self._moved = torch.maximum(self._moved, self._displacement(state.positions))
        return self.adjacency

    def _rates(self, state, adjacency, halo=None, rateFn=None) -> Rates:
        """The scheme's rates of the owned rows: the owned fields extended by the halo (one
        exchange), the rate function on the extended set, the owned rows kept (the current
        halo and rate function, or those given)."""
        start = time.perf_counter()
        halo = self.halo if halo is None else halo
        rateFn = self.rateFn if rateFn is None else rateFn
        n = state.positions.shape[0]
        extended = state
        if self.size > 1:  # (one rank has no halo)
            fields = _rowFields(state, n)
            moved = halo.extend(*fields.values())
            if len(fields) == 1:
                moved = (moved,)
            extended = dataclasses.replace(state, **dict(zip(fields, moved)))
        self.seconds["exchange"] += time.perf_counter() - start
        r = rateFn(extended, adjacency)
        nx = extended.positions.shape[0]
        return dataclasses.replace(r, **{k: v[:n] for k, v in _rowFields(r, nx).items()})

    # ------------------------------------------------------------------ stepping
    def _check(self) -> bool:
        """The step's one readback (all ranks): whether the list holds for the next step;
        raises on a list used past its buffer and on non-finite fields (naming the rank and
        the particle)."""
        s = self.owned
        x, v = s.positions.detach(), s.velocities.detach()
        speed = torch.linalg.vector_norm(v, dim=1).amax() if v.shape[0] else \
            torch.zeros((), dtype=v.dtype, device=v.device)
        dt = self.dt.detach() if isinstance(self.dt, torch.Tensor) else self.dt
        reach = self._displacement(x) + STEP_REACH * dt * speed
        bad = ~torch.isfinite(x).all(1) | ~torch.isfinite(v).all(1)
        if s.densities is not None:
            bad = bad | ~torch.isfinite(s.densities.detach())
        values = [reach.double().reshape(1), self._moved.double().reshape(1),
                  bad.any().double().reshape(1)]
        ob = self.openBoundary
        if ob is not None:  # the lanes' rearmost particles, as maxima of their negatives
            values.append(-ob.rearmost(x, self.kinds).double())
        values = torch.cat(values)
        comm = commDevice(self.group, x.device)
        import torch.distributed as dist

        total = values.to(comm)
        if self.size > 1:
            with collective("DistributedSimulation step check", self.group, (values.shape[0],),
                        comm):
                dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.group)
        host = total.tolist()  # the step's one readback
        reachMax, moved, nonFinite = host[:3]
        if nonFinite:
            rows = torch.nonzero(bad).flatten()
            if rows.numel():
                i = int(rows[0])
                raise FloatingPointError(
                    f"DistributedSimulation (rank {self.rank}): particle {int(self.ids[i])} "
                    f"(global id) has a non-finite position, velocity or density at step "
                    f"{self.step}; the run diverged (a time step past the stable limit, or "
                    "particles too close)")
            raise FloatingPointError(
                f"DistributedSimulation (rank {self.rank}): another rank holds a particle "
                f"with a non-finite field at step {self.step} (its error names it)")
        if moved > self.limit * (1.0 + 1e-12):
            raise RuntimeError(
                f"DistributedSimulation (rank {self.rank}): a particle moved {moved:.4g} in "
                f"step {self.step}, past the buffer {self.limit:.4g} of its neighbour list "
                f"and halo (skin {self.skin:g} x smallest support / 2): the step's rates may "
                "miss pairs. Use a larger skin or a smaller time step")
        if ob is not None:
            starved = ob.starvedOf(-torch.tensor(host[3:], dtype=torch.float64))
            if bool(starved.any()):
                lanes = torch.nonzero(starved).flatten().tolist()
                raise RuntimeError(
                    f"DistributedSimulation (rank {self.rank}): at step {self.step} the "
                    f"inflow lane{'s' if len(lanes) != 1 else ''} {lanes[:8]}"
                    f"{' ...' if len(lanes) > 8 else ''} ran out of particles: the pool beyond "
                    "the outlet was empty when they needed one, so the inlet buffer has a "
                    "hole; give the channel more spare particles "
                    "(openChannel(..., spareLayers=...))")
        self._moved = torch.zeros_like(self._moved)
        return reachMax > self.limit

    def advance(self) -> FluidState:
        """One step: the rebuild test (one readback), a rebuild when it fails, then the
        stepper on the owned rows; returns the new owned state."""
        start = time.perf_counter()
        if self._check():
            self._rebuild()
        if self.checkpoint and torch.is_grad_enabled():
            self.owned, self.carried = self._checkpointed(self.owned, self.carried)
        else:
            self.owned, self.carried = advance(self.stepper, self.owned, self.dt, self._rates,
                                               self._policy, self.carried)
        self.step += 1
        self._gathered = None
        self.seconds["step"] += time.perf_counter() - start
        return self.owned

    def _checkpointed(self, owned, carried):
        """The step under `torch.utils.checkpoint`: its tensors are recomputed (with the
        same halo, list and rate function, bound here) in the backward pass."""
        from torch.utils.checkpoint import checkpoint

        n = owned.positions.shape[0]
        sNames = list(_rowFields(owned, n))
        cNames = [] if carried is None else list(_rowFields(carried, n))
        halo, rateFn = self.halo, self.rateFn
        frozen = {"adjacency": self.adjacency, "live": True, "kinds": self.kinds,
                  "ids": self.ids}
        stepper, dt, policy = self.stepper, self.dt, _Policy(self, frozen)

        def rates(state, adjacency):
            return self._rates(state, adjacency, halo, rateFn)

        layout = {}

        def run(*tensors):
            s = dataclasses.replace(owned, **dict(zip(sNames, tensors[:len(sNames)])))
            c = None if carried is None else dataclasses.replace(
                carried, **dict(zip(cNames, tensors[len(sNames):])))
            new, nc = advance(stepper, s, dt, rates, policy, c)
            layout["state"], layout["carried"] = new, nc
            out = [getattr(new, k) for k in _rowFields(new, n)]
            layout["sn"] = list(_rowFields(new, n))
            layout["cn"] = [] if nc is None else list(_rowFields(nc, n))
            out += [] if nc is None else [getattr(nc, k) for k in layout["cn"]]
            return tuple(out)

        inputs = [getattr(owned, k) for k in sNames]
        inputs += [] if carried is None else [getattr(carried, k) for k in cNames]
        outs = checkpoint(run, *inputs, use_reentrant=False)
        frozen["live"] = False
        k = len(layout["sn"])
        new = dataclasses.replace(layout["state"], **dict(zip(layout["sn"], outs[:k])))
        nc = layout["carried"]
        if nc is not None:
            nc = dataclasses.replace(nc, **dict(zip(layout["cn"], outs[k:])))
        return new, nc

    def run(self, steps: int | None = None, *, until=None, callback=None):
        """Advance by `steps` steps or to the time `until` (as `fluids.Simulation.run`;
        collective). Frames every ``options.frameEvery`` steps (gathered, written by rank
        0), restart files every ``options.restartEvery``.

        Returns:
            This rank's owned `FluidState`.
        """
        if (steps is None) == (until is None):
            raise ValueError("DistributedSimulation.run: give exactly one of steps and until")
        if until is not None:
            t0 = self.owned.time
            t0 = float(t0) if isinstance(t0, torch.Tensor) else t0
            dt = float(self.dt) if isinstance(self.dt, torch.Tensor) else self.dt
            steps = max(0, math.ceil((float(until) - t0) / dt - 1e-9))
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"DistributedSimulation.run: steps={steps!r}; accepted: an int "
                             ">= 0")
        from tqdm import tqdm

        opts = self.options
        self._frame()
        with tqdm(total=steps, desc=f"simulate ({self.size} ranks)", unit="step",
                  disable=not opts.progress or self.rank != 0) as bar:
            for _ in range(steps):
                self.advance()
                bar.update()
                if callback is not None:
                    callback(self)
                self._frame()
                if opts.restartEvery and self.step % opts.restartEvery == 0:
                    self.save(self.out / "restart.pt")
        return self.owned

    # ------------------------------------------------------------------ the whole system
    def gather(self, tensors=None):
        """The owned rows of every rank, on every rank, in global-id order (collective,
        differentiable; no readback: the counts are known since the last rebuild).

        Args:
            tensors: a list of per-particle tensors ``[n, ...]`` of this rank's owned rows
                (None: the owned state's fields).

        Returns:
            The list of gathered tensors ``[N, ...]``, or (None given) the whole
            `FluidState`.
        """
        s = self.owned
        n = s.positions.shape[0]
        fields = None
        if tensors is None:
            fields = _rowFields(s, n)
            tensors = list(fields.values())
        P = self.size
        route = Route(torch.arange(n, device=self.ids.device).repeat(P), [n] * P,
                      self.counts, n, self.group, "gather")
        moved = route.gather(*tensors, self.ids)
        ids = moved[-1]
        order = torch.argsort(ids)
        out = [t.index_select(0, order) for t in moved[:-1]]
        if fields is None:
            return out
        return dataclasses.replace(s, **dict(zip(fields, out)))

    @property
    def state(self) -> FluidState:
        """The whole `FluidState` in global order (`gather`, cached per step; collective:
        read it on every rank)."""
        if self._gathered is None:
            self._gathered = self.gather()
        return self._gathered

    @property
    def timings(self) -> dict:
        """Seconds per step of migration, halo build, exchange and the whole step, the
        rebuild count and this rank's owned and halo sizes."""
        steps = max(self.step, 1)
        out = {f"{k}SecondsPerStep": v / steps for k, v in self.seconds.items()}
        out.update(rank=self.rank, ranks=self.size, steps=self.step, builds=self.builds,
                   rebalances=self.rebalances, owned=int(self.owned.positions.shape[0]),
                   halo=self.halo.haloCount, depth=self.depth)
        return out

    def _frame(self) -> None:
        every = self.options.frameEvery
        if not every or self.step % every or self._framed == self.step:
            return
        s = self.state
        fields = {"positions": s.positions, "velocities": s.velocities}
        if s.densities is not None:
            fields["densities"] = s.densities
        rates = None
        if self.carried is not None:
            n = self.owned.positions.shape[0]
            names = list(_rowFields(self.carried, n))
            rates = dataclasses.replace(self.carried, **dict(zip(names, self.gather(
                [getattr(self.carried, k) for k in names]))))
            fields["accelerations"] = rates.accelerations
        if self.frameFields is not None:
            fields.update(self.frameFields(s, rates))
        path = self.out / f"frame_{self.step:06d}.{self.options.frameFormat}"
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            self.writer(path, fields=fields, domain=self.domain, time=s.time)
        self.frames.append(path)
        self._framed = self.step

    # ------------------------------------------------------------------ restart
    @staticmethod
    def rankPath(path, rank: int, size: int) -> Path:
        """The file of `rank` for the restart `path`: ``NAME.rank{r}of{P}.pt``."""
        p = Path(path)
        return p.with_name(f"{p.stem}.rank{rank}of{size}{p.suffix or '.pt'}")

    def save(self, path) -> Path:
        """Write this rank's restart file (`rankPath`; collective in spirit: every rank
        writes its own). Returns the path written."""
        target = self.rankPath(path, self.rank, self.size)
        target.parent.mkdir(parents=True, exist_ok=True)
        h, dec = self.halo, self.decomposition
        doc = {
            "version": 1, "rank": self.rank, "size": self.size, "step": self.step,
            "dt": self.dt.detach() if isinstance(self.dt, torch.Tensor) else self.dt,
            "state": {"type": _typeName(type(self.owned)), "fields": _fields(self.owned)},
            "carried": None if self.carried is None else {
                "type": _typeName(type(self.carried)), "fields": _fields(self.carried)},
            "ids": self.ids, "supports": self.supports, "masses": self.masses,
            "kinds": self.kinds,
            "decomposition": {f.name: getattr(dec, f.name) for f in dataclasses.fields(dec)
                              if f.name != "group"},
            "halo": {"sendIndex": h.route.sendIndex, "sendCounts": h.route.sendCounts,
                     "recvCounts": h.route.recvCounts, "sourceRows": h.route.sourceRows,
                     "shifts": h.shifts, "kinds": h.kinds, "ids": h.ids,
                     "sources": h.sources, "hMax": h.hMax, "reach": h.reach,
                     "depth": h.depth},
            "adjacency": adjacencyStateDict(self.adjacency),
            "buildPositions": self.buildPositions, "moved": self._moved,
            "counts": self.counts, "builds": self.builds, "rebalances": self.rebalances,
            "calls": self.calls,
        }
        torch.save(doc, target)
        return target

    @classmethod
    def resume(cls, path, scheme: Scheme, particles: ParticleSet, dt=None, *,
               maxSpeed: float = 0.0, options: LoopOptions | None = None, stepper=None,
               depth: int | None = None, rebalanceEvery: int = 0, checkpoint: bool = False,
               out=None, writer=None, frameFields=None, group=None) -> DistributedSimulation:
        """The simulation continued from the files `save` wrote for `path`, on the same
        number of ranks (each rank reads its own; collective). With the original run's
        options it continues bitwise.

        Raises:
            FileNotFoundError: this rank's file is missing.
            ValueError: the files were written by another number of ranks.
        """
        where = "DistributedSimulation.resume"
        _, rank, size = processGroup(where, group)
        target = cls.rankPath(path, rank, size)
        if not target.exists():
            others = sorted(Path(path).parent.glob(f"{Path(path).stem}.rank*of*"))
            raise FileNotFoundError(
                f"{where} (rank {rank}): no restart file {target} for {size} ranks"
                + (f"; found {', '.join(o.name for o in others[:4])}: restart on the number "
                   "of ranks that wrote them" if others else ""))
        device = particles.supports.device
        doc = torch.load(target, map_location=device, weights_only=False)
        if doc["size"] != size or doc["rank"] != rank:
            raise ValueError(f"{where} (rank {rank}): {target} was written by rank "
                             f"{doc['rank']} of {doc['size']}; accepted: the same number of "
                             "ranks as the run that wrote it")
        sim = cls.__new__(cls)
        stateType = _resolveType(doc["state"]["type"], FluidState)
        state = stateType(**doc["state"]["fields"])
        sim._configure(where, scheme, particles, state, doc["dt"] if dt is None else dt,
                       maxSpeed, options, stepper, depth, rebalanceEvery, checkpoint, out,
                       writer, frameFields, group)
        sim.owned = state
        c = doc["carried"]
        sim.carried = None if c is None else _resolveType(c["type"], Rates)(**c["fields"])
        sim.ids, sim.supports, sim.masses, sim.kinds = (doc[k] for k in
                                                        ("ids", "supports", "masses", "kinds"))
        sim.decomposition = Decomposition(**doc["decomposition"], group=group)
        h = doc["halo"]
        route = Route(h["sendIndex"], h["sendCounts"], h["recvCounts"], h["sourceRows"], group,
                      "halo")
        sim.halo = Halo(route, h["shifts"], h["kinds"], h["ids"], h["sources"], h["hMax"],
                        h["reach"], h["depth"])
        Hx, mx = sim.halo.extend(sim.supports, sim.masses)
        kx = torch.cat([sim.kinds, sim.halo.kinds])
        extended = ParticleSet(Hx, mx, kx, particles.domain, particles.spacing,
                               particles.container, openBoundary=particles.openBoundary)
        rows = torch.cat([sim.ids, sim.halo.ids])
        sim.rateFn = _localScheme(scheme, rows, particles.supports.shape[0]).rates(
            extended, check=False)
        sim.adjacency = adjacencyFromStateDict(doc["adjacency"], device)
        sim.buildPositions, sim._moved = doc["buildPositions"], doc["moved"]
        sim.counts, sim.builds = list(doc["counts"]), doc["builds"]
        sim.rebalances, sim.calls, sim.step = doc["rebalances"], doc["calls"], doc["step"]
        sim._framed = sim.step
        return sim
