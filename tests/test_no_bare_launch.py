"""Every Warp launch reachable from a differentiable pipeline goes through the bridge: `wp.launch` appears only in `autograd/launcher.py` and in the
non-differentiable launch helper `util/warpContext.launch`, which only the neighbour search
uses."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "warpSPHCore"


def _files():
    return sorted(p for p in SRC.rglob("*.py"))


def test_bare_wp_launch_only_in_the_launchers():
    offenders = []
    for path in _files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bwp\.launch\(", line) and not line.lstrip().startswith("#"):
                rel = path.relative_to(SRC).as_posix()
                if rel not in ("autograd/launcher.py", "util/warpContext.py"):
                    offenders.append(f"{rel}:{n}")
    assert offenders == []


def test_structure_launch_helper_used_only_by_the_neighbour_search():
    users = []
    for path in _files():
        text = path.read_text()
        if re.search(r"from \.+util\.warpContext import [^\n]*\blaunch\b", text) or re.search(
            r"warpContext\.launch\(", text
        ):
            users.append(path.relative_to(SRC).as_posix())
    assert users, "the census must be able to see the helper's users"
    assert all(u.startswith("neighborhood/") for u in users), users
