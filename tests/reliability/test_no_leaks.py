"""No leaks, bounded caches (issue "Reliability").

The view cache (attached `Field`s), the null-field registry, the dummy caches, the
StateBundle structs and the launcher memo tables must hold no strong reference that keeps
a caller's tensor alive, and none of them may grow with the number of calls:

* no-grad calls: every input tensor is freed by **refcount alone** (the cyclic collector is
  disabled during the loop), immediately after the caller drops it;
* grad-requiring calls with backward and forward-mode dual calls: the same, and gradients /
  tangents are bitwise identical from call to call (no accumulation through cached views);
* every registry and memo table has the same size after a warm-up and at the end of the
  loop, and the number of live ``torch.Tensor`` / ``wp.array`` / `Field` objects does not
  grow.

Self-contained: small local helpers instead of ``tests/operations/sph_reference.py``.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import warp as wp
from torch.multiprocessing.reductions import StorageWeakRef

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    radiusSearchCompactHashMap,
)
from warpSPHCore.autograd import cache as viewCache
from warpSPHCore.autograd import launcher
from warpSPHCore.neighborhood import hashLength
from warpSPHCore.operations import warpOperation
from warpSPHCore.util import fieldRegistry, stateBundle
from warpSPHCore.util.fieldRegistry import FIELD_ATTR, Field

N = 16
D = 2
KERNEL = KernelFunctions.Wendland2
DENSITY = OperationProperties(KERNEL, operation=WarpOperation.Density)
GRADIENT = OperationProperties(KERNEL, operation=WarpOperation.Gradient)

#: calls of the long no-grad loop (the issue's 10,000; ~5 s on 2 CPU cores)
NOGRAD_CALLS = 10_000
GRAD_CALLS = 1_000
DUAL_CALLS = 100


class Problem:
    """A fixed N = 16 cloud in [-1, 1]^2 with a prebuilt CSR adjacency."""

    def __init__(self, device, dtype, seed=0):
        gen = torch.Generator().manual_seed(seed)
        cast = dict(dtype=dtype, device=device)
        self.device, self.dtype = device, dtype
        self.pos = (2 * torch.rand(N, D, generator=gen, dtype=torch.float64) - 1).to(**cast)
        self.h = torch.full((N,), 0.9, **cast)
        self.m = (0.5 + torch.rand(N, generator=gen, dtype=torch.float64)).to(**cast)
        self.rho = (0.8 + 0.4 * torch.rand(N, generator=gen, dtype=torch.float64)).to(**cast)
        self.f = torch.rand(N, generator=gen, dtype=torch.float64).to(**cast)
        self.k = torch.zeros(N, dtype=torch.int32, device=device)
        self.domain = DomainDescription(torch.full((D,), -1.0, **cast),
                                        torch.full((D,), 1.0, **cast), [False] * D)
        self.adj = radiusSearchCompactHashMap(ParticleState(self.pos, self.h, self.m, self.k),
                                              self.domain, mode=SupportScheme.SuperSymmetric)

    def density(self, pos, masses):
        return warpOperation(ParticleState(pos, self.h, masses, self.k), DENSITY, self.domain,
                             adjacency=self.adj)

    def gradient(self, pos, values, densities):
        return warpOperation(ParticleState(pos, self.h, self.m, self.k, densities), GRADIENT,
                             self.domain, queryValues=values, adjacency=self.adj)


def _liveCount(cls) -> int:
    # issubclass(type(o)) instead of isinstance: no __class__ lookups on lazy module proxies
    return sum(1 for o in gc.get_objects() if issubclass(type(o), cls))


def registrySizes() -> dict:
    """Size of every process-wide cache, registry and memo table of the bridge."""
    bundles = stateBundle._BUNDLES
    return {
        "nullFields": len(fieldRegistry._NULL_FIELDS),
        "dummies": len(viewCache._DUMMIES),
        "identities": len(viewCache._IDENTITIES),
        "bundles": len(bundles),
        "bundleStructs": sum(len(b) for b in bundles.values()),
        "bundleMisses": sum(b.misses for b in bundles.values()),
        "streams": len(launcher._STREAMS),
        "asBuiltinsMemo": launcher._asBuiltins.cache_info().currsize,
        "resolveOutputMemo": launcher._resolveOutput.cache_info().currsize,
        "hashLengthMemo": sum(
            f.cache_info().currsize for f in vars(hashLength).values()
            if hasattr(f, "cache_info")),
    }


def liveObjects() -> dict:
    gc.collect()
    return {"tensors": _liveCount(torch.Tensor), "warpArrays": _liveCount(wp.array),
            "fields": _liveCount(Field)}


def _bundleHits() -> int:
    return sum(b.hits for b in stateBundle._BUNDLES.values())


@pytest.fixture
def cachesOn(monkeypatch):
    """Every caching layer in its default (enabled) state."""
    for name in ("WARPSPHCORE_DISABLE_FIELD_CACHE", "WARPSPHCORE_DISABLE_BUNDLE",
                 "WARPSPHCORE_FIELD_CACHE_GRAD", "WARPSPHCORE_NULL_FILL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def noCycleCollector():
    """Disable the cyclic GC so that anything freed is freed by refcount alone."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _assertBounded(before: dict, after: dict, objBefore: dict, objAfter: dict, slack=0):
    assert after == before, f"a cache/registry grew with the number of calls: {before} -> {after}"
    for key in objBefore:
        assert objAfter[key] <= objBefore[key] + slack, (
            f"live {key} grew with the number of calls: {objBefore} -> {objAfter}")


def test_no_grad_calls_free_inputs_by_refcount(device, cachesOn, noCycleCollector):
    """NOGRAD_CALLS no-grad Density / Gradient calls in float32 and float64, fresh inputs
    every iteration: each is freed by refcount alone, the caches stay bounded."""
    problems = [Problem(device, torch.float64), Problem(device, torch.float32, seed=1)]

    def one(i):
        pb = problems[(i // 2) % 2]
        pos, masses = pb.pos.clone(), pb.m.clone()
        values, rho = pb.f.clone(), pb.rho.clone()
        with torch.no_grad():
            if i % 2 == 0:
                out = pb.density(pos, masses)
            else:
                out = pb.gradient(pos, values, rho)
        # the view cache was used: the Field lives on the caller's tensor
        assert isinstance(getattr(pos, FIELD_ATTR, None), Field)
        refs = [weakref.ref(t) for t in (pos, masses, values, rho, out)]
        storage = StorageWeakRef(pos.untyped_storage())
        del pos, masses, values, rho, out
        return refs, storage

    for i in range(8):  # warm-up: every (operator, dtype) pair, every cache entry created
        one(i)
    sizes0, objs0, hits0 = registrySizes(), liveObjects(), _bundleHits()
    lastStorage = {}
    for i in range(NOGRAD_CALLS):
        refs, storage = one(i)
        alive = [k for k, r in enumerate(refs) if r() is not None]
        assert not alive, f"call {i}: inputs {alive} survived their last reference"
        # the StateBundle keeps at most the latest call's arrays per (d, dtype): the storage
        # of the previous call with this dtype must be gone now
        key = (i // 2) % 2
        prev = lastStorage.get(key)
        assert prev is None or prev.expired(), (
            f"call {i}: the previous call's storage is still alive")
        lastStorage[key] = storage
    sizes1, objs1 = registrySizes(), liveObjects()
    # the bundle really was reused (the loop exercised the persistent-struct path)
    assert _bundleHits() - hits0 >= NOGRAD_CALLS * 7
    _assertBounded(sizes0, sizes1, objs0, objs1)


def test_bundle_retains_only_the_latest_call(device, cachesOn, noCycleCollector):
    """The StateBundle holds the latest no-grad call's arrays (bounded retention), and
    releases them when the next call replaces them or the bundles are cleared."""
    pb = Problem(device, torch.float64)
    with torch.no_grad():
        pb.density(pb.pos.clone(), pb.m.clone())
    storages = []
    for _ in range(3):
        pos = pb.pos.clone()
        with torch.no_grad():
            out = pb.density(pos, pb.m)
        storages.append(StorageWeakRef(pos.untyped_storage()))
        del pos, out
    assert storages[0].expired() and storages[1].expired()
    stateBundle.clearStateBundles()
    assert storages[2].expired(), "clearStateBundles() did not release the last arrays"


def test_grad_calls_with_backward_free_inputs(device, cachesOn, noCycleCollector):
    """GRAD_CALLS grad-requiring calls + backward (Density w.r.t. positions and masses,
    Gradient w.r.t. positions and values): freed by refcount alone, gradients bitwise
    identical every call (no accumulation through cached views), caches bounded."""
    pb = Problem(device, torch.float64)

    def one(i):
        pos = pb.pos.clone().requires_grad_()
        if i % 2 == 0:
            second = pb.m.clone().requires_grad_()
            out = pb.density(pos, second)
        else:
            second = pb.f.clone().requires_grad_()
            out = pb.gradient(pos, second, pb.rho)
        out.sum().backward()
        grads = (pos.grad, second.grad)
        refs = [weakref.ref(t) for t in (pos, second, out, *grads)]
        del pos, second, out
        return grads, refs

    expected = [one(0)[0], one(1)[0]]
    for i in range(2, 8):
        one(i)
    sizes0, objs0 = registrySizes(), liveObjects()
    for i in range(GRAD_CALLS):
        grads, refs = one(i)
        for g, e in zip(grads, expected[i % 2]):
            assert torch.equal(g, e), f"call {i}: gradient differs from the first call's"
        del grads, g, e
        alive = [k for k, r in enumerate(refs) if r() is not None]
        assert not alive, f"call {i}: objects {alive} (inputs, output, grads) survived"
    _assertBounded(sizes0, registrySizes(), objs0, liveObjects())


def test_forward_mode_dual_calls_free_inputs(device, cachesOn, noCycleCollector):
    """DUAL_CALLS forward-mode calls with dual positions: primal, tangent and output freed
    by refcount alone, tangents bitwise identical every call, caches bounded."""
    pb = Problem(device, torch.float64)
    gen = torch.Generator().manual_seed(7)
    v0 = torch.randn(N, D, generator=gen, dtype=torch.float64).to(device)

    def one(i):
        pos, v = pb.pos.clone(), v0.clone()
        with fwAD.dual_level():
            dual = fwAD.make_dual(pos, v)
            if i % 2 == 0:
                out = pb.density(dual, pb.m)
            else:
                out = pb.gradient(dual, pb.f, pb.rho)
            tangent = fwAD.unpack_dual(out).tangent.clone()
            refs = [weakref.ref(t) for t in (pos, v, dual, out)]
            del pos, v, dual, out
        return tangent, refs

    expected = [one(0)[0], one(1)[0]]
    assert all(e.abs().amax() > 0 for e in expected)
    for i in range(2, 6):
        one(i)
    sizes0, objs0 = registrySizes(), liveObjects()
    for i in range(DUAL_CALLS):
        tangent, refs = one(i)
        assert torch.equal(tangent, expected[i % 2]), f"call {i}: tangent differs"
        del tangent
        alive = [k for k, r in enumerate(refs) if r() is not None]
        assert not alive, f"call {i}: objects {alive} (primal, tangent, dual, out) survived"
    _assertBounded(sizes0, registrySizes(), objs0, liveObjects())


def test_gc_collect_frees_everything_after_mixed_loop(device, cachesOn):
    """With the cyclic collector enabled: a mixed no-grad / grad / dual loop whose inputs
    are only weakly referenced leaves none of them alive after `gc.collect()`."""
    pb = Problem(device, torch.float64)
    refs = []
    for i in range(300):
        pos, masses = pb.pos.clone(), pb.m.clone()
        kind = i % 3
        if kind == 0:
            with torch.no_grad():
                out = pb.density(pos, masses)
        elif kind == 1:
            pos.requires_grad_()
            out = pb.gradient(pos, pb.f, pb.rho)
            out.sum().backward()
        else:
            with fwAD.dual_level():
                out = pb.density(fwAD.make_dual(pos, torch.ones_like(pos)), masses)
        refs += [weakref.ref(pos), weakref.ref(masses), weakref.ref(out)]
        del pos, masses, out
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} of {len(refs)} weakly referenced tensors survived gc.collect()"
