"""Initial velocity fields: random divergence-free flows from a few Fourier modes.

`randomFourierVelocity(positions, domain, modes=3, rms=1.0, seed=0)` samples a periodic,
divergence-free velocity field on the box of `domain` and evaluates it at `positions`:

* 2D: a stream function psi(x) = sum_k a_k cos(2 pi k . x / L) + b_k sin(2 pi k . x / L)
  over the integer wave vectors k with 0 < |k| <= `modes` (one of each pair +-k), and
  u = (d psi / dy, -d psi / dx);
* 3D: a vector potential A(x) of the same form (a_k, b_k vectors) and u = curl A.

The coefficients are normal with standard deviation 1 / |k|^2 (the larger scales carry the
energy) and depend only on `seed`, `modes` and the dimension, so the same seed gives the
same flow at every resolution: a coarse and a fine lattice sample one field (what a
learned-correction study compares). The field is scaled so that its root-mean-square speed
over the box is `rms`, computed from the coefficients (the modes are orthogonal), not from
the samples.
"""

from __future__ import annotations

import itertools
import math

import torch

from ..dataTypes.domain import DomainDescription

__all__ = ["randomFourierVelocity", "fourierWaveVectors"]


def fourierWaveVectors(dim: int, modes: int) -> list:
    """The integer wave vectors k with 0 < |k| <= `modes`, one of each pair +-k (the first
    nonzero component positive), in a fixed order."""
    if dim not in (2, 3):
        raise ValueError(f"fourierWaveVectors: dim={dim}; accepted: 2 or 3")
    if isinstance(modes, bool) or not isinstance(modes, int) or modes < 1:
        raise ValueError(f"fourierWaveVectors: modes={modes!r}; accepted: an int >= 1")
    out = []
    for k in itertools.product(range(-modes, modes + 1), repeat=dim):
        if sum(c * c for c in k) == 0 or sum(c * c for c in k) > modes * modes:
            continue
        first = next(c for c in k if c != 0)
        if first > 0:
            out.append(k)
    return out


def randomFourierVelocity(positions: torch.Tensor, domain: DomainDescription, modes: int = 3,
                          rms: float = 1.0, seed: int = 0) -> torch.Tensor:
    """A random periodic divergence-free velocity field at `positions` (module docstring).

    Args:
        positions: ``[N, d]`` (d = 2 or 3), float32 or float64.
        domain: the box (its ``min``/``max``; the field is periodic on it).
        modes: the largest wave number |k| (in box periods).
        rms: the root-mean-square speed of the field over the box.
        seed: the seed of the coefficients (same seed, same field at any resolution).

    Returns:
        ``[N, d]`` velocities, dtype and device of `positions`.
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() != 2 \
            or positions.shape[1] not in (2, 3):
        shape = tuple(getattr(positions, "shape", ()))
        raise ValueError(f"randomFourierVelocity: positions has shape {shape}; accepted: "
                         "[N, 2] or [N, 3]")
    d = int(positions.shape[1])
    if int(domain.dim) != d:
        raise ValueError(f"randomFourierVelocity: positions are {d}D but the domain is "
                         f"{int(domain.dim)}D")
    if not (isinstance(rms, (int, float)) and math.isfinite(rms) and rms >= 0):
        raise ValueError(f"randomFourierVelocity: rms={rms!r}; accepted: a finite number >= 0")
    ks = fourierWaveVectors(d, modes)
    g = torch.Generator().manual_seed(int(seed))
    f64 = torch.float64
    lo = domain.min.detach().to(f64).cpu()
    length = (domain.max.detach().to(f64).cpu() - lo)
    x = positions.detach().to(f64).cpu() - lo
    u = torch.zeros(x.shape, dtype=f64)
    energy = 0.0  # the box average of |u|^2
    for k in ks:
        kv = torch.tensor(k, dtype=f64)
        size = float(kv.norm())
        wave = 2.0 * math.pi * kv / length  # the physical wave vector
        phase = x @ wave
        c, s = torch.cos(phase), torch.sin(phase)
        if d == 2:
            a, b = (torch.randn(2, generator=g, dtype=f64) / size**2).unbind()
            # psi = a cos + b sin; grad psi = (-a sin + b cos) wave; u = (psi_y, -psi_x)
            dpsi = -a * s + b * c
            u[:, 0] += dpsi * wave[1]
            u[:, 1] -= dpsi * wave[0]
            energy += 0.5 * float(a * a + b * b) * float(wave @ wave)
        else:
            a = torch.randn(3, generator=g, dtype=f64) / size**2
            b = torch.randn(3, generator=g, dtype=f64) / size**2
            # A = a cos + b sin; curl A = wave x (b cos - a sin)
            amp = c[:, None] * b[None, :] - s[:, None] * a[None, :]
            u += torch.linalg.cross(wave.expand_as(amp), amp, dim=1)
            ca, cb = torch.linalg.cross(wave, a), torch.linalg.cross(wave, b)
            energy += 0.5 * float(ca @ ca + cb @ cb)
    scale = rms / math.sqrt(energy) if energy > 0 else 0.0
    return (u * scale).to(dtype=positions.dtype, device=positions.device)
