"""Open boundaries: inflow and outflow through buffer zones, with fixed-capacity arrays.

A channel along ``axis`` is cut into zones by the particles' positions along it:

=====================  ================================  ====================================
zone                   where                             role
=====================  ================================  ====================================
reservoir              x < x_in - L_in                   waiting inflow particles (kind Ghost)
inlet buffer           x_in - L_in <= x < x_in           prescribed velocity, pressure
                                                         extrapolated from the fluid (Boundary)
fluid                  x_in <= x < x_out                 the fluid (Fluid)
outlet buffer          x_out <= x < x_out + L_out        prescribed pressure, the velocity it
                                                         left the fluid with (Boundary)
removed                x >= x_out + L_out                the pool of free slots (Ghost)
=====================  ================================  ====================================

Walls (static kind Boundary) keep their kind. A particle's kind is therefore a function of
its position, computed on the device at every rate evaluation (`OpenBoundary.kinds`): the
state needs no extra field, rollouts, restarts and checkpoints carry it as they are, and
there is no host sync. The number of particles N is fixed: a particle leaves the outlet by
passing x_out + L_out (it stops and waits in the pool) and enters the inlet when the pool
supplies a slot.

**The inflow lanes.** The inlet's cross-section is a lattice of lanes (one per transverse
lattice point, spacing dx). Every reservoir and inlet-buffer particle of a lane moves at the
lane's inflow speed u_k(t) (`Inlet.velocity`), so a lane stays a row of particles dx apart.
After every step (`OpenBoundary.place`, run by the neighbour policy's ``place``) each lane
whose rearmost particle has passed x_res + dx (x_res = x_in - L_in - L_res, the start of the
reservoir) gets one particle dx behind it: the k-th such lane takes the k-th pool particle
in index order (prefix sums over masks, no host sync). A particle crossing x_in becomes
fluid with the velocity of its lane and the density the inlet buffer gave it.

**The neighbour list.** Ghost particles are not read by the scheme's interaction, so their
list entries may be stale: the Verlet policy leaves their moves (including the jump from the
pool to the reservoir) out of its rebuild test (`OpenBoundary.held`). A reservoir particle
moves with the inlet-buffer particles of its lane, so by the time it has moved half the
Verlet buffer a rebuild has happened and listed it where it is; the reservoir is therefore
at least that deep (`VerletNeighbours` checks ``reservoirLayers`` against the skin). No
extra rebuild and no extra readback per step come from the open boundary.

**Buffer values** (`fluids.scheme`): inlet-buffer particles carry the prescribed velocity
and the pressure of the dummy-wall extrapolation (a Shepard average of the fluid's pressures
plus the body-force term, zero-gradient); with a continuity equation their densities relax
to the density of that pressure over ``Inlet.relaxation`` (default 4 h / c0), so a particle
entering the fluid carries the local density. Outlet-buffer particles carry the outlet's
pressure (its density by the inverse equation of state) and relax their velocities to the
Shepard average of the fluid's over the same time (those out of the fluid's reach keep
theirs). The pressure level of the channel is set at the outlet, the flow rate at the
inlet: a well-posed pair for a weakly compressible flow. A fixed outlet pressure p_out
reflects acoustic waves with the opposite sign; the default outlet takes its pressure from
the characteristics of the linearised equations (``Outlet.characteristic``): the outgoing
p + rho0 c0 u from the fluid, the incoming p - rho0 c0 u at its reference (p_out and the
inflow speed u_k of the particle's lane), p_b = p_out + ((p_f - p_out) + rho0 c0 (u_f -
u_k)) / 2 with the fluid's Shepard averages p_f, u_f, so an outgoing wave mostly leaves and
the mean pressure at the outlet stays p_out.

**Starvation.** When a lane needs a particle and the pool is empty, its reservoir shrinks;
when a lane's reservoir is empty its inflow has a hole. `OpenBoundary.starved` is a device
flag of that state, checked by the `HealthMonitor` on the neighbour readback (an error
that names the lane): give the channel more spare particles (``spareLayers``).

**Derivatives.** Within a segment of steps the zones only move particles from one role to
the next; the inflow speeds, the positions and the velocities are differentiable (a spawned
particle's position is its lane's rearmost position minus dx), so reverse and forward mode
go through a rollout, and gradients with respect to the inflow speed follow the inlet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ..enumTypes import ParticleType

__all__ = ["Inlet", "Outlet", "OpenBoundary", "openChannel", "parabolicProfile"]

_BOUNDARY = int(ParticleType.Boundary)
_FLUID = int(ParticleType.Fluid)
_GHOST = int(ParticleType.Ghost)


def _positiveInt(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name}={value!r}; accepted: an int >= 1")
    return value


@dataclass(frozen=True)
class Inlet:
    """The inflow.

    Attributes:
        position: x_in, the plane along the channel's axis where the fluid starts.
        velocity: the inflow speed along the axis: a number or a 0-dim tensor (uniform;
            a tensor is differentiable), or a callable ``(lanes [M, d-1], t) -> [M]`` of the
            lanes' transverse coordinates and the time (`parabolicProfile`).
        layers: the buffer depth L_in in spacings (at least the support over dx).
        relaxation: the time over which an inlet-buffer particle's density relaxes to the
            density of its extrapolated pressure (continuity equation only); None: 4 h / c0.
    """

    position: float
    velocity: object
    layers: int = 4
    relaxation: float | None = None

    def __post_init__(self):
        _positiveInt("Inlet", "layers", self.layers)
        v = self.velocity
        if not (callable(v) or isinstance(v, (int, float))
                or (isinstance(v, torch.Tensor) and v.dim() == 0)):
            raise TypeError(f"Inlet: velocity is a {type(v).__name__}; accepted: a number, a "
                            "0-dim tensor or a callable (lanes [M, d-1], t) -> [M]")
        if self.relaxation is not None and not (self.relaxation > 0):
            raise ValueError(f"Inlet: relaxation={self.relaxation!r}; accepted: a positive "
                             "time or None")


@dataclass(frozen=True)
class Outlet:
    """The outflow.

    Attributes:
        position: x_out, the plane along the axis where the fluid ends.
        pressure: the outlet buffer's pressure (the channel's pressure level).
        layers: the buffer depth L_out in spacings (at least the support over dx).
        characteristic: the buffer's pressure from the characteristics (module docstring):
            p_b = p_out + ((p_f - p_out) + rho0 c0 (u_f - u_k)) / 2 with the fluid's Shepard
            averages p_f, u_f (along the axis) and the inflow speed u_k of the particle's
            lane as the reference velocity (the outflow of a channel of constant section);
            an outgoing acoustic wave mostly leaves instead of reflecting. False: p_b =
            p_out.
    """

    position: float
    pressure: float = 0.0
    layers: int = 4
    characteristic: bool = True

    def __post_init__(self):
        _positiveInt("Outlet", "layers", self.layers)


def parabolicProfile(maxSpeed, lower, upper, ramp: float = 0.0) -> Callable:
    """The laminar inflow profile of a plane channel (2D) or a square duct's separable
    approximation (3D, the product over the transverse axes): u = U_max prod_k 4 s_k (1 -
    s_k), s_k = (y_k - lower_k) / (upper_k - lower_k); multiplied by sin^2(pi t / (2 ramp))
    for t < ramp (a smooth start).

    Args:
        maxSpeed: U_max, a number or a 0-dim tensor (differentiable).
        lower: the cross-section's lower corner, ``[d-1]`` numbers.
        upper: its upper corner.
        ramp: the start-up time (0: none).

    Returns:
        ``profile(lanes [M, d-1], t) -> [M]`` for `Inlet.velocity`.
    """
    lower, upper = tuple(float(v) for v in lower), tuple(float(v) for v in upper)

    def profile(lanes, t):
        s = (lanes - torch.as_tensor(lower, dtype=lanes.dtype, device=lanes.device)) / \
            torch.as_tensor([u - lo for u, lo in zip(upper, lower)], dtype=lanes.dtype,
                            device=lanes.device)
        u = maxSpeed * torch.prod(4.0 * s * (1.0 - s), dim=1)
        if ramp > 0:
            tt = torch.as_tensor(t, dtype=lanes.dtype, device=lanes.device)
            w = torch.where(tt < ramp, torch.sin(0.5 * math.pi * tt / ramp) ** 2,
                            torch.ones_like(tt))
            u = u * w
        return u

    return profile


@dataclass(frozen=True)
class _Zones:
    reservoir: torch.Tensor
    inlet: torch.Tensor
    fluid: torch.Tensor
    outlet: torch.Tensor
    removed: torch.Tensor


@dataclass(frozen=True)
class OpenBoundary:
    """An inlet and an outlet on the faces of a channel along `axis` (module docstring).

    Attributes:
        inlet: `Inlet`.
        outlet: `Outlet`.
        spacing: the lattice spacing dx.
        lower: the inlet cross-section's lower corner on the transverse axes ``[d-1]``.
        counts: the number of lanes along each transverse axis.
        axis: the channel's axis.
        reservoirLayers: the reservoir depth L_res in spacings.
    """

    inlet: Inlet
    outlet: Outlet
    spacing: float
    lower: tuple
    counts: tuple
    axis: int = 0
    reservoirLayers: int = 4
    _lanes: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _candidates: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        _positiveInt("OpenBoundary", "reservoirLayers", self.reservoirLayers)
        if not self.outlet.position > self.inlet.position:
            raise ValueError(f"OpenBoundary: outlet position {self.outlet.position!r} is not "
                             f"downstream of the inlet position {self.inlet.position!r}; "
                             "accepted: x_out > x_in along the axis")
        object.__setattr__(self, "lower", tuple(float(v) for v in self.lower))
        object.__setattr__(self, "counts", tuple(int(c) for c in self.counts))

    # -- geometry ---------------------------------------------------------------------------
    @property
    def dimension(self) -> int:
        return len(self.counts) + 1

    @property
    def reservoirStart(self) -> float:
        """x_res: the upstream end of the reservoir."""
        return self.inlet.position - (self.inlet.layers + self.reservoirLayers) * self.spacing

    @property
    def outletEnd(self) -> float:
        """x_out + L_out: where a particle leaves the outlet buffer for the pool."""
        return self.outlet.position + self.outlet.layers * self.spacing

    def _transverse(self) -> list[int]:
        return [k for k in range(self.dimension) if k != self.axis]

    def lanes(self, like: torch.Tensor) -> torch.Tensor:
        """``[M, d-1]`` transverse coordinates of the inflow lanes (cell centres)."""
        key = (like.dtype, like.device)
        if key not in self._lanes:
            axes = [self.lower[k] + (torch.arange(c, dtype=like.dtype, device=like.device)
                                     + 0.5) * self.spacing for k, c in enumerate(self.counts)]
            grid = torch.meshgrid(*axes, indexing="ij")
            self._lanes[key] = torch.stack([g.reshape(-1) for g in grid], dim=1)
        return self._lanes[key]

    def laneOf(self, x: torch.Tensor) -> torch.Tensor:
        """``[N]`` int64 lane index of each position (the nearest lane, clamped)."""
        t = x[:, self._transverse()].detach()
        flat = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        for k, c in enumerate(self.counts):
            idx = torch.floor((t[:, k] - self.lower[k]) / self.spacing).to(torch.int64)
            flat = flat * c + idx.clamp(0, c - 1)
        return flat

    def speeds(self, t, like: torch.Tensor) -> torch.Tensor:
        """``[M]`` inflow speeds of the lanes at time `t`."""
        lanes = self.lanes(like)
        v = self.inlet.velocity
        if callable(v):
            out = v(lanes, t)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (lanes.shape[0],):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(f"Inlet: the velocity profile returned {got}; accepted: "
                                 f"[{lanes.shape[0]}] (one speed per lane)")
            return out.to(like.dtype)
        return torch.as_tensor(v, dtype=like.dtype, device=like.device).expand(lanes.shape[0])

    def zones(self, x: torch.Tensor, kinds: torch.Tensor) -> _Zones:
        """The zone masks of positions `x` (module table); `kinds` are the static kinds
        (walls Boundary)."""
        xa = x[:, self.axis].detach()
        dx = self.spacing
        inletStart = self.inlet.position - self.inlet.layers * dx
        open_ = kinds != _BOUNDARY
        below = xa < self.inlet.position
        beyond = xa >= self.outlet.position
        return _Zones(reservoir=open_ & (xa < inletStart),
                      inlet=open_ & below & (xa >= inletStart),
                      fluid=open_ & ~below & ~beyond,
                      outlet=open_ & beyond & (xa < self.outletEnd),
                      removed=open_ & (xa >= self.outletEnd))

    def kinds(self, x: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        """``[N]`` int32 kinds at positions `x`: walls and buffers Boundary, the reservoir and
        the pool Ghost, the rest Fluid (module table). No host sync."""
        return self.kindsOf(self.zones(x, kinds), kinds)

    @staticmethod
    def kindsOf(z: _Zones, kinds: torch.Tensor) -> torch.Tensor:
        """`kinds` of the zones `z` (`zones` of the same positions)."""
        out = torch.where(z.inlet | z.outlet, _BOUNDARY, kinds)
        out = torch.where(z.reservoir | z.removed, _GHOST, out)
        return torch.where(z.fluid, _FLUID, out).to(torch.int32)

    def checkReservoir(self, skin: float, hMax: float, where: str) -> None:
        """Raise unless the reservoir is deeper than half a Verlet buffer (`skin` times the
        largest support `hMax`) plus two spacings: the rebuild test leaves the reservoir out,
        so a particle placed in it must not reach the inlet before the next rebuild lists
        it."""
        reach = 0.5 * float(skin) * float(hMax) + self.spacing
        room = (self.reservoirLayers - 1) * self.spacing
        if reach > room:
            raise ValueError(f"{where}: the open boundary's reservoir "
                             f"({self.reservoirLayers} layers) is shallower than half the "
                             f"Verlet buffer plus two spacings ({reach:.4g} > {room:.4g}), so "
                             "an inflow particle could enter the inlet before the list has "
                             f"seen it; accepted: reservoirLayers >= "
                             f"{math.ceil(reach / self.spacing) + 1}, or a smaller skin")

    def held(self, x: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        """bool ``[N]``: the rows whose moves the Verlet rebuild test leaves out (Ghost)."""
        z = self.zones(x, kinds)
        return z.reservoir | z.removed

    def candidates(self, adjacency, kinds: torch.Tensor, x: torch.Tensor):
        """``(rows, references)`` bool ``[N]``: every particle that may be a wall or buffer
        row, and a fluid reference, while the list `adjacency` is in use, from the positions
        it was built at (or `x`) widened by the distance a particle may move before a Verlet
        rebuild, half the buffer (`walls.wallFluidEdges`). Cached per list: the wall-fluid
        edges are then selected once per list, not once per evaluation. No host sync."""
        hit = self._candidates.get(id(adjacency))
        if hit is not None and hit[0] is adjacency:
            return hit[1]
        built = getattr(adjacency, "queryPositions", None)
        if built is None or built.shape != x.shape:
            built, slack = x.detach(), torch.zeros((), dtype=x.dtype, device=x.device)
        else:
            scale = float(getattr(adjacency, "verletScale", 1.0))
            slack = 0.5 * (scale - 1.0) / scale * adjacency.querySupports.detach().amax()
        xa = built[:, self.axis].to(x.dtype)
        slack = slack.to(x.dtype) + 1e-9 * self.spacing
        dx = self.spacing
        open_ = kinds != _BOUNDARY
        inletStart = self.inlet.position - self.inlet.layers * dx
        x_in, x_out, end = self.inlet.position, self.outlet.position, self.outletEnd
        band = ((xa >= inletStart - slack) & (xa < x_in + slack)) | \
            ((xa >= x_out - slack) & (xa < end + slack))
        rows = ~open_ | (open_ & band)
        refs = open_ & (xa >= x_in - slack) & (xa < x_out + slack)
        if len(self._candidates) > 4:
            self._candidates.clear()
        self._candidates[id(adjacency)] = (adjacency, (rows, refs))
        return rows, refs

    def _backs(self, xa, lane, feed, like):
        M = math.prod(self.counts)
        start = torch.full((M,), self.inlet.position, dtype=like.dtype, device=like.device)
        values = torch.where(feed, xa, torch.full_like(xa, self.inlet.position))
        return start.scatter_reduce(0, lane, values, "amin", include_self=True)

    def rearmost(self, x: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        """``[M]`` the axial position of each lane's rearmost reservoir or inlet particle
        (the inlet's position for an empty lane); detached."""
        z = self.zones(x, kinds)
        return self._backs(x[:, self.axis].detach(), self.laneOf(x), z.reservoir | z.inlet, x)

    def starvedOf(self, back: torch.Tensor) -> torch.Tensor:
        """bool ``[M]``: the lanes whose rearmost particle (`rearmost`) is past the
        reservoir's downstream end (an empty reservoir)."""
        end = self.inlet.position - self.inlet.layers * self.spacing
        return back > end + 1e-9 * self.spacing

    def _starvedMask(self, x: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        return self.starvedOf(self.rearmost(x, kinds))

    def starved(self, x: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
        """0-dim bool: some lane's reservoir is empty, so its inflow will have a hole. No
        host sync."""
        return self._starvedMask(x, kinds).any()

    def starvedLanes(self, x: torch.Tensor, kinds: torch.Tensor) -> list[int]:
        """The starved lanes (for messages; reads back)."""
        return torch.nonzero(self._starvedMask(x, kinds)).flatten().tolist()

    # -- the step -----------------------------------------------------------------------------
    def place(self, state, kinds: torch.Tensor, *, backs=None, poolRanks=None):
        """`state` after a step with the open boundary applied (module docstring): the
        reservoir and inlet rows at their lanes' inflow velocity, pool rows at rest, outlet
        rows not flowing back, and one pool particle placed dx behind the rearmost particle
        of every lane that has moved dx on. No host sync.

        `backs` and `poolRanks` make it one step of a set divided among processes:
        ``backs(local [M]) -> [M]`` the lanes' rearmost positions over every process (a
        minimum), ``poolRanks(removed [N] bool) -> [N]`` each pool row's place among every
        process's pool rows, in the global order of the particles. None: this set is the
        whole one."""
        x, v = state.positions, state.velocities
        a, dx = self.axis, self.spacing
        z = self.zones(x, kinds)
        lane = self.laneOf(x)
        xa = x[:, a]
        feed = z.reservoir | z.inlet
        back = self._backs(xa, lane, feed, x)
        if backs is not None:
            back = backs(back)
        M = back.shape[0]
        need = back - dx >= self.reservoirStart - 1e-9 * dx
        rank = torch.cumsum(need.to(torch.int64), 0) - 1
        laneOfRank = torch.zeros(M + 1, dtype=torch.int64, device=x.device).scatter(
            0, torch.where(need, rank, M), torch.arange(M, dtype=torch.int64, device=x.device))
        q = (torch.cumsum(z.removed.to(torch.int64), 0) if poolRanks is None
             else poolRanks(z.removed)) - 1
        take = z.removed & (q < need.sum())
        target = laneOfRank[q.clamp(0, M - 1)]
        lane = torch.where(take, target, lane)
        spawned = x.clone()
        spawned[:, a] = back[target] - dx
        spawned[:, self._transverse()] = self.lanes(x)[target]
        x = torch.where(take[:, None], spawned, x)
        speed = self.speeds(state.time, x)[lane]
        axial = torch.zeros_like(v)
        axial[:, a] = 1.0
        moving = feed | take
        v = torch.where(moving[:, None], speed[:, None] * axial, v)
        v = torch.where((z.removed & ~take)[:, None], torch.zeros_like(v), v)
        return replace(state, positions=x, velocities=v)


def openChannel(lower, upper, spacing: float, inlet: Inlet, outlet: Outlet | None = None, *,
                axis: int = 0, wallLayers: int = 3, reservoirLayers: int = 4,
                spareLayers: int = 8, dtype=torch.float64, device="cpu"):
    """Particles of a channel with walls on every transverse side and an open inlet and
    outlet on the faces of `axis` (module table), and its `OpenBoundary`.

    The fluid fills ``[lower, upper]`` (cell centres, spacing dx; x_in = lower[axis],
    x_out = upper[axis] unless `inlet`/`outlet` name other positions); the inlet buffer and
    the reservoir are filled upstream, the outlet buffer downstream; ``spareLayers`` layers
    of lanes wait in the pool beyond the outlet buffer; ``wallLayers`` layers of dummy
    particles line the transverse sides from the inlet buffer to the pool.

    Args:
        lower: the fluid's lower corner (``[d]`` numbers).
        upper: its upper corner (the extents whole numbers of spacings).
        spacing: dx.
        inlet: the `Inlet` (its position is replaced by ``lower[axis]``).
        outlet: the `Outlet` (default ``Outlet(upper[axis])``; its position is replaced by
            ``upper[axis]``).
        axis: the channel's axis.
        wallLayers: layers of wall particles.
        reservoirLayers: the reservoir depth in spacings.
        spareLayers: the pool in layers of lanes (the slack between inflow and outflow).
        dtype: of the positions.
        device: of the positions and kinds.

    Returns:
        ``(positions [N, d], kinds [N] int32, boundary OpenBoundary, (lo [d], hi [d]))``: the
        last is a box holding every particle with a margin (the search domain).
    """
    lower, upper = [float(v) for v in lower], [float(v) for v in upper]
    d = len(lower)
    dx = float(spacing)
    outlet = Outlet(upper[axis]) if outlet is None else outlet
    inlet = replace(inlet, position=lower[axis])
    outlet = replace(outlet, position=upper[axis])
    trans = [k for k in range(d) if k != axis]
    counts = []
    for k in trans:
        n = (upper[k] - lower[k]) / dx
        if abs(n - round(n)) > 1e-6 * max(1.0, n) or round(n) < 1:
            raise ValueError(f"openChannel: axis {k} has extent {upper[k] - lower[k]!r}, not "
                             f"a whole number of spacings {dx!r}")
        counts.append(int(round(n)))
    nAxis = (upper[axis] - lower[axis]) / dx
    if abs(nAxis - round(nAxis)) > 1e-6 * max(1.0, nAxis):
        raise ValueError(f"openChannel: the channel's length {upper[axis] - lower[axis]!r} is "
                         f"not a whole number of spacings {dx!r}")
    boundary = OpenBoundary(inlet, outlet, dx, [lower[k] for k in trans], counts, axis,
                            reservoirLayers)

    def slab(first: float, layers: int, tlo, tcounts):
        along = first + (torch.arange(layers, dtype=dtype) + 0.5) * dx
        axes = [torch.as_tensor(lo, dtype=dtype) + (torch.arange(c, dtype=dtype) + 0.5) * dx
                for lo, c in zip(tlo, tcounts)]
        grid = torch.meshgrid(along, *axes, indexing="ij")
        pts = torch.zeros(grid[0].numel(), d, dtype=dtype)
        pts[:, axis] = grid[0].reshape(-1)
        for k, g in zip(trans, grid[1:]):
            pts[:, k] = g.reshape(-1)
        return pts

    tlo = [lower[k] for k in trans]
    open_ = [slab(boundary.reservoirStart, reservoirLayers + inlet.layers, tlo, counts),
             slab(lower[axis], round(nAxis), tlo, counts),
             slab(upper[axis], outlet.layers, tlo, counts)]
    parkStart = boundary.outletEnd + 4 * dx
    open_.append(slab(parkStart, spareLayers, tlo, counts))
    openPos = torch.cat(open_)
    # walls: the transverse sides (corners filled) from the inlet buffer to the pool's end
    wallFirst = lower[axis] - inlet.layers * dx
    wallLayersAlong = round((boundary.outletEnd - wallFirst) / dx)
    wlo = [lower[k] - wallLayers * dx for k in trans]
    wcounts = [c + 2 * wallLayers for c in counts]
    shell = slab(wallFirst, wallLayersAlong, wlo, wcounts)
    inside = torch.ones(shell.shape[0], dtype=torch.bool)
    for k in trans:
        inside &= (shell[:, k] > lower[k]) & (shell[:, k] < upper[k])
    walls = shell[~inside]
    positions = torch.cat([openPos, walls]).to(device)
    kinds = torch.cat([torch.full((openPos.shape[0],), _FLUID, dtype=torch.int32),
                       torch.full((walls.shape[0],), _BOUNDARY, dtype=torch.int32)]).to(device)
    margin = 4 * dx
    lo = [(boundary.reservoirStart if k == axis else lower[k] - wallLayers * dx) - margin
          for k in range(d)]
    hi = [(parkStart + spareLayers * dx if k == axis else upper[k] + wallLayers * dx) + margin
          for k in range(d)]
    return positions, kinds, boundary, (lo, hi)
