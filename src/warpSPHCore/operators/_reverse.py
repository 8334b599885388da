"""The reverse launch the value operators share (`autograd.reverse.ReverseSpec`): the
Interpolate's, Gradient's, Divergence's, Curl's and Laplacian's hand-written reverse kernels
read the same pack (`arg_extract.structFor("cotangent", ...)`) from the same kernel arguments
(query and reference states, domain, traversal, corrections, kernel state, values, field
width) and write the same gradient buffers.

* `VALUE_REVERSE_FIELDS`: the gradient buffers such a kernel may meet, per kernel argument
  (`gradientBuffersWithin`). It writes the positions and supports of both sets, the
  reference masses and densities, the query densities (the Symmetric scheme's rho_i), the
  reference volumes and the values; the query masses and query volumes are never read (their
  gradient is exactly zero, and an aliased query mass shares the reference's buffer).
* `uncorrected(config)`: no CRK, renormalization or grad-h (the coefficients' adjoints are
  written for the plain pair terms).
* `valueReverseLaunch(config, args, outputs)`: the launch, one thread per output element,
  the output cotangent as ``scalarSeed``; `vectorSeedLaunch` for the Gradient, whose output
  rows are d-vectors (``seed``).
"""

from __future__ import annotations

from ..autograd.reverse import cotangentPack, gradientBuffersWithin, vectorView

__all__ = ["VALUE_REVERSE_FIELDS", "uncorrected", "buffersCovered", "valueReverseLaunch",
           "vectorSeedLaunch"]

VALUE_REVERSE_FIELDS = {0: {"positions", "supports", "masses", "densities"},
                        1: {"positions", "supports", "masses", "densities"},
                        6: {"queryVolumes", "referenceVolumes"},
                        8: {"*"}}


def uncorrected(config) -> bool:
    """No CRK, renormalization or grad-h in the call's configuration."""
    return (not config["useCRK"] and not config["useGradientRenormalization"]
            and not config["useGradHTerms"])


def buffersCovered(args) -> bool:
    """Every gradient buffer among the call's arguments is one a value operator's reverse
    kernel writes (or one it never reads)."""
    return gradientBuffersWithin(args, VALUE_REVERSE_FIELDS)


def _launch(config, args, rows, **seed):
    qs, rs, dom, useAdjacency, adjacency, grid, corr, ks, values, fieldWidth = args[:10]
    pack = cotangentPack(config, (("qPositions", "hasQPositions", qs.positions),
                                  ("qSupports", "hasQSupports", qs.supports),
                                  ("qDensities", "hasQDensities", qs.densities),
                                  ("rPositions", "hasRPositions", rs.positions),
                                  ("rSupports", "hasRSupports", rs.supports),
                                  ("rMasses", "hasRMasses", rs.masses),
                                  ("rDensities", "hasRDensities", rs.densities),
                                  ("rVolumes", "hasRVolumes", corr.referenceVolumes),
                                  ("gValues", "hasValues", values)),
                         values=values, pairsOnce=bool(config.get("pairsOnce", False)),
                         **seed)
    return rows, [qs, rs, dom, useAdjacency, adjacency, grid, corr, ks, pack, fieldWidth]


def valueReverseLaunch(config, args, outputs):
    """`ReverseSpec.build` of an operator with a scalar per output element: one thread per
    element, the output's adjoint as ``scalarSeed``."""
    return _launch(config, args, int(outputs[0].shape[0]), scalarSeed=outputs[0].grad)


def vectorSeedLaunch(config, args, outputs):
    """`ReverseSpec.build` of the Gradient: one thread per (query, field column), the
    output's adjoint viewed as one d-vector per thread (``seed``)."""
    qs, fieldWidth = args[0], args[9]
    rows = int(qs.positions.shape[0]) * int(fieldWidth)
    return _launch(config, args, rows,
                   seed=vectorView(outputs[0].grad, qs.positions.dtype, rows))
