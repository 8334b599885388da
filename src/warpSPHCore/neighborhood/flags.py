"""Validity flags of the neighbour search and their single readback.

The flags are computed on the device from the inputs (element-wise ops and reductions, no
sync) and stored in the grid as int32. Bits 0-3 (values 1-8) name the four conditions; the
detail bits above say which set and which axis, so that the error names them without a
second readback:

=====  ==================================================================
bit    meaning
=====  ==================================================================
1      a query or reference position is NaN or +-inf
2      a support is NaN, +-inf or <= 0
4      on a periodic axis k, hMax >= E_k / 2
8      a domain extent is non-finite or <= 0
16/32  non-finite positions in the query / reference set
64/128 invalid supports in the query / reference set
256<<k periodic axis k with hMax >= E_k / 2 (k = 0, 1, 2)
2048<<k degenerate extent on axis k
=====  ==================================================================

`readback` performs THE one device->host transfer of a search: a small int64 tensor holding
the edge total, the flags, and (bit-cast) the grid support and the domain bounds that the
messages quote.
"""

from __future__ import annotations

import struct

import torch

from ..util.errorFlags import ERROR_SLOTS, pendingErrorBuffer, reportErrorValues

__all__ = [
    "NONFINITE_POSITIONS",
    "INVALID_SUPPORTS",
    "PERIODIC_SUPPORT_TOO_LARGE",
    "DEGENERATE_EXTENT",
    "QUERY_NONFINITE",
    "REFERENCE_NONFINITE",
    "QUERY_SUPPORTS",
    "REFERENCE_SUPPORTS",
    "PERIODIC_AXIS",
    "DEGENERATE_AXIS",
    "computeFlags",
    "readback",
    "raiseForFlags",
    "checkGridValidity",
]

NONFINITE_POSITIONS = 1
INVALID_SUPPORTS = 2
PERIODIC_SUPPORT_TOO_LARGE = 4
DEGENERATE_EXTENT = 8
QUERY_NONFINITE = 16
REFERENCE_NONFINITE = 32
QUERY_SUPPORTS = 64
REFERENCE_SUPPORTS = 128
PERIODIC_AXIS = 256  # << axis
DEGENERATE_AXIS = 2048  # << axis


def _any(cond: torch.Tensor) -> torch.Tensor:
    """0-d int64 device tensor: 1 if any element is true (no sync)."""
    return cond.any().to(torch.int64)


def _axisBits(cond: torch.Tensor, bit: int) -> torch.Tensor:
    """Sum over axes k of cond[k] * (bit << k), as a 0-d int64 device tensor."""
    out = None
    for k in range(cond.shape[0]):
        term = cond[k].to(torch.int64) * (bit << k)
        out = term if out is None else out + term
    return out


def computeFlags(qPos, rPos, qSup, rSup, aliased: bool, hMax, extent, periodic) -> torch.Tensor:
    """int32 ``[1]`` device tensor with the bits above (element-wise ops and reductions)."""
    qBadPos = _any(~torch.isfinite(qPos))
    qBadSup = _any(~(torch.isfinite(qSup) & (qSup > 0)))
    if aliased:
        rBadPos, rBadSup = qBadPos, qBadSup
    else:
        rBadPos = _any(~torch.isfinite(rPos))
        rBadSup = _any(~(torch.isfinite(rSup) & (rSup > 0)))
    h = hMax.reshape(())
    periodicAxis = _axisBits(periodic & (h >= extent * 0.5), PERIODIC_AXIS)
    degenerateAxis = _axisBits(~(torch.isfinite(extent) & (extent > 0)), DEGENERATE_AXIS)
    detail = (qBadPos * QUERY_NONFINITE + rBadPos * REFERENCE_NONFINITE
              + qBadSup * QUERY_SUPPORTS + rBadSup * REFERENCE_SUPPORTS
              + periodicAxis + degenerateAxis)
    summary = (((detail & (QUERY_NONFINITE | REFERENCE_NONFINITE)) != 0).to(torch.int64)
               * NONFINITE_POSITIONS
               + ((detail & (QUERY_SUPPORTS | REFERENCE_SUPPORTS)) != 0).to(torch.int64)
               * INVALID_SUPPORTS
               + ((detail & (7 * PERIODIC_AXIS)) != 0).to(torch.int64)
               * PERIODIC_SUPPORT_TOO_LARGE
               + ((detail & (7 * DEGENERATE_AXIS)) != 0).to(torch.int64) * DEGENERATE_EXTENT)
    return (detail + summary).to(torch.int32).reshape(1)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """float tensor -> its float64 bit pattern as int64 (element-wise, no sync)."""
    return t.detach().reshape(-1).to(torch.float64).view(torch.int64)


def _unbits(v: int) -> float:
    return struct.unpack("<d", struct.pack("<q", v))[0]


def readback(total: torch.Tensor, flags: torch.Tensor, hMax, dMin, dMax, extra=None):
    """THE single device->host transfer: returns (E, flags, hMax, [min], [max]) on the host,
    and the value of `extra` (an integer ``[1]`` tensor, or None) as a sixth entry when
    given.

    The device's error buffer (`util.errorFlags`) travels in the same transfer: an index that
    an earlier operator launch skipped raises `NeighborListError` here.

    ``total``: int64 ``[1]``; ``flags``: int32 ``[1]``; ``hMax`` float ``[1]``; bounds ``[d]``.
    """
    parts = [total.reshape(1).to(torch.int64), flags.reshape(1).to(torch.int64),
             _bits(hMax), _bits(dMin), _bits(dMax)]
    if extra is not None:
        parts.append(extra.reshape(1).to(torch.int64))
    errors = pendingErrorBuffer(total.device)
    if errors is not None:  # earlier kernels' skipped indices travel in the same transfer
        parts.append(errors)
    values = torch.cat(parts).tolist()  # the one readback
    if errors is not None:
        reportErrorValues(values[-ERROR_SLOTS:], total.device)
    d = dMin.shape[0]
    result = (values[0], values[1], _unbits(values[2]),
              [_unbits(v) for v in values[3:3 + d]], [_unbits(v) for v in values[3 + d:3 + 2 * d]])
    if extra is not None:
        result = result + (values[3 + 2 * d],)
    return result


def _sets(flags: int, queryBit: int, referenceBit: int, aliased: bool) -> str:
    if aliased:
        return "the particle set (query = reference)"
    both = [n for n, b in (("query", queryBit), ("reference", referenceBit)) if flags & b]
    return " and ".join(both) + (" sets" if len(both) > 1 else " set")


def raiseForFlags(where: str, flags: int, hMax: float, dMin, dMax, aliased: bool = False,
                  modeName: str | None = None) -> None:
    """Raise one ValueError naming every problem recorded in ``flags`` (no-op when 0)."""
    if flags == 0:
        return
    problems = []
    if flags & NONFINITE_POSITIONS:
        problems.append(f"{_sets(flags, QUERY_NONFINITE, REFERENCE_NONFINITE, aliased)} "
                        "contains non-finite (NaN or +-inf) positions")
    if flags & INVALID_SUPPORTS:
        problems.append(f"{_sets(flags, QUERY_SUPPORTS, REFERENCE_SUPPORTS, aliased)} contains "
                        "invalid supports (NaN, +-inf or <= 0); accepted: finite h > 0")
    if flags & DEGENERATE_EXTENT:
        for k in range(len(dMin)):
            if flags & (DEGENERATE_AXIS << k):
                problems.append(f"the domain extent on axis {k} is degenerate (min = {dMin[k]!r}, "
                                f"max = {dMax[k]!r}); accepted: finite bounds with max > min")
    if flags & PERIODIC_SUPPORT_TOO_LARGE:
        mode = f" ({modeName} grid support)" if modeName else ""
        for k in range(len(dMin)):
            if flags & (PERIODIC_AXIS << k):
                extent = dMax[k] - dMin[k]
                problems.append(f"on periodic axis {k} the support hMax = {hMax!r}{mode} is >= "
                                f"half the extent L = {extent!r} (L/2 = {extent / 2!r}); the "
                                "minimum image requires h < L/2")
    if not problems:
        problems.append(f"unknown validity flags {flags:#x}")
    raise ValueError(f"{where}: invalid input: " + "; ".join(problems))


def checkGridValidity(hashMap, where: str = "checkGridValidity") -> None:
    """Read a grid's validity flags (ONE readback) and raise like the search.

    For the opt-in ``WARPSPHCORE_CHECK_GRID=1`` path of operators that build a grid per call.

    Args:
        hashMap: the `CompactHashMap` whose ``validityFlags`` (and ``hMax``, ``qMin``,
            ``qMax``) are read back.
        where: name of the caller, used as the prefix of the error message.

    Raises:
        ValueError: invalid inputs recorded in the flags, as the search raises them.
    """
    zero = torch.zeros(1, dtype=torch.int64, device=hashMap.validityFlags.device)
    _, flags, hMax, dMin, dMax = readback(zero, hashMap.validityFlags, hashMap.hMax,
                                          hashMap.qMin, hashMap.qMax)
    raiseForFlags(where, flags, hMax, dMin, dMax)
