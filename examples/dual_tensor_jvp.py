"""Forward mode: one JVP three ways -- dual tensors, warpOperationJVP, finite differences.

The pipeline  x -> rho(x) (Density) -> grad f (Gradient, V_j = m_j / rho_j)  with the
field f = sin(pi x) cos(pi y) sampled at the particles, on a jittered periodic cloud. Its
directional derivative along a random position perturbation v is computed

1. with `torch.autograd.forward_ad`: make the positions a dual tensor (x, v) and run the
   ordinary code; the Warp operators propagate the tangents with their JVP kernels and
   torch propagates them through sin/cos;
2. explicitly with `warpOperationJVP`, chaining the tangents by hand: d rho from the Density
   JVP, df = grad f(x) . v by the chain rule, then the Gradient JVP with position, density
   and value tangents;
3. with a central finite difference of the pipeline (neighbour list frozen).

(1) and (2) run the same kernels and agree to round-off; (3) agrees to O(eps^2).

Run: python examples/dual_tensor_jvp.py [--out DIR]
"""

import argparse
import math
import pathlib
import tempfile

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
    warpOperationJVP,
)

PI = math.pi


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=16, help="particles per axis")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    n = args.n
    dx = 2.0 / n
    g = (torch.arange(n, dtype=torch.float64) + 0.5) * dx - 1.0
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    x0 = torch.stack([gx.flatten(), gy.flatten()], dim=1)
    x0 = x0 + 0.1 * dx * torch.randn(x0.shape, generator=torch.Generator().manual_seed(0),
                                     dtype=torch.float64)
    N = x0.shape[0]
    supports = torch.full((N,), 3.0 * dx, dtype=torch.float64)
    masses = torch.full((N,), dx * dx, dtype=torch.float64)
    kinds = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.tensor([-1.0, -1.0], dtype=torch.float64),
                               torch.tensor([1.0, 1.0], dtype=torch.float64),
                               periodic=[True, True])
    adjacency = radiusSearchCompactHashMap(ParticleState(x0, supports, masses, kinds), domain)
    kernel = KernelFunctions.Wendland2
    densityProps = OperationProperties(kernel, operation=WarpOperation.Density)
    gradientProps = OperationProperties(kernel, operation=WarpOperation.Gradient,
                                        gradientMode=GradientScheme.Difference)

    def field(x):
        return torch.sin(PI * x[:, 0]) * torch.cos(PI * x[:, 1])

    def pipeline(x):
        """x [N, 2] -> SPH gradient of f [N, 2] (plain torch code, works with dual x)."""
        rho = warpOperation(ParticleState(x, supports, masses, kinds), densityProps, domain,
                            adjacency=adjacency)
        particles = ParticleState(x, supports, masses, kinds, densities=rho)
        return warpOperation(particles, gradientProps, domain, queryValues=field(x),
                             adjacency=adjacency)

    v = torch.randn(x0.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    # 1. dual tensors: the tangent rides along the ordinary forward pass
    with fwAD.dual_level():
        dual = pipeline(fwAD.make_dual(x0, v))
        primal, jvpDual = fwAD.unpack_dual(dual)
        primal, jvpDual = primal.clone(), jvpDual.clone()

    # 2. explicit JVPs, chaining the tangents by hand
    p0 = ParticleState(x0, supports, masses, kinds)
    rho0 = warpOperation(p0, densityProps, domain, adjacency=adjacency)
    dRho = warpOperationJVP(p0, densityProps, domain, adjacency=adjacency,
                            queryTangentState=ParticleTangentState(positions=v))
    f0 = field(x0)
    gradF0 = torch.stack([PI * torch.cos(PI * x0[:, 0]) * torch.cos(PI * x0[:, 1]),
                          -PI * torch.sin(PI * x0[:, 0]) * torch.sin(PI * x0[:, 1])], dim=1)
    dF = (gradF0 * v).sum(dim=1)                              # chain rule for f(x_i)
    p1 = ParticleState(x0, supports, masses, kinds, densities=rho0)
    jvpExplicit = warpOperationJVP(
        p1, gradientProps, domain, adjacency=adjacency, queryValues=f0, tangentQueryValues=dF,
        queryTangentState=ParticleTangentState(positions=v, densities=dRho))

    # 3. central finite difference
    eps = 1e-6
    jvpFD = (pipeline(x0 + eps * v) - pipeline(x0 - eps * v)) / (2 * eps)

    scale = jvpDual.abs().max().item()
    eExplicit = (jvpDual - jvpExplicit).abs().max().item() / scale
    eFD = (jvpDual - jvpFD).abs().max().item() / scale
    ePrimal = (primal - pipeline(x0)).abs().max().item()
    print(f"N = {N}, output [N, 2], max |JVP| = {scale:.3f}")
    print(f"dual primal vs plain call      max abs diff {ePrimal:.2e}")
    print(f"dual vs warpOperationJVP       rel. error  {eExplicit:.2e}")
    print(f"dual vs central FD (eps 1e-6)  rel. error  {eFD:.2e}")
    assert ePrimal < 1e-14
    assert eExplicit < 1e-12
    assert eFD < 1e-7

    np.savez(out / "jvp.npz", positions=x0.numpy(), tangent=v.numpy(), jvp=jvpDual.numpy(),
             jvpFD=jvpFD.numpy())
    print(f"wrote {out / 'jvp.npz'}")
    print("OK")


if __name__ == "__main__":
    main()
