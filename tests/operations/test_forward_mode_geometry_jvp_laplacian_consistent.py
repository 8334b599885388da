"""Forward mode of `LaplacianScheme.Consistent`: `warpOperationJVP` with
geometry, volume, value and state tangents against J v (reverse mode) and central
differences, the dual-tensor route (live tangents on the appended B and gamma slots too)
against the explicit route, and a state tangent alone against the scheme on (dB, dgamma)
(the operator is linear in its state).

The state's own forward mode (`computeLaplacianCorrectionJVP`, geometry through the
builder) is checked in `test_consistent_laplacian.py`.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from jvp_helpers import checkJVP, dualJVP
from test_laplacian_consistent_scheme import PROPS, _lap, _setup

from warpSPHCore import ParticleState
from warpSPHCore.corrections import computeLaplacianCorrection
from warpSPHCore.dataTypes import LaplacianCorrectionTangentState, ParticleTangentState
from warpSPHCore.enumTypes import LaplacianScheme
from warpSPHCore.neighborhood import radiusSearchCompactHashMap
from warpSPHCore.operations import warpOperationJVP


@pytest.mark.parametrize("scheme", [LaplacianScheme.Consistent])
@pytest.mark.parametrize("d,periodic,traversal", [(2, True, "grid"), (2, False, "csr"),
                                                  (3, False, "csr"), (1, True, "grid")])
def test_consistent_scheme_jvp(d, periodic, traversal, scheme):
    assert PROPS.laplacianMode == scheme
    x, H, V, dom, q = _setup(d, periodic, {1: 12, 2: 6, 3: 4}[d])
    N = x.shape[0]
    g = torch.Generator().manual_seed(5)
    f = torch.rand(N, dtype=torch.float64, generator=g)
    state = computeLaplacianCorrection(q, PROPS, dom, queryVolumes=V)
    adjacency = radiusSearchCompactHashMap(q, dom) if traversal == "csr" else None
    tx = 0.05 * (torch.rand(N, d, dtype=torch.float64, generator=g) - 0.5) / N ** (1 / d)
    th = 0.05 * H * (torch.rand(N, dtype=torch.float64, generator=g) - 0.5)
    tf = torch.rand(N, dtype=torch.float64, generator=g)
    tV = 0.1 * V * torch.rand(N, dtype=torch.float64, generator=g)
    tB = torch.rand(N, d, d, dtype=torch.float64, generator=g)
    tB = tB + tB.transpose(1, 2)
    tg = torch.rand(N, d, dtype=torch.float64, generator=g)

    def lapOf(xx, hh, ff, VV, B, gamma):
        qq = ParticleState(xx, hh, V.clone(), q.kinds)
        st = dataclasses.replace(state, B=B, gamma=gamma)
        return _lap(qq, dom, st, ff, referenceVolumes=VV, adjacency=adjacency)

    inputs = (x, H, f, V, state.B, state.gamma)
    tangents = (tx, th, tf, tV, tB, tg)
    jvp = warpOperationJVP(
        q, PROPS, dom, tangentQueryValues=tf,
        queryTangentState=ParticleTangentState(positions=tx, supports=th), queryValues=f,
        referenceVolumes=V, tangentReferenceVolumes=tV, adjacency=adjacency,
        laplacianCorrectionState=state,
        laplacianCorrectionTangentState=LaplacianCorrectionTangentState(B=tB, gamma=tg))
    checkJVP(lapOf, inputs, tangents, jvp, what=f"Consistent {d}D {traversal}")
    # the dual-tensor route (live tangents on the appended slots too) is the same JVP
    dual = dualJVP(lapOf, inputs, tangents)
    assert float((dual - jvp).abs().max()) <= 1e-12 * float(jvp.abs().max())
    # a state tangent alone: the scheme on (dB, dgamma) (it is linear in the state)
    alone = warpOperationJVP(q, PROPS, dom, queryValues=f, referenceVolumes=V,
                             adjacency=adjacency, laplacianCorrectionState=state,
                             laplacianCorrectionTangentState=LaplacianCorrectionTangentState(
                                 B=tB))
    linear = lapOf(x, H, f, V, tB, torch.zeros_like(tg))
    assert float((alone - linear).abs().max()) <= 1e-12 * float(linear.abs().max())
