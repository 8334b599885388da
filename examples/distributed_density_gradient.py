"""Domain decomposition: one SPH step on N ranks equals the single-process step to round-off.

A jittered periodic 2D lattice (36 x 36 = 1296 particles by default, float64, Wendland2,
supports about 3 dx) is split among the ranks of a `torch.distributed` process group with
`warpSPHCore.distributed` (recursive coordinate bisection along neighbour-search cells).
Each rank evaluates, for the particles it owns,

    rho_i = sum_j m_j W_ij                       (Density)
    p_i   = Tait(rho_i)  or  c0^2 (rho_i - rho0) (--eos tait | linear)
    a_i   = -(1 / rho_i) grad p_i                (symmetric Gradient)

with the owned particles as queries and ``halo.particles(owned)`` (owned rows, then the
particles of the other ranks within one support of the block) as references: the densities
are computed on the owned rows and travel to the halo with the next `halo.particles` call,
the pressures with ``halo.extend(p)``. A reverse-mode gradient crosses the ranks too: the
scalar ``L = globalSum(sum_i w_i . a_i)`` is differentiated w.r.t. the owned positions (the
halo's exchanges send the cotangents back to the owners).

The per-particle rho, a and dL/dx of all ranks are gathered by global id and compared with
the same step run in one process: they agree to round-off (asserted <= 1e-12 relative).

Two ways to launch it:

* ``torchrun --nproc-per-node 2 examples/distributed_density_gradient.py --out DIR``:
  torchrun starts the processes and sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR; the
  script joins a gloo group with ``init_method="env://"``; rank 0 gathers, checks, writes
  and prints;
* ``python examples/distributed_density_gradient.py --processes 2 --out DIR``: the script starts
  the processes itself with `warpSPHCore.distributed.spawn`; the parent checks, writes and
  prints.

Run: python examples/distributed_density_gradient.py [--out DIR] [--processes 2] [--side 36] [--eos tait]
(options chosen so that none is an abbreviation of a torchrun option: torchrun rejects those)
"""

import argparse
import json
import os
import pathlib
import tempfile

import torch

from warpSPHCore import distributed as wd
from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.dataTypes.operationProperties import OperationProperties
from warpSPHCore.dataTypes.particleState import ParticleState
from warpSPHCore.enumTypes import GradientScheme, KernelFunctions, WarpOperation
from warpSPHCore.operations import warpOperation

RHO0, C0, GAMMA = 1.0, 10.0, 7.0
KERNEL = KernelFunctions.Wendland2
DENSITY = OperationProperties(KERNEL, operation=WarpOperation.Density)
GRADIENT = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                               gradientMode=GradientScheme.Symmetric)


def problem(n):
    """The replicated global set: the same particles, in the same order, on every rank."""
    g = torch.Generator().manual_seed(0)
    dx = 1.0 / n
    axis = (torch.arange(n, dtype=torch.float64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    x = x + 0.3 * dx * (torch.rand(x.shape, generator=g, dtype=torch.float64) - 0.5)
    N = x.shape[0]
    h = 3.0 * dx * (1.0 + 0.05 * torch.rand(N, generator=g, dtype=torch.float64))
    m = torch.full((N,), RHO0 * dx * dx, dtype=torch.float64)
    w = torch.randn((N, 2), generator=g, dtype=torch.float64)  # weights of the scalar L
    domain = DomainDescription(torch.zeros(2, dtype=torch.float64),
                               torch.ones(2, dtype=torch.float64), periodic=[True, True])
    return x, h, m, w, domain


def pressure(rho, eos):
    if eos == "tait":
        return (RHO0 * C0 * C0 / GAMMA) * ((rho / RHO0) ** GAMMA - 1.0)
    return C0 * C0 * (rho - RHO0)


def step(x, h, m, domain, eos, halo=None):
    """Density, pressure, symmetric pressure acceleration for the particles `x` (the owned
    ones when a `halo` is given, else all of them)."""
    kinds = torch.zeros(x.shape[0], dtype=torch.int32)
    queries = ParticleState(x, h, m, kinds)
    refs = queries if halo is None else halo.particles(queries)
    rho = warpOperation(queries, DENSITY, domain, referenceParticles=refs)
    queries = ParticleState(x, h, m, kinds, rho)            # densities for V_j and 1 / rho_i
    refs = queries if halo is None else halo.particles(queries)  # ... sent to the halo too
    p = pressure(rho, eos)
    pRef = p if halo is None else halo.extend(p)
    gradP = warpOperation(queries, GRADIENT, domain, queryValues=p, referenceValues=pRef,
                          referenceParticles=refs)
    return rho, -gradP / rho[:, None]


def worker(rank, size, n, eos):
    """One rank's part (module docstring); returns its owned rows by global id."""
    x, h, m, w, domain = problem(n)
    ids = torch.arange(x.shape[0])
    dec = wd.decompose(domain, x, h, replicated=True)   # the same set on every rank
    own = wd.ownedSelection(dec, x)
    xo = x[own].clone().requires_grad_(True)
    ho, mo, wo, io = h[own], m[own], w[own], ids[own]
    halo = wd.Halo.build(dec, ParticleState(xo, ho, mo, torch.zeros(len(io), dtype=torch.int32)),
                         ids=io)
    rho, acc = step(xo, ho, mo, domain, eos, halo)
    loss = wd.globalSum((wo * acc).sum())               # one global scalar, on every rank
    loss.backward()                                      # every rank: the same cotangent
    # floats moved per step: positions + supports + masses (1st halo.particles), the same
    # + densities (2nd), the pressures (extend)
    columns = (2 + 2) + (2 + 3) + 1
    return {"rank": rank, "ids": io, "rho": rho.detach(), "acc": acc.detach(),
            "gradX": xo.grad, "loss": loss.item(), "owned": halo.ownedCount,
            "halo": halo.haloCount, "sent": halo.route.sent,
            "bytesPerStep": halo.bytesPerExchange(columns, 8),
            "bounds": dec.bounds(rank), "describe": dec.describe()}


def report(results, args, out, launcher):
    """Gathered results against the single-process step; prints, asserts, writes."""
    size = len(results)
    x, h, m, w, domain = problem(args.side)
    x = x.clone().requires_grad_(True)
    rho, acc = step(x, h, m, domain, args.eos)
    loss = (w * acc).sum()
    loss.backward()
    reference = {"rho": rho.detach(), "acc": acc.detach(), "gradX": x.grad}

    print(f"{x.shape[0]} particles, 2D float64, {args.eos} EOS, {size} ranks ({launcher})")
    print(results[0]["describe"])
    print("rank  owned  halo  halo/owned  rows sent  bytes sent per step")
    for r in results:
        print(f"{r['rank']:4d}  {r['owned']:5d}  {r['halo']:4d}  {r['halo'] / r['owned']:9.2f}"
              f"  {r['sent']:9d}  {r['bytesPerStep']:19d}")
    owned = torch.cat([r["ids"] for r in results])
    assert torch.equal(owned.sort().values, torch.arange(x.shape[0])), \
        "every particle must be owned by exactly one rank"

    errors = {}
    for key, ref in reference.items():
        gathered = torch.zeros_like(ref)
        for r in results:
            gathered[r["ids"]] = r[key]
        errors[key] = float((gathered - ref).abs().max() / ref.abs().max())
    errors["loss"] = abs(results[0]["loss"] - loss.item()) / abs(loss.item())
    names = {"rho": "density rho", "acc": "pressure acceleration a",
             "gradX": "dL/dx (reverse mode)", "loss": "L = globalSum(w . a)"}
    for key, e in errors.items():
        print(f"{names[key]:28s} max rel. diff vs one process {e:.2e}")
    worst = max(errors.values())
    print(f"max relative difference {worst:.2e}")
    assert worst <= 1e-12, errors
    assert len({r["loss"] for r in results}) == 1, "globalSum must give every rank one value"
    assert all(r["halo"] > 0 for r in results) or size == 1

    path = out / "distributed_step.json"
    path.write_text(json.dumps({
        "launcher": launcher, "ranks": size, "particles": int(x.shape[0]), "eos": args.eos,
        "maxRelativeDifference": errors,
        "perRank": [{k: r[k] for k in ("rank", "owned", "halo", "sent", "bytesPerStep",
                                       "bounds")} for r in results],
        "decomposition": results[0]["describe"]}, indent=2))
    print(f"wrote {path}")
    print("OK")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--side", type=int, default=36, help="particles per axis")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes to spawn (ignored under torchrun)")
    parser.add_argument("--eos", choices=("tait", "linear"), default="tait")
    args = parser.parse_args()
    torchrun = all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))

    if torchrun:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://")
        rank, size = dist.get_rank(), dist.get_world_size()
        out = None
        if rank == 0:
            out = args.out if args.out is not None else pathlib.Path(
                tempfile.mkdtemp(prefix="warpsph-"))
            out.mkdir(parents=True, exist_ok=True)
        mine = worker(rank, size, args.side, args.eos)
        results = [None] * size
        dist.all_gather_object(results, mine)
        dist.destroy_process_group()
        if rank == 0:
            report(results, args, out, "torchrun")
        return

    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)
    results = wd.spawn(worker, args.processes, args.side, args.eos)
    report(results, args, out, "spawn")


if __name__ == "__main__":
    main()
