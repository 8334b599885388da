"""Equations of state of weakly compressible SPH.

The fluid is made slightly compressible with an artificial sound speed c0, chosen so that
the density varies by about 1 % (Monaghan 1994: c0 >= 10 |u|max, Mach <= 0.1, gives
|drho / rho0| <= ~1 %; `referenceSoundSpeed`).

===================  =====================================================================
Tait / Cole          p = (rho0 c0^2 / gamma) ((rho / rho0)^gamma - 1) + p_b
                     (Cole 1948, *Underwater Explosions*; Batchelor 1967; Monaghan 1994,
                     J. Comput. Phys. 110: 399-406, with gamma = 7 for water)
                     c = c0 (rho / rho0)^((gamma - 1) / 2)  (c^2 = dp/drho)
linear               p = c0^2 (rho - rho0) + p_b   (the Tait form's first-order expansion;
                     Morris, Fox & Zhu 1997, J. Comput. Phys. 136: 214-226); c = c0
===================  =====================================================================

p_b is a constant background pressure (Adami, Hu & Adams 2013, J. Comput. Phys. 241:
292-307, use one with the transport-velocity formulation to keep the pressure positive).
The inverses give the density of a prescribed pressure (e.g. a hydrostatic start).

All arguments may be Python numbers or tensors (broadcast by torch); the results are
differentiable with respect to every tensor argument, in reverse and forward mode. The
constants are validated when they are Python numbers (a tensor constant is the caller's to
keep positive: checking it would read it back to the host).
"""

from __future__ import annotations

import math

import torch

__all__ = ["taitPressure", "taitDensity", "taitSoundSpeed", "linearPressure",
           "linearDensity", "linearSoundSpeed", "referenceSoundSpeed"]


def _positive(name: str, value) -> None:
    if isinstance(value, (int, float)) and not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _checkConstants(rho0, c0, gamma=None) -> None:
    _positive("rho0", rho0)
    _positive("c0", c0)
    if gamma is not None:
        _positive("gamma", gamma)


def taitPressure(rho, rho0, c0, gamma=7.0, backgroundPressure=0.0):
    """Tait / Cole equation of state: p = (rho0 c0^2 / gamma) ((rho / rho0)^gamma - 1) + p_b.

    Args:
        rho: densities (tensor).
        rho0: reference density.
        c0: artificial sound speed at rho0.
        gamma: polytropic exponent (7 for water).
        backgroundPressure: p_b, added to every pressure.
    """
    _checkConstants(rho0, c0, gamma)
    return (rho0 * c0 * c0 / gamma) * (torch.pow(rho / rho0, gamma) - 1.0) + backgroundPressure


def taitDensity(p, rho0, c0, gamma=7.0, backgroundPressure=0.0):
    """Inverse of `taitPressure`: rho = rho0 (1 + gamma (p - p_b) / (rho0 c0^2))^(1 / gamma).
    Pressures below p_b - rho0 c0^2 / gamma have no density (NaN)."""
    _checkConstants(rho0, c0, gamma)
    return rho0 * torch.pow(1.0 + gamma * (p - backgroundPressure) / (rho0 * c0 * c0),
                            1.0 / gamma)


def taitSoundSpeed(rho, rho0, c0, gamma=7.0):
    """Sound speed of the Tait equation, c = sqrt(dp/drho) = c0 (rho / rho0)^((gamma - 1)/2)."""
    _checkConstants(rho0, c0, gamma)
    return c0 * torch.pow(rho / rho0, 0.5 * (gamma - 1.0))


def linearPressure(rho, rho0, c0, backgroundPressure=0.0):
    """Linear equation of state: p = c0^2 (rho - rho0) + p_b."""
    _checkConstants(rho0, c0)
    return c0 * c0 * (rho - rho0) + backgroundPressure


def linearDensity(p, rho0, c0, backgroundPressure=0.0):
    """Inverse of `linearPressure`: rho = rho0 + (p - p_b) / c0^2."""
    _checkConstants(rho0, c0)
    return rho0 + (p - backgroundPressure) / (c0 * c0)


def linearSoundSpeed(rho, rho0, c0):
    """Sound speed of the linear equation: c0 everywhere (a tensor shaped like `rho`)."""
    _checkConstants(rho0, c0)
    return torch.full_like(rho, 1.0) * c0


def referenceSoundSpeed(maxVelocity: float, gravity: float = 0.0, height: float = 0.0,
                        factor: float = 10.0) -> float:
    """Artificial sound speed for a density variation of about 1 / factor^2 (Monaghan 1994):
    c0 = factor * max(|u|max, sqrt(2 |g| H)), with |u|max the largest expected flow speed and
    sqrt(2 |g| H) the speed of a fall from the height H of the water column (the speed
    Monaghan's estimate uses; the dam break's column of height 2a gives 10 sqrt(2 g 2a), a
    tank of depth H at rest 10 sqrt(2 g H)). The one sound-speed rule of the cases.

    Args:
        maxVelocity: the largest expected speed (>= 0).
        gravity: |g| (>= 0).
        height: H (>= 0).
        factor: the ratio c0 / speed (10: Mach 0.1, ~1 % density variation).
    """
    for name, v in (("maxVelocity", maxVelocity), ("gravity", gravity), ("height", height)):
        if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    _positive("factor", factor)
    speed = max(float(maxVelocity), math.sqrt(2.0 * float(gravity) * float(height)))
    if speed == 0.0:
        raise ValueError("referenceSoundSpeed: maxVelocity and sqrt(gravity * height) are both "
                         "0; accepted: a positive expected speed or a water column")
    return float(factor) * speed
