"""The benchmarks are one package: every script imports as ``benchmarks.<name>``, its siblings through the
package, with no import cycle and no ``sys.path`` edit.

A bare ``import harness`` works only with ``benchmarks/`` itself on ``sys.path`` (a script run by its path),
and hides the edge from the cycle check below, which resolves imports against the package's module names.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from support.importgraph import find_cycle, import_graph, module_name

PACKAGE = "benchmarks"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
SOURCES = {module_name(path, ROOT, PACKAGE): path for path in sorted(ROOT.rglob("*.py"))}


def test_the_benchmarks_have_no_import_cycle() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert {"benchmarks.compat_stacks", "benchmarks.compat_bazel", "benchmarks.gpu.gpu_check"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def bare_sibling_imports(path: Path) -> list[str]:
    """The imports in ``path`` that name a module of the package without the package (``import harness``)."""
    siblings = {path.stem for path in ROOT.rglob("*.py")} | {path.name for path in ROOT.iterdir() if path.is_dir()}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in siblings]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [node.module] if node.module.split(".")[0] in siblings else []
    return found


_LIST_EDITS = {"insert", "append", "extend", "remove", "pop", "clear"}


def sys_path_edits(path: Path) -> list[int]:
    """The lines of ``path`` that change ``sys.path``: assign to it or to a slice of it, or call a method that
    edits a list."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LIST_EDITS:
            targets = [node.func.value]
        for target in targets:
            target = target.value if isinstance(target, ast.Subscript) else target
            if ast.unparse(target) == "sys.path":
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_each_benchmark_imports_as_a_module_of_the_package(module: str) -> None:
    assert bare_sibling_imports(SOURCES[module]) == []
    assert sys_path_edits(SOURCES[module]) == []
    importlib.import_module(module)


@pytest.mark.parametrize(
    ("text", "bare", "edits"),
    [
        ("import harness\nfrom torch_wheels import TORCH\n", ["harness", "torch_wheels"], []),
        ("from benchmarks.harness import timed\nfrom . import stacks\nimport os\n", [], []),
        ("import sys\nsys.path.insert(0, 'tests')\n", [], [2]),
        ("import sys\nsys.path[:0] = ['tests']\nsys.path += ['python']\n", [], [2, 3]),
        ("import sys\nprint(sys.path)\nentries = list(sys.path)\nsys.path.index('tests')\n", [], []),
    ],
)
def test_the_checks_see_bare_imports_and_path_edits(
    tmp_path: Path, text: str, bare: list[str], edits: list[int]
) -> None:
    source = tmp_path / "script.py"
    source.write_text(text, encoding="utf-8")
    assert bare_sibling_imports(source) == bare
    assert sys_path_edits(source) == edits
