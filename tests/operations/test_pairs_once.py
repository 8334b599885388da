"""Each pair once for both rows: the Density's, the Momentum's and the Gradient's
values-only reverse kernels on a symmetric list (`AdjacencyList.symmetric`) of a call whose reference side is its query side.

* Which lists are symmetric: the library's search of one set against itself (plain, with
  scenes, a Verlet list and its filtered copy, a restart's list) with a symmetric threshold
  or equal supports; never a Gather or Scatter search of unequal supports, a search of two
  sets, a list built from user tensors or a copy made with ``dataclasses.replace``.
* The once route equals the per-row route (the same list marked unsymmetric) to rounding,
  float64, for every gradient of the call: equal and unequal supports side by side, three
  interaction modes over mixed kinds, three support schemes, masses and supports that
  require grad (the Momentum then takes every pair per row), and float32.
* The Gradient's values-only kernel, four gradient schemes, fluid rows over mixed kinds.
* The Momentum's and the Density's forward kernels on the CPU, with calibration and a
  masking mode.
* The route is taken (the reverse pack's flag, read by a spy) and gradcheck passes through it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from sph_reference import GRADCHECK, makeDomain, momentumTestField, props, reverseRoute

import warpSPHCore.operators._reverse as reverseModule
import warpSPHCore.operators._specialized as specializedModule
import warpSPHCore.operators.density as densityModule
import warpSPHCore.operators.momentum as momentumModule
from warpSPHCore import (
    GradientScheme,
    OperationDirection,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.dataTypes import AdjacencyList
from warpSPHCore.fluids.neighbours import adjacencyFromStateDict, adjacencyStateDict
from warpSPHCore.neighborhood import (
    buildVerletList,
    filterVerletList,
    radiusSearchCompactHashMap,
)
from warpSPHCore.operations import warpOperation

# the reverse kernels are specialised per configuration: specialisation on for every test
pytestmark = pytest.mark.usefixtures("specialized")

F64 = torch.float64
MOM = WarpOperation.Momentum
DEN = WarpOperation.Density


def _particles(n, d, dtype, seed, kinds=None):
    """Random particles in [-1, 1]^d; supports of two values, so that equal-support pairs
    (taken once) and unequal ones (taken per row) sit in one list."""
    g = torch.Generator().manual_seed(seed)
    x = (2 * torch.rand(n, d, generator=g, dtype=F64) - 1).to(dtype)
    h = torch.where(torch.rand(n, generator=g, dtype=F64) < 0.5, 0.45, 0.55).to(dtype)
    m = (1 + 0.2 * torch.rand(n, generator=g, dtype=F64)).to(dtype)
    rho = (1 + 0.2 * torch.rand(n, generator=g, dtype=F64)).to(dtype)
    k = torch.zeros(n, dtype=torch.int32) if kinds is None else kinds
    return ParticleState(x, h, m, k, rho)


def _grads(p, dom, adjacency, pr, supportGrad, massGrad, seed=3):
    """Every gradient of one Density + Momentum evaluation for a random output cotangent."""
    d = p.positions.shape[1]
    x = p.positions.clone().requires_grad_()
    h = p.supports.clone().requires_grad_(supportGrad)
    m = p.masses.clone().requires_grad_(massGrad)
    f = momentumTestField(p.positions.shape[0], d, seed, p.positions.dtype).requires_grad_()
    q = ParticleState(x, h, m, p.kinds, p.densities)
    rho = warpOperation(q, dataclasses.replace(pr, operation=DEN), dom, adjacency=adjacency)
    rows = warpOperation(q, dataclasses.replace(pr, operation=MOM), dom, queryValues=f,
                         adjacency=adjacency)
    assert reverseRoute(rows) == "momentumVJPKernel"
    g = torch.Generator().manual_seed(seed + 1)
    loss = ((rho * torch.randn(rho.shape, generator=g, dtype=F64).to(rho.dtype)).sum()
            + (rows * torch.randn(rows.shape, generator=g, dtype=F64).to(rows.dtype)).sum())
    leaves = [x, f] + ([h] if supportGrad else []) + ([m] if massGrad else [])
    return torch.autograd.grad(loss, leaves)


class _PackSpy:
    """Records the reverse packs an operator module builds (their ``pairsOnce`` is read after
    the backward pass, when the launch has used them)."""

    def __init__(self, monkeypatch, module):
        self.packs = []
        original = module.cotangentPack

        def spy(*args, **kw):
            pack = original(*args, **kw)
            self.packs.append(pack)
            return pack

        monkeypatch.setattr(module, "cotangentPack", spy)

    def flags(self):
        return [bool(p.pairsOnce) for p in self.packs]


def _forwardOnceSpy(monkeypatch) -> list:
    """Records, per specialised Momentum forward kernel chosen, whether it takes pairs once
    (`_specialized._forwardOnce`)."""
    taken = []
    original = specializedModule._forwardOnce

    def spy(config, cfg):
        out = original(config, cfg)
        taken.append(bool(out is not None and out.pairsOnce))
        return out

    monkeypatch.setattr(specializedModule, "_forwardOnce", spy)
    return taken


def _assertAgree(names, once, perRow, tol=1e-13):
    """Each gradient of the once route equals the per-row route's to `tol` relative."""
    for name, a, b in zip(names, once, perRow):
        scale = float(b.abs().max())
        assert scale > 0
        err = float((a - b).abs().max())
        assert err <= tol * scale, f"{name}: once vs per row {err:.3e} (scale {scale:.3e})"


def test_library_self_searches_are_symmetric_the_rest_are_not():
    dom = makeDomain(2, F64, "cpu", periodic=True)
    varied = _particles(40, 2, F64, 1)
    # Gather and Scatter read one side's support: symmetric only with equal supports (a
    # device flag read with the search's one readback); the other schemes always
    for mode in (SupportScheme.Gather, SupportScheme.Scatter):
        assert not radiusSearchCompactHashMap(varied, dom, mode=mode).symmetric
    for mode in (SupportScheme.MeanSymmetric, SupportScheme.KernelMeanSymmetric,
                 SupportScheme.SuperSymmetric, SupportScheme.PartialSymmetric):
        assert radiusSearchCompactHashMap(varied, dom, mode=mode).symmetric
    p = dataclasses.replace(varied, supports=torch.full((40,), 0.5, dtype=F64))
    other = _particles(30, 2, F64, 2)
    adj = radiusSearchCompactHashMap(p, dom)
    assert adj.symmetric
    assert not radiusSearchCompactHashMap(p, dom, referenceParticles=other).symmetric
    assert not dataclasses.replace(adj).symmetric
    assert not AdjacencyList(adj.i, adj.j, adj.numNeighbors, adj.edgeOffsets, adj.numRows,
                             adj.numCols).symmetric
    assert not AdjacencyList(adj.i, adj.j, adj.numNeighbors, adj.edgeOffsets, adj.numRows,
                             adj.numCols, symmetric=True).symmetric
    verlet = buildVerletList(p, dom, verletScale=1.2)
    assert verlet.symmetric
    moved = dataclasses.replace(p, positions=p.positions + 1e-3)
    assert buildVerletList(moved, dom, verletScale=1.2, priorNeighborhood=verlet) is verlet
    assert filterVerletList(moved, dom, verlet).symmetric
    other = _particles(40, 2, F64, 3)
    assert not filterVerletList(moved, dom, verlet, referenceParticles=other).symmetric
    # the filter's Gather test with supports that have come apart since the build
    grown = dataclasses.replace(moved, supports=varied.supports)
    assert not filterVerletList(grown, dom, verlet).symmetric
    assert filterVerletList(grown, dom, verlet, supportMode=SupportScheme.MeanSymmetric).symmetric
    assert adjacencyFromStateDict(adjacencyStateDict(adj), "cpu").symmetric
    assert not adjacencyFromStateDict(adjacencyStateDict(dataclasses.replace(adj)),
                                      "cpu").symmetric
    scenes = dataclasses.replace(p, scenes=(torch.arange(40) % 3).to(torch.int32))
    assert radiusSearchCompactHashMap(scenes, dom).symmetric


_CASES = [
    pytest.param(SupportScheme.Gather, OperationDirection.AllQueriesNonGhostReferences,
                 id="gather-all"),
    pytest.param(SupportScheme.Gather, OperationDirection.FluidQueriesNonGhostReferences,
                 id="gather-fluid-rows"),
    pytest.param(SupportScheme.Scatter, OperationDirection.FluidQueriesFluidReferences,
                 id="scatter-fluid-fluid"),
    pytest.param(SupportScheme.MeanSymmetric, OperationDirection.Unmasked,
                 id="mean-unmasked"),
]


@pytest.mark.parametrize("support,direction", _CASES)
def test_once_equals_per_row(monkeypatch, support, direction):
    dom = makeDomain(2, F64, "cpu", periodic=True)
    kinds = torch.tensor([0, 0, 1, 0, 2, 0, 0, 1] * 6, dtype=torch.int32)
    p = _particles(48, 2, F64, 5, kinds)
    symmetric = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    assert symmetric.symmetric
    pr = props(MOM, supportMode=support, operationMode=direction)
    spyD = _PackSpy(monkeypatch, densityModule)
    spyM = _PackSpy(monkeypatch, momentumModule)
    once = _grads(p, dom, symmetric, pr, supportGrad=False, massGrad=True)
    assert spyD.flags() == [True] and spyM.flags() == [True]
    perRow = _grads(p, dom, dataclasses.replace(symmetric), pr, supportGrad=False,
                    massGrad=True)
    assert spyD.flags() == [True, False] and spyM.flags() == [True, False]
    _assertAgree(("positions", "field", "masses"), once, perRow)


def test_support_gradients_keep_the_momentum_per_row(monkeypatch):
    """Row j's term exchanges h_i and h_j: with the supports' adjoints asked the Momentum
    takes every pair per row; the Density still takes them once (its support adjoints
    are exchanged explicitly)."""
    dom = makeDomain(2, F64, "cpu", periodic=True)
    p = _particles(40, 2, F64, 7)
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    pr = props(MOM, supportMode=SupportScheme.Gather)
    spyD = _PackSpy(monkeypatch, densityModule)
    spyM = _PackSpy(monkeypatch, momentumModule)
    once = _grads(p, dom, adj, pr, supportGrad=True, massGrad=False)
    assert spyD.flags() == [True] and spyM.flags() == [False]
    perRow = _grads(p, dom, dataclasses.replace(adj), pr, supportGrad=True, massGrad=False)
    _assertAgree(("positions", "field", "supports"), once, perRow)


def test_distinct_reference_values_take_every_pair_per_row(monkeypatch):
    """Reference values other than the query values: the pair's two terms are different
    functions, so nothing is taken once."""
    dom = makeDomain(2, F64, "cpu", periodic=True)
    p = _particles(30, 2, F64, 9)
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    spy = _PackSpy(monkeypatch, momentumModule)
    f = momentumTestField(30, 2, 1, F64).requires_grad_()
    fr = momentumTestField(30, 2, 2, F64).requires_grad_()
    x = p.positions.clone().requires_grad_()
    out = warpOperation(ParticleState(x, p.supports, p.masses, p.kinds, p.densities),
                        props(MOM), dom, queryValues=f, referenceValues=fr, adjacency=adj)
    out.sum().backward()
    assert spy.flags() == [False]


def test_float32_once_equals_per_row(monkeypatch):
    dom = makeDomain(2, torch.float32, "cpu", periodic=True)
    p = _particles(40, 2, torch.float32, 11)
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    pr = props(MOM, supportMode=SupportScheme.Gather)
    once = _grads(p, dom, adj, pr, supportGrad=False, massGrad=False)
    perRow = _grads(p, dom, dataclasses.replace(adj), pr, supportGrad=False, massGrad=False)
    _assertAgree(("positions", "field"), once, perRow, tol=1e-5)


def test_gradcheck_through_the_once_route(monkeypatch):
    dom = makeDomain(2, F64, "cpu", periodic=True)
    p = _particles(10, 2, F64, 13)
    p = dataclasses.replace(p, supports=torch.full((10,), 0.9, dtype=F64))
    adj = radiusSearchCompactHashMap(p, dom)
    spy = _PackSpy(monkeypatch, momentumModule)
    f = momentumTestField(10, 2, 4, F64)

    def fn(x, values):
        q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
        return (warpOperation(q, props(MOM), dom, queryValues=values, adjacency=adj),
                warpOperation(q, props(DEN), dom, adjacency=adj))

    inputs = (p.positions.clone().requires_grad_(), f.requires_grad_())
    assert torch.autograd.gradcheck(fn, inputs, **GRADCHECK)
    assert spy.flags() and all(spy.flags())


@pytest.mark.parametrize("scheme", [GradientScheme.Naive, GradientScheme.Difference,
                                    GradientScheme.Summation, GradientScheme.Symmetric],
                         ids=lambda s: s.name)
def test_gradient_values_only_once_equals_per_row(monkeypatch, scheme):
    """The Gradient's values-only reverse kernel: row j's term is the scheme's coefficient
    with i and j exchanged, times G_ji = -G_ij; fluid rows over non-ghost references."""
    dom = makeDomain(2, F64, "cpu", periodic=True)
    kinds = torch.tensor([0, 0, 1, 0, 2, 0] * 7, dtype=torch.int32)
    p = _particles(42, 2, F64, 17, kinds)
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    pr = props(WarpOperation.Gradient, gradientMode=scheme,
               operationMode=OperationDirection.FluidQueriesNonGhostReferences)
    spy = _PackSpy(monkeypatch, reverseModule)
    f = torch.randn(42, 3, generator=torch.Generator().manual_seed(4), dtype=F64)
    seed = torch.randn(42, 3, 2, generator=torch.Generator().manual_seed(5), dtype=F64)

    def valuesGrad(a):
        v = f.clone().requires_grad_()
        out = warpOperation(p, pr, dom, queryValues=v, adjacency=a)
        assert reverseRoute(out) is not None
        return torch.autograd.grad((out * seed).sum(), v)[0]

    once = valuesGrad(adj)
    perRow = valuesGrad(dataclasses.replace(adj))
    assert spy.flags() == [True, False]
    scale = float(perRow.abs().max())
    assert float((once - perRow).abs().max()) <= 1e-13 * scale


@pytest.mark.parametrize("direction", [OperationDirection.AllQueriesNonGhostReferences,
                                       OperationDirection.FluidQueriesNonGhostReferences],
                         ids=lambda m: m.name)
@pytest.mark.parametrize("op", [MOM, DEN], ids=lambda o: o.name)
def test_forward_once_on_the_cpu_equals_per_row(monkeypatch, direction, op):
    """The Momentum's and the Density's forward kernels on the CPU: a pair of equal supports
    once, row j's term (minus row i's for the Momentum, m_i W_ij for the Density) added to
    row j's output; every other pair per row."""
    taken = _forwardOnceSpy(monkeypatch)
    dom = makeDomain(2, F64, "cpu", periodic=True)
    kinds = torch.tensor([0, 0, 1, 0, 2, 0, 0, 1] * 6, dtype=torch.int32)
    p = _particles(48, 2, F64, 19, kinds)
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    f = momentumTestField(48, 2, 6, F64) if op == MOM else None
    pr = props(op, operationMode=direction, calibrateNormalization=True, n_h=2.0)
    once = warpOperation(p, pr, dom, queryValues=f, adjacency=adj)
    perRow = warpOperation(p, pr, dom, queryValues=f, adjacency=dataclasses.replace(adj))
    assert taken == [True, False]
    scale = float(perRow.abs().max())
    assert float((once - perRow).abs().max()) <= 1e-14 * scale
    if direction != OperationDirection.AllQueriesNonGhostReferences:
        masked = ~(kinds == 0)
        assert torch.equal(once[masked], torch.zeros_like(once[masked]))


def test_once_on_each_device(monkeypatch, device):
    """On either device the reverse kernels take pairs once (CUDA scatters the partner's
    adjoints with atomics as the per-row route does) and agree with the per-row route; the
    Momentum's forward takes pairs once on the CPU only (on CUDA one gather per row keeps a
    run's bits fixed)."""
    taken = _forwardOnceSpy(monkeypatch)
    dom = makeDomain(2, F64, device, periodic=True)
    p = _particles(40, 2, F64, 23)
    p = ParticleState(*(t.to(device) for t in (p.positions, p.supports, p.masses, p.kinds,
                                               p.densities)))
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.SuperSymmetric)
    assert adj.symmetric
    pr = props(MOM, supportMode=SupportScheme.Gather)
    once = _grads(p, dom, adj, pr, supportGrad=False, massGrad=True)
    perRow = _grads(p, dom, dataclasses.replace(adj), pr, supportGrad=False, massGrad=True)
    # the Density's forward, then the Momentum's, of each route
    cpu = device.type == "cpu"
    assert taken == [cpu, cpu, False, False]
    _assertAgree(("positions", "field", "masses"), once, perRow)


def _assertRowsPartitioned(adj):
    """Every row of `adj` holds its references j >= i before those j < i."""
    counts = adj.numNeighbors.to(torch.int64).cpu()
    rows = torch.repeat_interleave(torch.arange(adj.numRows), counts)
    lower = (adj.j.cpu() < rows).to(torch.int64)
    # within a row the lower flag never falls: a row's entries, in order, are 0...0 1...1
    same = rows[1:] == rows[:-1]
    assert not bool((same & (lower[1:] < lower[:-1])).any())


def _rowsFlipped(adj) -> torch.Tensor:
    """`adj.j` with every row in reverse order (lower references first, where any)."""
    starts = adj.edgeOffsets.to(torch.int64).cpu()
    j = adj.j.cpu().clone()
    for r in range(adj.numRows):
        s, n = int(starts[r]), int(adj.numNeighbors[r])
        j[s:s + n] = j[s:s + n].flip(0)
    return j.to(adj.j.device)


def test_symmetric_rows_hold_their_lower_references_last(device):
    """What a symmetric list promises of its rows (`AdjacencyList.symmetric`), for each
    builder on each device: the search (plain and with scenes), a Verlet list and its
    filtered copy, and a restart of a list whose rows were not in that order (a file written
    before it was kept): the same pairs, reordered; a list already in that order is left as
    it is."""
    dom = makeDomain(2, F64, device, periodic=True)
    p = _particles(60, 2, F64, 29)
    p = ParticleState(p.positions.to(device), torch.full((60,), 0.5, dtype=F64, device=device),
                      p.masses.to(device), p.kinds.to(device), p.densities.to(device))
    adj = radiusSearchCompactHashMap(p, dom)
    verlet = buildVerletList(p, dom, verletScale=1.2)
    moved = dataclasses.replace(p, positions=p.positions + 1e-3)
    scenes = dataclasses.replace(p, scenes=(torch.arange(60, device=device) % 3).to(torch.int32))
    lists = [adj, verlet, filterVerletList(moved, dom, verlet),
             radiusSearchCompactHashMap(scenes, dom)]
    for a in lists:
        assert a.symmetric
        _assertRowsPartitioned(a)
        assert bool((a.j < a.i).any())  # both parts occur
    # a restart file whose rows are in another order
    state = adjacencyStateDict(adj)
    shuffled = _rowsFlipped(adj)
    state["j"] = shuffled
    restored = adjacencyFromStateDict(state, device)
    assert restored.symmetric
    _assertRowsPartitioned(restored)
    starts = adj.edgeOffsets.to(torch.int64).cpu()
    for r in range(adj.numRows):
        s, n = int(starts[r]), int(adj.numNeighbors[r])
        assert sorted(restored.j[s:s + n].tolist()) == sorted(adj.j[s:s + n].tolist())
    assert torch.equal(state["j"], shuffled)  # the file's tensor is not changed
    assert torch.equal(adjacencyFromStateDict(adjacencyStateDict(adj), device).j, adj.j)


def test_rows_stop_at_their_lower_part(monkeypatch):
    """Equal supports and kinds the interaction mode admits on both sides: the device flag is
    set and the once kernels end each row at its first j < i (`_pairOnceStop`); every
    gradient, and the Momentum's forward on the CPU, equal the per-row route's. A list
    marked symmetric whose rows are not in that order gives other numbers (so the equality
    tests the order). The flag is 0 with unequal supports or a kind the mode masks, and
    kept on the supports tensor."""
    from warpSPHCore.autograd.arg_extract import lowerTakenFlag
    from warpSPHCore.dataTypes.adjacency import trustedConstruction

    dom = makeDomain(2, F64, "cpu", periodic=True)
    p = dataclasses.replace(_particles(48, 2, F64, 31), supports=torch.full((48,), 0.5,
                                                                             dtype=F64))
    mode = OperationDirection.FluidQueriesNonGhostReferences
    flag = lowerTakenFlag(p, mode)
    assert flag.tolist() == [1] and lowerTakenFlag(p, mode) is flag
    ghosts = dataclasses.replace(p, kinds=torch.tensor([0, 2] * 24, dtype=torch.int32))
    assert lowerTakenFlag(ghosts, mode).tolist() == [0]
    walls = dataclasses.replace(p, kinds=torch.tensor([0, 1] * 24, dtype=torch.int32))
    assert lowerTakenFlag(walls, mode).tolist() == [0]
    assert lowerTakenFlag(walls, OperationDirection.Unmasked).tolist() == [1]
    varied = _particles(48, 2, F64, 31)
    assert lowerTakenFlag(varied, mode).tolist() == [0]

    adj = radiusSearchCompactHashMap(p, dom)
    pr = props(MOM, supportMode=SupportScheme.Gather, operationMode=mode)
    spyM = _PackSpy(monkeypatch, momentumModule)
    once = _grads(p, dom, adj, pr, supportGrad=False, massGrad=True)
    perRow = _grads(p, dom, dataclasses.replace(adj), pr, supportGrad=False, massGrad=True)
    assert spyM.flags() == [True, False]
    _assertAgree(("positions", "field", "masses"), once, perRow)
    f = momentumTestField(48, 2, 8, F64)
    for op, values in ((MOM, f), (DEN, None)):
        forward = [warpOperation(p, props(op, operationMode=mode), dom, queryValues=values,
                                 adjacency=a) for a in (adj, dataclasses.replace(adj))]
        scale = float(forward[1].abs().max())
        assert float((forward[0] - forward[1]).abs().max()) <= 1e-14 * scale

    with trustedConstruction():
        wrong = AdjacencyList(adj.i, _rowsFlipped(adj), adj.numNeighbors, adj.edgeOffsets,
                              adj.numRows, adj.numCols, symmetric=True)
    bad = _grads(p, dom, wrong, pr, supportGrad=False, massGrad=True)
    assert float((bad[0] - perRow[0]).abs().max()) > 1e-3 * float(perRow[0].abs().max())
