"""Brute-force reference search in torch. Test/reference use only.

Dense O(N M) evaluation with the search's arithmetic: per axis the minimum image of
the operators (wrap both coordinates into [min, max), difference, map into
[-L/2, L/2)), r accumulated in axis order as ``sqrt(dx_0^2 + dx_1^2 + ...)``, accepted iff
``r <= threshold``. It synchronises (``nonzero``); never use it on a hot path.
"""

from __future__ import annotations

import torch

from ..enumTypes import SupportScheme

__all__ = ["radiusNaive", "radiusNaiveFixed", "pairDistances"]

_MODE_NAMES = {
    "gather": SupportScheme.Gather,
    "scatter": SupportScheme.Scatter,
    "meansymmetric": SupportScheme.MeanSymmetric,
    "symmetric": SupportScheme.SuperSymmetric,
    "supersymmetric": SupportScheme.SuperSymmetric,
    "kernelmeansymmetric": SupportScheme.KernelMeanSymmetric,
    "partialsymmetric": SupportScheme.PartialSymmetric,
}


def _mode(mode) -> SupportScheme:
    if isinstance(mode, SupportScheme):
        return mode
    if isinstance(mode, str) and mode.lower() in _MODE_NAMES:
        return _MODE_NAMES[mode.lower()]
    if isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return SupportScheme(mode)
        except ValueError:
            pass
    raise ValueError(f"radiusNaive: mode={mode!r}; accepted: 'gather', 'scatter', "
                     "'meanSymmetric', 'symmetric', 'superSymmetric' or a SupportScheme member")


def _bounds(name, t, d, dtype, device):
    if t is None:
        return None
    t = torch.as_tensor(t, dtype=dtype, device=device).reshape(-1)
    if t.shape[0] != d:
        raise ValueError(f"radiusNaive: {name} has {t.shape[0]} entries; accepted: d = {d}")
    return t


def pairDistances(x: torch.Tensor, y: torch.Tensor, periodic=None, minDomain=None,
                  maxDomain=None) -> torch.Tensor:
    """Dense ``[N, M]`` minimum-image distances (the search's formula, axis order)."""
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1] or x.shape[1] not in (1, 2, 3):
        raise ValueError(f"radiusNaive: x {tuple(x.shape)} and y {tuple(y.shape)}; accepted: "
                         "[N, d] and [M, d] with the same d in {1, 2, 3}")
    d = x.shape[1]
    x = x.detach()
    y = y.detach()
    if periodic is None:
        per = [False] * d
    elif isinstance(periodic, torch.Tensor):
        per = [bool(v) for v in periodic.detach().cpu().reshape(-1).tolist()]
    elif isinstance(periodic, bool):
        per = [periodic] * d
    else:
        per = [bool(v) for v in periodic]
    if len(per) != d:
        raise ValueError(f"radiusNaive: periodic has {len(per)} entries; accepted: d = {d}")
    lo = _bounds("minDomain", minDomain, d, x.dtype, x.device)
    hi = _bounds("maxDomain", maxDomain, d, x.dtype, x.device)
    if any(per) and (lo is None or hi is None):
        raise ValueError("radiusNaive: periodic axes need minDomain and maxDomain")
    r2 = None
    for k in range(d):
        xi = x[:, k].reshape(-1, 1)
        xj = y[:, k].reshape(1, -1)
        if per[k]:
            L = hi[k] - lo[k]
            half = L * 0.5
            pi = xi - L * torch.floor((xi - lo[k]) / L)
            pj = xj - L * torch.floor((xj - lo[k]) / L)
            dk = pi - pj
            dk = (dk + half) - L * torch.floor((dk + half) / L) - half
        else:
            dk = xi - xj
        sq = dk * dk
        r2 = sq if r2 is None else r2 + sq
    return torch.sqrt(r2)


def _pairs(accept: torch.Tensor):
    ii, jj = torch.nonzero(accept, as_tuple=True)  # row-major = lexicographic (ii, jj)
    return ii.to(torch.int64), jj.to(torch.int64)


def radiusNaive(x, y, hx, hy, periodic=None, minDomain=None, maxDomain=None, mode="gather"):
    """Brute-force radius search: every (i, j) with ``r_ij <= threshold``.

    Args:
        x: float ``[N, d]`` first (query) set.
        y: float ``[M, d]`` second (reference) set.
        hx: ``[N]`` supports of ``x``.
        hy: ``[M]`` supports of ``y``.
        periodic: bool per axis (tensor, list or None).
        minDomain: ``[d]`` lower domain bound (required for periodic axes).
        maxDomain: ``[d]`` upper domain bound (required for periodic axes).
        mode: ``'gather'`` (h of the first argument), ``'scatter'`` (h of the second),
            ``'meanSymmetric'`` ((h_i + h_j)/2), ``'symmetric'`` / ``'superSymmetric'``
            (max), or a `SupportScheme` member.

    Returns:
        ``(ii, jj)`` int64, sorted lexicographically by (ii, jj). O(N M) memory; synchronises.
    """
    m = _mode(mode)
    r = pairDistances(x, y, periodic, minDomain, maxDomain)
    hi = hx.detach().reshape(-1, 1)
    hj = hy.detach().reshape(1, -1)
    if m == SupportScheme.Gather:
        thr = hi
    elif m == SupportScheme.Scatter:
        thr = hj
    elif m == SupportScheme.MeanSymmetric:
        thr = (hi + hj) / 2
    else:
        thr = torch.maximum(hi, hj)
    return _pairs(r <= thr)


def radiusNaiveFixed(x, y, h, periodic=None, minDomain=None, maxDomain=None):
    """`radiusNaive` with one scalar support ``h`` (float or 0-d/1-element tensor) for every
    pair. Returns ``(ii, jj)`` int64, lexicographically sorted.

    Args:
        x: float ``[N, d]`` first (query) set.
        y: float ``[M, d]`` second (reference) set.
        h: the common support, a float or a 0-d/1-element tensor.
        periodic: bool per axis (tensor, list or None).
        minDomain: ``[d]`` lower domain bound (required for periodic axes).
        maxDomain: ``[d]`` upper domain bound (required for periodic axes)."""
    r = pairDistances(x, y, periodic, minDomain, maxDomain)
    h = torch.as_tensor(h, dtype=r.dtype, device=r.device).reshape(())
    return _pairs(r <= h)
