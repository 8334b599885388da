"""Double backward: every operator's backward is itself differentiable (``create_graph=True``).

The bridge records the first-order gradients as a differentiable function of the cotangents
and the inputs, whose own backward is the operator's forward-mode rule (J c for the
cotangents) and reverse mode through that rule (grad_x <u, J(x) c> for the inputs). Checked
with float64 `torch.autograd.gradgradcheck` (second derivatives against central differences of
the first-order gradients, and the gradient with respect to the cotangents) for every operator
of the registry on CSR lists and on the grid, with respect to positions, supports, masses,
densities and values; the correction states (volumes, grad-h Omegas, CRK, renormalization)
where the operator reads them; kinds; a periodic domain; float32 against float64; the Density HVP route against
``torch.autograd.functional.hvp``; ``torch.autograd.functional.jvp`` against the dual route;
and a clear error where the second derivative is not available (under gradient checkpointing).
"""

from __future__ import annotations

import pytest
import torch
from jvp_helpers import assertClose
from sph_reference import (
    correctionInputs,
    correctionKwargs,
    makeDomain,
    marginCloud,
    neighbourStructure,
    props,
    randomCorrectionTensors,
)

from warpSPHCore import (
    GradientScheme,
    LaplacianScheme,
    OperationDirection,
    ParticleState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.operations import warpOperation
from warpSPHCore.operationsHVP import warpOperationHVP
from warpSPHCore.operators import OPERATORS, ValueInputs

F64, F32 = torch.float64, torch.float32
KMS = SupportScheme.KernelMeanSymmetric
GG = dict(eps=1e-6, atol=1e-6, rtol=1e-5, nondet_tol=1e-12)
N, D = 9, 2


def _fieldShape(op, d):
    """A field shape the operator accepts: scalar, vector, or the Momentum's (p, rho, V, mu,
    u, u~) columns."""
    entry = OPERATORS[op]
    for shape in ((), (d,), (4 + 2 * d,)):
        try:
            entry.outputShape(shape, d, props(op))
        except ValueError:
            continue
        if op in (WarpOperation.Divergence, WarpOperation.Curl) and shape == ():
            continue
        return shape
    raise AssertionError(f"{op.name}: no field shape")


def _values(op, n, d, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    shape = _fieldShape(op, d)
    if op == WarpOperation.Momentum:  # positive densities, volumes, viscosities
        r = lambda *s: torch.rand(*s, generator=g, dtype=F64)  # noqa: E731
        cols = [r(n, 1) - 0.5, 0.8 + 0.4 * r(n, 1), 0.5 + r(n, 1), 0.1 + 0.2 * r(n, 1),
                r(n, d) - 0.5, r(n, d) - 0.5]
        return torch.cat(cols, dim=1).to(dtype)
    return torch.randn((n, *shape), generator=g, dtype=F64).to(dtype)


OPS = [op for op in OPERATORS]


def _call(op, q, dom, adj, x, h, m, rho, f, pr=None, **kw):
    pr = pr if pr is not None else props(op, supportMode=KMS)
    state = ParticleState(x, h, m, q.kinds, rho)
    if OPERATORS[op].values is ValueInputs.NONE:
        out = warpOperation(state, pr, dom, adjacency=adj, **kw)
    else:
        out = warpOperation(state, pr, dom, adjacency=adj, queryValues=f, **kw)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_gradgradcheck_every_operator(device, op, traversal):
    """Positions, supports, masses, densities and values, one operator, one traversal (on
    every device the run has)."""
    dom = makeDomain(D, F64, device)
    q = marginCloud(N, D, F64, device, seed=11, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    f = _values(op, N, D, 3).to(device)
    hasValues = OPERATORS[op].values is not ValueInputs.NONE

    def fn(x, h, m, rho, *fv):
        return _call(op, q, dom, adj, x, h, m, rho, fv[0] if fv else None)

    inputs = [q.positions, q.supports, q.masses, q.densities] + ([f] if hasValues else [])
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    assert torch.autograd.gradgradcheck(fn, leaves, **GG)


def _correctionSets(op):
    """(states whose second derivatives are checked, states whose calls must raise): of the
    states the operator reads, those its forward-mode rule covers and those it rejects."""
    entry = OPERATORS[op]
    use, scope = entry.corrections, entry.jvp
    covered, rejected = [], []
    if use.volumes.applied and "reference volumes" in scope.geometry:
        covered.append("volumes")
    for c in ("gradH", "crk", "renorm"):
        if getattr(use, c).applied:
            (rejected if c in scope.rejectedStates else covered).append(c)
    return tuple(covered), tuple(rejected)


_CORRECTED = [op for op in OPS if any(_correctionSets(op))]


def _correctionCall(op, corr, seed):
    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=seed, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    c = correctionInputs(corr, randomCorrectionTensors(N, N, D, "cpu", 5))
    f = _values(op, N, D, 4)
    hasValues = OPERATORS[op].values is not ValueInputs.NONE
    kwOptions = {}
    if "gradientMode" in [o.name for o in OPERATORS[op].options]:
        kwOptions["gradientMode"] = GradientScheme.Difference
    pr = props(op, supportMode=KMS, **kwOptions)

    def fn(x, *rest):
        fv = rest[0] if hasValues else None
        tensors = rest[1:] if hasValues else rest
        return _call(op, q, dom, adj, x, q.supports, q.masses, q.densities, fv, pr=pr,
                     **correctionKwargs(corr, tensors))

    inputs = [q.positions] + ([f] if hasValues else []) + list(c)
    return fn, tuple(t.detach().clone().requires_grad_(True) for t in inputs)


@pytest.mark.parametrize("op", _CORRECTED, ids=[op.name for op in _CORRECTED])
def test_gradgradcheck_correction_states(op):
    """The correction states the operator reads and its forward-mode rule covers (volumes,
    grad-h Omegas, CRK A/B/gradA/gradB, renormalization L), with the positions and values; a state outside
    that rule makes the second derivative raise, naming it."""
    covered, rejected = _correctionSets(op)
    if covered:
        fn, leaves = _correctionCall(op, covered, 12)
        assert torch.autograd.gradgradcheck(fn, leaves, **GG)
    for state in rejected:
        fn, leaves = _correctionCall(op, (state,), 13)
        out = fn(*leaves)
        (g,) = torch.autograd.grad((out ** 2).sum(), leaves[0], create_graph=True)
        label = {"crk": "CRK", "renorm": "renormalization", "gradH": "grad-h"}[state]
        with pytest.raises(NotImplementedError, match=f"double backward.*{label}"):
            torch.autograd.grad(g.sum(), leaves[0])


@pytest.mark.parametrize("op", [WarpOperation.Density, WarpOperation.Gradient,
                                WarpOperation.Laplacian, WarpOperation.Momentum],
                         ids=lambda o: o.name)
def test_gradgradcheck_kinds_and_periodic(op):
    """Fluid and boundary kinds under a kind-selecting interaction mode, in a domain periodic
    on both axes (pairs across the seams)."""
    dom = makeDomain(D, F64, "cpu", periodic=True)
    kinds = [0, 1] * (N // 2) + [0] * (N % 2)
    q = marginCloud(N, D, F64, "cpu", seed=21, domain=dom, kinds=kinds)
    adj = neighbourStructure("csr", q, dom)
    f = _values(op, N, D, 6)
    hasValues = OPERATORS[op].values is not ValueInputs.NONE
    pr = props(op, supportMode=KMS, operationMode=OperationDirection.AllToFluid)

    def fn(x, *fv):
        return _call(op, q, dom, adj, x, q.supports, q.masses, q.densities,
                     fv[0] if fv else None, pr=pr)

    inputs = [q.positions] + ([f] if hasValues else [])
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    assert torch.autograd.gradgradcheck(fn, leaves, **GG)


def _hessianVector(op, dtype, scheme=None):
    """H v of sum(w * op(x)^2) w.r.t. the positions, by double backward."""
    dom = makeDomain(D, dtype, "cpu")
    q = marginCloud(N, D, dtype, "cpu", seed=31, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = _values(op, N, D, 7, dtype)
    pr = props(op, supportMode=KMS, **({"laplacianMode": scheme} if scheme else {}))
    g = torch.Generator().manual_seed(8)
    v = torch.randn(q.positions.shape, generator=g, dtype=F64).to(dtype)
    x = q.positions.detach().clone().requires_grad_(True)
    out = _call(op, q, dom, adj, x, q.supports, q.masses, q.densities, f, pr=pr)
    w = torch.linspace(0.5, 1.5, out.numel(), dtype=dtype).reshape(out.shape)
    (gx,) = torch.autograd.grad((w * out ** 2).sum(), x, create_graph=True)
    (hv,) = torch.autograd.grad((gx * v).sum(), x)
    return hv


@pytest.mark.parametrize("op", [WarpOperation.Density, WarpOperation.Gradient,
                                WarpOperation.Laplacian],
                         ids=lambda o: o.name)
def test_double_backward_float32_matches_float64(op):
    scheme = LaplacianScheme.Brookshaw if op == WarpOperation.Laplacian else None
    h64 = _hessianVector(op, F64, scheme)
    h32 = _hessianVector(op, F32, scheme)
    assert h32.dtype == F32
    assertClose(h32.double(), h64, 2e-4, 2e-4 * float(h64.abs().max()), op.name)
    assert float(h64.abs().max()) > 0


@pytest.mark.parametrize("traversal", ["csr", "grid"])
def test_density_hvp_routes_agree(traversal):
    """The dedicated Density HVP (`warpOperationHVP`: d/de of phi(x + e v, y + e v), phi =
    grad_x sum(rho(x; y)) for the queries x and the references y, here one set) equals the
    same product by reverse over reverse: ``torch.autograd.functional.vhp`` of sum(rho(x; y))
    along (v, v), whose query block is (H_xx + H_xy) v."""
    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=41, domain=dom)
    pr = props(WarpOperation.Density, supportMode=KMS)
    adj = neighbourStructure(traversal, q, dom, q)
    v = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(9), dtype=F64)

    def loss(a, b):
        return warpOperation(ParticleState(a, q.supports, q.masses, q.kinds), pr, dom,
                             adjacency=adj,
                             referenceParticles=ParticleState(b, q.supports, q.masses,
                                                              q.kinds)).sum()

    x = q.positions.detach().clone()
    _, (hv, _) = torch.autograd.functional.vhp(loss, (x, x.clone()), (v, v))
    # the HVP kernel reads CSR lists: the grid's double backward is held to the same figure
    ref = warpOperationHVP(q, pr, dom, v, adjacency=neighbourStructure("csr", q, dom),
                           tangentReferencePositions=v)
    assertClose(hv, ref, 1e-11, 1e-12, "HVP routes")
    assert float(hv.abs().max()) > 0


def test_functional_jvp_matches_dual_route():
    """``torch.autograd.functional.jvp`` (a backward differentiated with respect to its
    cotangents) equals forward mode through dual tensors."""
    import torch.autograd.forward_ad as fwAD

    op = WarpOperation.Gradient
    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=51, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = _values(op, N, D, 10)
    v = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(2), dtype=F64)

    def fn(x):
        return _call(op, q, dom, adj, x, q.supports, q.masses, q.densities, f)

    _, jv = torch.autograd.functional.jvp(fn, q.positions.detach().clone(), v)
    with fwAD.dual_level():
        t = fwAD.unpack_dual(fn(fwAD.make_dual(q.positions, v))).tangent
    assertClose(jv, t, 1e-12, 1e-13, "functional.jvp vs dual")
    assert float(t.abs().max()) > 0


def test_functional_hvp_raises():
    """``torch.autograd.functional.hvp`` differentiates a second-order backward with respect
    to its cotangents (the double-backward trick, a third-order graph): the forward-mode
    kernels have no derivative rule of their own, so it raises and says what works instead
    (never zeros)."""
    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=51, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(WarpOperation.Density, supportMode=KMS)
    v = torch.randn(q.positions.shape, generator=torch.Generator().manual_seed(2), dtype=F64)

    def fn(x):
        rho = warpOperation(ParticleState(x, q.supports, q.masses, q.kinds), pr, dom,
                            adjacency=adj)
        return (rho ** 2).sum()

    with pytest.raises(NotImplementedError, match="third derivative.*vhp"):
        torch.autograd.functional.hvp(fn, q.positions.detach().clone(), v)


def test_double_backward_under_checkpointing_raises():
    """A launch recorded under saved-tensor hooks keeps no forward-mode rule: its second
    derivative raises and says why (never zeros)."""
    from torch.utils.checkpoint import checkpoint

    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=61, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    pr = props(WarpOperation.Density, supportMode=KMS)
    x = q.positions.detach().clone().requires_grad_(True)

    def seg(p):
        return warpOperation(ParticleState(p, q.supports, q.masses, q.kinds), pr, dom,
                             adjacency=adj)

    rho = checkpoint(seg, x, use_reentrant=False)
    with pytest.raises(NotImplementedError, match="checkpointing"):
        torch.autograd.grad((rho ** 2).sum(), x, create_graph=True)


@pytest.mark.parametrize("op", [WarpOperation.Density, WarpOperation.Gradient,
                                WarpOperation.Momentum], ids=lambda o: o.name)
def test_gradgradcheck_specialised_kernels(op, specialized):
    """With specialised kernels on, the first-order gradients come from the hand-written
    reverse kernels and the second derivatives from the specialised forward-mode kernels;
    both agree with central differences."""
    from sph_reference import reverseRoute

    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=71, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = _values(op, N, D, 12)
    hasValues = OPERATORS[op].values is not ValueInputs.NONE

    def fn(x, *fv):
        return _call(op, q, dom, adj, x, q.supports, q.masses, q.densities,
                     fv[0] if fv else None)

    inputs = [q.positions] + ([f] if hasValues else [])
    leaves = tuple(t.detach().clone().requires_grad_(True) for t in inputs)
    assert reverseRoute(fn(*leaves)) is not None  # the hand-written reverse kernel ran
    assert torch.autograd.gradgradcheck(fn, leaves, **GG)


@pytest.mark.parametrize("traversal", ["csr", "grid"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_double_backward_without_host_sync(op, traversal):
    """Forward, a gradient with ``create_graph=True`` and its gradient: no readback (the
    forward-mode rule runs with the liveness known from what requires grad)."""
    from warpSPHCore.util import hostSyncCensus as census

    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=81, domain=dom)
    adj = neighbourStructure(traversal, q, dom)
    f = _values(op, N, D, 13)

    def run():
        x = q.positions.detach().clone().requires_grad_(True)
        out = _call(op, q, dom, adj, x, q.supports, q.masses, q.densities, f)
        (g,) = torch.autograd.grad((out ** 2).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad((g ** 2).sum(), x)
        return h

    run()  # warm-up: compile outside the census
    with census.census() as c:
        h = run()
    assert c.total == 0, c.hits
    assert float(h.abs().max()) > 0


def test_gradgradcheck_curl_3d():
    """The Curl in 3D (G x c per component), positions and values, CSR."""
    dom = makeDomain(3, F64, "cpu")
    q = marginCloud(8, 3, F64, "cpu", seed=91, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = torch.randn(8, 3, generator=torch.Generator().manual_seed(92), dtype=F64)
    pr = props(WarpOperation.Curl, supportMode=KMS)

    def fn(x, v):
        return warpOperation(ParticleState(x, q.supports, q.masses, q.kinds, q.densities), pr,
                             dom, queryValues=v, adjacency=adj)

    leaves = (q.positions.detach().clone().requires_grad_(True), f.requires_grad_(True))
    assert torch.autograd.gradgradcheck(fn, leaves, **GG)


@pytest.mark.parametrize("dot", [False, True], ids=["default", "dot"])
def test_gradgradcheck_divergence_modes(dot):
    """The Divergence with consistentDivergence (and in dot mode): positions, densities and
    values."""
    dom = makeDomain(D, F64, "cpu")
    q = marginCloud(N, D, F64, "cpu", seed=93, domain=dom)
    adj = neighbourStructure("csr", q, dom)
    f = torch.randn(N, D, generator=torch.Generator().manual_seed(94), dtype=F64)
    pr = props(WarpOperation.Divergence, supportMode=KMS, divergenceDotMode=dot,
               gradientMode=GradientScheme.Difference)

    def fn(x, rho, v):
        return warpOperation(ParticleState(x, q.supports, q.masses, q.kinds, rho), pr, dom,
                             queryValues=v, adjacency=adj, consistentDivergence=True)

    leaves = tuple(t.detach().clone().requires_grad_(True)
                   for t in (q.positions, q.densities, f))
    assert torch.autograd.gradgradcheck(fn, leaves, **GG)
