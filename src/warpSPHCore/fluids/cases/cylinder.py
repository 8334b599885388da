"""Flow past a cylinder in a channel, the DFG 2D-1 benchmark (Schafer & Turek 1996,
`warpsph run cylinder`): drag, lift and the pressure difference across the cylinder against
the benchmark's reference intervals, with an open inlet and outlet.

The geometry and flow of the benchmark: a channel 2.2 x 0.41 (no-slip walls at y = 0 and
y = 0.41), a cylinder of diameter D = 0.1 centred at (0.2, 0.2) (no-slip dummy particles
carved by its signed distance, `bodyParticles`), the parabolic inflow u(y) = 4 U_max y
(0.41 - y) / 0.41^2 with U_max = 0.3 (U_mean = 0.2), nu = 1e-3, rho = 1, Re = U_mean D / nu
= 20, an outlet at x = 2.2 held at p = 0 (`fluids.openboundary`). The reference values
(Schafer & Turek 1996, Table 3): c_D = 5.57-5.59, c_L = 0.0104-0.0110 and dp = p(0.15, 0.2) -
p(0.25, 0.2) = 0.1172-0.1176, with c_D = 2 F_D / (rho U_mean^2 D) and c_L = 2 F_L / (rho
U_mean^2 D), F the force of the fluid on the cylinder (`Scheme.wallForce`).

Scheme: the continuity equation with the Molteni-Colagrossi density diffusion (delta = 0.1),
a linear equation of state with c0 = ``c0`` U_max, Morris viscosity, Adami no-slip walls,
predictor-corrector at the scheme's time step; Wendland C2 with support ``support`` dx.
The fluid starts with the developed inflow profile everywhere (the steady channel flow
without the cylinder), so only the flow around the cylinder has to settle.

Measured: the force every ``every`` steps; ``dragCoefficient``, ``liftCoefficient`` and
``pressureDifference`` are averages over the last ``window`` time units (the pressures at the
two points are Shepard averages of the particles' pressures, the walls' extrapolated ones
included, with the Wendland C2 weights of the support). ``dragGradients`` differentiates
the time-averaged drag coefficient of a short rollout of a small channel with respect to
U_max and the cylinder's radius (its wall particles scaled about the centre) and compares
with central differences (``dragGradientFDRelErr``).
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
from ..rollout import rollout
from ..scheme import DensityDiffusion, Linear, ParticleSet, Scheme, Walls
from ..walls import bodyParticles
from ._common import THREADS_HELP, caseSimulation, option, torchThreads

__all__ = ["CylinderConfig", "Cylinder", "setup", "cylinderScheme", "cylinderParticles",
           "dragGradients", "run", "REFERENCE"]

KERNEL = KernelFunctions.Wendland2
#: the benchmark's reference intervals (Schafer & Turek 1996, Table 3, test case 2D-1)
REFERENCE = {"dragCoefficient": (5.57, 5.59), "liftCoefficient": (0.0104, 0.0110),
             "pressureDifference": (0.1172, 0.1176)}
WIDTH, LENGTH, DIAMETER, CENTRE, UMAX, NU = 0.41, 2.2, 0.1, (0.2, 0.2), 0.3, 1e-3


@dataclass(frozen=True)
class CylinderConfig:
    """Parameters of the cylinder case (module docstring); the defaults are the acceptance
    size."""

    resolution: int = option(10, "cylinder diameter in particle spacings D / dx (10, 20, "
                                 "40, ...: 0.41 / dx must be whole)")
    t: float = option(6.0, "end time")
    window: float = option(1.0, "averaging window at the end")
    length: float = option(LENGTH, "channel length (2.2: the benchmark)")
    c0: float = option(15.0, "sound speed in U_max")
    support: float = option(3.0, "support H in particle spacings")
    every: int = option(10, "steps between force samples")
    spareLayers: int = option(8, "spare particles beyond the outlet, in layers of lanes")
    gradients: bool = option(True, "also run dragGradients at its small size")
    characteristic: bool = option(True, "outlet pressure from the characteristics "
                                        "(Outlet.characteristic; False: p = 0 fixed)")
    skin: float = option(0.1, "Verlet skin as a fraction of the support")
    frames: int = option(0, "write a particle frame every k steps (0: none)")
    dtype: str = option("float64", "float64 or float32")
    device: str = option("cpu", "torch device")
    threads: int = option(1, THREADS_HELP)

    def __post_init__(self):
        n = WIDTH * self.resolution / DIAMETER
        if self.resolution < 2 or abs(n - round(n)) > 1e-6:
            raise ValueError(f"CylinderConfig: resolution={self.resolution}; accepted: D / dx "
                             ">= 2 with 0.41 / dx whole (10, 20, 40, ...)")
        if not (self.t > self.window > 0) or self.c0 <= 1 or self.every < 1 \
                or self.length <= CENTRE[0] + DIAMETER:
            raise ValueError(f"CylinderConfig: t={self.t}, window={self.window}, "
                             f"c0={self.c0}, every={self.every}, length={self.length}; "
                             "accepted: t > window > 0, c0 > 1, every >= 1, a length past "
                             "the cylinder")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"CylinderConfig: dtype={self.dtype!r}; accepted: float64, "
                             "float32")


@dataclass
class Cylinder:
    """A set-up case (`setup`)."""

    positions: torch.Tensor
    velocities: torch.Tensor
    kinds: torch.Tensor
    body: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    domain: DomainDescription
    boundary: OpenBoundary
    dx: float
    c0: float
    rho0: float


def setup(resolution: float, *, length: float = LENGTH, support: float = 3.0,
          c0: float = 15.0, spareLayers: int = 8, maxSpeed=UMAX, characteristic: bool = True,
          dtype=torch.float64, device="cpu") -> Cylinder:
    """Particles of the benchmark at D / dx = `resolution` (module docstring); `maxSpeed`
    U_max may be a 0-dim tensor (the inflow is then differentiable with respect to it)."""
    dx = DIAMETER / resolution
    layers = math.ceil(support - 1e-9) + 1
    inlet = Inlet(0.0, parabolicProfile(maxSpeed, [0.0], [WIDTH]), layers=layers)
    nx = round(length / dx)
    x, kinds, boundary, (lo, hi) = openChannel(
        [0.0, 0.0], [nx * dx, WIDTH], dx, inlet, Outlet(nx * dx, 0.0, layers, characteristic),
        wallLayers=layers - 1, reservoirLayers=4, spareLayers=spareLayers, dtype=dtype,
        device=device)
    centre = torch.tensor(CENTRE, dtype=dtype, device=device)
    x, kinds, body = bodyParticles(
        x, kinds, lambda p: torch.linalg.vector_norm(p - centre, dim=1) - 0.5 * DIAMETER, dx,
        layers - 1)
    y = x[:, 1]
    u = 4.0 * float(UMAX) * y * (WIDTH - y) / WIDTH**2
    v = torch.zeros_like(x)
    v[:, 0] = torch.where(kinds == 0, u, 0.0)
    N = x.shape[0]
    t = dict(dtype=dtype, device=device)
    domain = DomainDescription(torch.tensor(lo, **t), torch.tensor(hi, **t), [False, False])
    rho0 = 1.0
    return Cylinder(x, v, kinds, body, torch.full((N,), support * dx, **t),
                    torch.full((N,), rho0 * dx * dx, **t), domain, boundary, dx,
                    c0 * UMAX, rho0)


def cylinderScheme(case: Cylinder) -> Scheme:
    """The case's `Scheme` (module docstring)."""
    return Scheme(rho0=case.rho0, c0=case.c0, equationOfState=Linear(), density="continuity",
                  viscosity=NU, densityDiffusion=DensityDiffusion("molteni", 0.1),
                  walls=Walls(noSlip=True), kernel=KERNEL)


def cylinderParticles(case: Cylinder) -> ParticleSet:
    """The case's `ParticleSet` with its open boundary."""
    return ParticleSet(case.supports, case.masses, case.kinds, case.domain, case.dx,
                       openBoundary=case.boundary)


def _coefficient(force, rho0):
    return 2.0 * force / (rho0 * (2.0 / 3.0 * UMAX) ** 2 * DIAMETER)


def _pointPressures(points, x, p, H, active):
    """Shepard averages of `p` at `points` ``[P, d]`` with Wendland C2 weights of support H
    over the `active` particles."""
    r = torch.cdist(points, x)
    q = r / H[None, :]
    w = torch.where((q < 1.0) & active[None, :], (1.0 - q).clamp(min=0) ** 4 * (1.0 + 4.0 * q),
                    0.0)
    return (w * p[None, :]).sum(1) / w.sum(1)


def dragGradients(resolution: float = DIAMETER * 16 / WIDTH, steps: int = 8,
                  length: float = 0.6) -> dict:
    """The time-averaged drag coefficient of a `steps`-step rollout of a short channel
    (`length`, D / dx = `resolution`, float64) differentiated with respect to U_max and the
    cylinder's radius, in reverse mode, against central differences.

    Returns:
        ``{"dCD_dUmax": .., "dCD_dUmaxFD": .., "dCD_dRadius": .., "dCD_dRadiusFD": ..,
        "dragGradientFDRelErr": largest relative difference, "meanDrag": ..}``.
    """
    R0 = 0.5 * DIAMETER

    def meanDrag(U, R):
        case = setup(resolution, length=length, maxSpeed=U, c0=15.0)
        centre = torch.tensor(CENTRE, dtype=torch.float64)
        x = torch.where(case.body[:, None], centre + (case.positions - centre) * (R / R0),
                        case.positions)
        scheme, particles = cylinderScheme(case), cylinderParticles(case)
        neighbours = scheme.neighbours(particles)
        dt = scheme.timeStep(particles, 1.5 * UMAX)
        state = FluidState(x, case.velocities * (U / UMAX),
                           torch.full_like(case.masses, case.rho0))
        out = rollout(state, dt, steps, scheme.rates(particles), neighbours,
                      stepper=scheme.stepper, trajectoryEvery=2)
        drag, tr = scheme.wallForce(particles, case.body), out.trajectory
        values = []
        for k in range(len(tr.steps)):
            s = FluidState(tr.positions[k], tr.velocities[k], tr.densities[k])
            adj = scheme.neighbours(particles)(FluidState(s.positions.detach(),
                                                          s.velocities.detach()))
            values.append(_coefficient(drag(s, adj)[0], case.rho0))
        return torch.stack(values).mean()

    U = torch.tensor(UMAX, dtype=torch.float64, requires_grad=True)
    R = torch.tensor(R0, dtype=torch.float64, requires_grad=True)
    cd = meanDrag(U, R)
    gU, gR = torch.autograd.grad(cd, (U, R))
    with torch.no_grad():
        hU, hR = 1e-6, 1e-7
        fdU = (meanDrag(U + hU, R) - meanDrag(U - hU, R)) / (2 * hU)
        fdR = (meanDrag(U, R + hR) - meanDrag(U, R - hR)) / (2 * hR)
    errU = abs(float(gU) - float(fdU)) / abs(float(fdU))
    errR = abs(float(gR) - float(fdR)) / abs(float(fdR))
    return {"dCD_dUmax": float(gU), "dCD_dUmaxFD": float(fdU), "dCD_dRadius": float(gR),
            "dCD_dRadiusFD": float(fdR), "dragGradientFDRelErr": max(errU, errR),
            "meanDrag": float(cd.detach()), "resolution": resolution, "steps": steps,
            "length": length}


def _figure(path: Path, x, u, p, kinds, history, case: Cylinder, config) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig = plt.figure(figsize=(14, 7))
    fluid = (kinds == 0).numpy()
    xf, speed, pf = x[fluid].numpy(), u[fluid].norm(dim=1).numpy(), p[fluid].numpy()
    size = max(0.5, 3000.0 / max(1, fluid.sum()) ** 0.5)
    for k, (values, label) in enumerate(((speed, "|u|"), (pf, "p"))):
        ax = fig.add_subplot(3, 1, k + 1)
        sc = ax.scatter(xf[:, 0], xf[:, 1], c=values, s=size, cmap="viridis")
        walls = ~fluid
        ax.scatter(x[walls, 0].numpy(), x[walls, 1].numpy(), c="0.6", s=size)
        ax.set_xlim(-0.05, case.boundary.outlet.position + 0.05)
        ax.set_aspect("equal")
        ax.set_title(label)
        fig.colorbar(sc, ax=ax, shrink=0.8)
    t = np.asarray(history["time"])
    for k, (key, name, label) in enumerate((("drag", "dragCoefficient", "c_D"),
                                            ("lift", "liftCoefficient", "c_L"))):
        ax = fig.add_subplot(3, 2, 5 + k)
        ax.plot(t, history[key])
        ax.axhspan(*REFERENCE[name], color="k", alpha=0.2, label="reference")
        if key == "drag":  # the impulsive start's first samples are far off the scale
            ax.set_ylim(0.0, 3.0 * REFERENCE[name][1])
        ax.set_xlabel("t")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"DFG 2D-1 (Re = 20), D / dx = {config.resolution}, c0 = {config.c0:g} "
                 "U_max")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(config: CylinderConfig, out, *, writer=None, quiet: bool = False) -> dict:
    """Run the case with ``config.threads`` torch threads: writes ``results.json`` and
    ``cylinder.png`` into `out`.

    Returns:
        The results (module docstring; the dict written to results.json).
    """
    with torchThreads(config.threads):
        return _run(config, out, writer, quiet)


def _run(config: CylinderConfig, out, writer, quiet: bool) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    case = setup(config.resolution, length=config.length, support=config.support,
                 c0=config.c0, spareLayers=config.spareLayers,
                 characteristic=config.characteristic,
                 dtype=getattr(torch, config.dtype), device=torch.device(config.device))
    scheme, particles = cylinderScheme(case), cylinderParticles(case)
    dt = scheme.timeStep(particles, 1.5 * UMAX)
    steps = max(1, math.ceil(config.t / dt))
    dt = config.t / steps
    sim = caseSimulation(config, out, writer, quiet, scheme, particles,
                         FluidState(case.positions, case.velocities,
                                    torch.full_like(case.masses, case.rho0)), dt,
                         maxSpeed=1.5 * UMAX)
    drag = scheme.wallForce(particles, case.body)
    inputs = scheme._continuityInputs(particles)
    points = torch.tensor([[CENTRE[0] - 0.5 * DIAMETER, CENTRE[1]],
                           [CENTRE[0] + 0.5 * DIAMETER, CENTRE[1]]], dtype=case.masses.dtype,
                          device=case.masses.device)
    samples = []

    def record(s):
        if s.step % config.every and s.step != steps:
            return
        st = s.state
        adj = s.neighbours(st)
        F = drag(st, adj)
        mi = inputs(st, adj)
        active = mi.fluid | (case.kinds == 1)
        pp = _pointPressures(points, st.positions, mi.pressures, case.supports, active)
        samples.append(torch.cat([torch.as_tensor([float(st.time)], dtype=F.dtype), F.cpu(),
                                  (pp[0] - pp[1]).reshape(1).cpu()]))

    start = time.perf_counter()
    with torch.no_grad():
        sim.run(steps, callback=record)
    seconds = time.perf_counter() - start
    h = torch.stack(samples).double()
    cd, cl = _coefficient(h[:, 1], case.rho0), _coefficient(h[:, 2], case.rho0)
    last = h[:, 0] >= config.t - config.window - 1e-12
    result = {"dragCoefficient": float(cd[last].mean()),
              "liftCoefficient": float(cl[last].mean()),
              "pressureDifference": float(h[last, 3].mean())}
    errors = {}
    for name, (lo, hi) in REFERENCE.items():
        mid = 0.5 * (lo + hi)
        errors[name.replace("Coefficient", "") + "RelErr"] = abs(result[name] - mid) / mid
    state = sim.state
    z = case.boundary.zones(state.positions.detach(), case.kinds)
    history = {"time": h[:, 0].tolist(), "drag": cd.tolist(), "lift": cl.tolist(),
               "pressureDifference": h[:, 3].tolist()}
    figure = out / "cylinder.png"
    with torch.no_grad():
        mi = inputs(state, sim.neighbours.adjacency)
    _figure(figure, state.positions.detach().cpu().double(),
            state.velocities.detach().cpu().double(), mi.pressures.detach().cpu().double(),
            torch.where(z.fluid, 0, 1).cpu(), history, case, config)
    N = state.positions.shape[0]
    results = {"case": "cylinder", **result,
               "reference": {k: list(v) for k, v in REFERENCE.items()},
               "dragRelErr": errors["dragRelErr"],
               "liftRelErr": errors["liftRelErr"],
               "pressureDifferenceRelErr": errors["pressureDifferenceRelErr"],
               "dragStdOverWindow": float(cd[last].std()) if int(last.sum()) > 1 else 0.0,
               "msPerStep": seconds / steps * 1e3,
               "particleStepsPerSecond": N * steps / seconds,
               "particles": N, "fluidParticlesEnd": int(z.fluid.sum()), "steps": steps,
               "dx": case.dx, "dt": dt, "t": config.t, "c0": case.c0,
               "neighbourBuilds": sim.neighbours.builds,
               "rateEvaluations": sim.neighbours.calls, "seconds": seconds}
    if config.gradients:
        g = dragGradients()
        results["dragGradientFDRelErr"] = g["dragGradientFDRelErr"]
        results["dragGradients"] = g
    results.update({"figure": str(figure), "frames": [str(p) for p in sim.frames],
                    "config": asdict(config), "history": history})
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results
