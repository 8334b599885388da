"""Stabilisation terms of weakly compressible SPH: artificial viscosity,
delta-SPH density diffusion with renormalized gradients, particle shifting.

With ``x_ij = x_i - x_j`` (minimum image), ``r_ij = |x_ij|``, ``G_ij = grad_i W_ij``,
``V_j = m_j / rho_j`` and pair sums over the references that the call's interaction mode admits:

=========================  =================================================================
`artificialViscosity`      a_i = - sum_j m_j Pi_ij G_ij,
                           Pi_ij = (-alpha cbar_ij mu_ij + beta mu_ij^2) / rhobar_ij where
                           v_ij . x_ij < 0, else 0;
                           mu_ij = h v_ij . x_ij / (r_ij^2 + eps h^2), eps = 0.01,
                           cbar_ij = (c_i + c_j) / 2, rhobar_ij = (rho_i + rho_j) / 2
                           (Monaghan 1992, Annu. Rev. Astron. Astrophys. 30: 543-574)
`antuonoDensityDiffusion`  D_i = delta h c0 sum_j psi_ij . G_ij V_j,
                           psi_ij = 2 (rho_j - rho_i) x_ji / r_ij^2 - (gL_i + gL_j),
                           gL_i = sum_j (rho_j - rho_i) L_i G_ij V_j
                           (Antuono, Colagrossi, Marrone & Molteni 2010, Comput. Phys.
                           Commun. 181: 532-549), L_i the renormalization matrix
`particleShifting`         dr_i = -D grad C_i,
                           grad C_i = sum_j V_j (1 + R (W_ij / W(dx))^n) G_ij
                           (Lind, Xu, Stansby & Rogers 2012, J. Comput. Phys. 231:
                           1499-1523), R = 0.2, n = 4, D = 0.5 h^2 by default
=========================  =================================================================

How each is computed:

* **The delta-SPH diffusion is operators only.** The sum splits into the Molteni-Colagrossi
  term (`terms.densityDiffusion`, the Brookshaw Laplacian of the densities) and
  ``-delta h c0 sum_j (gL_i + gL_j) . G_ij V_j``, which is exactly the Summation-scheme
  Divergence of the vector field gL. gL itself is the Difference-scheme Gradient of the
  densities with the renormalization state of `computeRenormalizationMatrices`. Three
  operator calls and one renormalization; any adjacency the operators accept.
* **Artificial viscosity and shifting are torch edge sums.** Their pair coefficients (the
  switch on v_ij . x_ij, mu_ij^2, (W_ij / W(dx))^4) do not factor into an operator's
  scheme coefficient, so they are summed over the edges ``adjacency.i``, ``adjacency.j``
  of an `AdjacencyList` with ``index_add``. W_ij and G_ij per edge are *not* re-implemented
  in torch: `_edgeKernels` evaluates them with the library's own Interpolate and Gradient
  operators over a one-edge-per-row list (query e at x_{i_e}, its single reference j_e,
  unit values and volumes). Every kernel, support scheme, interaction mode and lattice
  calibration of the operators is therefore available, with the operators' own kernel code
  (no second copy of a kernel formula), and reverse and forward mode come from the bridge.
  A pair the interaction mode rejects gets W_ij = 0 and G_ij = 0 and so contributes nothing. The
  only torch geometry is the minimum-image x_ij (the operators' periodic rule), needed for
  v_ij . x_ij.

h (``smoothingLength``) is the smoothing length of the formulas, not the compact support H
of the library's kernels; with supports of 2-3 particle spacings the conventional choice is
h = dx (docs/fluids.md). Everything is differentiable in reverse and forward mode
(`torch.autograd.forward_ad` dual tensors), float32/float64, 2D/3D, without host syncs.
Free-surface detection and the free-surface treatment of shifting are out of scope.
"""

from __future__ import annotations

import dataclasses

import torch

from ..corrections.renormalization import computeRenormalizationMatrices
from ..dataTypes.adjacency import AdjacencyList, trustedConstruction
from ..dataTypes.operationProperties import OperationProperties
from ..dataTypes.particleState import ParticleState
from ..enumTypes import (
    GradientScheme,
    KernelFunctions,
    OperationDirection,
    SupportScheme,
    WarpOperation,
)
from ..operations import warpOperation
from ._checks import particleField, particleScalar
from .terms import _densities, densityDiffusion

__all__ = ["artificialViscosity", "antuonoDensityDiffusion", "particleShifting"]


def _edgeList(adjacency, where: str) -> AdjacencyList:
    if not isinstance(adjacency, AdjacencyList):
        raise TypeError(f"{where}: adjacency is {type(adjacency).__name__}; accepted: an "
                        "AdjacencyList (e.g. from radiusSearchCompactHashMap), whose edges "
                        "i, j the term sums over")
    return adjacency


def _pairVectors(positions, i, j, domain) -> torch.Tensor:
    """x_ij = x_i - x_j per edge ``[E, d]``, the minimum image on periodic axes
    (wrap both into the box, difference, map into [-L/2, L/2)); the
    wrap is piecewise constant, so the derivative is dx_i - dx_j."""
    lo, L = domain.min, domain.max - domain.min
    xi, xj = positions[i], positions[j]
    pi = xi - L * torch.floor((xi - lo) / L)
    pj = xj - L * torch.floor((xj - lo) / L)
    half = 0.5 * L
    wrapped = (pi - pj + half) - L * torch.floor((pi - pj + half) / L) - half
    return torch.where(domain.periodic.to(positions.device), wrapped, xi - xj)


def _edgeKernels(particles, props, domain, adjacency, queryPositions=None, gradient=True):
    """(W_ij [E], G_ij [E, d] or None) for every edge of `adjacency`, from the library's
    Interpolate and Naive Gradient operators over a one-edge-per-row list.

    Query e sits at ``queryPositions[e]`` (default x_{i_e}) with the support and kind of
    particle i_e; its only reference is j_e. With unit values and unit reference volumes
    the Interpolate row is W_ij and the Gradient row G_ij, under the properties' kernel,
    support scheme, interaction mode and calibration."""
    i, j = adjacency.i, adjacency.j
    E, N = i.shape[0], particles.positions.shape[0]
    dev = i.device
    x = particles.positions[i] if queryPositions is None else queryPositions
    queries = ParticleState(x, particles.supports[i], particles.masses[i], particles.kinds[i])
    with trustedConstruction():  # one edge per row: consistent by construction
        rows = AdjacencyList(torch.arange(E, dtype=torch.int64, device=dev), j,
                             torch.ones(E, dtype=torch.int32, device=dev),
                             torch.arange(E, dtype=torch.int32, device=dev), E, N,
                             supportMode=adjacency.supportMode)
    ones = torch.ones_like(particles.positions[:, 0])
    reference = ParticleState(particles.positions, particles.supports, particles.masses,
                              particles.kinds)
    kw = dict(adjacency=rows, referenceParticles=reference, referenceVolumes=ones)
    W = warpOperation(queries, dataclasses.replace(props, operation=WarpOperation.Interpolate),
                      domain, referenceValues=ones, **kw)
    if not gradient:
        return W, None
    G = warpOperation(queries, dataclasses.replace(props, operation=WarpOperation.Gradient,
                                                   gradientMode=GradientScheme.Naive),
                      domain, queryValues=torch.ones_like(x[:, 0]), referenceValues=ones, **kw)
    return W, G


def _pairMean(values, i, j):
    """(v_i + v_j) / 2 per edge for a per-particle tensor; a number or 0-dim tensor as is."""
    if isinstance(values, torch.Tensor) and values.dim() > 0:
        return 0.5 * (values[i] + values[j])
    return values


def artificialViscosity(particles, velocities, domain, adjacency, soundSpeeds, *, alpha,
                        smoothingLength, beta=0.0, epsilon=0.01,
                        kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                        operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Monaghan artificial viscosity (module table), an acceleration added to the momentum
    equation; it acts only on approaching pairs (v_ij . x_ij < 0).

    Args:
        particles: `ParticleState` with masses m_j and densities rho.
        velocities: ``[N, d]`` velocities v.
        domain: `DomainDescription`.
        adjacency: the `AdjacencyList` summed over (edges ``i``, ``j``).
        soundSpeeds: c: ``[N]`` per-particle sound speeds (e.g. `taitSoundSpeed`), or a
            number / 0-dim tensor (the linear equation of state's c0).
        alpha: the linear (bulk) coefficient (0.01-0.1 for weakly compressible flows).
        smoothingLength: h of mu_ij (a number or 0-dim tensor).
        beta: the quadratic (von Neumann-Richtmyer) coefficient, 0 by default.
        epsilon: eps of the regulariser eps h^2 (0.01).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (`OperationDirection`, docs/particle-kinds.md).

    Returns:
        ``[N, d]`` accelerations. Reverse and forward mode in the positions, supports,
        masses, densities, velocities, sound speeds and coefficients; the switch is
        continuous (Pi_ij -> 0 as v_ij . x_ij -> 0).
    """
    where = "artificialViscosity"
    rho = _densities(particles, where)
    n, d = particles.positions.shape
    particleField(where, "velocities", velocities, n, d)
    particleScalar(where, "soundSpeeds", soundSpeeds, n)
    adj = _edgeList(adjacency, where)
    i, j = adj.i, adj.j
    props = OperationProperties(kernel, supportMode=supportMode, operationMode=operationMode)
    _, G = _edgeKernels(particles, props, domain, adj)
    x = _pairVectors(particles.positions, i, j, domain)
    vx = ((velocities[i] - velocities[j]) * x).sum(-1)
    h = smoothingLength
    mu = h * vx / ((x * x).sum(-1) + epsilon * h * h)
    Pi = (-alpha * _pairMean(soundSpeeds, i, j) * mu + beta * mu * mu) / _pairMean(rho, i, j)
    Pi = torch.where(vx < 0, Pi, torch.zeros_like(Pi))
    f = (particles.masses[j] * Pi)[:, None] * G
    return -torch.zeros_like(particles.positions).index_add(0, i, f)


def antuonoDensityDiffusion(particles, domain, adjacency, delta, smoothingLength, soundSpeed,
                            kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                            operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """delta-SPH density diffusion of Antuono et al. 2010 with renormalized density
    gradients (module table), the term added to the density rate. Zero for a linear density
    field wherever L_i is the inverse of the covariance (full neighbourhoods), unlike the
    Molteni-Colagrossi `densityDiffusion`, which is not zero under hydrostatic
    stratification.

    Args:
        particles: `ParticleState` with densities.
        domain: `DomainDescription`.
        adjacency: the neighbour list (`AdjacencyList` or `CompactHashMap`; None: a grid per
            call).
        delta: the diffusion coefficient (0.1 in the literature).
        smoothingLength: h of the term (the particle spacing for this library's supports).
        soundSpeed: c0.
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode (also of the renormalization matrices).

    Returns:
        ``[N]`` density rates. r_ij^2 is the library's Brookshaw denominator
        (r + 1e-8 h_ij)^2 with pairs at r = 0 skipped (as in `densityDiffusion`). Reverse and
        forward mode through the operators and `computeRenormalizationMatrices`.
    """
    rho = _densities(particles, "antuonoDensityDiffusion")
    grad = OperationProperties(kernel, operation=WarpOperation.Gradient, supportMode=supportMode,
                               operationMode=operationMode, gradientMode=GradientScheme.Difference)
    L = computeRenormalizationMatrices(particles, grad, domain, adjacency=adjacency,
                                       returnEigVals=False)
    gL = warpOperation(particles, grad, domain, queryValues=rho, adjacency=adjacency,
                       renormalizationState=L)
    # Summation scheme: sum_j (gL_i + gL_j) V_j . G_ij, the psi_ij correction
    div = dataclasses.replace(grad, operation=WarpOperation.Divergence,
                              gradientMode=GradientScheme.Summation)
    correction = warpOperation(particles, div, domain, queryValues=gL, adjacency=adjacency)
    molteni = densityDiffusion(particles, domain, adjacency, delta, smoothingLength, soundSpeed,
                               kernel=kernel, supportMode=supportMode,
                               operationMode=operationMode)
    return molteni - (delta * smoothingLength * soundSpeed) * correction


def particleShifting(particles, domain, adjacency, spacing, smoothingLength, *,
                     diffusionCoefficient=None, tensileR=0.2, tensileN=4, volumes=None,
                     kernel=KernelFunctions.Wendland2, supportMode=SupportScheme.Gather,
                     operationMode=OperationDirection.AllQueriesNonGhostReferences):
    """Fickian particle shifting of Lind et al. 2012 (module table): the displacement
    dr_i = -D grad C_i that moves particles down the gradient of the particle concentration,
    applied after the position update.

    D: Lind et al. take D = 0.5 h^2 (the time step absorbed into D), the default here. The
    velocity-scaled form of Skillen
    et al. 2013 (Comput. Methods Appl. Mech. Eng. 265: 163-173), D = A h |u|max dt with A in
    [1, 6], is passed as ``diffusionCoefficient`` (a tensor keeps it sync-free). The
    tensile-instability term R (W_ij / W(dx))^n, R = 0.2, n = 4, is Monaghan's (2000)
    anti-clumping correction as used by Lind et al.; W(dx) is the kernel at distance dx with
    the pair's support. The free-surface treatment (no shift normal to the surface) is out
    of scope: near a free surface the concentration gradient pushes particles outwards.

    Args:
        particles: `ParticleState` (masses and densities give V_j = m_j / rho_j unless
            `volumes` is given).
        domain: `DomainDescription`.
        adjacency: the `AdjacencyList` summed over.
        spacing: the particle spacing dx of W(dx) (a number; dx < the supports).
        smoothingLength: h of D = 0.5 h^2.
        diffusionCoefficient: D (number or 0-dim tensor); None: 0.5 h^2.
        tensileR: R (0.2); 0 turns the tensile term off.
        tensileN: n (4).
        volumes: ``[N]`` V_j (default m_j / rho_j).
        kernel: `KernelFunctions`.
        supportMode: `SupportScheme`.
        operationMode: the interaction mode; FluidQueriesNonGhostReferences shifts fluid
            particles only, with wall particles as references.

    Returns:
        ``[N, d]`` displacements; 0 on rows the interaction mode does not query. Reverse and forward
        mode in the positions, supports, masses, densities / volumes and D.
    """
    where = "particleShifting"
    adj = _edgeList(adjacency, where)
    V = particles.masses / _densities(particles, where) if volumes is None else \
        particleField(where, "volumes", volumes, particles.positions.shape[0])
    i, j = adj.i, adj.j
    props = OperationProperties(kernel, supportMode=supportMode, operationMode=operationMode)
    W, G = _edgeKernels(particles, props, domain, adj)
    # W(dx) with the pair's support: a query at distance dx (along the first axis) from j
    offset = torch.zeros_like(particles.positions[:1])
    offset[:, 0] = spacing
    Wdx, _ = _edgeKernels(particles, dataclasses.replace(props, operationMode=0), domain, adj,
                          queryPositions=particles.positions[j] + offset, gradient=False)
    positive = Wdx > 0
    ratio = torch.where(positive, W / torch.where(positive, Wdx, torch.ones_like(Wdx)), 0.0)
    f = (V[j] * (1.0 + tensileR * ratio ** tensileN))[:, None] * G
    gradC = torch.zeros_like(particles.positions).index_add(0, i, f)
    D = 0.5 * smoothingLength * smoothingLength if diffusionCoefficient is None \
        else diffusionCoefficient
    return -D * gradC
