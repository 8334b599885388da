"""The doc tables that restate the operator registry are the registry's rendering
(`scripts/docs/registry_tables.py`): a page whose marked table differs from what the script
renders fails here (fix: run the script). No kernel is launched."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from warpSPHCore.operators import OPERATORS

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "docs" / "registry_tables.py"


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("registry_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_tables_match_the_registry(tables):
    stale = [str(p.relative_to(ROOT)) for p in tables.stale()]
    assert not stale, (f"registry tables differ from the registry in {stale}; run "
                       f"python {SCRIPT.relative_to(ROOT)}")


def test_every_table_is_in_the_docs(tables):
    """Each table is marked somewhere, and every operator has its own corrections row on
    its page."""
    text = {p.relative_to(ROOT).as_posix(): p.read_text() for p in tables.pages()}
    names = {m["name"] for page in text.values() for m in tables._MARKER.finditer(page)}
    assert {"outputs", "shapes", "corrections", "jvp-scope", "particle-kinds",
            "interaction-modes"} <= names
    for op in OPERATORS:
        assert f"corrections:{op.name}" in names, op.name
        for name in ("outputs", "shapes", "corrections", "jvp-scope"):
            assert f"| {op.name} |" in tables.render(name), (name, op.name)


def test_a_hand_edited_table_is_stale(tables):
    """The check can fail: an edited cell is rewritten, and an unknown table is an error."""
    page = ROOT / "docs" / "operators.md"
    text = page.read_text()
    assert tables.updated(text) == text
    edited = text.replace("| Density | ignored | ignored | ignored | ignored |",
                          "| Density | ✓ | ignored | ignored | ignored |", 1)
    assert edited != text and tables.updated(edited) == text
    with pytest.raises(KeyError, match="unknown"):
        tables.updated("<!-- registry:nonsense -->\n<!-- /registry:nonsense -->")
    with pytest.raises(KeyError, match="no such operator"):
        tables.render("corrections:Custom")


def test_shape_cells_follow_the_rules(tables):
    """Spot checks of the computed shapes against the shape rules."""
    shapes = tables.render("shapes")
    assert "| Gradient | `[N, d]` | `[N, d, d]` | `[N, d, d, d]` |" in shapes
    assert ("| Curl | 1D `[N]`; 2D/3D ValueError | 1D `[N]`; 2D `[N, 1]`; 3D `[N, 3]` | "
            "1D ValueError; 2D `[N, 2]`; 3D `[N, 3, 3]` |") in shapes
    assert "| Laplacian, `laplacianMode=Dot` | 1D `[N]`; 2D/3D ValueError |" in shapes
