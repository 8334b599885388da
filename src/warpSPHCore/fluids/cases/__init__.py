"""Validation cases of the WCSPH toolkit, run by ``warpsph run CASE``.

`CASES` is the registry: name -> `Case` (a config dataclass whose fields and defaults are the
command line options, and ``run(config, out, *, writer=None, quiet=False) -> dict``, which
writes ``results.json`` and figures into the folder `out` and returns the results).

==============  ==================================================================
``tgv``         2D Taylor-Green vortex, Re = 100, periodic unit box, relaxed start,
                transport-velocity scheme (`cases.tgv`)
``poiseuille``  body-force-driven channel between no-slip walls, start-up series of
                Morris et al. 1997 (`cases.poiseuille`)
``cavity``      lid-driven cavity, Re = 100, against Ghia, Ghia & Shin 1982
                (`cases.cavity`)
``dambreak``    2D dam break, surge front against Martin & Moyce 1952
                (`cases.dambreak`)
``hydrostatic``  a tank at rest: hydrostatic pressure, no motion, no leak
                 (`cases.hydrostatic`)
``beltrami``    3D Arnold-Beltrami-Childress flow, Re = 10, periodic 2 pi box, decaying
                to half its kinetic energy, transport-velocity scheme (`cases.beltrami`)
``channel``     a plane channel with an open inlet (parabolic inflow) and outlet (fixed
                pressure): the steady Poiseuille profile and the mass balance
                (`cases.channel`)
``cylinder``    the DFG 2D-1 benchmark (Schafer & Turek 1996): a cylinder in a channel
                with an open inlet and outlet, Re = 20, drag, lift and pressure
                difference against the reference intervals (`cases.cylinder`)
==============  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import beltrami, cavity, channel, cylinder, dambreak, hydrostatic, poiseuille, tgv
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
    "poiseuille": Case("poiseuille", poiseuille.PoiseuilleConfig, poiseuille.run,
                       "2D body-force-driven Poiseuille start-up flow (Morris et al. 1997), "
                       "Adami 2012 no-slip walls"),
    "cavity": Case("cavity", cavity.CavityConfig, cavity.run,
                   "lid-driven cavity, Re = 100, transport velocity, vs Ghia et al. 1982"),
    "hydrostatic": Case("hydrostatic", hydrostatic.HydrostaticConfig, hydrostatic.run,
                        "2D tank at rest: hydrostatic pressure, no motion, no leak, to t = 10 "
                        "sqrt(H / g)"),
    "dambreak": Case("dambreak", dambreak.DamBreakConfig, dambreak.run,
                     "2D dam break (Martin & Moyce 1952, n^2 = 2), Adami walls, surge front "
                     "vs experiment"),
    "beltrami": Case("beltrami", beltrami.BeltramiConfig, beltrami.run,
                     "3D Arnold-Beltrami-Childress flow (A = B = C = 1, k = 1), Re = 10, "
                     "decay to half the kinetic energy, transport velocity"),
    "channel": Case("channel", channel.ChannelConfig, channel.run,
                    "2D channel with an open inlet (parabolic inflow) and outlet, Adami "
                    "no-slip walls, steady profile vs Poiseuille, mass balance"),
    "cylinder": Case("cylinder", cylinder.CylinderConfig, cylinder.run,
                     "DFG 2D-1 cylinder benchmark (Re = 20): drag, lift and pressure "
                     "difference vs Schafer & Turek 1996, open inlet and outlet"),
}
