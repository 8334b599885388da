"""Time-step limits of explicit weakly compressible SPH.

dt = min(C_cfl h / (c0 + |u|max),  C_visc h^2 / nu,  C_f sqrt(h / |a|max))

the acoustic (CFL) condition, the viscous-diffusion condition (Morris, Fox & Zhu 1997,
J. Comput. Phys. 136: 214-226) and the body-force condition (Monaghan 1992), with the
coefficients 0.25, 0.125 and 0.25 of Adami, Hu & Adams 2012 (J. Comput. Phys. 231:
7057-7075), which are the defaults here.

h is the *smoothing length* of these conditions, not this library's compact support H
(q = r / H <= 1): for the usual supports of 2-3 particle spacings the conventional choice
is h = the particle spacing dx (docs/fluids.md).

The result is a 0-dim tensor on the inputs' device: the maxima over the particles are
reduced on the device and never read back, so a loop that feeds it to the integrator does
not synchronise with the host.
"""

from __future__ import annotations

import math

import torch

__all__ = ["stableTimeStep"]


def _coefficient(name: str, value) -> float:
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"stableTimeStep: {name} must be a positive finite number, got "
                         f"{value!r}")
    return float(value)


def stableTimeStep(h, c0, velocities=None, viscosity=0.0, accelerations=None, *,
                   cfl: float = 0.25, viscous: float = 0.125, force: float = 0.25,
                   maxTimeStep: float | None = None):
    """The largest stable time step (module docstring) as a 0-dim tensor.

    Args:
        h: smoothing length of the conditions (a number, or a tensor whose minimum is used).
        c0: artificial sound speed (number or 0-dim tensor).
        velocities: ``[N, d]`` velocities (None: |u|max = 0).
        viscosity: kinematic viscosity nu (0: no viscous limit).
        accelerations: ``[N, d]`` accelerations of the body forces (None: no force limit).
        cfl: the acoustic coefficient C_cfl.
        viscous: the viscous coefficient C_visc.
        force: the body-force coefficient C_f.
        maxTimeStep: an upper bound (e.g. the output interval), or None.

    Returns:
        A 0-dim tensor on the device and in the dtype of the first tensor argument
        (float64 on the CPU without one).
    """
    cfl, viscous, force = (_coefficient(n, v) for n, v in
                           (("cfl", cfl), ("viscous", viscous), ("force", force)))
    like = next((t for t in (velocities, accelerations, h, c0) if isinstance(t, torch.Tensor)),
                None)
    device = like.device if like is not None else torch.device("cpu")
    dtype = like.dtype if like is not None and like.is_floating_point() else torch.float64

    def tensor(x):
        return torch.as_tensor(x, dtype=dtype, device=device)

    hMin = h.min() if isinstance(h, torch.Tensor) else tensor(h)
    speed = tensor(c0)
    if velocities is not None and velocities.numel() > 0:
        speed = speed + torch.linalg.vector_norm(velocities, dim=-1).amax()
    dt = cfl * hMin / speed
    if isinstance(viscosity, torch.Tensor) or viscosity != 0.0:
        dt = torch.minimum(dt, viscous * hMin * hMin / tensor(viscosity))
    if accelerations is not None and accelerations.numel() > 0:
        aMax = torch.linalg.vector_norm(accelerations, dim=-1).amax()
        dt = torch.minimum(dt, force * torch.sqrt(hMin / aMax))  # aMax = 0: inf, no limit
    if maxTimeStep is not None:
        dt = torch.minimum(dt, tensor(_coefficient("maxTimeStep", maxTimeStep)))
    return dt
