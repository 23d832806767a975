"""A rebuild after `bazel clean --expunge` reads no wheel from the network under rules_python 0.22.1.

rules_python before 2 installs every wheel with pip, which fetches by URL and keeps nothing in Bazel's
repository cache. The hub fetches every wheel of the lock by sha256 through Bazel's downloader (so through
the repository cache) and serves them all from its own index: once the workspace was built, the fake PyPI
can lose its wheels, and `clean --expunge` followed by `bazel test` still passes. (The fake PyPI is a
`file://` one, as in the matrix: Bazel's downloader refuses a plain-http index page, which has no checksum.
Its wheels moved away are as unreachable as a server that stopped; its pages stay, since the offline
launcher's Bazel keeps no `MODULE.bazel.lock` and so resolves the lock again from them.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.bazelworkspace import (
    BAZEL,
    REPO_ROOT,
    SUFFIX,
    BazelWorkspace,
    common_files,
    fakecuda,
    render,
    string_template,
    summary_statuses,
)

pytestmark = pytest.mark.bazel


def _workspace(root: Path) -> BazelWorkspace:
    """The matrix's user workspace under rules_python 0.22.1 with its `fixed` hub alone."""
    pypi = common_files(root)
    render(
        "matrix/MODULE.bazel.tmpl",
        root / "MODULE.bazel",
        rules_python="0.22.1",
        repo_root=str(REPO_ROOT),
        toolchain="",
        index_url=pypi.index_url,
        suffix=SUFFIX,
        hubs="",
        hub_attr="name",
        pip_args="",
        pips='use_repo(patched, "fixed")\nuse_repo(pip, "pypi_fixed")\n',
    )
    args = [
        f"--expected={fakecuda.EXPECTED_ANSWER}",
        f"--expected-version={fakecuda.TORCH_VERSION}+{SUFFIX}",
        "--preloaded",
    ]
    render(
        "matrix/BUILD.bazel.tmpl",
        root / "BUILD.bazel",
        loads='load("@pypi_fixed//:requirements.bzl", fixed_requirement = "requirement")\n',
        tests=string_template("matrix/test.BUILD.bazel.tmpl", dict(hub="fixed", args=json.dumps(args))),
    )
    return BazelWorkspace(root, root / "logs")


def test_a_rebuild_after_clean_expunge_reads_no_wheel_from_the_fake_pypi(tmp_path: Path) -> None:
    """Fails where pip is sent to the fake PyPI for any pin: its wheels are gone for the second build."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    root = tmp_path / "ws"
    workspace = _workspace(root)
    try:
        first = workspace.run("test", "//:fixed_test")
        assert summary_statuses(first.output).get("//:fixed_test") == "PASSED", first.tail()
        lock = (workspace.hub("fixed") / "requirements_lock.txt").read_text(encoding="utf-8")
        assert str(root / "pypi") not in lock, lock  # pip is sent to the hub's copies only
        workspace.ok("clean", "--expunge")
        (root / "hidden-wheels").mkdir()
        for wheel in (root / "pypi").glob("*.whl"):
            wheel.rename(root / "hidden-wheels" / wheel.name)
        second = workspace.run("test", "//:fixed_test")
        assert summary_statuses(second.output).get("//:fixed_test") == "PASSED", second.tail()
        assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in workspace.test_log("fixed_test")
    finally:
        workspace.shutdown()
