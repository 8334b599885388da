"""The transport of `warpSPHCore.distributed`: process-group checks, the variable-size row
exchange (`Route`) and its differentiable wrappers, and the differentiable global sum.

A `Route` moves rows of per-particle tensors between the ranks of a process group: rank r
sends the rows ``sendIndex`` of its source tensor (grouped by destination, ``sendCounts``
rows to each rank) and receives ``recvCounts`` rows from each rank, in rank order. The
counts are host integers, read back once when the route is built (`exchangeCounts`), so
moving data along a route never synchronises the host.

Derivatives (the exchange is linear in the rows it moves):

* reverse mode: the adjoint of "gather rows and send" is "send the cotangents back and add
  them into the source rows" (`_Gather.backward` calls `_Scatter`, and the other way round,
  so second derivatives go through as well);
* forward mode: a tangent travels along the same route as its primal (`jvp`).

Every rank must make the same sequence of calls (collectives), which every SPMD program
does; torch runs the backward nodes of identical graphs in the same order on every rank.
"""

from __future__ import annotations

import contextlib
import math
import os

import torch

__all__ = ["Route", "processGroup", "checkConsistent", "consistencyCode", "checkCodes",
           "exchangeCounts", "globalSum", "globalMax", "replicated", "collective",
           "setCollectiveChecks", "CollectiveMismatch", "globalMin"]

_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64, torch.bool)

# the collective checks (`setCollectiveChecks`): off unless WARPSPH_DISTRIBUTED_CHECKS=1
_CHECKS = {"on": os.environ.get("WARPSPH_DISTRIBUTED_CHECKS", "0").lower() in ("1", "true",
                                                                                "yes"),
           "timeout": float(os.environ.get("WARPSPH_DISTRIBUTED_TIMEOUT", "60"))}
_SEQUENCE: dict = {}
_NAME_WORDS = 6  # a call's name travels as 6 int64 words (48 ASCII characters)
_AGREE = 4  # and up to 4 integers that every rank must give alike


class CollectiveMismatch(RuntimeError):
    """The ranks of a group made different library collective calls (collective checks)."""


def setCollectiveChecks(enabled: bool = True, timeout: float = 60.0) -> tuple:
    """Turn the collective checks on or off in this process (every rank must do the same);
    returns the previous ``(enabled, timeout)``.

    With the checks on, every collective of `warpSPHCore.distributed` first meets the other
    ranks: a barrier that waits at most `timeout` seconds (gloo's monitored barrier, which
    names the ranks that did not arrive), then an all-gather of the call's name, its sequence
    number in this process and the sizes every rank must give alike (the columns of an
    exchange, the shape of a sum). A rank that skipped a call, or called another, raises
    `CollectiveMismatch` on every rank that reaches the check, naming each rank's call;
    a rank left waiting raises after `timeout` seconds, naming its call. It costs two small
    collectives per call: a debugging mode. The environment variables
    ``WARPSPH_DISTRIBUTED_CHECKS=1`` and ``WARPSPH_DISTRIBUTED_TIMEOUT=seconds`` set it at
    import (spawned processes inherit them).
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"setCollectiveChecks: timeout={timeout!r}; accepted: seconds > 0")
    previous = (_CHECKS["on"], _CHECKS["timeout"])
    _CHECKS["on"], _CHECKS["timeout"] = bool(enabled), float(timeout)
    return previous


def _encode(name: str) -> list:
    raw = name.encode("ascii", "replace")[:8 * _NAME_WORDS].ljust(8 * _NAME_WORDS, b"\0")
    return [int.from_bytes(raw[8 * k:8 * k + 8], "little", signed=True)
            for k in range(_NAME_WORDS)]


def _decode(words) -> str:
    raw = b"".join(int(w).to_bytes(8, "little", signed=True) for w in words)
    return raw.rstrip(b"\0").decode("ascii", "replace")


def _meet(name: str, group, agree, device) -> None:
    """The collective checks of one call (`setCollectiveChecks`)."""
    import datetime

    import torch.distributed as dist

    rank, size = dist.get_rank(group), dist.get_world_size(group)
    key = id(group)
    seq = _SEQUENCE.get(key, 0) + 1
    _SEQUENCE[key] = seq
    if size == 1:
        return
    agree = [int(a) for a in agree][:_AGREE]
    row = torch.tensor([seq, len(agree)] + agree + [0] * (_AGREE - len(agree))
                       + _encode(name), dtype=torch.int64)
    seconds = _CHECKS["timeout"]
    timeout = datetime.timedelta(seconds=seconds)
    comm = commDevice(group, device)
    gathered = [torch.empty_like(row, device=comm) for _ in range(size)]
    try:
        if dist.get_backend(group) == "gloo":
            dist.monitored_barrier(group=group, timeout=timeout, wait_all_ranks=True)
        work = dist.all_gather(gathered, row.to(comm), group=group, async_op=True)
        work.wait(timeout)
    except RuntimeError as e:
        raise CollectiveMismatch(
            f"rank {rank}: {name} (this rank's library collective #{seq}) did not meet every "
            f"rank within {seconds:g} s: a rank skipped it, is in another collective, or is "
            f"still working before it ({str(e).splitlines()[0] if str(e) else e!r})") from e
    rows = [g.cpu().tolist() for g in gathered]
    if any(r != rows[rank] for r in rows):
        calls = "; ".join(
            f"rank {k}: #{r[0]} {_decode(r[2 + _AGREE:])}"
            + (f" {tuple(r[2:2 + r[1]])}" if r[1] else "") for k, r in enumerate(rows))
        raise CollectiveMismatch(
            f"rank {rank}: the ranks' library collectives differ ({calls}); accepted: every "
            "rank makes the same warpSPHCore.distributed calls in the same order, with the "
            "same columns and shapes")


@contextlib.contextmanager
def collective(name: str, group, agree=(), device=None):
    """The frame of one collective of this package: with the collective checks on
    (`setCollectiveChecks`) the ranks first check that they make the same call; a
    RuntimeError inside (a timeout, a lost peer) is raised again naming the call and the
    rank."""
    if _CHECKS["on"]:
        _meet(name, group, agree, torch.device("cpu") if device is None else device)
    try:
        yield
    except CollectiveMismatch:
        raise
    except RuntimeError as e:
        import torch.distributed as dist

        rank = dist.get_rank(group) if dist.is_initialized() else "?"
        raise RuntimeError(f"rank {rank}: {name} failed in a collective: {e}") from e


def processGroup(where: str, group=None):
    """``(group, rank, size)`` of an initialised process group; RuntimeError otherwise."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError(f"{where}: torch.distributed is not available in this torch build")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{where}: the torch.distributed process group is not initialised; call "
            "torch.distributed.init_process_group('gloo' or 'nccl') first (torchrun sets the "
            "environment it reads), or run the function under warpSPHCore.distributed.spawn")
    return group, dist.get_rank(group), dist.get_world_size(group)


def commDevice(group, device: torch.device) -> torch.device:
    """The device collectives of `group` take: the data's device, or the CPU for gloo with
    CUDA data (gloo's all-to-all is CPU-only)."""
    import torch.distributed as dist

    if device.type != "cpu" and dist.get_backend(group) == "gloo":
        return torch.device("cpu")
    return device


def checkConsistent(where: str, group, dtype: torch.dtype, device: torch.device, dim: int):
    """Raise the same TypeError on every rank when the ranks disagree on the float dtype, the
    device type or the dimension (one small all-gather; no host readback beyond it)."""
    import torch.distributed as dist

    size = dist.get_world_size(group)
    code = torch.tensor([_DTYPES.index(dtype) if dtype in _DTYPES else -1,
                         0 if device.type == "cpu" else 1, dim], dtype=torch.int64)
    comm = commDevice(group, device)
    gathered = [torch.empty_like(code, device=comm) for _ in range(size)]
    with collective(f"{where} (agreement)", group, (3,), comm):
        dist.all_gather(gathered, code.to(comm), group=group)
    rows = torch.stack(gathered).cpu().tolist()
    if any(r != rows[0] for r in rows):
        names = [f"rank {k}: dtype {_DTYPES[r[0]] if r[0] >= 0 else '?'}, "
                 f"{'cpu' if r[1] == 0 else 'cuda'}, d = {r[2]}" for k, r in enumerate(rows)]
        raise TypeError(f"{where} (rank {dist.get_rank(group)}): the ranks disagree on "
                        f"dtype, device type or dimension ({'; '.join(names)}); accepted: one float dtype, one device type "
                        "and one d on every rank")


def _code(dtype: torch.dtype, device: torch.device, dim: int) -> float:
    kind = _DTYPES.index(dtype) if dtype in _DTYPES else 9
    return float(kind * 100 + (0 if device.type == "cpu" else 10) + dim)


def consistencyCode(dtype: torch.dtype, device: torch.device, dim: int, comm) -> torch.Tensor:
    """float64 ``[2]`` (code, -code) of this rank's dtype, device type and dimension: after an
    all-reduce MAX the ranks agree exactly when the two read back as (c, -c) (`checkCodes`);
    rides on a reduction the caller makes anyway, so it costs no extra readback."""
    c = _code(dtype, device, dim)
    return torch.tensor([c, -c], dtype=torch.float64, device=comm)


def checkCodes(where: str, values, dtype: torch.dtype, device: torch.device, dim: int):
    """Raise the same TypeError on every rank when the all-reduced (max code, max -code)
    `values` show that the ranks disagree (`consistencyCode`)."""
    hi, lo = values[0], -values[1]
    if hi != lo:
        raise TypeError(f"{where}: the ranks disagree on dtype, device type or dimension (this "
                        f"rank: {dtype}, {device.type}, d = {dim}); accepted: one float dtype, "
                        "one device type and one d on every rank")


def exchangeCounts(sendCounts: torch.Tensor, group, extra: torch.Tensor | None = None,
                   where: str = "exchangeCounts"):
    """All-to-all of the per-destination row counts ``[P]`` (int64); returns host lists
    ``(send, recv)`` and, when given, the host values of `extra` (float64 ``[k]``), all from
    one readback. `where` names the call in errors."""
    import torch.distributed as dist

    device = sendCounts.device
    comm = commDevice(group, device)
    send = sendCounts.to(comm, torch.int64)
    if send.shape[0] == 1:  # a group of one: what it sends it receives
        recv = send
    else:
        recv = torch.empty_like(send)
        with collective(f"{where} (counts)", group, (), comm):
            dist.all_to_all_single(recv, send, group=group)
    parts = [send.double(), recv.double()]
    if extra is not None:
        parts.append(extra.to(comm, torch.float64).reshape(-1))
    host = torch.cat(parts).tolist()  # the one host readback of the exchange
    P = send.shape[0]
    sendHost = [int(v) for v in host[:P]]
    recvHost = [int(v) for v in host[P:2 * P]]
    return sendHost, recvHost, host[2 * P:]


class Route:
    """A fixed row exchange (module docstring).

    Args:
        sendIndex: int64 ``[S]`` source rows, grouped by destination rank in rank order.
        sendCounts: host ints ``[P]``, rows to each rank (sum S).
        recvCounts: host ints ``[P]``, rows from each rank.
        sourceRows: the number of source rows (the shape of the reverse result).
        group: the process group (None: the default group).
        name: what the route serves, in errors (a halo, a migration).
    """

    def __init__(self, sendIndex, sendCounts, recvCounts, sourceRows: int, group=None,
                 name: str = "Route"):
        self.name = name
        self.sendIndex = sendIndex
        self.sendCounts = list(sendCounts)
        self.recvCounts = list(recvCounts)
        self.sourceRows = int(sourceRows)
        self.group = group

    @property
    def sent(self) -> int:
        return sum(self.sendCounts)

    @property
    def received(self) -> int:
        return sum(self.recvCounts)

    def _alltoall(self, rows: torch.Tensor, sendCounts, recvCounts) -> torch.Tensor:
        import torch.distributed as dist

        if len(sendCounts) == 1:  # a group of one: the rows stay (no collective)
            return rows.clone()
        device = rows.device
        comm = commDevice(self.group, device)
        flat = rows.reshape(rows.shape[0], math.prod(rows.shape[1:])).contiguous().to(comm)
        out = torch.empty((sum(recvCounts), flat.shape[1]), dtype=flat.dtype, device=comm)
        with collective(f"{self.name} exchange", self.group,
                        (flat.shape[1], _DTYPES.index(flat.dtype) if flat.dtype in _DTYPES
                         else -1), comm):
            dist.all_to_all_single(out, flat, output_split_sizes=list(recvCounts),
                                   input_split_sizes=list(sendCounts), group=self.group)
        return out.to(device).reshape((out.shape[0],) + tuple(rows.shape[1:]))

    def forwardRows(self, source: torch.Tensor) -> torch.Tensor:
        """The received rows ``[R, *S]`` of `source` ``[sourceRows, *S]`` (no autograd)."""
        rows = source.index_select(0, self.sendIndex)
        return self._alltoall(rows, self.sendCounts, self.recvCounts)

    def reverseRows(self, received: torch.Tensor) -> torch.Tensor:
        """The adjoint of `forwardRows`: rows ``[R, *S]`` sent back and summed into
        ``[sourceRows, *S]`` (no autograd)."""
        back = self._alltoall(received, self.recvCounts, self.sendCounts)
        out = torch.zeros((self.sourceRows,) + tuple(received.shape[1:]), dtype=back.dtype,
                          device=back.device)
        return out.index_add_(0, self.sendIndex, back)

    def gather(self, *tensors):
        """The received rows of each tensor, differentiable (reverse and forward mode).
        Float tensors of one dtype travel together in one exchange; other dtypes (kinds,
        ids) go one exchange each, without autograd."""
        out = [None] * len(tensors)
        groups: dict = {}
        for k, t in enumerate(tensors):
            if t is None:
                continue
            if t.shape[0] != self.sourceRows:
                raise ValueError(f"Route.gather: tensor {k} has {t.shape[0]} rows; accepted: "
                                 f"{self.sourceRows} (the source rows of the route)")
            groups.setdefault(t.dtype, []).append(k)
        for dtype, ks in groups.items():
            if not dtype.is_floating_point:
                for k in ks:
                    out[k] = self.forwardRows(tensors[k])
                continue
            flats = [tensors[k].reshape(self.sourceRows, math.prod(tensors[k].shape[1:]))
                     for k in ks]
            widths = [f.shape[1] for f in flats]
            packed = flats[0] if len(flats) == 1 else torch.cat(flats, dim=1)
            moved = _Gather.apply(packed, self)
            for k, part in zip(ks, moved.split(widths, dim=1)):
                shape = (part.shape[0],) + tuple(tensors[k].shape[1:])
                out[k] = part.reshape(shape) if len(ks) == 1 else part.contiguous().reshape(shape)
        return out[0] if len(tensors) == 1 else tuple(out)

    def scatterAdd(self, received: torch.Tensor) -> torch.Tensor:
        """Rows ``[R, *S]`` on the receiving side sent back to their sources and summed
        ``[sourceRows, *S]`` (the adjoint of `gather`), differentiable."""
        shape = tuple(received.shape[1:])
        out = _Scatter.apply(received.reshape(received.shape[0], math.prod(shape)), self)
        return out.reshape((self.sourceRows,) + shape)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, source, route):
        ctx.route = route
        return route.forwardRows(source)

    @staticmethod
    def backward(ctx, grad):
        return _Scatter.apply(grad, ctx.route), None

    @staticmethod
    def jvp(ctx, tangent, _route):
        return ctx.route.forwardRows(tangent)


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, received, route):
        ctx.route = route
        return route.reverseRows(received)

    @staticmethod
    def backward(ctx, grad):
        return _Gather.apply(grad, ctx.route), None

    @staticmethod
    def jvp(ctx, tangent, _route):
        return ctx.route.reverseRows(tangent)


def _allReduce(t: torch.Tensor, group, op, name: str) -> torch.Tensor:
    import torch.distributed as dist

    comm = commDevice(group, t.device)
    buf = t.detach().clone().to(comm)
    with collective(name, group, tuple(buf.shape)[:_AGREE], comm):
        dist.all_reduce(buf, op=op, group=group)
    return buf.to(t.device)


class _GlobalSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        import torch.distributed as dist

        ctx.group = group
        return _allReduce(x, group, dist.ReduceOp.SUM, "globalSum")

    @staticmethod
    def backward(ctx, grad):
        # every rank holds the same global value and seeds the same cotangent: the
        # derivative of that one value w.r.t. this rank's addend is the cotangent itself
        return grad, None

    @staticmethod
    def jvp(ctx, tangent, _group):
        import torch.distributed as dist

        return _allReduce(tangent, ctx.group, dist.ReduceOp.SUM, "globalSum (tangent)")


def globalSum(x: torch.Tensor, group=None) -> torch.Tensor:
    """The sum of `x` over the ranks (element-wise), on every rank; differentiable.

    Reverse mode differentiates the one replicated global value: call ``backward()`` on it
    on every rank (every rank seeds the same cotangent) and each rank gets the gradient of
    the global value w.r.t. its own addend, not the rank-count multiple a plain all-reduce
    adjoint would give. Forward mode sums the tangents over the ranks.
    """
    processGroup("globalSum", group)
    return _GlobalSum.apply(x, group)


class _Replicated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        return _allReduce(grad, ctx.group, dist.ReduceOp.SUM, "replicated (gradient)"), None

    @staticmethod
    def jvp(ctx, tangent, _group):
        return tangent


def replicated(x: torch.Tensor, group=None) -> torch.Tensor:
    """Use a tensor that every rank holds identically (a model parameter: a viscosity, a
    force amplitude) in a distributed computation: the identity forward, and in reverse mode
    the gradient summed over the ranks, so every rank's ``x.grad`` is the gradient of the
    global loss (as DistributedDataParallel does for its parameters). Without it each rank
    gets only its own share."""
    processGroup("replicated", group)
    return _Replicated.apply(x, group)


class _GlobalMin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, name):
        import torch.distributed as dist

        ctx.group, ctx.name = group, name
        m = _allReduce(x, group, dist.ReduceOp.MIN, name)
        ctx.save_for_backward(x, m)
        ctx.save_for_forward(x, m)
        return m

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        # every rank uses the minimum in its own computations: their cotangents add up, and
        # go to the rank (the entries) that holds it
        x, m = ctx.saved_tensors
        total = _allReduce(grad, ctx.group, dist.ReduceOp.SUM, f"{ctx.name} (gradient)")
        return torch.where(x == m, total, torch.zeros_like(total)), None, None

    @staticmethod
    def jvp(ctx, tangent, _group, _name):
        import torch.distributed as dist

        x, m = ctx.saved_tensors
        held = torch.where(x == m, tangent, torch.zeros_like(tangent))
        return _allReduce(held, ctx.group, dist.ReduceOp.SUM, f"{ctx.name} (tangent)")


def globalMin(x: torch.Tensor, group=None, name: str = "globalMin") -> torch.Tensor:
    """The element-wise minimum of `x` over the ranks, on every rank; differentiable: each
    rank uses the minimum in computations of its own, so in reverse mode the ranks'
    cotangents are summed and go to the rank holding the minimum (ties: to each holder), and
    in forward mode the holder's tangent is the minimum's. `name` names the call in
    errors."""
    processGroup("globalMin", group)
    return _GlobalMin.apply(x, group, name)


def globalMax(x: torch.Tensor, group=None) -> torch.Tensor:
    """The element-wise maximum of `x` over the ranks (no derivative)."""
    import torch.distributed as dist

    processGroup("globalMax", group)
    return _allReduce(x, group, dist.ReduceOp.MAX, "globalMax")
