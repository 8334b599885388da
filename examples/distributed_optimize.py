"""Domain decomposition + reverse mode: recover flow parameters through a multi-rank rollout.

A jittered periodic 2D lattice (20 x 20 = 400 particles by default, float64, Wendland2,
support 3 dx) starts with the velocity  u0 = U (sin 2 pi y, sin 2 pi x)  and feels a body
force (g, 0). K = 5 explicit steps, each on every rank for the particles it owns:

    halo  = Halo.build(decomposition, owned)             (rebuilt every step)
    rho_i = sum_j m_j W_ij                               (Density, references = owned + halo)
    p_i   = c0^2 (rho_i - rho0)                          (linear EOS; extended to the halo)
    a_i   = -(1 / rho_i) grad p_i + (g, 0)               (symmetric Gradient)
    v    += dt a,   x = (x + dt v) mod 1                 (symplectic Euler)
    x, v, h, m, ids = migrate(decomposition, x, v, ...)  (particles change owner; not after
                                                          the last step)

The target is the final positions of a run with the true parameters (U, g) = (1, 10). From
a wrong start (0.5, 0) the parameters are recovered by minimising

    L(U, g) = globalSum( sum_i |x_i(K) - x*_id(i)|^2 ) / (N dx^2)   (minimum image)

with `torch.optim.LBFGS`. Every step of the rollout is differentiable across the ranks:
the halo exchanges and the migrations send the cotangents back to the ranks the rows came
from. (U, g) is replicated -- every rank uses it for its own particles -- so it enters through
`wd.replicated`, whose backward sums the ranks' parts of dL/d(U, g) (what
DistributedDataParallel does for its parameters): every rank's ``theta.grad`` is the whole
gradient. The
control flow of LBFGS stays identical on every rank because the loss (`globalSum`) and the
summed gradient are the same numbers everywhere.

Checks: the reverse-mode gradient against a central finite difference of the distributed
loss (relative 1e-6), the distributed loss and gradient against the same rollout in one
process (1e-12), and LBFGS ending much closer to the truth than it started.

Two ways to launch it:

* ``torchrun --nproc-per-node 2 examples/distributed_optimize.py --out DIR`` (the script
  joins a gloo group with ``init_method="env://"``; rank 0 checks, writes and prints);
* ``python examples/distributed_optimize.py --processes 2 --out DIR`` (the script starts the
  processes itself with `warpSPHCore.distributed.spawn`; the parent checks and prints).

Run: python examples/distributed_optimize.py [--out DIR] [--processes 2] [--steps 5]
"""

import argparse
import json
import math
import os
import pathlib
import tempfile

import torch
import torch.distributed as dist

from warpSPHCore import distributed as wd
from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.dataTypes.operationProperties import OperationProperties
from warpSPHCore.dataTypes.particleState import ParticleState
from warpSPHCore.enumTypes import GradientScheme, KernelFunctions, WarpOperation
from warpSPHCore.operations import warpOperation

RHO0, C0 = 1.0, 3.0
TRUTH = (1.0, 10.0)          # (U, g)
START = (0.5, 0.0)
KERNEL = KernelFunctions.Wendland2
DENSITY = OperationProperties(KERNEL, operation=WarpOperation.Density)
GRADIENT = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                               gradientMode=GradientScheme.Symmetric)


def problem(n):
    """The replicated initial set (the same on every rank) and the time step."""
    g = torch.Generator().manual_seed(0)
    dx = 1.0 / n
    axis = (torch.arange(n, dtype=torch.float64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    x = x + 0.3 * dx * (torch.rand(x.shape, generator=g, dtype=torch.float64) - 0.5)
    N = x.shape[0]
    h = torch.full((N,), 3.0 * dx, dtype=torch.float64)
    m = torch.full((N,), RHO0 * dx * dx, dtype=torch.float64)
    domain = DomainDescription(torch.zeros(2, dtype=torch.float64),
                               torch.ones(2, dtype=torch.float64), periodic=[True, True])
    dt = 0.5 * dx / (C0 + TRUTH[0])
    return x, h, m, domain, dx, dt


def rollout(theta, x, h, m, ids, domain, dt, steps, dec=None):
    """Final positions (and ids) after `steps` steps from the particles `x`: the owned ones
    of this rank with a decomposition `dec`, else all of them (one process). `theta` =
    (U, g). Returns ``(x, ids, migrated)`` (rows that changed rank, this rank)."""
    kinds = torch.zeros(x.shape[0], dtype=torch.int32)
    v = theta[0] * torch.stack([torch.sin(2 * math.pi * x[:, 1]),
                                torch.sin(2 * math.pi * x[:, 0])], dim=1)
    force = torch.stack([theta[1], torch.zeros_like(theta[1])])
    migrated = 0
    for k in range(steps):
        q = ParticleState(x, h, m, kinds)
        halo = None if dec is None else wd.Halo.build(dec, q)   # positions changed: rebuild
        rho = warpOperation(q, DENSITY, domain, referenceParticles=q if halo is None
                            else halo.particles(q))
        q = ParticleState(x, h, m, kinds, rho)
        p = C0 * C0 * (rho - RHO0)
        gradP = warpOperation(q, GRADIENT, domain, queryValues=p,
                              referenceValues=p if halo is None else halo.extend(p),
                              referenceParticles=q if halo is None else halo.particles(q))
        v = v + dt * (-gradP / rho[:, None] + force)
        x = torch.remainder(x + dt * v, 1.0)
        if dec is not None and k < steps - 1:
            migrated += int((dec.owners(x) != dec.rank).sum())
            x, v, h, m, ids = wd.migrate(dec, x, v, h, m, ids=ids)
            kinds = torch.zeros(x.shape[0], dtype=torch.int32)
    return x, ids, migrated


def misfit(x, ids, target, dx):
    d = x - target[ids]
    d = d - torch.round(d)                                # minimum image, unit box
    return (d * d).sum() / (target.shape[0] * dx * dx)


def worker(rank, size, n, steps, iterations):
    """One rank's part (module docstring); returns its numbers (the same on every rank)."""
    x, h, m, domain, dx, dt = problem(n)
    ids = torch.arange(x.shape[0])
    dec = wd.decompose(domain, x, h, replicated=True)
    own = wd.ownedSelection(dec, x)
    x0, h0, m0, i0 = x[own], h[own], m[own], ids[own]

    # the target: a distributed rollout with the true parameters, gathered by id
    with torch.no_grad():
        xt, it, migrated = rollout(torch.tensor(TRUTH, dtype=torch.float64), x0, h0, m0, i0,
                                   domain, dt, steps, dec)
    parts = [None] * size
    dist.all_gather_object(parts, (it, xt))
    target = torch.zeros_like(x)
    for i, xi in parts:
        target[i] = xi

    def loss(theta):
        # wd.replicated: every rank holds theta; its gradient is summed over the ranks
        xk, ik, _ = rollout(wd.replicated(theta), x0, h0, m0, i0, domain, dt, steps, dec)
        return wd.globalSum(misfit(xk, ik, target, dx))

    def lossAndGradient(theta):
        theta = theta.detach().clone().requires_grad_(True)
        value = loss(theta)
        value.backward()
        return value.item(), theta.grad.clone()

    start = torch.tensor(START, dtype=torch.float64)
    L0, G0 = lossAndGradient(start)
    eps = 1e-5
    fd = []
    with torch.no_grad():
        for k in range(2):
            e = torch.zeros(2, dtype=torch.float64)
            e[k] = eps
            fd.append((loss(start + e).item() - loss(start - e).item()) / (2 * eps))

    theta = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                            tolerance_change=1e-14)
    history = []

    def closure():
        opt.zero_grad()
        value = loss(theta)
        value.backward()
        history.append((theta.detach().tolist(), value.item()))
        return value

    opt.step(closure)
    return {"rank": rank, "owned": int(own.sum()), "migratedInTarget": migrated,
            "loss0": L0, "grad0": G0.tolist(), "fd0": fd, "history": history,
            "theta": theta.detach().tolist(), "describe": dec.describe()}


def report(results, args, out, launcher):
    """Checks and prints the workers' numbers; the single-process reference."""
    r0 = results[0]
    size = len(results)
    x, h, m, domain, dx, dt = problem(args.side)
    ids = torch.arange(x.shape[0])
    target, _, _ = rollout(torch.tensor(TRUTH, dtype=torch.float64), x, h, m, ids, domain, dt,
                           args.steps)
    theta = torch.tensor(START, dtype=torch.float64, requires_grad=True)
    xk, ik, _ = rollout(theta, x, h, m, ids, domain, dt, args.steps)
    single = misfit(xk, ik, target, dx)
    single.backward()

    print(f"{x.shape[0]} particles, 2D float64, {args.steps} steps (dt = {dt:.3g}), "
          f"{size} ranks ({launcher})")
    print(r0["describe"])
    print("owned per rank", [r["owned"] for r in results], " particles that changed rank "
          "during the target rollout", [r["migratedInTarget"] for r in results])
    g = torch.tensor(r0["grad0"], dtype=torch.float64)
    fd = torch.tensor(r0["fd0"], dtype=torch.float64)
    eFD = float((g - fd).abs().max() / g.abs().max())
    eLoss = abs(r0["loss0"] - single.item()) / abs(single.item())
    eGrad = float((g - theta.grad).abs().max() / theta.grad.abs().max())
    print(f"at (U, g) = {START}: L = {r0['loss0']:.6e}, dL/d(U, g) = "
          f"({g[0]:.6e}, {g[1]:.6e})")
    print(f"reverse mode vs central FD (eps 1e-5)      rel. error {eFD:.2e}")
    print(f"distributed vs one process: loss {eLoss:.2e}, gradient {eGrad:.2e}")
    assert eFD < 1e-6, (g, fd)
    assert eLoss < 1e-12 and eGrad < 1e-12, (eLoss, eGrad)

    print("LBFGS evaluations (U, g, loss):")
    for k, (th, value) in enumerate(r0["history"]):
        print(f"  {k:2d}  U = {th[0]:.8f}  g = {th[1]:10.6f}  L = {value:.3e}")
    assert all(r["theta"] == r0["theta"] and r["history"] == r0["history"] for r in results), \
        "the ranks must take identical optimiser steps"
    truth, start, final = (torch.tensor(t, dtype=torch.float64) for t in
                           (TRUTH, START, r0["theta"]))
    before, after = float((start - truth).norm()), float((final - truth).norm())
    print(f"|(U, g) - truth|: start {before:.3e} -> final {after:.3e} "
          f"(closer by {before / after:.1e}x)")
    assert after < 1e-3 * before, (before, after)

    path = out / "distributed_optimize.json"
    path.write_text(json.dumps({
        "launcher": launcher, "ranks": size, "particles": int(x.shape[0]), "steps": args.steps,
        "truth": TRUTH, "start": START, "final": r0["theta"], "loss0": r0["loss0"],
        "gradient0": r0["grad0"], "finiteDifference0": r0["fd0"],
        "relativeErrorFD": eFD, "relativeErrorVsOneProcess": {"loss": eLoss, "gradient": eGrad},
        "history": r0["history"], "owned": [r["owned"] for r in results],
        "migratedInTarget": [r["migratedInTarget"] for r in results]}, indent=2))
    print(f"wrote {path}")
    print("OK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--side", type=int, default=20, help="particles per axis")
    parser.add_argument("--steps", type=int, default=5, help="explicit steps K of a rollout")
    parser.add_argument("--iterations", type=int, default=12, help="LBFGS iterations")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes to spawn (ignored under torchrun)")
    args = parser.parse_args()
    torchrun = all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))

    if torchrun:
        dist.init_process_group("gloo", init_method="env://")
        rank, size = dist.get_rank(), dist.get_world_size()
        out = None
        if rank == 0:
            out = args.out if args.out is not None else pathlib.Path(
                tempfile.mkdtemp(prefix="warpsph-"))
            out.mkdir(parents=True, exist_ok=True)
        mine = worker(rank, size, args.side, args.steps, args.iterations)
        results = [None] * size
        dist.all_gather_object(results, mine)
        dist.destroy_process_group()
        if rank == 0:
            report(results, args, out, "torchrun")
        return

    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)
    results = wd.spawn(worker, args.processes, args.side, args.steps, args.iterations)
    report(results, args, out, "spawn")


if __name__ == "__main__":
    main()
