"""Code layout rules (issue 11): no import circle between modules, no CLI command importing another.

The import graph is read from the source (every ``import``, deferred ones inside functions
included, since a deferred import only hides a circle) and its strongly connected components
are found with scipy; a component of more than one module is a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
#: repository folder -> installed package name (pyproject's package-dir)
PACKAGES = {
    "blackbox_audit": "blackbox_audit",
    "adapters": "blackbox_audit.adapters",
    "fixtures": "blackbox_audit.fixtures",
}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for folder, name in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([name, *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its source."""
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                parent = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                mod = f"{parent}.{mod}" if mod else parent
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a package path: nearest known module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def test_no_import_circles() -> None:
    mods = _modules()
    names = sorted(mods)
    index = {n: i for i, n in enumerate(names)}
    edges = [(index[a], index[b]) for a in names for b in _imports(a, mods[a], set(mods))]
    rows, cols = zip(*edges, strict=True)
    graph = csr_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    n, labels = connected_components(graph, directed=True, connection="strong")
    circles = [sorted(names[i] for i in np.flatnonzero(labels == c)) for c in range(n) if (labels == c).sum() > 1]
    assert not circles, f"import circles: {circles}"


def test_no_cli_command_imports_another() -> None:
    """Command modules share only ``cli.common`` and ``cli.options`` (and the package's non-CLI modules)."""
    mods = _modules()
    shared = {"blackbox_audit.cli.common", "blackbox_audit.cli.options"}
    commands = {n for n in mods if n.startswith("blackbox_audit.cli.") and n not in shared}
    bad = {n: sorted(_imports(n, mods[n], set(mods)) & commands) for n in commands}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_every_package_folder_is_installed() -> None:
    """A sub-package missing from pyproject's ``packages`` works in an editable checkout and
    vanishes from a built wheel; list every folder that has an ``__init__.py``."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    on_disk = set()
    for folder, name in PACKAGES.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([name, *rel.parts]))
    assert on_disk - listed == set(), f"add these to [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_declared_local_dependencies_are_used() -> None:
    """Every package of the ``local`` extra is imported somewhere (or named as a deliberate indirect one)."""
    import tomllib

    from packaging.requirements import Requirement

    # transformers reads GGUF files through `gguf`; `tokenizers` backs transformers' fast tokenizers.
    indirect = {"gguf", "tokenizers"}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {Requirement(r).name.replace("-", "_") for r in extra["local"]} - indirect
    sources = "\n".join(p.read_text(encoding="utf-8") for p in _modules().values())
    sources += "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "bench").glob("*.py"))
    used = {n for n in names if f"import {n}" in sources or f"from {n}" in sources or f'find_spec("{n}")' in sources}
    unused = names - used
    assert unused == set(), f"declared in [local] but never imported: {sorted(unused)}"


def test_planning_imports_neither_methods_nor_adapters() -> None:
    """Dry-run costing (``blackbox_audit.planning``) sits below the methods and the adapters: both
    import it, so it importing either (deferred imports included) would close a circle."""
    mods = _modules()
    below = {n for n in mods if n == "blackbox_audit.planning" or n.startswith("blackbox_audit.planning.")}
    above = ("blackbox_audit.methods", "blackbox_audit.adapters")
    bad = {n: sorted(t for t in _imports(n, mods[n], set(mods)) if t.startswith(above)) for n in below}
    assert below and not {k: v for k, v in bad.items() if v}, bad
