"""`AdjacencyList`: a CSR + COO neighbour list (`neighborhood.md` §2.1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..enumTypes import SupportScheme
from ..util.precision import FLOAT_DTYPES

__all__ = ["AdjacencyList"]

_OWNER = "AdjacencyList"


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"
    return repr(t) if isinstance(t, (int, float, bool)) or t is None else type(t).__name__


def _checkIndex(name: str, t, dtype: torch.dtype, length: int | None, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_OWNER}: {name} must be a torch.Tensor ({dtype} {what}), "
                        f"found {_describe(t)}")
    if t.dtype != dtype:
        raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype}; accepted: {dtype} {what}")
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        raise ValueError(f"{_OWNER}: {name} has shape {tuple(t.shape)}; accepted: {what}")


def _checkCount(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise TypeError(f"{_OWNER}: {name} must be a non-negative Python int, found {_describe(n)}")
    return n


@dataclass(slots=True)
class AdjacencyList:
    """Neighbour list in COO and CSR form at once (not CSC).

    Fields (E edges, N_q = ``numRows`` queries, N_r = ``numCols`` references):

    * ``i``: int64 ``[E]`` query index of each edge; rows contiguous and ascending.
    * ``j``: int64 ``[E]`` reference index (original numbering).
    * ``numNeighbors``: int32 ``[N_q]`` row lengths.
    * ``edgeOffsets``: int32 ``[N_q]`` exclusive prefix sum of ``numNeighbors`` (row starts).
    * ``numRows``, ``numCols``: N_q, N_r.
    * ``queryPositions``, ``referencePositions`` (``[N, d]``), ``querySupports``,
      ``referenceSupports`` (``[N]``): the inputs the list was built from, or None. A Verlet
      list stores its build-time positions and supports already multiplied by
      ``verletScale``.
    * ``hashMap``: the `CompactHashMap` used to build it, or None.
    * ``supportMode``: the `SupportScheme` of the acceptance threshold.
    * ``verletScale``: the support multiplier used at build time (1.0 for a plain search).

    Within a row, pairs come in stencil-offset order, then in sorted order inside each cell
    (ascending original index). Construction checks shapes and dtypes only (no tensor value
    is read, so it never synchronises). The list is non-differentiable.
    """

    i: torch.Tensor
    j: torch.Tensor
    numNeighbors: torch.Tensor
    edgeOffsets: torch.Tensor
    numRows: int
    numCols: int
    queryPositions: torch.Tensor | None = None
    referencePositions: torch.Tensor | None = None
    querySupports: torch.Tensor | None = None
    referenceSupports: torch.Tensor | None = None
    hashMap: object | None = None
    supportMode: SupportScheme = SupportScheme.Gather
    verletScale: float = 1.0

    def __post_init__(self):
        nq = _checkCount("numRows", self.numRows)
        _checkCount("numCols", self.numCols)
        _checkIndex("i", self.i, torch.int64, None, "[E] query indices")
        edges = self.i.shape[0]
        _checkIndex("j", self.j, torch.int64, edges,
                    f"[E] reference indices with E = {edges} (the length of i)")
        _checkIndex("numNeighbors", self.numNeighbors, torch.int32, nq,
                    f"[numRows] = [{nq}] row lengths")
        _checkIndex("edgeOffsets", self.edgeOffsets, torch.int32, nq,
                    f"[numRows] = [{nq}] CSR row starts")
        device = self.i.device
        for name in ("j", "numNeighbors", "edgeOffsets"):
            t = getattr(self, name)
            if t.device != device:
                raise ValueError(f"{_OWNER}: {name} is on {t.device} but i is on {device}; "
                                 "all tensors must be on one device")
        dtype = None
        for name, rows, width in (
            ("queryPositions", nq, True),
            ("referencePositions", self.numCols, True),
            ("querySupports", nq, False),
            ("referenceSupports", self.numCols, False),
        ):
            t = getattr(self, name)
            if t is None:
                continue
            what = f"[{rows}, d] positions" if width else f"[{rows}] supports"
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_OWNER}: {name} must be a torch.Tensor ({what}) or None, "
                                f"found {_describe(t)}")
            if t.dtype not in FLOAT_DTYPES:
                raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype}; accepted: "
                                "torch.float32 or torch.float64")
            if dtype is not None and t.dtype != dtype:
                raise TypeError(f"{_OWNER}: {name} has dtype {t.dtype} but the other stored "
                                f"tensors have {dtype}; accepted: one float dtype")
            dtype = t.dtype
            okShape = (t.dim() == 2 and t.shape[1] in (1, 2, 3)) if width else t.dim() == 1
            if not okShape or t.shape[0] != rows:
                raise ValueError(f"{_OWNER}: {name} has shape {tuple(t.shape)}; accepted: {what}")
            if t.device != device:
                raise ValueError(f"{_OWNER}: {name} is on {t.device} but i is on {device}; "
                                 "all tensors must be on one device")
        if not isinstance(self.supportMode, SupportScheme):
            try:
                self.supportMode = SupportScheme(self.supportMode)
            except (ValueError, TypeError):
                raise ValueError(f"{_OWNER}: supportMode={self.supportMode!r}; accepted: a "
                                 "SupportScheme member (11-16)") from None
        if isinstance(self.verletScale, bool) or not isinstance(self.verletScale, (int, float)):
            raise TypeError(f"{_OWNER}: verletScale must be a Python float, found "
                            f"{_describe(self.verletScale)}")
        self.verletScale = float(self.verletScale)
        if not (self.verletScale >= 1.0 and self.verletScale < float("inf")):
            raise ValueError(f"{_OWNER}: verletScale={self.verletScale!r}; accepted: a finite "
                             "float >= 1.0")

    @property
    def numEdges(self) -> int:
        """E (host-known: the length of ``i``)."""
        return int(self.i.shape[0])

    @property
    def device(self) -> torch.device:
        return self.i.device
