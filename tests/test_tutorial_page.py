"""docs/tutorial.md: its GPU step runs as written (on the CPU here), and every page of the
path is one whose code the test suite runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"

# the page of each step -> the test that runs its code
RUN_BY = {
    "getting-started.md": "tests/test_readme.py",
    "operators.md": "tests/test_readme.py",
    "corrections.md": "tests/test_readme.py",
    "particle-kinds.md": "tests/test_readme.py",
    "forward-mode.md": "tests/test_readme.py",
    "own-case.md": "tests/fluids/test_own_case_page.py",
    "learning.md": "tests/fluids/test_learning_page.py",
    "scenes.md": "tests/fluids/test_scenes_page.py",
    "datasets.md": "tests/datasets/test_dataset_docs.py",
    "distributed.md": "tests/distributed/test_distributed_page.py",
}


def test_gpu_step_runs_as_written(capsys):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/tutorial.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"kinetic energy 0\.\d+ after \d+ steps", out)


def test_every_step_is_a_page_the_tests_run():
    table = PAGE.read_text().split("## On a GPU")[0]
    steps = [line for line in table.splitlines() if re.match(r"\| \d\. ", line)]
    assert len(steps) == 7
    for line in steps[:-1]:  # the GPU step is the block above
        pages = re.findall(r"\]\(([a-z-]+\.md)\)", line.split("|")[2])
        run = [p for p in pages if p in RUN_BY]
        assert run, f"no page of the step {line.split('|')[1].strip()!r} is run by the tests"
        for p in run:
            test = ROOT / RUN_BY[p]
            assert test.is_file() and p in test.read_text(), (p, RUN_BY[p])
