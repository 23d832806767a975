"""Remote execution on a real engine (tools/remote/engine.py: BuildGrid, PostgreSQL, buildbox-casd and
buildbox-worker with the bubblewrap runner, on 127.0.0.1): every test action runs on the worker, in a sandbox
whose root is the action's staged inputs plus the worker's own system (Debian unstable, its python3 a newer one
than the build's), with no view of the checkout, the output base or the helper's cache.

* The engine itself: it stops every process it started, when its block ends and when its starter is killed while
  it starts.
* `e2e/bzlmod` and a hub that patches, splits and preloads the gcc-built faketorch, with a registered Python
  toolchain (the build's interpreter, an input of each test: a test that ran the worker's `python3` fails):
  `bazel test --remote_executor=... --noremote_accept_cached` runs every test action remotely (Bazel's `N remote`)
  and each passes; the layout_tests give the verdicts they give locally.
* The split against the engine's limit: an engine refusing an action whose input tree exceeds LIMIT bytes fails
  the test of a wheel (the wheel as one input, as a packaging rule takes it) bigger than that, and passes the tests
  of the two wheels `split_max_size = LIMIT` makes of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from tools.remote import engine as remote_engine

from support.bazelworkspace import (
    BAZEL,
    bound_scratch,
)

pytestmark = pytest.mark.bazel

ENGINE_SCRIPT = Path(remote_engine.__file__)
# The engine's limit on one action's input tree, and the fixture wheel scaled to it: two libraries (incompressible
# bytes) that together exceed it and each stay under it.
LIMIT = 4 << 20
BIG_LIBRARIES = {"bigpkg/lib/libbig_a.so": 3 << 20, "bigpkg/lib/libbig_b.so": 5 << 19}
BUILD_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the launcher's interpreter's version too
INTERPRETER_TEST = "//build_python:interpreter_test"


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """Where the workspaces lie, bound into the offline launcher's root (the e2e module lies two folders up)."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    reason = remote_engine.available()
    if reason is not None:
        pytest.skip(reason)
    with bound_scratch("rpw-remote-") as directory:
        yield directory


@pytest.fixture(scope="module")
def engine(scratch: Path) -> Iterator[remote_engine.Engine]:
    with remote_engine.serve(scratch / "engine") as started:
        yield started


def _groups_alive(groups: set[int]) -> list[str]:
    """The processes (pid and command) whose process group is one of ``groups``: what the engine started and forked."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[2]) in groups and fields[0] != "Z":
            alive.append(f"{stat.parent.name}: {cmdline}")
    return alive


def _started_groups(work: Path) -> set[int]:
    pids = work / "pids"
    return {int(line.split()[0]) for line in pids.read_text(encoding="utf-8").splitlines()} if pids.is_file() else set()


def _wait_gone(groups: set[int], seconds: float = 20) -> list[str]:
    deadline = time.monotonic() + seconds
    while (alive := _groups_alive(groups)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def test_the_engine_registers_its_worker_and_stops_every_process_when_the_block_ends(scratch: Path) -> None:
    work = scratch / "engine-block"
    with remote_engine.serve(work) as started:
        groups = _started_groups(work)
        assert started.endpoint.startswith("grpc://127.0.0.1:")
        assert {line.split()[1] for line in (work / "pids").read_text(encoding="utf-8").splitlines()} == {
            "postgres",
            "buildgrid",
            "casd",
            "worker",
        }
        assert len(_groups_alive(groups)) >= 4  # PostgreSQL forks its own helpers into its group
        assert "Starting buildbox-worker" in (work / "worker.log").read_text(encoding="utf-8")
    assert _wait_gone(groups, seconds=2) == []


def test_a_starter_killed_mid_start_leaves_no_process_of_the_engine_behind(scratch: Path) -> None:
    """SIGKILL runs no cleanup: the kernel's parent-death signal must take every started process down."""
    work = scratch / "engine-killed"
    starter = subprocess.Popen(
        [sys.executable, str(ENGINE_SCRIPT), "--work", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    # Killed once PostgreSQL and BuildGrid run, before the worker registers.
    while len(_started_groups(work)) < 2 and time.monotonic() < deadline and starter.poll() is None:
        time.sleep(0.1)
    groups = _started_groups(work)
    assert len(groups) >= 2, f"the engine did not start: {sorted((work).glob('*.log'))}"
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    assert _wait_gone(groups) == []
