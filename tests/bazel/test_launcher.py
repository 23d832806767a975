"""tools/bazel's offline path puts the helper's caches where they are without it.

A repository rule runs the helper's own `cache_root()` (patched_wheels/base/cache.py) inside the launcher and
writes a marker there; the marker must appear at that path on the host: under $RULES_PATCHED_WHEELS_CACHE
exported in the shell (not only through --repo_env), and by default under ~/.cache/rules_patched_wheels.
With a host Bazel (no chroot) the same holds trivially.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from support.bazelworkspace import BAZEL, REPO_ROOT
from support.offlineroot import checkout_tools, module_archive, stand_in_root, status

pytestmark = pytest.mark.bazel

PROBE_BZL = """
def _probe_impl(rctx):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from patched_wheels.base.cache import cache_root; "
        + "root = cache_root(); root.mkdir(parents=True, exist_ok=True); (root / sys.argv[2]).write_text(sys.argv[2])"
    )
    result = rctx.execute(["python3", "-S", "-c", script, rctx.attr.python_dir, rctx.attr.marker])
    if result.return_code != 0:
        fail(result.stderr)
    rctx.file("BUILD.bazel", 'filegroup(name = "probe", srcs = [])\\n')

probe = repository_rule(
    implementation = _probe_impl,
    attrs = {"marker": attr.string(), "python_dir": attr.string()},
    environ = ["RULES_PATCHED_WHEELS_CACHE", "XDG_CACHE_HOME"],
)
"""


class Probe:
    def __init__(self, root: Path, markers: dict[str, str]) -> None:
        self.root = root
        self.markers = markers

    def build(self, repo: str, env: dict[str, str]) -> str:
        completed = subprocess.run(
            [str(BAZEL), "build", f"@{repo}//:probe"],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        return completed.stderr


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probe]:
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    root = tmp_path_factory.mktemp("launcher")
    markers = {repo: f"rpw-launcher-test-{repo}-{uuid.uuid4().hex}" for repo in ("explicit", "default")}
    (root / "probe.bzl").write_text(PROBE_BZL, encoding="utf-8")
    (root / "BUILD.bazel").write_text("", encoding="utf-8")
    (root / "MODULE.bazel").write_text(
        'module(name = "rpw_launcher_test")\n\nprobe = use_repo_rule("//:probe.bzl", "probe")\n'
        + "".join(
            f'probe(name = "{repo}", marker = "{marker}", python_dir = "{REPO_ROOT / "python"}")\n'
            for repo, marker in markers.items()
        ),
        encoding="utf-8",
    )
    (root / ".bazelrc").write_text("startup --max_idle_secs=300\n", encoding="utf-8")
    yield Probe(root, markers)
    subprocess.run([str(BAZEL), "clean", "--expunge"], cwd=root, capture_output=True, timeout=300, check=False)


def _environment(**values: str) -> dict[str, str]:
    env = {
        key: value for key, value in os.environ.items() if key not in ("RULES_PATCHED_WHEELS_CACHE", "XDG_CACHE_HOME")
    }
    return {**env, **values}


def test_exported_cache_variable_reaches_the_helper(probe: Probe, tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = tmp_path_factory.mktemp("exported-cache")  # outside the workspace: bound only as the helper's cache
    output = probe.build("explicit", _environment(RULES_PATCHED_WHEELS_CACHE=str(cache)))
    assert (cache / probe.markers["explicit"]).read_text() == probe.markers["explicit"]
    assert "host_javabase" not in output, output[-2000:]


def test_default_cache_is_the_hosts(probe: Probe) -> None:
    marker = Path.home() / ".cache" / "rules_patched_wheels" / probe.markers["default"]
    try:
        probe.build("default", _environment())
        assert marker.read_text() == probe.markers["default"]
    finally:
        marker.unlink(missing_ok=True)


def test_two_checkouts_of_one_content_share_the_root_and_rewrite_nothing_in_it(tmp_path: Path) -> None:
    """Issue 49: the registry's stamp held the checkout's path (and the archives' times), so the same commit from
    two clones rewrote the shared root's registry under each other's running server. Two copies of tools/ at
    other paths, the same archive content (copied again, with another time): the second launch rewrites neither
    the registry nor the modules the root serves; a changed archive makes a new registry beside the old one.
    The launches run against a stand-in root (nothing provisioned, Bazel never starts: chroot finds no env)."""
    if os.geteuid() != 0 or not os.path.isdir("/proc/self/ns"):
        pytest.skip("the offline path needs root and Linux namespaces")
    recipe = re.search(r'readonly root_recipe="([^"]+)"', (REPO_ROOT / "tools" / "bazel").read_text(encoding="utf-8"))
    assert recipe is not None
    cache = tmp_path / "cache"
    root = stand_in_root(cache / recipe[1])
    modules = tmp_path / "bazel-modules"
    release = module_archive(modules, "rules_python-9.9.9", 'module(name = "rules_python")\n# first\n')
    first, second = checkout_tools(tmp_path / "clone-a"), checkout_tools(tmp_path / "clone-b")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "MODULE.bazel").write_text("", encoding="utf-8")
    env = {**os.environ, "RPW_BAZEL_MODE": "offline", "RPW_CACHE_DIR": str(cache), "RPW_BAZEL_MODULES": str(modules)}
    out = root / "opt" / "rpw-modules"

    def launch(tools: Path) -> None:
        completed = subprocess.run(
            [str(tools / "bazel"), "version"], cwd=workspace, env=env, capture_output=True, text=True, timeout=120
        )
        assert "chroot: failed to run command" in completed.stderr, completed.stderr  # it got as far as Bazel

    try:
        launch(first)
        served = [root / "opt" / "rpw", *(root / "opt" / "rpw").rglob("*"), out, *out.rglob("*")]
        before = {path: status(path) for path in served}
        os.utime(release, (1, 1))
        launch(second)
        assert {path: status(path) for path in served} == before
        assert sorted((root / "opt").rglob("*")) == sorted(served)  # nor added anything
        (generation,) = [path for path in out.iterdir() if path.is_dir()]
        module_archive(modules, "rules_python-9.9.9", 'module(name = "rules_python")\n# other\n')
        os.utime(release, (1, 1))
        launch(second)
        (newer,) = [path for path in out.iterdir() if path.is_dir() and path != generation]
        assert (out / "modules.bazelrc").read_text(encoding="utf-8").endswith(f"/{newer.name}/registry\n")
        assert {path: status(path) for path in generation.rglob("*")} == {
            path: before[path] for path in generation.rglob("*")
        }
    finally:
        holder = Path(f"{root}.namespace-pid")
        if holder.is_file():  # the launcher's namespace holder (a sleeping process) of this stand-in root
            os.kill(int(holder.read_text(encoding="ascii")), signal.SIGTERM)
