"""Train a closure for a coarse SPH scheme through the solver (solver in the loop).

A 12 x 12 weakly compressible scheme (periodic unit square, summation density, linear
equation of state, Morris viscosity, plain momentum) gets a learned acceleration
a = theta_0 nu L(u) + theta_1 a_p + theta_2 nu h^2 L(L(u)) (a `torch.nn.Module` in the
scheme as a `Term`; each feature is one call of the fused Momentum operator). The reference
is the same scheme on a 36 x 36 lattice with a third of the time step: every coarse particle
has a fine twin that starts at the same place, so the error is the velocity difference of
twins, with no interpolation. Four random divergence-free flows
(`fluids.randomFourierVelocity`) train the closure as the scenes of one batch through a
20-step checkpointed rollout (Adam); two other flows test it over 80 steps.

The script checks that the training gradient equals a central difference, that the training
loss falls, and that the closure lowers the held-out error at the training horizon and at
four horizons; it writes ``learned_closure.json`` and prints the errors.

Run: python examples/learned_closure.py [--out DIR] [--iterations 10]
"""

import argparse
import json
import pathlib
import tempfile
import time

import torch

from warpSPHCore import DomainDescription
from warpSPHCore.fluids import (
    FluidState,
    Linear,
    ParticleSet,
    Scheme,
    Term,
    batchScenes,
    momentumAcceleration,
    randomFourierVelocity,
    rollout,
)

F64 = torch.float64
N_COARSE, REFINE, NU, HORIZON, EVERY = 12, 3, 0.01, 20, 5
DOMAIN = DomainDescription(torch.zeros(2, dtype=F64), torch.ones(2, dtype=F64), [True, True])


def lattice(n):
    dx = 1.0 / n
    g = (torch.arange(n, dtype=F64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    N = x.shape[0]
    return x, ParticleSet(torch.full((N,), 4 * dx, dtype=F64), torch.full((N,), dx * dx, dtype=F64),
                          torch.zeros(N, dtype=torch.int32), DOMAIN, dx)


class Closure(torch.nn.Module):
    def __init__(self, spacing):
        super().__init__()
        self.h2 = spacing * spacing
        self.theta = torch.nn.Parameter(torch.zeros(3, dtype=F64))

    def forward(self, ctx):
        p, u, zero = ctx.particles, ctx.velocities, torch.zeros_like(ctx.pressures)
        lap = momentumAcceleration(p, zero, u, ctx.domain, ctx.neighbours, dynamicViscosity=NU)
        pres = momentumAcceleration(p, ctx.pressures, torch.zeros_like(u), ctx.domain,
                                    ctx.neighbours)
        bih = momentumAcceleration(p, zero, lap, ctx.domain, ctx.neighbours,
                                   dynamicViscosity=self.h2)
        return self.theta[0] * lap + self.theta[1] * pres + self.theta[2] * bih


def scheme(*terms):
    return Scheme(rho0=1.0, c0=10.0, equationOfState=Linear(), density="summation",
                  viscosity=NU, terms=terms)


def velocities(x, particles, seeds, dt, steps, sch, every):
    batch, start = batchScenes([(particles, FluidState(x, randomFourierVelocity(
        x, DOMAIN, modes=3, rms=0.3, seed=s))) for s in seeds])
    out = rollout(start, dt, steps, sch.rates(batch), sch.neighbours(batch), stepper=sch.stepper,
                  trajectoryEvery=every,
                  checkpointEvery=every if torch.is_grad_enabled() else None)
    v = out.trajectory.velocities
    return v.reshape(v.shape[0], len(seeds), -1, 2)


def error(coarse, fine):
    """Relative velocity error of the coarse particles against their fine twins, per
    snapshot."""
    return ((coarse - fine).pow(2).sum((1, 2, 3)) / fine.pow(2).sum((1, 2, 3))).sqrt()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--iterations", type=int, default=10)
    args = ap.parse_args()
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    xc, coarse = lattice(N_COARSE)
    xf, fine = lattice(REFINE * N_COARSE)
    plain = scheme()
    dt = plain.timeStep(coarse, maxSpeed=1.0)
    m = REFINE * N_COARSE
    twins = torch.tensor([(REFINE * i + 1) * m + REFINE * j + 1 for i in range(N_COARSE)
                          for j in range(N_COARSE)])
    train, test = [10, 11, 12, 13], [0, 1]
    with torch.no_grad():
        fineTrain = velocities(xf, fine, train, dt / REFINE, HORIZON * REFINE, plain,
                               EVERY * REFINE)[:, :, twins]
        fineTest = velocities(xf, fine, test, dt / REFINE, 4 * HORIZON * REFINE, plain,
                              EVERY * REFINE)[:, :, twins]
        before = error(velocities(xc, coarse, test, dt, 4 * HORIZON, plain, EVERY), fineTest)

    closure = Closure(coarse.spacing)
    learned = scheme(Term("acceleration", closure, name="closure"))

    def loss():
        e = error(velocities(xc, coarse, train, dt, HORIZON, learned, EVERY), fineTrain)
        return e[1:].pow(2).mean()

    # the gradient through the batched, checkpointed rollout against a central difference
    (g,) = torch.autograd.grad(loss(), closure.theta)
    eps = 1e-5
    with torch.no_grad():
        closure.theta[1] += eps
        up = loss()
        closure.theta[1] -= 2 * eps
        down = loss()
        closure.theta[1] += eps
    fd = float((up - down) / (2 * eps))
    gradErr = abs(float(g[1]) - fd) / abs(fd)
    print(f"dL/dtheta_1: reverse mode {float(g[1]):.6e}, central difference {fd:.6e} "
          f"(relative difference {gradErr:.1e})")
    assert gradErr < 1e-6

    opt = torch.optim.Adam(closure.parameters(), lr=0.1)
    curve = []
    t0 = time.perf_counter()
    for _ in range(args.iterations):
        opt.zero_grad()
        value = loss()
        value.backward()
        opt.step()
        curve.append(float(value.detach()) ** 0.5)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        after = error(velocities(xc, coarse, test, dt, 4 * HORIZON, learned, EVERY), fineTest)
    k = HORIZON // EVERY
    ratio, ratio4 = float(after[k] / before[k]), float(after[4 * k] / before[4 * k])
    theta = [round(float(v), 4) for v in closure.theta.detach()]
    print(f"training: {args.iterations} Adam iterations in {seconds:.1f} s, rms error "
          f"{curve[0]:.4f} -> {curve[-1]:.4f}, theta {theta}")
    print(f"held-out velocity error at {HORIZON} steps: {float(before[k]):.4f} -> "
          f"{float(after[k]):.4f} (ratio {ratio:.2f}); at {4 * HORIZON} steps: "
          f"{float(before[4 * k]):.4f} -> {float(after[4 * k]):.4f} (ratio {ratio4:.2f})")
    assert curve[-1] < curve[0]
    assert ratio < 1.0 and ratio4 < 1.0
    (out / "learned_closure.json").write_text(json.dumps({
        "theta": theta, "trainingCurve": curve, "trainSeconds": seconds,
        "errorRatio": ratio, "errorRatio4x": ratio4, "gradientVsCentralDifference": gradErr},
        indent=2) + "\n")
    print("OK")


if __name__ == "__main__":
    main()
