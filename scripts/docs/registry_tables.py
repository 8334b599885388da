"""Render the documentation tables that restate the operator registry, from the registry.

The tables live in the Markdown pages between marker comments::

    <!-- registry:NAME -->
    ...generated...
    <!-- /registry:NAME -->

with NAME one of ``outputs`` (formula and output per operator), ``shapes`` (the output
shape of scalar, vector and matrix fields in 1D/2D/3D, computed by each entry's shape rule),
``corrections`` (the acceptance matrix), ``corrections:<Operator>`` (one
operator's row), ``scheme-states`` (the per-query states one option value needs, the
consistent Laplacian's), ``jvp-scope`` (the forward-mode scope: which tangents each
operator's JVP accepts),
``particle-kinds`` (the `ParticleType` codes) and ``interaction-modes`` (every
`OperationDirection` with the kinds it admits on each side, `enumTypes.interactionKinds`).

    python scripts/docs/registry_tables.py          # rewrite the pages in place
    python scripts/docs/registry_tables.py --check  # list the pages that differ, exit 1

`tests/test_registry_docs.py` fails when a page differs from what this script renders.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from warpSPHCore.dataTypes.operationProperties import OperationProperties  # noqa: E402
from warpSPHCore.enumTypes import (  # noqa: E402
    KernelFunctions,
    OperationDirection,
    ParticleType,
    interactionAliases,
    interactionKinds,
)
from warpSPHCore.operators import (  # noqa: E402
    CORRECTION_LABELS,
    CORRECTIONS,
    OPERATORS,
    ValueInputs,
)

DOCS = ROOT / "docs"
_MARKER = re.compile(r"<!-- registry:(?P<name>[\w:-]+) -->\n(?P<body>.*?)<!-- /registry:(?P=name) -->",
                     re.S)

_CORRECTION_HEADERS = {"volumes": "volumes (V_j)", "crk": "CRK", "gradH": "grad-h (f → f/Ω)",
                       "renorm": "renormalization"}


def _table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _value(value) -> str:
    return value.name if hasattr(value, "name") else repr(value)


# --------------------------------------------------------------------------------------
# corrections
# --------------------------------------------------------------------------------------


def correctionCell(use) -> str:
    """One cell of the acceptance matrix: ``ignored``, or a tick with the declaration's
    qualifiers (its note, the option value that makes it ignored)."""
    if not use.applied:
        return "ignored"
    parts = [use.note] if use.note else []
    if use.ignoredWith is not None:
        parts.append(f"ignored with {_value(use.ignoredWith.value)}")
    return "✓" + (f" ({'; '.join(parts)})" if parts else "")


def correctionsTable(operations=None) -> str:
    ops = list(OPERATORS) if operations is None else list(operations)
    withName = operations is None
    header = (["Operator"] if withName else []) + [_CORRECTION_HEADERS[c] for c in CORRECTIONS]
    rows = []
    for op in ops:
        entry = OPERATORS[op]
        cells = [correctionCell(use) for _, use in entry.corrections.items()]
        rows.append(([op.name] if withName else []) + cells)
    return _table(header, rows)


def _shape(trailing) -> str:
    return "`[" + ", ".join(["N_q"] + [str(k) for k in trailing]) + "]`"


def schemeStatesTable() -> str:
    """One row per `SchemeState`: the choice, its keyword, what the kernel reads, and what
    the scheme does not combine with (a ValueError)."""
    rows = []
    for op, entry in OPERATORS.items():
        for ss in entry.schemeStates:
            reads = ", ".join(f"{name} {_shape(trailing)}" for name, trailing in ss.members)
            excluded = [CORRECTION_LABELS[c] for c in ss.excludes]
            excluded += [f"`{o}={_value(v)}`" for o, v, _ in ss.excludedOptions]
            rows.append([op.name, f"`{ss.option}={_value(ss.value)}`", f"`{ss.keyword}`", reads,
                         ", ".join(excluded) or "—"])
    return _table(["Operator", "Choice", "State (keyword)", "Kernel reads",
                   "Not combined with (ValueError)"], rows)


# --------------------------------------------------------------------------------------
# formulas and output shapes
# --------------------------------------------------------------------------------------


def outputsTable() -> str:
    rows = [[op.name, entry.formula, entry.output] for op, entry in OPERATORS.items()]
    return _table(["Operator", "Discrete formula", "Output"], rows)


_FIELDS = (("scalar `[N]`", lambda d: ()), ("vector `[N, d]`", lambda d: (d,)),
           ("matrix `[N, d, d]`", lambda d: (d, d)))


def _outcome(entry, shape, d, props):
    try:
        return tuple(entry.outputShape(shape, d, props))
    except ValueError:
        return None


def _symbolic(out, d) -> str:
    if out is None:
        return "ValueError"
    return "`[" + ", ".join(["N"] + [("d" if (k == d and d > 1) else str(k)) for k in out]) + "]`"


def _concrete(out) -> str:
    if out is None:
        return "ValueError"
    return "`[" + ", ".join(["N"] + [str(k) for k in out]) + "]`"


def shapeCell(outcomes: dict) -> str:
    """``{d: output shape or None}`` as one cell: one symbolic shape when every dimension
    agrees (d = 1 substituted), otherwise per dimension (2D/3D joined when they agree)."""
    sym2, sym3 = _symbolic(outcomes[2], 2), _symbolic(outcomes[3], 3)
    if sym2 == sym3:
        one = outcomes[1]
        if sym2 == "ValueError" and one is None:
            return "ValueError"
        if one is not None and outcomes[2] is not None and \
                _symbolic(one, 1) == sym2.replace("d", "1"):
            return sym2
        return f"1D {_concrete(one)}; 2D/3D {sym2}"
    return "; ".join(f"{d}D {_concrete(outcomes[d])}" for d in (1, 2, 3))


def _shapeRow(entry, props) -> list:
    fixed = getattr(entry.outputShape, "fieldShape", None)
    if fixed is not None:  # one accepted field shape per d (Momentum): named in every cell
        out = shapeCell({d: _outcome(entry, fixed(d), d, props) for d in (1, 2, 3)})
        return [f"ValueError (the field is `[N, {fixed.label}]` → {out})"] * len(_FIELDS)
    if entry.values is ValueInputs.NONE:
        cell = shapeCell({d: _outcome(entry, None, d, props) for d in (1, 2, 3)})
        return [f"{cell} (no value input)", "—", "—"]
    return [shapeCell({d: _outcome(entry, field(d), d, props) for d in (1, 2, 3)})
            for _, field in _FIELDS]


def shapesTable() -> str:
    """Output shapes by field rank, computed by each entry's shape rule; one more row per
    option value that changes them."""
    rows = []
    for op, entry in OPERATORS.items():
        base = OperationProperties(KernelFunctions.Wendland2, operation=op)
        default = _shapeRow(entry, base)
        rows.append([op.name] + default)
        for option in entry.options:
            if option.keyword:
                continue
            for value in option.values:
                if value == option.default:
                    continue
                props = OperationProperties(KernelFunctions.Wendland2, operation=op,
                                            **{option.name: value})
                row = _shapeRow(entry, props)
                if row != default:
                    rows.append([f"{op.name}, `{option.name}={_value(value)}`"] + row)
    return _table(["Operator"] + [name for name, _ in _FIELDS], rows)


# --------------------------------------------------------------------------------------
# forward-mode scope
# --------------------------------------------------------------------------------------


def _dims(dims) -> str:
    return "/".join(f"{d}D" for d in dims)


def jvpScopeTable() -> str:
    rows = []
    for op, entry in OPERATORS.items():
        scope = entry.jvp
        if not scope.valueTangents:
            value = "— (no value input)"
        elif not scope.linearInValues:
            value = "✓ (not linear in its values: through the Tier-2 kernel)"
        elif scope.valueSelection is not None:
            option, v = scope.valueSelection
            value = f"✓ (`{option}={v}`: through the Tier-2 kernel)"
        else:
            value = "✓"
        geometry = ", ".join(scope.geometry)
        if tuple(scope.dims) != (1, 2, 3):
            geometry += f"; {_dims(scope.dims)} only"
        raises = []
        if not scope.valueTangents:
            raises.append("value tangents")
        if "densities" not in scope.geometry:
            raises.append("densities")
        raises += [CORRECTION_LABELS[s] for s in ("crk", "renorm", "gradH")
                   if s in scope.rejectedStates]
        raises += [f"`{r.option}`" for r in scope.rejectedOptions]
        if tuple(scope.dims) != (1, 2, 3):
            raises.append(f"d ≠ {scope.dims[0]}" if len(scope.dims) == 1 else
                          " and ".join(f"d = {d}" for d in (1, 2, 3) if d not in scope.dims))
        corrections = "—"
        if scope.correctionTangents:
            labels = [CORRECTION_LABELS[c] for c in scope.correctionTangents]
            corrections = ", ".join(labels) + {2: ", both", 3: ", together"}.get(len(labels),
                                                                                 "")
            ignored = {getattr(entry.corrections, c).ignoredWith for c in scope.correctionTangents}
            ignored.discard(None)
            for why in sorted(ignored, key=lambda w: (w.option, int(w.value))):
                if not why.dropped:
                    continue
                names = [CORRECTION_LABELS[c] for c in scope.correctionTangents
                         if getattr(entry.corrections, c).ignoredWith == why]
                which = "" if len(names) == len(labels) else "/".join(names) + " "
                corrections += f" ({which}not {_value(why.value)})"
                raises.append("/".join(names) + f" with {_value(why.value)}")
        rows.append([op.name, value, geometry, corrections, ", ".join(raises) or "—"])
    return _table(["Operator", "Value tangents (Tier 1)", "Geometry tangents (Tier 2)",
                   "Correction tangents", "Raises"], rows)


# --------------------------------------------------------------------------------------
# particle kinds and interaction modes
# --------------------------------------------------------------------------------------

_KIND_MEANINGS = {
    ParticleType.Fluid: "fluid particles, the ones an SPH scheme evolves",
    ParticleType.Boundary: "wall (boundary, dummy) particles",
    ParticleType.Ghost: "ghost particles, auxiliary copies of other particles (e.g. mirror "
                        "images across a wall), excluded as references by every mode but `Unmasked` and "
                        "those that name ghost references",
    ParticleType.Other: "any other population; a non-ghost kind, so the `All` and `NonGhost` "
                        "sides admit it",
}

_M = OperationDirection
_INTERACTION_USES = {
    _M.Unmasked: "every row, every neighbour: no kind test on either side, ghosts included",
    _M.FluidQueriesFluidReferences: "fluid rows over fluid neighbours only: a sum that "
                                    "ignores the walls (a fluid-fluid term)",
    _M.BoundaryQueriesFluidReferences: "wall rows over fluid neighbours: the wall "
                                       "extrapolation (wall pressure or velocity from the "
                                       "adjacent fluid)",
    _M.FluidQueriesBoundaryReferences: "fluid rows over wall neighbours: the walls' part of "
                                       "a fluid sum alone (a wall force)",
    _M.BoundaryQueriesBoundaryReferences: "wall rows over wall neighbours: quantities of the "
                                          "walls alone (wall volumes, wall normals)",
    _M.GhostQueriesFluidReferences: "ghost rows over fluid neighbours: ghost values "
                                    "interpolated from the fluid",
    _M.FluidQueriesGhostReferences: "fluid rows over ghost neighbours: the ghosts' part of a "
                                    "fluid sum alone",
    _M.GhostQueriesBoundaryReferences: "ghost rows over wall neighbours",
    _M.BoundaryQueriesGhostReferences: "wall rows over ghost neighbours",
    _M.AllQueriesNonGhostReferences: "**the default**: every row over its non-ghost "
                                     "neighbours (a ghost still gets a row, from the real "
                                     "particles around it)",
    _M.GhostQueriesNonGhostReferences: "ghost rows over non-ghost neighbours: ghost values "
                                       "interpolated from the real particles",
    _M.FluidQueriesNonGhostReferences: "fluid rows over fluid and wall neighbours: the "
                                       "momentum and continuity equations of a wall-bounded "
                                       "fluid (the walls act on the fluid and get no rows)",
    _M.BoundaryQueriesNonGhostReferences: "wall rows over fluid and wall neighbours: a wall "
                                          "density or normal from every real neighbour",
    _M.NonGhostQueriesFluidReferences: "fluid and wall rows over fluid neighbours: a fluid "
                                       "field (a colour function, a fluid number density) "
                                       "seen by fluid and wall particles",
    _M.NonGhostQueriesBoundaryReferences: "fluid and wall rows over wall neighbours: the "
                                          "walls seen by every real particle (a wall "
                                          "indicator or distance)",
}
del _M


def _kindSet(kinds) -> str:
    if kinds == frozenset(ParticleType):
        return "every kind"
    if kinds == frozenset(ParticleType) - {ParticleType.Ghost}:
        return "every kind but Ghost"
    return ", ".join(k.name for k in sorted(kinds))


def particleKindsTable() -> str:
    rows = [[f"`{k.name}`", str(k.value), _KIND_MEANINGS[k]] for k in ParticleType]
    return _table(["Kind (`ParticleType`)", "Code", "Meaning"], rows)


def interactionModesTable() -> str:
    """One row per `OperationDirection` member: its name and value, the kinds of
    `interactionKinds`, the earlier name, and what it computes."""
    rows = []
    for mode in OperationDirection:
        kinds = interactionKinds(mode)
        aliases = ", ".join(f"`{a}`" for a in interactionAliases(mode))
        rows.append([f"`{mode.name}`", str(mode.value), _kindSet(kinds.queries),
                     _kindSet(kinds.references), aliases, _INTERACTION_USES[mode]])
    return _table(["Mode", "Value", "Query kinds (rows)", "Reference kinds (summed)",
                   "Old name", "Computes; typical use"], rows)


# --------------------------------------------------------------------------------------
# the pages
# --------------------------------------------------------------------------------------


def render(name: str) -> str:
    """The table called ``name`` (see the module docstring)."""
    if name == "outputs":
        return outputsTable()
    if name == "shapes":
        return shapesTable()
    if name == "corrections":
        return correctionsTable()
    if name.startswith("corrections:"):
        op = next((o for o in OPERATORS if o.name == name.split(":", 1)[1]), None)
        if op is None:
            raise KeyError(f"registry table {name!r}: no such operator in OPERATORS")
        return correctionsTable([op])
    if name == "jvp-scope":
        return jvpScopeTable()
    if name == "scheme-states":
        return schemeStatesTable()
    if name == "particle-kinds":
        return particleKindsTable()
    if name == "interaction-modes":
        return interactionModesTable()
    raise KeyError(f"unknown registry table {name!r}")


def updated(text: str) -> str:
    """``text`` with every marked table replaced by its rendering."""
    return _MARKER.sub(lambda m: (f"<!-- registry:{m['name']} -->\n{render(m['name'])}"
                                  f"<!-- /registry:{m['name']} -->"), text)


def pages(root: Path = DOCS) -> list:
    """The Markdown pages under ``root`` that hold at least one marked table."""
    return sorted(p for p in root.rglob("*.md") if _MARKER.search(p.read_text()))


def stale(root: Path = DOCS) -> list:
    """The pages whose marked tables differ from the rendering."""
    return [p for p in pages(root) if updated(p.read_text()) != p.read_text()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="list stale pages and exit 1")
    args = ap.parse_args(argv)
    if args.check:
        out = stale()
        for p in out:
            print(f"{p.relative_to(ROOT)}: registry tables differ (run {Path(__file__).name})")
        return 1 if out else 0
    for p in pages():
        text = p.read_text()
        new = updated(text)
        if new != text:
            p.write_text(new)
            print(f"updated {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
