"""Run in a subprocess by `test_debug_mode.py`: Warp's debug mode (bounds-checked array
accesses, `wp.config.mode = "debug"`, set before any kernel module loads), then every operator
once on a CSR list and a grid, one JVP per operator, the Density HVP, the correction builders
and the neighbour search, in 2D float64 on a small cloud; then the same on corrupted
structures (a list changed in place after the search -- neighbour indices past
N_r and negative, a row past the edge list, a negative row start -- and a grid with a
corrupted sorted index), each of which must be skipped, never read out of bounds, and
reported by `checkErrors()`. Prints OK at the end; an out-of-bounds access aborts the process
or prints Warp's error, which the test detects."""

import sys

import warp as wp

wp.config.mode = "debug"

import torch  # noqa: E402

from warpSPHCore import (  # noqa: E402
    AdjacencyList,
    CRKState,
    DomainDescription,
    KernelFunctions,
    NeighborListError,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    WarpOperation,
    buildCompactHashMap,
    checkErrors,
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
    checkErrors()

    # corrupted structures
    from warpSPHCore.dataTypes.adjacency import trustedConstruction

    with trustedConstruction():
        bad = AdjacencyList(csr.i.clone(), csr.j.clone(), csr.numNeighbors.clone(),
                            csr.edgeOffsets.clone(), n, n)
    bad.j[0] = 10 * n
    bad.j[3] = -2 ** 40
    bad.numNeighbors[n - 1] = csr.numEdges + 100
    bad.edgeOffsets[1] = -5
    badGrid = buildCompactHashMap(p.positions, p.positions, p.supports, p.supports,
                                  dom.periodic, dom)
    badGrid.sortIndex[0] = 10 * n
    badGrid.sortIndex[1] = -1
    mutated = 0
    for op in (W.Density, W.Interpolate, W.Gradient, W.Divergence, W.Curl, W.Laplacian,
               W.Covariance):
        pr = OperationProperties(K, operation=op)
        kw = {} if op in (W.Density, W.Covariance) else {"queryValues": f}
        for adj in (bad, badGrid):
            x = p.positions.clone().requires_grad_(True)
            q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
            out = warpOperation(q, pr, dom, adjacency=adj, **kw)
            (out[0] if isinstance(out, tuple) else out).sum().backward()
            warpOperationJVP(p, pr, dom, adjacency=adj,
                             queryTangentState=ParticleTangentState(positions=v), **kw)
            try:
                checkErrors()
            except NeighborListError:
                mutated += 1
            else:
                raise AssertionError(f"{op.name}: a corrupted structure was not reported")
    computeCRKFactors(p, dom, K, adjacency=bad)
    computeRenormalizationMatrices(p, OperationProperties(K), dom, adjacency=bad)
    warpOperationHVP(p, OperationProperties(K, operation=W.Density), dom, v, adjacency=bad)
    try:
        checkErrors()
    except NeighborListError:
        mutated += 1
    print(f"OK mutated {mutated} calls reported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
