"""Named-primal case builders of the value-operator forward-mode tests (Gradient,
Divergence, Curl, Laplacian): float64 primals and tangents by name, the
primal `warpOperation` as a function of them (the J·v and central-difference oracles of
`jvp_helpers`), the explicit `warpOperationJVP` and the dual route.

Primal names: aliased sets ``pos, h, m, rho, f``; distinct sets ``qpos, qh, qrho, fq`` and
``rpos, rh, rm, rrho, fr``; corrections ``vol`` (reference volumes), ``A, B, gA, gB`` (CRK)
and ``L`` (renormalization). A tangent dict maps a subset of these names to tangents (a
missing name is a zero tangent).
"""

from __future__ import annotations

import torch
from jvp_helpers import assertClose, checkJVP, dualJVP
from sph_reference import (
    makeDomain,
    marginCloud,
    marginPair,
    neighbourStructure,
    randomCorrectionTensors,
)

from warpSPHCore import CRKState, CRKTangentState, ParticleState, ParticleTangentState
from warpSPHCore.operations import warpOperation, warpOperationJVP

F64 = torch.float64
# tangent scale per primal name (supports and densities: a few per cent of their size)
_SCALE = {"h": 0.05, "qh": 0.05, "rh": 0.05, "rho": 0.1, "qrho": 0.1, "rrho": 0.1}
TIGHT = dict(rtol=1e-12, atol=1e-13)


def _randn(shape, gen, device, scale=1.0):
    return (scale * torch.randn(shape, generator=gen, dtype=F64)).to(device)


def primals(q, r, corr, shape, seed):
    """Named float64 primals: particle fields, field values and the corrections in `corr`."""
    dev = q.positions.device
    nq, d = q.positions.shape
    g = torch.Generator().manual_seed(seed)
    if r is None:
        P = dict(pos=q.positions, h=q.supports, m=q.masses, rho=q.densities,
                 f=_randn((nq,) + shape, g, dev))
        nr = nq
    else:
        nr = r.positions.shape[0]
        P = dict(qpos=q.positions, qh=q.supports, qrho=q.densities,
                 fq=_randn((nq,) + shape, g, dev), rpos=r.positions, rh=r.supports,
                 rm=r.masses, rrho=r.densities, fr=_randn((nr,) + shape, g, dev))
    vol, _, A, B, gA, gB, L = randomCorrectionTensors(nq, nr, d, dev, seed + 1)
    if "volumes" in corr:
        P["vol"] = vol
    if "crk" in corr:
        P.update(A=A, B=B, gA=gA, gB=gB)
    if "renorm" in corr:
        P["L"] = L
    return P


def tangents(P, seed, names=None):
    """Random tangents for the primals in `names` (default: all)."""
    g = torch.Generator().manual_seed(seed)
    names = list(P) if names is None else names
    return {k: _randn(P[k].shape, g, P[k].device, _SCALE.get(k, 1.0)) for k in names}


def callArgs(P, q, r):
    """(queryParticles, keyword arguments) of warpOperation / warpOperationJVP from P."""
    if r is None:
        qs = ParticleState(P["pos"], P["h"], P["m"], q.kinds, P["rho"])
        kw = dict(queryValues=P["f"])
    else:
        qs = ParticleState(P["qpos"], P["qh"], q.masses, q.kinds, P["qrho"])
        rs = ParticleState(P["rpos"], P["rh"], P["rm"], r.kinds, P["rrho"])
        kw = dict(queryValues=P["fq"], referenceValues=P["fr"], referenceParticles=rs)
    if "vol" in P:
        kw["referenceVolumes"] = P["vol"]
    if "A" in P:
        kw["crkState"] = CRKState(P["A"], P["B"], P["gA"], P["gB"])
    if "L" in P:
        kw["renormalizationState"] = P["L"]
    return qs, kw


def tangentArgs(P, T, r):
    """warpOperationJVP's tangent keywords from T."""
    t = T.get
    if r is None:
        kw = dict(queryTangentState=ParticleTangentState(t("pos"), t("h"), None, t("rho")),
                  referenceTangentState=ParticleTangentState(t("pos"), t("h"), t("m"),
                                                             t("rho")),
                  tangentQueryValues=t("f"))
    else:
        kw = dict(queryTangentState=ParticleTangentState(t("qpos"), t("qh"), None, t("qrho")),
                  referenceTangentState=ParticleTangentState(t("rpos"), t("rh"), t("rm"),
                                                             t("rrho")))
        if "fq" in T or "fr" in T:  # both sides explicit (the reference defaults to the query)
            kw["tangentQueryValues"] = T.get("fq", torch.zeros_like(P["fq"]))
            kw["tangentReferenceValues"] = T.get("fr", torch.zeros_like(P["fr"]))
    if "vol" in T:
        kw["tangentReferenceVolumes"] = T["vol"]
    if any(k in T for k in ("A", "B", "gA", "gB")):
        z = {k: T.get(k, torch.zeros_like(P[k])) for k in ("A", "B", "gA", "gB")}
        kw["crkTangentState"] = CRKTangentState(z["A"], z["B"], z["gA"], z["gB"])
    if "L" in T:
        kw["renormalizationTangentState"] = T["L"]
    return kw


class Case:
    """One primal call (query, optional distinct reference, domain, properties, neighbour
    structure) with named primals: `fn(*tensors)` is the primal (for the oracles), `jvp(T)`
    the explicit forward mode (extra keywords go to `warpOperationJVP`), `dual(T)` the torch
    forward_ad route."""

    def __init__(self, q, r, dom, pr, traversal, corr="none", shape=(), seed=0):
        self.q, self.r, self.dom, self.pr = q, r, dom, pr
        self.adj = neighbourStructure(traversal, q, dom, r)
        self.P = primals(q, r, corr, shape, seed)
        self.names = list(self.P)

    def fn(self, *xs):
        qs, kw = callArgs(dict(zip(self.names, xs)), self.q, self.r)
        return warpOperation(qs, self.pr, self.dom, adjacency=self.adj, **kw)

    def inputs(self):
        return [self.P[k] for k in self.names]

    def tangentList(self, T):
        return [T.get(k) for k in self.names]

    def jvp(self, T, adjacency="default", P=None, pr=None, **extra):
        P = self.P if P is None else P
        qs, kw = callArgs(P, self.q, self.r)
        adj = self.adj if adjacency == "default" else adjacency
        return warpOperationJVP(qs, self.pr if pr is None else pr, self.dom, adjacency=adj,
                                **kw, **tangentArgs(P, T, self.r), **extra)

    def dual(self, T):
        return dualJVP(self.fn, self.inputs(), self.tangentList(T))

    def check(self, T, fd=True, dual=True, what=""):
        """JVP vs J·v (rtol 1e-8) and central differences (rtol 1e-5); the dual route equals
        the explicit route to 1e-12."""
        out = self.jvp(T)
        assert out.shape == self.fn(*self.inputs()).shape and out.dtype == self.P[
            self.names[0]].dtype
        checkJVP(self.fn, self.inputs(), self.tangentList(T), out, fd=fd, what=what)
        if dual:
            assertClose(self.dual(T), out, **TIGHT, what=f"{what}: dual route vs explicit")
        return out


def aliased(d, n, seed, device, **kw):
    dom = makeDomain(d, F64, device, **{k: kw.pop(k) for k in ("periodic",) if k in kw})
    return marginCloud(n, d, F64, device, seed=seed, domain=dom, **kw), None, dom


def distinct(d, nq, nr, seed, device, cloned=False):
    dom = makeDomain(d, F64, device)
    q, r = marginPair(nq, nr, d, F64, device, seed=seed, domain=dom, cloned=cloned)
    return q, r, dom


def valueNames(r):
    return ["f"] if r is None else ["fq", "fr"]


__all__ = ["F64", "TIGHT", "Case", "aliased", "distinct", "primals", "tangents", "callArgs",
           "tangentArgs", "valueNames"]
