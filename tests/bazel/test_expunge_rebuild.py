"""A rebuild after `bazel clean --expunge` needs no network, in bzlmod and WORKSPACE mode (rules_python 0.22.1).

What the rebuild keeps is what a CI job keeps: Bazel's repository cache and the helper's cache root. The first
build reads the fake PyPI (a `file://` one, as in the matrix: Bazel's downloader refuses a plain-http index
page, which has no checksum); then the output base is expunged, the whole fake PyPI (pages and wheels) is
moved away, and the second build runs in a network namespace of its own (`unshare --net`, loopback up for
Bazel's client and server): no index, no PyPI, no GitHub. It passes only if

- every wheel comes from the repository cache by sha256 (the hub's, and the helper's own pinned wheels);
- pip (rules_python before 2) is sent to the hub's copies alone, never to the lock's index;
- the index pages the extension (bzlmod: Debian's Bazel keeps no MODULE.bazel.lock, so it resolves again) and
  the hub (WORKSPACE mode) cannot download are answered by what the first build recorded of them in the helper's
  cache root (`patched_wheels.lock.resolve`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.bazelworkspace import (
    BAZEL,
    CACHE_DIR,
    REPO_ROOT,
    SUFFIX,
    WITHOUT_NETWORK,
    BazelWorkspace,
    common_files,
    fakecuda,
    render,
    string_template,
    summary_statuses,
)

pytestmark = pytest.mark.bazel

MODES = {"bzlmod": (), "WORKSPACE": ("--config=workspace",)}


def _workspace(root: Path) -> int:
    """The matrix's user workspace under rules_python 0.22.1 with its `fixed` hub alone, as a MODULE.bazel and
    as a WORKSPACE (`--config=workspace`) over the same BUILD file. Returns the number of pins of its lock."""
    pypi = common_files(root)
    values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX)
    render(
        "matrix/MODULE.bazel.tmpl",
        root / "MODULE.bazel",
        rules_python="0.22.1",
        toolchain="",
        hubs="",
        hub_attr="name",
        pip_args="",
        pips='use_repo(patched, "fixed")\nuse_repo(pip, "pypi_fixed")\n',
        **values,
    )
    render("matrix/WORKSPACE.tmpl", root / "WORKSPACE", **values)
    with (root / ".bazelrc").open("a", encoding="utf-8") as bazelrc:
        bazelrc.write("common --noenable_workspace\n")  # bzlmod alone unless --config=workspace
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
    return len(pypi.wheels.all)


def _test_passes(workspace: BazelWorkspace, mode: str) -> None:
    result = workspace.run("test", *MODES[mode], "//:fixed_test")
    assert summary_statuses(result.output).get("//:fixed_test") == "PASSED", f"{mode}: {result.tail()}"
    assert f"faketorch.answer() == {fakecuda.EXPECTED_ANSWER}" in workspace.test_log("fixed_test")


def test_a_rebuild_after_clean_expunge_needs_no_network(tmp_path: Path) -> None:
    """Fails where anything of the rebuild is downloaded: an index page, a wheel, a helper wheel."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    if subprocess.run([*WITHOUT_NETWORK, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("`unshare --net` is not permitted here (needs root or user namespaces)")
    root = tmp_path / "ws"
    pins = _workspace(root)
    online = BazelWorkspace(root, root / "logs")
    (root / "logs" / "offline").mkdir()
    offline = BazelWorkspace(root, root / "logs" / "offline", launcher=WITHOUT_NETWORK)
    running = online  # the namespace whose Bazel server is up, which alone can stop it
    try:
        for mode in MODES:
            _test_passes(online, mode)
        locks = sorted((online.output_base / "external").glob("*fixed/requirements_lock.txt"))
        assert len(locks) == len(MODES), locks  # one hub per mode
        for lock in locks:  # pip is sent to the hub's copies only
            assert str(root / "pypi") not in lock.read_text(encoding="utf-8"), lock
        online.ok("clean", "--expunge")
        shutil.move(root / "pypi", root / "hidden-wheels")
        running = offline
        for mode in MODES:
            _test_passes(offline, mode)
        # What answered the pages: one record per pin, under the cache root the workspace's .bazelrc gives
        # the hub (not the user's).
        assert len(list((root / CACHE_DIR / "indexlinks").iterdir())) == pins
    finally:
        running.shutdown()
