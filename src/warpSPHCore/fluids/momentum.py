"""The momentum equation of weakly compressible SPH in one neighbour traversal: pressure, viscosity and the transport-velocity stress of Adami, Hu & Adams (2013,
J. Comput. Phys. 241: 292-307) through the fused Momentum operator
(`operators.momentum`), divided by the masses:

    a_i = (1 / m_i) sum_j (V_i^2 + V_j^2) [ -p~_ij G_ij + mu_ij u_ij (x_ij . G_ij) / r_ij^2
                                            + 1/2 (A_i + A_j) . G_ij ]

with p~_ij = (rho_j p_i + rho_i p_j) / (rho_i + rho_j), mu_ij = 2 mu_i mu_j / (mu_i + mu_j),
u_ij = u_i - u_j and A = rho u (u~ - u)^T (zero without transport velocities). For
V = m / rho and without the A term this is the inter-particle averaged pressure and the
Morris et al. (1997) viscosity of Adami et al. (2012); with V = 1 / sum_j W_ij
(`terms.numberDensityVolumes`) and the transport velocity u~ it is the momentum of the
transport-velocity formulation (docs/fluids.md).

The same traversal gives the background-pressure acceleration of the transport velocity,
a^b_i = -(p_b / m_i) sum_j (V_i^2 + V_j^2) G_ij (`terms.backgroundPressureAcceleration`
computes it alone): `transportVelocityAccelerations` returns both, so a transport-velocity
step costs one density pass (the volumes) and one momentum pass.
"""

from __future__ import annotations

import torch

from ..dataTypes.operationProperties import OperationProperties
from ..enumTypes import KernelFunctions, OperationDirection, SupportScheme, WarpOperation
from ..operations import warpOperation

__all__ = ["momentumAcceleration", "transportVelocityAccelerations", "momentumField",
           "momentumRows"]


def _column(name: str, value, n: int, like: torch.Tensor) -> torch.Tensor:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # a fill on the device, no copy from the host (a step CUDA graphs can capture)
        return torch.full((n,), float(value), dtype=like.dtype, device=like.device)
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if t.dim() == 0:
        return t.expand(n)
    if tuple(t.shape) != (n,):
        raise ValueError(f"momentumAcceleration: {name} has shape {tuple(t.shape)}; accepted: "
                         f"a number, a 0-dim tensor or [{n}]")
    return t


def momentumField(particles, pressures, velocities, dynamicViscosity=0.0,
                  transportVelocities=None, volumes=None) -> torch.Tensor:
    """The Momentum operator's per-particle field ``[N, 4 + 2 d]``: the columns
    (p, rho, V, mu, u, u~) (`operators.momentum`).

    Args:
        particles: `ParticleState` with densities (rho) and masses.
        pressures: ``[N]``.
        velocities: ``[N, d]``.
        dynamicViscosity: mu, a number, a 0-dim tensor or ``[N]``.
        transportVelocities: ``[N, d]`` u~, or None (u~ = u: no transport-velocity stress).
        volumes: ``[N]`` V, or None (m / rho).

    Returns:
        ``[N, 4 + 2 d]``, differentiable in every input.
    """
    rho = particles.densities
    if rho is None:
        raise ValueError("momentumAcceleration: particles.densities is None; accepted: a "
                         "ParticleState with densities")
    x = particles.positions
    n, d = x.shape
    if tuple(velocities.shape) != (n, d):
        raise ValueError(f"momentumAcceleration: velocities has shape "
                         f"{tuple(velocities.shape)}; accepted: [{n}, {d}]")
    ut = velocities if transportVelocities is None else transportVelocities
    if tuple(ut.shape) != (n, d):
        raise ValueError(f"momentumAcceleration: transportVelocities has shape "
                         f"{tuple(ut.shape)}; accepted: [{n}, {d}]")
    V = particles.masses / rho if volumes is None else volumes
    columns = [_column("pressures", pressures, n, x), rho, _column("volumes", V, n, x),
               _column("dynamicViscosity", dynamicViscosity, n, x)]
    return torch.cat([torch.stack(columns, dim=1), velocities, ut], dim=1)


def momentumAcceleration(particles, pressures, velocities, domain, adjacency, *,
                         dynamicViscosity=0.0, transportVelocities=None, volumes=None,
                         kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                         operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Momentum acceleration a_i (module formula), one neighbour traversal.

    Args:
        particles: `ParticleState` with densities; the masses divide the sum. Walls are
            particles of kind boundary with their extrapolated pressure, density and velocity
            (`fluids.walls`).
        pressures: ``[N]`` p.
        velocities: ``[N, d]`` u.
        domain: `DomainDescription`.
        adjacency: the neighbour list (`AdjacencyList` or `CompactHashMap`; None: a grid
            built for the call).
        dynamicViscosity: mu = rho0 nu: a number, a 0-dim tensor or ``[N]`` (per particle,
            averaged harmonically per pair); differentiable as a tensor.
        transportVelocities: ``[N, d]`` u~ of the transport-velocity formulation, or None.
        volumes: ``[N]`` V (default m / rho; the transport-velocity formulation uses
            `terms.numberDensityVolumes`).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`, docs/particle-kinds.md;
            e.g. FluidQueriesNonGhostReferences: fluid rows over fluid and wall neighbours).

    Returns:
        ``[N, d]`` accelerations; 0 for a query the interaction mode masks. Differentiable in
        reverse and forward mode (dual tensors) w.r.t. positions, supports, masses, densities,
        pressures, velocities, transport velocities, volumes and viscosity.
    """
    rows = momentumRows(particles, pressures, velocities, domain, adjacency,
                        dynamicViscosity=dynamicViscosity,
                        transportVelocities=transportVelocities, volumes=volumes,
                        kernel=kernel, supportMode=supportMode, operationMode=operationMode)
    return rows[:, 0] / particles.masses[:, None]


def momentumRows(particles, pressures, velocities, domain, adjacency, *,
                 dynamicViscosity=0.0, transportVelocities=None, volumes=None,
                 kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                 operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """The fused Momentum operator's rows ``[N, 2, d]``: (m_i a_i, sum_j (V_i^2 + V_j^2)
    G_ij) of the module formula over the pairs of `adjacency` (arguments as
    `momentumAcceleration`); `Scheme.wallForce` sums the first over a body's pairs."""
    field = momentumField(particles, pressures, velocities, dynamicViscosity,
                          transportVelocities, volumes)
    props = OperationProperties(kernel, operation=WarpOperation.Momentum,
                                supportMode=supportMode, operationMode=operationMode)
    return warpOperation(particles, props, domain, queryValues=field, adjacency=adjacency)


def transportVelocityAccelerations(particles, pressures, velocities, domain, adjacency, *,
                                   backgroundPressure, dynamicViscosity=0.0,
                                   transportVelocities=None, volumes=None,
                                   kernel=KernelFunctions.Wendland2,
                                   supportMode=SupportScheme.Gather, operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """The momentum acceleration a_i and the background-pressure acceleration
    a^b_i = -(p_b / m_i) sum_j (V_i^2 + V_j^2) G_ij of the transport-velocity formulation
    (Adami, Hu & Adams 2013), from one traversal (module docstring).

    Args:
        particles: `ParticleState` with densities and masses.
        pressures: ``[N]`` p.
        velocities: ``[N, d]`` u.
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        backgroundPressure: p_b (a number or a 0-dim tensor; Adami et al. use rho0 c0^2).
        dynamicViscosity: mu, a number, a 0-dim tensor or ``[N]``.
        transportVelocities: ``[N, d]`` u~, or None (u~ = u).
        volumes: ``[N]`` V (default m / rho; the formulation uses `numberDensityVolumes`).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).

    Returns:
        ``(a, a^b)``, both ``[N, d]``; derivatives as `momentumAcceleration`, and w.r.t. p_b.
    """
    rows = momentumRows(particles, pressures, velocities, domain, adjacency,
                        dynamicViscosity=dynamicViscosity,
                        transportVelocities=transportVelocities, volumes=volumes,
                        kernel=kernel, supportMode=supportMode, operationMode=operationMode)
    m = particles.masses[:, None]
    return rows[:, 0] / m, -backgroundPressure * rows[:, 1] / m
