"""The one-traversal dual route of the Gradient (`operationsJVP.fusedDualJVP`,
`_specialized._gradientDualKernel`): with forward-mode dual positions as the only tangent,
the call returns the primal with the bits of the plain call and the tangent of
`warpOperationJVP` and of J·v, reading back once (the tangent's liveness); a zero tangent
gives an exact zero; calls outside its scope (a value or density tangent, another reference
set, grad required, CRK) take the bridge's route with the same answers."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from sph_reference import cloud, makeDomain, neighbourStructure, props

from warpSPHCore import GradientScheme, ParticleState, ParticleTangentState, SupportScheme
from warpSPHCore import WarpOperation as Op
from warpSPHCore.operations import warpOperation
from warpSPHCore.operationsJVP import warpOperationJVP
from warpSPHCore.operators import _specialized
from warpSPHCore.util.hostSyncCensus import census

pytestmark = pytest.mark.usefixtures("specialized")  # the route needs the specialised kernels

F64 = torch.float64


def _case(device, d=2, n=40, traversal="csr", scheme=GradientScheme.Naive,
          support=SupportScheme.Gather, dtype=F64):
    dom = makeDomain(d, dtype, device, periodic=True)
    q = cloud(n, d, dtype, device, seed=5, hMean=0.42)
    adj = neighbourStructure(traversal, q, dom)
    gen = torch.Generator().manual_seed(2)
    f = torch.randn(n, generator=gen, dtype=F64).to(dtype=dtype, device=device)
    v = torch.randn(n, d, generator=gen, dtype=F64).to(dtype=dtype, device=device)
    pr = props(Op.Gradient, gradientMode=scheme, supportMode=support)
    return q, dom, adj, f, v, pr


def _dual(q, dom, adj, f, v, pr, **kw):
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, v)
        out = warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds, q.densities), pr,
                            dom, queryValues=f, adjacency=adj, **kw)
        primal, tangent = fwAD.unpack_dual(out)
        return primal.clone(), None if tangent is None else tangent.clone()


def _jacobianTimes(q, dom, adj, f, v, pr):
    def fn(x):
        return warpOperation(ParticleState(x, q.supports, q.masses, q.kinds, q.densities), pr,
                             dom, queryValues=f, adjacency=adj)

    return torch.autograd.functional.jvp(fn, (q.positions,), (v,))[1]


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("scheme", list(GradientScheme), ids=lambda s: s.name)
def test_one_traversal_gives_the_primal_bits_and_the_tangent(device, traversal, scheme):
    q, dom, adj, f, v, pr = _case(device, traversal=traversal, scheme=scheme,
                                  support=SupportScheme.SuperSymmetric)
    built = len([1 for name, _ in _specialized._BUILT if name == "gradientDual"])
    with census() as c:
        primal, tangent = _dual(q, dom, adj, f, v, pr)
    assert c.total == 1, c.bySite()  # the tangent's liveness
    assert len([1 for name, _ in _specialized._BUILT if name == "gradientDual"]) >= max(built, 1)
    with torch.no_grad():
        plain = warpOperation(q, pr, dom, queryValues=f, adjacency=adj)
    assert torch.equal(primal, plain)
    explicit = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                                queryTangentState=ParticleTangentState(positions=v))
    scale = float(explicit.abs().max())
    assert scale > 0
    torch.testing.assert_close(tangent, explicit, rtol=0, atol=1e-12 * scale)
    torch.testing.assert_close(tangent, _jacobianTimes(q, dom, adj, f, v, pr), rtol=0,
                               atol=1e-10 * scale)


def test_one_traversal_in_3d_and_float32(device):
    for d, dtype, tol in ((3, F64, 1e-12), (2, torch.float32, 2e-5)):
        q, dom, adj, f, v, pr = _case(device, d=d, dtype=dtype)
        primal, tangent = _dual(q, dom, adj, f, v, pr)
        with torch.no_grad():
            assert torch.equal(primal, warpOperation(q, pr, dom, queryValues=f, adjacency=adj))
        explicit = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                                    queryTangentState=ParticleTangentState(positions=v))
        torch.testing.assert_close(tangent, explicit, rtol=0,
                                   atol=tol * float(explicit.abs().max()))


def test_a_zero_tangent_is_an_exact_zero(device):
    q, dom, adj, f, v, pr = _case(device)
    primal, tangent = _dual(q, dom, adj, f, torch.zeros_like(v), pr)
    with torch.no_grad():
        assert torch.equal(primal, warpOperation(q, pr, dom, queryValues=f, adjacency=adj))
    assert tangent is not None and torch.equal(tangent, torch.zeros_like(primal))


def test_calls_outside_the_scope_take_the_bridge_route(device, monkeypatch):
    """A value tangent, grad required, another reference set: the bridge's route (the
    one-traversal rule declines), the same answers as `warpOperationJVP`."""
    from warpSPHCore import operationsJVP

    q, dom, adj, f, v, pr = _case(device)
    taken = []
    rule = operationsJVP.fusedDualJVP
    monkeypatch.setattr(operationsJVP.dualRouteJVP, "fused",
                        lambda *a: taken.append(rule(*a)) or taken[-1])
    explicitPositions = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                                         queryTangentState=ParticleTangentState(positions=v))
    # a value tangent besides the positions'
    tf = torch.randn_like(f)
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, v)
        fd = fwAD.make_dual(f, tf)
        out = warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds, q.densities), pr,
                            dom, queryValues=fd, adjacency=adj)
        tangent = fwAD.unpack_dual(out).tangent.clone()
    assert taken[-1] is None
    explicit = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj, tangentQueryValues=tf,
                                queryTangentState=ParticleTangentState(positions=v))
    torch.testing.assert_close(tangent, explicit, rtol=0, atol=1e-12 * float(
        explicit.abs().max()))
    # grad required on the values: the bridge's route keeps the reverse graph
    fg = f.clone().requires_grad_(True)
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, v)
        out = warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds, q.densities), pr,
                            dom, queryValues=fg, adjacency=adj)
        tangent = fwAD.unpack_dual(out).tangent.detach().clone()
        assert out.requires_grad
    assert taken[-1] is None
    torch.testing.assert_close(tangent, explicitPositions, rtol=0,
                               atol=1e-12 * float(explicitPositions.abs().max()))
    # the covered call itself
    _dual(q, dom, adj, f, v, pr)
    assert taken[-1] is not None
