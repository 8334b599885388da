"""Density reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. query/reference positions, supports and reference masses.

Matrix: every support scheme x every traversal (2D, aliased reference set); distinct
reference sets (non-coincident and with cloned coordinates, W42) x traversals with lattice
calibration; periodic; 1D and 3D; coincident points. Neighbour structures are built once
from detached positions, with every pair at least 1e-3 h away from every support threshold;
supports vary by ±15 %.
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import (
    GRADCHECK,
    TRAVERSALS,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
)

from warpSPHCore import ParticleState, SupportScheme
from warpSPHCore.operations import warpOperation

F64 = torch.float64


def _aliasedCheck(q, dom, pr, traversal):
    adj = neighbourStructure(traversal, q, dom)
    inputs = leaves(q.positions, q.supports, q.masses)

    def fn(pos, h, m):
        return warpOperation(ParticleState(pos, h, m, q.kinds), pr, dom, adjacency=adj)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


def _distinctCheck(q, r, dom, pr, traversal):
    adj = neighbourStructure(traversal, q, dom, r)
    inputs = leaves(q.positions, q.supports, r.positions, r.supports, r.masses)

    def fn(qp, qh, rp, rh, rm):
        query = ParticleState(qp, qh, q.masses, q.kinds)
        ref = ParticleState(rp, rh, rm, r.kinds)
        return warpOperation(query, pr, dom, adjacency=adj, referenceParticles=ref)

    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("scheme", list(SupportScheme), ids=lambda s: s.name)
def test_density_gradcheck_schemes(device, scheme, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=100, domain=dom)
    _aliasedCheck(q, dom, props(supportMode=scheme), traversal)


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
def test_density_gradcheck_distinct_calibrated(device, cloned, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(8, 9, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    pr = props(supportMode=SupportScheme.MeanSymmetric, n_h=3.0, calibrateNormalization=True)
    _distinctCheck(q, r, dom, pr, traversal)


def test_density_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(10, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    _aliasedCheck(q, dom, props(supportMode=SupportScheme.KernelMeanSymmetric), "csr")


@pytest.mark.parametrize("dim, traversal", [(1, "none"), (3, "csr"), (3, "grid")])
def test_density_gradcheck_dimensions(device, dim, traversal):
    dom = makeDomain(dim, F64, device)
    q, r = marginPair(7, 6, dim, F64, device, seed=400, domain=dom)
    _distinctCheck(q, r, dom, props(supportMode=SupportScheme.SuperSymmetric), traversal)


def test_density_gradcheck_coincident(device):
    """A coincident distinct pair plus the self pairs (r = 0, W13)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds)
    _aliasedCheck(c, dom, props(supportMode=SupportScheme.Scatter), "csr")
