"""The values a .bzl file assigns, read by Python, for tests that hold Starlark and Python equal."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = ROOT / "python" / "private"


def starlark_constants(path: Path) -> dict[str, ast.expr]:
    """The top-level assignments of a .bzl file, parsed by Python's own parser (Starlark's syntax is a
    subset of Python's), so the test reads the values Bazel loads, not a regex's guess at them."""
    module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {
        node.targets[0].id: node.value
        for node in module.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }


def load_generator() -> Any:
    """tools/gen_reference.py as a module: its ``Loader`` evaluates .bzl files as Bazel loads them."""
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def index_attribute_defaults() -> dict[str, object]:
    """Every attribute of hub.bzl's ``INDEX_ATTRS`` -> the value Bazel gives it when the user leaves it out (an
    unset label: None), evaluated, not parsed."""
    generator = load_generator()
    declared = generator.Loader().globals(PRIVATE / "hub.bzl")["INDEX_ATTRS"]
    return {name: generator.attribute_default(attribute) for name, attribute in declared.items()}


class Recorder:
    """A stand-in for a rule or macro another file defines: each call's keyword arguments, in order."""

    def __init__(self, **kwargs: Any) -> None:
        self.definition = kwargs
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


def evaluate_bzl(path: Path, external: dict[str, Any], **builtins: Any) -> dict[str, Any]:
    """The globals of the .bzl file ``path`` executed by Python (Starlark's syntax and these files' semantics are a
    subset of Python's), so a test can call its rules' implementations and macros with stand-ins: ``external``,
    what its ``load()`` statements bind (by exported name); ``builtins``, Bazel's (``native``, ``attr``, ...).
    ``rule()`` gives a :class:`Recorder` whose ``definition`` holds the implementation and attributes."""

    def load(_label: str, *names: str) -> None:
        for name in names:
            namespace[name] = external[name]

    namespace: dict[str, Any] = {"load": load, "Label": str, "rule": Recorder, "type": _starlark_type, **builtins}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return namespace


def _starlark_type(value: object) -> str:
    """Starlark's ``type()``: the name of a value's kind (``"string"``), which a macro compares with."""
    kinds = {
        str: "string",
        bool: "bool",
        int: "int",
        list: "list",
        dict: "dict",
        tuple: "tuple",
        type(None): "NoneType",
    }
    return kinds.get(type(value), type(value).__name__)
