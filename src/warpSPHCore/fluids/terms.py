"""Physics terms of weakly compressible SPH built from the public operators.

Each is one operator call and a scaling; with ``x_ij = x_i - x_j``, ``G_ij = grad_i W_ij``,
``V_j = m_j / rho_j`` and the pair sums over the references that the call's interaction mode admits:

========================  ==================================================================
`pressureAcceleration`    a_i = - sum_j m_j (p_i / rho_i^2 + p_j / rho_j^2) G_ij
                          (the symmetric form, Monaghan 1992, Annu. Rev. Astron. Astrophys.
                          30: 543-574): the Gradient with the Symmetric scheme over rho_i
`laminarViscosity`        a_i = (2 mu / rho_i) sum_j V_j v_ij (x_ij . G_ij) / r_ij^2
                          (Morris, Fox & Zhu 1997, J. Comput. Phys. 136: 214-226, for a
                          constant dynamic viscosity mu): mu / rho_i times the Brookshaw
                          Laplacian of the velocities
`densityDiffusion`        D_i = delta h c0 sum_j 2 (rho_j - rho_i) V_j (x_ji . G_ij) / r_ij^2
                          (Molteni & Colagrossi 2009, Comput. Phys. Commun. 180: 861-872):
                          delta h c0 times the Brookshaw Laplacian of the densities
`continuityDensityRate`   drho_i/dt = sum_j m_j (v_i - v_j) . G_ij (Monaghan 1992): minus
                          the Difference-scheme Divergence with the masses as the volumes
                          (in the forward-mode scope, unlike ``consistentDivergence``)
`bodyAcceleration`        a_i = g for every particle
`numberDensityVolumes`    V_i = 1 / sum_j W_ij (the number-density volume of Adami et al.
                          2013): one Density call with unit masses
`backgroundPressure-      a_i = -(p_b / m_i) sum_j (V_i^2 + V_j^2) G_ij (Adami, Hu & Adams
Acceleration`             2013, J. Comput. Phys. 241: 292-307): the background-pressure part
                          of the transport velocity, which pushes particles from crowded to
                          sparse regions (zero on a uniform lattice). One Naive Gradient call
                          of the two-column field (1 / V, V) with the volumes V:
                          V_i^2 sum_j G_ij + sum_j V_j^2 G_ij
========================  ==================================================================

r_ij^2 is the library's Brookshaw denominator (r + 1e-8 h_ij)^2, with pairs at r = 0 skipped
(the operators' rule). The regulariser eta^2 = 0.01 h^2 that Morris et al. add to r^2 is
for coincident particles, which the r > 0 guard already excludes; the fused momentum
operator of the next step takes it as a parameter (docs/fluids.md). The densities of
`particles` must be set for every term but the continuity rate (the others divide by them or
read V_j).

Every term is differentiable in reverse and forward mode through the operators (and
composes with `torch.autograd.forward_ad` dual tensors), on the call's device and dtype,
without host syncs. The smoothing kernel, support scheme and interaction mode are those of
the `OperationProperties` built from the keyword arguments (defaults: Wendland2, Gather,
AllQueriesNonGhostReferences: every query, every reference except ghosts). Per-particle
inputs of the wrong shape raise (a ``[N, 1]`` pressure is not broadcast).
"""

from __future__ import annotations

import torch

from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState
from ..enumTypes import (
    GradientScheme,
    KernelFunctions,
    LaplacianScheme,
    OperationDirection,
    SupportScheme,
    WarpOperation,
)
from ..operations import warpOperation
from ._checks import particleField, particleScalar

__all__ = ["pressureAcceleration", "laminarViscosity", "densityDiffusion",
           "continuityDensityRate", "bodyAcceleration", "numberDensityVolumes",
           "backgroundPressureAcceleration"]


def _densities(particles, where: str) -> torch.Tensor:
    rho = getattr(particles, "densities", None)
    if rho is None:
        raise ValueError(f"{where}: particles.densities is None; accepted: a ParticleState "
                         "with densities (e.g. from a Density call)")
    return rho


def _props(op, kernel, supportMode, operationMode, **kw) -> OperationProperties:
    return OperationProperties(kernel, operation=op, supportMode=supportMode,
                               operationMode=operationMode, **kw)


def pressureAcceleration(particles, pressures, domain, adjacency,
                         kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                         operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Symmetric pressure acceleration (module table).

    Args:
        particles: `ParticleState` with densities.
        pressures: ``[N]`` pressures.
        domain: `DomainDescription`.
        adjacency: the neighbour list (`AdjacencyList` or `CompactHashMap`; None: a grid
            built for the call).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`, docs/particle-kinds.md).

    Returns:
        ``[N, d]`` accelerations.
    """
    rho = _densities(particles, "pressureAcceleration")
    particleField("pressureAcceleration", "pressures", pressures, rho.shape[0])
    props = _props(WarpOperation.Gradient, kernel, supportMode, operationMode,
                   gradientMode=GradientScheme.Symmetric)
    grad = warpOperation(particles, props, domain, queryValues=pressures, adjacency=adjacency)
    return -grad / rho[:, None]


def laminarViscosity(particles, velocities, domain, adjacency, dynamicViscosity,
                     kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                     operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Morris et al. laminar viscosity for a constant dynamic viscosity (module table).

    Args:
        particles: `ParticleState` with densities.
        velocities: ``[N, d]`` velocities.
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        dynamicViscosity: mu = rho0 nu (a number or a 0-dim tensor, differentiable).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).

    Returns:
        ``[N, d]`` accelerations.
    """
    rho = _densities(particles, "laminarViscosity")
    n, d = particles.positions.shape
    particleField("laminarViscosity", "velocities", velocities, n, d)
    particleScalar("laminarViscosity", "dynamicViscosity", dynamicViscosity, n)
    props = _props(WarpOperation.Laplacian, kernel, supportMode, operationMode,
                   gradientMode=GradientScheme.Naive, laplacianMode=LaplacianScheme.Brookshaw)
    lap = warpOperation(particles, props, domain, queryValues=velocities, adjacency=adjacency)
    return (dynamicViscosity / rho)[:, None] * lap


def densityDiffusion(particles, domain, adjacency, delta, smoothingLength, soundSpeed,
                     kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                     operationMode=OperationDirection.AllQueriesNonGhostReferences, *,
                     values=None):
    """delta-SPH density diffusion of Molteni & Colagrossi (module table), the term added to
    the density rate.

    Args:
        particles: `ParticleState` with densities.
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        delta: the diffusion coefficient (0.1 in the literature).
        smoothingLength: h of the term (the particle spacing for this library's supports,
            docs/fluids.md).
        soundSpeed: c0.
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).
        values: ``[N]`` the field whose differences are diffused (default the densities;
            the densities minus their hydrostatic part give the correction of Fourtakas et
            al. 2019, which vanishes in a fluid at rest under gravity).

    Returns:
        ``[N]`` density rates.
    """
    rho = _densities(particles, "densityDiffusion")
    if values is not None:
        rho = particleField("densityDiffusion", "values", values, rho.shape[0])
    props = _props(WarpOperation.Laplacian, kernel, supportMode, operationMode,
                   gradientMode=GradientScheme.Naive, laplacianMode=LaplacianScheme.Brookshaw)
    lap = warpOperation(particles, props, domain, queryValues=rho, adjacency=adjacency)
    return (delta * smoothingLength * soundSpeed) * lap


def continuityDensityRate(particles, velocities, domain, adjacency,
                          kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                          operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Density rate of the continuity equation, drho_i/dt = sum_j m_j v_ij . G_ij (module
    table).

    Args:
        particles: `ParticleState` (its densities are not read).
        velocities: ``[N, d]`` velocities.
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).

    Returns:
        ``[N]`` density rates.
    """
    n, d = particles.positions.shape
    particleField("continuityDensityRate", "velocities", velocities, n, d)
    props = _props(WarpOperation.Divergence, kernel, supportMode, operationMode,
                   gradientMode=GradientScheme.Difference)
    div = warpOperation(particles, props, domain, queryValues=velocities, adjacency=adjacency,
                        queryVolumes=particles.masses)
    return -div


def bodyAcceleration(gravity, like: torch.Tensor) -> torch.Tensor:
    """The body-force acceleration g for every particle: ``[N, d]`` shaped, typed and placed
    like `like` (the positions); `gravity` is a length-d sequence or tensor (a tensor keeps
    its gradient)."""
    g = torch.as_tensor(gravity, dtype=like.dtype, device=like.device)
    if g.shape != (like.shape[-1],):
        raise ValueError(f"bodyAcceleration: gravity has shape {tuple(g.shape)}; accepted: "
                         f"({like.shape[-1]},) (one component per dimension)")
    return g.expand(like.shape[0], -1)


def _reciprocalOrZero(t: torch.Tensor) -> torch.Tensor:
    """1 / t where t > 0, else 0, with finite gradients everywhere."""
    positive = t > 0
    return torch.where(positive, 1.0 / torch.where(positive, t, torch.ones_like(t)), 0.0)


def numberDensityVolumes(particles, domain, adjacency, kernel=KernelFunctions.Wendland2,
                         supportMode=SupportScheme.Gather, operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Number-density volumes V_i = 1 / sum_j W_ij (module table).

    Args:
        particles: `ParticleState` (its masses and densities are not read).
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).

    Returns:
        ``[N]`` volumes, differentiable in the positions and supports; 0 for a particle
        whose sum is empty (one the interaction mode does not query).
    """
    ones = torch.ones_like(particles.positions[:, 0])
    unit = ParticleState(particles.positions, particles.supports, ones, particles.kinds)
    props = _props(WarpOperation.Density, kernel, supportMode, operationMode)
    # 0 (not inf) where the sum is empty: a query the interaction mode does not admit
    return _reciprocalOrZero(warpOperation(unit, props, domain, adjacency=adjacency))


def backgroundPressureAcceleration(particles, domain, adjacency, backgroundPressure,
                                   volumes=None, kernel=KernelFunctions.Wendland2,
                                   supportMode=SupportScheme.Gather, operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Background-pressure acceleration of the transport-velocity formulation (module table).

    Args:
        particles: `ParticleState` (masses m_i; the densities are not read).
        domain: `DomainDescription`.
        adjacency: the neighbour list.
        backgroundPressure: p_b (a number or a 0-dim tensor; Adami et al. use the reference
            pressure rho0 c0^2).
        volumes: ``[N]`` V_i (default: `numberDensityVolumes` of the same call).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`).

    Returns:
        ``[N, d]`` accelerations.
    """
    V = numberDensityVolumes(particles, domain, adjacency, kernel, supportMode,
                             operationMode) if volumes is None else \
        particleField("backgroundPressureAcceleration", "volumes", volumes,
                      particles.positions.shape[0])
    props = _props(WarpOperation.Gradient, kernel, supportMode, operationMode,
                   gradientMode=GradientScheme.Naive)
    field = torch.stack([_reciprocalOrZero(V), V], dim=1)  # Naive: sum_j f_j V_j G_ij per column
    g = warpOperation(particles, props, domain, queryValues=field, adjacency=adjacency,
                      referenceVolumes=V)
    s = V[:, None] ** 2 * g[:, 0] + g[:, 1]
    return -(backgroundPressure / particles.masses)[:, None] * s
