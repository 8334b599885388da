"""`AdjacencyList` and `CompactHashMap` construction: shapes and dtypes only."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import AdjacencyList, buildCompactHashMap

from .census import census
from .helpers import domain, randomCloud


def _lists(device):
    i = torch.tensor([0, 0, 1, 2], dtype=torch.int64, device=device)
    j = torch.tensor([0, 1, 1, 2], dtype=torch.int64, device=device)
    n = torch.tensor([2, 1, 1], dtype=torch.int32, device=device)
    o = torch.tensor([0, 2, 3], dtype=torch.int32, device=device)
    return dict(i=i, j=j, numNeighbors=n, edgeOffsets=o, numRows=3, numCols=3)


def test_adjacency_valid(device):
    with census() as c:
        adj = AdjacencyList(**_lists(device))
    assert c.total == 0
    assert adj.numEdges == 4 and adj.supportMode == SupportScheme.Gather and adj.verletScale == 1.0
    assert not hasattr(adj, "__dict__")  # slots
    adj2 = AdjacencyList(**_lists(device), supportMode=13, verletScale=2)
    assert adj2.supportMode is SupportScheme.MeanSymmetric and adj2.verletScale == 2.0


@pytest.mark.parametrize("field,value,exc,match", [
    ("i", torch.tensor([0, 0, 1, 2], dtype=torch.int32), TypeError, "i has dtype torch.int32; accepted: torch.int64"),
    ("j", torch.tensor([0, 1, 1, 2], dtype=torch.int32), TypeError, "j has dtype"),
    ("j", torch.tensor([0, 1, 1], dtype=torch.int64), ValueError, "j has shape"),
    ("numNeighbors", torch.tensor([2, 1, 1], dtype=torch.int64), TypeError, "numNeighbors has dtype torch.int64; accepted: torch.int32"),
    ("numNeighbors", torch.tensor([2, 1], dtype=torch.int32), ValueError, r"numNeighbors has shape \(2,\)"),
    ("edgeOffsets", torch.tensor([0, 2, 3], dtype=torch.int64), TypeError, "edgeOffsets has dtype"),
    ("edgeOffsets", torch.tensor([[0, 2, 3]], dtype=torch.int32), ValueError, "edgeOffsets has shape"),
    ("i", [0, 0, 1, 2], TypeError, "must be a torch.Tensor"),
    ("numRows", 3.0, TypeError, "numRows must be a non-negative Python int"),
    ("numCols", -1, TypeError, "numCols"),
    ("queryPositions", torch.zeros(3, 4), ValueError, "queryPositions has shape"),
    ("queryPositions", torch.zeros(3, 2, dtype=torch.int32), TypeError, "queryPositions has dtype"),
    ("referenceSupports", torch.zeros(2), ValueError, "referenceSupports has shape"),
    ("supportMode", "gather", ValueError, "supportMode"),
    ("verletScale", 0.5, ValueError, "verletScale"),
    ("verletScale", "1.2", TypeError, "verletScale"),
])
def test_adjacency_errors(field, value, exc, match):
    kwargs = _lists("cpu")
    kwargs[field] = value
    with pytest.raises(exc, match=match):
        AdjacencyList(**kwargs)


def test_adjacency_mixed_float_dtypes():
    kwargs = _lists("cpu")
    with pytest.raises(TypeError, match="one float dtype"):
        AdjacencyList(**kwargs, queryPositions=torch.zeros(3, 2), referencePositions=torch.zeros(3, 2, dtype=torch.float64))


def test_compact_hash_map_errors(device, dtype):
    dom = domain(-1.0, 1.0, (True, False), device, dtype)
    pos, h = randomCloud(20, 2, device, dtype, seed=1)
    grid = buildCompactHashMap(pos, pos, h, h, dom.periodic, dom)
    dataclasses.replace(grid)  # a valid copy constructs
    bad = {
        "sortIndex": (grid.sortIndex.to(torch.int32), TypeError, "sortIndex has dtype"),
        "hashTable": (grid.hashTable[:-1], ValueError, "hashTable has shape"),
        "sortedCellTable": (grid.sortedCellTable.to(torch.int32), TypeError, "sortedCellTable has dtype"),
        "numCells": (grid.numCells.to(torch.int64), TypeError, "numCells has dtype"),
        "cellOffsets": (grid.cellOffsets[:4], ValueError, "cellOffsets has shape"),
        "sortedPositions": (grid.sortedPositions[:, :1], ValueError, "sortedPositions has shape"),
        "qMin": (grid.qMin.to(torch.float16), TypeError, "qMin has dtype"),
        "D": (4, ValueError, "D=4"),
        "numOffsets": (8, ValueError, "numOffsets"),
        "searchRadius": (2, ValueError, "searchRadius"),
        "mode_uint": (3, ValueError, "mode_uint"),
        "hashMapLength": (0, ValueError, "hashMapLength"),
        "validityFlags": (grid.validityFlags.to(torch.int64), TypeError, "validityFlags has dtype"),
    }
    for field, (value, exc, match) in bad.items():
        with pytest.raises(exc, match=match):
            dataclasses.replace(grid, **{field: value})
