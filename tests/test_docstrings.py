"""The public API is documented: every exported function and class has a docstring, and every
exported function with parameters has an ``Args:`` section (Google style, as rendered by
mkdocstrings in the API reference, ``mkdocs build --strict``).

The public API is the ``__all__`` of the top-level package and of the subpackages listed in
`MODULES`. Enums and constants (``__version__``) are exempt. Warp-level objects count as
what they wrap: a ``@wp.func`` as a function (its Python function), a ``@wp.struct`` as a
class.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re

import pytest

MODULES = (
    "warpSPHCore",
    "warpSPHCore.corrections",
    "warpSPHCore.neighborhood",
    "warpSPHCore.autograd",
    "warpSPHCore.dataTypes",
    "warpSPHCore.util.errorFlags",
)

# (module, name) -> why this public function may go without an ``Args:`` section. Keep it
# small; every entry needs a reason, and entries that are no longer needed fail the test.
ALLOW_NO_ARGS: dict[tuple[str, str], str] = {}

# ``Args:`` (Google) or ``Parameters`` (NumPy, with or without a dashed underline).
_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:?\s*$", re.M)


def _publicNames():
    for modName in MODULES:
        mod = importlib.import_module(modName)
        assert hasattr(mod, "__all__"), f"{modName} defines no __all__"
        for name in mod.__all__:
            yield modName, name


PUBLIC = list(_publicNames())


def _classify(obj):
    """('exempt' | 'class' | 'function', the object whose docstring/signature counts)."""
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return "exempt", obj
    if inspect.isclass(obj):
        return "class", obj
    if inspect.isfunction(obj):
        return "function", obj
    # Warp: wp.Function (from @wp.func) wraps .func, wp.Struct (from @wp.struct) wraps .cls
    wrapped = getattr(obj, "func", None)
    if type(obj).__name__ == "Function" and inspect.isfunction(wrapped):
        return "function", wrapped
    wrapped = getattr(obj, "cls", None)
    if type(obj).__name__ == "Struct" and inspect.isclass(wrapped):
        return "class", wrapped
    if not callable(obj):
        return "exempt", obj  # constants such as __version__
    return "unknown", obj


def _parameters(fn):
    return [p for p in inspect.signature(fn).parameters.values()
            if p.name not in ("self", "cls")]


@pytest.mark.parametrize(("modName", "name"), PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_public_name_is_documented(modName, name):
    obj = getattr(importlib.import_module(modName), name)
    kind, target = _classify(obj)
    assert kind != "unknown", (f"{modName}.{name}: unrecognised kind {type(obj).__name__}; "
                               "classify it in tests/test_docstrings.py")
    if kind == "exempt":
        return
    doc = inspect.getdoc(target) or ""
    assert doc.strip(), f"{modName}.{name}: public {kind} without a docstring"
    if kind == "function" and _parameters(target) and (modName, name) not in ALLOW_NO_ARGS:
        assert _ARGS_SECTION.search(doc), (
            f"{modName}.{name}: public function with parameters "
            f"{[p.name for p in _parameters(target)]} but no 'Args:' section in its docstring")


def test_allow_list_is_current():
    """Every allow-list entry is exported, justified, and still lacks an Args section."""
    public = set(PUBLIC)
    for key, reason in ALLOW_NO_ARGS.items():
        assert key in public, f"{key}: not a public name any more; drop it from ALLOW_NO_ARGS"
        assert reason.strip(), f"{key}: allow-list entry without a justification"
        _, target = _classify(getattr(importlib.import_module(key[0]), key[1]))
        assert not _ARGS_SECTION.search(inspect.getdoc(target) or ""), (
            f"{key}: has an Args section now; drop it from ALLOW_NO_ARGS")


def test_scope_is_not_empty():
    """Guards the parametrisation: the checked modules export functions and classes."""
    kinds = {_classify(getattr(importlib.import_module(m), n))[0] for m, n in PUBLIC}
    assert {"function", "class"} <= kinds
