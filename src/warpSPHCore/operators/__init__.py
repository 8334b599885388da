"""Operator kernels and their declarations (one module per operator: pair term, kernel, spec).

`OPERATORS` is the registry: per `WarpOperation`, one `OperatorEntry` declaring everything a
call of the operator needs besides its kernel: the `OperatorSpec`, the formula, the
dimensions and scalar types, the output-shape rule, the value inputs, the options that
select its schemes, the corrections it applies and those it accepts and ignores, and its
forward-mode scope (which tangents it takes, which raise). It is the one
place these facts are stated: call preparation (`preparation`), the forward-mode scope
(`operationsJVP`), the test matrix (`tests/operations/test_registry_matrix.py`) and the doc
tables (`scripts/docs/registry_tables.py`) read it. Operators not listed are not
implemented.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..enumTypes import GradientScheme, LaplacianScheme, WarpOperation
from ._declarations import (
    CORRECTION_LABELS,
    CORRECTIONS,
    GEOMETRY_TANGENTS,
    CorrectionUse,
    CorrectionUses,
    Ignored,
    JVPScope,
    Option,
    RejectedOption,
    SchemeState,
    ValueInputs,
    matches,
)
from ._shapes import (
    curlShape,
    divergenceShape,
    gradientShape,
    laplacianShape,
    matrixShape,
    momentumShape,
    noFieldShape,
    sameShape,
)

__all__ = ["OperatorEntry", "OPERATORS", "operatorEntry", "CORRECTIONS", "CORRECTION_LABELS",
           "GEOMETRY_TANGENTS", "CorrectionUse", "CorrectionUses", "Ignored", "JVPScope",
           "Option", "RejectedOption", "SchemeState", "ValueInputs", "matches"]


@dataclass(frozen=True)
class OperatorEntry:
    """One row of the operator registry.

    Args:
        operation: the `WarpOperation`.
        specModule: the operator's module in this package (``"density"``), which defines its
            `OperatorSpec` (kernel, outputs, extras, `JVPSpec`) as ``DENSITY_SPEC``: read
            through `spec`, which imports the module on first use (an operator's kernels
            cost about 30-90 ms of Warp parsing at import, paid only by a process that
            calls it).
        formula: the discrete formula, as the docs print it.
        output: the output shape in words, as the docs print it.
        outputShape: ``(S, d, properties) -> shape``: the output's shape after the particle
            axis for the field shape S (None without a value input), or the `ValueError` of
            a field shape the operator does not define (`operators._shapes`).
        values: the `ValueInputs` it reads.
        readsDensities: V_j = m_j / rho_j needs the reference densities unless
            ``referenceVolumes`` is given (with a ``gradientMode`` option, Symmetric needs
            both sets' densities; with ``consistentDivergence``, the query densities).
        correctedGradient: it reads the corrected kernel gradient G_ij, so a CRK state
            needs gradA and gradB.
        corrections: the acceptance row (`CorrectionUses`).
        options: the `Option`s that select its schemes.
        jvp: its forward-mode `JVPScope`.
        dims: the dimensions it is compiled for.
        dtypes: the scalar types it is compiled for.
        schemeStates: `SchemeState`s: per-query states that one option value needs (the
            consistent Laplacian's).
    """

    operation: WarpOperation
    specModule: str
    formula: str
    output: str
    outputShape: Callable
    jvp: JVPScope
    values: ValueInputs = ValueInputs.NONE
    readsDensities: bool = True
    correctedGradient: bool = False
    corrections: CorrectionUses = CorrectionUses()
    options: tuple = ()
    dims: tuple = (1, 2, 3)
    dtypes: tuple = (torch.float32, torch.float64)
    schemeStates: tuple = ()

    @property
    def spec(self):
        """The operator's `OperatorSpec` (its module imported on first use)."""
        module = importlib.import_module(f"{__name__}.{self.specModule}")
        return getattr(module, f"{self.specModule.upper()}_SPEC")

    def option(self, name: str):
        """The `Option` called ``name``, or None when the operator has no such option."""
        return next((o for o in self.options if o.name == name), None)

    def statelessValues(self, name: str) -> tuple:
        """The values of option ``name`` that need no `SchemeState` (every Laplacian scheme but
        Consistent): what a call without per-query scheme state may choose."""
        needs = {ss.value for ss in self.schemeStates if ss.option == name}
        return tuple(v for v in self.option(name).values if v not in needs)

    def applied(self, properties) -> tuple:
        """The correction states a call with these properties applies."""
        return tuple(n for n, use in self.corrections.items() if use.appliedFor(properties))

    def ignored(self, properties) -> tuple:
        """The correction states a call with these properties accepts and does not apply."""
        return tuple(n for n, use in self.corrections.items() if not use.appliedFor(properties))

    def dropped(self, properties) -> tuple:
        """The states these properties make ignored and that the call drops before the launch
        (the Naive Laplacian's CRK and renormalization)."""
        return tuple(n for n, use in self.corrections.items()
                     if use.ignoredWith is not None and use.ignoredWith.dropped
                     and use.ignoredWith.holds(properties))

    # the flags of the first registry (kept for readers of the old fields)
    @property
    def volumes(self) -> bool:
        return self.corrections.volumes.applied

    @property
    def crk(self) -> bool:
        return self.corrections.crk.applied

    @property
    def gradH(self) -> bool:
        return self.corrections.gradH.applied

    @property
    def renormalization(self) -> bool:
        return self.corrections.renorm.applied

    @property
    def needsValues(self) -> bool:
        return self.values is not ValueInputs.NONE


_APPLIED = CorrectionUse()
# Symmetric uses m_j rho_i (f_i / rho_i^2 + f_j / rho_j^2): no V_j, even with volumes
_NOT_SYMMETRIC = CorrectionUse(ignoredWith=Ignored("gradientMode", GradientScheme.Symmetric,
                                                   reason="uses masses and densities"))
# the analytic kernel Laplacian is never CRK- or renormalization-corrected
_NOT_NAIVE = CorrectionUse(ignoredWith=Ignored("laplacianMode", LaplacianScheme.Naive,
                                               dropped=True,
                                               reason="never reads the corrected gradient"))
_BOTH_OMEGAS = CorrectionUse(note="f_i and f_j")

_GRADIENT_MODE = Option("gradientMode", tuple(GradientScheme))
# the consistent Laplacian (`LaplacianScheme.Consistent`): its own per-query correction,
# q_ij = (f_j - f_i) V_j
_CONSISTENT_LAPLACIAN = SchemeState(
    "laplacianMode", LaplacianScheme.Consistent, "laplacianCorrectionState", "laplacian",
    members=(("B", ("d", "d")), ("gamma", ("d",))),
    excludes=("crk", "gradH", "renorm"),
    excludedOptions=(("gradientMode", GradientScheme.Symmetric,
                      "its pair difference is (f_j - f_i) V_j (Naive, Difference or Summation)"),
                     ("positiveDivergence", True,
                      "a pair selection by the values breaks its exactness")))
_ALL_GEOMETRY = GEOMETRY_TANGENTS
_CORRECTED_JVP = dict(valueTangents=True, geometry=_ALL_GEOMETRY,
                      correctionTangents=("crk", "renorm", "gradH"))

OPERATORS = {
    WarpOperation.Density: OperatorEntry(
        WarpOperation.Density, "density", "ρ_i = Σ_j m_j W_ij", "`[N_q]`", noFieldShape,
        JVPScope(valueTangents=False,
                 geometry=("positions", "supports", "reference masses")),
        readsDensities=False),
    WarpOperation.Interpolate: OperatorEntry(
        WarpOperation.Interpolate, "interpolate", "f_i = Σ_j f_j V_j W^R_ij", "`[N_q, *S]`",
        sameShape,
        JVPScope(valueTangents=True, geometry=_ALL_GEOMETRY, correctionTangents=("crk",),
                 rejectedStates=("renorm",)),
        values=ValueInputs.REFERENCE,
        corrections=CorrectionUses(volumes=_APPLIED, crk=CorrectionUse(note="A, B only"))),
    WarpOperation.Gradient: OperatorEntry(
        WarpOperation.Gradient, "gradient", "out_i = Σ_j c_ij ⊗ G_ij",
        "`[N_q, *S, d]` (derivative last)", gradientShape, JVPScope(**_CORRECTED_JVP),
        values=ValueInputs.QUERY_AND_REFERENCE, correctedGradient=True,
        corrections=CorrectionUses(volumes=_NOT_SYMMETRIC, crk=_APPLIED,
                                   gradH=CorrectionUse(note="f_j only"), renorm=_APPLIED),
        options=(_GRADIENT_MODE,)),
    WarpOperation.Divergence: OperatorEntry(
        WarpOperation.Divergence, "divergence", "out_i = Σ_j Σ_δ c_ij[δ, …] G_ij,δ",
        "`[N_q, *S[1:]]` (dot mode `[N_q, *S[:-1]]`)", divergenceShape,
        JVPScope(**_CORRECTED_JVP),
        values=ValueInputs.QUERY_AND_REFERENCE, correctedGradient=True,
        corrections=CorrectionUses(
            volumes=CorrectionUse(note="+ consistent mode",
                                  ignoredWith=_NOT_SYMMETRIC.ignoredWith),
            crk=_APPLIED, gradH=_BOTH_OMEGAS, renorm=_APPLIED),
        options=(_GRADIENT_MODE, Option("divergenceDotMode", (False, True)),
                 Option("consistentDivergence", (False, True), keyword=True))),
    WarpOperation.Curl: OperatorEntry(
        WarpOperation.Curl, "curl", "out_i = Σ_j G_ij × c_ij",
        "3D `[N_q, *S]`; 2D `[N_q, *S[1:]]` (`[N_q, 1]` for a vector); 1D zeros `[N_q]`",
        curlShape, JVPScope(**_CORRECTED_JVP),
        values=ValueInputs.QUERY_AND_REFERENCE, correctedGradient=True,
        corrections=CorrectionUses(volumes=_NOT_SYMMETRIC, crk=_APPLIED, gradH=_BOTH_OMEGAS,
                                   renorm=_APPLIED),
        options=(_GRADIENT_MODE,)),
    WarpOperation.Laplacian: OperatorEntry(
        WarpOperation.Laplacian, "laplacian", "out_i = Σ_j (geometric factor) q_ij",
        "`[N_q, *S]`", laplacianShape,
        JVPScope(**_CORRECTED_JVP, valueSelection=("positiveDivergence", True)),
        values=ValueInputs.QUERY_AND_REFERENCE, correctedGradient=True,
        corrections=CorrectionUses(volumes=_NOT_SYMMETRIC, crk=_NOT_NAIVE, gradH=_BOTH_OMEGAS,
                                   renorm=_NOT_NAIVE),
        options=(Option("laplacianMode", tuple(LaplacianScheme)), _GRADIENT_MODE,
                 Option("positiveDivergence", (False, True))),
        schemeStates=(_CONSISTENT_LAPLACIAN,)),
    WarpOperation.Covariance: OperatorEntry(
        WarpOperation.Covariance, "covariance", "C_i = Σ_j V_j (x_j − x_i) ⊗ G_ij",
        "`[N_q, d, d]` (+ int32 count `[N_q]`)", matrixShape,
        JVPScope(valueTangents=False, geometry=_ALL_GEOMETRY,
                 correctionTangents=("crk", "renorm")),
        correctedGradient=True,
        corrections=CorrectionUses(volumes=_APPLIED, crk=_APPLIED, renorm=_APPLIED)),
    WarpOperation.Momentum: OperatorEntry(
        WarpOperation.Momentum, "momentum",
        "F_i = Σ_j (V_i² + V_j²) [−p̃_ij G_ij + μ_ij u_ij (x_ij · G_ij) / r_ij² "
        "+ ½ (A_i + A_j) · G_ij], B_i = Σ_j (V_i² + V_j²) G_ij",
        "`[N_q, 2, d]` (rows F_i, B_i)", momentumShape,
        JVPScope(valueTangents=True, geometry=("positions", "supports"),
                 linearInValues=False),
        values=ValueInputs.QUERY_AND_REFERENCE, readsDensities=False),
}


def operatorEntry(operation) -> OperatorEntry:
    """The registry row of `operation`; NotImplementedError for operators not ported yet."""
    op = WarpOperation(operation)
    try:
        return OPERATORS[op]
    except KeyError:
        raise NotImplementedError(f"warpOperation: {op.name} is not implemented yet") from None
