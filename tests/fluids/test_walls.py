"""Dummy-particle walls (`fluids.walls`, Adami, Hu & Adams 2012) against an independent
float64 NumPy pair loop written here from the paper's formulas (minimum image, wall queries
and fluid references only), in 2D periodic and 3D; float64 gradcheck and a forward-mode
(dual tensor) check; the properties: hydrostatic wall pressures rho0 g depth in a tank, a
body force along a periodic channel that leaves the wall pressure unchanged (minimum image),
a wall moving with a uniform flow that reproduces it, a moving lid; and the box layers of
`boxParticles`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from fluid_reference import ref

from warpSPHCore import DomainDescription, KernelFunctions, ParticleState, SupportScheme
from warpSPHCore.fluids import taitDensity
from warpSPHCore.fluids.walls import (
    WallState,
    boxParticles,
    extrapolateWalls,
    wallPressures,
    wallVelocities,
)
from warpSPHCore.util import hostSyncCensus as _census

KERNEL = KernelFunctions.Wendland2
GATHER = int(SupportScheme.Gather)
F64 = torch.float64
RHO0, C0 = 1.0, 10.0


def _inverse(p):
    return taitDensity(p, RHO0, C0)


def _case(d, periodic, n=40, seed=5, dtype=F64):
    kinds = [1 if k % 3 == 0 else (2 if k % 11 == 5 else 0) for k in range(n)]
    p = ref.cloud(n, d, dtype, "cpu", seed, hMean=0.45 if d == 2 else 0.6, kinds=kinds)
    dom = ref.makeDomain(d, dtype, "cpu", periodic=periodic)
    adj = ref.neighbourStructure("csr", p, dom)
    g = torch.Generator().manual_seed(seed + 1)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=F64).to(dtype)

    return p, dom, adj, dict(pressures=rnd(n), velocities=rnd(n, d), gravity=3.0 * rnd(d),
                             wallAccelerations=rnd(n, d), wallVelocity=rnd(n, d))


def _numpyWalls(p, dom, pressures, velocities, gravity, wallAccelerations, wallVelocity,
                noSlip=True):
    """Adami et al. 2012, explicit pair loop over wall w (kind 1) and fluid f (kind 0); the
    no-slip velocity does not mirror the normal part while the fluid leaves the wall (n: minus
    the kernel-weighted direction to the fluid)."""
    lo, hi, per = ref._domainArrays(dom)
    pos = ref._np(p.positions)
    N, d = pos.shape
    x = ref.pairVectors(pos, pos, lo, hi, per)
    h = ref._np(p.supports)
    W = ref.pairKernel(int(KERNEL), d, x, h, h, GATHER)
    kinds, rho = ref._np(p.kinds), ref._np(p.densities)
    pp, uu, g, aw, uw = (ref._np(t) for t in (pressures, velocities, gravity,
                                              wallAccelerations, wallVelocity))
    P, R, U = pp.copy(), rho.copy(), uu.copy()
    for w in range(N):
        if kinds[w] != 1:
            continue
        s, sp, sr, su, sn = 0.0, 0.0, np.zeros(d), np.zeros(d), np.zeros(d)
        for f in range(N):
            if kinds[f] != 0:
                continue
            s += W[w, f]
            sp += pp[f] * W[w, f]
            sr += rho[f] * x[w, f] * W[w, f]
            su += uu[f] * W[w, f]
            sn += x[w, f] * W[w, f]
        P[w] = (sp + np.dot(g - aw[w], sr)) / s if s > 0 else 0.0
        R[w] = RHO0 * (1.0 + 7.0 * P[w] / (RHO0 * C0**2)) ** (1.0 / 7.0)
        ut = su / s if s > 0 else np.zeros(d)
        n = -sn / np.linalg.norm(sn) if np.linalg.norm(sn) > 0 else np.zeros(d)
        leaving = max(np.dot(ut - uw[w], n), 0.0)
        U[w] = 2.0 * uw[w] - ut + 2.0 * leaving * n if noSlip else ut
    return P, R, U


@pytest.mark.parametrize("d, periodic", [(2, True), (3, False)])
def test_walls_match_numpy_pair_loop(d, periodic):
    p, dom, adj, kw = _case(d, periodic)
    P, R, U = _numpyWalls(p, dom, **kw)
    assert np.count_nonzero(P[ref._np(p.kinds) == 1]) > 5  # walls with fluid neighbours
    with torch.no_grad():
        s = extrapolateWalls(p, kw["pressures"], kw["velocities"], dom, adj,
                             gravity=kw["gravity"], densityOfPressure=_inverse,
                             wallVelocity=kw["wallVelocity"],
                             wallAccelerations=kw["wallAccelerations"], kernel=KERNEL)
        assert isinstance(s, WallState)
        for got, want in ((s.pressures, P), (s.densities, R), (s.velocities, U)):
            np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12 * np.abs(want).max())
        p2 = wallPressures(p, kw["pressures"], dom, adj, kw["gravity"],
                           wallAccelerations=kw["wallAccelerations"], kernel=KERNEL)
        assert torch.equal(p2, s.pressures)
        _, _, Ufree = _numpyWalls(p, dom, **kw, noSlip=False)
        u2 = wallVelocities(p, kw["velocities"], dom, adj, noSlip=False, kernel=KERNEL)
        np.testing.assert_allclose(u2.numpy(), Ufree, rtol=0, atol=1e-12 * np.abs(Ufree).max())


def test_float32_agrees_with_float64():
    p64, dom64, adj64, kw64 = _case(2, True)
    p, dom, adj, kw = _case(2, True, dtype=torch.float32)
    a = wallPressures(p, kw["pressures"], dom, adj, kw["gravity"], kernel=KERNEL)
    b = wallPressures(p64, kw64["pressures"], dom64, adj64, kw64["gravity"], kernel=KERNEL)
    assert a.dtype == torch.float32
    torch.testing.assert_close(a.double(), b, rtol=0, atol=1e-5 * float(b.abs().max()))


def _tank(walls, lower, upper, dx=0.1, layers=3, periodic=(False, False)):
    x, kinds = boxParticles(lower, upper, dx, layers, walls)
    N = x.shape[0]
    margin = torch.tensor([0.0 if per else (layers + 1) * dx for per in periodic], dtype=F64)
    # a periodic axis is exactly the fluid box; the others hold the wall layers
    dom = DomainDescription(torch.tensor(lower, dtype=F64) - margin,
                            torch.tensor(upper, dtype=F64) + margin, list(periodic))
    p = ParticleState(x, torch.full((N,), 2.5 * dx, dtype=F64),
                      torch.full((N,), RHO0 * dx * dx, dtype=F64), kinds,
                      torch.full((N,), RHO0, dtype=F64))
    return p, dom, ref.neighbourStructure("csr", p, dom), kinds == 1


def _hasFluidNeighbour(p, dom):
    lo, hi, per = ref._domainArrays(dom)
    pos = ref._np(p.positions)
    r = np.linalg.norm(ref.pairVectors(pos, pos, lo, hi, per), axis=-1)
    fluid = ref._np(p.kinds) == 0
    return ((r < ref._np(p.supports)[:, None]) & fluid[None, :]).any(axis=1)


def test_hydrostatic_tank_wall_pressure_is_rho_g_depth():
    """Fluid at rest, p = rho0 g (H - y), rho = rho0: every weighted mean of
    rho0 g (H - y_f) + rho0 g (y_f - y_w) is rho0 g (H - y_w), exactly."""
    H, gy = 0.6, 9.81
    p, dom, adj, isWall = _tank(("-x", "+x", "-y"), (0.0, 0.0), (0.6, H))
    y = p.positions[:, 1]
    pf = torch.where(isWall, torch.zeros_like(y), RHO0 * gy * (H - y))
    pw = wallPressures(p, pf, dom, adj, (0.0, -gy), kernel=KERNEL)
    near = torch.as_tensor(_hasFluidNeighbour(p, dom)) & isWall
    assert int(near.sum()) > 20 and int((isWall & ~near).sum()) > 0
    expected = RHO0 * gy * (H - y)
    torch.testing.assert_close(pw[near], expected[near], rtol=0, atol=1e-12 * RHO0 * gy * H)
    assert float(pw[isWall & ~near].abs().max()) == 0.0  # no fluid neighbour: 0
    assert torch.equal(pw[~isWall], pf[~isWall])
    # a tank in free fall (a_w = g): no hydrostatic term, the wall pressure is the weighted
    # mean of the fluid's (>= 0), below the hydrostatic one under the bottom (y_w < y_f)
    free = wallPressures(p, pf, dom, adj, (0.0, -gy), wallAccelerations=(0.0, -gy),
                         kernel=KERNEL)
    bottom = near & (y < 0)
    assert float(free[near].min()) >= 0.0 and float((free - pw)[bottom].max()) < 0.0


def test_periodic_channel_body_force_uses_the_minimum_image():
    """A body force along the periodic x axis of a channel (walls at -y, +y) with constant
    fluid pressure and density: by symmetry sum_f rho_f x_wf W_wf = 0 through the minimum
    image, so p_w = p0 at every wall particle, the ones at the periodic seam included."""
    p, dom, adj, isWall = _tank(("-y", "+y"), (0.0, 0.0), (0.6, 0.4), periodic=(True, False))
    p0 = 2.5
    pf = torch.full_like(p.masses, p0)
    pw = wallPressures(p, pf, dom, adj, (7.0, 0.0), kernel=KERNEL)
    near = torch.as_tensor(_hasFluidNeighbour(p, dom)) & isWall
    assert int(near.sum()) == 24  # the two wall layers within the support, 6 columns each
    torch.testing.assert_close(pw[near], pf[near], rtol=0, atol=1e-12 * p0)


def test_wall_velocities_moving_walls_and_lid():
    p, dom, adj, isWall = _tank("all", (0.0, 0.0), (0.5, 0.5), layers=2)
    N = p.positions.shape[0]
    near = torch.as_tensor(_hasFluidNeighbour(p, dom)) & isWall
    U = torch.tensor([0.3, -0.1], dtype=F64)
    uniform = U.expand(N, 2).clone()
    # walls moving with a uniform flow: u_w = 2 U - U = U (no shear)
    u = wallVelocities(p, uniform, dom, adj, wallVelocity=U, kernel=KERNEL)
    torch.testing.assert_close(u[near], uniform[near], rtol=0, atol=1e-14)
    # free slip: the fluid's own velocity, 0 without fluid neighbours
    u = wallVelocities(p, uniform, dom, adj, noSlip=False, kernel=KERNEL)
    torch.testing.assert_close(u[near], uniform[near], rtol=0, atol=1e-14)
    assert float(u[isWall & ~near].abs().max()) == 0.0
    # a lid (y > 0.5) moving at (1, 0) over fluid at rest: u_w = 2 u_lid where the lid is
    # flat (the centre column: its normal is vertical, the relative velocity tangential),
    # the other walls 0
    lid = isWall & (p.positions[:, 1] > 0.5)
    uLid = torch.where(lid[:, None], torch.tensor([1.0, 0.0], dtype=F64), 0.0)
    rest = torch.zeros(N, 2, dtype=F64)
    u = wallVelocities(p, rest, dom, adj, wallVelocity=uLid, kernel=KERNEL)
    centre = lid & ((p.positions[:, 0] - 0.25).abs() < 1e-9)
    assert int(centre.sum()) == 2
    torch.testing.assert_close(u[centre], 2.0 * uLid[centre], rtol=0, atol=1e-14)
    assert float(u[~lid].abs().max()) == 0.0
    # a leaving fluid is not pulled into the wall: the floor's normal part is not mirrored
    floor = isWall & (p.positions[:, 1] < 0.0) & ((p.positions[:, 0] - 0.25).abs() < 1e-9)
    up = torch.tensor([0.2, 1.0], dtype=F64).expand(N, 2)
    leave = wallVelocities(p, up, dom, adj, kernel=KERNEL)
    torch.testing.assert_close(leave[floor], torch.tensor([-0.2, 1.0], dtype=F64).expand(
        int(floor.sum()), 2), rtol=0, atol=1e-12)
    approach = wallVelocities(p, -up, dom, adj, kernel=KERNEL)  # mirrored, as Adami's
    torch.testing.assert_close(approach[floor], up[floor], rtol=0, atol=1e-12)
    s = extrapolateWalls(p, torch.zeros(N, dtype=F64), rest, dom, adj, gravity=(0.0, 0.0),
                         densityOfPressure=_inverse, wallVelocity=uLid, kernel=KERNEL)
    assert torch.equal(s.velocities, u) and torch.equal(s.densities,
                                                        torch.full_like(s.densities, RHO0))


def test_gradcheck_and_forward_mode():
    p, dom, adj, kw = _case(2, True, n=16, seed=9)
    names = ("pressures", "velocities", "gravity", "wallAccelerations", "wallVelocity")

    def f(x, rho, pr, u, g, aw, uw):
        s = extrapolateWalls(ParticleState(x, p.supports, p.masses, p.kinds, rho), pr, u, dom,
                             adj, gravity=g, densityOfPressure=_inverse, wallVelocity=uw,
                             wallAccelerations=aw, kernel=KERNEL)
        return torch.cat([s.pressures, s.densities, s.velocities.reshape(-1)])

    inputs = [p.positions, p.densities] + [kw[k] for k in names]
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-6, rtol=1e-5)
    g = torch.Generator().manual_seed(4)
    tangents = [torch.randn(t.shape, dtype=F64, generator=g) for t in inputs]
    with fwAD.dual_level():
        out = f(*[fwAD.make_dual(t, v) for t, v in zip(inputs, tangents)])
        tangent = fwAD.unpack_dual(out).tangent
    J = torch.autograd.functional.jacobian(f, tuple(inputs))
    expected = sum(Jk.reshape(Jk.shape[0], -1) @ v.reshape(-1) for Jk, v in zip(J, tangents))
    assert float(expected.abs().max()) > 0
    torch.testing.assert_close(tangent, expected, rtol=1e-9, atol=1e-11)
    with _census.census() as counts:  # forward and backward: no readback to the host
        f(*leaves).sum().backward()
    assert counts.total == 0, (counts.hits, counts.sites)


def test_box_particles_layout():
    dx = 0.25
    x, kinds = boxParticles((0.0, 0.0), (1.0, 1.0), dx, 2)
    assert x.shape == (64, 2) and kinds.dtype == torch.int32
    fluid, wall = x[kinds == 0], x[kinds == 1]
    assert fluid.shape[0] == 16 and wall.shape[0] == 48
    assert bool(((fluid > 0) & (fluid < 1)).all())
    assert bool(((wall < 0) | (wall > 1)).any(dim=1).all())
    assert float(wall.min()) == pytest.approx(-1.5 * dx) and float(wall.max()) == pytest.approx(
        1.0 + 1.5 * dx)
    r = torch.cdist(x, x) + torch.eye(64, dtype=F64)
    assert float(r.min()) == pytest.approx(dx)
    # channel: walls in y only, the same x columns as the fluid
    x, kinds = boxParticles((0.0, 0.0), (1.0, 1.0), dx, 3, ("-y", "+y"))
    wall = x[kinds == 1]
    assert wall.shape[0] == 2 * 3 * 4 and bool(((wall[:, 0] > 0) & (wall[:, 0] < 1)).all())
    # open 3D tank with a fluid column; walls only
    x, kinds = boxParticles((0, 0, 0), (1, 1, 1), dx, 1, ("-x", "+x", "-y", "+y", "-z"),
                            fluidUpper=(0.5, 1.0, 0.5), dtype=torch.float32)
    assert x.dtype == torch.float32 and int((kinds == 0).sum()) == 2 * 4 * 2
    assert int((kinds == 1).sum()) == 6 * 6 * 5 - 4 * 4 * 4  # no layer above the open top
    w, k = boxParticles((0, 0), (1, 1), dx, 1, fluid=False)
    assert bool((k == 1).all()) and w.shape[0] == 36 - 16


def test_validation():
    with pytest.raises(ValueError, match="whole number of spacings"):
        boxParticles((0.0, 0.0), (1.0, 0.9), 0.25, 2)
    with pytest.raises(ValueError, match="accepted: 'all' or sides"):
        boxParticles((0.0, 0.0), (1.0, 1.0), 0.25, 2, ("-z",))
    with pytest.raises(ValueError, match="layers"):
        boxParticles((0.0, 0.0), (1.0, 1.0), 0.25, 0)
    p, dom, adj, kw = _case(2, True, n=12)
    with pytest.raises(ValueError, match="gravity has shape"):
        wallPressures(p, kw["pressures"], dom, adj, (0.0, 0.0, -1.0))
    with pytest.raises(TypeError, match="accepted: an AdjacencyList"):
        wallVelocities(p, kw["velocities"], dom, None)


def test_no_slip_weight_blends_the_two_wall_velocities():
    """noSlip = w gives w u_noSlip + (1 - w) u_freeSlip (the scheme's laminar share of the
    viscosity); anything outside [0, 1] raises."""
    p, dom, adj, kw = _case(2, True, n=30, seed=4)
    u = kw["velocities"]
    full = wallVelocities(p, u, dom, adj, noSlip=True, kernel=KERNEL)
    free = wallVelocities(p, u, dom, adj, noSlip=False, kernel=KERNEL)
    half = wallVelocities(p, u, dom, adj, noSlip=0.25, kernel=KERNEL)
    torch.testing.assert_close(half, 0.25 * full + 0.75 * free, rtol=0, atol=1e-14)
    assert not torch.equal(full, free)
    assert torch.equal(wallVelocities(p, u, dom, adj, noSlip=0.0, kernel=KERNEL), free)
    with pytest.raises(ValueError, match=r"noSlip=1.5; accepted: True, False, a number in"):
        wallVelocities(p, u, dom, adj, noSlip=1.5, kernel=KERNEL)


def test_the_artificial_viscosity_sees_free_slip_walls():
    """With an artificial viscosity and no laminar one, no-slip walls give the rates of
    free-slip walls (bitwise); with a laminar viscosity alone they do not."""
    from warpSPHCore.fluids import (
        ArtificialViscosity,
        FluidState,
        ParticleSet,
        Scheme,
        Tait,
        VerletNeighbours,
        Walls,
        hydrostaticStart,
    )

    dx = 0.1
    x, kinds = boxParticles((0.0, 0.0), (0.6, 0.4), dx, 3, ("-x", "+x", "-y"))
    dom = DomainDescription(torch.tensor([-0.4, -0.4], dtype=F64),
                            torch.tensor([1.0, 1.0], dtype=F64), [False, False])

    def rates(noSlip, nu, alpha):
        scheme = Scheme(rho0=1.0, c0=10.0, equationOfState=Tait(), density="continuity",
                        viscosity=nu, artificialViscosity=ArtificialViscosity(alpha),
                        walls=Walls(noSlip=noSlip), bodyForce=(0.0, -1.0))
        rho, m, _ = hydrostaticStart(scheme, x, kinds, dx, 0.4)
        P = ParticleSet(torch.full_like(rho, 3 * dx), m, kinds, dom, dx)
        v = torch.stack([torch.sin(3 * x[:, 1]), 0.2 * torch.cos(2 * x[:, 0])], 1)
        state = FluidState(x, v, rho)
        return scheme.rates(P)(state, VerletNeighbours(dom, P.supports, 0.0)(state))

    a, b = rates(True, 0.0, 0.1), rates(False, 0.0, 0.1)
    assert torch.equal(a.accelerations, b.accelerations)
    c, d = rates(True, 0.01, 0.0), rates(False, 0.01, 0.0)
    assert not torch.equal(c.accelerations, d.accelerations)
