"""Solid walls by dummy particles: the pressure, density and velocity
extrapolation of Adami, Hu & Adams 2012 (J. Comput. Phys. 231: 7057-7075) and the layers of
wall particles of an axis-aligned box.

Fluid and wall particles are one `ParticleState`, told apart by ``kinds`` (`ParticleType`:
Fluid, Boundary). For a wall particle w and its fluid neighbours f, with
``r_wf = x_w - x_f`` (minimum image) and W_wf the kernel under the call's support scheme:

=================  ========================================================================
pressure           p_w = (sum_f p_f W_wf + (g - a_w) . sum_f rho_f r_wf W_wf) / sum_f W_wf
                   (Adami et al. 2012, eq. 27; a_w the prescribed wall acceleration), and
                   0 where sum_f W_wf = 0 (no fluid neighbour)
density            rho_w = rho(p_w) through a given inverse equation of state (e.g.
                   ``lambda p: taitDensity(p, rho0, c0)``)
velocity           utilde_w = sum_f u_f W_wf / sum_f W_wf (0 without fluid neighbours);
                   no-slip: u_w = 2 u_wall - utilde_w + 2 max(s_w, 0) n_w with
                   s_w = (utilde_w - u_wall) . n_w (the velocity for the viscous term,
                   eq. 22-23, whose normal part is not mirrored while the fluid leaves the
                   wall); free-slip: u_w = utilde_w (no shear from the wall)
=================  ========================================================================

**No-slip does not pull a leaving fluid into the wall.** n_w is the unit normal into the
fluid, minus the kernel-weighted direction from the wall particle to its fluid neighbours
(-sum_f r_wf W_wf normalised). Adami et al. mirror the whole velocity. While the fluid
approaches the wall (s_w < 0) that is kept: the mirrored normal velocity resists
penetration. While it leaves (s_w > 0, relative to the wall's own motion), a mirrored
normal velocity points into the wall and
the viscous term pulls the leaving particles back into it, which the wall pressure cannot
resist where the pressure is clipped at a free surface: a no-slip dam break lost fluid
particles through its side wall that way (the upper column leaving the wall as it
collapses), in 2D and 3D. There the normal part keeps the fluid's own value, s_w n_w.

Only the wall rows are replaced: the returned ``[N]`` / ``[N, d]`` tensors keep the fluid's
own pressures, densities and velocities in every other row, so the momentum and continuity
terms take them as they are. u_wall and a_w are ``[d]`` (one rigid wall) or ``[N, d]`` per
particle, of which only the wall rows are read (a moving cavity lid:
``torch.where(isLid[:, None], lidVelocity, 0)``); per-particle rather than ``[N_w, d]``
because selecting the wall rows of a tensor would read the kinds back to the host.

The sums are torch edge sums over the wall-fluid edges of the `AdjacencyList` (a wall row,
a fluid reference: `wallFluidEdges`) with the W_wf of `stabilization._edgeKernels` (the
library's Interpolate operator over one edge per row, interaction
BoundaryQueriesFluidReferences). The hydrostatic term needs r_wf per pair (a minimum image
across periodic axes, e.g. the x axis of a Poiseuille channel), which no operator's scheme
coefficient provides; the edge sums give all three sums from one W per pair.

**Only wall-fluid pairs are touched.** A simulation's list holds every pair of every kind:
in a 3D tank most of them are wall-wall pairs, and summing over all of them made the
extrapolation many times as expensive as the fused momentum (docs/fluids.md). The wall-fluid edges are
selected once per list (one readback, when a Verlet list is rebuilt) and cached, so the
extrapolation costs what its pairs cost. Differentiable in reverse and forward mode in
positions, supports, pressures, densities, velocities, g, a_w and u_wall; float32/float64;
2D/3D; no host syncs beyond that selection.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..dataTypes.adjacency import AdjacencyList
from ..dataTypes.operationProperties import OperationProperties
from ..enumTypes import KernelFunctions, OperationDirection, ParticleType, SupportScheme
from ._checks import particleField
from .stabilization import _densities, _edgeKernels, _edgeList, _pairVectors

__all__ = ["WallState", "wallPressures", "wallVelocities", "extrapolateWalls",
           "boxParticles", "bodyParticles", "wallFluidEdges"]


@dataclass(frozen=True)
class WallState:
    """Fluid values with the wall rows extrapolated (`extrapolateWalls`).

    Attributes:
        pressures: ``[N]``.
        densities: ``[N]``.
        velocities: ``[N, d]`` (the wall rows are the viscous-term velocities).
        shepardVelocities: ``[N, d]`` the Shepard average of the fluid's velocities at the
            wall rows (0 without fluid neighbours), or None.
        reached: bool ``[N]``, the wall rows with fluid neighbours, or None.
    """

    pressures: torch.Tensor
    densities: torch.Tensor
    velocities: torch.Tensor
    shepardVelocities: torch.Tensor | None = None
    reached: torch.Tensor | None = None


def _vectorField(value, like: torch.Tensor, name: str) -> torch.Tensor:
    """`value` ([d] or [N, d], number sequence or tensor) broadcast to ``like`` ([N, d])."""
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if t.shape not in ((like.shape[1],), tuple(like.shape)):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; accepted: ({like.shape[1]},) or "
                         f"{tuple(like.shape)} (one row per particle)")
    return t.expand_as(like)


class _Edges:
    """The wall-fluid edges of a list: what `_edgeKernels` reads of an `AdjacencyList`."""

    __slots__ = ("i", "j", "supportMode")

    def __init__(self, i, j, supportMode):
        self.i, self.j, self.supportMode = i, j, supportMode


#: the wall-fluid edges of the last few (list, kinds) pairs: a Verlet list is reused for many
#: steps, so its edges are selected once per rebuild. The entries hold their list and kinds,
#: so the ids they are keyed by stay theirs.
_WALL_EDGES: OrderedDict = OrderedDict()
_WALL_EDGES_SIZE = 8


def wallFluidEdges(adjacency: AdjacencyList, kinds: torch.Tensor, candidates=None):
    """The edges ``(i, j)`` of `adjacency` from a wall row (kind Boundary) to a fluid
    reference (kind Fluid): the only pairs the wall extrapolation sums over. Selected once
    per list and kinds (one readback, the edge count), then cached while the list is among
    the last few used.

    Args:
        adjacency: the `AdjacencyList`.
        kinds: ``[N]`` int32 kinds.
        candidates: ``(rows, references)``, bool ``[N]`` masks that hold every particle that
            may be a wall row and a fluid reference while the list is used (kinds that
            change with the positions: an open boundary's); the selection is then cached per
            list and masks, and the kinds of each call weigh the edges (the kernel sums
            give other pairs zero weight). None: the kinds.

    Returns:
        An object with ``i``, ``j`` (int64 ``[E_wf]``) and ``supportMode``.
    """
    if candidates is not None:
        key = (id(adjacency), id(candidates[0]), id(candidates[1]))
        guard = candidates
    else:
        key = (id(adjacency), id(kinds), kinds._version)
        guard = kinds
    hit = _WALL_EDGES.get(key)
    if hit is not None:
        _WALL_EDGES.move_to_end(key)
        return hit[2]
    i, j = adjacency.i, adjacency.j
    if candidates is not None:
        keep = candidates[0][i] & candidates[1][j]
    else:
        keep = (kinds[i] == int(ParticleType.Boundary)) & (kinds[j] == int(ParticleType.Fluid))
    rows = torch.nonzero(keep).flatten()  # the one readback: the number of wall-fluid edges
    edges = _Edges(i[rows], j[rows], adjacency.supportMode)
    _WALL_EDGES[key] = (adjacency, guard, edges)
    while len(_WALL_EDGES) > _WALL_EDGES_SIZE:
        _WALL_EDGES.popitem(last=False)
    return edges


def _wallSums(particles, domain, adjacency, kernel, supportMode, candidates=None):
    """(W_wf [E_wf], i, j, 1 / sum_f W_wf [N] or 0, is-wall [N], r_wf [E_wf, d]) over the
    wall-fluid edges, under BoundaryQueriesFluidReferences: one kernel evaluation and one
    set of pair vectors shared by the pressure and velocity extrapolations."""
    adj = wallFluidEdges(_edgeList(adjacency, "walls"), particles.kinds, candidates)
    props = OperationProperties(
        kernel, supportMode=supportMode,
        operationMode=OperationDirection.BoundaryQueriesFluidReferences)
    W, _ = _edgeKernels(particles, props, domain, adj, gradient=False)
    S = torch.zeros_like(particles.positions[:, 0]).index_add(0, adj.i, W)
    positive = S > 0  # 0 (not inf) for a wall particle without fluid neighbours
    invS = torch.where(positive, 1.0 / torch.where(positive, S, torch.ones_like(S)), 0.0)
    r = _pairVectors(particles.positions, adj.i, adj.j, domain)
    return W, adj.i, adj.j, invS, particles.kinds == int(ParticleType.Boundary), r


def _scatter(i, values, like):
    return torch.zeros_like(like).index_add(0, i, values)


def _pressures(sums, particles, pressures, domain, gravity, wallAccelerations, owner):
    W, i, j, invS, isWall, r = sums
    rho = _densities(particles, owner)
    x = particles.positions
    particleField(owner, "pressures", pressures, x.shape[0])
    g = _vectorField(gravity, x, f"{owner}: gravity")
    if wallAccelerations is not None:
        g = g - _vectorField(wallAccelerations, x, f"{owner}: wallAccelerations")
    P = _scatter(i, pressures[j] * W, pressures)
    R = _scatter(i, (rho[j] * W)[:, None] * r, x)
    return torch.where(isWall, (P + (g * R).sum(-1)) * invS, pressures)


def _velocities(sums, velocities, wallVelocity, noSlip, owner):
    W, i, j, invS, isWall, r = sums
    ut = _scatter(i, W[:, None] * velocities[j], velocities) * invS[:, None]
    weight = _noSlipWeight(noSlip, owner)
    if isinstance(weight, float) and weight == 0.0:
        return torch.where(isWall[:, None], ut, velocities)
    # the wall normal into the fluid: minus the kernel-weighted direction to the fluid
    toWall = _scatter(i, W[:, None] * r, velocities)
    length = torch.linalg.vector_norm(toWall, dim=-1, keepdim=True)
    normal = -toWall / torch.where(length > 0, length, torch.ones_like(length))
    uWall = torch.zeros_like(ut) if wallVelocity is None else \
        _vectorField(wallVelocity, velocities, f"{owner}: wallVelocity")
    # mirror the whole velocity while the fluid approaches the wall, the tangential part only
    # while it leaves (module docstring)
    leaving = torch.clamp(((ut - uWall) * normal).sum(-1, keepdim=True), min=0.0)
    uw = 2.0 * uWall - ut + 2.0 * leaving * normal
    if not (isinstance(weight, float) and weight == 1.0):
        uw = weight * uw + (1.0 - weight) * ut  # a blend with the free-slip velocity
    return torch.where(isWall[:, None], uw, velocities)


def _noSlipWeight(noSlip, owner):
    """``noSlip`` as the weight of the no-slip velocity: True 1.0, False 0.0, a number in
    [0, 1] or a 0-dim tensor as it is."""
    if isinstance(noSlip, bool):
        return 1.0 if noSlip else 0.0
    if isinstance(noSlip, torch.Tensor) and noSlip.dim() == 0:
        return noSlip
    if isinstance(noSlip, (int, float)) and 0.0 <= noSlip <= 1.0:
        return float(noSlip)
    raise ValueError(f"{owner}: noSlip={noSlip!r}; accepted: True, False, a number in [0, 1] "
                     "or a 0-dim tensor (the weight of the no-slip velocity)")


def wallPressures(particles, pressures, domain, adjacency, gravity, *, wallAccelerations=None,
                  kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather):
    """Adami et al. wall pressures (module table).

    Args:
        particles: `ParticleState` of fluid and wall particles, with the fluid densities
            (the wall rows of ``densities`` are not read).
        pressures: ``[N]`` pressures (the fluid rows are read).
        domain: `DomainDescription`.
        adjacency: the `AdjacencyList` (wall rows must list their fluid neighbours).
        gravity: g, ``[d]``.
        wallAccelerations: a_w, ``[d]`` or ``[N, d]`` (default 0: walls at rest or moving
            uniformly).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.

    Returns:
        ``[N]``: p_w on wall rows, the input pressures elsewhere.
    """
    sums = _wallSums(particles, domain, adjacency, kernel, supportMode)
    return _pressures(sums, particles, pressures, domain, gravity, wallAccelerations,
                      "wallPressures")


def wallVelocities(particles, velocities, domain, adjacency, *, wallVelocity=None, noSlip=True,
                   kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather):
    """Adami et al. wall velocities for the viscous term (module table).

    Args:
        particles: `ParticleState` of fluid and wall particles.
        velocities: ``[N, d]`` (the fluid rows are read).
        domain: `DomainDescription`.
        adjacency: the `AdjacencyList`.
        wallVelocity: u_wall, ``[d]`` or ``[N, d]`` (default 0); not used for free slip.
        noSlip: True: the no-slip velocity (module table); False (free slip): u_w =
            utilde_w; a weight w in [0, 1]: w times the no-slip plus (1 - w) times the
            free-slip velocity (the viscous term is linear in u_w, so this applies no-slip
            to the share w of a uniform viscosity, `Scheme`'s laminar share).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.

    Returns:
        ``[N, d]``: u_w on wall rows, the input velocities elsewhere.
    """
    particleField("wallVelocities", "velocities", velocities, *particles.positions.shape)
    sums = _wallSums(particles, domain, adjacency, kernel, supportMode)
    return _velocities(sums, velocities, wallVelocity, noSlip, "wallVelocities")


def extrapolateWalls(particles, pressures, velocities, domain, adjacency, *, gravity,
                     densityOfPressure: Callable, wallVelocity=None, wallAccelerations=None,
                     noSlip=True, kernel=KernelFunctions.Wendland2,
                     supportMode=SupportScheme.Gather, shepard: bool = False,
                     candidates=None) -> WallState:
    """Wall pressures, densities and velocities of Adami et al. in one call, from one kernel
    evaluation (module table).

    Args:
        particles: `ParticleState` of fluid and wall particles, with the fluid densities.
        pressures: ``[N]`` pressures.
        velocities: ``[N, d]`` velocities.
        domain: `DomainDescription`.
        adjacency: the `AdjacencyList`.
        gravity: g, ``[d]``.
        densityOfPressure: the inverse equation of state, a callable ``[N] -> [N]``
            (e.g. ``lambda p: taitDensity(p, rho0, c0)``).
        wallVelocity: u_wall, ``[d]`` or ``[N, d]`` (default 0).
        wallAccelerations: a_w, ``[d]`` or ``[N, d]`` (default 0).
        noSlip: no-slip (True) or free-slip (False) wall velocities, or the weight of the
            no-slip velocity in a blend (`wallVelocities`).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        shepard: also return the Shepard average of the fluid's velocities at every wall row
            and whether the row has fluid neighbours (an open boundary's outlet).
        candidates: the ``(rows, references)`` masks of `wallFluidEdges` (kinds that change
            with the positions), or None.

    Returns:
        `WallState` of ``[N]`` pressures, ``[N]`` densities and ``[N, d]`` velocities, the
        wall rows extrapolated and the other rows the inputs (with `shepard`, also
        ``shepardVelocities [N, d]`` and ``reached [N]``).
    """
    owner = "extrapolateWalls"
    particleField(owner, "velocities", velocities, *particles.positions.shape)
    sums = _wallSums(particles, domain, adjacency, kernel, supportMode, candidates)
    p = _pressures(sums, particles, pressures, domain, gravity, wallAccelerations, owner)
    densities = torch.where(sums[4], densityOfPressure(p), particles.densities)
    u = _velocities(sums, velocities, wallVelocity, noSlip, owner)
    if not shepard:
        return WallState(p, densities, u)
    W, i, _, invS, _, _ = sums
    ut = _scatter(i, W[:, None] * velocities[sums[2]], velocities) * invS[:, None]
    return WallState(p, densities, u, ut, invS > 0)


_SIDES = ("-x", "+x", "-y", "+y", "-z", "+z")


def _cells(owner: str, lower, upper, spacing) -> list[int]:
    counts = []
    for k, (lo, hi) in enumerate(zip(lower, upper)):
        n = (hi - lo) / spacing
        if not (n >= 1 and math.isfinite(n) and abs(n - round(n)) < 1e-6 * max(1.0, n)):
            raise ValueError(f"{owner}: axis {k} has extent {hi - lo!r}, not a positive whole "
                             f"number of spacings {spacing!r}; accepted: upper - lower = "
                             "n * spacing, n >= 1")
        counts.append(int(round(n)))
    return counts


def boxParticles(lower, upper, spacing, layers=3, walls="all", *, fluidUpper=None, fluid=True,
                 dtype=torch.float64, device="cpu"):
    """Particles of an axis-aligned tank: a fluid lattice and ``layers`` layers of dummy wall
    particles outside the chosen sides, on the same lattice (cell centres, spacing dx).

    The wall surface is the box face; the first wall layer sits dx/2 outside it, as the
    first fluid layer sits dx/2 inside. Corners between two walled sides are filled; nothing
    is placed beyond an open side (a free surface, or a periodic axis: walls on "-y", "+y"
    only for a channel periodic in x, whose domain is then [lower_x, upper_x) in x).

    Args:
        lower: ``[d]`` lower corner of the fluid box (numbers), d = 2 or 3.
        upper: ``[d]`` upper corner; every extent a whole number of spacings.
        spacing: dx.
        layers: wall layers per side (>= 1; at least H / dx for a full kernel support).
        walls: "all" or a sequence of sides from ("-x", "+x", "-y", "+y", "-z", "+z"),
            e.g. ("-x", "+x", "-y") for an open tank.
        fluidUpper: upper corner of the fluid block (a dam-break column in the tank's lower
            corner), default ``upper``; snapped to the lattice.
        fluid: False returns the wall particles only.
        dtype: float dtype of the positions.
        device: device.

    Returns:
        ``(positions [N, d], kinds [N] int32)``: the fluid particles first (kind 0,
        row-major by axis), then the wall particles (kind 1).

    Example: lid-driven cavity ``boxParticles((0, 0), (1, 1), 0.02, 3)`` (then a wall
    velocity on the rows with y > 1); Poiseuille channel periodic in x
    ``boxParticles((0, 0), (0.2, 1), 0.02, 3, ("-y", "+y"))``; dam break
    ``boxParticles((0, 0), (4, 3), 0.02, 3, ("-x", "+x", "-y"), fluidUpper=(1, 2))``.
    """
    owner = "boxParticles"
    lower, upper = [float(v) for v in lower], [float(v) for v in upper]
    d = len(lower)
    if d not in (2, 3) or len(upper) != d:
        raise ValueError(f"{owner}: lower and upper must both have 2 or 3 entries, got "
                         f"{len(lower)} and {len(upper)}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"{owner}: layers={layers!r}; accepted: an int >= 1")
    sides = _SIDES[:2 * d] if walls == "all" else tuple(walls)
    bad = [s for s in sides if s not in _SIDES[:2 * d]]
    if bad:
        raise ValueError(f"{owner}: walls {bad!r}; accepted: 'all' or sides from "
                         f"{_SIDES[:2 * d]}")
    dx = float(spacing)
    n = _cells(owner, lower, upper, dx)
    axes = "xyz"
    ranges = [torch.arange(-layers if f"-{axes[k]}" in sides else 0,
                           n[k] + (layers if f"+{axes[k]}" in sides else 0),
                           dtype=torch.float64) for k in range(d)]
    idx = torch.stack(torch.meshgrid(*ranges, indexing="ij"), dim=-1).reshape(-1, d)
    lo = torch.tensor(lower, dtype=torch.float64)
    x = lo + (idx + 0.5) * dx
    inside = ((idx >= 0) & (idx < torch.tensor(n, dtype=torch.float64))).all(dim=1)
    wall = x[~inside]
    parts = [wall]
    if fluid:
        top = torch.tensor(upper if fluidUpper is None else [float(v) for v in fluidUpper],
                           dtype=torch.float64)
        parts.insert(0, x[inside & (x < top).all(dim=1)])
    kinds = [torch.full((part.shape[0],), int(ParticleType.Fluid), dtype=torch.int32)
             for part in parts[:-1]]
    kinds.append(torch.full((wall.shape[0],), int(ParticleType.Boundary), dtype=torch.int32))
    return torch.cat(parts).to(dtype=dtype, device=device), torch.cat(kinds).to(device)


def bodyParticles(positions, kinds, signedDistance, spacing, layers=3):
    """Carve a solid body out of a set of particles: the body is where the signed distance
    ``signedDistance(x) [N]`` (negative inside, zero on the surface) is negative. Fluid
    particles inside it within ``layers`` spacings of the surface become wall particles (kind
    Boundary: the body's dummy particles), those deeper are removed; particles outside keep
    their kind. A cylinder of radius R at c: ``lambda x: (x - c).norm(dim=1) - R``.

    Args:
        positions: ``[N, d]`` positions (e.g. a fluid lattice from `boxParticles`).
        kinds: ``[N]`` int32 kinds.
        signedDistance: ``x [M, d] -> [M]``, negative inside the body.
        spacing: dx.
        layers: wall layers inside the surface (>= 1; at least H / dx for a full support).

    Returns:
        ``(positions [N', d], kinds [N'], body [N'] bool)``: the kept particles in their
        order, their kinds, and the mask of the body's wall particles (for
        `Scheme.wallForce`). One readback (the kept count).
    """
    owner = "bodyParticles"
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"{owner}: layers={layers!r}; accepted: an int >= 1")
    if not isinstance(positions, torch.Tensor) or positions.dim() != 2:
        raise ValueError(f"{owner}: positions has shape "
                         f"{tuple(getattr(positions, 'shape', ()))}; accepted: [N, d]")
    x = positions
    n = x.shape[0]
    particleField(owner, "kinds", kinds, n)
    phi = signedDistance(x)
    if not isinstance(phi, torch.Tensor) or tuple(phi.shape) != (n,):
        raise ValueError(f"{owner}: signedDistance returned "
                         f"{tuple(getattr(phi, 'shape', ()))}; accepted: [{n}]")
    depth = float(layers) * float(spacing)
    keep = phi > -depth
    x, kinds, phi = x[keep], kinds[keep], phi[keep]
    body = (phi < 0) & (kinds == int(ParticleType.Fluid))
    kinds = torch.where(body, int(ParticleType.Boundary), kinds).to(torch.int32)
    return x, kinds, body

