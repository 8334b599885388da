"""Tier-2 (geometry) JVP launches and the reverse-over-forward helper `hvp`.

`launchGeometryJVP(kernel, ctx, tangents, outputShape, outputDtype, ...)` runs a geometry JVP
kernel through the same bridge as the primal operators, with ``jvp_fn=None``: the result is
reverse-differentiable with respect to primals, tangents and frozen values (reverse over
forward), and a dual tensor reaching it raises.

Flat list: slots 0-37 come from the **same** `extractStateInfo` as the primal call (kinds,
mode, calibration, adjacency or grid, domain, the consistent Laplacian's B and gamma),
followed by the tangent block (offsets from ``T = STATE_SIZE``)

    T+0 tqPos  T+1 trPos  T+2 tqSup  T+3 trSup  T+4 tqMas (always a null: no formula reads
    query masses)  T+5 trMas  T+6 tqDen  T+7 trDen  T+8 trVol  T+9..12 tqcrk A/B/gradA/gradB
    T+13 tL  T+14 values (frozen, flat [N_q F | N_r F])  T+15 tValues (their tangent)

The consistent Laplacian's B and gamma have no tangent slot: the operator is linear in them,
so their tangent is the primal launch with (dB, dgamma) in their place
(`operationsJVP.jvpFromContext`).

Missing tangents are zero-filled null placeholders and the pack carries a presence flag for
each, so no placeholder is ever indexed. Kernel ABI (one tangent struct rather than one per
particle set plus one for the corrections: it keeps the pair-term signature of the primal
operators):

    (queryState, referenceState, domainState, useAdjacency, adjacencyState, gridState,
     correctionData, kernelProperties, tangents, <SCALAR extras>, <outputs>)

with ``tangents`` the pack `arg_extract.structFor("tangent", d, s)`. When the same tensor
object is both the query and the reference tangent (a self-interaction dual), the two slots
alias one Warp array and backward deduplicates exactly as for the primal (an aliased array's
gradient is reported once, or torch would sum it twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.autograd.forward_ad as fwAD

from ..util.errorFlags import siteId
from ..util.fieldRegistry import FieldKind, nullField
from ..util.precision import warpScalar
from ..util.stateBundle import makeStruct
from .arg_extract import STATE_SIZE, extractStateInfo, structFor
from .wrapper import _launchFlat

__all__ = ["GeometryTangents", "launchGeometryJVP", "TANGENT_SLOTS", "hvp"]

TANGENT_SLOTS = ("tqPos", "trPos", "tqSup", "trSup", "tqMas", "trMas", "tqDen", "trDen",
                 "trVol", "tqcrk_A", "tqcrk_B", "tqcrk_gradA", "tqcrk_gradB", "tRenormMat",
                 "values", "tValues")
_T0 = STATE_SIZE  # first tangent slot


@dataclass
class GeometryTangents:
    """The tangents of one Tier-2 launch (None = zero tangent, not read by the kernel).

    Particle tangents: ``qPositions [N_q, d]``, ``qSupports``, ``qDensities [N_q]``,
    ``rPositions [N_r, d]``, ``rSupports``, ``rMasses``, ``rDensities``, ``rVolumes [N_r]``;
    correction tangents ``crk`` (a `CRKTangentState`) and ``renorm`` (``[N_q, d, d]``);
    ``values``/``tValues``: the frozen flat field ``[N_q F | N_r F]`` and its tangent;
    ``laplacian``: the tangent (``B``, ``gamma``) of the consistent Laplacian's state (handled
    by `operationsJVP.jvpFromContext` by linearity, never by a Tier-2 kernel); ``qOmegas
    [N_q]``, ``rOmegas [N_r]``: the tangents of the grad-h Omegas (the kernels read them only
    where the operator divides by Omega).
    """

    qPositions: Optional[torch.Tensor] = None
    qSupports: Optional[torch.Tensor] = None
    qDensities: Optional[torch.Tensor] = None
    rPositions: Optional[torch.Tensor] = None
    rSupports: Optional[torch.Tensor] = None
    rMasses: Optional[torch.Tensor] = None
    rDensities: Optional[torch.Tensor] = None
    rVolumes: Optional[torch.Tensor] = None
    crk: Any = None
    renorm: Optional[torch.Tensor] = None
    values: Optional[torch.Tensor] = None
    tValues: Optional[torch.Tensor] = None
    laplacian: Any = None
    qOmegas: Optional[torch.Tensor] = None
    rOmegas: Optional[torch.Tensor] = None

    @property
    def hasGeometry(self) -> bool:
        return any(t is not None for t in (
            self.qPositions, self.qSupports, self.qDensities, self.rPositions, self.rSupports,
            self.rMasses, self.rDensities, self.rVolumes, self.crk, self.renorm,
            self.laplacian, self.qOmegas, self.rOmegas))


def launchGeometryJVP(kernel, ctx, tangents: GeometryTangents, outputShape, outputDtype=None,
                      scalarExtras=(), numThreads=None, specialize=None):
    """Launch the Tier-2 JVP `kernel` for the primal call `ctx` (`SPHContext`).

    Args:
        kernel: a JVP kernel with the ABI of the module docstring.
        ctx: the primal call's context (the state of slots 0-35 is extracted from it).
        tangents: `GeometryTangents`.
        outputShape: the flat output shape; outputDtype: default the call's scalar type.
        scalarExtras: SCALAR kernel arguments after the pack (e.g. the field width).
        numThreads: thread count (default: the output's leading size).
        specialize: optional factory of the kernel specialised on the call's configuration
            (`JVPSpec.geometrySpecialize`; its config also says ``supportTangents``).

    Returns:
        The output tensor, reverse-differentiable through `StateAwareWarpFunction`.
    """
    c = ctx.corrections
    flat, build_primal = extractStateInfo(
        ctx.query, ctx.properties, ctx.domain, queryVolumes=c.volumes[0],
        referenceVolumes=c.volumes[1], adjacency=ctx.adjacency, referenceParticles=ctx.reference,
        crkState=c.crk, gradHState=c.gradH, renormalizationState=c.renorm,
        site=siteId(kernel), laplacianState=c.laplacian)
    qPos = ctx.query.positions
    d, tdtype, device = int(qPos.shape[1]), qPos.dtype, qPos.device
    s = warpScalar(tdtype)

    def null(kind):
        return nullField(kind, d, device, tdtype, tangent=True)

    t = tangents
    crk = t.crk
    block = [
        (t.qPositions, FieldKind.VECTOR), (t.rPositions, FieldKind.VECTOR),
        (t.qSupports, FieldKind.SCALAR), (t.rSupports, FieldKind.SCALAR),
        (None, FieldKind.SCALAR), (t.rMasses, FieldKind.SCALAR),
        (t.qDensities, FieldKind.SCALAR), (t.rDensities, FieldKind.SCALAR),
        (t.rVolumes, FieldKind.SCALAR),
        (crk.A if crk is not None else None, FieldKind.SCALAR),
        (crk.B if crk is not None else None, FieldKind.VECTOR),
        (crk.gradA if crk is not None else None, FieldKind.VECTOR),
        (crk.gradB if crk is not None else None, FieldKind.MATRIX),
        (t.renorm, FieldKind.MATRIX),
        (t.values, FieldKind.SCALAR), (t.tValues, FieldKind.SCALAR),
        (t.qOmegas, FieldKind.SCALAR), (t.rOmegas, FieldKind.SCALAR),
    ]
    present = [x is not None for x, _ in block]
    full = list(flat) + [x if x is not None else null(kind) for x, kind in block]
    flags = {
        "hasQPositions": present[0], "hasRPositions": present[1],
        "hasQSupports": present[2], "hasRSupports": present[3], "hasRMasses": present[5],
        "hasQDensities": present[6], "hasRDensities": present[7], "hasRVolumes": present[8],
        "hasCRK": crk is not None, "hasRenormalization": present[13],
        "hasValueTangent": present[15], "hasGeometry": t.hasGeometry,
        "hasQOmegas": present[16], "hasROmegas": present[17],
    }
    packT = structFor("tangent", d, s)

    def build_state(arrays, use_bundle=False):
        args = build_primal(arrays[:STATE_SIZE], use_bundle=use_bundle)
        a = arrays[STATE_SIZE:]
        fields = {
            "qPositions": a[0], "rPositions": a[1], "qSupports": a[2], "rSupports": a[3],
            "rMasses": a[5], "qDensities": a[6], "rDensities": a[7], "rVolumes": a[8],
            "A": a[9], "B": a[10], "gradA": a[11], "gradB": a[12], "L": a[13],
            "values": a[14], "tValues": a[15], "qOmegas": a[16], "rOmegas": a[17],
        }
        fields.update(flags)
        args.append(makeStruct(packT, fields, use_bundle=use_bundle, key=(d, s, "tangent")))
        return args

    build_state.config = dict(build_primal.config, supportTangents=present[2] or present[3],
                              coefficientTangents=any(present[k] for k in (5, 6, 7, 8, 15,
                                                                           16, 17)))
    return _launchFlat(kernel, full, build_state, s, tuple(scalarExtras), outputShape,
                       outputDtype if outputDtype is not None else s, numThreads=numThreads,
                       specialize=specialize)


def hvp(fn, primals, tangents):
    """Reverse-over-forward Hessian-vector product of a scalar function.

    Enters a `torch.autograd.forward_ad` dual level, makes each primal dual with its tangent,
    evaluates the scalar ``fn(*primals)``, and back-propagates the forward-mode tangent of the
    result: ``H v = grad_x <grad fn, v>``.

    Args:
        fn: callable of the primals returning a scalar tensor (any composition of this
            library's operators and torch operations).
        primals: a tensor or a tuple of tensors (floating point; need not require grad).
        tangents: matching tensor(s) v.

    Returns:
        ``(value, Hv)``: the detached value of ``fn`` and a tuple of ``H v`` per primal (a
        single tensor when `primals` is a tensor).
    """
    single = isinstance(primals, torch.Tensor)
    ps = (primals,) if single else tuple(primals)
    ts = (tangents,) if isinstance(tangents, torch.Tensor) else tuple(tangents)
    if len(ps) != len(ts):
        raise ValueError(f"hvp: {len(ps)} primals but {len(ts)} tangents; accepted: one tangent "
                         "per primal")
    for k, (p, v) in enumerate(zip(ps, ts)):
        if not isinstance(p, torch.Tensor) or not p.is_floating_point():
            raise TypeError(f"hvp: primal {k} must be a floating-point tensor")
        if not isinstance(v, torch.Tensor) or v.shape != p.shape:
            raise ValueError(f"hvp: tangent {k} has shape "
                             f"{tuple(getattr(v, 'shape', ()))}; accepted: {tuple(p.shape)}")
    leaves = tuple(p.detach().requires_grad_(True) for p in ps)
    with torch.enable_grad(), fwAD.dual_level():
        duals = tuple(fwAD.make_dual(p, v.to(p.dtype)) for p, v in zip(leaves, ts))
        out = fn(*duals)
        if not isinstance(out, torch.Tensor) or out.numel() != 1:
            raise ValueError("hvp: fn must return a scalar tensor")
        value, tangent = fwAD.unpack_dual(out)
        if tangent is None:
            zero = tuple(torch.zeros_like(p) for p in ps)
            return value.detach(), (zero[0] if single else zero)
        grads = torch.autograd.grad(tangent.sum(), leaves, allow_unused=True)
    res = tuple(g if g is not None else torch.zeros_like(p) for g, p in zip(grads, ps))
    return value.detach(), (res[0] if single else res)
