"""The script of docs/distributed.md ("A step on N ranks") runs as written: standalone it
starts two gloo processes itself (`spawn`), computes a density, a gradient, a global loss and
its gradient, moves the particles and migrates them, and checks that no particle is lost or
duplicated. (Under torchrun the same script runs on the launcher's ranks.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "distributed.md"


def test_step_script_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1
    script = tmp_path / "step.py"
    script.write_text(blocks[0])
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("loss ")]
    assert len(lines) == 2  # one per rank
    losses = {ln.split(",")[0] for ln in lines}
    assert len(losses) == 1  # the same global loss on both ranks
    assert all(ln.endswith("of 576") for ln in lines)
