"""Validation cases of the WCSPH toolkit (issue 16, item 5), run by ``warpsph run CASE``.

`CASES` is the registry: name -> `Case` (a config dataclass whose fields and defaults are the
command line options, and ``run(config, out, *, writer=None, quiet=False) -> dict``, which
writes ``results.json`` and figures into the folder `out` and returns the results).

=======  ========================================================================
``tgv``  2D Taylor-Green vortex, Re = 100, periodic unit box, relaxed start,
         transport-velocity scheme (`cases.tgv`)
=======  ========================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import tgv
from .transport import TransportRates, TransportState, transportKickDriftKick

__all__ = ["Case", "CASES", "TransportRates", "TransportState", "transportKickDriftKick"]


@dataclass(frozen=True)
class Case:
    """A registered case: its config dataclass (defaults: the case's reference size), its run
    function and a one-line summary."""

    name: str
    config: type
    run: Callable
    summary: str


CASES = {
    "tgv": Case("tgv", tgv.TaylorGreenConfig, tgv.run,
                "2D Taylor-Green vortex, Re = 100, transport velocity, relaxed start"),
}
