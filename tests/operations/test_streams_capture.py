"""CUDA streams and graph capture (`autograd/stream.py`).

On the CPU: `torchWarpStream("cpu")` is a usable no-op (nestable, results unchanged) and
`torchWarpCapture` raises `RuntimeError` (no CUDA / a CPU scope / no enclosing scope). The
CUDA tests (skipped without a GPU; part of `make gpu-check`) check that every launch follows
torch's current stream (inputs written on a side stream, no synchronisation), that Warp's
current stream inside `torchWarpStream` is torch's, that the forward and backward paths run
under `torch.cuda.set_sync_debug_mode("error")`, and that warmed Density, explicit
`warpOperationJVP`, the Density HVP and an empty Density call replay from a captured graph,
reading positions and kinds updated in place.
"""

from __future__ import annotations

import pytest
import torch
from sph_reference import makeDomain, marginCloud, neighbourStructure, props

from warpSPHCore import ParticleState, ParticleTangentState, WarpOperation
from warpSPHCore.autograd.stream import torchWarpCapture, torchWarpStream
from warpSPHCore.operations import warpOperation, warpOperationHVP, warpOperationJVP

F64 = torch.float64
DENS = WarpOperation.Density
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _case(device, n=16, kinds=None):
    dom = makeDomain(2, F64, device)
    q = marginCloud(n, 2, F64, device, seed=5, domain=dom, kinds=kinds)
    return q, dom, neighbourStructure("csr", q, dom)


# --- CPU ------------------------------------------------------------------------------------


def test_cpu_stream_scope_is_a_no_op():
    q, dom, adj = _case("cpu")
    ref = warpOperation(q, props(DENS), dom, adjacency=adj)
    with torchWarpStream("cpu") as s:
        assert s is None
        with torchWarpStream(torch.device("cpu")) as inner:
            assert inner is None
            out = warpOperation(q, props(DENS), dom, adjacency=adj)
    assert torch.equal(out, ref)


def test_capture_raises_without_cuda_or_scope():
    if torch.cuda.is_available():
        pytest.skip("the CPU-only error paths")
    with pytest.raises(RuntimeError, match="CUDA"):
        with torchWarpCapture(object()):
            pass
    with torchWarpStream("cpu"):
        with pytest.raises(RuntimeError, match="CUDA"):
            with torchWarpCapture(object()):
                pass


def test_stream_scope_rejects_unknown_devices():
    with pytest.raises(ValueError, match="cpu, cuda"):
        with torchWarpStream("meta"):
            pass


# --- CUDA -----------------------------------------------------------------------------------


@cuda
@pytest.mark.cuda
def test_capture_needs_a_cuda_stream_scope():
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="torchWarpStream"):
        with torchWarpCapture(g):
            pass
    with torchWarpStream("cpu"):
        with pytest.raises(RuntimeError, match="CUDA device"):
            with torchWarpCapture(g):
                pass


@cuda
@pytest.mark.cuda
def test_launches_follow_torch_side_stream():
    """Inputs written by torch on a side stream and consumed by Warp launches on that stream
    without any synchronisation: the results equal the default-stream ones; inside
    torchWarpStream, Warp's current stream is torch's."""
    import warp as wp

    q, dom, adj = _case("cuda:0", n=400)
    ref = warpOperation(q, props(DENS), dom, adjacency=adj)
    refJ = warpOperationJVP(q, props(DENS), dom, adjacency=adj,
                            queryTangentState=ParticleTangentState(
                                positions=torch.cos(q.positions)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torchWarpStream("cuda:0") as ws:
        assert ws.cuda_stream == side.cuda_stream
        assert wp.get_device("cuda:0").stream.cuda_stream == side.cuda_stream
        pos = torch.empty_like(q.positions)
        torch.cuda._sleep(1_000_000)  # a long torch kernel before the copy, same stream
        pos.copy_(q.positions)
        p = ParticleState(pos, q.supports, q.masses, q.kinds)
        out = warpOperation(p, props(DENS), dom, adjacency=adj)
        outJ = warpOperationJVP(p, props(DENS), dom, adjacency=adj,
                                queryTangentState=ParticleTangentState(
                                    positions=torch.cos(pos)))
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(out, ref) and torch.equal(outJ, refJ)


@cuda
@pytest.mark.cuda
def test_forward_and_backward_under_sync_debug_error():
    q, dom, adj = _case("cuda:0")
    x = q.positions.clone().requires_grad_(True)
    p = ParticleState(x, q.supports, q.masses, q.kinds)
    warpOperation(p, props(DENS), dom, adjacency=adj).sum().backward()  # warm
    torch.cuda.set_sync_debug_mode("error")
    try:
        rho = warpOperation(p, props(DENS), dom, adjacency=adj)
        rho.sum().backward()
        warpOperationJVP(p, props(DENS), dom, adjacency=adj,
                         queryTangentState=ParticleTangentState(positions=torch.ones_like(x)))
    finally:
        torch.cuda.set_sync_debug_mode("default")


@cuda
@pytest.mark.cuda
def test_capture_replay_density_jvp_hvp_and_empty():
    """Warm, capture Density + explicit JVP + HVP + an empty Density into one graph, update
    positions (a small move inside the frozen CSR neighbourhoods) and kinds in place, replay:
    the outputs equal eager calls on the updated inputs."""
    kinds = [k % 2 for k in range(16)]
    q, dom, adj = _case("cuda:0", kinds=kinds)
    pos = q.positions.clone()
    kind = q.kinds.clone()
    v = torch.cos(3.0 * pos)
    pr = props(DENS, operationMode=13)
    empty = ParticleState(pos[:0], q.supports[:0], q.masses[:0], kind[:0])

    def calls():
        p = ParticleState(pos, q.supports, q.masses, kind)
        return (warpOperation(p, pr, dom, adjacency=adj),
                warpOperationJVP(p, pr, dom, adjacency=adj,
                                 queryTangentState=ParticleTangentState(positions=v)),
                warpOperationHVP(p, pr, dom, v, adjacency=adj),
                warpOperation(empty, pr, dom, referenceParticles=p))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm: module loads and allocator pools before capture
            calls()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torchWarpStream("cuda:0"):
        with torchWarpCapture(g):
            outs = calls()
    pos.add_(1e-4 * torch.sin(pos))
    kind.copy_(1 - kind)
    g.replay()
    torch.cuda.synchronize()
    refs = calls()
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        torch.testing.assert_close(o, r, rtol=1e-12, atol=1e-12)
    assert float(outs[0].abs().max()) > 0
