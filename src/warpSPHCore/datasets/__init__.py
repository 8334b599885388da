"""SPH trajectory datasets in LagrangeBench's on-disk layout (docs/datasets.md), so that a
graph network trained with LagrangeBench (JAX) or a PyTorch port reads them unchanged.

    warpsph dataset tgv2d --size small --out data/2D_TGV_400_small

* `cases`: the dataset cases (`DATASET_CASES`: ``tgv2d``, ``rpf2d``, ``dam2d``, LagrangeBench's
  2D setups built from `warpSPHCore.fluids`), their sizes (`CaseSize`: tiny, small, full) and
  one `Scene` per seed; `lagrangeBenchTypes` maps our particle kinds to its codes.
* `generate`: `simulateSeeds` (the seeds of a split as the scenes of one batch, the stored
  frames) and
  `generateDataset` (the files, resumable, the statistics, ``metadata.json``).
* `statistics`: `velocityStatistics`, LagrangeBench's normalisation statistics (per-frame
  velocities and accelerations of the fluid, periodic displacements).
* `windows`: `TrajectoryWindows`, a `torch.utils.data.Dataset` with the samples of
  LagrangeBench's H5Dataset.

The files need ``h5py`` (the ``io`` extra); it is imported when a file is written or read.
"""

from .cases import (
    DATASET_CASES,
    SIZES,
    SPLITS,
    CaseSize,
    DatasetCase,
    Scene,
    connectivityRadius,
    lagrangeBenchTypes,
)
from .generate import DatasetError, generateDataset, simulateSeeds
from .statistics import frameVelocities, periodicDifference, velocityStatistics
from .windows import TrajectoryWindows, Window

__all__ = [
    "generateDataset",
    "simulateSeeds",
    "TrajectoryWindows",
    "Window",
    "velocityStatistics",
    "frameVelocities",
    "periodicDifference",
    "DATASET_CASES",
    "DatasetCase",
    "CaseSize",
    "Scene",
    "SIZES",
    "SPLITS",
    "lagrangeBenchTypes",
    "connectivityRadius",
    "DatasetError",
]
