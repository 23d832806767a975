"""The lock formats' registry and the lock stage's shape: each format read by its reader into the model,
readers that know nothing of planning or writing, and the Bazel attributes and CLI flags the registry names."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from patched_wheels.cli import build_parser, lock_input
from patched_wheels.hub.documents import LOCK_FORMATS as HUB_LOCK_FORMATS
from patched_wheels.lock.formats.registry import LOCK_FORMATS
from support.importgraph import PACKAGE, ROOT, import_graph, reached
from support.starlark import PRIVATE, starlark_constants

# From the registry, so a format added there is held to the same rule without editing this test.
READERS = tuple(entry.reader.partition(":")[0].removeprefix(f"{PACKAGE}.") for entry in LOCK_FORMATS)
WRITERS = tuple(entry.writer.partition(":")[0].removeprefix(f"{PACKAGE}.") for entry in LOCK_FORMATS if entry.writer)
LATER = (
    "lock.plan",
    "lock.apply",
    "index.simple",
    "lock.formats.pipwriter",
    *WRITERS,
    "lock.resolve",
    "hub.documents",
    "hub.plan",
    "hub.build",
)


def test_readers_depend_on_the_lock_model_only_and_resolve_not_on_lock() -> None:
    graph = import_graph(ROOT, PACKAGE)
    for reader in READERS:
        later = sorted(reached(graph, f"{PACKAGE}.{reader}") & {f"{PACKAGE}.{name}" for name in LATER})
        assert not later, f"the reader {reader} imports {later}"
    assert f"{PACKAGE}.lock.apply" not in reached(graph, f"{PACKAGE}.lock.resolve"), "resolve comes before lock"


def test_every_format_names_a_reader_writer_flag_and_attribute_that_exist() -> None:
    for entry in LOCK_FORMATS:
        module, _, function = entry.reader.partition(":")
        reader = getattr(importlib.import_module(module), function)
        assert list(inspect.signature(reader).parameters)[:2] == ["path", "environment"], entry.reader
        assert entry.writer is None or (callable(entry.write()) and entry.out_flag)
        args = build_parser("lock").parse_args(["lock", entry.flag, "in", "--index", "i", "--out", "o"])
        assert lock_input(args) == (Path("in"), entry.name)
    index_attrs = starlark_constants(PRIVATE / "hub.bzl")["INDEX_ATTRS"]
    assert isinstance(index_attrs, ast.Dict)
    declared = [key.value for key in index_attrs.keys if isinstance(key, ast.Constant)]
    assert [name for name in declared if name in HUB_LOCK_FORMATS] == [e.attribute for e in LOCK_FORMATS]
    assert HUB_LOCK_FORMATS == {e.attribute: e.name for e in LOCK_FORMATS}
