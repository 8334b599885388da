"""The declared operator ABI: the 36-slot layout of
`extractStateInfo`, `structFor`, lattice-calibration resolution, `launchOperator` extras
validation, `warpWrapper2` equivalence, inert-tensor pruning and `asScalarArg`."""

from __future__ import annotations

import pytest
import torch
from sph_reference import cloud, makeDomain, neighbourStructure, props

from warpSPHCore import (
    CRKState,
    ExecutionMode,
    KernelFunctions,
    ParticleState,
    WarpOperation,
    latticeDensityFactor,
)
from warpSPHCore.autograd import arg_extract
from warpSPHCore.autograd.arg_extract import STATE_SIZE, extractStateInfo, structFor
from warpSPHCore.autograd.operator_spec import (
    Corrections,
    OperatorSpec,
    OutputSpec,
    SPHContext,
    launchOperator,
)
from warpSPHCore.autograd.stateAwareWarpFunction import StateAwareWarpFunction
from warpSPHCore.autograd.wrapper import asScalarArg, warpWrapper2
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import OPERATORS
from warpSPHCore.operators.density import DENSITY_SPEC
from warpSPHCore.operators.interpolate import INTERPOLATE_SPEC
from warpSPHCore.util.fieldRegistry import Field

F64 = torch.float64


def _state(device, n=6, d=2, densities=True):
    return cloud(n, d, F64, device, seed=0, densities=densities), makeDomain(d, F64, device)


def test_slots_aliasing_and_nulls(device):
    q, dom = _state(device, densities=False)
    adj = neighbourStructure("csr", q, dom)
    flat, build = extractStateInfo(q, props(), dom, adjacency=adj)
    assert len(flat) == STATE_SIZE
    for a, b in ((0, 1), (2, 3), (4, 5), (8, 9)):
        assert flat[a] is flat[b]
    assert flat[0] is q.positions and flat[8] is q.kinds
    for slot in (6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 26, 29, 30, 31, 32):
        assert isinstance(flat[slot], Field), slot
    assert flat[19] is flat[15] and flat[22] is flat[18]
    assert flat[23] is adj.j and flat[24] is adj.edgeOffsets and flat[25] is adj.numNeighbors
    assert flat[27] is dom.min and flat[28] is dom.max  # adjacency mode: the domain tensors
    assert flat[33] is dom.min and flat[34] is dom.max and flat[35] is dom.periodic
    assert build.config["useAdjacency"] and build.config["numOffsets"] == 0


def test_slots_grid_volumes_crk(device):
    q, dom = _state(device)
    r = cloud(7, 2, F64, device, seed=1)
    grid = neighbourStructure("grid", q, dom, r)
    qv = torch.ones(6, dtype=F64, device=device)
    crk = CRKState(torch.ones(6, dtype=F64, device=device), torch.zeros(6, 2, dtype=F64,
                                                                         device=device))
    flat, build = extractStateInfo(q, props(), dom, queryVolumes=qv, adjacency=grid,
                                   referenceParticles=r, crkState=crk)
    assert flat[1] is r.positions and flat[7] is r.densities and flat[6] is q.densities
    assert flat[13] is qv and flat[14] is qv  # reference volumes default to query volumes
    assert flat[15] is crk.A and flat[16] is crk.B and flat[19] is crk.A
    assert isinstance(flat[17], Field) and isinstance(flat[18], Field)  # missing gradA/gradB
    for slot in (23, 24, 25):
        assert isinstance(flat[slot], Field)
    assert flat[26] is grid.sortIndex and flat[30] is grid.hashTable
    assert flat[32] is grid.cellOffsets and flat[27] is grid.qMin
    assert not build.config["useAdjacency"] and build.config["numOffsets"] == 9
    # only reference volumes: slot 13 null, 14 real
    rv = torch.ones(7, dtype=F64, device=device)
    flat, _ = extractStateInfo(q, props(), dom, referenceVolumes=rv, adjacency=grid,
                               referenceParticles=r)
    assert isinstance(flat[13], Field) and flat[14] is rv


def test_adjacency_none_builds_grid(device):
    q, dom = _state(device)
    flat, build = extractStateInfo(q, props(), dom)
    assert not build.config["useAdjacency"] and isinstance(flat[26], torch.Tensor)
    with pytest.raises(TypeError, match="adjacency"):
        extractStateInfo(q, props(), dom, adjacency="list")


def test_calibration_resolution(device, monkeypatch):
    q, dom = _state(device)
    _, build = extractStateInfo(q, props(n_h=2.0, calibrateNormalization=True), dom)
    assert build.config["calibrateNormalization"]
    assert build.config["normalizationCoefficient"] == latticeDensityFactor(
        KernelFunctions.Wendland2, 2.0, 2)
    _, build = extractStateInfo(q, props(), dom)
    assert not build.config["calibrateNormalization"]
    assert build.config["normalizationCoefficient"] == 1.0
    for bad in (float("inf"), -0.5, 0.0, float("nan")):
        monkeypatch.setattr(arg_extract, "latticeDensityFactor", lambda k, n, d, v=bad: v)
        with pytest.raises(ValueError, match="finite positive"):
            extractStateInfo(q, props(n_h=2.0, calibrateNormalization=True), dom)


def test_struct_for():
    for dt in (torch.float32, torch.float64):
        for d in (1, 2, 3):
            cls = structFor("particle", d, dt)
            assert cls is structFor("particle", d, dt, ExecutionMode.FORWARD)
            assert cls is not structFor("particle", d, torch.float64 if dt == torch.float32
                                        else torch.float32)
            for kind in ("correction", "correctionTangent", "domain", "kernelState", "grid",
                         "adjacency"):
                assert structFor(kind, d, dt) is not None
    with pytest.raises(ValueError):
        structFor("nope", 2, torch.float64)
    with pytest.raises(TypeError):
        structFor("particle", 2, torch.float16)


def test_registry_table():
    assert set(OPERATORS) == set(WarpOperation) - {WarpOperation.Custom}
    for op, entry in OPERATORS.items():
        assert entry.operation == op and entry.spec is not None and entry.formula
    assert OPERATORS[WarpOperation.Density].spec is DENSITY_SPEC
    assert OPERATORS[WarpOperation.Interpolate].spec is INTERPOLATE_SPEC


def test_registry_declarations_are_consistent():
    """Each entry's declarations refer to each other and to the rest of the ABI coherently:
    options are `OperationProperties` fields (or a keyword the kernel receives as an extra),
    an option that ignores a correction is one of the entry's options and values, the JVP
    scope accepts only tangents of applied corrections, the value inputs agree with the
    spec's extras and its `JVPSpec`, and the first registry's flags still read right."""
    import dataclasses

    from warpSPHCore import OperationProperties
    from warpSPHCore.autograd.operator_spec import ExtraKind
    from warpSPHCore.operators import CORRECTIONS, GEOMETRY_TANGENTS, ValueInputs

    fields = {f.name for f in dataclasses.fields(OperationProperties)}
    for op, entry in OPERATORS.items():
        extras = {e.name: e.kind for e in entry.spec.extras}
        for option in entry.options:
            assert option.default in option.values, (op.name, option.name)
            if option.keyword:
                assert extras.get(option.name) == ExtraKind.SCALAR, (op.name, option.name)
            else:
                assert option.name in fields, (op.name, option.name)
        for name, use in entry.corrections.items():
            assert name in CORRECTIONS
            if use.ignoredWith is not None:
                option = entry.option(use.ignoredWith.option)
                assert option is not None and use.ignoredWith.value in option.values, op.name
        scope = entry.jvp
        assert set(scope.geometry) <= set(GEOMETRY_TANGENTS), op.name
        assert set(scope.correctionTangents) <= {n for n, u in entry.corrections.items()
                                                 if u.applied}, op.name
        assert set(scope.rejectedStates) <= set(CORRECTIONS), op.name
        for rejected in scope.rejectedOptions:
            assert entry.option(rejected.option) is not None, (op.name, rejected.option)
        assert scope.valueTangents == (entry.values is not ValueInputs.NONE), op.name
        valueExtras = {ValueInputs.NONE: set(), ValueInputs.REFERENCE: {"referenceValues"},
                       ValueInputs.QUERY_AND_REFERENCE: {"values"}}[entry.values]
        assert {n for n, k in extras.items() if k == ExtraKind.TENSOR} == valueExtras, op.name
        assert entry.needsValues == (entry.values is not ValueInputs.NONE)
        assert (entry.volumes, entry.crk, entry.gradH, entry.renormalization) == tuple(
            u.applied for _, u in entry.corrections.items())


def test_launch_operator_validation(device):
    q, dom = _state(device)
    ctx = SPHContext(q, props(WarpOperation.Interpolate), dom)
    flat = q.masses
    with pytest.raises(TypeError, match="missing"):
        launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=flat)
    with pytest.raises(TypeError, match="undeclared"):
        launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=flat, fieldWidth=1, other=1)
    with pytest.raises(TypeError, match="TENSOR"):
        launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=1.0, fieldWidth=1)
    with pytest.raises(TypeError, match="SCALAR"):
        launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=flat, fieldWidth=flat)
    with pytest.raises(NotImplementedError, match="FORWARD"):
        launchOperator(DENSITY_SPEC, SPHContext(q, props(), dom, mode=ExecutionMode.FORWARD))
    out = launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=flat, fieldWidth=1)
    torch.testing.assert_close(out, warpOperation(q, props(WarpOperation.Interpolate), dom,
                                                  queryValues=flat), rtol=0, atol=0)


def test_output_spec_literal_and_resolver(device):
    import warp as wp

    q, dom = _state(device)
    literal = OperatorSpec(kernel=DENSITY_SPEC.kernel, outputs=(OutputSpec(wp.float64),))
    a = launchOperator(literal, SPHContext(q, props(), dom))
    b = launchOperator(DENSITY_SPEC, SPHContext(q, props(), dom))
    assert torch.equal(a, b)


def test_warp_wrapper2_matches_launch_operator(device):
    q, dom = _state(device)
    vol = torch.full((6,), 0.2, dtype=F64, device=device)
    f = torch.arange(12, dtype=F64, device=device)
    state = (q, props(WarpOperation.Interpolate), dom, vol, vol, None, None, None, None, None)
    a = warpWrapper2(INTERPOLATE_SPEC.kernel, state, (f, 2), outputShape=(12,))
    ctx = SPHContext(q, props(WarpOperation.Interpolate), dom,
                     corrections=Corrections(volumes=(vol, vol)))
    b = launchOperator(INTERPOLATE_SPEC, ctx, referenceValues=f, fieldWidth=2)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="10"):
        warpWrapper2(DENSITY_SPEC.kernel, state[:9])


def test_inert_pruning(device, monkeypatch):
    q, dom = _state(device)
    seen = []
    real = StateAwareWarpFunction.apply

    def spy(*args):
        seen.append(args[6:])
        return real(*args)

    monkeypatch.setattr(StateAwareWarpFunction, "apply", spy)
    warpOperation(q, props(), dom)
    assert all(isinstance(t, Field) for t in seen[-1])  # no-grad: only Fields reach apply
    pos = q.positions.clone().requires_grad_()
    p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
    out = warpOperation(p, props(), dom)
    tensors = [t for t in seen[-1] if isinstance(t, torch.Tensor)]
    assert sum(t is pos for t in tensors) == 2  # both roles tracked (aliased)
    assert sum(t is q.kinds for t in tensors) == 2  # kinds never pruned when tracking
    assert not any(t is q.masses for t in tensors)  # inert masses pruned
    out.sum().backward()
    assert pos.grad is not None


def test_null_sentinel_fill_is_never_read(device, monkeypatch):
    """With NaN/INT32_MIN placeholders, results are unchanged: disabled slots are not read."""
    q, dom = _state(device)
    f = torch.linspace(0, 1, 6, dtype=F64, device=device)
    a = warpOperation(q, props(WarpOperation.Interpolate), dom, queryValues=f)
    d0 = warpOperation(q, props(), dom, adjacency=neighbourStructure("csr", q, dom))
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", "sentinel")
    b = warpOperation(q, props(WarpOperation.Interpolate), dom, queryValues=f)
    d1 = warpOperation(q, props(), dom, adjacency=neighbourStructure("csr", q, dom))
    assert torch.equal(a, b) and torch.equal(d0, d1)
    assert torch.isfinite(b).all()


def test_as_scalar_arg():
    t = asScalarArg(2.5, "cpu", torch.float64)
    assert t.shape == (1,) and t.dtype == torch.float64 and t.item() == 2.5
    x = torch.tensor(3.0, requires_grad=True)
    y = asScalarArg(x)
    assert y.shape == (1,) and y.requires_grad
    with pytest.raises(ValueError):
        asScalarArg(torch.ones(2))
    with pytest.raises(TypeError):
        asScalarArg("a")


def test_jvp_closure_sees_absolute_slots(device):
    """With pruning, the jvp closure still receives 36 (+ extras) tangents and a full-length
    live mask (pruned = inert = not live)."""
    import torch.autograd.forward_ad as fwAD

    q, dom = _state(device)
    captured = {}

    def jvp_fn(ctx, flat):
        captured["n"] = len(flat)
        captured["mask"] = list(ctx.live_mask)
        return torch.zeros(6, dtype=F64, device=device)

    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, torch.ones_like(q.positions))
        p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
        state = (p, props(), dom, None, None, None, None, None, None, None)
        out = warpWrapper2(DENSITY_SPEC.kernel, state, jvp_fn=jvp_fn)
        tangent = fwAD.unpack_dual(out).tangent
    assert captured["n"] == STATE_SIZE
    assert captured["mask"][0] and captured["mask"][1] and not any(captured["mask"][2:])
    assert torch.equal(tangent, torch.zeros_like(tangent))


def test_dual_tensors_reach_the_geometry_jvp(device):
    """A dual position tensor through warpOperation gives the explicit JVP exactly."""
    import torch.autograd.forward_ad as fwAD

    from warpSPHCore import ParticleTangentState
    from warpSPHCore.operations import warpOperationJVP

    q, dom = _state(device)
    # not a rigid translation (which leaves every density unchanged)
    v = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(3),
                    dtype=q.positions.dtype).to(device)
    with fwAD.dual_level():
        pos = fwAD.make_dual(q.positions, v)
        p = ParticleState(pos, q.supports, q.masses, q.kinds, q.densities)
        tangent = fwAD.unpack_dual(warpOperation(p, props(), dom)).tangent
    explicit = warpOperationJVP(q, props(), dom,
                                queryTangentState=ParticleTangentState(positions=v))
    assert torch.equal(tangent, explicit)
    assert float(explicit.abs().max()) > 0


def test_device_mismatch_raises(device):
    q, dom = _state(device)
    with pytest.raises(ValueError, match="must be on"):
        warpOperation(q, props(WarpOperation.Interpolate), dom,
                      queryValues=torch.ones(6, dtype=F64, device="meta"))


def test_jvp_specs_name_the_value_extras():
    """`JVPSpec` per operator: the value operators name their values
    extra (one flat ``[N_q F | N_r F]`` array for Gradient, Divergence, Curl and Laplacian,
    the reference values for Interpolate), Density and Covariance none; every one has its
    Tier-2 kernel."""
    from warpSPHCore import WarpOperation as W
    from warpSPHCore.autograd.operator_spec import ExtraKind
    from warpSPHCore.operators import operatorEntry

    for op in (W.Density, W.Interpolate, W.Gradient, W.Divergence, W.Curl, W.Laplacian,
               W.Covariance):
        spec = operatorEntry(op).spec
        j = spec.jvp
        assert j is not None and j.geometryKernel is not None, op.name
        tensors = {e.name for e in spec.extras if e.kind == ExtraKind.TENSOR}
        if op in (W.Density, W.Covariance):
            assert (j.queryValueExtra, j.referenceValueExtra) == (None, None), op.name
        elif op == W.Interpolate:
            assert (j.queryValueExtra, j.referenceValueExtra) == (None, "referenceValues")
        else:
            assert j.queryValueExtra == j.referenceValueExtra == "values", op.name
        for name in (j.queryValueExtra, j.referenceValueExtra):
            assert name is None or name in tensors, (op.name, name)
