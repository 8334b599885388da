"""The correction acceptance matrix (the corrections each operator applies) for every operator.

"ignored" corrections are accepted and give results bit-identical (`torch.equal`) to the call
without them; applied corrections change the result and match the independent float64
references of `sph_reference`. Also: CRK without gradA/gradB is accepted by Interpolate (and
by Laplacian Naive, which never reads the CRK state) and raises ValueError for the operators
using the corrected gradient; Laplacian Naive ignores CRK and renormalization but applies
volumes and grad-h; Symmetric schemes ignore volumes (and consistentDivergence); grad-h
divides f_j only in Gradient and f_i, f_j in Divergence, Curl, Laplacian; CRK and
renormalization combine in the order CRK, then L.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    cloud,
    covarianceReference,
    curlReference,
    densityReference,
    divergenceReference,
    gradientReference,
    interpolateReference,
    laplacianReference,
    makeDomain,
    neighbourStructure,
    pairKernel,
    pairKernelGradient,
    pairVectors,
    props,
    randomCorrectionTensors,
)
from test_momentum import _field as momentumField
from test_momentum import momentumReference

from warpSPHCore import CRKState, GradientScheme, LaplacianScheme, WarpOperation
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import OPERATORS

F64 = torch.float64
N = 12
DENSITY, INTERP, GRAD = WarpOperation.Density, WarpOperation.Interpolate, WarpOperation.Gradient
DIV, CURL, LAP, COV = (WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian,
                       WarpOperation.Covariance)
MOM = WarpOperation.Momentum
CORRECTIONS = ("volumes", "crk", "gradH", "renorm")

# the corrections each operator applies (the others are ignored)
APPLIED = {
    DENSITY: (),
    INTERP: ("volumes", "crk"),
    GRAD: ("volumes", "crk", "gradH", "renorm"),
    DIV: ("volumes", "crk", "gradH", "renorm"),
    CURL: ("volumes", "crk", "gradH", "renorm"),
    LAP: ("volumes", "crk", "gradH", "renorm"),  # non-Naive schemes
    COV: ("volumes", "crk", "renorm"),
    MOM: (),  # every input is a field column; the plain kernel gradient
}
LAP_NAIVE_APPLIED = ("volumes", "gradH")


def _np(t):
    return t.detach().cpu().to(F64).numpy()


@pytest.fixture
def case(device):
    dom = makeDomain(2, F64, device)
    q = cloud(N, 2, F64, device, seed=1200, hMean=0.9)
    g = torch.Generator().manual_seed(1201)
    f = torch.randn(N, 2, generator=g, dtype=F64).to(device)
    vol, omr, A, B, gA, gB, L = randomCorrectionTensors(N, N, 2, device, seed=1202)
    omq = randomCorrectionTensors(N, N, 2, device, seed=1203)[1]
    adj = neighbourStructure("csr", q, dom)
    return dict(dom=dom, q=q, f=f, fm=momentumField(N, 2, 1204).to(device), vol=vol, omq=omq, omr=omr, crk=(A, B, gA, gB), L=L,
                adj=adj)


def _kwargs(c, corr, crkGrads=True):
    kw = {}
    if "volumes" in corr:
        kw["referenceVolumes"] = c["vol"]
    if "crk" in corr:
        A, B, gA, gB = c["crk"]
        kw["crkState"] = CRKState(A, B, gA, gB) if crkGrads else CRKState(A, B)
    if "gradH" in corr:
        kw["gradHState"] = (c["omq"], c["omr"])
    if "renorm" in corr:
        kw["renormalizationState"] = c["L"]
    return kw


def _pr(op, scheme=GradientScheme.Naive, lap=LaplacianScheme.Brookshaw):
    return props(op, gradientMode=scheme, laplacianMode=lap)


def _call(c, op, corr=(), scheme=GradientScheme.Naive, lap=LaplacianScheme.Brookshaw,
          crkGrads=True, **extra):
    pr = _pr(op, scheme, lap)
    kw = _kwargs(c, corr, crkGrads)
    kw.update(extra)
    if op == DENSITY:
        return warpOperation(c["q"], pr, c["dom"], adjacency=c["adj"], **kw)
    if op == COV:
        return warpOperation(c["q"], pr, c["dom"], adjacency=c["adj"], **kw)
    if op == INTERP:
        return warpOperation(c["q"], pr, c["dom"], referenceValues=c["f"], adjacency=c["adj"],
                             **kw)
    if op == MOM:
        return warpOperation(c["q"], pr, c["dom"], queryValues=c["fm"], adjacency=c["adj"],
                             **kw)
    return warpOperation(c["q"], pr, c["dom"], queryValues=c["f"], adjacency=c["adj"], **kw)


def _reference(c, op, corr=(), scheme=GradientScheme.Naive, lap=LaplacianScheme.Brookshaw,
               consistent=False):
    """The float64 reference with exactly the corrections `corr` applied."""
    pr = _pr(op, scheme, lap)
    q, dom, f = c["q"], c["dom"], c["f"]
    vol = c["vol"] if "volumes" in corr else None
    crk = c["crk"] if "crk" in corr else None
    L = c["L"] if "renorm" in corr else None
    om = (c["omq"], c["omr"]) if "gradH" in corr else None
    if op == DENSITY:
        return densityReference(q, dom, pr)
    if op == INTERP:
        return interpolateReference(q, dom, pr, f, volumes=vol, crk=crk)
    if op == COV:
        return covarianceReference(q, dom, pr, volumes=vol, crk=crk, renorm=L)[0]
    if op == MOM:
        return momentumReference(q, dom, pr, c["fm"])
    if op == GRAD:
        return gradientReference(q, dom, pr, f, volumes=vol, crk=crk,
                                 omegas=None if om is None else om[1], renorm=L)
    if op == DIV:
        return divergenceReference(q, dom, pr, f, volumes=vol, crk=crk, omegas=om, renorm=L,
                                   consistent=consistent)
    if op == CURL:
        return curlReference(q, dom, pr, f, volumes=vol, crk=crk, omegas=om, renorm=L)
    return laplacianReference(q, dom, pr, f, volumes=vol, crk=crk, omegas=om, renorm=L)


def _close(out, ref, rtol=1e-11):
    ref = np.asarray(ref)
    assert tuple(out.shape) == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(_np(out), ref, rtol=rtol, atol=1e-12 * scale)


def _changed(out, base):
    """The correction changed the result well beyond rounding."""
    diff = (out - base).abs().max().item()
    assert diff > 1e-6 * max(1.0, base.abs().max().item())


def _identical(out, base, what):
    assert out.dtype == base.dtype and out.shape == base.shape, what
    assert torch.equal(out, base), f"{what}: an ignored correction changed the result"


def test_registry_declares_the_acceptance_matrix():
    """The registry's acceptance rows, which validation, the forward-mode scope and the doc
    tables read, are this specification's: the applied corrections per operator, the Naive
    Laplacian's row and the Symmetric schemes' volumes."""
    assert set(OPERATORS) == set(APPLIED)
    for op, entry in OPERATORS.items():
        assert entry.applied(_pr(op)) == APPLIED[op], op.name
        assert entry.ignored(_pr(op)) == tuple(c for c in CORRECTIONS if c not in APPLIED[op])
    naive = _pr(LAP, lap=LaplacianScheme.Naive)
    assert OPERATORS[LAP].applied(naive) == LAP_NAIVE_APPLIED
    assert OPERATORS[LAP].dropped(naive) == ("crk", "renorm")
    for op in (GRAD, DIV, CURL, LAP):
        sym = _pr(op, GradientScheme.Symmetric)
        assert OPERATORS[op].applied(sym) == tuple(c for c in APPLIED[op] if c != "volumes")
        assert OPERATORS[op].dropped(sym) == ()  # handed to the kernel, which ignores them


@pytest.mark.parametrize("op", list(OPERATORS), ids=lambda o: o.name)
def test_acceptance_matrix(case, op):
    """Row `op` of the table: each correction alone is applied (changes the result and matches
    the reference) or ignored (bit-identical); all four together equal the applied subset."""
    base = _call(case, op)
    _close(base, _reference(case, op))
    for corr in CORRECTIONS:
        out = _call(case, op, (corr,))
        if corr in APPLIED[op]:
            _changed(out, base)
            _close(out, _reference(case, op, (corr,)))
        else:
            _identical(out, base, f"{op.name} + {corr}")
    applied = APPLIED[op]
    _identical(_call(case, op, CORRECTIONS), _call(case, op, applied), f"{op.name} all")
    _close(_call(case, op, CORRECTIONS), _reference(case, op, applied))


def test_interpolate_crk_without_gradients_accepted(case):
    full = _call(case, INTERP, ("crk",))
    partial = _call(case, INTERP, ("crk",), crkGrads=False)
    _identical(partial, full, "Interpolate CRK(A, B)")


@pytest.mark.parametrize("op", [GRAD, DIV, CURL, LAP, COV], ids=lambda o: o.name)
def test_crk_without_gradients_rejected_by_corrected_gradient(case, op):
    with pytest.raises(ValueError, match="gradA"):
        _call(case, op, ("crk",), crkGrads=False)
    # gradA present, gradB missing is rejected too
    A, B, gA, _ = case["crk"]
    with pytest.raises(ValueError, match="gradB"):
        _call(case, op, crkState=CRKState(A, B, gA, None))


def test_laplacian_naive_row(case):
    """Naive: volumes and grad-h (f_i and f_j) applied; CRK (even without gradA/gradB) and
    renormalization accepted and ignored."""
    lap = LaplacianScheme.Naive
    base = _call(case, LAP, lap=lap)
    _close(base, _reference(case, LAP, lap=lap))
    for corr in CORRECTIONS:
        out = _call(case, LAP, (corr,), lap=lap)
        if corr in LAP_NAIVE_APPLIED:
            _changed(out, base)
            _close(out, _reference(case, LAP, (corr,), lap=lap))
        else:
            _identical(out, base, f"Laplacian Naive + {corr}")
    _identical(_call(case, LAP, ("crk",), lap=lap, crkGrads=False), base,
               "Laplacian Naive + CRK(A, B)")
    _identical(_call(case, LAP, CORRECTIONS, lap=lap),
               _call(case, LAP, LAP_NAIVE_APPLIED, lap=lap), "Laplacian Naive all")


@pytest.mark.parametrize("lap", [LaplacianScheme.Dot, LaplacianScheme.Default],
                         ids=lambda s: s.name)
def test_laplacian_other_schemes_apply_everything(case, lap):
    base = _call(case, LAP, lap=lap)
    for corr in CORRECTIONS:
        out = _call(case, LAP, (corr,), lap=lap)
        _changed(out, base)
        _close(out, _reference(case, LAP, (corr,), lap=lap))


@pytest.mark.parametrize("op", [GRAD, DIV, CURL, LAP], ids=lambda o: o.name)
def test_symmetric_scheme_ignores_volumes(case, op):
    sym = GradientScheme.Symmetric
    base = _call(case, op, scheme=sym)
    _close(base, _reference(case, op, scheme=sym))
    _identical(_call(case, op, ("volumes",), scheme=sym), base, f"{op.name} Symmetric + vol")
    rest = ("crk", "gradH", "renorm")
    withAll = _call(case, op, CORRECTIONS, scheme=sym)
    _identical(withAll, _call(case, op, rest, scheme=sym), f"{op.name} Symmetric all")
    _close(withAll, _reference(case, op, rest, scheme=sym))
    # the other schemes do apply volumes
    for scheme in (GradientScheme.Difference, GradientScheme.Summation):
        b = _call(case, op, scheme=scheme)
        out = _call(case, op, ("volumes",), scheme=scheme)
        _changed(out, b)
        _close(out, _reference(case, op, ("volumes",), scheme=scheme))


def test_gradient_grad_h_divides_f_j_only(case):
    """Gradient: the query Omegas are never read (bit-identical when they change)."""
    f_j = _call(case, GRAD, gradHState=(case["omq"], case["omr"]))
    ones = torch.ones_like(case["omq"])
    _identical(_call(case, GRAD, gradHState=(ones, case["omr"])), f_j, "Gradient Omega_i")
    _identical(_call(case, GRAD, gradHState=(ones, ones)), _call(case, GRAD),
               "Gradient Omega = 1")
    for scheme in GradientScheme:
        out = _call(case, GRAD, ("gradH",), scheme=scheme)
        _close(out, _reference(case, GRAD, ("gradH",), scheme=scheme))


@pytest.mark.parametrize("op", [DIV, CURL, LAP], ids=lambda o: o.name)
def test_grad_h_divides_f_i_and_f_j(case, op):
    """Divergence, Curl, Laplacian: both Omega_i and Omega_j act (Difference scheme, where
    f_i enters the pair term)."""
    sch = GradientScheme.Difference
    base = _call(case, op, scheme=sch)
    ones = torch.ones_like(case["omq"])
    onlyI = _call(case, op, scheme=sch, gradHState=(case["omq"], ones))
    onlyJ = _call(case, op, scheme=sch, gradHState=(ones, case["omr"]))
    both = _call(case, op, ("gradH",), scheme=sch)
    for out in (onlyI, onlyJ):
        _changed(out, base)
        _changed(both, out)
    _close(both, _reference(case, op, ("gradH",), scheme=sch))
    _identical(_call(case, op, scheme=sch, gradHState=(ones, ones)), base, f"{op.name} Omega 1")


def test_divergence_consistent_mode(case):
    """consistentDivergence: V_j -> vol_j rho_j / rho_i (with volumes) or m_j / rho_i; no effect
    on Symmetric."""
    for corr in ((), ("volumes",), ("volumes", "crk", "gradH", "renorm")):
        plain = _call(case, DIV, corr, scheme=GradientScheme.Difference)
        out = _call(case, DIV, corr, scheme=GradientScheme.Difference, consistentDivergence=True)
        _changed(out, plain)
        _close(out, _reference(case, DIV, corr, scheme=GradientScheme.Difference,
                               consistent=True))
    sym = GradientScheme.Symmetric
    _identical(_call(case, DIV, ("volumes",), scheme=sym, consistentDivergence=True),
               _call(case, DIV, scheme=sym), "Divergence Symmetric consistent")


@pytest.mark.parametrize("op", [GRAD, DIV, CURL, LAP, COV], ids=lambda o: o.name)
def test_crk_then_renormalization(case, op):
    """CRK and renormalization combine as G = L_i grad W^R_ij (the reference's order)."""
    both = _call(case, op, ("crk", "renorm"))
    _close(both, _reference(case, op, ("crk", "renorm")))
    _changed(both, _call(case, op, ("crk",)))
    _changed(both, _call(case, op, ("renorm",)))


def test_crk_then_renormalization_not_reversed(case):
    """The other order (L applied to grad W before the CRK terms) gives a visibly different
    Naive Gradient; the library matches CRK-then-L only."""
    q, dom, f = case["q"], case["dom"], case["f"]
    pr = _pr(GRAD)
    x = pairVectors(_np(q.positions), _np(q.positions), _np(dom.min), _np(dom.max),
                    [False, False])
    h = _np(q.supports)
    W = pairKernel(pr.kernel, 2, x, h, h, int(pr.supportMode))
    G = pairKernelGradient(pr.kernel, 2, x, h, h, int(pr.supportMode))
    A, B, gA, gB = (_np(t) for t in case["crk"])
    L = _np(case["L"])
    s = 1.0 + np.einsum("ijc,ic->ij", x, B)

    def crk(grad):
        return (A[:, None, None] * W[..., None] * B[:, None, :]
                + (A[:, None] * s)[..., None] * grad
                + (s * W)[..., None] * gA[:, None, :]
                + (A[:, None] * W)[..., None] * np.einsum("igc,ijc->ijg", gB, x))

    V = _np(q.masses) / _np(q.densities)
    fv = _np(f)
    right = np.einsum("ja,ijg,j->iag", fv, np.einsum("iab,ijb->ija", L, crk(G)), V)
    wrong = np.einsum("ja,ijg,j->iag", fv, crk(np.einsum("iab,ijb->ija", L, G)), V)
    out = _call(case, GRAD, ("crk", "renorm"))
    _close(out, right)
    assert np.abs(right - wrong).max() > 1e-3 * np.abs(right).max()
