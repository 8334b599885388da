"""The README's quickstart really runs."""

from __future__ import annotations

import re
from pathlib import Path

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
