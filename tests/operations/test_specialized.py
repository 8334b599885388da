"""Per-configuration specialised kernels (`operators._specialized`) against the
generic kernels they stand in for, over a covering subset of the configuration product:
every smoothing kernel, support scheme, dimension, scalar type, traversal, kind-mode class,
calibration and periodicity appears at least once with each specialised operator (Density,
Gradient forward, Gradient reverse). The generic kernels are themselves checked against the
independent float64 references elsewhere (test_density.py, test_gradient.py, gradchecks);
here the two routes must agree to rounding (float64: 1e-12 relative to the largest entry)
and the specialised route must really have been taken."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import warp as wp
from sph_reference import cloud, makeDomain, neighbourStructure, props

from warpSPHCore import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    ParticleState,
    ParticleTangentState,
    SupportScheme,
    WarpOperation,
)
from warpSPHCore.autograd.specialize import setSpecialization, specializationEnabled
from warpSPHCore.operations import warpOperation
from warpSPHCore.operationsJVP import warpOperationJVP
from warpSPHCore.operators import _specialized

pytestmark = pytest.mark.usefixtures("specialized")  # conftest: on for this module

KERNELS = list(KernelFunctions)
SUPPORTS = list(SupportScheme)
MODES = (9, 0, 1, 5, 13, 3)  # default, all, fluid-only, boundary-queries, non-ghost, ...
SCHEMES = list(GradientScheme)
TRAVERSALS = ("csr", "grid")


def _cases(n: int, salt: int):
    """n configurations rotating every option with a different period (covering design)."""
    out = []
    for c in range(n):
        out.append(dict(
            kernel=KERNELS[c % len(KERNELS)],
            support=SUPPORTS[(c + salt) % len(SUPPORTS)],
            d=1 + (c + salt) % 3,
            dtype=torch.float64 if (c + salt) % 2 == 0 else torch.float32,
            traversal=TRAVERSALS[(c // 2 + salt) % 2],
            mode=MODES[(c + 2 * salt) % len(MODES)],
            # lattice calibration is undefined for the Viscosity and Adhesion kernels
            calibrate=(c + salt) % 4 == 1 and KERNELS[c % len(KERNELS)] not in (
                KernelFunctions.ViscosityKernel, KernelFunctions.AdhesionKernel),
            periodic=(c + salt) % 3 != 1,
            scheme=SCHEMES[(c + salt) % len(SCHEMES)],
        ))
    return out


DENSITY_CASES = _cases(len(KERNELS), 0)
GRADIENT_CASES = _cases(len(KERNELS), 1)
REVERSE_CASES = _cases(6, 2)
JVP_CASES = _cases(6, 3)
LAPLACIAN_CASES = _cases(len(KERNELS), 4)
LAPLACIAN_SCHEMES = (LaplacianScheme.Brookshaw, LaplacianScheme.Dot, LaplacianScheme.Default)
MOMENTUM_CASES = _cases(6, 5)


def _ids(cases):
    return [f"{c['kernel'].name}-{c['support'].name}-{c['d']}d-"
            f"{str(c['dtype'])[6:]}-{c['traversal']}-m{c['mode']}"
            f"{'-cal' if c['calibrate'] else ''}{'-per' if c['periodic'] else ''}"
            for c in cases]


@pytest.fixture(scope="module", autouse=True)
def _compileCoveringDesign():
    """Build every configuration's kernels of this module up front and compile them with
    Warp's parallel module loading (one thread per core), instead of one at a time in the
    tests (a cold kernel cache)."""
    import os

    import warp as wp

    mods = []
    for cases, builders in ((DENSITY_CASES, (_specialized._densityKernel,)),
                            (GRADIENT_CASES, (_specialized._gradientKernel,)),
                            (REVERSE_CASES, (_specialized._gradientPair,)),
                            (JVP_CASES, (_specialized._gradientJVPKernel,)),
                            (LAPLACIAN_CASES, (_specialized._laplacianKernel,)),
                            (MOMENTUM_CASES, (_specialized._momentumKernel,))):
        for c in cases:
            scalar = wp.float64 if c["dtype"] == torch.float64 else wp.float32
            cfg = _specialized.Configuration(c["d"], scalar, int(c["kernel"]),
                                             int(c["support"]), c["mode"],
                                             c["traversal"] == "csr", c["calibrate"])
            # on the CPU a CSR call of the row operators takes the wide kernel, with the
            # plain coefficients (the clouds carry densities, no grad-h or volumes)
            wide = dict(wide=True, plain=True) if c["traversal"] == "csr" else {}
            for build in builders:
                scheme = int(c["scheme"]) if build in (_specialized._gradientKernel,
                                                       _specialized._gradientPair) else 0
                cfgB = dataclasses.replace(cfg, gradientScheme=scheme)
                if build is _specialized._gradientKernel:
                    cfgB = dataclasses.replace(cfgB, **wide)
                if build is _specialized._laplacianKernel:
                    cfgB = dataclasses.replace(cfg, laplacianScheme=int(_laplacianScheme(c)),
                                               **wide)
                    if wide:
                        cfgB = dataclasses.replace(cfgB, gradientScheme=int(c["scheme"]))
                mods.append(build(cfgB).module)
    wp.force_load(device="cpu", modules=list({m.name: m for m in mods}.values()),
                  max_workers=max(1, os.cpu_count() or 1))
    yield


def test_covering_design_covers_every_option():
    """Each option value appears with each specialised operator at least once."""
    for cases in (DENSITY_CASES, GRADIENT_CASES):
        assert {c["kernel"] for c in cases} == set(KERNELS)
        assert {c["support"] for c in cases} == set(SUPPORTS)
        assert {c["d"] for c in cases} == {1, 2, 3}
        assert {c["dtype"] for c in cases} == {torch.float32, torch.float64}
        assert {c["traversal"] for c in cases} == set(TRAVERSALS)
        assert {c["mode"] for c in cases} == set(MODES)
        assert {c["calibrate"] for c in cases} == {True, False}, cases
        assert {c["periodic"] for c in cases} == {True, False}
    assert {c["scheme"] for c in GRADIENT_CASES} == set(SCHEMES)
    assert {c["d"] for c in JVP_CASES} == {1, 2, 3}
    assert {c["traversal"] for c in JVP_CASES} == set(TRAVERSALS)
    assert {_laplacianScheme(c) for c in LAPLACIAN_CASES} == set(LAPLACIAN_SCHEMES)
    assert {c["d"] for c in LAPLACIAN_CASES} == {1, 2, 3}
    assert {c["support"] for c in LAPLACIAN_CASES} == set(SUPPORTS)
    assert {c["d"] for c in MOMENTUM_CASES} == {1, 2, 3}
    assert {c["dtype"] for c in MOMENTUM_CASES} == {torch.float32, torch.float64}
    assert {c["traversal"] for c in MOMENTUM_CASES} == set(TRAVERSALS)
    assert {c["d"] for c in CONTRACTION_CASES} == {1, 2, 3}
    assert {c["traversal"] for c in CONTRACTION_CASES} == set(TRAVERSALS)
    assert {c["scheme"] for c in CONTRACTION_CASES} == set(SCHEMES)
    assert {c["dtype"] for c in CONTRACTION_CASES} == {torch.float32, torch.float64}


def _setup(c, device, n=60, seed=3):
    kinds = [(k % 3) for k in range(n)]  # fluid, boundary and ghost particles
    # supports below a quarter of the box: the minimum image needs h < L/2 for every scheme
    q = cloud(n, c["d"], c["dtype"], device, seed, kinds=kinds, hMean=0.42)
    dom = makeDomain(c["d"], c["dtype"], device, periodic=c["periodic"])
    adj = neighbourStructure(c["traversal"], q, dom)
    return q, dom, adj


def _bothRoutes(fn):
    """fn() with the specialised kernels, then with the generic ones (gate restored)."""
    previous = setSpecialization(True)
    try:
        a = fn()
        setSpecialization(False)
        b = fn()
    finally:
        setSpecialization(previous)
    return a, b


def _assertClose(a, b, dtype, nonzero=True):
    # the Viscosity kernel is singular at r = 0: both routes give the same inf / NaN entries
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    assert torch.equal(a[torch.isinf(a)], b[torch.isinf(b)])
    a, b = a[torch.isfinite(a)], b[torch.isfinite(b)]
    if nonzero:
        assert b.abs().max() > 0
    scale = float(b.abs().max().clamp_min(1e-300))
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert float((a - b).abs().max()) <= tol * scale, (float((a - b).abs().max()), scale)


def _bridgeNode(t):
    """The `StateAwareWarpFunction` node behind `t` (through views)."""
    node = t.grad_fn
    while not hasattr(node, "reverse_route"):
        node = node.next_functions[0][0]
    return node


def _calProps(op, c, **kw):
    extra = dict(calibrateNormalization=True, n_h=3.0) if c["calibrate"] else {}
    return props(op, kernel=c["kernel"], supportMode=c["support"], operationMode=c["mode"],
                 **extra, **kw)


@pytest.mark.parametrize("c", DENSITY_CASES, ids=_ids(DENSITY_CASES))
def test_density_specialized_matches_generic(device, c):
    q, dom, adj = _setup(c, device)
    pr = _calProps(WarpOperation.Density, c)
    before = _specialized._densityKernel.cache_info().currsize
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pr, dom, adjacency=adj))
    assert _specialized._densityKernel.cache_info().currsize >= before
    assert any(name == "density" and cfg.kernel == int(c["kernel"])
               and cfg.supportMode == int(c["support"]) and cfg.dim == c["d"]
               and cfg.operationMode == c["mode"]
               for name, cfg in _specialized._BUILT)
    _assertClose(a, b, c["dtype"])


@pytest.mark.parametrize("c", GRADIENT_CASES, ids=_ids(GRADIENT_CASES))
def test_gradient_specialized_matches_generic(device, c):
    q, dom, adj = _setup(c, device)
    pr = _calProps(WarpOperation.Gradient, c, gradientMode=c["scheme"])
    gen = torch.Generator().manual_seed(5)
    f = torch.randn(q.positions.shape[0], 2, generator=gen, dtype=torch.float64).to(
        dtype=c["dtype"], device=device)
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pr, dom, queryValues=f, adjacency=adj))
    # the forward kernel of this configuration, its gradient scheme fixed at code generation
    assert any(name == "gradient" and cfg.kernel == int(c["kernel"])
               and cfg.gradientScheme == int(c["scheme"]) for name, cfg in _specialized._BUILT)
    # the Viscosity kernel's gradient is NaN at r = 0, so its self pair poisons every row
    _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)


@pytest.mark.parametrize("c", REVERSE_CASES, ids=_ids(REVERSE_CASES))
def test_gradient_reverse_specialized_matches_generic(device, c):
    """Forward + hand-written reverse kernel, both specialised, against both generic: the
    gradients w.r.t. positions, supports, masses, densities and values."""
    q0, dom, adj = _setup(c, device)
    pr = _calProps(WarpOperation.Gradient, c, gradientMode=c["scheme"])
    n = q0.positions.shape[0]
    gen = torch.Generator().manual_seed(7)
    f0 = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype=c["dtype"], device=device)
    seed = torch.randn(n, c["d"], generator=gen, dtype=torch.float64).to(dtype=c["dtype"],
                                                                          device=device)

    def run():
        leaves = [t.detach().clone().requires_grad_(True)
                  for t in (q0.positions, q0.supports, q0.masses, q0.densities, f0)]
        q = ParticleState(leaves[0], leaves[1], leaves[2], q0.kinds, leaves[3])
        out = warpOperation(q, pr, dom, queryValues=leaves[4], adjacency=adj)
        assert _bridgeNode(out).reverse_route is not None  # the hand-written reverse kernel
        out.backward(seed)
        return [out.detach()] + [t.grad for t in leaves]

    a, b = _bothRoutes(run)
    assert any(name == "gradientVJP" and cfg.kernel == int(c["kernel"])
               for name, cfg in _specialized._BUILT)
    # the forward and reverse kernels of a differentiated call share one Warp module
    scalar = wp.float64 if c["dtype"] == torch.float64 else wp.float32
    cfg = _specialized.Configuration(c["d"], scalar, int(c["kernel"]), int(c["support"]),
                                     c["mode"], c["traversal"] == "csr", c["calibrate"],
                                     gradientScheme=int(c["scheme"]))
    pairModule = _specialized._gradientPair(cfg).module
    assert pairModule.name.startswith("warpSPHCore_gradientAndVJP_")
    assert {k.split("_")[1] for k in pairModule.kernels} == {"gradient", "gradientVJP"}
    reverseCfg = dataclasses.replace(cfg, gradientScheme=0)
    assert _specialized._PAIRED_VJP[reverseCfg].module.name.startswith(
        "warpSPHCore_gradientAndVJP_")
    for x, y in zip(a, b):
        _assertClose(x, y, c["dtype"])


@pytest.mark.parametrize("c", JVP_CASES, ids=_ids(JVP_CASES))
def test_gradient_jvp_specialized_matches_generic(device, c):
    """The Gradient's forward-mode kernel specialised on the configuration, against the
    generic one: position tangents alone (the kernel without a coefficient tangent), then
    with value, mass and density tangents (the coefficient's tangent); a support tangent
    takes the generic kernel."""
    q, dom, adj = _setup(c, device)
    pr = _calProps(WarpOperation.Gradient, c, gradientMode=c["scheme"])
    n = q.positions.shape[0]
    gen = torch.Generator().manual_seed(11)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype=c["dtype"],
                                                                          device=device)

    f, v, tf, tm, trho = rnd(n), rnd(n, c["d"]), rnd(n), rnd(n), rnd(n)
    before = {(name, cfg) for name, cfg in _specialized._BUILT}
    cases = ((ParticleTangentState(positions=v), None, None),
             (ParticleTangentState(positions=v, densities=trho),
              ParticleTangentState(positions=v, masses=tm, densities=trho), tf))
    for tq, tr, values in cases:
        a, b = _bothRoutes(lambda tq=tq, tr=tr, tv=values: warpOperationJVP(
            q, pr, dom, queryValues=f, tangentQueryValues=tv, queryTangentState=tq,
            referenceTangentState=tr, adjacency=adj))
        _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    assert any(name == "gradientJVP" and cfg.kernel == int(c["kernel"])
               and cfg.dim == c["d"] for name, cfg in _specialized._BUILT)
    # position tangents alone take the kernel without a coefficient tangent (the gradient
    # scheme fixed); with value, mass or density tangents the one that carries dc_ij
    assert any(name == "gradientJVP" and not cfg.coefficientTangent
               and cfg.gradientScheme == int(c["scheme"]) for name, cfg in _specialized._BUILT)
    assert any(name == "gradientJVP" and cfg.coefficientTangent and cfg.dim == c["d"]
               for name, cfg in _specialized._BUILT)
    built = {(name, cfg) for name, cfg in _specialized._BUILT}
    # a support tangent: the specialised kernel declines (no new configuration is built)
    withSupports = ParticleTangentState(positions=v, supports=rnd(n))
    a, b = _bothRoutes(lambda: warpOperationJVP(q, pr, dom, queryValues=f,
                                                queryTangentState=withSupports,
                                                adjacency=adj))
    _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    assert {(name, cfg) for name, cfg in _specialized._BUILT} == built
    assert before <= built


def _laplacianScheme(c):
    return LAPLACIAN_SCHEMES[KERNELS.index(c["kernel"]) % len(LAPLACIAN_SCHEMES)]


@pytest.mark.parametrize("c", LAPLACIAN_CASES, ids=_ids(LAPLACIAN_CASES))
def test_laplacian_specialized_matches_generic(device, c):
    """The Laplacian's forward kernel specialised on the configuration and the geometric
    scheme, against the generic one, for a scalar field and a d-vector field (Dot: the
    vector only); Naive and positiveDivergence stay generic."""
    q, dom, adj = _setup(c, device)
    lap = _laplacianScheme(c)
    pr = _calProps(WarpOperation.Laplacian, c, gradientMode=c["scheme"], laplacianMode=lap)
    n = q.positions.shape[0]
    gen = torch.Generator().manual_seed(13)
    fields = [torch.randn(n, c["d"], generator=gen, dtype=torch.float64)]
    if lap != LaplacianScheme.Dot or c["d"] == 1:
        fields.append(torch.randn(n, generator=gen, dtype=torch.float64))
    for f in fields:
        f = f.to(dtype=c["dtype"], device=device)
        with torch.no_grad():
            a, b = _bothRoutes(lambda f=f: warpOperation(q, pr, dom, queryValues=f,
                                                         adjacency=adj))
        _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    assert any(name == "laplacian" and cfg.kernel == int(c["kernel"])
               and cfg.laplacianScheme == int(lap) for name, cfg in _specialized._BUILT)


@pytest.mark.parametrize("c", MOMENTUM_CASES, ids=_ids(MOMENTUM_CASES))
def test_momentum_specialized_matches_generic(device, c):
    """The Momentum's forward kernel specialised on the configuration against the generic
    one (both rows, F and B)."""
    q, dom, adj = _setup(c, device)
    pr = _calProps(WarpOperation.Momentum, c)
    n, d = q.positions.shape
    gen = torch.Generator().manual_seed(17)
    cols = [torch.randn(n, 1, generator=gen, dtype=torch.float64),
            0.5 + torch.rand(n, 3, generator=gen, dtype=torch.float64),
            torch.randn(n, 2 * d, generator=gen, dtype=torch.float64)]
    f = torch.cat(cols, dim=1).to(dtype=c["dtype"], device=device)
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pr, dom, queryValues=f, adjacency=adj))
    _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    assert any(name == "momentum" and cfg.kernel == int(c["kernel"])
               for name, cfg in _specialized._BUILT)


def test_laplacian_naive_and_positive_divergence_stay_generic():
    config = {"kernelFunction": 1, "supportMode": 11, "operationMode": 9, "dim": 2,
              "scalar": None, "useAdjacency": True, "calibrateNormalization": False,
              "useCRK": False, "useGradientRenormalization": False,
              "positiveDivergenceMode": False, "laplacianMode": 1}
    assert _specialized.laplacianSpecialized(config) is None
    config.update(laplacianMode=2, positiveDivergenceMode=True)
    assert _specialized.laplacianSpecialized(config) is None
    config.update(positiveDivergenceMode=False, useCRK=True)
    assert _specialized.laplacianSpecialized(config) is None


def test_gradient_reverse_specialized_gradcheck(device):
    """float64 gradcheck through the specialised forward and reverse kernels (periodic grid,
    MeanSymmetric supports, Difference scheme, fluid-only mode)."""
    c = dict(kernel=KernelFunctions.QuinticSpline, support=SupportScheme.MeanSymmetric, d=2,
             dtype=torch.float64, traversal="grid", mode=1, calibrate=False, periodic=True,
             scheme=GradientScheme.Difference)
    q0, dom, adj = _setup(c, device, n=16)
    pr = _calProps(WarpOperation.Gradient, c, gradientMode=c["scheme"])
    assert specializationEnabled()
    gen = torch.Generator().manual_seed(9)
    f0 = torch.randn(16, generator=gen, dtype=torch.float64).to(device=device)

    def fn(x, h, f):
        q = ParticleState(x, h, q0.masses, q0.kinds, q0.densities)
        return warpOperation(q, pr, dom, queryValues=f, adjacency=adj)

    inputs = (q0.positions.detach().clone().requires_grad_(True),
              q0.supports.detach().clone().requires_grad_(True), f0.requires_grad_(True))
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_crk_gradients_are_not_specialised(device):
    """CRK corrects G_ij through W_ij and four states: the Gradient's specialised kernel
    declines it (the call then runs the generic kernel's own overload); renormalization is
    a configuration flag of the specialised kernel."""
    config = {"kernelFunction": 1, "supportMode": 11, "operationMode": 9, "dim": 2,
              "scalar": wp.float64, "useAdjacency": True, "calibrateNormalization": False,
              "useCRK": True, "useGradientRenormalization": False, "gradientMode": 1}
    assert _specialized.gradientSpecialized(config) is None
    config["useCRK"] = False
    config["useGradientRenormalization"] = True
    assert _specialized.gradientSpecialized(config) is not None


RENORM_CASES = _cases(2, 6)  # each case compiles two kernels on a cold cache


@pytest.mark.parametrize("c", RENORM_CASES, ids=_ids(RENORM_CASES))
def test_renormalized_gradient_and_laplacian_specialized_match_generic(device, c):
    """G_ij <- L_i G_ij in the specialised Gradient and Brookshaw Laplacian forward kernels
    (the consistent Laplacian's two calls; Dot and Default share the flag), against the
    generic ones."""
    q, dom, adj = _setup(c, device)
    n, d = q.positions.shape
    gen = torch.Generator().manual_seed(23)
    L = (torch.eye(d, dtype=torch.float64) + 0.3 * torch.randn(n, d, d, generator=gen,
                                                                dtype=torch.float64))
    L = L.to(dtype=c["dtype"], device=device)
    f = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype=c["dtype"], device=device)
    pg = _calProps(WarpOperation.Gradient, c, gradientMode=c["scheme"])
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pg, dom, queryValues=f, adjacency=adj,
                                                 renormalizationState=L))
    _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    pl = _calProps(WarpOperation.Laplacian, c, gradientMode=c["scheme"],
                   laplacianMode=LaplacianScheme.Brookshaw)
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pl, dom, queryValues=f, adjacency=adj,
                                                 renormalizationState=L))
    _assertClose(a, b, c["dtype"], nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
    assert any(name == "gradient" and cfg.renormalize for name, cfg in _specialized._BUILT)
    assert any(name == "laplacian" and cfg.renormalize for name, cfg in _specialized._BUILT)
    if d > 1:  # the Divergence and the Curl of a vector field share the flag
        v = torch.randn(n, d, generator=gen, dtype=torch.float64).to(dtype=c["dtype"],
                                                                      device=device)
        for op, name in ((WarpOperation.Divergence, "divergence"), (WarpOperation.Curl, "curl")):
            pc = _calProps(op, c, gradientMode=c["scheme"])
            with torch.no_grad():
                a, b = _bothRoutes(lambda pc=pc: warpOperation(
                    q, pc, dom, queryValues=v, adjacency=adj, renormalizationState=L))
            _assertClose(a, b, c["dtype"],
                         nonzero=c["kernel"] != KernelFunctions.ViscosityKernel)
            assert any(k == name and cfg.renormalize for k, cfg in _specialized._BUILT)


CONTRACTION_CASES = _cases(8, 7)


@pytest.mark.parametrize("c", CONTRACTION_CASES, ids=_ids(CONTRACTION_CASES))
def test_divergence_and_curl_specialized_match_generic(device, c):
    """The Divergence's forward kernel (both contraction axes, consistent volumes on and
    off, reference volumes, a vector and a matrix field) and the Curl's (2D and 3D), each
    specialised on the configuration, against the generic kernels."""
    q, dom, adj = _setup(c, device)
    n, d = q.positions.shape
    gen = torch.Generator().manual_seed(29)

    def field(*shape):
        return torch.randn(n, *shape, generator=gen, dtype=torch.float64).to(
            dtype=c["dtype"], device=device)

    vector = field() if d == 1 else field(d)
    fields = [vector] if d == 1 else [vector, field(d, d)]
    vol = (0.05 + 0.1 * torch.rand(n, generator=gen, dtype=torch.float64)).to(
        dtype=c["dtype"], device=device)
    nonzero = c["kernel"] != KernelFunctions.ViscosityKernel
    for dot in (False, True):
        pr = _calProps(WarpOperation.Divergence, c, gradientMode=c["scheme"],
                       divergenceDotMode=dot)
        for f in fields:
            for consistent, volumes in ((False, None), (True, None), (False, vol)):
                with torch.no_grad():
                    a, b = _bothRoutes(lambda f=f, cd=consistent, v=volumes, pr=pr: warpOperation(
                        q, pr, dom, queryValues=f, adjacency=adj, consistentDivergence=cd,
                        referenceVolumes=v))
                _assertClose(a, b, c["dtype"], nonzero=nonzero)
    # grad-h: f_i / Omega_i and f_j / Omega_j through the coefficient's run-time tests
    from warpSPHCore import GradHState

    omegas = (0.8 + 0.4 * torch.rand(n, generator=gen, dtype=torch.float64)).to(
        dtype=c["dtype"], device=device)
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pr, dom, queryValues=vector, adjacency=adj,
                                                 gradHState=GradHState(omegas)))
    _assertClose(a, b, c["dtype"], nonzero=nonzero)
    assert any(name == "divergenceDot" and cfg.dim == d for name, cfg in _specialized._BUILT)
    assert any(name == "divergence" and cfg.dim == d for name, cfg in _specialized._BUILT)
    if d == 1:
        return
    pr = _calProps(WarpOperation.Curl, c, gradientMode=c["scheme"])
    for f in fields:
        with torch.no_grad():
            a, b = _bothRoutes(lambda f=f: warpOperation(q, pr, dom, queryValues=f,
                                                         adjacency=adj))
        _assertClose(a, b, c["dtype"], nonzero=nonzero)
    assert any(name == "curl" and cfg.dim == d and cfg.kernel == int(c["kernel"])
               for name, cfg in _specialized._BUILT)


def test_unknown_kernel_or_support_falls_back():
    config = {"kernelFunction": 99, "supportMode": 11, "operationMode": 9, "dim": 2,
              "scalar": None, "useAdjacency": True, "calibrateNormalization": False}
    assert _specialized.configurationOf(config) is None
    config.update(kernelFunction=0, supportMode=77)
    assert _specialized.configurationOf(config) is None


def test_configuration_tags_are_distinct():
    """Kernel names (compile notices, Warp module names) differ between configurations."""
    import warp as wp

    tags = set()
    for k, s, m, t, cal, d, sc in itertools.product((0, 30), (11, 16), (9, 0), (True, False),
                                                     (True, False), (1, 3),
                                                     (wp.float32, wp.float64)):
        tags.add(_specialized.Configuration(d, sc, k, s, m, t, cal).tag)
    assert len(tags) == 2 ** 7


@pytest.mark.parametrize("op", [WarpOperation.Density, WarpOperation.Gradient],
                         ids=lambda o: o.name)
def test_specialized_kernels_skip_and_report_bad_indices(device, op):
    """A neighbour index outside the reference set is skipped by the specialised kernels
    (forward and reverse) and recorded in the error buffer under the operator's name, as by
    the generic ones (reliability/test_neighbor_list_errors.py)."""
    from warpSPHCore import AdjacencyList, NeighborListError, checkErrors
    from warpSPHCore.dataTypes.adjacency import trustedConstruction

    c = dict(kernel=KernelFunctions.Wendland2, support=SupportScheme.Gather, d=2,
             dtype=torch.float64, traversal="csr", mode=9, calibrate=False, periodic=False,
             scheme=GradientScheme.Naive)
    p, dom, adj = _setup(c, device, n=30)
    e0 = int(torch.nonzero(adj.i != adj.j)[0, 0])
    with trustedConstruction():
        bad = AdjacencyList(adj.i.clone(), adj.j.clone(), adj.numNeighbors.clone(),
                            adj.edgeOffsets.clone(), adj.numRows, adj.numCols)
    bad.j[e0] = 1000
    keep = torch.ones(adj.numEdges, dtype=torch.bool, device=adj.device)
    keep[e0] = False
    counts = adj.numNeighbors.clone()
    counts[int(adj.i[e0])] -= 1
    offsets = (torch.cumsum(counts.to(torch.int64), 0) - counts).to(torch.int32)
    ref = AdjacencyList(adj.i[keep].clone(), adj.j[keep].clone(), counts, offsets,
                        adj.numRows, adj.numCols)
    pr = props(op)
    f = torch.randn(30, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(
        device)
    kw = {} if op == WarpOperation.Density else {"queryValues": f}

    def forward(a):
        with torch.no_grad():  # the specialised forward kernel
            return warpOperation(p, pr, dom, adjacency=a, **kw)

    outBad = forward(bad)
    with pytest.raises(NeighborListError, match=rf"j\[{e0}\] = 1000"):
        checkErrors()
    torch.testing.assert_close(outBad, forward(ref), rtol=1e-14, atol=0.0)
    checkErrors()
    if op == WarpOperation.Gradient:  # forward + the specialised reverse kernel
        def grads(a):
            x = p.positions.detach().clone().requires_grad_(True)
            q = ParticleState(x, p.supports, p.masses, p.kinds, p.densities)
            out = warpOperation(q, pr, dom, adjacency=a, **kw)
            assert _bridgeNode(out).reverse_route is not None
            out.backward(torch.ones_like(out))
            return x.grad

        gBad = grads(bad)
        with pytest.raises(NeighborListError, match=rf"Gradient.*j\[{e0}\] = 1000"):
            checkErrors()
        torch.testing.assert_close(gBad, grads(ref), rtol=1e-12, atol=1e-14)
        checkErrors()
    name = "density" if op == WarpOperation.Density else "gradient"
    assert any(n == name for n, _ in _specialized._BUILT)


@pytest.mark.parametrize("op", [WarpOperation.Laplacian], ids=lambda o: o.name)
def test_other_operators_use_their_concrete_overload(device, op):
    """An untaped call of an operator without a specialised kernel runs its generic kernel's
    own (d, dtype) overload, compiled alone without adjoint code
    (`autograd.specialize.concreteOverload`): the same code, so the same result."""
    import warp as wp

    from warpSPHCore.autograd.specialize import concreteOverload
    from warpSPHCore.operators import operatorEntry

    c = dict(kernel=KernelFunctions.Wendland4, support=SupportScheme.Gather, d=2,
             dtype=torch.float64, traversal="csr", mode=9, calibrate=False, periodic=True,
             scheme=GradientScheme.Naive)
    q, dom, adj = _setup(c, device)
    shape = (q.positions.shape[0], 2) if op == WarpOperation.Divergence else \
        (q.positions.shape[0],)
    f = torch.randn(*shape, generator=torch.Generator().manual_seed(4),
                    dtype=torch.float64).to(device)
    # the Laplacian's Naive scheme (the analytic kernel Laplacian) has no specialised kernel
    extra = {"laplacianMode": LaplacianScheme.Naive} if op == WarpOperation.Laplacian else {}
    pr = props(op, kernel=c["kernel"], **extra)
    with torch.no_grad():
        a, b = _bothRoutes(lambda: warpOperation(q, pr, dom, queryValues=f, adjacency=adj))
    assert b.abs().max() > 0
    torch.testing.assert_close(a, b, rtol=1e-14, atol=0.0)
    generic = operatorEntry(op).spec.kernel
    k = concreteOverload(generic, {"dim": 2, "scalar": wp.float64})
    assert k is not generic and not k.is_generic
    assert k.module.name.startswith(f"warpSPHCore_{op.name}_")
    assert k.options.get("enable_backward", k.module.options["enable_backward"]) is False
    # the same object for the same (d, dtype), another one for another
    assert concreteOverload(generic, {"dim": 2, "scalar": wp.float64}) is k
    assert concreteOverload(generic, {"dim": 3, "scalar": wp.float32}) is not k


def test_taped_launches_run_their_overload_with_its_adjoint(device, monkeypatch):
    """A call that Warp's tape differentiates (here a Density with the hand-written reverse
    kernels switched off; a CRK Gradient is not eligible for them) records the generic
    kernel's own (d, dtype) overload compiled alone with its adjoint
    (`autograd.specialize.tapedKernel`): the same gradients as the generic module, and a
    float64 gradcheck through it. Its forward pass runs the specialised kernel (the values
    of the same call without grad), equal to the generic kernel's to rounding."""
    import warp as wp

    from warpSPHCore.autograd.specialize import tapedKernel
    from warpSPHCore.operators.density import densityKernel

    c = dict(kernel=KernelFunctions.QuarticSpline, support=SupportScheme.SuperSymmetric, d=3,
             dtype=torch.float64, traversal="grid", mode=13, calibrate=False, periodic=True,
             scheme=GradientScheme.Naive)
    q0, dom, adj = _setup(c, device, n=24)
    pr = _calProps(WarpOperation.Density, c)
    monkeypatch.setenv("WARPSPHCORE_DISABLE_REVERSE_KERNELS", "1")

    def run():
        x = q0.positions.detach().clone().requires_grad_(True)
        h = q0.supports.detach().clone().requires_grad_(True)
        out = warpOperation(ParticleState(x, h, q0.masses, q0.kinds), pr, dom, adjacency=adj)
        out.backward(torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype,
                                    device=out.device))
        return out.detach(), x.grad, h.grad

    a, b = _bothRoutes(run)
    torch.testing.assert_close(a[0], b[0], rtol=1e-14, atol=1e-14 * float(b[0].abs().max()))
    for x, y in zip(a[1:], b[1:]):
        torch.testing.assert_close(x, y, rtol=1e-14, atol=1e-300)
    k = tapedKernel({"dim": 3, "scalar": wp.float64}, densityKernel)
    assert k is not densityKernel
    assert "_3d_f64_adj_" in k.module.name

    def fn(x):
        return warpOperation(ParticleState(x, q0.supports, q0.masses, q0.kinds), pr, dom,
                             adjacency=adj)

    assert torch.autograd.gradcheck(fn, (q0.positions.detach().clone().requires_grad_(True),),
                                    eps=1e-6, atol=1e-6, rtol=1e-5)
