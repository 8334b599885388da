"""Scenes: B independent particle sets searched in one launch.

A particle set may carry an int32 scene index per particle (`ParticleState.scenes`). Two
particles interact only when their indices are equal; every scene uses the domain's periodic
image. The search keeps scenes apart without a kernel of its own, by placing them apart in a
space the ordinary search already handles:

* d = 1 or 2: the scene index becomes one more coordinate, ``z = scene * S`` on a
  non-periodic axis, with S = 3 max(h) (three supports, so no stencil cell of one scene
  reaches another). Within a scene the added coordinate difference is exactly zero, so the
  accepted pairs are exactly those of a search of each scene on its own (the order inside a
  row follows the larger stencil).
* d = 3 with a non-periodic axis k: scene b is shifted along k by ``b * S_k``, S_k the span
  of all coordinates on k plus 3 max(h). The shift rounds the coordinates, so a pair at
  r = h to the last bit may be decided differently from a separate search (its kernel
  weight is zero there).
* d = 3 periodic on every axis has no free axis to separate scenes: each scene is searched
  on its own (`search.searchEachScene`: the particles grouped by scene with a stable sort,
  one search per scene, the lists merged into query order), exactly the pairs and order of
  separate searches, at the cost of one readback per scene plus two for the scene sizes.

The search itself, its one readback and its validity checks are unchanged; the returned
`AdjacencyList` stores the original positions and supports (a Verlet list measures its
displacement on them) and the query scene index (`AdjacencyList.sceneIndex`), which the
operators require when the particles carry scenes.

All scenes share the domain: one periodic box (flags and extents) for all of them; on
non-periodic axes the bounds only size the binning grid, so scenes may occupy different
regions there.
"""

from __future__ import annotations

import torch

from ._inputs import SearchInputs

__all__ = ["sceneTensors", "embedScenes", "SCENE_SPACING"]

#: Separation of two scenes in units of the largest support.
SCENE_SPACING = 3.0


def _sceneOf(where: str, name: str, particles, n: int, device):
    s = getattr(particles, "scenes", None)
    if s is None:
        return None
    if not isinstance(s, torch.Tensor) or s.dtype != torch.int32 or tuple(s.shape) != (n,):
        what = (f"tensor of shape {tuple(s.shape)}, dtype {s.dtype}" if isinstance(s, torch.Tensor)
                else type(s).__name__)
        raise TypeError(f"{where}: {name}.scenes is a {what}; accepted: int32 [{n}] scene "
                        "indices or None")
    if s.device != device:
        raise ValueError(f"{where}: {name}.scenes is on {s.device}; the positions are on "
                         f"{device}")
    return s.detach()


def sceneTensors(where: str, inp: SearchInputs, queryParticles, referenceParticles=None):
    """Attach the scene indices of the particle sets to `inp` (both sets or neither)."""
    qs = _sceneOf(where, "queryParticles", queryParticles, inp.numQueries, inp.device)
    if referenceParticles is None:
        rs = qs
    else:
        rs = _sceneOf(where, "referenceParticles", referenceParticles, inp.numReferences,
                      inp.device)
    if (qs is None) != (rs is None):
        has = "queryParticles" if qs is not None else "referenceParticles"
        raise ValueError(f"{where}: only {has} carries scene indices; accepted: scenes on both "
                         "sets or on neither")
    inp.qScenes, inp.rScenes = qs, rs
    return inp


def _maxSupport(inp: SearchInputs) -> torch.Tensor:
    parts = [t.amax().reshape(1) for t in (inp.qSup, inp.rSup) if t.shape[0] > 0]
    return torch.cat(parts).amax()


def _sceneRange(inp: SearchInputs):
    qs, rs = inp.qScenes, inp.rScenes
    both = qs if rs is qs else torch.cat([qs, rs])
    return both.amin().to(inp.dtype), both.amax().to(inp.dtype)


def embedScenes(where: str, inp: SearchInputs) -> SearchInputs | None:
    """The scene-separated search inputs of `inp` (module docstring), or None when no axis
    can separate the scenes (3D, periodic on every axis). Device ops only (reading the
    periodic flags back in 3D)."""
    if inp.numQueries == 0 or inp.numReferences == 0:
        return inp
    S = SCENE_SPACING * _maxSupport(inp)
    lo, hi = _sceneRange(inp)
    same = inp.rPos is inp.qPos and inp.rScenes is inp.qScenes
    if inp.d <= 2:
        def lift(pos, scenes):
            return torch.cat([pos, (scenes.to(inp.dtype) * S)[:, None]], dim=1).contiguous()

        qPos = lift(inp.qPos, inp.qScenes)
        rPos = qPos if same else lift(inp.rPos, inp.rScenes)
        dMin = torch.cat([inp.dMin, (lo - 1.0) * S.reshape(1)])
        dMax = torch.cat([inp.dMax, (hi + 1.0) * S.reshape(1)])
        periodic = torch.cat([inp.periodic, torch.zeros(1, dtype=torch.bool,
                                                       device=inp.device)])
        d = inp.d + 1
    else:
        free = [k for k, p in enumerate(inp.periodic.tolist()) if not p]
        if not free:
            return None  # no free axis: the caller searches each scene on its own
        k = free[0]
        coords = inp.qPos[:, k] if same else torch.cat([inp.qPos[:, k], inp.rPos[:, k]])
        cMin, cMax = coords.amin(), coords.amax()
        Sk = (cMax - cMin) + S

        def shift(pos, scenes):
            out = pos.clone()
            out[:, k] = pos[:, k] + (scenes.to(inp.dtype) - lo) * Sk
            return out

        qPos = shift(inp.qPos, inp.qScenes)
        rPos = qPos if same else shift(inp.rPos, inp.rScenes)
        dMin = inp.dMin.clone()
        dMax = inp.dMax.clone()
        dMin[k] = torch.minimum(inp.dMin[k], cMin)
        dMax[k] = torch.maximum(inp.dMax[k], cMax) + (hi - lo) * Sk
        periodic = inp.periodic
        d = inp.d
    aliased = inp.aliased and same
    return SearchInputs(qPos=qPos, rPos=rPos, qSup=inp.qSup, rSup=inp.qSup if aliased else inp.rSup,
                        periodic=periodic, dMin=dMin, dMax=dMax, dtype=inp.dtype,
                        device=inp.device, d=d, aliased=aliased)
