"""Every code block of docs/distributed.md runs as written.

- "A step on N ranks": standalone it starts two gloo processes itself (`spawn`), computes a
  density, a gradient, a global loss and its gradient, moves the particles and migrates
  them, and checks that no particle is lost or duplicated.
- "A simulation on N ranks": a Taylor-Green vortex on two ranks against one process.
- The shell commands: each ``warpsph`` command line (also after ``torchrun ... --``) parses
  with the command's own parser (running them is what the other tests of this folder do).
(Under torchrun the same scripts run on the launcher's ranks.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "distributed.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def _run(tmp_path, block):
    script = tmp_path / "script.py"
    script.write_text(block)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_page_has_its_scripts():
    assert len(BLOCKS) == 2


def test_step_script_runs_as_written(tmp_path):
    out = _run(tmp_path, BLOCKS[0])
    lines = [ln for ln in out.splitlines() if ln.startswith("loss ")]
    assert len(lines) == 2  # one per rank
    losses = {ln.split(",")[0] for ln in lines}
    assert len(losses) == 1  # the same global loss on both ranks
    assert all(ln.endswith("of 576") for ln in lines)


def test_simulation_script_runs_as_written(tmp_path):
    out = _run(tmp_path, BLOCKS[1])  # it asserts the energy against one process itself
    lines = [ln for ln in out.splitlines() if ln.startswith("energy ")]
    assert len(lines) == 2 and len({ln.split(":")[0] for ln in lines}) == 1
    owned = [int(re.search(r"(\d+) owned", ln).group(1)) for ln in lines]
    assert sum(owned) == 576


COMMANDS = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", PAGE.read_text(),
                                                flags=re.S) for ln in block.splitlines()
            if ln.strip()]


@pytest.mark.parametrize("line", COMMANDS)
def test_shell_commands_parse(line):
    from warpSPHCore.cli import _parser

    words = shlex.split(line)
    if words[0] == "torchrun":
        assert "--" in words, "torchrun needs -- before the script (its option abbreviations)"
        words = words[words.index("--") + 1:]
    assert words[0] == "warpsph"
    _parser().parse_args(words[1:])
