r"""Lattice-normalisation calibration, computed on the host in float64.

A kernel integrates to 1, but its sum over a perfect cubic lattice of spacing s with particle
mass ρ0 s^d gives ρ0·L instead of ρ0. With n_h = h/s, L depends only on (kernel, n_h, d):

    L(kernel, n_h, d) = (C_d / n_h^d) Σ_{n ∈ Z^d, |n| ≤ n_h} k(|n| / n_h)
                      = (C_d / n_h^d) Σ_{j=0}^{⌊n_h²⌋} r_d(j) k(√j / n_h),

with r_d(j) = #{n ∈ Z^d : |n|² = j} (the "shells" form, exact for every real n_h > 0; the
boundary |n| = n_h is included). The calibration factor is 1/L (`latticeDensityFactor`).

Everything here is computed on the host in float64 NumPy, never on the device, so it costs
no device synchronisation; k(q) comes from `hostShapes` (the host twin of the Warp shape
functions). `latticeDensity` caches its results per (kernel, n_h, d, method).

Methods of `latticeDensity`:

* ``'shells'`` (default): the formula above (`latticeDensityShells`).
* ``'fourier'`` (cross-check, `latticeDensityFourier`): Poisson summation
  ``L = ŵ(0) + Σ_{j≥1} r_d(j) ŵ(2π n_h √j)`` (ŵ(0) = ∫W = 1 for the SPH kernels), with ŵ the
  radial Fourier transform of the unit-support kernel W(x) = C_d k(|x|)
  (`kernelFourierTransform`), truncated at argument s ≤ s_max = 150. ŵ is computed by
  Gauss-Legendre quadrature split at the kernel knots (about 1e-14 accurate for s ≤ 150), so
  the only error is the truncated tail of the Poisson sum, which decays algebraically in
  s_max. Measured against ``'shells'`` for n_h ∈ [1.3, 6], d = 1, 2, 3: |ΔL| ≤ 5e-5 for
  Wendland2, ≤ 1.5e-5 for CohesionKernel, ≤ 5e-6 for Poly6, CubicSpline and QuarticSpline,
  ≤ 5e-7 for Wendland4, ≤ 5e-8 for QuinticSpline, ≤ 1e-8 for Wendland6, B7 and B8, ≤ 1e-13 for the
  Gaussian (its transform is exp(−s²/512)). Kernels with a cusp at the origin (Spiky,
  HOCT4: ŵ ~ s^−(d+1)) converge only like 1/s_max and differ by up to 6e-2; ``'fourier'``
  is not a useful check for them.
* ``'closed'`` (Wendland only, `latticeDensityClosed`): the Epstein-zeta series. For a
  Wendland kernel k(q) = Σ_p a_p q^p is one polynomial on [0, 1]. By Poisson summation
  L − 1 = Σ_{m≠0} ŵ(2π n_h |m|); the large-s expansion of ŵ has two sources: the odd powers
  |x|^p at the origin (non-oscillatory, exactly ``C_d a_p c(p, d) s^−(d+p)`` with
  c(p, d) = 2^(p+d) π^(d/2) Γ((p+d)/2) / Γ(−p/2), the Fourier transform of |x|^p), and the
  support edge |x| = 1 (terms oscillating like cos(2π n_h |m| + φ)). Summing the origin
  terms over the lattice gives, exactly,

      L_closed = 1 + C_d Σ_{p odd} a_p c(p, d) (2π n_h)^−(d+p) Z_d(d+p),

  with the Epstein zeta function Z_d(s) = Σ_{m ∈ Z^d \ 0} |m|^−s (`epsteinZeta`). The
  neglected edge part has the same order in n_h as the leading term in 1D and 3D and half an
  order less in 2D, and it oscillates in n_h: ``'closed'`` is the smooth trend (the n_h
  average) of L, not L itself. Accuracy measured against ``'shells'`` for n_h ∈ [3, 11]:
  averaged over a unit window of n_h, L_closed − 1 matches L − 1 to ≤ 3.5 % (≤ 1 % for
  n_h ≥ 6); pointwise the relative error of L − 1 reaches 50 % in 1D (Wendland2), 25 % in 3D
  and 10 % in 2D. Its sign is the sign of the leading coefficient, positive for every
  Wendland kernel (consistent with `latticeDensityIsStrictlyAbove1`). Other kernels raise
  `ValueError` (B-splines and the Gaussian have no odd powers at the origin, so their whole
  deviation is the oscillatory part).

ViscosityKernel (k(0) = +∞: the lattice sum diverges) and AdhesionKernel (not an
interpolation kernel) raise `ValueError`: calibration is undefined for them.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from ..enumTypes import KernelFunctions as K
from .constants import C_D
from .hostShapes import asKernel, checkDim, hostShape, hostShapeKnots

__all__ = [
    "latticeDensity",
    "latticeDensityFactor",
    "latticeDensityShells",
    "latticeDensityFourier",
    "latticeDensityClosed",
    "latticeDensityIsStrictlyAbove1",
    "kernelFourierTransform",
    "epsteinZeta",
    "shellCounts",
    "jacobiR2",
]

_METHODS = ("shells", "fourier", "closed")
_WENDLAND = (K.Wendland2, K.Wendland4, K.Wendland6)
_UNDEFINED = {
    K.ViscosityKernel: "k(0) = +inf, so the lattice sum diverges",
    K.AdhesionKernel: "it is not an interpolation kernel; calibration is not offered for it",
}

#: Default truncation (largest argument of ŵ) of the Poisson sum of the 'fourier' method.
FOURIER_S_MAX = 150.0


# --------------------------------------------------------------------------------------
# validation


def _calibratable(owner: str, kernel) -> K:
    kernel = asKernel(owner, kernel)
    if kernel in _UNDEFINED:
        raise ValueError(
            f"{owner}: lattice calibration is undefined for kernel={kernel.name} "
            f"({_UNDEFINED[kernel]}); accepted: every KernelFunctions member except "
            "ViscosityKernel and AdhesionKernel"
        )
    return kernel


def _positiveFinite(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{owner}: {name}={value!r}; accepted: a positive finite real number")
    v = float(value)
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{owner}: {name}={value!r}; accepted: a positive finite real number")
    return v


def _nonNegativeInt(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{owner}: {name}={value!r}; accepted: a non-negative integer")
    return int(value)


# --------------------------------------------------------------------------------------
# shell counts


def shellCounts(jmax: int, d: int) -> np.ndarray:
    """r_d(j) = #{n ∈ Z^d : |n|² = j} for j = 0 … jmax, by enumeration.

    The count is built one coordinate at a time: r_d(j) = Σ_{n_d} r_{d−1}(j − n_d²), starting
    from r_1 (1 at j = 0, 2 at every positive square). Exact int64 counts.

    Args:
        jmax: largest squared norm j counted (non-negative int).
        d: lattice dimension, 1, 2 or 3.

    Returns:
        int64 array of length jmax + 1.
    """
    jmax = _nonNegativeInt("shellCounts", "jmax", jmax)
    d = checkDim("shellCounts", d)
    roots = np.arange(math.isqrt(jmax) + 1)
    squares = roots * roots
    r1 = np.zeros(jmax + 1, dtype=np.int64)
    r1[squares] = 2
    r1[0] = 1
    r = r1.copy()
    for _ in range(d - 1):
        nxt = np.zeros_like(r)
        for sq in squares:
            nxt[sq:] += r1[sq] * r[: jmax + 1 - sq]
        r = nxt
    return r


def jacobiR2(j):
    """r_2(j) by Jacobi's two-square theorem: r_2(0) = 1, r_2(j) = 4 (d_1(j) − d_3(j)) for
    j ≥ 1, where d_a(j) counts the divisors of j congruent to a mod 4.

    Args:
        j: a non-negative integer, or an array-like of them.

    Returns:
        an int (scalar input) or an int64 array.
    """
    if isinstance(j, (numbers.Integral, np.integer)) and not isinstance(j, bool):
        return _jacobiR2Scalar(_nonNegativeInt("jacobiR2", "j", j))
    arr = np.asarray(j)
    if arr.dtype.kind not in "iu" or np.any(arr < 0):
        raise ValueError(f"jacobiR2: j={j!r}; accepted: non-negative integers")
    return np.vectorize(_jacobiR2Scalar, otypes=[np.int64])(arr)


def _jacobiR2Scalar(j: int) -> int:
    if j == 0:
        return 1
    d1 = d3 = 0
    for a in range(1, math.isqrt(j) + 1):
        if j % a:
            continue
        for div in {a, j // a}:
            if div % 4 == 1:
                d1 += 1
            elif div % 4 == 3:
                d3 += 1
    return 4 * (d1 - d3)


# --------------------------------------------------------------------------------------
# shells


def latticeDensityShells(kernel, n_h: float, d: int) -> float:
    """L = (C_d / n_h^d) Σ_{j=0}^{⌊n_h²⌋} r_d(j) k(√j / n_h) (uncached; host float64).

    Exact for every real n_h > 0; the cost is O(n_h^2 · n_h) for the shell counts.

    Args:
        kernel: a `KernelFunctions` member other than ViscosityKernel and AdhesionKernel.
        n_h: support in lattice spacings, h/s (positive finite).
        d: 1, 2 or 3.
    """
    owner = "latticeDensityShells"
    kernel = _calibratable(owner, kernel)
    d = checkDim(owner, d)
    n_h = _positiveFinite(owner, "n_h", n_h)
    jmax = math.floor(n_h * n_h)
    counts = shellCounts(jmax, d)
    j = np.nonzero(counts)[0]
    k = hostShape(kernel, np.sqrt(j.astype(np.float64)) / n_h, d)
    return float(C_D[kernel][d - 1] / n_h**d * np.dot(counts[j].astype(np.float64), k))


# --------------------------------------------------------------------------------------
# Fourier transform and the Poisson sum


def _besselJ0(x: np.ndarray) -> np.ndarray:
    """Bessel J0 in float64 (absolute error ~1e-15 for 0 ≤ x ≤ 200).

    Miller's backward recurrence J_{k−1} = (2k/x) J_k − J_{k+1}, normalised with
    J_0 + 2 Σ_k J_{2k} = 1; a three-term series for x < 1e-3. (torch.special.bessel_j0 is
    only ~4e-7 accurate on 5 < x < 25, and SciPy is not a runtime dependency.)
    """
    x = np.abs(np.asarray(x, dtype=np.float64))
    out = np.empty_like(x)
    flat, res = x.ravel(), out.ravel()
    small = flat < 1e-3
    t = flat[small] ** 2 / 4.0
    res[small] = 1.0 - t + t * t / 4.0 - t**3 / 36.0
    xs = flat[~small]
    if xs.size:
        xmax = float(xs.max())
        m = 2 * ((int(xmax) + 60 + int(8.0 * xmax ** (1.0 / 3.0))) // 2)
        jp1 = np.zeros_like(xs)
        jk = np.full_like(xs, 1e-30)
        norm = np.zeros_like(xs)
        inv = 2.0 / xs
        for k in range(m, 0, -1):
            jp1, jk = jk, k * inv * jk - jp1  # jk is now J_{k-1}
            if (k - 1) % 2 == 0 and k > 1:
                norm += 2.0 * jk
            big = np.abs(jk) > 1e250
            if big.any():
                jk[big] *= 1e-250
                jp1[big] *= 1e-250
                norm[big] *= 1e-250
        res[~small] = jk / (norm + jk)
    return out


@functools.lru_cache(maxsize=64)
def _quadrature(kernel: K, d: int):
    """Gauss-Legendre nodes/weights on [0, 1]: 32 equal panels, split at the knots, 16 nodes
    per panel (exact to ~1e-14 for the oscillatory integrands with s ≤ 150)."""
    breaks = np.unique(np.concatenate([np.linspace(0.0, 1.0, 33), hostShapeKnots(kernel, d)]))
    x, w = np.polynomial.legendre.leggauss(16)
    a, b = breaks[:-1, None], breaks[1:, None]
    r = ((a + b) / 2.0 + (b - a) / 2.0 * x).ravel()
    wr = ((b - a) / 2.0 * w).ravel()
    W = C_D[kernel][d - 1] * hostShape(kernel, r, d) * wr  # C_d k(r) dr
    r.setflags(write=False)
    W.setflags(write=False)
    return r, W


def kernelFourierTransform(kernel, s, d: int) -> np.ndarray:
    """Radial Fourier transform ŵ(s) = ∫_{R^d} W(x) e^{−i s·x} dx of the unit-support kernel
    W(x) = C_d k(|x|) (h = 1), host float64.

    * 1D: ŵ(s) = 2 ∫_0^1 W(r) cos(s r) dr
    * 2D: ŵ(s) = 2π ∫_0^1 W(r) J_0(s r) r dr
    * 3D: ŵ(s) = 4π ∫_0^1 W(r) sin(s r)/(s r) r² dr

    ŵ(0) = ∫W = 1 for the 12 SPH kernels. Computed by Gauss-Legendre quadrature split at the
    kernel knots; accurate to about 1e-14 for |s| ≤ 150 (the range the Poisson sum uses),
    with slowly growing error beyond.

    Args:
        kernel: any kernel whose calibration is defined (not ViscosityKernel, whose k(0) is
            singular, nor AdhesionKernel).
        s: array-like of angular frequencies (any shape; the sign is irrelevant).
        d: 1, 2 or 3.

    Returns:
        float64 array of the shape of `s`.
    """
    owner = "kernelFourierTransform"
    kernel = _calibratable(owner, kernel)
    d = checkDim(owner, d)
    s = np.abs(np.asarray(s, dtype=np.float64))
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{owner}: s contains non-finite values; accepted: finite reals")
    r, W = _quadrature(kernel, d)
    flat = s.ravel()
    out = np.empty_like(flat)
    block = max(1, 2**20 // r.size)
    for start in range(0, flat.size, block):
        sb = flat[start : start + block]
        sr = np.outer(sb, r)
        if d == 1:
            out[start : start + block] = 2.0 * (np.cos(sr) @ W)
        elif d == 2:
            out[start : start + block] = 2.0 * math.pi * (_besselJ0(sr) @ (W * r))
        else:
            safe = np.where(sr == 0.0, 1.0, sr)
            sinc = np.where(sr == 0.0, 1.0, np.sin(safe) / safe)
            out[start : start + block] = 4.0 * math.pi * (sinc @ (W * r * r))
    return out.reshape(s.shape)


def latticeDensityFourier(kernel, n_h: float, d: int, sMax: float = FOURIER_S_MAX) -> float:
    """L by Poisson summation: ŵ(0) + Σ_{1 ≤ j, 2π n_h √j ≤ sMax} r_d(j) ŵ(2π n_h √j).

    A cross-check of `latticeDensityShells`; see the module docstring for its accuracy (the
    truncation of the sum at sMax = 150 dominates).

    Args:
        kernel: a `KernelFunctions` member other than ViscosityKernel and AdhesionKernel.
        n_h: support in lattice spacings, h/s (positive finite).
        d: 1, 2 or 3.
        sMax: truncation of the Poisson sum in Fourier frequency (default 150).
    """
    owner = "latticeDensityFourier"
    kernel = _calibratable(owner, kernel)
    d = checkDim(owner, d)
    n_h = _positiveFinite(owner, "n_h", n_h)
    sMax = _positiveFinite(owner, "sMax", sMax)
    jmax = math.floor((sMax / (2.0 * math.pi * n_h)) ** 2)
    counts = shellCounts(jmax, d)
    j = np.nonzero(counts)[0]
    j = j[j > 0]
    w0 = float(kernelFourierTransform(kernel, 0.0, d))
    if j.size == 0:
        return w0
    w = kernelFourierTransform(kernel, 2.0 * math.pi * n_h * np.sqrt(j.astype(np.float64)), d)
    return w0 + float(np.dot(counts[j].astype(np.float64), w))


# --------------------------------------------------------------------------------------
# Epstein zeta and the closed form


def _gammaUpperScaled(a: float, x: float) -> float:
    """Γ(a, x) · e^x · x^(−a) for real a (any sign, a < 170) and x > 0.

    For 0 < a and x < a + 1: Γ(a) e^x x^(−a) − Σ_n x^n / (a (a+1) … (a+n)) (the series of
    the lower function γ(a, x), no cancellation since γ(a, x) < Γ(a) there). Otherwise the
    modified-Lentz evaluation of Legendre's continued fraction, which converges quickly for
    x ≥ a + 1 and for every x > 0 when a ≤ 0.
    """
    if a > 0.0 and x < a + 1.0:
        term = 1.0 / a
        series = term
        n = 0
        while abs(term) > 1e-17 * abs(series):
            n += 1
            term *= x / (a + n)
            series += term
        return math.exp(math.lgamma(a) + x - a * math.log(x)) - series
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    dd = 1.0 / b if b != 0.0 else 1.0 / tiny
    h = dd
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2.0
        dd = an * dd + b
        dd = tiny if abs(dd) < tiny else dd
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        dd = 1.0 / dd
        delta = dd * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            return h
    raise ArithmeticError(f"incomplete gamma continued fraction did not converge (a={a}, x={x})")


def epsteinZeta(s: float, d: int) -> float:
    """Epstein zeta function of the cubic lattice: Z_d(s) = Σ_{m ∈ Z^d \\ 0} |m|^(−s), s > d.

    Computed with the theta-function (Riemann) splitting, σ = s/2:

        π^(−σ) Γ(σ) Z_d = 1/(σ − d/2) − 1/σ
                          + Σ_{m≠0} [Γ(σ, π|m|²)(π|m|²)^(−σ) + Γ(d/2−σ, π|m|²)(π|m|²)^(σ−d/2)],

    whose lattice sum converges like e^(−π|m|²) (|m|² ≤ 60 is used). For s ≥ 2d + 30 the
    direct sum over |m|² ≤ 400 is used instead (its tail is below 1e-18 relative). Relative
    accuracy about 1e-14. Examples: Z_1(s) = 2ζ(s); Z_2(4) = 4 ζ(2) G (Catalan's G);
    Z_3(6) = 8.40192397…

    Args:
        s: exponent, a float with s > d.
        d: lattice dimension, 1, 2 or 3.
    """
    owner = "epsteinZeta"
    d = checkDim(owner, d)
    s = _positiveFinite(owner, "s", s)
    if s <= d:
        raise ValueError(f"epsteinZeta: s={s!r} with d={d}; accepted: s > d (the sum diverges)")
    if s >= 2 * d + 30:
        counts = shellCounts(400, d)
        j = np.nonzero(counts)[0][1:]
        return float(np.dot(counts[j].astype(np.float64), j.astype(np.float64) ** (-0.5 * s)))
    sigma = 0.5 * s
    counts = shellCounts(60, d)
    total = 0.0
    for j in range(1, 61):
        if counts[j] == 0:
            continue
        x = math.pi * j
        total += counts[j] * math.exp(-x) * (
            _gammaUpperScaled(sigma, x) + _gammaUpperScaled(0.5 * d - sigma, x)
        )
    return float(
        math.pi**sigma / math.gamma(sigma) * (1.0 / (sigma - 0.5 * d) - 1.0 / sigma + total)
    )


def _wendlandPolynomial(kernel: K, d: int) -> np.ndarray:
    """Power-series coefficients a_p of the Wendland k(q) on [0, 1] (Wendland2, 4, 6)."""
    if d == 1:
        power, tail = {
            K.Wendland2: (3, [1.0, 3.0]),
            K.Wendland4: (5, [1.0, 5.0, 8.0]),
            K.Wendland6: (7, [1.0, 7.0, 19.0, 21.0]),
        }[kernel]
    else:
        power, tail = {
            K.Wendland2: (4, [1.0, 4.0]),
            K.Wendland4: (6, [1.0, 6.0, 35.0 / 3.0]),
            K.Wendland6: (8, [1.0, 8.0, 25.0, 32.0]),
        }[kernel]
    P = np.polynomial.polynomial
    return P.polymul(P.polypow([1.0, -1.0], power), tail)


def _fourierPowerCoefficient(p: int, d: int) -> float:
    """c(p, d): the Fourier transform of |x|^p in R^d is c(p, d) |s|^(−p−d) (p odd)."""
    return 2.0 ** (p + d) * math.pi ** (0.5 * d) * math.gamma(0.5 * (p + d)) / math.gamma(-0.5 * p)


def latticeDensityClosed(kernel, n_h: float, d: int) -> float:
    """Epstein-zeta form of L for the Wendland kernels (the smooth, non-oscillatory part).

    L_closed = 1 + C_d Σ_{p odd} a_p c(p, d) (2π n_h)^−(d+p) Z_d(d+p); see the module
    docstring for the derivation and its accuracy (it omits the oscillatory support-edge
    terms, so it tracks the n_h-average of L, not L itself). Other kernels raise ValueError.

    Args:
        kernel: a Wendland `KernelFunctions` member (Wendland2, Wendland4, Wendland6).
        n_h: support in lattice spacings, h/s (positive finite).
        d: 1, 2 or 3.
    """
    owner = "latticeDensityClosed"
    kernel = _calibratable(owner, kernel)
    if kernel not in _WENDLAND:
        raise ValueError(
            f"latticeDensityClosed: kernel={kernel.name} has no Epstein-zeta form; accepted: "
            "Wendland2, Wendland4, Wendland6 (use method='shells')"
        )
    d = checkDim(owner, d)
    n_h = _positiveFinite(owner, "n_h", n_h)
    a = _wendlandPolynomial(kernel, d)
    total = 0.0
    for p in range(1, a.size, 2):
        if a[p] != 0.0:
            total += (
                a[p]
                * _fourierPowerCoefficient(p, d)
                * (2.0 * math.pi * n_h) ** (-(d + p))
                * _epsteinCached(d + p, d)
            )
    return 1.0 + C_D[kernel][d - 1] * total


@functools.lru_cache(maxsize=128)
def _epsteinCached(s: int, d: int) -> float:
    return epsteinZeta(float(s), d)


# --------------------------------------------------------------------------------------
# public entry points


@functools.lru_cache(maxsize=4096)
def _latticeDensityCached(kernel: K, n_h: float, d: int, method: str) -> float:
    if method == "shells":
        return latticeDensityShells(kernel, n_h, d)
    if method == "fourier":
        return latticeDensityFourier(kernel, n_h, d)
    return latticeDensityClosed(kernel, n_h, d)


def latticeDensity(kernel, n_h: float, d: int, method: str = "shells") -> float:
    """Lattice density ratio L(kernel, n_h, d) (module docstring), host float64, cached.

    Args:
        kernel: a `KernelFunctions` member other than ViscosityKernel and AdhesionKernel.
        n_h: support in lattice spacings, h/s (positive finite).
        d: 1, 2 or 3.
        method: 'shells' (default, exact), 'fourier' (Poisson-sum cross-check) or 'closed'
            (Wendland-only Epstein-zeta trend); see the module docstring.

    Returns:
        L as a Python float. The result is cached per (kernel, n_h, d, method).

    Raises:
        ValueError: for an unknown kernel, ViscosityKernel / AdhesionKernel (calibration
            undefined), a non-positive or non-finite n_h, d ∉ {1, 2, 3}, an unknown method,
            or method='closed' with a non-Wendland kernel.
    """
    owner = "latticeDensity"
    kernel = _calibratable(owner, kernel)
    d = checkDim(owner, d)
    n_h = _positiveFinite(owner, "n_h", n_h)
    if method not in _METHODS:
        raise ValueError(f"{owner}: method={method!r}; accepted: {', '.join(_METHODS)}")
    return _latticeDensityCached(kernel, n_h, d, method)


def latticeDensityFactor(kernel, n_h: float, d: int, method: str = "shells") -> float:
    """Calibration factor 1 / L(kernel, n_h, d), host float64, cached.

    Same arguments and errors as `latticeDensity`. For CohesionKernel L may be ≤ 0; the
    factor is then returned as computed (negative, or +inf for L = 0) and the launch check,
    which requires a finite positive factor, rejects it.

    Args:
        kernel: a `KernelFunctions` member other than ViscosityKernel and AdhesionKernel.
        n_h: support in lattice spacings, h/s (positive finite).
        d: 1, 2 or 3.
        method: 'shells' (default), 'fourier' or 'closed', as for `latticeDensity`.
    """
    L = latticeDensity(kernel, n_h, d, method)
    return math.inf if L == 0.0 else 1.0 / L


def latticeDensityIsStrictlyAbove1(kernel) -> bool:
    """True for the Wendland kernels, whose lattice density L exceeds 1 (1/L < 1) for every
    n_h; False for every other kernel.

    For the Wendland kernels the smooth part of L − 1 (the Epstein-zeta series of
    `latticeDensityClosed`) is positive, and the shells sum was verified to stay above 1 on a
    fine n_h grid over [0.3, 20] in d = 1, 2, 3 (minimum L − 1 ≈ 2e-11, Wendland6 3D at
    n_h = 20). The splines, for example, cross 1 (CubicSpline 2D: 1/L = 1.0000424 at n_h = 4).

    Args:
        kernel: a `KernelFunctions` member.
    """
    return asKernel("latticeDensityIsStrictlyAbove1", kernel) in _WENDLAND
