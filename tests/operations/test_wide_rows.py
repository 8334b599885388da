"""Row-per-thread forward kernels on the CPU (`operators._specialized`, ``Configuration.wide``):
with a CSR list, the Interpolate's, Gradient's and Laplacian's specialised kernels compute
every field column of a query row in one neighbour traversal, the columns in register blocks
of eight. Each column adds its terms in the row's order, so the results must equal those of
the one-thread-per-(row, column) kernels (the CUDA layout, and the grid traversal's) bit for
bit: over field widths below, at and above a block (1, 3, 8, 11), interaction modes that
mask queries and references, calibration, periodic axes, and the states that switch off the
plain coefficient copies (volumes, grad-h)."""

from __future__ import annotations

import pytest
import torch
from sph_reference import cloud, makeDomain, neighbourStructure, props

from warpSPHCore import GradHState, GradientScheme, LaplacianScheme, WarpOperation
from warpSPHCore.operations import warpOperation
from warpSPHCore.operators import _specialized

pytestmark = pytest.mark.usefixtures("specialized")  # conftest: specialisation on

OPERATORS = [
    (WarpOperation.Interpolate, {}),
    (WarpOperation.Gradient, dict(gradientMode=GradientScheme.Naive)),
    (WarpOperation.Gradient, dict(gradientMode=GradientScheme.Symmetric)),
    (WarpOperation.Gradient, dict(gradientMode=GradientScheme.Difference)),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Brookshaw)),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Default,
                                   gradientMode=GradientScheme.Symmetric)),
    (WarpOperation.Laplacian, dict(laplacianMode=LaplacianScheme.Dot)),
]


def _ids(o):
    op, kw = o
    return op.name + "".join(f"-{v.name}" for v in kw.values())


def _narrow(monkeypatch):
    """The one-thread-per-(row, column) kernels on the CPU (the CUDA layout)."""
    monkeypatch.setattr(_specialized, "_widened", lambda cfg, config: cfg)


def _call(q, pr, dom, adj, f, state, n):
    gen = torch.Generator().manual_seed(23)
    kw = {}
    if state == "volumes":
        kw["queryVolumes"] = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).to(f)
    if state == "gradH":
        kw["gradHState"] = GradHState((0.8 + 0.4 * torch.rand(n, generator=gen,
                                                              dtype=torch.float64)).to(f))
    with torch.no_grad():
        return warpOperation(q, pr, dom, queryValues=f, adjacency=adj, **kw)


@pytest.mark.parametrize("op", OPERATORS, ids=_ids)
def test_wide_rows_equal_the_column_threads_bitwise(monkeypatch, op):
    operation, kw = op
    d = 1 + OPERATORS.index(op) % 3
    n = 48
    gen = torch.Generator().manual_seed(7 + d)
    # configurations cycle the dimension; each compiles a wide and a per-column kernel
    for k, (state, width, mode, calibrate, periodic, dtype) in enumerate([
            ("plain", 1, 9, False, True, torch.float64),
            ("plain", 11, 5, True, False, torch.float64),
            ("volumes", 8, 13, False, True, torch.float64),
            ("gradH", 3, 1, False, False, torch.float32)]):
        q = cloud(n, d, dtype, "cpu", 40 + k, kinds=[i % 3 for i in range(n)], hMean=0.42)
        dom = makeDomain(d, dtype, "cpu", periodic=periodic)
        adj = neighbourStructure("csr", q, dom)
        shape = (n, width // d, d) if kw.get("laplacianMode") == LaplacianScheme.Dot else \
            (n, width)
        if kw.get("laplacianMode") == LaplacianScheme.Dot and width % d:
            shape = (n, width, d)
        f = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
        extra = dict(calibrateNormalization=True, n_h=3.0) if calibrate else {}
        pr = props(operation, operationMode=mode, **kw, **extra)
        wide = _call(q, pr, dom, adj, f, state, n)
        # the call really took the wide kernel, plain exactly without volumes and grad-h
        assert any(name == operation.name.lower() and cfg.wide and cfg.dim == d
                   and cfg.plain == (state == "plain") and cfg.operationMode == mode
                   for name, cfg in _specialized._BUILT)
        with monkeypatch.context() as m:
            _narrow(m)
            narrow = _call(q, pr, dom, adj, f, state, n)
        assert narrow.abs().max() > 0
        assert torch.equal(torch.isnan(wide), torch.isnan(narrow))
        fin = torch.isfinite(narrow)
        assert torch.equal(wide[fin], narrow[fin]), (state, width, mode,
                                                     float((wide - narrow)[fin].abs().max()))


@pytest.mark.parametrize("op", OPERATORS, ids=_ids)
def test_whole_blocks_read_as_rows_bitwise(monkeypatch, op):
    """Plain calls whose blocks of eight read their values as one row (two whole blocks, and
    two plus a partial one): equal to the per-column kernels bit for bit, in both
    precisions, also for a strided field (every other column of a wider tensor: the
    bridge's views are contiguous copies of such a tensor)."""
    operation, kw = op
    d = 2
    n = 40
    gen = torch.Generator().manual_seed(31)
    for width, dtype in ((16, torch.float64), (19, torch.float32)):
        q = cloud(n, d, dtype, "cpu", 11, kinds=[i % 3 for i in range(n)], hMean=0.42)
        dom = makeDomain(d, dtype, "cpu", periodic=True)
        adj = neighbourStructure("csr", q, dom)
        dot = kw.get("laplacianMode") == LaplacianScheme.Dot
        shape = (n, width, d) if dot else (n, width)
        wider = torch.randn(n, 2 * width, *shape[2:], generator=gen,
                            dtype=torch.float64).to(dtype)
        f = wider[:, ::2]  # strided: the flat field is not a view of contiguous rows
        assert not f.is_contiguous() and f.shape == shape
        pr = props(operation, operationMode=9, **kw)
        wide = _call(q, pr, dom, adj, f, "plain", n)
        assert torch.equal(wide, _call(q, pr, dom, adj, f.contiguous(), "plain", n))
        with monkeypatch.context() as m:
            _narrow(m)
            narrow = _call(q, pr, dom, adj, f, "plain", n)
        assert narrow.abs().max() > 0
        assert torch.equal(wide, narrow), (width, dtype, float((wide - narrow).abs().max()))


def test_covariance_rows_equal_the_element_threads_bitwise(monkeypatch):
    """The Covariance's one-thread-per-query kernel on the CPU with a list (the whole matrix
    and the count in one traversal) against the one-thread-per-element kernel, bit for bit:
    d = 1, 2, 3, masking modes, calibration, periodic seams, volumes."""
    gen = torch.Generator().manual_seed(5)
    for d, mode, calibrate, periodic, volumes in ((1, 9, False, True, False),
                                                  (2, 13, True, True, True),
                                                  (3, 5, False, False, False)):
        n = {1: 16, 2: 40, 3: 48}[d]
        q = cloud(n, d, torch.float64, "cpu", 60 + d, kinds=[i % 3 for i in range(n)],
                  hMean=0.42)
        dom = makeDomain(d, torch.float64, "cpu", periodic=periodic)
        adj = neighbourStructure("csr", q, dom)
        extra = dict(calibrateNormalization=True, n_h=3.0) if calibrate else {}
        pr = props(WarpOperation.Covariance, operationMode=mode, **extra)
        kw = dict(referenceVolumes=0.5 + torch.rand(n, generator=gen,
                                                    dtype=torch.float64)) if volumes else {}

        args = (q, pr, dom)
        kw.update(adjacency=adj, covarianceReturnNumNeighbors=True)
        with torch.no_grad():
            wide, wideCount = warpOperation(*args, **kw)
        assert any(name == "covariance" and cfg.wide and cfg.dim == d
                   for name, cfg in _specialized._BUILT)
        with monkeypatch.context() as m, torch.no_grad():
            _narrow(m)
            narrow, narrowCount = warpOperation(*args, **kw)
        assert narrow.abs().max() > 0 and narrowCount.max() > 0
        assert torch.equal(wide, narrow) and torch.equal(wideCount, narrowCount)


def test_wide_kernels_are_the_cpu_csr_choice():
    """Which configuration a call gets: wide on the CPU with a CSR list, plain only without
    grad-h and volumes and with densities on both sides; never on CUDA or the grid."""
    base = _specialized.Configuration(2, _specialized.wp.float64, 1, 11, 9, True, False)
    config = dict(deviceType="cpu", useAdjacency=True, useGradHTerms=False, useVolume=False,
                  queryHasDensities=True, referenceHasDensities=True)
    assert _specialized._widened(base, config).wide
    assert _specialized._widened(base, config).plain
    assert not _specialized._widened(base, dict(config, useVolume=True)).plain
    assert not _specialized._widened(base, dict(config, useGradHTerms=True)).plain
    assert not _specialized._widened(base, dict(config, queryHasDensities=False)).plain
    assert _specialized._widened(base, dict(config, useVolume=True)).wide
    for other in (dict(config, deviceType="cuda"), dict(config, useAdjacency=False)):
        cfg = _specialized._widened(base, other)
        assert not cfg.wide and not cfg.plain
    assert "_w" in _specialized._widened(base, config).tag


def test_interpolate_specialised_matches_reference():
    """The Interpolate's specialised kernel (wide on the CSR list, per column on the grid)
    against an independent float64 sum f_i = sum_j f_j m_j / rho_j W_ij."""
    import math

    from warpSPHCore import KernelFunctions

    n, d = 40, 2
    q = cloud(n, d, torch.float64, "cpu", 5, hMean=0.42)
    dom = makeDomain(d, torch.float64, "cpu", periodic=False)
    f = torch.randn(n, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x, h, m, rho = q.positions, q.supports, q.masses, q.densities
    want = torch.zeros(n, 5, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            r = float((x[i] - x[j]).norm())
            s = r / float(h[i])
            if s < 1.0:  # Wendland2 (2D, C2) with compact support h_i (Gather)
                w = 7.0 / (math.pi * float(h[i]) ** 2) * (1 - s) ** 4 * (1 + 4 * s)
                want[i] += f[j] * float(m[j] / rho[j]) * w
    pr = props(WarpOperation.Interpolate, kernel=KernelFunctions.Wendland2)
    for traversal in ("csr", "grid"):
        adj = neighbourStructure(traversal, q, dom)
        with torch.no_grad():
            got = warpOperation(q, pr, dom, queryValues=f, adjacency=adj)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert any(name == "interpolate" and cfg.wide for name, cfg in _specialized._BUILT)
    assert any(name == "interpolate" and not cfg.wide for name, cfg in _specialized._BUILT)
