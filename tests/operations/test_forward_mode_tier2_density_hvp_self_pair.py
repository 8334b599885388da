"""Self pairs of the Density position HVP.

2D 3x3 grid, supports 0.85 (1 +- 15 %), Gather. When the reference set is the query set the
pair j == i is dropped: its term W(x_i - x_i) is constant in the one shared variable x_i.

* Shared tangent (u = v): dropping and keeping the self pairs are bitwise identical (the
  dropped factor v_i - v_i is exactly 0).
* v = e0, u = 0 (the Jacobi diagonal block): they must differ, by exactly m_i H(0, h_i) e0
  (H(0) from the independent NumPy kernel reference); the dropped version is the x_i-block of
  the Hessian of rho_i (central differences of the reverse-mode gradient moving x_i alone),
  the kept one is that of a distinct reference set with the same coordinates.
* A distinct reference set (another positions tensor, same coordinates) drops nothing; a
  reference state sharing the query positions tensor is the query set.

"Keeping" is `launchHVP(..., dropSelf=False)` on the shared call (the module's launcher).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from jvp_helpers import assertClose
from sph_reference import kr, makeDomain, neighbourStructure, props, supportMargin

from warpSPHCore import ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import _prepareCall, warpOperation
from warpSPHCore.operationsHVP import warpOperationHVP
from warpSPHCore.operators.densityHVP import launchHVP

F64 = torch.float64
EPS = 1e-5
PR = props(WarpOperation.Density, supportMode=SupportScheme.Gather)


def _grid():
    dom = makeDomain(2, F64, "cpu")
    ax = torch.tensor([-0.5, 0.0, 0.5], dtype=F64)
    X, Y = torch.meshgrid(ax, ax, indexing="ij")
    pos = torch.stack((X.reshape(-1), Y.reshape(-1)), dim=1)
    p = torch.tensor([0.3, -1.0, 0.8, -0.4, 1.0, -0.7, 0.1, 0.6, -0.2], dtype=F64)
    h = 0.85 * (1.0 + 0.15 * p)
    m = 1.0 + 0.1 * torch.arange(9, dtype=F64)
    q = ParticleState(pos, h, m, torch.zeros(9, dtype=torch.int32))
    assert supportMargin(q, dom) > 1e-3  # frozen neighbourhoods for the differences
    return q, dom


def _clone(q):
    """A distinct reference set with the same coordinates (another positions tensor)."""
    return ParticleState(q.positions.clone(), q.supports, q.masses, q.kinds)


def _keep(q, dom, adj, v, u):
    _, ctx, _, _ = _prepareCall(q, PR, dom, adjacency=adj)
    return launchHVP(ctx, v, u, dropSelf=False)


def _e0(kind):
    v = torch.zeros(9, 2, dtype=F64)
    if kind == "rows":
        v[:, 0] = 1.0
    else:
        v[0, 0] = 1.0
    return v


def _phiRow(x, q, dom, adj, i):
    """d rho_i / d x_i (shared set, reverse mode)."""
    x = x.detach().requires_grad_(True)
    rho = warpOperation(ParticleState(x, q.supports, q.masses, q.kinds), PR, dom, adjacency=adj)
    return torch.autograd.grad(rho[i], x)[0][i]


def _fdDiagonalBlock(q, dom, adj, v):
    """sum over i of the FD of d rho_i / d x_i moving x_i alone by v_i (the shared-variable
    Jacobi block), Richardson-extrapolated central differences."""
    def fd(i, e):
        dx = torch.zeros_like(v)
        dx[i] = v[i]
        return (_phiRow(q.positions + e * dx, q, dom, adj, i)
                - _phiRow(q.positions - e * dx, q, dom, adj, i)) / (2 * e)

    out = torch.zeros_like(v)
    for i in range(v.shape[0]):
        out[i] = (4 * fd(i, EPS / 2) - fd(i, EPS)) / 3
    return out


def _fdDistinctClone(q, dom, v):
    """FD of d rho_i / d x_i for the cloned distinct reference set (queries move by v, the
    references stay), Richardson-extrapolated for the O(eps) error at coincident points."""
    r = _clone(q)
    adj = neighbourStructure("csr", q, dom, r)

    def phi(xq):
        xq = xq.detach().requires_grad_(True)
        rho = warpOperation(ParticleState(xq, q.supports, q.masses, q.kinds), PR, dom,
                            adjacency=adj, referenceParticles=r)
        return torch.autograd.grad(rho.sum(), xq)[0]

    def fd(e):
        return (phi(q.positions + e * v) - phi(q.positions - e * v)) / (2 * e)

    return 2 * fd(EPS / 2) - fd(EPS)


def test_shared_tangent_keep_and_drop_bitwise_identical():
    q, dom = _grid()
    adj = neighbourStructure("csr", q, dom)
    v = torch.randn(9, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    drop = warpOperationHVP(q, PR, dom, v, adjacency=adj, tangentReferencePositions=v)
    keep = _keep(q, dom, adj, v, v)
    assert float(drop.abs().max()) > 1.0
    assert torch.equal(drop, keep)
    # equal values in another tensor object: still bitwise identical
    assert torch.equal(warpOperationHVP(q, PR, dom, v, adjacency=adj,
                                        tangentReferencePositions=v.clone()), keep)


@pytest.mark.parametrize("kind", ["rows", "particle0"])
def test_asymmetric_tangent_keep_and_drop_differ(kind):
    q, dom = _grid()
    adj = neighbourStructure("csr", q, dom)
    v = _e0(kind)
    drop = warpOperationHVP(q, PR, dom, v, adjacency=adj)
    keep = _keep(q, dom, adj, v, None)
    assert not torch.equal(drop, keep)
    # the difference is exactly the self term m_i H(0, h_i) v_i (Gather: h_ii = h_i)
    H0 = kr.hessian(kr.W2, 2, np.zeros((9, 2)), q.supports.numpy())
    selfTerm = torch.as_tensor(q.masses.numpy()[:, None] * np.einsum("iab,ib->ia", H0,
                                                                       v.numpy()))
    assert float(selfTerm.abs().max()) > 1.0
    assertClose(keep - drop, selfTerm, 1e-12, 1e-13, "keep - drop vs m_i H(0) v_i")
    # dropping is the true Jacobi block of the shared variable, keeping is not
    fd = _fdDiagonalBlock(q, dom, adj, v)
    assertClose(drop, fd, 1e-6, 1e-8, "dropped vs FD of the reverse-mode gradient")
    assert float((keep - fd).abs().max()) > 1e-2
    # keeping is the HVP of a distinct reference set with the same coordinates
    assertClose(keep, _fdDistinctClone(q, dom, v), 1e-6, 1e-8, "kept vs distinct-set FD")


@pytest.mark.parametrize("tangent", ["random", "e0"])
def test_distinct_reference_set_drops_nothing(tangent):
    q, dom = _grid()
    r = _clone(q)
    adj = neighbourStructure("csr", q, dom)
    adjR = neighbourStructure("csr", q, dom, r)
    g = torch.Generator().manual_seed(2)
    if tangent == "random":
        v = torch.randn(9, 2, generator=g, dtype=F64)
        u = torch.randn(9, 2, generator=g, dtype=F64)
    else:
        v, u = _e0("rows"), None
    distinct = warpOperationHVP(q, PR, dom, v, adjacency=adjR, referenceParticles=r,
                                tangentReferencePositions=u)
    keep = _keep(q, dom, adj, v, u)
    # the same pairs; a symmetric list's rows (the self-search's) are in another order, so
    # the sums agree to rounding
    assertClose(distinct, keep, 1e-14, 1e-15, "distinct set vs kept self pair")
    drop = warpOperationHVP(q, PR, dom, v, adjacency=adj, tangentReferencePositions=u)
    assert not torch.equal(distinct, drop)
    if tangent == "e0":
        assertClose(distinct, _fdDistinctClone(q, dom, v), 1e-6, 1e-8, "distinct vs FD")


def test_reference_state_sharing_the_positions_tensor_is_the_query_set():
    q, dom = _grid()
    adj = neighbourStructure("csr", q, dom)
    same = ParticleState(q.positions, q.supports, q.masses, q.kinds)
    v = _e0("rows")
    drop = warpOperationHVP(q, PR, dom, v, adjacency=adj)
    viaState = warpOperationHVP(q, PR, dom, v, adjacency=adj, referenceParticles=same)
    assert torch.equal(viaState, drop)
    assert not torch.equal(viaState, _keep(q, dom, adj, v, None))
