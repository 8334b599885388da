"""docs/datasets.md: its python block runs as written (a tiny dataset read with plain h5py
and with `TrajectoryWindows`), and the page names every case and metadata key the command
writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from warpSPHCore.datasets import DATASET_CASES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def test_docs_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert blocks, "docs/datasets.md has no python code block"
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/datasets.md block {k}", "exec"), namespace)
    assert (tmp_path / "data" / "tgv2d-tiny" / "metadata.json").exists()
    # every key written is explained on the page
    meta = json.loads((tmp_path / "data" / "tgv2d-tiny" / "metadata.json").read_text())
    text = PAGE.read_text()
    assert [k for k in meta if f"`{k}`" not in text] == []
    assert all(f"`{name}`" in text for name in DATASET_CASES)
