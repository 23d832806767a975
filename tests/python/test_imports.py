"""The package's structure: stages that import only earlier stages, no import cycle, no module too long to read.

The import graph is read from the source (ast), every import counted: absolute and relative, at module
level, inside functions and under ``if TYPE_CHECKING:`` -- a cycle that only typing or a late import
hides is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.importgraph import PACKAGE, ROOT, find_cycle, import_graph, module_name

STAGES: tuple[tuple[str, ...], ...] = (
    ("base", "errors", "phrasing", ""),  # shared infrastructure; "" is the package's own __init__
    ("wheelfile",),
    ("elf",),
    ("index",),
    ("loading",),
    ("patch",),
    ("lock",),
    ("layouttest",),
    ("hub",),
    ("cli", "__main__"),
)
"""The helper's stages in the order data flows, each a subpackage (or top-level module) of ``patched_wheels``:
a module may import its own stage's modules and those of earlier stages, never a later stage's."""


def stage_of(module: str) -> int:
    """The index in :data:`STAGES` of ``module`` (dotted, ``patched_wheels...``); a ValueError for a
    module in no stage, so a new top-level module or subpackage must be placed."""
    top = module.split(".")[1] if "." in module else ""
    for index, stage in enumerate(STAGES):
        if top in stage:
            return index
    raise ValueError(f"{module}: in no stage of STAGES; add its subpackage there")


def stage_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a later stage, as ``importer -> imported (stage -> stage)``."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            own, theirs = stage_of(module), stage_of(target)
            if theirs > own:
                found.append(f"{module} -> {target} ({'/'.join(STAGES[own])} -> {'/'.join(STAGES[theirs])})")
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 20 and f"{PACKAGE}.wheelfile.writer" in graph  # the walk saw the whole tree
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_module_imports_a_later_stage():
    graph = import_graph(ROOT, PACKAGE)
    assert stage_violations(graph) == []


def test_every_folder_of_the_package_is_a_stage():
    folders = {path.name for path in ROOT.iterdir() if path.is_dir() and path.name != "__pycache__"}
    modules = {path.stem for path in ROOT.glob("*.py")} - {"__init__"}
    assert folders | modules <= {name for stage in STAGES for name in stage}, (
        "place each new folder or top-level module in STAGES"
    )


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """The package ``pkg`` under ``tmp_path`` holding ``files`` (path -> text; its ``__init__.py`` empty unless given)."""
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("files", "violations"),
    [
        (
            {
                "elf/__init__.py": "",
                "elf/read.py": "from pkg.patch import rewrite\n",
                "patch/__init__.py": "",
                "patch/rewrite.py": "",
            },
            ["pkg.elf.read -> pkg.patch.rewrite (elf -> patch)"],
        ),
        (
            {
                "index/__init__.py": "",
                "index/simple.py": "def f():\n    from pkg.loading import probe\n",
                "loading/__init__.py": "",
                "loading/probe.py": "",
            },
            ["pkg.index.simple -> pkg.loading.probe (index -> loading)"],
        ),
        (
            {"errors.py": "from pkg.cli import main\n", "cli/__init__.py": ""},
            ["pkg.errors -> pkg.cli (base/errors/phrasing/ -> cli/__main__)"],
        ),
        (
            {
                "patch/__init__.py": "",
                "patch/rpath.py": "from pkg.elf import read\nfrom pkg import errors\n",
                "elf/__init__.py": "",
                "elf/read.py": "",
                "errors.py": "",
            },
            [],
        ),
        (
            {
                "lock/__init__.py": "",
                "lock/plan.py": "",
                "lock/formats/__init__.py": "",
                "lock/formats/uv.py": "from pkg.lock import plan\n",
            },
            [],
        ),
    ],
)
def test_an_import_of_a_later_stage_is_found(tmp_path, files, violations):
    assert stage_violations(import_graph(_package(tmp_path, files), "pkg")) == violations


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        # relative, under TYPE_CHECKING, and in a function: each closes a cycle
        (
            {
                "a.py": "from . import b\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n",
            },
            ["pkg.a", "pkg.b", "pkg.a"],
        ),
        (
            {"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import c\n", "c.py": "from .a import x\n"},
            ["pkg.a", "pkg.b", "pkg.c", "pkg.a"],
        ),
        (
            {"sub/__init__.py": "", "sub/x.py": "from .. import a\n", "a.py": "from pkg.sub.x import y\n"},
            ["pkg.a", "pkg.sub.x", "pkg.a"],
        ),
        ({"a.py": "from pkg import b\n", "b.py": "import os\nfrom pkg.c import z\n", "c.py": ""}, None),
        (
            {"__init__.py": "from pkg.a import x\n", "a.py": "from pkg import c\n", "c.py": ""},
            None,
        ),  # a package re-exporting
        (
            {"__init__.py": "from pkg.a import x\n", "a.py": "from pkg import x\n"},
            ["pkg", "pkg.a", "pkg"],
        ),  # ... and a real cycle
    ],
)
def test_cycles_are_found_however_the_import_is_spelled(tmp_path, files, cycle):
    assert find_cycle(import_graph(_package(tmp_path, files), "pkg")) == cycle


def unresolved_imports(root: Path, package: str) -> list[str]:
    """Every ``import package.X`` / ``from package.X import y`` (inside functions too) whose module does not
    exist under ``root``, or whose ``y`` is neither a module nor a name ``package.X`` defines at its top level."""
    paths = {module_name(path, root, package): path for path in sorted(root.rglob("*.py"))}
    defined: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            else:
                names.update(
                    target.id
                    for target in ast.walk(node)
                    if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)
                )
        defined[name] = names
    problems = []
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                problems += [
                    f"{name}: import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith(package + ".") and alias.name not in paths
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == package:
                if node.module not in paths:
                    problems.append(f"{name}: from {node.module} import ...")
                    continue
                problems += [
                    f"{name}: from {node.module} import {alias.name}"
                    for alias in node.names
                    if f"{node.module}.{alias.name}" not in paths and alias.name not in defined[node.module]
                ]
    return problems


def test_every_import_of_the_package_resolves():
    """A module moved or renamed leaves no import behind, not even one inside a function that no test reaches."""
    assert unresolved_imports(ROOT, PACKAGE) == []


def test_an_unresolved_import_is_found(tmp_path):
    root = _package(
        tmp_path,
        {
            "a.py": "def f():\n    from pkg.gone import x\n",
            "b.py": "from pkg.a import g\n",
            "c.py": "from pkg.a import f\n",
        },
    )
    assert unresolved_imports(root, "pkg") == ["pkg.a: from pkg.gone import ...", "pkg.b: from pkg.a import g"]
