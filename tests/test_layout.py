"""Code layout rules: no import circle between modules or between rooms, argparse only in the CLI,
no product module importing test material, no CLI command importing another.

The import graph is read from the source of the **installed layout**: pyproject's ``package-dir``
maps repository folders to package names (``adapters/`` is ``blackbox_audit.adapters``), so an
``import blackbox_audit.adapters.x`` is an edge into ``adapters/x.py`` here, where generic
import-graph tools see a missing module. Every ``import`` counts, deferred ones inside functions
included (a deferred import only hides a circle); between rooms, so do ``"blackbox_audit.mod:function"``
strings (the target-kind registry loads its loaders by name). A **room** is a top-level module or
a subpackage of ``blackbox_audit`` (``cache``, ``adapters``, ``methods``, ...): rooms are the
layers a newcomer reads, so they must form no circle either. Strongly connected components are
found with scipy; a component of more than one node is a circle.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "blackbox_audit"
#: ``"blackbox_audit.mod.sub:function"``: a module named in a string, loaded with importlib
NAMED_IN_STRING = re.compile(r"^(blackbox_audit(?:\.\w+)+):\w+$")


def package_dirs() -> dict[str, str]:
    """Repository folder -> installed package name, from pyproject's ``package-dir``."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return {folder: name for name, folder in tool["package-dir"].items()}


@cache
def modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the package."""
    out: dict[str, Path] = {}
    dirs = package_dirs()
    for folder, name in dirs.items():
        nested = [f for f in dirs if f != folder and (ROOT / f).is_relative_to(ROOT / folder)]
        for path in (ROOT / folder).rglob("*.py"):
            if any(path.is_relative_to(ROOT / f) for f in nested):
                continue  # a folder mapped to a package of its own
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([name, *parts])] = path
    return out


def _nearest(target: str, known: set[str]) -> str | None:
    while target and target not in known:  # `import a.b.c` of a package path: nearest known module
        target = target.rpartition(".")[0]
    return target or None


@cache
def imports_of(name: str, *, named: bool = False) -> frozenset[str]:
    """Modules of the package that ``name`` imports anywhere in its source (``named``: or names in a
    ``"module:function"`` string, a lookup at call time that layers must respect but that is no
    import-time circle)."""
    mods = modules()
    known = set(mods)
    path = mods[name]
    base = name if path.name == "__init__.py" else name.rpartition(".")[0]
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
        elif (
            named
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and NAMED_IN_STRING.match(node.value)
        ):
            targets = [NAMED_IN_STRING.match(node.value).group(1)]
        else:
            continue
        for t in targets:
            t = _nearest(t, known)
            if t and t != name:
                found.add(t)
    return frozenset(found)


def external_imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (``import argparse`` -> ``argparse``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def room(module: str) -> str:
    """``blackbox_audit.methods.ptdi`` -> ``methods``; ``blackbox_audit.cache`` -> ``cache``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def circles(nodes: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    index = {n: i for i, n in enumerate(nodes)}
    if not edges:
        return []
    rows, cols = zip(*((index[a], index[b]) for a, b in edges), strict=True)
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(nodes)))
    n, labels = connected_components(graph, directed=True, connection="strong")
    return [sorted(nodes[i] for i in np.flatnonzero(labels == c)) for c in range(n) if (labels == c).sum() > 1]


def test_the_installed_layout_is_read() -> None:
    """The mapping is read, not assumed: adapters/ and fixtures/ are subpackages of blackbox_audit."""
    mods = modules()
    assert "blackbox_audit.adapters.base" in mods and "blackbox_audit.fixtures.records" in mods
    assert "blackbox_audit.adapters.registry" in imports_of("blackbox_audit.adapters")
    assert not any(m.startswith("adapters.") or m.startswith("fixtures.") for m in mods)


def test_no_import_circles_between_modules() -> None:
    names = sorted(modules())
    edges = {(a, b) for a in names for b in imports_of(a)}
    assert not circles(names, edges), f"import circles: {circles(names, edges)}"


def test_no_import_circles_between_rooms() -> None:
    """Rooms (top-level modules and subpackages) are layers: each edge shows one import behind it."""
    names = sorted(modules())
    witness: dict[tuple[str, str], str] = {}
    for a in names:
        for b in imports_of(a, named=True):
            if room(a) != room(b):
                witness.setdefault((room(a), room(b)), f"{a} -> {b}")
    rooms = sorted({room(n) for n in names})
    found = circles(rooms, set(witness))
    detail = [[witness[e] for e in witness if e[0] in c and e[1] in c] for c in found]
    assert not found, f"circles between rooms: {found}; imports behind them: {detail}"


def test_argparse_only_under_cli() -> None:
    """Option parsing lives in ``blackbox_audit.cli``; the engine, methods and adapters take typed values."""
    bad = sorted(
        n for n, p in modules().items() if "argparse" in external_imports(p) and not n.startswith(f"{PACKAGE}.cli")
    )
    assert not bad, f"argparse imported outside blackbox_audit.cli: {bad}"


def test_no_product_module_imports_fixtures() -> None:
    """``fixtures/`` is test material; product code (the emulator, canaries, corpora) lives in ``sim``."""
    fixtures = f"{PACKAGE}.fixtures"
    bad = {
        n: sorted(m for m in imports_of(n) if m == fixtures or m.startswith(fixtures + "."))
        for n in modules()
        if not (n == fixtures or n.startswith(fixtures + "."))
    }
    assert not {k: v for k, v in bad.items() if v}, {k: v for k, v in bad.items() if v}


def test_no_cli_command_imports_another() -> None:
    """Command modules share only ``cli.common`` and ``cli.options`` (and the package's non-CLI modules)."""
    shared = {f"{PACKAGE}.cli", f"{PACKAGE}.cli.common", f"{PACKAGE}.cli.options"}
    commands = {n for n in modules() if n.startswith(f"{PACKAGE}.cli.") and n not in shared}
    bad = {n: sorted(imports_of(n) & commands) for n in commands}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_every_package_folder_is_installed() -> None:
    """A sub-package missing from pyproject's ``packages`` works in an editable checkout and
    vanishes from a built wheel; list every folder that has an ``__init__.py``."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    on_disk = {n for n, p in modules().items() if p.name == "__init__.py"}
    assert on_disk - listed == set(), f"add these to [tool.setuptools] packages: {sorted(on_disk - listed)}"


def test_declared_local_dependencies_are_used() -> None:
    """Every package of the ``local`` extra is imported somewhere (or named as a deliberate indirect one)."""
    from packaging.requirements import Requirement

    # transformers reads GGUF files through `gguf`; `tokenizers` backs transformers' fast tokenizers.
    indirect = {"gguf", "tokenizers"}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {Requirement(r).name.replace("-", "_") for r in extra["local"]} - indirect
    sources = "\n".join(p.read_text(encoding="utf-8") for p in modules().values())
    sources += "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "bench").glob("*.py"))
    used = {n for n in names if f"import {n}" in sources or f"from {n}" in sources or f'find_spec("{n}")' in sources}
    unused = names - used
    assert unused == set(), f"declared in [local] but never imported: {sorted(unused)}"


def test_planning_imports_neither_methods_nor_adapters() -> None:
    """Dry-run costing (``blackbox_audit.planning``) sits below the methods and the adapters: both
    import it, so it importing either (deferred imports included) would close a circle."""
    below = {n for n in modules() if n == "blackbox_audit.planning" or n.startswith("blackbox_audit.planning.")}
    above = ("blackbox_audit.methods", "blackbox_audit.adapters")
    bad = {n: sorted(t for t in imports_of(n, named=True) if t.startswith(above)) for n in below}
    assert below and not {k: v for k, v in bad.items() if v}, bad


def test_di_does_not_reach_into_sim() -> None:
    """Dataset inference is product code; what it shares with the simulation package (the tiny tokenizer
    of models trained from scratch) lives below both, in ``blackbox_audit.training``."""
    di = {n for n in modules() if n.startswith("blackbox_audit.di.") or n == "blackbox_audit.di"}
    bad = {n: sorted(t for t in imports_of(n, named=True) if t.startswith("blackbox_audit.sim")) for n in di}
    assert di and not {k: v for k, v in bad.items() if v}, bad
