"""The normalisation statistics of ``metadata.json``, by LagrangeBench's convention.

Velocities and accelerations are those of the stored frames, in position units per frame
(not per unit time): v_t = x_{t+1} - x_t with the minimum-image correction on the periodic
axes (a particle that crossed a periodic face moved by less than half the box), a_t =
v_{t+1} - v_t. Only fluid particles (type 0) count. Every trajectory weighs the same: the mean
is the average of the per-trajectory means over (frames, particles), the standard deviation
the square root of the average of the per-trajectory mean squared deviations from that mean.
A standard deviation below 1e-7 is written as 1 (a component that never moves). All in
float64, per component (``[d]``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["periodicDifference", "frameVelocities", "velocityStatistics"]

FLUID = 0
TINY_STD = 1e-7


def periodicDifference(a, b, bounds, periodic):
    """``a - b`` with the minimum-image correction on the periodic axes.

    Args:
        a: ``[..., d]`` positions.
        b: ``[..., d]`` positions.
        bounds: ``[d, 2]`` (lower, upper) of the box.
        periodic: ``[d]`` bools.

    Returns:
        ``[..., d]`` float64 differences, each periodic component in [-L/2, L/2].
    """
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    box = np.asarray(bounds, dtype=np.float64)
    extent = box[:, 1] - box[:, 0]
    wrap = np.asarray(periodic, dtype=bool)
    return np.where(wrap, d - extent * np.round(d / extent), d)


def frameVelocities(positions, bounds, periodic):
    """Per-frame velocities and accelerations of one trajectory (module docstring).

    Args:
        positions: ``[T, N, d]``.
        bounds: ``[d, 2]``.
        periodic: ``[d]`` bools.

    Returns:
        ``(velocities [T - 1, N, d], accelerations [T - 2, N, d])``, float64.
    """
    x = np.asarray(positions)
    v = periodicDifference(x[1:], x[:-1], bounds, periodic)
    return v, v[1:] - v[:-1]


def velocityStatistics(trajectories: Iterable, bounds, periodic) -> dict:
    """``vel_mean``, ``vel_std``, ``acc_mean``, ``acc_std`` of trajectories (module
    docstring), in one pass.

    Args:
        trajectories: iterable of ``(positions [T, N, d], particleType [N])``; trajectories
            shorter than 3 frames have no acceleration and are skipped.
        bounds: ``[d, 2]``.
        periodic: ``[d]`` bools.

    Returns:
        Dict of the four statistics, each a list of d floats.

    Raises:
        ValueError: no trajectory with 3 frames and a fluid particle.
    """
    moments = {"vel": [], "acc": []}
    for positions, types in trajectories:
        fluid = np.asarray(types) == FLUID
        x = np.asarray(positions)[:, fluid]
        if x.shape[0] < 3 or x.shape[1] == 0:
            continue
        for name, q in zip(("vel", "acc"), frameVelocities(x, bounds, periodic)):
            mean = q.mean(axis=(0, 1))
            moments[name].append((mean, ((q - mean) ** 2).mean(axis=(0, 1))))
    if not moments["vel"]:
        raise ValueError("velocityStatistics: no trajectory with at least 3 frames and a fluid "
                         "particle; accepted: position [T >= 3, N, d] with type-0 rows")
    out = {}
    for name, rows in moments.items():
        means = np.stack([m for m, _ in rows])
        mean = means.mean(axis=0)
        # E_k[(q - mean)^2] = s_k + (m_k - mean)^2, averaged over the trajectories k
        var = np.stack([s for _, s in rows]).mean(axis=0) + ((means - mean) ** 2).mean(axis=0)
        std = np.sqrt(var)
        out[f"{name}_mean"] = mean.tolist()
        out[f"{name}_std"] = np.where(std < TINY_STD, 1.0, std).tolist()
    return out
