"""No silent wrong answers: each bad input of the solver layer gives a clear error or warning
that names the field (and the particle): walls of the wrong kind, an interaction that never
reads the walls, a time step above the stable limit, a non-finite field, a particle leaving
the domain or crossing a wall, per-particle inputs of the wrong shape, a user term of the
wrong shape."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore import DomainDescription, OperationDirection, ParticleState, ParticleType
from warpSPHCore.fluids import (
    FluidState,
    HealthMonitor,
    LoopOptions,
    Simulation,
    SimulationHealthError,
    SimulationHealthWarning,
    artificialViscosity,
    boxContainer,
    boxParticles,
    continuityDensityRate,
    extrapolateWalls,
    laminarViscosity,
    pressureAcceleration,
    taitDensity,
)
from warpSPHCore.fluids.scheme import (
    DensityDiffusion,
    Linear,
    ParticleSet,
    Scheme,
    Tait,
    Term,
    TransportVelocity,
    Walls,
    hydrostaticStart,
)
from warpSPHCore.neighborhood import radiusSearchCompactHashMap

F64 = torch.float64
QUIET = LoopOptions(progress=False)


def _tank(n=6, kinds=None):
    """A small tank (depth 1, width 1, walls on three sides) and its scheme."""
    dx = 1.0 / n
    x, k = boxParticles((0.0, 0.0), (1.0, 1.0), dx, 3, ("-x", "+x", "-y"))
    if kinds is not None:
        k = torch.where(k == int(ParticleType.Boundary), kinds, k)
    scheme = Scheme(rho0=1.0, c0=20.0, equationOfState=Tait(), density="continuity",
                    densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls(),
                    bodyForce=(0.0, -1.0), clampPressure=True)
    rho, m, _ = hydrostaticStart(scheme, x, k, dx, 1.0)
    dom = DomainDescription(torch.tensor([-4 * dx, -4 * dx], dtype=F64),
                            torch.tensor([1 + 4 * dx, 2.0], dtype=F64), [False, False])
    particles = ParticleSet(torch.full_like(rho, 3 * dx), m, k, dom, dx,
                            container=boxContainer((0, 0), (1, 1), ("-x", "+x", "-y")))
    return scheme, particles, FluidState(x, torch.zeros_like(x), rho)


def test_walls_of_kind_ghost_raise_naming_the_kinds():
    scheme, particles, _ = _tank(kinds=torch.tensor(int(ParticleType.Ghost), dtype=torch.int32))
    with pytest.raises(ValueError, match=r"no particle is of kind Boundary.*of kind Ghost"):
        scheme.rates(particles)


def test_boundary_particles_without_walls_raise():
    scheme, particles, _ = _tank()
    plain = Scheme(rho0=1.0, c0=20.0, density="continuity")
    with pytest.raises(ValueError, match=r"particles are of kind Boundary but the scheme "
                                         r"declares no walls"):
        plain.rates(particles)
    assert scheme.rates(particles) is not None


def test_unknown_kind_codes_raise():
    scheme, particles, _ = _tank(kinds=torch.tensor(7, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"codes \[7\] that are not ParticleType values"):
        scheme.rates(particles)


def test_walls_with_an_interaction_that_never_reads_them_raise():
    with pytest.raises(ValueError, match=r"FluidQueriesFluidReferences never reads a Boundary"):
        Scheme(rho0=1.0, c0=20.0, walls=Walls(),
               interaction=OperationDirection.FluidQueriesFluidReferences)
    with pytest.raises(ValueError, match=r"BoundaryQueriesFluidReferences never queries a "
                                         r"Fluid row"):
        Scheme(rho0=1.0, c0=20.0, interaction=OperationDirection.FluidToBoundary)


def test_transport_velocity_with_a_continuity_equation_raises():
    with pytest.raises(ValueError, match="density='summation' only"):
        Scheme(rho0=1.0, c0=20.0, density="continuity", transportVelocity=TransportVelocity())


def test_a_time_step_above_the_stable_limit_raises():
    scheme, particles, state = _tank()
    limit = scheme.timeStep(particles)
    assert limit == pytest.approx(0.25 * (1 / 6) / 20.0)
    with pytest.raises(ValueError, match=r"dt=.* is above this scheme's stable time step "
                                         r".*\(10 times it"):
        scheme.simulation(particles, state, 10 * limit, options=QUIET)
    # a tensor time step is checked by the health monitor, at once
    with pytest.raises(SimulationHealthError, match=r"\(timeStep\).*above 1.5 times the stable "
                                                   r"limit of this state, .*\(10 times"):
        scheme.simulation(particles, state, torch.tensor(10 * limit, dtype=F64),
                          options=QUIET)
    scheme.simulation(particles, state, limit, options=QUIET)  # at the limit: accepted


def test_a_nan_in_one_initial_velocity_names_the_field_and_the_particle():
    scheme, particles, state = _tank()
    v = state.velocities.clone()
    v[7, 1] = math.nan
    with pytest.raises(SimulationHealthError, match=r"velocities are not finite: particle 7 "
                                                    r"\(Fluid\) has velocities \[0, nan\]; 1 of"):
        scheme.simulation(particles, FluidState(state.positions, v, state.densities),
                          options=QUIET)


def test_a_nan_during_the_run_is_caught_at_the_next_rate_evaluation():
    """A user term that turns one particle's density rate into NaN after t = 2 dt: the run
    raises at the next rate evaluation, naming the densities and the particle."""
    scheme, particles, state = _tank()
    dt = scheme.timeStep(particles)

    def poison(context):
        t = float(context.state.time) if not isinstance(context.state.time, float) \
            else context.state.time
        out = torch.zeros_like(context.pressures)
        if t > 2.5 * dt:
            out[11] = math.nan
        return out

    bad = Scheme(**{**scheme.__dict__, "terms": (Term("densityRate", poison),)})
    sim = bad.simulation(particles, state, dt, options=QUIET)
    with pytest.raises(SimulationHealthError, match=r"densities are not finite: particle 11 "
                                                    r"\(Fluid\)"):
        sim.run(10)
    assert sim.step <= 5


def test_leaving_the_domain_and_crossing_a_wall_are_reported():
    scheme, particles, state = _tank()
    x = state.positions.clone()
    x[3, 0] = -0.02  # fluid particle 3 beyond the -x wall face
    x[5, 1] = 2.5  # fluid particle 5 above the domain
    with pytest.warns(SimulationHealthWarning) as record:
        sim = scheme.simulation(particles, FluidState(x, state.velocities, state.densities),
                                options=QUIET)
    text = " ".join(str(w.message) for w in record)
    assert "particle 3 (Fluid) at [-0.02" in text and "beyond a wall face" in text
    assert "particle 5 (Fluid)" in text and "outside the domain" in text
    checks = {e.check: e for e in sim.monitor.events}
    assert checks["wallCrossing"].particle == 3 and checks["leavingDomain"].particle == 5
    assert checks["wallCrossing"].distance == pytest.approx(0.02)
    assert checks["leavingDomain"].distance == pytest.approx(0.5)


def test_monitor_flags_cost_no_readback_until_one_is_set():
    scheme, particles, state = _tank()
    monitor = HealthMonitor(domain=particles.domain, kinds=particles.kinds,
                            container=particles.container)
    flags = monitor.flags(state)
    assert flags.shape == (6,) and not bool(flags.any())
    with pytest.raises(ValueError, match="every=0"):
        HealthMonitor(every=0)
    with pytest.raises(ValueError, match="wallCrossing='loud'"):
        HealthMonitor(wallCrossing="loud")


def test_per_particle_inputs_of_the_wrong_shape_raise():
    scheme, particles, state = _tank()
    x, rho = state.positions, state.densities
    N = x.shape[0]
    P = ParticleState(x, particles.supports, particles.masses, particles.kinds, rho)
    dom = particles.domain
    adj = radiusSearchCompactHashMap(P, dom)
    p = torch.ones(N, dtype=F64)
    with pytest.raises(ValueError, match=rf"pressureAcceleration: pressures has shape "
                                         rf"\({N}, 1\); accepted: \[{N}\]"):
        pressureAcceleration(P, p[:, None], dom, adj)
    with pytest.raises(ValueError, match=r"laminarViscosity: velocities has shape"):
        laminarViscosity(P, x[:, :1], dom, adj, 0.1)
    with pytest.raises(ValueError, match=r"continuityDensityRate: velocities has shape"):
        continuityDensityRate(P, x[:-1], dom, adj)
    with pytest.raises(ValueError, match=r"artificialViscosity: soundSpeeds has shape"):
        artificialViscosity(P, x, dom, adj, torch.ones(N, 1, dtype=F64), alpha=0.1,
                            smoothingLength=0.1)
    with pytest.raises(ValueError, match=r"extrapolateWalls: pressures has shape"):
        extrapolateWalls(P, p[:, None], x, dom, adj, gravity=(0.0, -1.0),
                         densityOfPressure=lambda q: taitDensity(q, 1.0, 20.0))
    with pytest.raises(ValueError, match=r"ParticleSet: masses has shape"):
        ParticleSet(particles.supports, particles.masses[:, None], particles.kinds, dom, 0.1)


def test_a_user_term_of_the_wrong_shape_raises_naming_it():
    scheme, particles, state = _tank()

    def wrong(context):
        return context.pressures[:, None]

    bad = Scheme(**{**scheme.__dict__, "terms": (Term("pressure", wrong),)})
    rates = bad.rates(particles)
    adj = radiusSearchCompactHashMap(ParticleState(state.positions, particles.supports,
                                                   particles.masses, particles.kinds),
                                     particles.domain)
    with pytest.raises(ValueError, match=r"the pressure term 'wrong' returned \(\d+, 1\); "
                                         r"accepted: \(\d+,\)"):
        rates(state, adj)
    with pytest.raises(ValueError, match="adds='force'"):
        Term("force", wrong)


def test_a_scheme_state_mismatch_raises():
    scheme, particles, state = _tank()
    with pytest.raises(ValueError, match="carries no densities but the scheme's density is "
                                         "'continuity'"):
        scheme.simulation(particles, FluidState(state.positions, state.velocities),
                          options=QUIET)
    summation = Scheme(rho0=1.0, c0=20.0, equationOfState=Linear(), density="summation",
                       walls=Walls())
    with pytest.raises(ValueError, match="carries densities"):
        summation.simulation(particles, state, options=QUIET)


def test_simulation_without_a_scheme_checks_the_start_too():
    """`Simulation` alone has the default monitor: non-finite fields and the domain."""
    scheme, particles, state = _tank()
    x = state.positions.clone()
    x[2, 0] = math.inf
    with pytest.raises(SimulationHealthError, match=r"positions are not finite: particle 2"):
        Simulation(FluidState(x, state.velocities, state.densities), scheme.rates(particles),
                   particles.domain, particles.supports, 1e-3, options=QUIET)
