"""The code of docs/scenes.md runs as written and computes what the page says: no pair across
scenes and the batch equal to the separate scenes; per-scene kinetic energies ordered by the
Reynolds number (less viscous scenes keep more energy) and a gradient for every scene."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "scenes.md"


@pytest.fixture(scope="module")
def page():
    namespace: dict = {}
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 2
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/scenes.md block {k}", "exec"), namespace)
    return namespace


def test_operators_on_scenes(page):
    assert page["crossing"] == 0
    assert page["sceneError"] < 1e-12


def test_batched_rollout_and_gradients(page):
    e = page["energies"].detach()
    assert e.shape == (4,) and bool((e[1:] > e[:-1]).all())
    grads = page["perScene"]
    assert len(grads) == 4 and all(bool(torch.isfinite(g).all()) and g.abs().max() > 0
                                   for g in grads)
