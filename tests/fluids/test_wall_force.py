"""Forces of the fluid on walls and bodies (`Scheme.wallForce`, `fluids.forces`).

Checked against two identities and one analytic solution: in a tank the force on every wall
equals sum_i m_i (g - a_i) over the fluid (the fluid-fluid pair forces cancel), to rounding,
for a continuity-equation scheme with the Morris and the Monaghan artificial viscosity and a
summation-density scheme with the transport velocity; at rest the bottom carries the weight
rho g H W and a side wall rho g H^2 / 2; in the start-up of a Poiseuille flow the force on
each plate follows the wall shear stress mu du/dy of the analytic series, top and bottom
alike. The force is differentiable (reverse and forward mode against central differences;
the time-averaged drag of a cylinder through a rollout with respect to its radius and the
body force), makes no readback once the list's body edges are selected, and bad masks raise
naming the particle."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore import DomainDescription
from warpSPHCore.fluids import (
    ArtificialViscosity,
    DensityDiffusion,
    FluidState,
    LoopOptions,
    ParticleSet,
    Scheme,
    Tait,
    TransportVelocity,
    Walls,
    boxContainer,
    boxParticles,
    hydrostaticStart,
    referenceSoundSpeed,
)
from warpSPHCore.fluids.cases.poiseuille import (
    PoiseuilleConfig,
    poiseuilleParticles,
    poiseuilleScheme,
    setup,
)
from warpSPHCore.util import hostSyncCensus

F64 = torch.float64
DEPTH, WIDTH, G = 0.5, 1.0, 9.81
SIDES = ("-x", "+x", "-y")
MORRIS = ArtificialViscosity(0.02)


def _tank(dx=0.05, av=MORRIS):
    x, kinds = boxParticles((0.0, 0.0), (WIDTH, DEPTH), dx, 3, SIDES)
    scheme = Scheme(rho0=1000.0, c0=referenceSoundSpeed(0.0, G, DEPTH), equationOfState=Tait(),
                    density="continuity", artificialViscosity=av,
                    densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls(noSlip=True),
                    bodyForce=(0.0, -G), clampPressure=True)
    rho, m, _ = hydrostaticStart(scheme, x, kinds, dx, surface=DEPTH)
    pad = 4 * dx
    domain = DomainDescription(torch.tensor([-pad, -pad], dtype=F64),
                               torch.tensor([WIDTH + pad, 2 * DEPTH], dtype=F64), [False, False])
    particles = ParticleSet(torch.full_like(rho, 3 * dx), m, kinds, domain, dx,
                            container=boxContainer((0.0, 0.0), (WIDTH, DEPTH), SIDES))
    return scheme, particles, FluidState(x, torch.zeros_like(x), rho)


def _identity(scheme, particles, state, gravity):
    """(force on every wall, sum over the fluid of m_i (g - a_i))."""
    adj = scheme.neighbours(particles)(state)
    a = scheme.rates(particles)(state, adj).accelerations
    fluid = particles.kinds == 0
    m = particles.masses[:, None]
    expected = torch.where(fluid[:, None], m * (gravity - a), 0.0).sum(0)
    return scheme.wallForce(particles)(state, adj), expected


@pytest.mark.parametrize("av", [MORRIS, ArtificialViscosity(0.05, "monaghan")],
                         ids=["morris", "monaghan"])
def test_tank_wall_force_is_the_momentum_balance(av):
    scheme, particles, state = _tank(av=av)
    # a disturbed state, so that the fluid's own accelerations are not zero
    gen = torch.Generator().manual_seed(3)
    v = 0.05 * torch.randn(state.velocities.shape, generator=gen, dtype=F64)
    state = FluidState(state.positions, torch.where(particles.kinds[:, None] == 0, v, 0.0),
                       state.densities)
    force, expected = _identity(scheme, particles, state, torch.tensor([0.0, -G], dtype=F64))
    assert force.abs().max() > 1000.0
    torch.testing.assert_close(force, expected, rtol=1e-12, atol=1e-9)


def test_poiseuille_wall_force_is_the_momentum_balance():
    """Summation density and the transport velocity (the stress term in the momentum)."""
    case = setup(PoiseuilleConfig(ny=12, nx=8, t=0.0, pb=1.0))
    scheme, particles = poiseuilleScheme(case), poiseuilleParticles(case)
    gen = torch.Generator().manual_seed(4)
    x = case.positions
    v = torch.where(case.kinds[:, None] == 0, torch.rand(x.shape, generator=gen, dtype=F64),
                    0.0)
    force, expected = _identity(scheme, particles, FluidState(x, v),
                                torch.tensor([case.force, 0.0], dtype=F64))
    assert force.abs().max() > 0.1
    torch.testing.assert_close(force, expected, rtol=1e-10, atol=1e-12)


def test_tank_at_rest_carries_the_hydrostatic_loads():
    scheme, particles, state = _tank(dx=0.025)
    x, kinds = state.positions, particles.kinds
    adj = scheme.neighbours(particles)(state)
    bottom = (kinds == 1) & (x[:, 1] < 0)
    left = (kinds == 1) & (x[:, 0] < 0) & (x[:, 1] >= 0)
    right = (kinds == 1) & (x[:, 0] > WIDTH) & (x[:, 1] >= 0)
    fb = scheme.wallForce(particles, bottom)(state, adj)
    fl = scheme.wallForce(particles, left)(state, adj)
    fr = scheme.wallForce(particles, right)(state, adj)
    weight = 1000.0 * G * DEPTH * WIDTH
    side = 0.5 * 1000.0 * G * DEPTH**2
    assert abs(float(fb[1]) + weight) <= 0.01 * weight, fb
    assert abs(float(fb[0])) <= 1e-9 * weight
    # the side walls: rho g H^2 / 2 outward, to the discretisation near the free surface
    assert abs(float(-fl[0]) - side) <= 0.05 * side, fl
    torch.testing.assert_close(fr[0], -fl[0], rtol=1e-10, atol=1e-9)


def test_poiseuille_plates_follow_the_wall_shear_stress():
    """Start-up of the body-force-driven channel: the drag on each plate against
    mu du/dy(0, t) times the plate's length from the analytic series."""
    case = setup(PoiseuilleConfig(ny=20, nx=8, t=0.05))
    scheme, particles = poiseuilleScheme(case), poiseuilleParticles(case)
    x = case.positions
    bottom = (case.kinds == 1) & (x[:, 1] < 0)
    top = (case.kinds == 1) & (x[:, 1] > 1.0)
    sim = scheme.simulation(particles, FluidState(x, torch.zeros_like(x)), dt=case.dt,
                            options=LoopOptions(progress=False))
    F, nu, mu = case.force, case.nu, case.rho0 * case.nu
    length = case.config.nx * case.dx
    k = 2.0 * torch.arange(4000, dtype=F64) + 1.0
    for t in (0.02, 0.05):
        sim.run(until=t)
        adj = scheme.neighbours(particles)(sim.state)
        fb = scheme.wallForce(particles, bottom)(sim.state, adj)
        ft = scheme.wallForce(particles, top)(sim.state, adj)
        decay = torch.exp(-(k**2) * math.pi**2 * nu * t)
        dudy = F / (2 * nu) - float((4 * F / (nu * math.pi**2 * k**2) * decay).sum())
        shear = mu * dudy * length
        assert abs(float(fb[0]) - shear) <= 0.03 * shear, (t, float(fb[0]), shear)
        torch.testing.assert_close(ft[0], fb[0], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(ft[1], -fb[1], rtol=1e-9, atol=1e-12)


def test_wall_force_derivatives_and_no_readback():
    """d F / d u (reverse mode, and forward mode through dual velocities) against central
    differences along a random direction; with the list's body edges selected, an
    evaluation and its backward make no readback."""
    case = setup(PoiseuilleConfig(ny=10, nx=8, t=0.0))
    scheme, particles = poiseuilleScheme(case), poiseuilleParticles(case)
    x = case.positions
    fluid = case.kinds[:, None] == 0
    gen = torch.Generator().manual_seed(8)
    v0 = torch.where(fluid, torch.rand(x.shape, generator=gen, dtype=F64), 0.0)
    dv = torch.where(fluid, torch.randn(x.shape, generator=gen, dtype=F64), 0.0)
    w = torch.tensor([1.0, 0.3], dtype=F64)
    adj = scheme.neighbours(particles)(FluidState(x, v0))
    force = scheme.wallForce(particles)

    def f(v):
        return (force(FluidState(x, v), adj) * w).sum()

    v = v0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(v), v)
    eps = 1e-6
    with torch.no_grad():
        fd = (f(v0 + eps * dv) - f(v0 - eps * dv)) / (2 * eps)
    assert abs(float(fd)) > 1e-3
    assert abs(float((grad * dv).sum()) - float(fd)) <= 1e-6 * abs(float(fd))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(v0, dv)
        tangent = torch.autograd.forward_ad.unpack_dual(f(dual)).tangent
    assert abs(float(tangent) - float(fd)) <= 1e-6 * abs(float(fd))
    with hostSyncCensus.census() as c:
        out = f(v)
        torch.autograd.grad(out, v)
    assert c.total == 0, c.hits


def test_bad_body_masks_raise():
    scheme, particles, state = _tank()
    n = particles.kinds.shape[0]
    fluidOne = torch.zeros(n, dtype=torch.bool)
    fluidOne[int(torch.nonzero(particles.kinds == 0)[0])] = True
    k = int(torch.nonzero(fluidOne)[0])
    with pytest.raises(ValueError, match=rf"body marks particle {k} of kind Fluid"):
        scheme.wallForce(particles, fluidOne)
    with pytest.raises(ValueError, match="accepted: a bool"):
        scheme.wallForce(particles, torch.zeros(n, dtype=torch.int32))
    with pytest.raises(ValueError, match="marks no particle"):
        scheme.wallForce(particles, torch.zeros(n, dtype=torch.bool))


def test_no_wall_raises():
    """A periodic box without walls has no wall to push."""
    scheme = Scheme(rho0=1.0, c0=10.0, equationOfState=Tait(), density="summation",
                    viscosity=0.1, transportVelocity=TransportVelocity())
    n = 16
    g = (torch.arange(4, dtype=F64) + 0.5) * 0.25
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    box = DomainDescription(torch.zeros(2, dtype=F64), torch.ones(2, dtype=F64), [True, True])
    particles = ParticleSet(torch.full((n,), 0.6, dtype=F64), torch.full((n,), 1 / n, dtype=F64),
                            torch.zeros(n, dtype=torch.int32), box, 0.25)
    with pytest.raises(ValueError, match="hold no wall particle"):
        scheme.wallForce(particles)
    assert x.shape == (n, 2)


def test_mean_drag_gradients_through_a_rollout():
    """The time-averaged drag of a cylinder in a periodic array over a 10-step rollout,
    differentiated with respect to the cylinder's radius (its wall particles scaled about
    the centre) and the body force, against central differences (float64): what an
    optimisation of a body's shape or of the driving needs."""
    from warpSPHCore.fluids import rollout

    L, R0, n, rho0, speed = 0.1, 0.025, 16, 1000.0, 1e-4
    dx = L / n
    g = (torch.arange(n, dtype=F64) + 0.5) * dx
    lattice = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    x0 = lattice[(lattice - L / 2).norm(dim=1) > R0 - 3 * dx]
    inside = (x0 - L / 2).norm(dim=1) < R0
    kinds = torch.where(inside, 1, 0).to(torch.int32)
    N = x0.shape[0]
    box = DomainDescription(torch.zeros(2, dtype=F64), torch.full((2,), L, dtype=F64),
                            [True, True])
    particles = ParticleSet(torch.full((N,), 3 * dx, dtype=F64),
                            torch.full((N,), rho0 * dx * dx, dtype=F64), kinds, box, dx)
    centre = torch.full((2,), L / 2, dtype=F64)
    v0 = torch.where(inside[:, None], 0.0, torch.tensor([speed, 0.0], dtype=F64))

    def meanDrag(radius, force):
        scheme = Scheme(rho0=rho0, c0=referenceSoundSpeed(speed), equationOfState=Tait(),
                        density="summation", viscosity=1e-6, walls=Walls(noSlip=True),
                        transportVelocity=TransportVelocity(),
                        bodyForce=torch.stack([force, torch.zeros_like(force)]))
        x = torch.where(inside[:, None], centre + (x0 - centre) * (radius / R0), x0)
        out = rollout(FluidState(x, v0.clone()), scheme.timeStep(particles, maxSpeed=speed),
                      10, scheme.rates(particles), scheme.neighbours(particles),
                      stepper=scheme.stepper, trajectoryEvery=2)
        drag, tr = scheme.wallForce(particles), out.trajectory
        values = []
        for k in range(len(tr.steps)):
            state = FluidState(tr.positions[k], tr.velocities[k])
            adj = scheme.neighbours(particles)(FluidState(state.positions.detach(),
                                                          state.velocities.detach()))
            values.append(drag(state, adj)[0])
        return torch.stack(values).mean()

    R = torch.tensor(R0, dtype=F64, requires_grad=True)
    F = torch.tensor(1.5e-7, dtype=F64, requires_grad=True)
    D = meanDrag(R, F)
    assert float(D.detach()) > 0.0
    gR, gF = torch.autograd.grad(D, (R, F))
    with torch.no_grad():
        fdR = (meanDrag(R + 1e-7, F) - meanDrag(R - 1e-7, F)) / 2e-7
        fdF = (meanDrag(R, F + 1e-12) - meanDrag(R, F - 1e-12)) / 2e-12
    assert abs(float(gR - fdR)) <= 1e-4 * abs(float(fdR)), (float(gR), float(fdR))
    assert abs(float(gF - fdF)) <= 1e-4 * abs(float(fdF)), (float(gF), float(fdF))


def test_kinds_changed_after_building_raise():
    """The rates and the wall force take their fluid and wall masks from the kinds when they
    are built: changing the kinds in place afterwards raises instead of mixing both."""
    scheme, particles, state = _tank()
    rates, force = scheme.rates(particles), scheme.wallForce(particles)
    adj = scheme.neighbours(particles)(state)
    rates(state, adj)
    particles.kinds[0] = particles.kinds[0]  # an in-place write, even of the same value
    for fn in (rates, force):
        with pytest.raises(ValueError, match="kinds was changed in place"):
            fn(state, adj)
    scheme.rates(particles)(state, adj)  # built again: fine


def test_body_particles_carve_a_cylinder():
    """`bodyParticles`: lattice points inside the surface within `layers` spacings become the
    body's wall particles, deeper ones are removed, the others keep their kind."""
    from warpSPHCore.fluids import bodyParticles

    n, dx, R = 20, 0.05, 0.3
    g = (torch.arange(n, dtype=F64) + 0.5) * dx
    lattice = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    kinds = torch.zeros(n * n, dtype=torch.int32)
    kinds[:n] = 1  # a row of existing walls, kept as they are
    centre = torch.tensor([0.5, 0.5], dtype=F64)
    x, k, body = bodyParticles(lattice, kinds, lambda p: (p - centre).norm(dim=1) - R, dx, 2)
    r = (lattice - centre).norm(dim=1)
    keep = r > R - 2 * dx
    assert torch.equal(x, lattice[keep])
    rk = r[keep]
    assert torch.equal(body, (rk < R) & (kinds[keep] == 0))
    assert torch.equal(k, torch.where(body, 1, kinds[keep]).to(torch.int32))
    assert int(body.sum()) > 0 and int((~keep).sum()) > 0
    with pytest.raises(ValueError, match="layers"):
        bodyParticles(lattice, kinds, lambda p: p[:, 0], dx, 0)
    with pytest.raises(ValueError, match=r"signedDistance returned \(3,\)"):
        bodyParticles(lattice, kinds, lambda p: p[:3, 0], dx, 1)
