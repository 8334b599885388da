"""Null fields: permanent, never-differentiable placeholders of disabled slots.

The 36-slot wiring through `extractStateInfo` is tested with the operators; here the
registry itself and its behaviour inside the bridge are pinned with a toy kernel.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import warp as wp

from warpSPHCore.autograd import getCachedWarpArray
from warpSPHCore.util.fieldRegistry import (
    Field,
    FieldKind,
    clearNullFieldRegistry,
    nullField,
)

try:
    from ._bridge_toys import makeProblem, reference, toyOptionalApply
except ImportError:
    from _bridge_toys import makeProblem, reference, toyOptionalApply

INT32_MIN = -(2**31)

_EXPECT = {
    FieldKind.SCALAR: (lambda d: (1,), None),
    FieldKind.VECTOR: (lambda d: (1, d), "vec"),
    FieldKind.MATRIX: (lambda d: (1, d, d), "mat"),
    FieldKind.INT32: (lambda d: (1,), wp.int32),
    FieldKind.INT64: (lambda d: (1,), wp.int64),
    FieldKind.BOOL: (lambda d: (1,), wp.bool),
    FieldKind.VEC2I: (lambda d: (1, 2), wp.vec2i),
    FieldKind.VEC3I: (lambda d: (1, 3), wp.vec3i),
    FieldKind.VEC3L: (lambda d: (1, 3), wp.vec3l),
}


@pytest.fixture(autouse=True)
def _zerosMode(monkeypatch):
    monkeypatch.delenv("WARPSPHCORE_NULL_FILL", raising=False)


def _values(f: Field) -> np.ndarray:
    return f.tensor.detach().cpu().numpy()


def test_enum_values():
    assert [(k.name, int(k)) for k in FieldKind] == [
        ("SCALAR", 0), ("VECTOR", 1), ("MATRIX", 2), ("INT32", 3), ("INT64", 4),
        ("VEC2I", 5), ("VEC3I", 6), ("VEC3L", 7), ("BOOL", 8)]


@pytest.mark.parametrize("kind", list(FieldKind), ids=lambda k: k.name)
def test_shapes_dtypes_and_permanence(kind, device, dtype, dim):
    f = nullField(kind, dim, device, dtype)
    shapeOf, wdt = _EXPECT[kind]
    assert isinstance(f, Field)
    assert tuple(f.tensor.shape) == shapeOf(dim)
    assert f.tensor.device == torch.device(device)
    v = f.array
    assert v.shape == (1,)
    scalar = wp.float32 if dtype == torch.float32 else wp.float64
    if wdt is None:
        assert v.dtype == scalar and f.tensor.dtype == dtype
    elif wdt == "vec":
        assert wp.types.types_equal(v.dtype, wp.types.vector(dim, scalar))
    elif wdt == "mat":
        assert wp.types.types_equal(v.dtype, wp.types.matrix((dim, dim), scalar))
    else:
        assert wp.types.types_equal(v.dtype, wdt)
    # never differentiable, never re-converted
    assert not v.requires_grad and v.grad is None
    assert nullField(kind, dim, device, dtype) is f
    assert getCachedWarpArray(f) is v
    assert not np.any(_values(f))  # zeros by default


def test_registry_keys():
    a = nullField(FieldKind.SCALAR, 2, "cpu", torch.float32)
    assert nullField(FieldKind.SCALAR, 2, "cpu", torch.float64) is not a
    assert nullField(FieldKind.SCALAR, 2, "cpu", torch.float32, tangent=True) is not a
    assert nullField(FieldKind.VECTOR, 2, "cpu", torch.float32) is not nullField(
        FieldKind.VECTOR, 3, "cpu", torch.float32)
    # integer kinds ignore the float dtype
    assert nullField(FieldKind.INT32, 2, "cpu", torch.float64) is nullField(
        FieldKind.INT32, 2, "cpu", torch.float32)
    clearNullFieldRegistry()
    b = nullField(FieldKind.SCALAR, 2, "cpu", torch.float32)
    assert b is not a and nullField(FieldKind.SCALAR, 2, "cpu", torch.float32) is b
    with pytest.raises(TypeError):
        nullField(FieldKind.SCALAR, 2, "cpu", torch.int32)


def test_sentinel_fill(monkeypatch, device):
    zeros = nullField(FieldKind.SCALAR, 2, device, torch.float64)
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", "sentinel")
    s = nullField(FieldKind.SCALAR, 2, device, torch.float64)
    assert s is not zeros  # the registry is keyed by fill mode
    assert np.isnan(_values(s)).all()
    assert np.isnan(_values(nullField(FieldKind.MATRIX, 3, device, torch.float32))).all()
    for kind in (FieldKind.INT32, FieldKind.INT64, FieldKind.VEC2I, FieldKind.VEC3I,
                 FieldKind.VEC3L):
        assert (_values(nullField(kind, 2, device)) == INT32_MIN).all(), kind
    assert not _values(nullField(FieldKind.BOOL, 2, device)).any()
    # tangent placeholders are always zero
    t = nullField(FieldKind.VECTOR, 2, device, torch.float64, tangent=True)
    assert not np.any(_values(t))
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", "zeros")
    assert nullField(FieldKind.SCALAR, 2, device, torch.float64) is zeros
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", "garbage")
    with pytest.raises(ValueError, match="WARPSPHCORE_NULL_FILL"):
        nullField(FieldKind.SCALAR, 2, device, torch.float64)


def test_null_field_copies_degrade():
    f = nullField(FieldKind.SCALAR, 1, "cpu", torch.float64)
    assert copy.copy(f) is None and copy.deepcopy(f) is None
    assert copy.deepcopy({"slot": f})["slot"] is None


@pytest.mark.parametrize("fill", ["zeros", "sentinel"])
def test_bridge_gated_null_slot(monkeypatch, device, fill):
    """A disabled slot travels as a Field, is never read (sentinel mode stays finite),
    reports no gradient, and never acquires a gradient buffer."""
    monkeypatch.setenv("WARPSPHCORE_NULL_FILL", fill)
    off, nbr, w, x, y = makeProblem(device=device)
    f = nullField(FieldKind.SCALAR, 1, device, torch.float64)
    w.requires_grad_()
    x.requires_grad_()
    out = toyOptionalApply(off, nbr, w, x, f)
    ones = torch.ones_like(y)
    torch.testing.assert_close(out, reference(off, nbr, w, x, ones), rtol=1e-12, atol=1e-12)
    gw, gx = torch.autograd.grad(out.sum(), (w, x))
    rw, rx = torch.autograd.grad(reference(off, nbr, w, x, ones).sum(), (w, x))
    torch.testing.assert_close(gw, rw, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)
    assert f.array.grad is None and not f.array.requires_grad
    assert nullField(FieldKind.SCALAR, 1, device, torch.float64) is f


def test_dummy_and_identity_caches(device, dtype):
    from warpSPHCore.autograd import getCachedDummyTensor, getCachedIdentityMatrices

    a = getCachedDummyTensor((1, 3), dtype, device)
    assert getCachedDummyTensor((1, 3), dtype, device) is a
    assert a.shape == (1, 3) and a.dtype == dtype and not a.any()
    assert getCachedDummyTensor((1, 3), dtype, device, 2.0) is not a
    assert (getCachedDummyTensor(2, dtype, device, 2.0) == 2.0).all()
    other = torch.float64 if dtype == torch.float32 else torch.float32
    assert getCachedDummyTensor((1, 3), other, device) is not a
    for n, d in ((1, 2), (3, 3)):
        eye = getCachedIdentityMatrices(n, d, dtype, device)
        assert getCachedIdentityMatrices(n, d, dtype, device) is eye
        assert eye.shape == (n, d, d) and eye.dtype == dtype and eye.is_contiguous()
        torch.testing.assert_close(eye, torch.eye(d, dtype=dtype, device=device).expand(n, d, d))
