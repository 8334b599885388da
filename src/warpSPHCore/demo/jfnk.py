"""Demo part 3, an implicit wave equation solved by Jacobian-free Newton-Krylov (forward mode).

The nonlinear wave equation ``u_tt = c(u)^2 lap u`` with ``c(u)^2 = c0^2 (1 + beta u^2)`` on
particles of a jittered periodic 2D lattice, ``lap`` the SPH Laplacian (Brookshaw, Wendland4,
``V_j = m_j / rho_j``). Backward Euler on ``(u, v = u_t)`` eliminates v:

    R(u) = u - u^n - dt v^n - dt^2 c(u)^2 lap(u) = 0,    v^{n+1} = (u - u^n) / dt,

one nonlinear system per time step, at a time step a few times the explicit limit. Newton's
method solves it; each Newton correction ``J delta = -R`` is solved by restarted GMRES, which
only needs products ``J w``. Two ways to get them, compared on the same steps:

* **dual**: ``J w`` exactly, as the tangent of R along w through `torch.autograd.forward_ad`
  dual tensors (the Laplacian's tangent from this library's dual route, the rest from torch);
* **jvp**: ``J w`` exactly, with the Laplacian's tangent from `warpOperationJVP` and the
  chain rule of ``c(u)^2`` written out;
* **finite differences**: ``(R(u + eps w) - R(u)) / eps`` with the usual
  ``eps = sqrt(machine eps) (1 + |u|) / |w|``.

Reported per variant: Newton iterations, GMRES iterations, the residual reached, wall time.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.autograd.forward_ad as fwAD
from tqdm import tqdm

from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState
from ..enumTypes import GradientScheme, KernelFunctions, LaplacianScheme, WarpOperation
from ..neighborhood import radiusSearchCompactHashMap
from ..operations import warpOperation
from .common import domain2d, fmt, jitteredLattice, pyplot

__all__ = ["run", "gmres"]

KERNEL = KernelFunctions.Wendland4
SETTINGS = {"tiny": (12, 2), "small": (24, 4), "default": (40, 8)}  # (n per axis, steps)
C0, BETA, CFL = 1.0, 2.0, 4.0
NEWTON_RTOL, NEWTON_MAX = 1e-10, 12
GMRES_RTOL, GMRES_RESTART, GMRES_MAX = 1e-6, 40, 400
KINDS = ("dual", "jvp", "fd")
LABELS = {"dual": "dual tensors (forward_ad)", "jvp": "warpOperationJVP",
          "fd": "finite differences"}


def gmres(matvec, b, rtol=GMRES_RTOL, restart=GMRES_RESTART, maxiter=GMRES_MAX):
    """Restarted GMRES (modified Gram-Schmidt, Givens rotations) for ``A x = b`` with x0 = 0.

    Args:
        matvec: ``w -> A w`` on tensors shaped like b.
        b: right-hand side ``[N]``.
        rtol: stop when ``|b - A x| <= rtol |b|``.
        restart, maxiter: Krylov dimension per cycle and the total iteration cap.

    Returns:
        ``(x, iterations, relative residual estimate)``.
    """
    x = torch.zeros_like(b)
    bnorm = float(torch.linalg.vector_norm(b))
    if bnorm == 0.0:
        return x, 0, 0.0
    its = 0
    rel = 1.0
    while its < maxiter:
        r = b - matvec(x) if its else b.clone()
        beta = float(torch.linalg.vector_norm(r))
        rel = beta / bnorm
        if rel <= rtol:
            break
        V = [r / beta]
        H = torch.zeros(restart + 1, restart, dtype=torch.float64)
        cs, sn = [], []
        g = torch.zeros(restart + 1, dtype=torch.float64)
        g[0] = beta
        k = 0
        for k in range(restart):
            w = matvec(V[k])
            for i in range(k + 1):
                H[i, k] = float(torch.dot(w, V[i]))
                w = w - H[i, k] * V[i]
            H[k + 1, k] = float(torch.linalg.vector_norm(w))
            V.append(w / H[k + 1, k] if H[k + 1, k] > 0 else w)
            for i in range(k):
                t = cs[i] * H[i, k] + sn[i] * H[i + 1, k]
                H[i + 1, k] = -sn[i] * H[i, k] + cs[i] * H[i + 1, k]
                H[i, k] = t
            den = math.hypot(float(H[k, k]), float(H[k + 1, k]))
            cs.append(float(H[k, k]) / den)
            sn.append(float(H[k + 1, k]) / den)
            H[k, k] = den
            H[k + 1, k] = 0.0
            g[k + 1] = -sn[k] * g[k]
            g[k] = cs[k] * g[k]
            its += 1
            rel = abs(float(g[k + 1])) / bnorm
            if rel <= rtol or its >= maxiter:
                break
        m = k + 1
        y = torch.linalg.solve_triangular(H[:m, :m], g[:m, None], upper=True)[:, 0]
        x = x + sum(float(y[i]) * V[i] for i in range(m))
        if rel <= rtol:
            break
    return x, its, rel


class WaveStep:
    """The implicit step's residual R and its two matvecs for one particle set."""

    def __init__(self, n, device, dtype=torch.float64):
        p0, dx = jitteredLattice(n, device, dtype, jitter=0.2, hOverDx=2.5, seed=2)
        self.dom = domain2d(device, dtype)
        self.adj = radiusSearchCompactHashMap(p0, self.dom)
        rho = warpOperation(p0, OperationProperties(KERNEL, operation=WarpOperation.Density),
                            self.dom, adjacency=self.adj)
        self.p = ParticleState(p0.positions, p0.supports, p0.masses, p0.kinds, rho)
        self.props = OperationProperties(KERNEL, operation=WarpOperation.Laplacian,
                                         laplacianMode=LaplacianScheme.Brookshaw,
                                         gradientMode=GradientScheme.Difference)
        self.dx = dx
        self.dt = CFL * dx / C0

    def lap(self, u):
        return warpOperation(self.p, self.props, self.dom, queryValues=u, adjacency=self.adj)

    def residual(self, u, un, vn):
        c2 = C0 * C0 * (1.0 + BETA * u * u)
        return u - un - self.dt * vn - self.dt * self.dt * c2 * self.lap(u)

    def jvpMatvec(self, u, un, vn):
        def mv(w):
            with fwAD.dual_level():
                return fwAD.unpack_dual(self.residual(fwAD.make_dual(u, w), un, vn)).tangent
        return mv

    def explicitMatvec(self, u, un, vn):
        """``J w = w - dt^2 (2 c0^2 beta u w lap(u) + c(u)^2 J_lap w)`` with the Laplacian's
        tangent from `warpOperationJVP` (value tangent: one launch) and lap(u) computed once."""
        from ..operations import warpOperationJVP

        lapU = self.lap(u)
        c2 = C0 * C0 * (1.0 + BETA * u * u)
        dt2 = self.dt * self.dt

        def mv(w):
            lapW = warpOperationJVP(self.p, self.props, self.dom, queryValues=u,
                                    tangentQueryValues=w, adjacency=self.adj)
            return w - dt2 * (2.0 * C0 * C0 * BETA * u * w * lapU + c2 * lapW)
        return mv

    def fdMatvec(self, u, un, vn):
        R0 = self.residual(u, un, vn)
        eps0 = math.sqrt(torch.finfo(u.dtype).eps)

        def mv(w):
            wn = float(torch.linalg.vector_norm(w))
            if wn == 0.0:
                return torch.zeros_like(w)
            eps = eps0 * (1.0 + float(torch.linalg.vector_norm(u))) / wn
            return (self.residual(u + eps * w, un, vn) - R0) / eps
        return mv


def newton(step, un, vn, kind):
    """One implicit step by Newton-GMRES; returns ``(u, history, gmresIterations)``."""
    u = un.clone()
    R = step.residual(u, un, vn)
    r0 = float(torch.linalg.vector_norm(R))
    hist = [r0]
    gm = 0
    for _ in range(NEWTON_MAX):
        if hist[-1] <= NEWTON_RTOL * r0:
            break
        mv = {"dual": step.jvpMatvec, "jvp": step.explicitMatvec,
              "fd": step.fdMatvec}[kind](u, un, vn)
        delta, its, _ = gmres(mv, -R)
        gm += its
        u = u + delta
        R = step.residual(u, un, vn)
        hist.append(float(torch.linalg.vector_norm(R)))
        if len(hist) > 3 and hist[-1] >= 0.5 * hist[-2]:  # stagnation (FD noise floor)
            break
    return u, hist, gm


def _plot(path, step, snaps, hists):
    plt = pyplot()
    fig = plt.figure(figsize=(15, 4.2))
    x = step.p.positions.cpu().numpy()
    vmax = max(float(s.abs().max()) for _, s in snaps)
    for k, (t, s) in enumerate(snaps):
        ax = fig.add_subplot(1, len(snaps) + 1, k + 1)
        sc = ax.scatter(x[:, 0], x[:, 1], c=s.cpu().numpy(), s=5, cmap="RdBu_r", vmin=-vmax,
                        vmax=vmax)
        ax.set_aspect("equal")
        ax.set_title(f"u at t = {t:.3f}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(sc, ax=list(fig.axes), shrink=0.8, pad=0.02)
    ax = fig.add_subplot(1, len(snaps) + 1, len(snaps) + 1)
    for kind, style in (("dual", "o-"), ("jvp", "^:"), ("fd", "s--")):
        h = hists[kind]
        ax.semilogy(range(len(h)), [v / h[0] for v in h], style, label=LABELS[kind])
    ax.set_xlabel("Newton iteration (first time step)")
    ax.set_ylabel("|R| / |R0|")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Newton convergence")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def run(out: Path, size: str = "default", device="cpu", quiet: bool = False) -> dict:
    """Run the JFNK comparison; writes ``jfnk.png`` and returns the summary."""
    device = torch.device(device)
    n, steps = SETTINGS[size]
    step = WaveStep(n, device)
    x = step.p.positions
    u0 = torch.exp(-(torch.linalg.vector_norm(x, dim=1) / 0.25) ** 2)
    stats = {}
    snaps = []
    first = {}
    finals = {}
    for kind in KINDS:
        un, vn = u0.clone(), torch.zeros_like(u0)
        s = {"newton": 0, "gmres": 0, "seconds": 0.0, "finalRelResidual": []}
        for k in tqdm(range(steps), desc=f"jfnk ({kind})", disable=quiet):
            t0 = time.perf_counter()
            u, hist, gm = newton(step, un, vn, kind)
            s["seconds"] += time.perf_counter() - t0
            s["newton"] += len(hist) - 1
            s["gmres"] += gm
            s["finalRelResidual"].append(hist[-1] / hist[0])
            if k == 0:
                first[kind] = hist
            vn, un = (u - un) / step.dt, u
            if kind == "dual" and k in (0, steps // 2, steps - 1):
                snaps.append(((k + 1) * step.dt, u.detach().clone()))
        s["worstRelResidual"] = max(s["finalRelResidual"])
        finals[kind] = un
        stats[kind] = s
    snaps = [(0.0, u0)] + snaps
    diff = float(torch.linalg.vector_norm(finals["dual"] - finals["fd"])
                 / torch.linalg.vector_norm(finals["dual"]))
    png = Path(out) / "jfnk.png"
    _plot(png, step, snaps, first)
    rows = [f"| {LABELS[k]} | {stats[k]['newton']} | {stats[k]['gmres']} | "
            f"{fmt(stats[k]['worstRelResidual'])} | {stats[k]['seconds']:.2f} |" for k in KINDS]
    d, f = stats["dual"], stats["fd"]
    if f["worstRelResidual"] > 10.0 * d["worstRelResidual"]:
        verdict = ("The finite-difference products carry an O(sqrt(eps)) error that stops Newton "
                   "short of the residual the exact JVPs reach.")
    else:
        verdict = ("Here all three reach the same residual: at this GMRES tolerance the "
                   "finite-difference products' O(sqrt(eps)) error does not show; the JVPs give "
                   "the same iterations without a step size to tune.")
    lines = ["## 3. Implicit nonlinear wave equation by Jacobian-free Newton-Krylov (forward "
             "mode)", "",
             f"`u_tt = c(u)² lap u`, `c² = {C0}² (1 + {BETA} u²)`, on {n * n} particles (SPH "
             f"Brookshaw Laplacian, Wendland4); backward Euler, {steps} steps of dt = {CFL} dx/c0 "
             "(four times the explicit limit); Newton-GMRES per step (GMRES tolerance "
             f"{GMRES_RTOL}, Newton tolerance {NEWTON_RTOL} relative). Matrix-vector products "
             "from this library's forward mode (dual tensors through the whole residual, or "
             "`warpOperationJVP` for the Laplacian with the chain rule in torch) against finite "
             "differences:", "",
             "| matvec | Newton iterations | GMRES iterations | worst final relative "
             "residual | seconds |", "|---|---|---|---|---|", *rows, "",
             f"The final states of the dual-tensor and finite-difference runs differ by "
             f"{fmt(diff)} (relative L2). {verdict} A dual-tensor product costs a primal "
             "Laplacian, the liveness readback and the JVP launch; the explicit JVP one launch "
             "(the Laplacian is linear in u, so its value JVP is the operator on w); a "
             "finite-difference product one residual.", "",
             "![JFNK](jfnk.png)", ""]
    table = [(f"jfnk: Newton / GMRES its, {k}", f"{stats[k]['newton']} / {stats[k]['gmres']}")
             for k in KINDS]
    table += [(f"jfnk: worst residual, {k}", fmt(stats[k]["worstRelResidual"])) for k in KINDS]
    table += [(f"jfnk: seconds, {k}", f"{stats[k]['seconds']:.2f}") for k in KINDS]
    return {"particles": n * n, "steps": steps, "dt": step.dt, "stats": stats,
            "firstStepHistory": first, "stateDifference": diff, "figure": str(png),
            "report": "\n".join(lines), "table": table}
