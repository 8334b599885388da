"""Call preparation and validation: the layer between the entry points and the operators.

`prepareCall` turns one user call (states, fields, corrections) into the operator's
`SPHContext` and extras after validating it (dtypes, devices, shapes, the corrections an
operator accepts, field shapes it defines), and returns the reshape of its output;
`runOperation` prepares, launches through `launchOperator` and reshapes. The entry points
(`operations.warpOperation`, `operationsJVP.warpOperationJVP`, the corrections' composite
calls) are built on these two. The forward-mode route of a launch (`dualRoute`, the
`jvp_fn` body of the dual-tensor path) is passed in by the caller: this layer does not
import the entry points above it (docs/design.md, "Layout").
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .autograd.callPlan import fingerprint, lookupPlan, recordPlan, seenBefore
from .autograd.functorch import FunctorchWrappedInput
from .autograd.operator_spec import Corrections, SPHContext, launchOperator
from .dataTypes.adjacency import AdjacencyList
from .dataTypes.compactHashMap import CompactHashMap
from .dataTypes.corrections import asGradHState, asRenormalizationState
from .enumTypes import GradientScheme, WarpOperation
from .operators import CORRECTION_LABELS, OPERATORS, ValueInputs, matches, operatorEntry
from .util.conversion import isFunctorchWrapped
from .util.precision import FLOAT_DTYPES

__all__ = ["prepareCall", "runOperation", "checkTensors", "checkParticles", "checkAdjacency",
           "collectTensors"]

_WHERE = "warpOperation"

#: keyword -> the members a scheme state's kernel reads (`SchemeState.members`), for the
#: dtype and device checks
_SCHEME_STATE_MEMBERS = {ss.keyword: tuple(name for name, _ in ss.members)
                         for entry in OPERATORS.values() for ss in entry.schemeStates}


def _collectTensors(queryParticles, referenceParticles, domain, queryValues, referenceValues,
                    queryVolumes, referenceVolumes, crkState, gradHState, renorm):
    """(name, tensor) of every float tensor of the call (None entries skipped)."""
    out = []

    def add(name, t):
        if t is not None:
            out.append((name, t))

    for role, p in (("queryParticles", queryParticles), ("referenceParticles", referenceParticles)):
        if p is None or (role == "referenceParticles" and p is queryParticles):
            continue
        for f in ("positions", "supports", "masses", "densities"):
            add(f"{role}.{f}", getattr(p, f, None))
    add("domain.min", domain.min)
    add("domain.max", domain.max)
    add("queryValues", queryValues)
    if referenceValues is not queryValues:
        add("referenceValues", referenceValues)
    add("queryVolumes", queryVolumes)
    if referenceVolumes is not queryVolumes:
        add("referenceVolumes", referenceVolumes)
    if crkState is not None:
        for f in ("A", "B", "gradA", "gradB"):
            add(f"crkState.{f}", getattr(crkState, f, None))
    if gradHState is not None:
        add("gradHState.queryOmegas", gradHState.queryOmegas)
        add("gradHState.referenceOmegas", getattr(gradHState, "referenceOmegas", None))
    if renorm is not None:
        add("renormalizationState.renormalizationMatrices", renorm.renormalizationMatrices)
    return out


def _checkTensors(tensors, device):
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_WHERE}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if isFunctorchWrapped(t):  # the entry point calls itself through `functorchCall`
            raise FunctorchWrappedInput(
                f"{_WHERE}: {name} is a torch.func (functorch) wrapped tensor, which the Warp "
                "bridge cannot read; warpOperation and warpOperationJVP route such calls "
                "through autograd.functorch")
    found = {name: t.dtype for name, t in tensors}
    bad = {n: dt for n, dt in found.items() if dt not in FLOAT_DTYPES}
    if bad:
        listing = ", ".join(f"{n}={dt}" for n, dt in bad.items())
        raise TypeError(f"{_WHERE}: unsupported dtype ({listing}); accepted: torch.float32 or "
                        "torch.float64")
    if len(set(found.values())) > 1:
        listing = ", ".join(f"{n}={dt}" for n, dt in found.items())
        raise TypeError(f"{_WHERE}: all floating-point tensors of one call must share one dtype; "
                        f"found {listing}")
    for name, t in tensors:
        if t.device != device:
            raise ValueError(f"{_WHERE}: {name} is on {t.device}; every tensor of the call must "
                             f"be on {device}")


def _checkParticles(role: str, p, d: int, device):
    for f in ("positions", "supports", "masses", "kinds"):
        if getattr(p, f, None) is None:
            raise TypeError(f"{_WHERE}: {role}.{f} is required")
    n = p.positions.shape[0]
    if p.positions.dim() != 2 or p.positions.shape[1] != d:
        raise ValueError(f"{_WHERE}: {role}.positions has shape {tuple(p.positions.shape)}; "
                         f"accepted: [N, {d}] (domain.dim = {d})")
    for f in ("supports", "masses", "kinds", "densities"):
        t = getattr(p, f, None)
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"{_WHERE}: {role}.{f} has shape {tuple(t.shape)}; accepted: [{n}]")
    if p.kinds.dtype != torch.int32:
        raise TypeError(f"{_WHERE}: {role}.kinds has dtype {p.kinds.dtype}; accepted: torch.int32")
    if p.kinds.device != device:
        raise ValueError(f"{_WHERE}: {role}.kinds is on {p.kinds.device}; every tensor of the "
                         f"call must be on {device}")
    return int(n)


def _checkAdjacency(adjacency, nQ: int, nR: int, device):
    if adjacency is None:
        return
    if isinstance(adjacency, AdjacencyList):
        for f in ("numNeighbors", "edgeOffsets"):
            t = getattr(adjacency, f)
            if tuple(t.shape) != (nQ,):
                raise ValueError(f"{_WHERE}: adjacency.{f} has shape {tuple(t.shape)}; accepted: "
                                 f"[{nQ}] (the number of queries)")
        if int(adjacency.numCols) != nR:
            raise ValueError(f"{_WHERE}: adjacency.numCols = {adjacency.numCols} but there are "
                             f"{nR} reference particles")
        if adjacency.j.device != device:
            raise ValueError(f"{_WHERE}: adjacency is on {adjacency.j.device}; accepted: {device}")
    elif isinstance(adjacency, CompactHashMap):
        if tuple(adjacency.sortIndex.shape) != (nR,):
            raise ValueError(f"{_WHERE}: the CompactHashMap's sortIndex has shape "
                             f"{tuple(adjacency.sortIndex.shape)}; accepted: [{nR}] (the number "
                             "of reference particles)")
        if adjacency.sortIndex.device != device:
            raise ValueError(f"{_WHERE}: the CompactHashMap is on {adjacency.sortIndex.device}; "
                             f"accepted: {device}")
    else:
        raise TypeError(f"{_WHERE}: adjacency has type {type(adjacency).__name__}; accepted: "
                        "AdjacencyList, CompactHashMap or None")


def _checkPopulation(name: str, t, n: int, what: str):
    if t is not None and (t.dim() < 1 or t.shape[0] != n):
        raise ValueError(f"{_WHERE}: {name} has shape {tuple(t.shape)}; accepted: leading axis "
                         f"{n} ({what})")


def _flattenField(values: torch.Tensor):
    """values ``[N, *S]`` -> (flat ``[N * F]``, S, F). Row-major; gradients flow through."""
    shape = tuple(values.shape[1:])
    F = math.prod(shape) if shape else 1
    n = values.shape[0]
    flat = values.reshape(n * F)
    return flat, shape, F



def runOperation(queryParticles, operationProperties, domain, queryValues=None,
                 referenceValues=None, queryVolumes=None, referenceVolumes=None, adjacency=None,
                 referenceParticles=None, preScatteredQuantities=None, crkState=None,
                 gradHState=None, renormalizationState=None, consistentDivergence=False,
                 covarianceReturnNumNeighbors=False, laplacianCorrectionState=None, *,
                 dualRoute=None):
    """`operations.warpOperation` with the forward-mode route `dualRoute` (see
    `launchOperator`) given by the caller; arguments, result and errors as there.

    A no-grad call repeated on the same objects in the same state is recorded on its second
    sight and replayed from its call plan from the third on (`autograd.callPlan`), skipping validation and extraction: the full path would
    validate and launch exactly the same thing."""
    args = (queryParticles, operationProperties, domain, queryValues, referenceValues,
            queryVolumes, referenceVolumes, adjacency, referenceParticles,
            preScatteredQuantities, crkState, gradHState, renormalizationState,
            consistentDivergence, laplacianCorrectionState, covarianceReturnNumNeighbors)
    fp = fingerprint(args)
    if fp is not None:
        plan = lookupPlan(fp[0])
        if plan is not None:
            return plan.run()
        if seenBefore(fp):
            return recordPlan(fp, lambda: _fullPath(args, dualRoute))
    raw, finish = _fullPath(args, dualRoute)
    return finish(raw)


def _fullPath(args: tuple, dualRoute):
    """Validate, prepare and launch one call; returns ``(raw, finish)``: the launch's output
    and the step that turns it into the call's result."""
    *callArgs, consistentDivergence, laplacianState, covarianceReturnNumNeighbors = args
    op, ctx, extras, finalize = _prepareCall(*callArgs, consistentDivergence,
                                             laplacianCorrectionState=laplacianState)
    out = launchOperator(operatorEntry(op).spec, ctx, dualRoute=dualRoute, **extras)
    if op == WarpOperation.Covariance:
        return out, (_covarianceWithCounts(finalize) if covarianceReturnNumNeighbors
                     else _covarianceOnly(finalize))
    return out, finalize


def _covarianceWithCounts(finalize):
    def finish(raw):
        return finalize(raw[0]), raw[1]
    return finish


def _covarianceOnly(finalize):
    def finish(raw):
        return finalize(raw[0])
    return finish


def _prepareCall(queryParticles, operationProperties, domain, queryValues=None,
                 referenceValues=None, queryVolumes=None, referenceVolumes=None, adjacency=None,
                 referenceParticles=None, preScatteredQuantities=None, crkState=None,
                 gradHState=None, renormalizationState=None, consistentDivergence=False,
                 laplacianCorrectionState=None, shareValues: bool = True):
    """Validation and defaulting of one operator call, shared by `warpOperation` and
    `warpOperationJVP`. With `shareValues` a call whose reference values are its query values
    passes them once (`_valueExtras`); `warpOperationJVP` asks for two blocks where the two
    sides' value tangents differ.

    Returns:
        ``(op, ctx, extras, finalize)``: the `WarpOperation`, the `SPHContext`, the declared
        extras of the operator's spec (flat values, field width, ...) and ``finalize(raw)``
        reshaping the kernel's flat (first) output to the public shape.
    """
    props = operationProperties
    mirrored = ((referenceParticles is None or referenceParticles is queryParticles)
                and (referenceValues is None or referenceValues is queryValues)
                and (referenceVolumes is None or referenceVolumes is queryVolumes))
    if referenceParticles is None:
        referenceParticles = queryParticles
    if referenceValues is None:
        referenceValues = queryValues
    if referenceVolumes is None:
        referenceVolumes = queryVolumes
    try:
        gradH = asGradHState(gradHState)
    except TypeError as e:
        raise ValueError(f"{_WHERE}: {e}") from None
    try:
        renorm = asRenormalizationState(renormalizationState)
    except TypeError as e:
        raise ValueError(f"{_WHERE}: {e}") from None

    if not isinstance(getattr(queryParticles, "positions", None), torch.Tensor):
        raise TypeError(f"{_WHERE}: queryParticles must be a ParticleState (positions tensor)")
    device = queryParticles.positions.device
    tensors = _collectTensors(queryParticles, referenceParticles, domain, queryValues,
                              referenceValues, queryVolumes, referenceVolumes, crkState, gradH,
                              renorm)
    schemeStates = {"laplacianCorrectionState": laplacianCorrectionState}
    for keyword, state in schemeStates.items():
        for f in _SCHEME_STATE_MEMBERS[keyword] if state is not None else ():
            t = getattr(state, f, None)
            if isinstance(t, torch.Tensor):
                tensors.append((f"{keyword}.{f}", t))
    _checkTensors(tensors, device)
    for name, t in (("queryParticles.kinds", queryParticles.kinds),
                    ("referenceParticles.kinds", referenceParticles.kinds)):
        if isinstance(t, torch.Tensor) and isFunctorchWrapped(t):
            raise NotImplementedError(f"{_WHERE}: {name} is a torch.func wrapped tensor; "
                                      "accepted: transforms over floating-point inputs only "
                                      "(kinds stay outside the transform)")

    d = int(domain.dim)
    nQ = _checkParticles("queryParticles", queryParticles, d, device)
    nR = nQ if referenceParticles is queryParticles else _checkParticles(
        "referenceParticles", referenceParticles, d, device)
    _checkAdjacency(adjacency, nQ, nR, device)
    _checkPopulation("queryVolumes", queryVolumes, nQ, "the number of queries")
    _checkPopulation("referenceVolumes", referenceVolumes, nR, "the number of references")
    if queryVolumes is not None and queryVolumes.dim() != 1:
        raise ValueError(f"{_WHERE}: queryVolumes has shape {tuple(queryVolumes.shape)}; "
                         f"accepted: [{nQ}]")
    if referenceVolumes is not None and referenceVolumes.dim() != 1:
        raise ValueError(f"{_WHERE}: referenceVolumes has shape "
                         f"{tuple(referenceVolumes.shape)}; accepted: [{nR}]")
    if crkState is not None:
        if getattr(crkState, "A", None) is None or getattr(crkState, "B", None) is None:
            raise ValueError(f"{_WHERE}: crkState needs A [N_q] and B [N_q, d]")
        if tuple(crkState.A.shape) != (nQ,) or tuple(crkState.B.shape) != (nQ, d):
            raise ValueError(f"{_WHERE}: crkState A/B have shapes {tuple(crkState.A.shape)}/"
                             f"{tuple(crkState.B.shape)}; accepted: [{nQ}] / [{nQ}, {d}]")

    op = WarpOperation(props.operation)
    if op == WarpOperation.Custom:
        raise ValueError(f"{_WHERE}: WarpOperation.Custom cannot be evaluated by warpOperation; "
                         "write a Warp kernel with the pair functions of warpSPHCore.kernels")
    entry = operatorEntry(op)
    given = {"crk": crkState, "gradH": gradH, "renorm": renorm}
    fields = _checkSchemeStates(entry, props, schemeStates, given, (nQ, d))
    ctx = SPHContext(
        query=queryParticles,
        properties=dataclasses.replace(props, operation=op),
        domain=domain,
        adjacency=adjacency,
        reference=None if referenceParticles is queryParticles else referenceParticles,
        corrections=Corrections(volumes=(queryVolumes, referenceVolumes), crk=crkState,
                                gradH=gradH, renorm=renorm, **fields),
        mirrored=mirrored,
    )
    # the call's keyword options; only those the operator declares reach it
    callKeywords = {"consistentDivergence": bool(consistentDivergence)}
    keywords = {o.name: callKeywords[o.name] for o in entry.options if o.keyword}

    shape, available = None, {}
    if entry.values is not ValueInputs.NONE:
        shape, available = _valueExtras(op, entry, queryValues, referenceValues,
                                        preScatteredQuantities, nQ, nR, shareValues)
    outShape = entry.outputShape(shape, d, props)
    dropped = entry.dropped(props)
    if dropped:
        # accepted and not handed to the kernel (the Naive Laplacian's CRK and
        # renormalization, which it never reads): not validated either
        ctx.corrections = dataclasses.replace(ctx.corrections, **dict.fromkeys(dropped))
    applied = entry.applied(props)
    states = {n: s for n, s in (("crk", crkState), ("gradH", gradH), ("renorm", renorm))
              if n in applied and s is not None}
    _checkCorrectionInputs(entry, props, (queryParticles, referenceParticles),
                           referenceVolumes, states, (nQ, nR, d),
                           consistent=keywords.get("consistentDivergence", False))
    available.update(keywords)
    extras = {e.name: available[e.name] for e in entry.spec.extras if e.name in available}
    if entry.values is ValueInputs.NONE and outShape == ():
        return op, ctx, extras, _identity  # the kernel's [N_q] output as it is
    return op, ctx, extras, _reshaper((nQ,) + outShape)


def _checkSchemeStates(entry, props, states: dict, corrections: dict, sizes: tuple) -> dict:
    """Validation of the per-query states that one option value needs (`SchemeState`, the
    consistent Laplacian's): present, complete and shaped when the option holds, not given
    otherwise, and the scheme's exclusions. Returns the `Corrections` fields to set."""
    nQ, d = sizes
    name = entry.operation.name
    fields = {}
    declared = {ss.keyword: ss for ss in entry.schemeStates}
    for keyword, state in states.items():
        ss = declared.get(keyword)
        if ss is None:
            if state is not None:
                readers = ", ".join(f"{op.name} with {s.option}={s.value.name}"
                                    for op, e in OPERATORS.items() for s in e.schemeStates
                                    if s.keyword == keyword)
                raise ValueError(f"{_WHERE}: {keyword} is given, but {name} reads no such state "
                                 f"(read by: {readers})")
            continue
        choice = f"{ss.option}={ss.value.name}"
        if not ss.holds(props):
            if state is not None:
                raise ValueError(f"{_WHERE}: {keyword} is given, but only {name} with {choice} "
                                 f"reads it (the call has {ss.option}="
                                 f"{type(ss.value)(getattr(props, ss.option)).name})")
            continue
        if state is None:
            raise ValueError(f"{_WHERE}: {name} with {choice} needs {keyword} (a "
                             "LaplacianCorrectionState from computeLaplacianCorrection for the "
                             "same particles, volumes and kernel)")
        for member, trailing in ss.members:
            t = getattr(state, member, None)
            want = (nQ,) + tuple(d if x == "d" else x for x in trailing)
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_WHERE}: {keyword}.{member} must be a tensor of shape "
                                f"{list(want)}, got {type(t).__name__}")
            if tuple(t.shape) != want:
                raise ValueError(f"{_WHERE}: {keyword}.{member} has shape {tuple(t.shape)}; "
                                 f"accepted: {list(want)} (N_q = {nQ}, d = {d})")
        for other in ss.excludes:
            if corrections.get(other) is not None:
                raise ValueError(f"{_WHERE}: {name} with {choice} carries its own correction "
                                 f"({keyword}); {CORRECTION_LABELS[other]} is not accepted with "
                                 "it")
        for option, value, why in ss.excludedOptions:
            if matches(getattr(props, option), value):
                shown = value.name if hasattr(value, "name") else value
                raise ValueError(f"{_WHERE}: {name} with {choice} does not accept "
                                 f"{option}={shown}: {why}")
        fields[ss.field] = state
    return fields


def _valueExtras(op, entry, queryValues, referenceValues, preScatteredQuantities, nQ: int,
                 nR: int, share: bool = True):
    """Validation of the value inputs the operator declares (`ValueInputs`) and their flat
    extras. Returns ``(S, extras)``: the field shape and the values extras (the flat values,
    ``fieldWidth``).

    An operator reading both sides gets one flat array, the query rows first and then the
    reference rows (``[N_q F | N_r F]``); when the reference values are the query values
    (and `share`) the one block ``[N F]`` serves both sides (`operators._coefficients.
    referenceBase`): no copy, half the memory the traversal reads, and the reverse kernels
    add both sides' adjoints into one array."""
    if queryValues is None and referenceValues is None:
        raise ValueError(f"{_WHERE}: {op.name} needs queryValues and/or referenceValues "
                         "(pre-scattered quantities are not supported)")
    if preScatteredQuantities is not None:
        raise NotImplementedError(f"{_WHERE}: preScatteredQuantities is not supported")
    _checkPopulation("queryValues", queryValues, nQ, "the number of queries")
    _checkPopulation("referenceValues", referenceValues, nR, "the number of references")
    if (queryValues is not None and referenceValues is not None
            and tuple(queryValues.shape[1:]) != tuple(referenceValues.shape[1:])):
        raise ValueError(f"{_WHERE}: {op.name}: queryValues and referenceValues have "
                         f"different field shapes ({tuple(queryValues.shape)} vs "
                         f"{tuple(referenceValues.shape)}); accepted: [N_q, *S] and [N_r, *S] "
                         "with the same trailing shape S")
    if entry.values is ValueInputs.REFERENCE:
        if referenceValues is None:
            raise ValueError(f"{_WHERE}: {op.name} needs referenceValues (or queryValues)")
        flat, shape, F = _flattenField(referenceValues)
        return shape, {"referenceValues": flat, "fieldWidth": F}
    if queryValues is None or referenceValues is None:
        raise ValueError(f"{_WHERE}: {op.name} needs both queryValues and referenceValues")
    qFlat, shape, F = _flattenField(queryValues)
    if share and referenceValues is queryValues:
        return shape, {"values": qFlat, "fieldWidth": F}
    rFlat, _, _ = _flattenField(referenceValues)
    return shape, {"values": torch.cat((qFlat, rFlat)), "fieldWidth": F}


def _identity(raw):
    return raw


def _reshaper(shape: tuple):
    def finalize(raw):
        return raw.reshape(shape)
    return finalize


def _checkCorrectionInputs(entry, props, particles: tuple, referenceVolumes, states: dict,
                           sizes: tuple, consistent=False):
    """Validation of what the operator's declaration says it reads:
    the densities its apparent volumes and scheme need, a complete CRK state when it reads
    the corrected gradient, and the Omega and L shapes of the states it applies.

    ``particles``: (query, reference); ``states``: the applied correction states of the call
    by name (``crk``, ``gradH``, ``renorm``); ``sizes``: (N_q, N_r, d)."""
    query, reference = particles
    nQ, nR, d = sizes
    name = entry.operation.name
    if entry.readsDensities:
        gradientMode = entry.option("gradientMode")
        if gradientMode is not None and GradientScheme(props.gradientMode) == \
                GradientScheme.Symmetric:
            for role, p in (("queryParticles", query), ("referenceParticles", reference)):
                if getattr(p, "densities", None) is None:
                    raise ValueError(f"{_WHERE}: {name} (Symmetric) uses masses and densities "
                                     f"(m_j rho_i / rho_j^2 ...) and needs {role}.densities "
                                     "(even with volumes)")
        elif consistent:
            roles = (("queryParticles", query),)
            if referenceVolumes is not None:
                roles += (("referenceParticles", reference),)
            for role, p in roles:
                if getattr(p, "densities", None) is None:
                    raise ValueError(f"{_WHERE}: {name} with consistentDivergence=True uses "
                                     "V_j = referenceVolumes_j rho_j / rho_i (or m_j / rho_i) "
                                     f"and needs {role}.densities")
        elif referenceVolumes is None and getattr(reference, "densities", None) is None:
            raise ValueError(f"{_WHERE}: {name} without volumes uses V_j = m_j / rho_j and "
                             "needs referenceParticles.densities (or pass referenceVolumes)")
    crkState = states.get("crk")
    if crkState is not None and entry.correctedGradient:
        gA, gB = getattr(crkState, "gradA", None), getattr(crkState, "gradB", None)
        if gA is None or gB is None:
            raise ValueError(f"{_WHERE}: {name} uses the corrected gradient and needs "
                             "crkState.gradA [N_q, d] and crkState.gradB [N_q, d, d] (got None)")
        if tuple(gA.shape) != (nQ, d) or tuple(gB.shape) != (nQ, d, d):
            raise ValueError(f"{_WHERE}: crkState gradA/gradB have shapes {tuple(gA.shape)}/"
                             f"{tuple(gB.shape)}; accepted: [{nQ}, {d}] / [{nQ}, {d}, {d}]")
    gradH = states.get("gradH")
    if gradH is not None:
        qO = gradH.queryOmegas
        rO = getattr(gradH, "referenceOmegas", None)
        rO = qO if rO is None else rO
        if tuple(qO.shape) != (nQ,) or tuple(rO.shape) != (nR,):
            raise ValueError(f"{_WHERE}: gradHState Omegas have shapes {tuple(qO.shape)}/"
                             f"{tuple(rO.shape)} (query/reference); accepted: [{nQ}] / [{nR}]")
    renorm = states.get("renorm")
    if renorm is not None:
        L = renorm.renormalizationMatrices
        if tuple(L.shape) != (nQ, d, d):
            raise ValueError(f"{_WHERE}: renormalizationState.renormalizationMatrices has shape "
                             f"{tuple(L.shape)}; accepted: [{nQ}, {d}, {d}]")


def _flagMatches(flag: bool, flagName: str, tensors: dict, required: tuple) -> None:
    """A `useX` flag and its tensors must agree (no flag without tensors, no tensors
    without the flag)."""
    given = [name for name, t in tensors.items() if t is not None]
    if flag:
        missing = [name for name in required if tensors[name] is None]
        if missing:
            raise ValueError(f"sphOperation_warp: {flagName}=True but {', '.join(missing)} "
                             "is None; pass the tensors or leave the flag False")
    elif given:
        raise ValueError(f"sphOperation_warp: {', '.join(given)} given but {flagName}=False; "
                         f"set {flagName}=True to use them")


#: public names of the validators (the corrections' composite calls use them)
prepareCall = _prepareCall
checkTensors = _checkTensors
checkParticles = _checkParticles
checkAdjacency = _checkAdjacency
collectTensors = _collectTensors
