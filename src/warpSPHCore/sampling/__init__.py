"""Test-data helpers (`testing.md` §14): `sampleDensestLattice`, `generateNeighborTestData`."""

from .lattice import generateNeighborTestData, sampleDensestLattice

__all__ = ["sampleDensestLattice", "generateNeighborTestData"]
