"""Public operator entry points `warpOperation` and the flat-tensor adapter
`sphOperation_warp`; `warpOperationJVP` and `warpOperationHVP` are re-exported from their own
entry modules.

Validation (dtypes, devices, shapes), defaulting, field flattening and output reshape live
in `preparation`; dispatch goes through the bridge's `launchOperator` (docs/autograd.md)
for all seven operators, with the dual-tensor route of `operationsJVP`.
"""

from __future__ import annotations

import torch

from .autograd.functorch import FunctorchWrappedInput, functorchCall
from .dataTypes.corrections import CRKState
from .dataTypes.operationProperties import OperationProperties
from .dataTypes.particleState import ParticleState
from .enumTypes import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    SupportScheme,
    WarpOperation,
)
from .operationsHVP import warpOperationHVP
from .operationsJVP import dualRouteJVP, warpOperationJVP
from .operators import OPERATORS
from .preparation import (  # noqa: F401  (historical private names, kept importable here)
    _checkAdjacency,
    _checkParticles,
    _checkTensors,
    _collectTensors,
    _flagMatches,
    _prepareCall,
    runOperation,
)

__all__ = ["warpOperation", "warpOperationJVP", "warpOperationHVP", "sphOperation_warp"]


def warpOperation(queryParticles, operationProperties, domain, queryValues=None,
                  referenceValues=None, queryVolumes=None, referenceVolumes=None, adjacency=None,
                  referenceParticles=None, preScatteredQuantities=None, crkState=None,
                  gradHState=None, renormalizationState=None, consistentDivergence=False,
                  covarianceReturnNumNeighbors=False, laplacianCorrectionState=None):
    """Evaluate one SPH operator.

    Density: ``rho_i = sum_j m_j W_ij`` -> ``[N_q]``.
    Interpolate: ``f_i = sum_j f_j V_j W^R_ij`` -> ``[N_q, *S]`` with
    ``S = referenceValues.shape[1:]``; V_j = referenceVolumes[j] or m_j / rho_j; W^R with a
    `CRKState` (A, B), else W.
    Gradient: ``out_i = sum_j c_ij (x) G_ij`` -> ``[N_q, *S, d]`` (derivative last; schemes
    Naive, Symmetric, Difference, Summation; grad-h divides f_j only; CRK then L_i).
    Divergence: the Gradient coefficients contracted with G over the first field axis
    (default) or the last one (`divergenceDotMode`) -> ``[N_q, *S[1:]]`` / ``[N_q, *S[:-1]]``;
    grad-h divides f_i and f_j; `consistentDivergence` uses V_j rho_j / rho_i (or m_j / rho_i).
    Curl: ``sum_j G_ij x c_ij`` on the first field axis -> 3D ``[N_q, *S]``, 2D
    ``[N_q, *S[1:]]`` (``[N_q, 1]`` for a vector), 1D zeros ``[N_q]``.
    Laplacian: ``sum_j`` (Naive analytic kernel Laplacian, Brookshaw, Dot or Default factor)
    ``x q_ij`` -> ``[N_q, *S]``; `positiveDivergence` drops pairs with ``x_ij . q_ij < 0``.
    Consistent: ``sum_j q_ij G_ij . (B_i x_ij / D^2 - gamma_i)`` with the
    `laplacianCorrectionState` (exact for quadratic fields; `corrections.secondDerivatives`).
    Covariance: ``C_i = sum_j V_j (x_j - x_i) (x) G_ij`` -> ``[N_q, d, d]``, or ``(C, n)`` with
    the int32 count of ``W^R_ij > 0`` when `covarianceReturnNumNeighbors`.
    Corrections accepted per operator: docs/operators.md.

    Args:
        queryParticles: `ParticleState` (positions ``[N_q, d]``, supports, masses, kinds int32,
            densities or None).
        operationProperties: `OperationProperties` (operation, kernel, schemes, mode,
            calibration).
        domain: `DomainDescription`.
        queryValues: query field ``[N_q, *S]``.
        referenceValues: reference field ``[N_r, *S]``; defaults to queryValues.
        queryVolumes: query volumes ``[N_q]``.
        referenceVolumes: reference volumes ``[N_r]``; defaults to queryVolumes.
        adjacency: `AdjacencyList` (CSR), `CompactHashMap` (grid), or None (a grid is built
            per call, sync-free).
        referenceParticles: defaults to queryParticles (the same objects).
        preScatteredQuantities: not supported (NotImplementedError when given).
        crkState: `CRKState`.
        gradHState: `GradHState`, tensor or tuple.
        renormalizationState: `RenormalizationState` or tensor.
        consistentDivergence: bool, for Divergence.
        covarianceReturnNumNeighbors: bool, for Covariance.
        laplacianCorrectionState: `LaplacianCorrectionState`
            (`corrections.computeLaplacianCorrection`), needed by and only by the Laplacian
            with ``laplacianMode=LaplacianScheme.Consistent``.

    Returns:
        Tensor (Covariance with counts: a tuple) on the input device with the input dtype.
        Reverse-mode autograd flows to positions, supports, masses, densities, values,
        volumes, CRK A, B, gradA, gradB, Omega and L wherever the operator reads them.

    Raises:
        TypeError: mixed or unsupported dtypes, wrong argument types.
        ValueError: shapes, devices, missing inputs, Custom operation; field shapes an
            operator does not define (e.g. a scalar Divergence in 2D), naming the operator,
            the shape and the accepted shapes.
        NotImplementedError: torch.func-wrapped tensors, preScatteredQuantities.
    """
    args = (queryParticles, operationProperties, domain, queryValues, referenceValues,
            queryVolumes, referenceVolumes, adjacency, referenceParticles, preScatteredQuantities,
            crkState, gradHState, renormalizationState, consistentDivergence,
            covarianceReturnNumNeighbors, laplacianCorrectionState)
    if not torch._C._are_functorch_transforms_active():
        try:
            return runOperation(*args, dualRoute=dualRouteJVP)
        except FunctorchWrappedInput:  # a wrapped tensor made outside any active transform
            pass
    # inside a torch.func transform (autograd.functorch), even without a wrapped input: the
    # bridge's Function runs only outside the transform's dispatch
    return functorchCall(warpOperation, "warpOperation", args, {},
                         batchFields=fieldBatchRule(args))


def fieldBatchRule(args):
    """The one-launch batching rule of a `torch.func.vmap` over value fields
    (`autograd.functorch`): when only the query and reference values are batched, the batch
    becomes a field axis right after the particle axis, so one neighbour traversal computes
    every field, and the output's batch axis moves back to the front. Exact where the
    operator treats leading field axes independently, which its registry entry's output
    shape rule states: ``outputShape((B, *S)) == (B, *outputShape(S))``; otherwise (the
    Momentum's fixed field, a batched position or correction) None, and the caller loops."""
    props, queryValues, referenceValues = args[1], args[3], args[4]

    def rule(call, xs, inDims, batch):
        batched = [k for k, dim in enumerate(inDims) if dim is not None]
        if not batched:
            return None
        roles = {}
        for k in batched:
            t = call.tensors[k]
            if t is queryValues:
                roles[k] = "query"
            elif t is referenceValues:
                roles[k] = "reference"
            else:
                return None  # a batched position, volume or correction: loop
        entry = OPERATORS[WarpOperation(props.operation)]
        k0 = batched[0]
        fieldShape = tuple(xs[k0].shape[:inDims[k0]] + xs[k0].shape[inDims[k0] + 1:])[1:]
        d = int(args[0].positions.shape[1])
        try:
            single = entry.outputShape(fieldShape, d, props)
            wide = entry.outputShape((batch, *fieldShape), d, props)
        except (ValueError, TypeError):
            return None
        if tuple(wide) != (batch, *tuple(single)):
            return None
        moved = list(xs)
        for k in batched:
            moved[k] = xs[k].movedim(inDims[k], 1)
        for t, role in ((queryValues, "query"), (referenceValues, "reference")):
            # a value input the transform does not batch is shared by every field
            if isinstance(t, torch.Tensor) and role not in roles.values():
                k = next((j for j, w in enumerate(call.tensors) if w is t), None)
                if k is None:
                    return None  # a plain tensor outside the call's inputs: loop
                plain = moved[k]
                moved[k] = plain.unsqueeze(1).expand(plain.shape[0], batch,
                                                     *plain.shape[1:]).contiguous()
        out = call(*moved)
        if isinstance(out, tuple):
            return None
        return out.movedim(1, 0), 0

    return rule


def sphOperation_warp(queryPositions, referencePositions, querySupports, referenceSupports,
                      queryMasses, referenceMasses, queryDensities, referenceDensities,
                      queryValues, referenceValues, domain, adjacency=None,
                      operation=WarpOperation.Interpolate, kernel=KernelFunctions.Wendland4,
                      supportMode=SupportScheme.Gather, gradientMode=GradientScheme.Naive,
                      laplacianMode=LaplacianScheme.Default,
                      operationMode=OperationDirection.AllQueriesNonGhostReferences,
                      positiveDivergence=False, consistentDivergence=False, divergenceDotMode=False,
                      preScatteredQuantities=None, *, queryKinds, referenceKinds,
                      useGradientRenormalization=False, renormalizationMatrices=None,
                      useGradHTerms=False, queryOmegas=None, referenceOmegas=None,
                      useVolume=False, queryVolumes=None, referenceVolumes=None, useCRK=False,
                      crk_A=None, crk_B=None, crk_gradA=None, crk_gradB=None):
    """Flat-tensor adapter: builds the state objects from loose tensors
    and calls `warpOperation`. For porting code written against positional APIs; the
    structured `warpOperation` is the main path.

    Note the defaults that differ from `OperationProperties`: kernel Wendland4 and
    laplacianMode Default. `queryKinds`/`referenceKinds` (int32 ``[N]``) are required keyword
    arguments. Each `useX` flag must agree with its tensors (flag without tensors, or tensors
    without flag, raise ValueError). Derivatives as for `warpOperation`.

    Args:
        queryPositions: float ``[N_q, d]``.
        referencePositions: float ``[N_r, d]``.
        querySupports: float ``[N_q]`` support radii.
        referenceSupports: float ``[N_r]`` support radii.
        queryMasses: float ``[N_q]``.
        referenceMasses: float ``[N_r]``.
        queryDensities: float ``[N_q]`` or None.
        referenceDensities: float ``[N_r]`` or None.
        queryValues: query field ``[N_q, *S]`` or None.
        referenceValues: reference field ``[N_r, *S]`` or None.
        domain: `DomainDescription`.
        adjacency: `AdjacencyList`, `CompactHashMap` or None (a grid is built per call).
        operation: `WarpOperation` (default Interpolate).
        kernel: `KernelFunctions` (default Wendland4).
        supportMode: `SupportScheme` (default Gather).
        gradientMode: `GradientScheme` (default Naive).
        laplacianMode: `LaplacianScheme` (default Default).
        operationMode: `OperationDirection`, the interaction mode (default
            AllQueriesNonGhostReferences).
        positiveDivergence: bool, for the Laplacian (see `OperationProperties`).
        consistentDivergence: bool, for Divergence (see `warpOperation`).
        divergenceDotMode: bool, contract the last field axis in Divergence.
        preScatteredQuantities: not supported (NotImplementedError when given).
        queryKinds: int32 ``[N_q]`` `ParticleType` codes (required keyword).
        referenceKinds: int32 ``[N_r]`` `ParticleType` codes (required keyword).
        useGradientRenormalization: use ``renormalizationMatrices``.
        renormalizationMatrices: ``[N_q, d, d]`` renormalization matrices L or None.
        useGradHTerms: use ``queryOmegas`` / ``referenceOmegas``.
        queryOmegas: ``[N_q]`` grad-h terms Omega or None.
        referenceOmegas: ``[N_r]`` grad-h terms or None (defaults to queryOmegas).
        useVolume: use ``queryVolumes`` / ``referenceVolumes``.
        queryVolumes: ``[N_q]`` or None.
        referenceVolumes: ``[N_r]`` or None.
        useCRK: use the CRK tensors.
        crk_A: CRK ``A [N_q]`` or None.
        crk_B: CRK ``B [N_q, d]`` or None.
        crk_gradA: CRK ``gradA [N_q, d]`` or None.
        crk_gradB: CRK ``gradB [N_q, d, d]`` or None.

    Returns:
        The output of `warpOperation` for the assembled states.
    """
    _flagMatches(useGradientRenormalization, "useGradientRenormalization",
                 {"renormalizationMatrices": renormalizationMatrices},
                 ("renormalizationMatrices",))
    _flagMatches(useGradHTerms, "useGradHTerms",
                 {"queryOmegas": queryOmegas, "referenceOmegas": referenceOmegas},
                 ("queryOmegas",))
    _flagMatches(useVolume, "useVolume",
                 {"queryVolumes": queryVolumes, "referenceVolumes": referenceVolumes}, ())
    if useVolume and queryVolumes is None and referenceVolumes is None:
        raise ValueError("sphOperation_warp: useVolume=True but queryVolumes and "
                         "referenceVolumes are None; pass referenceVolumes (or queryVolumes) "
                         "or leave the flag False")
    _flagMatches(useCRK, "useCRK",
                 {"crk_A": crk_A, "crk_B": crk_B, "crk_gradA": crk_gradA,
                  "crk_gradB": crk_gradB}, ("crk_A", "crk_B"))

    query = ParticleState(queryPositions, querySupports, queryMasses, queryKinds,
                          queryDensities)
    reference = ParticleState(referencePositions, referenceSupports, referenceMasses,
                              referenceKinds, referenceDensities)
    props = OperationProperties(
        kernel, operation=operation, gradientMode=gradientMode, laplacianMode=laplacianMode,
        positiveDivergence=positiveDivergence, supportMode=supportMode,
        operationMode=operationMode, divergenceDotMode=divergenceDotMode)
    gradH = None
    if useGradHTerms:
        gradH = (queryOmegas, queryOmegas if referenceOmegas is None else referenceOmegas)
    return warpOperation(
        query, props, domain, queryValues=queryValues, referenceValues=referenceValues,
        queryVolumes=queryVolumes, referenceVolumes=referenceVolumes, adjacency=adjacency,
        referenceParticles=reference, preScatteredQuantities=preScatteredQuantities,
        crkState=CRKState(crk_A, crk_B, crk_gradA, crk_gradB) if useCRK else None,
        gradHState=gradH,
        renormalizationState=renormalizationMatrices if useGradientRenormalization else None,
        consistentDivergence=consistentDivergence)
