"""Open boundaries (`fluids.openboundary`): zones and kinds that follow the positions, the
inflow lanes' refill from the pool (positions, velocities, counts), the starved-inflow
guard, a tiny open channel run (no particle lost or stuck, the mass flux of the inlet
arriving at the outlet), the host-sync census of an open step against a closed one, and
derivatives through a rollout across the open boundary against central differences."""

from __future__ import annotations

import pytest
import torch

from warpSPHCore import DomainDescription
from warpSPHCore.enumTypes import ParticleType
from warpSPHCore.fluids import (
    DensityDiffusion,
    FluidState,
    HealthMonitor,
    Linear,
    ParticleSet,
    Scheme,
    SimulationHealthError,
    Walls,
    rollout,
)
from warpSPHCore.fluids.cases.channel import ChannelConfig, run
from warpSPHCore.fluids.openboundary import Inlet, Outlet, openChannel
from warpSPHCore.util import hostSyncCensus

F64 = torch.float64
DX = 0.25


def _channel(speed=1.0, spareLayers=4, length=1.0):
    inlet = Inlet(0.0, speed, layers=3)
    x, kinds, ob, (lo, hi) = openChannel([0.0, 0.0], [length, 1.0], DX, inlet,
                                         Outlet(length, 0.0, 3), wallLayers=2,
                                         reservoirLayers=4, spareLayers=spareLayers)
    return x, kinds, ob, (lo, hi)


def _set(x, kinds, ob, lo, hi, dx, support=2.0):
    """The `ParticleSet` of an `openChannel` (masses rho0 dx^d with rho0 = 1)."""
    n, d, dtype = x.shape[0], x.shape[1], x.dtype
    box = DomainDescription(torch.tensor(lo, dtype=dtype), torch.tensor(hi, dtype=dtype),
                            [False] * d)
    return ParticleSet(torch.full((n,), support * dx, dtype=dtype),
                       torch.full((n,), dx ** d, dtype=dtype), kinds, box, dx, openBoundary=ob)


def test_zones_and_kinds_follow_the_positions():
    x, kinds, ob, _ = _channel()
    lanes = 4
    z = ob.zones(x, kinds)
    assert int(z.reservoir.sum()) == 4 * lanes
    assert int(z.inlet.sum()) == 3 * lanes
    assert int(z.fluid.sum()) == 4 * lanes
    assert int(z.outlet.sum()) == 3 * lanes
    assert int(z.removed.sum()) == 4 * lanes  # the spares
    k = ob.kinds(x, kinds)
    walls = kinds == int(ParticleType.Boundary)
    assert torch.equal(k[walls], kinds[walls])
    assert (k[z.inlet | z.outlet] == int(ParticleType.Boundary)).all()
    assert (k[z.reservoir | z.removed] == int(ParticleType.Ghost)).all()
    assert (k[z.fluid] == int(ParticleType.Fluid)).all()
    # a particle moved across x_out turns from fluid into outlet buffer
    i = int(torch.nonzero(z.fluid)[0])
    y = x.clone()
    y[i, 0] = ob.outlet.position + 0.1 * DX
    assert int(ob.kinds(y, kinds)[i]) == int(ParticleType.Boundary)
    assert bool(ob.zones(y, kinds).outlet[i])


def test_each_lane_that_moved_a_spacing_takes_one_pool_particle_behind_it():
    speed = torch.tensor(0.7, dtype=F64)
    x, kinds, ob, _ = _channel(speed)
    z = ob.zones(x, kinds)
    feed = z.reservoir | z.inlet
    moved = x.clone()
    moved[feed, 0] += 0.6 * DX  # every lane's rearmost particle is now x_res + 1.1 dx
    state = FluidState(moved, torch.zeros_like(x), torch.ones(x.shape[0], dtype=F64), 0.0)
    new = ob.place(state, kinds)
    after = ob.zones(new.positions, kinds)
    taken = z.removed & ~after.removed
    assert int(taken.sum()) == 4  # one per lane, the lowest pool indices
    first = torch.nonzero(z.removed).flatten()[:4]
    assert torch.equal(torch.nonzero(taken).flatten(), first)
    got = new.positions[taken]
    torch.testing.assert_close(got[:, 0], torch.full((4,), ob.reservoirStart + 0.1 * DX,
                                                     dtype=F64))
    torch.testing.assert_close(torch.sort(got[:, 1]).values,
                               (torch.arange(4, dtype=F64) + 0.5) * DX)
    feedNow = after.reservoir | after.inlet
    torch.testing.assert_close(new.velocities[feedNow, 0],
                               torch.full((int(feedNow.sum()),), 0.7, dtype=F64))
    assert float(new.velocities[feedNow, 1].abs().max()) == 0.0
    # the other rows keep their positions; pool rows are at rest
    torch.testing.assert_close(new.positions[~taken], moved[~taken])
    assert float(new.velocities[after.removed].abs().max()) == 0.0


def test_a_starved_inflow_raises_naming_the_lanes():
    x, kinds, ob, _ = _channel(spareLayers=0)
    state = FluidState(x, torch.zeros_like(x), torch.ones(x.shape[0], dtype=F64), 0.0)
    monitor = HealthMonitor(kinds=kinds, openBoundary=ob)
    monitor.check(state)  # a full reservoir is fine
    for _ in range(6):  # move the inflow on by 6 x 0.9 dx with no pool to refill it
        z = ob.zones(state.positions, kinds)
        y = state.positions.clone()
        y[z.reservoir | z.inlet, 0] += 0.9 * DX
        state = ob.place(FluidState(y, state.velocities, state.densities, 0.0), kinds)
    assert bool(ob.starved(state.positions, kinds))
    with pytest.raises(SimulationHealthError, match=r"inflow lanes \[0, 1, 2, 3\] ran out"):
        monitor.check(state)


def test_bad_open_boundaries_raise():
    with pytest.raises(ValueError, match="not downstream"):
        _, _, ob, _ = _channel()
        type(ob)(Inlet(1.0, 1.0), Outlet(0.5), DX, [0.0], [4])
    with pytest.raises(TypeError, match="velocity is a str"):
        Inlet(0.0, "fast")
    x, kinds, ob, (lo, hi) = _channel()
    particles = _set(x, kinds, ob, lo, hi, DX)
    from warpSPHCore.enumTypes import OperationDirection
    scheme = Scheme(rho0=1.0, c0=10.0, walls=Walls(),
                    interaction=OperationDirection.Unmasked)
    with pytest.raises(ValueError, match="reads Ghost references"):
        scheme.rates(particles)
    with pytest.raises(ValueError, match="reservoir .* is shallower"):
        Scheme(rho0=1.0, c0=10.0, walls=Walls()).neighbours(particles, skin=20.0)


def _particles(speed=1.0, length=1.0, advance=0.0):
    x, kinds, ob, (lo, hi) = _channel(speed, length=length)
    z = ob.zones(x, kinds)
    x[z.reservoir | z.inlet | z.fluid, 0] += advance  # lanes about to take pool particles
    n = x.shape[0]
    particles = _set(x, kinds, ob, lo, hi, DX)
    v = torch.zeros_like(x)
    v[:, 0] = torch.where(kinds == 0, 1.0, 0.0)
    return particles, FluidState(x, v, torch.ones(n, dtype=F64))


def _scheme():
    return Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), viscosity=0.1,
                  densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls())


def test_tiny_open_channel(tmp_path):
    """A tiny channel through its case runner: nothing lost or stuck, the outflow carries the
    inflow's mass flux, the pressure falls along the channel."""
    r = run(ChannelConfig(ny=6, length=1.0, flowThroughs=0.5, startup=0.2, re=5.0),
            tmp_path, quiet=True)
    assert r["lostParticles"] == 0 and r["stuckParticles"] == 0
    assert r["massBalanceRelErr"] < 0.1, r["massBalanceRelErr"]  # one-column slabs
    assert abs(r["massFluxIn"] - r["massFluxExact"]) < 0.05 * r["massFluxExact"]
    assert r["pressureGradient"] < 0.0
    assert r["massInflow"] > 0 and r["massOutflow"] > 0
    assert r["profileL2RelErr"] < 0.1, r["profileL2RelErr"]
    assert (tmp_path / "results.json").exists() and (tmp_path / "channel.png").exists()


def test_host_sync_census_of_an_open_step_equals_a_closed_step():
    scheme = _scheme()
    particles, state = _particles()
    closed = ParticleSet(particles.supports, particles.masses, particles.kinds,
                         particles.domain, DX)

    def syncs(p):
        sim = scheme.simulation(p, state, maxSpeed=1.5)
        sim.run(2)
        builds = sim.neighbours.builds
        with hostSyncCensus.census() as c:
            sim.run(1)
        assert sim.neighbours.builds == builds
        return dict(c.hits)

    opened, shut = syncs(particles), syncs(closed)
    assert opened == shut and sum(shut.values()) > 0


def test_derivatives_through_a_rollout_across_the_open_boundary():
    """The mean axial force on the channel walls after a 12-step rollout in which lanes take
    pool particles, differentiated with respect to the inflow speed: reverse and forward mode
    against central differences (float64)."""
    scheme = _scheme()

    def force(speed):
        particles, state = _particles(speed, advance=0.45 * DX)
        neighbours = scheme.neighbours(particles)
        dt = scheme.timeStep(particles, 1.5)
        out = rollout(state, dt, 12, scheme.rates(particles), neighbours,
                      stepper=scheme.stepper)
        ob, kinds = particles.openBoundary, particles.kinds
        before, after = (ob.zones(s.positions, kinds) for s in (state, out.state))
        assert int(after.removed.sum()) < int(before.removed.sum())  # lanes took particles
        assert int((before.inlet & after.fluid).sum()) > 0  # and particles entered the fluid
        adj = neighbours(FluidState(out.state.positions.detach(),
                                    out.state.velocities.detach()))
        return scheme.wallForce(particles)(out.state, adj)[0]

    U = torch.tensor(1.0, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(force(U), U)
    with torch.no_grad():
        fd = (force(U + 1e-6) - force(U - 1e-6)) / 2e-6
    assert abs(float(fd)) > 1e-4
    assert abs(float(g) - float(fd)) <= 1e-5 * abs(float(fd)), (float(g), float(fd))
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(U.detach(), torch.ones((), dtype=F64))
        tangent = torch.autograd.forward_ad.unpack_dual(force(dual)).tangent
    assert abs(float(tangent) - float(fd)) <= 1e-5 * abs(float(fd))


@pytest.mark.parametrize("variant", ["summation-transport-2d", "continuity-3d", "float32-2d"])
def test_open_channel_variants_run_and_refill(variant):
    """The same machinery in 3D (a square duct), with summation density and the transport
    velocity, and in float32: the inflow refills from the pool, nothing leaves the domain,
    the fields stay finite."""
    from warpSPHCore.fluids import TransportVelocity

    dtype = torch.float32 if variant.startswith("float32") else F64
    d = 3 if variant.endswith("3d") else 2
    dx = 0.25
    x, kinds, ob, (lo, hi) = openChannel([0.0] * d, [1.0] + [0.75] * (d - 1), dx,
                                         Inlet(0.0, 1.0, layers=3), Outlet(1.0, 0.0, 3),
                                         wallLayers=2, spareLayers=4, dtype=dtype)
    z = ob.zones(x, kinds)
    x[z.reservoir | z.inlet | z.fluid, 0] += 0.45 * dx
    n = x.shape[0]
    particles = _set(x, kinds, ob, lo, hi, dx)
    v = torch.zeros_like(x)
    v[:, 0] = torch.where(kinds == 0, 1.0, 0.0)
    if variant.startswith("summation"):
        scheme = Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), density="summation",
                        viscosity=0.1, walls=Walls(), transportVelocity=TransportVelocity())
        state = FluidState(x, v)
    else:
        scheme = Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), viscosity=0.1,
                        densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls())
        state = FluidState(x, v, torch.ones(n, dtype=dtype))
    sim = scheme.simulation(particles, state, maxSpeed=1.5)
    pool0 = int(z.removed.sum())
    sim.run(25)
    after = ob.zones(sim.state.positions, kinds)
    assert int(after.removed.sum()) < pool0 or int((after.inlet & ~z.inlet).sum()) > 0
    assert torch.isfinite(sim.state.velocities).all()
    assert int(after.fluid.sum()) >= int(z.fluid.sum()) - 2 * 3 ** (d - 1)
    lo_, hi_ = particles.domain.min, particles.domain.max
    assert not ((sim.state.positions < lo_) | (sim.state.positions > hi_)).any()


def _reflection(characteristic: bool) -> float:
    """The pressure of an acoustic pulse reflected by the outlet over the incoming one, at a
    probe halfway between the pulse's start and the outlet (a channel with free-slip walls
    and a uniform inflow)."""
    dx, L, W, U, c0 = 0.05, 2.0, 0.5, 0.2, 10.0
    x, kinds, ob, (lo, hi) = openChannel([0.0, 0.0], [L, W], dx, Inlet(0.0, U, layers=4),
                                         Outlet(L, 0.0, 4, characteristic), wallLayers=3)
    particles = _set(x, kinds, ob, lo, hi, dx, 3.0)
    scheme = Scheme(rho0=1.0, c0=c0, equationOfState=Linear(), viscosity=1e-4,
                    densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls(noSlip=False))
    v = torch.zeros_like(x)
    v[:, 0] = torch.where(kinds == 0, U, 0.0)
    rho = 1.0 + 0.01 * torch.exp(-(((x[:, 0] - 1.0) / 0.1) ** 2)) * (kinds == 0)
    sim = scheme.simulation(particles, FluidState(x, v, rho), maxSpeed=U)
    times, probe = [], []

    def record(s):
        z = ob.zones(s.state.positions, kinds)
        near = z.fluid & ((s.state.positions[:, 0] - 1.5).abs() < 0.1)
        times.append(float(s.state.time))
        probe.append(float((s.state.densities[near] - 1.0).mean()) * c0 * c0)

    sim.run(until=0.2, callback=record)
    t, p = torch.tensor(times), torch.tensor(probe)
    incoming = p[(t > 0.02) & (t < 0.09)].max()
    back = p[(t > 0.11) & (t < 0.2)]
    return float(back[back.abs().argmax()] / incoming)


def test_the_characteristic_outlet_reflects_less_than_a_fixed_pressure():
    fixed, characteristic = _reflection(False), _reflection(True)
    assert fixed < -0.3  # a fixed pressure reflects a pressure pulse with the opposite sign
    assert abs(characteristic) < 0.5 * abs(fixed), (characteristic, fixed)


def _fromRest(characteristic: bool):
    """A channel started at rest under a parabolic inflow (an impulsive start): the fluid
    particle count (relative to the start) and mean velocity at t = 0.8."""
    from warpSPHCore.fluids.openboundary import parabolicProfile

    dx = 0.1
    x, kinds, ob, (lo, hi) = openChannel([0.0, 0.0], [1.5, 1.0], dx,
                                         Inlet(0.0, parabolicProfile(1.0, [0.0], [1.0])),
                                         Outlet(1.5, characteristic=characteristic))
    n = x.shape[0]
    particles = _set(x, kinds, ob, lo, hi, dx, 3.0)
    scheme = Scheme(rho0=1.0, c0=15.0, equationOfState=Linear(), viscosity=0.02,
                    densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls())
    sim = scheme.simulation(particles, FluidState(x, torch.zeros_like(x),
                                                  torch.ones(n, dtype=F64)), maxSpeed=2.0)
    start = int(ob.zones(x, kinds).fluid.sum())
    sim.run(until=0.8)
    z = ob.zones(sim.state.positions, kinds)
    return int(z.fluid.sum()) / start, float(sim.state.velocities[z.fluid, 0].mean())


def test_an_impulsive_start_keeps_the_channel_full_with_the_characteristic_outlet():
    """With a fixed outlet pressure the fluid column started at rest overshoots the inflow and
    drains through the outlet, leaving voids at p = 0; the characteristic outlet absorbs the
    column's momentum and keeps the channel full at the inflow's mean speed."""
    kept, speed = _fromRest(True)
    assert abs(kept - 1.0) < 0.03 and abs(speed - 2.0 / 3.0) < 0.05, (kept, speed)
    drained, _ = _fromRest(False)
    assert drained < kept - 0.01, (drained, kept)


def test_the_force_on_walls_of_an_open_channel_makes_no_readback_once_its_list_is_known():
    scheme = _scheme()
    particles, state = _particles(advance=0.45 * DX)
    neighbours = scheme.neighbours(particles)
    adjacency = neighbours(state)
    force = scheme.wallForce(particles)
    first = force(state, adjacency)  # selects the body edges of this list: one readback
    moved = FluidState(state.positions + 1e-3, state.velocities, state.densities)
    with hostSyncCensus.census() as c:
        again = force(moved, adjacency)
    assert c.total == 0, c.hits
    assert float(first[0]) != 0.0 and torch.isfinite(again).all()
