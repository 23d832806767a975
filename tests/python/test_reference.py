"""docs/reference.md is generated from the .bzl files (tools/gen_reference.py): it must be current and
name every attribute Bazel sees, each with a doc."""

from __future__ import annotations

import ast
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.starlark import load_generator

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gen_reference.py"


gen_reference = load_generator()


def test_reference_is_current() -> None:
    expected = gen_reference.render()
    current = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert current == expected, "docs/reference.md is stale: run python3 tools/gen_reference.py"


def declared_keys(text: str, assignment: str) -> list[str]:
    """The string keys of a top-level `NAME = {...}` dict literal, read by Python's parser, not evaluated:
    a second, independent view of what the generator must list."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == assignment for t in node.targets):
            assert isinstance(node.value, ast.Dict)
            return [key.value for key in node.value.keys if isinstance(key, ast.Constant)]
    raise AssertionError(f"{assignment} not found")


def test_every_declared_attribute_is_documented() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \|(.*)$", reference, flags=re.M))
    schema = declared_keys((ROOT / "python/private/specs.bzl").read_text(), "PATCHED_WHEEL_SCHEMA")
    index = declared_keys((ROOT / "python/private/hub.bzl").read_text(), "INDEX_ATTRS")
    assert len(schema) > 15 and len(index) > 5
    for name in schema + index + ["name", "hub", "wheels"]:
        assert name in rows, f"{name} missing from docs/reference.md"
        doc = rows[name].rstrip(" |").rsplit("|", 1)[-1].strip()
        assert doc, f"{name}: empty doc in docs/reference.md (give it a doc = in the .bzl file)"


def test_api_as_bazel_sees_it() -> None:
    """The evaluation, not the text: the tag classes hold the schema plus `hub` / `name`, and the WORKSPACE
    macro's parameters are the index attributes plus `name` and `wheels`, each with the tag's default."""
    api = gen_reference.reference(gen_reference.Loader())
    schema = declared_keys((ROOT / "python/private/specs.bzl").read_text(), "PATCHED_WHEEL_SCHEMA")
    index = declared_keys((ROOT / "python/private/hub.bzl").read_text(), "INDEX_ATTRS")
    assert set(api["tags"]["patched_wheel"]) == set(schema) | {"hub"}
    assert set(api["tags"]["index"]) == set(index) | {"name"}
    parameters = gen_reference.workspace_parameters(api)
    assert list(parameters) == ["name", "wheels", *index]
    for name in index:
        assert parameters[name] == gen_reference.attribute_default(api["tags"]["index"][name]), name


def _patched_index_calls() -> tuple[Any, list[dict[str, Any]]]:
    """The WORKSPACE `patched_index` as Bazel loads it, and the `patched_hub` calls it makes (recorded)."""
    repositories = gen_reference.Loader().globals(ROOT / "python" / "repositories.bzl")
    calls: list[dict[str, Any]] = []
    repositories["patched_hub"] = lambda **kwargs: calls.append(kwargs)
    return repositories["patched_index"], calls


def test_patched_index_passes_every_index_attribute_on_to_the_hub() -> None:
    """The macro names no attribute itself: each of INDEX_ATTRS, and only those, reaches `patched_hub` as given."""
    patched_index, calls = _patched_index_calls()
    index = declared_keys((ROOT / "python/private/hub.bzl").read_text(), "INDEX_ATTRS")
    given = {name: f"value of {name}" for name in index}
    patched_index(name="hub", **given)
    (call,) = calls
    assert call == {"name": "hub", "patched": "[]", "patches": [], **given}


def test_patched_index_refuses_unknown_attributes_in_one_fail() -> None:
    patched_index, calls = _patched_index_calls()
    with pytest.raises(gen_reference.StarlarkError) as raised:
        patched_index(name="hub", requirements_lock="//:lock.txt", restore_extra=False, hub_name="x")
    message = str(raised.value)
    assert message.startswith(
        'rules_patched_wheels: patched_index(name = "hub"): unknown attributes hub_name, restore_extra; known: name, wheels, requirements_lock, '
    )
    assert calls == []


def test_stale_reference_fails(tmp_path: Path) -> None:
    """A changed doc string makes the check fail, naming the command that fixes it."""
    copy = tmp_path / "repo"
    for part in (
        "python/extensions.bzl",
        "python/repositories.bzl",
        "python/defs.bzl",
        "python/private",
        "tools/gen_reference.py",
        "docs/reference.md",
    ):
        source = ROOT / part
        target = copy / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
    script = copy / "tools" / "gen_reference.py"
    ok = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    specs = copy / "python/private/specs.bzl"
    text = specs.read_text()
    assert "Globs of members to delete" not in text
    specs.write_text(
        text.replace('"`fnmatch` globs of wheel members to delete', '"Globs of wheel members to delete', 1)
    )
    stale = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert stale.returncode == 1
    assert "docs/reference.md is stale: run python3 tools/gen_reference.py" in stale.stderr
    subprocess.run([sys.executable, str(script)], check=True)
    assert "Globs of wheel members to delete" in (copy / "docs/reference.md").read_text()


def test_load_time_fail_is_reported(tmp_path: Path) -> None:
    """A .bzl that fails while loading is an error of the generator, not a reference without it."""
    bzl = tmp_path / "x.bzl"
    bzl.write_text('fail("boom")\n')
    with pytest.raises(gen_reference.StarlarkError, match="boom"):
        gen_reference.Loader(tmp_path).globals(bzl)


def test_loads_of_other_repositories_are_stand_ins(tmp_path: Path) -> None:
    """A .bzl of this repository may load rules_python's symbols: they are recorded, not evaluated, so the
    generator keeps working when the public files load another repository."""
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "a.bzl").write_text(
        'load("@rules_python//python:defs.bzl", "py_test")\n'
        'load("//python:b.bzl", "B")\n'
        'X = py_test(name = "t", deps = B)\n'
    )
    (tmp_path / "python" / "b.bzl").write_text('B = ["x"]\n')
    namespace = gen_reference.Loader(tmp_path).globals(tmp_path / "python" / "a.bzl")
    assert namespace["X"].kind == "@rules_python//python:defs.bzl%py_test"
    assert namespace["X"].kwargs == {"name": "t", "deps": ["x"]}


def test_layout_test_parameters_are_documented() -> None:
    """Every parameter of the `layout_test` macro as Bazel calls it has a row with a doc from its `Args:`."""
    generator = load_generator()
    api = generator.reference(generator.Loader())
    macro = api["layout_test"]
    documented = generator.macro_arguments(macro)
    for name, parameter in inspect.signature(macro).parameters.items():
        shown = f"**{name}" if parameter.kind is inspect.Parameter.VAR_KEYWORD else name
        assert documented.get(shown), f"layout_test: {shown} has no doc in its Args:"
    assert generator.macro_arguments(generator.macro_summary) == {}  # no Args: section, no rows
