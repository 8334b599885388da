"""Long-run reliability (issue "Reliability", "No leaks, bounded caches").

A small optimisation loop on a 2D jittered periodic lattice (N = 396): every step runs the
neighbour search (`radiusSearchCompactHashMap`), a no-grad Density diagnostic, the CRK
factors (`computeCRKFactors`), a CRK-corrected Gradient and Laplacian, a loss, backward and
an SGD step on the positions.

* 2,000 steps: the process RSS (``VmRSS``) at the end is within 5 % of its value after a
  200-step warm-up (about 3 minutes on 2 CPU cores).
* 50 steps with every caching layer disabled through its environment gate
  (``WARPSPHCORE_DISABLE_FIELD_CACHE=1``, ``WARPSPHCORE_DISABLE_BUNDLE=1``,
  ``WARPSPHCORE_FIELD_CACHE_GRAD=0``) against the defaults: the gates take effect, the
  bundle gate alone is bitwise neutral, and all gates off give bitwise-identical results
  (an aliased input has one view per call in both paths). The gates are read on every call
  (`util/fieldRegistry.fieldCacheDisabled`, `util/stateBundle.bundleDisabled`,
  `autograd/stateAwareWarpFunction.fieldCacheGradEnabled` read ``os.environ`` at call
  time), so every variant runs in this process.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    computeCRKFactors,
    radiusSearchCompactHashMap,
    sampleDensestLattice,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.util import stateBundle
from warpSPHCore.util.fieldRegistry import FIELD_ATTR

pytestmark = pytest.mark.slow

KERNEL = KernelFunctions.Wendland4
TWO_PI = 2.0 * math.pi
GATES = ("WARPSPHCORE_DISABLE_FIELD_CACHE", "WARPSPHCORE_DISABLE_BUNDLE",
         "WARPSPHCORE_FIELD_CACHE_GRAD")
DISABLED = {"WARPSPHCORE_DISABLE_FIELD_CACHE": "1", "WARPSPHCORE_DISABLE_BUNDLE": "1",
            "WARPSPHCORE_FIELD_CACHE_GRAD": "0"}

LONG_STEPS = 2_000
WARMUP_STEPS = 200
SHORT_STEPS = 50


def vmRSS() -> int:
    """Resident set size of this process in kB (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("VmRSS not found in /proc/self/status")


class Simulation:
    """Fresh state (tensors, optimiser) of the optimisation loop."""

    def __init__(self, device="cpu", dtype=torch.float64):
        sample = sampleDensestLattice(400, 1.0, 2, jitter=0.2, seed=0)
        cast = dict(dtype=dtype, device=device)
        self.x0 = torch.tensor(sample.positions, **cast)
        n = self.x0.shape[0]
        dx = sample.nearestNeighborDistance
        self.n = n
        self.h = torch.full((n,), 2.5 * dx, **cast)
        self.m = torch.full((n,), dx * dx * math.sqrt(3.0) / 2.0, **cast)
        self.k = torch.zeros(n, dtype=torch.int32, device=device)
        self.domain = DomainDescription(torch.tensor(sample.boxMin, **cast),
                                        torch.tensor(sample.boxMax, **cast), [True, True])
        self.gradient = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                                            gradientMode=GradientScheme.Naive)
        self.laplacian = OperationProperties(KERNEL, operation=WarpOperation.Laplacian)
        self.density = OperationProperties(KERNEL, operation=WarpOperation.Density)
        self.x = self.x0.clone().requires_grad_()
        self.opt = torch.optim.SGD([self.x], lr=1e-4)

    def step(self) -> torch.Tensor:
        x = self.x
        self.opt.zero_grad(set_to_none=True)
        frozen = ParticleState(x.detach(), self.h, self.m, self.k)
        adj = radiusSearchCompactHashMap(frozen, self.domain, mode=SupportScheme.SuperSymmetric)
        with torch.no_grad():
            rho = warpOperation(frozen, self.density, self.domain, adjacency=adj)
        p = ParticleState(x, self.h, self.m, self.k)
        V, rhoCRK, crk = computeCRKFactors(p, self.domain, KERNEL, adjacency=adj)
        sx, cx = torch.sin(TWO_PI * x[:, 0]), torch.cos(TWO_PI * x[:, 0])
        sy, cy = torch.sin(TWO_PI * x[:, 1]), torch.cos(TWO_PI * x[:, 1])
        f = sx * cy
        g = warpOperation(p, self.gradient, self.domain, queryValues=f, referenceVolumes=V,
                          crkState=crk, adjacency=adj)
        lap = warpOperation(p, self.laplacian, self.domain, queryValues=f, referenceVolumes=V,
                            crkState=crk, adjacency=adj)
        exact = TWO_PI * torch.stack([cx * cy, -sx * sy], dim=1)
        loss = (((g - exact) ** 2).mean() + 1e-4 * ((lap + 2 * TWO_PI**2 * f) ** 2).mean()
                + ((rhoCRK - rho) ** 2).mean())
        loss.backward()
        self.opt.step()
        return loss.detach()


def _setGates(monkeypatch, disabled: bool):
    for name in GATES:
        monkeypatch.delenv(name, raising=False)
    if disabled:
        for name, value in DISABLED.items():
            monkeypatch.setenv(name, value)


def _bundleHits() -> int:
    return sum(b.hits for b in stateBundle._BUNDLES.values())


def test_long_run_rss_bounded(monkeypatch):
    """2,000 steps: RSS after the 200-step warm-up and at the end differ by < 5 %."""
    _setGates(monkeypatch, disabled=False)
    sim = Simulation()
    losses = []
    for _ in range(WARMUP_STEPS):
        losses.append(sim.step())
    rss0, blocks0 = vmRSS(), sys.getallocatedblocks()
    samples = []
    for i in range(LONG_STEPS - WARMUP_STEPS):
        losses.append(sim.step())
        if (i + 1) % 200 == 0:
            samples.append(vmRSS())
    rss1, blocks1 = vmRSS(), sys.getallocatedblocks()
    growth = (rss1 - rss0) / rss0
    loss = torch.stack(losses)
    # the loop did real work: finite losses, the optimiser moved the particles and reduced
    # the loss
    assert torch.isfinite(loss).all()
    assert loss[-1] < loss[0]
    assert (sim.x.detach() - sim.x0).abs().amax() > 1e-4
    assert growth < 0.05, (
        f"RSS grew by {100 * growth:.2f} % over {LONG_STEPS - WARMUP_STEPS} steps "
        f"({rss0} kB -> {rss1} kB; samples every 200 steps: {samples}; Python allocator "
        f"blocks {blocks0} -> {blocks1})")


def _run(monkeypatch, env: dict, steps: int):
    _setGates(monkeypatch, disabled=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    hits0 = _bundleHits()
    sim = Simulation()
    losses = torch.stack([sim.step() for _ in range(steps)])
    reused = _bundleHits() - hits0
    attached = hasattr(sim.h, FIELD_ATTR)
    _setGates(monkeypatch, disabled=False)
    return sim.x.detach().clone(), losses, reused, attached


@pytest.fixture(scope="module")
def shortRuns():
    """SHORT_STEPS steps with the defaults, with every gate off, and with only the bundle off."""
    with pytest.MonkeyPatch.context() as mp:
        return {"on": _run(mp, {}, SHORT_STEPS), "off": _run(mp, DISABLED, SHORT_STEPS),
                "bundleOff": _run(mp, {"WARPSPHCORE_DISABLE_BUNDLE": "1"}, SHORT_STEPS)}


def test_cache_gates_take_effect(shortRuns):
    """The gates really switch the layers: the default run reused bundled structs and
    attached views to the caller's tensors, the fully gated run did neither."""
    _, _, reusedOn, attachedOn = shortRuns["on"]
    _, _, reusedOff, attachedOff = shortRuns["off"]
    assert reusedOn > 0 and attachedOn
    assert reusedOff == 0 and not attachedOff
    assert shortRuns["bundleOff"][2] == 0


def test_bundle_disabled_bitwise_identical(shortRuns):
    """WARPSPHCORE_DISABLE_BUNDLE=1 alone: positions and losses bitwise identical."""
    xOn, lossOn, _, _ = shortRuns["on"]
    xB, lossB, _, _ = shortRuns["bundleOff"]
    assert (xOn - Simulation().x0).abs().amax() > 0
    assert torch.equal(lossOn, lossB) and torch.equal(xOn, xB)


def test_caches_disabled_matches_to_roundoff(shortRuns):
    """Every gate off: the same trajectory up to float64 round-off (implied by the bitwise
    test below; kept for a readable failure message)."""
    xOn, lossOn, _, _ = shortRuns["on"]
    xOff, lossOff, _, _ = shortRuns["off"]
    torch.testing.assert_close(lossOff, lossOn, rtol=1e-12, atol=0)
    torch.testing.assert_close(xOff, xOn, rtol=0, atol=1e-14)


def test_caches_disabled_bitwise_identical(shortRuns):
    """SHORT_STEPS steps with every caching layer gated off == the defaults, bitwise (the
    bridge gives an aliased tensor one view per call whether or not views are cached, so its
    gradient is summed in the same order)."""
    xOn, lossOn, _, _ = shortRuns["on"]
    xOff, lossOff, _, _ = shortRuns["off"]
    assert torch.equal(lossOn, lossOff), (lossOn - lossOff).abs().max()
    assert torch.equal(xOn, xOff), (xOn - xOff).abs().max()
