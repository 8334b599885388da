"""A weakly compressible Taylor-Green vortex assembled from `warpSPHCore.fluids`.

The plain WCSPH scheme, 2D, Re = 100, periodic unit square, from a lattice start:

* velocities u = -U cos(2 pi x) sin(2 pi y), v = U sin(2 pi x) cos(2 pi y), U = 1;
* summation density (a Density call per step), Tait equation of state (c0 = 10 U);
* symmetric pressure acceleration and Morris laminar viscosity (nu = U L / Re);
* kick-drift-kick steps of `stableTimeStep`, the neighbour list searched again each step.

The kinetic energy of the analytic solution decays as exp(-16 pi^2 nu t). The plain scheme
loses energy faster than that once the particles leave the lattice: with ``--n 50 --t 1``
this script measures a decay rate of 5.1 against the analytic 1.58, a kinetic energy 97 %
too low at t = 1, at 7.4 ms per step. Correcting that is what the transport-velocity
formulation of docs/fluids.md is for. The script prints the measured and the analytic
energy and checks only what the plain scheme guarantees: the energy decays and never
exceeds its start, and the mass is conserved exactly.

Run: python examples/wcsph_taylor_green.py [--out DIR] [--n 30] [--t 0.1]
"""

import argparse
import json
import math
import pathlib
import tempfile
import time

import torch

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)
from warpSPHCore.fluids import (
    FluidState,
    Rates,
    kickDriftKick,
    laminarViscosity,
    pressureAcceleration,
    stableTimeStep,
    taitPressure,
)

KERNEL = KernelFunctions.Wendland2
RE, U, RHO0 = 100.0, 1.0, 1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=30, help="particles per axis")
    parser.add_argument("--t", type=float, default=0.1, help="end time")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    dt64 = torch.float64
    n, dx = args.n, 1.0 / args.n
    g = (torch.arange(n, dtype=dt64) + 0.5) * dx
    x, y = torch.meshgrid(g, g, indexing="ij")
    pos = torch.stack([x.flatten(), y.flatten()], dim=1)
    N = pos.shape[0]
    vel = torch.stack([-U * torch.cos(2 * math.pi * pos[:, 0]) * torch.sin(2 * math.pi * pos[:, 1]),
                       U * torch.sin(2 * math.pi * pos[:, 0]) * torch.cos(2 * math.pi * pos[:, 1])],
                      dim=1)
    H = torch.full((N,), 3.0 * dx, dtype=dt64)           # compact support radius: 3 dx
    mass = torch.full((N,), RHO0 * dx * dx, dtype=dt64)
    kinds = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.zeros(2, dtype=dt64), torch.ones(2, dtype=dt64),
                               [True, True])
    c0, nu = 10.0 * U, U * 1.0 / RE
    density = OperationProperties(KERNEL, operation=WarpOperation.Density)

    def search(state: FluidState):
        """A new neighbour search at every rate evaluation (the neighbour policy)."""
        probe = ParticleState(state.positions.detach(), H, mass, kinds)
        return radiusSearchCompactHashMap(probe, domain, mode=SupportScheme.Gather)

    def rates(state: FluidState, adjacency) -> Rates:
        """Summation density, Tait pressure, pressure and viscous accelerations."""
        particles = ParticleState(state.positions, H, mass, kinds)
        rho = warpOperation(particles, density, domain, adjacency=adjacency)
        particles = ParticleState(state.positions, H, mass, kinds, rho)
        p = taitPressure(rho, RHO0, c0)
        a = pressureAcceleration(particles, p, domain, adjacency, kernel=KERNEL)
        a = a + laminarViscosity(particles, state.velocities, domain, adjacency, RHO0 * nu,
                                 kernel=KERNEL)
        return Rates(a)

    def kinetic(state):
        return float(0.5 * (mass[:, None] * state.velocities**2).sum())  # total mass is 1

    state, r = FluidState(pos, vel), None
    e0 = kinetic(state)
    energies, times = [e0], [0.0]
    start = time.perf_counter()
    steps = 0
    with torch.no_grad():
        while times[-1] < args.t - 1e-12:
            dt = float(torch.minimum(stableTimeStep(dx, c0, state.velocities, nu),
                                     torch.tensor(args.t - times[-1], dtype=dt64)))
            state, r = kickDriftKick(state, dt, rates, search, r)
            steps += 1
            times.append(times[-1] + dt)
            energies.append(kinetic(state))
    seconds = time.perf_counter() - start

    analytic = e0 * math.exp(-16.0 * math.pi**2 * nu * times[-1])
    rate = -math.log(energies[-1] / e0) / times[-1]
    print(f"{N} particles, {steps} steps to t = {times[-1]:.3f}, "
          f"{seconds / steps * 1e3:.1f} ms per step")
    print(f"kinetic energy: {energies[-1]:.5f} (analytic {analytic:.5f}, "
          f"relative error {energies[-1] / analytic - 1:+.1%})")
    print(f"decay rate: {rate:.3f} (analytic 16 pi^2 / Re = {16 * math.pi**2 / RE:.3f})")
    (out / "taylor_green.json").write_text(json.dumps({
        "particles": N, "steps": steps, "msPerStep": seconds / steps * 1e3,
        "time": times, "kineticEnergy": energies, "analyticFinal": analytic}, indent=2))

    # what the plain scheme guarantees: decay, no energy created, mass conserved
    assert energies[-1] < e0
    assert max(energies) <= e0 * (1 + 1e-9)
    assert float(mass.sum()) == 1.0
    print("OK")


if __name__ == "__main__":
    main()
