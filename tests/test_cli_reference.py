"""docs/cli.md is the command line as it is: the page equals what
scripts/docs/cli_reference.py renders from the parser."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cli_page_is_current(monkeypatch):
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  ROOT / "scripts/docs/cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("COLUMNS", module.WIDTH)
    text = module.render()
    assert (ROOT / "docs/cli.md").read_text() == text, \
        "docs/cli.md differs from the parser: run python scripts/docs/cli_reference.py"
    for command in ("info", "demo", "run", "distributed-check", "dataset", "precompile"):
        assert f"## warpsph {command}\n" in text
