"""The package's layers (docs/design.md, "Layout"): the import-linter contract of pyproject.toml
holds (`make lint` runs the same check), and the import graph, deferred imports included,
has no cycle, so no import needs deferring into a function to dodge one."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")


def lintImports(config: pathlib.Path) -> subprocess.CompletedProcess:
    """`lint-imports` (import-linter's command, as `make lint` runs it) on `config`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([str(LINT_IMPORTS), str(config), "--no-cache"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        for m in sorted(edges):
            if m not in index:
                visit(m)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_layers_contract_holds():
    r = lintImports(ROOT / "pyproject.toml")
    assert r.returncode == 0 and "1 kept, 0 broken" in r.stdout, r.stdout + r.stderr


def test_layers_contract_can_fail(tmp_path):
    """The same check with the layers upside down must report broken contracts."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("layers = [", text.index("[tool.importlinter]"))
    end = text.index("]", start)
    layers = [ln.strip().rstrip(",") for ln in text[start:end].splitlines()[1:] if ln.strip()]
    flipped = text[:start] + "layers = [\n" + "".join(
        f"    {ln},\n" for ln in reversed(layers)) + text[end:]
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text(flipped)
    r = lintImports(cfg)
    assert r.returncode != 0 and "BROKEN" in r.stdout, r.stdout + r.stderr


def test_import_graph_is_acyclic():
    graph = grimp.build_graph("warpSPHCore", cache_dir=None)
    assert len(graph.modules) > 50
    assert _cycles(graph) == []


def _layers() -> list[list[str]]:
    """The contract's layers, top first, each as its list of module names."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layers = cfg["tool"]["importlinter"]["contracts"][0]["layers"]
    return [[m.strip() for m in layer.split(":")] for layer in layers]


def _lazyImports() -> list[tuple[str, str]]:
    """(declaring module, target) of every `util.lazyModule.LazyModule` in the package."""
    import importlib
    import pkgutil

    import warpSPHCore
    from warpSPHCore.util.lazyModule import LazyModule

    out = []
    for info in pkgutil.walk_packages(warpSPHCore.__path__, "warpSPHCore."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, LazyModule):
                out.append((info.name, value._name))
    return out


def test_lazy_imports_respect_the_layers():
    """An import by name (`util.lazyModule`) is invisible to import-linter: each proxy's
    target must be in its declaring module's package or a lower layer, and the graph with
    these imports added stays acyclic."""
    layers = _layers()

    def where(module):
        for index, layer in enumerate(layers):
            for top in layer:
                if module == top or module.startswith(top + "."):
                    return index, top
        raise AssertionError(f"{module} is in no layer")

    lazy = _lazyImports()
    assert {"warpSPHCore.corrections._crkKernels", "warpSPHCore.operators.densityHVP"} <= {
        t for _, t in lazy}
    graph = grimp.build_graph("warpSPHCore", cache_dir=None)
    for declarer, target in lazy:
        (li, top), (lt, topT) = where(declarer), where(target)
        assert lt > li or top == topT, f"{declarer} names {target}, a higher layer"
        graph.add_import(importer=declarer, imported=target)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    """The checker itself: a two-module cycle is reported."""
    graph = grimp.ImportGraph()
    for m in ("pkg", "pkg.a", "pkg.b"):
        graph.add_module(m)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
