"""A declarative weakly compressible SPH scheme: one object that names the physics and builds
the rate function, the stepper, the time step and the health checks of a simulation.

    scheme = Scheme(rho0=1000.0, c0=referenceSoundSpeed(0.0, 9.81, 0.6),
                    equationOfState=Tait(), density="continuity",
                    artificialViscosity=ArtificialViscosity(0.02),
                    densityDiffusion=DensityDiffusion("molteni", 0.1),
                    walls=Walls(noSlip=False), bodyForce=(0.0, -9.81), clampPressure=True)
    particles = ParticleSet(supports, masses, kinds, domain, spacing=dx,
                            container=boxContainer(lower, upper, ("-x", "+x", "-y")))
    sim = scheme.simulation(particles, FluidState(x, v, rho))      # dt: scheme.timeStep
    sim.run(until=1.0)

`Scheme.rates(particles)` is a rate function of the one signature of the fluids layer,
``rates(state, neighbours) -> Rates``, so it also drives `rollout` and any stepper.

What a scheme computes per rate evaluation (every piece is one of the library's terms; the
momentum is the fused Momentum operator, one traversal):

1. **Density.** ``density="summation"``: V_i = 1 / sum_j W_ij over every non-ghost particle
   (`numberDensityVolumes`), rho_i = m_i / V_i; the state carries no densities.
   ``density="continuity"``: the state's densities, integrated with
   drho_i/dt = sum_j m_j (u_i - u_j) . G_ij (`continuityDensityRate`, walls at rest) plus
   the density diffusion.
2. **Pressure.** p = EOS(rho) (`Tait` or `Linear`), plus the user's pressure terms, clipped
   at 0 with ``clampPressure`` (a free surface).
3. **Walls** (`Walls`): the dummy particles of kind Boundary get the pressure, density and
   velocity of Adami, Hu & Adams 2012 (`extrapolateWalls`, with the body force as g). Their
   volumes: see "Wall volumes" below.
4. **Momentum** (`momentumAcceleration` / `transportVelocityAccelerations`): the
   inter-particle averaged pressure, the Morris viscosity with mu = rho0 (nu + alpha dx c0
   / 8) (the artificial viscosity in its Morris form; Monaghan's switch form is a separate
   edge sum), and with a `TransportVelocity` the transport stress and the background-pressure
   acceleration; plus the body force and the user's acceleration terms on fluid rows.
5. **Shifting** (`Shifting`): a shifting velocity -A h U grad C (Lind et al. 2012's
   concentration gradient, Skillen et al. 2013's coefficient A h U) added to the drift.

Every sum is over the pairs the scheme's ``interaction`` admits (default
`OperationDirection.FluidQueriesNonGhostReferences`: fluid rows over fluid and wall
neighbours); wall rows get zero accelerations and density rates, so walls stay in place.

**No-slip is the laminar viscosity's.** The fused momentum has one viscosity per particle,
mu = rho0 (nu + nu_art), and one wall velocity; the viscous term is linear in the wall
velocity, so the wall rows carry the blend w u_noSlip + (1 - w) u_freeSlip with
w = nu / (nu + nu_art): the laminar viscosity sees no-slip walls, the artificial one
free-slip walls. The artificial viscosity is a numerical dissipation: as wall friction it
slowed the bottom of a 3D dam break's surge and pushed fluid particles a quarter spacing
into the floor (a/dx = 10). With water's viscosity at a metre scale the laminar share, and
so the wall friction, is negligible, as it is physically.

**Wall volumes.** A wall particle's volume is the volume a fluid particle at its place has
at rest, so a tank at rest is in equilibrium: with a continuity equation the fluid's masses
are rho(0) dx^d, so its volumes are dx^d and so are the walls' (``Walls.volume``, default
``spacing ** d``); with summation density the fluid's volume is its number-density volume,
which m / rho_w reproduces for the walls (uniform masses, rho_w from the wall pressure).
The alternative, m_w = rho0 dx^d with V_w = m_w / rho_w, leaves the bottom fluid row of a
tank with a net force of -0.17 g at H/20 and -0.33 g at H/40 (docs/fluids.md).

**Stepper.** Summation density: kick-drift-kick (`transportKickDriftKick` with a transport
velocity or shifting), one evaluation per step. A continuity equation:
`predictorCorrector` (two evaluations per step): kick-drift-kick kicks velocity and density
from one evaluation, which is unstable for the acoustic exchange of a tank at rest
(`fluids.integrators`, docs/fluids.md "Stable defaults").

**Time step** (`timeStep`): dt = min(0.25 h / (c0 + U), 0.125 h^2 / nu, 0.25 sqrt(h /
|g|)) with h = the spacing (or ``smoothingLength``), U the expected largest speed, nu the
laminar plus the artificial viscosity. `simulation` uses it by default and raises for a
larger dt; its health monitor raises when the time step exceeds 1.5 times the limit of a
running state.

**Checks** (at construction; the kinds read back once): a scheme with walls whose
interaction never reads a Boundary reference raises, as does one whose interaction never
queries a Fluid row; `rates` raises when walls are declared but no particle is of kind
Boundary, when Boundary particles exist without `Walls`, and when particles of a kind the
interaction never reads exist (e.g. walls given kind Ghost). User terms returning the wrong
shape raise, naming the term.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..dataTypes.adjacency import AdjacencyList
from ..dataTypes.domain import DomainDescription
from ..dataTypes.particleState import ParticleState
from ..enumTypes import (
    KernelFunctions,
    OperationDirection,
    ParticleType,
    SupportScheme,
    interactionKinds,
)
from ..neighborhood.ordering import reorder
from .eos import linearDensity, linearPressure, taitDensity, taitPressure
from .forces import bodyAdjacency, checkBody
from .health import HealthMonitor
from .integrators import FluidState, Rates, kickDriftKick, predictorCorrector
from .loop import LoopOptions, Simulation
from .momentum import momentumAcceleration, momentumRows, transportVelocityAccelerations
from .neighbours import VerletNeighbours
from .openboundary import OpenBoundary
from .stabilization import antuonoDensityDiffusion, artificialViscosity, particleShifting
from .terms import continuityDensityRate, densityDiffusion, numberDensityVolumes
from .transport import TransportRates, transportKickDriftKick
from .walls import WallState, extrapolateWalls

__all__ = ["Scheme", "ParticleSet", "Tait", "Linear", "Walls", "ArtificialViscosity",
           "DensityDiffusion", "TransportVelocity", "Shifting", "Term", "TermContext",
           "hydrostaticStart"]

_DENSITY = ("continuity", "summation")
_TERM_KINDS = ("acceleration", "pressure", "densityRate")


# ---------------------------------------------------------------------------- the pieces
@dataclass(frozen=True)
class Tait:
    """Tait / Cole equation of state p = (rho0 c0^2 / gamma) ((rho / rho0)^gamma - 1) + p_b
    (`eos.taitPressure`)."""

    gamma: float = 7.0
    backgroundPressure: float = 0.0

    def pressure(self, rho, rho0, c0):
        return taitPressure(rho, rho0, c0, self.gamma, self.backgroundPressure)

    def density(self, p, rho0, c0):
        return taitDensity(p, rho0, c0, self.gamma, self.backgroundPressure)

    def hydrostaticPressure(self, depth, rho0, c0, g):
        """The exact pressure at `depth` below the free surface of a fluid at rest under
        gravity g (dp/dz = rho(p) g with p = p_b at the surface): with B = rho0 c0^2 /
        gamma, p = p_b + B ((1 + (gamma - 1) / gamma rho0 g depth / B)^(gamma / (gamma - 1))
        - 1)."""
        gamma = self.gamma
        B = rho0 * c0 * c0 / gamma
        w = torch.pow(1.0 + (gamma - 1.0) / gamma * rho0 * g * depth / B, gamma / (gamma - 1.0))
        return self.backgroundPressure + B * (w - 1.0)


@dataclass(frozen=True)
class Linear:
    """Linear equation of state p = c0^2 (rho - rho0) + p_b (`eos.linearPressure`)."""

    backgroundPressure: float = 0.0

    def pressure(self, rho, rho0, c0):
        return linearPressure(rho, rho0, c0, self.backgroundPressure)

    def density(self, p, rho0, c0):
        return linearDensity(p, rho0, c0, self.backgroundPressure)

    def hydrostaticPressure(self, depth, rho0, c0, g):
        """The exact pressure at `depth` below the free surface of a fluid at rest under
        gravity g: p = p_b + rho0 c0^2 (exp(g depth / c0^2) - 1)."""
        return self.backgroundPressure + rho0 * c0 * c0 * torch.expm1(g * depth / (c0 * c0))


@dataclass(frozen=True)
class Walls:
    """Dummy-particle walls (particles of kind Boundary) of Adami, Hu & Adams 2012.

    Attributes:
        noSlip: no-slip (u_w = 2 u_wall - utilde_w in the viscous term, `fluids.walls`) or
            free-slip. No-slip is a condition of the laminar viscosity: the artificial
            viscosity sees free-slip walls (module docstring, "Walls").
        velocity: u_wall, ``[d]`` or ``[N, d]`` (only wall rows read; a lid), or None (at
            rest).
        accelerations: a_w of the wall pressure, ``[d]`` or ``[N, d]``, or None.
        volume: the wall particles' volume V_w (a number); None: the module docstring's
            rule (spacing^d with a continuity equation, m / rho_w with summation density).
    """

    noSlip: bool = True
    velocity: object = None
    accelerations: object = None
    volume: float | None = None


@dataclass(frozen=True)
class ArtificialViscosity:
    """Artificial viscosity alpha: ``form="morris"`` adds nu = alpha dx c0 / 8 to the fused
    momentum's viscosity (Monaghan 2005, 2D; free), ``"monaghan"`` is Monaghan's switch form
    on approaching pairs (`stabilization.artificialViscosity`, an edge sum)."""

    alpha: float
    form: str = "morris"

    def __post_init__(self):
        if self.form not in ("morris", "monaghan"):
            raise ValueError(f"ArtificialViscosity: form={self.form!r}; accepted: morris, "
                             "monaghan")
        _nonNegative("ArtificialViscosity.alpha", self.alpha)


_DIFFUSION = ("fourtakas", "molteni", "antuono")


@dataclass(frozen=True)
class DensityDiffusion:
    """delta-SPH density diffusion with coefficient delta:

    * ``"molteni"``: Molteni & Colagrossi 2009 (`terms.densityDiffusion`), the Brookshaw
      Laplacian of the densities; it acts on a hydrostatic stratification;
    * ``"fourtakas"``: the same term of the densities minus their hydrostatic part
      rho_H = rho0 (g . x) / c0^2 + const (Fourtakas et al. 2019, Comput. Fluids 190:
      346-361, in its linearised form): zero in a fluid at rest under the body force g;
      the Molteni term without a body force;
    * ``"antuono"``: Antuono et al. 2010, renormalized density gradients
      (`stabilization.antuonoDensityDiffusion`); its renormalization is ill-conditioned at a
      free surface.
    """

    kind: str = "fourtakas"
    delta: float = 0.1

    def __post_init__(self):
        if self.kind not in _DIFFUSION:
            raise ValueError(f"DensityDiffusion: kind={self.kind!r}; accepted: "
                             f"{', '.join(_DIFFUSION)}")
        _nonNegative("DensityDiffusion.delta", self.delta)


@dataclass(frozen=True)
class TransportVelocity:
    """The transport-velocity formulation of Adami, Hu & Adams 2013: the particles drift with
    u~ = u + dt/2 a_b, a_b the background-pressure acceleration of p_b, and the momentum
    gains the A = rho u (u~ - u) stress. ``backgroundPressure`` p_b: a number or a 0-dim
    tensor (differentiable); None: rho0 c0^2 (0 keeps the stepper and the stress, with no
    background pressure)."""

    backgroundPressure: object = None


@dataclass(frozen=True)
class Shifting:
    """Particle shifting as a drift velocity du = -A h U grad C (the concentration gradient
    with the anti-clumping term of Lind et al. 2012, `stabilization.particleShifting`, and
    the coefficient D = A h U dt of Skillen et al. 2013), h the scheme's smoothing length.

    Attributes:
        speed: U, the reference speed (a number).
        coefficient: A (Skillen et al. use 1-6).
    """

    speed: float
    coefficient: float = 2.0


@dataclass(frozen=True)
class MomentumInputs:
    """What one rate evaluation gives the momentum equation (`Scheme.wallForce` reads it):
    the particles with their densities (wall rows: the extrapolated wall densities), the
    pressures, the velocities (wall rows: the viscous-term wall velocities), the transport
    velocities (or None), the volumes (or None: m / rho), mu, p_b, the body force (or None)
    and the fluid rows (and the zones of an open boundary, or None)."""

    particles: ParticleState
    pressures: torch.Tensor
    velocities: torch.Tensor
    transportVelocities: torch.Tensor | None
    volumes: torch.Tensor | None
    dynamicViscosity: object
    backgroundPressure: object
    bodyForce: torch.Tensor | None
    fluid: torch.Tensor
    zones: object = None
    outletAccelerations: torch.Tensor | None = None


@dataclass(frozen=True)
class _Kinds:
    """The kinds of one rate evaluation, their wall and fluid masks and (with an open
    boundary) its zones."""

    kinds: torch.Tensor
    isWall: torch.Tensor
    isFluid: torch.Tensor
    zones: object = None


@dataclass(frozen=True)
class TermContext:
    """What a user term receives.

    Attributes:
        state: the `FluidState` of the evaluation.
        neighbours: its neighbour list.
        particles: `ParticleState` (positions, supports, masses, kinds, densities): the
            densities of the fluid; for an acceleration or density-rate term, the wall rows
            hold the extrapolated wall densities.
        pressures: ``[N]``: for a pressure term the equation of state's pressures; for the
            other terms the final pressures (user terms, clip and wall extrapolation
            included).
        velocities: ``[N, d]`` (wall rows: the viscous-term wall velocities, except for a
            pressure term).
        volumes: ``[N]`` the volumes the momentum uses (None: m / rho).
        fluid: bool ``[N]``, the fluid rows.
        domain: the `DomainDescription`.
        scheme: the `Scheme`.
    """

    state: FluidState
    neighbours: AdjacencyList | None
    particles: ParticleState
    pressures: torch.Tensor
    velocities: torch.Tensor
    volumes: torch.Tensor | None
    fluid: torch.Tensor
    domain: DomainDescription
    scheme: Scheme


@dataclass(frozen=True)
class Term:
    """A user term: ``fn(context: TermContext) -> tensor`` (a function or a
    `torch.nn.Module`, whose parameters then receive gradients), added to the
    ``"acceleration"`` (``[N, d]``), the ``"pressure"`` (``[N]``, before the clip and the wall
    extrapolation) or the ``"densityRate"`` (``[N]``, with a continuity equation). Only the
    fluid rows of an acceleration or a density rate are used (walls stay in place)."""

    adds: str
    fn: Callable
    name: str | None = None

    def __post_init__(self):
        if self.adds not in _TERM_KINDS:
            raise ValueError(f"Term: adds={self.adds!r}; accepted: {', '.join(_TERM_KINDS)}")
        if not callable(self.fn):
            raise TypeError(f"Term: fn is a {type(self.fn).__name__}; accepted: a callable "
                            "or a torch.nn.Module taking a TermContext")

    @property
    def label(self) -> str:
        return self.name or getattr(self.fn, "__name__", None) or type(self.fn).__name__


@dataclass(frozen=True)
class ParticleSet:
    """The fixed per-particle data of a simulation and its geometry.

    Attributes:
        supports: ``[N]`` compact supports H.
        masses: ``[N]`` masses (fluid: rho(0) dx^d; walls: rho0 dx^d).
        kinds: ``[N]`` int32 `ParticleType` codes (Fluid 0, Boundary 1 for walls).
        domain: `DomainDescription` of the search (periodic axes wrapped).
        spacing: the particle spacing dx (a number).
        container: ``(lower [d], upper [d])`` wall faces the fluid must stay inside
            (`health.boxContainer`), or None: checked by the health monitor.
        scenes: ``[N]`` int32 scene indices of B independent scenes in one set
            (`fluids.scenes.batchScenes` builds one), or None (one scene); checked to lie in
            ``[0, numScenes)`` at construction (one readback).
        numScenes: B (1 without scenes).
        openBoundary: `fluids.openboundary.OpenBoundary` (an inlet and an outlet; the kinds
            of the particles that are not walls then follow their positions), or None.
    """

    supports: torch.Tensor
    masses: torch.Tensor
    kinds: torch.Tensor
    domain: DomainDescription
    spacing: float
    container: tuple | None = None
    scenes: torch.Tensor | None = None
    numScenes: int = 1
    openBoundary: OpenBoundary | None = None

    def __post_init__(self):
        n = self.supports.shape[0] if isinstance(self.supports, torch.Tensor) else None
        for name in ("supports", "masses", "kinds"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.shape[0] != n:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"ParticleSet: {name} has shape {shape}; accepted: [N] with "
                                 f"N = {n} (the supports' length)")
        if self.kinds.dtype != torch.int32:
            raise TypeError(f"ParticleSet: kinds has dtype {self.kinds.dtype}; accepted: "
                            "torch.int32 ParticleType codes")
        if not (isinstance(self.spacing, (int, float)) and self.spacing > 0
                and math.isfinite(self.spacing)):
            raise ValueError(f"ParticleSet: spacing={self.spacing!r}; accepted: a positive "
                             "finite number (dx)")
        sc = self.scenes
        if sc is not None and (not isinstance(sc, torch.Tensor) or sc.dtype != torch.int32
                               or tuple(sc.shape) != (n,)):
            what = (f"{tuple(sc.shape)} {sc.dtype}" if isinstance(sc, torch.Tensor)
                    else type(sc).__name__)
            raise ValueError(f"ParticleSet: scenes is {what}; accepted: int32 [N] with N = {n}, "
                             "or None")
        if isinstance(self.numScenes, bool) or not isinstance(self.numScenes, int) \
                or self.numScenes < 1 or (sc is None and self.numScenes != 1):
            raise ValueError(f"ParticleSet: numScenes={self.numScenes!r}; accepted: an int "
                             ">= 1, and 1 without scenes")
        if sc is not None and n:
            lo, hi = (int(v) for v in torch.stack([sc.min(), sc.max()]).tolist())  # once
            if lo < 0 or hi >= self.numScenes:
                bad = lo if lo < 0 else hi
                first = int(torch.nonzero(sc == bad)[0, 0])
                raise ValueError(f"ParticleSet: scenes holds {bad} (particle {first}); "
                                 f"accepted: scene indices in [0, numScenes) = "
                                 f"[0, {self.numScenes})")

        ob = self.openBoundary
        if ob is not None:
            if not isinstance(ob, OpenBoundary):
                raise TypeError(f"ParticleSet: openBoundary is a {type(ob).__name__}; "
                                "accepted: an OpenBoundary (fluids.openboundary) or None")
            if ob.dimension != self.dimension:
                raise ValueError(f"ParticleSet: the open boundary is {ob.dimension}D and the "
                                 f"domain {self.dimension}D")
            if sc is not None:
                raise ValueError("ParticleSet: an open boundary with scenes is not supported; "
                                 "accepted: scenes=None with an openBoundary")
            if abs(ob.spacing - self.spacing) > 1e-12 * self.spacing:
                raise ValueError(f"ParticleSet: the open boundary's spacing {ob.spacing!r} "
                                 f"differs from spacing={self.spacing!r}")

    @property
    def dimension(self) -> int:
        return int(self.domain.min.shape[0])


def _largest(value) -> float:
    """The largest entry of a number or tensor, as a Python float (one readback)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().max()) if value.numel() else 0.0
    return float(value)


def _nonNegative(name, value):
    if isinstance(value, (int, float)) and not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name}={value!r}; accepted: a finite number >= 0 (or a tensor)")


# ---------------------------------------------------------------------------- the scheme
@dataclass(frozen=True)
class Scheme:
    """The physics of a weakly compressible SPH simulation (module docstring).

    Attributes:
        rho0: reference density.
        c0: artificial sound speed (`eos.referenceSoundSpeed`: 10 max(U, sqrt(2 |g| H))).
        equationOfState: `Tait` or `Linear`.
        density: ``"continuity"`` (the state carries densities) or ``"summation"``.
        viscosity: laminar kinematic viscosity nu (Morris), a number, a 0-dim tensor or an
            ``[N]`` tensor (one value per particle: scenes of a batch with different
            Reynolds numbers; the time step follows the largest).
        artificialViscosity: `ArtificialViscosity` or None.
        densityDiffusion: `DensityDiffusion` or None (continuity only).
        walls: `Walls` or None.
        transportVelocity: `TransportVelocity` or None (summation density only).
        shifting: `Shifting` or None (summation density only).
        bodyForce: ``[d]`` acceleration on the fluid (also the g of the wall pressure), a
            sequence or a tensor (differentiable), or None.
        clampPressure: clip negative pressures to 0 (a free surface).
        terms: user `Term`s.
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme` of the operators.
        interaction: `OperationDirection` of the fluid's sums (default fluid queries, every
            non-ghost reference).
        smoothingLength: h of the diffusion, shifting and time-step formulas (None: the
            particle spacing).
        cfl: the acoustic coefficient of `timeStep`.
    """

    rho0: float
    c0: float
    equationOfState: Tait | Linear = field(default_factory=Tait)
    density: str = "continuity"
    viscosity: object = 0.0
    artificialViscosity: ArtificialViscosity | None = None
    densityDiffusion: DensityDiffusion | None = None
    walls: Walls | None = None
    transportVelocity: TransportVelocity | None = None
    shifting: Shifting | None = None
    bodyForce: object = None
    clampPressure: bool = False
    terms: Sequence[Term] = ()
    kernel: KernelFunctions = KernelFunctions.Wendland2
    supportMode: SupportScheme = SupportScheme.Gather
    interaction: OperationDirection = OperationDirection.FluidQueriesNonGhostReferences
    smoothingLength: float | None = None
    cfl: float = 0.25

    def __post_init__(self):
        for name in ("rho0", "c0", "cfl"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"Scheme: {name}={v!r}; accepted: a positive finite number")
        if self.density not in _DENSITY:
            raise ValueError(f"Scheme: density={self.density!r}; accepted: "
                             f"{', '.join(_DENSITY)}")
        if not isinstance(self.equationOfState, (Tait, Linear)):
            raise TypeError(f"Scheme: equationOfState is a "
                            f"{type(self.equationOfState).__name__}; accepted: Tait or Linear")
        _nonNegative("Scheme: viscosity", self.viscosity)
        object.__setattr__(self, "terms", tuple(self.terms))
        for t in self.terms:
            if not isinstance(t, Term):
                raise TypeError(f"Scheme: terms holds a {type(t).__name__}; accepted: Term "
                                "objects, e.g. Term('acceleration', fn)")
        object.__setattr__(self, "interaction", OperationDirection(self.interaction))
        object.__setattr__(self, "kernel", KernelFunctions(self.kernel))
        object.__setattr__(self, "supportMode", SupportScheme(self.supportMode))
        summation = self.density == "summation"
        if summation and self.densityDiffusion is not None:
            raise ValueError("Scheme: densityDiffusion acts on integrated densities; accepted "
                             "with density='continuity' only")
        if summation and any(t.adds == "densityRate" for t in self.terms):
            raise ValueError("Scheme: a densityRate term needs density='continuity'")
        if not summation and (self.transportVelocity is not None or self.shifting is not None):
            raise ValueError("Scheme: a transport velocity or shifting is stepped by "
                             "transport kick-drift-kick, which is unstable with a continuity "
                             "equation (docs/fluids.md, 'Stable defaults'); accepted with "
                             "density='summation' only")
        queries, references = interactionKinds(self.interaction)
        if ParticleType.Fluid not in queries:
            raise ValueError(f"Scheme: interaction {self.interaction.name} never queries a "
                             "Fluid row, so no fluid particle would move; accepted: a mode "
                             "whose queries include Fluid (default "
                             "FluidQueriesNonGhostReferences)")
        if self.walls is not None and ParticleType.Boundary not in references:
            raise ValueError(f"Scheme: walls are declared but the interaction "
                             f"{self.interaction.name} never reads a Boundary reference, so "
                             "the fluid would not see them; accepted: a mode whose references "
                             "include Boundary, e.g. FluidQueriesNonGhostReferences")

    # -- derived constants -----------------------------------------------------------------
    @property
    def stepper(self):
        """The stepper of the scheme (module docstring)."""
        if self.transportVelocity is not None or self.shifting is not None:
            return transportKickDriftKick
        return kickDriftKick if self.density == "summation" else predictorCorrector

    def _h(self, particles: ParticleSet) -> float:
        return float(particles.spacing if self.smoothingLength is None
                     else self.smoothingLength)

    def _nuTotal(self, particles: ParticleSet):
        nu = self.viscosity
        av = self.artificialViscosity
        if av is not None and av.form == "morris":
            nu = nu + av.alpha * particles.spacing * self.c0 / 8.0
        return nu

    def _gravity(self) -> float:
        g = self.bodyForce
        if g is None:
            return 0.0
        t = torch.as_tensor(g, dtype=torch.float64).detach()
        return float(torch.linalg.vector_norm(t))

    def timeStep(self, particles: ParticleSet, maxSpeed: float = 0.0) -> float:
        """The stable time step (module docstring) for the expected largest speed
        `maxSpeed`, a Python number (no device work).

        Args:
            particles: the `ParticleSet` (its spacing).
            maxSpeed: U, the largest speed expected in the run.

        Returns:
            dt.
        """
        h = self._h(particles)
        dt = self.cfl * h / (self.c0 + float(maxSpeed))
        nu = self._nuTotal(particles)
        nu = _largest(nu)
        if nu > 0:
            dt = min(dt, 0.125 * h * h / nu)
        g = self._gravity()
        if g > 0:
            dt = min(dt, 0.25 * math.sqrt(h / g))
        return dt

    def checkedTimeStep(self, particles: ParticleSet, dt, maxSpeed: float = 0.0,
                        where: str = "Scheme") -> float | torch.Tensor:
        """`dt`, or `timeStep` when None; a Python number above `timeStep` raises (a tensor
        is the caller's to keep stable). `where` names the caller in the error."""
        limit = self.timeStep(particles, maxSpeed)
        if dt is None:
            return limit
        if not isinstance(dt, torch.Tensor) and dt > limit * (1.0 + 1e-9):
            raise ValueError(f"{where}: dt={dt!r} is above this scheme's stable "
                             f"time step {limit:.6g} ({dt / limit:.3g} times it; acoustic "
                             f"{self.cfl} h / (c0 + U) with h = {self._h(particles):.6g}, "
                             f"c0 = {self.c0:.6g}, U = {maxSpeed:.6g}, and the viscous and "
                             "body-force limits); an explicit step beyond it gives finite "
                             "garbage. Use dt <= Scheme.timeStep(particles, maxSpeed)")
        return dt

    def stableStep(self, particles: ParticleSet, speed: torch.Tensor, viscosity=None):
        """The stable time step for the largest speed `speed` (a tensor of any shape: one
        per scene, say), on the device: the acoustic limit cfl h / (c0 + U), the viscous
        0.125 h^2 / nu and the body-force 0.25 sqrt(h / |g|).

        Args:
            particles: the `ParticleSet` (its spacing).
            speed: U, a tensor.
            viscosity: nu (artificial viscosity included) for the viscous limit: a number or
                a tensor shaped like `speed`; None: the scheme's largest.
        """
        h = self._h(particles)
        nu = _largest(self._nuTotal(particles)) if viscosity is None else viscosity
        dt = self.cfl * h / (self.c0 + speed)
        if isinstance(nu, torch.Tensor):
            dt = torch.minimum(dt, torch.where(nu > 0, 0.125 * h * h / nu,
                                               torch.full_like(dt, math.inf)))
        elif nu > 0:
            dt = torch.clamp(dt, max=0.125 * h * h / nu)
        g = self._gravity()
        if g > 0:
            dt = torch.clamp(dt, max=0.25 * math.sqrt(h / g))
        return dt

    def timeStepLimit(self, particles: ParticleSet) -> Callable:
        """``limit(state) -> 0-dim tensor``: the stable time step of a state (its largest
        speed as U, `stableStep`), on the device; for `HealthMonitor`."""
        nu = _largest(self._nuTotal(particles))

        def limit(state):
            v = state.velocities.detach()
            speed = torch.linalg.vector_norm(v, dim=1).amax() if v.shape[0] else \
                torch.zeros((), dtype=v.dtype, device=v.device)
            return self.stableStep(particles, speed, nu)

        return limit

    # -- construction checks ---------------------------------------------------------------
    def checkKinds(self, particles: ParticleSet) -> None:
        """Raise when the particle kinds do not fit the scheme (module docstring, "Checks").
        Reads the kinds back once."""
        kinds = particles.kinds
        values, counts = torch.unique(kinds.detach().cpu(), return_counts=True)
        present = {int(v): int(c) for v, c in zip(values, counts)}
        names = {int(k): k.name for k in ParticleType}
        unknown = {k: c for k, c in present.items() if k not in names}
        if unknown:
            raise ValueError(f"Scheme: kinds holds codes {sorted(unknown)} that are not "
                             f"ParticleType values; accepted: "
                             f"{', '.join(f'{k.name} ({int(k)})' for k in ParticleType)}")
        nWalls = present.get(int(ParticleType.Boundary), 0)
        if present.get(int(ParticleType.Fluid), 0) == 0:
            raise ValueError("Scheme: no particle is of kind Fluid; the fluid's kind code is "
                             f"{int(ParticleType.Fluid)}")
        if self.walls is not None and nWalls == 0:
            others = ", ".join(f"{c} of kind {names[k]}" for k, c in present.items()
                               if k != int(ParticleType.Fluid))
            raise ValueError("Scheme: walls are declared but no particle is of kind Boundary "
                             f"({int(ParticleType.Boundary)}); the particles are "
                             f"{present.get(0, 0)} Fluid" + (f", {others}" if others else "")
                             + ". Give the wall particles kind ParticleType.Boundary")
        if self.walls is None and nWalls:
            raise ValueError(f"Scheme: {nWalls} particles are of kind Boundary but the scheme "
                             "declares no walls, so they would be treated as fluid references "
                             "without extrapolated pressures; pass walls=Walls(...)")
        _, references = interactionKinds(self.interaction)
        ignored = {k: c for k, c in present.items()
                   if k != int(ParticleType.Fluid) and ParticleType(k) not in references}
        if ignored:
            what = ", ".join(f"{c} particles of kind {names[k]}" for k, c in ignored.items())
            raise ValueError(f"Scheme: {what} are never read by the interaction "
                             f"{self.interaction.name}, so the fluid would pass through them; "
                             "walls are ParticleType.Boundary")

    def _checkOpen(self, particles: ParticleSet) -> None:
        if particles.openBoundary is None:
            return
        _, references = interactionKinds(self.interaction)
        if ParticleType.Boundary not in references or ParticleType.Ghost in references:
            raise ValueError(f"Scheme: an open boundary's buffers are read as Boundary "
                             f"references and its pool is of kind Ghost, but the interaction "
                             f"{self.interaction.name} "
                             + ("never reads a Boundary reference" if ParticleType.Boundary
                                not in references else "reads Ghost references")
                             + "; accepted: FluidQueriesNonGhostReferences")

    # -- the rate function -----------------------------------------------------------------
    def rates(self, particles: ParticleSet, *, check: bool = True) -> Callable:
        """The rate function ``rates(state, neighbours) -> Rates`` (`TransportRates` with
        a transport velocity or shifting) of this scheme on `particles` (module docstring).
        Checks the kinds once (`checkKinds`); ``check=False`` leaves that to the caller, who
        checked a set these particles are part of (a rank's share of a distributed run may
        hold no fluid, or no wall)."""
        if check:
            self.checkKinds(particles)
        self._checkOpen(particles)
        if self.density == "summation":
            return self._summationRates(particles)
        return self._continuityRates(particles)

    def _common(self, particles: ParticleSet):
        """``(H, m, domain, classify, make)``: ``classify(x) -> _Kinds`` the kinds of an
        evaluation (the static ones, or with an open boundary those of the positions) and
        ``make(x, rho, k)`` the operators' particle state."""
        H, m, kinds, domain = (particles.supports, particles.masses, particles.kinds,
                               particles.domain)
        scenes = particles.scenes
        version = kinds._version
        ob = particles.openBoundary
        static = _Kinds(kinds, kinds == int(ParticleType.Boundary),
                        kinds == int(ParticleType.Fluid))

        def classify(x) -> _Kinds:
            if kinds._version != version:
                # the fluid and wall masks were taken from the kinds at build time; the
                # operators would read the new kinds: a silent mix of both
                raise ValueError("Scheme: particles.kinds was changed in place after the rate "
                                 "function was built; build it again (scheme.rates(particles)"
                                 ", scheme.wallForce(...)) for the new kinds")
            if ob is None:
                return static
            z = ob.zones(x, kinds)
            now = ob.kindsOf(z, kinds)
            return _Kinds(now, now == int(ParticleType.Boundary),
                          now == int(ParticleType.Fluid), z)

        def make(x, rho, k: _Kinds):
            """The operators' particle state at positions x (with the scene indices)."""
            return ParticleState(x, H, m, k.kinds, rho, scenes=scenes)

        return H, m, domain, classify, make

    def _bodyForce(self, like: torch.Tensor):
        if self.bodyForce is None:
            return None
        return torch.as_tensor(self.bodyForce, dtype=like.dtype, device=like.device)

    def _applyTerms(self, kind: str, value, context_fn, isFluid, shape):
        for term in self.terms:
            if term.adds != kind:
                continue
            out = term.fn(context_fn())
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape):
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(f"Scheme: the {kind} term {term.label!r} returned {got}; "
                                 f"accepted: {tuple(shape)}")
            if kind == "pressure":
                value = value + out
            else:
                mask = isFluid if out.dim() == 1 else isFluid[:, None]
                value = value + torch.where(mask, out, torch.zeros_like(out))
        return value

    def _noSlipShare(self, particles: ParticleSet):
        """The weight of the no-slip wall velocity: the laminar share nu / (nu + nu_art) of
        the fused viscosity with no-slip walls (the artificial viscosity sees free-slip
        walls), 0 with free-slip walls (module docstring, "Walls")."""
        walls, av = self.walls, self.artificialViscosity
        if walls is None or not walls.noSlip:
            return False
        if av is None or av.form != "morris" or av.alpha == 0:
            return True
        artificial = av.alpha * particles.spacing * self.c0 / 8.0
        return self.viscosity / (self.viscosity + artificial)

    def _walls(self, P, p, u, domain, adjacency, g, noSlip, k: _Kinds, particles, t=0.0):
        """`extrapolateWalls` of the scheme's walls, with the body force as g (0 without);
        with an open boundary, its buffers' values (`fluids.openboundary`): the outlet's
        pressure, and each buffer particle's own velocity."""
        x = P.positions
        gw = torch.zeros(x.shape[1], dtype=x.dtype, device=x.device) if g is None else g
        walls, eos, rho0, c0 = self.walls or Walls(False), self.equationOfState, self.rho0, \
            self.c0
        w = extrapolateWalls(P, p, u, domain, adjacency, gravity=gw,
                             densityOfPressure=lambda q: eos.density(q, rho0, c0),
                             wallVelocity=walls.velocity,
                             wallAccelerations=walls.accelerations, noSlip=noSlip,
                             kernel=self.kernel, supportMode=self.supportMode,
                             shepard=k.zones is not None,
                             candidates=None if k.zones is None else
                             particles.openBoundary.candidates(adjacency, particles.kinds, x))
        z = k.zones
        if z is None:
            return w
        ob = particles.openBoundary
        pOut = torch.full_like(w.pressures, float(ob.outlet.pressure))
        if ob.outlet.characteristic:
            # the incoming characteristic p - rho0 c0 u held at its reference (p_out and the
            # inflow speed of the particle's lane), the outgoing p + rho0 c0 u from the fluid
            a = ob.axis
            x = P.positions
            reference = ob.speeds(t, x)[ob.laneOf(x)]  # the inflow carried to the outlet
            jump = (w.pressures - pOut) + rho0 * c0 * (w.shepardVelocities[:, a] - reference)
            pOut = torch.where(w.reached, pOut + 0.5 * jump, pOut)
        return WallState(torch.where(z.outlet, pOut, w.pressures),
                         torch.where(z.outlet, eos.density(pOut, rho0, c0), w.densities),
                         torch.where((z.inlet | z.outlet)[:, None], u, w.velocities),
                         w.shepardVelocities, w.reached)

    def _relaxation(self, particles: ParticleSet) -> float | None:
        """The relaxation time of an open boundary's buffer values (`Inlet.relaxation`,
        default 4 h / c0), or None without one."""
        ob = particles.openBoundary
        if ob is None:
            return None
        return 4.0 * self._h(particles) / self.c0 if ob.inlet.relaxation is None \
            else ob.inlet.relaxation

    @staticmethod
    def _outletAccelerations(w: WallState, u, k: _Kinds, relax):
        """The outlet rows with fluid neighbours relax their velocities to the Shepard
        average of the fluid's (a zero-gradient outflow); the others keep theirs."""
        if k.zones is None:
            return None
        pulled = (k.zones.outlet & w.reached)[:, None]
        return torch.where(pulled, (w.shepardVelocities - u) / relax, torch.zeros_like(u))

    def _pressures(self, state, adjacency, P, u, V, isFluid, domain):
        """The equation of state's pressures of ``P.densities``, plus the user's pressure
        terms, clipped at 0 with ``clampPressure``."""
        p = self.equationOfState.pressure(P.densities, self.rho0, self.c0)
        p = self._applyTerms("pressure", p, lambda: TermContext(
            state, adjacency, P, p, u, V, isFluid, domain, self), isFluid, p.shape)
        return p.clamp(min=0.0) if self.clampPressure else p

    def _dynamicViscosity(self, particles: ParticleSet):
        """mu = rho0 (nu + alpha dx c0 / 8): the laminar and the Morris-form artificial
        viscosity of the fused momentum."""
        mu = self.rho0 * self.viscosity
        av = self.artificialViscosity
        if av is not None and av.form == "morris":
            mu = mu + self.rho0 * av.alpha * particles.spacing * self.c0 / 8.0
        return mu

    def _shift(self, particles, P, domain, adjacency, V):
        s = self.shifting
        h = self._h(particles)
        return particleShifting(P, domain, adjacency, particles.spacing, h,
                                diffusionCoefficient=s.coefficient * h * s.speed, volumes=V,
                                kernel=self.kernel, supportMode=self.supportMode,
                                operationMode=self.interaction)

    def _summationInputs(self, particles: ParticleSet):
        """``inputs(state, adjacency) -> MomentumInputs`` of summation density (module
        docstring, steps 1-3): the number-density volumes and densities, the pressures, the
        walls' extrapolated values and the transport velocities."""
        H, m, domain, classify, make = self._common(particles)
        walls, tv = self.walls, self.transportVelocity
        extrapolate = walls is not None or particles.openBoundary is not None
        mu = self._dynamicViscosity(particles)
        pb = 0.0 if tv is None else (self.rho0 * self.c0**2 if tv.backgroundPressure is None
                                     else tv.backgroundPressure)
        wallVolume = None if walls is None else walls.volume
        noSlip = self._noSlipShare(particles)
        relax = self._relaxation(particles)

        def inputs(state, adjacency):
            x, u = state.positions, state.velocities
            k = classify(x)
            V = numberDensityVolumes(make(x, None, k), domain, adjacency, self.kernel,
                                     self.supportMode)
            rho = m / V
            P = make(x, rho, k)
            p = self._pressures(state, adjacency, P, u, V, k.isFluid, domain)
            ut = getattr(state, "transportVelocities", None)
            ut = u if ut is None else ut
            g = self._bodyForce(x)
            outflow = None
            if extrapolate:
                w = self._walls(P, p, u, domain, adjacency, g, noSlip, k, particles,
                                state.time)
                outflow = self._outletAccelerations(w, u, k, relax)
                V = torch.where(k.isWall, m / w.densities if wallVolume is None
                                else torch.full_like(V, wallVolume), V)
                ut = torch.where(k.isWall[:, None], w.velocities, ut)
                P, p, u = make(x, w.densities, k), w.pressures, w.velocities
            return MomentumInputs(P, p, u, ut, V, mu, pb, g, k.isFluid, k.zones, outflow)

        return inputs

    def _summationRates(self, particles: ParticleSet):
        domain = particles.domain
        av = self.artificialViscosity
        transport = self.transportVelocity is not None or self.shifting is not None
        kw = dict(kernel=self.kernel, supportMode=self.supportMode)
        inputs = self._summationInputs(particles)

        def rates(state, adjacency):
            mi = inputs(state, adjacency)
            P, p, u, V, isFluid, g = (mi.particles, mi.pressures, mi.velocities, mi.volumes,
                                      mi.fluid, mi.bodyForce)
            a, ab = transportVelocityAccelerations(
                P, p, u, domain, adjacency, backgroundPressure=mi.backgroundPressure,
                dynamicViscosity=mi.dynamicViscosity, transportVelocities=mi.transportVelocities,
                volumes=V, operationMode=self.interaction, **kw)
            if g is not None:
                a = a + torch.where(isFluid[:, None], g, 0.0)
            if av is not None and av.form == "monaghan" and av.alpha > 0:
                a = a + artificialViscosity(P, u, domain, adjacency, self.c0, alpha=av.alpha,
                                            smoothingLength=self._h(particles),
                                            operationMode=self.interaction, **kw)
            a = self._applyTerms("acceleration", a, lambda: TermContext(
                state, adjacency, P, p, u, V, isFluid, domain, self), isFluid, a.shape)
            if mi.outletAccelerations is not None:
                a = a + mi.outletAccelerations
            if not transport:
                return Rates(a, None)
            shift = None if self.shifting is None else self._shift(particles, P, domain,
                                                                   adjacency, V)
            return TransportRates(a, None, ab, shift)

        return rates

    def _continuityInputs(self, particles: ParticleSet):
        """``inputs(state, adjacency) -> MomentumInputs`` of a continuity equation (module
        docstring, steps 2-3): the state's densities, the pressures and the walls'
        extrapolated values (wall volumes ``Walls.volume``, default spacing^d)."""
        H, m, domain, classify, make = self._common(particles)
        walls = self.walls
        mu = self._dynamicViscosity(particles)
        d = particles.dimension
        extrapolate = walls is not None or particles.openBoundary is not None
        wallVolume = None if not extrapolate else (
            particles.spacing ** d if walls is None or walls.volume is None else walls.volume)
        noSlip = self._noSlipShare(particles)
        relax = self._relaxation(particles)

        def inputs(state, adjacency):
            x, u, rho = state.positions, state.velocities, state.densities
            k = classify(x)
            P = make(x, rho, k)
            p = self._pressures(state, adjacency, P, u, None, k.isFluid, domain)
            g = self._bodyForce(x)
            V = None
            uw = u
            outflow = None
            if extrapolate:
                w = self._walls(P, p, u, domain, adjacency, g, noSlip, k, particles,
                                state.time)
                outflow = self._outletAccelerations(w, u, k, relax)
                P, p, uw = make(x, w.densities, k), w.pressures, w.velocities
                V = torch.where(k.isWall, torch.full_like(p, wallVolume), m / w.densities)
            return MomentumInputs(P, p, uw, None, V, mu, 0.0, g, k.isFluid, k.zones, outflow)

        return inputs

    def _continuityRates(self, particles: ParticleSet):
        domain = particles.domain
        rho0, c0 = self.rho0, self.c0
        dd, av = self.densityDiffusion, self.artificialViscosity
        h = self._h(particles)
        kw = dict(kernel=self.kernel, supportMode=self.supportMode,
                  operationMode=self.interaction)
        inputs = self._continuityInputs(particles)
        relax = self._relaxation(particles)

        def rates(state, adjacency):
            x, u = state.positions, state.velocities
            mi = inputs(state, adjacency)
            P, p, uw, V, isFluid, g = (mi.particles, mi.pressures, mi.velocities, mi.volumes,
                                       mi.fluid, mi.bodyForce)
            acc = momentumAcceleration(P, p, uw, domain, adjacency,
                                       dynamicViscosity=mi.dynamicViscosity, volumes=V, **kw)
            if g is not None:
                acc = acc + torch.where(isFluid[:, None], g, 0.0)
            if av is not None and av.form == "monaghan" and av.alpha > 0:
                acc = acc + artificialViscosity(P, uw, domain, adjacency, c0, alpha=av.alpha,
                                                smoothingLength=h, **kw)
            context = lambda: TermContext(  # noqa: E731
                state, adjacency, P, p, uw, V, isFluid, domain, self)
            acc = self._applyTerms("acceleration", acc, context, isFluid, acc.shape)
            drho = continuityDensityRate(P, u, domain, adjacency, **kw)  # walls at rest
            if dd is not None and dd.kind == "antuono":
                drho = drho + antuonoDensityDiffusion(P, domain, adjacency, dd.delta, h, c0,
                                                      **kw)
            elif dd is not None:
                values = None
                if dd.kind == "fourtakas" and g is not None:
                    values = P.densities - (rho0 / (c0 * c0)) * (x @ g)
                drho = drho + densityDiffusion(P, domain, adjacency, dd.delta, h, c0, **kw,
                                               values=values)
            drho = self._applyTerms("densityRate", drho, context, isFluid, drho.shape)
            if mi.outletAccelerations is not None:
                acc = acc + mi.outletAccelerations
            if mi.zones is not None:
                # inlet-buffer densities relax to those of their extrapolated pressures
                drho = torch.where(mi.zones.inlet, (P.densities - state.densities) / relax,
                                   drho)
            return Rates(acc, drho)

        return rates

    # -- forces on walls ---------------------------------------------------------------------
    def wallForce(self, particles: ParticleSet, body: torch.Tensor | None = None) -> Callable:
        """``force(state, neighbours) -> [d]``: the force the fluid exerts on the wall
        particles `body` (a bool ``[N]`` mask of Boundary particles; None: every wall), the
        reaction of the pair forces those particles exert on the fluid in the momentum
        equation: F = -sum_{i fluid} sum_{j in body} m_i a_ij, with the pressures, densities,
        volumes, viscosities and wall values of the rate evaluation of the same state
        (`fluids.forces`). Pressure and viscous (and transport-velocity) stresses, and the
        Monaghan artificial viscosity where the scheme has it; not the body force, which acts
        on the fluid, nor user terms. Drag and lift of a body in a stream are its components;
        differentiable in reverse and forward mode as the rates are."""
        self.checkKinds(particles)
        self._checkOpen(particles)
        mask = checkBody(particles, body)
        inputs = (self._summationInputs(particles) if self.density == "summation"
                  else self._continuityInputs(particles))
        domain, av = particles.domain, self.artificialViscosity
        kw = dict(kernel=self.kernel, supportMode=self.supportMode,
                  operationMode=self.interaction)
        m = particles.masses

        ob = particles.openBoundary

        def force(state, adjacency):
            mi = inputs(state, adjacency)
            # with an open boundary the fluid rows change with the positions: the edges are
            # chosen once per list from the rows that may be fluid while it is used
            rows = mi.fluid if ob is None else \
                ob.candidates(adjacency, particles.kinds, state.positions)[1]
            edges = bodyAdjacency(adjacency, rows, mask)
            rows = momentumRows(mi.particles, mi.pressures, mi.velocities, domain, edges,
                                dynamicViscosity=mi.dynamicViscosity,
                                transportVelocities=mi.transportVelocities,
                                volumes=mi.volumes, **kw)
            onFluid = rows[:, 0]  # m_i times the acceleration the body gives fluid row i
            if av is not None and av.form == "monaghan" and av.alpha > 0:
                onFluid = onFluid + m[:, None] * artificialViscosity(
                    mi.particles, mi.velocities, domain, edges, self.c0, alpha=av.alpha,
                    smoothingLength=self._h(particles), **kw)
            return -torch.where(mi.fluid[:, None], onFluid, 0.0).sum(0)

        return force

    # -- assembling a run ------------------------------------------------------------------
    def monitor(self, particles: ParticleSet, dt=None, *, every: int = 1,
                **actions) -> HealthMonitor:
        """The `HealthMonitor` of a run of this scheme: non-finite fields, particles leaving
        the domain or the container, and the time step against `timeStepLimit` (raising
        above 1.5 times the limit of a running state).

        Args:
            particles: the `ParticleSet`.
            dt: the run's time step (set by `Simulation` when None).
            every: check every k-th rate evaluation.
            **actions: the checks' actions (`HealthMonitor`).
        """
        return HealthMonitor(domain=particles.domain, kinds=particles.kinds,
                             container=particles.container,
                             timeStepLimit=self.timeStepLimit(particles),
                             timeStepTolerance=1.5, dt=dt,
                             every=every, openBoundary=particles.openBoundary, **actions)

    def neighbours(self, particles: ParticleSet, skin: float = 0.1, *, wrap: bool = True,
                   monitor=None) -> VerletNeighbours:
        """The `VerletNeighbours` policy of a run (for `rollout`; `Simulation` builds the
        same from its `LoopOptions`)."""
        return VerletNeighbours(particles.domain, particles.supports, skin, self.supportMode,
                                wrap=wrap, monitor=monitor, scenes=particles.scenes,
                                openBoundary=particles.openBoundary, kinds=particles.kinds)

    def simulation(self, particles: ParticleSet, state: FluidState, dt=None, *,
                   maxSpeed: float = 0.0, options: LoopOptions | None = None,
                   monitor=None, stepper=None, **kwargs) -> Simulation:
        """A `Simulation` of this scheme: its rates, stepper, time step and health monitor.

        Args:
            particles: the `ParticleSet`.
            state: the initial `FluidState` (densities exactly when ``density`` is
                continuity).
            dt: the time step; None: `timeStep` (``maxSpeed``). A Python number above
                `timeStep` raises (a tensor is the caller's to keep stable; the monitor
                still checks it while running).
            maxSpeed: the expected largest speed U of `timeStep`.
            options: `LoopOptions` (its ``supportMode`` is the scheme's).
            monitor: a `HealthMonitor`, or None: `monitor` with ``options.checkEvery``.
            stepper: another stepper than the scheme's (`stepper`), or None.
            **kwargs: the other keyword arguments of `Simulation` (out, writer,
                frameFields).

        Returns:
            The `Simulation`.
        """
        if (state.densities is None) != (self.density == "summation"):
            raise ValueError(f"Scheme.simulation: the state carries "
                             f"{'no ' if state.densities is None else ''}densities but the "
                             f"scheme's density is {self.density!r}; accepted: densities "
                             "exactly with density='continuity'")
        dt = self.checkedTimeStep(particles, dt, maxSpeed, "Scheme.simulation")
        options = LoopOptions() if options is None else options
        options = dataclasses.replace(options, supportMode=self.supportMode)
        if monitor is None and options.checkEvery:
            monitor = self.monitor(particles, dt, every=options.checkEvery)

        def ratesInOrder(order):  # `LoopOptions.sortEvery`: the rates of the sorted set
            return self.rates(reorder(particles, order))

        return Simulation(state, self.rates(particles), particles.domain, particles.supports,
                          dt, stepper=self.stepper if stepper is None else stepper,
                          options=options, monitor=monitor, scenes=particles.scenes,
                          openBoundary=particles.openBoundary, kinds=particles.kinds,
                          reorder=ratesInOrder, **kwargs)


def hydrostaticStart(scheme: Scheme, positions: torch.Tensor, kinds: torch.Tensor,
                     spacing: float, surface: float, axis: int = -1):
    """The start of a fluid at rest under ``scheme.bodyForce`` with its free surface at
    ``surface`` along `axis`: the exact hydrostatic pressure of the scheme's equation of
    state at each fluid particle's depth (`Tait.hydrostaticPressure`; rho0 g depth to first
    order), 0 on the other rows, the densities of those pressures, masses rho dx^d on fluid
    rows and rho0 dx^d on the others.

    Args:
        scheme: the `Scheme` (rho0, c0, equation of state, body force).
        positions: ``[N, d]``.
        kinds: ``[N]`` int32.
        spacing: dx.
        surface: the height of the free surface along `axis`.
        axis: the vertical axis (default the last).

    Returns:
        ``(densities [N], masses [N], pressures [N])``.
    """
    g = scheme._gravity()
    eos = scheme.equationOfState
    fluid = kinds == int(ParticleType.Fluid)
    depth = surface - positions[:, axis]
    p = torch.where(fluid, eos.hydrostaticPressure(depth, scheme.rho0, scheme.c0, g),
                    torch.zeros_like(depth))
    rho = eos.density(p, scheme.rho0, scheme.c0)
    volume = float(spacing) ** positions.shape[1]
    m = torch.where(fluid, rho, torch.full_like(rho, scheme.rho0)) * volume
    return rho, m, p
