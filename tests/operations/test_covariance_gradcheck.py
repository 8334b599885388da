"""Covariance reverse mode: float64 gradcheck through `warpOperation` w.r.t.
positions, supports, masses, densities, reference volumes, CRK A, B, gradA, gradB and L, with
the int32 count output present (non-differentiable).

Matrix: 6 support schemes with corrections cycled over {none, volumes, CRK, renorm,
CRK+renorm+volumes}; traversals CSR/grid/None on aliased and distinct sets; 1D and 3D;
coincident points with CRK.
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    correctionInputs,
    correctionKwargs,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64
COV = WarpOperation.Covariance
CORRECTIONS = ("none", "volumes", "crk", "renorm", "crk+renorm+volumes")


def _check(q, r, dom, pr, traversal, corr):
    nq, d = q.positions.shape
    dev = q.positions.device
    adj = neighbourStructure(traversal, q, dom, r)
    if r is None:
        c = randomCorrectionTensors(nq, nq, d, dev, seed=3)
        inputs = leaves(q.positions, q.supports, q.masses, q.densities, *correctionInputs(corr, c))

        def fn(pos, h, m, rho, *ct):
            p = ParticleState(pos, h, m, q.kinds, rho)
            return warpOperation(p, pr, dom, adjacency=adj, covarianceReturnNumNeighbors=True,
                                 **correctionKwargs(corr, ct))
    else:
        nr = r.positions.shape[0]
        c = randomCorrectionTensors(nq, nr, d, dev, seed=4)
        inputs = leaves(q.positions, q.supports, r.positions, r.supports, r.masses, r.densities,
                        *correctionInputs(corr, c))

        def fn(qp, qh, rp, rh, rm, rrho, *ct):
            query = ParticleState(qp, qh, q.masses, q.kinds, q.densities)
            ref = ParticleState(rp, rh, rm, r.kinds, rrho)
            return warpOperation(query, pr, dom, adjacency=adj, referenceParticles=ref,
                                 covarianceReturnNumNeighbors=True, **correctionKwargs(corr, ct))

    C, n = fn(*inputs)
    assert n.dtype == torch.int32 and not n.requires_grad
    assert torch.autograd.gradcheck(lambda *a: fn(*a)[0], inputs, **GRADCHECK)


@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_covariance_gradcheck_schemes(device, scheme):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=100, domain=dom)
    _check(q, None, dom, props(COV, supportMode=scheme), "csr",
           CORRECTIONS[int(scheme) % len(CORRECTIONS)])


@pytest.mark.parametrize("traversal", TRAVERSALS)
def test_covariance_gradcheck_distinct(device, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=200, domain=dom)
    pr = props(COV, supportMode=SupportScheme.MeanSymmetric, n_h=3.0,
               calibrateNormalization=True)
    _check(q, r, dom, pr, traversal, "crk+renorm+volumes")


@pytest.mark.parametrize("dim, traversal", [(1, "grid"), (3, "none")])
def test_covariance_gradcheck_dimensions(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(5, 6, dim, F64, device, seed=400, domain=dom)
    _check(q, r, dom, props(COV, supportMode=SupportScheme.KernelMeanSymmetric), traversal,
           "crk+renorm")


def test_covariance_gradcheck_coincident(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    _check(c, None, dom, props(COV), "csr", "crk+renorm")
