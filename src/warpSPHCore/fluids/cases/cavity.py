"""The lid-driven cavity at Re = 100 (`warpsph run cavity`), against the centre-line
velocities of Ghia, Ghia & Shin (1982, J. Comput. Phys. 48: 387-411), with the
transport-velocity formulation of Adami, Hu & Adams (2013, J. Comput. Phys. 241: 292-307),
who show this case.

The unit square, ``n`` x ``n`` fluid particles on a lattice at rest at t = 0, inside
``layers`` = ceil(support) layers of dummy wall particles on every side (Adami, Hu & Adams
2012). The top wall (every wall particle with y > 1, the two upper corners included) is the
lid: a no-slip wall moving with U = 1 along x. Its particles do not move (a tangentially
moving infinite wall); U enters through the wall velocity u_w = 2 U e_x - utilde_w of the
viscous term. Nondimensional: L = U = rho0 = 1, nu = U L / Re, c0 = 10 U,
p = c0^2 (rho - rho0), p_b = pb rho0 c0^2.

Scheme: `poiseuille.wallBoundedRates` (summation density through the number-density
volumes over fluid and walls, the Adami 2012 wall pressure, density and velocity, the fused
momentum with the transport-velocity stress and the background pressure, interaction FluidQueriesNonGhostReferences), time
integration by `transport.transportKickDriftKick` in the loop (Verlet skin), with
dt = min(0.25 dx / (c0 + U), 0.125 dx^2 / nu), shortened to land on t. No body force.

Comparison (`centerlineProfiles`): the velocities at the 15 interior points of each of
Ghia et al.'s Re = 100 centre-line tables (`GHIA_RE100_U`, `GHIA_RE100_V`; their end points
are the boundary conditions u = 1, 0 and are left out) are Shepard interpolations
sum_j u_j W_j / sum_j W_j (Wendland C2, the particles' support) over the fluid *and* the wall
particles, the walls carrying their no-slip velocities 2 u_wall - utilde_w, which continue
the fluid's profile through the wall as the viscous term sees it. The probe velocities are
averaged over the last ``average`` time units of the run (a sample every 0.05 L / U), which
removes the particle noise of a single instant. ``centerlineMaxErr`` is the largest
|u - u_Ghia| and |v - v_Ghia| of these averages over both lines, divided by U;
``centerlineMaxErrFinalState`` the same of the final state alone;
``centerlineErrHistory`` the instantaneous error at ``checks`` equally spaced times (the
convergence to the steady state). The figure's dense centre lines are the final state.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ...dataTypes.domain import DomainDescription
from ...dataTypes.particleState import ParticleState
from ...enumTypes import KernelFunctions, ParticleType
from ...kernels.constants import kernelC_d
from ..health import boxContainer
from ..integrators import FluidState
from ..scheme import ParticleSet, Scheme
from ..walls import boxParticles, wallVelocities
from ._common import THREADS_HELP, caseSimulation, option, torchThreads
from .poiseuille import wallBoundedScheme

__all__ = ["CavityConfig", "Cavity", "setup", "cavityRates", "centerlineProfiles",
           "cavityScheme", "cavityParticles", "GHIA_RE100_Y", "GHIA_RE100_U", "GHIA_RE100_X", "GHIA_RE100_V", "run"]

KERNEL = KernelFunctions.Wendland2

# Ghia, Ghia & Shin (1982), J. Comput. Phys. 48: 387-411, Table I (u along the vertical
# centre line x = 0.5) and Table II (v along the horizontal centre line y = 0.5), Re = 100,
# the 129 x 129 grid; lid speed 1, unit cavity.
GHIA_RE100_Y = (1.0000, 0.9766, 0.9688, 0.9609, 0.9531, 0.8516, 0.7344, 0.6172, 0.5000,
                0.4531, 0.2813, 0.1719, 0.1016, 0.0703, 0.0625, 0.0547, 0.0000)
GHIA_RE100_U = (1.00000, 0.84123, 0.78871, 0.73722, 0.68717, 0.23151, 0.00332, -0.13641,
                -0.20581, -0.21090, -0.15662, -0.10150, -0.06434, -0.04775, -0.04192,
                -0.03717, 0.00000)
GHIA_RE100_X = (1.0000, 0.9688, 0.9609, 0.9531, 0.9453, 0.9063, 0.8594, 0.8047, 0.5000,
                0.2344, 0.2266, 0.1563, 0.0938, 0.0781, 0.0703, 0.0625, 0.0000)
GHIA_RE100_V = (0.00000, -0.05906, -0.07391, -0.08864, -0.10313, -0.16914, -0.22445,
                -0.24533, 0.05454, 0.17527, 0.17507, 0.16077, 0.12317, 0.10890, 0.10091,
                0.09233, 0.00000)



@dataclass(frozen=True)
class CavityConfig:
    """Parameters of the lid-driven cavity (module docstring); the defaults are the
    acceptance size."""

    n: int = option(40, "fluid particles per axis (dx = 1 / n)")
    t: float = option(10.0, "end time (L / U)")
    re: float = option(100.0, "Reynolds number U L / nu")
    support: float = option(3.0, "support H in particle spacings")
    pb: float = option(1.0, "background pressure p_b / (rho0 c0^2) of the transport velocity "
                          "(0: the transport stepper without a background pressure)")
    average: float = option(1.0, "time window at the end of the run over which the centre-line "
                               "velocities are averaged (0: the final state only; at most t)")
    checks: int = option(10, "centre-line error evaluations over the run (convergence history)")
    skin: float = option(0.1, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if self.n < 4 or self.t < 0 or self.support <= 0 or self.re <= 0 or self.pb < 0 \
                or self.checks < 1 or not self.average >= 0:
            raise ValueError(f"CavityConfig: n={self.n}, t={self.t}, support={self.support}, "
                             f"re={self.re}, pb={self.pb}, checks={self.checks}, "
                             f"average={self.average}; accepted: n >= 4, t >= 0, support > 0, "
                             "re > 0, pb >= 0, checks >= 1, average >= 0")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"CavityConfig: dtype={self.dtype!r}; accepted: float64, float32")


@dataclass
class Cavity:
    """A set-up case (`setup`)."""

    config: CavityConfig
    positions: torch.Tensor
    kinds: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    lidVelocity: torch.Tensor
    domain: DomainDescription
    fluid: int
    layers: int
    dx: float
    nu: float
    c0: float
    rho0: float
    dt: float
    steps: int


def setup(config: CavityConfig) -> Cavity:
    """Particles, constants and time step of `config` (module docstring)."""
    t = dict(dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    U, rho0 = 1.0, 1.0
    dx = 1.0 / config.n
    nu = U / config.re
    c0 = 10.0 * U
    layers = max(1, math.ceil(config.support - 1e-9))
    x, kinds = boxParticles((0.0, 0.0), (1.0, 1.0), dx, layers, "all", **t)
    N = x.shape[0]
    fluid = int((kinds == int(ParticleType.Fluid)).sum())
    lid = (kinds == int(ParticleType.Boundary)) & (x[:, 1] > 1.0)
    lidVelocity = torch.where(lid[:, None], torch.tensor([U, 0.0], **t), 0.0)
    pad = (layers + 1) * dx
    domain = DomainDescription(torch.full((2,), -pad, **t), torch.full((2,), 1.0 + pad, **t),
                               [False, False])
    dt = min(0.25 * dx / (c0 + U), 0.125 * dx * dx / nu)
    steps = max(1, math.ceil(config.t / dt)) if config.t > 0 else 0
    dt = config.t / steps if steps else dt
    return Cavity(config, x, kinds, torch.full((N,), config.support * dx, **t),
                  torch.full((N,), rho0 * dx * dx, **t), lidVelocity, domain, fluid, layers,
                  dx, nu, c0, rho0, dt, steps)


def cavityScheme(case: Cavity, viscosity=None) -> Scheme:
    """The case's `Scheme` (`poiseuille.wallBoundedScheme` with the lid); `viscosity` (mu)
    defaults to rho0 nu and may be a tensor."""
    mu = case.rho0 * case.nu if viscosity is None else viscosity
    return wallBoundedScheme(rho0=case.rho0, c0=case.c0, viscosity=mu,
                             backgroundPressure=case.config.pb * case.rho0 * case.c0**2,
                             wallVelocity=case.lidVelocity)


def cavityParticles(case: Cavity) -> ParticleSet:
    """The case's `ParticleSet` (its container: the unit square)."""
    lo, hi = boxContainer((0.0, 0.0), (1.0, 1.0), dtype=case.positions.dtype,
                          device=case.positions.device)
    return ParticleSet(case.supports, case.masses, case.kinds, case.domain, case.dx,
                       container=(lo, hi))


def cavityRates(case: Cavity, viscosity=None):
    """The rate function of the case (`cavityScheme` on `cavityParticles`); `viscosity`
    (mu) defaults to rho0 nu and may be a tensor."""
    return cavityScheme(case, viscosity).rates(cavityParticles(case))


def _probes(like: torch.Tensor):
    """The interior Ghia points: ``(probes [P, 2], component [P], reference [P])``, the
    vertical line (u) first."""
    t = dict(dtype=like.dtype, device=like.device)
    ys, us = GHIA_RE100_Y[1:-1], GHIA_RE100_U[1:-1]
    xs, vs = GHIA_RE100_X[1:-1], GHIA_RE100_V[1:-1]
    probes = torch.tensor([(0.5, y) for y in ys] + [(x, 0.5) for x in xs], **t)
    component = torch.tensor([0] * len(ys) + [1] * len(xs), device=like.device)
    reference = torch.tensor(us + vs, **t)
    return probes, component, reference


def centerlineProfiles(probes, positions, velocities, supports):
    """Shepard interpolation of `velocities` ``[N, 2]`` at `probes` ``[P, 2]``:
    sum_j u_j W(|p - x_j|, H_j) / sum_j W(|p - x_j|, H_j) with the Wendland C2 kernel of
    support H_j (dense: P x N pairs, no periodic axes). Returns ``[P, 2]``; no host sync."""
    r = torch.cdist(probes, positions)
    q = (r / supports[None, :]).clamp(max=1.0)
    W = kernelC_d(KERNEL, 2) / supports[None, :] ** 2 * (1.0 - q) ** 4 * (1.0 + 4.0 * q)
    return (W @ velocities) / W.sum(1, keepdim=True).clamp(min=torch.finfo(W.dtype).tiny)


def _figure(path: Path, case: Cavity, u, v, history, x, speed) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(15, 4.4))
    a0.plot(u[:, 0], u[:, 1], "-", label="SPH, u(0.5, y)")
    a0.plot(GHIA_RE100_U, GHIA_RE100_Y, "ks", ms=4, mfc="none", label="Ghia et al. 1982")
    a0.set_xlabel("u / U")
    a0.set_ylabel("y")
    a0.legend(fontsize=8)
    a0.set_title("vertical centre line")
    a1.plot(v[:, 0], v[:, 1], "-", label="SPH, v(x, 0.5)")
    a1.plot(GHIA_RE100_X, GHIA_RE100_V, "ks", ms=4, mfc="none", label="Ghia et al. 1982")
    a1.set_xlabel("x")
    a1.set_ylabel("v / U")
    a1.legend(fontsize=8)
    a1.set_title("horizontal centre line")
    inset = a1.inset_axes([0.1, 0.1, 0.33, 0.3])
    inset.semilogy(history["time"], history["centerlineMaxErr"], "o-", ms=3)
    inset.set_xlabel("t", fontsize=7)
    inset.set_ylabel("max err", fontsize=7)
    inset.tick_params(labelsize=6)
    sc = a2.scatter(x[:, 0], x[:, 1], c=speed, s=max(0.5, 1500.0 / x.shape[0]), cmap="viridis")
    a2.set_aspect("equal")
    a2.set_title(f"|u| at t = {case.config.t:g}")
    fig.colorbar(sc, ax=a2, shrink=0.85)
    c = case.config
    fig.suptitle(f"Lid-driven cavity, Re = {c.re:g}, {c.n} x {c.n} fluid particles, "
                 f"H = {c.support:g} dx, p_b = {c.pb:g} rho0 c0^2")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: CavityConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case with ``config.threads`` torch threads: writes ``results.json`` and
    ``cavity.png`` (and frames when ``config.frames``, through `writer`) into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, out, writer, quiet)


def _run(config: CavityConfig, out, writer, quiet: bool) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config)
    nf, H, lid = case.fluid, case.supports, case.lidVelocity
    sim = caseSimulation(config, out, writer, quiet, cavityScheme(case), cavityParticles(case),
                         FluidState(case.positions, torch.zeros_like(case.positions)), case.dt,
                         maxSpeed=1.0)
    probes, component, reference = _probes(case.positions)
    rows = torch.arange(probes.shape[0], device=probes.device)

    def sample(s):
        """Velocities at the probes, the walls with their no-slip velocities."""
        x = s.state.positions
        u = wallVelocities(ParticleState(x, H, case.masses, case.kinds), s.state.velocities,
                           case.domain, s.neighbours.adjacency, wallVelocity=lid,
                           kernel=KERNEL)
        return centerlineProfiles(probes, x, u, H)

    m = case.masses[:nf]
    checkSteps = sorted({max(1, round(case.steps * k / config.checks))
                         for k in range(1, config.checks + 1)}) if case.steps else []
    # the averaging window: every `every` steps over the last `average` time units
    every = max(1, round(0.05 / case.dt)) if case.steps else 1
    first = case.steps - min(case.steps, round(config.average / case.dt)) if case.steps else 0
    errors, energies, samples = [], [], []

    def record(s):  # tensors only: read back at the end
        v = s.state.velocities[:nf]
        energies.append(0.5 * (m[:, None] * v**2).sum())
        averaged = s.step > first and (case.steps - s.step) % every == 0
        if s.step in checkSteps or averaged:
            values = sample(s)[rows, component]
            if s.step in checkSteps:
                errors.append((values - reference).abs().max())
            if averaged:
                samples.append(values)

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(case.steps, callback=record)
    seconds = time.perf_counter() - start
    steps = case.steps
    state = sim.state
    with torch.no_grad():
        instant = sample(sim)[rows, component] if steps else torch.zeros_like(reference)
        values = torch.stack(samples).mean(0) if samples else instant
        # dense profiles for the figure
        line = torch.linspace(0.0, 1.0, 101, dtype=probes.dtype, device=probes.device)
        half = torch.full_like(line, 0.5)
        dense = torch.cat([torch.stack([half, line], 1), torch.stack([line, half], 1)])
        if steps:
            u = wallVelocities(ParticleState(state.positions, H, case.masses, case.kinds),
                               state.velocities, case.domain, sim.neighbours.adjacency,
                               wallVelocity=lid, kernel=KERNEL)
            profiles = centerlineProfiles(dense, state.positions, u, H).cpu().double()
        else:
            profiles = torch.zeros(dense.shape, dtype=torch.float64)
    values, instant = values.cpu().double(), instant.cpu().double()
    reference = reference.cpu().double()
    nu_ = len(GHIA_RE100_Y) - 2
    errU = (values[:nu_] - reference[:nu_]).abs()
    errV = (values[nu_:] - reference[nu_:]).abs()
    history = {"time": [k * case.dt for k in checkSteps],
               "centerlineMaxErr": torch.stack(errors).cpu().double().tolist() if errors
               else []}
    energy = torch.stack(energies).cpu().double() if energies else torch.zeros(1)
    x = state.positions.detach().cpu().double()
    vel = state.velocities.detach().cpu().double()
    xf = x[:nf]
    lineNp = line.cpu().double()
    uLine = torch.stack([profiles[:101, 0], lineNp], 1).numpy()
    vLine = torch.stack([lineNp, profiles[101:, 1]], 1).numpy()
    figure = out / "cavity.png"
    _figure(figure, case, uLine, vLine, history, xf.numpy(),
            torch.linalg.vector_norm(vel[:nf], dim=1).numpy())
    top = xf[:, 1] > 1.0 - 2.0 * case.dx
    N = x.shape[0]
    results = {
        "case": "cavity",
        "centerlineMaxErr": float(max(errU.max(), errV.max())),
        "centerlineMaxErrU": float(errU.max()),
        "centerlineMaxErrV": float(errV.max()),
        "centerlineRmsErr": float(torch.cat([errU, errV]).pow(2).mean().sqrt()),
        "centerlineMaxErrFinalState": float((instant - reference).abs().max()),
        "averagedSamples": len(samples),
        "minU": float(values[:nu_].min()),
        "minUGhia": min(GHIA_RE100_U),
        "maxV": float(values[nu_:].max()),
        "minV": float(values[nu_:].min()),
        "fluidOutside": int(((xf < 0) | (xf > 1)).any(dim=1).sum()),
        "meanTopU": float(vel[:nf][top, 0].mean()) if bool(top.any()) else 0.0,
        "kineticEnergy": float(energy[-1]),
        "kineticEnergyChangeLastTenth": float(energy[-1] / energy[-max(1, steps // 10)] - 1.0)
        if steps else 0.0,
        "msPerStep": seconds / steps * 1e3 if steps else None,
        "particleStepsPerSecond": N * steps / seconds if steps else None,
        "particles": N,
        "fluidParticles": nf,
        "steps": steps,
        "dx": case.dx,
        "t": config.t,
        "dt": case.dt,
        "nu": case.nu,
        "c0": case.c0,
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "seconds": seconds,
        "centerlineErrHistory": history,
        "centerline": {
            "y": list(GHIA_RE100_Y[1:-1]), "u": values[:nu_].tolist(),
            "uGhia": list(GHIA_RE100_U[1:-1]),
            "x": list(GHIA_RE100_X[1:-1]), "v": values[nu_:].tolist(),
            "vGhia": list(GHIA_RE100_V[1:-1])},
        "frames": [str(p) for p in sim.frames],
        "figure": str(figure),
        "config": asdict(config),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
