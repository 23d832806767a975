"""The contract between ``python/private/layout_test.bzl`` and its runner (``layouttest/``), checked
without Bazel: the .bzl file executed by Python with Bazel's builtins stood in for, its outputs handed to the
runner as Bazel would lay them out in the runfiles. The names of the files the macro writes beside the test's
main, the config's keys and kinds, and the ``workspace_name/short_path`` path of ``pip_closure`` under the
runfiles root are each defined on one side and read on the other: a change to either side fails here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from patched_wheels.layouttest.closurecheck import read_pip_closure
from patched_wheels.layouttest.config import CONFIG_SUFFIX, MAIN_SUFFIX, PROBE_SUFFIX, Config, read_config
from patched_wheels.lock.closure import Closure
from patched_wheels.lock.requiresdist import read_dist
from support.starlark import PRIVATE, Recorder, evaluate_bzl


def _fail(message: str) -> None:
    raise AssertionError(message)


def _layout_test_bzl(package: str = "pkg") -> dict[str, Any]:
    """layout_test.bzl's globals, rules_python's py_binary and py_test recorded, in package ``package``."""
    attr = SimpleNamespace(**{kind: (lambda **kwargs: kwargs) for kind in ("label", "output", "string")})
    native = SimpleNamespace(package_name=lambda: package, repository_name=lambda: "@")
    return evaluate_bzl(
        PRIVATE / "layout_test.bzl",
        {"py_binary": Recorder(), "py_test": Recorder()},
        attr=attr,
        native=native,
        fail=_fail,
        json=SimpleNamespace(encode=lambda value: json.dumps(value, separators=(",", ":"))),
        DefaultInfo=lambda **kwargs: kwargs,
        depset=list,
    )


def test_the_macro_writes_the_config_and_the_probe_program_where_the_runner_looks_for_them() -> None:
    bzl = _layout_test_bzl()
    bzl["layout_test"](name="t", deps=["@pypi//a"], probe="import a", pip_closure="@hub//:pip_closure.json")
    ((files,), (program,), (test,)) = (bzl["_layout_files"].calls, bzl["py_binary"].calls, bzl["py_test"].calls)
    main = test["main"]
    assert main.endswith(MAIN_SUFFIX) and test["srcs"] == [main] == [files["test_main"]]
    base = main[: -len(MAIN_SUFFIX)]
    assert files["config"] == base + CONFIG_SUFFIX, "read_config looks for the config beside the main"
    assert program["name"] == base + PROBE_SUFFIX, "read_config runs the probe program beside the main"
    assert program["main"] == files["probe_main"] and program["deps"] == ["@pypi//a"]
    assert {files["config"], program["name"], "@hub//:pip_closure.json"} <= set(test["data"]), "in the runfiles"
    assert files["test"] == "//pkg:t"


def _written_config(bzl: dict[str, Any], closure: Any, workspace: str) -> str:
    """The config text ``_layout_files``'s implementation writes for ``closure`` (a File, or None)."""
    written: list[str] = []
    ctx = SimpleNamespace(
        actions=SimpleNamespace(
            expand_template=lambda **kwargs: None, write=lambda output, content: written.append(content)
        ),
        attr=SimpleNamespace(probe="import a", test="//pkg:t"),
        file=SimpleNamespace(pip_closure=closure, _probe_template="probe.py", _main_template="main.py"),
        outputs=SimpleNamespace(probe_main="p", test_main="m", config="c"),
        workspace_name=workspace,
    )
    bzl["_layout_files"].definition["implementation"](ctx)
    (text,) = written
    return text


@pytest.mark.parametrize(
    ("workspace", "short_path", "repository", "location", "hub"),
    [
        ("_main", "pkg/pip_closure.json", "", "_main/pkg/pip_closure.json", ""),
        (
            "_main",
            "../patched~~patched~pypi/pip_closure.json",
            "patched~~patched~pypi",
            "patched~~patched~pypi/pip_closure.json",
            "pypi",
        ),
        (
            "_main",
            "../patched++patched+pypi/pip_closure.json",
            "patched++patched+pypi",
            "patched++patched+pypi/pip_closure.json",
            "pypi",
        ),
        ("my_ws", "../pypi/pip_closure.json", "pypi", "pypi/pip_closure.json", "pypi"),
    ],
    ids=["main-repository", "bzlmod", "bzlmod-bazel-8", "workspace"],
)
def test_the_config_the_rule_writes_is_read_and_finds_the_closure_where_bazel_puts_it(
    tmp_path: Path, workspace: str, short_path: str, repository: str, location: str, hub: str
) -> None:
    """Bazel puts a file at ``<runfiles>/<workspace_name>/<short_path>`` (an external repository's short path
    starts with ``../``): the runner must read the hub's closure there, and name its hub from the repository."""
    closure_file = SimpleNamespace(short_path=short_path, owner=SimpleNamespace(workspace_name=repository))
    runfiles = tmp_path / "t.runfiles"
    package = runfiles / workspace / "pkg"
    package.mkdir(parents=True)
    (package / ("t" + CONFIG_SUFFIX)).write_text(_written_config(_layout_test_bzl(), closure_file, workspace), "utf-8")
    closure = Closure({"a": read_dist("a", "1.0", [], [], origin="a")}, {})  # type: ignore[dict-item]
    (runfiles / location).parent.mkdir(parents=True, exist_ok=True)
    (runfiles / location).write_text(json.dumps(closure.to_json()), encoding="utf-8")

    config = read_config(str(package / ("t" + MAIN_SUFFIX)))
    assert (config.test, config.probe, config.program) == ("//pkg:t", "import a", package / ("t" + PROBE_SUFFIX))
    assert read_pip_closure(config, str(runfiles)) == closure
    assert config.hub == hub


def test_a_test_with_no_closure_writes_a_config_that_reads_none() -> None:
    text = _written_config(_layout_test_bzl(), None, "_main")
    config = Config(**json.loads(text), program=Path("p"))
    assert read_pip_closure(config, "/nonexistent") is None
