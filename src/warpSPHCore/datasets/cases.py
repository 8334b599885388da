"""The dataset cases of `warpsph dataset`: LagrangeBench's 2D setups (Taylor-Green vortex,
reverse Poiseuille flow, dam break) built from the fluids layer, one `Scene` per seed.

A case is a `DatasetCase`: its sizes (`CaseSize`: resolution, stored frames, solver steps
between frames, trajectories per split, relaxation and warm-up), a scene builder
``scene(size, seed, dtype, device) -> Scene`` (the scheme, particles, start state and time
step of one trajectory, and which rows the files store) and the case's metadata for
``metadata.json``. The time step is a fixed multiple of the spacing, so every size keeps
LagrangeBench's time between stored frames (``dt * write_every``):

==========  =========================================================================
``tgv2d``   Taylor-Green vortex, Re = 100, periodic unit square, n x n particles, start
            relaxed from a 0.25 dx jitter (`fluids.cases.tgv`), dt = 0.02 dx,
            a frame every 0.04 (full: n = 50, dt = 4e-4, every 100 steps, 126 frames)
``rpf2d``   reverse Poiseuille flow, periodic 1 x 2 box, body force +g e_x for y <= 1 and
            -g e_x above, nu = 0.1, started from the relaxed lattice with the steady
            profile, dt = 0.02 dx, a frame every 0.05 (full: 40 x 80 particles,
            dt = 5e-4, every 100 steps)
``dam2d``   dam break, a 2 x 1 water column in a 5.36 x 2 closed tank, g = 1
            (`fluids.cases.dambreak`'s scheme), jittered hydrostatic start,
            dt = 0.015 dx, a frame every 0.03 (full: 100 x 50 fluid particles, dt = 3e-4,
            every 100 steps, 401 frames; 5,740 stored particles with the innermost wall
            layer)
==========  =========================================================================

Particle types in the files are LagrangeBench's codes (`lagrangeBenchTypes`): our
``ParticleType.Fluid`` (0) is its FLUID (0) and ``ParticleType.Boundary`` (1) its SOLID_WALL
(1); the cases have no other kinds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..dataTypes.domain import DomainDescription
from ..enumTypes import KernelFunctions, ParticleType
from ..fluids.cases.dambreak import DamBreakConfig, damBreakScheme
from ..fluids.cases.tgv import (
    TaylorGreenConfig,
    setup,
    taylorGreenParticles,
    taylorGreenScheme,
)
from ..fluids.health import boxContainer
from ..fluids.integrators import FluidState
from ..fluids.relaxation import relaxParticles
from ..fluids.scheme import (
    Linear,
    ParticleSet,
    Scheme,
    Term,
    TransportVelocity,
    hydrostaticStart,
)
from ..fluids.walls import boxParticles

__all__ = ["CaseSize", "Scene", "DatasetCase", "DATASET_CASES", "SIZES", "SPLITS",
           "lagrangeBenchTypes", "connectivityRadius"]

#: the split names, in the order their seeds are drawn (train first)
SPLITS = ("train", "valid", "test")
#: the size presets of every case
SIZES = ("tiny", "small", "full")

KERNEL = KernelFunctions.Wendland2

# LagrangeBench's particle-type codes (its NodeType): FLUID 0, SOLID_WALL 1
_LB_FLUID, _LB_WALL = 0, 1


@dataclass(frozen=True)
class CaseSize:
    """The size of a dataset case.

    Attributes:
        n: the resolution: particles per unit length (dx = 1 / n).
        frames: stored frames per trajectory (T, ``position.shape[0]``).
        writeEvery: solver steps between stored frames (LagrangeBench's ``write_every``).
        trajectories: (train, valid, test) trajectories, one seed each.
        relax: relaxation iterations of the start (`fluids.relaxParticles`; tgv2d, rpf2d);
            0 in tgv2d starts every seed on the lattice (`fluids.cases.tgv.setup`).
        warmup: frames simulated and dropped before the first stored one.
    """

    n: int
    frames: int
    writeEvery: int
    trajectories: tuple[int, int, int]
    relax: int = 0
    warmup: int = 0


@dataclass
class Scene:
    """One trajectory of a case, ready to run (`DatasetCase.scene`).

    Attributes:
        scheme: the `fluids.Scheme`.
        particles: the `fluids.ParticleSet`.
        state: the start `fluids.FluidState`.
        dt: the solver time step.
        maxSpeed: the largest expected speed (the scheme's time-step check).
        skin: the Verlet skin of the run.
        wrap: wrap the positions into the periodic axes.
        keep: ``[K]`` rows the files store (None: every row), fluid rows first.
        offset: ``[d]`` added to the stored positions (None: none).
    """

    scheme: Scheme
    particles: ParticleSet
    state: FluidState
    dt: float
    maxSpeed: float
    skin: float = 0.1
    wrap: bool = True
    keep: torch.Tensor | None = None
    offset: torch.Tensor | None = None


@dataclass(frozen=True)
class DatasetCase:
    """A registered dataset case (module docstring).

    Attributes:
        name: the case name of the command line (``tgv2d``).
        summary: one line.
        sizes: size name -> `CaseSize`.
        scene: ``scene(size, seed, dtype, device) -> Scene``.
        metadata: ``metadata(size) -> dict``: the case's keys of ``metadata.json`` (the
            physics and the geometry; `generate` adds the counts and statistics).
        force: ``force(size) -> str``: the text of LagrangeBench's ``force.py`` (the body
            force per unit mass at a position, in JAX), or None for a case without one.
    """

    name: str
    summary: str
    sizes: dict
    scene: Callable
    metadata: Callable
    force: Callable | None = field(default=None)


def lagrangeBenchTypes(kinds: torch.Tensor) -> torch.Tensor:
    """LagrangeBench's particle-type codes of our `ParticleType` kinds: Fluid (0) -> FLUID
    (0), Boundary (1) -> SOLID_WALL (1).

    Args:
        kinds: ``[N]`` integer `ParticleType` codes.

    Returns:
        ``[N]`` int64 codes.

    Raises:
        ValueError: a kind without a LagrangeBench counterpart (Ghost, Other).
    """
    k = kinds.detach().to("cpu", torch.int64)
    bad = sorted({int(v) for v in torch.unique(k)} - {int(ParticleType.Fluid),
                                                       int(ParticleType.Boundary)})
    if bad:
        raise ValueError(f"lagrangeBenchTypes: kinds {bad} have no LagrangeBench particle type; "
                         f"accepted: Fluid ({int(ParticleType.Fluid)}) and Boundary "
                         f"({int(ParticleType.Boundary)})")
    return torch.where(k == int(ParticleType.Fluid), _LB_FLUID, _LB_WALL)


def connectivityRadius(dx: float) -> float:
    """LagrangeBench's ``default_connectivity_radius``: 1.45 dx to two significant digits
    (0.029 at dx = 0.02), the graph radius of its models.

    Args:
        dx: the particle spacing.

    Returns:
        The radius (a float).
    """
    return float(f"{1.45 * dx:.2g}")


def _common(size: CaseSize, dx: float, dt: float, *, case: str, bounds, periodic,
            viscosity: float, density: float, gravity: float, walls: bool,
            continuity: bool, alpha: float, freeSlip: bool, scheme: dict) -> dict:
    """The metadata keys every case writes (`DatasetCase.metadata`)."""
    return {
        "case": case,
        "solver": "SPH",
        "density_evolution": continuity,
        "dim": len(bounds),
        "dx": dx,
        "dt": dt,
        "t_end": (size.warmup + size.frames - 1) * size.writeEvery * dt,
        "viscosity": viscosity,
        "density": density,
        "p_bg_factor": 0.0,
        "g_ext_magnitude": gravity,
        "artificial_alpha": alpha,
        "free_slip": freeSlip,
        "write_every": size.writeEvery,
        "is_bc_trick": walls,
        "is_bc_present": walls,
        "periodic_boundary_conditions": list(periodic),
        "bounds": [list(b) for b in bounds],
        "default_connectivity_radius": connectivityRadius(dx),
        "scheme": scheme,
    }


# ------------------------------------------------------------------------------ tgv2d
TGV_DT = 0.02  # dt / dx (LagrangeBench: 4e-4 at dx = 0.02)
TGV_SUPPORT = 4.0  # H / dx of `fluids.cases.tgv`
TGV_JITTER = 0.25  # relaxation start jitter in dx


def _tgvConfig(size: CaseSize, seed: int, dtype, device) -> TaylorGreenConfig:
    return TaylorGreenConfig(n=size.n, t=0.0, relax=size.relax, support=TGV_SUPPORT,
                             jitter=TGV_JITTER, seed=seed, dtype=str(dtype).split(".")[-1],
                             device=str(device), threads=0)


def _tgvScene(size: CaseSize, seed: int, dtype, device) -> Scene:
    """The Taylor-Green start of `seed` (`fluids.cases.tgv.setup`: a lattice jittered by
    0.25 dx and relaxed, the analytic velocities there), the case's transport-velocity
    scheme, dt = 0.02 dx."""
    case = setup(_tgvConfig(size, seed, dtype, device))
    return Scene(taylorGreenScheme(case), taylorGreenParticles(case),
                 FluidState(case.positions, case.velocities), TGV_DT * case.dx,
                 maxSpeed=case.config.u, skin=case.config.skin)


def _tgvMetadata(size: CaseSize) -> dict:
    config = _tgvConfig(size, 0, torch.float64, "cpu")
    dx = 1.0 / size.n
    nu = config.u / config.re
    c0 = 10.0 * config.u
    return _common(size, dx, TGV_DT * dx, case="TGV", bounds=[[0.0, 1.0], [0.0, 1.0]],
                   periodic=[True, True], viscosity=nu, density=1.0, gravity=0.0,
                   walls=False, continuity=False, alpha=0.0, freeSlip=False,
                   scheme={"kernel": "Wendland C2", "support": config.support,
                           "equationOfState": "linear", "density": "summation",
                           "transportVelocity": True,
                           "backgroundPressure": config.pb * c0 * c0, "c0": c0,
                           "reynolds": config.re, "relaxation": size.relax,
                           "jitter": TGV_JITTER, "warmupFrames": size.warmup})


# ------------------------------------------------------------------------------ rpf2d
RPF_G = 1.0  # body force magnitude (LagrangeBench's g_ext_magnitude)
RPF_NU = 0.1  # kinematic viscosity (LagrangeBench: viscosity 0.1 at rho0 = 1)
RPF_U = 1.0  # reference speed of the sound speed c0 = 10 U (LagrangeBench's u_ref)
RPF_DT = 0.02  # dt / dx (LagrangeBench: 5e-4 at dx = 0.025)
RPF_SUPPORT = 4.0
RPF_PB = 1.0  # transport-velocity background pressure / (rho0 c0^2), as the tgv case
RPF_JITTER = 0.25
RPF_BOX = (1.0, 2.0)


def reversePoiseuilleVelocity(y: torch.Tensor, g: float = RPF_G, nu: float = RPF_NU):
    """The steady reverse Poiseuille profile u_x(y) of the force +g for y <= 1 and -g above
    (period 2 in y): g / (2 nu) y (1 - y) on [0, 1], -g / (2 nu) (y - 1) (2 - y) on [1, 2];
    the largest speed g / (8 nu)."""
    s = torch.remainder(y, 2.0)
    return torch.where(s <= 1.0, s * (1.0 - s), -(s - 1.0) * (2.0 - s)) * (g / (2.0 * nu))


def reversePoiseuilleForce(positions: torch.Tensor, g: float = RPF_G) -> torch.Tensor:
    """The body force per unit mass ``[N, d]``: +g e_x where y <= 1, -g e_x where y > 1 (the
    convention of LagrangeBench's force.py)."""
    a = torch.zeros_like(positions)
    a[:, 0] = torch.where(positions[:, 1] > 1.0, -g, g)
    return a


def _rpfForceTerm(context):
    return reversePoiseuilleForce(context.state.positions)


def _rpfScheme() -> Scheme:
    c0 = 10.0 * RPF_U
    return Scheme(rho0=1.0, c0=c0, equationOfState=Linear(), density="summation",
                  viscosity=RPF_NU, transportVelocity=TransportVelocity(RPF_PB * c0 * c0),
                  terms=(Term("acceleration", _rpfForceTerm, name="reversePoiseuilleForce"),),
                  kernel=KERNEL)


def _rpfScene(size: CaseSize, seed: int, dtype, device) -> Scene:
    """The relaxed lattice of `seed` (jitter 0.25 dx) with the steady profile, the
    transport-velocity scheme with the reverse force as a `Term`, dt = 0.02 dx."""
    t = dict(dtype=dtype, device=device)
    n = size.n
    dx = 1.0 / n
    gx = (torch.arange(round(RPF_BOX[0] * n), **t) + 0.5) * dx
    gy = (torch.arange(round(RPF_BOX[1] * n), **t) + 0.5) * dx
    x = torch.stack(torch.meshgrid(gx, gy, indexing="ij"), -1).reshape(-1, 2)
    N = x.shape[0]
    H = torch.full((N,), RPF_SUPPORT * dx, **t)
    domain = DomainDescription(torch.zeros(2, **t), torch.tensor(RPF_BOX, **t), [True, True])
    # relax = 0 still jitters: the seed's start
    x = relaxParticles(x, H, domain, iterations=size.relax, jitter=RPF_JITTER, kernel=KERNEL,
                       seed=seed)
    v = torch.zeros_like(x)
    v[:, 0] = reversePoiseuilleVelocity(x[:, 1])
    particles = ParticleSet(H, torch.full((N,), dx * dx, **t),
                            torch.zeros(N, dtype=torch.int32, device=device), domain, dx)
    return Scene(_rpfScheme(), particles, FluidState(x, v), RPF_DT * dx,
                 maxSpeed=RPF_G / (8.0 * RPF_NU))


def _rpfMetadata(size: CaseSize) -> dict:
    dx = 1.0 / size.n
    c0 = 10.0 * RPF_U
    return _common(size, dx, RPF_DT * dx, case="RPF",
                   bounds=[[0.0, RPF_BOX[0]], [0.0, RPF_BOX[1]]], periodic=[True, True],
                   viscosity=RPF_NU, density=1.0, gravity=RPF_G, walls=False,
                   continuity=False, alpha=0.0, freeSlip=False,
                   scheme={"kernel": "Wendland C2", "support": RPF_SUPPORT,
                           "equationOfState": "linear", "density": "summation",
                           "transportVelocity": True, "backgroundPressure": RPF_PB * c0 * c0,
                           "c0": c0, "start": "steady profile", "relaxation": size.relax,
                           "jitter": RPF_JITTER, "warmupFrames": size.warmup})


def _rpfForce(size: CaseSize) -> str:
    half = RPF_BOX[1] / 2.0
    return f'''"""External force of a warpSPHCore rpf2d dataset, in LagrangeBench's force.py
convention: force_fn(r) is the body force per unit mass at one position r ([2])."""

import jax.numpy as jnp

G = {RPF_G!r}
HALF = {half!r}


def force_fn(r, t=None, **kwargs):
    """+G e_x where y <= HALF, -G e_x where y > HALF."""
    fx = jnp.where(r[1] > HALF, -G, G)
    return jnp.stack([fx, jnp.zeros_like(fx)])
'''


# ------------------------------------------------------------------------------ dam2d
DAM_G = 1.0
DAM_NU = 5e-5  # LagrangeBench's viscosity at rho0 = 1
DAM_DT = 0.015  # dt / dx (LagrangeBench: 3e-4 at dx = 0.02)
DAM_COLUMN = (2.0, 1.0)  # water column width and height
DAM_TANK = (5.366, 2.0)  # tank length (snapped to the lattice) and height
DAM_JITTER = 0.25
DAM_SIDES = ("-x", "+x", "-y", "+y")


def _damConfig(dtype, device) -> DamBreakConfig:
    # a = H / 2: the dam-break case's sound speed c0 = mach sqrt(2 g 2a) then uses the column
    # height H = 1, LagrangeBench's c0 = 10 sqrt(2 g H)
    return DamBreakConfig(a=DAM_COLUMN[1] / 2.0, g=DAM_G, rho0=1.0, nu=DAM_NU,
                          dtype=str(dtype).split(".")[-1], device=str(device), threads=0)


def _damGeometry(size: CaseSize):
    dx = 1.0 / size.n
    length = round(DAM_TANK[0] * size.n) * dx
    height = round(DAM_TANK[1] * size.n) * dx
    return dx, length, height


def _damScene(size: CaseSize, seed: int, dtype, device) -> Scene:
    """The closed tank of `fluids.walls.boxParticles` with the column in its lower-left
    corner, the fluid jittered by 0.25 dx (seeded), the hydrostatic start and the scheme of
    `fluids.cases.dambreak` (g = 1, rho0 = 1, nu = 5e-5), dt = 0.015 dx. The files store the
    fluid and the innermost wall layer, shifted by the wall thickness so that the bounds
    start at 0."""
    t = dict(dtype=dtype, device=device)
    config = _damConfig(dtype, device)
    scheme = damBreakScheme(config)
    dx, length, height = _damGeometry(size)
    layers = max(1, math.ceil(config.support - 1e-9))
    x, kinds = boxParticles((0.0, 0.0), (length, height), dx, layers, DAM_SIDES,
                            fluidUpper=DAM_COLUMN, **t)
    fluid = kinds == int(ParticleType.Fluid)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noise = (torch.rand(x.shape, generator=gen, dtype=torch.float64) - 0.5).to(x)
    x = torch.where(fluid[:, None], x + DAM_JITTER * dx * noise, x)
    rho, m, _ = hydrostaticStart(scheme, x, kinds, dx, DAM_COLUMN[1])
    H = torch.full_like(rho, config.support * dx)
    pad = (layers + 1) * dx
    domain = DomainDescription(torch.tensor([-pad, -pad], **t),
                               torch.tensor([length + pad, height + pad], **t), [False, False])
    particles = ParticleSet(H, m, kinds, domain, dx,
                            container=boxContainer((0.0, 0.0), (length, height), DAM_SIDES, **t))
    lower = torch.zeros(2, **t)
    upper = torch.tensor([length, height], **t)
    outside = torch.maximum(lower - x, x - upper).amax(dim=1)
    keep = torch.nonzero(fluid | (outside < dx)).flatten()
    return Scene(scheme, particles, FluidState(x, torch.zeros_like(x), rho), DAM_DT * dx,
                 maxSpeed=2.0 * math.sqrt(DAM_G * DAM_COLUMN[1]), skin=config.skin,
                 wrap=False, keep=keep, offset=torch.full((2,), layers * dx, **t))


def _damMetadata(size: CaseSize) -> dict:
    config = _damConfig(torch.float64, "cpu")
    dx, length, height = _damGeometry(size)
    layers = max(1, math.ceil(config.support - 1e-9))
    w = layers * dx
    scheme = damBreakScheme(config)
    return _common(size, dx, DAM_DT * dx, case="DAM",
                   bounds=[[0.0, length + 2 * w], [0.0, height + 2 * w]],
                   periodic=[False, False], viscosity=DAM_NU, density=1.0, gravity=DAM_G,
                   walls=True, continuity=True, alpha=config.alpha,
                   freeSlip=not config.noSlip,
                   scheme={"kernel": "Wendland C2", "support": config.support,
                           "equationOfState": "Tait", "density": "continuity",
                           "densityDiffusion": config.diffusion, "delta": config.delta,
                           "artificialViscosity": config.alpha, "c0": scheme.c0,
                           "clampPressure": config.clampPressure, "wallLayers": layers,
                           "storedWallLayers": 1, "tank": [length, height],
                           "column": list(DAM_COLUMN), "jitter": DAM_JITTER,
                           "warmupFrames": size.warmup})


def _damForce(size: CaseSize) -> str:
    return f'''"""External force of a warpSPHCore dam2d dataset, in LagrangeBench's force.py
convention: force_fn(r) is the body force per unit mass at one position r ([2])."""

import jax.numpy as jnp

G = {DAM_G!r}


def force_fn(r, t=None, **kwargs):
    """Gravity -G e_y everywhere."""
    return jnp.stack([jnp.zeros_like(r[0]), jnp.full_like(r[1], -G)])
'''


DATASET_CASES = {
    "tgv2d": DatasetCase(
        "tgv2d", "2D Taylor-Green vortex, Re = 100, periodic unit square (LagrangeBench TGV 2D)",
        {"tiny": CaseSize(10, 8, 20, (2, 1, 1), relax=20),
         "small": CaseSize(20, 26, 40, (4, 2, 2), relax=100),
         "full": CaseSize(50, 126, 100, (100, 50, 50), relax=600)},
        _tgvScene, _tgvMetadata),
    "rpf2d": DatasetCase(
        "rpf2d", "2D reverse Poiseuille flow, periodic 1 x 2 box (LagrangeBench RPF 2D)",
        {"tiny": CaseSize(10, 8, 25, (2, 1, 1), relax=20, warmup=1),
         "small": CaseSize(16, 51, 40, (4, 2, 2), relax=100, warmup=5),
         "full": CaseSize(40, 401, 100, (50, 25, 25), relax=300, warmup=10)},
        _rpfScene, _rpfMetadata, _rpfForce),
    "dam2d": DatasetCase(
        "dam2d", "2D dam break, 2 x 1 column in a 5.36 x 2 tank, g = 1 (LagrangeBench DAM 2D)",
        {"tiny": CaseSize(5, 8, 10, (2, 1, 1)),
         "small": CaseSize(20, 51, 40, (2, 1, 1)),
         "full": CaseSize(50, 401, 100, (50, 25, 25))},
        _damScene, _damMetadata, _damForce),
}
