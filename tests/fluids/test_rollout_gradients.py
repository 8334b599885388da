"""Differentiable rollouts: the gradient of a scalar loss after a weakly
compressible rollout with respect to the viscosity, the initial velocity amplitude and a body
force matches central differences to 1e-6 (relative), the checkpointed rollout's gradients
are bitwise the plain one's, and the same holds for the Taylor-Green case's
transport-velocity rates (the edge-sum momentum and the background pressure) in viscosity.

The problem: 100 particles of a jittered lattice of the periodic unit square with a
Taylor-Green velocity field, float64, summation density (a new neighbour search at every
rate evaluation), Tait pressure, the symmetric pressure acceleration, Morris viscosity and a
body force; 15 kick-drift-kick steps; loss = kinetic energy + fixed linear functionals of the final
momentum and positions."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)
from warpSPHCore.fluids import (
    FluidState,
    Rates,
    bodyAcceleration,
    laminarViscosity,
    pressureAcceleration,
    rollout,
    taitPressure,
)
from warpSPHCore.fluids.cases import tgv
from warpSPHCore.fluids.transport import transportKickDriftKick

F64 = torch.float64
N_SIDE, STEPS, C0 = 10, 15, 10.0
MOMENTUM = torch.tensor([1.0, 2.0], dtype=F64)  # weights of the momentum in the loss
DENSITY = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)


def _problem():
    dx = 1.0 / N_SIDE
    g = (torch.arange(N_SIDE, dtype=F64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    gen = torch.Generator().manual_seed(5)
    x = x + 0.2 * dx * (torch.rand(x.shape, generator=gen, dtype=F64) - 0.5)
    N = x.shape[0]
    weights = torch.randn(x.shape, generator=gen, dtype=F64)
    dom = DomainDescription(torch.zeros(2, dtype=F64), torch.ones(2, dtype=F64), [True, True])
    return dict(x=x, H=torch.full((N,), 3.0 * dx, dtype=F64),
                m=torch.full((N,), dx * dx, dtype=F64), kinds=torch.zeros(N, dtype=torch.int32),
                dom=dom, w=weights, dt=0.25 * dx / (C0 + 1.0))


P = _problem()


def _search(state):
    """A new neighbour search for every rate evaluation (a callable neighbour policy)."""
    return radiusSearchCompactHashMap(
        ParticleState(state.positions.detach(), P["H"], P["m"], P["kinds"]), P["dom"])


def _rates(mu, gravity):
    H, m, kinds, dom = P["H"], P["m"], P["kinds"], P["dom"]

    def rates(state, adj):
        x = state.positions
        rho = warpOperation(ParticleState(x, H, m, kinds), DENSITY, dom, adjacency=adj)
        p = ParticleState(x, H, m, kinds, rho)
        a = pressureAcceleration(p, taitPressure(rho, 1.0, C0), dom, adj) \
            + laminarViscosity(p, state.velocities, dom, adj, mu) + bodyAcceleration(gravity, x)
        return Rates(a)

    return rates


def _loss(mu, amplitude, gravity, checkpointEvery=None):
    x0 = P["x"]
    v0 = amplitude * tgv.taylorGreenVelocity(x0, 1.0)
    final = rollout(FluidState(x0, v0), P["dt"], STEPS, _rates(mu, gravity), _search,
                    checkpointEvery=checkpointEvery).state
    v = final.velocities
    return (P["m"][:, None] * (0.5 * v**2 + MOMENTUM * v)).sum() + (P["w"] * final.positions).sum()


PARAMS = {"viscosity": torch.tensor(0.05, dtype=F64), "amplitude": torch.tensor(1.0, dtype=F64),
          "bodyForce": torch.tensor([0.3, -1.0], dtype=F64)}


def _gradients(checkpointEvery):
    leaves = {k: v.clone().requires_grad_(True) for k, v in PARAMS.items()}
    loss = _loss(*leaves.values(), checkpointEvery=checkpointEvery)
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return loss.detach(), dict(zip(leaves, grads))


@pytest.fixture(scope="module")
def plain():
    return _gradients(None)


def _central(name, index, eps):
    def at(sign):
        values = {k: v.clone() for k, v in PARAMS.items()}
        values[name] = values[name].clone()
        values[name].view(-1)[index] += sign * eps
        with torch.no_grad():
            return float(_loss(*values.values()))

    return (at(1) - at(-1)) / (2 * eps)


@pytest.mark.parametrize("name, index, eps", [("viscosity", 0, 1e-6), ("amplitude", 0, 1e-6),
                                              ("bodyForce", 0, 1e-5), ("bodyForce", 1, 1e-5)])
def test_gradient_matches_central_differences(plain, name, index, eps):
    _, grads = plain
    g = float(grads[name].reshape(-1)[index])
    assert abs(g) > 1e-3  # a sensitivity worth checking
    assert g == pytest.approx(_central(name, index, eps), rel=1e-6)


def test_checkpointed_gradients_are_bitwise_the_plain_ones(plain):
    loss, grads = plain
    loss5, grads5 = _gradients(5)
    assert torch.equal(loss, loss5)
    for k in PARAMS:
        assert torch.equal(grads[k], grads5[k]), k


def _taylorGreenTransport(k="loop"):
    """``loss(mu) -> (loss, final rates)``: 12 transport-velocity steps of the Taylor-Green
    case's own rates on the 10 x 10 lattice, as a step-by-step loop (`k` = "loop") or a
    `rollout` checkpointed in segments of `k` (None: plain)."""
    case = tgv.setup(tgv.TaylorGreenConfig(n=10, t=0.05, relax=0))
    x0 = case.positions + 0.1 * case.dx * torch.sin(7.0 * case.positions.flip(1))
    v0 = tgv.taylorGreenVelocity(x0, 1.0)

    def search(state):
        return radiusSearchCompactHashMap(
            ParticleState(state.positions.detach(), case.supports, case.masses, case.kinds),
            case.domain)

    def loss(mu):
        rates = tgv.taylorGreenRates(case, viscosity=mu)
        if k == "loop":
            s, r = FluidState(x0, v0), None
            for _ in range(12):
                s, r = transportKickDriftKick(s, case.dt, rates, search, r)
        else:
            s, r, _ = rollout(FluidState(x0, v0), case.dt, 12, rates, search,
                              checkpointEvery=k, stepper=transportKickDriftKick)
        return 0.5 * (case.masses[:, None] * s.velocities**2).sum() \
            + (P["w"] * s.positions).sum(), r

    return loss


def test_taylor_green_rates_gradient_in_viscosity():
    """Through the case's own rates (edge-sum momentum, number-density volumes,
    background pressure) and the transport-velocity stepper, 12 steps on the 10 x 10
    lattice."""
    run = _taylorGreenTransport()

    def loss(mu):
        return run(mu)[0]

    mu = torch.tensor(0.01, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(loss(mu), mu)
    eps = 1e-6
    with torch.no_grad():
        fd = (float(loss(0.01 + eps)) - float(loss(0.01 - eps))) / (2 * eps)
    assert abs(float(g)) > 1e-3
    assert float(g) == pytest.approx(fd, rel=1e-6)
    assert math.isfinite(float(g))


def test_taylor_green_transport_rollout_checkpointed_is_bitwise_the_plain_one():
    """`rollout` checkpoints any stepper: the transport-velocity stepper, whose rates carry
    the background-pressure accelerations (`TransportRates`), 12 steps in segments of 5 and
    plain, give the same loss and viscosity gradient, bitwise, and equal the step-by-step
    loop of the test above; the checkpointed run saves under a quarter of the plain run's
    tensors outside its segments."""
    results, saved = {}, {}
    for k in ("loop", None, 5):
        mu = torch.tensor(0.01, dtype=F64, requires_grad=True)
        total = [0]

        def pack(t, total=total):
            total[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss, r = _taylorGreenTransport(k)(mu)
        saved[k] = total[0]
        results[k] = (loss.detach(), torch.autograd.grad(loss, mu)[0], type(r))
    for k in (None, 5):
        assert torch.equal(results[k][0], results["loop"][0])
        assert torch.equal(results[k][1], results["loop"][1])
        assert results[k][2] is results["loop"][2]
    assert abs(float(results[5][1])) > 1e-3
    # the segments are checkpointed: only their inputs are saved outside them
    assert saved[5] < saved[None] / 4, saved
