"""Deferred, sync-free error reports of the neighbour traversals and of user-built lists.

A kernel that meets a neighbour index outside the reference set (or a CSR row range outside
the edge list, or a grid slot outside the sorted references) skips the entry, so it never
reads out of bounds, and records it in a small per-device int64 tensor, the *error buffer*.
The validation of an `AdjacencyList` built from user tensors writes its verdict into the same
buffer with device-side torch operations. Nothing here reads device memory on the hot path:
the buffer travels inside the readbacks the library makes anyway (the neighbour search and
the dual-tensor liveness test, one transfer each) and is read on demand by `checkErrors()`.
`setEagerErrorChecks(True)` (or ``WARPSPHCORE_EAGER_CHECKS=1``) checks after every launch
and construction instead: one readback each, for debugging.

Layout of the buffer (int64 ``[ERROR_SLOTS]``)::

    0 count   how many entries were flagged since the last report (every launch that meets
              a bad entry counts it again, the backward replay included)
    1 pos     the first flagged position: the edge (CSR), the slot (grid) or the row; -1
              while nothing is recorded (the slot kernels claim with a compare-and-swap)
    2 value   the offending value (the neighbour index, the row start, ...)
    3 row     the query row (or a second value)
    4 site    who flagged it: an index into the registry of `siteId`
    5 kind    one of the KIND_* codes below
    6 limit   the bound it broke (N_r, E, ...)
    7 aux     a further value of the kind (a row length, ...)

The first recorded error is reported; the count says how many more were flagged.
"""

from __future__ import annotations

import os
import threading

import torch
import warp as wp

from .warpContext import ensureWarp

__all__ = [
    "ERROR_SLOTS",
    "KIND_NEIGHBOR_INDEX",
    "KIND_ROW_RANGE",
    "KIND_GRID_INDEX",
    "KIND_INVALID_LIST",
    "NeighborListError",
    "siteId",
    "siteName",
    "errorBuffer",
    "errorArray",
    "pendingErrorBuffer",
    "reportErrorValues",
    "recordError",
    "resetErrors",
    "checkErrors",
    "eagerErrorChecks",
    "setEagerErrorChecks",
]

ERROR_SLOTS = 8
_COUNT, _POS, _VALUE, _ROW, _SITE, _KIND, _LIMIT, _AUX = range(ERROR_SLOTS)

KIND_NEIGHBOR_INDEX = 1  # adjacency j[pos] outside [0, N_r)
KIND_ROW_RANGE = 2  # CSR row (edgeOffsets[row], numNeighbors[row]) outside [0, E)
KIND_GRID_INDEX = 3  # grid sortIndex[pos] outside [0, N_r)
KIND_INVALID_LIST = 4  # construction check of a user-built AdjacencyList (row: which check)

# construction checks of a user-built list (slot `row` of KIND_INVALID_LIST)
LIST_J_RANGE = 1
LIST_I_RANGE = 2
LIST_NEGATIVE_COUNT = 3
LIST_FIRST_OFFSET = 4
LIST_OFFSETS_PREFIX = 5
LIST_TOTAL = 6
LIST_ROW_OF_EDGE = 7


class NeighborListError(ValueError):
    """A neighbour structure (CSR list or grid) holds an index outside the particle sets, or
    a user-built `AdjacencyList` is inconsistent. Raised by `checkErrors()`, by the next
    neighbour search or dual-tensor call on the same device, or eagerly under
    `setEagerErrorChecks(True)`."""


# --------------------------------------------------------------------------------------
# Sites: who flagged an error (an int travels through the kernel, the name stays here)
# --------------------------------------------------------------------------------------

_SITES: list[str] = ["an unnamed launch"]
_SITE_IDS: dict[str, int] = {}
_LOCK = threading.Lock()

_OPERATORS = {
    "density": "warpOperation(Density)", "interpolate": "warpOperation(Interpolate)",
    "gradient": "warpOperation(Gradient)", "divergence": "warpOperation(Divergence)",
    "curl": "warpOperation(Curl)", "laplacian": "warpOperation(Laplacian)",
    "covariance": "warpOperation(Covariance)", "densityHVP": "warpOperationHVP(Density)",
    "momentum": "warpOperation(Momentum)",
    "crkVolume": "computeCRKFactors (volumes)", "crkMoments": "computeCRKFactors (moments)",
    "crkDensity": "computeCRKFactors (CRK density)", "omega": "computeOmega",
    "filterPairs": "filterVerletList",
}


def _label(name: str) -> str:
    """A user-facing name for a kernel key: ``gradientJVPKernel`` -> ``warpOperationJVP
    (Gradient) [gradientJVPKernel]``."""
    base = name[:-len("Kernel")] if name.endswith("Kernel") else name
    route = ""
    for suffix, text in (("JVP", "forward mode"), ("VJP", "reverse kernel")):
        if base.endswith(suffix) and base[:-len(suffix)] in _OPERATORS:
            base, route = base[:-len(suffix)], text
    if base in _OPERATORS:
        label = _OPERATORS[base]
        if route == "forward mode" and label.startswith("warpOperation("):
            label = "warpOperationJVP(" + label[len("warpOperation("):]
        elif route:
            label = f"{label}, {route}"
        return f"{label} [kernel {name}]" if name != base else label
    return name


def siteId(name) -> int:
    """The small int that names a launch site inside the kernels (registered on first use).

    Args:
        name: a Warp kernel (its ``key`` is used) or a string such as ``"AdjacencyList"``.
    """
    key = str(getattr(name, "key", name))
    sid = _SITE_IDS.get(key)
    if sid is None:
        with _LOCK:
            sid = _SITE_IDS.get(key)
            if sid is None:
                sid = len(_SITES)
                _SITES.append(_label(key))
                _SITE_IDS[key] = sid
    return sid


def siteName(sid: int) -> str:
    """The user-facing name of site `sid` (see `siteId`).

    Args:
        sid: a site id from `siteId`.
    """
    return _SITES[sid] if 0 <= sid < len(_SITES) else f"site {sid}"


# --------------------------------------------------------------------------------------
# The per-device buffers
# --------------------------------------------------------------------------------------

_BUFFERS: dict[str, torch.Tensor] = {}
_ARRAYS: dict[str, object] = {}


def _key(device) -> str:
    return str(torch.device(device))


def _fresh(device) -> torch.Tensor:
    buf = torch.zeros(ERROR_SLOTS, dtype=torch.int64, device=device)
    buf[_POS] = -1
    return buf


def errorBuffer(device) -> torch.Tensor:
    """The error buffer of `device` (int64 ``[ERROR_SLOTS]``, created on first use; the
    same tensor for the life of the process, so CUDA graphs may capture its address).

    Args:
        device: a torch device or its string.
    """
    key = _key(device)
    buf = _BUFFERS.get(key)
    if buf is None:
        with _LOCK:
            buf = _BUFFERS.get(key)
            if buf is None:
                buf = _BUFFERS[key] = _fresh(key)
    return buf


def errorArray(device):
    """The Warp view of `errorBuffer(device)` that kernels write (cached per device).

    Args:
        device: a torch device, its string, or a Warp device alias (``cpu``, ``cuda:k``).
    """
    key = _key(str(device))
    arr = _ARRAYS.get(key)
    if arr is None:
        ensureWarp()
        arr = _ARRAYS[key] = wp.from_torch(errorBuffer(key), dtype=wp.int64)
    return arr


def pendingErrorBuffer(device) -> torch.Tensor | None:
    """The buffer of `device` if any kernel or list check on it could have written it, else
    None (for the readbacks that carry it along).

    Args:
        device: a torch device or its string.
    """
    return _BUFFERS.get(_key(device))


def resetErrors(device) -> None:
    """Clear the buffer of `device` (device-side fill, no readback).

    Args:
        device: a torch device or its string.
    """
    buf = _BUFFERS.get(_key(device))
    if buf is not None:
        buf.zero_()
        buf[_POS] = -1


def recordError(device, kind, pos, value, row, limit, aux, site) -> None:
    """Record one error from host-side torch operations, without a readback.

    The first recorded error wins, as in the kernels.

    Args:
        device: the device whose buffer records it.
        kind: a ``KIND_*`` code, or a 0-d int64 tensor that is 0 where nothing is wrong (then
            nothing is recorded).
        pos, value, row, limit, aux: the slots of the module docstring, each a 0-d int64
            device tensor or a Python int.
        site: the `siteId` of the recorder.
    """
    buf = errorBuffer(device)
    dev = buf.device

    def t(v):
        return v.to(device=dev, dtype=torch.int64).reshape(()) if isinstance(v, torch.Tensor) \
            else torch.tensor(int(v), dtype=torch.int64, device=dev)

    kindT = t(kind)
    bad = kindT != 0
    first = buf[_POS] == -1
    write = bad & first
    new = torch.stack([t(pos), t(value), t(row), t(site), kindT, t(limit), t(aux)])
    buf[_COUNT] += bad.to(torch.int64)
    buf[_POS:] = torch.where(write, new, buf[_POS:])


# --------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------

_LIST_CHECKS = {
    LIST_J_RANGE: "neighbour index j[{pos}] = {value} is outside the reference set "
                  "[0, numCols = {limit})",
    LIST_I_RANGE: "query index i[{pos}] = {value} is outside the query set "
                  "[0, numRows = {limit})",
    LIST_NEGATIVE_COUNT: "numNeighbors[{pos}] = {value} is negative; accepted: counts >= 0",
    LIST_FIRST_OFFSET: "edgeOffsets[0] = {value}; accepted: 0 (the exclusive prefix sum of "
                       "numNeighbors)",
    LIST_OFFSETS_PREFIX: "edgeOffsets[{pos}] = {value} but edgeOffsets[{prev}] + "
                         "numNeighbors[{prev}] = {limit}; accepted: offsets that are the "
                         "exclusive prefix sum of numNeighbors (monotone, consistent with the "
                         "counts)",
    LIST_TOTAL: "the rows end at edgeOffsets[-1] + numNeighbors[-1] = {value} but the list has "
                "E = len(i) = {limit} edges; accepted: counts that sum to E",
    LIST_ROW_OF_EDGE: "edge {pos} has i[{pos}] = {value} but row {value}'s range "
                      "[edgeOffsets, edgeOffsets + numNeighbors) is [{limit}, {aux}); "
                      "accepted: i[e] = the row whose range holds e (rows contiguous and "
                      "ascending)",
}


def _message(v: list[int]) -> str:
    count, pos, value, row, site, kind, limit, aux = v[:ERROR_SLOTS]
    where = siteName(site)
    more = (f" ({count} flags recorded since the last check; the first is reported)"
            if count > 1 else "")
    if kind == KIND_INVALID_LIST:
        check = row  # for list checks, slot `row` holds the check code
        text = _LIST_CHECKS.get(check, "an unknown check failed (code {row})").format(
            pos=pos, value=value, row=row, limit=limit, aux=aux, prev=pos - 1)
        return (f"AdjacencyList built from user tensors is invalid: {text}{more}. Build it "
                "with radiusSearchCompactHashMap, or fix the tensors (see "
                "docs/troubleshooting.md)")
    if kind == KIND_NEIGHBOR_INDEX:
        text = (f"the neighbour list entry j[{pos}] = {value} (query row {row}) is outside the "
                f"reference set [0, N_r = {limit})")
    elif kind == KIND_ROW_RANGE:
        text = (f"query row {row} has edgeOffsets[{row}] = {value} and numNeighbors[{row}] = "
                f"{aux}, outside the edge list [0, E = {limit})")
    elif kind == KIND_GRID_INDEX:
        text = (f"the grid's sortIndex[{pos}] = {value} (query row {row}) is outside the "
                f"reference set [0, N_r = {limit})")
    else:
        text = f"unknown error kind {kind} (position {pos}, value {value})"
    return (f"{where}: {text}; the kernel skipped it{more}. The neighbour structure was "
            "changed after it was built, or built for other particle sets: rebuild it "
            "(radiusSearchCompactHashMap / buildCompactHashMap) for the sets you pass")


def reportErrorValues(values, device) -> None:
    """Raise `NeighborListError` for read-back buffer `values` (a list of ERROR_SLOTS ints) if
    it records an error; the device's buffer is cleared first, so the error is raised once.

    Args:
        values: the buffer's values as Python ints (from a readback that carried it).
        device: the buffer's device.
    """
    if values[_COUNT] <= 0:
        return
    resetErrors(device)
    raise NeighborListError(_message(list(values)))


def checkErrors(device=None) -> None:
    """Report the errors the kernels and list checks recorded (ONE readback per device).

    Args:
        device: the device to check; None checks every device that has a buffer.

    Raises:
        NeighborListError: naming the operator (or list check), the bad index and the bound.
    """
    keys = [_key(device)] if device is not None else list(_BUFFERS)
    for key in keys:
        buf = _BUFFERS.get(key)
        if buf is not None:
            reportErrorValues(buf.tolist(), key)  # the explicit readback


_EAGER = [os.environ.get("WARPSPHCORE_EAGER_CHECKS", "0") == "1"]


def eagerErrorChecks() -> bool:
    """True when every launch and list construction checks its errors at once."""
    return _EAGER[0]


def setEagerErrorChecks(enabled: bool = True) -> bool:
    """Check errors after every operator launch and user-built list (one readback each; a
    debugging aid). Returns the previous setting. Also ``WARPSPHCORE_EAGER_CHECKS=1``.

    Args:
        enabled: True to check eagerly, False for the deferred default.
    """
    previous = _EAGER[0]
    _EAGER[0] = bool(enabled)
    return previous
