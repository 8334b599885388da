"""Reverse mode: move particles with torch.optim so that their SPH density matches a target.

An inverse problem in a few lines: start from a uniform periodic lattice (rho = 1) and find
particle positions whose SPH density matches the target density field

    rho*(x, y) = 1 + 0.2 sin(pi x) sin(pi y)      (mean 1, so the total mass fits)

by minimising  loss = mean_i (rho_i - rho*(x_i))^2  with Adam. `warpOperation` is an
ordinary differentiable torch function, so `loss.backward()` gives d loss / d positions
through the Warp kernels (and through rho*(x_i) by plain torch).

The neighbour list is not differentiable and is only valid for the positions it was built
for. We rebuild it every few steps with a buffered search radius (1 + skin) H: a pair
that was farther apart than (1 + skin) H at the rebuild cannot come within H as long as
every particle has moved less than skin H / 2 since then, and the script checks exactly that.
(`buildVerletList` automates this bookkeeping.)

Run: python examples/reverse_mode_optimisation.py [--out DIR] [--steps 80]
"""

import argparse
import math
import pathlib
import tempfile

import numpy as np
import torch

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=16, help="particles per axis")
    parser.add_argument("--steps", type=int, default=80, help="optimiser steps")
    parser.add_argument("--rebuild", type=int, default=5, help="rebuild the list every k steps")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    n = args.n
    dx = 2.0 / n
    g = (torch.arange(n, dtype=torch.float64) + 0.5) * dx - 1.0
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    start = torch.stack([gx.flatten(), gy.flatten()], dim=1)
    N = start.shape[0]
    H = 3.0 * dx
    supports = torch.full((N,), H, dtype=torch.float64)
    masses = torch.full((N,), dx * dx, dtype=torch.float64)
    kinds = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.tensor([-1.0, -1.0], dtype=torch.float64),
                               torch.tensor([1.0, 1.0], dtype=torch.float64),
                               periodic=[True, True])
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)

    def target(p):
        return 1.0 + 0.2 * torch.sin(math.pi * p[:, 0]) * torch.sin(math.pi * p[:, 1])

    positions = start.clone().requires_grad_(True)      # the optimisation variable
    optimiser = torch.optim.Adam([positions], lr=0.02 * dx)
    skin = 0.2

    def buildList():
        # search with the buffered radius; the operator evaluates W with the true supports,
        # so the extra pairs (H < r <= (1 + skin) H) contribute exactly zero
        x = positions.detach()
        buffered = ParticleState(x, supports * (1 + skin), masses, kinds)
        return radiusSearchCompactHashMap(buffered, domain), x.clone()

    losses, rebuilds = [], 0
    for step in range(args.steps):
        if step % args.rebuild == 0:
            adjacency, builtAt = buildList()
            rebuilds += 1
        # minimum-image displacement since the last rebuild must stay inside the buffer
        d = positions.detach() - builtAt
        d = d - 2.0 * torch.round(d / 2.0)
        assert d.norm(dim=1).max() < 0.5 * skin * H, "moved out of the Verlet buffer"

        optimiser.zero_grad()
        particles = ParticleState(positions, supports, masses, kinds)
        rho = warpOperation(particles, props, domain, adjacency=adjacency)
        loss = ((rho - target(positions)) ** 2).mean()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.3e}  "
                  f"max |rho - rho*| {(rho - target(positions)).abs().max().item():.4f}")

    moved = (positions.detach() - start)
    moved = (moved - 2.0 * torch.round(moved / 2.0)).norm(dim=1)
    print(f"{rebuilds} neighbour-list rebuilds, mean displacement {moved.mean().item() / dx:.3f} dx")
    print(f"loss: initial {losses[0]:.3e} -> final {losses[-1]:.3e} "
          f"(reduced {losses[0] / losses[-1]:.1f}x)")
    assert losses[-1] < 0.2 * losses[0], "the loss did not drop"

    np.savez(out / "optimisation.npz", start=start.numpy(), positions=positions.detach().numpy(),
             losses=np.array(losses))
    print(f"wrote {out / 'optimisation.npz'}")
    print("OK")


if __name__ == "__main__":
    main()
