"""A plane channel with an open inlet and outlet (`warpsph run channel`): a parabolic inflow
through an inlet buffer, an outlet buffer at a fixed pressure, no-slip walls, and the steady
profile against the Poiseuille parabola.

A 2D channel of width W = 1 and length ``length`` W along x, no-slip dummy-particle walls at
y = 0 and y = W (Adami, Hu & Adams 2012), no periodic axis: the fluid enters at x = 0 through
an inlet buffer with the prescribed profile u(y) = 4 U_max y (W - y) / W^2 and leaves at
x = length through an outlet buffer held at p = 0 (`fluids.openboundary`). Nondimensional:
rho0 = 1, U_max = 1, U_mean = 2/3, Re = U_mean W / nu, c0 = ``c0`` U_max with a linear
equation of state, the continuity equation with the Molteni-Colagrossi density diffusion
(delta = 0.1), the predictor-corrector stepper at the scheme's time step.

The steady state is the Poiseuille flow: u(y) the inflow parabola everywhere, the pressure
falling linearly with dp/dx = -8 rho0 nu U_max / W^2 (to the outlet's 0). The fluid starts
with the parabola (``start="parabola"``) or with the plug U_mean (``start="plug"``, which
develops into the parabola over a few W^2 / (pi^2 nu)).

Measured over the last flow-through time T_f = length / U_mean of the run (time averages of
tensors recorded every step, read back once at the end):

* ``profileL2RelErr``: the L2 error of the fluid's u over y-bins of width dx in the middle of
  the channel (0.4 to 0.8 of its length), time-averaged, against the parabola, relative to
  U_max;
* ``massBalanceRelErr``: |Q_in - Q_out| / Q_in with Q the time-averaged mass flux sum_i m_i
  u_i / w of the fluid in a slab of width w = 0.1 length behind the inlet and in front of
  the outlet; ``massInflow`` / ``massOutflow``: the mass of the particles that crossed x = 0
  into the fluid and x = length out of it over that time (whole particles);
* ``pressureGradientRelErr``: the least-squares slope of the fluid's time-averaged pressure
  over x in the middle of the channel against -8 rho0 nu U_max / W^2;
* ``lostParticles``: particles outside the search domain at the end; ``stuckParticles``:
  outlet-buffer particles not moving out (axial speed below 1e-3 U_mean) at the end.

The run raises when the inflow runs out of particles (`HealthMonitor`, "inflow").
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
from ..openboundary import Inlet, OpenBoundary, Outlet, openChannel, parabolicProfile
from ..scheme import DensityDiffusion, Linear, ParticleSet, Scheme, Walls
from ._common import THREADS_HELP, caseSimulation, option, torchThreads

__all__ = ["ChannelConfig", "Channel", "setup", "channelScheme", "channelParticles", "run"]

KERNEL = KernelFunctions.Wendland2


@dataclass(frozen=True)
class ChannelConfig:
    """Parameters of the channel case (module docstring); the defaults are the acceptance
    size."""

    ny: int = option(20, "fluid particles across the channel (dx = W / ny)")
    length: float = option(2.0, "channel length in widths W")
    re: float = option(5.0, "Reynolds number U_mean W / nu")
    c0: float = option(20.0, "sound speed in U_max (the pressure drop over rho0 c0^2 is the "
                             "compressibility error)")
    flowThroughs: float = option(1.0, "run time after the start-up, in flow-through times "
                                      "length / U_mean (the measurement window is the last "
                                      "one)")
    startup: float = option(1.0, "start-up time before the measured flow-throughs")
    start: str = option("parabola", "initial fluid velocity: parabola or plug")
    support: float = option(3.0, "support H in particle spacings")
    spareLayers: int = option(8, "spare particles beyond the outlet, in layers of lanes")
    characteristic: bool = option(True, "outlet pressure from the characteristics "
                                        "(Outlet.characteristic; False: p = 0 fixed)")
    skin: float = option(0.1, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        if self.ny < 4 or self.length <= 0 or self.re <= 0 or self.c0 <= 1 \
                or self.flowThroughs <= 0 or self.startup < 0 or self.support <= 0:
            raise ValueError(f"ChannelConfig: ny={self.ny}, length={self.length}, "
                             f"re={self.re}, c0={self.c0}, flowThroughs={self.flowThroughs}, "
                             f"startup={self.startup}, support={self.support}; accepted: "
                             "ny >= 4, length > 0, re > 0, c0 > 1, flowThroughs > 0, "
                             "startup >= 0, support > 0")
        if self.start not in ("parabola", "plug"):
            raise ValueError(f"ChannelConfig: start={self.start!r}; accepted: parabola, plug")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"ChannelConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")


@dataclass
class Channel:
    """A set-up case (`setup`)."""

    config: ChannelConfig
    positions: torch.Tensor
    velocities: torch.Tensor
    kinds: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    domain: DomainDescription
    boundary: OpenBoundary
    dx: float
    nu: float
    c0: float
    rho0: float
    umax: float
    lengthX: float


def setup(config: ChannelConfig) -> Channel:
    """Particles, constants and the open boundary of `config` (module docstring)."""
    t = dict(dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    W, umax, rho0 = 1.0, 1.0, 1.0
    dx = W / config.ny
    nx = round(config.length / dx)
    L = nx * dx
    nu = (2.0 / 3.0) * umax * W / config.re
    c0 = config.c0 * umax
    layers = math.ceil(config.support - 1e-9) + 1
    inlet = Inlet(0.0, parabolicProfile(umax, [0.0], [W]), layers=layers)
    x, kinds, boundary, (lo, hi) = openChannel(
        [0.0, 0.0], [L, W], dx, inlet, Outlet(L, 0.0, layers, config.characteristic),
        wallLayers=layers - 1,
        reservoirLayers=4, spareLayers=config.spareLayers, **t)
    N = x.shape[0]
    y = x[:, 1]
    if config.start == "parabola":
        u = 4.0 * umax * y * (W - y) / W**2
    else:
        u = torch.full_like(y, 2.0 / 3.0 * umax)
    v = torch.zeros_like(x)
    v[:, 0] = torch.where(kinds == 0, u, 0.0)
    domain = DomainDescription(torch.tensor(lo, **t), torch.tensor(hi, **t), [False, False])
    return Channel(config, x, v, kinds, torch.full((N,), config.support * dx, **t),
                   torch.full((N,), rho0 * dx * dx, **t), domain, boundary, dx, nu, c0, rho0,
                   umax, L)


def channelScheme(case: Channel, viscosity=None) -> Scheme:
    """The case's `Scheme` (module docstring); `viscosity` nu defaults to the config's."""
    return Scheme(rho0=case.rho0, c0=case.c0, equationOfState=Linear(), density="continuity",
                  viscosity=case.nu if viscosity is None else viscosity,
                  densityDiffusion=DensityDiffusion("molteni", 0.1), walls=Walls(noSlip=True),
                  kernel=KERNEL)


def channelParticles(case: Channel, boundary: OpenBoundary | None = None) -> ParticleSet:
    """The case's `ParticleSet` with its open boundary (or `boundary`)."""
    return ParticleSet(case.supports, case.masses, case.kinds, case.domain, case.dx,
                       openBoundary=case.boundary if boundary is None else boundary)


def _figure(path: Path, yb, ub, exact, xs, ps, slope, history, case: Channel) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (a0, a1, a2) = plt.subplots(1, 3, figsize=(14, 4.2))
    a0.plot(exact, yb, "k-", lw=1, label="Poiseuille")
    a0.plot(ub, yb, "o", ms=3, label="SPH (time average)")
    a0.set_xlabel("u / U_max")
    a0.set_ylabel("y / W")
    a0.legend(fontsize=8)
    a1.plot(xs, ps, "o", ms=3, label="SPH (time average)")
    xx = np.asarray(xs)
    a1.plot(xx, slope * (xx - case.lengthX), "k-", lw=1, label="-8 rho0 nu U_max / W^2")
    a1.set_xlabel("x / W")
    a1.set_ylabel("p / (rho0 U_max^2)")
    a1.legend(fontsize=8)
    tt = np.asarray(history["time"])
    a2.plot(tt, history["inflow"], label="Q_in (slab)")
    a2.plot(tt, history["outflow"], label="Q_out (slab)")
    a2.axhline(2.0 / 3.0, color="k", ls="--", lw=1, label="U_mean rho0 W")
    a2.set_xlabel("t")
    a2.set_ylabel("mass flux")
    a2.legend(fontsize=8)
    c = case.config
    fig.suptitle(f"open channel, Re = {c.re:g}, W / dx = {c.ny}, length {c.length:g} W, "
                 f"c0 = {c.c0:g} U_max")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: ChannelConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case with ``config.threads`` torch threads: writes ``results.json`` and
    ``channel.png`` into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, out, writer, quiet)


def _run(config: ChannelConfig, out, writer, quiet: bool) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config)
    scheme = channelScheme(case)
    particles = channelParticles(case)
    dt = scheme.timeStep(particles, 1.5 * case.umax)
    flowThrough = case.lengthX / (2.0 / 3.0 * case.umax)
    total = config.startup + config.flowThroughs * flowThrough
    steps = max(1, math.ceil(total / dt))
    dt = total / steps
    window = min(steps, max(1, round(flowThrough / dt)))
    sim = caseSimulation(config, out, writer, quiet, scheme, particles,
                         FluidState(case.positions, case.velocities,
                                    torch.full_like(case.masses, case.rho0)), dt,
                         maxSpeed=1.5 * case.umax)
    ob, kinds, dx, L = case.boundary, case.kinds, case.dx, case.lengthX
    ny = config.ny
    nbx = max(1, round(L / dx))
    m = case.masses
    slab = 0.1 * L
    acc = {"u": torch.zeros(ny, dtype=m.dtype, device=m.device),
           "n": torch.zeros(ny, dtype=m.dtype, device=m.device),
           "p": torch.zeros(nbx, dtype=m.dtype, device=m.device),
           "np": torch.zeros(nbx, dtype=m.dtype, device=m.device),
           "in": torch.zeros((), dtype=m.dtype, device=m.device),
           "out": torch.zeros((), dtype=m.dtype, device=m.device),
           "crossIn": torch.zeros((), dtype=torch.int64, device=m.device),
           "crossOut": torch.zeros((), dtype=torch.int64, device=m.device)}
    fluxes = []
    prev = [ob.zones(sim.state.positions, kinds)]

    def record(s):  # tensors only: read back at the end
        st = s.state
        x, v = st.positions, st.velocities
        z = ob.zones(x, kinds)
        mu = m * v[:, 0]
        qin = torch.where(z.fluid & (x[:, 0] < slab), mu, 0.0).sum() / slab
        qout = torch.where(z.fluid & (x[:, 0] >= L - slab), mu, 0.0).sum() / slab
        fluxes.append(torch.stack([qin, qout]))
        if s.step > steps - window:
            middle = z.fluid & (x[:, 0] >= 0.4 * L) & (x[:, 0] < 0.8 * L)
            b = torch.clamp(torch.floor(x[:, 1] / dx), 0, ny - 1).long()
            acc["u"].index_add_(0, b, torch.where(middle, v[:, 0], 0.0))
            acc["n"].index_add_(0, b, middle.to(m.dtype))
            p = scheme.equationOfState.pressure(st.densities, case.rho0, case.c0)
            bx = torch.clamp(torch.floor(x[:, 0] / dx), 0, nbx - 1).long()
            acc["p"].index_add_(0, bx, torch.where(z.fluid, p, 0.0))
            acc["np"].index_add_(0, bx, z.fluid.to(m.dtype))
            acc["in"] += qin
            acc["out"] += qout
            acc["crossIn"] += (prev[0].inlet & z.fluid).sum()
            acc["crossOut"] += (prev[0].fluid & z.outlet).sum()
        prev[0] = z

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(steps, callback=record)
    seconds = time.perf_counter() - start
    state = sim.state
    cpu = {k: v.detach().cpu().double() for k, v in acc.items()}
    yb = (torch.arange(ny, dtype=torch.float64) + 0.5) * dx
    ub = cpu["u"] / cpu["n"].clamp(min=1.0)
    exact = 4.0 * case.umax * yb * (1.0 - yb)
    l2 = float(((ub - exact) ** 2).mean().sqrt() / case.umax)
    xs = (torch.arange(nbx, dtype=torch.float64) + 0.5) * dx
    ps = cpu["p"] / cpu["np"].clamp(min=1.0)
    mid = (xs >= 0.2 * L) & (xs < 0.8 * L) & (cpu["np"] > 0)
    X = torch.stack([xs[mid], torch.ones_like(xs[mid])], dim=1)
    slope = float(torch.linalg.lstsq(X, ps[mid][:, None]).solution[0, 0])
    exactSlope = -8.0 * case.rho0 * case.nu * case.umax
    qin, qout = float(cpu["in"]) / window, float(cpu["out"]) / window
    x = state.positions.detach()
    z = ob.zones(x, kinds)
    lo, hi = case.domain.min.to(x), case.domain.max.to(x)
    lost = int(((x < lo) | (x > hi)).any(1).sum())
    stuck = int((z.outlet & (state.velocities[:, 0] < 1e-3 * 2.0 / 3.0 * case.umax)).sum())
    fl = torch.stack(fluxes).detach().cpu().double()
    stride = max(1, steps // 200)
    history = {"time": [(k + 1) * dt for k in range(0, steps, stride)],
               "inflow": fl[::stride, 0].tolist(), "outflow": fl[::stride, 1].tolist()}
    figure = out / "channel.png"
    _figure(figure, yb.numpy(), ub.numpy(), exact.numpy(), xs[mid].numpy(), ps[mid].numpy(),
            exactSlope, history, case)
    N = x.shape[0]
    massPerParticle = float(m[0])
    results = {
        "case": "channel",
        "profileL2RelErr": l2,
        "profileMaxRelErr": float((ub - exact).abs().max() / case.umax),
        "massBalanceRelErr": abs(qin - qout) / qin,
        "massFluxIn": qin,
        "massFluxOut": qout,
        "massFluxExact": 2.0 / 3.0 * case.umax * case.rho0,
        "massInflow": int(cpu["crossIn"]) * massPerParticle,
        "massOutflow": int(cpu["crossOut"]) * massPerParticle,
        "pressureGradient": slope,
        "pressureGradientExact": exactSlope,
        "pressureGradientRelErr": abs(slope - exactSlope) / abs(exactSlope),
        "lostParticles": lost,
        "stuckParticles": stuck,
        "fluidParticlesEnd": int(z.fluid.sum()),
        "msPerStep": seconds / steps * 1e3,
        "particleStepsPerSecond": N * steps / seconds,
        "particles": N,
        "steps": steps,
        "measuredSteps": window,
        "dx": dx,
        "t": total,
        "dt": dt,
        "nu": case.nu,
        "c0": case.c0,
        "neighbourBuilds": sim.neighbours.builds,
        "rateEvaluations": sim.neighbours.calls,
        "seconds": seconds,
        "profile": {"y": yb.tolist(), "u": ub.tolist(), "exact": exact.tolist()},
        "frames": [str(p) for p in sim.frames],
        "figure": str(figure),
        "config": asdict(config),
        "history": history,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
