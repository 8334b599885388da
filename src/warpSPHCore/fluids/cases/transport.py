"""The transport-velocity stepper's former home: `fluids.transport` (kept so that restart
files that name these types by this module still load)."""

from ..transport import TransportRates, TransportState, transportKickDriftKick

__all__ = ["TransportState", "TransportRates", "transportKickDriftKick"]
