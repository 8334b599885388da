"""Particle kinds and `operationMode` for every operator.

One mixed-kind cloud (kinds 0, 1, 2, 3 cycling) and every interaction mode 0..14 plus a value
outside the table (99: masks everything) through Density, Interpolate, Gradient, Divergence,
Curl, Laplacian and Covariance, plain and with every applicable correction, against the
"masked primal": the independent float64 NumPy references of `sph_reference` evaluated with
the same mode (mode table written out there). Then the correction chains built under a
mode (CRK factors -> Gradient, renormalization matrices -> Gradient, computeOmega ->
Divergence / Laplacian) against references built under the same mode (the CRK factors
reference below follows the CRK construction with its own NumPy algebra), the reverse-mode masking (a masked
query row and a masked reference get exactly zero gradient) and the saved-kinds version check.
Forward mode: every operator's explicit JVP and dual-tensor route in every
mode against J·v of the masked primal, reverse over forward (gradcheck of JVP outputs) under
mixed modes, the Density HVP in every mode against torch's double backward of the masked
reference, and the saved kinds of the JVP, dual and HVP launches.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from sph_reference import (
    TRAVERSALS,
    cloud,
    covarianceReference,
    curlReference,
    densityReference,
    divergenceReference,
    gradientReference,
    interpolateReference,
    laplacianReference,
    makeDomain,
    masks,
    neighbourStructure,
    omegaReference,
    pairKernel,
    pairKernelGradient,
    pairVectors,
    props,
    randomCorrectionTensors,
    renormalizationReference,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.corrections import (
    computeCRKFactors,
    computeOmega,
    computeRenormalizationMatrices,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import operatorEntry  # noqa: E402

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

F64 = torch.float64
W2 = KernelFunctions.Wendland2
INVALID = 99
MODES = list(range(15))
OPS = (WarpOperation.Density, WarpOperation.Interpolate, WarpOperation.Gradient,
       WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian,
       WarpOperation.Covariance)
NPART = {1: 10, 2: 12, 3: 12}
HMEAN = {1: 0.5, 2: 0.9, 3: 1.2}
DENSE_NPART = {1: 16, 2: 24, 3: 24}
DENSE_HMEAN = {1: 0.9, 2: 1.2, 3: 1.6}
GRAD_SCHEMES = list(GradientScheme)
LAP_SCHEMES = list(STATELESS_LAPLACIAN)


class _UncheckedProperties(OperationProperties):
    """`OperationProperties` without validation, so that an `operationMode` outside the table
    (which the public constructor rejects) reaches the kernels. `dataclasses.replace` in the
    backends keeps this class."""

    def __post_init__(self):
        pass


def _props(op, mode, **kw):
    base = props(op, **kw)
    if mode in MODES:
        return dataclasses.replace(base, operationMode=mode)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    values["operationMode"] = mode
    return _UncheckedProperties(**values)


def _kinds(n, shift=0):
    return [(k + shift) % 4 for k in range(n)]


def _case(d, device, seed=11, dense=False):
    """Domain, mixed-kind cloud and a vector field; `dense`: enough same-kind neighbours for
    the correction chains (CRK and renormalization rows that are not limited / identity)."""
    dom = makeDomain(d, F64, device)
    n = (DENSE_NPART if dense else NPART)[d]
    h = (DENSE_HMEAN if dense else HMEAN)[d]
    q = cloud(n, d, F64, device, seed=900 + seed + d, kinds=_kinds(n), hMean=h)
    g = torch.Generator().manual_seed(910 + seed + d)
    f = torch.randn(n, d, generator=g, dtype=F64).to(device)
    return dom, q, f


def _np(t):
    return t.detach().cpu().to(F64).numpy()


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=F64)


def _assertClose(out, ref, rtol=1e-11, atol=1e-12):
    """Elementwise rtol plus atol relative to the largest reference magnitude (at least 1)."""
    out = _np(out)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol * scale)


def _queryMask(mode, q):
    if mode not in MODES:
        return np.zeros(q.positions.shape[0], dtype=bool)
    return masks(mode, q.kinds.cpu().numpy(), q.kinds.cpu().numpy())[0]


def _evaluate(op, q, dom, fq, adj, mode, scheme, lap, corr, c, r=None, fr=None):
    """(library output, masked-primal reference) of `op` under `mode`; corr: pass volumes,
    grad-h, CRK and renormalization wherever the operator accepts them. c: (referenceVolumes,
    (query Omega, reference Omega), A, B, gradA, gradB, L); r, fr: a distinct reference set
    and its field (None: aliased)."""
    vol, om, A, B, gA, gB, L = c
    fr = fq if fr is None else fr
    pr = _props(op, mode, gradientMode=scheme, laplacianMode=lap)
    kw = dict(adjacency=adj, referenceParticles=r)
    if corr:
        kw.update(referenceVolumes=vol, gradHState=om, crkState=CRKState(A, B, gA, gB),
                  renormalizationState=L)
    crk = (A, B, gA, gB) if corr else None
    V = vol if corr else None
    Om = om if corr else None
    Lr = L if corr else None
    valid = mode in MODES
    n = q.positions.shape[0]
    if op == WarpOperation.Density:
        out = warpOperation(q, pr, dom, **kw)
        return out, densityReference(q, dom, pr, r) if valid else np.zeros(n)
    if op == WarpOperation.Covariance:
        C, cnt = warpOperation(q, pr, dom, covarianceReturnNumNeighbors=True, **kw)
        if valid:
            Cr, nr = covarianceReference(q, dom, pr, r, volumes=V, crk=crk, renorm=Lr)
        else:
            Cr, nr = np.zeros(tuple(C.shape)), np.zeros(n, dtype=np.int32)
        assert cnt.dtype == torch.int32
        np.testing.assert_array_equal(cnt.cpu().numpy(), nr)
        return C, Cr
    if op == WarpOperation.Interpolate:
        if corr:
            kw["crkState"] = CRKState(A, B)  # only A and B are read
        out = warpOperation(q, pr, dom, referenceValues=fr, **kw)
        if not valid:
            return out, np.zeros(tuple(out.shape))
        return out, interpolateReference(q, dom, pr, fr, r, volumes=V, crk=crk)
    out = warpOperation(q, pr, dom, queryValues=fq, referenceValues=fr, **kw)
    if not valid:
        return out, np.zeros(tuple(out.shape))
    args = (q, dom, pr, fq, fr, r)
    if op == WarpOperation.Gradient:
        ref = gradientReference(*args, volumes=V, crk=crk, omegas=None if Om is None else Om[1],
                                renorm=Lr)
    elif op == WarpOperation.Divergence:
        ref = divergenceReference(*args, volumes=V, crk=crk, omegas=Om, renorm=Lr)
    elif op == WarpOperation.Curl:
        ref = curlReference(*args, volumes=V, crk=crk, omegas=Om, renorm=Lr)
    else:
        naive = LaplacianScheme(lap) == LaplacianScheme.Naive
        ref = laplacianReference(*args, volumes=V, crk=None if naive else crk, omegas=Om,
                                 renorm=None if naive else Lr)
    return out, ref


def _checkAllOperators(d, device, mode, corr, seed=11, distinct=False):
    dom, q, f = _case(d, device, seed)
    n = q.positions.shape[0]
    r = fr = None
    nr = n
    if distinct:
        nr = n + 1
        r = cloud(nr, d, F64, device, seed=940 + seed + d, kinds=_kinds(nr, shift=1),
                  hMean=HMEAN[d])
        g = torch.Generator().manual_seed(941 + seed + d)
        fr = torch.randn(nr, d, generator=g, dtype=F64).to(device)
    vol, omr, A, B, gA, gB, L = randomCorrectionTensors(n, nr, d, device, seed=920 + seed + d)
    omq = omr if not distinct else randomCorrectionTensors(nr, n, d, device, seed=930)[1]
    c = (vol, (omq, omr), A, B, gA, gB, L)
    key = mode if mode in MODES else 0
    adj = neighbourStructure(TRAVERSALS[key % 3], q, dom, r)
    scheme = GRAD_SCHEMES[key % 4]
    lap = LAP_SCHEMES[(key + 1) % 4]
    qm = _queryMask(mode, q)
    for op in OPS:
        out, ref = _evaluate(op, q, dom, f, adj, mode, scheme, lap, corr, c, r, fr)
        _assertClose(out, ref)
        # failing queries: exactly zero rows
        assert torch.all(out[torch.as_tensor(~qm, device=out.device)] == 0), op.name


def test_invalid_mode_rejected_by_properties():
    with pytest.raises(ValueError, match="operationMode"):
        OperationProperties(W2, operationMode=INVALID)


@pytest.mark.parametrize("corr", [False, True], ids=["plain", "corrected"])
@pytest.mark.parametrize("mode", MODES + [INVALID])
def test_all_operators_all_modes_2d(device, mode, corr):
    """Every mode on mixed kinds through all seven operators (schemes and traversals cycle with
    the mode so that each appears), plain and with every accepted correction."""
    _checkAllOperators(2, device, mode, corr)


@pytest.mark.parametrize("corr", [False, True], ids=["plain", "corrected"])
@pytest.mark.parametrize("mode", MODES + [INVALID])
def test_all_operators_all_modes_distinct_reference_2d(device, mode, corr):
    """The same with a distinct reference set whose kinds are shifted against the queries'."""
    _checkAllOperators(2, device, mode, corr, distinct=True)


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("mode", [0, 3, 9, 13, INVALID])
def test_all_operators_modes_1d_3d(device, d, mode):
    _checkAllOperators(d, device, mode, corr=mode in (3, 13))


def test_mixed_modes_are_distinct(device):
    """The configuration separates the modes: the 15 Gradient outputs differ pairwise except
    where the table makes them coincide, so a mode dispatched to the wrong branch fails."""
    dom, q, f = _case(2, device)
    outs = {}
    for mode in MODES:
        pr = _props(WarpOperation.Gradient, mode)
        outs[mode] = tuple(np.round(_np(warpOperation(q, pr, dom, queryValues=f)).ravel(), 9))
    assert len(set(outs.values())) == len(MODES)


# --- correction chains built under a mode ------------------------------------------------


def crkFactorsReference(query, domain, kernel, mode):
    """(V, A, B, gradA, gradB) of the CRK construction (reference set = query set) in float64
    NumPy: Gather volume on the set (j in the query role), Scatter moments with spatial
    derivatives, the limiter (count of admitted pairs with W > 0, det(m2) / h^2d < 1e-14),
    plus the implementation's Schur-complement test, then M = inv(m2) and the closed-form
    terms with gradB[k, c] = d_k B_c."""
    lo, hi = _np(domain.min), _np(domain.max)
    per = [bool(p) for p in domain.periodic.cpu().tolist()]
    d = query.positions.shape[1]
    kinds = query.kinds.cpu().numpy()
    qm, rm = masks(mode, kinds, kinds)
    h = _np(query.supports)
    x = pairVectors(_np(query.positions), _np(query.positions), lo, hi, per)
    Wg = pairKernel(kernel, d, x, h, h, int(SupportScheme.Gather))
    s = np.where(qm, (Wg * rm[None, :]).sum(axis=1), 0.0)
    V = np.zeros_like(s)
    V[s != 0.0] = 1.0 / s[s != 0.0]
    W = pairKernel(kernel, d, x, h, h, int(SupportScheme.Scatter))
    G = pairKernelGradient(kernel, d, x, h, h, int(SupportScheme.Scatter))
    w = qm[:, None] * (V * rm)[None, :]
    I = np.eye(d)
    m0 = np.einsum("ij,ij->i", w, W)
    m1 = np.einsum("ij,ij,ija->ia", w, W, x)
    m2 = np.einsum("ij,ij,ija,ijb->iab", w, W, x, x)
    dm0 = np.einsum("ij,ijg->ig", w, G)                                        # [k]
    dm1 = np.einsum("ij,ija,ijg->iga", w, x, G) + m0[:, None, None] * I        # [k, a]
    dm2 = (np.einsum("ij,ija,ijb,ijg->igab", w, x, x, G)
           + np.einsum("ia,bg->igab", m1, I) + np.einsum("ag,ib->igab", I, m1))  # [k, a, b]
    count = ((W > 0) & rm[None, :] & qm[:, None]).sum(axis=1)
    lim = (count < 2) | (np.abs(np.linalg.det(m2)) / h ** (2 * d) < 1e-14)
    # Schur-complement limiter of the implementation (documented deviation in crk.py): rows whose full moment matrix is singular although m2 is not (e.g.
    # a query whose own kind is masked, seeing two in-support neighbours in 2D) are limited
    # too; there A = 1 / s is pure rounding.
    m2s = np.where(lim[:, None, None], I, m2)
    m1s = np.where(lim[:, None], 0.0, m1)
    schur = np.where(lim, 1.0, m0) - np.einsum("ia,iab,ib->i", m1s, np.linalg.inv(m2s), m1s)
    lim = lim | (schur <= np.sqrt(np.finfo(np.float64).eps) * np.abs(np.where(lim, 1.0, m0)))
    m0 = np.where(lim, 1.0, m0)
    m1 = np.where(lim[:, None], 0.0, m1)
    m2 = np.where(lim[:, None, None], I, m2)
    dm0 = np.where(lim[:, None], 0.0, dm0)
    dm1 = np.where(lim[:, None, None], 0.0, dm1)
    dm2 = np.where(lim[:, None, None, None], 0.0, dm2)
    M = np.linalg.inv(m2)
    Mm1 = np.einsum("iab,ib->ia", M, m1)
    A = 1.0 / (m0 - np.einsum("ia,ia->i", m1, Mm1))
    B = -Mm1
    gA = -(A * A)[:, None] * (dm0 - 2.0 * np.einsum("ia,ika->ik", Mm1, dm1)
                              + np.einsum("il,iklm,im->ik", Mm1, dm2, Mm1))
    gB = (-np.einsum("icj,ikj->ikc", M, dm1)
          + np.einsum("icl,iklm,im->ikc", M, dm2, Mm1))
    return V, A, B, gA, gB


CHAIN_CASES = [(2, m) for m in MODES] + [(1, 1), (1, 9), (3, 4), (3, 13)]
CHAIN_IDS = [f"{d}d-mode{m}" for d, m in CHAIN_CASES]


@pytest.mark.parametrize("d,mode", CHAIN_CASES, ids=CHAIN_IDS)
def test_crk_chain_under_mode(device, d, mode):
    """CRK factors under a mode, fed (with their volumes) into Gradient under the same mode,
    and into renormalization matrices (then Gradient with CRK and L) under the same mode."""
    dom, q, f = _case(d, device, seed=3, dense=True)
    adj = neighbourStructure("csr", q, dom)
    V, _, crk = computeCRKFactors(q, dom, W2, operationMode=mode, adjacency=adj)
    Vr, A, B, gA, gB = crkFactorsReference(q, dom, W2, mode)
    _assertClose(V, Vr, rtol=1e-10, atol=1e-10)
    for got, want in ((crk.A, A), (crk.B, B), (crk.gradA, gA), (crk.gradB, gB)):
        _assertClose(got, want, rtol=1e-8, atol=1e-8)
    for scheme in (GradientScheme.Naive, GradientScheme.Difference):
        pr = _props(WarpOperation.Gradient, mode, gradientMode=scheme,
                    supportMode=SupportScheme.Scatter)
        out = warpOperation(q, pr, dom, queryValues=f, referenceVolumes=V, crkState=crk,
                            adjacency=adj)
        crkRef = tuple(map(_t, (A, B, gA, gB)))
        ref = gradientReference(q, dom, pr, f, volumes=_t(Vr), crk=crkRef)
        _assertClose(out, ref, rtol=1e-8, atol=1e-8)
    # CRK -> renormalization (built with the CRK state and volumes) -> Gradient, same mode
    C, _, state = computeRenormalizationMatrices(q, pr, dom, referenceVolumes=V, adjacency=adj,
                                                 crkState=crk)
    Cr, nr = covarianceReference(q, dom, pr, volumes=_t(Vr), crk=crkRef)
    Cr, Lr, _ = renormalizationReference(Cr, nr)
    _assertClose(C, Cr, rtol=1e-8, atol=1e-8)
    _assertClose(state.renormalizationMatrices, Lr, rtol=1e-7, atol=1e-8)
    out = warpOperation(q, pr, dom, queryValues=f, referenceVolumes=V, crkState=crk,
                        renormalizationState=state, adjacency=adj)
    ref = gradientReference(q, dom, pr, f, volumes=_t(Vr), crk=crkRef, renorm=_t(Lr))
    _assertClose(out, ref, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("d,mode", CHAIN_CASES, ids=CHAIN_IDS)
def test_renormalization_chain_under_mode(device, d, mode):
    """Renormalization matrices built under a mode, fed into Gradient under the same mode."""
    dom, q, f = _case(d, device, seed=5, dense=True)
    adj = neighbourStructure("grid", q, dom)
    pr = _props(WarpOperation.Gradient, mode, gradientMode=GradientScheme.Difference)
    C, _, state = computeRenormalizationMatrices(q, pr, dom, adjacency=adj)
    Cr, nr = covarianceReference(q, dom, pr)
    Cr, Lr, _ = renormalizationReference(Cr, nr)
    _assertClose(C, Cr, rtol=1e-11)
    _assertClose(state.renormalizationMatrices, Lr, rtol=1e-9)
    out = warpOperation(q, pr, dom, queryValues=f, renormalizationState=state, adjacency=adj)
    ref = gradientReference(q, dom, pr, f, renorm=_t(Lr))
    _assertClose(out, ref, rtol=1e-9)


@pytest.mark.parametrize("d,mode", CHAIN_CASES, ids=CHAIN_IDS)
def test_omega_chain_under_mode(device, d, mode):
    """computeOmega under a mode (masked query -> 1), fed as grad-h into Divergence and
    Laplacian under the same mode."""
    dom, q, f = _case(d, device, seed=7, dense=True)
    adj = neighbourStructure("csr", q, dom)
    pr = _props(WarpOperation.Divergence, mode)
    om = computeOmega(q, pr, dom, adjacency=adj)
    omr = omegaReference(q, dom, pr)
    _assertClose(om, omr, rtol=1e-11)
    qm = _queryMask(mode, q)
    assert torch.all(om[torch.as_tensor(~qm, device=om.device)] == 1.0)
    out = warpOperation(q, pr, dom, queryValues=f, gradHState=om, adjacency=adj)
    omr_t = _t(omr)
    _assertClose(out, divergenceReference(q, dom, pr, f, omegas=(omr_t, omr_t)))
    pl = _props(WarpOperation.Laplacian, mode)
    out = warpOperation(q, pl, dom, queryValues=f, gradHState=om, adjacency=adj)
    _assertClose(out, laplacianReference(q, dom, pl, f, omegas=(omr_t, omr_t)))


# --- reverse mode --------------------------------------------------------------------------


def _reverseCase(device):
    dom = makeDomain(2, F64, device)
    q = cloud(8, 2, F64, device, seed=950, kinds=_kinds(8), hMean=1.0)
    r = cloud(9, 2, F64, device, seed=951, kinds=_kinds(9, shift=1), hMean=1.0)
    g = torch.Generator().manual_seed(952)
    fq = torch.randn(8, 2, generator=g, dtype=F64).to(device)
    fr = torch.randn(9, 2, generator=g, dtype=F64).to(device)
    vol, omr, A, B, gA, gB, L = randomCorrectionTensors(8, 9, 2, device, seed=953)
    omq = randomCorrectionTensors(9, 8, 2, device, seed=954)[1]
    return dom, q, r, fq, fr, vol, omq, omr, A, B, gA, gB, L


QUERY_INPUTS = ("qPos", "qSup", "qRho", "fq", "A", "B", "gA", "gB", "omq", "L")
REF_INPUTS = ("rPos", "rSup", "rMas", "rRho", "fr", "vol", "omr")


def _reverseCall(op, mode, t, dom, kinds):
    qk, rk = kinds
    q = ParticleState(t["qPos"], t["qSup"], t["qMas"], qk, t["qRho"])
    r = ParticleState(t["rPos"], t["rSup"], t["rMas"], rk, t["rRho"])
    pr = _props(op, mode, gradientMode=GradientScheme.Difference,
                laplacianMode=LaplacianScheme.Brookshaw)
    kw = dict(referenceParticles=r, referenceVolumes=t["vol"],
              crkState=CRKState(t["A"], t["B"], t["gA"], t["gB"]),
              gradHState=(t["omq"], t["omr"]), renormalizationState=t["L"])
    if op == WarpOperation.Density:
        return warpOperation(q, pr, dom, referenceParticles=r)
    if op == WarpOperation.Interpolate:
        kw["crkState"] = CRKState(t["A"], t["B"])
        return warpOperation(q, pr, dom, referenceValues=t["fr"], **kw)
    if op == WarpOperation.Covariance:
        return warpOperation(q, pr, dom, **kw)
    return warpOperation(q, pr, dom, queryValues=t["fq"], referenceValues=t["fr"], **kw)


@pytest.mark.parametrize("mode", [1, 7, 13])
def test_reverse_mode_masking(device, mode):
    """A masked query row has exactly zero gradient w.r.t. everything, masked queries get
    exactly zero adjoint on their own inputs, and a masked reference gets exactly zero
    adjoint on all of its inputs (distinct query and reference sets)."""
    dom, q, r, fq, fr, vol, omq, omr, A, B, gA, gB, L = _reverseCase(device)
    base = dict(qPos=q.positions, qSup=q.supports, qMas=q.masses, qRho=q.densities,
                rPos=r.positions, rSup=r.supports, rMas=r.masses, rRho=r.densities, fq=fq,
                fr=fr, vol=vol, omq=omq, omr=omr, A=A, B=B, gA=gA, gB=gB, L=L)
    qm, rm = masks(mode, q.kinds.cpu().numpy(), r.kinds.cpu().numpy())
    assert qm.any() and (~qm).any() and rm.any() and (~rm).any()
    qmT, rmT = torch.as_tensor(qm, device=device), torch.as_tensor(rm, device=device)
    for op in OPS:
        t = {k: v.detach().clone().requires_grad_() for k, v in base.items()}
        out = _reverseCall(op, mode, t, dom, (q.kinds, r.kinds))
        names = list(t)
        g = torch.Generator().manual_seed(960)
        w = torch.randn(out.shape, generator=g, dtype=F64).to(device)
        grads = torch.autograd.grad((out * w).sum(), [t[k] for k in names], allow_unused=True,
                                    retain_graph=True)
        grads = dict(zip(names, grads))
        for k in QUERY_INPUTS:
            if grads[k] is not None:
                assert torch.all(grads[k][~qmT] == 0), (op.name, k)
        for k in REF_INPUTS:
            if grads[k] is not None:
                assert torch.all(grads[k][~rmT] == 0), (op.name, k)
        # not vacuous: admitted references move the output
        assert grads["rPos"] is not None and torch.any(grads["rPos"][rmT] != 0), op.name
        # the masked rows alone: exactly zero adjoint everywhere
        masked = (out * w)[~qmT].sum()
        grads = torch.autograd.grad(masked, [t[k] for k in names], allow_unused=True)
        for k, gk in zip(names, grads):
            if gk is not None:
                assert torch.all(gk == 0), (op.name, k)


@pytest.mark.parametrize("role", ["query", "reference"])
def test_saved_kinds_inplace_change_detected(device, role):
    """Kinds are saved for backward: changing them in place between forward and backward
    trips torch's version check for every operator."""
    dom, q, r, fq, fr, vol, omq, omr, A, B, gA, gB, L = _reverseCase(device)
    for op in OPS:
        qk, rk = q.kinds.clone(), r.kinds.clone()
        t = dict(qPos=q.positions.detach().clone().requires_grad_(), qSup=q.supports,
                 qMas=q.masses, qRho=q.densities, rPos=r.positions, rSup=r.supports,
                 rMas=r.masses, rRho=r.densities, fq=fq, fr=fr, vol=vol, omq=omq, omr=omr,
                 A=A, B=B, gA=gA, gB=gB, L=L)
        _reverseCall(op, 9, t, dom, (qk, rk)).sum().backward()  # control: no change, fine
        out = _reverseCall(op, 9, t, dom, (qk, rk))
        (qk if role == "query" else rk)[0] = 2
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@pytest.mark.parametrize("mode", [1, 4])
def test_reverse_mode_masking_correction_builders(device, mode):
    """Under a same-kind mode every particle of another kind is masked in both roles: the CRK
    factors, renormalization matrices and Omega (and the Gradient using them) give its
    positions, supports, masses and densities exactly zero adjoint; masked rows are exactly
    the identity correction (A = 1, B = 0, L = I, Omega = 1) with zero adjoint."""
    dom, q0, f = _case(2, device, seed=3, dense=True)
    kinds = q0.kinds.cpu().numpy()
    qm, rm = masks(mode, kinds, kinds)
    out_ = ~(qm | rm)
    assert out_.any() and qm.any()
    outT = torch.as_tensor(out_, device=device)
    inputs = [t.detach().clone().requires_grad_() for t in
              (q0.positions, q0.supports, q0.masses, q0.densities)]
    q = ParticleState(inputs[0], inputs[1], inputs[2], q0.kinds, inputs[3])
    adj = neighbourStructure("csr", q0, dom)
    V, rho, crk = computeCRKFactors(q, dom, W2, operationMode=mode, adjacency=adj)
    pr = _props(WarpOperation.Gradient, mode, supportMode=SupportScheme.Scatter)
    state = computeRenormalizationMatrices(q, pr, dom, referenceVolumes=V, adjacency=adj,
                                           crkState=crk, returnEigVals=False)
    om = computeOmega(q, pr, dom, adjacency=adj)
    grad = warpOperation(q, pr, dom, queryValues=f, referenceVolumes=V, crkState=crk,
                         renormalizationState=state, gradHState=om, adjacency=adj)
    L = state.renormalizationMatrices
    eye = torch.eye(2, dtype=F64, device=device)
    assert torch.all(crk.A[~torch.as_tensor(qm, device=device)] == 1)
    assert torch.all(L[outT] == eye) and torch.all(om[outT] == 1)
    g = torch.Generator().manual_seed(970)
    outputs = (V, rho, crk.A, crk.B, crk.gradA, crk.gradB, L, om, grad)
    total = sum((o * torch.randn(o.shape, generator=g, dtype=F64).to(device)).sum()
                for o in outputs)
    grads = torch.autograd.grad(total, inputs, allow_unused=True, retain_graph=True)
    assert grads[0] is not None and torch.any(grads[0] != 0)
    for gk in grads:
        if gk is not None:
            assert torch.all(gk[outT] == 0)
    # the masked rows alone
    masked = sum(o[outT].sum() for o in (crk.A, crk.B, crk.gradA, crk.gradB, L, om, grad))
    for gk in torch.autograd.grad(masked, inputs, allow_unused=True):
        if gk is not None:
            assert torch.all(gk == 0)


# --------------------------------------------------------------------------------------
# forward mode under every interaction mode: explicit JVPs, dual tensors,
# reverse over forward, the Density HVP and the saved kinds of the JVP launches
# --------------------------------------------------------------------------------------

# operator -> (properties, corrections, field shape); every tangent channel of the scope
# matrix is live at once (positions, supports, densities, reference masses, values and the
# correction tangents)
FWD_CASES = {
    WarpOperation.Density: (dict(supportMode=SupportScheme.MeanSymmetric), "", None),
    WarpOperation.Interpolate: (dict(supportMode=SupportScheme.KernelMeanSymmetric), "", (2,)),
    WarpOperation.Gradient: (dict(gradientMode=GradientScheme.Symmetric), "crk+renorm", ()),
    WarpOperation.Divergence: (dict(gradientMode=GradientScheme.Difference,
                                    supportMode=SupportScheme.Scatter), "crk", (2,)),
    WarpOperation.Curl: (dict(gradientMode=GradientScheme.Summation), "renorm", (2,)),
    WarpOperation.Laplacian: (dict(laplacianMode=LaplacianScheme.Brookshaw,
                                   gradientMode=GradientScheme.Naive), "crk+renorm", (2,)),
    WarpOperation.Covariance: (dict(supportMode=SupportScheme.Gather), "volumes", None),
}


class _FwdCase:
    """One mixed-kind aliased 2D call of `op` under `mode`, its primal as a function of the
    named float64 inputs (the J·v oracle: reverse mode of the masked primal, itself checked
    against the references above) and its explicit / dual JVPs."""

    def __init__(self, op, mode, device, seed):
        from sph_reference import marginCloud

        kw, corr, shape = FWD_CASES[op]
        self.op, self.corr, self.shape = op, corr, shape
        self.dom = makeDomain(2, F64, device)
        n = 12
        self.q = marginCloud(n, 2, F64, device, seed=seed, domain=self.dom, kinds=_kinds(n),
                             hMean=0.9)
        self.adj = neighbourStructure("csr", self.q, self.dom)
        self.pr = _props(op, mode, **kw)
        vol, _, A, B, gA, gB, L = randomCorrectionTensors(n, n, 2, device, seed + 1)
        g = torch.Generator().manual_seed(seed + 2)
        P = dict(pos=self.q.positions, h=self.q.supports, m=self.q.masses)
        if op != WarpOperation.Density:
            P["rho"] = self.q.densities
        if shape is not None:
            P["f"] = torch.randn((n,) + shape, generator=g, dtype=F64).to(device)
        if "volumes" in corr:
            P["vol"] = vol
        if "crk" in corr:
            P.update(A=A, B=B, gA=gA, gB=gB)
        if "renorm" in corr:
            P["L"] = L
        self.P, self.names = P, list(P)
        scale = {"h": 0.05, "rho": 0.1}
        self.T = {k: (scale.get(k, 1.0) * torch.randn(v.shape, generator=g, dtype=F64)).to(
            device) for k, v in P.items()}

    def _call(self, P):
        kw = {}
        if "f" in P:
            kw["queryValues"] = P["f"]
        if "vol" in P:
            kw["referenceVolumes"] = P["vol"]
        if "A" in P:
            kw["crkState"] = CRKState(P["A"], P["B"], P["gA"], P["gB"])
        if "L" in P:
            kw["renormalizationState"] = P["L"]
        q = ParticleState(P["pos"], P["h"], P["m"], self.q.kinds, P.get("rho"))
        return q, kw

    def fn(self, *xs):
        q, kw = self._call(dict(zip(self.names, xs)))
        out = warpOperation(q, self.pr, self.dom, adjacency=self.adj, **kw)
        return out[0] if isinstance(out, tuple) else out

    def jvp(self, P=None, T=None):
        from warpSPHCore import CRKTangentState, ParticleTangentState
        from warpSPHCore.operations import warpOperationJVP

        P = self.P if P is None else P
        T = self.T if T is None else T
        q, kw = self._call(P)
        qt = ParticleTangentState(T["pos"], T["h"], None, T.get("rho"))
        rt = ParticleTangentState(T["pos"], T["h"], T["m"], T.get("rho"))
        tk = dict(queryTangentState=qt, referenceTangentState=rt)
        if "f" in T:
            tk["tangentQueryValues"] = T["f"]
        if "vol" in T:
            tk["tangentReferenceVolumes"] = T["vol"]
        if "A" in T:
            tk["crkTangentState"] = CRKTangentState(T["A"], T["B"], T["gA"], T["gB"])
        if "L" in T:
            tk["renormalizationTangentState"] = T["L"]
        return warpOperationJVP(q, self.pr, self.dom, adjacency=self.adj, **kw, **tk)


@pytest.mark.parametrize("mode", MODES + [INVALID])
def test_forward_mode_all_operators_all_modes(device, mode):
    """All seven operators, every mode (and an invalid one): the explicit JVP equals J·v of the
    masked primal (rtol 1e-8), the dual-tensor route equals it (1e-12), masked query rows have
    exactly zero tangent, and the check is not vacuous (a mode that admits a query gives a
    nonzero tangent for most operators)."""
    from jvp_helpers import assertClose, dualJVP, jacobianJVP

    nonzero = 0
    for k, op in enumerate(OPS):
        c = _FwdCase(op, mode, device, seed=300 + 7 * k)
        inputs = [c.P[n] for n in c.names]
        tangents = [c.T[n] for n in c.names]
        out = c.jvp()
        assertClose(out, jacobianJVP(c.fn, inputs, tangents), what=f"{op.name} mode {mode}")
        assertClose(dualJVP(c.fn, inputs, tangents), out, rtol=1e-12, atol=1e-13,
                    what=f"{op.name} mode {mode}: dual route")
        qMask = torch.as_tensor(_queryMask(mode, c.q), device=out.device)
        assert torch.equal(out[~qMask], torch.zeros_like(out[~qMask])), op.name
        nonzero += int(float(out.abs().max()) > 0.0)
    if bool(torch.as_tensor(_queryMask(mode, c.q)).any()):
        assert nonzero >= 4, (mode, nonzero)
    else:
        assert nonzero == 0


@pytest.mark.parametrize("mode", [3, 8, 13])
def test_reverse_over_forward_under_mode(device, mode):
    """gradcheck of JVP outputs under a mixed mode: Gradient (CRK + renormalization) and the
    Laplacian w.r.t. positions, values and the position tangent (Poly6: smooth at the self
    pair)."""
    from sph_reference import GRADCHECK

    for op in (WarpOperation.Gradient, WarpOperation.Laplacian):
        c = _FwdCase(op, mode, device, seed=40 + mode)
        c.pr = dataclasses.replace(c.pr, kernel=KernelFunctions.Poly6)

        def fn(x, f, v, c=c):
            return c.jvp(dict(c.P, pos=x, f=f), dict(c.T, pos=v))

        leavesIn = [t.detach().clone().requires_grad_() for t in (c.P["pos"], c.P["f"],
                                                                   c.T["pos"])]
        assert torch.autograd.gradcheck(fn, leavesIn, **GRADCHECK), op.name


@pytest.mark.parametrize("mode", MODES)
def test_density_hvp_all_modes(mode):
    """The Density position HVP under every mode on a dense mixed-kind cloud (every mode
    admits cross-kind pairs): against torch's double backward of the masked float64
    reference (shared, asymmetric and zero reference tangents); masked query rows are 0."""
    from test_forward_mode_density_hvp import _checkShared

    dom, q, _ = _case(2, "cpu", seed=60, dense=True)
    pr = _props(WarpOperation.Density, mode, supportMode=SupportScheme.KernelMeanSymmetric)
    hv = _checkShared(q, pr, dom, seed=61 + mode, fd=False)
    qm = _queryMask(mode, q)
    assert torch.all(hv[torch.as_tensor(~qm)] == 0)


@pytest.mark.parametrize("route", ["explicit", "dual", "hvp"])
def test_forward_mode_saved_kinds_inplace_change_detected(device, route):
    """The JVP and HVP launches save kinds: changing them in place before the backward of a
    JVP output (reverse over forward) trips torch's version check."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import ParticleTangentState
    from warpSPHCore.operations import warpOperationHVP, warpOperationJVP

    dom, q, f = _case(2, device)
    adj = neighbourStructure("csr", q, dom)
    kinds = q.kinds.clone()
    x = q.positions.detach().clone().requires_grad_(True)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=F64).to(device)
    p = ParticleState(x, q.supports, q.masses, kinds, q.densities)
    pr = _props(WarpOperation.Gradient, 13)
    if route == "explicit":
        out = warpOperationJVP(p, pr, dom, queryValues=f, adjacency=adj,
                               queryTangentState=ParticleTangentState(positions=v))
    elif route == "dual":
        with fwAD.dual_level():
            pd = ParticleState(fwAD.make_dual(x, v), q.supports, q.masses, kinds, q.densities)
            out = fwAD.unpack_dual(warpOperation(pd, pr, dom, queryValues=f,
                                                 adjacency=adj)).tangent
    else:
        out = warpOperationHVP(p, _props(WarpOperation.Density, 13), dom, v, adjacency=adj)
    assert out.requires_grad
    kinds.add_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("mode", MODES)
def test_builder_jvps_under_mode(device, mode):
    """computeCRKFactorsJVP and computeRenormalizationMatricesJVP under every mode: equal to
    J·v of the builders built under the same mode (limited / fallback rows: zero on both
    sides)."""
    from jvp_helpers import assertClose, jacobianJVP

    from warpSPHCore import ParticleTangentState
    from warpSPHCore.corrections import (
        computeCRKFactorsJVP,
        computeRenormalizationMatricesJVP,
    )

    dom, q, _ = _case(2, device, seed=7, dense=True)
    adj = neighbourStructure("csr", q, dom)
    v = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(8),
                    dtype=F64).to(device)
    qt = ParticleTangentState(positions=v)

    def state(x):
        return ParticleState(x, q.supports, q.masses, q.kinds, q.densities)

    def crkFlat(x):
        V, _, s = computeCRKFactors(state(x), dom, W2, operationMode=mode, adjacency=adj)
        return torch.cat([V, s.A, s.B.reshape(-1), s.gradA.reshape(-1), s.gradB.reshape(-1)])

    V, dV, _, dcrk = computeCRKFactorsJVP(q, dom, W2, qt, operationMode=mode, adjacency=adj)
    got = torch.cat([dV, dcrk.A, dcrk.B.reshape(-1), dcrk.gradA.reshape(-1),
                     dcrk.gradB.reshape(-1)])
    assertClose(got, jacobianJVP(crkFlat, [q.positions], [v]), what=f"CRK mode {mode}")

    pr = _props(WarpOperation.Gradient, mode)

    def L(x):
        return computeRenormalizationMatrices(state(x), pr, dom, adjacency=adj,
                                              returnEigVals=False).renormalizationMatrices

    _, dL = computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj,
                                              returnEigVals=False)
    assertClose(dL.renormalizationMatrices, jacobianJVP(L, [q.positions], [v]),
                what=f"renormalization mode {mode}")
