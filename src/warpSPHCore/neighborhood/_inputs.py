"""Host-side validation and normalisation of neighbour-search inputs.

Only host-known facts are inspected (types, shapes, dtypes, devices, Python values), so
nothing here synchronises with the device. Value checks (finite positions, positive supports,
extents, h < L/2) go through the search's single readback (`flags.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..dataTypes.domain import periodicityTensor
from ..enumTypes import HashMapLengthMode, SupportScheme
from ..util.precision import FLOAT_DTYPES

__all__ = ["SearchInputs", "prepareInputs", "modeUint", "lengthForMode", "particleTensors",
           "domainTensors", "checkHashMapLength"]


@dataclass
class SearchInputs:
    """Validated, detached inputs of one search. ``aliased``: the reference set is the query
    set (the same tensor objects)."""

    qPos: torch.Tensor
    rPos: torch.Tensor
    qSup: torch.Tensor
    rSup: torch.Tensor
    periodic: torch.Tensor
    dMin: torch.Tensor
    dMax: torch.Tensor
    dtype: torch.dtype
    device: torch.device
    d: int
    aliased: bool
    #: int32 ``[N_q]`` / ``[N_r]`` scene indices, or None (one scene; see `neighborhood.scenes`)
    qScenes: torch.Tensor | None = None
    rScenes: torch.Tensor | None = None

    @property
    def numQueries(self) -> int:
        return int(self.qPos.shape[0])

    @property
    def numReferences(self) -> int:
        return int(self.rPos.shape[0])


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"tensor of shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"
    return type(t).__name__


def particleTensors(where: str, name: str, particles):
    """(positions, supports) of an attribute bag (ParticleState or look-alike)."""
    if particles is None:
        raise TypeError(f"{where}: {name} is required (an object with .positions and .supports)")
    missing = [a for a in ("positions", "supports") if not hasattr(particles, a)]
    if missing:
        raise TypeError(f"{where}: {name} ({type(particles).__name__}) has no attribute "
                        f"{', '.join(missing)}; accepted: an object with .positions [N, d] and "
                        ".supports [N] (e.g. ParticleState)")
    return particles.positions, particles.supports


def domainTensors(where: str, domain):
    """(min, max, periodic) of a DomainDescription-like attribute bag or a (min, max) pair."""
    if isinstance(domain, (tuple, list)) and len(domain) == 2:
        return domain[0], domain[1], None
    missing = [a for a in ("min", "max") if not hasattr(domain, a)]
    if domain is None or missing:
        raise TypeError(f"{where}: domain ({type(domain).__name__}) has no attribute "
                        f"{', '.join(missing) or 'min, max'}; accepted: a DomainDescription (or "
                        "an object with .min [d], .max [d], .periodic) or a (min, max) pair")
    return domain.min, domain.max, getattr(domain, "periodic", None)


def modeUint(where: str, mode) -> int:
    """Integer value (11-16) of a `SupportScheme` member or its integer value."""
    if isinstance(mode, SupportScheme):
        return int(mode.value)
    if isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return int(SupportScheme(mode).value)
        except ValueError:
            pass
    raise ValueError(f"{where}: mode={mode!r} is not a SupportScheme; accepted: "
                     + ", ".join(f"SupportScheme.{m.name} ({m.value})" for m in SupportScheme))


def checkHashMapLength(where: str, length) -> int:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"{where}: hashMapLength={length!r}; accepted: a Python int >= 1")
    if length > 2**31 - 1:
        raise ValueError(f"{where}: hashMapLength={length}; accepted: at most 2^31 - 1")
    return length


def lengthForMode(where: str, lengthMode, fixedLength, numReferences: int) -> int:
    """Hash-table length L for a `HashMapLengthMode` (host value from shapes: no sync)."""
    from .hashLength import getNextPrime

    try:
        lengthMode = HashMapLengthMode(lengthMode)
    except (ValueError, TypeError):
        raise ValueError(f"{where}: hashMapLengthMode={lengthMode!r}; accepted: "
                         + ", ".join(f"HashMapLengthMode.{m.name}" for m in HashMapLengthMode)
                         ) from None
    if lengthMode == HashMapLengthMode.Fixed:
        return checkHashMapLength(where, fixedLength)
    if lengthMode == HashMapLengthMode.NumberOfParticles:
        return numReferences + 1 if numReferences % 2 == 0 else numReferences
    return getNextPrime(numReferences)


def _periodicity(where: str, periodic, d: int, device) -> torch.Tensor:
    """bool ``[d]`` periodicity on `device`. Python lists/bools are written with device
    fills (a host->device copy of a list would synchronise on CUDA)."""
    if isinstance(periodic, bool):
        periodic = [periodic] * d
    if isinstance(periodic, (list, tuple)):
        if len(periodic) != d or not all(isinstance(p, (bool, int)) for p in periodic):
            raise ValueError(f"{where}: periodic={periodic!r}; accepted: {d} bools")
        mask = torch.zeros(d, dtype=torch.bool, device=device)
        for k, p in enumerate(periodic):
            if p:
                mask[k] = True
        return mask
    return periodicityTensor(where, periodic, d, device)


def prepareInputs(where: str, qPos, rPos, qSup, rSup, periodicity, dMin, dMax) -> SearchInputs:
    """Validate shapes, dtypes and devices; return detached tensors (aliasing preserved)."""
    named = (("queryPositions", qPos), ("referencePositions", rPos), ("querySupports", qSup),
             ("referenceSupports", rSup), ("domain min", dMin), ("domain max", dMax))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor, found {_describe(t)}")
    dtype = qPos.dtype
    for name, t in named:
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{where}: {name} has dtype {t.dtype}; accepted: torch.float32 or "
                            "torch.float64")
    mixed = [(n, t.dtype) for n, t in named if t.dtype != dtype]
    if mixed:
        listing = ", ".join(f"{n}={d}" for n, d in [("queryPositions", dtype), *mixed])
        raise TypeError(f"{where}: all floating-point tensors of one call must share a dtype; "
                        f"found {listing}")
    if qPos.dim() != 2 or qPos.shape[1] not in (1, 2, 3):
        raise ValueError(f"{where}: queryPositions has shape {tuple(qPos.shape)}; accepted: "
                         "[N_q, d] with d in {1, 2, 3}")
    d = int(qPos.shape[1])
    nq = int(qPos.shape[0])
    if rPos.dim() != 2 or rPos.shape[1] != d:
        raise ValueError(f"{where}: referencePositions has shape {tuple(rPos.shape)}; accepted: "
                         f"[N_r, {d}] (d from queryPositions)")
    nr = int(rPos.shape[0])
    if tuple(qSup.shape) != (nq,):
        raise ValueError(f"{where}: querySupports has shape {tuple(qSup.shape)}; accepted: "
                         f"[N_q] = [{nq}]")
    if tuple(rSup.shape) != (nr,):
        raise ValueError(f"{where}: referenceSupports has shape {tuple(rSup.shape)}; accepted: "
                         f"[N_r] = [{nr}]")
    for name, t in (("domain min", dMin), ("domain max", dMax)):
        if tuple(t.shape) != (d,):
            raise ValueError(f"{where}: {name} has shape {tuple(t.shape)}; accepted: [d] = [{d}]")
    device = qPos.device
    for name, t in named[1:]:
        if t.device != device:
            raise ValueError(f"{where}: {name} is on {t.device}; every tensor of the call must "
                             f"be on {device} (the device of queryPositions)")
    periodic = _periodicity(where, periodicity, d, device)
    aliased = (rPos is qPos) and (rSup is qSup)
    qp = qPos.detach()
    qs = qSup.detach()
    return SearchInputs(
        qPos=qp,
        rPos=qp if rPos is qPos else rPos.detach(),
        qSup=qs,
        rSup=qs if rSup is qSup else rSup.detach(),
        periodic=periodic,
        dMin=dMin.detach(),
        dMax=dMax.detach(),
        dtype=dtype,
        device=device,
        d=d,
        aliased=aliased,
    )
