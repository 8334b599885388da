"""A tank of water at rest (`warpsph run hydrostatic`): the hydrostatic pressure must hold,
the fluid must stay at rest and inside its walls, for a long time.

Geometry: a 2D tank of depth H and width ``width`` H (walls at x = 0, x = width H and
y = 0, open top), filled to y = H, g = ``g`` along -y. The start is the exact hydrostatic
state of the Tait equation (`Tait.hydrostaticPressure`: dp/dy = -rho(p) g, p(H) = 0; rho0 g
(H - y) to first order), rho its inverse, masses rho dx^2 (`hydrostaticStart`).

The scheme (`tankScheme`) is the one a user builds for a wall-bounded free-surface flow:
the Tait equation (gamma = 7) with c0 = ``mach`` sqrt(2 g H) (`referenceSoundSpeed`, the
one sound-speed rule), the continuity equation with the delta-SPH diffusion (``diffusion``,
``delta``: by default the Molteni-Colagrossi term of the densities minus their hydrostatic
part, Fourtakas et al. 2019, which is zero at rest), the artificial viscosity alpha in its
Morris form (alpha = 0.1: the square lattice rearranges under the hydrostatic load after a
few sqrt(H/g), and a larger viscosity damps the velocities of that event, docs/fluids.md),
dummy-particle walls of Adami et al. 2012 (no-slip by default) with volumes dx^2, the
pressure clipped at 0 (a free surface), gravity; the stepper and the time step are the
scheme's (`Scheme.stepper`: predictor-corrector with integrated densities;
`Scheme.timeStep`: 0.25 dx / c0), or ``stepper`` names another one (``kickDriftKick`` shows
the instability the default avoids).

Measures at the end time ``tEnd`` sqrt(H / g) (`results.json`):

* ``pressureL2RelErr``: |p - p_exact(y)| / |p_exact(y)| over the fluid particles (their
  pressures from the densities by the equation of state; p_exact the exact hydrostatic
  pressure at their current heights, `exactPressure`);
  ``centreLinePressureL2RelErr`` the same over the particles within dx of the centre line;
* ``maxSpeed``: max |u| of the fluid over the run's last tenth, in sqrt(g H);
* ``surfaceDrift``: the mean vertical displacement of the particles of the initial top
  row, in H;
* ``particlesLeft``: fluid particles outside the tank (beyond a wall face) at the end;
  ``wallCrossings``: the health monitor's wall-crossing events during the run.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...dataTypes.domain import DomainDescription
from ...enumTypes import KernelFunctions, ParticleType
from ..eos import referenceSoundSpeed
from ..health import boxContainer
from ..integrators import FluidState, kickDriftKick, predictorCorrector, symplecticEuler
from ..scheme import (
    ArtificialViscosity,
    DensityDiffusion,
    ParticleSet,
    Scheme,
    Tait,
    Walls,
    hydrostaticStart,
)
from ..walls import boxParticles
from ._common import THREADS_HELP, caseSimulation, option, torchThreads

__all__ = ["HydrostaticConfig", "Tank", "setup", "tankScheme", "exactPressure", "run"]

KERNEL = KernelFunctions.Wendland2
_STEPPERS = {"default": None, "kickDriftKick": kickDriftKick,
             "predictorCorrector": predictorCorrector, "symplecticEuler": symplecticEuler}


@dataclass(frozen=True)
class HydrostaticConfig:
    """Parameters of the hydrostatic tank (module docstring); the defaults are the
    acceptance size."""

    n: int = option(40, "particles across the depth H (dx = H / n)")
    width: float = option(2.0, "tank width in units of H")
    tEnd: float = option(10.0, "end time in units of sqrt(H / g)")
    H: float = option(1.0, "depth H")
    g: float = option(1.0, "gravity |g|")
    rho0: float = option(1.0, "reference density")
    mach: float = option(10.0, "c0 / sqrt(2 g H)")
    support: float = option(3.0, "support H_kernel in particle spacings")
    diffusion: str = option("fourtakas", "delta-SPH density diffusion: fourtakas, molteni, "
                            "antuono or none")
    delta: float = option(0.1, "delta-SPH coefficient")
    alpha: float = option(0.1, "artificial viscosity alpha (Morris form, nu = alpha dx c0 / 8)")
    noSlip: bool = option(True, "no-slip walls (False: free-slip)")
    stepper: str = option("default", "time integration: default (the scheme's), "
                          "kickDriftKick, predictorCorrector or symplecticEuler")
    cfl: float = option(0.25, "acoustic coefficient of the time step")
    skin: float = option(0.2, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if (self.n < 4 or not self.width > 0 or not self.tEnd >= 0 or not self.H > 0
                or not self.g > 0 or not self.rho0 > 0 or not self.mach > 0
                or not self.support > 0 or not self.delta >= 0 or not self.alpha >= 0
                or not self.cfl > 0 or self.threads < 0):
            raise ValueError(
                f"HydrostaticConfig: n={self.n}, width={self.width}, tEnd={self.tEnd}, "
                f"H={self.H}, g={self.g}, rho0={self.rho0}, mach={self.mach}, "
                f"support={self.support}, delta={self.delta}, alpha={self.alpha}, "
                f"cfl={self.cfl}, threads={self.threads}; accepted: n >= 4, tEnd >= 0, "
                "threads >= 0, delta, alpha >= 0, the others > 0")
        if abs(self.width * self.n - round(self.width * self.n)) > 1e-9:
            raise ValueError(f"HydrostaticConfig: width * n = {self.width * self.n:g}; "
                             "accepted: a whole number of particle spacings")
        if self.diffusion not in ("molteni", "fourtakas", "antuono", "none"):
            raise ValueError(f"HydrostaticConfig: diffusion={self.diffusion!r}; accepted: "
                             "molteni, fourtakas, antuono, none")
        if self.stepper not in _STEPPERS:
            raise ValueError(f"HydrostaticConfig: stepper={self.stepper!r}; accepted: "
                             f"{', '.join(_STEPPERS)}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"HydrostaticConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")


@dataclass
class Tank:
    """A set-up tank (`setup`): the scheme, the particles, the start and the time step."""

    config: HydrostaticConfig
    scheme: Scheme
    particles: ParticleSet
    state: FluidState
    fluidCount: int
    dx: float
    c0: float
    dt: float
    steps: int


def tankScheme(config: HydrostaticConfig, dx: float) -> Scheme:
    """The scheme of the tank (module docstring)."""
    c0 = referenceSoundSpeed(0.0, config.g, config.H, config.mach)
    diffusion = None if config.diffusion == "none" else DensityDiffusion(config.diffusion,
                                                                         config.delta)
    return Scheme(rho0=config.rho0, c0=c0, equationOfState=Tait(), density="continuity",
                  artificialViscosity=ArtificialViscosity(config.alpha) if config.alpha
                  else None, densityDiffusion=diffusion, walls=Walls(noSlip=config.noSlip),
                  bodyForce=(0.0, -config.g), clampPressure=True, kernel=KERNEL,
                  cfl=config.cfl)


def setup(config: HydrostaticConfig) -> Tank:
    """The hydrostatic start of `config` (module docstring)."""
    t = dict(dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    H, n = config.H, config.n
    dx = H / n
    width = round(config.width * n) * dx
    layers = max(1, math.ceil(config.support - 1e-9))
    sides = ("-x", "+x", "-y")
    x, kinds = boxParticles((0.0, 0.0), (width, H), dx, layers, sides, **t)
    scheme = tankScheme(config, dx)
    rho, m, _ = hydrostaticStart(scheme, x, kinds, dx, H)
    pad = (layers + 1) * dx
    domain = DomainDescription(torch.tensor([-pad, -pad], **t),
                               torch.tensor([width + pad, 2.0 * H], **t), [False, False])
    particles = ParticleSet(torch.full_like(rho, config.support * dx), m, kinds, domain, dx,
                            container=boxContainer((0.0, 0.0), (width, H), sides, **t))
    nf = int((kinds == int(ParticleType.Fluid)).sum())  # setup only
    tEnd = config.tEnd * math.sqrt(H / config.g)
    dt = scheme.timeStep(particles)
    steps = max(1, math.ceil(tEnd / dt - 1e-9)) if tEnd > 0 else 0
    dt = tEnd / steps if steps else dt
    return Tank(config, scheme, particles, FluidState(x, torch.zeros_like(x), rho), nf, dx,
                scheme.c0, dt, steps)


def exactPressure(tank: Tank, positions):
    """The exact hydrostatic pressure of the scheme's equation of state at the heights of
    `positions` (`Tait.hydrostaticPressure`)."""
    cfg = tank.config
    return tank.scheme.equationOfState.hydrostaticPressure(cfg.H - positions[..., 1],
                                                           cfg.rho0, tank.c0, cfg.g)


def _pressureError(tank: Tank, state, rows) -> float:
    cfg = tank.config
    p = tank.scheme.equationOfState.pressure(state.densities, cfg.rho0, tank.c0)[rows]
    exact = exactPressure(tank, state.positions[rows])
    return float(torch.linalg.vector_norm(p - exact) / torch.linalg.vector_norm(exact))


def _figure(path: Path, tank: Tank, history: dict, x, p) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg, nf = tank.config, tank.fluidCount
    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(15, 4.2))
    a0.semilogy(history["T"], history["maxSpeed"])
    a0.axhline(0.01, color="k", ls=":", lw=1)
    a0.set_xlabel(r"$t\,\sqrt{g/H}$")
    a0.set_ylabel(r"max $|u| / \sqrt{gH}$")
    a1.plot(history["T"], [100 * e for e in history["pressureL2RelErr"]])
    a1.axhline(1.0, color="k", ls=":", lw=1)
    a1.set_xlabel(r"$t\,\sqrt{g/H}$")
    a1.set_ylabel("pressure L2 error [%]")
    s = max(0.5, 3000.0 / x.shape[0])
    a2.scatter(x[nf:, 0], x[nf:, 1], c="0.6", s=s)
    sc = a2.scatter(x[:nf, 0], x[:nf, 1], c=p[:nf], s=s, cmap="viridis")
    a2.set_aspect("equal")
    fig.colorbar(sc, ax=a2, shrink=0.8, label="p")
    fig.suptitle(f"Hydrostatic tank, H/dx = {cfg.n}, {x.shape[0]} particles ({nf} fluid), "
                 f"stepper {history['stepper']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: HydrostaticConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the tank: writes ``results.json`` and ``hydrostatic.png`` (and frames) into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, Path(out), writer, quiet)


def _run(config: HydrostaticConfig, out: Path, writer, quiet: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    tank = setup(config)
    nf, dx, H = tank.fluidCount, tank.dx, config.H
    scheme = tank.scheme
    sim = caseSimulation(config, out, writer, quiet, scheme, tank.particles, tank.state,
                         tank.dt, wrap=False, stepper=_STEPPERS[config.stepper],
                         frameFields=lambda s, _r: {"pressures": scheme.equationOfState.pressure(
                             s.densities, config.rho0, tank.c0)})
    x0 = tank.state.positions
    top = (torch.arange(x0.shape[0], device=x0.device) < nf) & (x0[:, 1] > H - dx)
    centre = (torch.arange(x0.shape[0], device=x0.device) < nf) & (
        (x0[:, 0] - 0.5 * config.width * H).abs() < dx)
    every = max(1, tank.steps // 100)
    speeds, errors, times = [], [], []

    def record(s):  # 0-dim tensors, read back at the end
        if s.step % every == 0 or s.step == tank.steps:
            u = s.state.velocities[:nf]
            speeds.append(torch.linalg.vector_norm(u, dim=1).amax())
            p = scheme.equationOfState.pressure(s.state.densities[:nf], config.rho0, tank.c0)
            exact = exactPressure(tank, s.state.positions[:nf])
            errors.append(torch.linalg.vector_norm(p - exact) / torch.linalg.vector_norm(exact))
            times.append(s.step * tank.dt)

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(tank.steps, callback=record)
    seconds = time.perf_counter() - start
    state = sim.state
    scale = math.sqrt(config.g * H)
    T = [t / math.sqrt(H / config.g) for t in times]
    speed = (torch.stack(speeds).cpu().double() / scale).tolist() if speeds else []
    err = torch.stack(errors).cpu().double().tolist() if errors else []
    tail = [v for v, tt in zip(speed, T) if tt >= 0.9 * config.tEnd] or speed[-1:]
    x = state.positions.detach().cpu().double()
    fluid = torch.arange(x.shape[0]) < nf
    lo, hi = (t.cpu().double() for t in tank.particles.container)
    outside = fluid & ((x < lo) | (x > hi)).any(1)
    results = {
        "case": "hydrostatic",
        "pressureL2RelErr": _pressureError(tank, state, slice(0, nf)),
        "centreLinePressureL2RelErr": _pressureError(tank, state, centre),
        "maxSpeed": max(tail) if tail else 0.0,
        "maxSpeedFinal": speed[-1] if speed else 0.0,
        "surfaceDrift": float((state.positions[top, 1] - x0[top, 1]).mean() / H),
        "particlesLeft": int(outside.sum()),
        "wallCrossings": sum(1 for e in sim.monitor.events if e.check == "wallCrossing")
        if sim.monitor is not None else None,
        "finite": bool(torch.isfinite(x).all() and torch.isfinite(state.densities).all()),
        "stepper": getattr(sim.stepper, "__name__", str(sim.stepper)),
        "msPerStep": seconds / tank.steps * 1e3 if tank.steps else None,
        "particles": x.shape[0],
        "fluidParticles": nf,
        "steps": tank.steps,
        "dx": dx,
        "dt": tank.dt,
        "c0": tank.c0,
        "tEnd": config.tEnd,
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "seconds": seconds,
        "config": asdict(config),
        "history": {"T": T, "maxSpeed": speed, "pressureL2RelErr": err},
    }
    figure = out / "hydrostatic.png"
    p = scheme.equationOfState.pressure(state.densities, config.rho0, tank.c0)
    _figure(figure, tank, dict(results["history"], stepper=results["stepper"]), x.numpy(),
            p.detach().cpu().double().numpy())
    results["figure"] = str(figure)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results

