"""`AdjacencyList`: a CSR + COO neighbour list."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import torch

from ..enumTypes import SupportScheme
from ..util import errorFlags as ef
from ..util.precision import FLOAT_DTYPES

__all__ = ["AdjacencyList", "trustedConstruction"]

_TRUSTED = threading.local()


@contextlib.contextmanager
def trustedConstruction():
    """Within this context `AdjacencyList` skips its value checks: for the library's own
    builders (the search, Verlet filtering), whose lists are consistent by construction."""
    previous = getattr(_TRUSTED, "on", False)
    _TRUSTED.on = True
    try:
        yield
    finally:
        _TRUSTED.on = previous


def _first(bad: torch.Tensor) -> torch.Tensor:
    """0-d int64 index of the first True of a 1-d bool tensor (0 when none), on the device."""
    return torch.argmax(bad.to(torch.int32)).to(torch.int64)


def _validateValues(adj) -> None:
    """The value checks of a user-built list, as device-side torch operations whose verdict
    goes into the device's error buffer (`util.errorFlags`, no readback): indices within the
    sets, non-negative counts, offsets the exclusive prefix sum of the counts ending at E, and
    every edge inside the range of its row. The first failing check (in that order) is
    recorded; `checkErrors()` or the next readback raises it."""
    nq, nr, E = adj.numRows, adj.numCols, adj.numEdges
    if nq == 0 and E == 0:
        return
    dev = adj.i.device
    zero = torch.zeros((), dtype=torch.int64, device=dev)

    def c(v) -> torch.Tensor:
        return v.to(torch.int64).reshape(()) if isinstance(v, torch.Tensor) else zero + int(v)

    # (bad, pos, value, check code, limit, aux), each 0-d on the device; with no rows but
    # edges, the I_RANGE check already fails
    checks = []
    with torch.no_grad():
        i, j = adj.i, adj.j
        if E > 0:
            bad = (j < 0) | (j >= nr)
            p = _first(bad)
            checks.append((bad.any(), p, j[p], ef.LIST_J_RANGE, nr, 0))
            bad = (i < 0) | (i >= nq)
            p = _first(bad)
            checks.append((bad.any(), p, i[p], ef.LIST_I_RANGE, nq, 0))
        if nq > 0:
            cnt = adj.numNeighbors.to(torch.int64)
            off = adj.edgeOffsets.to(torch.int64)
            bad = cnt < 0
            p = _first(bad)
            checks.append((bad.any(), p, cnt[p], ef.LIST_NEGATIVE_COUNT, 0, 0))
            checks.append((off[0] != 0, 0, off[0], ef.LIST_FIRST_OFFSET, 0, 0))
            if nq > 1:
                expected = off[:-1] + cnt[:-1]
                bad = off[1:] != expected
                p = _first(bad)
                checks.append((bad.any(), p + 1, off[1:][p], ef.LIST_OFFSETS_PREFIX,
                               expected[p], 0))
            end = off[-1] + cnt[-1]
            checks.append((end != E, nq - 1, end, ef.LIST_TOTAL, E, 0))
            if E > 0:
                row = i.clamp(0, nq - 1)
                start = off[row]
                stop = start + cnt[row]
                e = torch.arange(E, dtype=torch.int64, device=dev)
                bad = (e < start) | (e >= stop)
                p = _first(bad)
                checks.append((bad.any(), p, i[p], ef.LIST_ROW_OF_EDGE, start[p], stop[p]))
        flags = torch.stack([c(b) for b, *_ in checks])
        k = _first(flags != 0)
        pick = [torch.stack([c(chk[n]) for chk in checks])[k] for n in range(1, 6)]
        kind = torch.where(flags.any(), zero + ef.KIND_INVALID_LIST, zero)
        ef.recordError(dev, kind, pick[0], pick[1], pick[2], pick[3], pick[4],
                       ef.siteId("AdjacencyList"))

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
    * ``sceneIndex``: int32 ``[N_q]`` scene index of the queries when the list was built by a
      scene-aware search (particles carrying ``scenes``), else None. Operators on particles
      with scenes accept only such a list (a list built without scenes pairs across them).
    * ``symmetric``: True for a list the library's search built of one particle set against
      itself with a threshold symmetric in (h_i, h_j) (MeanSymmetric and the max schemes), or
      with Gather or Scatter on supports that were all equal: a pair is then in row i
      exactly when it is in row j. Its rows list the references j >= i first, then those
      j < i (`neighborhood.search.partitionRows`). The reverse kernels of the Density and
      the Momentum (and their forward kernels on the CPU) then evaluate a pair of equal
      supports once, for both rows, and where every lower pair of a call is taken so they
      stop a row at its first j < i (docs/design.md). Only the library's own builders set it: a list
      constructed from user tensors (also one copied with ``dataclasses.replace``) is taken
      as unsymmetric, and a list changed in place after the search no longer keeps the
      promise.

    Within a row, pairs come in stencil-offset order, then in sorted order inside each cell
    (ascending original index); a symmetric list's row keeps that order within its two parts.
    The list is non-differentiable.

    Construction checks shapes, dtypes and devices on the host, and, for a list built from
    user tensors, the values on the device without reading them back: ``j`` within
    ``[0, numCols)``, ``i`` within ``[0, numRows)``, counts >= 0, ``edgeOffsets`` the
    exclusive prefix sum of ``numNeighbors`` ending at E, and every edge inside its row's
    range. A failed check is recorded in the device's error buffer and raised as
    `NeighborListError` by ``checkErrors()``, `AdjacencyList.check`, the next neighbour search
    or dual-tensor call, or at once under ``setEagerErrorChecks(True)``. Lists from the
    library's own search are trusted (not re-checked). Kernels also skip and flag any index
    outside the sets at run time, so a list changed in place after construction never
    causes an out-of-bounds read either.
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
    sceneIndex: torch.Tensor | None = None
    symmetric: bool = False

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
        self.symmetric = bool(self.symmetric)
        if not (self.verletScale >= 1.0 and self.verletScale < float("inf")):
            raise ValueError(f"{_OWNER}: verletScale={self.verletScale!r}; accepted: a finite "
                             "float >= 1.0")
        if self.sceneIndex is not None:
            _checkIndex("sceneIndex", self.sceneIndex, torch.int32, nq,
                        f"[numRows] = [{nq}] query scene indices")
        if not getattr(_TRUSTED, "on", False):
            # a user's list is never taken as symmetric (nothing checks it)
            self.symmetric = False
            _validateValues(self)
            if ef.eagerErrorChecks():
                ef.checkErrors(self.i.device)

    def check(self) -> None:
        """Check the list's values now and raise at once (ONE readback): the construction
        checks again (the tensors may have been changed in place since), then everything the
        device's error buffer holds.

        Raises:
            NeighborListError: naming the first inconsistency (field, position, value, bound).
        """
        _validateValues(self)
        ef.checkErrors(self.i.device)

    @property
    def numEdges(self) -> int:
        """E (host-known: the length of ``i``)."""
        return int(self.i.shape[0])

    @property
    def device(self) -> torch.device:
        return self.i.device


#: The fields an operator call reads (validation and state extraction); a call plan's key
#: (`autograd.callPlan`) covers these, not the build-time inputs and hash map kept beside.
AdjacencyList.OPERATOR_FIELDS = ("j", "numNeighbors", "edgeOffsets", "numRows", "numCols",
                                 "symmetric")
