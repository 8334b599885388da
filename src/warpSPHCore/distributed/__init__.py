"""Differentiable domain decomposition on `torch.distributed` (docs/distributed.md).

* `decompose`: recursive coordinate bisection of a `DomainDescription` among the ranks,
  along neighbour-search cells (`Decomposition`);
* `Halo`: the reference particles within reach of a rank's block, received from the others
  (counts first, one host readback per build), differentiable in reverse and forward mode;
* `migrate`: particles to their new owners after they move (sorted by global id);
  `rebalance`: a new bisection of the current particles, then `migrate`;
* `globalSum`: a differentiable sum over the ranks (a loss); `replicated`: a parameter
  every rank holds, whose gradient is summed over the ranks;
* `spawn`: N local gloo processes without a launcher;
* `setCollectiveChecks`: a debugging mode in which every collective first checks that the
  ranks make the same call, and a rank left waiting raises after a timeout naming the call;
* `DistributedSimulation`: a `fluids.Scheme` simulation across the ranks (owned particles,
  a halo deep enough for the scheme's chained sums, Verlet reuse, migration, restarts).

The operators run unchanged on each rank: queries = the owned particles, references =
``halo.particles(owned)``, reference fields = ``halo.extend(field)``.
"""

from ._comm import (
    CollectiveMismatch,
    Route,
    globalMax,
    globalMin,
    globalSum,
    replicated,
    setCollectiveChecks,
)
from .decomposition import Decomposition, decompose
from .halo import Halo
from .migration import migrate, ownedSelection, rebalance
from .simulation import DistributedSimulation, stencilDepth
from .spawn import spawn

__all__ = ["Decomposition", "decompose", "Halo", "Route", "migrate", "ownedSelection", "rebalance",
           "globalSum", "globalMax", "globalMin", "replicated", "spawn", "DistributedSimulation",
           "stencilDepth", "setCollectiveChecks", "CollectiveMismatch"]
