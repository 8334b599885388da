"""Second order: Newton-CG on a density energy with the dedicated Density position HVP.

Energy of the particle positions x (rho0 a fixed per-particle target density, x_s the
start, lam a small penalty that pins the free translation of the periodic system):

    E(x) = sum_i (rho_i(x) - rho0_i)^2 + lam/2 |x - x_s|^2

Its Hessian-vector product, with w_i = 2 (rho_i - rho0_i) and J = d rho / d x:

    H_E v = 2 J^T (J v)                          Gauss-Newton part
          + w_k  [sum_j m_j H_kj (v_k - v_j)]     k's own density      -> warpOperationHVP
          + m_k  [sum_i w_i H_ki (v_k - v_i)]     k as a neighbour     -> warpOperationHVP with
                                                                          reference masses w
          + lam v

`warpOperationHVP` returns, per particle k, the x_k-derivative of (J v)_k, i.e. the k-th
block row of the Hessian of rho_k applied to v; the third term reuses it with the
reference masses replaced by w (valid for equal supports, where H_ik = H_ki). J v comes from
`warpOperationJVP` and J^T u from reverse mode. The script checks the assembled H_E v
against `warpSPHCore.autograd.hvp` (reverse over forward of the whole energy), then uses it
as the matrix-free operator of a truncated conjugate-gradient Newton solver.

Run: python examples/density_hvp_newton.py [--out DIR]
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
    ParticleTangentState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
    warpOperationHVP,
    warpOperationJVP,
)
from warpSPHCore.autograd import hvp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=16, help="particles per axis")
    parser.add_argument("--newton", type=int, default=7, help="Newton steps")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    n = args.n
    dx = 2.0 / n
    g = (torch.arange(n, dtype=torch.float64) + 0.5) * dx - 1.0
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    lattice = torch.stack([gx.flatten(), gy.flatten()], dim=1)
    N = lattice.shape[0]
    S = torch.full((N,), 3.0 * dx, dtype=torch.float64)          # equal supports
    M = torch.full((N,), dx * dx, dtype=torch.float64)
    K = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.tensor([-1.0, -1.0], dtype=torch.float64),
                               torch.tensor([1.0, 1.0], dtype=torch.float64),
                               periodic=[True, True])
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)

    def state(x, masses=M):
        return ParticleState(x, S, masses, K)

    def density(x, adjacency):
        return warpOperation(state(x), props, domain, adjacency=adjacency)

    # an attainable target: the density of a smoothly displaced lattice; start from a
    # randomly jittered lattice
    shift = 0.15 * dx * torch.stack([torch.sin(math.pi * lattice[:, 1]),
                                     torch.cos(math.pi * lattice[:, 0])], dim=1)
    rho0 = density(lattice + shift, radiusSearchCompactHashMap(state(lattice + shift), domain))
    xs = lattice + 0.05 * dx * torch.randn(lattice.shape, dtype=torch.float64,
                                           generator=torch.Generator().manual_seed(0))
    lam = 1e-2

    def energy(x, adjacency):
        return ((density(x, adjacency) - rho0) ** 2).sum() + 0.5 * lam * ((x - xs) ** 2).sum()

    def hessianOperator(x, adjacency):
        """(grad E, v -> H_E v) at x, with the neighbour list of x frozen."""
        xr = x.detach().requires_grad_(True)
        rho = density(xr, adjacency)
        w = 2.0 * (rho.detach() - rho0)
        gradE = torch.autograd.grad(rho, xr, grad_outputs=w, retain_graph=True)[0] + lam * (x - xs)
        weighted = state(x, masses=w)            # reference masses w_i for the third term

        def Hv(v):
            Jv = warpOperationJVP(state(x), props, domain, adjacency=adjacency,
                                  queryTangentState=ParticleTangentState(positions=v))
            JtJv = torch.autograd.grad(rho, xr, grad_outputs=2.0 * Jv, retain_graph=True)[0]
            own = warpOperationHVP(state(x), props, domain, v, adjacency=adjacency,
                                   tangentReferencePositions=v)
            asNeighbour = warpOperationHVP(state(x), props, domain, v, adjacency=adjacency,
                                           referenceParticles=weighted,
                                           tangentReferencePositions=v)
            return JtJv + w[:, None] * own + M[:, None] * asNeighbour + lam * v

        return gradE, Hv

    # --- 1. the assembled HVP equals reverse over forward of the whole energy -------------
    x = xs.clone()
    adjacency = radiusSearchCompactHashMap(state(x), domain)
    _, Hv = hessianOperator(x, adjacency)
    v = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    _, HvReference = hvp(lambda y: energy(y, adjacency), x, v)
    HvMine = Hv(v)
    hvpError = ((HvMine - HvReference).abs().max() / HvReference.abs().max()).item()
    print(f"H_E v: warpOperationHVP assembly vs autograd.hvp  rel. error {hvpError:.2e}")
    assert hvpError < 1e-10
    t0 = time.perf_counter()
    for _ in range(10):
        Hv(v)
    tMine = (time.perf_counter() - t0) / 10
    t0 = time.perf_counter()
    for _ in range(10):
        hvp(lambda y: energy(y, adjacency), x, v)
    tReference = (time.perf_counter() - t0) / 10
    print(f"time per H_E v: assembly {tMine * 1e3:.1f} ms, autograd.hvp {tReference * 1e3:.1f} ms")

    # --- 2. Newton-CG ------------------------------------------------------------------
    def conjugateGradient(Hv, b, tol, maxIter=150):
        """Solve H p = b; stop early at negative curvature (truncated Newton)."""
        p = torch.zeros_like(b)
        r, d = b.clone(), b.clone()
        rr = (r * r).sum()
        for it in range(maxIter):
            Hd = Hv(d)
            curvature = (d * Hd).sum()
            if curvature <= 0:                    # indefinite: keep what we have
                return (p if it > 0 else b), it
            alpha = rr / curvature
            p = p + alpha * d
            r = r - alpha * Hd
            rrNew = (r * r).sum()
            if rrNew.sqrt() < tol:
                return p, it + 1
            d = r + (rrNew / rr) * d
            rr = rrNew
        return p, maxIter

    history = []
    for step in range(args.newton):
        adjacency = radiusSearchCompactHashMap(state(x), domain)   # rebuilt for the new x
        gradE, Hv = hessianOperator(x, adjacency)
        E = energy(x, adjacency).item()
        gNorm = gradE.norm().item()
        history.append({"step": step, "energy": E, "gradNorm": gNorm})
        # forcing term min(0.1, sqrt|g|) |g| gives superlinear convergence
        p, iters = conjugateGradient(Hv, -gradE, tol=min(0.1, math.sqrt(gNorm)) * gNorm)
        # backtracking line search (the list is rebuilt for every trial point)
        alpha = 1.0
        while alpha > 1e-4:
            trial = x + alpha * p
            if energy(trial, radiusSearchCompactHashMap(state(trial), domain)).item() < E:
                break
            alpha *= 0.5
        print(f"Newton {step}: E = {E:.6e}  |grad E| = {gNorm:.3e}  CG iterations {iters:3d}  "
              f"step {alpha:g}")
        x = trial
    adjacency = radiusSearchCompactHashMap(state(x), domain)
    gradE, _ = hessianOperator(x, adjacency)
    E = energy(x, adjacency).item()
    history.append({"step": args.newton, "energy": E, "gradNorm": gradE.norm().item()})
    print(f"final:    E = {E:.6e}  |grad E| = {gradE.norm().item():.3e}")
    print(f"max |rho - rho0| = {(density(x, adjacency) - rho0).abs().max().item():.2e}")
    assert history[-1]["gradNorm"] < 1e-6 * history[0]["gradNorm"], "Newton did not converge"

    (out / "newton_history.json").write_text(json.dumps(history, indent=2))
    print(f"wrote {out / 'newton_history.json'}")
    print("OK")


if __name__ == "__main__":
    main()
