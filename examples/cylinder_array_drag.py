"""The drag of a cylinder in a periodic array (Morris, Fox & Zhu 1997), with
`Scheme.wallForce`.

A cylinder of radius R = 0.02 m (three layers of wall particles inside its surface, carved
out of the lattice by `fluids.bodyParticles`) sits in
a periodic square of side 0.1 m; the fluid (rho = 1000 kg/m^3, nu = 1e-6 m^2/s) is driven
by the body force F = 1.5e-7 m/s^2 along x (Re about 1e-2). The scheme is summation density
with the transport velocity and no-slip walls. At steady state the cylinder holds the whole
fluid against the body force: the drag equals M F (M the fluid's mass per unit depth) and
the lift vanishes, which the script checks, with the drag growing monotonically before.

Run: python examples/cylinder_array_drag.py [--out DIR] [--n 40]
"""

import argparse
import json
import pathlib
import tempfile

import torch

from warpSPHCore import DomainDescription, ParticleType
from warpSPHCore.fluids import (
    FluidState,
    Linear,
    LoopOptions,
    ParticleSet,
    Scheme,
    TransportVelocity,
    Walls,
    bodyParticles,
    referenceSoundSpeed,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="output directory (default: a temporary one)")
    ap.add_argument("--n", type=int, default=40, help="particles along the side")
    args = ap.parse_args()
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="warpsph_"))
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    f64 = torch.float64
    L, R, n = 0.1, 0.02, args.n
    nu, F, rho0 = 1e-6, 1.5e-7, 1000.0
    dx = L / n
    g = (torch.arange(n, dtype=f64) + 0.5) * dx
    lattice = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    centre = torch.full((2,), L / 2, dtype=f64)
    # the fluid outside the cylinder, three layers of its wall particles inside the surface
    x, kinds, cylinder = bodyParticles(
        lattice, torch.full((n * n,), int(ParticleType.Fluid), dtype=torch.int32),
        lambda p: (p - centre).norm(dim=1) - R, dx, layers=3)
    N = x.shape[0]
    box = DomainDescription(torch.zeros(2, dtype=f64), torch.full((2,), L, dtype=f64),
                            [True, True])
    speed = 1.2e-4  # the steady largest speed, for the sound speed and the time step
    scheme = Scheme(rho0=rho0, c0=referenceSoundSpeed(speed), equationOfState=Linear(),
                    density="summation", viscosity=nu, walls=Walls(noSlip=True),
                    transportVelocity=TransportVelocity(), bodyForce=(F, 0.0))
    particles = ParticleSet(torch.full((N,), 3 * dx, dtype=f64),
                            torch.full((N,), rho0 * dx * dx, dtype=f64), kinds, box, dx)
    sim = scheme.simulation(particles, FluidState(x, torch.zeros_like(x)), maxSpeed=speed,
                            options=LoopOptions(progress=False))
    force = scheme.wallForce(particles, cylinder)
    fluid = kinds == int(ParticleType.Fluid)
    weight = float(particles.masses[fluid].sum()) * F

    history = []
    for t in (500.0, 1000.0, 2000.0, 5000.0):
        sim.run(until=t)
        D = force(sim.state, scheme.neighbours(particles)(sim.state))
        history.append({"t": t, "drag": float(D[0]), "lift": float(D[1]),
                        "dragOverWeight": float(D[0]) / weight,
                        "maxSpeed": float(sim.state.velocities[fluid].norm(dim=1).max())})
        print(f"t = {t:6.0f} s: drag / (M F) = {history[-1]['dragOverWeight']:.4f}, "
              f"lift {history[-1]['lift']:+.1e} N/m, max speed {history[-1]['maxSpeed']:.2e} m/s")

    ratios = [h["dragOverWeight"] for h in history]
    assert all(b > a for a, b in zip(ratios, ratios[1:])), ratios  # the drag builds up
    assert abs(ratios[-1] - 1.0) < 0.01, ratios[-1]  # steady: the cylinder holds the fluid
    assert abs(history[-1]["lift"]) < 1e-3 * weight  # symmetric: no lift
    (out / "cylinder_array_drag.json").write_text(json.dumps(
        {"particles": N, "steps": sim.step, "history": history}, indent=2) + "\n")
    print(f"{N} particles, {sim.step} steps; wrote {out / 'cylinder_array_drag.json'}")
    print("OK")


if __name__ == "__main__":
    main()
