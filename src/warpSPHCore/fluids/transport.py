"""Kick-drift-kick with a transport velocity (Adami, Hu & Adams 2013, J. Comput. Phys. 241:
292-307), the time integration of the transport-velocity cases.

The particles are advected by the transport velocity u~ instead of the momentum velocity u:

    u_h  = u + dt/2 a(s)                       (kick)
    u~   = u_h + dt/2 a_b(s) + du(s)           (a_b: the background-pressure acceleration,
                                                du: a shifting velocity, both optional)
    x'   = x + dt u~                           (drift with the transport velocity)
    u'   = u_h + dt/2 a(s'),  s' = (x', u_h, rho_h, u~)   (kick)

with the densities kicked like the velocities when the state carries them. The rate function
returns `TransportRates` (the accelerations a and the background-pressure acceleration a_b);
the state handed to it at the end of a step is a `TransportState`, which also carries u~
(the momentum's A = rho u (u~ - u) term reads it). The rates at the end of a step (a and
a_b at s') are returned for the next step: one rate evaluation per step, as
`integrators.kickDriftKick`, to which this step reduces when a_b = 0. The stepper has the
signature the loop expects (`Simulation`'s ``stepper``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .integrators import FluidState, Rates, _advance, evaluateRates

__all__ = ["TransportState", "TransportRates", "transportKickDriftKick"]


@dataclass(frozen=True)
class TransportState(FluidState):
    """A `FluidState` with the transport velocities u~ ``[N, d]`` of the current drift (None:
    u~ = u)."""

    transportVelocities: torch.Tensor | None = None

    def __post_init__(self):
        super().__post_init__()
        ut = self.transportVelocities
        if ut is not None and tuple(ut.shape) != tuple(self.velocities.shape):
            raise ValueError(f"TransportState: transportVelocities {tuple(ut.shape)}; "
                             f"accepted: {tuple(self.velocities.shape)} (the velocities' "
                             "shape) or None")


@dataclass(frozen=True)
class TransportRates(Rates):
    """`Rates` with the background-pressure accelerations a_b ``[N, d]`` (None: 0) and the
    shifting velocities du ``[N, d]`` added to the drift (None: 0; particle shifting written
    as a velocity, `fluids.scheme.Shifting`)."""

    backgroundAccelerations: torch.Tensor | None = None
    shiftVelocities: torch.Tensor | None = None


def transportKickDriftKick(state: FluidState, dt, rates, neighbours=None,
                           carried: Rates | None = None):
    """One transport-velocity kick-drift-kick step (module docstring).

    Args:
        state: the state at t (a `FluidState`; its velocities are the momentum velocities).
        dt: the time step (number or 0-dim tensor).
        rates: ``rates(state, neighbours) -> Rates`` (`TransportRates` for a nonzero a_b);
            it receives a `TransportState` (u~ = u at the start, when nothing is carried).
        neighbours: the neighbour policy (`integrators.evaluateRates`).
        carried: the rates at `state` (the previous step's), else evaluated here.

    Returns:
        ``(state at t + dt, rates at the end of the step)``.
    """
    if carried is None:
        start = TransportState(state.positions, state.velocities, state.densities, state.time,
                               transportVelocities=state.velocities)
        carried = evaluateRates(rates, start, neighbours)
    half = 0.5 * dt
    vHalf = state.velocities + half * carried.accelerations
    rhoHalf = _advance(state.densities, carried.densityRates, half)
    ab = getattr(carried, "backgroundAccelerations", None)
    transport = vHalf if ab is None else vHalf + half * ab
    shift = getattr(carried, "shiftVelocities", None)
    if shift is not None:
        transport = transport + shift
    drifted = TransportState(state.positions + dt * transport, vHalf, rhoHalf, state.time + dt,
                             transportVelocities=transport)
    end = evaluateRates(rates, drifted, neighbours)
    new = FluidState(drifted.positions, vHalf + half * end.accelerations,
                     _advance(rhoHalf, end.densityRates, half), drifted.time)
    return new, end
