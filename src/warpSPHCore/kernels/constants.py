"""Kernel constants as float64 host values: C_d, k(0), kernelScale, packing ratios, knots.

Fractions are evaluated here, in float64 Python arithmetic, and converted to the call's
scalar type at use: Warp evaluates a literal or a constant expression such as `5.0/7.0`
inside a Warp function in float32, even in a float64 call.
"""

from __future__ import annotations

import math

from ..enumTypes import KernelFunctions as K

__all__ = [
    "C_D",
    "K0",
    "KERNEL_SCALE",
    "PACKING_RATIO",
    "UNIT_BALL_VOLUME",
    "SPH_KERNELS",
    "ALL_KERNELS",
    "HOCT4_CONSTANTS",
    "B7_KNOTS",
    "kernelC_d",
]

PI = math.pi

#: Normalisation C_d per kernel as (1D, 2D, 3D).
C_D: dict[K, tuple[float, float, float]] = {
    K.Wendland2: (5.0 / 4.0, 7.0 / PI, 21.0 / (2.0 * PI)),
    K.Wendland4: (3.0 / 2.0, 9.0 / PI, 495.0 / (32.0 * PI)),
    K.Wendland6: (55.0 / 32.0, 78.0 / (7.0 * PI), 1365.0 / (64.0 * PI)),
    K.CubicSpline: (8.0 / 3.0, 80.0 / (7.0 * PI), 16.0 / PI),
    K.QuarticSpline: (3125.0 / 768.0, 46875.0 / (2398.0 * PI), 15625.0 / (512.0 * PI)),
    K.QuinticSpline: (243.0 / 40.0, 15309.0 / (478.0 * PI), 2187.0 / (40.0 * PI)),
    K.B7: (823543.0 / 92160.0, 5764801.0 / (113149.0 * PI), 5764801.0 / (61440.0 * PI)),
    K.B8: (4096.0 / 315.0, 589824.0 / (7435.0 * PI), 16384.0 / (105.0 * PI)),
    K.HOCT4: (2.0684349363, 3.7158334191, 6.5150499306),
    K.Gaussian: (
        (128.0 / PI) ** 0.5,
        (128.0 / PI) ** 1.0,
        (128.0 / PI) ** 1.5,
    ),
    K.Poly6: (35.0 / 32.0, 4.0 / PI, 315.0 / (64.0 * PI)),
    K.Spiky: (2.0, 10.0 / PI, 15.0 / PI),
    K.ViscosityKernel: (15.0 / (2.0 * PI), 10.0 / (9.0 * PI), 15.0 / (2.0 * PI)),
    K.CohesionKernel: (32.0 / PI, 32.0 / PI, 32.0 / PI),
    K.AdhesionKernel: (0.007, 0.007, 0.007),
}

#: k(0) per kernel (Viscosity: +inf; Cohesion: 2*0 - 1/64; Adhesion: 0).
K0: dict[K, float] = {
    K.Wendland2: 1.0,
    K.Wendland4: 1.0,
    K.Wendland6: 1.0,
    K.CubicSpline: 0.5,
    K.QuarticSpline: 0.368,
    K.QuinticSpline: 66.0 / 243.0,
    K.B7: 23548.0 / 117649.0,
    K.B8: 2416.0 / 16384.0,
    K.HOCT4: 0.981018558675,
    K.Gaussian: 1.0,
    K.Poly6: 1.0,
    K.Spiky: 1.0,
    K.ViscosityKernel: math.inf,
    K.CohesionKernel: -1.0 / 64.0,
    K.AdhesionKernel: 0.0,
}

#: kernelScale H / h_DA as (1D, 2D, 3D), h_DA = 2 sigma (Dehnen & Aly 2012).
KERNEL_SCALE: dict[K, tuple[float, float, float]] = {
    K.Wendland2: (1.620185, 1.897367, 1.936492),
    K.Wendland4: (1.936492, 2.171239, 2.207940),
    K.Wendland6: (2.207940, 2.415230, 2.449490),
    K.CubicSpline: (1.732051, 1.778002, 1.825742),
    K.QuarticSpline: (1.936492, 1.977173, 2.018932),
    K.QuinticSpline: (2.121321, 2.158131, 2.195775),
    K.B7: (2.291288, 2.325170, 2.359700),
    K.B8: (2.449490, 2.481044, 2.513123),
    K.HOCT4: (2.224323, 2.192463, 2.189684410),
    K.Gaussian: (8.0, 8.0, 8.0),
    K.Poly6: (1.0, 1.0, 1.0),
    K.Spiky: (1.0, 1.0, 1.0),
    K.ViscosityKernel: (1.0, 1.0, 1.0),
    K.CohesionKernel: (1.0, 1.0, 1.0),
    K.AdhesionKernel: (1.0, 1.0, 1.0),
}

#: packing ratio eta = h_DA / dx (Dehnen & Aly Table 2); 1 for kernels not listed there.
PACKING_RATIO: dict[K, float] = {k: 1.0 for k in K}
PACKING_RATIO.update(
    {
        K.Wendland2: 1.487,
        K.Wendland4: 1.643,
        K.Wendland6: 1.866,
        K.CubicSpline: 1.292 * 1.0175,
        K.QuarticSpline: 1.203,
        K.QuinticSpline: 1.595 * 1.1425,
        K.B7: 1.595 * 1.1425,
        K.B8: 1.595 * 1.1425,
        K.HOCT4: 2.158,
        K.Gaussian: 1.337,
    }
)

#: Unit-ball volumes V_d for d = 1, 2, 3.
UNIT_BALL_VOLUME = (2.0, PI, 4.0 * PI / 3.0)

#: The 12 interpolation ("SPH") kernels that integrate to 1 in every dimension.
SPH_KERNELS = (
    K.Wendland2,
    K.Wendland4,
    K.Wendland6,
    K.CubicSpline,
    K.QuarticSpline,
    K.QuinticSpline,
    K.B7,
    K.B8,
    K.HOCT4,
    K.Gaussian,
    K.Poly6,
    K.Spiky,
)
ALL_KERNELS = tuple(K)

#: HOCT4 (Read et al. 2010): alpha, beta, gamma, A, B, P, Q.
HOCT4_CONSTANTS = {
    "alpha": 0.214108111463,
    "beta": 0.5,
    "gamma": 0.75,
    "A": 16.0 / 5.0,
    "B": -94.0 / 5.0,
    "P": -2.154228492776,
    "Q": 0.981018558675,
}

#: B7 knots as float64-exact host values (a knot rounded to float32 breaks float64 calls).
B7_KNOTS = (1.0 / 7.0, 3.0 / 7.0, 5.0 / 7.0)


def kernelC_d(kernel, d: int) -> float:
    """C_d of `kernel` in dimension d (ValueError for an unknown kernel or d)."""
    if d not in (1, 2, 3):
        raise ValueError(f"kernelC_d: d={d!r}; accepted: 1, 2, 3")
    try:
        return C_D[K(kernel)][d - 1]
    except ValueError:
        raise ValueError(
            f"kernelC_d: kernel={kernel!r} is not a KernelFunctions member"
        ) from None
