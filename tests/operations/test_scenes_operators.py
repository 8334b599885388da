"""Scenes: B independent particle sets in one call equal B separate calls (float64, 1e-12).

Search pairs, every operator's outputs, reverse-mode gradients and JVPs, the corrections
(CRK, grad-h, renormalization) and the Density HVP; the scene index is interleaved (not
sorted) so nothing relies on scenes being contiguous. Plus the refusals: a grid or a list
built without scenes with particles that carry them.
"""

from __future__ import annotations

import pytest
import torch

from warpSPHCore.corrections import computeCRKFactors, computeOmega, computeRenormalizationMatrices
from warpSPHCore.dataTypes import DomainDescription, OperationProperties, ParticleState
from warpSPHCore.enumTypes import GradientScheme, KernelFunctions, SupportScheme, WarpOperation
from warpSPHCore.neighborhood import (
    buildCompactHashMap,
    buildVerletList,
    radiusSearchCompactHashMap,
)
from warpSPHCore.operations import warpOperation, warpOperationHVP, warpOperationJVP

TOL = 1e-12
B, N = 3, 48
F64 = torch.float64


def _close(a, b, what):
    scale = max(1.0, float(b.abs().max()))
    err = float((a - b).abs().max())
    assert err <= TOL * scale, f"{what}: batched vs separate max error {err:.3e} (scale {scale:.3e})"


@pytest.fixture(scope="module", params=[(2, (True, True)), (3, (True, True, False)),
                                        (3, (True, True, True))],
                ids=["2d", "3d", "3d-periodic"])
def scenes(request):
    d, periodic = request.param
    periodic = list(periodic)
    g = torch.Generator().manual_seed(7 + d + sum(periodic))
    dom = DomainDescription(torch.zeros(d, dtype=F64), torch.ones(d, dtype=F64), periodic)
    h = 0.4
    parts = []
    for _ in range(B):
        x = torch.rand(N, d, generator=g, dtype=F64)
        parts.append(dict(
            x=x, h=h * (0.9 + 0.2 * torch.rand(N, generator=g, dtype=F64)),
            m=0.5 + torch.rand(N, generator=g, dtype=F64),
            rho=1.0 + 0.1 * torch.rand(N, generator=g, dtype=F64),
            f=torch.randn(N, d, generator=g, dtype=F64)))
    perm = torch.randperm(B * N, generator=g)
    cat = {k: torch.cat([p[k] for p in parts])[perm].contiguous() for k in parts[0]}
    index = torch.arange(B, dtype=torch.int32).repeat_interleave(N)[perm].contiguous()
    return dict(d=d, dom=dom, parts=parts, cat=cat, perm=perm, index=index)


def _state(t, scenes=None, x=None):
    n = t["x"].shape[0]
    return ParticleState(t["x"] if x is None else x, t["h"], t["m"],
                         torch.zeros(n, dtype=torch.int32), densities=t["rho"], scenes=scenes)


def _separate(s, fn):
    """fn(state, part) per scene, scattered to the batched particle order."""
    outs = [fn(_state(p), p) for p in s["parts"]]
    full = torch.cat(outs)
    res = torch.empty_like(full)
    res[torch.argsort(s["perm"])] = full  # separate order -> batched order
    return res


def _batched(s, fn):
    return fn(_state(s["cat"], s["index"]), s["cat"])


def test_search_pairs_equal_separate_searches(scenes):
    s = scenes
    expected = set()
    inverse = torch.argsort(s["perm"])
    for b, p in enumerate(s["parts"]):
        adj = radiusSearchCompactHashMap(_state(p), s["dom"])
        expected |= {(int(inverse[i + b * N]), int(inverse[j + b * N]))
                     for i, j in zip(adj.i.tolist(), adj.j.tolist())}
    adj = radiusSearchCompactHashMap(_state(s["cat"], s["index"]), s["dom"])
    got = set(zip(adj.i.tolist(), adj.j.tolist()))
    assert got == expected
    assert torch.equal(adj.sceneIndex, s["index"])
    assert all(s["index"][i] == s["index"][j] for i, j in list(got)[:200])


OPERATIONS = [
    (WarpOperation.Density, {}),
    (WarpOperation.Interpolate, {}),
    (WarpOperation.Gradient, {"gradientMode": GradientScheme.Difference}),
    (WarpOperation.Gradient, {"gradientMode": GradientScheme.Symmetric}),
    (WarpOperation.Divergence, {"gradientMode": GradientScheme.Difference}),
    (WarpOperation.Curl, {"gradientMode": GradientScheme.Difference}),
    (WarpOperation.Laplacian, {}),
    (WarpOperation.Covariance, {}),
]


def _props(op, extra):
    return OperationProperties(kernel=KernelFunctions.Wendland2, operation=op,
                               supportMode=SupportScheme.SuperSymmetric, **extra)


@pytest.mark.parametrize("op,extra", OPERATIONS, ids=lambda v: getattr(v, "name", ""))
def test_operator_outputs_gradients_and_jvps(scenes, op, extra):
    s = scenes
    props = _props(op, extra)
    withValues = op != WarpOperation.Density and op != WarpOperation.Covariance

    def evaluate(state, p):
        vals = p["f"] if withValues else None
        return warpOperation(state, props, s["dom"], queryValues=vals)

    _close(_batched(s, evaluate), _separate(s, evaluate), f"{op.name} output")

    # reverse mode: the gradient of sum_i m_i out_i (weights that travel with the particles)
    # w.r.t. positions and values
    def gradients(state, p):
        x = p["x"].clone().requires_grad_(True)
        f = p["f"].clone().requires_grad_(True)
        out = warpOperation(_state(p, state.scenes, x=x), props, s["dom"],
                            queryValues=f if withValues else None)
        w = p["m"].reshape(-1, *([1] * (out.dim() - 1)))
        inputs = (x, f) if withValues else (x,)
        g = torch.autograd.grad((out * w).sum(), inputs)
        return torch.cat([t.reshape(t.shape[0], -1) for t in g], dim=1)

    _close(_batched(s, gradients), _separate(s, gradients), f"{op.name} gradient")

    # the library's 3D Curl has a value JVP only
    geometry = not (op == WarpOperation.Curl and s["d"] == 3)

    def jvp(state, p):
        return warpOperationJVP(state, props, s["dom"],
                                tangentQueryValues=torch.cos(p["f"]) if withValues else None,
                                queryValues=p["f"] if withValues else None,
                                queryTangentState=_tangent(p) if geometry else None)

    _close(_batched(s, jvp), _separate(s, jvp), f"{op.name} JVP")


def _tangent(p):
    from warpSPHCore.dataTypes import ParticleTangentState
    return ParticleTangentState(positions=torch.sin(3.0 * p["x"]), supports=0.1 * p["m"])


def test_corrections_and_density_hvp(scenes):
    s = scenes
    props = _props(WarpOperation.Density, {})
    dom = s["dom"]

    def omega(state, p):
        return computeOmega(state, props, dom)

    _close(_batched(s, omega), _separate(s, omega), "grad-h Omega")

    def renorm(state, p):
        L = computeRenormalizationMatrices(state, props, dom, returnEigVals=False)
        L = L[0] if isinstance(L, tuple) else L
        return getattr(L, "renormalizationMatrices", L)

    _close(_batched(s, renorm), _separate(s, renorm), "renormalization matrices")

    def crk(state, p):
        V, rho, st = computeCRKFactors(state, dom, KernelFunctions.Wendland2)
        return torch.cat([V[:, None], rho[:, None], st.A[:, None], st.B,
                          st.gradA, st.gradB.reshape(st.gradB.shape[0], -1)], dim=1)

    _close(_batched(s, crk), _separate(s, crk), "CRK factors")

    def hvp(state, p):
        adj = radiusSearchCompactHashMap(state, dom, mode=SupportScheme.SuperSymmetric)
        return warpOperationHVP(state, props, dom, torch.sin(3.0 * p["x"]), adjacency=adj)

    _close(_batched(s, hvp), _separate(s, hvp), "Density HVP")


def test_refusals_name_the_problem(scenes):
    s = scenes
    batched = _state(s["cat"], s["index"])
    plain = _state(s["cat"])
    props = _props(WarpOperation.Density, {})
    lst = radiusSearchCompactHashMap(plain, s["dom"], mode=SupportScheme.SuperSymmetric)
    with pytest.raises(ValueError, match="built without them"):
        warpOperation(batched, props, s["dom"], adjacency=lst)
    grid = buildCompactHashMap(s["cat"]["x"], s["cat"]["x"], s["cat"]["h"], s["cat"]["h"],
                               s["dom"].periodic, s["dom"], mode=SupportScheme.SuperSymmetric)
    with pytest.raises(ValueError, match="CompactHashMap"):
        warpOperation(batched, props, s["dom"], adjacency=grid)
    with pytest.raises(ValueError, match="only referenceParticles carries scene"):
        radiusSearchCompactHashMap(plain, s["dom"], referenceParticles=batched)
    with pytest.raises(TypeError, match="int32"):
        ParticleState(s["cat"]["x"], s["cat"]["h"], s["cat"]["m"],
                      torch.zeros(B * N, dtype=torch.int32), scenes=s["index"].long())


def test_verlet_list_keeps_scenes_and_rebuilds_when_they_appear(scenes):
    s = scenes
    batched = _state(s["cat"], s["index"])
    v = buildVerletList(batched, s["dom"], verletScale=1.1,
                        supportMode=SupportScheme.SuperSymmetric)
    assert torch.equal(v.sceneIndex, s["index"])
    props = _props(WarpOperation.Density, {})
    a = warpOperation(batched, props, s["dom"], adjacency=v)
    b = warpOperation(batched, props, s["dom"])
    _close(a, b, "Density over a Verlet list")
    again = buildVerletList(_state(s["cat"]), s["dom"], verletScale=1.1,
                            supportMode=SupportScheme.SuperSymmetric, priorNeighborhood=v)
    assert again is not v and again.sceneIndex is None


def test_scenes_fully_periodic_3d_are_searched_one_by_one():
    """No axis separates scenes in a 3D domain periodic on every axis: each scene is
    searched on its own and the lists merged, so the pairs and their order within each row
    are those of separate searches (the operators' outputs are bitwise the separate ones)."""
    d = 3
    dom = DomainDescription(torch.zeros(d, dtype=F64), torch.ones(d, dtype=F64), True)
    g = torch.Generator().manual_seed(3)
    xs = [torch.rand(30, d, generator=g, dtype=F64) for _ in range(3)]
    h = torch.full((30,), 0.4, dtype=F64)
    index = torch.tensor([2, 0, 1], dtype=torch.int32).repeat_interleave(30)
    batch = ParticleState(torch.cat([xs[2], xs[0], xs[1]]), h.repeat(3), h.repeat(3),
                          torch.zeros(90, dtype=torch.int32), scenes=index)
    props = _props(WarpOperation.Density, {})
    rho = warpOperation(batch, props, dom)
    for block, b in enumerate((2, 0, 1)):
        single = ParticleState(xs[b], h, h, torch.zeros(30, dtype=torch.int32))
        pairs = radiusSearchCompactHashMap(single, dom, mode=SupportScheme.SuperSymmetric)
        alone = warpOperation(single, props, dom, adjacency=pairs)
        assert torch.equal(rho[30 * block:30 * (block + 1)], alone)
