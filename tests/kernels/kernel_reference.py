"""Independent float64 NumPy re-statement of the kernel formulas for the kernel tests.

Written from the spec text only (never imports library code): shape functions with their
derivatives, C_d, the evaluation rule, the derived quantities with the eps regularisers,
and the pairwise support tables.
"""

from __future__ import annotations

import math

import numpy as np

PI = math.pi

# KernelFunctions values
W2, W4, W6 = 0, 1, 2
POLY6, SPIKY = 20, 21
CUBIC, QUARTIC, QUINTIC, B8, B7, HOCT4, GAUSSIAN = 30, 31, 32, 33, 34, 35, 36
VISCOSITY, COHESION, ADHESION = 40, 41, 42

SPH_KERNELS = (W2, W4, W6, CUBIC, QUARTIC, QUINTIC, B7, B8, HOCT4, GAUSSIAN, POLY6, SPIKY)
ALL_KERNELS = SPH_KERNELS + (VISCOSITY, COHESION, ADHESION)
NAMES = {
    W2: "Wendland2",
    W4: "Wendland4",
    W6: "Wendland6",
    POLY6: "Poly6",
    SPIKY: "Spiky",
    CUBIC: "CubicSpline",
    QUARTIC: "QuarticSpline",
    QUINTIC: "QuinticSpline",
    B8: "B8",
    B7: "B7",
    HOCT4: "HOCT4",
    GAUSSIAN: "Gaussian",
    VISCOSITY: "ViscosityKernel",
    COHESION: "CohesionKernel",
    ADHESION: "AdhesionKernel",
}

# SupportScheme values
GATHER, SCATTER, MEAN, KMS, SUPER, PARTIAL = 11, 12, 13, 14, 15, 16
SUPPORT_MODES = (GATHER, SCATTER, MEAN, KMS, SUPER, PARTIAL)

HOCT4_ALPHA = 0.214108111463
HOCT4_P = -2.154228492776
HOCT4_Q = 0.981018558675

C_D = {
    W2: (5 / 4, 7 / PI, 21 / (2 * PI)),
    W4: (3 / 2, 9 / PI, 495 / (32 * PI)),
    W6: (55 / 32, 78 / (7 * PI), 1365 / (64 * PI)),
    CUBIC: (8 / 3, 80 / (7 * PI), 16 / PI),
    QUARTIC: (3125 / 768, 46875 / (2398 * PI), 15625 / (512 * PI)),
    QUINTIC: (243 / 40, 15309 / (478 * PI), 2187 / (40 * PI)),
    B7: (823543 / 92160, 5764801 / (113149 * PI), 5764801 / (61440 * PI)),
    B8: (4096 / 315, 589824 / (7435 * PI), 16384 / (105 * PI)),
    HOCT4: (2.0684349363, 3.7158334191, 6.5150499306),
    GAUSSIAN: ((128 / PI) ** 0.5, (128 / PI) ** 1.0, (128 / PI) ** 1.5),
    POLY6: (35 / 32, 4 / PI, 315 / (64 * PI)),
    SPIKY: (2.0, 10 / PI, 15 / PI),
    VISCOSITY: (15 / (2 * PI), 10 / (9 * PI), 15 / (2 * PI)),
    COHESION: (32 / PI, 32 / PI, 32 / PI),
    ADHESION: (0.007, 0.007, 0.007),
}

#: interior knots (derivative discontinuities) per kernel, for FD and quadrature splits
KNOTS = {
    CUBIC: (0.5,),
    QUARTIC: (0.2, 0.6),
    QUINTIC: (1 / 3, 2 / 3),
    B7: (1 / 7, 3 / 7, 5 / 7),
    B8: (0.25, 0.5, 0.75),
    HOCT4: (HOCT4_ALPHA, 0.5, 0.75),
    COHESION: (0.5,),
    ADHESION: (0.5,),
}

EPS = {np.float32: 1e-7, np.float64: 1e-15}


def _tp(t, q):
    return np.maximum(t - q, 0.0)


def shape(kernel, d, q):
    """(k, k', k'', k''') of each kernel's shape function for q in [0, 1] (float64 arrays)."""
    q = np.asarray(q, dtype=np.float64)
    a = 1.0 - q
    one = np.ones_like(q)
    if kernel == W2:
        if d == 1:
            return (a**3 * (1 + 3 * q), -12 * q * a**2, -12 * (3 * q**2 - 4 * q + 1), 48 - 72 * q)
        return (
            a**4 * (1 + 4 * q),
            -20 * q * a**3,
            20 * (4 * q - 1) * a**2,
            120 * (2 * q**2 - 3 * q + 1),
        )
    if kernel == W4:
        if d == 1:
            return (
                a**5 * (1 + 5 * q + 8 * q**2),
                -14 * q * (4 * q + 1) * a**4,
                14 * (24 * q**2 - 3 * q - 1) * a**3,
                -840 * q * (2 * q - 1) * a**2,
            )
        return (
            a**6 * (1 + 6 * q + (35 / 3) * q**2),
            -(56 / 3) * q * (5 * q + 1) * a**5,
            (56 / 3) * (35 * q**2 - 4 * q - 1) * a**4,
            -560 * q * (7 * q - 3) * a**3,
        )
    if kernel == W6:
        if d == 1:
            return (
                a**7 * (1 + 7 * q + 19 * q**2 + 21 * q**3),
                -6 * q * (35 * q**2 + 18 * q + 3) * a**6,
                18 * (105 * q**3 + 13 * q**2 - 5 * q - 1) * a**5,
                -1008 * q * (15 * q**2 - 4 * q - 1) * a**4,
            )
        return (
            a**8 * (1 + 8 * q + 25 * q**2 + 32 * q**3),
            -22 * q * (16 * q**2 + 7 * q + 1) * a**7,
            22 * (160 * q**3 + 15 * q**2 - 6 * q - 1) * a**6,
            -1584 * q * (20 * q**2 - 5 * q - 1) * a**5,
        )
    if kernel == CUBIC:
        b = _tp(0.5, q)
        return (
            a**3 - 4 * b**3,
            -3 * a**2 + 12 * b**2,
            np.where(q >= 0.5, 6 * a, 6 * a - 24 * (0.5 - q)),
            np.where(q >= 0.5, -6.0 * one, 18.0 * one),
        )
    if kernel == QUARTIC:
        b, c = _tp(3 / 5, q), _tp(1 / 5, q)
        return (
            a**4 - 5 * b**4 + 10 * c**4,
            -4 * a**3 + 20 * b**3 - 40 * c**3,
            12 * a**2 - 60 * b**2 + 120 * c**2,
            -24 * a + 120 * b - 240 * c,
        )
    if kernel == QUINTIC:
        b, c = _tp(2 / 3, q), _tp(1 / 3, q)
        return (
            a**5 - 6 * b**5 + 15 * c**5,
            -5 * a**4 + 30 * b**4 - 75 * c**4,
            20 * a**3 - 120 * b**3 + 300 * c**3,
            -60 * a**2 + 360 * b**2 - 900 * c**2,
        )
    if kernel == B7:

        def S(p):
            return a**p - 7 * _tp(5 / 7, q) ** p + 21 * _tp(3 / 7, q) ** p - 35 * _tp(1 / 7, q) ** p

        return (S(6), -6 * S(5), 30 * S(4), -120 * S(3))
    if kernel == B8:

        def T(p):
            return a**p - 8 * _tp(3 / 4, q) ** p + 28 * _tp(1 / 2, q) ** p - 56 * _tp(1 / 4, q) ** p

        return (T(7), -7 * T(6), 42 * T(5), -210 * T(4))
    if kernel == HOCT4:
        A, B = 16 / 5, -94 / 5
        g, b = _tp(0.75, q), _tp(0.5, q)
        inner = q <= HOCT4_ALPHA
        return (
            np.where(inner, HOCT4_P * q + HOCT4_Q, a**4 + A * g**4 + B * b**4),
            np.where(inner, HOCT4_P * one, -4 * (a**3 + A * g**3 + B * b**3)),
            np.where(inner, 0.0 * one, 12 * (a**2 + A * g**2 + B * b**2)),
            np.where(inner, 0.0 * one, -24 * (a + A * g + B * b)),
        )
    if kernel == GAUSSIAN:
        e = np.exp(-128 * q**2)
        return (e, -256 * q * e, (65536 * q**2 - 256) * e, (196608 * q - 16777216 * q**3) * e)
    if kernel == POLY6:
        return (
            (1 - q**2) ** 3,
            -6 * q * (1 - q**2) ** 2,
            -6 * (5 * q**4 - 6 * q**2 + 1),
            -6 * (20 * q**3 - 12 * q),
        )
    if kernel == SPIKY:
        return (a**3, -3 * a**2, 6 * a, -6.0 * one)
    if kernel == VISCOSITY:
        with np.errstate(divide="ignore"):
            return (
                -(q**3) / 2 + q**2 + 1 / (2 * q) - 1,
                -1.5 * q**2 - 1 / (2 * q**2) + 2 * q,
                1 / q**3 - 3 * q + 2,
                -3 / q**4 - 3,
            )
    if kernel == COHESION:
        s = np.where(q < 0.5, 2.0, 1.0)
        return (
            np.where(q < 0.5, 2 * a**3 * q**3 - 1 / 64, a**3 * q**3),
            s * (-3 * q**2 * (2 * q - 1) * a**2),
            s * 6 * q * (-5 * q**3 + 10 * q**2 - 6 * q + 1),
            s * (-120 * q**3 + 180 * q**2 - 72 * q + 6),
        )
    if kernel == ADHESION:
        outer = q > 0.5
        qq = np.where(outer, q, 0.75)  # keep the masked branch finite
        u = -4 * qq**2 + 6 * qq - 2
        p = 2 * qq**2 - 3 * qq + 1
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = (
                u**0.25,
                (6 - 8 * qq) / (4 * u**0.75),
                (16 * qq**2 - 24 * qq + 11) / (8 * u**0.75 * p),
                3 * (3 - 4 * qq) * (16 * qq**2 - 24 * qq + 15) / (32 * p**2 * u**0.75),
            )
        return tuple(np.where(outer, v, 0.0) for v in vals)
    raise ValueError(kernel)


# --- single-support quantities, x: [n, d], h: [n] ---------------------


def radial(kernel, d, x, h):
    """r, q, (k0, k1, k2, k3) scaled C_d k^(n) / h^(d+n), zero for q > 1."""
    x = np.asarray(x, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    r = np.linalg.norm(x, axis=-1)
    q = r / h
    inside = q <= 1
    ks = shape(kernel, d, np.where(inside, q, 0.5))
    C = C_D[kernel][d - 1]
    out = [np.where(inside, C * ks[n] / h ** (d + n), 0.0) for n in range(4)]
    return r, q, out


def W(kernel, d, x, h):
    return radial(kernel, d, x, h)[2][0]


def gradW(kernel, d, x, h, eps=1e-15):
    r, q, k = radial(kernel, d, x, h)
    return x / np.maximum(r, eps)[:, None] * k[1][:, None]


def dWdh(kernel, d, x, h):
    r, q, _ = radial(kernel, d, x, h)
    ks = shape(kernel, d, np.where(q <= 1, q, 0.5))
    C = C_D[kernel][d - 1]
    return np.where(q <= 1, -(C / h ** (d + 1)) * (d * ks[0] + q * ks[1]), 0.0)


def dGradWdh(kernel, d, x, h, eps=1e-15):
    r, q, _ = radial(kernel, d, x, h)
    ks = shape(kernel, d, np.where(q <= 1, q, 0.5))
    C = C_D[kernel][d - 1]
    g = np.where(q <= 1, -(C / h ** (d + 2)) * (q * ks[2] + (d + 1) * ks[1]), 0.0)
    return x / np.maximum(r, eps)[:, None] * g[:, None]


def hessian(kernel, d, x, h, eps=1e-15):
    """H = k2 A + k1 B with the regularisers of the kernels' Hessian."""
    r, q, k = radial(kernel, d, x, h)
    xx = x[:, :, None] * x[:, None, :]
    eye = np.eye(d)[None]
    A = xx / (r**2 + eps**2 * h**2)[:, None, None]
    small = q < eps
    A[small] = A[small] * (1 - eye[0]) + eye[0]
    B = -xx / (r**3 + eps**3 * h**3)[:, None, None] + eye / (r + eps**2 * h)[:, None, None]
    return k[2][:, None, None] * A + k[1][:, None, None] * B


def thirdDerivative(kernel, d, x, h):
    """T_abc (unregularised, zero for q < eps = 1e-15 and q > 1), shape [n, d, d, d]."""
    r, q, k = radial(kernel, d, x, h)
    n = x / np.where(r > 0, r, 1.0)[:, None]
    c = np.where(r > 0, (k[2] - k[1] / np.where(r > 0, r, 1.0)) / np.where(r > 0, r, 1.0), 0.0)
    eye = np.eye(d)
    nnn = np.einsum("ia,ib,ic->iabc", n, n, n)
    sym = (
        np.einsum("ab,ic->iabc", eye, n)
        + np.einsum("ac,ib->iabc", eye, n)
        + np.einsum("bc,ia->iabc", eye, n)
    )
    T = k[3][:, None, None, None] * nnn + c[:, None, None, None] * (sym - 3 * nnn)
    T[(q < 1e-15) | (q > 1)] = 0.0
    return T


def laplacian(kernel, d, x, h, eps=1e-15):
    """s k2 + t k1, 0 for q < eps or q > 1; with its x- and h-derivatives."""
    r, q, k = radial(kernel, d, x, h)
    ks = shape(kernel, d, np.where(q <= 1, q, 0.5))
    C = C_D[kernel][d - 1]
    dk1 = -(C / h ** (d + 2)) * (q * ks[2] + (d + 1) * ks[1])
    dk2 = -(C / h ** (d + 3)) * (q * ks[3] + (d + 2) * ks[2])
    re = r + eps * h
    s = r**2 / re**2
    t = -(r**2) / re**3 + d / re
    ds_dr = 2 * r / re**2 - 2 * r**2 / re**3
    ds_dh = -2 * eps * r**2 / re**3
    dt_dr = -2 * r / re**3 + 3 * r**2 / re**4 - d / re**2
    dt_dh = 3 * eps * r**2 / re**4 - d * eps / re**2
    live = (q >= eps) & (q <= 1)
    lap = np.where(live, s * k[2] + t * k[1], 0.0)
    rr = np.where(r > 0, r, 1.0)
    grad = np.where(
        live[:, None],
        x / rr[:, None] * (ds_dr * k[2] + s * k[3] + dt_dr * k[1] + t * k[2])[:, None],
        0.0,
    )
    dh = np.where(live, ds_dh * k[2] + s * dk2 + dt_dh * k[1] + t * dk1, 0.0)
    return lap, grad, dh


# --- pairwise support -----------------------------------------------------


def pairSupport(mode, hi, hj):
    if mode == GATHER:
        return hi
    if mode == SCATTER:
        return hj
    if mode == MEAN:
        return (hi + hj) / 2
    return np.maximum(hi, hj)


def pairSupportTangent(mode, hi, hj, dhi, dhj):
    if mode == GATHER:
        return dhi
    if mode == SCATTER:
        return dhj
    if mode == MEAN:
        return (dhi + dhj) / 2
    return np.where(hj > hi, dhj, dhi)


def pairValue(f, mode, hi, hj):
    """The W / grad W column: KernelMeanSymmetric and SuperSymmetric average."""
    if mode in (KMS, SUPER):
        return 0.5 * (f(hi) + f(hj))
    return f(pairSupport(mode, hi, hj))


def pairHelper(f, mode, hi, hj):
    """The helper column: SuperSymmetric averaged, everything else at h_ij (max for KMS)."""
    if mode == SUPER:
        return 0.5 * (f(hi) + f(hj))
    return f(pairSupport(mode, hi, hj))
