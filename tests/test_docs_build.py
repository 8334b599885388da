"""The documentation site builds exactly as `make docs` builds it (MkDocs + mkdocstrings over
`docs/` and the docstrings of the public API, warnings as errors).

The command is read from the Makefile's ``docs`` recipe, so the test and `make docs` cannot
drift apart; only the output directory differs (a temporary one, so ``./site`` is left alone).
An earlier version passed ``-q``, which lowers MkDocs' log level to ERROR: the WARNING records
(griffe's docstring warnings among them) were then never emitted, so ``--strict`` had nothing
to count and the test passed while `make docs` failed. Any WARNING line fails the test too.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def _makeDocsCommand():
    """(env additions, argv) of the Makefile's ``docs`` recipe, with ``$(VENV)/bin/mkdocs``
    replaced by this interpreter's ``-m mkdocs``."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("docs:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    assert len(recipe) == 1, f"expected a one-line docs recipe, got {recipe}"
    words = shlex.split(recipe[0])
    env = {}
    while words and _ASSIGN.match(words[0]):
        name, value = _ASSIGN.match(words[0]).groups()
        env[name] = value
        words.pop(0)
    assert words[0] == "$(VENV)/bin/mkdocs", words
    return env, [sys.executable, "-m", "mkdocs", *words[1:]]


def test_docs_command_matches_makefile():
    env, argv = _makeDocsCommand()
    assert env == {"NO_MKDOCS_2_WARNING": "1"}
    assert argv[3:] == ["build", "--strict"]


def test_mkdocs_build_strict(tmp_path):
    extraEnv, argv = _makeDocsCommand()
    env = dict(os.environ, **extraEnv)
    site = tmp_path / "site"
    r = subprocess.run([*argv, "-d", str(site)], cwd=ROOT, capture_output=True, text=True,
                       env=env, timeout=300)
    output = r.stdout + r.stderr
    assert r.returncode == 0, output
    warnings = [line for line in output.splitlines() if re.search(r"\bWARNING\b", line)]
    assert not warnings, "\n".join(warnings)
    assert (site / "api" / "operations" / "index.html").exists()
    assert (site / "index.html").exists()
