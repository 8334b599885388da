"""The README's quickstart really runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_quickstart_runs():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python code block"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    adjacency = namespace["adjacency"]
    mean = adjacency.numNeighbors.double().mean().item()
    assert 24 < mean < 33  # pi * 3^2 ~ 28.3 for a lattice with support 3 dx
    rho = namespace["rho"]
    assert abs(rho.mean().item() - 1.0) < 0.02  # unit density on a near-perfect lattice
    grad = namespace["positions"].grad
    assert grad is not None and grad.abs().max().item() > 0


# page -> the pages whose examples it continues (their blocks run first)
PAGES = {
    "README.md": (),
    "docs/getting-started.md": ("README.md",),
    "docs/operators.md": (),
    "docs/corrections.md": ("docs/operators.md",),
    "docs/forward-mode.md": (),
    "docs/neighborhood.md": (),
    "docs/particle-kinds.md": (),
}


def _blocks(page):
    text = (README.parent / page).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("page", list(PAGES))
def test_documentation_code_blocks_run(page):
    """Every python block of the page runs, in order, in one namespace (later blocks continue
    earlier ones, after the blocks of the pages it continues), so the documented examples
    cannot rot."""
    assert _blocks(page), f"{page} has no python code block"
    namespace: dict = {}
    for p in PAGES[page] + (page,):
        for k, block in enumerate(_blocks(p)):
            exec(compile(block, f"{p} block {k}", "exec"), namespace)
