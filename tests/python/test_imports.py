"""The package's structure: no import cycle between its modules, no module too long to read.

The import graph is read from the source (ast), every import counted: absolute and relative, at module
level, inside functions and under ``if TYPE_CHECKING:`` -- a cycle that only typing or a late import
hides is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "patched_wheels"
ROOT = Path(__file__).resolve().parents[2] / "python" / PACKAGE
MAX_LINES = 500


def module_name(path: Path, root: Path, package: str) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (the text of ``module``) imports, however it spells it.

    ``from X import y`` counts ``X.y`` when that is a module, else ``X``; a relative import is
    resolved against ``module``'s package (``module`` itself when it is a package's ``__init__``).
    """
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - (node.level - 1)], *([node.module] if node.module else [])])
            for alias in node.names:
                # "from X import y": the module X.y when there is one, else a name defined by X.
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    targets = set()
    for name in found:
        # "import a.b.c" names a.b.c; its parents run too, but only a cycle through their own imports
        # counts, and those are edges of their own.
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.add(name)
    return targets


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    paths = {module_name(path, root, package): path for path in sorted(root.rglob("*.py"))}
    known = set(paths)
    return {
        name: imported_modules(path.read_text(encoding="utf-8"), name, is_package=path.name == "__init__.py", known=known)
        for name, path in paths.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search, in name order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 20 and f"{PACKAGE}.wheelfile.writer" in graph  # the walk saw the whole tree
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_module_is_over_500_lines():
    lengths = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines()) for path in ROOT.rglob("*.py")}
    too_long = {name: lines for name, lines in lengths.items() if lines > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        # relative, under TYPE_CHECKING, and in a function: each closes a cycle
        ({"a.py": "from . import b\n", "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n"}, ["pkg.a", "pkg.b", "pkg.a"]),
        ({"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg import c\n", "c.py": "from .a import x\n"}, ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]),
        ({"sub/__init__.py": "", "sub/x.py": "from .. import a\n", "a.py": "from pkg.sub.x import y\n"}, ["pkg.a", "pkg.sub.x", "pkg.a"]),
        ({"a.py": "from pkg import b\n", "b.py": "import os\nfrom pkg.c import z\n", "c.py": ""}, None),
        ({"__init__.py": "from pkg.a import x\n", "a.py": "from pkg import c\n", "c.py": ""}, None),  # a package re-exporting
        ({"__init__.py": "from pkg.a import x\n", "a.py": "from pkg import x\n"}, ["pkg", "pkg.a", "pkg"]),  # ... and a real cycle
    ],
)
def test_cycles_are_found_however_the_import_is_spelled(tmp_path, files, cycle):
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    assert find_cycle(import_graph(root, "pkg")) == cycle
