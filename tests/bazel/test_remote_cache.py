"""Two CI runners share test results through an HTTP remote cache: each test builds a workspace from two
checkouts at different paths, each with its own output base and its own repository cache, against a real nginx
WebDAV server (tests/support/nginx.py) as Bazel's remote-caching docs set it up. The second checkout's test
actions are all remote cache hits: nothing the hub writes (the patched wheels, its lock, the generated preload,
the split's sibling wheel, pip_closure.json) may depend on where the checkout or the output base lies.

Two workspaces: `e2e/bzlmod` (six, patched by a hub; it reads six's page from PyPI, as the BCR's presubmit
does), and a generated one whose hub patches, splits and preloads the gcc-built fake faketorch
(bazelworkspace.make_shared_hub_workspace), read by a py_test and a layout_test. One nginx serves both.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

from support import nginx
from support.bazelworkspace import (
    BAZEL,
    BazelResult,
    BazelWorkspace,
    bound_scratch,
    copy_checkout,
    fakecuda,
    index_wheels,
    make_shared_hub_workspace,
    process_summary,
    summary_statuses,
)

pytestmark = pytest.mark.bazel

# Where each runner checks the repository out: two different depths, so no relative path can line up.
PLACES = ("runner-a/src", "elsewhere/b/clone")
EXECUTION_LOG = "execution.json"  # in each workspace's logs/: what each spawn's cache key held


@pytest.fixture(scope="module")
def runners() -> Iterator[Path]:
    """The folder the checkouts (and the fake PyPI both runners read) lie in, bound into the offline launcher's
    root: the module two folders up and the repository caches lie in the checkouts."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    if not nginx.available():
        pytest.skip(f"{nginx.NGINX} is missing (.ci/run installs Debian's nginx-light)")
    with bound_scratch("rpw-runners-") as directory:
        yield directory


@pytest.fixture(scope="module")
def remote_cache(runners: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[nginx.Server]:
    """nginx's WebDAV on 127.0.0.1 as the HTTP remote cache of every build of this module."""
    work = tmp_path_factory.mktemp("remote-cache")
    (work / "cache").mkdir()
    with nginx.serve(work / "cache", work / "nginx", webdav=True) as server:
        yield server


def _test_in_both(
    checkouts: Sequence[tuple[Path, BazelWorkspace]], server: nginx.Server
) -> tuple[BazelResult, BazelResult]:
    """`bazel test //...` in each checkout's workspace in turn, each with the checkout's own repository cache
    and the shared remote cache; then each server stops and its output base goes."""
    try:
        first, second = (
            workspace.run(
                "test",
                "//...",
                f"--remote_cache={server.url}",
                f"--repository_cache={checkout / 'repository-cache'}",
                f"--execution_log_json_file={workspace.logs / EXECUTION_LOG}",
            )
            for checkout, workspace in checkouts
        )
        assert checkouts[0][1].output_base != checkouts[1][1].output_base
    finally:
        for _, workspace in checkouts:
            workspace.shutdown()
    return first, second


def _spawns(log: Path) -> list[dict[str, Any]]:
    """The spawns of an ``--execution_log_json_file``: JSON objects one after another (not one document)."""
    text, decoder, spawns, at = log.read_text(encoding="utf-8"), json.JSONDecoder(), [], 0
    while (start := re.compile(r"\S").search(text, at)) is not None:
        spawn, at = decoder.raw_decode(text, start.start())
        spawns.append(spawn)
    return spawns


def _why_missed(checkouts: Sequence[BazelWorkspace]) -> str:
    """For each spawn the second checkout ran rather than got from the cache: what its key had that the first
    checkout's same spawn (same target, mnemonic and outputs) had not: input paths with another digest (or only
    on one side), and other arguments or environment. The cause of a miss, named in the failure."""
    first, second = (_spawns(workspace.logs / EXECUTION_LOG) for workspace in checkouts)

    def key(spawn: dict[str, Any]) -> tuple[str, str, str]:
        return spawn.get("targetLabel", ""), spawn.get("mnemonic", ""), json.dumps(spawn.get("listedOutputs"))

    def inputs(spawn: dict[str, Any]) -> dict[str, str]:
        return {entry["path"]: entry.get("digest", {}).get("hash", "") for entry in spawn.get("inputs", [])}

    earlier = {key(spawn): spawn for spawn in first}
    lines = []
    for spawn in second:
        if spawn.get("remoteCacheHit"):
            continue
        lines.append(f"ran again: {' '.join(key(spawn)[:2])}")
        before = earlier.get(key(spawn), {})
        old, new = inputs(before), inputs(spawn)
        lines += [
            f"  input {path}: {old.get(path)} -> {new.get(path)}"
            for path in sorted(old.keys() | new.keys())
            if old.get(path) != new.get(path)
        ]
        lines += [
            f"  {field} differ"
            for field in ("commandArgs", "environmentVariables")
            if before.get(field) != spawn.get(field)
        ]
    return "\n".join(lines)


def _assert_the_second_run_only_hits_the_cache(
    checkouts: Sequence[BazelWorkspace], results: tuple[BazelResult, BazelResult], tests: Sequence[str]
) -> None:
    """The first run ran and passed ``tests``; the second ran none of them, nor any other process."""
    first, second = results
    assert summary_statuses(first.output) == dict.fromkeys(tests, "PASSED"), first.tail()
    count = len(tests)
    assert f"Executed {count} out of {count} test" in first.output, first.tail()
    assert second.returncode == 0, second.tail()
    processes = process_summary(second.output)
    assert processes.get("remote cache hit", 0) > 0 and set(processes) <= {"remote cache hit", "internal"}, (
        f"{second.tail(12)}\n{_why_missed(checkouts)}"
    )
    for test in tests:
        assert re.search(rf"^{re.escape(test)} +\(cached\) PASSED", second.output, re.MULTILINE), second.tail()
    assert f"Executed 0 out of {count} test" in second.output, second.tail()


def test_a_second_checkout_at_another_path_gets_every_test_result_from_the_remote_cache(
    runners: Path, remote_cache: nginx.Server
) -> None:
    """Fails when any test action of the second checkout runs again (a path of the first one in its inputs)."""
    checkouts = []
    for place in PLACES:
        checkout = copy_checkout(runners / "e2e" / place)
        (checkout / "logs").mkdir()
        checkouts.append((checkout, BazelWorkspace(checkout / "e2e" / "bzlmod", checkout / "logs")))
    results = _test_in_both(checkouts, remote_cache)
    _assert_the_second_run_only_hits_the_cache(
        [workspace for _, workspace in checkouts], results, ["//:patched_six_test"]
    )
    # The cache was filled over WebDAV by the first run and read by the second.
    log = remote_cache.access_log.read_text(encoding="utf-8")
    assert '"PUT /ac/' in log and '"PUT /cas/' in log and re.search(r'"GET /ac/\S+ HTTP/1.1" 200 ', log), log


def test_a_hub_that_patches_splits_and_preloads_a_wheel_is_a_remote_cache_hit_from_another_checkout(
    runners: Path, remote_cache: nginx.Server
) -> None:
    """The fake faketorch patched by a source patch, its library split into a sibling wheel, a preload generated
    by the hub's probe: every file of it a test reads must be the same bytes from either checkout."""
    pypi = runners / "hub" / "pypi"  # the company index both runners read
    wheels = fakecuda.build_fake_cuda_wheels(pypi)
    index_wheels(pypi)
    checkouts = []
    for place in PLACES:
        checkout = copy_checkout(runners / "hub" / place)
        workspace = make_shared_hub_workspace(checkout / "e2e" / "shared_hub", pypi, wheels, "../..")
        checkouts.append((checkout, workspace))
    results = _test_in_both(checkouts, remote_cache)
    _assert_the_second_run_only_hits_the_cache(
        [workspace for _, workspace in checkouts], results, ["//:shared_layout_test", "//:shared_test"]
    )
