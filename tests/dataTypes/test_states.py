"""Construction-time validation of the state dataclasses: every rejection names the field,
what was found and what is accepted; valid inputs are stored unchanged."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpSPHCore.dataTypes.corrections import (
    CRKState,
    CRKTangentState,
    GradHState,
    RenormalizationState,
    RenormalizationTangentState,
    asGradHState,
    asRenormalizationState,
)
from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.dataTypes.operationProperties import OperationProperties
from warpSPHCore.dataTypes.particleState import ParticleState, ParticleTangentState
from warpSPHCore.enumTypes import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    SupportScheme,
    WarpOperation,
)


def _particles(n=5, d=2, dtype=torch.float64, device="cpu"):
    return dict(
        positions=torch.zeros(n, d, dtype=dtype, device=device),
        supports=torch.ones(n, dtype=dtype, device=device),
        masses=torch.ones(n, dtype=dtype, device=device),
        kinds=torch.zeros(n, dtype=torch.int32, device=device),
    )


def test_particle_state_valid(device, dtype, dim):
    p = ParticleState(**_particles(4, dim, dtype, device), densities=torch.ones(4, dtype=dtype, device=device))
    assert p.numParticles == 4 and p.dim == dim
    assert p.positions.dtype == dtype


def test_particle_state_requires_kinds():
    args = _particles()
    del args["kinds"]
    with pytest.raises(TypeError):
        ParticleState(**args)
    with pytest.raises(TypeError, match="kinds is required"):
        ParticleState(**args, kinds=None)


@pytest.mark.parametrize(
    "field,value,exc,pattern",
    [
        ("positions", torch.zeros(5, 4, dtype=torch.float64), ValueError, r"positions.*\(5, 4\).*1, 2 or 3"),
        ("positions", torch.zeros(5, dtype=torch.float64), ValueError, r"positions.*\(5,\).*\[N, d\]"),
        ("positions", torch.zeros(5, 2, dtype=torch.float16), TypeError, r"positions.*float16.*float32 or torch.float64"),
        ("supports", torch.ones(4, dtype=torch.float64), ValueError, r"supports.*\(4,\).*N = 5"),
        ("supports", torch.ones(5, dtype=torch.float32), TypeError, r"supports.*float32.*share one dtype"),
        ("masses", [1.0] * 5, TypeError, r"masses must be a torch.Tensor"),
        ("kinds", torch.zeros(5, dtype=torch.int64), TypeError, r"kinds.*int64.*int32"),
        ("kinds", torch.zeros(6, dtype=torch.int32), ValueError, r"kinds.*\(6,\)"),
        ("positions", torch.zeros(2, 5, dtype=torch.float64).T, ValueError, r"positions is not contiguous"),
    ],
)
def test_particle_state_rejects(field, value, exc, pattern):
    args = _particles()
    args[field] = value
    with pytest.raises(exc, match=pattern):
        ParticleState(**args)


def test_particle_state_rejects_bad_densities():
    with pytest.raises(ValueError, match="densities"):
        ParticleState(**_particles(), densities=torch.ones(3, dtype=torch.float64))


def test_tangent_state_optional_fields(dtype):
    t = ParticleTangentState(positions=torch.zeros(3, 2, dtype=dtype))
    assert t.supports is None and t.masses is None and t.densities is None
    with pytest.raises(ValueError, match="supports"):
        ParticleTangentState(positions=torch.zeros(3, 2, dtype=dtype), supports=torch.zeros(2, dtype=dtype))


def test_domain(device, dtype, dim):
    lo = -torch.ones(dim, dtype=dtype, device=device)
    dom = DomainDescription(lo, -lo, [True] * dim)
    assert dom.dim == dim and dom.periodic.dtype == torch.bool and bool(dom.periodic.all())
    assert DomainDescription(lo, -lo).periodic.sum() == 0
    with pytest.raises(ValueError, match="dim=5"):
        DomainDescription(lo, -lo, None, 5)
    with pytest.raises(ValueError, match="periodic"):
        DomainDescription(lo, -lo, [True] * (dim + 1))
    with pytest.raises(TypeError, match="periodic has dtype"):
        DomainDescription(lo, -lo, torch.ones(dim, device=device))
    with pytest.raises(ValueError, match="max"):
        DomainDescription(lo, torch.ones(dim + 1, dtype=dtype, device=device))


def test_operation_properties_defaults_and_coercion():
    p = OperationProperties(KernelFunctions.Wendland2)
    assert p.operation == WarpOperation.Interpolate
    assert p.gradientMode == GradientScheme.Naive
    assert p.laplacianMode == LaplacianScheme.Brookshaw
    assert p.supportMode == SupportScheme.Gather
    assert p.operationMode == OperationDirection.AllToAll == 9
    assert p.positiveDivergence is False and p.divergenceDotMode is False
    assert p.n_h is None and p.calibrateNormalization is False
    q = OperationProperties(0, supportMode=14)
    assert q.kernel is KernelFunctions.Wendland2 and q.supportMode is SupportScheme.KernelMeanSymmetric
    hash(q)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.kernel = KernelFunctions.B7  # type: ignore[misc]
    r = dataclasses.replace(q, operation=WarpOperation.Gradient)
    assert q.operation == WarpOperation.Interpolate and r.operation == WarpOperation.Gradient


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(kernel=99), r"kernel=99 .*KernelFunctions.*Wendland2 \(0\)"),
        (dict(kernel=0, supportMode=10), r"supportMode=10"),
        (dict(kernel=0, gradientMode=0), r"gradientMode=0"),
        (dict(kernel=0, operationMode=15), r"operationMode=15"),
        (dict(kernel=0, calibrateNormalization=True), r"positive finite n_h"),
        (dict(kernel=0, calibrateNormalization=True, n_h=-1.0), r"n_h=-1.0"),
        (dict(kernel=0, calibrateNormalization=True, n_h=float("nan")), r"n_h=nan"),
        (dict(kernel=KernelFunctions.ViscosityKernel, calibrateNormalization=True, n_h=3.0), r"undefined for ViscosityKernel"),
        (dict(kernel=KernelFunctions.AdhesionKernel, calibrateNormalization=True, n_h=3.0), r"undefined for AdhesionKernel"),
    ],
)
def test_operation_properties_rejects(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        OperationProperties(**kwargs)


def test_operation_properties_rejects_non_bool_flag():
    with pytest.raises(TypeError, match="positiveDivergence"):
        OperationProperties(0, positiveDivergence=1)


def test_calibration_accepts_positive_n_h():
    p = OperationProperties(KernelFunctions.HOCT4, n_h=3, calibrateNormalization=True)
    assert p.n_h == 3.0 and isinstance(p.n_h, float)


def test_crk_states(dtype, dim):
    n = 4
    A = torch.ones(n, dtype=dtype)
    B = torch.zeros(n, dim, dtype=dtype)
    gA = torch.zeros(n, dim, dtype=dtype)
    gB = torch.zeros(n, dim, dim, dtype=dtype)
    CRKState(A, B, gA, gB)
    CRKState(A, B)  # gradients optional (Interpolate only)
    CRKTangentState(A, B, gA, gB)
    with pytest.raises(TypeError, match="gradA is required"):
        CRKTangentState(A, B, None, gB)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gradB"):
        CRKState(A, B, gA, torch.zeros(n, dim, dim + 1, dtype=dtype))
    with pytest.raises(ValueError, match="B has shape"):
        CRKState(A, torch.zeros(n + 1, dim, dtype=dtype))


def test_gradh_and_renorm_states(dtype):
    q = torch.ones(3, dtype=dtype)
    r = torch.ones(5, dtype=dtype)
    assert asGradHState(q).referenceOmegas is None
    s = asGradHState((q, r))
    assert s.queryOmegas is q and s.referenceOmegas is r
    with pytest.raises(TypeError, match="gradHState"):
        asGradHState([q, r])
    other = torch.float32 if dtype == torch.float64 else torch.float64
    with pytest.raises(TypeError, match="referenceOmegas"):
        GradHState(q, r.to(other))
    L = torch.eye(2, dtype=dtype).repeat(3, 1, 1)
    assert asRenormalizationState(L).renormalizationMatrices is L
    RenormalizationTangentState(L)
    with pytest.raises(ValueError, match="renormalizationMatrices"):
        RenormalizationState(torch.zeros(3, 2, 3, dtype=dtype))
