"""Demo part ``learn``, a solver-in-the-loop result: a coarse weakly compressible scheme
corrected by a small torch model, trained through batched differentiable rollouts of the
solver and evaluated on initial conditions it never saw, against a fine run of the same
scheme.

**The flows.** The periodic unit square, rho0 = 1, nu = 0.01, c0 = 10 (ten times the
largest speed), random divergence-free initial velocities (`fluids.randomFourierVelocity`:
Fourier modes up to |k| = 3, root-mean-square speed 0.3, one seed per flow), uniform density
on a cell-centred lattice.

**The scheme** (coarse and fine alike): summation density, the linear equation of state
p = c0^2 (rho - rho0), the Morris viscosity, plain momentum (the fused Momentum operator, no
transport velocity), kick-drift-kick, supports 4 dx, Verlet lists. The coarse lattice has
n x n particles and the time step dt of `Scheme.timeStep`; the fine one 3n x 3n particles
and dt / 3. A coarse lattice point (i + 1/2) / n is the fine point (3 i + 3/2) / (3n), so
every coarse particle has a fine twin that starts at the same place with the same velocity:
the velocity error of a coarse run is

    e(t) = || u_coarse(t) - u_twin(t) || / || u_twin(t) ||

over all particles of all held-out flows (0 at t = 0 exactly, no interpolation).

**The model** (`MomentumClosure`, a `torch.nn.Module` in the scheme as a `Term`): an
acceleration a = theta_0 nu L(u) + theta_1 a_p + theta_2 nu h^2 L(L(u)), with L the
Morris Laplacian and a_p the pressure acceleration, each one call of the fused Momentum
operator (`fluids.momentumAcceleration`) on the step's own neighbour list; the thetas start
at 0 (the uncorrected scheme). Three coefficients on physical features: the correction a
coarse discretisation needs is a rescaling of its own operators, which a few parameters
learn from a few flows and which does not drift on flows it never saw.

**Training.** The training flows run as the scenes of one batch (`fluids.batchScenes`); the
loss is the mean of e(t)^2 over the snapshots every 10 steps of an H-step rollout
(checkpointed every 10 steps), its gradient reverse mode through the rollout (the
operators' reverse kernels, the model by torch); Adam. **Evaluation:** the held-out flows,
with and without the model, over 4 H steps: ``learnedErrorRatio`` = e_corrected(H) /
e_uncorrected(H), ``learnedErrorRatio4x`` the same at 4 H.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from ..dataTypes.domain import DomainDescription
from ..fluids.fields import randomFourierVelocity
from ..fluids.integrators import FluidState
from ..fluids.momentum import momentumAcceleration
from ..fluids.rollout import rollout
from ..fluids.scenes import batchScenes
from ..fluids.scheme import Linear, ParticleSet, Scheme, Term
from .common import fmt, pyplot

__all__ = ["run", "SETTINGS", "MomentumClosure", "LearnSetup"]

#: per size: (coarse n, training horizon H in coarse steps, training flows, held-out flows,
#: Adam iterations)
SETTINGS = {"tiny": (12, 10, 2, 1, 2), "small": (16, 20, 4, 2, 10),
            "default": (16, 40, 8, 4, 16)}
NU, C0, SPEED, RMS, MODES, REFINE, EVERY = 0.01, 10.0, 1.0, 0.3, 3, 3, 10
TRAIN_SEEDS, TEST_SEEDS = 100, 0  # the first seed of each group


class MomentumClosure(torch.nn.Module):
    """a = theta_0 nu L(u) + theta_1 a_p + theta_2 nu h^2 L(L(u)) (module docstring), a
    `Term("acceleration", ...)` of the scheme: called with the `TermContext` of each rate
    evaluation.

    Args:
        nu: the kinematic viscosity (scales the Laplacian features).
        spacing: the particle spacing h of the biharmonic feature.
    """

    def __init__(self, nu: float, spacing: float, dtype=torch.float64, device="cpu"):
        super().__init__()
        self.nu, self.h = float(nu), float(spacing)
        self.theta = torch.nn.Parameter(torch.zeros(3, dtype=dtype, device=device))

    def features(self, ctx):
        """``[3, N, d]``: nu L(u), the pressure acceleration, nu h^2 L(L(u))."""
        p, u = ctx.particles, ctx.velocities
        zero = torch.zeros_like(ctx.pressures)
        lap = momentumAcceleration(p, zero, u, ctx.domain, ctx.neighbours,
                                   dynamicViscosity=self.nu)
        pressure = momentumAcceleration(p, ctx.pressures, torch.zeros_like(u), ctx.domain,
                                        ctx.neighbours)
        biharmonic = momentumAcceleration(p, zero, lap, ctx.domain, ctx.neighbours,
                                          dynamicViscosity=self.h * self.h)
        return torch.stack((lap, pressure, biharmonic))

    def forward(self, ctx):
        return torch.einsum("k,knd->nd", self.theta, self.features(ctx))


class LearnSetup:
    """The coarse and fine lattices, the scheme and the flows (module docstring)."""

    def __init__(self, n: int, device="cpu", dtype=torch.float64):
        self.n, self.device, self.dtype = n, torch.device(device), dtype
        t = dict(dtype=dtype, device=self.device)
        self.domain = DomainDescription(torch.zeros(2, **t), torch.ones(2, **t), [True, True])
        self.coarseX, self.coarse = self._lattice(n)
        self.fineX, self.fine = self._lattice(REFINE * n)
        self.base = self.scheme()
        self.dt = self.base.timeStep(self.coarse, maxSpeed=SPEED)
        m = REFINE * n
        self.twins = torch.tensor([(REFINE * i + 1) * m + REFINE * j + 1 for i in range(n)
                                   for j in range(n)], device=self.device)

    def _lattice(self, n):
        t = dict(dtype=self.dtype, device=self.device)
        dx = 1.0 / n
        g = (torch.arange(n, **t) + 0.5) * dx
        x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
        N = x.shape[0]
        return x, ParticleSet(torch.full((N,), 4 * dx, **t), torch.full((N,), dx * dx, **t),
                              torch.zeros(N, dtype=torch.int32, device=self.device),
                              self.domain, dx)

    def scheme(self, model=None) -> Scheme:
        terms = (Term("acceleration", model, name="closure"),) if model is not None else ()
        return Scheme(rho0=1.0, c0=C0, equationOfState=Linear(), density="summation",
                      viscosity=NU, terms=terms)

    def batch(self, x, particles, seeds):
        """The flows `seeds` on the lattice (`x`, `particles`) as the scenes of one batch:
        ``(ParticleSet, FluidState)``."""
        return batchScenes([(particles, FluidState(x, randomFourierVelocity(
            x, self.domain, modes=MODES, rms=RMS, seed=s))) for s in seeds])

    def fineVelocities(self, seeds, steps: int) -> torch.Tensor:
        """The fine twins' velocities every `EVERY` coarse steps: ``[S, B, n^2, 2]``."""
        P, S = self.batch(self.fineX, self.fine, seeds)
        with torch.no_grad():
            tr = rollout(S, self.dt / REFINE, steps * REFINE, self.base.rates(P),
                         self.base.neighbours(P), stepper=self.base.stepper,
                         trajectoryEvery=EVERY * REFINE).trajectory
        v = tr.velocities.reshape(tr.velocities.shape[0], len(seeds), -1, 2)
        return v[:, :, self.twins]

    def coarseVelocities(self, seeds, steps: int, scheme: Scheme) -> torch.Tensor:
        """The coarse velocities every `EVERY` steps: ``[S, B, n^2, 2]`` (differentiable
        when grad mode is on; checkpointed in segments of `EVERY` steps)."""
        P, S = self.batch(self.coarseX, self.coarse, seeds)
        tr = rollout(S, self.dt, steps, scheme.rates(P), scheme.neighbours(P),
                     stepper=scheme.stepper, trajectoryEvery=EVERY,
                     checkpointEvery=EVERY if torch.is_grad_enabled() else None).trajectory
        return tr.velocities.reshape(tr.velocities.shape[0], len(seeds), -1, 2)


def velocityErrors(coarse: torch.Tensor, fine: torch.Tensor) -> torch.Tensor:
    """e(t) per snapshot ``[S]`` (module docstring)."""
    return ((coarse - fine).pow(2).sum((1, 2, 3)) / fine.pow(2).sum((1, 2, 3))).sqrt()


def _peakMemoryMB(device) -> float:
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _plot(path, curve, times, plain, corrected, horizon):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
    axes[0].semilogy(range(1, len(curve) + 1), curve, "o-")
    axes[0].set_xlabel("Adam iteration")
    axes[0].set_ylabel("training loss (rms of e)")
    axes[1].plot(times, plain, "o-", label="coarse")
    axes[1].plot(times, corrected, "s-", label="coarse + learned closure")
    axes[1].axvline(horizon, color="k", ls="--", lw=0.8, label="training horizon")
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("velocity error vs fine (held-out flows)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out: Path, size: str = "default", device="cpu", quiet: bool = False) -> dict:
    """Train and evaluate the closure (module docstring); figure ``learn.png`` in `out`."""
    n, horizon, nTrain, nTest, iterations = SETTINGS[size]
    setup = LearnSetup(n, device)
    train = list(range(TRAIN_SEEDS, TRAIN_SEEDS + nTrain))
    test = list(range(TEST_SEEDS, TEST_SEEDS + nTest))
    start = time.perf_counter()
    fineTrain = setup.fineVelocities(train, horizon)
    fineTest = setup.fineVelocities(test, 4 * horizon)
    referenceSeconds = time.perf_counter() - start
    with torch.no_grad():
        plain = velocityErrors(setup.coarseVelocities(test, 4 * horizon, setup.base),
                               fineTest)
    model = MomentumClosure(NU, setup.coarse.spacing, device=setup.device)
    scheme = setup.scheme(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    curve, iterSeconds = [], []
    t0 = time.perf_counter()
    for it in range(iterations):
        t1 = time.perf_counter()
        opt.zero_grad()
        e = velocityErrors(setup.coarseVelocities(train, horizon, scheme), fineTrain)
        loss = e[1:].pow(2).mean()
        loss.backward()
        opt.step()
        curve.append(math.sqrt(float(loss.detach())))
        iterSeconds.append(time.perf_counter() - t1)
        if not quiet:
            print(f"learn: iteration {it + 1}/{iterations}: rms error {curve[-1]:.4f}, "
                  f"theta {[round(float(v), 3) for v in model.theta.detach()]}", flush=True)
    trainSeconds = time.perf_counter() - t0
    with torch.no_grad():
        corrected = velocityErrors(setup.coarseVelocities(test, 4 * horizon, scheme),
                                   fineTest)
    k = horizon // EVERY
    ratio = float(corrected[k] / plain[k])
    ratio4 = float(corrected[4 * k] / plain[4 * k])
    peak = _peakMemoryMB(setup.device)
    times = [setup.dt * EVERY * s for s in range(plain.shape[0])]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "learn.png", curve, times, plain.tolist(), corrected.tolist(),
          setup.dt * horizon)
    theta = [float(v) for v in model.theta.detach()]
    perIter = sum(iterSeconds) / max(len(iterSeconds), 1)
    table = [("learn: error ratio at H / 4H", f"{ratio:.2f} / {ratio4:.2f}"),
             ("learn: training", f"{trainSeconds:.0f} s ({perIter:.1f} s / iteration)")]
    lines = [
        "## 6. Learning through the solver: a closure for a coarse scheme", "",
        f"A {n} x {n} weakly compressible scheme (summation density, plain momentum, "
        f"nu = {NU:g}, c0 = {C0:g}) corrected by a three-coefficient closure "
        "(`MomentumClosure`: the Morris Laplacian of u, the pressure acceleration and the "
        "biharmonic of u, each one Momentum-operator call) trained by Adam through "
        f"{horizon}-step differentiable rollouts of {nTrain} random Fourier flows run as the "
        f"scenes of one batch ({iterations} iterations), against a "
        f"{REFINE * n} x {REFINE * n} run of the same scheme (dt / {REFINE}). Evaluated on "
        f"{nTest} held-out flows over {4 * horizon} steps: the velocity error against each "
        "coarse particle's fine twin.", "",
        "| quantity | value |", "|---|---|",
        f"| velocity error at H = {horizon} steps: coarse / corrected | "
        f"{float(plain[k]):.4f} / {float(corrected[k]):.4f} |",
        f"| **learnedErrorRatio** (corrected / coarse at H) | {ratio:.3f} |",
        f"| velocity error at 4 H: coarse / corrected | "
        f"{float(plain[4 * k]):.4f} / {float(corrected[4 * k]):.4f} |",
        f"| **learnedErrorRatio4x** | {ratio4:.3f} |",
        f"| learned theta | {', '.join(fmt(v) for v in theta)} |",
        f"| training: {iterations} iterations | {trainSeconds:.1f} s ({perIter:.2f} s per "
        "iteration) |",
        f"| fine reference runs | {referenceSeconds:.1f} s |",
        f"| peak memory (process) | {peak:.0f} MB |", "",
        "![training curve and held-out errors](learn.png)", ""]
    return {"particles": n * n, "fineParticles": (REFINE * n) ** 2, "horizon": horizon,
            "trainingFlows": nTrain, "heldOutFlows": nTest, "iterations": iterations,
            "learnedErrorRatio": ratio, "learnedErrorRatio4x": ratio4,
            "uncorrectedError": float(plain[k]), "correctedError": float(corrected[k]),
            "uncorrectedError4x": float(plain[4 * k]),
            "correctedError4x": float(corrected[4 * k]),
            "errorTimes": times, "uncorrectedErrors": plain.tolist(),
            "correctedErrors": corrected.tolist(), "trainingCurve": curve,
            "theta": theta, "trainSeconds": trainSeconds, "secondsPerIteration": perIter,
            "referenceSeconds": referenceSeconds, "peakMemoryMB": peak,
            "report": "\n".join(lines), "table": table}
