"""Particle I/O (`warpSPHCore.io`): exact VTU / HDF5 round trips, metadata, input errors,
missing optional packages, and the runnable example of docs/io.md."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from warpSPHCore import DomainDescription, ParticleState
from warpSPHCore.io import readParticles, writeParticles

pytest.importorskip("meshio")
pytest.importorskip("h5py")

SUFFIXES = [".vtu", ".h5"]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "io.md"


def _state(n, dim, dtype, device, densities=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ParticleState(
        positions=torch.rand(n, dim, generator=g, dtype=dtype).to(device),
        supports=(0.1 + torch.rand(n, generator=g, dtype=dtype)).to(device),
        masses=torch.rand(n, generator=g, dtype=dtype).to(device),
        kinds=torch.randint(0, 4, (n,), generator=g, dtype=torch.int32).to(device),
        densities=torch.rand(n, generator=g, dtype=dtype).to(device) if densities else None,
    )


def _fields(n, dim, dtype, device, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {
        "pressure": torch.randn(n, generator=g, dtype=dtype).to(device),
        "velocity": torch.randn(n, dim, generator=g, dtype=dtype).to(device),
        "stress": torch.randn(n, dim, dim, generator=g, dtype=dtype).to(device),
        "cellIndex": torch.randint(-5, 5, (n,), generator=g, dtype=torch.int32).to(device),
        "other64": torch.randn(n, 2, generator=g, dtype=torch.float64).to(device),
        "flag": (torch.rand(n, generator=g) > 0.5).to(device),
    }


def _assertSame(actual: torch.Tensor, expected: torch.Tensor, name: str):
    expected = expected.detach().cpu()
    assert actual.device.type == "cpu", name
    assert actual.dtype == expected.dtype, (name, actual.dtype, expected.dtype)
    assert tuple(actual.shape) == tuple(expected.shape), (name, actual.shape, expected.shape)
    assert torch.equal(actual, expected), name  # bit-exact


def _assertState(actual: ParticleState, expected: ParticleState):
    assert isinstance(actual, ParticleState)
    for name in ("positions", "supports", "masses", "kinds", "densities"):
        e = getattr(expected, name)
        a = getattr(actual, name)
        if e is None:
            assert a is None, name
        else:
            _assertSame(a, e, name)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_round_trip_state_and_fields(tmp_path, suffix, device, dtype, dim):
    n = 7
    state = _state(n, dim, dtype, device)
    fields = _fields(n, dim, dtype, device)
    path = tmp_path / f"particles{suffix}"
    assert writeParticles(path, state, fields) == path
    particles, readFields, meta = readParticles(path)
    _assertState(particles, state)
    assert list(readFields) == list(fields)
    for name, value in fields.items():
        _assertSame(readFields[name], value, name)
    assert meta["dim"] == dim
    assert meta["numParticles"] == n
    assert meta["format"] == ("vtu" if suffix == ".vtu" else "hdf5")
    assert meta["time"] is None and meta["domain"] is None
    assert isinstance(meta["warpSPHCoreVersion"], str)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_round_trip_metadata_time_and_domain(tmp_path, suffix, dtype, dim):
    state = _state(4, dim, dtype, "cpu", densities=False)
    domain = DomainDescription(
        min=torch.full((dim,), -0.3, dtype=dtype),
        max=torch.linspace(1.1, 2.7, dim, dtype=dtype),
        periodic=[k % 2 == 0 for k in range(dim)],
    )
    path = tmp_path / f"meta{suffix}"
    writeParticles(path, state, domain=domain, time=0.1 + 0.2)
    particles, fields, meta = readParticles(path)
    _assertState(particles, state)
    assert fields == {}
    assert meta["time"] == 0.1 + 0.2  # exact, not rounded
    got = meta["domain"]
    assert isinstance(got, DomainDescription) and got.dim == dim
    _assertSame(got.min, domain.min, "domain.min")
    _assertSame(got.max, domain.max, "domain.max")
    _assertSame(got.periodic, domain.periodic, "domain.periodic")


def test_time_from_tensor_and_int(tmp_path):
    state = _state(3, 2, torch.float32, "cpu")
    writeParticles(tmp_path / "a.h5", state, time=torch.tensor(1.5))
    assert readParticles(tmp_path / "a.h5")[2]["time"] == 1.5
    writeParticles(tmp_path / "a.vtu", state, time=3)
    assert readParticles(tmp_path / "a.vtu")[2]["time"] == 3.0


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_fields_only_without_particle_state(tmp_path, suffix, dim):
    n = 5
    fields = {
        "positions": torch.rand(n, dim, dtype=torch.float64),
        "masses": torch.rand(n, dtype=torch.float32),  # a reserved name is fine here
        "tensor3": torch.randn(n, 2, 3, 2, dtype=torch.float64),
        "column": torch.randn(n, 1, dtype=torch.float32),
        "fromNumpy": np.arange(n, dtype=np.int64),
    }
    path = tmp_path / f"fields{suffix}"
    writeParticles(path, fields=fields)
    particles, readFields, meta = readParticles(path)
    assert particles is None
    assert list(readFields) == list(fields)
    for name, value in fields.items():
        expected = torch.from_numpy(value) if isinstance(value, np.ndarray) else value
        _assertSame(readFields[name], expected, name)
    assert meta["dim"] == dim and meta["numParticles"] == n


def test_vtu_points_padded_to_3d_and_vertex_cells(tmp_path, dim):
    import meshio

    state = _state(6, dim, torch.float64, "cpu")
    stress = torch.randn(6, dim, dim, dtype=torch.float64)
    path = tmp_path / "p.vtu"
    writeParticles(path, state, {"stress": stress}, time=2.0)
    mesh = meshio.read(path)
    assert mesh.points.shape == (6, 3)
    np.testing.assert_array_equal(mesh.points[:, :dim], state.positions.numpy())
    np.testing.assert_array_equal(mesh.points[:, dim:], 0.0)
    assert len(mesh.cells) == 1 and mesh.cells[0].type == "vertex"
    np.testing.assert_array_equal(mesh.cells[0].data.ravel(), np.arange(6))
    assert mesh.point_data["stress"].shape == (6, dim * dim)  # flattened for VTU
    np.testing.assert_array_equal(mesh.point_data["stress"], stress.reshape(6, -1).numpy())
    np.testing.assert_array_equal(mesh.field_data["TimeValue"], [2.0])


def test_vtu_readable_by_vtk(tmp_path):
    """VTK's own XML reader (the one ParaView uses) sees the points, vertex cells, point data
    and field data."""
    vtk = pytest.importorskip("vtk")
    from vtk.util.numpy_support import vtk_to_numpy

    state = _state(5, 2, torch.float32, "cpu")
    path = tmp_path / "p.vtu"
    writeParticles(path, state, {"A": torch.randn(5, 2, 2)}, time=0.5)
    reader = vtk.vtkXMLUnstructuredGridReader()
    reader.SetFileName(str(path))
    reader.Update()
    grid = reader.GetOutput()
    assert grid.GetNumberOfPoints() == 5 and grid.GetNumberOfCells() == 5
    assert all(grid.GetCellType(k) == vtk.VTK_VERTEX for k in range(5))
    np.testing.assert_array_equal(vtk_to_numpy(grid.GetPointData().GetArray("masses")),
                                  state.masses.numpy())
    assert grid.GetPointData().GetArray("A").GetNumberOfComponents() == 4
    np.testing.assert_array_equal(vtk_to_numpy(grid.GetFieldData().GetArray("TimeValue")),
                                  [0.5])


def test_hdf5_layout(tmp_path):
    import h5py

    state = _state(4, 3, torch.float64, "cpu")
    stress = torch.randn(4, 3, 3, dtype=torch.float64)
    domain = DomainDescription(torch.zeros(3, dtype=torch.float64),
                               torch.ones(3, dtype=torch.float64), [True, False, True])
    path = tmp_path / "p.hdf5"
    writeParticles(path, state, {"stress": stress}, domain=domain, time=0.75)
    with h5py.File(path, "r") as f:
        group = f["particles"]
        assert set(group) == {"positions", "supports", "masses", "kinds", "densities", "stress"}
        assert group["stress"].shape == (4, 3, 3) and group["kinds"].dtype == np.int32
        np.testing.assert_array_equal(group["positions"][()], state.positions.numpy())
        assert group.attrs["dim"] == 3 and group.attrs["numParticles"] == 4
        assert group.attrs["time"] == 0.75
        np.testing.assert_array_equal(group.attrs["domainMin"], [0, 0, 0])
        np.testing.assert_array_equal(group.attrs["domainMax"], [1, 1, 1])
        np.testing.assert_array_equal(group.attrs["domainPeriodic"], [True, False, True])


def test_format_argument_overrides_suffix(tmp_path):
    state = _state(3, 1, torch.float32, "cpu")
    path = tmp_path / "data.bin"
    writeParticles(path, state, format="hdf5")
    with pytest.raises(ValueError, match=r"readParticles: path .*suffix '\.bin'"):
        readParticles(path)
    particles, _, meta = readParticles(path, format="h5")
    _assertState(particles, state)
    assert meta["format"] == "hdf5"
    writeParticles(tmp_path / "data.xml", state, format="VTU")
    _assertState(readParticles(tmp_path / "data.xml", format="vtu")[0], state)


def test_empty_particle_set_hdf5(tmp_path, dtype, dim):
    state = _state(0, dim, dtype, "cpu")
    fields = {"velocity": torch.zeros(0, dim, dtype=dtype),
              "stress": torch.zeros(0, dim, dim, dtype=dtype)}
    path = tmp_path / "empty.h5"
    writeParticles(path, state, fields)
    particles, readFields, meta = readParticles(path)
    _assertState(particles, state)
    for name, value in fields.items():
        _assertSame(readFields[name], value, name)
    assert meta["numParticles"] == 0 and meta["dim"] == dim


def test_empty_particle_set_vtu_raises(tmp_path):
    state = _state(0, 2, torch.float64, "cpu")
    path = tmp_path / "empty.vtu"
    with pytest.raises(ValueError, match=r"writeParticles: positions has N = 0.*\.h5"):
        writeParticles(path, state)
    assert not path.exists()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_grad_requiring_tensors(tmp_path, suffix, device):
    positions = torch.rand(5, 2, dtype=torch.float64, device=device, requires_grad=True)
    state = ParticleState(positions, torch.full((5,), 0.2, dtype=torch.float64, device=device),
                          torch.ones(5, dtype=torch.float64, device=device),
                          torch.zeros(5, dtype=torch.int32, device=device))
    derived = positions * 2.0  # non-leaf, part of a graph
    path = tmp_path / f"g{suffix}"
    writeParticles(path, state, {"derived": derived})
    particles, fields, _ = readParticles(path)
    _assertSame(particles.positions, positions, "positions")
    _assertSame(fields["derived"], derived, "derived")
    assert not particles.positions.requires_grad and not fields["derived"].requires_grad
    derived.sum().backward()  # the graph was left intact
    assert torch.equal(positions.grad, torch.full_like(positions, 2.0))


def test_overwrite_existing_file(tmp_path):
    path = tmp_path / "p.vtu"
    writeParticles(path, _state(4, 3, torch.float64, "cpu", seed=1))
    second = _state(9, 2, torch.float32, "cpu", seed=2)
    writeParticles(path, second)
    _assertState(readParticles(path)[0], second)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_field_with_wrong_leading_size(tmp_path, suffix):
    state = _state(5, 2, torch.float64, "cpu")
    with pytest.raises(ValueError, match=r"writeParticles: fields\['bad'\] has shape \(4, 2\);"
                                         r" accepted: leading dimension N = 5"):
        writeParticles(tmp_path / f"p{suffix}", state, {"bad": torch.zeros(4, 2)})
    with pytest.raises(ValueError, match=r"writeParticles: fields\['scalar'\] has shape \(\)"):
        writeParticles(tmp_path / f"p{suffix}", state, {"scalar": torch.tensor(1.0)})
    with pytest.raises(ValueError, match=r"writeParticles: fields\['e'\].*empty trailing axis"):
        writeParticles(tmp_path / f"p{suffix}", state, {"e": torch.zeros(5, 0)})


def test_unknown_suffix_and_format(tmp_path):
    state = _state(3, 2, torch.float64, "cpu")
    with pytest.raises(ValueError, match=r"writeParticles: path .* has suffix '\.csv'; "
                                         r"accepted: '\.vtu', '\.h5' or '\.hdf5'"):
        writeParticles(tmp_path / "p.csv", state)
    with pytest.raises(ValueError, match=r"writeParticles: format='vtk'; accepted"):
        writeParticles(tmp_path / "p.vtu", state, format="vtk")
    with pytest.raises(ValueError, match=r"readParticles: path .* has suffix ''"):
        readParticles(tmp_path / "noSuffix")


def test_bad_types(tmp_path):
    state = _state(3, 2, torch.float64, "cpu")
    path = tmp_path / "p.h5"
    with pytest.raises(TypeError, match=r"writeParticles: fields\['v'\] has type list; "
                                        r"accepted: torch.Tensor or numpy.ndarray"):
        writeParticles(path, state, {"v": [1.0, 2.0, 3.0]})
    with pytest.raises(TypeError, match=r"writeParticles: fields\['c'\] has dtype complex64; "
                                        r"accepted: float32, float64"):
        writeParticles(path, state, {"c": torch.zeros(3, dtype=torch.complex64)})
    with pytest.raises(TypeError, match=r"writeParticles: particles has type dict; accepted: "
                                        r"warpSPHCore.ParticleState"):
        writeParticles(path, {"positions": state.positions})
    with pytest.raises(TypeError, match=r"writeParticles: fields has type list"):
        writeParticles(path, state, [state.masses])
    with pytest.raises(TypeError, match=r"writeParticles: path has type int"):
        writeParticles(3, state)
    with pytest.raises(TypeError, match=r"writeParticles: domain has type tuple"):
        writeParticles(path, state, domain=(0.0, 1.0))
    with pytest.raises(TypeError, match=r"writeParticles: time has type str"):
        writeParticles(path, state, time="0.1")
    with pytest.raises(TypeError, match=r"readParticles: path has type NoneType"):
        readParticles(None)


def test_bad_values(tmp_path):
    state = _state(3, 2, torch.float64, "cpu")
    path = tmp_path / "p.vtu"
    with pytest.raises(ValueError, match=r"writeParticles: fields has key\(s\) \['masses'\] "
                                         r"that clash with the ParticleState fields"):
        writeParticles(path, state, {"masses": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"writeParticles: no positions given"):
        writeParticles(path, None, {"masses": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"writeParticles: positions has shape \(3, 4\)"):
        writeParticles(path, None, {"positions": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match=r"writeParticles: positions has shape \(3, 2\) and "
                                         r"dtype int32"):
        writeParticles(path, None, {"positions": torch.zeros(3, 2, dtype=torch.int32)})
    with pytest.raises(ValueError, match=r"writeParticles: fields has key 'a/b'"):
        writeParticles(path, state, {"a/b": torch.zeros(3)})
    domain3 = DomainDescription(torch.zeros(3, dtype=torch.float64),
                                torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"writeParticles: domain has dim 3 but positions have "
                                         r"d = 2"):
        writeParticles(path, state, domain=domain3)
    assert not path.exists()  # nothing is written when the input is rejected


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"readParticles: path .*missing\.h5"):
        readParticles(tmp_path / "missing.h5")
    import h5py
    import meshio

    with h5py.File(tmp_path / "foreign.h5", "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    with pytest.raises(ValueError, match=r"readParticles: .*foreign\.h5.*accepted: HDF5 files "
                                         r"written by writeParticles"):
        readParticles(tmp_path / "foreign.h5")
    meshio.write_points_cells(str(tmp_path / "foreign.vtu"), np.zeros((2, 3)),
                              [("vertex", np.array([[0], [1]]))])
    with pytest.raises(ValueError, match=r"readParticles: .*foreign\.vtu.*accepted: VTU files "
                                         r"written by writeParticles"):
        readParticles(tmp_path / "foreign.vtu")


@pytest.mark.parametrize("package, suffix", [("meshio", ".vtu"), ("h5py", ".h5")])
def test_missing_optional_package(tmp_path, monkeypatch, package, suffix):
    """Without meshio / h5py the module still imports; the functions name the package."""
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail
    monkeypatch.delitem(sys.modules, "warpSPHCore.io")
    ioModule = importlib.import_module("warpSPHCore.io")
    state = _state(3, 2, torch.float64, "cpu")
    path = tmp_path / f"p{suffix}"
    with pytest.raises(ImportError, match=rf"writeParticles: .*'{package}'.*"
                                          rf"`pip install {package}`"):
        ioModule.writeParticles(path, state)
    path.write_bytes(b"")
    with pytest.raises(ImportError, match=rf"readParticles: .*`pip install {package}`"):
        ioModule.readParticles(path)


def test_docs_example_runs(tmp_path, monkeypatch):
    """docs/io.md's python blocks run, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert blocks, "docs/io.md has no python code block"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for k, block in enumerate(blocks):
        exec(compile(block, f"docs/io.md block {k}", "exec"), namespace)
    assert torch.equal(namespace["particlesH5"].positions, namespace["particles"].positions)
    assert torch.equal(namespace["fieldsVtu"]["stress"], namespace["stress"])
