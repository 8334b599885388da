"""Curl reverse mode: float64 gradcheck through `warpOperation` and the bridge w.r.t. positions, supports, masses, densities, values, reference volumes,
Omega (query and reference), CRK A, B, gradA, gradB and L.

Matrix: 4 gradient schemes x corrections {none, volumes+grad-h, CRK, CRK+renorm} (2D, CSR,
aliased, vector and matrix fields alternating); grid and on-the-fly traversals; distinct and
cloned reference sets; periodic; 3D vector and matrix (tiny); 1D (zero output, zero
gradients); coincident points with CRK. Neighbour structures are frozen (1e-3 h margin).
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import TRAVERSALS, makeDomain, marginCloud, marginPair, props
from test_divergence_gradcheck import aliasedCheck, distinctCheck

from warpSPHCore import GradientScheme, KernelFunctions, ParticleState, SupportScheme, WarpOperation

F64 = torch.float64
CURL = WarpOperation.Curl
SUPPORTS = list(SupportScheme)


@pytest.mark.parametrize("corr", ["none", "volumes+gradH", "crk", "crk+renorm"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_curl_gradcheck_schemes(device, scheme, corr):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=100, domain=dom)
    k = int(scheme) * 5 + len(corr)
    pr = props(CURL, gradientMode=scheme, supportMode=SUPPORTS[k % len(SUPPORTS)])
    aliasedCheck(q, dom, pr, "csr", (2,) if k % 2 else (2, 3), corr)


@pytest.mark.parametrize("traversal", ["grid", "none"])
def test_curl_gradcheck_traversals(device, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=110, domain=dom)
    pr = props(CURL, gradientMode=GradientScheme.Summation,
               supportMode=SupportScheme.PartialSymmetric)
    aliasedCheck(q, dom, pr, traversal, (2,), "crk+renorm+volumes+gradH")


@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("cloned", [False, True], ids=["distinct", "cloned"])
def test_curl_gradcheck_distinct(device, cloned, traversal):
    dom = makeDomain(2, F64, device)
    q, r = marginPair(6, 7, 2, F64, device, seed=200, domain=dom, cloned=cloned)
    scheme = list(GradientScheme)[(TRAVERSALS.index(traversal) + 2 * int(cloned)) % 4]
    kernel = KernelFunctions.Poly6 if cloned else KernelFunctions.Wendland2
    pr = props(CURL, kernel=kernel, gradientMode=scheme,
               supportMode=SupportScheme.MeanSymmetric, n_h=3.0, calibrateNormalization=True)
    corr = "crk+renorm+volumes+gradH" if scheme != GradientScheme.Symmetric else "crk+gradH"
    distinctCheck(q, r, dom, pr, traversal, (2,), corr)


def test_curl_gradcheck_periodic(device):
    dom = makeDomain(2, F64, device, periodic=True)
    q = marginCloud(8, 2, F64, device, seed=300, domain=dom, hMean=0.7)
    pr = props(CURL, gradientMode=GradientScheme.Difference,
               supportMode=SupportScheme.SuperSymmetric)
    aliasedCheck(q, dom, pr, "grid", (2, 2), "crk+renorm")


@pytest.mark.parametrize("traversal, shape, scheme", [
    ("none", (3,), GradientScheme.Naive),
    ("csr", (3, 2), GradientScheme.Difference),
    ("grid", (3, 3), GradientScheme.Symmetric),
])
def test_curl_gradcheck_3d(device, traversal, shape, scheme):
    dom = makeDomain(3, F64, device)
    q, r = marginPair(4, 5, 3, F64, device, seed=400, domain=dom)
    pr = props(CURL, gradientMode=scheme, supportMode=SupportScheme.KernelMeanSymmetric)
    distinctCheck(q, r, dom, pr, traversal, shape, "crk+renorm+gradH")


@pytest.mark.parametrize("shape", [(), (1,)])
def test_curl_gradcheck_1d(device, shape):
    """1D: the output is exactly 0 and every gradient is exactly 0 (gradcheck agrees)."""
    dom = makeDomain(1, F64, device)
    q, r = marginPair(5, 6, 1, F64, device, seed=410, domain=dom)
    distinctCheck(q, r, dom, props(CURL, gradientMode=GradientScheme.Difference), "csr", shape,
                  "crk+renorm+volumes+gradH")


@pytest.mark.parametrize("corr", ["none", "crk+renorm"])
def test_curl_gradcheck_coincident(device, corr):
    """Self pair and a coincident distinct pair (r = 0; CRK makes G(0) != 0)."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(6, 2, F64, device, seed=500, domain=dom)
    pos = q.positions.clone()
    pos[1] = pos[0]
    c = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    aliasedCheck(c, dom, props(CURL, gradientMode=GradientScheme.Naive), "csr", (2,), corr)
