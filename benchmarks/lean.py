"""Lean hand-written Warp kernels: the throughput floors of `make bench`.

A floor says how far an operator is from what the hardware allows, so it is written the way
a performance-minded user would write the one case by hand: plain arrays (no structs), the
Wendland2 formula written out (no library functions, no kernel-id dispatch), the dimension
and the scalar type fixed per compiled kernel, the periodic minimum image as
``x - L round(x / L)`` on every axis, a CSR neighbour list. Nothing else: no kinds masking,
no support schemes, no index checks, no calibration.

* `leanDensity(D, S)`:   rho_i = sum_j m_j W(x_ij, h_i)
* `leanGradient(D, S)`:  out_i = sum_j f_j (m_j / rho_j) grad W(x_ij, h_i)  (Naive scheme,
  scalar field), with Warp's generated adjoint for ``wp.Tape`` (the neighbour loop lives in
  its own function and only accumulates, so the adjoint is exact).
* `leanGradientValuesVJP(D, S)`: the hand-written adjoint of the Gradient w.r.t. the
  values alone, df_j += (m_j / rho_j) u_i . grad W(x_ij, h_i) (the floor of a backward
  asked only for d/d values).
* `leanMomentum(D, S)`:  the Momentum operator's (F_i, B_i): w = V_i^2 + V_j^2,
  F_i = sum_j w [-p~_ij G + mu_ij (x_ij . G) / r^2 u_ij + 1/2 (A_i + A_j) . G],
  B_i = sum_j w G, with p~_ij = (rho_j p_i + rho_i p_j) / (rho_i + rho_j),
  mu_ij = 2 mu_i mu_j / (mu_i + mu_j), (A . G) = rho u ((u~ - u) . G); forward only.

Wendland2 for d >= 2: W = C_d (1 - q)^4 (1 + 4 q) / h^d and
grad W = -20 C_d (1 - q)^3 x_ij / h^(d+2) for q = |x_ij| / h <= 1.

`LeanRunner` holds the prebuilt Warp views of one case and launches these kernels.
"""

# no `from __future__ import annotations`: the kernels' annotations name closure variables

import functools
import math

import torch
import warp as wp

__all__ = ["leanDensity", "leanGradient", "leanGradientValuesVJP", "leanMomentum", "leanSearch",
           "LeanRunner"]

#: Wendland2 normalisation C_d for d = 1, 2, 3, written out so that this
#: module needs nothing of the library (the cold-start baseline imports only torch and Warp)
_C_D = (5.0 / 4.0, 7.0 / math.pi, 21.0 / (2.0 * math.pi))


def _types(d: int, scalar):
    return wp.types.vector(length=d, dtype=scalar), scalar


@functools.cache
def leanDensity(d: int, scalar):
    V, S = _types(d, scalar)
    cd = _C_D[d - 1]

    @wp.kernel(enable_backward=False, module="unique")
    def density(x: wp.array(dtype=V), h: wp.array(dtype=S), m: wp.array(dtype=S),
                nbr: wp.array(dtype=wp.int64), off: wp.array(dtype=wp.int32),
                cnt: wp.array(dtype=wp.int32), L: V, out: wp.array(dtype=S)):
        i = wp.tid()
        xi = x[i]
        hi = h[i]
        ih = S(1.0) / hi
        acc = S(0.0)
        for e in range(off[i], off[i] + cnt[i]):
            j = wp.int32(nbr[e])
            xij = xi - x[j]
            for k in range(wp.static(d)):
                xij[k] = xij[k] - L[k] * wp.round(xij[k] / L[k])
            q = wp.length(xij) * ih
            if q <= S(1.0):
                a = S(1.0) - q
                a2 = a * a
                acc += m[j] * (a2 * a2 * (S(1.0) + S(4.0) * q))
        hd = ih
        for _k in range(wp.static(d - 1)):
            hd = hd * ih
        out[i] = acc * (S(cd) * hd)

    return density


@functools.cache
def leanGradient(d: int, scalar):
    V, S = _types(d, scalar)
    cd = _C_D[d - 1]

    @wp.func
    def row(x: wp.array(dtype=V), h: wp.array(dtype=S), m: wp.array(dtype=S),
            rho: wp.array(dtype=S), f: wp.array(dtype=S), nbr: wp.array(dtype=wp.int64),
            first: wp.int32, count: wp.int32, L: V, i: wp.int32):
        acc = V()
        for e in range(first, first + count):
            j = wp.int32(nbr[e])
            xij = x[i] - x[j]
            s = V()
            for k in range(wp.static(d)):
                s[k] = L[k] * wp.round(xij[k] / L[k])
            xij = xij - s
            hi = h[i]
            q = wp.length(xij) / hi
            if q <= S(1.0):
                a = S(1.0) - q
                hd = hi * hi
                for _k in range(wp.static(d)):
                    hd = hd * hi
                acc += (f[j] * (m[j] / rho[j]) * (S(-20.0 * cd) * a * a * a / hd)) * xij
        return acc

    @wp.kernel(module="unique")
    def gradient(x: wp.array(dtype=V), h: wp.array(dtype=S), m: wp.array(dtype=S),
                 rho: wp.array(dtype=S), f: wp.array(dtype=S), nbr: wp.array(dtype=wp.int64),
                 off: wp.array(dtype=wp.int32), cnt: wp.array(dtype=wp.int32), L: V,
                 out: wp.array(dtype=V)):
        i = wp.tid()
        out[i] = row(x, h, m, rho, f, nbr, off[i], cnt[i], L, i)

    return gradient


@functools.cache
def leanGradientValuesVJP(d: int, scalar):
    """The hand-written adjoint of `leanGradient` w.r.t. the values alone: for the row
    cotangent u_i, df_j += (m_j / rho_j) u_i . grad W(x_ij, h_i) (an atomic add per pair)."""
    V, S = _types(d, scalar)
    cd = _C_D[d - 1]

    @wp.kernel(enable_backward=False, module="unique")
    def gradientValuesVJP(x: wp.array(dtype=V), h: wp.array(dtype=S), m: wp.array(dtype=S),
                          rho: wp.array(dtype=S), nbr: wp.array(dtype=wp.int64),
                          off: wp.array(dtype=wp.int32), cnt: wp.array(dtype=wp.int32), L: V,
                          u: wp.array(dtype=V), df: wp.array(dtype=S)):
        i = wp.tid()
        xi = x[i]
        hi = h[i]
        hd = hi * hi
        for _k in range(wp.static(d)):
            hd = hd * hi
        c = S(-20.0 * cd) / hd
        ih = S(1.0) / hi
        ui = u[i]
        for e in range(off[i], off[i] + cnt[i]):
            j = wp.int32(nbr[e])
            xij = xi - x[j]
            for k in range(wp.static(d)):
                xij[k] = xij[k] - L[k] * wp.round(xij[k] / L[k])
            q = wp.length(xij) * ih
            if q <= S(1.0):
                a = S(1.0) - q
                wp.atomic_add(df, j, (m[j] / rho[j]) * (c * a * a * a) * wp.dot(ui, xij))

    return gradientValuesVJP


@functools.cache
def leanMomentum(d: int, scalar):
    V, S = _types(d, scalar)
    cd = _C_D[d - 1]

    @wp.kernel(enable_backward=False, module="unique")
    def momentum(x: wp.array(dtype=V), h: wp.array(dtype=S), p: wp.array(dtype=S),
                 rho: wp.array(dtype=S), vol: wp.array(dtype=S), mu: wp.array(dtype=S),
                 u: wp.array(dtype=V), ut: wp.array(dtype=V), nbr: wp.array(dtype=wp.int64),
                 off: wp.array(dtype=wp.int32), cnt: wp.array(dtype=wp.int32), L: V,
                 outF: wp.array(dtype=V), outB: wp.array(dtype=V)):
        i = wp.tid()
        xi = x[i]
        hi = h[i]
        hd = hi * hi
        for _k in range(wp.static(d)):
            hd = hd * hi
        c = S(-20.0 * cd) / hd
        pi = p[i]
        rhoi = rho[i]
        Vi2 = vol[i] * vol[i]
        mui = mu[i]
        ui = u[i]
        si = rhoi * (ut[i] - ui)
        accF = V()
        accB = V()
        for e in range(off[i], off[i] + cnt[i]):
            j = wp.int32(nbr[e])
            xij = xi - x[j]
            for k in range(wp.static(d)):
                xij[k] = xij[k] - L[k] * wp.round(xij[k] / L[k])
            r = wp.length(xij)
            q = r / hi
            if q <= S(1.0) and r > S(0.0):
                a = S(1.0) - q
                G = (c * a * a * a) * xij
                rhoj = rho[j]
                Vj = vol[j]
                w = Vi2 + Vj * Vj
                uj = u[j]
                pt = (rhoj * pi + rhoi * p[j]) / (rhoi + rhoj)
                muj = mu[j]
                visc = S(2.0) * mui * muj / (mui + muj) * wp.dot(xij, G) / (r * r)
                A = wp.dot(si, G) * ui + wp.dot(rhoj * (ut[j] - uj), G) * uj
                accF += w * (visc * (ui - uj) - pt * G + S(0.5) * A)
                accB += w * G
        outF[i] = accF
        outB[i] = accB

    return momentum


@functools.cache
def _leanSearchKernels(d: int, scalar):
    V, S = _types(d, scalar)

    @wp.func
    def near(xi: V, xj: V, h: S, L: V):
        xij = xi - xj
        for k in range(wp.static(d)):
            xij[k] = xij[k] - L[k] * wp.round(xij[k] / L[k])
        return wp.length(xij) <= h

    @wp.kernel(enable_backward=False, module="unique")
    def count(x: wp.array(dtype=V), h: wp.array(dtype=S), L: V, cnt: wp.array(dtype=wp.int32)):
        i = wp.tid()
        c = wp.int32(0)
        for j in range(x.shape[0]):
            if near(x[i], x[j], h[i], L):
                c += 1
        cnt[i] = c

    @wp.kernel(enable_backward=False, module="unique")
    def fill(x: wp.array(dtype=V), h: wp.array(dtype=S), L: V, off: wp.array(dtype=wp.int32),
             nbr: wp.array(dtype=wp.int64)):
        i = wp.tid()
        e = off[i]
        for j in range(x.shape[0]):
            if near(x[i], x[j], h[i], L):
                nbr[e] = wp.int64(j)
                e += 1

    return count, fill


def leanSearch(positions, supports, box, device: str):
    """Brute-force Gather CSR (every pair tested, periodic minimum image): two lean kernels
    and a prefix sum; returns an object with ``j``, ``edgeOffsets``, ``numNeighbors``."""
    n, d = positions.shape
    S = {torch.float32: wp.float32, torch.float64: wp.float64}[positions.dtype]
    V = wp.types.vector(length=d, dtype=S)
    count, fill = _leanSearchKernels(d, S)
    x = wp.from_torch(positions.contiguous(), dtype=V)
    h = wp.from_torch(supports.contiguous(), dtype=S)
    L = V(*[float(v) for v in box])
    cnt = torch.zeros(n, dtype=torch.int32, device=positions.device)
    wp.launch(count, dim=n, inputs=[x, h, L, wp.from_torch(cnt)], device=device)
    off = (torch.cumsum(cnt, 0) - cnt).to(torch.int32)
    total = int(cnt.sum())
    nbr = torch.empty(total, dtype=torch.int64, device=positions.device)
    wp.launch(fill, dim=n, inputs=[x, h, L, wp.from_torch(off), wp.from_torch(nbr)],
              device=device)

    class CSR:
        pass

    csr = CSR()
    csr.j, csr.edgeOffsets, csr.numNeighbors = nbr, off, cnt
    return csr


class LeanRunner:
    """Prebuilt Warp views of one case (particles, CSR list, periodic box) and the lean
    launches on them. `positions` and `values` carry gradients for the taped Gradient."""

    def __init__(self, positions, supports, masses, densities, values, adjacency, box,
                 device: str):
        n, d = positions.shape
        S = {torch.float32: wp.float32, torch.float64: wp.float64}[positions.dtype]
        V = wp.types.vector(length=d, dtype=S)
        self.n, self.d, self.S, self.V, self.device = n, d, S, V, device
        self.x = wp.from_torch(positions.detach().clone().contiguous(), dtype=V,
                               requires_grad=True)
        self.h = wp.from_torch(supports.detach().contiguous(), dtype=S)
        self.m = wp.from_torch(masses.detach().contiguous(), dtype=S)
        self.rho = wp.from_torch(densities.detach().contiguous(), dtype=S) \
            if densities is not None else None
        self.f = wp.from_torch(values.detach().clone().contiguous(), dtype=S,
                               requires_grad=True) if values is not None else None
        self.nbr = wp.from_torch(adjacency.j)
        self.off = wp.from_torch(adjacency.edgeOffsets)
        self.cnt = wp.from_torch(adjacency.numNeighbors)
        self.L = V(*[float(v) for v in box])
        self.rhoOut = wp.zeros(n, dtype=S, device=device)
        self.gradOut = wp.zeros(n, dtype=V, device=device, requires_grad=True)

    def density(self):
        wp.launch(leanDensity(self.d, self.S), dim=self.n,
                  inputs=[self.x, self.h, self.m, self.nbr, self.off, self.cnt, self.L],
                  outputs=[self.rhoOut], device=self.device)
        return self.rhoOut

    def _gradientInputs(self):
        return [self.x, self.h, self.m, self.rho, self.f, self.nbr, self.off, self.cnt,
                self.L]

    def gradient(self):
        wp.launch(leanGradient(self.d, self.S), dim=self.n, inputs=self._gradientInputs(),
                  outputs=[self.gradOut], device=self.device)
        return self.gradOut

    def gradientValuesOnly(self, seed: wp.array):
        """Forward, then the hand-written adjoint w.r.t. the values (`leanGradientValuesVJP`):
        (out, d/df) as torch copies."""
        self.gradient()
        df = wp.zeros(self.n, dtype=self.S, device=self.device)
        wp.launch(leanGradientValuesVJP(self.d, self.S), dim=self.n,
                  inputs=[self.x, self.h, self.m, self.rho, self.nbr, self.off, self.cnt,
                          self.L, seed], outputs=[df], device=self.device)
        return wp.to_torch(self.gradOut).clone(), wp.to_torch(df)

    def gradientTaped(self, seed: wp.array):
        """Forward on a `wp.Tape`, backward of `seed`: (out, d/dx, d/df) as torch copies."""
        tape = wp.Tape()
        with tape:
            wp.launch(leanGradient(self.d, self.S), dim=self.n, inputs=self._gradientInputs(),
                      outputs=[self.gradOut], device=self.device)
        tape.backward(grads={self.gradOut: seed})
        result = (wp.to_torch(self.gradOut).clone(), wp.to_torch(self.x.grad).clone(),
                  wp.to_torch(self.f.grad).clone())
        tape.zero()
        return result
