"""Whole-repository host-sync census: every device->host readback or
synchronisation of one simulated SPH step, per ``file:line (function)`` site, per call.

The step (a jittered periodic 2D lattice, Wendland2, float32 by default):

 1. neighbour search (`radiusSearchCompactHashMap`);
 2. Density, then CRK factors and renormalization matrices (the builders);
 3. the grad-h Omega;
 4. a pressure Gradient with CRK and renormalization, a velocity Divergence and a viscous
    Laplacian, all with grad on the positions, and the backward of a scalar loss;
 5. an explicit JVP of the Gradient (positions), its backward (reverse over forward);
 6. the same JVP through dual tensors;
 7. the Density position HVP.

The census counts on any device (it patches the readback calls themselves), so it runs on
CPU; on a CUDA device it counts the same calls. Prints a table (Markdown with ``--markdown``,
which also writes the file, e.g. ``docs/regression/host-syncs.md``).

Usage: ``python scripts/benchmarks/count_host_syncs.py [--device cuda:0] [--side 32]
[--markdown docs/regression/host-syncs.md]``
"""

from __future__ import annotations

import argparse
import collections
import datetime
import sys
from pathlib import Path

import torch
import torch.autograd.forward_ad as fwAD

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore import (  # noqa: E402
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
    computeCRKFactors,
    computeOmega,
    computeRenormalizationMatrices,
    radiusSearchCompactHashMap,
    warpOperation,
    warpOperationHVP,
    warpOperationJVP,
)
from warpSPHCore.util.hostSyncCensus import census  # noqa: E402

W = WarpOperation


def lattice(side, device, dtype):
    dx = 2.0 / side
    g = (torch.arange(side, dtype=torch.float64) + 0.5) * dx - 1.0
    x, y = torch.meshgrid(g, g, indexing="xy")
    pos = torch.stack([x.flatten(), y.flatten()], dim=1)
    pos = pos + 0.1 * dx * torch.randn(pos.shape, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64)
    n = pos.shape[0]
    p = ParticleState(pos.to(device, dtype), torch.full((n,), 2.5 * dx, dtype=dtype,
                                                        device=device),
                      torch.full((n,), dx * dx, dtype=dtype, device=device),
                      torch.zeros(n, dtype=torch.int32, device=device))
    dom = DomainDescription(torch.full((2,), -1.0, dtype=dtype, device=device),
                            torch.full((2,), 1.0, dtype=dtype, device=device), [True, True])
    return p, dom


def step(p, dom, kernel=KernelFunctions.Wendland2):
    """The stages of one step as (name, callable) pairs; each returns nothing."""
    props = {op: OperationProperties(kernel, operation=op) for op in W if op != W.Custom}
    state = {}

    def search():
        state["adj"] = radiusSearchCompactHashMap(p, dom)

    def density():
        with torch.no_grad():
            state["rho"] = warpOperation(p, props[W.Density], dom, adjacency=state["adj"])
        state["fluid"] = ParticleState(p.positions, p.supports, p.masses, p.kinds,
                                       state["rho"])

    def builders():
        f, adj = state["fluid"], state["adj"]
        state["V"], _, state["crk"] = computeCRKFactors(f, dom, kernel, adjacency=adj)
        _, _, state["L"] = computeRenormalizationMatrices(f, props[W.Gradient], dom,
                                                          adjacency=adj)

    def omega():
        state["omega"] = computeOmega(state["fluid"], props[W.Density], dom,
                                      adjacency=state["adj"])

    def operatorsAndBackward():
        f, adj = state["fluid"], state["adj"]
        x = f.positions.detach().requires_grad_(True)
        q = ParticleState(x, f.supports, f.masses, f.kinds, f.densities)
        pressure = f.densities - 1.0
        u = torch.stack([torch.sin(torch.pi * x[:, 1]), torch.cos(torch.pi * x[:, 0])], 1)
        grad = warpOperation(q, props[W.Gradient], dom, queryValues=pressure, adjacency=adj,
                             crkState=state["crk"], referenceVolumes=state["V"],
                             renormalizationState=state["L"])
        div = warpOperation(q, OperationProperties(kernel, operation=W.Divergence,
                                                   gradientMode=GradientScheme.Difference),
                            dom, queryValues=u, adjacency=adj)
        lap = warpOperation(q, OperationProperties(kernel, operation=W.Laplacian,
                                                   laplacianMode=LaplacianScheme.Brookshaw),
                            dom, queryValues=u, adjacency=adj)
        ((grad ** 2).sum() + (div ** 2).sum() + (lap ** 2).sum()).backward()

    def explicitJVP():
        f, adj = state["fluid"], state["adj"]
        x = f.positions.detach().requires_grad_(True)
        q = ParticleState(x, f.supports, f.masses, f.kinds, f.densities)
        out = warpOperationJVP(q, props[W.Gradient], dom, queryValues=f.densities,
                               adjacency=adj,
                               queryTangentState=ParticleTangentState(positions=torch.cos(x)))
        out.sum().backward()

    def dualJVP():
        f, adj = state["fluid"], state["adj"]
        with torch.no_grad(), fwAD.dual_level():
            q = ParticleState(fwAD.make_dual(f.positions, torch.cos(f.positions)), f.supports,
                              f.masses, f.kinds, f.densities)
            warpOperation(q, props[W.Gradient], dom, queryValues=f.densities, adjacency=adj)

    def hvp():
        f = state["fluid"]
        warpOperationHVP(f, props[W.Density], dom, torch.cos(f.positions),
                         adjacency=state["adj"])

    return [("neighbour search", search), ("Density", density),
            ("CRK + renormalization builders", builders), ("grad-h Omega", omega),
            ("Gradient/Divergence/Laplacian + backward", operatorsAndBackward),
            ("explicit JVP + backward", explicitJVP), ("dual-tensor Gradient", dualJVP),
            ("Density HVP", hvp)]


def run(device, dtype, side):
    p, dom = lattice(side, device, dtype)
    stages = step(p, dom)
    for _, fn in stages:  # warm: kernel compilation outside the census
        fn()
    rows = []
    for name, fn in stages:
        with census() as c:
            fn()
        rows.append((name, c.total, collections.Counter(c.bySite())))
    return int(p.positions.shape[0]), rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--side", type=int, default=32)
    ap.add_argument("--markdown", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    n, rows = run(torch.device(args.device), getattr(torch, args.dtype), args.side)
    total = sum(r[1] for r in rows)
    lines = [
        f"Host-sync census of one step, {n} particles, {args.device} {args.dtype} "
        f"({datetime.date.today().isoformat()}, torch {torch.__version__})",
        "",
        "| stage | readbacks | sites |",
        "|---|---|---|",
    ]
    for name, count, sites in rows:
        where = "; ".join(f"`{s}` x{k}" for s, k in sorted(sites.items())) or "—"
        lines.append(f"| {name} | {count} | {where} |")
    lines.append(f"| **step total** | **{total}** | |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        out = Path(args.markdown)
        out.parent.mkdir(parents=True, exist_ok=True)
        head = ("# Host-sync census\n\nWritten by `scripts/benchmarks/count_host_syncs.py` "
                "(`make census`; the invariant it checks: [Autograd bridge]"
                "(../autograd.md#no-host-synchronisation-counted)). Allowed readbacks: one per neighbour search, one per "
                "dual-tensor operator call (the batched liveness mask); everything else 0. The "
                "exact numbers per module are asserted by "
                "`tests/operations/test_no_host_sync.py`. Across ranks "
                "(`warpSPHCore.distributed`, docs/distributed.md): one per halo build and one "
                "per migration (the counts and the largest support, read back together), none "
                "per exchange of values along a built halo; asserted by "
                "`tests/distributed/test_distributed_halo.py`.\n\n")
        out.write_text(head + text + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
