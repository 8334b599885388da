"""`CompactHashMap`: the sync-free compact hash grid (see docs/neighborhood.md)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..util.precision import FLOAT_DTYPES

__all__ = ["CompactHashMap"]

_OWNER = "CompactHashMap"


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"
    return repr(t) if isinstance(t, (int, float, bool)) or t is None else type(t).__name__


@dataclass
class CompactHashMap:
    """Compact hash grid over the reference set (M = N_r particles, L table entries).

    Fields:

    * ``sortedPositions`` float ``[M, d]``: reference positions wrapped on periodic axes
      into [min, max), in sorted (cell) order.
    * ``sortedSupports`` float ``[M]``: reference supports in sorted order.
    * ``sortIndex`` int64 ``[M]``: sorted slot -> original reference index.
    * ``hashTable`` int32 ``[L, 2]``: per hash value (first row in ``sortedCellTable``,
      number of rows with this hash); (-1, 0) when empty.
    * ``sortedCellTable`` int64 ``[M, 3]``: per occupied cell (linear cell index, first
      sorted slot, particle count), grouped by hash; rows at or after
      ``numOccupiedCells`` are padding (-1, 0, 0).
    * ``numOccupiedCells`` int64 ``[1]`` (device).
    * ``qMin``, ``qMax`` float ``[d]``: binning bounds (the domain bounds).
    * ``numCells`` int32 ``[d]``: per-axis cell counts.
    * ``cellSize`` float ``[d]``: ``(qMax - qMin) / numCells`` (informational; kernels
      recompute it).
    * ``hMax`` float ``[1]`` (device): grid support of the build mode.
    * ``mode_uint``: support mode (11-16) used to size the grid; ``D``: dimension;
      ``hashMapLength``: L; ``searchRadius``: 1; ``numOffsets``: 3^D.
    * ``cellOffsets`` int32 ``[numOffsets, 3]``: stencil offsets (first axis slowest),
      zero-padded to 3 columns.
    * ``validityFlags`` int32 ``[1]`` (device): non-finite positions, invalid supports, a
      periodic support >= half the extent and degenerate extents in bits 0-3, plus detail
      bits (see `warpSPHCore.neighborhood.flags`); never read by the build.
    * ``periodicity`` bool ``[d]`` or None: the periodic axes the grid was built with
      (used by the traversal; None means "take it from the domain").

    Construction checks shapes and dtypes only. Building a grid never synchronises.
    """

    sortedPositions: torch.Tensor
    sortedSupports: torch.Tensor
    sortIndex: torch.Tensor
    hashTable: torch.Tensor
    sortedCellTable: torch.Tensor
    numOccupiedCells: torch.Tensor
    qMin: torch.Tensor
    qMax: torch.Tensor
    numCells: torch.Tensor
    cellSize: torch.Tensor
    hMax: torch.Tensor
    mode_uint: int
    D: int
    hashMapLength: int
    searchRadius: int
    numOffsets: int
    cellOffsets: torch.Tensor
    validityFlags: torch.Tensor
    periodicity: torch.Tensor | None = None

    def __post_init__(self):
        for name in ("mode_uint", "D", "hashMapLength", "searchRadius", "numOffsets"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{_OWNER}: {name} must be a Python int, found {_describe(v)}")
        d = self.D
        if d not in (1, 2, 3):
            raise ValueError(f"{_OWNER}: D={d}; accepted: 1, 2 or 3")
        if self.mode_uint not in range(11, 17):
            raise ValueError(f"{_OWNER}: mode_uint={self.mode_uint}; accepted: 11-16 "
                             "(a SupportScheme value)")
        if self.hashMapLength < 1:
            raise ValueError(f"{_OWNER}: hashMapLength={self.hashMapLength}; accepted: >= 1")
        if self.searchRadius != 1:
            raise ValueError(f"{_OWNER}: searchRadius={self.searchRadius}; accepted: 1")
        if self.numOffsets != 3**d:
            raise ValueError(f"{_OWNER}: numOffsets={self.numOffsets}; accepted: 3^D = {3**d}")
        if not isinstance(self.sortIndex, torch.Tensor):
            raise TypeError(f"{_OWNER}: sortIndex must be a torch.Tensor (int64 [M]), found "
                            f"{_describe(self.sortIndex)}")
        m = self.sortIndex.shape[0] if self.sortIndex.dim() >= 1 else -1
        L = self.hashMapLength
        n = self.numOffsets
        fields = [
            ("sortedPositions", self.sortedPositions, "float", (m, d), f"[M, D] = [{m}, {d}]"),
            ("sortedSupports", self.sortedSupports, "float", (m,), f"[M] = [{m}]"),
            ("sortIndex", self.sortIndex, torch.int64, (m,), "[M]"),
            ("hashTable", self.hashTable, torch.int32, (L, 2),
             f"[hashMapLength, 2] = [{L}, 2]"),
            ("sortedCellTable", self.sortedCellTable, torch.int64, (m, 3), f"[M, 3] = [{m}, 3]"),
            ("numOccupiedCells", self.numOccupiedCells, torch.int64, (1,), "[1]"),
            ("qMin", self.qMin, "float", (d,), f"[D] = [{d}]"),
            ("qMax", self.qMax, "float", (d,), f"[D] = [{d}]"),
            ("numCells", self.numCells, torch.int32, (d,), f"[D] = [{d}]"),
            ("cellSize", self.cellSize, "float", (d,), f"[D] = [{d}]"),
            ("hMax", self.hMax, "float", (1,), "[1]"),
            ("cellOffsets", self.cellOffsets, torch.int32, (n, 3),
             f"[numOffsets, 3] = [{n}, 3]"),
            ("validityFlags", self.validityFlags, torch.int32, (1,), "[1]"),
        ]
        if self.periodicity is not None:
            fields.append(("periodicity", self.periodicity, torch.bool, (d,), f"[D] = [{d}]"))
        device = self.sortIndex.device
        floatDtype = None
        for name, t, kind, shape, what in fields:
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_OWNER}: {name} must be a torch.Tensor {what}, found "
                                f"{_describe(t)}")
            if kind == "float":
                if t.dtype not in FLOAT_DTYPES:
                    raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype}; accepted: "
                                    "torch.float32 or torch.float64")
                if floatDtype is not None and t.dtype != floatDtype:
                    raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype} but "
                                    f"sortedPositions has {floatDtype}; accepted: one float dtype")
                floatDtype = t.dtype
            elif t.dtype != kind:
                raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype}; accepted: {kind}")
            if tuple(t.shape) != shape:
                raise ValueError(f"{_OWNER}: {name} has shape {tuple(t.shape)}; accepted: {what}")
            if t.device != device:
                raise ValueError(f"{_OWNER}: {name} is on {t.device} but sortIndex is on "
                                 f"{device}; all tensors must be on one device")

    @property
    def numReferences(self) -> int:
        return int(self.sortIndex.shape[0])

    @property
    def device(self) -> torch.device:
        return self.sortIndex.device


#: The fields an operator call reads (validation and state extraction); a call plan's key
#: (`autograd.callPlan`) covers these.
CompactHashMap.OPERATOR_FIELDS = ("sortIndex", "hashTable", "sortedCellTable", "qMin", "qMax",
                                  "numCells", "hashMapLength", "numOffsets", "cellOffsets")
