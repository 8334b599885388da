"""The brute-force reference against an independent plain-Python reference."""

from __future__ import annotations

import math

import pytest
import torch

from warpSPHCore.enumTypes import SupportScheme
from warpSPHCore.neighborhood import radiusNaive, radiusNaiveFixed


def _reference(x, y, hx, hy, periodic, lo, hi, rule):
    """Plain Python float64: per-axis nearest image by rounding, r <= threshold."""
    pairs = []
    for i, xi in enumerate(x):
        for j, yj in enumerate(y):
            r2 = 0.0
            for k in range(len(xi)):
                dk = xi[k] - yj[k]
                if periodic[k]:
                    L = hi[k] - lo[k]
                    dk -= L * round(dk / L)
                r2 += dk * dk
            if math.sqrt(r2) <= rule(hx[i], hy[j]):
                pairs.append((i, j))
    return pairs


RULES = {
    "gather": lambda a, b: a,
    "scatter": lambda a, b: b,
    "meanSymmetric": lambda a, b: (a + b) / 2,
    "symmetric": max,
    "superSymmetric": max,
}


@pytest.mark.parametrize("mode", list(RULES))
def test_radius_naive_matches_python_reference(mode):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(25, 2, generator=gen, dtype=torch.float64) * 4 - 2  # some outside the box
    y = torch.rand(31, 2, generator=gen, dtype=torch.float64) * 2 - 1
    hx = 0.2 + 0.2 * torch.rand(25, generator=gen, dtype=torch.float64)
    hy = 0.2 + 0.2 * torch.rand(31, generator=gen, dtype=torch.float64)
    periodic = [True, False]
    lo, hi = [-1.0, -1.0], [1.0, 1.0]
    ii, jj = radiusNaive(x, y, hx, hy, periodic, torch.tensor(lo, dtype=torch.float64),
                         torch.tensor(hi, dtype=torch.float64), mode=mode)
    assert ii.dtype == torch.int64 and jj.dtype == torch.int64
    got = list(zip(ii.tolist(), jj.tolist()))
    assert got == sorted(got)  # lexicographic (ii, jj)
    assert got == _reference(x.tolist(), y.tolist(), hx.tolist(), hy.tolist(), periodic, lo, hi,
                             RULES[mode])


def test_mode_aliases_and_enum():
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(20, 3, generator=gen)
    h = 0.3 + 0.2 * torch.rand(20, generator=gen)
    hy = 0.3 + 0.2 * torch.rand(20, generator=gen)
    a = radiusNaive(x, x, h, hy, mode="superSymmetric")
    for m in ("symmetric", SupportScheme.KernelMeanSymmetric, SupportScheme.PartialSymmetric,
              SupportScheme.SuperSymmetric, 15):
        b = radiusNaive(x, x, h, hy, mode=m)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="mode"):
        radiusNaive(x, x, h, h, mode="nearest")


def test_radius_naive_fixed():
    x = torch.tensor([[0.0], [0.5], [1.5], [0.75]], dtype=torch.float64)
    ii, jj = radiusNaiveFixed(x, x, 0.5)
    assert list(zip(ii.tolist(), jj.tolist())) == [
        (0, 0), (0, 1), (1, 0), (1, 1), (1, 3), (2, 2), (3, 1), (3, 3)]
    # periodic: 1.5 is the image of -0.5 in [-1, 1)
    ii, jj = radiusNaiveFixed(x, x, 0.5, periodic=[True], minDomain=[-1.0], maxDomain=[1.0])
    assert (0, 2) in list(zip(ii.tolist(), jj.tolist()))
    with pytest.raises(ValueError, match="minDomain"):
        radiusNaiveFixed(x, x, 0.5, periodic=[True])
