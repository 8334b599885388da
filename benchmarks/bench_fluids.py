"""WCSPH costs (`make bench`) at the reference size (2,500 particles, 2D, float64,
periodic unit square, dx = 1/50, one CPU thread), in one run:

1. the plain scheme's calls (Wendland2, support 3 dx), each timed alone;
2. the Taylor-Green step of `warpsph run tgv` (the transport-velocity scheme, support 4 dx):
   its calls timed alone (the neighbour search, the number-density volumes, the fused
   Momentum operator with the background-pressure sum), the Momentum operator against the
   lean hand-written kernel (`lean.leanMomentum`, same neighbour list), and the whole step
   (kick, transport velocity, drift, search, volumes, equation of state, momentum, kick);
   the step's ratio to the sum of its calls and particles x steps per second;
3. reverse mode through the Taylor-Green rate evaluation (volumes, then the fused Momentum,
   positions and velocities requiring grad, a fixed scalar loss of both outputs): each
   call's forward and backward, with the hand-written reverse kernels (the Density's and the
   Momentum's) and with every call on the tape
   (``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``, switched in the same process), interleaved;
4. the hydrostatic tank of `warpsph run hydrostatic` (H/dx = 40: 3,200 fluid and 558 wall
   particles, its `Scheme`, predictor-corrector): each call of a rate evaluation timed alone
   (the Verlet check with the health flags, the wall extrapolation, the fused momentum, the
   continuity rate, the density diffusion), and the whole step through `Simulation.advance`
   (two rate evaluations), interleaved round by round; the step's ratio to the sum of its
   calls (two evaluations' worth);
5. the 3D dam break of `warpsph run dambreak --dim 3` (a/dx = 10): a step through
   `Simulation.advance`, the wall extrapolation alone, and the step's ratio to the same step
   without it (the step minus its two wall extrapolations).

Each call gets new input tensors every time (a simulation step: no call plan replays it).
Prints medians (ms) and writes JSON (`--json`, default `benchmarks/results/fluids.json`).
The figure to beat for a whole step is JAX-SPH's 27-30 ms on the issue's machine
(docs/performance.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lean import leanMomentum  # noqa: E402

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)
from warpSPHCore.fluids import (  # noqa: E402
    FluidState,
    continuityDensityRate,
    laminarViscosity,
    numberDensityVolumes,
    pressureAcceleration,
    taitPressure,
    transportVelocityAccelerations,
)

KERNEL = KernelFunctions.Wendland2


def _median_ms(fn, repeats):
    fn()
    fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "fluids.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # the comparison: one CPU thread (Warp's CPU is serial)
    dt = torch.float64
    side, d = args.side, 2
    dx = 1.0 / side
    g = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=dt)] * d, indexing="ij"),
                    -1).reshape(-1, d)
    pos = (g + 0.5) * dx
    n = pos.shape[0]
    h = torch.full((n,), 3 * dx, dtype=dt)
    m = torch.full((n,), dx * dx, dtype=dt)
    kinds = torch.zeros(n, dtype=torch.int32)
    dom = DomainDescription(torch.zeros(d, dtype=dt), torch.ones(d, dtype=dt), [True, True])
    v = torch.stack([-torch.cos(2 * math.pi * pos[:, 0]) * torch.sin(2 * math.pi * pos[:, 1]),
                     torch.sin(2 * math.pi * pos[:, 0]) * torch.cos(2 * math.pi * pos[:, 1])],
                    1)

    def state(rho=None):
        return ParticleState(pos.clone(), h, m, kinds, rho)

    with torch.no_grad():
        adj = radiusSearchCompactHashMap(state(), dom, mode=SupportScheme.Gather)
        density = OperationProperties(KERNEL, operation=WarpOperation.Density)
        rho = warpOperation(state(), density, dom, adjacency=adj)
        p = taitPressure(rho, 1.0, 10.0)
        calls = {
            "neighbour search": lambda: radiusSearchCompactHashMap(state(), dom,
                                                                   mode=SupportScheme.Gather),
            "summation density": lambda: warpOperation(state(), density, dom, adjacency=adj),
            "pressure acceleration (symmetric)": lambda: pressureAcceleration(
                state(rho), p.clone(), dom, adj, kernel=KERNEL),
            "laminar viscosity (Morris)": lambda: laminarViscosity(
                state(rho), v.clone(), dom, adj, 0.01, kernel=KERNEL),
            "continuity density rate": lambda: continuityDensityRate(
                state(rho), v.clone(), dom, adj, kernel=KERNEL),
        }
        rows = {name: _median_ms(fn, args.repeats) for name, fn in calls.items()}
    print(f"WCSPH terms, {n} particles, 2D float64, {int(adj.i.numel())} pairs, median of "
          f"{args.repeats} (ms)")
    for name, ms in rows.items():
        print(f"  {name:36s} {ms:7.2f}")
    print(f"  {'sum':36s} {sum(rows.values()):7.2f}")
    tgv = _taylorGreenStep(side, args.repeats)
    reverse = _taylorGreenReverse(side, args.repeats)
    tank = _hydrostaticStep(args.repeats)
    dam3 = _damBreak3D(args.repeats)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"particles": n, "pairs": int(adj.i.numel()), "ms": rows,
                               "sum_ms": sum(rows.values()), "taylorGreenStep": tgv,
                               "taylorGreenReverse": reverse, "hydrostaticStep": tank,
                               "damBreak3DStep": dam3}, indent=2))
    print(f"wrote {out}")
    return 0


NU, C0, RHO0 = 0.01, 10.0, 1.0  # the Taylor-Green sections' viscosity, sound speed, density


def _taylorGreenProblem(side: int):
    """(x0, H, m, kinds, domain, u0, dx): a jittered lattice of side^2 particles on the
    periodic unit square, float64, support 4 dx, the Taylor-Green velocity field."""
    f64, d = torch.float64, 2
    dx = 1.0 / side
    g = torch.Generator().manual_seed(0)
    grid = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=f64)] * d, indexing="ij"),
                       -1).reshape(-1, d)
    x0 = (grid + 0.5 + 0.2 * (torch.rand(grid.shape, generator=g, dtype=f64) - 0.5)) * dx
    n = x0.shape[0]
    H = torch.full((n,), 4 * dx, dtype=f64)
    m = torch.full((n,), RHO0 * dx * dx, dtype=f64)
    kinds = torch.zeros(n, dtype=torch.int32)
    dom = DomainDescription(torch.zeros(d, dtype=f64), torch.ones(d, dtype=f64), [True, True])
    s2, c2 = torch.sin(2 * math.pi * x0), torch.cos(2 * math.pi * x0)
    u0 = torch.stack([-c2[:, 0] * s2[:, 1], s2[:, 0] * c2[:, 1]], 1)
    return x0, H, m, kinds, dom, u0, dx


def _taylorGreenStep(side: int, repeats: int) -> dict:
    """Section 2 of the module docstring; returns its numbers."""
    import warp as wp

    x0, H, m, kinds, dom, u0, dx = _taylorGreenProblem(side)
    f64, d, n = torch.float64, 2, x0.shape[0]
    nu, c0, rho0 = NU, C0, RHO0
    pb, dt = rho0 * c0 * c0, 0.25 * dx / (c0 + 1.0)

    def search(x):
        return radiusSearchCompactHashMap(ParticleState(x, H, m, kinds), dom,
                                          mode=SupportScheme.Gather)

    def volumes(x, adj):
        return numberDensityVolumes(ParticleState(x, H, m, kinds), dom, adj, kernel=KERNEL)

    def momentum(x, adj, V, u, ut):
        rho = m / V
        return transportVelocityAccelerations(
            ParticleState(x, H, m, kinds, rho), c0 * c0 * (rho - rho0), u, dom, adj,
            backgroundPressure=pb, dynamicViscosity=rho0 * nu, transportVelocities=ut,
            volumes=V, kernel=KERNEL)

    def step(x, u, a, ab):
        uh = u + 0.5 * dt * a
        ut = uh + 0.5 * dt * ab
        x = torch.remainder(x + dt * ut, 1.0)
        adj = search(x)
        a, ab = momentum(x, adj, volumes(x, adj), uh, ut)
        return x, uh + 0.5 * dt * a, a, ab

    with torch.no_grad():
        adj = search(x0)
        V = volumes(x0, adj)
        a0, ab0 = momentum(x0, adj, V, u0, u0)
        # every call gets new tensors and a neighbour list object it has not seen, as in a
        # step (a list seen before has its Warp views cached)
        fresh = itertools.cycle([search(x0.clone()) for _ in range(repeats + 2)])
        calls = {
            "neighbour search": lambda: search(x0.clone()),
            "number-density volumes": lambda: volumes(x0.clone(), next(fresh)),
            "momentum + background (fused)": lambda: momentum(
                x0.clone(), next(fresh), V.clone(), u0.clone(), u0.clone()),
        }
        rows = {name: _median_ms(fn, repeats) for name, fn in calls.items()}
        stepMs = _median_ms(lambda: step(x0.clone(), u0.clone(), a0, ab0), repeats)
        # the lean floor of the Momentum operator on the same neighbour list
        Vw = wp.types.vector(length=d, dtype=wp.float64)
        rho = m / V

        def view(t, dtype=wp.float64):
            return wp.from_torch(t.contiguous(), dtype=dtype)

        outs = (wp.zeros(n, dtype=Vw, device="cpu"), wp.zeros(n, dtype=Vw, device="cpu"))
        leanArgs = [view(x0, Vw), view(H), view(c0 * c0 * (rho - rho0)), view(rho), view(V),
                    view(torch.full((n,), rho0 * nu, dtype=f64)), view(u0, Vw), view(u0, Vw),
                    wp.from_torch(adj.j), wp.from_torch(adj.edgeOffsets),
                    wp.from_torch(adj.numNeighbors), Vw(1.0, 1.0)]
        kernel = leanMomentum(d, wp.float64)

        def lean():
            wp.launch(kernel, dim=n, inputs=leanArgs, outputs=list(outs), device="cpu")
            wp.synchronize_device("cpu")

        leanMs = _median_ms(lean, repeats)
        F = wp.to_torch(outs[0])
        ours = momentum(x0, adj, V, u0, u0)[0] * m[:, None]
        agree = float((F - ours).abs().max() / ours.abs().max())
    total = sum(rows.values())
    print(f"Taylor-Green step (transport velocity, support 4 dx), {n} particles, "
          f"{int(adj.i.numel())} pairs, median of {repeats} (ms)")
    for name, ms in rows.items():
        print(f"  {name:36s} {ms:7.2f}")
    print(f"  {'sum of the calls':36s} {total:7.2f}")
    print(f"  {'whole step':36s} {stepMs:7.2f}   step / sum {stepMs / total:.2f}   "
          f"{n / stepMs * 1e3:,.0f} particle-steps/s   (JAX-SPH: 27-30 ms)")
    print(f"  {'lean momentum kernel (floor)':36s} {leanMs:7.2f}   fused / lean "
          f"{rows['momentum + background (fused)'] / leanMs:.2f}   (values agree to "
          f"{agree:.1e})")
    return {"particles": n, "pairs": int(adj.i.numel()), "ms": rows, "sum_ms": total,
            "step_ms": stepMs, "step_over_sum": stepMs / total,
            "particle_steps_per_s": n / stepMs * 1e3, "lean_momentum_ms": leanMs,
            "momentum_over_lean": rows["momentum + background (fused)"] / leanMs}


def _taylorGreenReverse(side: int, repeats: int) -> dict:
    """Section 3 of the module docstring; returns its numbers (ms)."""
    import os

    from warpSPHCore.util.gates import refreshGates

    x0, H, m, kinds, dom, u0, dx = _taylorGreenProblem(side)
    n = x0.shape[0]
    nu, c0, rho0 = NU, C0, RHO0
    with torch.no_grad():
        adj = radiusSearchCompactHashMap(ParticleState(x0, H, m, kinds), dom,
                                         mode=SupportScheme.Gather)
    w = torch.sin(7.0 * x0)

    def once():
        """(volumes forward, momentum forward, backward) in ms, one evaluation."""
        x = x0.clone().requires_grad_(True)
        u = u0.clone().requires_grad_(True)
        t0 = time.perf_counter()
        V = numberDensityVolumes(ParticleState(x, H, m, kinds), dom, adj, kernel=KERNEL)
        t1 = time.perf_counter()
        rho = m / V
        a, ab = transportVelocityAccelerations(
            ParticleState(x, H, m, kinds, rho), c0 * c0 * (rho - rho0), u, dom, adj,
            backgroundPressure=rho0 * c0 * c0, dynamicViscosity=rho0 * nu, volumes=V,
            kernel=KERNEL)
        t2 = time.perf_counter()
        ((a * w).sum() + (ab * w).sum()).backward()
        t3 = time.perf_counter()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3

    gate = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"
    before = os.environ.get(gate)
    samples = {"reverse kernels": [], "tape": []}
    try:
        for k in range(repeats + 2):
            for route, value in (("reverse kernels", "0"), ("tape", "1")):
                os.environ[gate] = value
                refreshGates()
                t = once()
                if k >= 2:  # two warm-up rounds
                    samples[route].append(t)
    finally:
        if before is None:
            os.environ.pop(gate, None)
        else:
            os.environ[gate] = before
        refreshGates()
    rows = {}
    print(f"Taylor-Green rates in reverse mode (volumes + fused Momentum, d/dx and d/du), {n} "
          f"particles, median of {repeats} interleaved rounds (ms)")
    print(f"  {'route':16s} {'volumes fwd':>12s} {'momentum fwd':>13s} {'backward':>9s} "
          f"{'total':>7s}")
    for route, ts in samples.items():
        med = [statistics.median(t[k] for t in ts) for k in range(3)]
        rows[route] = {"volumes_fwd": med[0], "momentum_fwd": med[1], "backward": med[2],
                       "total": sum(med)}
        print(f"  {route:16s} {med[0]:12.2f} {med[1]:13.2f} {med[2]:9.2f} {sum(med):7.2f}")
    print(f"  reverse kernels / tape, total: "
          f"{rows['reverse kernels']['total'] / rows['tape']['total']:.2f}")
    return rows


def _interleaved(calls: dict, step, repeats: int):
    """({name: median ms}, median step ms): each round times every call once and one step,
    so that a load change of the machine affects both sides of the ratio alike."""
    samples = {name: [] for name in calls}
    steps = []
    with torch.no_grad():
        for _ in range(repeats + 2):
            for name, fn in calls.items():
                t = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            step()
            steps.append((time.perf_counter() - t) * 1e3)
    return ({name: statistics.median(ts[2:]) for name, ts in samples.items()},
            statistics.median(steps[2:]))


def _stepMs(sim, repeats: int) -> float:
    """Median time of one `Simulation.advance` (no grad), after two warm-up steps."""
    with torch.no_grad():
        return _median_ms(sim.advance, repeats)


def _hydrostaticStep(repeats: int) -> dict:
    """Section 4 of the module docstring."""
    from warpSPHCore.fluids import LoopOptions, extrapolateWalls, momentumAcceleration
    from warpSPHCore.fluids import densityDiffusion as diffusion
    from warpSPHCore.fluids.cases import hydrostatic

    tank = hydrostatic.setup(hydrostatic.HydrostaticConfig(n=40))
    scheme, P = tank.scheme, tank.particles
    sim = scheme.simulation(P, tank.state, tank.dt,
                            options=LoopOptions(skin=0.2, progress=False, wrap=False))
    with torch.no_grad():
        for _ in range(3):
            sim.advance()
    s = sim.state
    x, u, rho = s.positions, s.velocities, s.densities
    H, m, kinds, dom = P.supports, P.masses, P.kinds, P.domain
    rho0, c0, dx = scheme.rho0, scheme.c0, P.spacing
    g = torch.tensor(scheme.bodyForce, dtype=x.dtype)
    mode = scheme.interaction
    nu = scheme.artificialViscosity.alpha * dx * c0 / 8.0
    kw = dict(kernel=scheme.kernel, operationMode=mode)
    isWall = kinds == 1

    def tait(r):
        return scheme.equationOfState.pressure(r, rho0, c0)

    with torch.no_grad():
        p = tait(rho).clamp(min=0.0)
        w = extrapolateWalls(ParticleState(x, H, m, kinds, rho), p, u, dom,
                             sim.neighbours.adjacency, gravity=g,
                             densityOfPressure=lambda q: scheme.equationOfState.density(
                                 q, rho0, c0), noSlip=scheme._noSlipShare(P),
                             kernel=scheme.kernel)
        V = torch.where(isWall, torch.full_like(p, dx * dx), m / w.densities)
        # every call gets new tensors; the list is the simulation's (a Verlet list is reused)
        adj = sim.neighbours.adjacency
        calls = {
            "Verlet check + health flags": lambda: sim.neighbours(
                type(s)(x.clone(), u.clone(), rho.clone(), s.time)),
            "equation of state + clip": lambda: tait(rho.clone()).clamp(min=0.0),
            "wall extrapolation": lambda: extrapolateWalls(
                ParticleState(x.clone(), H, m, kinds, rho.clone()), p.clone(), u.clone(), dom,
                adj, gravity=g, densityOfPressure=lambda q: scheme.equationOfState.density(
                    q, rho0, c0), noSlip=scheme._noSlipShare(P), kernel=scheme.kernel),
            "momentum (fused)": lambda: momentumAcceleration(
                ParticleState(x.clone(), H, m, kinds, w.densities.clone()),
                w.pressures.clone(), w.velocities.clone(), dom, adj,
                dynamicViscosity=rho0 * nu, volumes=V.clone(), **kw),
            "continuity density rate": lambda: continuityDensityRate(
                ParticleState(x.clone(), H, m, kinds, w.densities.clone()), u.clone(), dom,
                adj, **kw),
            "density diffusion": lambda: diffusion(
                ParticleState(x.clone(), H, m, kinds, w.densities.clone()), dom, adj, 0.1, dx,
                c0, **kw, values=w.densities - (rho0 / (c0 * c0)) * (x @ g)),
        }
        rows, stepMs = _interleaved(calls, sim.advance, repeats)
    evaluation = sum(rows.values())
    total = 2.0 * evaluation  # predictor-corrector: two rate evaluations per step
    n, nf = x.shape[0], tank.fluidCount
    print(f"Hydrostatic tank step (H/dx = 40, {n} particles: {nf} fluid, {n - nf} wall; "
          f"{int(adj.i.numel())} pairs; {sim.stepper.__name__}), median of {repeats} (ms)")
    for name, ms in rows.items():
        print(f"  {name:36s} {ms:7.2f}")
    print(f"  {'sum of the calls, two evaluations':36s} {total:7.2f}")
    print(f"  {'whole step (Simulation.advance)':36s} {stepMs:7.2f}   step / sum "
          f"{stepMs / total:.2f}")
    return {"particles": n, "fluid": nf, "pairs": int(adj.i.numel()), "ms": rows,
            "evaluation_ms": evaluation, "sum_ms": total, "step_ms": stepMs,
            "step_over_sum": stepMs / total, "stepper": sim.stepper.__name__}


def _damBreak3D(repeats: int) -> dict:
    """Section 5 of the module docstring."""
    from warpSPHCore.fluids import LoopOptions, extrapolateWalls
    from warpSPHCore.fluids.cases import dambreak

    case = dambreak.setup(dambreak.DamBreakConfig(dim=3))
    scheme, P = case.scheme, case.particles
    sim = scheme.simulation(P, FluidState(case.positions, case.velocities, case.densities),
                            case.dt, options=LoopOptions(skin=0.2, progress=False, wrap=False))
    stepMs = _stepMs(sim, repeats)
    s = sim.state
    x, u, rho = s.positions, s.velocities, s.densities
    H, m, kinds, dom = P.supports, P.masses, P.kinds, P.domain
    g = torch.tensor(scheme.bodyForce, dtype=x.dtype)
    adj = sim.neighbours.adjacency
    with torch.no_grad():
        p = scheme.equationOfState.pressure(rho, scheme.rho0, scheme.c0).clamp(min=0.0)
        wallsMs = _median_ms(lambda: extrapolateWalls(
            ParticleState(x.clone(), H, m, kinds, rho.clone()), p.clone(), u.clone(), dom, adj,
            gravity=g, densityOfPressure=lambda q: scheme.equationOfState.density(
                q, scheme.rho0, scheme.c0), noSlip=False, kernel=scheme.kernel), repeats)
    evaluations = 2  # predictor-corrector
    without = stepMs - evaluations * wallsMs
    n, nf = x.shape[0], case.fluidCount
    isWall, isFluid = kinds[adj.i] == 1, kinds[adj.j] == 0
    wallFluid = int((isWall & isFluid).sum())
    print(f"3D dam break step (a/dx = {case.config.n}, {n} particles: {nf} fluid, {n - nf} "
          f"wall; {int(adj.i.numel())} pairs, {wallFluid} wall-fluid), median of {repeats} (ms)")
    print(f"  {'wall extrapolation (one evaluation)':36s} {wallsMs:7.2f}")
    print(f"  {'whole step (Simulation.advance)':36s} {stepMs:7.2f}")
    print(f"  {'the step without its extrapolations':36s} {without:7.2f}   with / without "
          f"{stepMs / without:.2f}")
    return {"particles": n, "fluid": nf, "pairs": int(adj.i.numel()),
            "wallFluidPairs": wallFluid, "walls_ms": wallsMs, "step_ms": stepMs,
            "step_without_walls_ms": without, "with_over_without": stepMs / without}


if __name__ == "__main__":
    sys.exit(main())
