"""A tour of the seven SPH operators on one smooth periodic field, against the analytic answer.

Particles sit on a 32 x 32 lattice in the periodic square [-1, 1]^2 (support H = 3 dx,
Wendland C2 kernel). With

    f(x, y) = sin(pi x) cos(pi y)                       (a scalar field)
    u(x, y) = (sin(pi x) cos(pi y), sin(pi y))          (a vector field)

every operator is compared with its exact continuum value:

    Interpolate  f              -> f
    Gradient     f (4 schemes)  -> grad f
    Divergence   u              -> div u
    Curl         u (2D: [N, 1]) -> d u_y/dx - d u_x/dy
    Laplacian    f (Naive, Brookshaw, Default) -> lap f = -2 pi^2 f
    Laplacian    u (Dot)        -> grad(div u)  (the Dot scheme's projection (d+2)(q.n)n - q
                                   is the Espanol-Revenga grad-div combination)
    Covariance                  -> the identity matrix (C_i = sum_j V_j (x_j - x_i) (x) grad W_ij)
    Density                     -> 1 (masses dx^2)

The printed error is max |SPH - exact| / max |exact|. On the exact lattice (uniform density,
sum_j V_j grad W_ij = 0) the four gradient schemes give the same result; they differ on
disordered particles. At a fixed ratio H / dx these errors
are the kernel's smoothing and lattice discretisation errors (a few percent here); they do
not vanish under refinement unless H / dx grows too. See crk_and_renormalization.py for
corrections that make gradients exact for linear fields.

Run: python examples/operators_tour.py [--out DIR]
"""

import argparse
import json
import math
import pathlib
import tempfile

import torch

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)

PI = math.pi


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=32, help="particles per axis")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    # --- particles on a periodic lattice ------------------------------------------------
    n = args.n
    dx = 2.0 / n
    g = (torch.arange(n, dtype=torch.float64) + 0.5) * dx - 1.0
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    pos = torch.stack([gx.flatten(), gy.flatten()], dim=1)
    N = pos.shape[0]
    particles = ParticleState(pos, torch.full((N,), 3.0 * dx, dtype=torch.float64),
                              torch.full((N,), dx * dx, dtype=torch.float64),
                              torch.zeros(N, dtype=torch.int32))
    domain = DomainDescription(torch.tensor([-1.0, -1.0], dtype=torch.float64),
                               torch.tensor([1.0, 1.0], dtype=torch.float64),
                               periodic=[True, True])
    adjacency = radiusSearchCompactHashMap(particles, domain)   # reused by every call below
    kernel = KernelFunctions.Wendland2

    def run(operation, values=None, state=None, **options):
        props = OperationProperties(kernel, operation=operation, **options)
        return warpOperation(state if state is not None else particles, props, domain,
                             queryValues=values, adjacency=adjacency)

    # Density first: the other operators use the apparent volumes V_j = m_j / rho_j
    rho = run(WarpOperation.Density)
    fluid = ParticleState(pos, particles.supports, particles.masses, particles.kinds,
                          densities=rho)

    # --- fields and their exact derivatives ---------------------------------------------
    x, y = pos[:, 0], pos[:, 1]
    sx, cx, sy, cy = torch.sin(PI * x), torch.cos(PI * x), torch.sin(PI * y), torch.cos(PI * y)
    f = sx * cy
    gradF = torch.stack([PI * cx * cy, -PI * sx * sy], dim=1)
    lapF = -2 * PI**2 * f
    u = torch.stack([sx * cy, sy], dim=1)
    divU = PI * cx * cy + PI * cy
    curlU = (0.0 + PI * sx * sy).unsqueeze(1)           # d(sin y)/dx - d(sin x cos y)/dy
    gradDivU = -PI**2 * torch.stack([sx * cy, cx * sy + sy], dim=1)

    errors = {}

    def report(name, approx, exact, bound):
        err = ((approx - exact).abs().max() / exact.abs().max()).item()
        errors[name] = err
        print(f"{name:<32s} shape {str(tuple(approx.shape)):<14s} rel. error {err:.3e}")
        assert err < bound, f"{name}: {err} >= {bound}"

    report("Density (vs 1)", rho, torch.ones_like(rho), 0.01)
    report("Interpolate f", run(WarpOperation.Interpolate, f, fluid), f, 0.05)
    for scheme in GradientScheme:
        report(f"Gradient f [{scheme.name}]",
               run(WarpOperation.Gradient, f, fluid, gradientMode=scheme), gradF, 0.05)
    report("Divergence u [Difference]",
           run(WarpOperation.Divergence, u, fluid, gradientMode=GradientScheme.Difference),
           divU, 0.05)
    report("Curl u [Difference]",
           run(WarpOperation.Curl, u, fluid, gradientMode=GradientScheme.Difference), curlU, 0.05)
    for scheme in (LaplacianScheme.Naive, LaplacianScheme.Brookshaw, LaplacianScheme.Default):
        report(f"Laplacian f [{scheme.name}]",
               run(WarpOperation.Laplacian, f, fluid, laplacianMode=scheme,
                   gradientMode=GradientScheme.Difference), lapF, 0.10)
    report("Laplacian u [Dot] vs grad div u",
           run(WarpOperation.Laplacian, u, fluid, laplacianMode=LaplacianScheme.Dot,
               gradientMode=GradientScheme.Difference), gradDivU, 0.15)
    C = run(WarpOperation.Covariance, None, fluid)
    report("Covariance (vs identity)", C, torch.eye(2, dtype=torch.float64).expand_as(C), 0.05)

    (out / "operator_errors.json").write_text(json.dumps(errors, indent=2))
    print(f"wrote {out / 'operator_errors.json'}")
    print("OK")


if __name__ == "__main__":
    main()
