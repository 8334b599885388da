"""Neighbour search: compact hash grid, radius search, Verlet lists, brute-force reference,
and the Warp traversal helpers used inside operator kernels (see docs/neighborhood.md).

Public entry points (exactly one device->host readback per search, zero per grid build):

* `radiusSearchCompactHashMap`, `radiusSearchCompactHashMap_` -> `AdjacencyList`
* `buildCompactHashMap` -> `CompactHashMap`
* `buildVerletList`, `deferVerletChecks`, `filterVerletList`
* `radiusNaive`, `radiusNaiveFixed` (brute force, tests/reference only)
* `getNextPrime`
* `cellOrder`, `reorder`, `inverseOrder` (the spatial sort: `neighborhood.ordering`)

Warp-level helpers for operator kernels live in `warpSPHCore.neighborhood.traversal`
(`getIndexRange`, `gridQueryCell`, `checkOffset`, `checkOffsetPosition`, the structs
`adjacencyData`, `gridData_f32`/`gridData_f64` and `makeAdjacencyData`/`makeGridData`).
"""

from ..dataTypes.adjacency import AdjacencyList
from ..dataTypes.compactHashMap import CompactHashMap
from .bruteForce import radiusNaive, radiusNaiveFixed
from .flags import checkGridValidity
from .grid import buildCompactHashMap
from .hashLength import getNextPrime
from .ordering import cellOrder, inverseOrder, reorder
from .search import radiusSearchCompactHashMap, radiusSearchCompactHashMap_
from .traversal import (
    adjacencyData,
    checkOffset,
    checkOffsetPosition,
    getIndexRange,
    gridData_f32,
    gridData_f64,
    gridDataType,
    gridQueryCell,
    makeAdjacencyData,
    makeGridData,
)
from .verlet import buildVerletList, deferVerletChecks, filterVerletList

__all__ = [
    "AdjacencyList",
    "CompactHashMap",
    "radiusSearchCompactHashMap",
    "radiusSearchCompactHashMap_",
    "buildCompactHashMap",
    "buildVerletList",
    "deferVerletChecks",
    "filterVerletList",
    "radiusNaive",
    "radiusNaiveFixed",
    "getNextPrime",
    "cellOrder",
    "reorder",
    "inverseOrder",
    "checkGridValidity",
    "adjacencyData",
    "gridData_f32",
    "gridData_f64",
    "gridDataType",
    "makeAdjacencyData",
    "makeGridData",
    "getIndexRange",
    "gridQueryCell",
    "checkOffset",
    "checkOffsetPosition",
]
