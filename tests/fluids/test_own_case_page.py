"""The recipes of docs/own-case.md run as written, in order, and compute what the page
says: the periodic shear wave decays at the viscous rate, the tank stays at rest with the
hydrostatic pressure and its floor carries the water's weight, the column collapses inside its walls, the learned drag of a
trajectory loss gets a gradient, and the open channel stays full and pushes its obstacle
downstream."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-case.md"


@pytest.fixture(scope="module")
def page():
    namespace: dict = {}
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 5
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/own-case.md block {k}", "exec"), namespace)
    return namespace


def test_periodic_box(page):
    assert page["shearDecay"] == pytest.approx(1.0, abs=0.03)
    assert page["shear"].stepper.__name__ == "transportKickDriftKick"


def test_tank_at_rest(page):
    assert page["tankError"] < 0.05
    assert page["tankSpeed"] < 0.01 * (page["gravity"] * page["depth"]) ** 0.5
    assert page["floorLoad"] == pytest.approx(1.0, abs=0.03)  # the floor carries the water


def test_free_surface(page):
    sim, dx = page["sim"], page["dx"]
    assert page["front"] > 0.3 + dx  # the column (0.3 wide) collapsed
    assert not [e for e in sim.monitor.events if e.check == "wallCrossing"]


def test_learning_through_a_rollout(page):
    grad = page["drag"].k.grad
    assert grad is not None and float(grad) < 0.0  # more drag, less kinetic energy
    assert page["out"].trajectory.steps == (0, 3, 6, 9, 12)


def test_open_channel(page):
    assert float(page["openDrag"][0]) > 0.0  # the stream pushes the square downstream
    assert page["openFull"] == pytest.approx(1.0, abs=0.03)
