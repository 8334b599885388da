"""Forces of the fluid on walls and bodies (`Scheme.wallForce`).

A body is a set of wall particles (kind Boundary). In the momentum equation each fluid
particle i receives from each neighbour j the pair force m_i a_ij of the fused Momentum
operator (pressure, viscosity and the transport-velocity stress, `fluids.momentum`); the
force of the fluid on the body is the reaction of what the body's particles give the fluid:

    F = - sum_{i fluid} sum_{j in body} m_i a_ij,

evaluated with the pressures, densities, volumes and wall values of the rate evaluation of
the same state, so it is the force the simulation itself applies. Drag and lift of a body in
a stream are its components along and across the flow.

The sum runs over the fluid-body pairs of the neighbour list only: those edges are selected
once per list (one readback, the edge count, as the wall extrapolation's wall-fluid edges)
and kept as a list of their own (`bodyAdjacency`), on which the Momentum operator is launched
again. The force is then differentiable in reverse and forward mode in everything the rates
are (positions, velocities, densities, viscosity, body force, a network's parameters), with
no further host sync.

Two identities check it (tests/fluids/test_wall_force.py): in a tank at rest the force on
every wall equals the weight of the fluid minus sum_i m_i a_i (the fluid-fluid pair forces
cancel), and in the start-up of a Poiseuille flow the force on each plate follows the wall
shear stress of the analytic solution.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from ..dataTypes.adjacency import AdjacencyList, trustedConstruction
from ..enumTypes import ParticleType

__all__ = ["bodyAdjacency", "checkBody"]

_BODY_EDGES: OrderedDict = OrderedDict()
_BODY_EDGES_SIZE = 8


def checkBody(particles, body) -> torch.Tensor:
    """The body mask of `Scheme.wallForce`: `body` (bool ``[N]``) checked once (one
    readback), or every Boundary particle when None.

    Raises:
        ValueError: a mask of another shape or device, not bool, selecting no particle, or
            selecting a particle that is not a wall (the first one is named).
    """
    kinds = particles.kinds
    isWall = kinds == int(ParticleType.Boundary)
    if body is None:
        if not bool(isWall.any()):
            raise ValueError("wallForce: the particles hold no wall particle "
                             "(ParticleType.Boundary); a force on walls needs walls")
        return isWall
    n = kinds.shape[0]
    if not isinstance(body, torch.Tensor) or body.dtype != torch.bool \
            or tuple(body.shape) != (n,) or body.device != kinds.device:
        got = (f"{body.dtype} {tuple(body.shape)} on {body.device}"
               if isinstance(body, torch.Tensor) else type(body).__name__)
        raise ValueError(f"wallForce: body is {got}; accepted: a bool [{n}] tensor on "
                         f"{kinds.device} marking the body's wall particles")
    bad = torch.nonzero(body & ~isWall).flatten()
    if bad.numel():
        k = int(bad[0])
        raise ValueError(f"wallForce: body marks particle {k} of kind "
                         f"{ParticleType(int(kinds[k])).name} ({bad.numel()} such); accepted: "
                         "wall particles (ParticleType.Boundary) only")
    if not bool(body.any()):
        raise ValueError("wallForce: body marks no particle; accepted: a mask of at least "
                         "one wall particle")
    return body


def bodyAdjacency(adjacency: AdjacencyList, fluid: torch.Tensor,
                  body: torch.Tensor) -> AdjacencyList:
    """The edges of `adjacency` from a fluid row to a body particle, as a list of their own
    (rows and order kept; every other row empty). Selected once per list and mask (one
    readback, the edge count), then cached while the list is among the last few used."""
    if not isinstance(adjacency, AdjacencyList):
        raise TypeError(f"wallForce: neighbours is {type(adjacency).__name__}; accepted: an "
                        "AdjacencyList (the simulation's Verlet list)")
    key = (id(adjacency), id(fluid), id(body))
    hit = _BODY_EDGES.get(key)
    if hit is not None:
        _BODY_EDGES.move_to_end(key)
        return hit[-1]
    i, j = adjacency.i, adjacency.j
    rows = torch.nonzero(fluid[i] & body[j]).flatten()  # the one readback
    bi, bj = i[rows], j[rows]
    counts = torch.bincount(bi, minlength=adjacency.numRows).to(torch.int32)
    offsets = (torch.cumsum(counts, 0, dtype=torch.int32) - counts).to(torch.int32)
    with trustedConstruction():
        edges = AdjacencyList(bi, bj, counts, offsets, adjacency.numRows, adjacency.numCols,
                              supportMode=adjacency.supportMode,
                              verletScale=adjacency.verletScale,
                              sceneIndex=adjacency.sceneIndex)
    _BODY_EDGES[key] = (adjacency, fluid, body, edges)
    while len(_BODY_EDGES) > _BODY_EDGES_SIZE:
        _BODY_EDGES.popitem(last=False)
    return edges
