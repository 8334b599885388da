"""Demo part ``tgv``: the Taylor-Green vortex case (`fluids.cases.tgv`, ``warpsph run tgv``) at
a small size, so that `make demo` stays fast.

What it shows: a weakly compressible SPH simulation built from the library (relaxed start,
transport-velocity momentum, Verlet-skin neighbour list, kick-drift-kick) whose kinetic
energy follows the analytic viscous decay 0.25 exp(-16 pi^2 t / Re). At the default demo
size (20 x 20 particles to t = 0.2, about 180 steps) the energy error stays within a few per
cent; the full size (``warpsph run tgv``: 50 x 50 to t = 1) is the
accuracy claim, this part only its quick look.
"""

from __future__ import annotations

from pathlib import Path

from ..fluids.cases.tgv import TaylorGreenConfig
from ..fluids.cases.tgv import run as runCase
from .common import fmt

__all__ = ["run", "SETTINGS"]

#: (particles per axis, end time, relaxation steps) per demo size
SETTINGS = {"tiny": (12, 0.05, 50), "small": (16, 0.1, 100), "default": (20, 0.2, 200)}


def run(out: Path, size: str = "default", device="cpu", quiet: bool = False) -> dict:
    """Run the case into ``out/tgv``; returns its results with the report section."""
    n, t, relax = SETTINGS[size]
    config = TaylorGreenConfig(n=n, t=t, relax=relax, device=str(device))
    r = runCase(config, Path(out) / "tgv", quiet=quiet)
    r.pop("history")
    table = [("tgv: kinetic energy error", f"{r['kineticEnergyRelErr']:+.2%}"),
             ("tgv: velocity L2 error", f"{r['velocityL2RelErr']:.2%}"),
             ("tgv: ms per step", fmt(r["msPerStep"]))]
    lines = [
        "## 4. Taylor-Green vortex (weakly compressible SPH)", "",
        f"{r['particles']} particles (dx = 1/{n}), Re = {config.re:g}, relaxed start "
        f"({relax} steps), transport velocity, support {config.support:g} dx, "
        f"{r['steps']} kick-drift-kick steps to t = {t:g}, {r['neighbourBuilds']} neighbour "
        f"searches for {r['rateEvaluations']} rate evaluations (Verlet skin "
        f"{config.skin:g}).", "",
        "| quantity | value |", "|---|---|",
        f"| kinetic energy error at t (vs E_0 exp(-16 pi^2 t / Re)) | "
        f"{r['kineticEnergyRelErr']:+.2%} |",
        f"| velocity L2 error at t | {r['velocityL2RelErr']:.2%} |",
        f"| max velocity error at t | {r['maxVelocityRelErr']:+.2%} |",
        f"| ms per step | {fmt(r['msPerStep'])} |", "",
        "![Taylor-Green vortex](tgv/tgv.png)", "",
        "The full-size run is `warpsph run tgv` (50 x 50 particles to t = 1).", ""]
    return {**r, "report": "\n".join(lines), "table": table}
