"""Interaction modes by name: the canonical `OperationDirection` names say which side is the
query and which the reference, the old "X to Y" names are aliases of the same members, the
kinds table of `interactionKinds` is what the Warp kernels do, and user-facing messages
(`OperationProperties` errors, compile notices) print names, not numbers."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest
import torch
import warp as wp

import warpSPHCore
from warpSPHCore import (
    DomainDescription,
    GradientScheme,
    Interaction,
    InteractionKinds,
    KernelFunctions,
    OperationDirection,
    OperationProperties,
    ParticleState,
    ParticleType,
    SupportScheme,
    WarpOperation,
    interactionKinds,
    warpOperation,
)
from warpSPHCore.enumTypes import interactionAliases
from warpSPHCore.operators._specialized import _SUPPORT_NAMES, Configuration
from warpSPHCore.util.compileNotice import specializedLabel

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: value -> (canonical name, old name)
NAMES = {
    0: ("Unmasked", "TrueAllToToAll"),
    1: ("FluidQueriesFluidReferences", "FluidToFluid"),
    2: ("BoundaryQueriesFluidReferences", "FluidToBoundary"),
    3: ("FluidQueriesBoundaryReferences", "BoundaryToFluid"),
    4: ("BoundaryQueriesBoundaryReferences", "BoundaryToBoundary"),
    5: ("GhostQueriesFluidReferences", "FluidToGhost"),
    6: ("FluidQueriesGhostReferences", "GhostToFluid"),
    7: ("GhostQueriesBoundaryReferences", "BoundaryToGhost"),
    8: ("BoundaryQueriesGhostReferences", "GhostToBoundary"),
    9: ("AllQueriesNonGhostReferences", "AllToAll"),
    10: ("GhostQueriesNonGhostReferences", "AllToGhost"),
    11: ("FluidQueriesNonGhostReferences", "AllToFluid"),
    12: ("BoundaryQueriesNonGhostReferences", "AllToBoundary"),
    13: ("NonGhostQueriesFluidReferences", "FluidToAll"),
    14: ("NonGhostQueriesBoundaryReferences", "BoundaryToAll"),
}
OLD_NAMES = [old for _, old in NAMES.values()]


def test_canonical_names_are_the_fifteen():
    assert [m.name for m in OperationDirection] == [NAMES[v][0] for v in range(15)]
    assert [int(m) for m in OperationDirection] == list(range(15))
    assert len(OperationDirection.__members__) == 30  # 15 members + 15 aliases


@pytest.mark.parametrize("value", range(15))
def test_old_name_is_an_alias(value):
    new, old = NAMES[value]
    member = getattr(OperationDirection, new)
    assert getattr(OperationDirection, old) is member
    assert OperationDirection[old] is member and OperationDirection(value) is member
    assert int(member) == value and member.name == new
    assert interactionAliases(member) == (old,) == interactionAliases(value)
    # an int and the old name still configure the same call
    assert OperationProperties(0, operationMode=value).operationMode is member
    assert OperationProperties(0, operationMode=getattr(OperationDirection, old)) == \
        OperationProperties(0, operationMode=member)


def test_interaction_is_operation_direction():
    assert Interaction is OperationDirection
    assert warpSPHCore.Interaction is OperationDirection
    assert Interaction.AllToFluid is Interaction.FluidQueriesNonGhostReferences
    for name in ("Interaction", "InteractionKinds", "interactionKinds"):
        assert name in warpSPHCore.__all__
    assert OperationProperties(0).operationMode is Interaction.AllQueriesNonGhostReferences


def test_interaction_kinds_table():
    """Spot checks of the table (the kernels check all of it below) and its argument rules."""
    every = frozenset(ParticleType)
    nonGhost = every - {ParticleType.Ghost}
    assert interactionKinds(Interaction.Unmasked) == (every, every)
    assert interactionKinds(9) == InteractionKinds(every, nonGhost)
    k = interactionKinds(Interaction.AllToFluid)
    assert k.queries == {ParticleType.Fluid} and k.references == nonGhost
    assert interactionKinds(Interaction.FluidToBoundary) == (
        {ParticleType.Boundary}, {ParticleType.Fluid})
    assert ParticleType.Boundary not in interactionKinds(
        Interaction.FluidQueriesFluidReferences).references
    for mode in Interaction:
        kinds = interactionKinds(mode)
        assert isinstance(kinds.queries, frozenset) and isinstance(kinds.references, frozenset)
        assert kinds.queries and kinds.references <= every
        assert all(isinstance(x, ParticleType) for x in kinds.queries | kinds.references)
    for bad in (15, -1, True, "AllToAll", 9.0):
        with pytest.raises(ValueError, match="AllQueriesNonGhostReferences \\(9\\)"):
            interactionKinds(bad)


def _mixedCloud():
    """Eight particles, two of each kind, every pair well inside every support."""
    n = 8
    angle = torch.arange(n, dtype=torch.float64) * (2 * torch.pi / n)
    positions = 0.05 * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    kinds = torch.tensor([int(ParticleType(k % 4)) for k in range(n)], dtype=torch.int32)
    ones = torch.ones(n, dtype=torch.float64)
    particles = ParticleState(positions, 0.5 * ones, ones, kinds, ones.clone())
    domain = DomainDescription(torch.full((2,), -1.0, dtype=torch.float64),
                               torch.full((2,), 1.0, dtype=torch.float64))
    return particles, domain


@pytest.mark.parametrize("mode", list(OperationDirection), ids=lambda m: m.name)
def test_kinds_table_matches_the_kernels(mode):
    """Each mode through the Interpolate and the Density kernels on a cloud holding every
    kind: row i, column k (the indicator field / masses of kind k) is positive exactly when
    the table admits kind_i as a query and k as a reference, and exactly zero otherwise."""
    particles, domain = _mixedCloud()
    kinds = particles.kinds.long()
    indicator = torch.nn.functional.one_hot(kinds, 4).to(torch.float64)  # [N, 4]
    expected = torch.zeros(8, 4, dtype=torch.bool)
    table = interactionKinds(mode)
    for i in range(8):
        for k in range(4):
            expected[i, k] = (ParticleType(int(kinds[i])) in table.queries
                              and ParticleType(k) in table.references)

    props = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Interpolate,
                                operationMode=mode)
    out = warpOperation(particles, props, domain, queryValues=indicator,
                        referenceValues=indicator)
    assert out.shape == (8, 4)
    assert torch.equal(out > 0, expected), out
    assert torch.all(out[~expected] == 0)

    density = OperationProperties(KernelFunctions.Wendland2, operation=WarpOperation.Density,
                                  operationMode=mode)
    for k in range(4):
        masses = indicator[:, k].contiguous()
        p = ParticleState(particles.positions, particles.supports, masses, particles.kinds,
                          particles.densities)
        rho = warpOperation(p, density, domain)
        assert torch.equal(rho > 0, expected[:, k]), (k, rho)


def test_operation_properties_error_lists_names():
    with pytest.raises(ValueError) as info:
        OperationProperties(KernelFunctions.Wendland2, operationMode=15)
    msg = str(info.value)
    assert "operationMode=15" in msg and "OperationDirection" in msg
    for value, (new, old) in NAMES.items():
        assert f"{new} ({value})" in msg
        assert not re.search(rf"\b{old}\b", msg), old
    assert not re.search(r"\w=\d", msg.split("accepted:", 1)[1])
    with pytest.raises(ValueError, match=r"Naive \(1\), Symmetric \(2\)"):
        OperationProperties(KernelFunctions.Wendland2, gradientMode=9)
    with pytest.raises(ValueError, match=r"Wendland2 \(0\)"):
        OperationProperties(99)
    assert "AllQueriesNonGhostReferences" in repr(OperationProperties(0))
    assert GradientScheme.Symmetric.name in repr(
        OperationProperties(0, gradientMode=GradientScheme.Symmetric))


@pytest.mark.parametrize("mode", list(OperationDirection), ids=lambda m: m.name)
def test_compile_notice_label_uses_names(mode):
    """The label of every specialised configuration names the kernel, the support scheme,
    the interaction mode and the schemes; no option appears as a bare number."""
    for support in _SUPPORT_NAMES:
        for extra in ({}, {"gradientScheme": 2}, {"laplacianScheme": 3, "renormalize": True}):
            cfg = Configuration(3, wp.float32, int(KernelFunctions.QuinticSpline), support,
                                int(mode), False, True, **extra)
            label = specializedLabel(f"warpSPHCore_gradient_{cfg.tag}_0123abcd")
            assert label.startswith("Gradient (QuinticSpline, "), label
            assert f"{mode.name}, " in label
            assert f"{SupportScheme(support).name} supports" in label
            if extra.get("gradientScheme"):
                assert "Symmetric gradient" in label
            if extra.get("laplacianScheme"):
                assert "Dot Laplacian, renormalized" in label
            assert label.endswith("grid, calibrated, 3D float32)"), label
            assert "kind mode" not in label and "scheme" not in label
            assert not re.search(r"(kernel|mode|gradient|Laplacian) \d", label), label
            assert not re.search(r"\(\d|, \d+,", label), label


def test_docs_page_lists_every_mode():
    """docs/particle-kinds.md holds the rendered table (tests/test_registry_docs.py checks
    that it is current) with every canonical and old name."""
    spec = importlib.util.spec_from_file_location(
        "registry_tables", ROOT / "scripts" / "docs" / "registry_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    page = (ROOT / "docs" / "particle-kinds.md").read_text()
    rendered = tables.render("interaction-modes")
    assert rendered in page
    for value, (new, old) in NAMES.items():
        assert f"| `{new}` | {value} |" in rendered and f"`{old}`" in rendered
    assert ("| `FluidQueriesNonGhostReferences` | 11 | Fluid | every kind but Ghost | "
            "`AllToFluid` |") in rendered
    assert not re.search(r"\u00a7\s*\d|issue \d", page)
    assert "particle-kinds.md" in (ROOT / "docs" / "operators.md").read_text()
    assert "particle-kinds.md" in (ROOT / "mkdocs.yml").read_text()
