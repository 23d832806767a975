"""Two CI runners share test results through an HTTP remote cache: `e2e/bzlmod` (six, patched by a hub) from
two checkouts at different paths, each with its own output base and its own repository cache, against a real
nginx WebDAV server (tests/support/nginx.py) as Bazel's remote-caching docs set it up. The second checkout's
test actions are all remote cache hits: nothing the hub writes (the patched wheel, its lock, the generated
preload) may depend on where the checkout or the output base lies.

e2e/bzlmod reads six's page from PyPI, as the BCR's presubmit does.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from support import nginx
from support.bazelworkspace import BAZEL, REPO_ROOT, BazelResult, BazelWorkspace, summary_statuses

pytestmark = pytest.mark.bazel

# What e2e/bzlmod's `local_path_override(path = "../..")` needs of a checkout: the module and its sources.
CHECKOUT = ("MODULE.bazel", "BUILD.bazel", ".bazelignore", "python", "e2e")


def _checkout(destination: Path) -> BazelWorkspace:
    """A copy of the module and e2e/bzlmod at ``destination``, as a second clone of the repository would be."""
    destination.mkdir(parents=True)
    for name in CHECKOUT:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, destination / name)
    (destination / "logs").mkdir()
    return BazelWorkspace(destination / "e2e" / "bzlmod", destination / "logs")


def _processes(result: BazelResult) -> dict[str, int]:
    """Bazel's process summary (`INFO: 3 processes: 2 remote cache hit, 1 internal.`) as kind -> count."""
    (summary,) = re.findall(r"^INFO: \d+ process(?:es)?: (.*)\.$", result.output, re.MULTILINE)
    return {kind: int(count) for count, kind in re.findall(r"(\d+) ([a-z][a-z -]*[a-z])", summary)}


def test_a_second_checkout_at_another_path_gets_every_test_result_from_the_remote_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails when any test action of the second checkout runs again (a path of the first one in its inputs)."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    if not nginx.available():
        pytest.skip(f"{nginx.NGINX} is missing (.ci/run installs Debian's nginx-light)")
    # The offline launcher binds the workspace alone: the module two folders up and the repository caches
    # lie in the checkouts. A name never used before, outside pytest's folders: the launcher's namespace
    # keeps its binds, and nothing can be bound below one whose directory was deleted (a rerun of pytest
    # with the same --basetemp).
    runners = Path(tempfile.mkdtemp(prefix="rpw-runners-"))
    monkeypatch.setenv("RPW_BIND_DIRS", " ".join(filter(None, [os.environ.get("RPW_BIND_DIRS"), str(runners)])))
    (tmp_path / "cache").mkdir()
    workspaces: list[BazelWorkspace] = []
    try:
        for place in ("runner-a/src", "elsewhere/b/clone"):
            workspaces.append(_checkout(runners / place))
        first, second = workspaces
        with nginx.serve(tmp_path / "cache", tmp_path / "nginx", webdav=True) as server:
            results = [
                workspace.run(
                    "test",
                    "//...",
                    f"--remote_cache={server.url}",
                    f"--repository_cache={workspace.root.parent.parent / 'repository-cache'}",
                )
                for workspace in (first, second)
            ]
        assert summary_statuses(results[0].output) == {"//:patched_six_test": "PASSED"}, results[0].tail()
        assert re.search(r"^//:patched_six_test +\(cached\) PASSED", results[1].output, re.MULTILINE), results[1].tail()
        assert first.output_base != second.output_base
        assert "Executed 1 out of 1 test" in results[0].output, results[0].tail()
        assert "Executed 0 out of 1 test" in results[1].output, results[1].tail()
        processes = _processes(results[1])
        assert processes.get("remote cache hit", 0) > 0 and set(processes) <= {"remote cache hit", "internal"}, results[
            1
        ].tail()
        # The cache was filled over WebDAV by the first run and read by the second.
        log = server.access_log.read_text(encoding="utf-8")
        assert '"PUT /ac/' in log and '"PUT /cas/' in log and re.search(r'"GET /ac/\S+ HTTP/1.1" 200 ', log), log
    finally:
        for workspace in workspaces:
            workspace.shutdown()
        shutil.rmtree(runners)
