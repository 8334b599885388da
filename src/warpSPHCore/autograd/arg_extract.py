"""State extraction: structured state -> the 36-slot flat list + `build_fn`.

`extractStateInfo` flattens every tensor of one operator call into a deterministically
ordered list of exactly 36 entries (real tensors, or permanent null `Field` placeholders in
disabled slots) and returns a `build_fn` closure that rebuilds the Warp structs of the kernel
ABI from a parallel list of `wp.array`s:

    (queryState, referenceState, domainState, useAdjacency, adjacencyState, gridState,
     correctionData, kernelProperties)

Warp structs cannot be generic over the scalar type, so every struct class exists per
(d, scalar type) and is looked up with `structFor(kind, dim, dtype, mode)`:

==================  ==========================================================================
kind                fields
==================  ==========================================================================
particle            positions (vecD), supports, masses, densities (scalar), kinds (int32),
                    hasDensities (bool)
correction          useGradientRenormalization, renormalizationMatrices (matDxD);
                    useVolume, queryVolumes, referenceVolumes; useGradHTerms, queryOmegas,
                    referenceOmegas; useCRK, queryA, queryB (vecD), queryGradA (vecD),
                    queryGradB (matDxD), referenceA/B/GradA/GradB
correctionTangent   the correction arrays without use* flags, plus presence flags
                    hasRenormalization, hasVolume, hasGradH, hasCRK
tangent             the Tier-2 tangent pack (forward mode)
cotangent           the reverse pack of a hand-written reverse kernel (`autograd.reverse`)
domain              domainMin, domainMax (scalar), periodicity (bool), dim (int32)
kernelState         kernelFunction (int32), supportMode (uint32), gradientMode (int32),
                    laplacianMode (int32), positiveDivergenceMode (bool), divergenceMode
                    (bool), operationMode (int32), calibrateNormalization (bool),
                    normalizationCoefficient (scalar)
grid                `neighborhood.traversal.gridData_f32/_f64` (the domain periodicity, the
                    device's error buffer and the launch's site id)
adjacency           `neighborhood.traversal.adjacencyData` (with the error buffer and site)
==================  ==========================================================================

(`domain`, `kernelState` and `grid` depend on the scalar type only; `adjacency` on nothing.)

The correction accessors (`getVolume_j`, `getCRK_i`, `getCRKGrad_i`, `getL_i`, `getGradH_i`,
`getGradH_j`) return ``(flag, value...)`` with zero values when the correction is disabled, so
a disabled null placeholder is never indexed.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import warp as wp

from ..dataTypes.adjacency import AdjacencyList
from ..dataTypes.compactHashMap import CompactHashMap
from ..dataTypes.corrections import asGradHState, asRenormalizationState
from ..enumTypes import ExecutionMode, ParticleType, SupportScheme, interactionKinds
from ..kernels.lattice import latticeDensityFactor
from ..neighborhood.grid import buildCompactHashMap
from ..neighborhood.hashLength import getNextPrime
from ..neighborhood.search import radiusSearchCompactHashMap
from ..neighborhood.traversal import adjacencyData, gridDataType
from ..util.errorFlags import errorArray
from ..util.fieldRegistry import FieldKind, nullField
from ..util.precision import warpScalar
from ..util.stateBundle import makeStruct
from .cache import getCachedWarpArray

__all__ = [
    "STATE_SIZE",
    "SLOT_NAMES",
    "structFor",
    "declareStateOverloads",
    "extractStateInfo",
    "resolveNormalization",
    "getVolume_j",
    "getCRK_i",
    "getCRKGrad_i",
    "getL_i",
    "getGradH_i",
    "getGradH_j",
]

# --------------------------------------------------------------------------------------
# Fixed slot indices. The layout is frozen: the JVP machinery reads tangents by absolute index.
# --------------------------------------------------------------------------------------

STATE_SIZE = 38
_QPOS, _RPOS, _QSUP, _RSUP, _QMAS, _RMAS, _QDEN, _RDEN, _QK, _RK = range(10)
_RENORM_MAT = 10
_QOMEGA, _ROMEGA = 11, 12
_QVOL, _RVOL = 13, 14
_QCRK_A, _QCRK_B, _QCRK_GRADA, _QCRK_GRADB = 15, 16, 17, 18
_RCRK_A, _RCRK_B, _RCRK_GRADA, _RCRK_GRADB = 19, 20, 21, 22
_ADJ_LIST, _ADJ_OFFSETS, _ADJ_NUM = 23, 24, 25
_GRID_SORT, _GRID_QMIN, _GRID_QMAX, _GRID_NUMCELLS = 26, 27, 28, 29
_GRID_HASH, _GRID_CELLS, _GRID_OFFSETS = 30, 31, 32
_DOM_MIN, _DOM_MAX, _DOM_PERIODIC = 33, 34, 35
# appended for the consistent Laplacian: slots 0-35 keep their original indices
_LAP_MAT, _LAP_VEC = 36, 37
_NO_TANGENT_HOME = frozenset({27, 28, 33, 34})

SLOT_NAMES = (
    "qPos", "rPos", "qSup", "rSup", "qMas", "rMas", "qDen", "rDen", "qK", "rK",
    "renormMat", "qOmega", "rOmega", "qVol", "rVol",
    "qcrk_A", "qcrk_B", "qcrk_gradA", "qcrk_gradB",
    "rcrk_A", "rcrk_B", "rcrk_gradA", "rcrk_gradB",
    "adj_neighborList", "adj_neighborOffsets", "adj_numNeighbors",
    "grid_sortIndex", "grid_qMin", "grid_qMax", "grid_numCells", "grid_hashTable",
    "grid_cellTable", "grid_cellOffsets",
    "domainMin", "domainMax", "periodicity",
    "lapMat", "lapVec",
)
assert len(SLOT_NAMES) == STATE_SIZE

# --------------------------------------------------------------------------------------
# Struct classes per (d, scalar type)
# --------------------------------------------------------------------------------------

_SUFFIX = {wp.float32: "f32", wp.float64: "f64"}
_VEC = {(1, wp.float32): wp.types.vector(1, wp.float32), (2, wp.float32): wp.vec2f,
        (3, wp.float32): wp.vec3f, (1, wp.float64): wp.types.vector(1, wp.float64),
        (2, wp.float64): wp.vec2d, (3, wp.float64): wp.vec3d}
_MAT = {(1, wp.float32): wp.types.matrix((1, 1), wp.float32), (2, wp.float32): wp.mat22f,
        (3, wp.float32): wp.mat33f, (1, wp.float64): wp.types.matrix((1, 1), wp.float64),
        (2, wp.float64): wp.mat22d, (3, wp.float64): wp.mat33d}


def _struct(name: str, fields: dict):
    """Create and register a Warp struct class with a unique, module-level name."""
    cls = type(name, (), {"__annotations__": fields, "__module__": __name__,
                          "__qualname__": name, "__doc__": f"Warp struct {name}."})
    s = wp.struct(cls)
    globals()[name] = s
    return s


def _particleFields(vec, s):
    return {
        "positions": wp.array(dtype=vec),
        "supports": wp.array(dtype=s),
        "masses": wp.array(dtype=s),
        "densities": wp.array(dtype=s),
        "kinds": wp.array(dtype=wp.int32),
        "hasDensities": wp.bool,
    }


def _correctionArrays(vec, mat, s):
    return {
        "renormalizationMatrices": wp.array(dtype=mat),
        "queryVolumes": wp.array(dtype=s),
        "referenceVolumes": wp.array(dtype=s),
        "queryOmegas": wp.array(dtype=s),
        "referenceOmegas": wp.array(dtype=s),
        "queryA": wp.array(dtype=s),
        "queryB": wp.array(dtype=vec),
        "queryGradA": wp.array(dtype=vec),
        "queryGradB": wp.array(dtype=mat),
        "referenceA": wp.array(dtype=s),
        "referenceB": wp.array(dtype=vec),
        "referenceGradA": wp.array(dtype=vec),
        "referenceGradB": wp.array(dtype=mat),
    }


def _correctionFields(vec, mat, s):
    f = {"useGradientRenormalization": wp.bool, "useVolume": wp.bool, "useGradHTerms": wp.bool,
         "useCRK": wp.bool, "useConsistentLaplacian": wp.bool}
    f.update(_correctionArrays(vec, mat, s))
    # the consistent Laplacian's per-query B_i and gamma_i (`LaplacianCorrectionState`)
    f.update({"laplacianMatrices": wp.array(dtype=mat), "laplacianVectors": wp.array(dtype=vec)})
    return f


def _correctionTangentFields(vec, mat, s):
    f = {"hasRenormalization": wp.bool, "hasVolume": wp.bool, "hasGradH": wp.bool,
         "hasCRK": wp.bool}
    f.update(_correctionArrays(vec, mat, s))
    return f


def _tangentFields(vec, mat, s):
    """The Tier-2 tangent pack (one struct instead of separate query, reference and
    correction tangent arguments): particle, volume and correction tangents with presence
    flags, the frozen field values and their tangents. Every read is gated by its flag, so a missing
    tangent (a length-1 null placeholder) is never indexed."""
    return {
        "qPositions": wp.array(dtype=vec), "qSupports": wp.array(dtype=s),
        "qDensities": wp.array(dtype=s),
        "rPositions": wp.array(dtype=vec), "rSupports": wp.array(dtype=s),
        "rMasses": wp.array(dtype=s), "rDensities": wp.array(dtype=s),
        "rVolumes": wp.array(dtype=s),
        "A": wp.array(dtype=s), "B": wp.array(dtype=vec), "gradA": wp.array(dtype=vec),
        "gradB": wp.array(dtype=mat), "L": wp.array(dtype=mat),
        "values": wp.array(dtype=s), "tValues": wp.array(dtype=s),
        "qOmegas": wp.array(dtype=s), "rOmegas": wp.array(dtype=s),
        "hasQPositions": wp.bool, "hasQSupports": wp.bool, "hasQDensities": wp.bool,
        "hasRPositions": wp.bool, "hasRSupports": wp.bool, "hasRMasses": wp.bool,
        "hasRDensities": wp.bool, "hasRVolumes": wp.bool, "hasCRK": wp.bool,
        "hasRenormalization": wp.bool, "hasValueTangent": wp.bool, "hasGeometry": wp.bool,
        "hasQOmegas": wp.bool, "hasROmegas": wp.bool,
    }


def _cotangentFields(vec, mat, s):
    """The reverse pack of a hand-written reverse kernel (`autograd.reverse`): the primal field
    values, the output cotangent (``seed``, one d-vector per output row; ``scalarSeed``, one
    scalar per row, for a scalar output such as the Density's) and the gradient buffers it
    scatters into, each with a presence flag (an input without grad has no buffer and its
    flag is False, so nothing is written for it)."""
    return {
        "values": wp.array(dtype=s), "seed": wp.array(dtype=vec),
        "scalarSeed": wp.array(dtype=s),
        "qPositions": wp.array(dtype=vec), "qSupports": wp.array(dtype=s),
        "qDensities": wp.array(dtype=s),
        "rPositions": wp.array(dtype=vec), "rSupports": wp.array(dtype=s),
        "rMasses": wp.array(dtype=s), "rDensities": wp.array(dtype=s),
        "rVolumes": wp.array(dtype=s), "gValues": wp.array(dtype=s),
        "hasQPositions": wp.bool, "hasQSupports": wp.bool, "hasQDensities": wp.bool,
        "hasRPositions": wp.bool, "hasRSupports": wp.bool, "hasRMasses": wp.bool,
        "hasRDensities": wp.bool, "hasRVolumes": wp.bool, "hasValues": wp.bool,
        "pairsOnce": wp.bool,
    }


def _domainFields(s):
    return {
        "domainMin": wp.array(dtype=s),
        "domainMax": wp.array(dtype=s),
        "periodicity": wp.array(dtype=wp.bool),
        "dim": wp.int32,
    }


def _kernelStateFields(s):
    return {
        "kernelFunction": wp.int32,
        "supportMode": wp.uint32,
        "gradientMode": wp.int32,
        "laplacianMode": wp.int32,
        "positiveDivergenceMode": wp.bool,
        "divergenceMode": wp.bool,
        "operationMode": wp.int32,
        "calibrateNormalization": wp.bool,
        "normalizationCoefficient": s,
    }


_STRUCTS: dict = {}
for _s in (wp.float32, wp.float64):
    _sfx = _SUFFIX[_s]
    _STRUCTS[("domain", None, _s)] = _struct(f"domainData_{_sfx}", _domainFields(_s))
    _STRUCTS[("kernelState", None, _s)] = _struct(f"kernelState_{_sfx}", _kernelStateFields(_s))
    for _d in (1, 2, 3):
        _v, _m = _VEC[(_d, _s)], _MAT[(_d, _s)]
        _STRUCTS[("particle", _d, _s)] = _struct(f"particleDataSoA_{_d}_{_sfx}",
                                                 _particleFields(_v, _s))
        _STRUCTS[("correction", _d, _s)] = _struct(f"correctionData_{_d}_{_sfx}",
                                                   _correctionFields(_v, _m, _s))
        _STRUCTS[("correctionTangent", _d, _s)] = _struct(
            f"correctionTangentData_{_d}_{_sfx}", _correctionTangentFields(_v, _m, _s))
        _STRUCTS[("tangent", _d, _s)] = _struct(f"tangentPack_{_d}_{_sfx}",
                                                _tangentFields(_v, _m, _s))
        _STRUCTS[("cotangent", _d, _s)] = _struct(f"cotangentPack_{_d}_{_sfx}",
                                                  _cotangentFields(_v, _m, _s))
del _s, _sfx, _d, _v, _m

_KINDS = ("particle", "correction", "correctionTangent", "tangent", "cotangent", "domain",
          "kernelState", "grid", "adjacency")


def _asWarpScalar(dtype):
    if dtype in (wp.float32, wp.float64):
        return dtype
    if isinstance(dtype, torch.dtype):
        return warpScalar(dtype)
    raise TypeError(f"structFor: dtype {dtype!r}; accepted: torch.float32/float64 or "
                    "wp.float32/wp.float64")


def structFor(kind: str, dim: int, dtype, mode=ExecutionMode.NONE):
    """The Warp struct class of `kind` for dimension `dim` and scalar type `dtype`.

    Args:
        kind: one of particle, correction, correctionTangent, tangent (the Tier-2 tangent
            pack), cotangent (the reverse pack), domain, kernelState, grid, adjacency.
        dim: 1, 2 or 3 (ignored by the dimension-independent kinds).
        dtype: torch.float32/float64 or wp.float32/wp.float64.
        mode: `ExecutionMode`; NONE, REVERSE, FORWARD and AUTO map to the same classes.

    Raises:
        ValueError: unknown kind, mode or dimension. TypeError: unsupported dtype.
    """
    ExecutionMode(int(mode))  # ValueError for an unknown mode
    if kind not in _KINDS:
        raise ValueError(f"structFor: unknown kind {kind!r}; accepted: {', '.join(_KINDS)}")
    s = _asWarpScalar(dtype)
    if kind == "adjacency":
        return adjacencyData
    if kind == "grid":
        return gridDataType(torch.float32 if s == wp.float32 else torch.float64)
    if kind in ("domain", "kernelState"):
        return _STRUCTS[(kind, None, s)]
    if dim not in (1, 2, 3):
        raise ValueError(f"structFor: dim={dim!r}; accepted: 1, 2, 3")
    return _STRUCTS[(kind, dim, s)]


_ARRAY_DTYPES = {"scalar": lambda d, s: s, "vector": lambda d, s: _VEC[(d, s)],
                 "matrix": lambda d, s: _MAT[(d, s)]}


def declareStateOverloads(kernel, arrays: dict | None = None, tangent: bool = False,
                          cotangent: bool = False) -> None:
    """Declare the float32/float64 x d = 1, 2, 3 overloads of a canonical-ABI kernel.

    Call at import, right after the kernel: its module is then compiled once with all six
    overloads (one cache entry whatever the launch order) and never reloaded because a launch
    added an overload (a reload recompiles the whole module). `arrays` maps each generic array
    argument after the eight state arguments to "scalar", "vector" or "matrix" (the call's
    scalar type, d-vector, d x d matrix); concrete arguments (int32 counts, flags) are left
    out.
    `tangent=True`: a Tier-2 JVP kernel, whose ninth argument ``tangents`` is the tangent pack;
    `cotangent=True`: a reverse kernel, whose ninth argument ``cotangents`` is the reverse pack.
    """
    arrays = arrays or {}
    for s in (wp.float32, wp.float64):
        for d in (1, 2, 3):
            sig = {
                "queryState": structFor("particle", d, s),
                "referenceState": structFor("particle", d, s),
                "domainState": structFor("domain", d, s),
                "adjacencyState": structFor("adjacency", d, s),
                "gridState": structFor("grid", d, s),
                "correctionData": structFor("correction", d, s),
                "kernelProperties": structFor("kernelState", d, s),
            }
            if tangent:
                sig["tangents"] = structFor("tangent", d, s)
            if cotangent:
                sig["cotangents"] = structFor("cotangent", d, s)
            for name, kind in arrays.items():
                sig[name] = wp.array(dtype=_ARRAY_DTYPES[kind](d, s))
            wp.overload(kernel, sig)


# --------------------------------------------------------------------------------------
# Correction accessors (Warp functions, generic over the struct family)
# --------------------------------------------------------------------------------------


@wp.func
def getVolume_j(corr: Any, j: wp.int32):
    """(useVolume, V_j): ``referenceVolumes[j]`` when volumes are in use, else (False, 0)."""
    v = corr.referenceVolumes.dtype(0.0)
    if corr.useVolume:
        v = corr.referenceVolumes[j]
    return corr.useVolume, v


@wp.func
def getCRK_i(corr: Any, i: wp.int32):
    """(useCRK, A_i, B_i) of the query particle; (False, 0, 0) without CRK."""
    a = corr.queryA.dtype(0.0)
    b = corr.queryB.dtype()
    if corr.useCRK:
        a = corr.queryA[i]
        b = corr.queryB[i]
    return corr.useCRK, a, b


@wp.func
def getCRKGrad_i(corr: Any, i: wp.int32):
    """(useCRK, gradA_i, gradB_i) of the query particle; zeros without CRK.

    Only for operators that use the corrected gradient (never called by Interpolate, whose
    gradA/gradB slots may hold placeholders)."""
    ga = corr.queryGradA.dtype()
    gb = corr.queryGradB.dtype()
    if corr.useCRK:
        ga = corr.queryGradA[i]
        gb = corr.queryGradB[i]
    return corr.useCRK, ga, gb


@wp.func
def getL_i(corr: Any, i: wp.int32):
    """(useGradientRenormalization, L_i); the zero matrix when disabled."""
    m = corr.renormalizationMatrices.dtype()
    if corr.useGradientRenormalization:
        m = corr.renormalizationMatrices[i]
    return corr.useGradientRenormalization, m


@wp.func
def getGradH_i(corr: Any, i: wp.int32):
    """(useGradHTerms, Omega_i); (False, 0) when disabled."""
    w = corr.queryOmegas.dtype(0.0)
    if corr.useGradHTerms:
        w = corr.queryOmegas[i]
    return corr.useGradHTerms, w


@wp.func
def getGradH_j(corr: Any, j: wp.int32):
    """(useGradHTerms, Omega_j); (False, 0) when disabled."""
    w = corr.referenceOmegas.dtype(0.0)
    if corr.useGradHTerms:
        w = corr.referenceOmegas[j]
    return corr.useGradHTerms, w


# --------------------------------------------------------------------------------------
# Host helpers
# --------------------------------------------------------------------------------------


def resolveNormalization(operationProperties, dim: int) -> tuple[bool, float]:
    """(calibrateNormalization, normalizationCoefficient) for a call.

    With calibration the coefficient is ``latticeDensityFactor(kernel, n_h, d)`` (host float64,
    cached); ValueError unless it is finite and > 0. Without calibration (False, 1.0).
    """
    if not getattr(operationProperties, "calibrateNormalization", False):
        return False, 1.0
    factor = float(latticeDensityFactor(operationProperties.kernel, operationProperties.n_h, dim))
    if not math.isfinite(factor) or factor <= 0.0:
        raise ValueError(
            f"lattice calibration of {operationProperties.kernel!r} at n_h="
            f"{operationProperties.n_h} in {dim}D gives the factor {factor}; accepted: a finite "
            "positive factor (disable calibrateNormalization for this kernel)"
        )
    return True, factor


def _reinterpret(a: wp.array, dtype) -> wp.array:
    """`a` viewed with the Warp vector dtype `dtype` (int tables only; non-differentiable).

    Plain n-d integer views ``[N, k]`` (from `castTorchToWarp`) become 1-D arrays of
    vector(k); arrays that already have the dtype are returned unchanged."""
    if wp.types.types_equal(a.dtype, dtype):
        return a
    n = a.shape[0] if a.ndim >= 1 else 0
    out = wp.array(ptr=a.ptr, dtype=dtype, shape=(n,), device=a.device, copy=False)
    out._ref = a  # keep the owner alive with the view
    return out


def _bool(v) -> bool:
    return bool(v)


#: the attribute of a supports tensor that keeps its last `lowerTakenFlag`
_LOWER_TAKEN_ATTR = "_warpSPHCoreLowerTaken"
_ALL_KIND_CODES = frozenset(int(k) for k in ParticleType)
_NO_FLAG: dict = {}


def _noFlag(device) -> wp.array:
    """An empty int32 Warp array on `device` (kept): ``adjacencyData.lowerTaken`` of a call
    whose rows are traversed whole (never a placeholder whose fill may be nonzero)."""
    key = str(device)
    a = _NO_FLAG.get(key)
    if a is None:
        a = _NO_FLAG[key] = wp.from_torch(torch.zeros(0, dtype=torch.int32, device=device))
    return a


def _lowerTakenView(ref, device) -> wp.array:
    """The Warp view of a call's `lowerTakenFlag` (a weak reference, or None), or the empty
    flag (`_noFlag`) where there is none."""
    flag = None if ref is None else ref()
    return _noFlag(device) if flag is None else getCachedWarpArray(flag)


def _admittedBothSides(mode: int) -> tuple[int, ...] | None:
    """The kind codes `mode` admits both as queries and as references, or None where it
    admits every kind (none for a value outside the table: it masks everything)."""
    try:
        kinds = interactionKinds(mode)
    except ValueError:
        return ()
    both = frozenset(int(k) for k in kinds.queries) & frozenset(int(k) for k in kinds.references)
    return None if both >= _ALL_KIND_CODES else tuple(sorted(both))


def _capturing(device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def lowerTakenFlag(particles, mode: int) -> torch.Tensor:
    """int32 ``[1]`` device flag of a call that takes each pair of a symmetric list once
    (`adjacencyData.lowerTaken`): 1 when every particle has the same support and a kind the
    interaction mode `mode` admits as a query and as a reference. Then every pair (i, j) with
    j < i is row j's to take for both rows, and since a symmetric list's rows hold their
    references j >= i first, a row can stop at its first j < i instead of testing each entry.
    Computed on the device (no readback); kept on the supports tensor per mode, for its
    in-place version and the kinds tensor, so a simulation that passes the same supports
    every step computes it once per mode (and the supports, a tensor the call saves for
    backward, keep it alive for the backward pass)."""
    h, kinds = particles.supports, particles.kinds
    kept = getattr(h, _LOWER_TAKEN_ATTR, None)
    entry = None if kept is None else kept.get(int(mode))
    if (entry is not None and entry[0] == h._version and entry[1]() is kinds
            and entry[2] == kinds._version):
        return entry[3]
    with torch.no_grad():
        ok = (h == h[:1]).all()
        codes = _admittedBothSides(mode)
        if codes is not None:  # comparisons with numbers: nothing copied from the host
            admitted = kinds == codes[0] if codes else torch.zeros_like(kinds, dtype=torch.bool)
            for c in codes[1:]:
                admitted = admitted | (kinds == c)
            ok = ok & admitted.all()
        flag = ok.to(torch.int32).reshape(1)
    if not _capturing(h.device):  # a tensor a CUDA graph's capture makes is not kept
        try:
            if kept is None:
                kept = {}
                setattr(h, _LOWER_TAKEN_ATTR, kept)
            kept[int(mode)] = (h._version, weakref.ref(kinds), kinds._version, flag)
        except (AttributeError, TypeError, RuntimeError):
            pass  # a tensor that refuses attributes: the flag is computed per call
    return flag


def _sceneNeighbourhood(query, reference, domain, adjacency):
    """The neighbourhood of particles that carry scene indices: a scene-aware list (the
    search's, with one readback, when none is given); a grid or a list built without scenes
    is refused, since either pairs particles of different scenes."""
    scenes = getattr(query, "scenes", None)
    refScenes = scenes if reference is None else getattr(reference, "scenes", None)
    if scenes is None and refScenes is None:
        return adjacency
    if adjacency is None:
        return radiusSearchCompactHashMap(query, domain, mode=SupportScheme.SuperSymmetric,
                                          referenceParticles=reference)
    if isinstance(adjacency, CompactHashMap):
        raise ValueError("warpOperation: the particles carry scene indices but the "
                         "neighbourhood is a CompactHashMap, whose traversal would pair "
                         "particles of different scenes; accepted: an AdjacencyList from a "
                         "search of the particles with their scenes, or None")
    if isinstance(adjacency, AdjacencyList) and adjacency.sceneIndex is None:
        raise ValueError("warpOperation: the particles carry scene indices but the "
                         "AdjacencyList was built without them (it may pair particles of "
                         "different scenes); accepted: a list from radiusSearchCompactHashMap "
                         "or buildVerletList of the particles with their scenes, or None")
    return adjacency


def extractStateInfo(queryParticles, operationProperties, domain, queryVolumes=None,
                     referenceVolumes=None, adjacency=None, referenceParticles=None,
                     crkState=None, gradHState=None, renormalizationState=None, site: int = 0,
                     laplacianState=None, mirrored: bool = False):
    """Flatten one call's state into the flat slot list and return it with `build_fn`: the
    original 36 slots (indices unchanged) and two appended ones, the
    consistent Laplacian's ``B`` (36) and ``gamma`` (37) (docs/autograd.md).

    Args:
        queryParticles, referenceParticles: `ParticleState`s (reference None aliases the
            query tensors at slots 1, 3, 5, 7, 9).
        operationProperties: `OperationProperties` (kernel, schemes, modes, calibration).
        domain: `DomainDescription`.
        queryVolumes, referenceVolumes: ``[N_q]``, ``[N_r]`` or None (reference defaults to
            query when only query volumes are given; query volumes are never read).
        adjacency: `AdjacencyList` (CSR), `CompactHashMap` (grid) or None (a grid is built
            with SuperSymmetric and ``getNextPrime(N_r)``; no host sync).
        crkState, gradHState, renormalizationState: correction states or None.
        laplacianState: a `LaplacianCorrectionState` (or any object with ``B [N_q, d, d]``
            and ``gamma [N_q, d]``) or None.
        site: the `util.errorFlags.siteId` of the launch, stored in the adjacency and grid
            structs beside the device's error buffer (names the operator in error reports).
        mirrored: the reference side is the query side (the same particles, values and
            volumes). With a symmetric list (`AdjacencyList.symmetric`) the configuration
            then holds ``pairsOnce``: a reverse kernel may evaluate a pair of equal supports
            once for both of its rows.

    Returns:
        ``(flat, build_fn)``: `flat` has exactly `STATE_SIZE` entries (tensors or null
        `Field`s);
        ``build_fn(warp_arrays, use_bundle=False)`` returns the eight kernel-ABI arguments
        (query SoA, reference SoA, domainData, useAdjacency, adjacencyData, gridData,
        correctionData, kernelState). `build_fn.config` holds the captured non-tensor
        configuration. Raises ValueError for an invalid lattice calibration.
    """
    q = queryParticles
    r = queryParticles if referenceParticles is None else referenceParticles
    qPos = q.positions
    device = qPos.device
    tdtype = qPos.dtype
    s = warpScalar(tdtype)
    d = int(qPos.shape[1])

    def null(kind):
        return nullField(kind, d, device, tdtype)

    def nullInt(kind):
        return nullField(kind, d, device, None)

    flat: list = [None] * STATE_SIZE
    flat[_QPOS], flat[_RPOS] = q.positions, r.positions
    flat[_QSUP], flat[_RSUP] = q.supports, r.supports
    flat[_QMAS], flat[_RMAS] = q.masses, r.masses
    qDen = getattr(q, "densities", None)
    rDen = getattr(r, "densities", None)
    flat[_QDEN] = qDen if qDen is not None else null(FieldKind.SCALAR)
    flat[_RDEN] = rDen if rDen is not None else null(FieldKind.SCALAR)
    flat[_QK], flat[_RK] = q.kinds, r.kinds

    renorm = asRenormalizationState(renormalizationState)
    useRenorm = renorm is not None
    flat[_RENORM_MAT] = renorm.renormalizationMatrices if useRenorm else null(FieldKind.MATRIX)

    gradH = asGradHState(gradHState)
    useGradH = gradH is not None
    if useGradH:
        flat[_QOMEGA] = gradH.queryOmegas
        rOm = getattr(gradH, "referenceOmegas", None)
        flat[_ROMEGA] = rOm if rOm is not None else gradH.queryOmegas
    else:
        flat[_QOMEGA] = flat[_ROMEGA] = null(FieldKind.SCALAR)

    useVolume = queryVolumes is not None or referenceVolumes is not None
    flat[_QVOL] = queryVolumes if queryVolumes is not None else null(FieldKind.SCALAR)
    if referenceVolumes is not None:
        flat[_RVOL] = referenceVolumes
    elif queryVolumes is not None:
        flat[_RVOL] = queryVolumes
    else:
        flat[_RVOL] = null(FieldKind.SCALAR)

    useCRK = crkState is not None
    if useCRK:
        gA = getattr(crkState, "gradA", None)
        gB = getattr(crkState, "gradB", None)
        crk = (crkState.A, crkState.B,
               gA if gA is not None else null(FieldKind.VECTOR),
               gB if gB is not None else null(FieldKind.MATRIX))
    else:
        crk = (null(FieldKind.SCALAR), null(FieldKind.VECTOR), null(FieldKind.VECTOR),
               null(FieldKind.MATRIX))
    flat[_QCRK_A:_QCRK_GRADB + 1] = crk
    flat[_RCRK_A:_RCRK_GRADB + 1] = crk  # one CRKState: the kernels read the query side only

    adjacency = _sceneNeighbourhood(q, referenceParticles, domain, adjacency)
    if adjacency is None:
        nR = int(r.positions.shape[0])
        adjacency = buildCompactHashMap(q.positions.detach(), r.positions.detach(),
                                        q.supports.detach(), r.supports.detach(),
                                        domain.periodic, domain, mode=SupportScheme.SuperSymmetric,
                                        hashMapLength=getNextPrime(nR))
    if isinstance(adjacency, AdjacencyList):
        useAdjacency = True
        flat[_ADJ_LIST] = adjacency.j
        flat[_ADJ_OFFSETS] = adjacency.edgeOffsets
        flat[_ADJ_NUM] = adjacency.numNeighbors
        flat[_GRID_SORT] = nullInt(FieldKind.INT64)
        flat[_GRID_QMIN] = domain.min
        flat[_GRID_QMAX] = domain.max
        flat[_GRID_NUMCELLS] = nullInt(FieldKind.INT32)
        flat[_GRID_HASH] = nullInt(FieldKind.VEC2I)
        flat[_GRID_CELLS] = nullInt(FieldKind.VEC3L)
        flat[_GRID_OFFSETS] = nullInt(FieldKind.VEC3I)
        numOffsets = 0
    elif isinstance(adjacency, CompactHashMap):
        useAdjacency = False
        flat[_ADJ_LIST] = nullInt(FieldKind.INT64)
        flat[_ADJ_OFFSETS] = nullInt(FieldKind.INT32)
        flat[_ADJ_NUM] = nullInt(FieldKind.INT32)
        flat[_GRID_SORT] = adjacency.sortIndex
        flat[_GRID_QMIN] = adjacency.qMin
        flat[_GRID_QMAX] = adjacency.qMax
        flat[_GRID_NUMCELLS] = adjacency.numCells
        flat[_GRID_HASH] = adjacency.hashTable
        flat[_GRID_CELLS] = adjacency.sortedCellTable
        flat[_GRID_OFFSETS] = adjacency.cellOffsets
        numOffsets = int(adjacency.numOffsets)
    else:
        raise TypeError(f"extractStateInfo: adjacency has type {type(adjacency).__name__}; "
                        "accepted: AdjacencyList, CompactHashMap or None")

    flat[_DOM_MIN], flat[_DOM_MAX], flat[_DOM_PERIODIC] = domain.min, domain.max, domain.periodic
    useLap = laplacianState is not None
    flat[_LAP_MAT] = laplacianState.B if useLap else null(FieldKind.MATRIX)
    flat[_LAP_VEC] = laplacianState.gamma if useLap else null(FieldKind.VECTOR)

    props = operationProperties
    calibrate, coefficient = resolveNormalization(props, d)
    config = {
        "dim": d,
        "scalar": s,
        # the device kind picks a specialised kernel's thread layout (`operators._specialized`)
        "deviceType": q.positions.device.type,
        "useAdjacency": useAdjacency,
        "numOffsets": numOffsets,
        "hashMapLength": 0 if useAdjacency else int(adjacency.hashMapLength),
        "useGradientRenormalization": useRenorm,
        "useVolume": useVolume,
        "useGradHTerms": useGradH,
        "useCRK": useCRK,
        "useConsistentLaplacian": useLap,
        "queryHasDensities": qDen is not None,
        "referenceHasDensities": rDen is not None,
        "kernelFunction": int(props.kernel),
        "supportMode": int(props.supportMode),
        "gradientMode": int(props.gradientMode),
        "laplacianMode": int(props.laplacianMode),
        "operationMode": int(props.operationMode),
        "positiveDivergenceMode": _bool(props.positiveDivergence),
        "divergenceMode": _bool(props.divergenceDotMode),
        "calibrateNormalization": calibrate,
        "normalizationCoefficient": coefficient,
        "pairsOnce": bool(mirrored and useAdjacency and adjacency.symmetric),
    }
    # where pairs are taken once: whether a row may stop at its first j < i (a device flag;
    # not under a torch.func transform, whose wrapped tensors it would not see through). The
    # build function keeps a weak reference (a graph node holds no tensor but its saved ones;
    # the saved supports keep the flag alive); a flag gone means rows traversed whole.
    lowerTaken = None
    if (config["pairsOnce"] and q.supports.shape[0] > 0
            and not torch._C._are_functorch_transforms_active()):
        lowerTaken = weakref.ref(lowerTakenFlag(q, props.operationMode))
    particleT = structFor("particle", d, s)
    correctionT = structFor("correction", d, s)
    domainT = structFor("domain", d, s)
    kernelT = structFor("kernelState", d, s)
    gridT = structFor("grid", d, s)

    def build_fn(warp_arrays, use_bundle=False):
        a = warp_arrays
        # Grad-requiring launches get fresh call-local structs (wp.Tape re-reads struct fields
        # at backward time); the bridge passes use_bundle=True only without grad, and
        # then the persistent per-(d, dtype) instances are refreshed in place.
        key = (d, s)

        def mk(cls, role, fields):
            return makeStruct(cls, fields, use_bundle=use_bundle, key=key + (role,))

        qs = mk(particleT, "query", {
            "positions": a[_QPOS], "supports": a[_QSUP], "masses": a[_QMAS],
            "densities": a[_QDEN], "kinds": a[_QK],
            "hasDensities": config["queryHasDensities"]})
        rs = mk(particleT, "reference", {
            "positions": a[_RPOS], "supports": a[_RSUP], "masses": a[_RMAS],
            "densities": a[_RDEN], "kinds": a[_RK],
            "hasDensities": config["referenceHasDensities"]})
        dom = mk(domainT, "domain", {
            "domainMin": a[_DOM_MIN], "domainMax": a[_DOM_MAX], "periodicity": a[_DOM_PERIODIC],
            "dim": d})
        errors = errorArray(a[_QPOS].device)
        adj = mk(adjacencyData, "adjacency", {
            "neighborList": a[_ADJ_LIST], "neighborOffsets": a[_ADJ_OFFSETS],
            "numNeighbors": a[_ADJ_NUM], "errors": errors, "site": site,
            "lowerTaken": _lowerTakenView(lowerTaken, device)})
        grid = mk(gridT, "grid", {
            "sortIndex": a[_GRID_SORT], "qMin": a[_GRID_QMIN], "qMax": a[_GRID_QMAX],
            "numCells": a[_GRID_NUMCELLS],
            "hashTable": _reinterpret(a[_GRID_HASH], wp.vec2i),
            "cellTable": _reinterpret(a[_GRID_CELLS], wp.vec3l),
            "cellOffsets": _reinterpret(a[_GRID_OFFSETS], wp.vec3i),
            "periodicity": a[_DOM_PERIODIC], "D": d, "numOffsets": numOffsets,
            "errors": errors, "site": site})
        corr = mk(correctionT, "correction", {
            "useGradientRenormalization": useRenorm, "renormalizationMatrices": a[_RENORM_MAT],
            "useVolume": useVolume, "queryVolumes": a[_QVOL], "referenceVolumes": a[_RVOL],
            "useGradHTerms": useGradH, "queryOmegas": a[_QOMEGA], "referenceOmegas": a[_ROMEGA],
            "useCRK": useCRK, "queryA": a[_QCRK_A], "queryB": a[_QCRK_B],
            "queryGradA": a[_QCRK_GRADA], "queryGradB": a[_QCRK_GRADB],
            "referenceA": a[_RCRK_A], "referenceB": a[_RCRK_B],
            "referenceGradA": a[_RCRK_GRADA], "referenceGradB": a[_RCRK_GRADB],
            "useConsistentLaplacian": useLap, "laplacianMatrices": a[_LAP_MAT],
            "laplacianVectors": a[_LAP_VEC]})
        ks = mk(kernelT, "kernelState", {
            "kernelFunction": config["kernelFunction"],
            "supportMode": config["supportMode"],
            "gradientMode": config["gradientMode"],
            "laplacianMode": config["laplacianMode"],
            "positiveDivergenceMode": config["positiveDivergenceMode"],
            "divergenceMode": config["divergenceMode"],
            "operationMode": config["operationMode"],
            "calibrateNormalization": calibrate,
            "normalizationCoefficient": s(coefficient)})
        return [qs, rs, dom, useAdjacency, adj, grid, corr, ks]

    build_fn.config = config
    return flat, build_fn
