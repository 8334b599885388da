"""The vocabulary of the operator registry (`operators.OPERATORS`): what one operator declares
about its inputs, options, corrections and forward-mode scope.

These are plain frozen dataclasses and enums; the registry in `operators/__init__.py` fills
them in once per operator, and call preparation (`preparation`), the forward-mode scope
(`operationsJVP`), the tests and the generated doc tables (`scripts/docs/registry_tables.py`)
read them instead of restating them.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Optional

from ..dataTypes.operationProperties import OperationProperties

__all__ = ["CORRECTIONS", "CORRECTION_LABELS", "GEOMETRY_TANGENTS", "ValueInputs", "Option",
           "Ignored", "CorrectionUse", "CorrectionUses", "RejectedOption", "JVPScope",
           "SchemeState", "matches"]

#: the correction states of a call, named as the fields of `autograd.operator_spec.Corrections`
CORRECTIONS = ("volumes", "crk", "gradH", "renorm")

#: their names in messages and docs
CORRECTION_LABELS = {"volumes": "volumes", "crk": "CRK", "gradH": "grad-h",
                     "renorm": "renormalization"}

#: the geometry tangents a Tier-2 kernel may accept, in this order
GEOMETRY_TANGENTS = ("positions", "supports", "reference masses", "densities",
                     "reference volumes")


_PROPERTY_DEFAULTS = {f.name: f.default for f in dataclasses.fields(OperationProperties)}


class ValueInputs(enum.Enum):
    """The field values an operator reads."""

    NONE = "none"
    #: ``referenceValues`` only (``queryValues`` is its default, never read itself)
    REFERENCE = "reference"
    #: both (``referenceValues`` defaults to ``queryValues``); one flat ``[N_q F | N_r F]``
    QUERY_AND_REFERENCE = "query and reference"


@dataclass(frozen=True)
class Option:
    """A choice of the call that selects a scheme of the operator.

    Args:
        name: the `OperationProperties` field (or, with ``keyword``, the `warpOperation`
            keyword argument) that holds the choice.
        values: the values a call may choose (a keyword's default first).
        keyword: True for a keyword argument of `warpOperation` (``consistentDivergence``);
            its value reaches the kernel as the SCALAR extra of the same name.
    """

    name: str
    values: tuple
    keyword: bool = False

    @property
    def default(self):
        """The value of a call that does not choose (the `OperationProperties` default; for a
        keyword, the first value)."""
        if self.keyword:
            return self.values[0]
        return _PROPERTY_DEFAULTS[self.name]

    def valueIn(self, properties, keywords: dict):
        """The value the call chose (``keywords``: the keyword options of the call)."""
        if self.keyword:
            return keywords.get(self.name, self.default)
        return getattr(properties, self.name)


@dataclass(frozen=True)
class Ignored:
    """An applied correction that one option value makes the operator ignore.

    Args:
        option: the `Option` name (``gradientMode``, ``laplacianMode``).
        value: the option value under which the state is accepted and ignored.
        dropped: the call takes the state out before validation and launch (it is not even
            handed to the kernel); otherwise the kernel receives it and does not read it.
        reason: why, for messages (``never reads the corrected gradient``).
    """

    option: str
    value: Any
    dropped: bool = False
    reason: str = ""

    def holds(self, properties) -> bool:
        return matches(getattr(properties, self.option), self.value)


@dataclass(frozen=True)
class CorrectionUse:
    """How one operator treats one correction state: applied, or accepted and ignored.

    Args:
        applied: False: accepted and ignored (no validation, no effect on the result).
        note: what the docs add to the tick (``A, B only``, ``f_j only``).
        ignoredWith: an `Ignored` option value under which an applied state is ignored.
    """

    applied: bool = True
    note: str = ""
    ignoredWith: Optional[Ignored] = None

    def appliedFor(self, properties) -> bool:
        """Whether a call with these properties applies the state."""
        if not self.applied:
            return False
        return self.ignoredWith is None or not self.ignoredWith.holds(properties)


_IGNORED = CorrectionUse(applied=False)


def matches(actual, value) -> bool:
    """Whether an option's value in a call is ``value`` (booleans by truth value)."""
    if isinstance(value, bool):
        return bool(actual) == value
    return actual == value


@dataclass(frozen=True)
class CorrectionUses:
    """The acceptance row of one operator: one `CorrectionUse` per correction state."""

    volumes: CorrectionUse = _IGNORED
    crk: CorrectionUse = _IGNORED
    gradH: CorrectionUse = _IGNORED
    renorm: CorrectionUse = _IGNORED

    def items(self):
        return tuple((name, getattr(self, name)) for name in CORRECTIONS)


@dataclass(frozen=True)
class SchemeState:
    """A per-query state that one option value needs and no other reads (the consistent
    Laplacian's `LaplacianCorrectionState`).

    Args:
        option: the `Option` name (``laplacianMode``).
        value: the option value that reads the state.
        keyword: the `warpOperation` keyword that carries it (``laplacianCorrectionState``);
            it reaches the context as ``Corrections.<field>``.
        field: the `autograd.operator_spec.Corrections` field (``laplacian``).
        members: ``(name, trailing shape)`` of what the kernel reads, ``"d"`` for the
            dimension (``(("B", ("d", "d")), ("gamma", ("d",)))``).
        excludes: correction states (`CORRECTIONS`) the scheme does not combine with (it
            carries its own correction).
        excludedOptions: ``(option, value, why)`` choices it does not combine with.
    """

    option: str
    value: Any
    keyword: str
    field: str
    members: tuple
    excludes: tuple = ()
    excludedOptions: tuple = ()

    def holds(self, properties) -> bool:
        return matches(getattr(properties, self.option), self.value)


@dataclass(frozen=True)
class RejectedOption:
    """An option value with which the geometry JVP raises `NotImplementedError`.

    ``message`` completes ``the geometry JVP of <operator> ...``."""

    option: str
    value: Any
    message: str


@dataclass(frozen=True)
class JVPScope:
    """The forward-mode scope of one operator: the tangents it accepts and what raises.

    Args:
        valueTangents: Tier 1: value tangents, the operator relaunched on them.
        geometry: the geometry tangents the Tier-2 kernel accepts (`GEOMETRY_TANGENTS`).
        correctionTangents: correction states whose tangents it accepts (``crk``,
            ``renorm``); a primal state without a tangent is a frozen correction.
        rejectedStates: primal correction states with which a geometry JVP raises.
        rejectedOptions: `RejectedOption` values with which a geometry JVP raises.
        dims: the dimensions of the geometry JVP.
        valueSelection: ``(option, value)`` under which the values select the pairs (the
            operator is not linear in them): value tangents go through the Tier-2 kernel,
            which keeps the primal's selection.
        linearInValues: False for an operator that is never linear in its values (Momentum):
            value tangents always go through the Tier-2 kernel.
    """

    valueTangents: bool
    geometry: tuple
    correctionTangents: tuple = ()
    rejectedStates: tuple = ()
    rejectedOptions: tuple = ()
    dims: tuple = (1, 2, 3)
    valueSelection: Optional[tuple] = None
    linearInValues: bool = True

    def selectsByValues(self, properties) -> bool:
        if not self.linearInValues:
            return True
        if self.valueSelection is None:
            return False
        option, value = self.valueSelection
        return matches(getattr(properties, option), value)
