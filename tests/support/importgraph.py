"""A package's import graph, read from its source (ast), every import counted: absolute and relative, at
module level, inside functions and under ``if TYPE_CHECKING:``, and a cycle in it (the helper's:
``tests/python/test_imports.py``; the benchmarks': ``tests/python/test_benchmark_imports.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "patched_wheels"
ROOT = Path(__file__).resolve().parents[2] / "python" / PACKAGE


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
        name: imported_modules(
            path.read_text(encoding="utf-8"), name, is_package=path.name == "__init__.py", known=known
        )
        for name, path in paths.items()
    }


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (itself only through a cycle)."""
    seen: set[str] = set()
    work = [start]
    while work:
        for target in graph[work.pop()] - seen:
            seen.add(target)
            work.append(target)
    return seen


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
