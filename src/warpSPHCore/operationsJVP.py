"""Forward mode of the operators: `warpOperationJVP`, the scope matrix (which tangents an
operator accepts and what raises, read from the registry: `OperatorEntry.jvp` and the
acceptance row; docs/forward-mode.md), and the dual-tensor route's closure `dualRouteJVP`.
Re-exported by `operations`.

One core, `jvpFromContext(op, ctx, extras, tangents)`, serves both routes: it works on the
kernel-level representation of a prepared call (`preparation.prepareCall`: the `SPHContext`,
the declared extras with the flat values, and `GeometryTangents` whose value tangent has the
flat layout of the values) and returns the raw flat output.

* No geometry tangent: Tier 1, the primal kernel relaunched on the value tangent (bit-exact
  with `warpOperation` of the tangent values); zeros when there is no tangent at all. The
  exception is the Laplacian with ``positiveDivergence``, which is not linear in its values
  (the values select the pairs): its value tangent goes through the Tier-2 kernel, which
  keeps the primal's selection.
* Laplacian ``positiveDivergence`` with geometry tangents is accepted:
  the Tier-2 kernel applies the primal's pair selection, the exact derivative away from the
  switching surface ``x_ij . q_ij = 0``.
* Otherwise Tier 2: the operator's `JVPSpec.geometryKernel` through
  `jvpCommon.launchGeometryJVP`, the value tangent fused into the same neighbour loop.

Further decisions (docs/forward-mode.md):

* The dual route rebuilds the flat value tangent directly from the extras' slot, so value
  tangents of rank >= 2 fields work through dual tensors as well.
* Correction states the operator accepts and ignores (e.g. renormalization for Interpolate)
  are dropped in the dual route; the explicit API raises for the scope's "Raises" entries.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.autograd.forward_ad as fwAD

from .autograd.arg_extract import (
    _ADJ_LIST,
    _GRID_SORT,
    _LAP_MAT,
    _LAP_VEC,
    _NO_TANGENT_HOME,
    _QCRK_A,
    _QCRK_B,
    _QCRK_GRADA,
    _QCRK_GRADB,
    _QDEN,
    _QOMEGA,
    _QPOS,
    _QSUP,
    _RDEN,
    _RENORM_MAT,
    _RMAS,
    _ROMEGA,
    _RPOS,
    _RSUP,
    _RVOL,
    SLOT_NAMES,
    STATE_SIZE,
)
from .autograd.functorch import anyWrapped, functorchCall
from .autograd.jvpCommon import GeometryTangents, launchGeometryJVP
from .autograd.operator_spec import ExtraKind, _resolve, _resolveShape, launchOperator
from .autograd.specialize import specializationEnabled
from .autograd.stateAwareWarpFunction import _liveTangentMask
from .dataTypes.corrections import CRKTangentState, LaplacianCorrectionTangentState
from .enumTypes import WarpOperation
from .operators import (
    CORRECTION_LABELS,
    GEOMETRY_TANGENTS,
    ValueInputs,
    matches,
    operatorEntry,
)
from .operators._specialized import specialCodeCovers
from .preparation import _prepareCall, runOperation
from .util.precision import warpScalar

__all__ = ["warpOperationJVP", "jvpFromContext", "checkJVPScope", "dualRouteJVP"]

_WHERE = "warpOperationJVP"


def _valueExtra(spec):
    """Name of the TENSOR extra that carries the operator's values (`JVPSpec`), or None
    (Density, Covariance: geometry tangents only). The value operators other than
    Interpolate pass query and reference values as one flat array ``[N_q F | N_r F]``, so
    their query and reference value extras are the same name."""
    j = spec.jvp
    if j is None:
        return None
    return j.referenceValueExtra or j.queryValueExtra


def _rawShape(spec, ctx, extras):
    return _resolveShape(spec.outputs[0].shape, ctx, extras)


def _tangentList(channels, order, last: str = ", ") -> str:
    """``channels`` in ``order``, comma-separated, ``last`` before the final one."""
    names = [c for c in order if c in channels]
    if len(names) < 2:
        return ", ".join(names)
    return ", ".join(names[:-1]) + last + names[-1]


def _dimensions(dims) -> str:
    return _tangentList([f"{k}D" for k in dims], [f"{k}D" for k in (1, 2, 3)], " and ")


def _readsNoDensities(name: str, scope) -> str:
    """The message for a densities tangent of an operator that reads no densities."""
    both = "positions" in scope.geometry and "supports" in scope.geometry
    rest = [c for c in scope.geometry if not both or c not in ("positions", "supports")]
    accepted = ", ".join((["positions and supports (both sets)"] if both else []) + rest)
    return f"{name} reads no densities; accepted tangents: {accepted}"


def _stateLabel(name: str) -> str:
    return {"gradH": "grad-h (GradHState)", "crk": "CRK (CRKState)",
            "renorm": "renormalization (RenormalizationState)"}[name]


def _droppedStates(entry, props) -> tuple:
    """``(names, Ignored)`` of the correction states these properties make the operator drop
    (the Naive Laplacian's CRK and renormalization), or ``((), None)``."""
    dropped = entry.dropped(props)
    if not dropped:
        return (), None
    return dropped, getattr(entry.corrections, dropped[0]).ignoredWith


def _droppedMessage(entry, props, tangents: bool) -> str:
    """``the Naive Laplacian never reads the corrected gradient; CRK and renormalization
    [tangents] are accepted with Brookshaw, Dot and Default only``, from the declaration."""
    dropped, why = _droppedStates(entry, props)
    labels = " and ".join(CORRECTION_LABELS[n] for n in dropped)
    others = [v.name for v in entry.option(why.option).values if v != why.value]
    accepted = _tangentList(others, others, " and ")
    return (f"the {why.value.name} {entry.operation.name} {why.reason}; {labels}"
            f"{' tangents' if tangents else ''} are accepted with {accepted} only")


def checkJVPScope(op: WarpOperation, ctx, extras: dict, t: GeometryTangents,
                  where: str = _WHERE) -> None:
    """The Tier-2 scope matrix (docs/forward-mode.md) for a call with geometry tangents, as the
    registry declares it (`OperatorEntry.jvp`, `operators._declarations.JVPScope`).

    Raises:
        NotImplementedError: an unsupported option or correction (message: what is supported).
        ValueError: a correction tangent without its primal state.
    """
    c = ctx.corrections
    props = ctx.properties
    name = op.name
    if t.crk is not None and c.crk is None:
        raise ValueError(f"{where}: crkTangentState given without crkState; pass the primal "
                         "CRKState whose tangent it is")
    if t.renorm is not None and c.renorm is None:
        raise ValueError(f"{where}: renormalizationTangentState given without "
                         "renormalizationState; pass the primal state whose tangent it is")
    if t.laplacian is not None and c.laplacian is None:
        raise ValueError(f"{where}: laplacianCorrectionTangentState given without "
                         "laplacianCorrectionState; pass the primal state whose tangent it is")
    if t.rVolumes is not None and c.volumes[1] is None:
        raise ValueError(f"{where}: tangentReferenceVolumes given without referenceVolumes")
    entry = operatorEntry(op)
    scope = entry.jvp
    if "densities" not in scope.geometry and (t.qDensities is not None
                                              or t.rDensities is not None):
        raise NotImplementedError(f"{where}: {_readsNoDensities(name, scope)}")
    states = {"crk": c.crk, "renorm": c.renorm, "gradH": c.gradH}
    for key in ("crk", "renorm", "gradH"):
        if key not in scope.rejectedStates or states[key] is None:
            continue
        if not scope.correctionTangents:
            supported = _tangentList(scope.geometry, ("positions", "supports", "densities",
                                                      "reference masses",
                                                      "reference volumes"), " and ")
            raise NotImplementedError(
                f"{where}: the geometry JVP of {name} does not support "
                f"{CORRECTION_LABELS[key]}; supported: {supported}")
        raise NotImplementedError(f"{where}: geometry JVPs with {_stateLabel(key)} are not "
                                  f"supported for {name}; value tangents alone are (Tier 1)")
    for rejected in scope.rejectedOptions:
        chosen = entry.option(rejected.option).valueIn(props, extras)
        if matches(chosen, rejected.value):
            raise NotImplementedError(f"{where}: the geometry JVP of {name} {rejected.message}")
    d = int(ctx.domain.dim)
    if d not in scope.dims:
        raise NotImplementedError(f"{where}: the geometry JVP of {name} is supported in "
                                  f"{_dimensions(scope.dims)} only (got d = {d})")
    dropped, _ = _droppedStates(entry, props)
    if any(getattr(c, n) is not None for n in dropped):
        raise NotImplementedError(f"{where}: {_droppedMessage(entry, props, tangents=True)}")


def _selectsByValues(op: WarpOperation, properties) -> bool:
    """True for a value operator that is not linear in its values (`JVPScope.valueSelection`):
    the Laplacian with ``positiveDivergence`` keeps a pair only if ``x_ij . q_ij >= 0``, a
    selection made by the values themselves. Its value JVP is not the operator on the
    tangent values (that would select pairs by the tangent's sign) but the primal's
    selection applied to the tangent, which the Tier-2 kernel computes with the values
    frozen (exact away from the switching surface ``x_ij . q_ij = 0``)."""
    return operatorEntry(op).jvp.selectsByValues(properties)


def _completeLaplacianTangent(state, tangent):
    """``tangent`` with zero ``B``/``gamma`` where it has none (a frozen member)."""
    B = getattr(tangent, "B", None)
    g = getattr(tangent, "gamma", None)
    return LaplacianCorrectionTangentState(
        B=torch.zeros_like(state.B) if B is None else B,
        gamma=torch.zeros_like(state.gamma) if g is None else g)


def jvpFromContext(op: WarpOperation, ctx, extras: dict, t: GeometryTangents):
    """The JVP of one prepared call in the raw flat output layout (module docstring)."""
    spec = operatorEntry(op).spec
    if t.laplacian is not None:
        # the consistent Laplacian is linear in its state (B, gamma): that tangent is the
        # primal on the frozen values with (dB, dgamma) in the state's place
        tangentState = _completeLaplacianTangent(ctx.corrections.laplacian, t.laplacian)
        lctx = dataclasses.replace(ctx, corrections=dataclasses.replace(
            ctx.corrections, laplacian=tangentState))
        linear = launchOperator(spec, lctx, dualRoute=dualRouteJVP, **extras)
        return linear + jvpFromContext(op, ctx, extras, dataclasses.replace(t, laplacian=None))
    valueName = _valueExtra(spec)
    if not t.hasGeometry and not (t.tValues is not None and _selectsByValues(op, ctx.properties)):
        if t.tValues is None:
            s = ctx.query.positions
            return torch.zeros(_rawShape(spec, ctx, extras), dtype=s.dtype, device=s.device)
        if valueName is None:
            raise NotImplementedError(f"{_WHERE}: {op.name} has no value input (no value "
                                      "tangent); accepted: geometry tangents")
        out = launchOperator(spec, ctx, dualRoute=dualRouteJVP, **{**extras, valueName: t.tValues})
        return out[0] if isinstance(out, tuple) else out
    kernel = spec.jvp.geometryKernel if spec.jvp is not None else None
    if kernel is None:
        raise NotImplementedError(f"{_WHERE}: the geometry JVP of {op.name} is not implemented")
    scalars = tuple(extras[e.name] for e in spec.extras if e.kind == ExtraKind.SCALAR)
    if valueName is not None:
        t = dataclasses.replace(t, values=extras[valueName])
    threads = getattr(spec.jvp, "geometryThreads", None)
    numThreads = int(_resolve(threads, ctx, extras)) if threads is not None else None
    return launchGeometryJVP(kernel, ctx, t, _rawShape(spec, ctx, extras),
                             warpScalar(ctx.query.positions.dtype), scalars, numThreads,
                             specialize=spec.jvp.geometrySpecialize)


# --------------------------------------------------------------------------------------
# the explicit API
# --------------------------------------------------------------------------------------


def _checkTangent(name: str, t, like, device, dtype):
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_WHERE}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if like is not None and tuple(t.shape) != tuple(like.shape):
        raise ValueError(f"{_WHERE}: {name} has shape {tuple(t.shape)}; accepted: "
                         f"{tuple(like.shape)} (the shape of its primal)")
    if t.dtype != dtype:
        raise TypeError(f"{_WHERE}: {name} has dtype {t.dtype}; accepted: {dtype} (the call's "
                        "dtype)")
    if t.device != device:
        raise ValueError(f"{_WHERE}: {name} is on {t.device}; accepted: {device}")


def _flatValueTangent(entry, tq, tr, queryValues, referenceValues):
    """The value tangent in the flat layout of the operator's values extra."""
    if entry.values is ValueInputs.REFERENCE:
        return None if tr is None else tr.reshape(-1)
    if tq is None and tr is None:
        return None
    if tq is tr and queryValues is referenceValues:  # one block (`_prepareCall`)
        return tq.reshape(-1)
    tq = torch.zeros_like(queryValues) if tq is None else tq
    tr = torch.zeros_like(referenceValues) if tr is None else tr
    return torch.cat((tq.reshape(-1), tr.reshape(-1)))


def warpOperationJVP(queryParticles, operationProperties, domain, tangentQueryValues=None,
                     tangentReferenceValues=None, queryTangentState=None,
                     referenceTangentState=None, queryValues=None, referenceValues=None,
                     queryVolumes=None, referenceVolumes=None, tangentQueryVolumes=None,
                     tangentReferenceVolumes=None, adjacency=None, referenceParticles=None,
                     crkState=None, crkTangentState=None, gradHState=None,
                     renormalizationState=None, renormalizationTangentState=None,
                     consistentDivergence=False, laplacianCorrectionState=None,
                     laplacianCorrectionTangentState=None, gradHTangentState=None):
    """Directional derivative of `warpOperation` in the combined direction of every supplied
    tangent, in the primal's public output shape (Covariance: the matrix tangent only).

    Args:
        queryParticles: primal argument, as for `warpOperation`.
        operationProperties: primal argument, as for `warpOperation`.
        domain: primal argument, as for `warpOperation`.
        queryValues: primal argument, as for `warpOperation`.
        referenceValues: primal argument, as for `warpOperation`.
        queryVolumes: primal argument, as for `warpOperation`.
        referenceVolumes: primal argument, as for `warpOperation`.
        adjacency: primal argument, as for `warpOperation`.
        referenceParticles: primal argument, as for `warpOperation`.
        crkState: primal argument, as for `warpOperation`.
        gradHState: primal argument, as for `warpOperation`.
        renormalizationState: primal argument, as for `warpOperation`.
        consistentDivergence: primal argument, as for `warpOperation`.
        tangentQueryValues: tangent of queryValues (shape of the values; None = zero).
        tangentReferenceValues: tangent of referenceValues (shape of the values; None =
            zero). The reference tangent defaults to the query tangent when the
            reference values are the query values (``referenceValues`` None or the same
            tensor), as the primal defaults the values; distinct reference values without a
            tangent are frozen.
        queryTangentState: `ParticleTangentState` of the query set (positions ``[N_q, d]``,
            supports, masses, densities ``[N_q]``, any None). Query masses are never read:
            their tangent raises (pass reference masses).
        referenceTangentState: `ParticleTangentState` of the reference set (positions
            ``[N_r, d]``, supports, masses, densities ``[N_r]``, any None). With a
            self-interaction call (``referenceParticles`` None or the query state) the
            reference tangent defaults to the query tangent.
        tangentQueryVolumes: rejected (query volumes are never read).
        tangentReferenceVolumes: ``[N_r]`` tangent of referenceVolumes.
        crkTangentState: `CRKTangentState` (all four members) of `crkState`.
        renormalizationTangentState: `RenormalizationTangentState` or ``[N_q, d, d]``.
        laplacianCorrectionState: primal argument, as for `warpOperation`.
        laplacianCorrectionTangentState: `LaplacianCorrectionTangentState` of it (``B`` and
            ``gamma`` read; either may be None = frozen), e.g. from
            `corrections.computeLaplacianCorrectionJVP`.
        gradHTangentState: a `GradHState` holding the tangents of `gradHState`'s Omegas
            (``queryOmegas [N_q]``; ``referenceOmegas [N_r]`` or None: the query tangent when
            the primal state has no reference Omegas, else frozen). Read by the operators
            that divide by Omega (Gradient, Divergence, Curl, Laplacian); ignored by the
            others, as the primal state is.

    Returns:
        The tangent, same shape, dtype and device as the primal output; differentiable in
        reverse mode (reverse over forward).

    Raises:
        NotImplementedError: out-of-scope requests (docs/forward-mode.md): a value tangent of
            Density/Covariance, grad-h with geometry tangents, CRK or renormalization with
            the Naive Laplacian, renormalization for Interpolate (which never reads it).
        ValueError/TypeError: inconsistent arguments (a correction tangent without its primal
            state, query-mass or query-volume tangents, shapes, dtypes, devices).
    """
    arguments = dict(locals())
    if torch._C._are_functorch_transforms_active() or anyWrapped(arguments):  # torch.func
        return functorchCall(_warpOperationJVP, _WHERE, (), arguments)
    return _warpOperationJVP(**arguments)


def _warpOperationJVP(queryParticles, operationProperties, domain, tangentQueryValues,
                      tangentReferenceValues, queryTangentState, referenceTangentState,
                      queryValues, referenceValues, queryVolumes, referenceVolumes,
                      tangentQueryVolumes, tangentReferenceVolumes, adjacency,
                      referenceParticles, crkState, crkTangentState, gradHState,
                      renormalizationState, renormalizationTangentState, consistentDivergence,
                      laplacianCorrectionState, laplacianCorrectionTangentState,
                      gradHTangentState):
    """`warpOperationJVP` on tensors no `torch.func` transform wraps."""
    op = WarpOperation(operationProperties.operation)
    entry = operatorEntry(op)
    scope = entry.jvp
    selfRef = referenceParticles is None or referenceParticles is queryParticles
    # the reference values are the query values when the primal defaults them (None) or is
    # given the same tensor: then their tangent is the query tangent; distinct reference
    # values without a tangent are frozen (zero tangent)
    if tangentReferenceValues is None and (referenceValues is None
                                           or referenceValues is queryValues):
        tangentReferenceValues = tangentQueryValues
    if referenceValues is None:
        referenceValues = queryValues
    qt, rt = queryTangentState, referenceTangentState
    if qt is not None and getattr(qt, "masses", None) is not None:
        raise ValueError(f"{_WHERE}: queryTangentState.masses is given, but no operator reads "
                         "query masses; pass the mass tangent as referenceTangentState.masses")
    if tangentQueryVolumes is not None:
        raise ValueError(f"{_WHERE}: tangentQueryVolumes is given, but no operator reads query "
                         "volumes; pass tangentReferenceVolumes")
    if selfRef and rt is None and qt is not None:
        rt = dataclasses.replace(qt)
    renormT = getattr(renormalizationTangentState, "renormalizationMatrices",
                      renormalizationTangentState)
    if crkTangentState is not None and not isinstance(crkTangentState, CRKTangentState):
        raise TypeError(f"{_WHERE}: crkTangentState has type {type(crkTangentState).__name__}; "
                        "accepted: CRKTangentState")
    geometry = any(x is not None for x in (
        getattr(qt, "positions", None), getattr(qt, "supports", None),
        getattr(qt, "densities", None), getattr(rt, "positions", None),
        getattr(rt, "supports", None), getattr(rt, "masses", None),
        getattr(rt, "densities", None), tangentReferenceVolumes, crkTangentState, renormT,
        laplacianCorrectionTangentState, gradHTangentState))
    hasValueTangent = tangentQueryValues is not None or tangentReferenceValues is not None
    if hasValueTangent and not scope.valueTangents:
        raise NotImplementedError(f"{_WHERE}: {op.name} has no value input; accepted tangents: "
                                  + _tangentList(scope.geometry, GEOMETRY_TANGENTS))

    primal = dict(queryVolumes=queryVolumes, referenceVolumes=referenceVolumes,
                  adjacency=adjacency, referenceParticles=referenceParticles, crkState=crkState,
                  gradHState=gradHState, renormalizationState=renormalizationState,
                  consistentDivergence=consistentDivergence,
                  laplacianCorrectionState=laplacianCorrectionState)
    if not geometry and not (hasValueTangent and _selectsByValues(op, operationProperties)):
        if hasValueTangent:  # Tier 1: literally the operator on the tangent values
            tq, tr = tangentQueryValues, tangentReferenceValues
            if tq is None and queryValues is not None:
                tq = torch.zeros_like(queryValues)
            if tr is None and referenceValues is not None:
                tr = torch.zeros_like(referenceValues)
            return runOperation(queryParticles, operationProperties, domain, queryValues=tq,
                                referenceValues=tr, dualRoute=dualRouteJVP, **primal)
        with torch.no_grad():
            out = runOperation(queryParticles, operationProperties, domain,
                               queryValues=queryValues, referenceValues=referenceValues,
                               dualRoute=dualRouteJVP, **primal)
        return torch.zeros_like(out[0] if isinstance(out, tuple) else out)

    if entry.values is ValueInputs.QUERY_AND_REFERENCE and (
            queryValues is None or referenceValues is None):
        what = "geometry JVP" if geometry else "value JVP with positiveDivergence"
        raise ValueError(f"{_WHERE}: the {what} of {op.name} needs the frozen primal "
                         "queryValues (and referenceValues, default queryValues)")
    op, ctx, extras, finalize = _prepareCall(
        queryParticles, operationProperties, domain, queryValues, referenceValues,
        crkState=crkState, gradHState=gradHState, renormalizationState=renormalizationState,
        queryVolumes=queryVolumes, referenceVolumes=referenceVolumes, adjacency=adjacency,
        referenceParticles=referenceParticles, consistentDivergence=consistentDivergence,
        laplacianCorrectionState=laplacianCorrectionState,
        shareValues=tangentReferenceValues is tangentQueryValues)
    pos = queryParticles.positions
    device, dtype = pos.device, pos.dtype
    ref = queryParticles if selfRef else referenceParticles
    for role, ts, p in (("queryTangentState", qt, queryParticles),
                        ("referenceTangentState", rt, ref)):
        if ts is None:
            continue
        for f in ("positions", "supports", "masses", "densities"):
            like = getattr(p, f, None)
            tf = getattr(ts, f, None)
            if tf is not None and like is None:
                raise ValueError(f"{_WHERE}: {role}.{f} is given but the primal has no {f}")
            _checkTangent(f"{role}.{f}", tf, like, device, dtype)
    _checkTangent("tangentReferenceVolumes", tangentReferenceVolumes,
                  ctx.corrections.volumes[1], device, dtype)
    _checkTangent("tangentQueryValues", tangentQueryValues, queryValues, device, dtype)
    _checkTangent("tangentReferenceValues", tangentReferenceValues, referenceValues, device,
                  dtype)
    if crkTangentState is not None and crkState is not None:
        for f in ("A", "B", "gradA", "gradB"):
            _checkTangent(f"crkTangentState.{f}", getattr(crkTangentState, f),
                          getattr(crkState, f, None), device, dtype)
    if renormT is not None and ctx.corrections.renorm is not None:
        _checkTangent("renormalizationTangentState", renormT,
                      ctx.corrections.renorm.renormalizationMatrices, device, dtype)
    omegaT = (None, None)
    if gradHTangentState is not None:
        if gradHState is None:
            raise ValueError(f"{_WHERE}: gradHTangentState given without gradHState; pass "
                             "the primal GradHState whose tangent it is")
        primalH = ctx.corrections.gradH if ctx.corrections.gradH is not None else gradHState
        qo = getattr(gradHTangentState, "queryOmegas", None)
        ro = getattr(gradHTangentState, "referenceOmegas", None)
        _checkTangent("gradHTangentState.queryOmegas", qo, primalH.queryOmegas, device, dtype)
        if primalH.referenceOmegas is None:
            if ro is not None:
                raise ValueError(f"{_WHERE}: gradHTangentState.referenceOmegas is given but "
                                 "gradHState has no referenceOmegas (its query Omegas serve "
                                 "both roles, and so does their tangent)")
            ro = qo
        else:
            _checkTangent("gradHTangentState.referenceOmegas", ro, primalH.referenceOmegas,
                          device, dtype)
        omegaT = (qo, ro)
    if laplacianCorrectionTangentState is not None and ctx.corrections.laplacian is not None:
        for f in ("B", "gamma"):
            _checkTangent(f"laplacianCorrectionTangentState.{f}",
                          getattr(laplacianCorrectionTangentState, f, None),
                          getattr(ctx.corrections.laplacian, f), device, dtype)
    # _prepareCall dropped the states the options make ignored; a tangent for them is out
    # of scope
    given = {"crk": crkState, "renorm": renormalizationState, "gradH": gradHState}
    if any(given.get(n) is not None for n in entry.dropped(operationProperties)):
        raise NotImplementedError(
            f"{_WHERE}: {_droppedMessage(entry, operationProperties, tangents=False)}")
    # the states the operator ignores that the scope does not reject are dropped (all of
    # Density's); those only an option ignores (Symmetric's volumes) stay
    drop = [n for n, use in entry.corrections.items()
            if not use.applied and n not in scope.rejectedStates]
    if drop:
        ctx.corrections = dataclasses.replace(
            ctx.corrections, **{n: ((None, None) if n == "volumes" else None) for n in drop})
        if "volumes" in drop:
            tangentReferenceVolumes = None
        if "gradH" in drop:
            omegaT = (None, None)

    readsDensities = "densities" in scope.geometry
    tangents = GeometryTangents(
        qPositions=getattr(qt, "positions", None), qSupports=getattr(qt, "supports", None),
        qDensities=getattr(qt, "densities", None) if readsDensities else None,
        rPositions=getattr(rt, "positions", None), rSupports=getattr(rt, "supports", None),
        rMasses=getattr(rt, "masses", None),
        rDensities=getattr(rt, "densities", None) if readsDensities else None,
        rVolumes=tangentReferenceVolumes, crk=crkTangentState, renorm=renormT,
        laplacian=laplacianCorrectionTangentState, qOmegas=omegaT[0], rOmegas=omegaT[1],
        tValues=_flatValueTangent(entry, tangentQueryValues, tangentReferenceValues,
                                  queryValues, referenceValues))
    if not readsDensities and (getattr(qt, "densities", None) is not None
                               or getattr(rt, "densities", None) is not None):
        raise NotImplementedError(f"{_WHERE}: {_readsNoDensities(op.name, scope)}")
    checkJVPScope(op, ctx, extras, tangents)
    return finalize(jvpFromContext(op, ctx, extras, tangents))


# --------------------------------------------------------------------------------------
# the dual-tensor route (tangents arriving as torch.autograd.forward_ad duals)
# --------------------------------------------------------------------------------------


def _primalOf(x):
    """A dual tensor's primal (a differentiable view); anything else unchanged."""
    if isinstance(x, torch.Tensor):
        return fwAD.unpack_dual(x).primal
    return x


def _strip(obj):
    """`obj` (a state dataclass, tuple or tensor) with every dual tensor replaced by its
    primal, so that the JVP launch inside jvp() sees plain (possibly grad-requiring)
    tensors."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        return _primalOf(obj)
    if isinstance(obj, tuple):
        return tuple(_strip(x) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, (torch.Tensor, tuple)) or dataclasses.is_dataclass(v):
                nv = _strip(v)
                if nv is not v:
                    changes[f.name] = nv
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def fusedDualJVP(spec, ctx, extras: dict):
    """The dual-tensor route of a call whose only forward-mode tangent is on the positions of
    one particle set (no corrections, no reference set, nothing requiring grad): the primal
    and the tangent from one traversal (`JVPSpec.dualSpecialize`), the primal's bits; None
    where it does not apply (the bridge's route then runs the primal and `dualRouteJVP`).
    The one readback is the tangent's liveness: a zero tangent gives the primal launch and
    an exact zero tangent."""
    jvp = spec.jvp
    if jvp is None or jvp.dualSpecialize is None or not specializationEnabled():
        return None
    c = ctx.corrections
    if (tuple(c.volumes) != (None, None) or c.crk is not None or c.gradH is not None
            or c.renorm is not None or c.laplacian is not None or ctx.reference is not None):
        return None
    props = ctx.properties
    if not specialCodeCovers(props.kernel, props.supportMode):
        return None
    q = ctx.query
    primal, tangent = fwAD.unpack_dual(q.positions)
    if tangent is None:
        return None
    others = [q.supports, q.masses, q.densities, ctx.domain.min, ctx.domain.max]
    others += [v for v in extras.values() if isinstance(v, torch.Tensor)]
    others = [t for t in others if isinstance(t, torch.Tensor)]
    if any(fwAD.unpack_dual(t).tangent is not None for t in others):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in [primal, tangent] + others):
        return None
    jctx = dataclasses.replace(ctx, query=_strip(q))
    jextras = {k: _strip(v) for k, v in extras.items()}
    if not _liveTangentMask([tangent])[0]:  # the route's one readback
        out = launchOperator(spec, jctx, **jextras)
        return fwAD.make_dual(out, torch.zeros_like(out))
    n = int(_rawShape(spec, jctx, jextras)[0])
    valueName = _valueExtra(spec)
    t = GeometryTangents(qPositions=tangent, rPositions=tangent,
                         values=None if valueName is None else jextras[valueName])
    scalars = tuple(jextras[e.name] for e in spec.extras if e.kind == ExtraKind.SCALAR)
    threads = jvp.geometryThreads
    numThreads = int(_resolve(threads, jctx, jextras)) if threads is not None else None
    out = launchGeometryJVP(jvp.geometryKernel, jctx, t, (2 * n,), warpScalar(primal.dtype),
                            scalars, numThreads, specialize=jvp.dualSpecialize)
    return fwAD.make_dual(out[:n], out[n:])


def dualRouteJVP(spec, ctx, extras: dict, flat_tangents, mask):
    """The `jvp_fn` body of `launchOperator` (the dual-tensor route): rebuild the tangents from
    the fixed slots, drop channels the operator never reads, and delegate to
    `jvpFromContext`. Returns one tangent per forward output."""
    op = WarpOperation(ctx.properties.operation)
    entry = operatorEntry(op)

    def live(k):
        return k < len(mask) and mask[k]

    def tan(k):
        return flat_tangents[k] if live(k) else None

    for k in _NO_TANGENT_HOME:
        if live(k):
            raise NotImplementedError(f"{op.name}: a live forward-mode tangent on "
                                      f"{SLOT_NAMES[k]} (domain or grid bounds); no geometry "
                                      "JVP differentiates domain bounds or grid structure")
    for k in range(_ADJ_LIST, _GRID_SORT + 1):
        if live(k):
            raise NotImplementedError(f"{op.name}: a live tangent on {SLOT_NAMES[k]}")

    corr = ctx.corrections
    # ignored states (the acceptance matrix, and those the options make ignored and the call
    # drops); the states the kernel receives and does not read (Symmetric's volumes) stay
    drop = tuple(n for n, use in entry.corrections.items() if not use.applied)
    drop += entry.dropped(ctx.properties)
    changes = {name: ((None, None) if name == "volumes" else None) for name in drop}
    corr = dataclasses.replace(corr, **changes)
    jctx = dataclasses.replace(
        ctx, query=_strip(ctx.query), reference=_strip(ctx.reference), domain=ctx.domain,
        corrections=dataclasses.replace(
            corr, volumes=_strip(corr.volumes), crk=_strip(corr.crk), gradH=_strip(corr.gradH),
            renorm=_strip(corr.renorm), laplacian=_strip(corr.laplacian)))
    jextras = {k: _strip(v) for k, v in extras.items()}

    crkT = None
    if corr.crk is not None and any(live(k) for k in range(_QCRK_A, _QCRK_GRADB + 1)):
        c = jctx.corrections.crk
        members = []
        for k, f in zip((_QCRK_A, _QCRK_B, _QCRK_GRADA, _QCRK_GRADB), ("A", "B", "gradA",
                                                                         "gradB")):
            primal = getattr(c, f)
            members.append(tan(k) if live(k) else torch.zeros_like(primal))
        crkT = CRKTangentState(*members)
    renormT = tan(_RENORM_MAT) if corr.renorm is not None else None
    noDensities = "densities" not in entry.jvp.geometry
    valueName = _valueExtra(spec)
    tValues = None
    if valueName is not None:
        idx = STATE_SIZE + [e.name for e in spec.extras
                            if e.kind == ExtraKind.TENSOR].index(valueName)
        tValues = tan(idx)
    tangents = GeometryTangents(
        qPositions=tan(_QPOS), qSupports=tan(_QSUP),
        qDensities=None if noDensities else tan(_QDEN),
        rPositions=tan(_RPOS), rSupports=tan(_RSUP), rMasses=tan(_RMAS),
        rDensities=None if noDensities else tan(_RDEN),
        rVolumes=tan(_RVOL) if corr.volumes[1] is not None else None,
        crk=crkT, renorm=renormT, tValues=tValues,
        laplacian=(LaplacianCorrectionTangentState(B=tan(_LAP_MAT), gamma=tan(_LAP_VEC))
                   if corr.laplacian is not None and (live(_LAP_MAT) or live(_LAP_VEC))
                   else None),
        # the Omegas' tangents where the operator divides by Omega (the reference slot holds
        # the query Omegas, and so their tangent, when the state gives no reference Omegas)
        qOmegas=tan(_QOMEGA) if corr.gradH is not None else None,
        rOmegas=tan(_ROMEGA) if corr.gradH is not None else None)
    if tangents.hasGeometry:
        checkJVPScope(op, jctx, jextras, tangents, where=f"{op.name} (forward-mode AD)")
    out = jvpFromContext(op, jctx, jextras, tangents)
    if len(spec.outputs) > 1:
        return (out,) + (None,) * (len(spec.outputs) - 1)
    return out


# the one-traversal route `launchOperator` tries first while a forward-mode level is open
dualRouteJVP.fused = fusedDualJVP
