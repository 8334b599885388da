"""Momentum forward mode (`operators.momentum`): `warpOperationJVP` with position, support and
value tangents, and with value tangents alone (the operator is not linear in its field, so
those go through the Tier-2 kernel too), against ``jacobian(primal) @ v`` (reverse mode) and
central differences; dual tensors through `warpOperation`. 1D/2D/3D, three traversals, two
support schemes, periodic.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import TRAVERSALS, makeDomain, marginCloud, neighbourStructure, props
from test_momentum import MOM, _field

from warpSPHCore import ParticleState, ParticleTangentState, SupportScheme
from warpSPHCore.operations import warpOperation
from warpSPHCore.operationsJVP import warpOperationJVP

F64 = torch.float64


def _jvpCase(d, traversal, mode):
    dom = makeDomain(d, F64, "cpu", periodic=True)
    n = {1: 7, 2: 12, 3: 14}[d]
    q = marginCloud(n, d, F64, "cpu", 40 + d, domain=dom, hMean=0.5)
    pr = props(MOM, supportMode=mode)
    f = _field(n, d, 9)
    g = torch.Generator().manual_seed(d)
    v = [torch.randn(t.shape, generator=g, dtype=F64) for t in (q.positions, q.supports, f)]
    return dom, q, pr, f, v, neighbourStructure(traversal, q, dom)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("traversal", TRAVERSALS)
@pytest.mark.parametrize("mode", [SupportScheme.Gather, SupportScheme.KernelMeanSymmetric])
def test_momentum_jvp(d, traversal, mode):
    """warpOperationJVP against jacobian(primal) @ v and central differences; value tangents
    alone through the Tier-2 kernel; dual tensors through warpOperation."""
    dom, q, pr, f, (vx, vh, vf), adj = _jvpCase(d, traversal, mode)
    n = q.positions.shape[0]

    def primal(x, h, fl):
        return warpOperation(ParticleState(x, h, q.masses, q.kinds), pr, dom,
                             queryValues=fl, adjacency=adj)

    J = torch.autograd.functional.jacobian(primal, (q.positions, q.supports, f))
    Jv = sum(Jk.reshape(n * 2 * d, -1) @ v.reshape(-1) for Jk, v in zip(J, (vx, vh, vf)))
    Jv = Jv.reshape(n, 2, d)
    tan = warpOperationJVP(q, pr, dom, tangentQueryValues=vf, queryValues=f, adjacency=adj,
                           queryTangentState=ParticleTangentState(positions=vx, supports=vh))
    scale = Jv.abs().max()
    torch.testing.assert_close(tan, Jv, rtol=0, atol=1e-11 * scale)
    eps = 1e-6
    fd = (primal(q.positions + eps * vx, q.supports + eps * vh, f + eps * vf)
          - primal(q.positions - eps * vx, q.supports - eps * vh, f - eps * vf)) / (2 * eps)
    torch.testing.assert_close(tan, fd, rtol=0, atol=1e-6 * scale)
    # value tangents alone: not the operator on the tangent field (it is not linear)
    tanV = warpOperationJVP(q, pr, dom, tangentQueryValues=vf, queryValues=f, adjacency=adj)
    JvV = (J[2].reshape(n * 2 * d, -1) @ vf.reshape(-1)).reshape(n, 2, d)
    torch.testing.assert_close(tanV, JvV, rtol=0, atol=1e-11 * JvV.abs().max())
    with fwAD.dual_level():
        out = primal(fwAD.make_dual(q.positions, vx), fwAD.make_dual(q.supports, vh),
                     fwAD.make_dual(f, vf))
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent, Jv, rtol=0,
                                   atol=1e-11 * scale)
