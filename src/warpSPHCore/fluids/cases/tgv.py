"""The 2D Taylor-Green vortex at Re = 100 (`warpsph run tgv`), with the transport-velocity
scheme of benchmarks/studies/tgv_transport_velocity.py (docs/fluids.md).

Periodic unit square, U = 1, rho0 = 1, nu = U L / Re, c0 = 10 U, p = c0^2 (rho - rho0),
p_b = pb rho0 c0^2, Wendland C2 with support H = support * dx:

    u = -U cos(2 pi x) sin(2 pi y) e(t),  v = U sin(2 pi x) cos(2 pi y) e(t),
    e(t) = exp(-8 pi^2 nu t),  kinetic energy E(t) = (M U^2 / 4) e(t)^2 (M = 1: 0.25)

* start: the lattice relaxed by `fluids.relaxParticles` (``relax`` pseudo-time steps, jitter
  ``jitter`` dx), the analytic velocities at the relaxed positions;
* rates (`taylorGreenRates`): V_i = 1 / sum_j W_ij (`numberDensityVolumes`), rho_i = m_i / V_i,
  the momentum of Adami, Hu & Adams (2013) and the background-pressure acceleration from one
  traversal of the fused Momentum operator (`transportVelocityAccelerations`): one density
  pass and one momentum pass per step;
* time integration: `transport.transportKickDriftKick` in the loop (`fluids.loop`, Verlet
  skin), dt = min(0.25 dx / (c0 + U), 0.125 dx^2 / nu), shortened to land on t.

`run(config, out)` writes ``results.json`` and ``tgv.png`` (kinetic energy per unit mass
against 0.25 exp(-16 pi^2 t / Re), the maximum speed against exp(-8 pi^2 t / Re), the final
particles). The errors at t: ``kineticEnergyRelErr`` = E(t) / (E_0 e(t)^2) - 1 with E_0 the
discrete initial energy (the study's measure), ``kineticEnergyRelErrAnalytic`` = E(t) /
(M U^2 / 4 e(t)^2) - 1, ``velocityL2RelErr`` = |u - u_exact(x)| / |u_exact(x)| at the final
positions. The defaults are the acceptance size (n = 50, t = 1, 600 relaxation
steps: -3.6 % and 3.8 % in the study).

``threads`` (default 1) sets torch's CPU threads for the run: the edge sums at these sizes
gain nothing from intra-op threads, and on a loaded two-core machine two threads made a step
30 times slower (334 ms against 10.8 ms at n = 20, measured back to back).

"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...dataTypes.domain import DomainDescription
from ...enumTypes import KernelFunctions
from ..integrators import FluidState
from ..relaxation import relaxParticles
from ..scheme import Linear, ParticleSet, Scheme, TransportVelocity
from ._common import THREADS_HELP, caseSimulation, option, torchThreads

__all__ = ["TaylorGreenConfig", "TaylorGreen", "setup", "taylorGreenScheme",
           "taylorGreenParticles", "taylorGreenRates", "taylorGreenVelocity", "run"]

KERNEL = KernelFunctions.Wendland2



@dataclass(frozen=True)
class TaylorGreenConfig:
    """Parameters of the Taylor-Green case (module docstring); the defaults are the
    acceptance size."""

    n: int = option(50, "particles per axis (dx = 1 / n)")
    t: float = option(1.0, "end time")
    relax: int = option(600, "relaxation steps of the start (0: lattice)")
    support: float = option(4.0, "support H in particle spacings")
    pb: float = option(1.0, "background pressure p_b / (rho0 c0^2) of the transport velocity "
                          "(0: the transport stepper without a background pressure)")
    re: float = option(100.0, "Reynolds number U L / nu")
    u: float = option(1.0, "velocity amplitude U")
    jitter: float = option(0.5, "jitter of the relaxation start, in dx")
    skin: float = option(0.1, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    seed: int = option(0, "seed of the relaxation jitter")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if self.n < 4 or self.t < 0 or self.relax < 0 or self.support <= 0 or self.re <= 0:
            raise ValueError(f"TaylorGreenConfig: n={self.n}, t={self.t}, relax={self.relax}, "
                             f"support={self.support}, re={self.re}; accepted: n >= 4, t >= 0, "
                             "relax >= 0, support > 0, re > 0")
        if self.support * (1.0 + self.skin) >= 0.5 * self.n:
            raise ValueError(f"TaylorGreenConfig: support (1 + skin) = "
                             f"{self.support * (1 + self.skin):g} dx must stay below half the "
                             f"box, {0.5 * self.n:g} dx; use a larger n or a smaller support")
        if self.threads < 0:
            raise ValueError(f"TaylorGreenConfig: threads={self.threads}; accepted: >= 0")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"TaylorGreenConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")


def taylorGreenVelocity(x: torch.Tensor, amplitude, decay=1.0) -> torch.Tensor:
    """The analytic velocities (module docstring).

    Args:
        x: ``[N, 2]`` positions.
        amplitude: U (number or 0-dim tensor; differentiable).
        decay: e(t) (1 at t = 0).

    Returns:
        ``[N, 2]`` velocities U e(t) (-cos(2 pi x) sin(2 pi y), sin(2 pi x) cos(2 pi y)).
    """
    s, c = torch.sin(2 * math.pi * x), torch.cos(2 * math.pi * x)
    return torch.stack([-c[:, 0] * s[:, 1], s[:, 0] * c[:, 1]], 1) * (amplitude * decay)


@dataclass
class TaylorGreen:
    """A set-up case (`setup`): the start, the constants and the time step."""

    config: TaylorGreenConfig
    positions: torch.Tensor
    velocities: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    kinds: torch.Tensor
    domain: DomainDescription
    dx: float
    nu: float
    c0: float
    rho0: float
    dt: float
    steps: int
    relaxSeconds: float


def setup(config: TaylorGreenConfig) -> TaylorGreen:
    """The relaxed start of `config` (module docstring).

    Args:
        config: `TaylorGreenConfig`.

    Returns:
        `TaylorGreen`: the start positions and velocities, constants and time step.
    """
    dtype = getattr(torch, config.dtype)
    device = torch.device(config.device)
    t = dict(dtype=dtype, device=device)
    n, U = config.n, config.u
    dx, nu, rho0 = 1.0 / n, U / config.re, 1.0
    c0 = 10.0 * U
    g = (torch.arange(n, **t) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    N = x.shape[0]
    H = torch.full((N,), config.support * dx, **t)
    domain = DomainDescription(torch.zeros(2, **t), torch.ones(2, **t), [True, True])
    start = time.perf_counter()
    if config.relax:
        x = relaxParticles(x, H, domain, iterations=config.relax, jitter=config.jitter,
                           kernel=KERNEL, seed=config.seed)
    relaxSeconds = time.perf_counter() - start
    dt = min(0.25 * dx / (c0 + U), 0.125 * dx * dx / nu)
    steps = max(1, math.ceil(config.t / dt)) if config.t > 0 else 0
    dt = config.t / steps if steps else dt
    return TaylorGreen(config, x, taylorGreenVelocity(x, U), H,
                       torch.full((N,), rho0 * dx * dx, **t),
                       torch.zeros(N, dtype=torch.int32, device=device), domain, dx, nu, c0,
                       rho0, dt, steps, relaxSeconds)


def taylorGreenScheme(case: TaylorGreen, viscosity=None, backgroundPressure=None) -> Scheme:
    """The `Scheme` of the case (module docstring): summation density through the
    number-density volumes, the linear equation of state, the transport velocity.

    Args:
        case: the set-up case (`setup`).
        viscosity: the dynamic viscosity mu (None: rho0 nu of the config; a tensor is
            differentiable).
        backgroundPressure: p_b (None: pb rho0 c0^2 of the config).
    """
    mu = case.rho0 * case.nu if viscosity is None else viscosity
    pb = case.config.pb * case.rho0 * case.c0**2 if backgroundPressure is None \
        else backgroundPressure
    return Scheme(rho0=case.rho0, c0=case.c0, equationOfState=Linear(), density="summation",
                  viscosity=mu / case.rho0, transportVelocity=TransportVelocity(pb),
                  kernel=KERNEL)


def taylorGreenParticles(case: TaylorGreen) -> ParticleSet:
    """The case's `ParticleSet` (supports, masses, kinds, the periodic box, dx)."""
    return ParticleSet(case.supports, case.masses, case.kinds, case.domain, case.dx)


def taylorGreenRates(case: TaylorGreen, viscosity=None, backgroundPressure=None):
    """The rate function ``rates(state, neighbours) -> TransportRates`` of the case
    (`taylorGreenScheme` on `taylorGreenParticles`).

    Args:
        case: the set-up case (`setup`).
        viscosity: the dynamic viscosity mu (None: rho0 nu of the config; a tensor is
            differentiable).
        backgroundPressure: p_b (None: pb rho0 c0^2 of the config).

    Returns:
        The rate function for `Simulation` or `rollout` (with `transportKickDriftKick`).
    """
    return taylorGreenScheme(case, viscosity, backgroundPressure).rates(
        taylorGreenParticles(case))


def _figure(path: Path, history: dict, case: TaylorGreen, x, speed) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    tt = np.asarray(history["time"])
    k = 8.0 * math.pi**2 * case.nu
    U = case.config.u
    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(14, 4.2))
    a0.semilogy(tt, history["kineticEnergy"], label="SPH")
    a0.semilogy(tt, 0.25 * U**2 * np.exp(-2.0 * k * tt), "k--",
                label=r"$0.25\,U^2 e^{-16\pi^2 t/Re}$")
    a0.set_xlabel("t")
    a0.set_ylabel("kinetic energy per unit mass")
    a0.legend()
    a1.semilogy(tt, history["maxVelocity"], label="SPH")
    a1.semilogy(tt, U * np.exp(-k * tt), "k--", label=r"$U e^{-8\pi^2 t/Re}$")
    a1.set_xlabel("t")
    a1.set_ylabel("max |u|")
    a1.legend()
    sc = a2.scatter(x[:, 0], x[:, 1], c=speed, s=max(1.0, 2000.0 / x.shape[0]), cmap="viridis")
    a2.set_aspect("equal")
    a2.set_xlim(0, 1)
    a2.set_ylim(0, 1)
    a2.set_title(f"|u| at t = {case.config.t:g}")
    fig.colorbar(sc, ax=a2, shrink=0.85)
    fig.suptitle(f"Taylor-Green vortex, Re = {case.config.re:g}, {x.shape[0]} particles, "
                 f"H = {case.config.support:g} dx")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: TaylorGreenConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case: writes ``results.json`` and ``tgv.png`` (and frames when
    ``config.frames``) into `out`.

    Args:
        config: `TaylorGreenConfig`.
        out: the output folder (created).
        writer: the frame writer (`warpSPHCore.io.writeParticles`), needed with frames.
        quiet: no progress bar.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, Path(out), writer, quiet)


def _run(config: TaylorGreenConfig, out: Path, writer, quiet: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config)
    m, U, M = case.masses, config.u, float(case.masses.sum())
    sim = caseSimulation(config, out, writer, quiet, taylorGreenScheme(case),
                         taylorGreenParticles(case), FluidState(case.positions, case.velocities),
                         case.dt, maxSpeed=config.u)

    def kinetic(v):
        return 0.5 * (m[:, None] * v**2).sum()

    energies = [kinetic(sim.state.velocities)]
    speeds = [torch.linalg.vector_norm(sim.state.velocities, dim=1).amax()]

    def record(s):  # 0-dim tensors, read back once at the end
        energies.append(kinetic(s.state.velocities))
        speeds.append(torch.linalg.vector_norm(s.state.velocities, dim=1).amax())

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(case.steps, callback=record)
    seconds = time.perf_counter() - start
    energy = torch.stack(energies).cpu().double()
    speed = torch.stack(speeds).cpu().double()
    times = torch.arange(case.steps + 1, dtype=torch.float64) * case.dt
    decay = math.exp(-8.0 * math.pi**2 * case.nu * config.t)
    x, v = sim.state.positions, sim.state.velocities
    exact = taylorGreenVelocity(x, U, decay)
    steps = case.steps
    e0, eT = float(energy[0]), float(energy[-1])
    stride = max(1, steps // 200)
    keep = list(range(0, steps + 1, stride)) + ([steps] if steps % stride else [])
    history = {"time": times[keep].tolist(), "kineticEnergy": (energy[keep] / M).tolist(),
               "maxVelocity": speed[keep].tolist()}
    figure = out / "tgv.png"
    _figure(figure, history, case, x.detach().cpu().double().numpy(),
            torch.linalg.vector_norm(v, dim=1).detach().cpu().double().numpy())
    N = x.shape[0]
    results = {
        "case": "tgv",
        "kineticEnergyRelErr": eT / (e0 * decay**2) - 1.0,
        "kineticEnergyRelErrAnalytic": eT / (0.25 * M * U**2 * decay**2) - 1.0,
        "velocityL2RelErr": float(torch.linalg.vector_norm(v - exact)
                                  / torch.linalg.vector_norm(exact)),
        "maxVelocityRelErr": float(speed[-1]) / (U * decay) - 1.0,
        "msPerStep": seconds / steps * 1e3 if steps else None,
        "particleStepsPerSecond": N * steps / seconds if steps else None,
        "particles": N,
        "steps": steps,
        "dx": case.dx,
        "t": config.t,
        "dt": case.dt,
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "relaxSeconds": case.relaxSeconds,
        "seconds": seconds,
        "frames": [str(p) for p in sim.frames],
        "figure": str(figure),
        "config": asdict(config),
        "history": history,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
