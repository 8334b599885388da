"""The consistent Laplacian's moments kernel (`_laplacianKernels.laplacianMomentsKernel`)
specialised on a call's configuration (`operators._specialized`): forward only, for
the launches no tape records.

No `from __future__ import annotations`: the generated Warp functions' annotations name
closure variables, which Warp evaluates when it parses them.
"""

import functools

import warp as wp

from ..kernels.specialized import pairKernels, specialFunction
from ..kernels.support import computePairwiseSupport
from ..operators._coefficients import LAPLACIAN_REG_N as _REG_N
from ..operators._coefficients import apparentVolume_j
from ..operators._specialized import (
    configurationOf,
    neighborSum,
    queryAdmitted,
    specializedKernel,
    specializedStructs,
)

__all__ = ["laplacianMomentsSpecialized"]


@functools.cache
def _momentsKernel(cfg):
    """`laplacianMomentsKernel` for one configuration (`operators._specialized`): the same
    thread layout (i, block) and per-pair arithmetic, with the smoothing kernel, support
    scheme, interaction mode and traversal resolved at generation and the pair term inlined
    (the generic kernel's pair term is a non-inlined function, which copies the state
    structs per pair)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    M = wp.types.matrix(shape=(D, D), dtype=S)
    P, DOM, C, KS, A, G = specializedStructs(cfg)
    X = wp.array(dtype=S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    nb = 2 * D + D * D  # blocks per query (`_laplacianKernels.laplacianMomentBlocks`)

    @specialFunction("laplacianMoments_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: X):
        h_j = r.supports[j]
        Gv = pk.gradW_ij(x_ij, h_i, h_j)
        h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
        Dn = wp.length(x_ij) + S(_REG_N) * h_ij
        V_j = apparentVolume_j(r, corr, j)
        xG = wp.outer(x_ij, Gv)
        res = M()
        if k < wp.static(D):
            res = (V_j * x_ij[k]) * xG
        else:
            w = (xG + wp.transpose(xG)) * (S(1.0) / (S(2.0) * Dn * Dn))
            if k < wp.static(2 * D):
                res = (-V_j * x_ij[k - wp.static(D)]) * w
            else:
                kk = k - wp.static(2 * D)
                a = kk / wp.static(D)
                b = kk - a * wp.static(D)
                res = (V_j * x_ij[a] * x_ij[b]) * w
        return res

    rowSum = neighborSum(pair, cfg, False, X, M)
    admitted = queryAdmitted(cfg)

    def moments(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                out: wp.array(dtype=S)):
        tid = wp.tid()
        i = tid / wp.static(nb)
        blk = tid - i * wp.static(nb)
        val = M()
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, blk, wp.static(nb), queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         referenceState.masses)
        base = tid * wp.static(D * D)
        for b in range(wp.static(D)):
            for c in range(wp.static(D)):
                out[base + b * wp.static(D) + c] = val[b, c]

    return specializedKernel(moments, "laplacianMoments", cfg)


def laplacianMomentsSpecialized(config: dict):
    """`OperatorSpec.specialize` of the moments kernel: every configuration with a known
    smoothing kernel and support scheme (it reads volumes only among the corrections)."""
    cfg = configurationOf(config)
    return None if cfg is None else _momentsKernel(cfg)
