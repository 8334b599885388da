"""Density position HVP `warpOperationHVP`.

HVP_i = N sum_j m_j H_ij (v_i - u_j) is block row i of the position Hessian of rho_i applied
to the tangent (v on the queries, u on the references; the self pair is dropped when the
reference set is the query set). Two oracles:

* torch double-backward of an independent float64 pure-torch Density (Wendland2, the
  pairwise support rule of kinds masking of the lattice
  factor), written below from the specs: phi_i = d rho_i / d x_i by `autograd.grad` with
  ``create_graph=True``, its directional derivative by `torch.autograd.functional.jvp`. The
  reference keeps query and reference positions as two inputs; with a shared set its self
  term is the constant W(0), so phi_i does not depend on x_i's reference role and the
  two-input directional derivative is exactly the shared-variable one, for any (v, u);
* central differences (eps 1e-5, Richardson-extrapolated; rtol 1e-6) of the library's
  reverse-mode gradient
  d rho_i / d x_i: the diagonal blocks of the Jacobian of `warpOperation` for a shared set
  (moving every position by eps v, so v = u there), the gradient of sum(rho) w.r.t. the query
  positions for a distinct set (queries by eps v, references by eps u).

Matrix: every support scheme in 1D and 2D (shared set, v = u and v != u), distinct sets
(non-coincident, and cloned coordinates where H(0) enters), mixed kinds in several modes,
lattice calibration, a periodic domain, float32, a gradcheck of the HVP output, the
relation to reverse-over-forward of the Density JVP, rejections and empty sets. Clouds keep
every pair 1e-3 h away from every support threshold; supports vary by +-15 %.
"""

from __future__ import annotations

import math

import pytest
import torch
from jvp_helpers import assertClose
from sph_reference import (
    makeDomain,
    marginCloud,
    marginPair,
    masks,
    neighbourStructure,
    props,
)

from warpSPHCore import (
    KernelFunctions,
    OperationDirection,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP
from warpSPHCore.operationsHVP import warpOperationHVP

F64 = torch.float64
DENS = WarpOperation.Density
EPS_HVP, RTOL_HVP, ATOL_HVP = 1e-5, 1e-6, 1e-8   # HVP vs central FD of the gradient
RTOL_REF, ATOL_REF = 1e-10, 1e-12                # HVP vs torch double backward
SCHEMES = list(SupportScheme)


# --- independent pure-torch Density (float64) ----------------------------------------------

_C_W2 = {1: 5.0 / 4.0, 2: 7.0 / math.pi, 3: 21.0 / (2.0 * math.pi)}


def _wendland2(r, h, d):
    """C_d / h^d k(r / h), k = (1-q)^3 (1+3q) in 1D, (1-q)^4 (1+4q) otherwise; 0 for q > 1."""
    q = r / h
    a = torch.clamp(1.0 - q, min=0.0)
    k = a ** 3 * (1.0 + 3.0 * q) if d == 1 else a ** 4 * (1.0 + 4.0 * q)
    return _C_W2[d] / h ** d * k


def _pairW(r, hi, hj, scheme, d):
    """W_ij under the pairwise support rule."""
    s = SupportScheme(scheme)
    if s == SupportScheme.Gather:
        return _wendland2(r, hi, d)
    if s == SupportScheme.Scatter:
        return _wendland2(r, hj, d)
    if s == SupportScheme.MeanSymmetric:
        return _wendland2(r, (hi + hj) / 2, d)
    if s in (SupportScheme.KernelMeanSymmetric, SupportScheme.SuperSymmetric):
        return 0.5 * (_wendland2(r, hi, d) + _wendland2(r, hj, d))
    return _wendland2(r, torch.maximum(hi, hj), d)


def torchDensity(xq, xr, q, r, pr, shared, factor=1.0):
    """rho_i = N qm_i sum_j rm_j m_j W_ij over all pairs; with `shared` the self term is the
    constant W(0) (it does not depend on x_i)."""
    d = xq.shape[1]
    x = xq[:, None, :] - xr[None, :, :]
    r2 = (x * x).sum(-1)
    hi, hj = q.supports[:, None], r.supports[None, :]
    if shared:
        eye = torch.eye(xq.shape[0], dtype=torch.bool)
        r2 = torch.where(eye, torch.ones_like(r2), r2)
    W = _pairW(torch.sqrt(r2), hi, hj, pr.supportMode, d)
    if shared:
        W = torch.where(eye, _pairW(torch.zeros_like(r2), hi, hj, pr.supportMode, d), W)
    qm, rm = masks(pr.operationMode, q.kinds.numpy(), r.kinds.numpy())
    qm = torch.as_tensor(qm, dtype=F64)
    rm = torch.as_tensor(rm, dtype=F64)
    return factor * qm * (W * (rm * r.masses)[None, :]).sum(1)


def torchHVP(q, r, pr, v, u, shared, factor=1.0):
    """d/de phi(x_q + e v, x_r + e u), phi = grad_{x_q} sum(rho), by torch double backward."""

    def phi(a, b):
        rho = torchDensity(a, b, q, r, pr, shared, factor)
        return torch.autograd.grad(rho.sum(), a, create_graph=True)[0]

    u = torch.zeros_like(r.positions) if u is None else u
    return torch.autograd.functional.jvp(phi, (q.positions, r.positions), (v, u))[1]


# --- central differences of the library's reverse-mode gradient ---------------------------


def libPhiShared(x, q, pr, dom, adj):
    """d rho_i / d x_i of a shared set: the diagonal blocks of the reverse-mode Jacobian."""

    def fn(p):
        return warpOperation(ParticleState(p, q.supports, q.masses, q.kinds), pr, dom,
                             adjacency=adj)

    J = torch.autograd.functional.jacobian(fn, x)
    idx = torch.arange(x.shape[0])
    return J[idx, idx]


def _central(phi, x, v, eps):
    return (phi(x + eps * v) - phi(x - eps * v)) / (2 * eps)


def richardson(fd, eps=EPS_HVP):
    """(4 fd(eps/2) - fd(eps)) / 3: the central difference with its O(eps^2) term removed.
    Plain central differences at eps = 1e-5 miss rtol 1e-6 on pairs near the support edge,
    where the third derivatives of grad W are large (error ~ eps^2 |v|^3 k^(4) / h^(d+4))."""
    return (4 * fd(eps / 2) - fd(eps)) / 3


def fdShared(q, pr, dom, adj, v, eps=EPS_HVP):
    """FD of d rho_i / d x_i along v (every position moves), Richardson-extrapolated."""

    def phi(x):
        return libPhiShared(x, q, pr, dom, adj)

    return richardson(lambda e: _central(phi, q.positions, v, e), eps)


def libPhiDistinct(xq, xr, q, r, pr, dom, adj):
    """d rho_i / d x_i of a distinct set: rho_i depends on the query positions through x_i
    only, so the gradient of sum(rho) w.r.t. the query positions."""
    xq = xq.detach().requires_grad_(True)
    rho = warpOperation(ParticleState(xq, q.supports, q.masses, q.kinds), pr, dom,
                        adjacency=adj,
                        referenceParticles=ParticleState(xr, r.supports, r.masses, r.kinds))
    return torch.autograd.grad(rho.sum(), xq)[0]


def fdDistinct(q, r, pr, dom, adj, v, u, eps=EPS_HVP, coincident=False):
    """FD of d rho_i / d x_i along (v, u), Richardson-extrapolated. `coincident`: query and
    reference points coincide; grad W ~ x (1 - r/h)^p has an x r term there whose central
    difference at x = 0 has an O(eps) error, so the O(eps) term is removed instead:
    2 fd(eps/2) - fd(eps)."""
    u = torch.zeros_like(r.positions) if u is None else u

    def fd(e):
        plus = libPhiDistinct(q.positions + e * v, r.positions + e * u, q, r, pr, dom, adj)
        minus = libPhiDistinct(q.positions - e * v, r.positions - e * u, q, r, pr, dom, adj)
        return (plus - minus) / (2 * e)

    if coincident:
        return 2 * fd(eps / 2) - fd(eps)
    return richardson(fd, eps)


def _tangents(q, seed, r=None):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(q.positions.shape, generator=g, dtype=F64)
    u = torch.randn((r if r is not None else q).positions.shape, generator=g, dtype=F64)
    return v, u


def _checkShared(q, pr, dom, seed, factor=1.0, fd=True):
    adj = neighbourStructure("csr", q, dom)
    v, u = _tangents(q, seed)
    hv = warpOperationHVP(q, pr, dom, v, adjacency=adj, tangentReferencePositions=v)
    assert hv.shape == q.positions.shape and hv.dtype == F64
    assert float(hv.abs().max()) > 0
    assertClose(hv, torchHVP(q, q, pr, v, v, True, factor), RTOL_REF, ATOL_REF,
                "shared u = v vs torch double backward")
    if fd:
        assertClose(hv, fdShared(q, pr, dom, adj, v), RTOL_HVP, ATOL_HVP,
                    "shared u = v vs FD of the reverse-mode gradient")
    # v != u and the default u = 0 (the Jacobi diagonal block), against the torch reference
    hvu = warpOperationHVP(q, pr, dom, v, adjacency=adj, tangentReferencePositions=u)
    assertClose(hvu, torchHVP(q, q, pr, v, u, True, factor), RTOL_REF, ATOL_REF,
                "shared v != u vs torch double backward")
    hv0 = warpOperationHVP(q, pr, dom, v, adjacency=adj)
    assertClose(hv0, torchHVP(q, q, pr, v, None, True, factor), RTOL_REF, ATOL_REF,
                "shared u = 0 vs torch double backward")
    return hv


def _checkDistinct(q, r, pr, dom, seed, factor=1.0, torchRef=True, coincident=False):
    adj = neighbourStructure("csr", q, dom, r)
    v, u = _tangents(q, seed, r)
    hv = warpOperationHVP(q, pr, dom, v, adjacency=adj, referenceParticles=r,
                          tangentReferencePositions=u)
    assert hv.shape == q.positions.shape
    assert float(hv.abs().max()) > 0
    if torchRef:
        assertClose(hv, torchHVP(q, r, pr, v, u, False, factor), RTOL_REF, ATOL_REF,
                    "distinct vs torch double backward")
    assertClose(hv, fdDistinct(q, r, pr, dom, adj, v, u, coincident=coincident), RTOL_HVP,
                ATOL_HVP, "distinct vs FD of the reverse-mode gradient")
    hv0 = warpOperationHVP(q, pr, dom, v, adjacency=adj, referenceParticles=r)
    assertClose(hv0, fdDistinct(q, r, pr, dom, adj, v, None, coincident=coincident), RTOL_HVP,
                ATOL_HVP,
                "distinct u = 0 vs FD of the reverse-mode gradient")
    return hv


# --- the reference itself ----------------------------------------------------------------


@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.KernelMeanSymmetric,
                                    SupportScheme.PartialSymmetric], ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2])
def test_torch_reference_matches_density(dim, scheme):
    """The pure-torch Density equals the library's (so its Hessian is the one to compare)."""
    dom = makeDomain(dim, F64, "cpu")
    q = marginCloud(10, dim, F64, "cpu", seed=7, domain=dom)
    pr = props(DENS, supportMode=scheme)
    rho = warpOperation(q, pr, dom, adjacency=neighbourStructure("csr", q, dom))
    ref = torchDensity(q.positions, q.positions, q, q, pr, True)
    assertClose(rho, ref, 1e-12, 1e-13, "torch Density")


# --- schemes x dimensions -----------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2])
def test_hvp_shared_schemes(dim, scheme):
    dom = makeDomain(dim, F64, "cpu")
    q = marginCloud({1: 10, 2: 14}[dim], dim, F64, "cpu", seed=11 + dim, domain=dom)
    _checkShared(q, props(DENS, supportMode=scheme), dom, seed=5)


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2])
def test_hvp_distinct_schemes(dim, scheme):
    dom = makeDomain(dim, F64, "cpu")
    q, r = marginPair(8, 9, dim, F64, "cpu", seed=21 + dim, domain=dom)
    _checkDistinct(q, r, props(DENS, supportMode=scheme), dom, seed=6)


@pytest.mark.parametrize("scheme", [SupportScheme.Gather, SupportScheme.SuperSymmetric],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("dim", [1, 2])
def test_hvp_distinct_cloned_coordinates(dim, scheme):
    """References repeating the query coordinates: a distinct set drops nothing, so the
    coincident pairs contribute m_j H(0) (v_i - u_i) (FD of the reverse-mode gradient, whose
    kernel-gradient adjoint is the finite H(0), W13; extrapolated, see `fdDistinct`)."""
    dom = makeDomain(dim, F64, "cpu")
    q, r = marginPair(8, 8, dim, F64, "cpu", seed=31 + dim, domain=dom, cloned=True)
    _checkDistinct(q, r, props(DENS, supportMode=scheme), dom, seed=7, torchRef=False,
                   coincident=True)


# --- kinds and modes, calibration, periodic, float32 ---------------------------------------

_KINDS2D = [0, 1, 2, 0, 1, 0, 2, 0, 1, 0, 0, 1, 2, 0]
_MODES = [OperationDirection.AllToAll, OperationDirection.FluidToFluid,
          OperationDirection.BoundaryToFluid, OperationDirection.AllToGhost,
          OperationDirection.FluidToAll, OperationDirection.TrueAllToToAll]


@pytest.mark.parametrize("mode", _MODES, ids=lambda m: m.name)
def test_hvp_kinds_modes_shared(mode):
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(14, 2, F64, "cpu", seed=41, domain=dom, kinds=_KINDS2D)
    pr = props(DENS, supportMode=SupportScheme.MeanSymmetric, operationMode=mode)
    hv = _checkShared(q, pr, dom, seed=8)
    qm, _ = masks(int(mode), q.kinds.numpy(), q.kinds.numpy())
    assert torch.all(hv[torch.as_tensor(~qm)] == 0)


@pytest.mark.parametrize("mode", [OperationDirection.AllToAll, OperationDirection.GhostToFluid,
                                  OperationDirection.AllToBoundary], ids=lambda m: m.name)
def test_hvp_kinds_modes_distinct(mode):
    dom = makeDomain(2, F64, "cpu")
    q, r = marginPair(8, 9, 2, F64, "cpu", seed=51, domain=dom, kinds=None)
    q = ParticleState(q.positions, q.supports, q.masses,
                      torch.tensor([0, 1, 2, 0, 1, 0, 2, 0], dtype=torch.int32))
    r = ParticleState(r.positions, r.supports, r.masses,
                      torch.tensor([2, 0, 1, 0, 2, 1, 0, 1, 0], dtype=torch.int32))
    pr = props(DENS, supportMode=SupportScheme.KernelMeanSymmetric, operationMode=mode)
    _checkDistinct(q, r, pr, dom, seed=9)


@pytest.mark.parametrize("dim", [1, 2])
def test_hvp_calibrated(dim):
    dom = makeDomain(dim, F64, "cpu")
    n_h = 3.0
    factor = latticeDensityFactor(KernelFunctions.Wendland2, n_h, dim)
    assert abs(factor - 1.0) > 1e-3
    pr = props(DENS, supportMode=SupportScheme.KernelMeanSymmetric, n_h=n_h,
               calibrateNormalization=True)
    q = marginCloud({1: 10, 2: 14}[dim], dim, F64, "cpu", seed=61, domain=dom)
    hv = _checkShared(q, pr, dom, seed=10, factor=factor)
    plain = warpOperationHVP(q, props(DENS, supportMode=SupportScheme.KernelMeanSymmetric), dom,
                             _tangents(q, 10)[0], adjacency=neighbourStructure("csr", q, dom),
                             tangentReferencePositions=_tangents(q, 10)[0])
    assertClose(hv, factor * plain, 1e-13, 1e-14, "calibrated = factor x uncalibrated")
    qd, rd = marginPair(8, 9, dim, F64, "cpu", seed=62, domain=dom)
    _checkDistinct(qd, rd, pr, dom, seed=11, factor=factor)


def test_hvp_periodic():
    dom = makeDomain(2, F64, "cpu", periodic=True)
    q = marginCloud(12, 2, F64, "cpu", seed=71, domain=dom, hMean=0.7)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENS, supportMode=SupportScheme.SuperSymmetric)
    v, _ = _tangents(q, 12)
    hv = warpOperationHVP(q, pr, dom, v, adjacency=adj, tangentReferencePositions=v)
    assertClose(hv, fdShared(q, pr, dom, adj, v), RTOL_HVP, ATOL_HVP, "periodic vs FD")


def test_hvp_float32():
    dom64 = makeDomain(2, F64, "cpu")
    q = marginCloud(12, 2, F64, "cpu", seed=81, domain=dom64)
    pr = props(DENS, supportMode=SupportScheme.Scatter)
    v, u = _tangents(q, 13)
    ref = warpOperationHVP(q, pr, dom64, v, adjacency=neighbourStructure("csr", q, dom64),
                           tangentReferencePositions=u)
    f32 = torch.float32
    dom32 = makeDomain(2, f32, "cpu")
    q32 = ParticleState(q.positions.to(f32), q.supports.to(f32), q.masses.to(f32), q.kinds)
    hv = warpOperationHVP(q32, pr, dom32, v.to(f32), adjacency=neighbourStructure("csr", q32,
                                                                                   dom32),
                          tangentReferencePositions=u.to(f32))
    assert hv.dtype == f32
    assertClose(hv.to(F64), ref, 1e-4, 1e-5, "float32 vs float64")


# --- reverse mode of the HVP, and its relation to reverse over forward ---------------------


def test_hvp_gradcheck_shared():
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(8, 2, F64, "cpu", seed=91, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENS, supportMode=SupportScheme.KernelMeanSymmetric)
    v, u = _tangents(q, 14)

    def fn(x, h, vv, uu):
        return warpOperationHVP(ParticleState(x, h, q.masses, q.kinds), pr, dom, vv,
                                adjacency=adj, tangentReferencePositions=uu)

    inputs = [t.detach().clone().requires_grad_() for t in (q.positions, q.supports, v, u)]
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_hvp_gradcheck_distinct():
    dom = makeDomain(2, F64, "cpu")
    q, r = marginPair(6, 7, 2, F64, "cpu", seed=92, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(DENS, supportMode=SupportScheme.MeanSymmetric)
    v, u = _tangents(q, 15, r)

    def fn(xq, xr, rm, vv, uu):
        return warpOperationHVP(ParticleState(xq, q.supports, q.masses, q.kinds), pr, dom, vv,
                                adjacency=adj,
                                referenceParticles=ParticleState(xr, r.supports, rm, r.kinds),
                                tangentReferencePositions=uu)

    inputs = [t.detach().clone().requires_grad_()
              for t in (q.positions, r.positions, r.masses, v, u)]
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_hvp_is_x_i_derivative_of_the_density_jvp():
    """HVP_i = d/dx_i of the Density JVP drho_i(v) (shared set, u = v): the diagonal blocks of
    the reverse-mode Jacobian of `warpOperationJVP` (reverse over forward)."""
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(12, 2, F64, "cpu", seed=93, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(DENS, supportMode=SupportScheme.PartialSymmetric)
    v, _ = _tangents(q, 16)

    def jvp(x):
        return warpOperationJVP(ParticleState(x, q.supports, q.masses, q.kinds), pr, dom,
                                queryTangentState=ParticleTangentState(positions=v),
                                adjacency=adj)

    J = torch.autograd.functional.jacobian(jvp, q.positions)
    idx = torch.arange(q.positions.shape[0])
    hv = warpOperationHVP(q, pr, dom, v, adjacency=adj, tangentReferencePositions=v)
    assertClose(hv, J[idx, idx], 1e-10, 1e-12, "HVP vs d(JVP)/dx_i")


# --- validation and empty sets ------------------------------------------------------------


def test_hvp_rejections():
    dom = makeDomain(2, F64, "cpu")
    q = marginCloud(8, 2, F64, "cpu", seed=95, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    v = torch.ones_like(q.positions)
    pr = props(DENS)
    for structure in (None, neighbourStructure("grid", q, dom)):
        with pytest.raises(ValueError, match="AdjacencyList"):
            warpOperationHVP(q, pr, dom, v, adjacency=structure)
    for op in (WarpOperation.Interpolate, WarpOperation.Gradient, WarpOperation.Covariance):
        with pytest.raises(NotImplementedError, match="Density"):
            warpOperationHVP(q, props(op), dom, v, adjacency=adj)
    with pytest.raises(ValueError, match="shape"):
        warpOperationHVP(q, pr, dom, v[:-1], adjacency=adj)
    with pytest.raises(ValueError, match="shape"):
        warpOperationHVP(q, pr, dom, v, adjacency=adj, tangentReferencePositions=v[:, :1])
    with pytest.raises(TypeError, match="dtype"):
        warpOperationHVP(q, pr, dom, v.float(), adjacency=adj)
    with pytest.raises(TypeError, match="torch.Tensor"):
        warpOperationHVP(q, pr, dom, v.numpy(), adjacency=adj)


@pytest.mark.parametrize("nq, nr", [(0, 6), (6, 0), (0, None)])
def test_hvp_empty_sets(nq, nr):
    from sph_reference import cloud

    dom = makeDomain(2, F64, "cpu")
    q = cloud(nq, 2, F64, "cpu", seed=96)
    r = None if nr is None else cloud(nr, 2, F64, "cpu", seed=97)
    adj = neighbourStructure("csr", q, dom, r)
    v = torch.ones_like(q.positions)
    hv = warpOperationHVP(q, props(DENS), dom, v, adjacency=adj, referenceParticles=r)
    assert hv.shape == (nq, 2)
    assert bool((hv == 0).all())

