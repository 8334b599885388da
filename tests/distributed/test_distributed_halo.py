"""The halo exchange of `warpSPHCore.distributed` on spawned gloo ranks.

- Bad set-ups raise clear errors on every rank alike, so no rank is left waiting in a
  collective: no process group, ranks that disagree on dtype, a halo wider than a subdomain.
- The host-sync census: one readback per halo build or migration, none per exchange.
- The derivatives of the exchange itself: the adjoint identity over the ranks, reverse,
  forward and second order.
- A rank with no particles, a replicated parameter, and a float32 halo.
"""

from __future__ import annotations

import pytest
import torch

from warpSPHCore.dataTypes.domain import DomainDescription
from warpSPHCore.dataTypes.particleState import ParticleState
from warpSPHCore.distributed import Halo, decompose, globalSum, migrate, ownedSelection, spawn


def _domain(dtype=torch.float64):
    return DomainDescription(torch.zeros(2, dtype=dtype), torch.ones(2, dtype=dtype),
                             [True, True])


def _lattice(n=12, dtype=torch.float64, h=2.5):
    ax = (torch.arange(n, dtype=dtype) + 0.5) / n
    x = torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, 2)
    N = x.shape[0]
    return x, torch.full((N,), h / n, dtype=dtype), torch.full((N,), 1.0 / N, dtype=dtype)


def _ownedLattice(n):
    """A replicated lattice decomposed over the group: (x, m, decomposition, own, owned)."""
    x, h, m = _lattice(n)
    dec = decompose(_domain(), x, h, replicated=True)
    own = ownedSelection(dec, x)
    owned = ParticleState(x[own], h[own], m[own], torch.zeros(int(own.sum()),
                                                                 dtype=torch.int32))
    return x, m, dec, own, owned


def test_no_process_group_raises():
    x, h, _ = _lattice()
    with pytest.raises(RuntimeError, match="process group is not initialised"):
        decompose(_domain(), x, h)
    with pytest.raises(RuntimeError, match="not initialised"):
        globalSum(torch.ones(1))


def _errors(rank, size):
    out = {}
    # 1. rank 1 uses float32: every rank raises the same TypeError
    dtype = torch.float32 if rank == 1 else torch.float64
    x, h, m = _lattice(dtype=dtype)
    try:
        decompose(_domain(dtype), x, h, replicated=True)
        out["dtype"] = None
    except TypeError as e:
        out["dtype"] = str(e)
    # 2. a support wider than a subdomain: half the particles in x < 0.1 put the cut there
    x, h, m = _lattice()
    x[:, 0] = torch.where(torch.arange(x.shape[0]) % 2 == 0, 0.1 * x[:, 0], x[:, 0])
    h = torch.full_like(h, 0.3)
    dec = decompose(_domain(), x, h, cellSize=0.05, replicated=True)
    own = ownedSelection(dec, x)
    owned = ParticleState(x[own], h[own], m[own], torch.zeros(int(own.sum()),
                                                                 dtype=torch.int32))
    try:
        Halo.build(dec, owned)
        out["width"] = None
    except ValueError as e:
        out["width"] = str(e)
    # 3. a migration with mismatched dtypes raises on both ranks
    xm = x[own].to(torch.float32 if rank == 1 else torch.float64)
    try:
        migrate(dec, xm)
        out["migrate"] = None
    except TypeError as e:
        out["migrate"] = str(e)
    return out


def test_bad_setups_raise_on_every_rank():
    results = spawn(_errors, 2)
    for rank, r in enumerate(results):
        for key in ("dtype", "width", "migrate"):  # every error names the rank it came from
            assert f"(rank {rank})" in r[key], r[key]
        assert r["dtype"] and "disagree on dtype" in r["dtype"]
        assert r["width"] and "exceeds rank" in r["width"] and "adjacent ranks" in r["width"]
        assert r["migrate"] and "disagree" in r["migrate"]


def _census(rank, size):
    from warpSPHCore.util.hostSyncCensus import Census

    x, m, dec, own, owned = _ownedLattice(16)
    counts = {}
    c = Census()
    with c.patched():
        halo = Halo.build(dec, owned)
    counts["build"] = c.total
    c = Census()
    with c.patched():
        halo.extend(owned.masses)
        halo.particles(owned)
    counts["exchange"] = c.total
    moved, mass = x[own] + 0.01, m[own]
    c = Census()
    with c.patched():
        migrate(dec, moved, mass)
    counts["migrate"] = c.total
    return counts


def test_host_sync_census():
    for counts in spawn(_census, 2):
        assert counts == {"build": 1, "exchange": 0, "migrate": 1}


def _exchangeDerivatives(rank, size):
    import torch.autograd.forward_ad as fwAD

    _, _, dec, own, owned = _ownedLattice(10)
    halo = Halo.build(dec, owned)
    g = torch.Generator().manual_seed(rank)
    f = torch.rand(int(own.sum()), 2, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.rand(halo.haloCount, 2, generator=g, dtype=torch.float64)

    # the adjoint identity, summed over the ranks: <exchange(f), w> = <f, scatterAdd(w)>
    lhs = float(globalSum((halo.exchange(f) * w).sum().detach()))
    rhs = float(globalSum((f * halo.scatterAdd(w)).sum().detach()))
    # reverse mode of <w, exchange(f)> equals the scatter-add of w (the adjoint)
    grad, = torch.autograd.grad((halo.exchange(f) * w).sum(), f)
    adjoint = halo.scatterAdd(w)
    # forward mode: exchange of a dual is the exchange of the tangent
    t = torch.rand(f.shape, generator=g, dtype=torch.float64)
    with fwAD.dual_level():
        y = halo.exchange(fwAD.make_dual(f.detach(), t))
        tangent = fwAD.unpack_dual(y).tangent
    # second order: the gradient of <grad, v> goes through the adjoint's own adjoint
    v = torch.rand(f.shape, generator=g, dtype=torch.float64)
    gg, = torch.autograd.grad((halo.exchange(f) ** 2 * w).sum(), f, create_graph=True)
    hv, = torch.autograd.grad((gg * v).sum(), f)
    hvRef = halo.scatterAdd(2 * w * halo.exchange(v))
    return dict(identity=abs(lhs - rhs) / abs(lhs), adjoint=float((grad - adjoint).abs().max()),
                forward=float((tangent - halo.exchange(t)).abs().max()),
                second=float((hv - hvRef).abs().max()), halo=halo.haloCount)


def test_exchange_derivatives():
    for r in spawn(_exchangeDerivatives, 2):
        assert r["identity"] < 1e-14 and r["halo"] > 0
        assert r["adjoint"] == 0.0 and r["forward"] == 0.0 and r["second"] < 1e-14


def _emptyRankAndReplicated(rank, size):
    from warpSPHCore import KernelFunctions, OperationProperties, WarpOperation
    from warpSPHCore.distributed import replicated
    from warpSPHCore.operations import warpOperation

    x, h, m = _lattice(12)
    ids = torch.arange(x.shape[0])
    dec = decompose(_domain(), x, h, replicated=True)
    own = ownedSelection(dec, x)
    # every particle moves into rank 0's block: rank 1 ends with none
    lo, hi = dec.bounds(0)
    squeezed = x.clone()
    squeezed[:, 0] = lo[0] + (hi[0] - lo[0]) * x[:, 0]
    xs, ms, hs, ids = migrate(dec, squeezed[own], m[own], h[own], ids=ids[own])
    kinds = torch.zeros(xs.shape[0], dtype=torch.int32)
    scale = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    owned = ParticleState(xs, hs, replicated(scale) * ms, kinds)
    halo = Halo.build(dec, owned)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    rho = warpOperation(owned, props, _domain(), referenceParticles=halo.particles(owned))
    loss = globalSum((rho ** 2).sum())
    loss.backward()
    return dict(count=xs.shape[0], ids=ids, rho=rho.detach(), loss=float(loss),
                grad=float(scale.grad), squeezed=squeezed, m=m, h=h)


def test_empty_rank_and_replicated_parameter():
    from warpSPHCore import KernelFunctions, OperationProperties, WarpOperation
    from warpSPHCore.operations import warpOperation

    results = spawn(_emptyRankAndReplicated, 2)
    assert sorted(r["count"] for r in results) == [0, 144]
    r0 = results[0]
    scale = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    x = r0["squeezed"]
    owned = ParticleState(x, r0["h"], scale * r0["m"], torch.zeros(x.shape[0],
                                                                    dtype=torch.int32))
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    rho = warpOperation(owned, props, _domain())
    loss = (rho ** 2).sum()
    loss.backward()
    out = torch.cat([r["rho"] for r in results])[torch.argsort(torch.cat([r["ids"]
                                                                          for r in results]))]
    assert float((out - rho.detach()).abs().max() / rho.detach().abs().max()) < 1e-13
    for r in results:  # every rank: the whole gradient of the global loss
        assert abs(r["loss"] - float(loss.detach())) < 1e-12 * float(loss.detach())
        assert abs(r["grad"] - float(scale.grad)) < 1e-12 * abs(float(scale.grad))


def _float32Density(rank, size):
    from warpSPHCore import KernelFunctions, OperationProperties, WarpOperation
    from warpSPHCore.operations import warpOperation

    x, h, m = _lattice(14, dtype=torch.float32)
    ids = torch.arange(x.shape[0])
    dom = _domain(torch.float32)
    dec = decompose(dom, x, h, replicated=True)
    own = ownedSelection(dec, x)
    owned = ParticleState(x[own], h[own], m[own], torch.zeros(int(own.sum()),
                                                                 dtype=torch.int32))
    halo = Halo.build(dec, owned, ids=ids[own])
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    rho = warpOperation(owned, props, dom, referenceParticles=halo.particles(owned))
    return dict(ids=ids[own], rho=rho, dtype=str(halo.particles(owned).positions.dtype),
                halo=halo.haloCount)


def test_float32_halo():
    from warpSPHCore import KernelFunctions, OperationProperties, WarpOperation
    from warpSPHCore.operations import warpOperation

    results = spawn(_float32Density, 2)
    x, h, m = _lattice(14, dtype=torch.float32)
    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density)
    ref = warpOperation(ParticleState(x, h, m, torch.zeros(x.shape[0], dtype=torch.int32)),
                        props, _domain(torch.float32))
    out = torch.empty_like(ref)
    for r in results:
        assert r["dtype"] == "torch.float32" and r["halo"] > 0
        out[r["ids"]] = r["rho"]
    assert float((out - ref).abs().max() / ref.abs().max()) < 1e-6


def _savedDecomposition(rank, size, path):
    """Rank 0 saves its decomposition; every rank loads that file and selects its rows."""
    import pickle
    from pathlib import Path

    import torch.distributed as dist

    x, h, _ = _lattice(12)
    dec = decompose(_domain(), x, h, replicated=True)
    if rank == 0:
        Path(path).write_bytes(pickle.dumps(dec))
    dist.barrier()
    loaded = pickle.loads(Path(path).read_bytes())
    own = ownedSelection(loaded, x)
    count = globalSum(own.sum().to(torch.float64).reshape(1))
    return {"rank": loaded.rank, "owned": int(own.sum()), "total": float(count)}


def test_saved_decomposition_is_the_loading_ranks(tmp_path):
    """A decomposition pickled by rank 0 and loaded by every rank selects each rank's own
    rows (it carries no rank): the owned counts add up to the whole set, not twice rank 0's."""
    results = spawn(_savedDecomposition, 2, str(tmp_path / "decomposition.pkl"))
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["total"] == 144.0 for r in results)
    assert sum(r["owned"] for r in results) == 144


def _sizeMismatch(rank, size):
    import dataclasses

    x, h, _ = _lattice(12)
    dec = decompose(_domain(), x, h, replicated=True)
    three = dataclasses.replace(dec, blocks=dec.blocks + (dec.blocks[-1],))
    try:
        ownedSelection(three, x)
        return None
    except ValueError as e:
        return str(e)


def test_decomposition_for_another_group_size_raises():
    for message in spawn(_sizeMismatch, 2):
        assert message is not None and "3 subdomains but the process group has 2 ranks" \
            in message


def _skipsGlobalSum(rank, size):
    if rank == 0:
        return float(globalSum(torch.ones(1, dtype=torch.float64)))
    return None  # rank 1 skips the collective and goes on to the next one


def test_a_skipped_collective_raises_in_debug_mode(monkeypatch):
    """One rank skipping `globalSum` made the others wait until the group's timeout (30
    minutes by default, a silent hang). With ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (the
    troubleshooting page's advice) the mismatch raises at once, naming both ranks' calls."""
    import time

    from torch.multiprocessing import ProcessRaisedException

    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    t0 = time.monotonic()
    with pytest.raises(ProcessRaisedException,
                       match="Detected mismatch between collectives on ranks"):
        spawn(_skipsGlobalSum, 2, timeout=60)
    assert time.monotonic() - t0 < 60


def _skipsThenMax(rank, size):
    from warpSPHCore.distributed import CollectiveMismatch, globalMax, setCollectiveChecks

    setCollectiveChecks(True, timeout=20)
    one = torch.ones(1, dtype=torch.float64)
    try:
        if rank == 0:
            globalSum(one)
        globalMax(one)  # rank 1 skipped the sum: its max meets rank 0's sum
    except CollectiveMismatch as e:
        return str(e)
    return None


def _skipsThenLeaves(rank, size):
    from warpSPHCore.distributed import CollectiveMismatch, setCollectiveChecks

    setCollectiveChecks(True, timeout=15)
    if rank == 1:
        return None  # rank 1 skips the sum and leaves
    try:
        globalSum(torch.ones(1, dtype=torch.float64))
    except CollectiveMismatch as e:
        # the group is broken now: leave without the closing barrier, rank 1 is ended
        import os

        with open(os.environ["WARPSPH_TEST_OUT"], "w") as f:
            f.write(str(e))
        os._exit(0)
    return None


def test_collective_checks_name_the_mismatched_calls():
    """With the library's collective checks on, a rank that skips `globalSum` and calls
    `globalMax` next raises on both ranks at once, each naming both ranks' calls."""
    messages = spawn(_skipsThenMax, 2, timeout=60)
    for rank, message in enumerate(messages):
        assert message is not None
        assert message.startswith(f"rank {rank}: the ranks' library collectives differ")
        assert "rank 0: #1 globalSum (1,)" in message and "rank 1: #1 globalMax (1,)" in message


def test_collective_checks_time_out_naming_the_call(tmp_path, monkeypatch):
    """A rank that skips `globalSum` and leaves: the waiting rank raises after the checks'
    timeout (not the group's 30 minutes), naming its call and its rank."""
    import time

    out = tmp_path / "message.txt"
    monkeypatch.setenv("WARPSPH_TEST_OUT", str(out))
    t0 = time.monotonic()
    try:
        spawn(_skipsThenLeaves, 2, timeout=120)
    except Exception:  # noqa: BLE001 - rank 1 is ended by the broken group: either way
        pass
    assert time.monotonic() - t0 < 60
    message = out.read_text()
    assert message.startswith("rank 0: globalSum (this rank's library collective #1) did not "
                              "meet every rank within 15 s")
