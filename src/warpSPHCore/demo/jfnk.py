"""Demo part 3, Jacobian-free Newton-Krylov (forward mode): where exact directional derivatives
pay off, and where finite differences are as good.

Two implicit problems on a jittered periodic 2D lattice (Wendland4, h = 2.5 dx), each time
step one nonlinear system ``R(u) = 0`` solved by Newton's method, each Newton correction
``J delta = -R`` by restarted GMRES, which only needs products ``J w``:

* **wave** (value unknowns, a Jacobian that does not depend on the geometry): the nonlinear
  wave equation ``u_tt = c(u)^2 lap u``, ``c(u)^2 = c0^2 (1 + beta u^2)``, ``lap`` the SPH
  Laplacian (Brookshaw, ``V_j = m_j / rho_j``); backward Euler on ``(u, v = u_t)`` gives

      R(u) = u - u^n - dt v^n - dt^2 c(u)^2 lap(u);

* **lagrange** (position unknowns, a Jacobian through the geometry): an implicit (backward
  Euler) step of weakly compressible SPH, the unknowns the particle positions ``x^{n+1}``,

      R(x) = x - x^n - dt v^n - dt^2 a(x),   a(x) = -grad p(rho(x)) / rho(x),

  ``rho`` the summation density, ``p`` the Tait equation of state (with a background pressure
  against the tensile instability), ``grad`` the symmetric SPH
  gradient ``rho_i sum_j m_j (p_i / rho_i^2 + p_j / rho_j^2) grad W_ij``, and
  ``v^{n+1} = (x^{n+1} - x^n) / dt``. ``J w`` is the derivative along a position tangent w:
  every kernel value and gradient, the density and through it the pressure move with the
  particles.

Matrix-vector products, compared on the same steps in float32 and in float64:

* **dual**: ``J w`` exactly, as the tangent of R along w through `torch.autograd.forward_ad`
  dual tensors (dual values through the Laplacian; dual positions through Density, then dual
  positions and densities through Gradient);
* **jvp**: ``J w`` exactly from `warpOperationJVP`, the chain rule written out (wave: the
  Laplacian's value tangent; lagrange: the Density JVP along ``positions=w``, whose density
  tangent feeds the Gradient JVP's ``densities`` tangent and, through the equation of state,
  its value tangent);
* **fd**: ``(R(u + eps w) - R(u)) / eps`` with the usual
  ``eps = sqrt(machine eps) (1 + |u|) / |w|``, machine eps of the working precision;
* **fdBad**: the same with a hard-coded step ``eps = 1e-8 / |w|`` (an absolute step of
  1e-8 along w, the double-precision habit ``1e-8 ~ sqrt(float64 eps)``, as in
  ``scipy.optimize.approx_fprime``'s default, kept when the code runs in float32).

Reported per problem, precision and matvec: Newton iterations, GMRES iterations, the worst
final relative residual ``|R| / |R0|`` over the time steps, wall time, and claims computed
from these numbers (which the tests check at the tiny size).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.autograd.forward_ad as fwAD
from tqdm import tqdm

from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState, ParticleTangentState
from ..enumTypes import GradientScheme, KernelFunctions, LaplacianScheme, WarpOperation
from ..neighborhood import radiusSearchCompactHashMap
from ..operations import warpOperation, warpOperationJVP
from .common import domain2d, fmt, jitteredLattice, pyplot

__all__ = ["run", "gmres", "newton", "WaveStep", "LagrangeStep"]

KERNEL = KernelFunctions.Wendland4
#: size -> {problem: (n per axis, time steps)}
SETTINGS = {"tiny": {"wave": (12, 1), "lagrange": (10, 1)},
            "small": {"wave": (24, 3), "lagrange": (16, 3)},
            "default": {"wave": (32, 4), "lagrange": (24, 4)}}
PROBLEMS = ("wave", "lagrange")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
C0, BETA, CFL = 1.0, 2.0, 4.0  # wave
CS, GAMMA, MACH, CFL_L, SKIN, JITTER_L = 1.0, 7.0, 0.1, 1.5, 1.3, 0.2  # lagrange
BACKGROUND = 1.0  # background pressure in units of B (against the tensile instability)
#: Newton's relative tolerance per precision; in float32 the rounding of R alone leaves
#: |R|/|R0| ~ 1e-7 (wave) to 3e-5 (lagrange, default size): the residual of the float64
#: solution rounded to float32, which the exact JVPs reach
NEWTON_RTOL = {"float32": 1e-4, "float64": 1e-10}
NEWTON_MAX = 12
GMRES_RTOL, GMRES_RESTART, GMRES_MAX = 1e-6, 40, 400
FD_BAD_STEP = 1e-8
#: GMRES stops when a restart cycle reduces the true residual by less than 10 %
STAGNATION = 0.9
KINDS = ("dual", "jvp", "fd", "fdBad")
LABELS = {"dual": "dual tensors (forward_ad)", "jvp": "warpOperationJVP",
          "fd": "finite differences, eps = sqrt(eps_mach)(1+|u|)/|w|",
          "fdBad": "finite differences, eps = 1e-8/|w| (hard-coded)"}
SHORT = {"dual": "dual", "jvp": "warpOperationJVP", "fd": "FD sqrt(eps)",
         "fdBad": "FD 1e-8"}


def _dot(a, b):
    return float(torch.dot(a.reshape(-1), b.reshape(-1)))


def _norm(a):
    return float(torch.linalg.vector_norm(a))


def gmres(matvec, b, rtol=GMRES_RTOL, restart=GMRES_RESTART, maxiter=GMRES_MAX):
    """Restarted GMRES (modified Gram-Schmidt, Givens rotations) for ``A x = b`` with x0 = 0.

    Vectors keep the dtype of b (float32 runs do float32 Krylov vectors), the Hessenberg
    matrix and the rotations are float64. A cycle stops at a breakdown (a product in the span
    of the previous ones, or a non-finite product); the iteration stops when a restart finds
    the true residual ``|b - A x|`` reduced by less than 10 % by the last cycle (a stagnating,
    inconsistent operator such as a noisy finite-difference product).

    Args:
        matvec: ``w -> A w`` on tensors shaped like b.
        b: right-hand side (any shape).
        rtol: stop when ``|b - A x| <= rtol |b|`` (the Givens estimate within a cycle).
        restart, maxiter: Krylov dimension per cycle and the total iteration cap.

    Returns:
        ``(x, iterations, relative residual estimate)``.
    """
    x = torch.zeros_like(b)
    bnorm = _norm(b)
    if bnorm == 0.0 or not math.isfinite(bnorm):
        return x, 0, 0.0 if bnorm == 0.0 else math.inf
    its = 0
    rel = 1.0
    last = math.inf
    while its < maxiter:
        r = b - matvec(x) if its else b.clone()
        beta = _norm(r)
        rel = beta / bnorm
        if rel <= rtol or not math.isfinite(rel) or rel > STAGNATION * last:
            break
        last = rel
        V = [r / beta]
        H = torch.zeros(restart + 1, restart, dtype=torch.float64)
        cs, sn = [], []
        g = torch.zeros(restart + 1, dtype=torch.float64)
        g[0] = beta
        m = 0
        broke = False
        for k in range(restart):
            w = matvec(V[k])
            its += 1
            if not bool(torch.isfinite(w).all()):
                broke = True
                break
            for i in range(k + 1):
                H[i, k] = _dot(w, V[i])
                w = w - H[i, k] * V[i]
            H[k + 1, k] = _norm(w)
            V.append(w / H[k + 1, k] if H[k + 1, k] > 0 else w)
            for i in range(k):
                t = cs[i] * H[i, k] + sn[i] * H[i + 1, k]
                H[i + 1, k] = -sn[i] * H[i, k] + cs[i] * H[i + 1, k]
                H[i, k] = t
            den = math.hypot(float(H[k, k]), float(H[k + 1, k]))
            if den == 0.0:  # A V[k] = 0 in the Krylov space: singular, keep the k columns
                broke = True
                break
            cs.append(float(H[k, k]) / den)
            sn.append(float(H[k + 1, k]) / den)
            H[k, k] = den
            H[k + 1, k] = 0.0
            g[k + 1] = -sn[k] * g[k]
            g[k] = cs[k] * g[k]
            m = k + 1
            rel = abs(float(g[k + 1])) / bnorm
            if rel <= rtol or its >= maxiter:
                break
        if m == 0:
            break
        y = torch.linalg.solve_triangular(H[:m, :m], g[:m, None], upper=True)[:, 0]
        x = x + sum(float(y[i]) * V[i] for i in range(m))
        if rel <= rtol or broke:
            break
    return x, its, rel


def _fdMatvec(residual, u, R0, eps0, scaled):
    """``w -> (R(u + eps w) - R(u)) / eps``: ``eps = eps0 (1 + |u|) / |w|`` (scaled) or
    ``eps0 / |w|``."""
    scale = (1.0 + _norm(u)) if scaled else 1.0

    def mv(w):
        wn = _norm(w)
        if wn == 0.0:
            return torch.zeros_like(w)
        eps = eps0 * scale / wn
        return (residual(u + eps * w) - R0) / eps
    return mv


class WaveStep:
    """The implicit wave step: residual and matvecs for one particle set (fixed geometry).

    Args:
        n: particles per axis.
        device, dtype: where and in which precision.
    """

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
        self.n, self.dx, self.dtype = n, dx, dtype
        self.dt = CFL * dx / C0

    def initial(self):
        x = self.p.positions
        u0 = torch.exp(-(torch.linalg.vector_norm(x, dim=1) / 0.25) ** 2)
        return {"u": u0, "v": torch.zeros_like(u0)}

    def begin(self, state):
        """Per time step: the frozen pieces of R and the initial guess."""
        self.un, self.vn = state["u"], state["v"]
        return state["u"].clone()

    def advance(self, state, u):
        return {"u": u, "v": (u - state["u"]) / self.dt}

    def lap(self, u):
        return warpOperation(self.p, self.props, self.dom, queryValues=u, adjacency=self.adj)

    def residual(self, u):
        c2 = C0 * C0 * (1.0 + BETA * u * u)
        return u - self.un - self.dt * self.vn - self.dt * self.dt * c2 * self.lap(u)

    def dualMatvec(self, u):
        def mv(w):
            with fwAD.dual_level():
                return fwAD.unpack_dual(self.residual(fwAD.make_dual(u, w))).tangent
        return mv

    def jvpMatvec(self, u):
        """``J w = w - dt^2 (2 c0^2 beta u w lap(u) + c(u)^2 J_lap w)`` with the Laplacian's
        tangent from `warpOperationJVP` (value tangent: one launch), lap(u) computed once."""
        lapU = self.lap(u)
        c2 = C0 * C0 * (1.0 + BETA * u * u)
        dt2 = self.dt * self.dt

        def mv(w):
            lapW = warpOperationJVP(self.p, self.props, self.dom, queryValues=u,
                                    tangentQueryValues=w, adjacency=self.adj)
            return w - dt2 * (2.0 * C0 * C0 * BETA * u * w * lapU + c2 * lapW)
        return mv


class LagrangeStep:
    """The implicit Lagrangian (WCSPH) step: the unknowns are the positions ``x^{n+1}``.

    The neighbour list is built once per time step at ``x^n`` with supports enlarged by
    `SKIN` (a Verlet skin: pairs that come within the support during the Newton iterations are
    in the list, pairs beyond it contribute zero), so R is smooth in x within a step.

    Args:
        n: particles per axis.
        device, dtype: where and in which precision.
    """

    def __init__(self, n, device, dtype=torch.float64):
        p0, dx = jitteredLattice(n, device, dtype, jitter=JITTER_L, hOverDx=2.5, seed=5)
        self.dom = domain2d(device, dtype)
        self.p0 = p0
        self.dprops = OperationProperties(KERNEL, operation=WarpOperation.Density)
        self.gprops = OperationProperties(KERNEL, operation=WarpOperation.Gradient,
                                          gradientMode=GradientScheme.Symmetric)
        rho = warpOperation(p0, self.dprops, self.dom,
                            adjacency=radiusSearchCompactHashMap(p0, self.dom))
        self.rho0 = float(rho.double().mean())  # rest density: the mean summation density
        self.B = self.rho0 * CS * CS / GAMMA
        self.n, self.dx, self.dtype = n, dx, dtype
        self.dt = CFL_L * dx / CS
        self.N = p0.positions.shape[0]

    def initial(self):
        x = self.p0.positions
        v = MACH * CS * torch.stack([torch.sin(math.pi * x[:, 0]) * torch.cos(math.pi * x[:, 1]),
                                     torch.sin(math.pi * x[:, 1])], dim=1)
        return {"x": x.clone(), "v": v}

    def begin(self, state):
        self.xn, self.vn = state["x"], state["v"]
        big = ParticleState(self.xn, self.p0.supports * SKIN, self.p0.masses, self.p0.kinds)
        self.adj = radiusSearchCompactHashMap(big, self.dom)
        return (self.xn + self.dt * self.vn).reshape(-1)  # explicit predictor

    def advance(self, state, x):
        X = x.reshape(self.N, 2)
        return {"x": X, "v": (X - state["x"]) / self.dt}

    def _particles(self, X, rho=None):
        return ParticleState(X, self.p0.supports, self.p0.masses, self.p0.kinds, rho)

    def pressure(self, rho):
        return self.B * ((rho / self.rho0) ** GAMMA - 1.0 + BACKGROUND)

    def fields(self, X):
        """``(rho, p, grad p)`` at positions X ``[N, 2]``."""
        rho = warpOperation(self._particles(X), self.dprops, self.dom, adjacency=self.adj)
        p = self.pressure(rho)
        g = warpOperation(self._particles(X, rho), self.gprops, self.dom, queryValues=p,
                          adjacency=self.adj)
        return rho, p, g

    def residual(self, x):
        X = x.reshape(self.N, 2)
        rho, _, g = self.fields(X)
        acc = -g / rho[:, None]
        return (X - self.xn - self.dt * self.vn - self.dt * self.dt * acc).reshape(-1)

    def dualMatvec(self, x):
        def mv(w):
            with fwAD.dual_level():
                return fwAD.unpack_dual(self.residual(fwAD.make_dual(x, w))).tangent
        return mv

    def jvpMatvec(self, x):
        """``J w = w - dt^2 da``, ``da = -(d(grad p) / rho - grad p drho / rho^2)``: the
        Density JVP along ``positions=W``, then the Gradient JVP along ``positions=W``,
        ``densities=drho`` and the value tangent ``dp = p'(rho) drho``; the primal fields at
        x computed once per Newton iteration."""
        X = x.reshape(self.N, 2)
        rho, p, g = self.fields(X)
        dpdrho = self.B * GAMMA / self.rho0 * (rho / self.rho0) ** (GAMMA - 1.0)
        pX, pXr = self._particles(X), self._particles(X, rho)
        dt2 = self.dt * self.dt

        def mv(w):
            W = w.reshape(self.N, 2)
            drho = warpOperationJVP(pX, self.dprops, self.dom, adjacency=self.adj,
                                    queryTangentState=ParticleTangentState(positions=W))
            dg = warpOperationJVP(pXr, self.gprops, self.dom, queryValues=p,
                                  tangentQueryValues=dpdrho * drho, adjacency=self.adj,
                                  queryTangentState=ParticleTangentState(positions=W,
                                                                         densities=drho))
            dacc = -(dg / rho[:, None] - g * (drho / (rho * rho))[:, None])
            return (W - dt2 * dacc).reshape(-1)
        return mv


def newton(step, u0, kind, rtol):
    """One implicit step by Newton-GMRES from the guess u0 (``step.begin`` called).

    Stops at ``|R| <= rtol |R0|``, after `NEWTON_MAX` iterations, when the residual stagnates
    (not halved by an iteration after the third: a finite-difference noise floor) or diverges
    (non-finite or above 1e3 |R0|).

    Args:
        step: a `WaveStep` or `LagrangeStep` after ``begin``.
        u0: the initial guess.
        kind: ``"dual" | "jvp" | "fd" | "fdBad"``.
        rtol: the relative Newton tolerance.

    Returns:
        ``(u, history of |R|, GMRES iterations)``.
    """
    u = u0
    R = step.residual(u)
    r0 = _norm(R)
    hist = [r0]
    gm = 0
    eps0 = math.sqrt(torch.finfo(u.dtype).eps)
    for _ in range(NEWTON_MAX):
        if hist[-1] <= rtol * r0:
            break
        if kind == "dual":
            mv = step.dualMatvec(u)
        elif kind == "jvp":
            mv = step.jvpMatvec(u)
        elif kind == "fd":
            mv = _fdMatvec(step.residual, u, R, eps0, scaled=True)
        else:
            mv = _fdMatvec(step.residual, u, R, FD_BAD_STEP, scaled=False)
        delta, its, _ = gmres(mv, -R)
        gm += its
        u = u + delta
        R = step.residual(u)
        hist.append(_norm(R))
        if not math.isfinite(hist[-1]) or hist[-1] > 1e3 * r0:
            break
        if len(hist) > 3 and hist[-1] >= 0.5 * hist[-2]:
            break
    return u, hist, gm


def _runVariant(step, kind, steps, rtol, bar):
    state = step.initial()
    s = {"newton": 0, "gmres": 0, "seconds": 0.0, "finalRelResidual": [], "converged": True}
    first = None
    for _ in range(steps):
        bar.set_postfix_str(kind)
        t0 = time.perf_counter()
        guess = step.begin(state)
        u, hist, gm = newton(step, guess, kind, rtol)
        s["seconds"] += time.perf_counter() - t0
        s["newton"] += len(hist) - 1
        s["gmres"] += gm
        rel = hist[-1] / hist[0] if hist[0] > 0 else 0.0
        s["finalRelResidual"].append(rel if math.isfinite(rel) else math.inf)
        s["converged"] = s["converged"] and rel <= rtol
        if first is None:
            first = [h / hist[0] for h in hist]
        bar.update(1)
        if not math.isfinite(rel) or not bool(torch.isfinite(u).all()):
            break  # a failed step: the variant stops (the table says after how many steps)
        state = step.advance(state, u)
    bar.update(steps - len(s["finalRelResidual"]))  # the steps a failed variant skips
    s["stepsDone"] = len(s["finalRelResidual"])
    s["worstRelResidual"] = max(s["finalRelResidual"])
    return s, first, state


def _productErrors(prob, n, device):
    """Relative error of one product ``J w`` per precision and kind against the float64
    `warpOperationJVP` product at the same point (the first Newton iterate of the first
    step, rounded to float32 for both), w a seeded random direction."""
    cls = WaveStep if prob == "wave" else LagrangeStep
    steps = {dn: cls(n, device, dt) for dn, dt in DTYPES.items()}
    state32 = {k: v.to(torch.float32) for k, v in steps["float64"].initial().items()}
    u32 = steps["float32"].begin(state32)
    g = torch.Generator().manual_seed(7)
    w32 = torch.randn(u32.shape, generator=g, dtype=torch.float64).to(u32)
    s64 = steps["float64"]
    s64.begin({k: v.double() for k, v in state32.items()})
    ref = s64.jvpMatvec(u32.double())(w32.double())
    rn = _norm(ref)
    err = {}
    for dn, dtype in DTYPES.items():
        st = steps[dn]
        st.begin({k: v.to(dtype) for k, v in state32.items()})
        u, w = u32.to(dtype), w32.to(dtype)
        R0 = st.residual(u)
        eps0 = math.sqrt(torch.finfo(dtype).eps)
        mvs = {"dual": st.dualMatvec(u), "jvp": st.jvpMatvec(u),
               "fd": _fdMatvec(st.residual, u, R0, eps0, scaled=True),
               "fdBad": _fdMatvec(st.residual, u, R0, FD_BAD_STEP, scaled=False)}
        err[dn] = {k: _norm(mv(w).double() - ref) / rn for k, mv in mvs.items()}
        same = (u + (FD_BAD_STEP / _norm(w)) * w) == u
        err[dn]["fdBadUnchanged"] = float(same.double().mean())
    return err


def _warmUp(step):
    """One untimed residual and one product of each exact kind, so that loading the Warp
    modules (once per process, operator and precision) is not charged to the first variant."""
    u = step.begin(step.initial())
    w = torch.ones_like(u)
    step.residual(u)
    step.dualMatvec(u)(w)
    step.jvpMatvec(u)(w)


def _claims(stats):
    """What the report says, computed from the numbers (tested at the tiny size).

    Per ``"problem/dtype"``: the exact JVPs reach the tolerance in every step
    (``exactConverged``), dual and explicit JVP take the same Newton iterations; the sqrt(eps)
    finite differences are ``fdAsGood`` (every step converged, no more Newton iterations, at
    most 10 % more GMRES iterations than `warpOperationJVP`), else ``fdMoreIterations``
    (converged with more) or neither (not converged); ``fdBadFails``: the hard-coded step
    misses the tolerance by 10x or more in some step.
    """
    c = {}
    for prob in PROBLEMS:
        for dn in DTYPES:
            st = stats[prob][dn]
            tol = NEWTON_RTOL[dn]
            jv, fd, bad = st["jvp"], st["fd"], st["fdBad"]
            exact = max(st["dual"]["worstRelResidual"], jv["worstRelResidual"])
            asGood = (fd["converged"] and fd["newton"] <= jv["newton"]
                      and fd["gmres"] <= 1.1 * jv["gmres"])
            c[f"{prob}/{dn}"] = {
                "tolerance": tol,
                "exactConverged": st["dual"]["converged"] and jv["converged"],
                "exactWorstResidual": exact,
                "dualJvpSameNewton": st["dual"]["newton"] == jv["newton"],
                "dualOverJvpTime": st["dual"]["seconds"] / max(jv["seconds"], 1e-9),
                "fdConverged": fd["converged"],
                "fdAsGood": asGood,
                "fdMoreIterations": fd["converged"] and not asGood,
                "fdExtraNewton": fd["newton"] - jv["newton"],
                "fdGmresRatio": fd["gmres"] / max(jv["gmres"], 1),
                "fdOverJvpTime": fd["seconds"] / max(jv["seconds"], 1e-9),
                "fdResidualRatio": fd["worstRelResidual"] / max(exact, 1e-300),
                "fdBadConverged": bad["converged"],
                "fdBadWorstResidual": bad["worstRelResidual"],
                "fdBadFails": not bad["converged"] and bad["worstRelResidual"] >= 10.0 * tol,
                "exactProductError": max(st["dual"].get("productError", 0.0),
                                         jv.get("productError", 0.0)),
                "fdProductError": fd.get("productError", math.nan),
                "fdBadProductError": bad.get("productError", math.nan),
                "fdBadUnchangedFraction": bad.get("unchangedFraction", math.nan),
            }
    return c


def _verdict(prob, dn, stats, c):
    """One sentence per problem and precision, from the computed claims."""
    k = c[f"{prob}/{dn}"]
    jv, fd = stats[prob][dn]["jvp"], stats[prob][dn]["fd"]
    tol = fmt(NEWTON_RTOL[dn])
    if k["exactConverged"]:
        out = [f"the exact JVPs reach the tolerance {tol} in every step ({jv['newton']} Newton "
               f"/ {jv['gmres']} GMRES iterations)"]
    else:
        out = [f"the exact JVPs stop at {fmt(k['exactWorstResidual'])}, short of the tolerance "
               f"{tol}"]
    its = f"{fd['newton']} / {fd['gmres']}"
    time_ = f"{k['fdOverJvpTime']:.2f}x the time of the `warpOperationJVP` run"
    if k["fdAsGood"]:
        out.append(f"**finite differences with the sqrt(eps) step are as good** ({its} "
                   f"iterations, {time_})")
    elif k["fdMoreIterations"]:
        more = f"{k['fdExtraNewton']} more Newton and " if k["fdExtraNewton"] > 0 else ""
        out.append(f"finite differences with the sqrt(eps) step reach it too but need {more}"
                   f"{k['fdGmresRatio']:.2f}x the GMRES iterations ({its}, {time_})")
    else:
        out.append(f"finite differences with the sqrt(eps) step stop at "
                   f"{fmt(fd['worstRelResidual'])} ({its} iterations)")
    if k["fdBadFails"]:
        w = k["fdBadWorstResidual"]
        out.append("the hard-coded step 1e-8 fails ("
                   + (f"worst |R|/|R0| {fmt(w)}" if math.isfinite(w) else "Newton diverges")
                   + ")")
    elif k["fdBadConverged"]:
        out.append("the hard-coded step 1e-8 converges as well")
    else:
        out.append(f"the hard-coded step 1e-8 stops at {fmt(k['fdBadWorstResidual'])}")
    return f"* **{prob}, {dn}:** " + "; ".join(out) + "."


def _summary(c):
    """The closing paragraph: where finite differences are as good, where not, and why."""
    keys = [f"{p}/{dn}" for p in PROBLEMS for dn in DTYPES]
    good = [k for k in keys if c[k]["fdAsGood"]]
    more = [k for k in keys if c[k]["fdMoreIterations"]]
    short = [k for k in keys if not c[k]["fdConverged"]]
    bad = [k for k in keys if c[k]["fdBadFails"]]
    badOk = [k for k in keys if c[k]["fdBadConverged"]]
    out = []
    if good:
        out.append(f"Finite differences with a sensible step are as good as the exact JVPs for "
                   f"{', '.join(good)}: their O(sqrt(eps)) product error does not slow Newton or "
                   "GMRES there, and one finite-difference product costs one residual.")
    if more:
        out.append("The exact JVPs save iterations for "
                   + ", ".join(f"{k} ({c[k]['fdGmresRatio']:.2f}x the GMRES iterations with "
                               "finite differences)" for k in more)
                   + ".")
    e32 = [c[k]["fdProductError"] for k in keys if k.endswith("float32")]
    e64 = [c[k]["fdProductError"] for k in keys if k.endswith("float64")]
    if min(e32) > GMRES_RTOL > max(e64):
        out.append(f"The sqrt(eps) finite-difference products are off by {fmt(min(e32))} to "
                   f"{fmt(max(e32))} in float32, above the GMRES tolerance {GMRES_RTOL:g}, and "
                   f"by {fmt(min(e64))} to {fmt(max(e64))} in float64, below it; the exact "
                   "products are off by rounding only.")
    if short:
        out.append(f"The sqrt(eps) finite differences miss the tolerance for {', '.join(short)}.")
    if bad:
        fr = [c[k]["fdBadUnchangedFraction"] for k in bad]
        out.append(f"A badly chosen step breaks finite differences for {', '.join(bad)}: 1e-8 is "
                   "a sensible step in float64 (sqrt(float64 eps) ~ 1.5e-8), but in float32 "
                   f"u + 1e-8 w rounds back to u in {100 * min(fr):.0f} to {100 * max(fr):.0f} % "
                   "of the entries (unit w) and the product is rounding noise (product error "
                   + ", ".join(fmt(c[k]["fdBadProductError"]) for k in bad)
                   + "), so Newton stalls or diverges.")
    if badOk:
        out.append(f"The same step works for {', '.join(badOk)}.")
    if all(c[k]["exactConverged"] for k in keys):
        out.append("The exact JVPs have no step to choose and reach the tolerance in every "
                   "case.")
    else:
        out.append("The exact JVPs have no step to choose; they miss the tolerance for "
                   + ", ".join(k for k in keys if not c[k]["exactConverged"]) + ".")
    ratios = [c[k]["dualOverJvpTime"] for k in keys]
    span = (f"{min(ratios):.1f}x" if f"{min(ratios):.1f}" == f"{max(ratios):.1f}"
            else f"{min(ratios):.1f}-{max(ratios):.1f}x")
    same = ("give the same Newton iterations" if all(c[k]["dualJvpSameNewton"] for k in keys)
            else "give products equal to rounding")
    out.append(f"Dual tensors and `warpOperationJVP` {same}; the dual "
               f"route takes {span} the time (each dual call reruns "
               "the primal operator and reads the tangent's liveness back), the explicit route "
               "reuses the primal fields of the Newton iterate.")
    return " ".join(out)


def _plot(path, pics, hists):
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    cap = 1e4  # diverged histories are drawn up to here
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.4))
    styles = {"dual": "o-", "jvp": "^:", "fd": "s--", "fdBad": "x-."}
    for r, prob in enumerate(PROBLEMS):
        pos, val, title = pics[prob]
        ax = axes[r, 0]
        sc = ax.scatter(pos[:, 0], pos[:, 1], c=val, s=6 if prob == "wave" else 14,
                        cmap="RdBu_r" if prob == "wave" else "viridis")
        fig.colorbar(sc, ax=ax, shrink=0.8)
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        for c, dn in enumerate(DTYPES):
            ax = axes[r, c + 1]
            for kind in KINDS:
                raw = hists[prob][dn][kind]
                h = [min(max(v, 1e-17), cap) if math.isfinite(v) else cap for v in raw]
                tag = " (diverged)" if max(raw) > cap or not all(map(math.isfinite, raw)) else ""
                ax.semilogy(range(len(h)), h, styles[kind], label=SHORT[kind] + tag)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.axhline(NEWTON_RTOL[dn], color="k", lw=0.8, alpha=0.5, label="tolerance")
            ax.set_xlabel("Newton iteration (first time step)")
            ax.set_ylabel("|R| / |R0|")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            ax.set_title(f"{prob}, {dn}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def run(out: Path, size: str = "default", device="cpu", quiet: bool = False) -> dict:
    """Run the JFNK comparison; writes ``jfnk.png`` and returns the summary.

    Args:
        out: the output folder.
        size: ``"tiny" | "small" | "default"``.
        device: torch device.
        quiet: no progress bars.

    Returns:
        ``stats[problem][dtype][kind]`` (Newton and GMRES iterations, worst final relative
        residual, seconds, converged), ``claims``, first-step histories, the report section
        and the table rows.
    """
    device = torch.device(device)
    cfg = SETTINGS[size]
    stats = {p: {} for p in PROBLEMS}
    first = {p: {} for p in PROBLEMS}
    info = {}
    pics = {}
    stateDiff = {p: {} for p in PROBLEMS}
    for prob in PROBLEMS:
        n, steps = cfg[prob]
        for dn, dtype in DTYPES.items():
            step = (WaveStep if prob == "wave" else LagrangeStep)(n, device, dtype)
            info[prob] = {"particles": n * n, "steps": steps, "dt": step.dt, "dx": step.dx}
            stats[prob][dn], first[prob][dn], stateDiff[prob][dn] = {}, {}, {}
            finals = {}
            bar = tqdm(total=len(KINDS) * steps, desc=f"jfnk {prob} {dn}", disable=quiet)
            _warmUp(step)
            for kind in KINDS:
                s, h, fin = _runVariant(step, kind, steps, NEWTON_RTOL[dn], bar)
                stats[prob][dn][kind], first[prob][dn][kind] = s, h
                finals[kind] = fin["u"] if prob == "wave" else fin["x"]
                if kind == "jvp" and dn == "float64":
                    if prob == "wave":
                        pics[prob] = (step.p.positions.cpu().numpy(), fin["u"].cpu().numpy(),
                                      f"wave: u after {steps} steps (float64)")
                    else:
                        step.begin(fin)
                        rho = step.fields(fin["x"])[0]
                        pics[prob] = (torch.remainder(fin["x"] + 1.0, 2.0).cpu().numpy() - 1.0,
                                      rho.cpu().numpy(),
                                      f"lagrange: density after {steps} steps (float64)")
            bar.close()
            ref = finals["dual"]
            for kind in KINDS:
                d = finals[kind] - ref
                stateDiff[prob][dn][kind] = float(torch.linalg.vector_norm(d.double())
                                                  / torch.linalg.vector_norm(ref.double()))
    productError = {prob: _productErrors(prob, cfg[prob][0], device) for prob in PROBLEMS}
    for prob in PROBLEMS:
        for dn in DTYPES:
            for kind in KINDS:
                stats[prob][dn][kind]["productError"] = productError[prob][dn][kind]
            stats[prob][dn]["fdBad"]["unchangedFraction"] = \
                productError[prob][dn]["fdBadUnchanged"]
    claims = _claims(stats)
    png = Path(out) / "jfnk.png"
    _plot(png, pics, first)

    rows = []
    for prob in PROBLEMS:
        for dn in DTYPES:
            for kind in KINDS:
                s = stats[prob][dn][kind]
                done = "" if s["stepsDone"] == info[prob]["steps"] else \
                    f" (diverged: stopped after step {s['stepsDone']})"
                rows.append(f"| {prob} | {dn} | {SHORT[kind]} | {fmt(s['productError'])} | "
                            f"{s['newton']} | {s['gmres']} | {fmt(s['worstRelResidual'])}{done} | "
                            f"{'yes' if s['converged'] else 'no'} | {s['seconds']:.2f} |")
    wv, lg = info["wave"], info["lagrange"]
    lines = ["## 3. Jacobian-free Newton-Krylov with forward-mode matvecs", "",
             "Two implicit problems, each time step solved by Newton-GMRES (GMRES tolerance "
             f"{GMRES_RTOL}, restart {GMRES_RESTART}; Newton tolerance "
             f"{fmt(NEWTON_RTOL['float64'])} relative in float64 and "
             f"{fmt(NEWTON_RTOL['float32'])} in float32, above the rounding floor of R in "
             "float32), the same steps in float32 and float64:", "",
             f"* **wave**: `u_tt = c(u)² lap u`, `c² = {C0}² (1 + {BETA} u²)`, {wv['particles']} "
             f"particles, SPH Brookshaw Laplacian; backward Euler, {wv['steps']} steps of "
             f"dt = {CFL} dx/c0. The unknowns are values on a fixed particle set: J depends on "
             "u, not on the geometry;",
             f"* **lagrange**: an implicit weakly compressible SPH step whose unknowns are the "
             f"positions x of {lg['particles']} particles, `R(x) = x - xⁿ - dt vⁿ - dt² a(x)`, "
             "`a = -∇p(ρ(x))/ρ(x)` (summation density, Tait equation of state with γ = "
             f"{GAMMA:g}, c = {CS} and a background pressure, symmetric SPH gradient), Mach "
             f"{MACH} initial flow, {lg['steps']} steps of dt = {CFL_L} dx/c (explicit limit "
             "~0.6 dx/c). J w is the derivative along a position tangent: it moves every "
             "kernel value and gradient and, through the density, the pressure.", "",
             "Matvecs: dual tensors (`forward_ad` through the whole residual), "
             "`warpOperationJVP` (lagrange: the Density JVP along `positions=w` feeds the "
             "Gradient JVP's `densities` tangent and, through the equation of state, its value "
             "tangent), finite differences with `eps = sqrt(eps_mach)(1+|u|)/|w|` (eps_mach of "
             "the working precision) and with a hard-coded `eps = 1e-8/|w|` (a step of 1e-8 "
             "along w: the double-precision habit, as in scipy's `approx_fprime` default, kept "
             "when the code runs in float32).", "",
             "The product error is the relative error of one `J w` (random w, first Newton "
             "iterate) against the float64 `warpOperationJVP` product at the same point (0 for "
             "that product itself).", "",
             "| problem | precision | matvec | product error | Newton its | GMRES its | worst "
             "final \\|R\\|/\\|R0\\| | converged | seconds |", "|---|---|---|---|---|---|---|---|---|",
             *rows, "",
             *[_verdict(p, dn, stats, claims) for p in PROBLEMS for dn in DTYPES], "",
             _summary(claims), "",
             "![JFNK](jfnk.png)", ""]
    table = []
    for prob in PROBLEMS:
        for dn in DTYPES:
            for kind in KINDS:
                s = stats[prob][dn][kind]
                table.append((f"jfnk {prob} {dn} {kind}: Newton/GMRES, |R|, s",
                              f"{s['newton']} / {s['gmres']}, {fmt(s['worstRelResidual'])}, "
                              f"{s['seconds']:.2f}"))
    return {"problems": info, "tolerances": {"newton": NEWTON_RTOL, "gmres": GMRES_RTOL},
            "labels": LABELS,
            "fdBadStep": FD_BAD_STEP, "stats": stats, "claims": claims,
            "firstStepHistory": first, "stateDifference": stateDiff, "figure": str(png),
            "report": "\n".join(lines), "table": table}
