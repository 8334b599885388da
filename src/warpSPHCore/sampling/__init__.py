"""Test-data helpers: `sampleDensestLattice`, `generateNeighborTestData`."""

from .lattice import generateNeighborTestData, sampleDensestLattice

__all__ = ["sampleDensestLattice", "generateNeighborTestData"]
