"""The values a .bzl file assigns, read by Python, for tests that hold Starlark and Python equal."""

from __future__ import annotations

import ast
from pathlib import Path

PRIVATE = Path(__file__).resolve().parents[2] / "python" / "private"


def starlark_constants(path: Path) -> dict[str, ast.expr]:
    """The top-level assignments of a .bzl file, parsed by Python's own parser (Starlark's syntax is a
    subset of Python's), so the test reads the values Bazel loads, not a regex's guess at them."""
    module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.targets[0].id: node.value
        for node in module.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
