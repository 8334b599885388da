"""Property-based fuzzing of the public surface (issue "Reliability": fuzzing, actionable
errors).

Every example either returns a finite result that matches an independent float64 NumPy
reference (`tests/operations/sph_reference.py`), or raises ValueError / TypeError /
NotImplementedError whose message names the function or the offending argument
(the README's input contract). A crash, a hang, an unexplained NaN or an anonymous message fails.

Profiles (tests/reliability/conftest.py): ``ci`` (default, derandomized) and ``all``
(``WARPSPHCORE_HYPOTHESIS_PROFILE=all``).
"""

from __future__ import annotations

import pathlib
import re
import sys
import types

import numpy as np
import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "operations"))
import sph_reference as R  # noqa: E402

from warpSPHCore import (  # noqa: E402
    CRKState,
    DomainDescription,
    GradientScheme,
    HashMapLengthMode,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    OperationProperties,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
    computeCRKFactors,
    computeRenormalizationMatrices,
    radiusNaive,
    radiusSearchCompactHashMap,
    sphOperation_warp,
    warpOperation,
    warpOperationHVP,
    warpOperationJVP,
)
from warpSPHCore.operators import operatorEntry  # noqa: E402

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

pytestmark = pytest.mark.timeout(300)

#: (exception type, message, accepted names) of every rejection seen in this module.
REJECTIONS: list[tuple[str, str, tuple[str, ...]]] = []
#: number of hypothesis examples executed per test (reported by the final test).
EXAMPLES: dict[str, int] = {}

ACCEPTED = (ValueError, TypeError, NotImplementedError)
FLOATS = (torch.float32, torch.float64)
VALUE_OPS = (WarpOperation.Interpolate, WarpOperation.Gradient, WarpOperation.Divergence,
             WarpOperation.Curl, WarpOperation.Laplacian)
ALL_OPS = VALUE_OPS + (WarpOperation.Density, WarpOperation.Covariance)
#: kernels with a finite k(0); ViscosityKernel is singular at r = 0 (the
#: self pair gives W = +inf, grad W = NaN), checked separately.
FINITE_KERNELS = [k for k in KernelFunctions if k != KernelFunctions.ViscosityKernel]


def _count(name):
    EXAMPLES[name] = EXAMPLES.get(name, 0) + 1


def _record(exc, names):
    msg = str(exc)
    REJECTIONS.append((type(exc).__name__, msg, tuple(names)))
    assert any(n in msg for n in names), (
        f"{type(exc).__name__} message names none of {names}: {msg!r}")
    return msg


def rejected(fn, names, exc=ACCEPTED):
    """fn() must raise one of `exc`, with a message naming one of `names`."""
    try:
        out = fn()
    except exc as e:
        return _record(e, names)
    raise AssertionError(f"expected a rejection naming {names}, got a result {type(out)}")


def outcome(fn, names):
    """fn() returns (result, None) or raises an accepted error naming one of `names`
    (None, message)."""
    try:
        return fn(), None
    except ACCEPTED as e:
        return None, _record(e, names)


def tols(dtype, scale, loose=False):
    if dtype == torch.float32:
        return (1e-3, 1e-3 * scale) if loose else (2e-4, 2e-4 * scale)
    return (1e-9, 1e-9 * scale)


def assertMatches(out, ref, dtype, loose=False):
    out = out.detach().cpu().to(torch.float64).numpy()
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert np.isfinite(out).all(), "non-finite output for finite, valid inputs"
    scale = 1.0 + (float(np.max(np.abs(ref))) if ref.size else 0.0)
    rtol, atol = tols(dtype, scale, loose)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


# --- layouts: non-contiguous and expanded (stride 0) views with identical values ----------


def noncontig(t):
    """Same values, non-contiguous strides."""
    return torch.stack((t, torch.zeros_like(t)), dim=-1)[..., 0]


def expanded(t):
    """Stride-0 view along axis 0 (all rows equal to row 0); unchanged when empty."""
    if t.shape[0] == 0:
        return t
    return t[:1].expand(t.shape)


def layoutState(p, layout):
    """The population with non-contiguous / expanded tensors. ParticleState rejects those
    (naming the field); an attribute bag carries them into the operators."""
    if layout == "contiguous":
        return p
    f = noncontig if layout == "noncontiguous" else expanded
    fields = dict(positions=f(p.positions) if layout == "noncontiguous" else p.positions,
                  supports=f(p.supports), masses=f(p.masses),
                  kinds=f(p.kinds) if layout == "noncontiguous" else p.kinds,
                  densities=None if p.densities is None else f(p.densities))
    strided = [k for k, t in fields.items() if t is not None and t.numel() > 1
               and not t.is_contiguous()]
    if strided:
        msg = rejected(lambda: ParticleState(**fields), ("ParticleState",), exc=ValueError)
        assert any(k in msg for k in strided), msg
    return types.SimpleNamespace(**fields)


def contiguousState(p):
    """A ParticleState with contiguous detached copies of a (bag) population's tensors."""
    c = (lambda t: None if t is None else t.detach().contiguous())  # noqa: E731
    return ParticleState(c(p.positions), c(p.supports), c(p.masses), c(p.kinds),
                         c(p.densities))


def expectedShape(op, S, d, props, nq):
    if op == WarpOperation.Density:
        return (nq,)
    if op == WarpOperation.Gradient:
        return (nq,) + S + (d,)
    if op == WarpOperation.Covariance:
        return (nq, d, d)
    if op == WarpOperation.Divergence:
        if d == 1 and S in ((), (1,)):
            return (nq,)
        return (nq,) + (S[:-1] if props.divergenceDotMode else S[1:])
    if op == WarpOperation.Curl:
        if d == 1:
            return (nq,)
        if d == 2:
            return (nq,) + (S[1:] if len(S) > 1 else (1,))
    return (nq,) + S


# --- strategies ---------------------------------------------------------------------------

dims = st.integers(1, 3)
floatDtypes = st.sampled_from(FLOATS)
counts = st.sampled_from([0, 1, 2, 3, 5, 8])
seeds = st.integers(0, 2**20)


def validFieldShape(draw, op, d, props):
    """A field shape S the operator defines."""
    if op in (WarpOperation.Interpolate, WarpOperation.Gradient):
        return draw(st.sampled_from([(), (2,), (d,), (d, 2)]))
    if op == WarpOperation.Divergence:
        choices = [(d,), (d, 2)] if not props.divergenceDotMode else [(d,), (2, d)]
        return draw(st.sampled_from(choices + ([()] if d == 1 else [])))
    if op == WarpOperation.Curl:
        return draw(st.sampled_from([(), (1,)] if d == 1 else [(d,), (d, 2)]))
    if op == WarpOperation.Laplacian:
        if props.positiveDivergence:
            return (d,)
        if props.laplacianMode == LaplacianScheme.Dot:
            return draw(st.sampled_from([(d,), (2, d)]))
        return draw(st.sampled_from([(), (d,)]))
    return ()


@st.composite
def operatorCases(draw):
    d = draw(dims)
    dtype = draw(floatDtypes)
    op = draw(st.sampled_from(ALL_OPS))
    nq = draw(counts)
    cross = draw(st.booleans())
    nr = draw(counts) if cross else nq
    periodic = draw(st.booleans())
    placement = draw(st.sampled_from(["inside", "outside", "far"] if periodic
                                     else ["inside", "outside"]))
    kw = dict(
        kernel=draw(st.sampled_from(FINITE_KERNELS)),
        supportMode=draw(st.sampled_from(list(SupportScheme))),
        operationMode=draw(st.sampled_from(list(OperationDirection))),
    )
    if op in VALUE_OPS:
        kw["gradientMode"] = draw(st.sampled_from(list(GradientScheme)))
    if op == WarpOperation.Divergence:
        kw["divergenceDotMode"] = draw(st.booleans())
    if op == WarpOperation.Laplacian:
        kw["laplacianMode"] = draw(st.sampled_from(list(STATELESS_LAPLACIAN)))
        kw["positiveDivergence"] = draw(st.booleans())
    props = OperationProperties(operation=op, **kw)
    shape = validFieldShape(draw, op, d, props)
    return dict(
        d=d, dtype=dtype, op=op, nq=nq, nr=nr, cross=cross, periodic=periodic,
        placement=placement, props=props, shape=shape, seed=draw(seeds),
        traversal=draw(st.sampled_from(R.TRAVERSALS)),
        layout=draw(st.sampled_from(["contiguous", "noncontiguous", "expanded"])),
        volumes=draw(st.booleans()) and op != WarpOperation.Density,
        requiresGrad=draw(st.booleans()),
        kinds=draw(st.sampled_from(["fluid", "mixed"])),
    )


def _population(n, c, seed, gen):
    d, dtype = c["d"], c["dtype"]
    hMean = 0.45 if c["periodic"] else None
    kinds = None if c["kinds"] == "fluid" else torch.randint(0, 4, (n,), generator=gen)
    p = R.cloud(n, d, dtype, "cpu", seed, hMean=hMean, kinds=kinds)
    pos = p.positions
    if c["placement"] == "outside":
        pos = pos * 3.0                                         # up to 3x outside the box
    elif c["placement"] == "far":
        shift = torch.randint(-25, 26, (n, d), generator=gen).to(dtype) * 2.0  # k * L
        pos = pos + shift
    return ParticleState(pos, p.supports, p.masses, p.kinds, p.densities)


@given(operatorCases())
def test_valid_operator_calls_match_reference(c):
    """Valid calls (random d, N, dtype, enums, traversal, layout, placement) return finite
    results equal to the float64 NumPy references."""
    _count("test_valid_operator_calls_match_reference")
    note(repr({k: v for k, v in c.items()}))
    d, dtype, op, props = c["d"], c["dtype"], c["op"], c["props"]
    gen = torch.Generator().manual_seed(c["seed"])
    dom = R.makeDomain(d, dtype, "cpu", periodic=c["periodic"])
    q = _population(c["nq"], c, c["seed"], gen)
    r = _population(c["nr"], c, c["seed"] + 7, gen) if c["cross"] else None

    qv = torch.randn((c["nq"],) + c["shape"], generator=gen, dtype=torch.float64).to(dtype)
    rv = (torch.randn((c["nr"],) + c["shape"], generator=gen, dtype=torch.float64).to(dtype)
          if c["cross"] else qv)
    vol = None
    if c["volumes"]:
        vol = (0.2 + torch.rand(c["nr"], generator=gen, dtype=torch.float64)).to(dtype)

    # layout of the arguments actually passed (same values)
    qL = layoutState(q, c["layout"])
    rL = None if r is None else layoutState(r, c["layout"])
    qvL, rvL = qv, rv
    if c["layout"] == "noncontiguous":
        qvL = noncontig(qv)
        rvL = qvL if rv is qv else noncontig(rv)
    elif c["layout"] == "expanded":
        qvL = expanded(qv)
        rvL = qvL if rv is qv else expanded(rv)
    qvRef, rvRef = qvL.detach().clone(), rvL.detach().clone()
    leaves = []
    if c["requiresGrad"]:
        base = qL.positions.detach().clone().requires_grad_()
        qL = types.SimpleNamespace(positions=base, supports=qL.supports, masses=qL.masses,
                                   kinds=qL.kinds, densities=qL.densities)
        leaves.append(base)
        if op in VALUE_OPS:
            vb = qvL.detach().clone().requires_grad_()
            leaves.append(vb)
            qvL = vb
            if not c["cross"]:
                rvL = vb
    refQ = contiguousState(qL)
    refR = refQ if r is None else contiguousState(rL)
    # built from the values actually passed (the expanded layout changes the supports)
    adj = R.neighbourStructure(c["traversal"], refQ, dom, reference=None if r is None else refR)

    kwargs = dict(adjacency=adj, referenceParticles=rL, referenceVolumes=vol)
    if op in VALUE_OPS:
        kwargs.update(queryValues=qvL, referenceValues=rvL)
    if op == WarpOperation.Covariance:
        kwargs["covarianceReturnNumNeighbors"] = True
    out = warpOperation(qL, props, dom, **kwargs)

    refArgs = dict(reference=None if r is None else refR)
    if c["nq"] == 0 or c["nr"] == 0:
        # empty populations: zeros of the public shape (the references need N > 0)
        if op == WarpOperation.Covariance:
            assert tuple(out[1].shape) == (c["nq"],) and not bool(out[1].any())
            out = out[0]
        ref = np.zeros(expectedShape(op, c["shape"], d, props, c["nq"]))
    elif op == WarpOperation.Density:
        ref = R.densityReference(refQ, dom, props, **refArgs)
    elif op == WarpOperation.Interpolate:
        ref = R.interpolateReference(refQ, dom, props, rvRef, volumes=vol, **refArgs)
    elif op == WarpOperation.Covariance:
        ref, n = R.covarianceReference(refQ, dom, props, volumes=vol, **refArgs)
        assert out[1].dtype == torch.int32
        np.testing.assert_array_equal(out[1].cpu().numpy(), n)
        out = out[0]
    else:
        fn = {WarpOperation.Gradient: R.gradientReference,
              WarpOperation.Divergence: R.divergenceReference,
              WarpOperation.Curl: R.curlReference,
              WarpOperation.Laplacian: R.laplacianReference}[op]
        ref = fn(refQ, dom, props, qvRef, rvRef, volumes=vol, **refArgs)
    assert out.dtype == dtype and out.device.type == "cpu"
    assertMatches(out, ref, dtype, loose=c["placement"] == "far")

    if leaves and out.numel():
        w = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(dtype)
        grads = torch.autograd.grad((out * w).sum(), leaves, allow_unused=True)
        for g in grads:
            assert g is None or bool(torch.isfinite(g).all()), "non-finite gradient"


# --- invalid field shapes -----------------------------------------------------------------


def shapeIsValid(op, S, d, props):
    F = int(np.prod(S)) if S else 1
    if op == WarpOperation.Divergence:
        if d == 1 and S in ((), (1,)):
            return True
        if props.divergenceDotMode:
            return bool(S) and S[-1] == d
        return bool(S) and S[0] == d
    if op == WarpOperation.Curl:
        if d == 1:
            return S in ((), (1,))
        return bool(S) and S[0] == d
    if op == WarpOperation.Laplacian:
        if props.laplacianMode == LaplacianScheme.Dot and d > 1 and F % d:
            return False
        if props.positiveDivergence and F != d:
            return False
    return True


@given(d=dims, dtype=floatDtypes, op=st.sampled_from(VALUE_OPS),
       S=st.lists(st.integers(1, 4), max_size=3).map(tuple), n=st.sampled_from([0, 1, 4]),
       dot=st.booleans(), lap=st.sampled_from(list(STATELESS_LAPLACIAN)), pos=st.booleans(),
       leading=st.sampled_from(["ok", "query", "reference", "trailing"]))
def test_field_shapes_valid_or_named_rejection(d, dtype, op, S, n, dot, lap, pos, leading):
    """Any field shape: the documented shapes run (output shape per the operator's declaration), the
    others raise ValueError naming warpOperation and the operator."""
    _count("test_field_shapes_valid_or_named_rejection")
    props = OperationProperties(KernelFunctions.Wendland2, operation=op, divergenceDotMode=dot,
                                laplacianMode=lap, positiveDivergence=pos)
    dom = R.makeDomain(d, dtype, "cpu")
    p = R.cloud(n, d, dtype, "cpu", 3)
    qv = torch.ones((n,) + S, dtype=dtype)
    rv = qv
    if leading == "query":
        qv = torch.ones((n + 1,) + S, dtype=dtype)
    elif leading == "reference":
        rv = torch.ones((n + 2,) + S, dtype=dtype)
    elif leading == "trailing":
        rv = torch.ones((n,) + S + (2,), dtype=dtype)
    call = lambda: warpOperation(p, props, dom, queryValues=qv, referenceValues=rv)  # noqa: E731
    if leading != "ok":
        msg = rejected(call, ("warpOperation",), exc=ValueError)
        assert "Values" in msg or "field shapes differ" in msg, msg
        return
    if not shapeIsValid(op, S, d, props):
        msg = rejected(call, ("warpOperation",), exc=ValueError)
        assert op.name in msg and "accepted" in msg, msg
        return
    out = call()
    assert bool(torch.isfinite(out).all())
    if op == WarpOperation.Gradient:
        assert tuple(out.shape) == (n,) + S + (d,)
    elif op in (WarpOperation.Interpolate, WarpOperation.Laplacian):
        assert tuple(out.shape) == (n,) + S


# --- dtypes -------------------------------------------------------------------------------

FIELDS = ("positions", "supports", "masses", "densities", "values", "domain.min", "kinds")


@given(d=dims, n=st.sampled_from([0, 1, 3]), base=floatDtypes, field=st.sampled_from(FIELDS),
       bad=st.sampled_from([torch.int32, torch.int64, torch.float16, torch.bool,
                            torch.float32, torch.float64, torch.complex64]),
       op=st.sampled_from(ALL_OPS))
def test_dtypes_rejected_with_names(d, n, base, field, bad, op):
    """One tensor with a wrong or mixed dtype: TypeError naming the function and the
    argument, at construction or at the call."""
    _count("test_dtypes_rejected_with_names")
    if bad == base or (field == "kinds" and bad == torch.int32):
        bad = torch.int64 if field != "kinds" else torch.float32
    p = R.cloud(n, d, base, "cpu", 1)
    vals = torch.ones(n, d, dtype=base)
    lo, hi = torch.full((d,), -1.0, dtype=base), torch.full((d,), 1.0, dtype=base)

    def build():
        tensors = dict(positions=p.positions, supports=p.supports, masses=p.masses,
                       densities=p.densities, values=vals, kinds=p.kinds)
        key = field if field != "domain.min" else None
        if key is not None:
            tensors[key] = tensors[key].to(bad)
        dom = DomainDescription(lo.to(bad) if field == "domain.min" else lo, hi, False)
        q = ParticleState(tensors["positions"], tensors["supports"], tensors["masses"],
                          tensors["kinds"], tensors["densities"])
        kw = {} if op in (WarpOperation.Density, WarpOperation.Covariance) else dict(
            queryValues=tensors["values"])
        return warpOperation(q, OperationProperties(KernelFunctions.Wendland2, operation=op),
                             dom, **kw)

    if field == "values" and op in (WarpOperation.Density, WarpOperation.Covariance):
        return  # values are not an input of these operators
    short = field.split(".")[-1]
    rejected(build, ("warpOperation", "ParticleState", "DomainDescription"), exc=TypeError)
    msg = REJECTIONS[-1][1]
    assert short in msg or "Values" in msg, msg


# --- enum values --------------------------------------------------------------------------

ENUM_FIELDS = {"kernel": KernelFunctions, "operation": WarpOperation,
               "gradientMode": GradientScheme, "laplacianMode": LaplacianScheme,
               "supportMode": SupportScheme, "operationMode": OperationDirection}


@given(field=st.sampled_from(sorted(ENUM_FIELDS)),
       value=st.one_of(st.integers(-5, 50), st.sampled_from([2**40, -2**31, True, 1.0, "x",
                                                              None])))
def test_operation_properties_enums(field, value):
    """Integers of a member are converted; anything else raises ValueError naming
    OperationProperties and the field."""
    _count("test_operation_properties_enums")
    enum = ENUM_FIELDS[field]
    kw = {"kernel": KernelFunctions.Wendland2, field: value}
    valid = (isinstance(value, int) and not isinstance(value, bool)
             and value in {m.value for m in enum})
    if valid:
        props = OperationProperties(**kw)
        assert getattr(props, field) is enum(value)
    else:
        msg = rejected(lambda: OperationProperties(**kw), ("OperationProperties",),
                       exc=(ValueError, TypeError))
        assert field in msg


@given(d=dims, mode=st.one_of(st.integers(-3, 40), st.sampled_from(list(SupportScheme))),
       lengthMode=st.one_of(st.integers(-2, 5), st.sampled_from(list(HashMapLengthMode))),
       fixed=st.sampled_from([-1, 0, 1, 7, 4096]))
def test_search_enums(d, mode, lengthMode, fixed):
    """radiusSearchCompactHashMap: invalid mode / hashMapLengthMode / fixedHashMapLength raise
    naming the function; valid ones give the brute-force pairs."""
    _count("test_search_enums")
    dtype = torch.float64
    dom = R.makeDomain(d, dtype, "cpu")
    p = R.cloud(6, d, dtype, "cpu", 2)
    res, msg = outcome(lambda: radiusSearchCompactHashMap(
        p, dom, mode=mode, hashMapLengthMode=lengthMode, fixedHashMapLength=fixed),
        ("radiusSearchCompactHashMap",))
    validMode = int(mode) in {m.value for m in SupportScheme}
    validLen = int(lengthMode) in {m.value for m in HashMapLengthMode}
    validFixed = HashMapLengthMode(lengthMode) != HashMapLengthMode.Fixed if validLen else True
    validFixed = validFixed or fixed >= 1
    if validMode and validLen and validFixed:
        assert res is not None, msg
        ii, jj = radiusNaive(p.positions, p.positions, p.supports, p.supports,
                             mode=SupportScheme(int(mode)))
        assert sorted(zip(res.i.tolist(), res.j.tolist())) == sorted(
            zip(ii.tolist(), jj.tolist()))
    else:
        assert res is None, "invalid enum accepted"


# --- neighbour search: supports and positions ---------------------------------------------


def numpyPairs(qp, rp, hq, hr, mode, lo, hi, per):
    """float64 brute-force pairs plus the set of pairs within rounding of the threshold."""
    x = R.pairVectors(qp, rp, lo, hi, per)
    r = np.linalg.norm(x, axis=-1)
    # broadcast to [N_q, N_r] (np.broadcast_to: an inf support must not become inf * 0)
    shape = (hq.shape[0], hr.shape[0])
    Hi, Hj = np.broadcast_to(hq[:, None], shape), np.broadcast_to(hr[None, :], shape)
    m = SupportScheme(mode)
    thr = {SupportScheme.Gather: Hi, SupportScheme.Scatter: Hj,
           SupportScheme.MeanSymmetric: (Hi + Hj) / 2}.get(m, np.maximum(Hi, Hj))
    with np.errstate(invalid="ignore"):
        sure = set(zip(*np.nonzero(r <= thr * (1 - 1e-5))))
        maybe = set(zip(*np.nonzero(np.abs(r - thr) <= 1e-5 * np.abs(thr) + 1e-30)))
    return sure, maybe


SUPPORTS = ["normal", "tiny", "huge", "zero", "negative", "nan", "inf", "mixedNaN"]
POSITIONS = ["normal", "nan", "inf", "outside", "farOutside"]


@given(d=dims, dtype=floatDtypes, nq=st.sampled_from([0, 1, 2, 5, 9]),
       nr=st.sampled_from([None, 0, 1, 4]), sup=st.sampled_from(SUPPORTS),
       posKind=st.sampled_from(POSITIONS), periodic=st.booleans(),
       extent=st.sampled_from(["ok", "ok", "zero", "negative", "nan"]),
       mode=st.sampled_from(list(SupportScheme)), seed=seeds)
def test_search_values(d, dtype, nq, nr, sup, posKind, periodic, extent, mode, seed):
    """The single readback catches NaN/inf positions, invalid supports, degenerate extents
    and periodic supports >= L/2 (ValueError naming radiusSearchCompactHashMap); every
    other input gives exactly the float64 brute-force pairs. Operators with the sync-free
    grid never crash on the same inputs."""
    _count("test_search_values")
    gen = torch.Generator().manual_seed(seed)
    q = R.cloud(nq, d, dtype, "cpu", seed, hMean=0.3)
    r = None if nr is None else R.cloud(nr, d, dtype, "cpu", seed + 1, hMean=0.3)

    def mutate(p):
        n = p.positions.shape[0]
        h = p.supports.clone()
        pos = p.positions.clone()
        if n:
            k = int(torch.randint(0, n, (1,), generator=gen))
            h = {"tiny": h * 1e-30, "huge": h * 1e30, "zero": h * 0,
                 "negative": -h, "nan": h * float("nan"), "inf": h * float("inf")}.get(sup, h)
            if sup == "mixedNaN":
                h[k] = float("nan")
            if posKind == "nan":
                pos[k, 0] = float("nan")
            elif posKind == "inf":
                pos[k, -1] = float("-inf")
            elif posKind == "outside":
                pos = pos * 5
            elif posKind == "farOutside":
                pos = pos + 2.0 * torch.randint(-1000, 1000, (n, d), generator=gen).to(dtype)
        return ParticleState(pos, h, p.masses, p.kinds, p.densities)

    q = mutate(q)
    r = None if r is None else mutate(r)
    rr = q if r is None else r
    lo = torch.full((d,), -1.0, dtype=dtype)
    hi = {"ok": lo + 2.0, "zero": lo.clone(), "negative": lo - 1.0,
          "nan": lo * float("nan")}[extent]
    dom = DomainDescription(lo, hi, periodic)
    res, msg = outcome(lambda: radiusSearchCompactHashMap(q, dom, mode=mode,
                                                          referenceParticles=r),
                       ("radiusSearchCompactHashMap",))
    # which inputs are invalid
    P = [x.positions.double().numpy() for x in (q, rr)]
    H = [x.supports.double().numpy() for x in (q, rr)]
    nonEmpty = P[0].shape[0] > 0 and P[1].shape[0] > 0
    badPos = nonEmpty and not all(np.isfinite(p).all() for p in P)
    badSup = nonEmpty and not all(bool(np.all(np.isfinite(h) & (h > 0))) for h in H)
    E = (hi - lo).double().numpy()
    badExt = nonEmpty and not bool(np.all(np.isfinite(E) & (E > 0)))
    hMax = max([float(h.max()) for h in H if h.size] or [0.0])
    badPer = nonEmpty and periodic and not badSup and not badExt and hMax >= float(E.min()) / 2
    invalid = badPos or badSup or badExt or badPer
    note(f"invalid={invalid} pos={badPos} sup={badSup} ext={badExt} per={badPer} msg={msg}")
    if invalid:
        assert res is None, "invalid search input accepted"
        if badPos:
            assert "position" in msg
        elif badSup:
            assert "support" in msg
    else:
        assert res is not None, msg
        assert res.numCols == P[1].shape[0]
        got = set(zip(res.i.tolist(), res.j.tolist()))
        assert len(got) == len(res.i), "duplicate pairs"
        sure, maybe = numpyPairs(P[0], P[1], H[0], H[1], mode, lo.double().numpy(),
                                 hi.double().numpy(), [periodic] * d)
        if posKind == "farOutside" and periodic:
            # wrapping |x| ~ 2000 in float32 leaves ~1e-4 absolute position noise
            tol = 1e-3 if dtype == torch.float32 else 1e-9
            x = R.pairVectors(P[0], P[1], lo.double().numpy(), hi.double().numpy(),
                              [periodic] * d)
            rad = np.linalg.norm(x, axis=-1)
            Hm = np.maximum(H[0][:, None], H[1][None, :])
            maybe |= set(zip(*np.nonzero(np.abs(rad - Hm) < tol + Hm)))  # any pair near h
            maybe = {pq for pq in maybe if abs(rad[pq] - Hm[pq]) < max(tol, 1e-5) * 10 + 0.5}
        assert sure - maybe <= got, "missed pairs"
        assert got - sure <= maybe, "spurious pairs"

    # the sync-free operator path never crashes nor reads out of bounds on the same input
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density,
                                supportMode=mode)
    out, _ = outcome(lambda: warpOperation(q, props, dom, referenceParticles=r),
                     ("warpOperation",))
    assert out is not None and tuple(out.shape) == (nq,)
    if not invalid and posKind not in ("farOutside",):
        ref = R.densityReference(q, dom, props, reference=r)
        if ref.size and np.max(np.abs(ref)) > 1e-3 * torch.finfo(dtype).max:
            # tiny supports: N / h^d overflows the call precision (explained +inf, no NaN)
            assert not bool(torch.isnan(out).any())
        else:
            assertMatches(out, ref, dtype)


# --- mismatched adjacency -----------------------------------------------------------------


@given(d=dims, dtype=floatDtypes, n=st.sampled_from([1, 3, 6]),
       dq=st.sampled_from([-1, 1, 2]), dr=st.sampled_from([-1, 0, 1]),
       kind=st.sampled_from(["csr", "grid"]), op=st.sampled_from(ALL_OPS))
def test_mismatched_adjacency(d, dtype, n, dq, dr, kind, op):
    """A neighbour structure built for other particle counts is rejected naming adjacency
    (or the hash map), never read out of bounds."""
    _count("test_mismatched_adjacency")
    dom = R.makeDomain(d, dtype, "cpu")
    a = R.cloud(n, d, dtype, "cpu", 5)
    b = R.cloud(n + 2, d, dtype, "cpu", 6)
    adj = R.neighbourStructure(kind, a, dom, reference=b)      # n x (n + 2)
    q = R.cloud(max(n + dq, 0), d, dtype, "cpu", 7)
    r = R.cloud(n + 2 + dr, d, dtype, "cpu", 8)
    if kind == "grid" and dr == 0:
        r = R.cloud(n + 1, d, dtype, "cpu", 8)
    kw = {} if op in (WarpOperation.Density, WarpOperation.Covariance) else dict(
        queryValues=torch.ones(q.positions.shape[0], d, dtype=dtype),
        referenceValues=torch.ones(r.positions.shape[0], d, dtype=dtype))
    props = OperationProperties(KernelFunctions.Wendland2, operation=op)
    names = ("adjacency", "CompactHashMap")
    call = lambda: warpOperation(q, props, dom, adjacency=adj, referenceParticles=r, **kw)  # noqa: E731
    if kind == "csr" and q.positions.shape[0] == n and r.positions.shape[0] == n + 2:
        call()
        return
    rejected(call, names, exc=ValueError)
    assert "warpOperation" in REJECTIONS[-1][1]


def test_hand_made_adjacency_lengths():
    """An AdjacencyList whose CSR arrays disagree with the particle counts is rejected."""
    _count("test_hand_made_adjacency_lengths")
    dtype = torch.float64
    dom = R.makeDomain(2, dtype, "cpu")
    p = R.cloud(4, 2, dtype, "cpu", 0)
    adj = R.neighbourStructure("csr", p, dom)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    p5 = R.cloud(5, 2, dtype, "cpu", 0)
    rejected(lambda: warpOperation(p5, props, dom, adjacency=adj), ("adjacency",))
    rejected(lambda: warpOperation(p, props, dom, adjacency=(adj.i, adj.j)), ("adjacency",))
    rejected(lambda: warpOperationHVP(p, props, dom, torch.zeros(4, 2, dtype=dtype),
                                      adjacency=None), ("adjacency", "warpOperationHVP"))


# --- sphOperation_warp flags --------------------------------------------------------------


@given(d=dims, dtype=floatDtypes, flags=st.lists(st.booleans(), min_size=4, max_size=4),
       given_=st.lists(st.booleans(), min_size=4, max_size=4), n=st.sampled_from([0, 2, 5]))
def test_sph_operation_warp_flags(d, dtype, flags, given_, n):
    """Each useX flag must agree with its tensors (ValueError naming sphOperation_warp);
    consistent calls match the reference."""
    _count("test_sph_operation_warp_flags")
    dom = R.makeDomain(d, dtype, "cpu")
    p = R.cloud(n, d, dtype, "cpu", 11)
    v = torch.randn(n, dtype=torch.float64).to(dtype)
    useRen, useOm, useVol, useCRK = flags
    gRen, gOm, gVol, gCRK = given_
    eye = torch.eye(d, dtype=dtype).expand(n, d, d).contiguous()
    kw = dict(
        useGradientRenormalization=useRen, renormalizationMatrices=eye if gRen else None,
        useGradHTerms=useOm, queryOmegas=torch.ones(n, dtype=dtype) if gOm else None,
        useVolume=useVol, referenceVolumes=p.masses / p.densities if gVol else None,
        useCRK=useCRK, crk_A=torch.ones(n, dtype=dtype) if gCRK else None,
        crk_B=torch.zeros(n, d, dtype=dtype) if gCRK else None,
        crk_gradA=torch.zeros(n, d, dtype=dtype) if gCRK else None,
        crk_gradB=torch.zeros(n, d, d, dtype=dtype) if gCRK else None)
    call = lambda: sphOperation_warp(  # noqa: E731
        p.positions, p.positions, p.supports, p.supports, p.masses, p.masses, p.densities,
        p.densities, v, v, dom, operation=WarpOperation.Gradient,
        kernel=KernelFunctions.Wendland2, queryKinds=p.kinds, referenceKinds=p.kinds, **kw)
    if list(flags) != list(given_):
        rejected(call, ("sphOperation_warp",), exc=ValueError)
        return
    out = call()
    if n == 0:
        assert tuple(out.shape) == (0, d)
        return
    # identity L, Omega = 1, V = m / rho and A = 1, B = 0 leave the plain gradient
    ref = R.gradientReference(p, dom, R.props(WarpOperation.Gradient), v)
    assertMatches(out, ref, dtype)


# --- corrections --------------------------------------------------------------------------


@given(d=dims, dtype=floatDtypes, n=st.sampled_from([0, 1, 3, 7]), seed=seeds,
       kernel=st.one_of(st.sampled_from(FINITE_KERNELS), st.integers(-2, 50)),
       traversal=st.sampled_from(R.TRAVERSALS), periodic=st.booleans())
def test_crk_and_renormalization(d, dtype, n, seed, kernel, traversal, periodic):
    """computeCRKFactors gives finite factors; feeding them (and the renormalization of the
    same cloud) to Gradient is finite; computeRenormalizationMatrices' C and n match the
    Covariance reference. Invalid kernels raise naming the function or the kernel."""
    _count("test_crk_and_renormalization")
    dom = R.makeDomain(d, dtype, "cpu", periodic=periodic)
    p = R.cloud(n, d, dtype, "cpu", seed, hMean=0.45 if periodic else None)
    adj = R.neighbourStructure(traversal, p, dom)
    res, msg = outcome(lambda: computeCRKFactors(p, dom, kernel, adjacency=adj),
                       ("computeCRKFactors", "kernel", "KernelFunctions"))
    if not (isinstance(kernel, KernelFunctions)
            or (isinstance(kernel, int) and kernel in {k.value for k in FINITE_KERNELS})):
        if kernel == KernelFunctions.ViscosityKernel.value:
            return
        assert res is None, "invalid kernel accepted"
        return
    assert res is not None, msg
    kernel = KernelFunctions(kernel)
    V, rho, crk = res
    for t in (V, rho, crk.A, crk.B, crk.gradA, crk.gradB):
        assert t.dtype == dtype and bool(torch.isfinite(t).all()), "non-finite CRK factor"
    v = torch.randn(n, dtype=torch.float64).to(dtype)
    props = OperationProperties(kernel, operation=WarpOperation.Gradient)
    out = warpOperation(p, props, dom, queryValues=v, referenceVolumes=V, crkState=crk,
                        adjacency=adj)
    assert bool(torch.isfinite(out).all())
    # an incomplete CRK state is rejected for the corrected gradient
    rejected(lambda: warpOperation(p, props, dom, queryValues=v, referenceVolumes=V,
                                   crkState=CRKState(crk.A, crk.B), adjacency=adj),
             ("crkState",), exc=ValueError)

    C, ev, ren = computeRenormalizationMatrices(p, props, dom, adjacency=adj)
    Cref, nref = R.covarianceReference(p, dom, OperationProperties(
        kernel, operation=WarpOperation.Covariance))
    Cp, Lref, _ = R.renormalizationReference(Cref, nref)
    assertMatches(C, Cp, dtype)
    L = ren.renormalizationMatrices
    assert bool(torch.isfinite(L).all()) and bool(torch.isfinite(ev).all())
    out = warpOperation(p, props, dom, queryValues=v, renormalizationState=ren, adjacency=adj)
    assert bool(torch.isfinite(out).all())


# --- forward mode and HVP -----------------------------------------------------------------


@given(d=dims, dtype=floatDtypes, n=st.sampled_from([0, 1, 4]), seed=seeds,
       op=st.sampled_from([WarpOperation.Density, WarpOperation.Interpolate]),
       tshape=st.sampled_from(["ok", "rows", "cols", "dtype"]))
def test_jvp_and_hvp(d, dtype, n, seed, op, tshape):
    """warpOperationJVP equals J v from reverse mode; wrong tangent shapes / dtypes raise
    naming the function or the tangent; the Density HVP is finite with the right shape."""
    _count("test_jvp_and_hvp")
    dom = R.makeDomain(d, dtype, "cpu")
    p = R.marginCloud(n, d, dtype, "cpu", seed, domain=dom) if n > 1 else R.cloud(
        n, d, dtype, "cpu", seed)
    adj = R.neighbourStructure("csr", p, dom)
    props = OperationProperties(KernelFunctions.Wendland4, operation=op)
    gen = torch.Generator().manual_seed(seed)
    tv = torch.randn(n, d, generator=gen, dtype=torch.float64).to(dtype)
    if tshape == "rows":
        tv = torch.zeros(n + 1, d, dtype=dtype)
    elif tshape == "cols":
        tv = torch.zeros(n, d % 3 + 1, dtype=dtype)
    elif tshape == "dtype":
        tv = tv.to(torch.float64 if dtype == torch.float32 else torch.float32)
    f = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    kw = {} if op == WarpOperation.Density else dict(queryValues=f)
    names = ("warpOperationJVP", "ParticleTangentState", "positions", "tangent")

    def jvp():
        return warpOperationJVP(p, props, dom, queryTangentState=ParticleTangentState(
            positions=tv), adjacency=adj, **kw)

    if tshape != "ok":
        rejected(jvp, names)
        rejected(lambda: warpOperationHVP(
            p, OperationProperties(KernelFunctions.Wendland4, operation=WarpOperation.Density),
            dom, tv, adjacency=adj), ("warpOperationHVP", "tangent", "positions"))
        return
    out = jvp()
    x = p.positions.detach().clone()

    def fwd(x):
        return warpOperation(ParticleState(x, p.supports, p.masses, p.kinds, p.densities),
                             props, dom, adjacency=adj, **kw)

    if n:
        J = torch.autograd.functional.jacobian(fwd, x)              # [n, n, d]
        ref = torch.einsum("iak,ak->i", J.double(), tv.double())
        assertMatches(out, ref.numpy(), dtype)
    else:
        assert out.shape == (0,)
    if op == WarpOperation.Density:
        h = warpOperationHVP(p, props, dom, tv, adjacency=adj)
        assert tuple(h.shape) == (n, d) and bool(torch.isfinite(h).all())


def test_out_of_scope_and_unsupported():
    """Out-of-scope forward mode, third derivatives, torch.func and preScatteredQuantities
    raise NotImplementedError naming the function."""
    _count("test_out_of_scope_and_unsupported")
    dtype = torch.float64
    dom = R.makeDomain(2, dtype, "cpu")
    p = R.cloud(5, 2, dtype, "cpu", 0)
    v = torch.randn(5, dtype=dtype)
    dens = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    grad = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Gradient)
    rejected(lambda: warpOperationHVP(p, grad, dom, torch.zeros(5, 2, dtype=dtype),
                                      adjacency=R.neighbourStructure("csr", p, dom)),
             ("warpOperationHVP",), exc=NotImplementedError)
    rejected(lambda: warpOperationJVP(p, dens, dom, queryTangentState=ParticleTangentState(
        densities=torch.ones(5, dtype=dtype))), ("warpOperationJVP",),
        exc=NotImplementedError)
    rejected(lambda: warpOperation(p, grad, dom, queryValues=v, preScatteredQuantities=v),
             ("preScatteredQuantities",), exc=NotImplementedError)
    x = p.positions.clone()
    rejected(lambda: torch.autograd.functional.hvp(
        lambda y: warpOperation(ParticleState(y, p.supports, p.masses, p.kinds), dens,
                                dom).pow(2).sum(), x.detach(), torch.ones_like(x)),
        ("double backward", "third derivative"), exc=NotImplementedError)
    from torch.func import grad as fgrad

    def f(y):
        return warpOperation(ParticleState(y, p.supports, p.masses, p.kinds), dens, dom).sum()

    xg = p.positions.clone().requires_grad_(True)
    torch.testing.assert_close(fgrad(f)(p.positions.clone()),
                               torch.autograd.grad(f(xg), xg)[0], rtol=1e-12, atol=1e-14)
    rejected(lambda: torch.func.hessian(f)(p.positions.clone()), ("warpOperation", "hessian"),
             exc=NotImplementedError)


def test_viscosity_kernel_self_pair_is_documented_inf():
    """ViscosityKernel is singular at r = 0: the self pair's W = +inf is
    the documented result, not a silent NaN elsewhere."""
    _count("test_viscosity_kernel_self_pair_is_documented_inf")
    dom = R.makeDomain(2, torch.float64, "cpu")
    p = R.cloud(3, 2, torch.float64, "cpu", 0)
    rho = warpOperation(p, R.props(WarpOperation.Density,
                                   kernel=KernelFunctions.ViscosityKernel), dom)
    assert bool(torch.isposinf(rho).all())


def test_inside_user_tape_is_named():
    """warpOperation with a tensor requiring grad inside a user's `with wp.Tape():` raises
    NotImplementedError naming the kernel (was Warp's anonymous 'entering a tape while one is
    already active' RuntimeError)."""
    import warp as wp
    _count("test_inside_user_tape_is_named")
    dom = R.makeDomain(2, torch.float64, "cpu")
    p = R.cloud(4, 2, torch.float64, "cpu", 0)
    x = p.positions.clone().requires_grad_()
    q = ParticleState(x, p.supports, p.masses, p.kinds)
    with wp.Tape():
        rejected(lambda: warpOperation(q, R.props(WarpOperation.Density), dom),
                 ("Kernel", "wp.Tape"), exc=NotImplementedError)
        rho = warpOperation(p, R.props(WarpOperation.Density), dom)  # no grad: fine
    assert bool(torch.isfinite(rho).all())
    rho = warpOperation(q, R.props(WarpOperation.Density), dom)      # after: fine
    assert bool(torch.isfinite(rho).all())


# --- final: every rejection was actionable ------------------------------------------------


# what a message says about the input and the remedy: "accepted: ...", "got ...", "has shape
# ...", "must ...", "pass ... or ...", "use ...", "... is not supported", etc.
_ACTIONABLE = re.compile(r"accept|expected|must|supported|only|use |requires|need|pass |"
                         r"not (a |supported|implemented)|got|found|has ", re.I)


def test_zz_every_rejection_names_function_or_argument():
    """Runs last (file order): each collected message names the function or the argument and
    says what was found or what is accepted (or what to do instead)."""
    assert REJECTIONS, "no rejection was collected (run the whole file)"
    bad = [(t, m) for t, m, names in REJECTIONS if not any(n in m for n in names)]
    assert not bad, bad
    vague = [(t, m) for t, m, _ in REJECTIONS if not _ACTIONABLE.search(m)]
    assert not vague, vague
    total = sum(EXAMPLES.values())
    print(f"\nfuzz examples: {total} ({EXAMPLES}); rejections: {len(REJECTIONS)}")
