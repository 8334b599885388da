"""The test matrix iterates the operator registry (`operators.OPERATORS`): every
operator, and every value of every option its entry declares (gradient schemes, Laplacian
schemes, dot mode, ...), has

* a float64 `torch.autograd.gradcheck` test (reverse mode),
* a forward-mode check (JVP against J·v / central differences, Tier-1 bit-exactness, or the
  scope matrix's rejection),
* a comparison against an independent reference (`sph_reference`).

`COVERAGE` maps each (operator, option) to the existing test functions of each kind; the
required keys are derived from the registry, so an operator or option added to the registry
without tests fails here, and so does a new option value (a new enum member) that none of the
listed tests sweeps. Nothing runs a kernel: the check reads the test functions' parameters
and source.

A listed function witnesses an option value when

* enum values: its parameters hold the member, or its source names the member (through any
  alias its module binds) or iterates the enum (``list(GradientScheme)``,
  ``for s in GradientScheme``);
* other values (booleans, keyword options): its source, docstring or parameters name the
  option (the listing states which test covers which value; the check keeps the listing
  honest about the function existing and dealing with that option);
* the default value: additionally, a function that never sets the option runs with it.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import re

import pytest

from warpSPHCore.enumTypes import WarpOperation
from warpSPHCore.operators import OPERATORS, Option, matches

GRADCHECK, JVP, REFERENCE = "gradcheck", "JVP", "reference"
KINDS = (GRADCHECK, JVP, REFERENCE)

_LAP_JVP = tuple(f"test_forward_mode_geometry_jvp_laplacian_{s}::test_{s}_jvp_schemes"
                 for s in ("naive", "brookshaw", "dot", "default"))

#: (operator, option or None) -> kind -> the test functions ("module::function") covering it
COVERAGE = {
    ("Density", None): {
        GRADCHECK: ("test_density_gradcheck::test_density_gradcheck_schemes",
                    "test_density_gradcheck::test_density_gradcheck_dimensions"),
        JVP: ("test_forward_mode_geometry_jvp_density::test_density_jvp_1d_schemes",
              "test_forward_mode_geometry_jvp_density::test_density_jvp_2d_gather"),
        REFERENCE: ("test_density::test_density_brute_force",
                    "test_density::test_density_test_vector"),
    },
    ("Interpolate", None): {
        GRADCHECK: ("test_interpolate_gradcheck::test_interpolate_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_interpolate::test_interpolate_jvp_schemes",
              "test_forward_mode_value_jvp::test_value_jvp_tier1"),
        REFERENCE: ("test_interpolate::test_interpolate_brute_force",),
    },
    ("Gradient", None): {
        GRADCHECK: ("test_gradient_gradcheck::test_gradient_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_gradient::test_gradient_jvp_schemes_aliased",
              "test_forward_mode_value_jvp::test_value_jvp_tier1"),
        REFERENCE: ("test_gradient::test_gradient_brute_force",),
    },
    ("Gradient", "gradientMode"): {
        GRADCHECK: ("test_gradient_gradcheck::test_gradient_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_gradient::test_gradient_jvp_schemes_aliased",),
        REFERENCE: ("test_gradient::test_gradient_brute_force",),
    },
    ("Divergence", None): {
        GRADCHECK: ("test_divergence_gradcheck::test_divergence_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_divergence::test_divergence_jvp_modes_schemes",
              "test_forward_mode_value_jvp::test_value_jvp_tier1"),
        REFERENCE: ("test_divergence::test_divergence_brute_force",),
    },
    ("Divergence", "gradientMode"): {
        GRADCHECK: ("test_divergence_gradcheck::test_divergence_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_divergence::test_divergence_jvp_modes_schemes",),
        REFERENCE: ("test_divergence::test_divergence_brute_force",),
    },
    ("Divergence", "divergenceDotMode"): {
        GRADCHECK: ("test_divergence_gradcheck::test_divergence_gradcheck_consistent",),
        # Tier 1 in dot mode, and the geometry JVP
        JVP: ("test_forward_mode_value_jvp::test_value_jvp_tier1",
              "test_forward_mode_geometry_jvp_divergence::test_divergence_jvp_dot_mode"),
        REFERENCE: ("test_divergence::test_divergence_brute_force",),
    },
    ("Divergence", "consistentDivergence"): {
        GRADCHECK: ("test_divergence_gradcheck::test_divergence_gradcheck_consistent",),
        # Tier 1 with consistent divergence, and the geometry JVP
        JVP: ("test_forward_mode_geometry_jvp_divergence::test_divergence_jvp_consistent",),
        REFERENCE: ("test_correction_acceptance::test_divergence_consistent_mode",),
    },
    ("Curl", None): {
        GRADCHECK: ("test_curl_gradcheck::test_curl_gradcheck_schemes",
                    "test_curl_gradcheck::test_curl_gradcheck_3d"),
        JVP: ("test_forward_mode_geometry_jvp_curl::test_curl_jvp_modes_schemes",
              "test_forward_mode_value_jvp::test_value_jvp_tier1"),
        REFERENCE: ("test_curl::test_curl_brute_force",),
    },
    ("Curl", "gradientMode"): {
        GRADCHECK: ("test_curl_gradcheck::test_curl_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_curl::test_curl_jvp_modes_schemes",),
        REFERENCE: ("test_curl::test_curl_brute_force",),
    },
    ("Laplacian", None): {
        GRADCHECK: ("test_laplacian_gradcheck::test_laplacian_gradcheck_schemes",),
        JVP: _LAP_JVP + ("test_forward_mode_value_jvp::test_value_jvp_tier1",),
        REFERENCE: ("test_laplacian::test_laplacian_brute_force",),
    },
    ("Laplacian", "laplacianMode"): {
        GRADCHECK: ("test_laplacian_gradcheck::test_laplacian_gradcheck_schemes",
                    "test_laplacian_consistent_scheme::test_consistent_scheme_gradcheck"),
        JVP: _LAP_JVP + ("test_forward_mode_geometry_jvp_laplacian_consistent::"
                         "test_consistent_scheme_jvp",),
        REFERENCE: ("test_laplacian::test_laplacian_brute_force",
                    "test_laplacian_consistent_scheme::test_consistent_scheme_matches_reference"),
    },
    ("Laplacian", "gradientMode"): {
        GRADCHECK: ("test_laplacian_gradcheck::test_laplacian_gradcheck_schemes",),
        JVP: _LAP_JVP,
        REFERENCE: ("test_laplacian::test_laplacian_brute_force",),
    },
    ("Laplacian", "positiveDivergence"): {
        GRADCHECK: ("test_laplacian_gradcheck::test_laplacian_gradcheck_positive_divergence",),
        JVP: tuple(f"test_forward_mode_geometry_jvp_laplacian_{s}::"
                   f"test_{s}_jvp_positive_divergence"
                   for s in ("naive", "brookshaw", "dot", "default"))
        + ("test_forward_mode_value_jvp::test_value_jvp_laplacian_positive_divergence",),
        REFERENCE: ("test_laplacian::test_laplacian_positive_divergence",),
    },
    ("Covariance", None): {
        GRADCHECK: ("test_covariance_gradcheck::test_covariance_gradcheck_schemes",),
        JVP: ("test_forward_mode_geometry_jvp_covariance::test_covariance_jvp_schemes",),
        REFERENCE: ("test_covariance::test_covariance_brute_force",),
    },
    ("Momentum", None): {
        GRADCHECK: ("test_momentum::test_momentum_gradcheck",),
        JVP: ("test_forward_mode_momentum::test_momentum_jvp",),
        REFERENCE: ("test_momentum::test_momentum_brute_force",),
    },
}


# --------------------------------------------------------------------------------------
# what a test function sweeps
# --------------------------------------------------------------------------------------


def _function(ref: str):
    module, name = ref.split("::")
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None, None
    return mod, getattr(mod, name, None)


def _parameters(func):
    """(argname, value) of every parametrize case of ``func``."""
    for mark in getattr(func, "pytestmark", ()):
        if mark.name != "parametrize":
            continue
        argnames, argvalues = mark.args[0], mark.args[1]
        names = ([n.strip() for n in argnames.split(",")] if isinstance(argnames, str)
                 else list(argnames))
        for case in argvalues:
            if hasattr(case, "values") and hasattr(case, "marks"):  # pytest.param
                values = case.values
            else:
                values = tuple(case) if len(names) > 1 else (case,)
            yield from zip(names, values)


def _leaves(x):
    """Every value inside a parameter (tuples, lists, dicts, dataclass fields), with the
    dictionary keys and field names met on the way."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from _leaves(v)
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _leaves(v)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            yield f.name
            yield from _leaves(getattr(x, f.name))
    else:
        yield x


def _settings(x, option):
    """The values a parameter assigns to ``option`` (dict items named like it)."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k == option:
                yield v
            yield from _settings(v, option)
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _settings(v, option)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            yield from _settings(getattr(x, f.name), option)


def _aliases(module, obj) -> list:
    return [name for name, value in vars(module).items() if value is obj]


def _namesOption(source: str, params: list, option: str) -> bool:
    """The function names the option (source, docstring, test name or parameters)."""
    flat = source.lower().replace("_", "")
    if option.lower() in flat:
        return True
    return any(leaf == option for _, v in params for leaf in _leaves(v))


def _setsAlways(source: str, params: list, option: str) -> bool:
    """Every case of the function chooses the option itself (so none runs the default)."""
    if re.search(rf"\b{option}\s*=", source):
        return True
    cases = [v for _, v in params]
    return bool(cases) and all(any(True for _ in _settings(v, option)) for v in cases)


def sweeps(module, func, option: Option, value) -> bool:
    """Whether ``func`` (in ``module``) covers ``value`` of ``option`` (module docstring)."""
    source = inspect.getsource(func)
    params = list(_parameters(func))
    if isinstance(value, enum.Enum):
        if any(leaf is value for _, v in params for leaf in _leaves(v)):
            return True
        for alias in _aliases(module, value):
            if re.search(rf"\b{alias}\b", source):
                return True
        for cls in _aliases(module, type(value)):
            if re.search(rf"\b{cls}\.{value.name}\b", source) or re.search(
                    rf"(\bin\s+|list\(\s*){cls}\b", source):
                return True
        # iterates a module-level collection that holds the member (the Laplacian schemes
        # that need no state, `OperatorEntry.statelessValues`)
        for name, coll in vars(module).items():
            if (isinstance(coll, (tuple, list)) and any(v is value for v in coll)
                    and re.search(rf"(\bin\s+|list\(\s*){name}\b", source)):
                return True
    elif _namesOption(source, params, option.name):
        return True
    return matches(value, option.default) and not _setsAlways(source, params, option.name)


# --------------------------------------------------------------------------------------
# the matrix
# --------------------------------------------------------------------------------------


def requiredKeys(operators) -> list:
    """(operator name, option name or None) for every registry entry and declared option."""
    keys = []
    for op, entry in operators.items():
        keys.append((op.name, None))
        keys += [(op.name, o.name) for o in entry.options]
    return keys


def missingCoverage(operators, coverage) -> list:
    """What the registry declares and the listed tests do not cover, one line each."""
    missing = []
    for op, entry in operators.items():
        for option in (None,) + tuple(entry.options):
            key = (op.name, None if option is None else option.name)
            listed = coverage.get(key)
            if listed is None:
                missing.append(f"{key}: not in COVERAGE (no {', '.join(KINDS)} tests listed)")
                continue
            for kind in KINDS:
                refs = listed.get(kind, ())
                if not refs:
                    missing.append(f"{key}: no {kind} test listed")
                    continue
                found = [(_function(r), r) for r in refs]
                for (_, func), ref in found:
                    if func is None:
                        missing.append(f"{key} {kind}: {ref} does not exist")
                if option is None:
                    continue
                for value in option.values:
                    if not any(func is not None and sweeps(mod, func, option, value)
                               for (mod, func), _ in found):
                        missing.append(f"{key} {kind}: no listed test sweeps "
                                       f"{option.name}={getattr(value, 'name', value)}")
    return missing


def test_every_registry_entry_has_gradcheck_jvp_and_reference_tests():
    missing = missingCoverage(OPERATORS, COVERAGE)
    assert not missing, "\n".join(missing)


def test_coverage_lists_only_registry_keys():
    """A removed operator or option leaves no stale row behind."""
    stale = set(COVERAGE) - set(requiredKeys(OPERATORS))
    assert not stale, sorted(stale, key=str)


def test_a_new_operator_without_tests_is_reported():
    fake = dataclasses.replace(OPERATORS[WarpOperation.Gradient], operation=WarpOperation.Custom)
    missing = missingCoverage({WarpOperation.Custom: fake}, COVERAGE)
    assert any(line.startswith("('Custom', None): not in COVERAGE") for line in missing)
    assert any(line.startswith("('Custom', 'gradientMode')") for line in missing)


def test_a_new_option_or_value_without_tests_is_reported():
    entry = OPERATORS[WarpOperation.Laplacian]
    withOption = dataclasses.replace(entry, options=entry.options + (
        Option("fancyMode", (False, True)),))
    missing = missingCoverage({WarpOperation.Laplacian: withOption}, COVERAGE)
    assert missing == ["('Laplacian', 'fancyMode'): not in COVERAGE (no gradcheck, JVP, "
                       "reference tests listed)"]

    class Scheme(enum.IntEnum):
        Brand = 99

    lap = entry.option("laplacianMode")
    withValue = dataclasses.replace(entry, options=tuple(
        dataclasses.replace(o, values=o.values + (Scheme.Brand,)) if o is lap else o
        for o in entry.options))
    missing = missingCoverage({WarpOperation.Laplacian: withValue}, COVERAGE)
    assert missing == [f"('Laplacian', 'laplacianMode') {kind}: no listed test sweeps "
                       "laplacianMode=Brand" for kind in KINDS]


def test_a_listed_test_that_does_not_exist_is_reported():
    coverage = dict(COVERAGE)
    coverage[("Density", None)] = dict(COVERAGE[("Density", None)],
                                       **{GRADCHECK: ("test_density_gradcheck::test_gone",)})
    missing = missingCoverage({WarpOperation.Density: OPERATORS[WarpOperation.Density]},
                              coverage)
    assert missing == ["('Density', None) gradcheck: test_density_gradcheck::test_gone does "
                       "not exist"]


@pytest.mark.parametrize("key", requiredKeys(OPERATORS), ids=str)
def test_listed_functions_are_of_their_kind(key):
    """The kinds are what they say: a gradcheck function's module runs gradcheck; a JVP
    function lives in a forward-mode test module; a reference function's module imports an
    independent reference of `sph_reference` (or the published test vector) and the function
    compares with it."""
    listed = COVERAGE[key]
    for ref in listed[GRADCHECK]:
        mod, _ = _function(ref)
        sources = [inspect.getsource(m) for m in _withHelpers(mod)]
        assert any("gradcheck(" in src for src in sources), ref
        assert any("float64" in src for src in sources), ref
    for ref in listed[JVP]:
        assert ref.startswith("test_forward_mode_"), ref
    for ref in listed[REFERENCE]:
        mod, func = _function(ref)
        assert any(n.endswith("Reference") or n.startswith("TV_") for n in vars(mod)), ref
        assert re.search(r"\b(ref|nref|Cr)\b|[Rr]eference|TV_", inspect.getsource(func)), ref


def _withHelpers(module) -> list:
    """``module`` and the test-helper modules it imports functions from (same folder)."""
    here = inspect.getfile(module).rsplit("/", 1)[0]
    out = [module]
    for value in vars(module).values():
        owner = inspect.getmodule(value) if inspect.isfunction(value) else None
        if owner is not None and owner not in out and \
                getattr(owner, "__file__", "").rsplit("/", 1)[0] == here:
            out.append(owner)
    return out
