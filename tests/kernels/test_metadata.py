"""Kernel metadata.

The reference values are the tables of the spec, typed in here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from warpSPHCore.enumTypes import KernelFunctions as K
from warpSPHCore.kernels.metadata import (
    n_h_to_nH,
    nH_to_n_h,
    packingRatio,
    sphKernel_xi,
    sphKernelC_d,
    sphKernelN_H,
    sphKernelScale,
    volumeToSupport,
    volumeToSupport_tensor,
)

PI = math.pi
V_D = (2.0, PI, 4.0 * PI / 3.0)

SCALE = {
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

ETA = {
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
    K.Poly6: 1.0,
    K.Spiky: 1.0,
    K.ViscosityKernel: 1.0,
    K.CohesionKernel: 1.0,
    K.AdhesionKernel: 1.0,
}

C_D = {
    K.Wendland2: (5 / 4, 7 / PI, 21 / (2 * PI)),
    K.Wendland4: (3 / 2, 9 / PI, 495 / (32 * PI)),
    K.Wendland6: (55 / 32, 78 / (7 * PI), 1365 / (64 * PI)),
    K.CubicSpline: (8 / 3, 80 / (7 * PI), 16 / PI),
    K.QuarticSpline: (3125 / 768, 46875 / (2398 * PI), 15625 / (512 * PI)),
    K.QuinticSpline: (243 / 40, 15309 / (478 * PI), 2187 / (40 * PI)),
    K.B7: (823543 / 92160, 5764801 / (113149 * PI), 5764801 / (61440 * PI)),
    K.B8: (4096 / 315, 589824 / (7435 * PI), 16384 / (105 * PI)),
    K.HOCT4: (2.0684349363, 3.7158334191, 6.5150499306),
    K.Gaussian: ((128 / PI) ** 0.5, 128 / PI, (128 / PI) ** 1.5),
    K.Poly6: (35 / 32, 4 / PI, 315 / (64 * PI)),
    K.Spiky: (2.0, 10 / PI, 15 / PI),
    K.ViscosityKernel: (15 / (2 * PI), 10 / (9 * PI), 15 / (2 * PI)),
    K.CohesionKernel: (32 / PI, 32 / PI, 32 / PI),
    K.AdhesionKernel: (0.007, 0.007, 0.007),
}


@pytest.mark.parametrize("kernel", list(K), ids=lambda k: k.name)
def test_tables(kernel):
    assert set(SCALE) == set(K)
    assert packingRatio(kernel) == pytest.approx(ETA[kernel], rel=1e-15)
    assert packingRatio(int(kernel)) == packingRatio(kernel)
    for d in (1, 2, 3):
        assert sphKernelScale(kernel, d) == SCALE[kernel][d - 1]
        assert sphKernelC_d(kernel, d) == pytest.approx(C_D[kernel][d - 1], rel=1e-15)
        xi = ETA[kernel] * SCALE[kernel][d - 1]
        assert sphKernel_xi(kernel, d) == pytest.approx(xi, rel=1e-15)
        assert sphKernelN_H(kernel, d) == pytest.approx(V_D[d - 1] * xi**d, rel=1e-14)


def test_packing_ratio_rounded_values():
    assert packingRatio(K.CubicSpline) == pytest.approx(1.31461, abs=5e-6)
    assert packingRatio(K.QuinticSpline) == pytest.approx(1.822288, abs=5e-7)


@pytest.mark.parametrize(
    "kernel,d,expected",
    [
        (K.Wendland2, 2, 25.008),
        (K.Wendland4, 2, 39.98),
        (K.Wendland6, 2, 63.81),
        (K.CubicSpline, 2, 17.164),
        (K.Wendland2, 3, 100.016),
        (K.Wendland4, 3, 199.97),
        (K.Wendland6, 3, 399.99),
        (K.CubicSpline, 3, 57.916),
    ],
)
def test_neighbour_count_examples(kernel, d, expected):
    # the spec quotes the values rounded to their last digit
    decimals = len(str(expected).split(".")[1])
    assert abs(sphKernelN_H(kernel, d) - expected) <= 0.5 * 10.0**-decimals + 1e-12


@pytest.mark.parametrize("fn", [sphKernelScale, sphKernelC_d, sphKernel_xi, sphKernelN_H])
def test_metadata_validation(fn):
    for kernel in (99, -1, "Wendland2", 2.0, None, True):
        with pytest.raises(ValueError, match="kernel"):
            fn(kernel, 2)
    for d in (0, 4, 2.0, True, "2"):
        with pytest.raises(ValueError, match="d="):
            fn(K.Wendland2, d)
    with pytest.raises(ValueError, match="kernel"):
        packingRatio(55)


# --------------------------------------------------------------------------------------
# volumeToSupport


@pytest.mark.parametrize("d", [1, 2, 3])
def test_volume_to_support_formula_and_round_trip(d):
    for v, N in ((0.01, 20.0), (2.5e-4, 50), (1.0, 1.0), (3.0, 123.4)):
        h = volumeToSupport(v, N, d)
        ref = (N * v / 2, math.sqrt(N * v / PI), (3 * N * v / (4 * PI)) ** (1 / 3))[d - 1]
        assert isinstance(h, float)
        assert h == pytest.approx(ref, rel=1e-14)
        assert V_D[d - 1] * h**d / v == pytest.approx(N, rel=1e-13)


def test_volume_to_support_arrays():
    v = np.array([0.1, 0.2, 0.4])
    h = volumeToSupport(v, 10, 2)
    assert isinstance(h, np.ndarray) and h.shape == (3,)
    np.testing.assert_allclose(h, np.sqrt(10 * v / PI), rtol=1e-15)


@pytest.mark.parametrize(
    "v,N", [(0.0, 10), (-1.0, 10), (math.nan, 10), (math.inf, 10), (0.1, 0), (0.1, -5),
            (0.1, math.nan), ("0.1", 10), (True, 10), (None, 10)]
)
def test_volume_to_support_validation(v, N):
    with pytest.raises(ValueError):
        volumeToSupport(v, N, 2)


def test_volume_to_support_rejects_tensors_and_bad_d():
    with pytest.raises(TypeError, match="_tensor"):
        volumeToSupport(torch.tensor(0.1), 10, 2)
    with pytest.raises(ValueError):
        volumeToSupport(0.1, 10, 4)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_volume_to_support_tensor(device, dtype, d):
    v = torch.tensor([0.01, 0.02, 0.5], dtype=dtype, device=device)
    h = volumeToSupport_tensor(v, 30, d)
    assert h.dtype == dtype and h.device == v.device and h.shape == v.shape
    ref = [volumeToSupport(float(x), 30, d) for x in v.cpu().double()]
    rtol = 1e-14 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(h.cpu().double().numpy(), ref, rtol=rtol)
    N = torch.tensor([10.0, 20.0, 30.0], dtype=dtype, device=device)
    h2 = volumeToSupport_tensor(v, N, d)
    ref2 = [volumeToSupport(float(x), float(n), d) for x, n in zip(v.cpu().double(), N.cpu())]
    np.testing.assert_allclose(h2.cpu().double().numpy(), ref2, rtol=rtol)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_volume_to_support_tensor_gradcheck(d):
    v = torch.tensor([0.01, 0.02, 0.5], dtype=torch.float64, requires_grad=True)
    N = torch.tensor([10.0, 25.0, 40.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: volumeToSupport_tensor(a, b, d), (v, N),
                                    eps=1e-6, atol=1e-6, rtol=1e-4)


def test_volume_to_support_tensor_validation():
    v = torch.tensor([0.1], dtype=torch.float64)
    with pytest.raises(TypeError):
        volumeToSupport_tensor([0.1], 10, 2)
    with pytest.raises(TypeError):
        volumeToSupport_tensor(torch.tensor([1], dtype=torch.int64), 10, 2)
    with pytest.raises(TypeError):
        volumeToSupport_tensor(v, torch.tensor([10.0], dtype=torch.float32), 2)
    with pytest.raises(TypeError):
        volumeToSupport_tensor(v, "10", 2)
    with pytest.raises(ValueError):
        volumeToSupport_tensor(v, 10, 0)


# --------------------------------------------------------------------------------------
# n_h <-> N_H


@pytest.mark.parametrize("d", [1, 2, 3])
def test_n_h_to_nH_round_trip(d):
    for n_h in (0.5, 1.0, 2.0, 3.3, 10.7):
        nH = n_h_to_nH(n_h, d)
        assert nH == pytest.approx(V_D[d - 1] * n_h**d, rel=1e-15)
        assert nH_to_n_h(nH, d) == pytest.approx(n_h, rel=1e-14)
    assert n_h_to_nH(2, 2) == pytest.approx(4 * PI)
    assert nH_to_n_h(4 * PI / 3 * 27, 3) == pytest.approx(3.0, rel=1e-15)
    arr = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(nH_to_n_h(n_h_to_nH(arr, d), d), arr, rtol=1e-14)


def test_n_h_to_nH_matches_kernel_N_H():
    for kernel in (K.Wendland2, K.CubicSpline, K.B8):
        for d in (1, 2, 3):
            assert n_h_to_nH(sphKernel_xi(kernel, d), d) == pytest.approx(
                sphKernelN_H(kernel, d), rel=1e-14)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_n_h_to_nH_tensor(device, dtype, d):
    n_h = torch.tensor([1.0, 2.5, 4.0], dtype=dtype, device=device)
    nH = n_h_to_nH(n_h, d)
    assert nH.dtype == dtype and nH.device == n_h.device
    back = nH_to_n_h(nH, d)
    rtol = 1e-14 if dtype == torch.float64 else 1e-6
    np.testing.assert_allclose(back.cpu().double().numpy(), [1.0, 2.5, 4.0], rtol=rtol)
    np.testing.assert_allclose(nH.cpu().double().numpy(),
                               [V_D[d - 1] * x**d for x in (1.0, 2.5, 4.0)], rtol=rtol)


def test_n_h_validation():
    for bad in (0.0, -2.0, math.nan, math.inf, "2", True):
        with pytest.raises(ValueError):
            n_h_to_nH(bad, 2)
        with pytest.raises(ValueError):
            nH_to_n_h(bad, 2)
    with pytest.raises(ValueError):
        n_h_to_nH(2.0, 5)
    with pytest.raises(TypeError):
        nH_to_n_h(torch.tensor([3]), 2)
