"""Invalid inputs: value errors through the single readback, host-side validation, the
edge-count overflow check."""

from __future__ import annotations

import math

import pytest
import torch

import warpSPHCore.neighborhood.search as searchModule
from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import (
    buildCompactHashMap,
    filterVerletList,
    radiusSearchCompactHashMap,
    radiusSearchCompactHashMap_,
)
from warpSPHCore.neighborhood import flags as F

from .census import census
from .helpers import domain, particles, randomCloud


def _search(q, hq, dom, r=None, hr=None, mode=SupportScheme.Gather):
    ref = None if r is None else particles(r, hr)
    return radiusSearchCompactHashMap(particles(q, hq), dom, mode=mode, referenceParticles=ref)


def _raises(match, *args, **kwargs):
    """Raise through exactly one readback."""
    with census() as c, pytest.raises(ValueError, match=match) as info:
        _search(*args, **kwargs)
    assert c.total == 1, c.sites
    return str(info.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_positions(device, dtype, bad):
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    q, hq = randomCloud(20, 2, device, dtype, seed=1)
    r, hr = randomCloud(30, 2, device, dtype, seed=2)
    badQ = q.clone()
    badQ[3, 1] = bad
    msg = _raises("non-finite", badQ, hq, dom, r, hr)
    assert "query set" in msg and "reference" not in msg.split("contains")[0]
    badR = r.clone()
    badR[7, 0] = bad
    msg = _raises("non-finite", q, hq, dom, badR, hr)
    assert "reference set" in msg
    msg = _raises("non-finite", badQ, hq, dom)  # aliased
    assert "query = reference" in msg


@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf], ids=["zero", "neg", "nan", "inf"])
def test_invalid_supports(device, dtype, bad):
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    q, hq = randomCloud(20, 2, device, dtype, seed=1)
    r, hr = randomCloud(30, 2, device, dtype, seed=2)
    badH = hr.clone()
    badH[4] = bad
    for mode in (SupportScheme.Gather, SupportScheme.Scatter):
        msg = _raises("invalid supports", q, hq, dom, r, badH, mode=mode)
        assert "reference set" in msg


def test_degenerate_extent(device, dtype):
    lo = torch.tensor([-1.0, 0.5, 0.0], dtype=dtype, device=device)
    hi = torch.tensor([1.0, 0.5, -1.0], dtype=dtype, device=device)
    dom = DomainDescription(lo, hi, [False, False, True])
    q, hq = randomCloud(10, 3, device, dtype, seed=1)
    msg = _raises("degenerate", q, hq, dom)
    assert "axis 1" in msg and "axis 2" in msg and "axis 0" not in msg
    nanDom = DomainDescription(torch.tensor([math.nan], dtype=dtype, device=device),
                               torch.tensor([1.0], dtype=dtype, device=device), [False])
    q1, h1 = randomCloud(10, 1, device, dtype, seed=1)
    assert "axis 0" in _raises("degenerate", q1, h1, nanDom)


def test_periodic_support_too_large(device, dtype):
    """hMax >= L/2 on a periodic axis raises, naming the axis, hMax and the extent; the same
    support on a non-periodic axis is fine."""
    lo = torch.tensor([-1.0, 0.0], dtype=dtype, device=device)
    hi = torch.tensor([1.0, 0.5], dtype=dtype, device=device)
    q, hq = randomCloud(15, 2, device, dtype, seed=3, hMin=0.1, hMax=0.2)
    hq[0] = 0.25  # = L/2 on axis 1
    msg = _raises("L/2", q, hq, DomainDescription(lo, hi, [True, True]))
    assert "axis 1" in msg and "axis 0" not in msg and "0.25" in msg and "0.5" in msg
    _search(q, hq, DomainDescription(lo, hi, [True, False]))  # non-periodic axis 1: fine
    # the grid support of the mode decides: a large reference support under Gather is fine
    r, hr = randomCloud(15, 2, device, dtype, seed=4, hMin=0.1, hMax=0.2)
    hr[2] = 0.3
    dom = DomainDescription(lo, hi, [True, True])
    _search(q[1:], hq[1:], dom, r, hr, mode=SupportScheme.Gather)
    _raises("L/2", q[1:], hq[1:], dom, r, hr, mode=SupportScheme.Scatter)


def test_several_problems_in_one_message(device, dtype):
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    q, hq = randomCloud(10, 2, device, dtype, seed=1)
    q[0, 0] = math.nan
    hq[1] = -1.0
    msg = _raises("non-finite", q, hq, dom)
    assert "invalid supports" in msg


def test_flags_stored_in_grid_without_readback(device, dtype):
    dom = domain(-1.0, 1.0, (True,), device, dtype)
    q, hq = randomCloud(10, 1, device, dtype, seed=1)
    q[2, 0] = math.inf
    with census() as c:
        grid = buildCompactHashMap(q, q, hq, hq, dom.periodic, dom)
    assert c.total == 0
    value = int(grid.validityFlags)
    assert value & F.NONFINITE_POSITIONS and value & F.QUERY_NONFINITE
    with pytest.raises(ValueError, match="non-finite"):
        F.checkGridValidity(grid)


def test_overflow_check(device, dtype, monkeypatch):
    """E above the int32 limit raises OverflowError (limit lowered for the test), never a
    silent truncation; exactly at the limit it passes. The Verlet filter checks too."""
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    q, hq = randomCloud(30, 2, device, dtype, seed=1)
    full = _search(q, hq, dom)
    E = full.numEdges
    monkeypatch.setattr(searchModule, "MAX_EDGES", E)
    assert _search(q, hq, dom).numEdges == E
    monkeypatch.setattr(searchModule, "MAX_EDGES", E - 1)
    with census() as c, pytest.raises(OverflowError, match="exceeds int32 CSR offsets; split the"):
        _search(q, hq, dom)
    assert c.total == 1
    with pytest.raises(OverflowError, match="exceeds int32 CSR offsets"):
        filterVerletList(particles(q, hq), dom, full)


# --------------------------------------------------------------------------------------
# host-side validation (before any launch, no readback)
# --------------------------------------------------------------------------------------


def _noReadback(exc, match, fn, *args, **kwargs):
    with census() as c, pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    assert c.total == 0


def test_host_validation(device, dtype):
    dom = domain(-1.0, 1.0, (False, False), device, dtype)
    q, hq = randomCloud(10, 2, device, dtype, seed=1)
    other = torch.float64 if dtype == torch.float32 else torch.float32
    S = radiusSearchCompactHashMap_
    _noReadback(ValueError, "queryPositions has shape", S, q[:, :1].expand(10, 4).contiguous(),
                q, hq, hq, None, dom)
    _noReadback(ValueError, "referencePositions has shape", S, q, q[:, :1], hq, hq, None, dom)
    _noReadback(ValueError, "querySupports has shape", S, q, q, hq[:5], hq, None, dom)
    _noReadback(ValueError, "referenceSupports has shape", S, q, q, hq, hq[:, None], None, dom)
    _noReadback(TypeError, "share a dtype", S, q, q.to(other), hq, hq, None, dom)
    _noReadback(TypeError, "share a dtype", S, q, q, hq, hq, None,
                DomainDescription(dom.min.to(other), dom.max.to(other), [False, False]))
    _noReadback(TypeError, "float32 or torch.float64", S, q.half(), q.half(), hq.half(), hq.half(),
                None, dom)
    _noReadback(TypeError, "must be a torch.Tensor", S, q.tolist(), q, hq, hq, None, dom)
    _noReadback(ValueError, "domain min has shape", S, q, q, hq, hq, None,
                (dom.min[:1], dom.max[:1]))
    _noReadback(ValueError, "periodic", S, q, q, hq, hq, [True], dom)
    _noReadback(ValueError, "not a SupportScheme", S, q, q, hq, hq, None, dom, mode="gather")
    _noReadback(ValueError, "not a SupportScheme", S, q, q, hq, hq, None, dom, mode=3)
    _noReadback(ValueError, "hashMapLength", S, q, q, hq, hq, None, dom, hashMapLength=0)
    _noReadback(TypeError, "has no attribute", radiusSearchCompactHashMap, object(), dom)
    _noReadback(TypeError, "domain", radiusSearchCompactHashMap, particles(q, hq), object())
    _noReadback(ValueError, "hashMapLengthMode", radiusSearchCompactHashMap, particles(q, hq),
                dom, hashMapLengthMode=7)
    _noReadback(ValueError, "hashMapLength", radiusSearchCompactHashMap, particles(q, hq), dom,
                hashMapLengthMode=0, fixedHashMapLength=-3)
    _noReadback(ValueError, "not a SupportScheme", buildCompactHashMap, q, q, hq, hq, None, dom,
                mode=None)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_device_mismatch():
    dom = domain(-1.0, 1.0, (False,), "cpu", torch.float32)
    q, hq = randomCloud(10, 1, "cpu", torch.float32, seed=1)
    with pytest.raises(ValueError, match="must be on"):
        radiusSearchCompactHashMap_(q, q.cuda(), hq, hq, None, dom)
