"""`fluids.relaxParticles`: a jittered lattice relaxes to a homogeneous distribution (the
number density evens out), positions stay in the box, the result is reproducible, and bad
settings are rejected."""

from __future__ import annotations

import pytest
import torch
from fluid_reference import ref

from warpSPHCore import ParticleState, SupportScheme, radiusSearchCompactHashMap
from warpSPHCore.fluids import numberDensityVolumes, relaxParticles


def _lattice(n, periodic):
    """An n x n lattice in the unit square, supports 3 spacings, and its domain."""
    g = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), dim=-1).reshape(-1, 2)
    h = torch.full((n * n,), 3.0 / n, dtype=torch.float64)
    return x, h, ref.makeDomain(2, torch.float64, "cpu", lo=0.0, hi=1.0, periodic=periodic)


def _spread(x, h, dom):
    """Relative standard deviation of the number density sum_j W_ij."""
    p = ParticleState(x, h, torch.ones_like(h), torch.zeros(x.shape[0], dtype=torch.int32))
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.Gather)
    s = 1.0 / numberDensityVolumes(p, dom, adj)
    return float(s.std() / s.mean())


def test_relaxation_evens_out_the_number_density():
    n = 16
    x0, h, dom = _lattice(n, periodic=True)
    jittered = relaxParticles(x0, h, dom, iterations=0, jitter=0.5)
    relaxed = relaxParticles(x0, h, dom, iterations=150, jitter=0.5)
    assert _spread(relaxed, h, dom) < 0.25 * _spread(jittered, h, dom)
    assert float(relaxed.min()) >= 0.0 and float(relaxed.max()) <= 1.0
    # the lattice is left (no symmetric fixed point) and the result is reproducible
    assert float((relaxed - x0).abs().max()) > 0.05 / n
    torch.testing.assert_close(relaxParticles(x0, h, dom, iterations=150, jitter=0.5),
                               relaxed, rtol=0, atol=0)


def test_walls_clamp_and_settings_are_checked():
    x0, h, dom = _lattice(8, periodic=False)
    relaxed = relaxParticles(x0, h, dom, iterations=20, jitter=0.5)
    assert float(relaxed.min()) >= 0.0 and float(relaxed.max()) <= 1.0
    for bad in (dict(damping=1.0), dict(iterations=-1), dict(courant=0.0), dict(jitter=-1)):
        with pytest.raises(ValueError, match="accepted"):
            relaxParticles(x0, h, dom, **bad)
