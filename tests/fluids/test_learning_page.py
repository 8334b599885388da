"""The code of docs/learning.md runs as written and computes what the page says: the
closure's loss falls tenfold and its Laplacian coefficient comes near -0.2 (the reference has
80 % of the viscosity); reverse over reverse equals reverse over forward; the gradient penalty has a
gradient; vmap over fields equals the loop and jacrev equals autograd."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "learning.md"


@pytest.fixture(scope="module")
def page():
    namespace: dict = {}
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 3
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/learning.md block {k}", "exec"), namespace)
    return namespace


def test_training_through_the_rollout(page):
    losses = page["losses"]
    assert losses[-1] < 0.1 * losses[0], losses
    assert -0.3 < float(page["closure"].theta.detach()[0]) < -0.1


def test_second_derivatives(page):
    assert page["hvError"] < 1e-10
    assert float(page["dPenalty"].abs().max()) > 0


def test_torch_func(page):
    assert page["vmapError"] < 1e-13
    assert page["jacError"] < 1e-12
