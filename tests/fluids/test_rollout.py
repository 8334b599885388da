"""Rollouts (`fluids.rollout`): the checkpointed rollout gives bitwise the plain rollout's
values and gradients (an analytic oscillator and a rollout through the library's operators),
saves far fewer tensors for backward, matches central differences in dt, and forward mode
runs through it."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from fluid_reference import ref

from warpSPHCore import KernelFunctions, ParticleState
from warpSPHCore.fluids import (
    FluidState,
    Rates,
    continuityDensityRate,
    pressureAcceleration,
    rollout,
    taitPressure,
)

OMEGA, K = 2.0, 0.7


def _oscillator(state: FluidState, neighbours=None) -> Rates:
    return Rates(-OMEGA**2 * state.positions * (1.0 + 0.1 * state.velocities**2),
                 -K * state.densities)


def _start(n=4, d=2):
    g = torch.Generator().manual_seed(6)
    return (torch.randn(n, d, generator=g, dtype=torch.float64),
            torch.randn(n, d, generator=g, dtype=torch.float64),
            torch.full((n,), 1000.0, dtype=torch.float64))


def _loss(x0, v0, rho0, dt, rateFn, steps, k):
    final = rollout(FluidState(x0, v0, rho0), dt, steps, rateFn, checkpointEvery=k).state
    return (final.positions**2).sum() + final.velocities.sum() + 1e-3 * final.densities.sum()


@pytest.mark.parametrize("k", [1, 3, 10])
def test_checkpointed_gradients_are_bitwise_the_plain_ones(k):
    x, v, rho = _start()
    dt = torch.tensor(0.01, dtype=torch.float64)

    def grads(kk):
        leaves = [t.clone().requires_grad_(True) for t in (x, v, rho, dt)]
        loss = _loss(*leaves, _oscillator, 10, kk)
        return [loss.detach()] + list(torch.autograd.grad(loss, leaves))

    for a, b in zip(grads(None), grads(k)):
        assert torch.equal(a, b)


def test_checkpointing_saves_fewer_tensors():
    x, v, rho = _start(n=64)

    def savedBytes(k):
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        leaves = [t.clone().requires_grad_(True) for t in (x, v, rho)]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = _loss(*leaves, 0.01, _oscillator, 40, k)
        loss.backward()
        return total[0]

    plain, checkpointed = savedBytes(None), savedBytes(10)
    assert plain > 0 and checkpointed < plain / 4, (plain, checkpointed)


def test_gradient_in_dt_matches_central_differences():
    x, v, rho = _start()
    dt = torch.tensor(0.02, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(_loss(x, v, rho, dt, _oscillator, 25, 4), dt)
    eps = 1e-7
    fd = (_loss(x, v, rho, 0.02 + eps, _oscillator, 25, None)
          - _loss(x, v, rho, 0.02 - eps, _oscillator, 25, None)) / (2 * eps)
    assert float(g) == pytest.approx(float(fd), rel=1e-6)


def test_forward_mode_through_a_rollout():
    x, v, rho = _start()
    t = torch.randn(v.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with fwAD.dual_level():
        out = _loss(x, fwAD.make_dual(v, t), rho, 0.01, _oscillator, 12, None)
        tangent = fwAD.unpack_dual(out).tangent
    vv = v.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_loss(x, vv, rho, 0.01, _oscillator, 12, 5), vv)
    assert float(tangent) == pytest.approx(float((g * t).sum()), rel=1e-10)


def test_rollout_through_the_operators():
    """A weakly compressible rollout (Tait pressure, symmetric pressure acceleration,
    continuity equation) on a frozen neighbour list: checkpointed and plain gradients with
    respect to the initial velocities are identical."""
    dom = ref.makeDomain(2, torch.float64, "cpu", periodic=True)
    p = ref.cloud(24, 2, torch.float64, "cpu", seed=3, hMean=0.5)
    adj = ref.neighbourStructure("csr", p, dom)
    kw = dict(kernel=KernelFunctions.Wendland4)

    def rates(state, neighbours):
        assert neighbours is adj
        q = ParticleState(state.positions, p.supports, p.masses, p.kinds, state.densities)
        pres = taitPressure(state.densities, 1.0, 5.0)
        return Rates(pressureAcceleration(q, pres, dom, adj, **kw),
                     continuityDensityRate(q, state.velocities, dom, adj, **kw))

    v0 = 0.1 * torch.randn(p.positions.shape, dtype=torch.float64,
                           generator=torch.Generator().manual_seed(8))

    def grad(k):
        v = v0.clone().requires_grad_(True)
        final = rollout(FluidState(p.positions, v, p.densities), 1e-3, 6, rates, adj,
                        checkpointEvery=k).state
        loss = (final.velocities**2).sum() + final.densities.sum()
        return loss.detach(), torch.autograd.grad(loss, v)[0]

    (la, ga), (lb, gb) = grad(None), grad(2)
    assert torch.equal(la, lb) and torch.equal(ga, gb)
    assert float(ga.abs().max()) > 0


def test_validation():
    x, v, rho = _start()
    s = FluidState(x, v, rho)
    with pytest.raises(ValueError, match=r"steps=-1; accepted: an int >= 0"):
        rollout(s, 0.1, -1, _oscillator)
    with pytest.raises(ValueError, match=r"checkpointEvery=0; accepted: an int >= 1"):
        rollout(s, 0.1, 3, _oscillator, checkpointEvery=0)
    with pytest.raises(ValueError, match=r"trajectoryEvery=0; accepted: an int >= 1"):
        rollout(s, 0.1, 3, _oscillator, trajectoryEvery=0)
    with pytest.raises(TypeError, match="accepted: a FluidState"):
        rollout((x, v), 0.1, 3, _oscillator)
    final, carried, trajectory = rollout(s, 0.1, 0, _oscillator)
    assert final is s and carried is None and trajectory is None


@pytest.mark.parametrize("k", [None, 1, 4])
def test_trajectory_every_m_steps(k):
    """trajectoryEvery = 3 over 10 steps: the states at steps 0, 3, 6, 9, stacked, equal to
    the states of a step loop; a trajectory loss differentiates the same checkpointed or
    not."""
    x, v, rho = _start()
    dt = 0.01
    s, r, states = FluidState(x, v, rho), None, [FluidState(x, v, rho)]
    stepper = rollout.__globals__["defaultStepper"](s)
    for _ in range(10):
        s, r = stepper(s, dt, _oscillator, None, r)
        states.append(s)
    vv = v.clone().requires_grad_(True)
    out = rollout(FluidState(x, vv, rho), dt, 10, _oscillator, checkpointEvery=k,
                  trajectoryEvery=3)
    traj = out.trajectory
    assert traj.steps == (0, 3, 6, 9)
    assert traj.positions.shape == (4,) + tuple(x.shape)
    for n, step in enumerate(traj.steps):
        assert torch.equal(traj.positions[n].detach(), states[step].positions)
        assert torch.equal(traj.densities[n].detach(), states[step].densities)
    torch.testing.assert_close(traj.times, torch.tensor([0.0, 0.03, 0.06, 0.09],
                                                        dtype=torch.float64))
    assert torch.equal(out.state.positions.detach(), states[10].positions)
    loss = (traj.positions**2).sum() + traj.velocities.sum()
    (g,) = torch.autograd.grad(loss, vv)
    vv2 = v.clone().requires_grad_(True)
    ref = rollout(FluidState(x, vv2, rho), dt, 10, _oscillator, trajectoryEvery=3).trajectory
    (g2,) = torch.autograd.grad((ref.positions**2).sum() + ref.velocities.sum(), vv2)
    assert torch.equal(g, g2)
