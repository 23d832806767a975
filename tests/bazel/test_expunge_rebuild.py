"""A rebuild after `bazel clean --expunge` needs no network, on every rules_python line: 0.22.1 in bzlmod and
WORKSPACE mode, 1.6.0 and 2.3.2 in bzlmod (the lines the matrix, tests/bazel/test_rules_python_matrix.py, runs).

What the rebuild keeps is what a CI job keeps: Bazel's repository cache and the helper's cache root. The first
build reads the fake PyPI (a `file://` one, as in the matrix: Bazel's downloader refuses a plain-http index
page, which has no checksum); then the output base is expunged, the whole fake PyPI (pages and wheels) is
moved away, and the second build runs in a network namespace of its own (`unshare --net`, loopback up for
Bazel's client and server): no index, no PyPI, no GitHub. It passes only if

- every wheel comes from the repository cache by sha256 (the hub's, the helper's own pinned wheels, and under
  rules_python 2.x the unpatched pins rules_python fetches itself from the lock's direct references);
- pip (rules_python before 2) is sent to the hub's copies alone, never to the lock's index;
- the index pages the extension (bzlmod: Debian's Bazel keeps no MODULE.bazel.lock, so it resolves again) and
  the hub (WORKSPACE mode) cannot download are answered by what the first build recorded of them in the helper's
  cache root (`patched_wheels.lock.resolve`);
- under rules_python 1.x and 2.x, the user's `pip` usage is isolated (`use_extension(..., isolate = True)`), as
  docs/caches-and-trust.md tells such users to do: rules_python's own MODULE.bazel declares a hub of its own
  (`rules_python_publish_deps`, twine's locks) whose pypi.org pages its pip extension reads on every evaluation
  and records nowhere on a Bazel without extension facts, so a shared usage fails the rebuild with
  `Unknown host: pypi.org`, whatever the hub records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.bazelworkspace import (
    BAZEL,
    CACHE_DIR,
    REPO_ROOT,
    SUFFIX,
    TEMPLATES,
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

SHARED_PIP = 'pip = use_extension("@rules_python//python/extensions:pip.bzl", "pip")\n'
# rules_python 1.x and 2.x: the user's pip.parse evaluated apart from rules_python's own (docs/caches-and-trust.md).
ISOLATED_PIP = 'pip = use_extension("@rules_python//python/extensions:pip.bzl", "pip", isolate = True)\n'
# rules_python 1.6.0 defines its platforms with `pip.default` tags in its own MODULE.bazel, which an isolated
# usage does not see: without this one the hub has no wheel for the host (2.x has them built in).
PLATFORM_1X = """\
pip.default(
    platform = "linux_x86_64",
    os_name = "linux",
    arch_name = "x86_64",
    config_settings = ["@platforms//cpu:x86_64", "@platforms//os:linux"],
    env = {"platform_version": "0"},
    whl_abi_tags = ["abi3", "cp{major}{minor}"],
    whl_platform_tags = ["linux_x86_64", "manylinux_*_x86_64"],
)
"""


@dataclass(frozen=True)
class Line:
    release: str
    modes: tuple[str, ...]

    @property
    def modern(self) -> bool:
        """1.x and 2.x: `hub_name`, a registered Python, an isolated pip usage; bzlmod only in the matrix."""
        return self.release != "0.22.1"


LINES = {
    "rules_python-0.22.1": Line("0.22.1", ("bzlmod", "WORKSPACE")),
    "rules_python-1.6.0": Line("1.6.0", ("bzlmod",)),
    "rules_python-2.3.2": Line("2.3.2", ("bzlmod",)),
}


def _module(line: Line, **values: str) -> str:
    """The matrix's MODULE.bazel for ``line`` with its `fixed` hub alone (and, on 1.x and 2.x, the isolated pip)."""
    pip_args = ', python_version = "3.11", python_interpreter = "python3"' if line.modern else ""
    text = string_template(
        "matrix/MODULE.bazel.tmpl",
        dict(
            rules_python=line.release,
            toolchain=(TEMPLATES / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8") if line.modern else "",
            hubs="",
            hub_attr="hub_name" if line.modern else "name",
            pip_args=pip_args,
            pips='use_repo(patched, "fixed")\nuse_repo(pip, "pypi_fixed")\n',
            **values,
        ),
    )
    if not line.modern:
        return text
    assert text.count(SHARED_PIP) == 1, text
    return text.replace(SHARED_PIP, ISOLATED_PIP + (PLATFORM_1X if line.release.startswith("1.") else ""))


def _workspace(root: Path, line: Line) -> int:
    """The matrix's user workspace under ``line`` with its `fixed` hub alone, as a MODULE.bazel and (0.22.1) as a
    WORKSPACE (`--config=workspace`) over the same BUILD file. Returns the number of pins of its lock."""
    pypi = common_files(root)
    values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX)
    (root / "MODULE.bazel").write_text(_module(line, **values), encoding="utf-8")
    if "WORKSPACE" in line.modes:
        render("matrix/WORKSPACE.tmpl", root / "WORKSPACE", **values)
    with (root / ".bazelrc").open("a", encoding="utf-8") as bazelrc:
        bazelrc.write("common --noenable_workspace\n")  # bzlmod alone unless --config=workspace
        if line.modern:
            bazelrc.write("common --experimental_isolated_extension_usages\n")  # Bazel 7 and 8: isolate = True
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


@pytest.mark.parametrize("name", list(LINES))
def test_a_rebuild_after_clean_expunge_needs_no_network(tmp_path: Path, name: str) -> None:
    """Fails where anything of the rebuild is downloaded: an index page, a wheel, a helper wheel."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    if subprocess.run([*WITHOUT_NETWORK, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("`unshare --net` is not permitted here (needs root or user namespaces)")
    line = LINES[name]
    root = tmp_path / "ws"
    pins = _workspace(root, line)
    online = BazelWorkspace(root, root / "logs")
    (root / "logs" / "offline").mkdir()
    offline = BazelWorkspace(root, root / "logs" / "offline", launcher=WITHOUT_NETWORK)
    running = online  # the namespace whose Bazel server is up, which alone can stop it
    try:
        for mode in line.modes:
            _test_passes(online, mode)
        locks = sorted((online.output_base / "external").glob("*fixed/requirements_lock.txt"))
        assert len(locks) == len(line.modes), locks  # one hub per mode
        for lock in locks:
            # Before 2, pip is sent to the hub's copies only; 2.x fetches the unpatched pins from the fake PyPI
            # by their sha256 (direct references), so offline they can only come from the repository cache.
            assert (str(root / "pypi") in lock.read_text(encoding="utf-8")) == line.release.startswith("2."), lock
        online.ok("clean", "--expunge")
        shutil.move(root / "pypi", root / "hidden-wheels")
        running = offline
        for mode in line.modes:
            _test_passes(offline, mode)
        # What answered the pages: one record per pin, under the cache root the workspace's .bazelrc gives
        # the hub (not the user's).
        assert len(list((root / CACHE_DIR / "indexlinks").iterdir())) == pins
    finally:
        running.shutdown()
