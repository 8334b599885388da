"""Aliased roles: with referenceParticles=None the query tensors
fill the reference slots too; backward must report their combined gradient exactly once —
equal to the sum of the query- and reference-role gradients of equal but distinct tensors,
and to central finite differences — never twice. Also with the view cache disabled."""

from __future__ import annotations

import pytest
import torch
from sph_reference import leaves, makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64
OPS = [WarpOperation.Density, WarpOperation.Interpolate]


def _call(op, q, dom, adj, reference=None, values=None):
    pr = props(op, supportMode=SupportScheme.MeanSymmetric)
    if op == WarpOperation.Density:
        return warpOperation(q, pr, dom, adjacency=adj, referenceParticles=reference)
    return warpOperation(q, pr, dom, queryValues=values, adjacency=adj,
                         referenceParticles=reference)


def _setup(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=700, domain=dom)
    f = torch.linspace(-1.0, 2.0, 10, dtype=F64, device=device)
    return dom, q, f


@pytest.mark.parametrize("cache", ["on", "off"])
@pytest.mark.parametrize("traversal", ["csr", "none"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_aliased_equals_distinct_sum(device, op, traversal, cache, monkeypatch):
    if cache == "off":
        monkeypatch.setenv("WARPSPHCORE_DISABLE_FIELD_CACHE", "1")
    dom, q, f = _setup(device)
    adj = neighbourStructure(traversal, q, dom)
    w = torch.linspace(0.5, 1.5, 10, dtype=F64, device=device)

    # aliased: referenceParticles=None
    pos, h, m = leaves(q.positions, q.supports, q.masses)
    out = _call(op, ParticleState(pos, h, m, q.kinds, q.densities), dom, adj, values=f)
    (out * w).sum().backward()
    aliased = (pos.grad.clone(), h.grad.clone(), m.grad.clone())

    # the same tensors passed explicitly as a second ParticleState: identical
    pos2, h2, m2 = leaves(q.positions, q.supports, q.masses)
    state = ParticleState(pos2, h2, m2, q.kinds, q.densities)
    same = ParticleState(pos2, h2, m2, q.kinds, q.densities)
    (_call(op, state, dom, adj, reference=same, values=f) * w).sum().backward()
    for a, b in zip(aliased, (pos2.grad, h2.grad, m2.grad)):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)

    # equal but distinct leaves: the aliased gradient is the sum of both roles
    qp, qh, qm, rp, rh, rm = leaves(q.positions, q.supports, q.masses, q.positions, q.supports,
                                    q.masses)
    out = _call(op, ParticleState(qp, qh, qm, q.kinds, q.densities), dom, adj,
                reference=ParticleState(rp, rh, rm, q.kinds, q.densities), values=f)
    (out * w).sum().backward()
    qmGrad = qm.grad if qm.grad is not None else torch.zeros_like(qm)
    torch.testing.assert_close(aliased[0], qp.grad + rp.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(aliased[1], qh.grad + rh.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(aliased[2], qmGrad + rm.grad, rtol=1e-12, atol=1e-12)
    # both roles contribute (otherwise the comparison above would be vacuous)
    assert rp.grad.abs().max() > 0 and qp.grad.abs().max() > 0


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_aliased_gradient_matches_finite_differences(device, op):
    dom, q, f = _setup(device)
    adj = neighbourStructure("csr", q, dom)
    w = torch.linspace(0.5, 1.5, 10, dtype=F64, device=device)
    (pos,) = leaves(q.positions)

    def loss(x):
        return (_call(op, ParticleState(x, q.supports, q.masses, q.kinds, q.densities), dom, adj,
                      values=f) * w).sum()

    loss(pos).backward()
    eps = 1e-6
    fd = torch.zeros_like(pos)
    base = q.positions.detach()
    for idx in range(base.numel()):
        e = torch.zeros_like(base).reshape(-1)
        e[idx] = eps
        e = e.reshape(base.shape)
        fd.reshape(-1)[idx] = (loss(base + e) - loss(base - e)) / (2 * eps)
    torch.testing.assert_close(pos.grad, fd, rtol=1e-6, atol=1e-7)


def test_repeated_backward_is_reentrant(device):
    """Two identical forward/backward passes give bitwise-equal gradients (cached views are
    zeroed on acquire)."""
    dom, q, f = _setup(device)
    grads = []
    (pos,) = leaves(q.positions)
    for _ in range(2):
        pos.grad = None
        out = _call(WarpOperation.Interpolate,
                    ParticleState(pos, q.supports, q.masses, q.kinds, q.densities), dom, None,
                    values=f)
        out.sum().backward()
        grads.append(pos.grad)
    assert torch.equal(grads[0], grads[1])
