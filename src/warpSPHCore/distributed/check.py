"""The distributed check (`warpsph distributed-check`, tests/distributed): every operator,
with and without its corrections, its reverse-mode gradients and its JVPs, run across N
gloo ranks and compared, particle by particle (global ids), with one process.

One code path computes both: `pipeline` takes a halo object; the single-process run passes
`LocalHalo` (no exchange: references = queries, the same objects), the distributed run a
built `Halo` (queries = the owned particles, references = owned + halo). Per case:

* ``out``: the operator's output;
* ``gradX``, ``gradF``: the gradients of ``sum_i w_i . out_i`` (fixed weights per global id)
  w.r.t. the positions and the values, through the whole pipeline (densities by summation,
  the correction builders, the exchanges), the loss summed over the ranks by `globalSum`;
* ``jvp``: the forward-mode derivative along fixed position and value tangents (dual
  tensors through the exchanges and `warpOperation`; densities and corrections held at their
  primal values; value tangents only where the geometry JVP is outside the library's JVP
  scope: CRK, grad-h), and ``jvpExplicit`` the same through `warpOperationJVP` with the reference
  tangents extended over the halo (plain cases);
* the Density case adds ``hvp``, `warpOperationHVP` on the explicit CSR neighbour list with
  the reference tangent extended over the halo.

The reported difference is ``max |a - b| / max |b|`` per quantity. `rollout` runs a small
WCSPH rollout (summation density, linear equation of state, symmetric pressure gradient,
Brookshaw viscosity, symplectic Euler) with migration every step and one rebalance.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import torch
import torch.autograd.forward_ad as fwAD

from ..corrections import computeCRKFactors, computeOmega, computeRenormalizationMatrices
from ..dataTypes.domain import DomainDescription
from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState, ParticleTangentState
from ..enumTypes import GradientScheme, KernelFunctions, LaplacianScheme, WarpOperation
from ..neighborhood import radiusSearchCompactHashMap
from ..operations import warpOperation, warpOperationHVP, warpOperationJVP
from ._comm import globalSum
from .decomposition import decompose
from .halo import Halo
from .migration import migrate, ownedSelection, rebalance

__all__ = ["CheckConfig", "CASES", "LocalHalo", "problem", "pipeline", "referenceResults",
           "distributedResults", "compare", "rollout", "runCheck", "formatTable"]

KERNEL = KernelFunctions.Wendland2
QUANTITIES = ("out", "gradX", "gradF", "jvp", "jvpExplicit", "hvp")


@dataclass(frozen=True)
class CheckConfig:
    """One problem: a jittered lattice of ``n`` particles per axis in the unit box, support
    ``support`` spacings (varied +-10 % per particle), periodic or walled (non-periodic, the
    outer layer of kind 1), float64."""

    dim: int = 2
    periodic: bool = True
    n: int = 16
    support: float = 2.6
    seed: int = 0
    device: str = "cpu"

    @property
    def name(self) -> str:
        return f"{self.dim}D {'periodic' if self.periodic else 'walled'}"


class LocalHalo:
    """The halo interface of one process: no exchange."""

    def extend(self, *tensors):
        return tensors[0] if len(tensors) == 1 else tensors

    def particles(self, owned):
        return owned


def problem(config: CheckConfig):
    """The global set: ``dict(x, h, m, kinds, f, u, domain, ids)``, the same on every rank."""
    g = torch.Generator().manual_seed(config.seed)
    d, n = config.dim, config.n
    dx = 1.0 / n
    f64 = torch.float64
    ax = (torch.arange(n, dtype=f64) + 0.5) * dx
    x = torch.stack(torch.meshgrid(*([ax] * d), indexing="ij"), -1).reshape(-1, d)
    x = x + 0.25 * dx * (torch.rand(x.shape, generator=g, dtype=f64) - 0.5)
    N = x.shape[0]
    h = config.support * dx * (0.9 + 0.2 * torch.rand(N, generator=g, dtype=f64))
    m = dx ** d * (0.95 + 0.1 * torch.rand(N, generator=g, dtype=f64))
    kinds = torch.zeros(N, dtype=torch.int32)
    if not config.periodic:
        edge = ((x < dx) | (x > 1 - dx)).any(dim=1)
        kinds[edge] = 1
    f = torch.sin(2 * math.pi * x[:, 0]) + 0.3 * torch.rand(N, generator=g, dtype=f64)
    u = torch.cos(2 * math.pi * x) + 0.3 * torch.rand(x.shape, generator=g, dtype=f64)
    domain = DomainDescription(torch.zeros(d, dtype=f64), torch.ones(d, dtype=f64),
                               [config.periodic] * d)
    tx = torch.rand(x.shape, generator=g, dtype=f64) - 0.5
    tf = torch.rand(N, generator=g, dtype=f64) - 0.5
    tu = torch.rand(x.shape, generator=g, dtype=f64) - 0.5
    dev = torch.device(config.device)
    domain = DomainDescription(domain.min.to(dev), domain.max.to(dev), domain.periodic.to(dev))
    state = dict(x=x, h=h, m=m, kinds=kinds, f=f, u=u, ids=torch.arange(N, dtype=torch.int64),
                 tx=tx, tf=tf, tu=tu)
    return dict({k: v.to(dev) for k, v in state.items()}, domain=domain)


def _cpu(obj):
    """Tensors of nested dicts / lists moved to the CPU (results cross process borders)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def _props(op, **kw):
    return OperationProperties(KERNEL, operation=op, **kw)


# name -> (operation properties, field ("f" scalar or "u" vector or None), correction)
CASES = {
    "Density": (_props(WarpOperation.Density), None, None),
    "Interpolate": (_props(WarpOperation.Interpolate), "f", None),
    "Gradient Naive": (_props(WarpOperation.Gradient), "f", None),
    "Gradient Symmetric": (_props(WarpOperation.Gradient,
                                  gradientMode=GradientScheme.Symmetric), "f", None),
    "Gradient Difference": (_props(WarpOperation.Gradient,
                                   gradientMode=GradientScheme.Difference), "f", None),
    "Divergence": (_props(WarpOperation.Divergence,
                          gradientMode=GradientScheme.Difference), "u", None),
    "Curl": (_props(WarpOperation.Curl, gradientMode=GradientScheme.Difference), "u", None),
    "Laplacian Brookshaw": (_props(WarpOperation.Laplacian,
                                   laplacianMode=LaplacianScheme.Brookshaw), "f", None),
    "Covariance": (_props(WarpOperation.Covariance), None, None),
    "Interpolate + volumes": (_props(WarpOperation.Interpolate), "f", "volumes"),
    "Gradient Difference + volumes": (_props(WarpOperation.Gradient,
                                             gradientMode=GradientScheme.Difference), "f",
                                      "volumes"),
    "Interpolate + CRK": (_props(WarpOperation.Interpolate), "f", "crk"),
    "Gradient Naive + CRK": (_props(WarpOperation.Gradient), "f", "crk"),
    "Gradient Difference + renormalization": (_props(
        WarpOperation.Gradient, gradientMode=GradientScheme.Difference), "f", "renorm"),
    "Gradient Naive + grad-h": (_props(WarpOperation.Gradient), "f", "gradh"),
}


def _weights(ids, shape, dtype):
    k = torch.arange(math.prod(shape[1:]) if len(shape) > 1 else 1, dtype=dtype,
                     device=ids.device)
    w = torch.sin(0.37 * ids.to(dtype)[:, None] + 0.71 * k[None] + 0.5)
    return w.reshape(shape)


def pipeline(case: str, state: dict, halo, halo2, *, dual=None):
    """The output of `case` for the queries in `state` (owned rows: x, h, m, kinds, f, u)
    with references from `halo` (`halo2`: the depth-2 halo of CRK). Densities by summation,
    then the case's correction, then the operator. ``dual``: position and value tangents
    (dual-tensor JVP of the operator call, densities and corrections held primal)."""
    props, field, corr = CASES[case]
    domain = state["domain"]
    x, h, m, kinds = state["x"], state["h"], state["m"], state["kinds"]
    values = None if field is None else state[field]
    q0 = ParticleState(x.detach() if dual else x, h, m, kinds)
    rhoProps = _props(WarpOperation.Density)
    rho = warpOperation(q0, rhoProps, domain, referenceParticles=halo.particles(q0))
    if case == "Density" and dual is None:
        return rho
    if dual is not None:
        rho = rho.detach()
    q = ParticleState(x.detach() if dual else x, h, m, kinds, rho)
    extra = {}
    if corr == "volumes":
        V = m / rho
        extra = dict(queryVolumes=V, referenceVolumes=halo.extend(V))
    elif corr == "crk":
        R2 = halo2.particles(q)
        V, _, crk = computeCRKFactors(q, domain, KERNEL,
                                      referenceState=None if R2 is q else R2)
        extra = dict(crkState=crk, referenceVolumes=V)
    elif corr == "renorm":
        L = computeRenormalizationMatrices(q, props, domain, referenceParticles=halo.particles(q),
                                           returnEigVals=False)
        extra = dict(renormalizationState=L)
    elif corr == "gradh":
        omega = computeOmega(q, props, domain, referenceParticles=halo.particles(q))
        extra = dict(gradHState=(omega, halo.extend(omega)))
    if dual is not None:
        extra = {k: _detach(v) for k, v in extra.items()}
        tx, tv = dual
        x = x.detach() if tx is None else fwAD.make_dual(x.detach(), tx)
        if values is not None:
            values = fwAD.make_dual(values.detach(), tv)
        q = ParticleState(x, h, m, kinds, rho)
    R = halo2.particles(q) if corr == "crk" else halo.particles(q)
    ref = None if R is q else R
    if case == "Density":
        return warpOperation(q, props, domain, referenceParticles=ref)
    rv = None if values is None else (halo2 if corr == "crk" else halo).extend(values)
    out = warpOperation(q, props, domain, queryValues=values,
                        referenceValues=None if ref is None else rv, referenceParticles=ref,
                        **extra)
    return out[0] if isinstance(out, tuple) else out


def _detach(v):
    if isinstance(v, torch.Tensor):
        return v.detach()
    if isinstance(v, tuple):
        return tuple(_detach(t) for t in v)
    if dataclasses.is_dataclass(v):
        return dataclasses.replace(v, **{f.name: _detach(getattr(v, f.name))
                                         for f in dataclasses.fields(v)})
    return v


def _explicitJVP(case, state, halo):
    """`warpOperationJVP` of a plain case, reference tangents extended over the halo."""
    props, field, _ = CASES[case]
    domain = state["domain"]
    x, h, m, kinds = (state[k].detach() for k in ("x", "h", "m", "kinds"))
    q0 = ParticleState(x, h, m, kinds)
    rho = warpOperation(q0, _props(WarpOperation.Density), domain,
                        referenceParticles=halo.particles(q0)).detach()
    q = ParticleState(x, h, m, kinds, rho)
    R = halo.particles(q)
    local = R is q
    tx = state["tx"]
    tv = None if field is None else state["t" + field]
    values = None if field is None else state[field].detach()
    return warpOperationJVP(
        q, props, domain, tangentQueryValues=tv,
        tangentReferenceValues=None if local or tv is None else halo.extend(tv),
        queryTangentState=ParticleTangentState(positions=tx),
        referenceTangentState=None if local else ParticleTangentState(
            positions=halo.extend(tx)),
        queryValues=values, referenceValues=None if local or values is None
        else halo.extend(values), referenceParticles=None if local else R)


def _hvp(state, halo):
    domain = state["domain"]
    x, h, m, kinds = (state[k].detach() for k in ("x", "h", "m", "kinds"))
    q = ParticleState(x, h, m, kinds)
    R = halo.particles(q)
    local = R is q
    adjacency = radiusSearchCompactHashMap(q, domain, referenceParticles=None if local else R)
    v = state["tx"]
    return warpOperationHVP(q, _props(WarpOperation.Density), domain, v, adjacency=adjacency,
                            referenceParticles=None if local else R,
                            tangentReferencePositions=v if local else halo.extend(v))


def evaluate(state: dict, halo, halo2, cases, reduce=None) -> dict:
    """Every quantity of every case for the queries in `state` (module docstring); `reduce`
    sums the loss over the ranks (None: one process)."""
    results = {}
    ids = state["ids"]
    for case in cases:
        _, field, corr = CASES[case]
        r = {}
        x = state["x"].detach().clone().requires_grad_(True)
        s = dict(state, x=x)
        if field is not None:
            s[field] = state[field].detach().clone().requires_grad_(True)
        out = pipeline(case, s, halo, halo2)
        r["out"] = out.detach()
        loss = (out * _weights(ids, out.shape, out.dtype)).sum()
        if reduce is not None:
            loss = reduce(loss)
        inputs = [x] + ([s[field]] if field is not None else [])
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        r["gradX"] = torch.zeros_like(x) if grads[0] is None else grads[0]
        if field is not None:
            r["gradF"] = torch.zeros_like(s[field]) if grads[1] is None else grads[1]
        tv = None if field is None else state["t" + field]
        try:
            with fwAD.dual_level():
                y = pipeline(case, state, halo, halo2, dual=(state["tx"], tv))
                r["jvp"] = fwAD.unpack_dual(y).tangent.detach().clone()
        except NotImplementedError:  # a geometry JVP outside the JVP scope: values only
            with fwAD.dual_level():
                y = pipeline(case, state, halo, halo2, dual=(None, tv))
                r["jvp"] = fwAD.unpack_dual(y).tangent.detach().clone()
            r["jvpValuesOnly"] = True
        if corr is None and case != "Covariance" and "jvpValuesOnly" not in r:
            r["jvpExplicit"] = _explicitJVP(case, state, halo).detach()
        if case == "Density":
            r["hvp"] = _hvp(state, halo).detach()
        results[case] = r
    return results


def referenceResults(config: CheckConfig, cases=None) -> dict:
    """The single-process results (global order = ids)."""
    state = problem(config)
    return _cpu(evaluate(state, LocalHalo(), LocalHalo(), list(cases or CASES)))


def distributedResults(rank: int, size: int, config: CheckConfig, cases=None) -> dict:
    """This rank's results and ids (call under a process group)."""
    state = problem(config)
    domain = state["domain"]
    decomposition = decompose(domain, state["x"], state["h"], replicated=True)
    own = ownedSelection(decomposition, state["x"])
    local = {k: (v[own] if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
    owned = ParticleState(local["x"], local["h"], local["m"], local["kinds"])
    halo = Halo.build(decomposition, owned, ids=local["ids"])
    halo2 = Halo.build(decomposition, owned, depth=2, ids=local["ids"])
    results = evaluate(local, halo, halo2, list(cases or CASES), reduce=globalSum)
    return dict(ids=local["ids"].cpu(), results=_cpu(results), owned=halo.ownedCount,
                halo=halo.haloCount, halo2=halo2.haloCount,
                decomposition=decomposition.describe())


def compare(reference: dict, ranks: list) -> dict:
    """``{case: {quantity: max |a - b| / max |b|}}`` of the gathered rank results against the
    single-process ones."""
    table = {}
    for case, ref in reference.items():
        row = {}
        for qname, rv in ref.items():
            if not isinstance(rv, torch.Tensor):
                row[qname] = rv
                continue
            out = torch.full_like(rv, math.nan)
            for rr in ranks:
                out[rr["ids"]] = rr["results"][case][qname]
            scale = float(rv.abs().max())
            diff = float((out - rv).abs().max())
            row[qname] = diff / scale if scale > 0 else diff
        table[case] = row
    return table


# ------------------------------------------------------------------------------ rollout

@dataclass(frozen=True)
class RolloutConfig:
    """A small WCSPH rollout (module docstring) on a `CheckConfig` problem (its device)."""

    problem: CheckConfig = CheckConfig()
    steps: int = 20
    rebalanceAt: int = 10
    dt: float = 2e-3
    c0: float = 2.0
    nu: float = 0.05


def _rates(x, v, h, m, kinds, domain, halo, c0, nu):
    q0 = ParticleState(x, h, m, kinds)
    rho = warpOperation(q0, _props(WarpOperation.Density), domain,
                        referenceParticles=halo.particles(q0))
    rho0 = m.new_tensor(1.0)
    p = c0 * c0 * (rho - rho0)
    q = ParticleState(x, h, m, kinds, rho)
    R = halo.particles(q)
    ref = None if R is q else R
    pr = halo.extend(p)
    gradP = warpOperation(q, _props(WarpOperation.Gradient,
                                    gradientMode=GradientScheme.Symmetric), domain,
                          queryValues=p, referenceValues=None if ref is None else pr,
                          referenceParticles=ref)
    lap = warpOperation(q, _props(WarpOperation.Laplacian,
                                  laplacianMode=LaplacianScheme.Brookshaw), domain,
                        queryValues=v, referenceValues=None if ref is None else halo.extend(v),
                        referenceParticles=ref)
    return -gradP / rho[:, None] + nu * lap


def _wrap(x, domain):  # positions back into the box on periodic axes
    lo, hi = domain.min, domain.max
    E = hi - lo
    return torch.where(domain.periodic, x - E * torch.floor((x - lo) / E), x)


def rollout(config: RolloutConfig, rank=None, size=None):
    """The final ``(ids, x, v, m)`` of the rollout; one process when `rank` is None, else
    this rank's owned particles (migration after every step, a rebalance at `rebalanceAt`)."""
    state = problem(config.problem)
    domain = state["domain"]
    x, h, m, kinds, ids = (state[k] for k in ("x", "h", "m", "kinds", "ids"))
    v = 0.1 * state["u"]
    decomposition = halo = None
    if rank is not None:
        decomposition = decompose(domain, x, h, replicated=True)
        own = ownedSelection(decomposition, x)
        x, v, h, m, kinds, ids = (t[own] for t in (x, v, h, m, kinds, ids))
    for step in range(config.steps):
        if rank is not None:
            halo = Halo.build(decomposition, ParticleState(x, h, m, kinds))
        a = _rates(x, v, h, m, kinds, domain, halo or LocalHalo(), config.c0, config.nu)
        v = v + config.dt * a
        x = _wrap(x + config.dt * v, domain)
        if rank is not None:
            if step + 1 == config.rebalanceAt:
                decomposition, x, v, h, m, kinds, ids = rebalance(decomposition, x, v, h, m,
                                                                  kinds, ids=ids)
            else:
                x, v, h, m, kinds, ids = migrate(decomposition, x, v, h, m, kinds, ids=ids)
    return dict(ids=ids.cpu(), x=x.detach().cpu(), v=v.detach().cpu(), m=m.cpu(),
                count=int(x.shape[0]),
                blocks=None if decomposition is None else decomposition.blocks)


def _worker(rank, size, configs, rolloutConfig):
    torch.manual_seed(0)
    out = {c.name: distributedResults(rank, size, c) for c in configs}
    if rolloutConfig is not None:
        out["rollout"] = rollout(rolloutConfig, rank, size)
    return out


def runCheck(nproc: int, configs, rolloutConfig: RolloutConfig | None = None) -> dict:
    """Spawn `nproc` gloo processes and compare (`compare`) every config, and the rollout;
    returns ``{"nproc", "configs": {name: {"table", "owned", "halo"}}, "rollout": {...}}``."""
    from .spawn import spawn

    # the single-process runs first: they compile every kernel the ranks then load
    references = {c.name: referenceResults(c) for c in configs}
    ref = rollout(rolloutConfig) if rolloutConfig is not None else None
    ranks = spawn(_worker, nproc, tuple(configs), rolloutConfig)
    report = {"nproc": nproc, "configs": {}}
    for c in configs:
        rr = [r[c.name] for r in ranks]
        report["configs"][c.name] = {
            "table": compare(references[c.name], rr),
            "owned": [r["owned"] for r in rr], "halo": [r["halo"] for r in rr],
            "haloDepth2": [r["halo2"] for r in rr],
        }
    if rolloutConfig is not None:
        parts = [r["rollout"] for r in ranks]
        ids = torch.cat([p["ids"] for p in parts])
        order = torch.argsort(ids)
        x = torch.cat([p["x"] for p in parts])[order]
        v = torch.cat([p["v"] for p in parts])[order]
        m = torch.cat([p["m"] for p in parts])[order]
        report["rollout"] = {
            "steps": rolloutConfig.steps,
            "counts": [p["count"] for p in parts],
            "countConserved": int(ids.numel()) == int(ref["ids"].numel())
            and bool((ids[order] == ref["ids"]).all()),
            "massConserved": bool((m == ref["m"]).all())
            and float(m.sum()) == float(ref["m"].sum()),
            "positions": float((x - ref["x"]).abs().max() / ref["x"].abs().max()),
            "velocities": float((v - ref["v"]).abs().max() / ref["v"].abs().max()),
            "blocksAfterRebalance": parts[0]["blocks"],
        }
    return report


def formatTable(report: dict) -> str:
    """The report as a markdown table per config."""
    lines = []
    for name, entry in report["configs"].items():
        lines.append(f"\n{name}, {report['nproc']} ranks (owned {entry['owned']}, halo "
                     f"{entry['halo']}):\n")
        lines.append("| case | " + " | ".join(QUANTITIES) + " |")
        lines.append("|---" * (len(QUANTITIES) + 1) + "|")
        for case, row in entry["table"].items():
            cells = [f"{row[q]:.1e}" if q in row else "" for q in QUANTITIES]
            if row.get("jvpValuesOnly"):
                cells[QUANTITIES.index("jvp")] += " (values)"
            lines.append(f"| {case} | " + " | ".join(cells) + " |")
    if "rollout" in report:
        r = report["rollout"]
        lines.append(f"\nrollout ({r['steps']} steps, migration every step, one rebalance): "
                     f"positions {r['positions']:.1e}, velocities {r['velocities']:.1e}, "
                     f"count conserved {r['countConserved']}, mass conserved "
                     f"{r['massConserved']}, final counts {r['counts']}")
    return "\n".join(lines)


def worst(report: dict) -> float:
    """The largest relative difference in the report (operators and rollout)."""
    values = [v for e in report["configs"].values() for row in e["table"].values()
              for k, v in row.items() if k in QUANTITIES]
    if "rollout" in report:
        values += [report["rollout"]["positions"], report["rollout"]["velocities"]]
    return max(values) if values else 0.0


def toJSON(report: dict) -> str:
    return json.dumps(report, indent=2, default=str)
