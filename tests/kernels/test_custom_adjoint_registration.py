"""The custom adjoints of grad W and d(grad W)/dh (`kernels.evaluation`)
are registered on first need, not at import (``@wp.func_grad`` builds the whole
kernel-id dispatch of each of the twelve overloads, about a second of the import). Each check
runs in a fresh interpreter, so nothing registered by another test can hide a missed path:

* ``import warpSPHCore`` and a first result with the specialised kernels (search, Density)
  leave them unregistered;
* a launch of a generic kernel through the bridge registers them before its module is
  built, and the kernel's adjoint then has the finite H(0) of W13 at a coincident point;
* access to the Warp functions through the public package ``warpSPHCore.kernels``
  registers them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = textwrap.dedent("""
    import json, sys, torch, warp as wp
    wp.config.quiet = True
    import warpSPHCore
    from warpSPHCore import (DomainDescription, KernelFunctions, OperationProperties,
                             ParticleState, SupportScheme, WarpOperation,
                             radiusSearchCompactHashMap, warpOperation)
    from warpSPHCore.kernels import evaluation as ev
    out = {"import": ev.customAdjointsRegistered()}
    gen = torch.Generator().manual_seed(0)
    n = 40
    x = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 2 - 1
    x[1] = x[0]  # a coincident pair
    p = ParticleState(x, torch.full((n,), 0.6, dtype=torch.float64),
                      torch.full((n,), 0.05, dtype=torch.float64),
                      torch.zeros(n, dtype=torch.int32))
    dom = DomainDescription(torch.full((2,), -1.0, dtype=torch.float64),
                            torch.full((2,), 1.0, dtype=torch.float64), [True, True])
    adj = radiusSearchCompactHashMap(p, dom, mode=SupportScheme.Gather)
    with torch.no_grad():
        rho = warpOperation(p, OperationProperties(KernelFunctions.Wendland2,
                            operation=WarpOperation.Density), dom, adjacency=adj)
    out["search_density"] = ev.customAdjointsRegistered()
""")


def _run(body: str) -> dict:
    code = _PRELUDE + textwrap.dedent(body) + "\nprint('RESULT' + json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_registered_on_first_generic_launch_not_at_import():
    out = _run("""
        from warpSPHCore.autograd.specialize import setSpecialization
        setSpecialization(False)  # the generic Density kernel calls the kernel functions
        with torch.no_grad():
            warpOperation(p, OperationProperties(KernelFunctions.Wendland2,
                          operation=WarpOperation.Density), dom, adjacency=adj)
        out["generic"] = ev.customAdjointsRegistered()
    """)
    assert out == {"import": False, "search_density": False, "generic": True}


def test_public_package_access_registers():
    out = _run("""
        from warpSPHCore.kernels import sphKernelGradient_ij  # noqa: F401
        out["access"] = ev.customAdjointsRegistered()
    """)
    assert out == {"import": False, "search_density": False, "access": True}


def test_taped_divergence_at_a_coincident_pair_has_the_w13_adjoint():
    """Positions gradient of the Divergence (differentiated on Warp's tape, through the
    generated adjoint of grad W) at the coincident pair (0, 1): the custom adjoint gives the
    finite H(0) (Warp's automatic adjoint would give 0 there), so the gradient w.r.t. x_0
    matches central differences. Without the registration this fails."""
    out = _run("""
        from warpSPHCore.autograd.specialize import setSpecialization
        setSpecialization(False)
        v = torch.stack([torch.sin(3 * x[:, 0]), x[:, 1] ** 2], dim=1)
        props = OperationProperties(KernelFunctions.Wendland4,
                                    operation=WarpOperation.Divergence)
        w = torch.randn(n, generator=gen, dtype=torch.float64)

        def loss(pos):
            q = ParticleState(pos, p.supports, p.masses, p.kinds, rho)
            return (warpOperation(q, props, dom, queryValues=v, adjacency=adj) * w).sum()

        pos = x.clone().requires_grad_(True)
        loss(pos).backward()
        g = pos.grad[0].tolist()
        fd = []
        for a in range(2):
            e = torch.zeros_like(x)
            e[0, a] = 1e-6
            with torch.no_grad():
                fd.append(float((loss(x + e) - loss(x - e)) / 2e-6))
        out["g"], out["fd"] = g, fd
        out["after"] = ev.customAdjointsRegistered()
    """)
    assert out["after"] is True
    assert out["g"] == pytest.approx(out["fd"], rel=1e-6, abs=1e-8)
