"""The no-host-sync invariant, counted (`warpSPHCore.util.hostSyncCensus`
patches every readback and synchronising call, on any device, so it runs on CPU).

Exact numbers, per package module:

* every operator x gradient / Laplacian / support scheme x correction set (volumes, grad-h,
  CRK, renormalization, CRK + renormalization) x traversal (CSR, prebuilt grid,
  ``adjacency=None``): 0 readbacks in the no-grad forward, 0 in forward + backward, 0 in an
  explicit `warpOperationJVP` (forward and its backward: reverse over forward), and exactly 1
  in a dual-tensor call, made by ``autograd/stateAwareWarpFunction.py`` (the batched liveness
  mask);
* the correction builders (`computeCRKFactors`, `computeRenormalizationMatrices`,
  `computeOmega`) and their JVPs, and the Density HVP: 0, forward and backward;
* a neighbour search: exactly 1, made by ``neighborhood/flags.py``;
* the census is not vacuous: an injected ``.item()`` inside the package is counted and
  attributed to its module.
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import CRKState, WarpOperation
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import operatorEntry  # noqa: E402
from warpSPHCore.util import hostSyncCensus as _census

#: the Laplacian schemes that need no per-query state (Consistent needs its
#: LaplacianCorrectionState: tests/operations/test_laplacian_consistent_scheme.py)
STATELESS_LAPLACIAN = operatorEntry(WarpOperation.Laplacian).statelessValues("laplacianMode")

F64 = torch.float64
OPS = [WarpOperation.Density, WarpOperation.Interpolate, WarpOperation.Gradient,
       WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian,
       WarpOperation.Covariance]
_VECTOR_OPS = (WarpOperation.Divergence, WarpOperation.Curl)


def _call(op, q, dom, adj, f, crk):
    kw = {}
    if op not in (WarpOperation.Density, WarpOperation.Covariance):
        kw["queryValues"] = f[:, None] * q.positions if op in _VECTOR_OPS else f
    if op != WarpOperation.Density:
        kw["crkState"] = crk
    if op in (WarpOperation.Divergence, WarpOperation.Curl, WarpOperation.Laplacian):
        kw["gradHState"] = f  # grad-h divides f_i and f_j: exercise the Omega reads too
        kw["renormalizationState"] = torch.eye(2, dtype=f.dtype, device=f.device).expand(
            f.shape[0], 2, 2).contiguous()
    out = warpOperation(q, props(op=op), dom, adjacency=adj, **kw)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("traversal", ["csr", "grid", "none"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_forward_and_backward_without_host_sync(device, op, traversal):
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    n = q.positions.shape[0]
    f = torch.linspace(0.5, 1.5, n, dtype=F64, device=device)
    crk = CRKState(torch.ones(n, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, 2, dtype=F64, device=device))
    _call(op, q, dom, adj, f, crk)  # warm-up: compile outside the census
    with _census.census() as c:
        with torch.no_grad():
            _call(op, q, dom, adj, f, crk)
    assert c.total == 0, c.hits
    q.positions.requires_grad_(True)
    out = _call(op, q, dom, adj, f, crk)
    seed = torch.ones_like(out)
    with _census.census() as c:
        out = _call(op, q, dom, adj, f, crk)
        out.backward(seed)
    assert c.total == 0, c.hits
    assert q.positions.grad is not None


def test_census_counts_a_readback_here(device):
    t = torch.ones(3, device=device)
    with _census.census() as c:
        t.sum().item()
    assert c.total == 1


# --- forward mode ----------------------------------------------


def _jvpCall(op, q, dom, adj, f, crk, route, v):
    """The JVP of `_call` in the direction v (positions) plus a value tangent, explicitly or
    through dual tensors; CRK and renormalization with their tangents where the scope admits
    them (no grad-h: geometry JVPs with grad-h are out of scope)."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import CRKTangentState, ParticleState, ParticleTangentState
    from warpSPHCore.operations import warpOperationJVP

    kw = {}
    values = None
    if op not in (WarpOperation.Density, WarpOperation.Covariance):
        values = f[:, None] * q.positions if op in _VECTOR_OPS else f
        kw["queryValues"] = values
    n, d = q.positions.shape
    L = torch.eye(d, dtype=f.dtype, device=f.device).expand(n, d, d).contiguous()
    corrected = op in (WarpOperation.Gradient, WarpOperation.Divergence, WarpOperation.Curl,
                       WarpOperation.Laplacian)
    if corrected:
        kw["crkState"] = crk
        kw["renormalizationState"] = L
    if route == "explicit":
        tk = {}
        if values is not None:
            tk["tangentQueryValues"] = torch.ones_like(values)
        if corrected:
            tk["crkTangentState"] = CRKTangentState(*(torch.ones_like(x) for x in (
                crk.A, crk.B, crk.gradA, crk.gradB)))
            tk["renormalizationTangentState"] = torch.ones_like(L)
        return warpOperationJVP(q, props(op=op), dom, adjacency=adj,
                                queryTangentState=ParticleTangentState(positions=v), **kw,
                                **tk)
    with fwAD.dual_level():
        p = ParticleState(fwAD.make_dual(q.positions, v), q.supports, q.masses, q.kinds,
                          q.densities)
        if values is not None:
            kw["queryValues"] = fwAD.make_dual(values, torch.ones_like(values))
        if corrected:
            kw["renormalizationState"] = fwAD.make_dual(L, torch.ones_like(L))
        out = warpOperation(p, props(op=op), dom, adjacency=adj, **kw)
        out = out[0] if isinstance(out, tuple) else out
        return fwAD.unpack_dual(out).tangent


@pytest.mark.parametrize("route", ["explicit", "dual"])
@pytest.mark.parametrize("traversal", ["csr", "none"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_forward_mode_host_syncs(device, op, traversal, route):
    """Explicit JVPs: 0 readbacks, forward and backward (reverse over forward); the dual route:
    exactly 1 (the batched liveness mask) per dual operator call, 0 in backward."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    n = q.positions.shape[0]
    f = torch.linspace(0.5, 1.5, n, dtype=F64, device=device)
    crk = CRKState(torch.ones(n, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, dtype=F64, device=device),
                   torch.zeros(n, 2, 2, dtype=F64, device=device))
    v = torch.cos(3.0 * q.positions)
    _jvpCall(op, q, dom, adj, f, crk, route, v)  # warm-up: compile outside the census
    with _census.census() as c:
        with torch.no_grad():
            out = _jvpCall(op, q, dom, adj, f, crk, route, v)
    assert float(out.abs().max()) > 0
    assert c.total == (1 if route == "dual" else 0), c.hits
    q.positions.requires_grad_(True)
    with _census.census() as c:
        out = _jvpCall(op, q, dom, adj, f, crk, route, v)
        out.backward(torch.ones_like(out))
    assert c.total == (1 if route == "dual" else 0), c.hits
    assert q.positions.grad is not None


def test_forward_mode_builders_and_hvp_host_syncs(device):
    """computeCRKFactorsJVP, computeRenormalizationMatricesJVP and warpOperationHVP: 0
    readbacks; a dual call whose outputs are all empty: 0 (no mask)."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import ParticleState, ParticleTangentState
    from warpSPHCore.corrections import (
        computeCRKFactorsJVP,
        computeRenormalizationMatricesJVP,
    )
    from warpSPHCore.operations import warpOperationHVP

    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=4, domain=dom, hMean=0.9)
    adj = neighbourStructure("csr", q, dom)
    qt = ParticleTangentState(positions=torch.cos(3.0 * q.positions),
                              supports=0.01 * torch.sin(q.supports))
    pr = props(op=WarpOperation.Density)
    calls = (
        lambda: computeCRKFactorsJVP(q, dom, pr.kernel, qt, adjacency=adj),
        lambda: computeRenormalizationMatricesJVP(q, pr, dom, qt, adjacency=adj),
        lambda: warpOperationHVP(q, pr, dom, qt.positions, adjacency=adj),
    )
    for call in calls:
        call()
        with _census.census() as c:
            call()
        assert c.total == 0, c.hits
    empty = ParticleState(q.positions[:0], q.supports[:0], q.masses[:0], q.kinds[:0])
    with fwAD.dual_level():
        e = ParticleState(fwAD.make_dual(empty.positions, torch.ones_like(empty.positions)),
                          empty.supports, empty.masses, empty.kinds)
        warpOperation(e, pr, dom, referenceParticles=q)
        with _census.census() as c:
            out = warpOperation(e, pr, dom, referenceParticles=q)
    assert c.total == 0 and out.shape == (0,), c.hits


# --- the exact per-module census over every operator, scheme and correction ----------------

from warpSPHCore import (  # noqa: E402
    GradientScheme,
    LaplacianScheme,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
)

_DUAL_SITE = {"autograd/stateAwareWarpFunction.py": 1}
_CORRS = ("none", "volumes", "gradH", "crk", "renorm", "crk+renorm")


def _schemeCases():
    """(operator, properties keywords, correction set, field shape) covering every gradient
    scheme of the value operators, every Laplacian scheme and every support scheme."""
    cases = []
    for k, s in enumerate(SupportScheme):
        cases.append((WarpOperation.Density, dict(supportMode=s), "none", None))
        cases.append((WarpOperation.Interpolate, dict(supportMode=s),
                      ("none", "volumes", "crk")[k % 3], ()))
        cases.append((WarpOperation.Covariance, dict(supportMode=s),
                      ("none", "volumes", "crk", "renorm")[k % 4], None))
    for op, shape in ((WarpOperation.Gradient, ()), (WarpOperation.Divergence, (2,)),
                      (WarpOperation.Curl, (2,))):
        for g in GradientScheme:
            for corr in _CORRS:
                cases.append((op, dict(gradientMode=g), corr, shape))
    for lap in STATELESS_LAPLACIAN:
        for g in GradientScheme:
            for corr in (("none", "gradH", "crk+renorm") if lap != LaplacianScheme.Naive
                         else ("none", "gradH", "volumes")):
                cases.append((WarpOperation.Laplacian, dict(laplacianMode=lap, gradientMode=g),
                              corr, (2,)))
    return cases


_CASES = _schemeCases()


def _caseId(c):
    op, kw, corr, _ = c
    scheme = "-".join(f"{v.name}" for v in kw.values())
    return f"{op.name}-{scheme}-{corr}"


def _inputs(corr, q, shape):
    """(kwargs of the primal call, tangent kwargs of the explicit JVP) for `corr`."""
    n, d = q.positions.shape
    dev, dt = q.positions.device, q.positions.dtype
    kw, tk = {}, {}
    if shape is not None:
        f = torch.cos(torch.arange(n * max(1, int(torch.tensor(shape).prod())), dtype=dt,
                                   device=dev)).reshape((n,) + tuple(shape))
        kw["queryValues"] = f
        tk["tangentQueryValues"] = torch.sin(f)
    if "volumes" in corr:
        kw["referenceVolumes"] = torch.full((n,), 0.1, dtype=dt, device=dev)
        tk["tangentReferenceVolumes"] = torch.full((n,), 0.01, dtype=dt, device=dev)
    if "gradH" in corr:
        kw["gradHState"] = torch.full((n,), 1.1, dtype=dt, device=dev)
    if "crk" in corr:
        from warpSPHCore import CRKTangentState

        A = torch.ones(n, dtype=dt, device=dev)
        B = 0.1 * torch.ones(n, d, dtype=dt, device=dev)
        gA = 0.1 * torch.ones(n, d, dtype=dt, device=dev)
        gB = 0.1 * torch.ones(n, d, d, dtype=dt, device=dev)
        kw["crkState"] = CRKState(A, B, gA, gB)
        tk["crkTangentState"] = CRKTangentState(0.1 * A, B, gA, gB)
    if "renorm" in corr:
        L = torch.eye(d, dtype=dt, device=dev).expand(n, d, d).contiguous()
        kw["renormalizationState"] = L
        tk["renormalizationTangentState"] = 0.1 * L
    return kw, tk


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("traversal", ["csr", "grid", "none"])
@pytest.mark.parametrize("case", _CASES, ids=_caseId)
def test_exact_census(device, case, traversal):
    import torch.autograd.forward_ad as fwAD

    op, pkw, corr, shape = case
    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    pr = props(op=op, **pkw)
    kw, tk = _inputs(corr, q, shape)
    v = torch.cos(3.0 * q.positions)
    x = q.positions.clone().requires_grad_(True)
    p = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
    # the Tier-2 scope: no geometry JVP with grad-h, nor for Interpolate
    # and Covariance with CRK or renormalization; value tangents alone are Tier 1 there
    geometryOK = "gradH" not in corr and not (
        op in (WarpOperation.Interpolate, WarpOperation.Covariance)
        and ("crk" in corr or "renorm" in corr))
    if geometryOK:
        jvpTk = dict(tk, queryTangentState=ParticleTangentState(positions=v))
    else:
        jvpTk = {k: t for k, t in tk.items() if k == "tangentQueryValues"}

    from warpSPHCore.operations import warpOperationJVP

    def primal(pp):
        return _first(warpOperation(pp, pr, dom, adjacency=adj, **kw))

    def explicit(pp):
        return warpOperationJVP(pp, pr, dom, adjacency=adj, **kw, **jvpTk)

    def dual():
        with fwAD.dual_level():
            pd = ParticleState(fwAD.make_dual(q.positions, v), q.supports, q.masses, q.kinds,
                               q.densities)
            return fwAD.unpack_dual(_first(warpOperation(pd, pr, dom, adjacency=adj,
                                                         **kw))).tangent

    runs = {
        "forward": lambda: primal(q),
        "forward+backward": lambda: primal(p).sum().backward(),
    }
    if jvpTk:
        runs["jvp"] = lambda: explicit(q)
        runs["jvp+backward"] = lambda: explicit(p).sum().backward()
    if geometryOK:
        runs["dual"] = dual
    for name, run in runs.items():
        run()  # warm: compile outside the census
        with _census.census() as c:
            run()
        expected = _DUAL_SITE if name == "dual" else {}
        assert c.byModule() == expected, (name, c.sites)


def test_exact_census_builders_and_search(device):
    """The correction builders and their JVPs, the grad-h helper and the HVP: 0 readbacks
    forward and backward; a neighbour search: exactly 1, in neighborhood/flags.py."""
    from warpSPHCore import radiusSearchCompactHashMap
    from warpSPHCore.corrections import (
        computeCRKFactors,
        computeCRKFactorsJVP,
        computeOmega,
        computeRenormalizationMatrices,
        computeRenormalizationMatricesJVP,
    )
    from warpSPHCore.operations import warpOperationHVP

    dom = makeDomain(2, F64, device)
    q = marginCloud(12, 2, F64, device, seed=4, domain=dom, hMean=0.9)
    adj = neighbourStructure("csr", q, dom)
    x = q.positions.clone().requires_grad_(True)
    p = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
    pr = props(op=WarpOperation.Density)
    qt = ParticleTangentState(positions=torch.cos(3.0 * q.positions))

    def total(out):
        if isinstance(out, torch.Tensor):
            return out.sum()
        parts = []
        for o in (out if isinstance(out, tuple) else (out,)):
            if isinstance(o, torch.Tensor):
                if o.is_floating_point():
                    parts.append(o.sum())
            else:
                for f in ("A", "B", "gradA", "gradB", "renormalizationMatrices"):
                    t = getattr(o, f, None)
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        parts.append(t.sum())
        return sum(parts)

    builders = {
        "computeCRKFactors": lambda pp: computeCRKFactors(pp, dom, pr.kernel, adjacency=adj),
        "computeRenormalizationMatrices": lambda pp: computeRenormalizationMatrices(
            pp, pr, dom, adjacency=adj),
        "computeOmega": lambda pp: computeOmega(pp, pr, dom, adjacency=adj),
        "computeCRKFactorsJVP": lambda pp: computeCRKFactorsJVP(pp, dom, pr.kernel, qt,
                                                                adjacency=adj),
        "computeRenormalizationMatricesJVP": lambda pp: computeRenormalizationMatricesJVP(
            pp, pr, dom, qt, adjacency=adj),
        "warpOperationHVP": lambda pp: warpOperationHVP(pp, pr, dom, qt.positions,
                                                        adjacency=adj),
    }
    for name, fn in builders.items():
        fn(q)
        with _census.census() as c:
            fn(q)
        assert c.byModule() == {}, (name, c.sites)
        with _census.census() as c:
            total(fn(p)).backward()
        assert c.byModule() == {}, (name, "backward", c.sites)
    with _census.census() as c:
        radiusSearchCompactHashMap(q, dom)
    assert c.byModule() == {"neighborhood/flags.py": 1}, c.sites


def test_census_attributes_an_injected_readback(device, monkeypatch):
    """Non-vacuous: an `.item()` injected into the bridge's conversion step is counted and
    attributed to autograd/stateAwareWarpFunction.py, the module whose code called it."""
    import warpSPHCore.autograd.stateAwareWarpFunction as saf

    dom = makeDomain(2, F64, device)
    q = marginCloud(10, 2, F64, device, seed=3, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    x = q.positions.clone().requires_grad_(True)
    p = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
    convert = saf.getCachedWarpArray

    def leaky(t, *args, **kwargs):
        t.reshape(-1)[:1].sum().item()
        return convert(t, *args, **kwargs)

    monkeypatch.setattr(saf, "getCachedWarpArray", leaky)
    with _census.census() as c:
        warpOperation(p, props(op=WarpOperation.Density), dom, adjacency=adj)
    modules = c.byModule()
    assert set(modules) == {"autograd/stateAwareWarpFunction.py"}, c.sites
    assert modules["autograd/stateAwareWarpFunction.py"] >= 1
