"""Tier-1 forward mode of the value operators: Interpolate, Gradient, Divergence, Curl and Laplacian are linear and homogeneous in the
field values, so the value JVP is the operator relaunched on the tangent values.

* `warpOperationJVP` with value tangents only equals `warpOperation` of the tangent values
  bit-exactly (rtol = atol = 0), including every primal correction (grad-h divides the
  tangent values like the values) and the options the geometry JVP rejects (dot mode,
  consistent divergence); f(0) == 0 and no tangent gives zeros;
* it matches J·v of the primal w.r.t. the values (query and reference values) and central
  differences;
* the dual route (`torch.autograd.forward_ad` through `warpOperation`) gives the same
  tangent bit-exactly, including a value tangent on a rank-2 field of Gradient, Divergence,
  Curl and Laplacian (a documented deviation: the spec's closure raises there, ours rebuilds
  the flat tangent from the extras' slot);
* value + geometry tangents equal the sum of the separate JVPs, and a zero value tangent
  leaves the geometry result bit-unchanged (the value tangent fused into the Tier-2 kernel);
* Density and Covariance have no value input and raise;
* the Laplacian with ``positiveDivergence`` is NOT linear in the values (the pair selection
  ``x_ij . q_ij >= 0`` depends on them), so "the operator on the tangent values" is not its
  JVP: both routes keep the primal's selection (J·v and central differences).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from jvp_helpers import assertClose, checkJVP
from sph_reference import (
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    CRKState,
    GradientScheme,
    LaplacianScheme,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation, warpOperationJVP
from warpSPHCore.operators import operatorEntry

F64 = torch.float64
OP = WarpOperation
LAP = LaplacianScheme
GS = GradientScheme
SS = SupportScheme


@dataclasses.dataclass
class Config:
    name: str
    op: WarpOperation
    d: int
    shape: tuple
    kw: dict
    corr: str = "none"
    distinct: bool = False
    consistent: bool = False


CONFIGS = [
    Config("interpolate-1d", OP.Interpolate, 1, (), {}, "volumes"),
    Config("interpolate-2d-matrix", OP.Interpolate, 2, (2, 2), {"supportMode": SS.MeanSymmetric},
           "crk+volumes", distinct=True),
    Config("gradient-1d", OP.Gradient, 1, (), {"gradientMode": GS.Symmetric}, "gradH"),
    Config("gradient-1d-distinct", OP.Gradient, 1, (1,), {"gradientMode": GS.Difference,
                                                         "supportMode": SS.Gather},
           "crk+renorm+volumes+gradH", distinct=True),
    Config("gradient-2d-vector", OP.Gradient, 2, (2,), {"gradientMode": GS.Summation,
                                                       "supportMode": SS.KernelMeanSymmetric},
           "crk+renorm+gradH"),
    Config("divergence-2d", OP.Divergence, 2, (2,), {"gradientMode": GS.Naive,
                                                    "supportMode": SS.SuperSymmetric},
           "crk+renorm+gradH", distinct=True),
    Config("divergence-2d-dot-consistent", OP.Divergence, 2, (2, 2),
           {"gradientMode": GS.Difference, "divergenceDotMode": True}, "volumes+gradH",
           consistent=True),
    Config("curl-2d", OP.Curl, 2, (2,), {"gradientMode": GS.Symmetric,
                                        "supportMode": SS.MeanSymmetric},
           "crk+renorm+gradH"),
    Config("curl-2d-matrix", OP.Curl, 2, (2, 2), {"gradientMode": GS.Summation}, "volumes",
           distinct=True),
    Config("laplacian-1d-naive", OP.Laplacian, 1, (), {"laplacianMode": LAP.Naive}, "gradH"),
    Config("laplacian-1d-brookshaw", OP.Laplacian, 1, (),
           {"laplacianMode": LAP.Brookshaw, "gradientMode": GS.Difference}, "crk+renorm",
           distinct=True),
    Config("laplacian-1d-dot", OP.Laplacian, 1, (), {"laplacianMode": LAP.Dot,
                                                    "supportMode": SS.KernelMeanSymmetric},
           "volumes+gradH"),
    Config("laplacian-1d-default", OP.Laplacian, 1, (1,),
           {"laplacianMode": LAP.Default, "gradientMode": GS.Summation}, "crk+gradH"),
    Config("laplacian-2d-vector", OP.Laplacian, 2, (2,),
           {"laplacianMode": LAP.Default, "gradientMode": GS.Symmetric}, "renorm+gradH"),
]


def _randn(shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).to(device)


class Case:
    """A primal call of `cfg` (frozen CSR structure) with random field values."""

    def __init__(self, cfg: Config, device, seed=0):
        self.cfg = cfg
        dom = makeDomain(cfg.d, F64, device)
        if cfg.distinct:
            q, r = marginPair(7, 9, cfg.d, F64, device, seed=300 + seed, domain=dom)
        else:
            q, r = marginCloud(10, cfg.d, F64, device, seed=300 + seed, domain=dom), None
        self.q, self.r, self.dom = q, r, dom
        nq = q.positions.shape[0]
        nr = nq if r is None else r.positions.shape[0]
        self.nq, self.nr = nq, nr
        self.pr = props(cfg.op, **cfg.kw)
        self.adj = neighbourStructure("csr", q, dom, r)
        self.fq = _randn((nq,) + cfg.shape, 310 + seed, device)
        self.fr = _randn((nr,) + cfg.shape, 320 + seed, device) if r is not None else None
        vol, om, A, B, gA, gB, L = randomCorrectionTensors(nq, nr, cfg.d, device, 330 + seed)
        kw = {}
        if "volumes" in cfg.corr:
            kw["referenceVolumes"] = vol
        if "crk" in cfg.corr:
            kw["crkState"] = CRKState(A, B, gA, gB)
        if "renorm" in cfg.corr:
            kw["renormalizationState"] = L
        if "gradH" in cfg.corr:
            omq = 0.9 + 0.2 * torch.rand(nq, generator=torch.Generator().manual_seed(seed),
                                         dtype=F64).to(device)
            kw["gradHState"] = omq if r is None else (omq, om)
        if r is not None:
            kw["referenceParticles"] = r
        if cfg.consistent:
            kw["consistentDivergence"] = True
        self.kw = kw

    def values(self, fq, fr):
        return dict(queryValues=fq, referenceValues=fr)

    def primal(self, fq, fr=None):
        return warpOperation(self.q, self.pr, self.dom, adjacency=self.adj,
                             **self.values(fq, fr), **self.kw)

    def jvp(self, tq, tr=None, **extra):
        return warpOperationJVP(self.q, self.pr, self.dom, adjacency=self.adj,
                                tangentQueryValues=tq, tangentReferenceValues=tr,
                                **self.values(self.fq, self.fr), **self.kw, **extra)

    def tangents(self, seed):
        tq = _randn(self.fq.shape, 340 + seed, self.fq.device)
        tr = None if self.r is None else _randn(self.fr.shape, 350 + seed, self.fq.device)
        return tq, tr


IDS = [c.name for c in CONFIGS]


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_value_jvp_tier1(device, cfg):
    """Tier 1 == the primal on the tangent values, bit-exactly; f(0) == 0; no tangent gives
    zeros of the output shape; J·v and central differences w.r.t. the values."""
    k = CONFIGS.index(cfg)
    c = Case(cfg, device, seed=k)
    tq, tr = c.tangents(k)
    out = c.jvp(tq, tr)
    ref = c.primal(tq, tr)
    assert out.shape == ref.shape and out.dtype == F64
    assert torch.equal(out, ref), cfg.name
    assert float(out.abs().max()) > 0.0
    # f(0) == 0
    zero = c.jvp(torch.zeros_like(tq), None if tr is None else torch.zeros_like(tr))
    assert torch.equal(zero, torch.zeros_like(ref))
    none = c.jvp(None, None)
    assert none.shape == ref.shape and torch.equal(none, torch.zeros_like(ref))
    # against the primal's derivative w.r.t. the values
    if c.r is None:
        checkJVP(lambda f: c.primal(f), [c.fq], [tq], out, what=cfg.name)
    else:
        checkJVP(lambda fq, fr: c.primal(fq, fr), [c.fq, c.fr], [tq, tr], out, what=cfg.name)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_value_jvp_dual_route(device, cfg):
    """forward_ad dual values through `warpOperation` == the explicit JVP, bit-exactly (every
    field rank, rank-2 fields included)."""
    k = CONFIGS.index(cfg)
    c = Case(cfg, device, seed=k)
    tq, tr = c.tangents(k + 50)
    explicit = c.jvp(tq, tr)
    with fwAD.dual_level():
        dq = fwAD.make_dual(c.fq, tq)
        dr = None if tr is None else fwAD.make_dual(c.fr, tr)
        out = c.primal(dq, dr)
        tangent = fwAD.unpack_dual(out).tangent
    assert tangent is not None, cfg.name
    assert tangent.shape == explicit.shape
    assert torch.equal(tangent, explicit), cfg.name


@pytest.mark.parametrize("op", [OP.Gradient, OP.Divergence, OP.Curl, OP.Laplacian,
                                OP.Interpolate], ids=lambda o: o.name)
def test_value_jvp_dual_route_rank2_distinct(device, op):
    """A value tangent on one side only of a rank-2 two-sided field through the dual route
    (the other side a zero tangent) equals the explicit JVP and J·v."""
    cfg = Config(f"{op.name}-rank2", op, 2, (2, 2), {"gradientMode": GS.Difference}, "crk",
                 distinct=True)
    c = Case(cfg, device, seed=70)
    tq, tr = c.tangents(71)
    with fwAD.dual_level():
        out = c.primal(c.fq, fwAD.make_dual(c.fr, tr))
        tangent = fwAD.unpack_dual(out).tangent
    explicit = c.jvp(torch.zeros_like(tq), tr)
    assert torch.equal(tangent, explicit), op.name
    checkJVP(lambda fr: c.primal(c.fq, fr), [c.fr], [tr], explicit, fd=False, what=op.name)
    if op != OP.Interpolate:  # the query tangent alone (Interpolate never reads query values)
        with fwAD.dual_level():
            out = c.primal(fwAD.make_dual(c.fq, tq), c.fr)
            tangent = fwAD.unpack_dual(out).tangent
        assert torch.equal(tangent, c.jvp(tq, torch.zeros_like(tr))), op.name


@pytest.mark.parametrize("dual", [False, True], ids=["explicit", "dual"])
def test_value_jvp_laplacian_positive_divergence(device, dual):
    cfg = Config("laplacian-2d-positive", OP.Laplacian, 2, (2,),
                 {"laplacianMode": LAP.Default, "positiveDivergence": True}, "renorm")
    c = Case(cfg, device, seed=60)
    tq, _ = c.tangents(61)
    # the primal is not additive in the values: the pair mask follows the field
    assert not torch.allclose(c.primal(c.fq + tq), c.primal(c.fq) + c.primal(tq))
    if dual:
        with fwAD.dual_level():
            out = fwAD.unpack_dual(c.primal(fwAD.make_dual(c.fq, tq))).tangent
    else:
        out = c.jvp(tq)
    checkJVP(lambda f: c.primal(f), [c.fq], [tq], out, what=cfg.name)
    # not the operator on the tangent values (that selects pairs by the tangent's sign)
    assert float((out - c.primal(tq)).abs().max()) > 1e-6


def test_value_jvp_rejections(device):
    """Density and Covariance have no value input."""
    dom = makeDomain(2, F64, device)
    q = marginCloud(8, 2, F64, device, seed=400, domain=dom)
    f = _randn((8,), 401, device)
    for op in (OP.Density, OP.Covariance):
        with pytest.raises(NotImplementedError, match="value"):
            warpOperationJVP(q, props(op), dom, tangentQueryValues=f, queryValues=f)


# --------------------------------------------------------------------------------------
# value + geometry (Tier 1 + Tier 2)
# --------------------------------------------------------------------------------------

GEOMETRY_CONFIGS = [
    Config("interpolate", OP.Interpolate, 2, (2,), {"supportMode": SS.KernelMeanSymmetric},
           "volumes", distinct=True),
    Config("gradient", OP.Gradient, 2, (2,), {"gradientMode": GS.Symmetric}, "crk+renorm"),
    Config("divergence", OP.Divergence, 2, (2,), {"gradientMode": GS.Difference},
           "volumes+crk", distinct=True),
    Config("curl", OP.Curl, 2, (2,), {"gradientMode": GS.Summation,
                                     "supportMode": SS.MeanSymmetric}, "renorm"),
    Config("laplacian", OP.Laplacian, 2, (2,), {"laplacianMode": LAP.Brookshaw,
                                               "gradientMode": GS.Naive}, "crk+renorm",
           distinct=True),
]


@pytest.mark.parametrize("cfg", GEOMETRY_CONFIGS, ids=[c.name for c in GEOMETRY_CONFIGS])
def test_value_jvp_combined_is_sum(device, cfg):
    """value + geometry == value-only + geometry-only (rtol 1e-12), and a zero value tangent
    leaves the geometry-only result bit-unchanged."""
    spec = operatorEntry(cfg.op).spec
    assert spec.jvp is not None and spec.jvp.geometryKernel is not None, cfg.op.name
    k = GEOMETRY_CONFIGS.index(cfg)
    c = Case(cfg, device, seed=80 + k)
    tq, tr = c.tangents(90 + k)
    g = torch.Generator().manual_seed(95 + k)
    dev = c.fq.device

    def rnd(x, s=1.0):
        return (s * torch.randn(x.shape, generator=g, dtype=F64)).to(dev)

    ref = c.q if c.r is None else c.r
    qt = ParticleTangentState(rnd(c.q.positions), rnd(c.q.supports, 0.05), None,
                              rnd(c.q.densities, 0.1))
    rt = qt if c.r is None else ParticleTangentState(rnd(ref.positions),
                                                     rnd(ref.supports, 0.05), None,
                                                     rnd(ref.densities, 0.1))
    rt = dataclasses.replace(rt, masses=rnd(ref.masses))
    geo = dict(queryTangentState=qt, referenceTangentState=rt)
    both = c.jvp(tq, tr, **geo)
    geometry = c.jvp(None, None, **geo)
    value = c.jvp(tq, tr)
    assertClose(both, geometry + value, rtol=1e-12, atol=1e-13, what=cfg.name)
    assert float(geometry.abs().max()) > 0.0
    zq = torch.zeros_like(tq)
    zr = None if tr is None else torch.zeros_like(tr)
    assert torch.equal(c.jvp(zq, zr, **geo), geometry), cfg.name


@pytest.mark.parametrize("op", [OP.Interpolate, OP.Gradient, OP.Laplacian], ids=lambda o: o.name)
def test_reference_value_tangent_default(device, op):
    """The reference value tangent defaults to the query tangent only when the reference
    values are the query values (``referenceValues`` None or the same tensor); distinct
    reference values without a tangent are frozen (J·v w.r.t. the query values alone)."""
    dom = makeDomain(2, F64, device)
    q, r = marginPair(7, 9, 2, F64, device, seed=500, domain=dom)
    adj = neighbourStructure("csr", q, dom, r)
    pr = props(op)
    fq, fr = _randn((7, 2), 501, device), _randn((9, 2), 502, device)
    tq = _randn((7, 2), 503, device)
    kw = dict(adjacency=adj, referenceParticles=r)
    out = warpOperationJVP(q, pr, dom, queryValues=fq, referenceValues=fr,
                           tangentQueryValues=tq, **kw)
    zero = warpOperationJVP(q, pr, dom, queryValues=fq, referenceValues=fr,
                            tangentQueryValues=tq, tangentReferenceValues=torch.zeros_like(fr),
                            **kw)
    assert torch.equal(out, zero)
    checkJVP(lambda a: warpOperation(q, pr, dom, queryValues=a, referenceValues=fr, **kw),
             [fq], [tq], out, what=f"{op.name} frozen reference values")
    # self interaction: referenceValues None or the same tensor -> the query tangent
    s = marginCloud(9, 2, F64, device, seed=504, domain=dom)
    sadj = neighbourStructure("csr", s, dom)
    f, t = _randn((9, 2), 505, device), _randn((9, 2), 506, device)
    a = warpOperationJVP(s, pr, dom, queryValues=f, tangentQueryValues=t, adjacency=sadj)
    b = warpOperationJVP(s, pr, dom, queryValues=f, referenceValues=f, tangentQueryValues=t,
                         adjacency=sadj)
    assert torch.equal(a, b)
    assert torch.equal(a, warpOperation(s, pr, dom, queryValues=t, adjacency=sadj))
