"""The lid-driven cavity (`fluids.cases.cavity`): the Ghia et al. (1982) Re = 100 table is
the one the comparison uses, the Shepard centre-line interpolation, the lid, and a tiny run
whose walls hold the fluid, whose lid drives it along +x and whose results.json has the
documented keys."""

from __future__ import annotations

import json

import pytest
import torch

from warpSPHCore.enumTypes import ParticleType
from warpSPHCore.fluids.cases import cavity

F64 = torch.float64


def test_ghia_table_is_the_one_the_comparison_uses():
    # Ghia, Ghia & Shin 1982, Tables I and II, Re = 100 (17 points each, lid speed 1)
    assert len(cavity.GHIA_RE100_Y) == len(cavity.GHIA_RE100_U) == 17
    assert len(cavity.GHIA_RE100_X) == len(cavity.GHIA_RE100_V) == 17
    u = dict(zip(cavity.GHIA_RE100_Y, cavity.GHIA_RE100_U))
    v = dict(zip(cavity.GHIA_RE100_X, cavity.GHIA_RE100_V))
    assert (u[1.0], u[0.9766], u[0.5], u[0.4531], u[0.0547], u[0.0]) == \
        (1.0, 0.84123, -0.20581, -0.21090, -0.03717, 0.0)
    assert (v[1.0], v[0.8047], v[0.5], v[0.2344], v[0.0625], v[0.0]) == \
        (0.0, -0.24533, 0.05454, 0.17527, 0.09233, 0.0)
    assert list(cavity.GHIA_RE100_Y) == sorted(cavity.GHIA_RE100_Y, reverse=True)
    assert list(cavity.GHIA_RE100_X) == sorted(cavity.GHIA_RE100_X, reverse=True)
    probes, component, reference = cavity._probes(torch.zeros(1, dtype=F64))
    assert reference.tolist() == list(cavity.GHIA_RE100_U[1:-1] + cavity.GHIA_RE100_V[1:-1])
    assert probes[:15, 0].eq(0.5).all() and probes[:15, 1].tolist() == \
        list(cavity.GHIA_RE100_Y[1:-1])
    assert probes[15:, 1].eq(0.5).all() and probes[15:, 0].tolist() == \
        list(cavity.GHIA_RE100_X[1:-1])
    assert component.tolist() == [0] * 15 + [1] * 15


def test_centerline_interpolation_reproduces_a_linear_field():
    g = (torch.arange(20, dtype=F64) + 0.5) / 20
    x = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    field = torch.stack([1.0 + 2.0 * x[:, 0] - x[:, 1], 0.5 * x[:, 1]], 1)
    H = torch.full((x.shape[0],), 3.0 / 20, dtype=F64)
    probes = torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.5, 0.2]], dtype=F64)
    got = cavity.centerlineProfiles(probes, x, field, H)
    want = torch.stack([1.0 + 2.0 * probes[:, 0] - probes[:, 1], 0.5 * probes[:, 1]], 1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_setup_lid_and_walls():
    case = cavity.setup(cavity.CavityConfig(n=10, t=0.1))
    wall = case.kinds == int(ParticleType.Boundary)
    assert case.fluid == 100 and int(wall.sum()) == 16 * 16 - 100
    lid = case.lidVelocity[:, 0] == 1.0
    assert torch.equal(lid, wall & (case.positions[:, 1] > 1.0))
    assert case.lidVelocity[:, 1].eq(0).all()
    assert case.dt == pytest.approx(0.1 / case.steps)
    assert case.dt <= 0.25 * case.dx / 11 + 1e-15


def test_config_validation():
    with pytest.raises(ValueError, match="accepted"):
        cavity.CavityConfig(n=2)
    with pytest.raises(ValueError, match="average >= 0"):
        cavity.CavityConfig(average=-1.0)
    with pytest.raises(ValueError, match="dtype"):
        cavity.CavityConfig(dtype="half")


def test_tiny_run_walls_hold_and_the_lid_drives(tmp_path):
    torch.set_num_threads(1)
    config = cavity.CavityConfig(n=12, t=0.3, checks=2, average=0.1)
    r = cavity.run(config, tmp_path, quiet=True)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "cavity.png").is_file()
    for key in ("centerlineMaxErr", "centerlineMaxErrU", "centerlineMaxErrV", "msPerStep",
                "particles", "particleStepsPerSecond", "steps", "centerline",
                "centerlineErrHistory", "fluidOutside", "meanTopU", "config"):
        assert key in saved, key
    assert saved["particles"] == 18 * 18 == r["particles"] and saved["fluidParticles"] == 144
    assert saved["msPerStep"] > 0 and saved["steps"] > 100
    assert saved["fluidOutside"] == 0  # the walls do not leak
    assert saved["meanTopU"] > 0.1  # the lid drags the top layers along +x
    u = dict(zip(saved["centerline"]["y"], saved["centerline"]["u"]))
    assert u[0.9766] > 0.3 and u[0.9766] > u[0.8516] > u[0.5]  # the lid's boundary layer
    assert len(saved["centerlineErrHistory"]["time"]) == 2
    assert saved["averagedSamples"] in (2, 3)  # every 0.05 over the last 0.1
    assert 0 < saved["centerlineMaxErr"] < 1.0
