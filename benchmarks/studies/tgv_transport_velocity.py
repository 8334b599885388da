"""Study: the transport-velocity formulation on the Taylor-Green vortex, written as
torch edge sums over the library's neighbour list, to choose what the fused momentum
operator must compute before it is written as a Warp kernel.

Momentum and transport velocity of Adami, Hu & Adams (2013, J. Comput. Phys. 241: 292-307),
with V_i = 1 / sum_j W_ij, rho_i = m_i / V_i, p = c0^2 (rho - rho0), c0 = 10 U:

    du_i/dt = (1/m_i) sum_j (V_i^2 + V_j^2) [ -p~_ij grad_i W_ij
              + mu u_ij (dW/dr)_ij / r_ij + 1/2 (A_i + A_j) . grad_i W_ij ]
    p~_ij = (rho_j p_i + rho_i p_j) / (rho_i + rho_j),   A = rho u (u~ - u)^T
    u~_i = u_i + dt/2 * (-p_b / m_i) sum_j (V_i^2 + V_j^2) grad_i W_ij   (p_b = rho0 c0^2)

integrated by kick-drift-kick with the positions advected by u~ (the library's
`fluids.backgroundPressureAcceleration` is the p_b sum). The start is the lattice or a
relaxed distribution (`fluids.relaxParticles`), with the velocities of the analytic solution
at the start positions. It prints the kinetic-energy and velocity L2 errors at t against
the analytic decay (Re = 100). The numbers it gave are in docs/fluids.md.

Run: python benchmarks/studies/tgv_transport_velocity.py --n 50 --t 1 --relax 600
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    ParticleState,
    SupportScheme,
    radiusSearchCompactHashMap,
)
from warpSPHCore.fluids import backgroundPressureAcceleration, relaxParticles


def wendland2(H):
    """W and dW/dr of the 2D Wendland C2 kernel with compact support H."""
    C = 7.0 / (math.pi * H * H)

    def W(r):
        q = (r / H).clamp(max=1.0)
        return C * (1 - q) ** 4 * (1 + 4 * q)

    def dW(r):
        q = (r / H).clamp(max=1.0)
        return C * (-20.0 * q * (1 - q) ** 3) / H

    return W, dW


def velocity(x, U, decay=1.0):
    s, c = torch.sin(2 * math.pi * x), torch.cos(2 * math.pi * x)
    return torch.stack([-U * c[:, 0] * s[:, 1], U * s[:, 0] * c[:, 1]], 1) * decay


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="particles per axis")
    ap.add_argument("--t", type=float, default=0.4, help="end time")
    ap.add_argument("--support", type=float, default=3.0, help="H in particle spacings")
    ap.add_argument("--pb", type=float, default=1.0, help="p_b / (rho0 c0^2); 0: no TVF")
    ap.add_argument("--relax", type=int, default=0, help="relaxation steps (0: lattice)")
    args = ap.parse_args()

    f64, n, U, Re, rho0 = torch.float64, args.n, 1.0, 100.0, 1.0
    dx, nu = 1.0 / n, U / Re
    mu, c0 = rho0 * nu, 10.0 * U
    p0 = rho0 * c0**2
    pb = args.pb * p0
    H = args.support * dx
    g = (torch.arange(n, dtype=f64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    N = x.shape[0]
    Hs = torch.full((N,), H, dtype=f64)
    kinds = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.zeros(2, dtype=f64), torch.ones(2, dtype=f64), [True] * 2)
    if args.relax:
        x = relaxParticles(x, Hs, domain, iterations=args.relax, jitter=0.5)
    u = velocity(x, U)
    m = torch.full((N,), rho0 * dx * dx, dtype=f64)
    W, dW = wendland2(H)

    def rates(x, u, ut):
        particles = ParticleState(x, Hs, m, kinds)
        adjacency = radiusSearchCompactHashMap(particles, domain, mode=SupportScheme.Gather)
        i, j = adjacency.i, adjacency.j
        xij = x[i] - x[j]
        xij = xij - torch.round(xij)  # minimum image, unit box
        r = xij.norm(dim=1)
        V = 1.0 / torch.zeros(N, dtype=f64).index_add_(0, i, W(r))
        rho = m / V
        p = c0**2 * (rho - rho0)
        keep = r > 0
        i, j, xij, r = i[keep], j[keep], xij[keep], r[keep]
        gradW = xij * (dW(r) / r)[:, None]
        w = V[i] ** 2 + V[j] ** 2
        pt = (rho[j] * p[i] + rho[i] * p[j]) / (rho[i] + rho[j])
        A = rho[:, None, None] * u[:, :, None] * (ut - u)[:, None, :]
        f = w[:, None] * (-pt[:, None] * gradW + mu * (u[i] - u[j]) * (dW(r) / r)[:, None]
                          + torch.einsum("eab,eb->ea", 0.5 * (A[i] + A[j]), gradW))
        a = torch.zeros_like(x).index_add_(0, i, f) / m[:, None]
        ab = backgroundPressureAcceleration(particles, domain, adjacency, pb, volumes=V,
                                            kernel=KernelFunctions.Wendland2)
        return a, ab

    dt = min(0.25 * dx / (c0 + U), 0.125 * dx * dx / nu)
    steps = int(math.ceil(args.t / dt))
    dt = args.t / steps
    e0 = float(0.5 * (m[:, None] * u**2).sum())
    ut = u.clone()
    with torch.no_grad():
        a, ab = rates(x, u, ut)
        start = time.perf_counter()
        for _ in range(steps):
            u = u + 0.5 * dt * a
            ut = u + 0.5 * dt * ab
            x = torch.remainder(x + dt * ut, 1.0)
            a, ab = rates(x, u, ut)
            u = u + 0.5 * dt * a
        seconds = time.perf_counter() - start
    decay = math.exp(-8.0 * math.pi**2 * nu * args.t)
    exact = velocity(x, U, decay)
    ke = float(0.5 * (m[:, None] * u**2).sum())
    print(f"n = {n}, H = {args.support} dx, p_b = {args.pb} rho0 c0^2, relax = {args.relax}, "
          f"{steps} steps, {seconds / steps * 1e3:.1f} ms per step")
    print(f"t = {args.t}: kinetic energy error {ke / (e0 * decay**2) - 1:+.2%}, "
          f"velocity L2 error {float((u - exact).norm() / exact.norm()):.2%}")


if __name__ == "__main__":
    main()
