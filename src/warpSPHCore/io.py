"""Particle I/O: write a particle set with arbitrary per-particle fields to VTU (ParaView) or
HDF5 and read it back exactly (`docs/io.md`).

Public functions: `writeParticles`, `readParticles`. Both formats are optional dependencies
that are imported only when a function needs them: ``meshio`` for ``.vtu``, ``h5py`` for
``.h5`` / ``.hdf5``. Importing this module never requires either.

Layout
------
VTU (one ``UnstructuredGrid`` piece, written by meshio):
    * points: the positions, padded with zeros to 3D (VTU points are 3D), in the positions'
      dtype;
    * cells: one ``vertex`` cell per particle, so ParaView renders every particle as a point;
    * point data: ``supports``, ``masses``, ``kinds``, ``densities`` (when a `ParticleState`
      is written) and every extra field; fields with more than one trailing axis
      (``[N, a, b]``) are flattened to ``[N, a*b]`` and bool fields are stored as uint8;
    * field data: ``warpSPHCore_metadata`` (UInt8 array holding a UTF-8 JSON document: the
      dimension, time, domain, and the original shape and dtype of every field) and
      ``TimeValue`` (Float64, the VTK convention ParaView shows as the time) when a time is
      given.
HDF5 (one group ``/particles``):
    * one dataset per field in its original shape and dtype (``positions`` ``[N, d]``,
      ``supports``, ``masses``, ``kinds``, ``densities`` and the extra fields);
    * group attributes: ``warpSPHCoreFormat`` (layout version), ``warpSPHCoreVersion``,
      ``dim``, ``numParticles``, ``hasParticleState``, ``stateFields``, ``fieldNames``,
      ``time`` (when given) and ``domainMin``, ``domainMax``, ``domainPeriodic``,
      ``domainDtype`` (when a `DomainDescription` is given).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from .dataTypes.domain import DomainDescription
from .dataTypes.particleState import ParticleState

__all__ = ["writeParticles", "readParticles"]

_FORMATS = {"vtu": "vtu", ".vtu": "vtu", "h5": "hdf5", ".h5": "hdf5", "hdf5": "hdf5",
            ".hdf5": "hdf5"}
_STATE_NAMES = ("positions", "supports", "masses", "kinds", "densities")
# dtypes both formats store natively (bool is stored as uint8 in VTU and restored on read)
_ACCEPTED_DTYPES = {
    np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int8), np.dtype(np.int16),
    np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8), np.dtype(np.bool_),
}
_ACCEPTED_DTYPES_TEXT = "float32, float64, int8, int16, int32, int64, uint8 or bool"
_META_NAME = "warpSPHCore_metadata"
_LAYOUT_VERSION = 1
_GROUP = "particles"


def _version() -> str:
    from ._version import __version__

    return __version__


def _requireMeshio(owner: str):
    try:
        import meshio
    except ImportError as err:
        raise ImportError(f"{owner}: writing/reading .vtu files needs the 'meshio' package, "
                          "which is not installed; install it with `pip install meshio`") from err
    return meshio


def _requireH5py(owner: str):
    try:
        import h5py
    except ImportError as err:
        raise ImportError(f"{owner}: writing/reading .h5/.hdf5 files needs the 'h5py' package, "
                          "which is not installed; install it with `pip install h5py`") from err
    return h5py


def _checkPath(owner: str, path) -> Path:
    if isinstance(path, (bytes, bytearray)) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{owner}: path has type {type(path).__name__}; accepted: str or "
                        "os.PathLike")
    return Path(path)


def _resolveFormat(owner: str, path: Path, fmt) -> str:
    if fmt is not None:
        if not isinstance(fmt, str) or fmt.lower() not in _FORMATS:
            raise ValueError(f"{owner}: format={fmt!r}; accepted: 'vtu', 'hdf5', 'h5' or None "
                             "(follow the suffix of path)")
        return _FORMATS[fmt.lower()]
    suffix = path.suffix.lower()
    if suffix not in (".vtu", ".h5", ".hdf5"):
        raise ValueError(f"{owner}: path {str(path)!r} has suffix {path.suffix!r}; accepted: "
                         "'.vtu', '.h5' or '.hdf5' (or pass format='vtu' / 'hdf5')")
    return _FORMATS[suffix]


def _toNumpy(owner: str, argName: str, value) -> np.ndarray:
    """Detached, CPU, contiguous numpy copy of a tensor or array (dtype unchanged)."""
    if isinstance(value, torch.Tensor):
        arr = value.detach().cpu().contiguous().numpy()
    elif isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
    else:
        raise TypeError(f"{owner}: {argName} has type {type(value).__name__}; accepted: "
                        "torch.Tensor or numpy.ndarray")
    if arr.dtype.newbyteorder("=") not in _ACCEPTED_DTYPES:
        raise TypeError(f"{owner}: {argName} has dtype {arr.dtype}; accepted: "
                        f"{_ACCEPTED_DTYPES_TEXT}")
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


def _collect(owner: str, particles, fields, domain, time):
    """Validate the inputs of `writeParticles`; returns (arrays, stateNames, dim, N, meta)."""
    if particles is not None and not isinstance(particles, ParticleState):
        raise TypeError(f"{owner}: particles has type {type(particles).__name__}; accepted: "
                        "warpSPHCore.ParticleState or None")
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        raise TypeError(f"{owner}: fields has type {type(fields).__name__}; accepted: a dict "
                        "mapping str names to tensors/arrays with leading dimension N, or None")

    arrays: dict[str, np.ndarray] = {}
    stateNames: list[str] = []
    if particles is not None:
        for name in _STATE_NAMES:
            value = getattr(particles, name)
            if value is not None:
                arrays[name] = _toNumpy(owner, f"particles.{name}", value)
                stateNames.append(name)
        clash = sorted(set(fields) & set(_STATE_NAMES))
        if clash:
            raise ValueError(f"{owner}: fields has key(s) {clash} that clash with the "
                             f"ParticleState fields {list(_STATE_NAMES)}; accepted: other names "
                             "(or pass particles=None and give the fields alone)")
    elif "positions" not in fields:
        raise ValueError(f"{owner}: no positions given (particles is None and fields has keys "
                         f"{sorted(map(str, fields))}); accepted: a ParticleState, or fields "
                         "containing 'positions' [N, d]")

    for name, value in fields.items():
        if not isinstance(name, str) or not name or "/" in name or name == _META_NAME \
                or name == "TimeValue":
            raise ValueError(f"{owner}: fields has key {name!r}; accepted: non-empty str names "
                             f"without '/', other than {_META_NAME!r} and 'TimeValue'")
        arrays[name] = _toNumpy(owner, f"fields[{name!r}]", value)

    positions = arrays["positions"]
    if positions.dtype not in (np.float32, np.float64) or positions.ndim != 2 \
            or positions.shape[1] not in (1, 2, 3):
        raise ValueError(f"{owner}: positions has shape {positions.shape} and dtype "
                         f"{positions.dtype}; accepted: float32/float64 [N, d] with d in "
                         "{1, 2, 3}")
    n, dim = positions.shape
    for name, arr in arrays.items():
        where = f"particles.{name}" if name in stateNames else f"fields[{name!r}]"
        if arr.ndim == 0 or arr.shape[0] != n:
            raise ValueError(f"{owner}: {where} has shape {arr.shape}; accepted: leading "
                             f"dimension N = {n} (the number of particles, from positions)")
        if any(s == 0 for s in arr.shape[1:]):
            raise ValueError(f"{owner}: {where} has shape {arr.shape} with an empty trailing "
                             "axis; accepted: [N] or [N, k, ...] with every k >= 1")

    meta: dict = {"time": None, "domain": None}
    if time is not None:
        if isinstance(time, torch.Tensor) and time.numel() == 1 and time.dtype.is_floating_point:
            time = float(time.detach().cpu().reshape(()).item())
        elif isinstance(time, (int, float, np.floating, np.integer)) \
                and not isinstance(time, (bool, np.bool_)):
            time = float(time)
        else:
            raise TypeError(f"{owner}: time has type {type(time).__name__}; accepted: a Python "
                            "int/float, a one-element float tensor, or None")
        meta["time"] = time
    if domain is not None:
        if not isinstance(domain, DomainDescription):
            raise TypeError(f"{owner}: domain has type {type(domain).__name__}; accepted: "
                            "warpSPHCore.DomainDescription or None")
        if domain.dim != dim:
            raise ValueError(f"{owner}: domain has dim {domain.dim} but positions have d = "
                             f"{dim}; accepted: a DomainDescription of the particles' dimension")
        lo = domain.min.detach().cpu().numpy()
        meta["domain"] = {
            "min": [float(v) for v in lo],
            "max": [float(v) for v in domain.max.detach().cpu().numpy()],
            "periodic": [bool(v) for v in domain.periodic.detach().cpu().numpy()],
            "dtype": str(lo.dtype),
        }
    return arrays, stateNames, dim, n, meta


def writeParticles(path, particles=None, fields=None, *, format=None, domain=None, time=None):
    """Write a particle set and any per-particle fields to a VTU or HDF5 file.

    The file is readable by `readParticles` (exact round trip of values, dtypes and shapes);
    VTU files open in ParaView as a point cloud (one ``vertex`` cell per particle).

    Args:
        path: ``str`` or ``os.PathLike``; the suffix ``.vtu``, ``.h5`` or ``.hdf5`` selects
            the format unless ``format`` is given. An existing file is overwritten.
        particles: a `ParticleState` (``positions [N, d]`` float32/float64 with d in
            {1, 2, 3}, ``supports [N]``, ``masses [N]``, ``kinds [N]`` int32, optional
            ``densities [N]``) or None. When None, ``fields`` must contain ``"positions"``
            (float32/float64 ``[N, d]``).
        fields: dict ``name -> torch.Tensor | numpy.ndarray`` with leading dimension N and any
            trailing shape (``[N]``, ``[N, k]``, ``[N, a, b]``, ...), dtype float32, float64,
            int8, int16, int32, int64, uint8 or bool; or None. Names must be non-empty, must
            not contain ``'/'``, and must not clash with the ParticleState field names when
            ``particles`` is given. Tensors may live on any device and may require grad (they
            are detached and copied to the CPU; the graph is not touched).
        format: ``'vtu'``, ``'hdf5'`` / ``'h5'`` or None (follow the suffix).
        domain: a `DomainDescription` of the particles' dimension, or None; its ``min``,
            ``max`` and ``periodic`` are stored as metadata.
        time: the simulation time (Python int/float or a one-element float tensor), or None;
            stored as float64 (and as ``TimeValue`` field data in VTU, which ParaView shows).

    Returns:
        The `pathlib.Path` written.

    Raises:
        TypeError: ``path``, ``particles``, ``fields``, a field value, ``domain`` or ``time``
            has the wrong type, or a field has an unsupported dtype.
        ValueError: unknown suffix or ``format``; no positions; a field whose leading size
            differs from N or that has an empty trailing axis; a clashing or invalid field
            name; a domain of another dimension; a VTU file with N = 0 (meshio cannot read a
            VTU without points back; use HDF5 for empty sets).
        ImportError: ``meshio`` (for VTU) or ``h5py`` (for HDF5) is not installed.
    """
    owner = "writeParticles"
    path = _checkPath(owner, path)
    fmt = _resolveFormat(owner, path, format)
    arrays, stateNames, dim, n, meta = _collect(owner, particles, fields, domain, time)
    if fmt == "vtu":
        _writeVtu(owner, path, arrays, stateNames, dim, n, meta)
    else:
        _writeHdf5(owner, path, arrays, stateNames, dim, n, meta)
    return path


def _writeVtu(owner, path, arrays, stateNames, dim, n, meta):
    meshio = _requireMeshio(owner)
    if n == 0:
        raise ValueError(f"{owner}: positions has N = 0 particles; accepted for VTU: N >= 1 "
                         "(meshio cannot read a VTU file without points back); write empty "
                         "particle sets to .h5/.hdf5")
    positions = arrays["positions"]
    points = np.zeros((n, 3), dtype=positions.dtype)
    points[:, :dim] = positions
    pointData = {}
    fieldInfo = {}
    for name, arr in arrays.items():
        fieldInfo[name] = {"shape": list(arr.shape[1:]), "dtype": str(arr.dtype)}
        if name == "positions":
            continue
        stored = arr.astype(np.uint8) if arr.dtype == np.bool_ else arr
        if stored.ndim > 2:
            stored = stored.reshape(n, -1)
        pointData[name] = stored
    document = {
        "warpSPHCoreFormat": _LAYOUT_VERSION,
        "warpSPHCoreVersion": _version(),
        "dim": dim,
        "numParticles": n,
        "hasParticleState": bool(stateNames),
        "stateFields": stateNames,
        "fields": fieldInfo,
        "time": meta["time"],
        "domain": meta["domain"],
    }
    mesh = meshio.Mesh(points, [("vertex", np.arange(n, dtype=np.int64).reshape(n, 1))],
                       point_data=pointData)
    # binary (zlib-compressed base64) keeps floats bit-exact; ASCII would round them
    meshio.vtu.write(str(path), mesh, binary=True)
    _addVtuFieldData(path, document)


def _addVtuFieldData(path: Path, document: dict):
    """meshio 5.x does not write `field_data` to VTU: insert a ``<FieldData>`` block (ASCII
    DataArrays, which VTK/ParaView and meshio's reader both accept) into the grid."""
    from xml.etree import ElementTree as ET

    tree = ET.parse(str(path))
    grid = tree.getroot().find("UnstructuredGrid")
    block = ET.Element("FieldData")
    payload = np.frombuffer(json.dumps(document).encode("utf-8"), dtype=np.uint8)
    da = ET.SubElement(block, "DataArray", type="UInt8", Name=_META_NAME,
                       NumberOfTuples=str(payload.size), format="ascii")
    da.text = " ".join(str(int(b)) for b in payload)
    if document["time"] is not None:
        da = ET.SubElement(block, "DataArray", type="Float64", Name="TimeValue",
                           NumberOfTuples="1", format="ascii")
        da.text = repr(float(document["time"]))
    block.tail = "\n"
    grid.insert(0, block)
    tree.write(str(path), xml_declaration=True, encoding="utf-8")


def _writeHdf5(owner, path, arrays, stateNames, dim, n, meta):
    h5py = _requireH5py(owner)
    with h5py.File(str(path), "w") as f:
        group = f.create_group(_GROUP)
        for name, arr in arrays.items():
            group.create_dataset(name, data=arr)
        group.attrs["warpSPHCoreFormat"] = _LAYOUT_VERSION
        group.attrs["warpSPHCoreVersion"] = _version()
        group.attrs["dim"] = dim
        group.attrs["numParticles"] = n
        group.attrs["hasParticleState"] = bool(stateNames)
        group.attrs["stateFields"] = json.dumps(stateNames)
        group.attrs["fieldNames"] = json.dumps(list(arrays))
        if meta["time"] is not None:
            group.attrs["time"] = np.float64(meta["time"])
        if meta["domain"] is not None:
            dom = meta["domain"]
            group.attrs["domainMin"] = np.asarray(dom["min"], dtype=np.float64)
            group.attrs["domainMax"] = np.asarray(dom["max"], dtype=np.float64)
            group.attrs["domainPeriodic"] = np.asarray(dom["periodic"], dtype=np.bool_)
            group.attrs["domainDtype"] = dom["dtype"]


def readParticles(path, *, format=None):
    """Read a file written by `writeParticles`.

    Args:
        path: ``str`` or ``os.PathLike`` of a ``.vtu``, ``.h5`` or ``.hdf5`` file.
        format: ``'vtu'``, ``'hdf5'`` / ``'h5'`` or None (follow the suffix).

    Returns:
        ``(particles, fields, metadata)``:

            * ``particles``: a `ParticleState` of CPU tensors in the stored dtypes (positions
              ``[N, d]`` with the original d, not the 3D VTU points) if one was written, else
              None;
            * ``fields``: dict ``name -> torch.Tensor`` (CPU, the stored dtype and original shape,
              e.g. ``[N, d, d]`` for matrix fields) of the extra fields, in writing order; when
              no ParticleState was written it also holds ``"positions"`` ``[N, d]``;
            * ``metadata``: dict with ``"format"`` (``'vtu'`` or ``'hdf5'``), ``"dim"`` (int d),
              ``"numParticles"`` (int N), ``"time"`` (float or None), ``"domain"`` (a
              `DomainDescription` of CPU tensors in the stored dtype, or None) and
              ``"warpSPHCoreVersion"`` (str, the writer's version).

    Raises:
        TypeError: ``path`` is not a str / os.PathLike.
        ValueError: unknown suffix or ``format``, or the file lacks the warpSPHCore metadata
            (it was not written by `writeParticles`).
        FileNotFoundError: ``path`` does not exist.
        ImportError: ``meshio`` (for VTU) or ``h5py`` (for HDF5) is not installed.
    """
    owner = "readParticles"
    path = _checkPath(owner, path)
    fmt = _resolveFormat(owner, path, format)
    if not path.is_file():
        raise FileNotFoundError(f"{owner}: path {str(path)!r} does not exist or is not a file")
    if fmt == "vtu":
        arrays, doc = _readVtu(owner, path)
    else:
        arrays, doc = _readHdf5(owner, path)

    tensors = {name: torch.from_numpy(np.ascontiguousarray(arr)) for name, arr in arrays.items()}
    stateNames = doc["stateFields"]
    particles = None
    if doc["hasParticleState"]:
        particles = ParticleState(**{name: tensors.pop(name) for name in stateNames})
    domain = None
    if doc["domain"] is not None:
        dom = doc["domain"]
        ddtype = getattr(torch, dom["dtype"])
        domain = DomainDescription(
            min=torch.tensor(dom["min"], dtype=ddtype),
            max=torch.tensor(dom["max"], dtype=ddtype),
            periodic=torch.tensor(dom["periodic"], dtype=torch.bool),
        )
    metadata = {
        "format": fmt,
        "dim": int(doc["dim"]),
        "numParticles": int(doc["numParticles"]),
        "time": None if doc["time"] is None else float(doc["time"]),
        "domain": domain,
        "warpSPHCoreVersion": str(doc["warpSPHCoreVersion"]),
    }
    return particles, tensors, metadata


def _readVtu(owner, path):
    meshio = _requireMeshio(owner)
    mesh = meshio.read(str(path), file_format="vtu")
    if _META_NAME not in mesh.field_data:
        raise ValueError(f"{owner}: {str(path)!r} has no {_META_NAME!r} field data; accepted: "
                         "VTU files written by writeParticles")
    doc = json.loads(np.asarray(mesh.field_data[_META_NAME], dtype=np.uint8).tobytes()
                     .decode("utf-8"))
    n, dim = int(doc["numParticles"]), int(doc["dim"])
    arrays = {}
    for name, info in doc["fields"].items():
        dtype = np.dtype(info["dtype"])
        shape = (n, *info["shape"])
        if name == "positions":
            arr = mesh.points[:, :dim]
        else:
            arr = mesh.point_data[name]
        arrays[name] = np.ascontiguousarray(arr).astype(dtype, copy=False).reshape(shape)
    return arrays, doc


def _readHdf5(owner, path):
    h5py = _requireH5py(owner)
    with h5py.File(str(path), "r") as f:
        if _GROUP not in f or "warpSPHCoreFormat" not in f[_GROUP].attrs:
            raise ValueError(f"{owner}: {str(path)!r} has no '/{_GROUP}' group with "
                             "warpSPHCore attributes; accepted: HDF5 files written by "
                             "writeParticles")
        group = f[_GROUP]
        attrs = group.attrs
        names = json.loads(_str(attrs["fieldNames"]))
        arrays = {name: group[name][()] for name in names}
        doc = {
            "warpSPHCoreVersion": _str(attrs["warpSPHCoreVersion"]),
            "dim": int(attrs["dim"]),
            "numParticles": int(attrs["numParticles"]),
            "hasParticleState": bool(attrs["hasParticleState"]),
            "stateFields": json.loads(_str(attrs["stateFields"])),
            "time": float(attrs["time"]) if "time" in attrs else None,
            "domain": None,
        }
        if "domainMin" in attrs:
            doc["domain"] = {
                "min": [float(v) for v in attrs["domainMin"]],
                "max": [float(v) for v in attrs["domainMax"]],
                "periodic": [bool(v) for v in attrs["domainPeriodic"]],
                "dtype": _str(attrs["domainDtype"]),
            }
    return arrays, doc


def _str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
