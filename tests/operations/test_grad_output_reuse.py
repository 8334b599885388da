"""A reused `grad_output` buffer gives correct gradients on every call and is never modified: the Density output owns its adjoint buffer, so `tape.zero()` cannot clear
the caller's seed. Also: float32 and float64 calls interleave in one process with the same
results as separate runs."""

from __future__ import annotations

import torch
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import ParticleState, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64


def _density(q, dom, adj, pos):
    return warpOperation(ParticleState(pos, q.supports, q.masses, q.kinds), props(), dom,
                         adjacency=adj)


def test_reused_grad_output_density(device):
    dom = makeDomain(2, F64, device)
    q = marginCloud(14, 2, F64, device, seed=21, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    seed = torch.randn(14, dtype=F64, device=device)
    keep = seed.clone()
    grads = []
    for _ in range(3):
        pos = q.positions.detach().clone().requires_grad_(True)
        out = _density(q, dom, adj, pos)
        (g,) = torch.autograd.grad(out, pos, grad_outputs=seed)
        grads.append(g)
        assert torch.equal(seed, keep), "backward modified the caller's grad_output"
    assert torch.count_nonzero(grads[0]) > 0
    for g in grads[1:]:
        assert torch.equal(g, grads[0])
    # and the value equals the vector-Jacobian product computed by a fresh reference call
    pos = q.positions.detach().clone().requires_grad_(True)
    jac = torch.autograd.functional.jacobian(lambda p: _density(q, dom, adj, p), pos)
    ref = torch.einsum("i,ijk->jk", keep, jac)
    assert torch.allclose(grads[0], ref, rtol=1e-12, atol=1e-12)


def test_interleaved_precisions_match_separate_runs(device):
    outs = {}
    for dtype in (torch.float32, torch.float64, torch.float32, torch.float64):
        dom = makeDomain(2, dtype, device)
        q = marginCloud(20, 2, dtype, device, seed=5, domain=dom)
        adj = neighbourStructure("grid", q, dom)
        out = warpOperation(q, props(op=WarpOperation.Density), dom, adjacency=adj)
        assert out.dtype == dtype
        if dtype in outs:
            assert torch.equal(out, outs[dtype])  # bitwise reproducible across interleaving
        outs[dtype] = out
    assert torch.allclose(outs[torch.float32].double(), outs[torch.float64], rtol=1e-5)
