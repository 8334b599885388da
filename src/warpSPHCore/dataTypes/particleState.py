"""Particle populations: `ParticleState` and its forward-mode twin `ParticleTangentState`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._fields import checkFields

__all__ = ["ParticleState", "ParticleTangentState"]


@dataclass
class ParticleState:
    """One particle population.

    Args:
        positions: ``[N, d]`` float32/float64, d in {1, 2, 3}; may lie outside the domain.
        supports: ``[N]`` support radius h > 0 (the compact-support radius, not a smoothing
            length).
        masses: ``[N]``.
        kinds: ``[N]`` int32 codes of `ParticleType` (0 fluid, 1 boundary, 2 ghost, 3 other);
            required (no placeholder is substituted: a missing argument is a TypeError).
        densities: ``[N]`` or None; read only where a formula needs rho.
        scenes: ``[N]`` int32 scene index, or None (one scene). Particles of different scenes
            never interact: the neighbour search pairs only particles with equal index, so
            B independent simulations run as one particle set (docs/scenes.md).

    All float tensors share one dtype and device. Non-differentiable: kinds, scenes.
    """

    positions: torch.Tensor
    supports: torch.Tensor
    masses: torch.Tensor
    kinds: torch.Tensor
    densities: torch.Tensor | None = None
    scenes: torch.Tensor | None = None

    def __post_init__(self):
        if self.kinds is None:
            raise TypeError("ParticleState: kinds is required (int32 [N] codes of ParticleType: "
                            "0 fluid, 1 boundary, 2 ghost, 3 other); use "
                            "torch.zeros(N, dtype=torch.int32) for an all-fluid population")
        checkFields(
            "ParticleState",
            [
                ("positions", self.positions, ("N", "d"), "float", False),
                ("supports", self.supports, ("N",), "float", False),
                ("masses", self.masses, ("N",), "float", False),
                ("kinds", self.kinds, ("N",), "int32", False),
                ("densities", self.densities, ("N",), "float", True),
                ("scenes", self.scenes, ("N",), "int32", True),
            ],
        )

    @property
    def numParticles(self) -> int:
        return int(self.positions.shape[0])

    @property
    def dim(self) -> int:
        return int(self.positions.shape[1])


@dataclass
class ParticleTangentState:
    """Tangents of a `ParticleState` for forward mode.

    Any field may be None (a zero tangent); present fields have the primal shapes. No kinds.
    """

    positions: torch.Tensor | None = None
    supports: torch.Tensor | None = None
    masses: torch.Tensor | None = None
    densities: torch.Tensor | None = None

    def __post_init__(self):
        checkFields(
            "ParticleTangentState",
            [
                ("positions", self.positions, ("N", "d"), "float", True),
                ("supports", self.supports, ("N",), "float", True),
                ("masses", self.masses, ("N",), "float", True),
                ("densities", self.densities, ("N",), "float", True),
            ],
        )
