"""Environment gates are read once (`util.gates`): changing a variable after import
has no effect until `refreshGates()`; the test suite's monkeypatch refreshes them."""

from __future__ import annotations

import os

from warpSPHCore.util import gates
from warpSPHCore.util.fieldRegistry import nullFillMode


def test_gates_are_read_once_and_refreshed_on_request():
    name = "WARPSPHCORE_NULL_FILL"
    old = os.environ.get(name)
    try:
        os.environ[name] = "sentinel"
        assert nullFillMode() == "zeros"  # read at import / the last refresh
        gates.refreshGates()
        assert nullFillMode() == "sentinel"
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
        gates.refreshGates()
    assert nullFillMode() == "zeros"


def test_monkeypatch_refreshes(monkeypatch):
    monkeypatch.setenv("WARPSPHCORE_DISABLE_REVERSE_KERNELS", "1")
    assert gates.gate("WARPSPHCORE_DISABLE_REVERSE_KERNELS") == "1"
    monkeypatch.delenv("WARPSPHCORE_DISABLE_REVERSE_KERNELS")
    assert gates.gate("WARPSPHCORE_DISABLE_REVERSE_KERNELS") == "0"


def test_every_gate_has_a_default():
    assert set(gates.GATES) == set(gates._VALUES)
