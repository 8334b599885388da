"""Weakly compressible SPH toolkit, built on the public operators and the neighbour search:
a declarative scheme, physics terms, the fused momentum operator, walls, time integration,
the simulation loop, health checks, differentiable rollouts and the validation cases
(docs/fluids.md; a case of your own: docs/own-case.md).

Everything here is torch code on tensors (or the library's operators): differentiable in
reverse and forward mode, float32/float64, 2D/3D, CPU and CUDA, and free of host syncs per
step beyond the neighbour list's one readback, which also carries the health checks.

One rate signature serves every piece: ``rates(state, neighbours) -> Rates``; every stepper
is ``stepper(state, dt, rates, neighbours, carried=None) -> (state, carried)``.

* `scheme`: `Scheme` (the physics of a case: equation of state, density treatment,
  viscosity, density diffusion, walls, transport velocity or shifting, body force, user
  `Term`s) builds the rates, the stepper, the time step and the health checks on a
  `ParticleSet`; `hydrostaticStart`.
* `eos`: equations of state (Tait/Cole, linear), their inverses and sound speeds;
  `referenceSoundSpeed`, the one sound-speed rule.
* `terms`: the symmetric pressure acceleration, Morris laminar viscosity, delta-SPH density
  diffusion, the continuity density rate, body forces, number-density volumes and the
  transport-velocity background-pressure acceleration, each one or two operator calls.
* `momentum`: pressure, viscosity and the transport-velocity stress of Adami et al. (2013) in
  one traversal (the fused Momentum operator).
* `stabilization`: Monaghan artificial viscosity, the delta-SPH diffusion of Antuono et al.
  (2010) with renormalized density gradients, particle shifting (Lind et al. 2012).
* `walls`: dummy-particle walls of Adami et al. (2012) over the wall-fluid edges, and
  `boxParticles` (wall layers of a box), `bodyParticles` (a solid body carved out by its
  signed distance).
* `forces`: the force of the fluid on walls and bodies (`Scheme.wallForce`: drag and lift).
* `openboundary`: inflow and outflow through buffer zones with fixed-capacity arrays
  (`Inlet`, `Outlet`, `OpenBoundary`, `openChannel`, `parabolicProfile`): the kinds of the
  particles that are not walls follow their positions.
* `relaxation`: `relaxParticles`, a homogeneous lattice-free start (particle packing).
* `timestep`: the CFL, viscous and body-force limits of the time step.
* `integrators`: symplectic Euler, kick-drift-kick, predictor-corrector, `defaultStepper`;
  `transport`: kick-drift-kick with a transport velocity.
* `neighbours`: `VerletNeighbours`, the Verlet-skin policy of `Simulation` and `rollout`.
* `health`: `HealthMonitor` (non-finite fields, particles leaving the domain or crossing a
  wall, a time step above the stable limit).
* `rollout`: many steps with the lists of `Simulation`, checkpointing, trajectories.
* `loop`: `Simulation` / `simulate`: frames, tqdm progress, restart files that continue
  bitwise.
* `fields`: `randomFourierVelocity`, random periodic divergence-free initial flows (the same
  seed gives the same flow at every resolution).
* `scenes`: B independent scenes in one particle set (`batchScenes`, `splitScenes`,
  per-scene sums, kinetic energies and time-step limits).
* `cases`: the validation cases run by ``warpsph run CASE`` (`cases.CASES`).
"""

from .eos import (
    linearDensity,
    linearPressure,
    linearSoundSpeed,
    referenceSoundSpeed,
    taitDensity,
    taitPressure,
    taitSoundSpeed,
)
from .fields import fourierWaveVectors, randomFourierVelocity
from .health import (
    HealthEvent,
    HealthMonitor,
    SimulationHealthError,
    SimulationHealthWarning,
    boxContainer,
)
from .integrators import (
    FluidState,
    Rates,
    advance,
    defaultStepper,
    evaluateRates,
    kickDriftKick,
    predictorCorrector,
    symplecticEuler,
)
from .loop import (
    LoopOptions,
    Restart,
    Simulation,
    loadRestart,
    saveRestart,
    simulate,
)
from .momentum import (
    momentumAcceleration,
    momentumField,
    momentumRows,
    transportVelocityAccelerations,
)
from .neighbours import VerletNeighbours, wrapPeriodic
from .openboundary import Inlet, OpenBoundary, Outlet, openChannel, parabolicProfile
from .relaxation import relaxParticles
from .rollout import RolloutResult, Trajectory, rollout
from .scenes import (
    batchScenes,
    sceneIndex,
    sceneKineticEnergy,
    sceneMax,
    sceneSum,
    sceneTimeStepLimits,
    splitScenes,
)
from .scheme import (
    ArtificialViscosity,
    DensityDiffusion,
    Linear,
    ParticleSet,
    Scheme,
    Shifting,
    Tait,
    Term,
    TermContext,
    TransportVelocity,
    Walls,
    hydrostaticStart,
)
from .stabilization import antuonoDensityDiffusion, artificialViscosity, particleShifting
from .terms import (
    backgroundPressureAcceleration,
    bodyAcceleration,
    continuityDensityRate,
    densityDiffusion,
    laminarViscosity,
    numberDensityVolumes,
    pressureAcceleration,
)
from .timestep import stableTimeStep
from .transport import TransportRates, TransportState, transportKickDriftKick
from .walls import (
    WallState,
    bodyParticles,
    boxParticles,
    extrapolateWalls,
    wallPressures,
    wallVelocities,
)

__all__ = [
    "randomFourierVelocity",
    "fourierWaveVectors",
    "batchScenes",
    "splitScenes",
    "sceneSum",
    "sceneMax",
    "sceneKineticEnergy",
    "sceneTimeStepLimits",
    "sceneIndex",
    "Scheme",
    "ParticleSet",
    "Tait",
    "Linear",
    "Walls",
    "ArtificialViscosity",
    "DensityDiffusion",
    "TransportVelocity",
    "Shifting",
    "Term",
    "TermContext",
    "hydrostaticStart",
    "taitPressure",
    "taitDensity",
    "taitSoundSpeed",
    "linearPressure",
    "linearDensity",
    "linearSoundSpeed",
    "referenceSoundSpeed",
    "pressureAcceleration",
    "laminarViscosity",
    "densityDiffusion",
    "continuityDensityRate",
    "bodyAcceleration",
    "numberDensityVolumes",
    "backgroundPressureAcceleration",
    "momentumAcceleration",
    "momentumField",
    "momentumRows",
    "transportVelocityAccelerations",
    "artificialViscosity",
    "antuonoDensityDiffusion",
    "particleShifting",
    "WallState",
    "wallPressures",
    "wallVelocities",
    "extrapolateWalls",
    "bodyParticles",
    "boxParticles",
    "relaxParticles",
    "stableTimeStep",
    "FluidState",
    "Rates",
    "symplecticEuler",
    "kickDriftKick",
    "predictorCorrector",
    "defaultStepper",
    "advance",
    "evaluateRates",
    "TransportState",
    "TransportRates",
    "transportKickDriftKick",
    "rollout",
    "Inlet",
    "Outlet",
    "OpenBoundary",
    "openChannel",
    "parabolicProfile",
    "RolloutResult",
    "Trajectory",
    "HealthMonitor",
    "HealthEvent",
    "SimulationHealthError",
    "SimulationHealthWarning",
    "boxContainer",
    "LoopOptions",
    "VerletNeighbours",
    "Simulation",
    "simulate",
    "wrapPeriodic",
    "saveRestart",
    "loadRestart",
    "Restart",
]
