"""Shared pieces of the `warpsph demo` parts: particle sets, plotting setup, timing.

Every part is a function ``run(out: Path, size: str, device, quiet: bool) -> dict`` that
writes its figures into `out` and returns a JSON-serialisable summary, whose ``"report"``
entry is the Markdown section the report embeds and ``"table"`` a list of
``(quantity, value)`` rows for the printed summary.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

import numpy as np
import torch

from ..dataTypes.domain import DomainDescription
from ..dataTypes.particleState import ParticleState

__all__ = ["jitteredLattice", "domain2d", "pyplot", "timer", "SIZES"]

#: the three sizes of every part: "tiny" for the tests, "small" for a quick look, "default"
#: for `make demo` (every part in well under two minutes on two CPU cores, warm cache)
SIZES = ("tiny", "small", "default")


def domain2d(device, dtype, periodic=True, lo=-1.0, hi=1.0) -> DomainDescription:
    """The square [lo, hi]^2, periodic on both axes or on none."""
    return DomainDescription(torch.full((2,), lo, dtype=dtype, device=device),
                             torch.full((2,), hi, dtype=dtype, device=device),
                             [periodic, periodic])


def jitteredLattice(n, device, dtype, jitter=0.2, hOverDx=2.5, seed=0, lo=-1.0, hi=1.0):
    """``n x n`` particles on a cell-centred lattice of [lo, hi]^2 moved by a uniform jitter of
    ``jitter * dx`` in each coordinate, unit density (masses dx^2), supports ``hOverDx * dx``.

    Returns:
        ``(ParticleState, dx)`` with float `dtype` tensors on `device` and kinds 0.
    """
    dx = (hi - lo) / n
    g = (np.arange(n) + 0.5) * dx + lo
    X, Y = np.meshgrid(g, g, indexing="xy")
    pos = np.stack([X.ravel(), Y.ravel()], axis=1)
    rng = np.random.default_rng(seed)
    pos = pos + rng.uniform(-0.5, 0.5, pos.shape) * jitter * dx
    N = pos.shape[0]
    t = dict(dtype=dtype, device=device)
    p = ParticleState(torch.tensor(pos, **t), torch.full((N,), hOverDx * dx, **t),
                      torch.full((N,), dx * dx, **t),
                      torch.zeros(N, dtype=torch.int32, device=device))
    return p, dx


def pyplot():
    """matplotlib's pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def timer(store: dict, key: str):
    """Adds the wall time of the block (seconds) to ``store[key]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        store[key] = store.get(key, 0.0) + time.perf_counter() - t0


def fitOrder(h, err):
    """Least-squares slope of log(err) against log(h): the observed convergence order."""
    h = np.log(np.asarray(h, dtype=np.float64))
    e = np.log(np.maximum(np.asarray(err, dtype=np.float64), 1e-300))
    A = np.stack([h, np.ones_like(h)], axis=1)
    slope, _ = np.linalg.lstsq(A, e, rcond=None)[0]
    return float(slope)


def fmt(x, digits=3):
    """A number for the report: scientific for small or large magnitudes."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return str(x)
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    a = abs(x)
    if a != 0 and (a < 1e-2 or a >= 1e4):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"
