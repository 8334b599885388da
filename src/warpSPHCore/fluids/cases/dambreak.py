"""The dam break of Martin & Moyce (1952) (`warpsph run dambreak`, ``--dim 3`` in a channel):
a weakly compressible water column collapsing in a tank, its surge front against the
experiment.

Geometry (Martin & Moyce's n^2 = 2 column): a water column of width a and height 2a at the
left of a tank of length ``tank`` a (walls at x = 0, x = tank a and the floor, open top), at
rest under gravity g, released at t = 0; in 3D the same column fills a channel of width a
between two more walls. Dimensionless front and time, as in the experiment:

    Z = x_front / a,   T = t sqrt(2 g / a)

* particles: `boxParticles` lattice (cell centres, dx = a / n; n = 20 in 2D, 10 in 3D),
  ``ceil(support)`` layers of dummy wall particles; the exact hydrostatic start of the Tait
  equation (`scheme.hydrostaticStart`), masses rho(0) dx^d;
* the scheme (`damBreakScheme`, a `Scheme`): Tait (gamma = 7) with c0 = ``mach``
  sqrt(2 g 2a) (`referenceSoundSpeed`, the one sound-speed rule: Mach <= ~0.15 at the
  front speed 2 sqrt(g 2a) of shallow-water theory); the continuity equation with the
  delta-SPH density diffusion (``diffusion``: Fourtakas et al.'s hydrostatic-corrected
  Molteni-Colagrossi term by default, delta = ``delta``, h = dx); the artificial viscosity
  alpha in its Morris form, nu = alpha dx c0 / 8 (Monaghan 2005), or with ``monaghan``
  Monaghan's switch form; dummy-particle walls of Adami, Hu & Adams (2012), free-slip or
  no-slip, wall volumes dx^d; fluid pressures clipped at 0 (``clampPressure``); gravity;
* time integration: the scheme's stepper, predictor-corrector (a continuity equation), in
  the loop (Verlet skin), with dt = ``cfl`` dx / (c0 + 2 sqrt(2 g a)) (`Scheme.timeStep`
  with U the shallow-water front speed), shortened to land on T_end; no transport velocity
  (a free surface).

Without the pressure clip the run breaks up near the front (negative pressures at the thin
surge tongue: tensile instability, densities below 0 and NaN positions by T ~ 2 at a/dx =
10-15); with it the densities stay within 0.5 % of rho0.

The front x_front(t) is the largest x of the fluid particles plus dx / 2 (a particle
represents the cell around its centre, so Z(0) = 1 exactly), recorded as 0-dim tensors in
the loop and read back once at the end. The measures (docs/fluids.md, "Dam break"):

* ``frontMaxRelErr``: the largest |Z_sim(T) / Z_exp - 1| over the data points with
  0 < T <= 2.5 (Z_sim interpolated linearly in T), no shift; ``frontMeanRelErr`` the mean;
* ``frontLagT``: one arrival-time offset fitted over the tabulated fronts Z = 1.22 to 3.0
  (the mean of T_exp(Z) - T_sim(Z), `frontLag`): the experiment's unquantified release
  time, not physics; ``frontRmsResidualT`` the rms of the arrival times after the shift,
  ``frontMaxRelErrLagged`` the max |Z_sim(T - lag) / Z_exp - 1| over the same tabulated
  fronts, ``frontMaxRelErrLaggedAllT`` over every point with T <= 2.5 (the first, Z = 1.11
  at T = 0.41, lies in the release, which a shift does not model);
* ``ritterExcess`` / ``ritterBoundHolds``: Z <= 1 + 2T, Ritter's inviscid front;
* ``fluidInsideTank``: no fluid particle beyond a wall face at the end, and none more than
  ``CONTACT`` = 0.05 dx beyond one during the run (a particle in contact with a wall has its
  centre on the face, dx / 2 from the wall particles); ``maxWallPenetration`` is the deepest
  excursion (in dx) of the health monitor's wall-crossing events, ``wallCrossingEvents``
  their number.

`run(config, out)` writes ``results.json`` and ``dambreak.png`` (Z(T) against the data, the
shifted curve and Ritter's bound; the particles at T_end coloured by pressure, a side view
in 3D). ``threads`` (default 1) sets torch's CPU threads for the run, restored after it.
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
from ..eos import referenceSoundSpeed, taitPressure
from ..health import boxContainer
from ..integrators import FluidState
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

__all__ = ["DamBreakConfig", "DamBreak", "MARTIN_MOYCE", "setup", "damBreakScheme",
           "damBreakRates", "dimensionlessTime", "frontError", "frontLag", "arrivalTimes",
           "ritterExcess", "run"]

KERNEL = KernelFunctions.Wendland2

# Martin, J. C. & Moyce, W. J. (1952) Part IV. An experimental study of the collapse of
# liquid columns on a rigid horizontal plane. Phil. Trans. R. Soc. Lond. A 244 (882):
# 312-324, doi:10.1098/rsta.1952.0006. Surge front of the n^2 = 2 column (a = 2.25 in):
# (T = t sqrt(2 g / a), Z = x_front / a), the widely reproduced table of the paper's data
# (front positions in whole quarter inches, Z = 1 + k / 9).
MARTIN_MOYCE = (
    (0.00, 1.00), (0.41, 1.11), (0.84, 1.23), (1.19, 1.44), (1.43, 1.67), (1.63, 1.89),
    (1.82, 2.11), (1.97, 2.33), (2.20, 2.56), (2.32, 2.78), (2.50, 3.00), (2.64, 3.22),
    (2.82, 3.44), (2.96, 3.67),
)
ERROR_T_MAX = 2.5  # frontMaxRelErr is taken over the data points with 0 < T <= 2.5
#: the tabulated fronts over which one arrival-time offset is fitted (Z = 1 + k / 9, k = 2
#: to 18: Z = 1.22 to 3.0)
LAG_Z_RANGE = (1.2, 3.0 + 1e-9)
#: ``fluidInsideTank`` tolerates a fluid particle's centre this far beyond a wall face, in
#: particle spacings: a particle in contact with a wall has its centre on the face (dx / 2
#: from the first layer of wall particles); the deepest excursion is ``maxWallPenetration``
CONTACT = 0.05



@dataclass(frozen=True)
class DamBreakConfig:
    """Parameters of the dam-break case (module docstring); the defaults are the acceptance
    sizes (a/dx = 20 in 2D, 10 in 3D)."""

    n: int = option(0, "particles across the column width a (dx = a / n); 0: 20 in 2D, 10 "
                       "in 3D")
    dim: int = option(2, "2, or 3: the column in a channel of width a (walls on both sides)")
    tEnd: float = option(3.0, "end time as T = t sqrt(2 g / a)")
    a: float = option(1.0, "column width a in m (height 2a)")
    tank: float = option(5.0, "tank length in units of a")
    g: float = option(9.81, "gravity |g| in m/s^2")
    rho0: float = option(1000.0, "reference density in kg/m^3")
    mach: float = option(10.0, "c0 / sqrt(2 g 2a)")
    support: float = option(3.0, "support H in particle spacings")
    diffusion: str = option("fourtakas", "delta-SPH density diffusion: fourtakas, molteni, "
                            "antuono or none")
    delta: float = option(0.1, "delta-SPH coefficient")
    alpha: float = option(0.02, "artificial viscosity alpha: the Morris viscosity nu = alpha dx c0 "
                         "/ 8 of the fused momentum (0: none)")
    monaghan: bool = option(False, "apply alpha as Monaghan's form (approaching pairs only; "
                          "edge sums, slower) instead of the Morris viscosity")
    nu: float = option(0.0, "laminar kinematic viscosity in m^2/s (Morris; 0: none)")
    noSlip: bool = option(False, "no-slip walls (default free-slip)")
    clampPressure: bool = option(True, "clip negative fluid pressures to 0 (free surface)")
    cfl: float = option(0.25, "time step dt = cfl dx / (c0 + 2 sqrt(2 g a))")
    skin: float = option(0.2, "Verlet skin as a fraction of the support")
    record: int = option(10, "record the front every k steps")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if self.dim not in (2, 3):
            raise ValueError(f"DamBreakConfig: dim={self.dim}; accepted: 2 or 3")
        if self.n == 0:
            object.__setattr__(self, "n", 20 if self.dim == 2 else 10)
        if (self.n < 2 or not self.tEnd >= 0 or not self.a > 0 or not self.tank >= 2
                or not self.g > 0 or not self.rho0 > 0 or not self.mach > 0
                or not self.support > 0 or not self.delta >= 0 or not self.alpha >= 0
                or not self.nu >= 0 or not self.cfl > 0 or self.record < 1
                or self.threads < 0):
            raise ValueError(
                f"DamBreakConfig: n={self.n}, tEnd={self.tEnd}, a={self.a}, tank={self.tank}, "
                f"g={self.g}, rho0={self.rho0}, mach={self.mach}, support={self.support}, "
                f"delta={self.delta}, alpha={self.alpha}, nu={self.nu}, cfl={self.cfl}, "
                f"record={self.record}, threads={self.threads}; accepted: n >= 2 (or 0), "
                "tEnd >= 0, tank >= 2, record >= 1, threads >= 0, a, g, rho0, mach, support, "
                "cfl > 0, delta, alpha, nu >= 0")
        if abs(self.tank * self.n - round(self.tank * self.n)) > 1e-9:
            raise ValueError(f"DamBreakConfig: tank * n = {self.tank * self.n:g}; accepted: a "
                             "whole number of particle spacings")
        if self.diffusion not in ("fourtakas", "molteni", "antuono", "none"):
            raise ValueError(f"DamBreakConfig: diffusion={self.diffusion!r}; accepted: "
                             "fourtakas, molteni, antuono, none")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"DamBreakConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")


def dimensionlessTime(t, a: float, g: float):
    """T = t sqrt(2 g / a) (Martin & Moyce's time scale)."""
    return t * math.sqrt(2.0 * g / a)


@dataclass
class DamBreak:
    """A set-up case (`setup`): the scheme, the particles, the start and the time step."""

    config: DamBreakConfig
    scheme: Scheme
    particles: ParticleSet
    positions: torch.Tensor
    velocities: torch.Tensor
    densities: torch.Tensor
    pressures: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    kinds: torch.Tensor
    domain: DomainDescription
    fluidCount: int
    dx: float
    c0: float
    dt: float
    steps: int


def damBreakScheme(config: DamBreakConfig, gravity=None, viscosity=None) -> Scheme:
    """The scheme of the case (module docstring); `gravity` (``[d]``) and `viscosity` (nu)
    default to the config's and may be tensors (differentiable)."""
    d = config.dim
    g = tuple([0.0] * (d - 1) + [-config.g]) if gravity is None else gravity
    c0 = referenceSoundSpeed(0.0, config.g, 2.0 * config.a, config.mach)
    diffusion = None if config.diffusion == "none" else DensityDiffusion(config.diffusion,
                                                                         config.delta)
    av = ArtificialViscosity(config.alpha, "monaghan" if config.monaghan else "morris") \
        if config.alpha > 0 else None
    return Scheme(rho0=config.rho0, c0=c0, equationOfState=Tait(), density="continuity",
                  viscosity=config.nu if viscosity is None else viscosity,
                  artificialViscosity=av, densityDiffusion=diffusion,
                  walls=Walls(noSlip=config.noSlip), bodyForce=g,
                  clampPressure=config.clampPressure, kernel=KERNEL, cfl=config.cfl)


def _tank(config: DamBreakConfig, dx: float):
    """(lower, upper, walled sides, fluid upper corner) of the tank."""
    a, d = config.a, config.dim
    length = round(config.tank * config.n) * dx
    height = 2.0 * a
    if d == 2:
        return (0.0, 0.0), (length, height), ("-x", "+x", "-y"), (a, height)
    width = round(config.n) * dx  # the channel: width a
    return ((0.0, 0.0, 0.0), (length, width, height), ("-x", "+x", "-y", "+y", "-z"),
            (a, width, height))


def setup(config: DamBreakConfig) -> DamBreak:
    """The hydrostatic start of `config` (module docstring)."""
    t = dict(dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    a, n, g = config.a, config.n, config.g
    dx = a / n
    height = 2.0 * a
    layers = max(1, math.ceil(config.support - 1e-9))
    lower, upper, sides, column = _tank(config, dx)
    x, kinds = boxParticles(lower, upper, dx, layers, sides, fluidUpper=column, **t)
    scheme = damBreakScheme(config)
    rho, m, p = hydrostaticStart(scheme, x, kinds, dx, height)
    nf = int((kinds == int(ParticleType.Fluid)).sum())  # setup only: fluid rows come first
    H = torch.full_like(rho, config.support * dx)
    pad = (layers + 1) * dx
    top = list(upper)
    top[-1] = height + 2 * a
    domain = DomainDescription(torch.tensor([v - pad for v in lower], **t),
                               torch.tensor([v + pad for v in top[:-1]] + [top[-1]], **t),
                               [False] * config.dim)
    particles = ParticleSet(H, m, kinds, domain, dx,
                            container=boxContainer(lower, upper, sides, **t))
    tEnd = config.tEnd / math.sqrt(2.0 * g / a)
    dt = scheme.timeStep(particles, maxSpeed=2.0 * math.sqrt(g * height))
    steps = max(1, math.ceil(tEnd / dt)) if tEnd > 0 else 0
    dt = tEnd / steps if steps else dt
    return DamBreak(config, scheme, particles, x, torch.zeros_like(x), rho, p, H, m, kinds,
                    domain, nf, dx, scheme.c0, dt, steps)


def damBreakRates(case: DamBreak, gravity=None, viscosity=None):
    """The rate function ``rates(state, neighbours) -> Rates`` of the case (module
    docstring); `gravity` (``[d]``) and `viscosity` (nu) default to the config's and may be
    tensors (differentiable)."""
    scheme = case.scheme if gravity is None and viscosity is None else \
        damBreakScheme(case.config, gravity, viscosity)
    return scheme.rates(case.particles)


def _data(zRange=None, tMax=None):
    import numpy as np

    data = np.asarray(MARTIN_MOYCE)
    keep = data[:, 0] > 0
    if tMax is not None:
        keep &= data[:, 0] <= tMax
    if zRange is not None:
        keep &= (data[:, 1] >= zRange[0]) & (data[:, 1] <= zRange[1])
    return data[keep, 0], data[keep, 1]


def frontError(times, fronts, tMax: float = ERROR_T_MAX, lag: float = 0.0, zRange=None):
    """(max, mean) of |Z_sim / Z_exp - 1| over the `MARTIN_MOYCE` points with
    0 < T <= tMax (and Z in `zRange` when given), Z_sim linearly interpolated at the data's
    T (minus `lag`, the simulation delayed by lag; Z = 1 before it starts) from the sorted
    dimensionless `times` and `fronts` (sequences); NaN where the run ends before a point."""
    import numpy as np

    T, Z = _data(zRange=zRange, tMax=tMax)
    times, fronts = np.asarray(times, dtype=float), np.asarray(fronts, dtype=float)
    if times.size == 0 or times[-1] < T[-1] - lag - 1e-9:
        return math.nan, math.nan
    err = np.abs(np.interp(T - lag, times, fronts, left=1.0) / Z - 1.0)
    return float(err.max()), float(err.mean())


def arrivalTimes(times, fronts, levels):
    """The first time the front reaches each of `levels` (linear interpolation of the running
    maximum of `fronts` over the sorted `times`); NaN for a level never reached."""
    import numpy as np

    times = np.asarray(times, dtype=float)
    reach = np.maximum.accumulate(np.asarray(fronts, dtype=float))
    out = []
    for z in np.asarray(levels, dtype=float):
        k = int(np.searchsorted(reach, z, side="left"))
        if k >= reach.size:
            out.append(math.nan)
        elif k == 0 or reach[k] == reach[k - 1]:
            out.append(float(times[k]))
        else:
            w = (z - reach[k - 1]) / (reach[k] - reach[k - 1])
            out.append(float(times[k - 1] + w * (times[k] - times[k - 1])))
    return np.asarray(out)


def frontLag(times, fronts, zRange=LAG_Z_RANGE):
    """One fitted arrival-time offset: the mean of T_exp(Z) - T_sim(Z) over the tabulated
    fronts Z in `zRange` (the least-squares shift of the simulation in time), and the rms of
    the residuals after it; (NaN, NaN) when the run never reaches the largest Z. The offset
    stands for the experiment's release of the column, which took an unquantified time; it
    is not a property of the flow (docs/fluids.md)."""
    import numpy as np

    T, Z = _data(zRange=zRange)
    arrival = arrivalTimes(times, fronts, Z)
    if np.isnan(arrival).any():
        return math.nan, math.nan
    residual = T - arrival
    lag = float(residual.mean())
    return lag, float(np.sqrt(np.mean((residual - lag) ** 2)))


def ritterExcess(times, fronts) -> float:
    """max over the run of Z - (1 + 2 T): the excess over Ritter's inviscid shallow-water
    front (the front of an ideal dam break moves at 2 sqrt(g 2a), Z = 1 + 2T); <= 0 when the
    bound holds."""
    import numpy as np

    T, Z = np.asarray(times, dtype=float), np.asarray(fronts, dtype=float)
    return float(np.max(Z - (1.0 + 2.0 * T))) if T.size else math.nan


def _figure(path: Path, history: dict, case: DamBreak, x, p, nf: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cfg = case.config
    data = np.asarray(MARTIN_MOYCE)
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(13, 4.2),
                                 gridspec_kw={"width_ratios": [1, 1.6]})
    T = np.asarray(history["T"])
    a0.plot(T, history["Z"], label=f"SPH, a/dx = {cfg.n} ({cfg.dim}D)")
    lag = history.get("lag")
    if lag is not None and math.isfinite(lag):
        a0.plot(T + lag, history["Z"], "C1--", lw=1.2,
                label=f"SPH shifted by the fitted release time {lag:.3g}")
    a0.plot(T, 1.0 + 2.0 * T, color="0.6", ls=":", lw=1, label="Ritter, Z = 1 + 2T")
    a0.plot(data[:, 0], data[:, 1], "ko", mfc="none", label="Martin & Moyce 1952, $n^2$ = 2")
    a0.set_xlim(0, max(3.0, T[-1]))
    a0.set_ylim(0.9, max(4.0, max(history["Z"]) + 0.1))
    a0.set_xlabel(r"$T = t\sqrt{2g/a}$")
    a0.set_ylabel(r"$Z = x_{front}/a$")
    a0.legend(loc="upper left", fontsize=8)
    a0.grid(alpha=0.3)
    s = max(0.5, 3000.0 / x.shape[0])
    up = x.shape[1] - 1  # the vertical axis (z in 3D: a side view)
    a1.scatter(x[nf:, 0] / cfg.a, x[nf:, up] / cfg.a, c="0.6", s=s)
    sc = a1.scatter(x[:nf, 0] / cfg.a, x[:nf, up] / cfg.a, c=p[:nf], s=s, cmap="viridis")
    a1.set_aspect("equal")
    a1.set_xlabel("x / a")
    a1.set_ylabel(("z" if up == 2 else "y") + " / a")
    a1.set_title(f"pressure at T = {cfg.tEnd:g}" + (" (clipped at 0)" if cfg.clampPressure
                                                     else ""))
    fig.colorbar(sc, ax=a1, shrink=0.8, label="p [Pa]")
    fig.suptitle(f"Dam break (Martin & Moyce), {x.shape[0]} particles ({nf} fluid), "
                 f"{'no-slip' if cfg.noSlip else 'free-slip'} walls")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: DamBreakConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case: writes ``results.json`` and ``dambreak.png`` (and frames when
    ``config.frames``, through `writer`, e.g. `warpSPHCore.io.writeParticles`) into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, Path(out), writer, quiet)


def _run(config: DamBreakConfig, out: Path, writer, quiet: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config)
    nf, dx, a = case.fluidCount, case.dx, config.a

    def pressures(state, _rates):
        return {"pressures": taitPressure(state.densities, config.rho0, case.c0)}

    sim = caseSimulation(config, out, writer, quiet, case.scheme, case.particles,
                         FluidState(case.positions, case.velocities, case.densities), case.dt,
                         maxSpeed=2.0 * math.sqrt(config.g * 2.0 * config.a), wrap=False,
                         frameFields=pressures)

    def front(s):
        return s.positions[:nf, 0].amax()

    fronts, steps = [front(sim.state)], [0]

    def record(s):  # 0-dim tensors, read back once at the end
        if s.step % config.record == 0 or s.step == case.steps:
            fronts.append(front(s.state))
            steps.append(s.step)

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(case.steps, callback=record)
    seconds = time.perf_counter() - start
    t = torch.tensor(steps, dtype=torch.float64) * case.dt
    T = dimensionlessTime(t, a, config.g)
    Z = (torch.stack(fronts).cpu().double() + 0.5 * dx) / a
    history = {"T": T.tolist(), "Z": Z.tolist(), "t": t.tolist()}
    maxErr, meanErr = frontError(history["T"], history["Z"])
    lag, rms = frontLag(history["T"], history["Z"])
    lagErr, lagErrAll = math.nan, math.nan
    if math.isfinite(lag):
        lagErr = frontError(history["T"], history["Z"], tMax=None, lag=lag,
                            zRange=LAG_Z_RANGE)[0]
        lagErrAll = frontError(history["T"], history["Z"], lag=lag)[0]
    x = sim.state.positions.detach().cpu().double()
    rho = sim.state.densities.detach().cpu().double()
    m = case.masses.cpu().double()
    p = taitPressure(rho, config.rho0, case.c0)
    volume0 = float((case.masses / case.densities)[:nf].sum())
    volume = float((m / rho)[:nf].sum())
    lo, hi = (v.cpu().double() for v in case.particles.container)
    outside = ((x[:nf] < lo) | (x[:nf] > hi)).any(1)
    crossings = [e for e in sim.monitor.events if e.check == "wallCrossing"] \
        if sim.monitor is not None else []
    penetration = max([e.distance for e in crossings], default=0.0) / dx
    figure = out / "dambreak.png"
    _figure(figure, dict(history, lag=lag), case, x.numpy(),
            (p.clamp(min=0.0) if config.clampPressure else p).numpy(), nf)
    N = x.shape[0]
    total = case.steps
    results = {
        "case": "dambreak",
        "dim": config.dim,
        "frontMaxRelErr": maxErr,
        "frontMeanRelErr": meanErr,
        "frontLagT": lag,
        "frontRmsResidualT": rms,
        "frontMaxRelErrLagged": lagErr,
        "frontMaxRelErrLaggedAllT": lagErrAll,
        "ritterExcess": ritterExcess(history["T"], history["Z"]),
        "ritterBoundHolds": bool(ritterExcess(history["T"], history["Z"]) <= 1e-9),
        "frontFinal": float(Z[-1]),
        "errorTMax": ERROR_T_MAX,
        "lagZRange": [1.22, 3.0],
        "fluidInsideTank": bool(not outside.any()) and penetration <= CONTACT,
        "particlesOutside": int(outside.sum()),
        "wallCrossingEvents": len(crossings),
        "maxWallPenetration": penetration,
        "msPerStep": seconds / total * 1e3 if total else None,
        "particleStepsPerSecond": N * total / seconds if total else None,
        "particles": N,
        "fluidParticles": nf,
        "steps": total,
        "stepper": getattr(sim.stepper, "__name__", str(sim.stepper)),
        "dx": dx,
        "dt": case.dt,
        "c0": case.c0,
        "tEnd": float(t[-1]),
        "TEnd": float(T[-1]),
        "fluidVolumeRelChange": volume / volume0 - 1.0,
        "densityRange": [float(rho[:nf].min()), float(rho[:nf].max())],
        "finite": bool(torch.isfinite(x).all() and torch.isfinite(rho[:nf]).all()),
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "seconds": seconds,
        "frames": [str(f) for f in sim.frames],
        "figure": str(figure),
        "config": asdict(config),
        "reference": "Martin & Moyce 1952, Phil. Trans. R. Soc. A 244: 312-324, n^2 = 2",
        "data": [list(r) for r in MARTIN_MOYCE],
        "history": history,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
