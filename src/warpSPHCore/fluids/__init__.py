"""Weakly compressible SPH toolkit, built on the public operators and the
neighbour search: physics terms, the fused momentum operator, walls, time integration, the
simulation loop, differentiable rollouts and the validation cases (docs/fluids.md).

Everything here is torch code on tensors (or the library's operators): differentiable in
reverse and forward mode, float32/float64, 2D/3D, CPU and CUDA, and free of host syncs
(time-step limits are returned as 0-dim tensors, never read back).

* `eos`: equations of state (Tait/Cole, linear), their inverses and sound speeds.
* `terms`: the symmetric pressure acceleration, Morris laminar viscosity, delta-SPH density
  diffusion (Molteni & Colagrossi), the continuity density rate, body forces, number-density
  volumes and the transport-velocity background-pressure acceleration (Adami et al. 2013),
  each one or two operator calls.
* `momentum`: `momentumAcceleration`, pressure, viscosity and the transport-velocity stress
  of Adami et al. (2013) in one traversal (the fused Momentum operator), and
  `transportVelocityAccelerations`, which adds the background-pressure acceleration from the
  same traversal.
* `stabilization`: Monaghan artificial viscosity, the delta-SPH diffusion of Antuono et al.
  (2010) with renormalized density gradients, particle shifting (Lind et al. 2012).
* `walls`: dummy-particle walls of Adami et al. (2012) (pressure, density and no-slip or
  free-slip velocity extrapolation, moving walls) and `boxParticles` (wall layers of a box).
* `relaxation`: `relaxParticles`, a homogeneous lattice-free start (particle packing).
* `timestep`: the CFL, viscous and body-force limits of the time step.
* `integrators`: semi-implicit (symplectic) Euler, kick-drift-kick (velocity Verlet) and a
  predictor-corrector step for the (positions, velocities, densities) state.
* `rollout`: many kick-drift-kick steps, with optional gradient checkpointing per segment.
* `loop`: `Simulation` / `simulate`, the simulation loop: a Verlet-skin neighbour list
  rebuilt when a particle moved more than half the skin, frames through `writeParticles`,
  tqdm progress, restart files that continue bitwise.
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
from .momentum import momentumAcceleration, momentumField, transportVelocityAccelerations
from .neighbours import VerletNeighbours, wrapPeriodic
from .relaxation import relaxParticles
from .rollout import RolloutResult, Trajectory, rollout
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
    boxParticles,
    extrapolateWalls,
    wallPressures,
    wallVelocities,
)

__all__ = [
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
    "transportVelocityAccelerations",
    "artificialViscosity",
    "antuonoDensityDiffusion",
    "particleShifting",
    "WallState",
    "wallPressures",
    "wallVelocities",
    "extrapolateWalls",
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
