"""layout_test's fix line pastes: a failing test prints a complete patched_wheel, which, pasted where its hub
is declared (MODULE.bazel, then WORKSPACE), makes the same test pass. One small workspace, both modes."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from patched_wheels.layouttest.report import starlark_string
from support.bazelworkspace import BAZEL, BazelWorkspace, make_fix_line_workspace, summary_statuses

pytestmark = pytest.mark.bazel

TARGET = "//:plugin_layout_test"
# The plugin stack's probe, with what a fix line must quote to paste: both quotes, a backslash, a line break.
PROBE = "import fakeplugins.xla_fake as plugin\nprint(plugin.backend(), \"it's\", '\\\\')"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BazelWorkspace]:
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    made = make_fix_line_workspace(tmp_path_factory.mktemp("fixline"), starlark_string(PROBE))
    yield made
    made.shutdown()


def _fix_line(workspace: BazelWorkspace, flags: list[str], call: str) -> tuple[str, str]:
    """The failing test's fix line, and the patched_wheel it gives (from ``call`` to the end of the line)."""
    result = workspace.run("test", *flags, TARGET)
    assert summary_statuses(result.output).get(TARGET) == "FAILED", result.tail()
    log = workspace.test_log("plugin_layout_test")
    (fix,) = [line for line in log.splitlines() if line.startswith("layout_test: fix:")]
    assert f" {call}(" in fix, fix
    pasted = fix[fix.index(f" {call}(") + 1 :]
    assert 'suffix = "preload.1"' in pasted and f"probe = {starlark_string(PROBE)}" in pasted, fix
    return fix, pasted


def _passes(workspace: BazelWorkspace, flags: list[str]) -> None:
    result = workspace.run("test", *flags, TARGET)
    assert summary_statuses(result.output).get(TARGET) == "PASSED", result.tail()
    assert "layout_test: PASSED" in workspace.test_log("plugin_layout_test")


def test_the_fix_line_pasted_into_module_bazel_makes_the_test_pass(workspace: BazelWorkspace) -> None:
    fix, pasted = _fix_line(workspace, [], "patched.patched_wheel")
    assert "add to MODULE.bazel" in fix and 'hub = "plugin"' in pasted, fix
    module = workspace.root / "MODULE.bazel"
    module.write_text(module.read_text(encoding="utf-8") + pasted + "\n", encoding="utf-8")
    _passes(workspace, [])


def test_the_fix_line_pasted_into_workspace_makes_the_test_pass(workspace: BazelWorkspace) -> None:
    fix, pasted = _fix_line(workspace, ["--config=workspace"], "patched_wheel")
    assert 'add to patched_index(name = "plugin", wheels = [...]) in WORKSPACE' in fix and "hub = " not in pasted, fix
    file = workspace.root / "WORKSPACE"
    text = file.read_text(encoding="utf-8")
    assert text.count("    wheels = [\n") == 1, text
    file.write_text(text.replace("    wheels = [\n", f"    wheels = [\n        {pasted},\n"), encoding="utf-8")
    _passes(workspace, ["--config=workspace"])
