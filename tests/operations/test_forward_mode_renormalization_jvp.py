"""Forward mode of the renormalization builder: `computeRenormalizationMatricesJVP`.

dL is compared with J·v of `computeRenormalizationMatrices` (reverse-mode Jacobian, itself
gradcheck-verified in `test_renormalization_gradcheck.py`, rtol 1e-8) and central
differences (rtol 1e-5) on full-rank rows (2D well-conditioned branch, 3D all singular values
above the cutoff): 1D/2D/3D, CSR / grid / on-the-fly traversals, position, support, density,
reference-mass and reference-volume tangents, distinct reference sets, an exactly uniform
periodic grid (isotropic C), mixed kinds in three operation modes, low-neighbour (identity
fallback) rows and the 1D cutoff with exactly zero tangent, dC = the Covariance JVP, the
scope's rejections, and a float64 reverse-over-forward gradcheck. Neighbourhoods are frozen
(1e-3 h margin from every support threshold).
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose, checkJVP, jacobianJVP, randomTangents
from sph_reference import (
    GRADCHECK,
    leaves,
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    supportMargin,
)
from test_crk import _census

from warpSPHCore import (
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.corrections import (
    computeRenormalizationMatrices,
    computeRenormalizationMatricesJVP,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
NPART = {1: 8, 2: 12, 3: 10}
HMEAN = {1: 0.7, 2: 0.9, 3: 1.5}
SCHEMES = (SupportScheme.Gather, SupportScheme.Scatter, SupportScheme.KernelMeanSymmetric)


def _fullRank(C, d):
    """Rows whose pseudo-inverse is the plain inverse (2D: |small| > 1e-6 |big|, 3D: every
    singular value above 1e-4 sigma_max, a safety factor on the 1e-6 cutoff)."""
    if d == 1:
        return C[:, 0, 0] > 1e-8
    s = torch.linalg.svdvals(C)
    return s[:, -1] > 1e-4 * s[:, 0]


def _cloud(d, device, seed, **kw):
    dom = makeDomain(d, F64, device)
    return marginCloud(NPART[d], d, F64, device, seed=seed, domain=dom, hMean=HMEAN[d], **kw), dom


def _fn(q, pr, dom, adj, r=None, volumes=False):
    """L as a function of (qPos, qSup, qRho[, rPos, rSup, rMas, rRho][, volumes])."""

    def fn(*x):
        p = ParticleState(x[0], x[1], q.masses, q.kinds, x[2])
        k = 3
        ref = None
        if r is not None:
            ref = ParticleState(x[3], x[4], x[5], r.kinds, x[6])
            k = 7
        vol = x[k] if volumes else None
        _, _, state = computeRenormalizationMatrices(p, pr, dom, referenceVolumes=vol,
                                                     adjacency=adj, referenceParticles=ref)
        return state.renormalizationMatrices

    return fn


def _jvp(q, pr, dom, adj, tangents, r=None, volumes=None, **kw):
    """dL for tangents laid out as the inputs of `_fn`."""
    qt = ParticleTangentState(positions=tangents[0], supports=tangents[1],
                              densities=tangents[2])
    rt = None
    k = 3
    if r is not None:
        rt = ParticleTangentState(positions=tangents[3], supports=tangents[4],
                                  masses=tangents[5], densities=tangents[6])
        k = 7
    tvol = tangents[k] if volumes is not None else None
    return computeRenormalizationMatricesJVP(q, pr, dom, qt, referenceVolumes=volumes,
                                             tangentReferenceVolumes=tvol, adjacency=adj,
                                             referenceParticles=r, referenceTangentState=rt,
                                             **kw)


def _tangents(inputs, seed):
    """Positions O(1), supports and densities O(0.1)."""
    scales = [1.0, 0.1, 0.1, 1.0, 0.1, 0.1, 0.1, 0.1][:len(inputs)]
    return randomTangents(inputs, seed, scales=scales)


# --- J·v and central differences ---------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
@pytest.mark.parametrize("traversal", ["csr", "none"])
def test_renorm_jvp(device, dim, traversal, scheme):
    q, dom = _cloud(dim, device, seed=21)
    adj = neighbourStructure(traversal, q, dom)
    pr = props(supportMode=scheme)
    inputs = [q.positions, q.supports, q.densities]
    v = _tangents(inputs, 1)
    C, ev, state, tstate = _jvp(q, pr, dom, adj, v)
    C0, ev0, state0 = computeRenormalizationMatrices(q, pr, dom, adjacency=adj)
    assert torch.equal(C, C0) and torch.equal(ev, ev0)
    assert torch.equal(state.renormalizationMatrices, state0.renormalizationMatrices)
    full = _fullRank(C, dim)
    assert bool(full.all())
    checkJVP(_fn(q, pr, dom, adj), inputs, v, tstate.renormalizationMatrices,
             what=f"renorm JVP {dim}D {traversal} {scheme.name}")


def test_renorm_jvp_traversals_agree(device):
    q, dom = _cloud(2, device, seed=22)
    pr = props(supportMode=SupportScheme.Scatter)
    v = _tangents([q.positions, q.supports, q.densities], 2)
    outs = [_jvp(q, pr, dom, neighbourStructure(t, q, dom), v)[3].renormalizationMatrices
            for t in ("csr", "grid", "none")]
    for o in outs[1:]:
        assertClose(o, outs[0], rtol=1e-12, atol=1e-13, what="traversal")


def test_renorm_jvp_distinct_and_volumes(device):
    """A distinct reference set (positions, supports, masses, densities tangents of both
    sets), then reference volumes with their tangent; dC equals the Covariance JVP."""
    dom = makeDomain(2, F64, device)
    q, r = marginPair(7, 11, 2, F64, device, 30, dom, hMean=1.0)
    adj = neighbourStructure("grid", q, dom, r)
    pr = props(supportMode=SupportScheme.MeanSymmetric)
    inputs = [q.positions, q.supports, q.densities, r.positions, r.supports, r.masses,
              r.densities]
    v = _tangents(inputs, 3)
    C, _, _, tstate = _jvp(q, pr, dom, adj, v, r=r)
    assert bool(_fullRank(C, 2).all())
    checkJVP(_fn(q, pr, dom, adj, r=r), inputs, v, tstate.renormalizationMatrices,
             what="renorm JVP distinct")

    vol = 0.1 + 0.1 * torch.rand(r.positions.shape[0], generator=torch.Generator().manual_seed(
        5), dtype=F64).to(device)
    inputs = inputs + [vol]
    v = _tangents(inputs, 4)
    C, _, state, tstate = _jvp(q, pr, dom, adj, v, r=r, volumes=vol)
    assert bool(_fullRank(C, 2).all())
    checkJVP(_fn(q, pr, dom, adj, r=r, volumes=True), inputs, v,
             tstate.renormalizationMatrices, what="renorm JVP volumes")
    # dL = -L dC L with dC the Covariance geometry JVP (dC zeroed on fallback rows)
    dC = warpOperationJVP(
        q, props(WarpOperation.Covariance, supportMode=SupportScheme.MeanSymmetric), dom,
        queryTangentState=ParticleTangentState(positions=v[0], supports=v[1], densities=v[2]),
        referenceTangentState=ParticleTangentState(positions=v[3], supports=v[4], masses=v[5],
                                                   densities=v[6]),
        referenceVolumes=vol, tangentReferenceVolumes=v[7], adjacency=adj, referenceParticles=r)
    L = state.renormalizationMatrices
    _, n = warpOperation(q, props(WarpOperation.Covariance,
                                  supportMode=SupportScheme.MeanSymmetric), dom,
                         referenceVolumes=vol, adjacency=adj, referenceParticles=r,
                         covarianceReturnNumNeighbors=True)
    dC = torch.where((n < 4)[:, None, None], torch.zeros_like(dC), dC)
    dCs = 0.5 * (dC + dC.transpose(1, 2))
    assertClose(tstate.renormalizationMatrices, -L @ dCs @ L, rtol=1e-13, atol=1e-14,
                what="-L dC L")


def test_renorm_jvp_uniform_periodic_grid(device):
    """An exactly uniform periodic 2D lattice (isotropic C: the 2D closed form at its
    degenerate eigenvalues, W9): the well-conditioned branch's JVP is exact there too."""
    d, n = 2, 5
    dom = makeDomain(d, F64, device, periodic=True)
    ax = -1.0 + 0.4 * torch.arange(n, dtype=F64)
    pos = torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, d).to(device)
    N = pos.shape[0]
    q = ParticleState(pos, torch.full((N,), 0.7, dtype=F64, device=device),
                      torch.ones(N, dtype=F64, device=device),
                      torch.zeros(N, dtype=torch.int32, device=device),
                      torch.ones(N, dtype=F64, device=device))
    assert supportMargin(q, dom) > 1e-3
    adj = neighbourStructure("csr", q, dom)
    pr = props(supportMode=SupportScheme.Gather)
    C, _, _, _ = computeRenormalizationMatricesJVP(q, pr, dom, None, adjacency=adj)
    assertClose(C[:, 0, 1], torch.zeros_like(C[:, 0, 1]), atol=1e-13, what="isotropic")
    inputs = [q.positions, q.supports, q.densities]
    v = _tangents(inputs, 7)
    _, _, _, tstate = _jvp(q, pr, dom, adj, v)
    checkJVP(_fn(q, pr, dom, adj), inputs, v, tstate.renormalizationMatrices,
             what="uniform grid")


def test_renorm_jvp_float32(device, dim):
    q, dom = _cloud(dim, device, seed=23)
    pr = props(supportMode=SupportScheme.Scatter)
    v = _tangents([q.positions, q.supports, q.densities], 14)
    ref = _jvp(q, pr, dom, None, v)[3].renormalizationMatrices
    q32 = ParticleState(q.positions.float(), q.supports.float(), q.masses.float(), q.kinds,
                        q.densities.float())
    out = _jvp(q32, pr, makeDomain(dim, torch.float32, device), None,
               [t.float() for t in v])[3].renormalizationMatrices
    assert out.dtype == torch.float32
    assertClose(out.double(), ref, rtol=1e-3, atol=1e-4, what="float32")


# --- kinds and modes ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [9, 13, 3])
def test_renorm_jvp_mixed_kinds(device, mode):
    """Fluid / boundary / ghost particles in AllToAll, FluidToAll and BoundaryToFluid: J·v of
    the masked primal; masked query rows (C = 0, identity fallback) have zero tangent."""
    kinds = [0, 1, 2] * 6
    dom = makeDomain(2, F64, device)
    q = marginCloud(18, 2, F64, device, seed=40, domain=dom, hMean=1.2, kinds=kinds)
    adj = neighbourStructure("csr", q, dom)
    pr = props(supportMode=SupportScheme.Scatter, operationMode=mode)
    inputs = [q.positions, q.supports, q.densities]
    v = _tangents(inputs, 8)
    C, _, _, tstate = _jvp(q, pr, dom, adj, v)
    dL = tstate.renormalizationMatrices
    k = q.kinds
    masked = {9: torch.zeros_like(k, dtype=torch.bool), 13: k == 2, 3: k != 0}[mode]
    assert torch.equal(dL[masked], torch.zeros_like(dL[masked]))
    eye = torch.eye(2, dtype=F64, device=device)
    fallback = (C == eye).flatten(1).all(-1)
    assert bool((masked <= fallback).all())
    full = _fullRank(C, 2) & ~fallback
    assert bool(full.any())
    ref = jacobianJVP(_fn(q, pr, dom, adj), inputs, v)
    assertClose(dL[full], ref[full], what=f"mode {mode}")
    assert torch.equal(dL[fallback], torch.zeros_like(dL[fallback]))


# --- fallback and cutoff rows ------------------------------------------------------------


def test_renorm_jvp_low_neighbour_rows(device, dim):
    """An added particle with a small support seeing one neighbour (Gather: n = 2 < d + 2,
    identity fallback) has exactly zero tangent although its Covariance tangent is not zero;
    the others equal J·v."""
    q, dom = _cloud(dim, device, seed=50)
    k = int(q.positions[:, 0].argmin())
    x = q.positions[k:k + 1].clone()
    x[0, 0] -= 0.1
    p = ParticleState(torch.cat((q.positions, x)),
                      torch.cat((q.supports, torch.full((1,), 0.12, dtype=F64, device=device))),
                      torch.cat((q.masses, q.masses[:1])), torch.cat((q.kinds, q.kinds[:1])),
                      torch.cat((q.densities, q.densities[:1])))
    assert supportMargin(p, dom) > 1e-3
    adj = neighbourStructure("csr", p, dom)
    pr = props(supportMode=SupportScheme.Gather)
    inputs = [p.positions, p.supports, p.densities]
    v = _tangents(inputs, 9)
    C, _, _, tstate = _jvp(p, pr, dom, adj, v)
    dL = tstate.renormalizationMatrices
    _, n = warpOperation(p, props(WarpOperation.Covariance, supportMode=SupportScheme.Gather),
                         dom, adjacency=adj, covarianceReturnNumNeighbors=True)
    assert int(n[-1]) == 2 and bool((n >= dim + 2).any())
    dC = warpOperationJVP(p, props(WarpOperation.Covariance, supportMode=SupportScheme.Gather),
                          dom, queryTangentState=ParticleTangentState(*v[:2], densities=v[2]),
                          adjacency=adj)
    assert float(dC[-1].abs().max()) > 1e-3
    assert torch.equal(C[-1], torch.eye(dim, dtype=F64, device=device))
    assert torch.equal(dL[-1], torch.zeros_like(dL[-1]))
    checkJVP(_fn(p, pr, dom, adj), inputs, v, dL, what=f"fallback {dim}D")


def test_renorm_jvp_1d_cutoff(device):
    """1D rows with C <= 1e-10 (negative reference volumes make C < 0) have L = 0 and dL =
    exactly 0 although dC != 0; the other rows equal J·v."""
    q, dom = _cloud(1, device, seed=60)
    n = q.positions.shape[0]
    vol = torch.full((n,), 0.2, dtype=F64, device=device)
    vol[: n // 2] = -0.2
    adj = neighbourStructure("csr", q, dom)
    pr = props(supportMode=SupportScheme.Scatter)
    inputs = [q.positions, q.supports, q.densities, vol]
    v = _tangents(inputs[:3], 10) + [0.05 * torch.ones_like(vol)]
    C, ev, state, tstate = computeRenormalizationMatricesJVP(
        q, pr, dom, ParticleTangentState(positions=v[0], supports=v[1], densities=v[2]),
        referenceVolumes=vol, tangentReferenceVolumes=v[3], adjacency=adj)
    cut = C[:, 0, 0] <= 1e-10
    assert bool(cut.any()) and not bool(cut.all())
    dL = tstate.renormalizationMatrices
    assert torch.equal(state.renormalizationMatrices[cut], torch.zeros_like(dL[cut]))
    assert torch.equal(dL[cut], torch.zeros_like(dL[cut]))

    def fn(pos, h, rho, vl):
        p = ParticleState(pos, h, q.masses, q.kinds, rho)
        return computeRenormalizationMatrices(p, pr, dom, referenceVolumes=vl,
                                              adjacency=adj)[2].renormalizationMatrices

    checkJVP(fn, inputs, v, dL, what="1D cutoff")


# --- outputs, scope, no sync ---------------------------------------------------------------


def test_renorm_jvp_outputs_and_scope(device):
    q, dom = _cloud(2, device, seed=70)
    adj = neighbourStructure("csr", q, dom)
    pr = props(supportMode=SupportScheme.Scatter)
    v = _tangents([q.positions, q.supports, q.densities], 11)
    qt = ParticleTangentState(positions=v[0], supports=v[1], densities=v[2])
    full = computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj)
    two = computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj, returnEigVals=False)
    assert len(full) == 4 and len(two) == 2
    assert torch.equal(two[0].renormalizationMatrices, full[2].renormalizationMatrices)
    assert torch.equal(two[1].renormalizationMatrices, full[3].renormalizationMatrices)
    # no tangent: zeros
    none = computeRenormalizationMatricesJVP(q, pr, dom, None, adjacency=adj)[3]
    assert torch.equal(none.renormalizationMatrices,
                       torch.zeros_like(none.renormalizationMatrices))
    # query masses are never read: their tangent raises
    with pytest.raises(ValueError, match="masses"):
        computeRenormalizationMatricesJVP(
            q, pr, dom, ParticleTangentState(masses=torch.ones_like(q.masses)), adjacency=adj)
    # a volume tangent without volumes raises
    with pytest.raises(ValueError, match="tangentReferenceVolumes"):
        computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj,
                                          tangentReferenceVolumes=torch.ones_like(q.masses))


def test_renorm_jvp_no_host_sync(device):
    q, dom = _cloud(2, device, seed=71)
    pr = props(supportMode=SupportScheme.Scatter)
    v = _tangents([q.positions, q.supports, q.densities], 12)
    _jvp(q, pr, dom, None, v)  # warm-up outside the census
    with _census.census() as c:
        _jvp(q, pr, dom, None, v)
    assert c.total == 0, c.sites


# --- reverse over forward ------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 3])
def test_renorm_jvp_reverse_over_forward(device, dim):
    """float64 gradcheck of dL w.r.t. positions, supports and the position tangent."""
    n = {2: 7, 3: 6}[dim]
    dom = makeDomain(dim, F64, device)
    q = marginCloud(n, dim, F64, device, seed=80, domain=dom, hMean={2: 1.2, 3: 1.6}[dim])
    adj = neighbourStructure("csr", q, dom)
    pr = props(supportMode=SupportScheme.Scatter)
    v = _tangents([q.positions], 13)[0]

    def fn(pos, h, vx):
        p = ParticleState(pos, h, q.masses, q.kinds, q.densities)
        return computeRenormalizationMatricesJVP(
            p, pr, dom, ParticleTangentState(positions=vx), adjacency=adj,
            returnEigVals=False)[1].renormalizationMatrices

    C = computeRenormalizationMatrices(q, pr, dom, adjacency=adj)[0]
    assert bool(_fullRank(C, dim).all())
    assert torch.autograd.gradcheck(fn, leaves(q.positions, q.supports, v), **GRADCHECK)
