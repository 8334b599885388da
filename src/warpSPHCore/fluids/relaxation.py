"""Particle relaxation (packing): a homogeneous, lattice-free start for a simulation.

A lattice start is the worst case for SPH flows with hyperbolic stagnation points (the
Taylor-Green vortex): the flow strains the lattice into particle lines, and every momentum
form measured in docs/fluids.md then loses its kinetic energy within t = 0.2-0.4. Starting
from a relaxed distribution instead (a documented relaxation step)
removes that failure. `relaxParticles` jitters the positions and moves them with the
background-pressure acceleration of the transport-velocity formulation
(`terms.backgroundPressureAcceleration`, p_b = 1, unit density) under damped pseudo-time
steps until the particles are homogeneously spread: the particle packing of Adami et al.
(2013), used here as a pre-processing step. It is not differentiated (a fixed start).
"""

from __future__ import annotations

import torch

from ..dataTypes.particleState import ParticleState
from ..enumTypes import KernelFunctions, SupportScheme
from ..neighborhood.search import radiusSearchCompactHashMap
from .terms import backgroundPressureAcceleration, numberDensityVolumes

__all__ = ["relaxParticles"]


def relaxParticles(positions, supports, domain, iterations=300, jitter=0.25, damping=0.9,
                   courant=0.25, kinds=None, kernel=KernelFunctions.Wendland2, seed=0):
    """Relax `positions` into a homogeneous distribution (module docstring).

    Args:
        positions: ``[N, d]`` start positions (a lattice), inside the domain.
        supports: ``[N]`` compact supports of the simulation.
        domain: `DomainDescription`. Periodic axes wrap; on the other axes the positions are
            clamped into the box (walls come with their own particles).
        iterations: pseudo-time steps (each one neighbour search).
        jitter: uniform random displacement in units of the particle spacing, applied first
            (breaks the lattice symmetry, under which the acceleration is zero).
        damping: velocity factor per step (0 < damping < 1).
        courant: pseudo-time step in units of spacing / sqrt(p_b / rho), p_b = rho = 1.
        kinds: ``[N]`` int32 kinds (default: all fluid).
        kernel: `KernelFunctions` of the acceleration.
        seed: seed of the jitter (a torch.Generator of its own: the global RNG is untouched).

    Returns:
        ``[N, d]`` relaxed positions (detached).
    """
    if iterations < 0 or not 0.0 < damping < 1.0 or courant <= 0.0 or jitter < 0.0:
        raise ValueError(f"relaxParticles: iterations {iterations}, damping {damping}, "
                         f"courant {courant}, jitter {jitter}; accepted: iterations >= 0, "
                         "0 < damping < 1, courant > 0, jitter >= 0")
    x = positions.detach().clone()
    n, d = x.shape
    kinds = torch.zeros(n, dtype=torch.int32, device=x.device) if kinds is None else kinds
    lo, hi = domain.min.to(x), domain.max.to(x)
    periodic = torch.as_tensor(domain.periodic, device=x.device)
    spacing = float((hi - lo).prod() / n) ** (1.0 / d)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    noise = (torch.rand(x.shape, generator=gen, dtype=torch.float64) - 0.5).to(x)
    x = _inside(x + jitter * spacing * noise, lo, hi, periodic)
    v = torch.zeros_like(x)
    dt = courant * spacing
    with torch.no_grad():
        for _ in range(iterations):
            probe = ParticleState(x, supports, torch.ones_like(supports), kinds)
            adjacency = radiusSearchCompactHashMap(probe, domain, mode=SupportScheme.Gather)
            V = numberDensityVolumes(probe, domain, adjacency, kernel)
            state = ParticleState(x, supports, V, kinds)  # unit density: m = V
            a = backgroundPressureAcceleration(state, domain, adjacency, 1.0, volumes=V,
                                               kernel=kernel)
            v = damping * (v + dt * a)
            x = _inside(x + dt * v, lo, hi, periodic)
    return x


def _inside(x, lo, hi, periodic):
    """Periodic axes wrapped into [lo, hi), the others clamped into [lo, hi]."""
    wrapped = lo + torch.remainder(x - lo, hi - lo)
    return torch.where(periodic, wrapped, torch.minimum(torch.maximum(x, lo), hi))
