"""`LatticeSample`: a host-side particle lattice from `sampling.sampleDensestLattice`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LatticeSample"]


@dataclass
class LatticeSample:
    """A (possibly jittered) densest lattice in an axis-aligned box, float64 NumPy.

    Args:
        positions: ``[N, d]`` float64 particle positions, inside ``[boxMin, boxMax)``.
        boxMin: ``[d]`` float64 lower box corner.
        boxMax: ``[d]`` float64 upper box corner.
        nearestNeighborDistance: nearest-neighbour distance of the unjittered lattice (the
            same under the periodic minimum image, since the box is a periodic supercell).
        numParticles: N.

    Arrays are converted to float64 and checked for consistent shapes on construction.
    """

    positions: np.ndarray
    boxMin: np.ndarray
    boxMax: np.ndarray
    nearestNeighborDistance: float
    numParticles: int

    def __post_init__(self):
        self.positions = np.asarray(self.positions, dtype=np.float64)
        self.boxMin = np.asarray(self.boxMin, dtype=np.float64).reshape(-1)
        self.boxMax = np.asarray(self.boxMax, dtype=np.float64).reshape(-1)
        if self.positions.ndim != 2 or self.positions.shape[1] not in (1, 2, 3):
            raise ValueError(f"LatticeSample: positions has shape {self.positions.shape}; "
                             "accepted: [N, d] with d in {1, 2, 3}")
        d = self.positions.shape[1]
        for name in ("boxMin", "boxMax"):
            if getattr(self, name).shape != (d,):
                raise ValueError(f"LatticeSample: {name} has shape {getattr(self, name).shape}; "
                                 f"accepted: [{d}]")
        if int(self.numParticles) != self.positions.shape[0]:
            raise ValueError(f"LatticeSample: numParticles={self.numParticles} but positions "
                             f"has {self.positions.shape[0]} rows")
        self.numParticles = int(self.numParticles)
        self.nearestNeighborDistance = float(self.nearestNeighborDistance)

    @property
    def dim(self) -> int:
        """Spatial dimension d."""
        return self.positions.shape[1]
