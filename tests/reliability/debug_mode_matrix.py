"""Run in a subprocess by `test_debug_mode.py`: Warp's debug mode (bounds-checked array
accesses, `wp.config.mode = "debug"`, set before any kernel module loads), then every operator
once on a CSR list and a grid, one JVP per operator, the Density HVP, the correction builders
and the neighbour search, in 2D float64 on a small cloud. Prints OK at the end; an
out-of-bounds access aborts the process or prints Warp's error, which the test detects."""

import sys

import warp as wp

wp.config.mode = "debug"

import torch  # noqa: E402

from warpSPHCore import (  # noqa: E402
    CRKState,
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
    buildCompactHashMap,
    computeCRKFactors,
    computeRenormalizationMatrices,
    radiusSearchCompactHashMap,
    warpOperation,
    warpOperationHVP,
    warpOperationJVP,
)

W = WarpOperation
F64 = torch.float64


def main():
    g = torch.Generator().manual_seed(0)
    n = 24
    pos = 2.0 * torch.rand(n, 2, generator=g, dtype=F64) - 1.0
    p = ParticleState(pos, torch.full((n,), 0.5, dtype=F64), torch.full((n,), 0.1, dtype=F64),
                      torch.tensor([k % 3 for k in range(n)], dtype=torch.int32),
                      torch.full((n,), 1.0, dtype=F64) + 0.1 * torch.rand(n, generator=g,
                                                                          dtype=F64))
    dom = DomainDescription(torch.full((2,), -1.0, dtype=F64), torch.full((2,), 1.0, dtype=F64),
                            [True, False])
    csr = radiusSearchCompactHashMap(p, dom)
    grid = buildCompactHashMap(p.positions, p.positions, p.supports, p.supports, dom.periodic,
                               dom)
    K = KernelFunctions.Wendland2
    V, _, crk = computeCRKFactors(p, dom, K, adjacency=csr)
    _, _, L = computeRenormalizationMatrices(p, OperationProperties(K), dom, adjacency=csr)
    f = torch.randn(n, 2, generator=g, dtype=F64)
    v = torch.randn(n, 2, generator=g, dtype=F64)
    count = 0
    for op in (W.Density, W.Interpolate, W.Gradient, W.Divergence, W.Curl, W.Laplacian,
               W.Covariance):
        pr = OperationProperties(K, operation=op, operationMode=9)
        kw = {}
        if op not in (W.Density, W.Covariance):
            kw["queryValues"] = f
        if op in (W.Gradient, W.Divergence, W.Curl, W.Laplacian):
            kw.update(crkState=crk, referenceVolumes=V, renormalizationState=L)
        for adj in (csr, grid):
            x = p.positions.clone().requires_grad_(True)
            q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
            out = warpOperation(q, pr, dom, adjacency=adj, **kw)
            (out[0] if isinstance(out, tuple) else out).sum().backward()
            jkw = {k: t for k, t in kw.items() if not (op == W.Interpolate and k != "queryValues")}
            warpOperationJVP(p, pr, dom, adjacency=adj,
                             queryTangentState=ParticleTangentState(positions=v), **jkw)
            count += 1
    warpOperationHVP(p, OperationProperties(K, operation=W.Density), dom, v, adjacency=csr)
    assert isinstance(crk, CRKState)
    print(f"OK {count} operator calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
