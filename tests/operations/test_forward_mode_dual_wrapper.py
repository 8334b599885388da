"""The bridge's jvp() dispatch on real operators (the dual wrapper, pruning, the kinds'
version check): live-mask dispatch, torch-synthesised
zeros are not live, exactly-zero tangents when nothing is live, one readback per dual call,
empty tangents and outputs, channels the formula never reads are dropped, tangents without a
home raise, and kinds saved for torch's version check.

The toy-kernel counterparts live in test_bridge_jvp.py.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose, jacobianJVP
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import (
    DomainDescription,
    GradHState,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
DENSITY = WarpOperation.Density


def _case(device, n=14, d=2, seed=0):
    dom = makeDomain(d, F64, device)
    q = marginCloud(n, d, F64, device, seed=seed, domain=dom)
    return q, dom, neighbourStructure("csr", q, dom)


@contextlib.contextmanager
def countReadbacks(monkeypatch):
    """Count tensor device->host readbacks (.tolist, .item, .cpu, .numpy, bool/int/float)."""
    counts = {"n": 0}
    for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__float__"):
        orig = getattr(torch.Tensor, name)

        def wrapped(self, *a, _orig=orig, **k):
            counts["n"] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapped)
    try:
        yield counts
    finally:
        monkeypatch.undo()


def _dualDensity(q, dom, adj, pr, tangents: dict):
    """Density with the named ParticleState fields made dual; returns the output tangent."""
    with fwAD.dual_level():
        fields = {f: getattr(q, f) for f in ("positions", "supports", "masses", "kinds",
                                             "densities")}
        for f, v in tangents.items():
            fields[f] = fwAD.make_dual(fields[f], v)
        p = ParticleState(**fields)
        out = warpOperation(p, pr, dom, adjacency=adj)
        t = fwAD.unpack_dual(out).tangent
        return None if t is None else t.clone()


def test_live_mask_dispatch_matches_the_explicit_jvp(device):
    q, dom, adj = _case(device)
    pr = props(DENSITY, supportMode=SupportScheme.KernelMeanSymmetric)
    g = torch.Generator().manual_seed(1)
    v = torch.randn(q.positions.shape, generator=g, dtype=F64).to(device)
    dh = 0.01 * torch.randn(q.supports.shape, generator=g, dtype=F64).to(device)
    dual = _dualDensity(q, dom, adj, pr, {"positions": v, "supports": dh})
    explicit = warpOperationJVP(q, pr, dom, adjacency=adj,
                                queryTangentState=ParticleTangentState(positions=v, supports=dh))
    assert torch.equal(dual, explicit)

    def fn(x, h):
        return warpOperation(ParticleState(x, h, q.masses, q.kinds, q.densities), pr, dom,
                             adjacency=adj)

    assertClose(explicit, jacobianJVP(fn, (q.positions, q.supports), (v, dh)), what="J.v")


def test_synthesised_zeros_are_not_live(device):
    """A dual masses tensor with a zero tangent: every tangent torch hands jvp() is zero, so
    the result is an exactly-zero tangent (never None)."""
    q, dom, adj = _case(device)
    t = _dualDensity(q, dom, adj, props(DENSITY), {"masses": torch.zeros_like(q.masses)})
    assert t is not None and torch.equal(t, torch.zeros_like(t))


def test_one_readback_per_dual_call(device, monkeypatch):
    q, dom, adj = _case(device)
    pr = props(DENSITY)
    v = torch.ones_like(q.positions)
    _dualDensity(q, dom, adj, pr, {"positions": v})  # warm up (compilation, registries)
    with countReadbacks(monkeypatch) as counts:
        _dualDensity(q, dom, adj, pr, {"positions": v})
    assert counts["n"] == 1


def test_no_readback_without_dual_tensors(device, monkeypatch):
    q, dom, adj = _case(device)
    warpOperation(q, props(DENSITY), dom, adjacency=adj)
    with countReadbacks(monkeypatch) as counts:
        warpOperation(q, props(DENSITY), dom, adjacency=adj)
    assert counts["n"] == 0


def test_self_interaction_dual_masses_drop_the_query_slot(device):
    """referenceParticles=None: a dual masses tensor lights up slots 4 and 5; slot 4 (query
    masses, never read) is dropped and the result is J.v w.r.t. the shared masses."""
    q, dom, adj = _case(device)
    pr = props(DENSITY)
    dm = torch.linspace(-1.0, 1.0, q.masses.shape[0], dtype=F64, device=device)
    t = _dualDensity(q, dom, adj, pr, {"masses": dm})

    def fn(m):
        return warpOperation(ParticleState(q.positions, q.supports, m, q.kinds), pr, dom,
                             adjacency=adj)

    assertClose(t, jacobianJVP(fn, (q.masses,), (dm,)), what="dual masses")


def test_empty_output_gets_a_zero_tangent(device):
    dom = makeDomain(2, F64, device)
    q = ParticleState(torch.zeros(0, 2, dtype=F64, device=device),
                      torch.zeros(0, dtype=F64, device=device),
                      torch.zeros(0, dtype=F64, device=device),
                      torch.zeros(0, dtype=torch.int32, device=device))
    ref = marginCloud(6, 2, F64, device, seed=2, domain=dom)
    with fwAD.dual_level():
        pos = fwAD.make_dual(ref.positions, torch.ones_like(ref.positions))
        r = ParticleState(pos, ref.supports, ref.masses, ref.kinds)
        out = warpOperation(q, props(DENSITY), dom, referenceParticles=r)
        t = fwAD.unpack_dual(out).tangent
    assert t is not None and tuple(t.shape) == (0,)


def test_empty_tangent_is_inactive(device):
    dom = makeDomain(2, F64, device)
    q = ParticleState(torch.zeros(0, 2, dtype=F64, device=device),
                      torch.zeros(0, dtype=F64, device=device),
                      torch.zeros(0, dtype=F64, device=device),
                      torch.zeros(0, dtype=torch.int32, device=device))
    ref = marginCloud(6, 2, F64, device, seed=3, domain=dom)
    with fwAD.dual_level():
        # the empty query positions are the only dual: nothing is live, output is non-empty
        pos = fwAD.make_dual(q.positions, torch.zeros_like(q.positions))
        p = ParticleState(pos, q.supports, q.masses, q.kinds)
        out = warpOperation(ref, props(DENSITY), dom, referenceParticles=p)
        t = fwAD.unpack_dual(out).tangent
    assert t is not None and torch.equal(t, torch.zeros(6, dtype=F64, device=device))


def test_domain_bound_tangent_raises(device):
    q, dom, adj = _case(device)
    with fwAD.dual_level():
        lo = fwAD.make_dual(dom.min, torch.ones_like(dom.min))
        d2 = DomainDescription(lo, dom.max, dom.periodic, dom.dim)
        with pytest.raises(NotImplementedError, match="domain or grid bounds"):
            warpOperation(q, props(DENSITY), d2, adjacency=adj)


def test_live_omega_tangent_of_a_reader(device):
    """A dual Omega reaches the Gradient's grad-h division: with Omega = 1 and dOmega = 1,
    d(f_j / Omega_j) = -f_j, so the tangent is minus the primal (Naive scheme); the explicit
    route with `gradHTangentState` gives the same."""
    q, dom, adj = _case(device)
    f = torch.linspace(0.0, 1.0, q.positions.shape[0], dtype=F64, device=device)
    omega = torch.ones_like(q.masses)
    pr = props(WarpOperation.Gradient)
    with fwAD.dual_level():
        om = fwAD.make_dual(omega, torch.ones_like(omega))
        out = warpOperation(q, pr, dom, queryValues=f, adjacency=adj,
                            gradHState=GradHState(om, om))
        primal, tangent = fwAD.unpack_dual(out)
    assert primal.abs().max() > 0
    torch.testing.assert_close(tangent, -primal, rtol=1e-12, atol=1e-12)
    explicit = warpOperationJVP(q, pr, dom, queryValues=f, adjacency=adj,
                                gradHState=GradHState(omega, omega),
                                gradHTangentState=GradHState(torch.ones_like(omega),
                                                             torch.ones_like(omega)))
    torch.testing.assert_close(explicit, tangent, rtol=1e-12, atol=1e-12)


def test_kinds_mutation_before_backward_raises(device):
    """Kinds are saved by the JVP launch: an in-place change before backward trips torch's
    version check."""
    q, dom, adj = _case(device)
    x = q.positions.clone().requires_grad_(True)
    kinds = q.kinds.clone()
    p = ParticleState(x, q.supports, q.masses, kinds)
    out = warpOperationJVP(p, props(DENSITY), dom, adjacency=adj,
                           queryTangentState=ParticleTangentState(
                               positions=torch.ones_like(x)))
    kinds.add_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_density_rejections(device):
    q, dom, adj = _case(device)
    with pytest.raises(NotImplementedError, match="no value input"):
        warpOperationJVP(q, props(DENSITY), dom, adjacency=adj,
                         tangentQueryValues=torch.ones_like(q.masses))
    with pytest.raises(ValueError, match="query masses"):
        warpOperationJVP(q, props(DENSITY), dom, adjacency=adj,
                         queryTangentState=ParticleTangentState(masses=torch.ones_like(q.masses)))
    with pytest.raises(NotImplementedError, match="densities"):
        warpOperationJVP(q, props(DENSITY), dom, adjacency=adj,
                         queryTangentState=ParticleTangentState(
                             densities=torch.ones_like(q.masses)))


def test_no_tangent_gives_zeros(device):
    q, dom, adj = _case(device)
    out = warpOperationJVP(q, props(DENSITY), dom, adjacency=adj)
    assert torch.equal(out, torch.zeros(q.masses.shape[0], dtype=F64, device=device))
