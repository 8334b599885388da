"""Body-force-driven Poiseuille flow between two plates (`warpsph run poiseuille`), the
start-up test of Morris, Fox & Zhu (1997, J. Comput. Phys. 136: 214-226), with the
dummy-particle walls of Adami, Hu & Adams (2012, J. Comput. Phys. 231: 7057-7075).

A 2D channel of width L = 1, periodic in x (length ``nx`` dx), no-slip walls at y = 0 and
y = L (``layers`` = ceil(support) rows of dummy particles behind each wall), fluid at rest at
t = 0 and driven by the body force F e_x. Nondimensional: rho0 = 1, u_max = 1 (the steady
centre-line speed), Re = u_max L / nu, so nu = 1 / Re and F = 8 nu u_max / L^2; c0 = 10
u_max, p = c0^2 (rho - rho0). The analytic start-up solution (Morris et al. 1997, eq. 21,
written with the flow along +x) is

    u(y, t) = F / (2 nu) y (L - y)
              - sum_{n >= 0} 4 F L^2 / (nu pi^3 (2n+1)^3) sin((2n+1) pi y / L)
                                                       exp(-(2n+1)^2 pi^2 nu t / L^2),

which starts at 0 and converges to the parabola F / (2 nu) y (L - y) (`poiseuilleVelocity`).
The slowest mode decays as exp(-pi^2 nu t / L^2): at the default t = 1 (one viscous time
L^2 / nu at Re = 1) the profile is within about 5e-5 u_max of the parabola.

Scheme (`wallBoundedRates`, shared with the lid-driven cavity, `cases.cavity`):

* summation density over fluid and wall particles through the number-density volumes,
  V_i = 1 / sum_j W_ij (`numberDensityVolumes`), rho_i = m_i / V_i (uniform masses
  rho0 dx^2, so V = m / rho: the plain and the transport-velocity schemes share it);
* the wall pressure, density (inverse linear EOS) and no-slip velocity of Adami et al.
  (2012) by `extrapolateWalls` (with g = F e_x and the wall's prescribed velocity); wall
  volumes V_w = m / rho_w;
* the fused momentum of Adami, Hu & Adams (2013) (`transportVelocityAccelerations`,
  Wendland C2, support ``support`` dx, interaction FluidQueriesNonGhostReferences: fluid queries over fluid
  and wall references) plus F on the fluid rows; ``pb`` > 0 adds the background pressure
  p_b = pb rho0 c0^2 and advects the particles with the transport velocity; ``pb`` = 0 (the
  default) is the plain momentum (inter-particle averaged pressure, Morris viscosity), the
  particles moving with u;
* `transport.transportKickDriftKick` in the loop (`fluids.loop`, Verlet skin), with
  dt = min(0.25 dx / (c0 + u_max), 0.125 dx^2 / nu, 0.25 sqrt(dx / F)), shortened to land
  on t. The walls stay where they are (their rows get zero accelerations).

`run(config, out)` writes ``results.json`` and ``poiseuille.png`` (profiles at a few times
against the series, the centre-line speed against time). ``profileL2RelErr`` is the L2 error
of the fluid's u over y-bins of width dx at the end time against the series at that time
(at the default t the parabola), relative to u_max: sqrt(mean_b (u_b - u(y_b, t))^2) /
u_max, with u_b the mean u of the particles in bin b and y_b their mean y;
``profileL2RelErrSteady`` is the same against the parabola, ``profileMaxRelErr`` the largest
bin error, ``transientL2RelErr`` the largest L2 error of the profiles recorded at the
``snapshots`` earlier times.
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
from ..health import boxContainer
from ..integrators import FluidState
from ..scheme import Linear, ParticleSet, Scheme, TransportVelocity, Walls
from ..walls import boxParticles
from ._common import THREADS_HELP, caseSimulation, option, torchThreads

__all__ = ["PoiseuilleConfig", "Poiseuille", "setup", "poiseuilleVelocity",
           "wallBoundedScheme", "wallBoundedRates", "poiseuilleScheme", "poiseuilleParticles",
           "poiseuilleRates", "binnedProfile", "run"]

KERNEL = KernelFunctions.Wendland2



@dataclass(frozen=True)
class PoiseuilleConfig:
    """Parameters of the Poiseuille case (module docstring); the defaults are the acceptance
    size."""

    ny: int = option(30, "fluid particles across the channel (dx = L / ny)")
    nx: int = option(10, "particles along the periodic x axis (channel length nx dx)")
    t: float = option(1.0, "end time (L^2 / nu at Re = 1)")
    re: float = option(1.0, "Reynolds number u_max L / nu")
    support: float = option(3.0, "support H in particle spacings")
    pb: float = option(0.0, "background pressure p_b / (rho0 c0^2) of the transport velocity "
                          "(0: the plain momentum, the particles moving with u)")
    snapshots: str = option("0.05,0.1,0.2,0.4", "comma-separated times of the transient "
                                              "profiles compared with the series")
    skin: float = option(0.1, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if self.ny < 4 or self.nx < 1 or self.t < 0 or self.support <= 0 or self.re <= 0 \
                or self.pb < 0:
            raise ValueError(f"PoiseuilleConfig: ny={self.ny}, nx={self.nx}, t={self.t}, "
                             f"support={self.support}, re={self.re}, pb={self.pb}; accepted: "
                             "ny >= 4, nx >= 1, t >= 0, support > 0, re > 0, pb >= 0")
        if self.support * (1.0 + self.skin) >= 0.5 * self.nx:
            raise ValueError(f"PoiseuilleConfig: support (1 + skin) = "
                             f"{self.support * (1 + self.skin):g} dx must stay below half the "
                             f"periodic length, {0.5 * self.nx:g} dx; use a larger nx")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"PoiseuilleConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")
        _times(self.snapshots)


def _times(text: str) -> list[float]:
    try:
        times = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"PoiseuilleConfig: snapshots={text!r}; accepted: comma-separated "
                         "numbers") from None
    if any(not (math.isfinite(s) and s > 0) for s in times):
        raise ValueError(f"PoiseuilleConfig: snapshots={text!r}; accepted: positive times")
    return sorted(times)


def poiseuilleVelocity(y, t, force, nu, width=1.0, terms: int = 200):
    """The start-up series of Morris et al. (1997) (module docstring): u(y, t) at the
    positions `y` (a tensor or array; float64 math) for the body force `force`, kinematic
    viscosity `nu` and channel width `width`, summed over `terms` odd modes (the terms fall
    as 1 / (2n+1)^3, and exponentially for t > 0). ``t = inf`` is the parabola.

    Returns:
        u(y, t) as a float64 tensor of the shape of `y`.
    """
    y = torch.as_tensor(y, dtype=torch.float64)
    L = float(width)
    steady = force / (2.0 * nu) * y * (L - y)
    if math.isinf(t):
        return steady
    k = 2.0 * torch.arange(terms, dtype=torch.float64) + 1.0
    amplitude = 4.0 * force * L**2 / (nu * math.pi**3 * k**3) \
        * torch.exp(-(k**2) * math.pi**2 * nu * float(t) / L**2)
    return steady - (torch.sin(math.pi * y[..., None] * k / L) * amplitude).sum(-1)


def wallBoundedScheme(*, rho0, c0, viscosity, backgroundPressure=0.0, bodyForce=None,
                      wallVelocity=None, kernel=KERNEL) -> Scheme:
    """The `Scheme` of a weakly compressible fluid in dummy-particle walls (module
    docstring, "Scheme"), shared by the Poiseuille and cavity cases: summation density, the
    linear equation of state, no-slip walls, the transport velocity with p_b.

    Args:
        rho0, c0: reference density and sound speed of p = c0^2 (rho - rho0).
        viscosity: dynamic viscosity mu (number or 0-dim tensor).
        backgroundPressure: p_b of the transport velocity (0: none; the particles then move
            with u).
        bodyForce: ``[d]`` acceleration on the fluid (also the g of the wall pressure), or
            None.
        wallVelocity: the walls' prescribed velocity, ``[d]`` or ``[N, d]`` (only wall rows
            read; a lid), or None (walls at rest).
        kernel: `KernelFunctions`.
    """
    return Scheme(rho0=rho0, c0=c0, equationOfState=Linear(), density="summation",
                  viscosity=viscosity / rho0, walls=Walls(noSlip=True, velocity=wallVelocity),
                  transportVelocity=TransportVelocity(backgroundPressure), bodyForce=bodyForce,
                  kernel=kernel)


def wallBoundedRates(*, supports, masses, kinds, domain, rho0, c0, viscosity,
                     backgroundPressure=0.0, bodyForce=None, wallVelocity=None,
                     kernel=KERNEL, spacing=None):
    """The rate function ``rates(state, neighbours) -> TransportRates`` of
    `wallBoundedScheme` on the given particles (module docstring, "Scheme").

    Args:
        supports, masses, kinds: ``[N]`` of fluid (kind Fluid) and wall (kind Boundary)
            particles.
        domain: `DomainDescription`.
        rho0, c0, viscosity, backgroundPressure, bodyForce, wallVelocity, kernel: as
            `wallBoundedScheme`.
        spacing: dx (None: sqrt of the first mass / rho0, the lattice's).

    Returns:
        ``rates(state, neighbours)``; the wall rows of a and a_b are zero.
    """
    scheme = wallBoundedScheme(rho0=rho0, c0=c0, viscosity=viscosity,
                               backgroundPressure=backgroundPressure, bodyForce=bodyForce,
                               wallVelocity=wallVelocity, kernel=kernel)
    if spacing is None:
        spacing = (float(masses[0]) / rho0) ** (1.0 / domain.min.shape[0])
    return scheme.rates(ParticleSet(supports, masses, kinds, domain, spacing))


def binnedProfile(positions, values, lower, width, bins):
    """Bin means over y: ``(mean y [bins], mean value [bins], count [bins])`` of the
    particles ``positions [N, 2]`` with ``values [N]``, bins of `width` from `lower`
    (particles outside are clamped into the end bins). Tensors on the input's device; no host
    sync."""
    y = positions[:, 1]
    b = torch.clamp(torch.floor((y - lower) / width), 0, bins - 1).long()
    zero = torch.zeros(bins, dtype=values.dtype, device=values.device)
    count = zero.index_add(0, b, torch.ones_like(values))
    safe = torch.clamp(count, min=1.0)
    return zero.index_add(0, b, y) / safe, zero.index_add(0, b, values) / safe, count


@dataclass
class Poiseuille:
    """A set-up case (`setup`)."""

    config: PoiseuilleConfig
    positions: torch.Tensor
    kinds: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    domain: DomainDescription
    fluid: int
    layers: int
    dx: float
    nu: float
    force: float
    c0: float
    rho0: float
    dt: float
    steps: int


def setup(config: PoiseuilleConfig) -> Poiseuille:
    """Particles, constants and time step of `config` (module docstring)."""
    t = dict(dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    L, umax, rho0 = 1.0, 1.0, 1.0
    dx = L / config.ny
    nu = umax * L / config.re
    force = 8.0 * nu * umax / L**2
    c0 = 10.0 * umax
    layers = max(1, math.ceil(config.support - 1e-9))
    length = config.nx * dx
    x, kinds = boxParticles((0.0, 0.0), (length, L), dx, layers, ("-y", "+y"), **t)
    N = x.shape[0]
    fluid = int((kinds == int(ParticleType.Fluid)).sum())
    lo = torch.tensor([0.0, -layers * dx], **t)
    hi = torch.tensor([length, L + layers * dx], **t)
    domain = DomainDescription(lo, hi, [True, False])
    dt = min(0.25 * dx / (c0 + umax), 0.125 * dx * dx / nu, 0.25 * math.sqrt(dx / force))
    steps = max(1, math.ceil(config.t / dt)) if config.t > 0 else 0
    dt = config.t / steps if steps else dt
    return Poiseuille(config, x, kinds, torch.full((N,), config.support * dx, **t),
                      torch.full((N,), rho0 * dx * dx, **t), domain, fluid, layers, dx, nu,
                      force, c0, rho0, dt, steps)


def poiseuilleScheme(case: Poiseuille, viscosity=None, force=None) -> Scheme:
    """The case's `Scheme` (`wallBoundedScheme` with the body force F e_x); `viscosity`
    (mu) and `force` (F) default to the config's and may be tensors."""
    mu = case.rho0 * case.nu if viscosity is None else viscosity
    F = case.force if force is None else force
    like = case.positions
    bodyForce = torch.stack([torch.as_tensor(F, dtype=like.dtype, device=like.device),
                             torch.zeros((), dtype=like.dtype, device=like.device)])
    return wallBoundedScheme(rho0=case.rho0, c0=case.c0, viscosity=mu,
                             backgroundPressure=case.config.pb * case.rho0 * case.c0**2,
                             bodyForce=bodyForce)


def poiseuilleParticles(case: Poiseuille) -> ParticleSet:
    """The case's `ParticleSet` (its container: the two walls)."""
    lo, hi = boxContainer((0.0, 0.0), (case.config.nx * case.dx, 1.0), ("-y", "+y"),
                          dtype=case.positions.dtype, device=case.positions.device)
    return ParticleSet(case.supports, case.masses, case.kinds, case.domain, case.dx,
                       container=(lo, hi))


def poiseuilleRates(case: Poiseuille, viscosity=None, force=None):
    """The rate function of the case (`poiseuilleScheme` on `poiseuilleParticles`);
    `viscosity` (mu) and `force` (F) default to the config's and may be tensors."""
    return poiseuilleScheme(case, viscosity, force).rates(poiseuilleParticles(case))


def _errors(yb, ub, count, t, case):
    exact = poiseuilleVelocity(yb, t, case.force, case.nu)
    steady = poiseuilleVelocity(yb, math.inf, case.force, case.nu)
    keep = count > 0
    e, s = (ub - exact)[keep], (ub - steady)[keep]
    return (float(e.pow(2).mean().sqrt()), float(e.abs().max()), float(s.pow(2).mean().sqrt()))


def _figure(path: Path, profiles, history, case: Poiseuille) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 4.2))
    y = np.linspace(0.0, 1.0, 201)
    for k, (tk, yb, ub) in enumerate(profiles):
        colour = f"C{k}"
        a0.plot(poiseuilleVelocity(y, tk, case.force, case.nu).numpy(), y, "-", color=colour,
                lw=1)
        a0.plot(ub, yb, "o", color=colour, ms=3, label=f"t = {tk:.3g}")
    a0.set_xlabel("u / u_max")
    a0.set_ylabel("y / L")
    a0.set_title("profiles (lines: Morris et al. 1997 series)")
    a0.legend(fontsize=8)
    tt = np.asarray(history["time"])
    a1.plot(tt, history["centreVelocity"], label="SPH (centre bin)")
    yc = (case.config.ny // 2 + 0.5) * case.dx
    a1.plot(tt, [float(poiseuilleVelocity(yc, s, case.force, case.nu)) for s in tt], "k--",
            label="series")
    a1.set_xlabel("t")
    a1.set_ylabel("u(L/2) / u_max")
    a1.legend()
    c = case.config
    fig.suptitle(f"Poiseuille start-up, Re = {c.re:g}, {c.nx} x {c.ny} fluid particles, "
                 f"H = {c.support:g} dx, p_b = {c.pb:g} rho0 c0^2")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: PoiseuilleConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case with ``config.threads`` torch threads: writes ``results.json`` and
    ``poiseuille.png`` (and frames when ``config.frames``, through `writer`) into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, out, writer, quiet)


def _run(config: PoiseuilleConfig, out, writer, quiet: bool) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config)
    nf, dx = case.fluid, case.dx
    sim = caseSimulation(config, out, writer, quiet, poiseuilleScheme(case),
                         poiseuilleParticles(case),
                         FluidState(case.positions, torch.zeros_like(case.positions)), case.dt,
                         maxSpeed=1.0)
    snapshotSteps = {}
    for s in _times(config.snapshots):
        k = round(s / case.dt) if case.dt else 0
        if 0 < k < case.steps:
            snapshotSteps[k] = s
    recorded = {}
    centre = config.ny // 2  # the bin at the centre line (ny even) or just above it
    centres = [torch.zeros((), dtype=case.positions.dtype)]

    def profile(state):
        return binnedProfile(state.positions[:nf], state.velocities[:nf, 0], 0.0, dx,
                             config.ny)

    def record(s):  # tensors only: read back at the end
        yb, ub, count = profile(s.state)
        centres.append(ub[centre])
        if s.step in snapshotSteps:
            recorded[s.step] = (yb, ub, count)

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(case.steps, callback=record)
    seconds = time.perf_counter() - start
    steps = case.steps
    state = sim.state
    yb, ub, count = (t.detach().cpu().double() for t in profile(state))
    l2, mx, l2s = _errors(yb, ub, count, config.t, case)
    profiles, transient = [], []
    for k, (pyb, pub, pc) in sorted(recorded.items()):
        pyb, pub, pc = (t.detach().cpu().double() for t in (pyb, pub, pc))
        tk = k * case.dt
        transient.append({"t": tk, "profileL2RelErr": _errors(pyb, pub, pc, tk, case)[0]})
        profiles.append((tk, pyb.numpy(), pub.numpy()))
    profiles.append((config.t, yb.numpy(), ub.numpy()))
    cv = torch.stack(centres).cpu().double()
    stride = max(1, steps // 200)
    keep = list(range(0, steps + 1, stride)) + ([steps] if steps % stride else [])
    history = {"time": [k * case.dt for k in keep], "centreVelocity": cv[keep].tolist()}
    x = state.positions.detach().cpu().double()
    v = state.velocities.detach().cpu().double()
    walls = x[nf:]
    figure = out / "poiseuille.png"
    _figure(figure, profiles, history, case)
    N = x.shape[0]
    results = {
        "case": "poiseuille",
        "profileL2RelErr": l2,
        "profileMaxRelErr": mx,
        "profileL2RelErrSteady": l2s,
        "transientL2RelErr": max([r["profileL2RelErr"] for r in transient], default=None),
        "centreVelocity": float(ub[centre]),
        "centreVelocityExact": float(poiseuilleVelocity(yb[centre], config.t, case.force,
                                                        case.nu)),
        "maxTransverseVelocity": float(v[:nf, 1].abs().max()),
        "wallDisplacement": float((walls - case.positions[nf:].cpu().double()).abs().max()),
        "msPerStep": seconds / steps * 1e3 if steps else None,
        "particleStepsPerSecond": N * steps / seconds if steps else None,
        "particles": N,
        "fluidParticles": nf,
        "steps": steps,
        "dx": dx,
        "t": config.t,
        "dt": case.dt,
        "nu": case.nu,
        "force": case.force,
        "c0": case.c0,
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "seconds": seconds,
        "transient": transient,
        "profile": {"y": yb.tolist(), "u": ub.tolist(), "count": count.tolist(),
                    "exact": poiseuilleVelocity(yb, config.t, case.force, case.nu).tolist()},
        "frames": [str(p) for p in sim.frames],
        "figure": str(figure),
        "config": asdict(config),
        "history": history,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
