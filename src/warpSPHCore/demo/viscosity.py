"""Demo part ``viscosity``, an inverse problem over a rollout: recover the
kinematic viscosity of a weakly compressible Taylor-Green flow from its velocity field after
K steps, by gradient descent through the simulation.

The flow: periodic unit square, U = 1, rho0 = 1, c0 = 10 U, support 4 dx, lattice start with
the analytic velocities, summation density, p = c0^2 (rho - rho0), the fused Momentum
operator (`fluids.momentumAcceleration`: pressure and Morris viscosity mu = rho0 nu in one
traversal), kick-drift-kick (`fluids.rollout`, checkpointed in segments of 10 steps), a new
neighbour search every step. The target is the velocity field u_K(nu*) with nu* = 0.01
(Re = 100). The loss

    L(nu) = sum_i |u_K,i(nu) - u_K,i(nu*)|^2 / sum_i |u_K,i(nu0) - u_K,i(nu*)|^2

(1 at the start nu0, which makes the first L-BFGS step of order one in log nu) is minimised
over theta = log nu by L-BFGS (strong Wolfe line search) from nu0 = 0.03; its
gradient comes from reverse mode through all K steps (the Momentum operator's Warp adjoint, the Density operator's,
torch for the rest). Before the descent, dL/dtheta is checked against a central difference.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from ..dataTypes.domain import DomainDescription
from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState
from ..enumTypes import KernelFunctions, SupportScheme, WarpOperation
from ..fluids.integrators import FluidState, Rates
from ..fluids.momentum import momentumAcceleration
from ..fluids.rollout import rollout
from ..neighborhood import radiusSearchCompactHashMap
from ..operations import warpOperation
from .common import fmt, pyplot

__all__ = ["run", "SETTINGS", "TRUE_VISCOSITY"]

KERNEL = KernelFunctions.Wendland2
#: (particles per axis, steps K, loss evaluations) per demo size
SETTINGS = {"tiny": (10, 10, 6), "small": (11, 15, 10), "default": (12, 20, 14)}
TRUE_VISCOSITY = 0.01
START_VISCOSITY = 0.03


class _Flow:
    """The Taylor-Green rollout of the module docstring, as a function of nu."""

    def __init__(self, n: int, steps: int, device):
        f64 = torch.float64
        self.steps, dx = steps, 1.0 / n
        g = (torch.arange(n, dtype=f64, device=device) + 0.5) * dx
        self.x0 = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
        N = self.x0.shape[0]
        s, c = torch.sin(2 * math.pi * self.x0), torch.cos(2 * math.pi * self.x0)
        self.u0 = torch.stack([-c[:, 0] * s[:, 1], s[:, 0] * c[:, 1]], 1)
        self.H = torch.full((N,), 4 * dx, dtype=f64, device=device)
        self.m = torch.full((N,), dx * dx, dtype=f64, device=device)
        self.kinds = torch.zeros(N, dtype=torch.int32, device=device)
        self.domain = DomainDescription(torch.zeros(2, dtype=f64, device=device),
                                        torch.ones(2, dtype=f64, device=device), [True, True])
        self.c0 = 10.0
        self.dt = 0.25 * dx / (self.c0 + 1.0)
        self.density = OperationProperties(KERNEL, operation=WarpOperation.Density)

    def neighbours(self, state: FluidState):
        """A new search at every rate evaluation (the neighbour policy of the rollout)."""
        x = torch.remainder(state.positions.detach(), 1.0)
        return radiusSearchCompactHashMap(ParticleState(x, self.H, self.m, self.kinds),
                                          self.domain, mode=SupportScheme.Gather)

    def rates(self, nu):
        def rateFn(state: FluidState, adj) -> Rates:
            x = torch.remainder(state.positions, 1.0)
            p0 = ParticleState(x, self.H, self.m, self.kinds)
            rho = warpOperation(p0, self.density, self.domain, adjacency=adj)
            particles = ParticleState(x, self.H, self.m, self.kinds, rho)
            a = momentumAcceleration(particles, self.c0 ** 2 * (rho - 1.0), state.velocities,
                                     self.domain, adj, dynamicViscosity=nu, kernel=KERNEL)
            return Rates(a)

        return rateFn

    def final(self, nu):
        """u_K(nu) ``[N, 2]``."""
        out = rollout(FluidState(self.x0, self.u0), self.dt, self.steps, self.rates(nu),
                      self.neighbours, checkpointEvery=10)
        return out.state.velocities


def _plot(path, nus, losses):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    axes[0].plot(nus, "o-")
    axes[0].axhline(TRUE_VISCOSITY, color="k", ls="--", label="true nu")
    axes[0].set_xlabel("loss evaluation")
    axes[0].set_ylabel("nu")
    axes[0].legend()
    axes[1].semilogy(losses, "o-")
    axes[1].set_xlabel("loss evaluation")
    axes[1].set_ylabel("loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out: Path, size: str = "default", device="cpu", quiet: bool = False) -> dict:
    """Recover nu (module docstring); figure ``viscosity.png`` in `out`."""
    n, steps, iterations = SETTINGS[size]
    flow = _Flow(n, steps, device)
    start = time.perf_counter()
    with torch.no_grad():
        target = flow.final(torch.tensor(TRUE_VISCOSITY, dtype=torch.float64, device=device))
        scale = (flow.final(torch.tensor(START_VISCOSITY, dtype=torch.float64, device=device))
                 - target).pow(2).sum()

    def loss(theta):
        return (flow.final(torch.exp(theta)) - target).pow(2).sum() / scale

    theta = torch.tensor(math.log(START_VISCOSITY), dtype=torch.float64, device=device,
                         requires_grad=True)
    (grad,) = torch.autograd.grad(loss(theta), theta)
    eps = 1e-4
    with torch.no_grad():
        fd = (loss(theta + eps) - loss(theta - eps)) / (2 * eps)
    gradErr = float((grad - fd).abs() / fd.abs())
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations, max_eval=iterations,
                            tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")
    nus, losses = [], []

    def closure():
        opt.zero_grad()
        value = loss(theta)
        value.backward()
        nus.append(float(torch.exp(theta.detach())))
        losses.append(float(value.detach()))
        return value

    opt.step(closure)
    seconds = time.perf_counter() - start
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "viscosity.png", nus, losses)
    best = min(range(len(losses)), key=losses.__getitem__)
    nu = nus[best]
    relErr = abs(nu - TRUE_VISCOSITY) / TRUE_VISCOSITY
    table = [("viscosity: recovered nu", f"{fmt(nu)} (true {TRUE_VISCOSITY:g})"),
             ("viscosity: gradient vs central difference", f"{gradErr:.1e}")]
    lines = [
        "## 5. Inverse problem over a rollout: the viscosity", "",
        f"A {n} x {n} Taylor-Green flow run for {steps} kick-drift-kick steps with the fused "
        f"Momentum operator; nu recovered from the final velocity field by L-BFGS on log nu "
        f"({len(losses)} loss evaluations from nu = {START_VISCOSITY:g}), the gradient by "
        f"reverse mode through the whole rollout (checkpointed every 10 steps).", "",
        "| quantity | value |", "|---|---|",
        f"| recovered nu (true {TRUE_VISCOSITY:g}) | {fmt(nu)} |",
        f"| relative error | {relErr:.2e} |",
        f"| loss at the recovered nu | {fmt(losses[best])} |",
        f"| dL/dlog(nu) against a central difference (relative) | {gradErr:.1e} |",
        f"| time | {seconds:.1f} s |", "",
        "![viscosity recovery](viscosity.png)", ""]
    return {"particles": n * n, "steps": steps, "lossEvaluations": len(losses),
            "recoveredViscosity": nu, "trueViscosity": TRUE_VISCOSITY,
            "viscosityRelErr": relErr, "losses": losses, "viscosities": nus,
            "gradientVsCentralDifference": gradErr, "seconds": seconds,
            "report": "\n".join(lines), "table": table}
