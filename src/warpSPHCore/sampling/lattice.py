"""Particle lattices for tests and examples.

* `sampleDensestLattice`: the densest lattice (1D uniform, 2D hexagonal, 3D FCC) with about n
  particles in a box, as a periodic supercell, on the host in float64 NumPy.
* `generateNeighborTestData`: the cell-centred grid on [−1, 1]^d with a uniform support sized
  for a target neighbour count, as torch tensors on a device.
"""

from __future__ import annotations

import itertools
import math
import numbers

import numpy as np
import torch

from ..dataTypes.domain import DomainDescription
from ..dataTypes.latticeSample import LatticeSample
from ..kernels.metadata import volumeToSupport

__all__ = ["sampleDensestLattice", "generateNeighborTestData"]

_SQRT3_2 = math.sqrt(3.0) / 2.0


def _positiveInt(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{owner}: {name}={value!r}; accepted: a positive integer")
    return int(value)


def _checkDim(owner: str, d) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or int(d) not in (1, 2, 3):
        raise ValueError(f"{owner}: d={d!r}; accepted: 1, 2, 3")
    return int(d)


def _box(owner: str, L, box, d: int) -> tuple[np.ndarray, np.ndarray]:
    if box is None:
        if isinstance(L, bool) or not isinstance(L, numbers.Real) or not (
            math.isfinite(float(L)) and float(L) > 0.0
        ):
            raise ValueError(f"{owner}: L={L!r}; accepted: a positive finite box edge "
                             "(or box=(min, max))")
        return np.zeros(d), np.full(d, float(L))
    try:
        lo, hi = box
        lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), (d,)).copy()
        hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), (d,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: box={box!r}; accepted: (min, max) with scalars or "
                         f"length-{d} sequences") from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError(f"{owner}: box={box!r}; accepted: finite corners with max > min on "
                         "every axis")
    return lo, hi


def _hexagonalCounts(n: int, extent: np.ndarray) -> tuple[int, int]:
    """(s_x, s_y) with N = 4 s_x s_y ≈ n and the row spacing closest to √3/2 × the in-row
    spacing. Rows: 2 s_y; particles per row: 2 s_x."""
    ratio = _SQRT3_2 * extent[0] / extent[1]  # ideal s_x / s_y
    syIdeal = math.sqrt(max(n, 4) / (4.0 * ratio))
    best = None
    for sy in range(max(1, math.floor(syIdeal) - 1), math.ceil(syIdeal) + 2):
        sxIdeal = max(n, 4) / (4.0 * sy)
        for sx in range(max(1, math.floor(sxIdeal) - 1), math.ceil(sxIdeal) + 2):
            ax, ay = extent[0] / (2 * sx), extent[1] / (2 * sy)
            cost = abs(4 * sx * sy - n) / n + abs(math.log(ay / (_SQRT3_2 * ax)))
            if best is None or cost < best[0]:
                best = (cost, sx, sy)
    return best[1], best[2]


def _lattice(n: int, d: int, extent: np.ndarray):
    """(cell sizes [d], basis [b, d] in cell units, cells per axis [d]) of the supercell."""
    if d == 1:
        N = max(1, n)
        return extent / N, np.zeros((1, 1)), np.array([N])
    if d == 2:
        sx, sy = _hexagonalCounts(n, extent)
        cells = np.array([2 * sx, sy])  # a cell is one in-row spacing wide and two rows high
        basis = np.array([[0.0, 0.0], [0.5, 0.5]])
        return extent / cells, basis, cells
    p = max(1, round((n / 4.0) ** (1.0 / 3.0)))
    cells = np.array([p, p, p])
    basis = np.array([[0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5], [0.5, 0.5, 0.0]])
    return extent / cells, basis, cells


def _nearestNeighborDistance(cell: np.ndarray, basis: np.ndarray) -> float:
    """Shortest non-zero vector b_k + t ∘ cell of the infinite lattice (t ∈ {−1, 0, 1}^d)."""
    d = cell.size
    best = math.inf
    for t in itertools.product((-1, 0, 1), repeat=d):
        for b in basis:
            v = (b + np.asarray(t, dtype=np.float64)) * cell
            r = float(np.sqrt(np.dot(v, v)))
            if r > 0.0:
                best = min(best, r)
    return best


def sampleDensestLattice(n: int, L: float, d: int, box=None, jitter: float = 0.0,
                         seed=None) -> LatticeSample:
    """The densest lattice with about `n` particles in a box, as a periodic supercell.

    * 1D: N = n uniformly spaced particles, spacing a = extent / N, at min + (i + ½) a.
    * 2D: hexagonal lattice with 2 s_y rows of 2 s_x particles, N = 4 s_x s_y; odd rows are
      shifted by half the in-row spacing. (s_x, s_y) are chosen so that N ≈ n (N ≥ 4) and the
      row spacing is as close as possible to √3/2 × the in-row spacing; the lattice is
      stretched slightly so that it tiles the box periodically.
    * 3D: face-centred cubic, p³ cubic cells of 4 particles, N = 4 p³ with p = round((n/4)^⅓)
      (N ≥ 4).

    The lattice is offset by a quarter cell from `boxMin` and tiles the box exactly, so it is
    consistent with periodic boundaries: its periodic extension is the infinite lattice.

    Args:
        n: target particle count (positive int).
        L: box edge; the box is [0, L]^d. Ignored when `box` is given.
        d: 1, 2 or 3.
        box: optional (min, max), each a scalar or a length-d sequence (max > min).
        jitter: each coordinate is displaced by U(−jitter/2, jitter/2) × the nearest-neighbour
            distance; displaced positions are wrapped back into [min, max) (periodic).
        seed: seed of `numpy.random.default_rng`; required when jitter > 0.

    Returns:
        `LatticeSample` (float64 NumPy); `nearestNeighborDistance` is that of the unjittered
        lattice.
    """
    owner = "sampleDensestLattice"
    n = _positiveInt(owner, "n", n)
    d = _checkDim(owner, d)
    lo, hi = _box(owner, L, box, d)
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not (
        math.isfinite(float(jitter)) and float(jitter) >= 0.0
    ):
        raise ValueError(f"{owner}: jitter={jitter!r}; accepted: a finite number >= 0")
    jitter = float(jitter)
    if jitter > 0.0 and seed is None:
        raise ValueError(f"{owner}: jitter={jitter} requires a seed (seed=None given); "
                         "accepted: an int seed for numpy.random.default_rng")
    extent = hi - lo
    cell, basis, cells = _lattice(n, d, extent)
    grids = np.meshgrid(*[np.arange(c) for c in cells], indexing="ij")
    origins = np.stack([g.ravel() for g in grids], axis=-1).astype(np.float64)  # [C, d]
    frac = (origins[:, None, :] + basis[None, :, :] + 0.25).reshape(-1, d)  # cell units
    positions = lo + frac * cell
    nn = _nearestNeighborDistance(cell, basis)
    if jitter > 0.0:
        rng = np.random.default_rng(seed)
        positions = positions + rng.uniform(-0.5, 0.5, size=positions.shape) * (jitter * nn)
        wrapped = lo + np.mod(positions - lo, extent)
        positions = np.where(wrapped >= hi, wrapped - extent, wrapped)
    return LatticeSample(
        positions=positions,
        boxMin=lo,
        boxMax=hi,
        nearestNeighborDistance=nn,
        numParticles=positions.shape[0],
    )


def generateNeighborTestData(nx: int, targetNumNeighbors, d: int, periodic, device,
                             dtype: torch.dtype = torch.float32):
    """Cell-centred grid on [−1, 1]^d with a uniform support for a target neighbour count.

    * dx = 2 / nx; the coordinates per axis are −1 + (i + ½) dx, i = 0 … nx − 1;
    * positions come from ``torch.meshgrid(..., indexing='xy')`` flattened row-major (x varies
      fastest in 2D), shape [nx^d, d];
    * h = volumeToSupport(dx^d, targetNumNeighbors, d), the same for every particle.

    Args:
        nx: particles per axis (positive int).
        targetNumNeighbors: expected neighbour count inside h (positive number).
        d: 1, 2 or 3.
        periodic: bool, d bools, or a bool tensor [d] (see `DomainDescription`).
        device: torch device of the outputs.
        dtype: torch.float32 (default) or torch.float64.

    Returns:
        (positions [N, d], supports [N], N, DomainDescription([−1]^d, [1]^d, periodic), dx),
        tensors on `device` in `dtype`; N = nx^d and dx are Python numbers. No device readback.
    """
    owner = "generateNeighborTestData"
    nx = _positiveInt(owner, "nx", nx)
    d = _checkDim(owner, d)
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{owner}: dtype={dtype}; accepted: torch.float32, torch.float64")
    if isinstance(targetNumNeighbors, bool) or not isinstance(targetNumNeighbors, numbers.Real) \
            or not (math.isfinite(float(targetNumNeighbors)) and float(targetNumNeighbors) > 0.0):
        raise ValueError(f"{owner}: targetNumNeighbors={targetNumNeighbors!r}; accepted: a "
                         "positive finite number")
    device = torch.device(device)
    dx = 2.0 / nx
    h = volumeToSupport(dx**d, targetNumNeighbors, d)
    axis = ((torch.arange(nx, dtype=torch.float64, device=device) + 0.5) * dx - 1.0).to(dtype)
    if d == 1:
        positions = axis[:, None].contiguous()
    else:
        grids = torch.meshgrid(*([axis] * d), indexing="xy")
        positions = torch.stack([g.reshape(-1) for g in grids], dim=-1).contiguous()
    N = nx**d
    supports = torch.full((N,), h, dtype=dtype, device=device)
    domain = DomainDescription(
        min=torch.full((d,), -1.0, dtype=dtype, device=device),
        max=torch.full((d,), 1.0, dtype=dtype, device=device),
        periodic=periodic,
        dim=d,
    )
    return positions, supports, N, domain, dx
