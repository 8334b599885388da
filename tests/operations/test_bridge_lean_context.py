"""What a grad-requiring bridged call keeps until backward (docs/autograd.md, "What a
grad-requiring call keeps until backward"): only tensors saved with ``save_for_backward``
and tensor-free metadata. The tape is recorded in backward from the saved tensors.

Consequences checked here:

* under non-reentrant gradient checkpointing, a tensor made inside the segment dies after
  the segment's forward pass (the seed's design kept it alive through the Warp views, the
  tape and the forward-mode closure on ``ctx``), and the gradients equal the plain ones
  bitwise;
* the graph node holds no tensor, Warp array or forward-mode closure outside the saved
  tensors;
* an in-place write, between forward and backward, to an input that was pruned out of
  ``apply`` (here the masses and the neighbour list, which need no gradient) fails torch's
  version check instead of differentiating against the changed values;
* the gradients of both backward routes (Warp's adjoint recorded on the tape, and the
  Gradient's hand-written reverse kernel) are unchanged by a second backward of a retained
  graph;
* a grad-requiring call's forward values are bitwise those of the same call without grad.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import warp as wp
from sph_reference import cloud, makeDomain, marginCloud, neighbourStructure, props
from torch.utils.checkpoint import checkpoint

from warpSPHCore import KernelFunctions, ParticleState, SupportScheme, WarpOperation
from warpSPHCore.operations import warpOperation

F64 = torch.float64


def _setup(device, n=24):
    dom = makeDomain(2, F64, device)
    q = marginCloud(n, 2, F64, device, seed=811, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    return dom, q, adj


def _density(x, q, dom, adj):
    return warpOperation(ParticleState(x, q.supports, q.masses, q.kinds), props(
        WarpOperation.Density), dom, adjacency=adj)


def _gradient(x, f, q, dom, adj):
    state = ParticleState(x, q.supports, q.masses, q.kinds, q.densities)
    return warpOperation(state, props(WarpOperation.Gradient), dom, queryValues=f,
                         adjacency=adj)


def _op(device, op):
    """(the positions leaf, `op`'s output): the Density, or the Gradient of a field."""
    dom, q, adj = _setup(device)
    x = q.positions.clone().requires_grad_(True)
    f = torch.linspace(-1.0, 1.0, q.positions.shape[0], dtype=F64, device=device)
    return x, _density(x, q, dom, adj) if op == "Density" else _gradient(x, f, q, dom, adj)


def test_checkpointed_segment_frees_its_tensors(device):
    dom, q, adj = _setup(device)
    w = torch.linspace(0.5, 1.5, q.positions.shape[0], dtype=F64, device=device)
    made = []

    def segment(x):
        shifted = x * 1.0  # made inside the segment: checkpointing must be able to free it
        made.append(weakref.ref(shifted))
        rho = _density(shifted, q, dom, adj)
        return _gradient(shifted, rho, q, dom, adj)

    x = q.positions.clone().requires_grad_(True)
    out = checkpoint(segment, x, use_reentrant=False)
    gc.collect()
    assert made[0]() is None, "a tensor of the checkpointed segment outlived its forward"
    (g,) = torch.autograd.grad((out.reshape(len(w), -1) * w[:, None]).sum(), x)

    xp = q.positions.clone().requires_grad_(True)
    plain = segment(xp)
    (gp,) = torch.autograd.grad((plain.reshape(len(w), -1) * w[:, None]).sum(), xp)
    assert torch.equal(out, plain)
    assert torch.equal(g, gp)


def _bridgeNode(node):
    """The bridge's graph node under `node` (an operator may reshape the bridge's output)."""
    while not hasattr(node, "kernel_name"):
        (node, _), *_ = node.next_functions
    return node


def _reachable(node):
    """Every object reachable from the graph node's attributes (through containers and
    function closures), not through the saved tensors."""
    seen, stack, found = set(), list(vars(node).values()), []
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(o))
        found.append(o)
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif callable(o) and hasattr(o, "__closure__"):
            stack.extend(c.cell_contents for c in (o.__closure__ or ()))
            stack.extend(vars(o).values())
    return found


@pytest.mark.parametrize("op", ["Density", "Gradient"])
def test_graph_node_holds_no_tensor(device, op):
    """Besides its saved tensors, a node keeps only the forward-mode rule that a second
    derivative needs (its call's state); under saved-tensor hooks (checkpointing) not even
    that."""
    x, out = _op(device, op)
    node = _bridgeNode(out.grad_fn)
    assert node.jvp_fn is None  # dropped after apply by bridgeApply
    assert node.double_fn is not None  # kept for a differentiable backward
    rule = node.double_fn
    node.double_fn = None
    held = [o for o in _reachable(node) if isinstance(o, (torch.Tensor, wp.array))]
    node.double_fn = rule
    assert held == [], f"the graph node holds {[type(o).__name__ for o in held]}"
    assert any(t is x for t in node.saved_tensors)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        x2, out2 = _op(device, op)
    node2 = _bridgeNode(out2.grad_fn)
    assert node2.double_fn is None and "saved-tensor hooks" in node2.double_reason
    held = [o for o in _reachable(node2) if isinstance(o, (torch.Tensor, wp.array))]
    assert held == [], f"the graph node holds {[type(o).__name__ for o in held]}"


@pytest.mark.parametrize("what", ["masses", "neighbours"])
def test_inplace_write_to_a_pruned_input_fails_the_version_check(device, what):
    dom, q, adj = _setup(device)
    m = q.masses.clone()
    state = ParticleState(q.positions.clone().requires_grad_(True), q.supports, m, q.kinds)
    out = warpOperation(state, props(WarpOperation.Density), dom, adjacency=adj)
    if what == "masses":
        m.mul_(2.0)
    else:
        adj.j.add_(0)  # bumps the version counter only
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("op", ["Density", "Gradient"])
def test_second_backward_of_a_retained_graph(device, op):
    x, out = _op(device, op)
    seed = torch.linspace(0.2, 1.2, out.numel(), dtype=F64, device=x.device).view_as(out)
    (first,) = torch.autograd.grad(out, x, seed, retain_graph=True)
    (second,) = torch.autograd.grad(out, x, seed)
    assert torch.equal(first, second)
    assert first.abs().sum() > 0


def test_forward_values_with_and_without_grad_are_bitwise_equal(device):
    """A grad-requiring call's forward pass runs the specialised kernel of the same call
    without grad (the tape, recorded in backward, differentiates the generic overload): a
    3D quartic-spline SuperSymmetric Density with kinds (mode 13) on a grid."""
    kinds = [(k % 3) for k in range(24)]  # fluid, boundary and ghost particles
    q = cloud(24, 3, F64, device, 3, kinds=kinds, hMean=0.42)
    dom = makeDomain(3, F64, device, periodic=True)
    adj = neighbourStructure("grid", q, dom)
    pr = props(WarpOperation.Density, KernelFunctions.QuarticSpline,
               supportMode=SupportScheme.SuperSymmetric, operationMode=13)

    def call(x):
        return warpOperation(ParticleState(x, q.supports, q.masses, q.kinds), pr, dom,
                             adjacency=adj)

    plain = call(q.positions.clone())
    tracked = call(q.positions.clone().requires_grad_(True))
    assert tracked.requires_grad and torch.equal(plain, tracked.detach())
