"""Write particles and SPH fields for ParaView: a short time series of a Taylor-Green flow.

Particles on a periodic lattice are advected for a few frames by the Taylor-Green velocity
u = (sin(pi x) cos(pi y), -cos(pi x) sin(pi y)). Every frame stores the particle state
(positions, supports, masses, kinds, SPH density) and the fields velocity [N, 2], SPH
vorticity (Curl, [N, 1]) and SPH velocity gradient (Gradient, [N, 2, 2]).

Writer:
* `warpSPHCore.io.writeParticles` when that module (and meshio) is available: numbered VTU
  files step_0000.vtu, ... (ParaView groups them into a time series) that `readParticles`
  reads back exactly, which the script checks;
* otherwise (or with --legacy) a small numpy writer of legacy ASCII VTK POLYDATA files
  step_0000.vtk, ... (points, one vertex cell per particle, point data), read back by an
  equally small parser.

In ParaView: File -> Open the series, Apply, representation "Points" or "Point Gaussian",
colour by "vorticity" or "density".

Run: python examples/export_paraview.py [--out DIR] [--legacy]
"""

import argparse
import math
import pathlib
import tempfile

import numpy as np
import torch

from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    WarpOperation,
    radiusSearchCompactHashMap,
    warpOperation,
)

PI = math.pi


# --- a dependency-free legacy VTK writer/reader (the fallback) ---------------------------

def writeLegacyVtk(path, positions, fields, title="warpSPHCore particles"):
    """Legacy ASCII VTK POLYDATA: points padded to 3D, one vertex per particle, point data.

    fields: name -> array [N] or [N, 1] (SCALARS), [N, 2|3] (VECTORS, padded to 3 components) or any
    other trailing shape (flattened into a FIELD array). Floats are written with 17
    significant digits, so float64 values survive the round trip exactly.
    """
    pos = np.asarray(positions, dtype=np.float64)
    n, d = pos.shape
    points = np.zeros((n, 3))
    points[:, :d] = pos
    fmt = "%.17g"
    lines = ["# vtk DataFile Version 3.0", title, "ASCII", "DATASET POLYDATA",
             f"POINTS {n} double"]
    lines += [" ".join(fmt % c for c in p) for p in points]
    lines += [f"VERTICES {n} {2 * n}"] + [f"1 {i}" for i in range(n)]
    lines.append(f"POINT_DATA {n}")
    other = {}
    for name, value in fields.items():
        a = np.asarray(value)
        if a.ndim == 2 and a.shape[1] == 1:
            a = a[:, 0]                                         # [N, 1] -> a scalar
        typ = "int" if np.issubdtype(a.dtype, np.integer) else "double"
        f = "%d" if typ == "int" else fmt
        if a.ndim == 1:
            lines += [f"SCALARS {name} {typ} 1", "LOOKUP_TABLE default"]
            lines += [f % x for x in a]
        elif a.ndim == 2 and a.shape[1] in (2, 3) and typ == "double":
            v = np.zeros((n, 3))
            v[:, :a.shape[1]] = a
            lines.append(f"VECTORS {name} double")
            lines += [" ".join(fmt % c for c in row) for row in v]
        else:
            other[name] = a.reshape(n, -1)
    if other:
        lines.append(f"FIELD FieldData {len(other)}")
        for name, a in other.items():
            typ = "int" if np.issubdtype(a.dtype, np.integer) else "double"
            f = "%d" if typ == "int" else fmt
            lines.append(f"{name} {a.shape[1]} {n} {typ}")
            lines += [" ".join(f % c for c in row) for row in a]
    pathlib.Path(path).write_text("\n".join(lines) + "\n")


def readLegacyVtk(path):
    """Read back what `writeLegacyVtk` wrote: (points [N, 3], {name: array})."""
    tok = pathlib.Path(path).read_text().split("\n")[4:]        # skip the 4 header lines
    words = " ".join(tok).split()
    k, points, fields = 0, None, {}
    while k < len(words):
        w = words[k]
        if w == "POINTS":
            n = int(words[k + 1])
            points = np.array(words[k + 3:k + 3 + 3 * n], dtype=np.float64).reshape(n, 3)
            k += 3 + 3 * n
        elif w == "VERTICES":
            k += 3 + int(words[k + 2])
        elif w == "POINT_DATA":
            k += 2
        elif w == "SCALARS":
            name, typ = words[k + 1], words[k + 2]
            fields[name] = np.array(words[k + 6:k + 6 + n], dtype=np.float64).astype(
                np.int64 if typ == "int" else np.float64)
            k += 6 + n
        elif w == "VECTORS":
            fields[words[k + 1]] = np.array(words[k + 3:k + 3 + 3 * n],
                                            dtype=np.float64).reshape(n, 3)
            k += 3 + 3 * n
        elif w == "FIELD":
            count, k = int(words[k + 2]), k + 3
            for _ in range(count):
                name, nc, rows = words[k], int(words[k + 1]), int(words[k + 2])
                fields[name] = np.array(words[k + 4:k + 4 + nc * rows],
                                        dtype=np.float64).reshape(rows, nc)
                k += 4 + nc * rows
        else:
            raise ValueError(f"readLegacyVtk: unexpected token {w!r}")
    return points, fields


# --- the simulation ------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="output directory (default: a new temporary directory)")
    parser.add_argument("--n", type=int, default=24, help="particles per axis")
    parser.add_argument("--frames", type=int, default=4, help="frames to write")
    parser.add_argument("--legacy", action="store_true",
                        help="use the numpy legacy-VTK writer even if warpSPHCore.io exists")
    args = parser.parse_args()
    out = args.out if args.out is not None else pathlib.Path(tempfile.mkdtemp(prefix="warpsph-"))
    out.mkdir(parents=True, exist_ok=True)

    io = None
    if not args.legacy:
        try:
            import meshio  # noqa: F401  (warpSPHCore.io needs it for VTU)

            import warpSPHCore.io as io
        except ImportError as error:
            print(f"warpSPHCore.io not usable ({error}); using the legacy VTK writer")
    print(f"writer: {'warpSPHCore.io (VTU)' if io is not None else 'legacy ASCII VTK (numpy)'}")

    n = args.n
    dx = 2.0 / n
    g = (torch.arange(n, dtype=torch.float64) + 0.5) * dx - 1.0
    gx, gy = torch.meshgrid(g, g, indexing="xy")
    x = torch.stack([gx.flatten(), gy.flatten()], dim=1)
    N = x.shape[0]
    supports = torch.full((N,), 3.0 * dx, dtype=torch.float64)
    masses = torch.full((N,), dx * dx, dtype=torch.float64)
    kinds = torch.zeros(N, dtype=torch.int32)
    domain = DomainDescription(torch.tensor([-1.0, -1.0], dtype=torch.float64),
                               torch.tensor([1.0, 1.0], dtype=torch.float64),
                               periodic=[True, True])
    kernel = KernelFunctions.Wendland2
    dt = 0.5 * dx

    def velocity(p):
        return torch.stack([torch.sin(PI * p[:, 0]) * torch.cos(PI * p[:, 1]),
                            -torch.cos(PI * p[:, 0]) * torch.sin(PI * p[:, 1])], dim=1)

    written = []
    for frame in range(args.frames):
        adjacency = radiusSearchCompactHashMap(ParticleState(x, supports, masses, kinds), domain)
        rho = warpOperation(ParticleState(x, supports, masses, kinds),
                            OperationProperties(kernel, operation=WarpOperation.Density),
                            domain, adjacency=adjacency)
        particles = ParticleState(x, supports, masses, kinds, densities=rho)
        u = velocity(x)
        diff = dict(gradientMode=GradientScheme.Difference)
        vorticity = warpOperation(particles, OperationProperties(
            kernel, operation=WarpOperation.Curl, **diff), domain, queryValues=u,
            adjacency=adjacency)                                            # [N, 1]
        gradU = warpOperation(particles, OperationProperties(
            kernel, operation=WarpOperation.Gradient, **diff), domain, queryValues=u,
            adjacency=adjacency)                                            # [N, 2, 2]
        exact = 2 * PI * torch.sin(PI * x[:, 0]) * torch.sin(PI * x[:, 1])
        vortErr = (vorticity[:, 0] - exact).abs().max().item() / (2 * PI)
        fields = {"velocity": u, "vorticity": vorticity, "velocityGradient": gradU}
        t = frame * dt

        if io is not None:
            path = io.writeParticles(out / f"step_{frame:04d}.vtu", particles, fields,
                                     domain=domain, time=t)
            back, backFields, meta = io.readParticles(path)
            assert torch.equal(back.positions, x) and torch.equal(back.densities, rho)
            assert torch.equal(backFields["velocityGradient"], gradU)
            assert meta["time"] == t
        else:
            path = out / f"step_{frame:04d}.vtk"
            writeLegacyVtk(path, x, {"supports": supports, "masses": masses, "kinds": kinds,
                                     "density": rho, **fields})
            points, backFields = readLegacyVtk(path)
            assert np.array_equal(points[:, :2], x.numpy())
            assert np.array_equal(backFields["density"], rho.numpy())
            assert np.array_equal(backFields["velocityGradient"], gradU.numpy().reshape(N, 4))
        written.append(path)
        print(f"frame {frame}: t = {t:.3f}, mean density {rho.mean().item():.5f}, vorticity "
              f"rel. error {vortErr:.3e}, wrote {path.name} ({path.stat().st_size // 1024} KiB)")
        assert vortErr < 0.08

        # advance: midpoint rule, wrap into the periodic box
        xm = x + 0.5 * dt * velocity(x)
        x = torch.remainder(x + dt * velocity(xm) + 1.0, 2.0) - 1.0

    print(f"{len(written)} files in {out}")
    print("OK")


if __name__ == "__main__":
    main()
