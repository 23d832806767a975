"""Issue 30 under real Bazel: a library cycle in a bystander wheel of the lock, and a failing hub's one error line.

One MODULE.bazel workspace (see bazelworkspace.make_cycles_workspace): hub `cycles` patches faketorch
with preload = "auto" from a lock that also holds fakepil, whose bundled libfreetype and libharfbuzz
need each other (pillow 13's shape); hub `broken` applies a patch that does not apply.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.bazelworkspace import Setup, cyclefixture, fakecuda, summary_statuses

pytestmark = pytest.mark.bazel


def test_a_cycle_in_an_unrelated_wheel_of_the_lock_passes_with_preload_auto(cycles: tuple[Setup, Path]) -> None:
    setup, pil = cycles
    result = setup.workspace.run("test", "//:faketorch_test", "//:fakepil_test")
    assert result.returncode == 0, result.tail()
    statuses = summary_statuses(result.output)
    assert statuses == {"//:faketorch_test": "PASSED", "//:fakepil_test": "PASSED"}, result.tail()
    assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in setup.workspace.test_log("faketorch_test")
    assert f"fakepil.answer() == {cyclefixture.PIL_ANSWER}" in setup.workspace.test_log("fakepil_test")
    # Not even a warning: a cycle is legal, and faketorch needs neither library.
    assert "patched-wheels: warning" not in result.output, result.tail()
    assert (setup.workspace.hub("cycles") / "index" / pil.name).is_file()


def test_a_failing_hub_prints_its_error_line_once(cycles: tuple[Setup, Path]) -> None:
    setup, _ = cycles
    result = setup.workspace.run("build", "@broken//:requirements_lock.txt")
    assert result.returncode != 0, result.tail()
    errors = [line for line in result.output.splitlines() if "patched-wheels: error:" in line]
    assert len(errors) == 1, result.tail()
    patch = setup.workspace.root / "does-not-apply.patch"
    assert str(patch) in errors[0] and "faketorch/__init__.py" in errors[0], errors
    # Bazel's own report of the failure says where to look, and does not repeat the message.
    assert "does-not-apply.patch" not in result.output.replace(errors[0], ""), result.tail()
