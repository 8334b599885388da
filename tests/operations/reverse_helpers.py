"""Shared set-up of the hand-written reverse kernels' tests (`autograd.reverse`): one
operator call with every float input a leaf, forward + backward by the reverse kernel and
by Warp's generated adjoint (the tape, forced with ``WARPSPHCORE_DISABLE_REVERSE_KERNELS=1``),
and the comparison of every gradient."""

from __future__ import annotations

import torch
from sph_reference import leaves, makeDomain, marginCloud, neighbourStructure, reverseRoute

from warpSPHCore import ParticleState
from warpSPHCore.operations import warpOperation

F64 = torch.float64
GATE = "WARPSPHCORE_DISABLE_REVERSE_KERNELS"


def field(n, shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n,) + tuple(shape), generator=g, dtype=F64).to(device)


def runCall(monkeypatch, tape, q, r, dom, pr, traversal, shape=(), volumes=False, seed=0,
            extra=None):
    """Forward + backward of one call with every float input a leaf (positions, supports,
    masses, densities and values of each set, the reference volumes when `volumes`);
    `shape` is the field's trailing shape (None: an operator without values). Returns
    (route, output, gradients)."""
    monkeypatch.setenv(GATE, "1" if tape else "0")
    dev = q.positions.device
    nq = q.positions.shape[0]
    qLeaves = leaves(q.positions, q.supports, q.masses, q.densities)
    qp, qh, qm, qrho = qLeaves
    dt = q.positions.dtype
    query = ParticleState(qp, qh, qm, q.kinds, qrho)
    grads = list(qLeaves)
    kw = {}
    if shape is not None:
        fq = leaves(field(nq, shape, dev, seed + 1).to(dt))[0]
        grads.append(fq)
        kw["queryValues"] = fq
    if r is not None:
        nr = r.positions.shape[0]
        rLeaves = leaves(r.positions, r.supports, r.masses, r.densities)
        kw["referenceParticles"] = ParticleState(*rLeaves[:3], r.kinds, rLeaves[3])
        grads += rLeaves
        if shape is not None:
            fr = leaves(field(nr, shape, dev, seed + 2).to(dt))[0]
            kw["referenceValues"] = fr
            grads.append(fr)
    nr = q.positions.shape[0] if r is None else r.positions.shape[0]
    if volumes:
        vol = leaves(0.05 + 0.1 * torch.rand(nr, generator=torch.Generator().manual_seed(seed),
                                             dtype=F64).to(dev).to(dt))[0]
        kw["referenceVolumes"] = vol
        grads.append(vol)
    if extra:
        kw.update(extra)
    adj = neighbourStructure(traversal, q, dom, r)
    out = warpOperation(query, pr, dom, adjacency=adj, **kw)
    seedT = field(nq, out.shape[1:], dev, seed + 7).to(dt)
    out.backward(seedT)
    return reverseRoute(out), out.detach(), [g.grad for g in grads]


def assertSameAsTape(monkeypatch, route, *args, **kw):
    """`runCall` by the reverse kernel named `route` and on the tape: the same output and
    every gradient to 1e-12 (relative to the largest entry); returns the kernel's
    gradients."""
    return compareWithTape(route, runCall(monkeypatch, False, *args, **kw),
                           runCall(monkeypatch, True, *args, **kw))


def compareWithTape(route, kernel, tape):
    """The (route, output, gradients) of a call by the reverse kernel named `route` and of
    the same call on the tape: the same output and every gradient to 1e-12 (relative to the
    largest entry); returns the kernel's gradients."""
    routeK, outK, gK = kernel
    routeT, outT, gT = tape
    assert routeK == route
    assert routeT is None
    # the reverse-kernel route runs the forward on the configuration's specialised kernel,
    # the tape route on the generic one: the same sum to rounding (operators._specialized)
    torch.testing.assert_close(outK, outT, rtol=1e-12,
                               atol=1e-12 * max(1.0, float(outT.abs().max())))
    for k, (a, b) in enumerate(zip(gK, gT)):
        assert (a is None) == (b is None), k
        if a is None:
            continue
        scale = max(1.0, float(b.abs().max()))
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * scale, msg=f"leaf {k}")
    return gK


def cloud2D(device, n=28, seed=3, **kw):
    """A 2D float64 cloud with a support margin, and its domain."""
    dom = makeDomain(2, F64, device)
    return marginCloud(n, 2, F64, device, seed, domain=dom, **kw), dom
