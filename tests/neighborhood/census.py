"""The host-sync census (`warpSPHCore.util.hostSyncCensus`), under the name the tests import."""

from warpSPHCore.util.hostSyncCensus import Census, census

__all__ = ["Census", "census"]
