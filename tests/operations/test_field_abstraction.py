"""Field registry: the identity-keyed torch -> Warp view cache."""

from __future__ import annotations

import copy
import gc
import io
import pickle
import weakref

import numpy as np
import pytest
import torch
import warp as wp

from warpSPHCore.autograd import castTorchToWarp, castTorchToWarpAsBuiltins, getCachedWarpArray
from warpSPHCore.util.fieldRegistry import FIELD_ATTR, Field, Role, acquireView

try:
    from ._bridge_toys import makeProblem, toyApply
except ImportError:
    from _bridge_toys import makeProblem, toyApply


@pytest.fixture(autouse=True)
def _cacheOn(monkeypatch):
    monkeypatch.delenv("WARPSPHCORE_DISABLE_FIELD_CACHE", raising=False)
    monkeypatch.delenv("WARPSPHCORE_FIELD_CACHE_GRAD", raising=False)


def _np(view):
    return wp.to_torch(view).detach().cpu().numpy() if view.device.is_cuda else view.numpy()


def test_same_object_same_view(device, dtype):
    t = torch.arange(6, dtype=dtype, device=device)
    v1 = acquireView(t)
    v2 = acquireView(t)
    assert v1 is v2
    assert getCachedWarpArray(t) is v1
    assert isinstance(getattr(t, FIELD_ATTR), Field)
    assert v1.ptr == t.data_ptr() and v1.shape == (6,)
    assert v1.dtype == (wp.float32 if dtype == torch.float32 else wp.float64)
    # roles and explicit dtypes are cached separately
    assert acquireView(t, Role.TANGENT) is not v1
    assert acquireView(t, Role.TANGENT) is acquireView(t, Role.TANGENT)


def test_grad_view_is_separate_and_persistent(device):
    t = torch.ones(4, dtype=torch.float64, device=device)
    plain = acquireView(t)
    g1 = acquireView(t, requires_grad=True)
    assert plain.grad is None and not plain.requires_grad
    assert g1 is not plain and g1.requires_grad and g1.grad is not None
    assert acquireView(t, requires_grad=True) is g1
    # the gradient buffer is allocated by torch and never aliases the tensor
    assert g1.grad.ptr != t.data_ptr()
    # integer tensors never get a gradient buffer
    i = torch.arange(3, dtype=torch.int32, device=device)
    assert acquireView(i, requires_grad=True).grad is None


def test_detach_defeats_caching_by_design(device):
    t = torch.arange(5, dtype=torch.float64, device=device)
    a = acquireView(t.detach())
    b = acquireView(t.detach())
    assert a is not b  # detach() returns a new object every call
    assert not hasattr(t, FIELD_ATTR)
    assert a.ptr == b.ptr == t.data_ptr()


def test_inplace_writes_visible(device):
    t = torch.zeros(4, 2, dtype=torch.float64, device=device)
    v = acquireView(t)
    t.add_(3.0)
    t[1, 0] = -1.0
    assert acquireView(t) is v
    np.testing.assert_array_equal(_np(v), t.cpu().numpy())


def test_non_contiguous_never_cached(device):
    base = torch.arange(12, dtype=torch.float64, device=device).reshape(4, 3)
    col = base[:, 1]
    assert not col.is_contiguous()
    v1 = acquireView(col)
    v2 = acquireView(col)
    assert v1 is not v2
    assert not hasattr(col, FIELD_ATTR)
    np.testing.assert_array_equal(_np(v1), col.cpu().numpy())
    base.mul_(2.0)  # a cached copy would now be stale
    np.testing.assert_array_equal(_np(acquireView(col)), col.cpu().numpy())


def test_degenerate_strides_1d(device):
    # torch.vstack([...]).mT in 1D: contiguous by torch's rules, rejected by from_torch
    x = torch.vstack([torch.linspace(0, 1, 5, dtype=torch.float64, device=device)]).mT
    assert x.shape == (5, 1) and x.stride() != (1, 1)
    v = acquireView(x)
    assert v.shape == (5,) and wp.types.types_equal(v.dtype, wp.types.vector(1, wp.float64))
    assert not hasattr(x, FIELD_ATTR)
    np.testing.assert_array_equal(_np(v).reshape(5, 1), x.cpu().numpy())


@pytest.mark.parametrize("shape", [(0,), (0, 3), (0, 2, 2)])
def test_empty_tensors_canonical(device, shape):
    t = torch.empty(tuple(reversed(shape)), dtype=torch.float64, device=device).permute(
        *reversed(range(len(shape))))
    assert t.shape == shape
    v = acquireView(t)
    assert v.shape == (0,)
    assert not hasattr(t, FIELD_ATTR)
    g = acquireView(t, requires_grad=True)
    assert g.grad is not None and g.grad.shape == (0,)


def test_dtype_mapping():
    f = torch.float32
    cases = [
        (torch.zeros(3, dtype=f), wp.float32, (3,)),
        (torch.zeros(3, 2, dtype=torch.float64), wp.types.vector(2, wp.float64), (3,)),
        (torch.zeros(3, 2, 2, dtype=f), wp.types.matrix((2, 2), wp.float32), (3,)),
        (torch.zeros(3, dtype=torch.int32), wp.int32, (3,)),
        (torch.zeros(3, dtype=torch.int64), wp.int64, (3,)),
        (torch.zeros(3, dtype=torch.bool), wp.bool, (3,)),
        (torch.zeros(3, 2, dtype=torch.int32), wp.vec2i, (3,)),
        (torch.zeros(3, 3, dtype=torch.int32), wp.vec3i, (3,)),
        (torch.zeros(3, 3, dtype=torch.int64), wp.vec3l, (3,)),
        (torch.zeros(3, 4, dtype=torch.int32), wp.int32, (3, 4)),
    ]
    for t, wdtype, wshape in cases:
        for v in (acquireView(t), castTorchToWarpAsBuiltins(t)):
            assert wp.types.types_equal(v.dtype, wdtype), (t.shape, t.dtype, v.dtype)
            assert v.shape == wshape
    # explicit dtype: a plain view of an index table
    t = torch.zeros(3, 3, dtype=torch.int64)
    assert acquireView(t, dtype=wp.int64).shape == (3, 3)
    assert castTorchToWarp(t).shape == (3, 3)
    with pytest.raises(TypeError, match="rank 4"):
        castTorchToWarpAsBuiltins(torch.zeros(2, 2, 2, 2))


def test_copy_deepcopy_pickle_degrade(device):
    t = torch.arange(4, dtype=torch.float64, device=device)
    v = acquireView(t)
    f = getattr(t, FIELD_ATTR)
    assert copy.copy(f) is None and copy.deepcopy(f) is None
    d = copy.deepcopy(t)
    assert getattr(d, FIELD_ATTR, None) is None
    assert acquireView(d) is not v
    c = copy.copy(t)  # shares storage and, shallowly, the attribute dict entry
    assert acquireView(c) is not v  # provenance includes the owner's identity
    assert acquireView(t) is v
    assert t.clone().__dict__.get(FIELD_ATTR) is None
    buf = io.BytesIO()
    torch.save(t, buf)
    for weightsOnly in (True, False):
        buf.seek(0)
        r = torch.load(buf, weights_only=weightsOnly)
        assert not isinstance(getattr(r, FIELD_ATTR, None), Field)
        torch.testing.assert_close(r, t)
        assert acquireView(r).ptr == r.data_ptr()
    p = pickle.loads(pickle.dumps(t.cpu()))
    assert not isinstance(getattr(p, FIELD_ATTR, None), Field)


def test_provenance_rebuilds_after_storage_swap(device):
    t = torch.zeros(4, dtype=torch.float64, device=device)
    v = acquireView(t)
    t.data = torch.ones(6, dtype=torch.float64, device=device)
    v2 = acquireView(t)
    assert v2 is not v and v2.shape == (6,) and v2.ptr == t.data_ptr()


def test_tensors_die_by_refcount(device):
    gc.collect()
    gc.disable()
    try:
        t = torch.ones(5, dtype=torch.float64, device=device)
        acquireView(t)
        g = acquireView(t, requires_grad=True)
        rt, rg = weakref.ref(t), weakref.ref(g)
        del t, g
        assert rt() is None and rg() is None
        # a bridged call with grad: neither input nor output is kept alive by a cycle
        off, nbr, w, x, y = makeProblem(device=device)
        x.requires_grad_()
        out = toyApply(off, nbr, w, x, y)
        assert not hasattr(out, "_warp_array")  # courier attribute deleted
        out.sum().backward()
        rx, ro = weakref.ref(x), weakref.ref(out)
        del out
        assert ro() is None
        del x
        assert rx() is None
    finally:
        gc.enable()


def test_disable_gate(monkeypatch, device):
    monkeypatch.setenv("WARPSPHCORE_DISABLE_FIELD_CACHE", "1")
    t = torch.ones(3, dtype=torch.float64, device=device)
    assert acquireView(t) is not acquireView(t)
    assert not hasattr(t, FIELD_ATTR)
    monkeypatch.setenv("WARPSPHCORE_DISABLE_FIELD_CACHE", "0")
    assert acquireView(t) is acquireView(t)


def test_uncached_conversion_uses_detached_tensor(device):
    # W21: a fresh view is built from t.detach(), never the graph-carrying tensor
    t = torch.ones(3, dtype=torch.float64, device=device, requires_grad=True)
    v = getCachedWarpArray(t, use_cache=False)
    assert not v._tensor.requires_grad and v._tensor is not t
    assert v.requires_grad and v.grad is not None  # view mirrors t.requires_grad
    assert t.grad is None  # the caller's .grad is never touched
