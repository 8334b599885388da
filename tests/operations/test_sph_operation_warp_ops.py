"""`sphOperation_warp` (flat-tensor adapter) for Divergence, Curl and
Laplacian: bit-identical to the equivalent `warpOperation` call with every `useX` flag
(volumes, CRK, grad-h, renormalization) alone and together, its own defaults (kernel
Wendland4, laplacianMode Default, operationMode AllToAll) and option pass-through, values
against the independent float64 references of `sph_reference`, and the flag/tensor mismatch
errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sph_reference import (
    cloud,
    curlReference,
    divergenceReference,
    laplacianReference,
    makeDomain,
    neighbourStructure,
    randomCorrectionTensors,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    OperationProperties,
    SupportScheme,
    WarpOperation,
    sphOperation_warp,
    warpOperation,
)
from warpSPHCore.operators import operatorEntry  # noqa: E402

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

F64 = torch.float64
DIV, CURL, LAP = WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian
OPS = [DIV, CURL, LAP]
NQ, NR = 9, 11
FLAGS = ("volumes", "crk", "gradH", "renorm")


def _np(t):
    return t.detach().cpu().to(F64).numpy()


def _case(device, d=2):
    dom = makeDomain(d, F64, device)
    q = cloud(NQ, d, F64, device, seed=1300 + d, kinds=[k % 4 for k in range(NQ)], hMean=0.9)
    r = cloud(NR, d, F64, device, seed=1310 + d, kinds=[(k + 1) % 4 for k in range(NR)],
              hMean=0.9)
    g = torch.Generator().manual_seed(1320 + d)
    fq = torch.randn(NQ, d, generator=g, dtype=F64).to(device)
    fr = torch.randn(NR, d, generator=g, dtype=F64).to(device)
    vol, omr, A, B, gA, gB, L = randomCorrectionTensors(NQ, NR, d, device, seed=1330 + d)
    omq = randomCorrectionTensors(NR, NQ, d, device, seed=1340 + d)[1]
    qvol = randomCorrectionTensors(NR, NQ, d, device, seed=1350 + d)[0]
    adj = neighbourStructure("csr", q, dom, r)
    return dict(dom=dom, q=q, r=r, fq=fq, fr=fr, vol=vol, qvol=qvol, omq=omq, omr=omr,
                crk=(A, B, gA, gB), L=L, adj=adj, d=d)


def _flagKwargs(c, flags):
    kw = {}
    if "volumes" in flags:
        kw.update(useVolume=True, referenceVolumes=c["vol"])
    if "crk" in flags:
        A, B, gA, gB = c["crk"]
        kw.update(useCRK=True, crk_A=A, crk_B=B, crk_gradA=gA, crk_gradB=gB)
    if "gradH" in flags:
        kw.update(useGradHTerms=True, queryOmegas=c["omq"], referenceOmegas=c["omr"])
    if "renorm" in flags:
        kw.update(useGradientRenormalization=True, renormalizationMatrices=c["L"])
    return kw


def _structuredKwargs(c, flags):
    kw = {}
    if "volumes" in flags:
        kw["referenceVolumes"] = c["vol"]
    if "crk" in flags:
        kw["crkState"] = CRKState(*c["crk"])
    if "gradH" in flags:
        kw["gradHState"] = (c["omq"], c["omr"])
    if "renorm" in flags:
        kw["renormalizationState"] = c["L"]
    return kw


def _flat(c, fq=None, fr=None, **kw):
    q, r = c["q"], c["r"]
    fq = c["fq"] if fq is None else fq
    fr = c["fr"] if fr is None else fr
    return sphOperation_warp(q.positions, r.positions, q.supports, r.supports, q.masses,
                             r.masses, q.densities, r.densities, fq, fr, c["dom"],
                             adjacency=c["adj"], queryKinds=q.kinds, referenceKinds=r.kinds,
                             **kw)


def _structured(c, props, fq=None, fr=None, **kw):
    fq = c["fq"] if fq is None else fq
    fr = c["fr"] if fr is None else fr
    return warpOperation(c["q"], props, c["dom"], queryValues=fq, referenceValues=fr,
                         adjacency=c["adj"], referenceParticles=c["r"], **kw)


def _reference(c, op, props, flags, consistent=False):
    vol = c["vol"] if "volumes" in flags else None
    crk = c["crk"] if "crk" in flags else None
    om = (c["omq"], c["omr"]) if "gradH" in flags else None
    L = c["L"] if "renorm" in flags else None
    args = (c["q"], c["dom"], props, c["fq"], c["fr"], c["r"])
    if op == DIV:
        return divergenceReference(*args, volumes=vol, crk=crk, omegas=om, renorm=L,
                                   consistent=consistent)
    if op == CURL:
        return curlReference(*args, volumes=vol, crk=crk, omegas=om, renorm=L)
    return laplacianReference(*args, volumes=vol, crk=crk, omegas=om, renorm=L)


def _close(out, ref, rtol=1e-11):
    ref = np.asarray(ref)
    assert tuple(out.shape) == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(_np(out), ref, rtol=rtol, atol=1e-12 * scale)


FLAG_SETS = [(), ("volumes",), ("crk",), ("gradH",), ("renorm",), FLAGS]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: "+".join(f) or "none")
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_adapter_equals_warp_operation(device, op, flags):
    """Defaults (Wendland4, Gather, Naive, laplacianMode Default, AllToAll) and each flag: the
    adapter is bit-identical to warpOperation and matches the float64 reference."""
    c = _case(device)
    out = _flat(c, operation=op, **_flagKwargs(c, flags))
    props = OperationProperties(KernelFunctions.Wendland4, operation=op,
                                laplacianMode=LaplacianScheme.Default)
    ref = _structured(c, props, **_structuredKwargs(c, flags))
    assert torch.equal(out, ref)
    _close(out, _reference(c, op, props, flags))


def test_adapter_laplacian_default_scheme(device):
    """The adapter's laplacianMode default is Default (not OperationProperties' Brookshaw,
    which differs by the second regulariser, about 1e-8 relative)."""
    c = _case(device)
    out = _flat(c, operation=LAP)
    default = _structured(c, OperationProperties(KernelFunctions.Wendland4, operation=LAP,
                                                 laplacianMode=LaplacianScheme.Default))
    brookshaw = _structured(c, OperationProperties(KernelFunctions.Wendland4, operation=LAP))
    assert torch.equal(out, default)
    assert not torch.equal(out, brookshaw)
    torch.testing.assert_close(out, brookshaw, rtol=1e-6, atol=1e-9)
    assert torch.equal(_flat(c, operation=LAP, laplacianMode=LaplacianScheme.Brookshaw),
                       brookshaw)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_adapter_default_kernel_and_mode(device, op):
    """Kernel default Wendland4 (Wendland2 differs) and operationMode default AllToAll: the
    mixed kinds include ghosts, which AllToAll excludes as references (TrueAllToToAll
    differs)."""
    c = _case(device)
    out = _flat(c, operation=op)
    base = dict(operation=op, laplacianMode=LaplacianScheme.Default)
    assert torch.equal(out, _structured(c, OperationProperties(
        KernelFunctions.Wendland4, operationMode=OperationDirection.AllToAll, **base)))
    assert not torch.equal(out, _structured(c, OperationProperties(KernelFunctions.Wendland2,
                                                                   **base)))
    assert not torch.equal(out, _structured(c, OperationProperties(
        KernelFunctions.Wendland4, operationMode=OperationDirection.TrueAllToToAll, **base)))


def test_adapter_options_pass_through(device):
    """gradientMode, supportMode, operationMode, kernel, consistentDivergence,
    divergenceDotMode, positiveDivergence and laplacianMode reach warpOperation."""
    c = _case(device)
    common = dict(kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Scatter,
                  gradientMode=GradientScheme.Difference,
                  operationMode=OperationDirection.FluidToAll)

    def props(op, **kw):
        return OperationProperties(operation=op, **common, **kw)

    fl = _flagKwargs(c, FLAGS)
    st = _structuredKwargs(c, FLAGS)
    out = _flat(c, operation=DIV, consistentDivergence=True, **common, **fl)
    pr = props(DIV)
    assert torch.equal(out, _structured(c, pr, consistentDivergence=True, **st))
    _close(out, _reference(c, DIV, pr, FLAGS, consistent=True))

    g = torch.Generator().manual_seed(1390)
    Tq = torch.randn(NQ, 2, 2, generator=g, dtype=F64).to(device)
    Tr = torch.randn(NR, 2, 2, generator=g, dtype=F64).to(device)
    out = _flat(c, Tq, Tr, operation=DIV, divergenceDotMode=True, **common, **fl)
    pr = props(DIV, divergenceDotMode=True)
    assert torch.equal(out, _structured(c, pr, Tq, Tr, **st))
    assert not torch.equal(out, _flat(c, Tq, Tr, operation=DIV, **common, **fl))
    out = _flat(c, Tq, Tr, operation=CURL, **common, **fl)
    assert out.shape == (NQ, 2)
    assert torch.equal(out, _structured(c, props(CURL), Tq, Tr, **st))

    for lap in STATELESS_LAPLACIAN:
        out = _flat(c, operation=LAP, laplacianMode=lap, positiveDivergence=True, **common,
                    **fl)
        pr = props(LAP, laplacianMode=lap, positiveDivergence=True)
        assert torch.equal(out, _structured(c, pr, **st))
        # Naive never applies CRK or renormalization
        applied = ("volumes", "gradH") if lap == LaplacianScheme.Naive else FLAGS
        _close(out, _reference(c, LAP, pr, applied))


def test_adapter_volumes_variants(device):
    """useVolume with referenceVolumes only, or with both (query volumes are never read)."""
    c = _case(device)
    props = OperationProperties(KernelFunctions.Wendland4, operation=DIV)
    ref = _structured(c, props, referenceVolumes=c["vol"])
    both = _flat(c, operation=DIV, useVolume=True, queryVolumes=c["qvol"],
                 referenceVolumes=c["vol"])
    assert torch.equal(both, ref)


def test_adapter_query_omegas_only(device):
    """useGradHTerms with queryOmegas only uses them for both roles (same-size sets)."""
    c = _case(device)
    q = c["q"]
    om = c["omq"]
    out = sphOperation_warp(q.positions, q.positions, q.supports, q.supports, q.masses,
                            q.masses, q.densities, q.densities, c["fq"], c["fq"], c["dom"],
                            operation=LAP, queryKinds=q.kinds, referenceKinds=q.kinds,
                            useGradHTerms=True, queryOmegas=om)
    props = OperationProperties(KernelFunctions.Wendland4, operation=LAP,
                                laplacianMode=LaplacianScheme.Default)
    assert torch.equal(out, warpOperation(q, props, c["dom"], queryValues=c["fq"],
                                          gradHState=om))
    _close(out, laplacianReference(q, c["dom"], props, c["fq"], omegas=(om, om)))


def _mismatches(c):
    A, B, gA, gB = c["crk"]
    return [
        ("useVolume", dict(useVolume=True), "useVolume=True"),
        ("queryVolumes", dict(queryVolumes=c["qvol"]), "useVolume=False"),
        ("referenceVolumes", dict(referenceVolumes=c["vol"]), "useVolume=False"),
        ("useCRK", dict(useCRK=True), "crk_A, crk_B is None"),
        ("useCRK-B", dict(useCRK=True, crk_A=A), "crk_B is None"),
        ("crk_A", dict(crk_A=A), "useCRK=False"),
        ("crk_B", dict(crk_B=B), "useCRK=False"),
        ("crk_gradA", dict(crk_gradA=gA), "useCRK=False"),
        ("crk_gradB", dict(crk_gradB=gB), "useCRK=False"),
        ("useCRK-noGrad", dict(useCRK=True, crk_A=A, crk_B=B), "gradA"),
        ("useGradHTerms", dict(useGradHTerms=True), "queryOmegas is None"),
        ("useGradHTerms-ref", dict(useGradHTerms=True, referenceOmegas=c["omr"]),
         "queryOmegas is None"),
        ("queryOmegas", dict(queryOmegas=c["omq"]), "useGradHTerms=False"),
        ("referenceOmegas", dict(referenceOmegas=c["omr"]), "useGradHTerms=False"),
        ("useRenorm", dict(useGradientRenormalization=True), "renormalizationMatrices is None"),
        ("renormalizationMatrices", dict(renormalizationMatrices=c["L"]),
         "useGradientRenormalization=False"),
    ]


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_adapter_flag_tensor_mismatch(device, op):
    """Every flag set without its tensors, and every tensor given without its flag, raises
    ValueError (CRK without gradA/gradB: the corrected gradient needs them). The Laplacian's
    Naive scheme never reads CRK, so there A and B alone are accepted."""
    c = _case(device)
    for name, kw, pattern in _mismatches(c):
        with pytest.raises(ValueError, match=pattern):
            _flat(c, operation=op, **kw)
            pytest.fail(name)
    if op == LAP:
        A, B, _, _ = c["crk"]
        out = _flat(c, operation=op, laplacianMode=LaplacianScheme.Naive, useCRK=True,
                    crk_A=A, crk_B=B)
        assert torch.equal(out, _flat(c, operation=op, laplacianMode=LaplacianScheme.Naive))


def test_adapter_kinds_required_and_prescattered(device):
    c = _case(device)
    q, r = c["q"], c["r"]
    with pytest.raises(TypeError):
        sphOperation_warp(q.positions, r.positions, q.supports, r.supports, q.masses,
                          r.masses, q.densities, r.densities, c["fq"], c["fr"], c["dom"],
                          operation=DIV)
    with pytest.raises(NotImplementedError, match="preScatteredQuantities"):
        _flat(c, operation=CURL, preScatteredQuantities=c["fq"])


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_adapter_3d(device, op):
    c = _case(device, d=3)
    out = _flat(c, operation=op, **_flagKwargs(c, FLAGS))
    props = OperationProperties(KernelFunctions.Wendland4, operation=op,
                                laplacianMode=LaplacianScheme.Default)
    assert torch.equal(out, _structured(c, props, **_structuredKwargs(c, FLAGS)))
    _close(out, _reference(c, op, props, FLAGS))
