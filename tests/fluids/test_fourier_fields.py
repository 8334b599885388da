"""`fluids.randomFourierVelocity`: divergence-free (central differences), periodic on the box,
the requested root-mean-square speed (a lattice average of a trigonometric polynomial is
exact), the same field at every resolution, 2D and 3D, and clear errors."""

from __future__ import annotations

import pytest
import torch

from warpSPHCore import DomainDescription
from warpSPHCore.fluids import fourierWaveVectors, randomFourierVelocity

F64 = torch.float64


def _box(d, lo=-0.5, hi=1.5):
    return DomainDescription(torch.full((d,), lo, dtype=F64), torch.full((d,), hi, dtype=F64),
                             [True] * d)


def _lattice(d, n, lo=-0.5, hi=1.5):
    g = lo + (torch.arange(n, dtype=F64) + 0.5) * (hi - lo) / n
    return torch.stack(torch.meshgrid(*([g] * d), indexing="ij"), -1).reshape(-1, d)


@pytest.mark.parametrize("d", [2, 3])
def test_divergence_free_periodic_and_rms(d):
    dom = _box(d)
    x = _lattice(d, 24 if d == 2 else 10)
    u = randomFourierVelocity(x, dom, modes=3 if d == 2 else 2, rms=0.7, seed=5)
    assert u.shape == x.shape and u.dtype == F64
    # the lattice mean of |u|^2 is the box mean (exact for these modes and lattices)
    assert abs(float(u.pow(2).sum(1).mean().sqrt()) - 0.7) < 1e-12
    eps = 1e-6
    div = torch.zeros(x.shape[0], dtype=F64)
    for a in range(d):
        e = torch.zeros(d, dtype=F64)
        e[a] = eps
        up = randomFourierVelocity(x + e, dom, modes=3 if d == 2 else 2, rms=0.7, seed=5)
        um = randomFourierVelocity(x - e, dom, modes=3 if d == 2 else 2, rms=0.7, seed=5)
        div += (up[:, a] - um[:, a]) / (2 * eps)
    assert float(div.abs().max()) < 1e-6 * float(u.abs().max())
    shifted = randomFourierVelocity(x + 2.0, dom, modes=3 if d == 2 else 2, rms=0.7, seed=5)
    assert float((shifted - u).abs().max()) < 1e-12  # periodic on the box (length 2)


def test_same_field_at_every_resolution_and_seeded():
    dom = _box(2)
    coarse, fine = _lattice(2, 8), _lattice(2, 24)
    uc = randomFourierVelocity(coarse, dom, seed=3)
    uf = randomFourierVelocity(fine, dom, seed=3)
    # a coarse lattice point (i + 0.5) / 8 is the fine point 3 i + 1 of the 24-lattice
    idx = torch.tensor([(3 * i + 1) * 24 + 3 * j + 1 for i in range(8) for j in range(8)])
    assert float((uf[idx] - uc).abs().max()) < 1e-13
    other = randomFourierVelocity(coarse, dom, seed=4)
    assert float((other - uc).abs().max()) > 0.1
    assert randomFourierVelocity(coarse.float(), dom, seed=3).dtype == torch.float32


def test_wave_vectors_and_errors():
    ks = fourierWaveVectors(2, 1)
    assert sorted(ks) == [(0, 1), (1, 0)]
    assert len(fourierWaveVectors(3, 1)) == 3
    with pytest.raises(ValueError, match="modes"):
        fourierWaveVectors(2, 0)
    with pytest.raises(ValueError, match="positions has shape"):
        randomFourierVelocity(torch.zeros(4, dtype=F64), _box(2))
    with pytest.raises(ValueError, match="domain is 3D"):
        randomFourierVelocity(torch.zeros(4, 2, dtype=F64), _box(3))
    with pytest.raises(ValueError, match="rms"):
        randomFourierVelocity(torch.zeros(4, 2, dtype=F64), _box(2), rms=-1.0)
