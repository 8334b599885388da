"""Output-shape rules of the operators, as declared by the registry.

Each rule maps the field shape ``S`` (the value tensor's shape after the particle axis; None
for an operator without a value input), the dimension ``d`` and the call's
`OperationProperties` to the output's shape after the particle axis, or raises the
`ValueError` naming the operator, the field shape, d and what is accepted.
The rules read only host-known facts (shapes and Python options).
"""

from __future__ import annotations

import math

from ..enumTypes import LaplacianScheme

__all__ = ["shapeError", "noFieldShape", "matrixShape", "sameShape", "gradientShape",
           "divergenceShape", "curlShape", "laplacianShape", "momentumShape"]

_WHERE = "warpOperation"


def shapeError(op: str, d: int, accepted: str, shape: tuple) -> ValueError:
    """The shape error: operator, received field shape, d, accepted shapes."""
    found = f"[N, {', '.join(map(str, shape))}]" if shape else "a scalar [N]"
    return ValueError(f"{_WHERE}: {op} of a field of shape {found} in {d}D is not defined; "
                      f"accepted: {accepted}")


def noFieldShape(shape, d: int, props) -> tuple:
    """Density: one scalar per query, ``[N_q]``; no value input."""
    return ()


def matrixShape(shape, d: int, props) -> tuple:
    """Covariance: a d x d matrix per query, ``[N_q, d, d]``; no value input."""
    return (d, d)


def sameShape(shape: tuple, d: int, props) -> tuple:
    """Interpolate: the field's own shape, ``[N_q, *S]``; every S."""
    return tuple(shape)


def gradientShape(shape: tuple, d: int, props) -> tuple:
    """Gradient: derivative last, ``[N_q, *S, d]``; every S, every d."""
    return tuple(shape) + (d,)


def divergenceShape(shape: tuple, d: int, props) -> tuple:
    """Divergence: the first field axis contracted (dot mode: the last), which must have
    length d; a 1D scalar counts as ``[N, 1]``."""
    shape = tuple(shape)
    if d == 1 and shape in ((), (1,)):
        return ()
    scalar1D = " or a scalar [N]" if d == 1 else ""
    if bool(props.divergenceDotMode):
        if shape and shape[-1] == d:
            return shape[:-1]
        raise shapeError("Divergence (divergenceDotMode=True)", d,
                         f"fields [N, ..., {d}] whose last axis has length d = {d}{scalar1D}",
                         shape)
    if shape and shape[0] == d:
        return shape[1:]
    raise shapeError("Divergence", d,
                     f"fields [N, {d}, ...] whose first axis has length d = {d}{scalar1D}",
                     shape)


def curlShape(shape: tuple, d: int, props) -> tuple:
    """Curl: the cross product on the first field axis (length d); 2D drops that axis (a
    vector gives ``[N, 1]``), 3D keeps S, 1D gives zeros ``[N]``."""
    shape = tuple(shape)
    if d == 1:
        if shape in ((), (1,)):
            return ()
        raise shapeError("Curl", d, "[N] or [N, 1] (the 1D curl is zero)", shape)
    if not shape or shape[0] != d:
        raise shapeError("Curl", d, f"fields [N, {d}, ...] whose first axis has length d = {d} "
                         "(vector [N, d], matrix [N, d, d])", shape)
    if d == 2:
        return shape[1:] if len(shape) > 1 else (1,)
    return shape


def laplacianShape(shape: tuple, d: int, props) -> tuple:
    """Laplacian: the field's own shape; Dot needs a flat width F that is a multiple of d
    (d > 1), ``positiveDivergence`` a field with F = d."""
    shape = tuple(shape)
    F = math.prod(shape) if shape else 1
    if LaplacianScheme(props.laplacianMode) == LaplacianScheme.Dot and d > 1 and F % d != 0:
        raise shapeError("Laplacian (Dot)", d, f"fields whose flat width is a multiple of d = "
                         f"{d} (the projection acts on consecutive d-blocks)", shape)
    if props.positiveDivergence and F != d:
        raise shapeError("Laplacian (positiveDivergence=True)", d, f"vector fields [N, {d}]"
                         + (" or a scalar [N]" if d == 1 else ""), shape)
    return shape


def momentumShape(shape: tuple, d: int, props) -> tuple:
    """Momentum: the rows (F_i, B_i) per query, ``[N_q, 2, d]``, from the per-particle field
    ``[N, 4 + 2 d]`` (p, rho, V, mu, u, u~; `operators.momentum`)."""
    shape = tuple(shape)
    F = 4 + 2 * d
    if shape != (F,):
        raise shapeError("Momentum", d, f"the per-particle field [N, {F}] with the columns "
                         f"(p, rho, V, mu, u_0..u_{d - 1}, u~_0..u~_{d - 1})", shape)
    return (2, d)


def _momentumField(d: int) -> tuple:
    return (4 + 2 * d,)


_momentumField.label = "4 + 2d"
#: the one field shape per d the rule accepts (read by the docs tables)
momentumShape.fieldShape = _momentumField
