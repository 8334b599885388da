"""Operator kernels and their declarations (one module per operator: pair term, kernel, spec).

`OPERATORS` is the registry table iterated by dispatch, tests and docs: per `WarpOperation`,
the `OperatorSpec`, the dimensions and scalar types it is compiled for, the corrections it
applies (`operators.md` §5) and a one-line formula. Operators not listed are not implemented
yet.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..enumTypes import WarpOperation
from .covariance import COVARIANCE_SPEC
from .curl import CURL_SPEC
from .density import DENSITY_SPEC
from .divergence import DIVERGENCE_SPEC
from .gradient import GRADIENT_SPEC
from .interpolate import INTERPOLATE_SPEC
from .laplacian import LAPLACIAN_SPEC

__all__ = ["OperatorEntry", "OPERATORS", "operatorEntry"]


@dataclass(frozen=True)
class OperatorEntry:
    """One row of the operator registry."""

    operation: WarpOperation
    spec: object
    formula: str
    dims: tuple = (1, 2, 3)
    dtypes: tuple = (torch.float32, torch.float64)
    volumes: bool = False
    crk: bool = False
    gradH: bool = False
    renormalization: bool = False
    needsValues: bool = False


OPERATORS = {
    WarpOperation.Density: OperatorEntry(
        WarpOperation.Density, DENSITY_SPEC, "rho_i = sum_j m_j W_ij"),
    WarpOperation.Interpolate: OperatorEntry(
        WarpOperation.Interpolate, INTERPOLATE_SPEC, "f_i = sum_j f_j V_j W^R_ij",
        volumes=True, crk=True, needsValues=True),
    WarpOperation.Gradient: OperatorEntry(
        WarpOperation.Gradient, GRADIENT_SPEC, "grad f_i = sum_j c_ij (x) G_ij (derivative last)",
        volumes=True, crk=True, gradH=True, renormalization=True, needsValues=True),
    WarpOperation.Divergence: OperatorEntry(
        WarpOperation.Divergence, DIVERGENCE_SPEC,
        "div f_i = sum_j sum_delta c_ij[delta, ...] G_ij[delta] (first or last field axis)",
        volumes=True, crk=True, gradH=True, renormalization=True, needsValues=True),
    WarpOperation.Curl: OperatorEntry(
        WarpOperation.Curl, CURL_SPEC,
        "curl f_i = sum_j G_ij x c_ij (2D: G_x c_y - G_y c_x; 1D: 0)",
        volumes=True, crk=True, gradH=True, renormalization=True, needsValues=True),
    WarpOperation.Laplacian: OperatorEntry(
        WarpOperation.Laplacian, LAPLACIAN_SPEC,
        "lap f_i = sum_j q_ij (geometric factor of the Laplacian scheme)",
        volumes=True, crk=True, gradH=True, renormalization=True, needsValues=True),
    WarpOperation.Covariance: OperatorEntry(
        WarpOperation.Covariance, COVARIANCE_SPEC,
        "C_i = sum_j V_j (x_j - x_i) (x) G_ij (+ int32 count of W^R_ij > 0)",
        volumes=True, crk=True, renormalization=True),
}


def operatorEntry(operation) -> OperatorEntry:
    """The registry row of `operation`; NotImplementedError for operators not ported yet."""
    op = WarpOperation(operation)
    try:
        return OPERATORS[op]
    except KeyError:
        raise NotImplementedError(f"warpOperation: {op.name} is not implemented yet") from None
