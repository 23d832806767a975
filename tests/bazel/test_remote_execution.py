"""Remote execution on a real engine (tools/remote/engine.py: BuildGrid, PostgreSQL, buildbox-casd and
buildbox-worker with the bubblewrap runner, on 127.0.0.1): every test action runs on the worker, in a sandbox
whose root is the action's staged inputs plus the worker's own system (Debian unstable, its python3 a newer one
than the build's), with no view of the checkout, the output base or the helper's cache.

* The engine itself: it stops every process it started (and what they forked) when its block ends, and when its
  starter is killed while it starts.
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
import re
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
    SUFFIX,
    BazelResult,
    BazelWorkspace,
    bound_scratch,
    copy_checkout,
    fakecuda,
    index_wheels,
    make_shared_hub_workspace,
    process_summary,
    summary_statuses,
    write_lock,
)
from support.buildpython import BUILD_PYTHON, INTERPRETER_TEST, register_build_python, relocatable_python

pytestmark = pytest.mark.bazel

ENGINE_SCRIPT = Path(remote_engine.__file__)
# The engine's limit on one action's input tree, and the fixture wheel scaled to it: two libraries (incompressible
# bytes) that together exceed it and each stay under it.
LIMIT = 4 << 20
BIG_LIBRARIES = {"bigpkg/lib/libbig_a.so": 3 << 20, "bigpkg/lib/libbig_b.so": 5 << 19}


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """Where the workspaces lie, bound into the offline launcher's root (the e2e module lies two folders up)."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    reason = remote_engine.available()
    if reason is not None and os.environ.get("RPW_REMOTE_ENGINE_REQUIRED"):
        pytest.fail(f"RPW_REMOTE_ENGINE_REQUIRED is set (.ci/run installed the engine), yet: {reason}")
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


def _remote_test(
    workspace: BazelWorkspace, server: remote_engine.Engine, *targets: str, flags: tuple[str, ...] = ()
) -> BazelResult:
    """`bazel test` of ``targets`` with every action on ``server``, none from a cache (local or remote)."""
    return workspace.run("test", "--keep_going", "--nocache_test_results", *server.bazel_flags(), *flags, *targets)


def _assert_every_test_ran_remotely_and_passed(result: BazelResult, tests: list[str]) -> None:
    assert summary_statuses(result.output) == dict.fromkeys(tests, "PASSED"), result.tail()
    assert f"Executed {len(tests)} out of {len(tests)} test" in result.output, result.tail()
    processes = process_summary(result.output)
    # Each test is one test action and its XML report's action (Bazel's split XML generation): both on the worker.
    assert set(processes) <= {"remote", "internal"} and processes.get("remote") == 2 * len(tests), result.tail(12)


def test_e2e_bzlmod_runs_every_test_on_the_worker_under_the_builds_python(
    scratch: Path, engine: remote_engine.Engine
) -> None:
    checkout = copy_checkout(scratch / "e2e")
    root = checkout / "e2e" / "bzlmod"
    register_build_python(root, relocatable_python(scratch / "e2e-python"))
    (checkout / "logs").mkdir()
    workspace = BazelWorkspace(root, checkout / "logs")
    try:
        result = _remote_test(workspace, engine, "//...")
    finally:
        workspace.shutdown()
    _assert_every_test_ran_remotely_and_passed(result, ["//:patched_six_test", INTERPRETER_TEST])


def _big_wheel(pypi: Path) -> Path:
    """``bigpkg``: BIG_LIBRARIES, gcc-built libraries of incompressible bytes, so the wheel exceeds LIMIT."""
    build = pypi / "build-big"
    build.mkdir(parents=True)
    files = {"bigpkg/__init__.py": b""}
    for member, size in BIG_LIBRARIES.items():
        name = member.rsplit("/", 1)[1]
        files[member] = fakecuda.blob_library(build, name, size, f"-Wl,-soname,{name}").read_bytes()
    return fakecuda.build_wheel(pypi, "bigpkg", "1.0", files, executable=list(BIG_LIBRARIES))


BIG_MODULE = """
# The split against the engine's limit: bigpkg whole, and split below the limit (test_remote_execution.py).
patched.patched_wheel(name = "bigpkg", hub = "whole", requirement = "bigpkg==1.0", suffix = "{suffix}")
patched.patched_wheel(
    name = "bigpkg",
    hub = "halves",
    requirement = "bigpkg==1.0",
    split_into = "bigpkg-libs",
    split_max_size = {limit},
    suffix = "{suffix}",
)
patched.index(name = "whole", requirements_lock = "//:big_requirements_lock.txt", index_url = "{index_url}")
patched.index(name = "halves", requirements_lock = "//:big_requirements_lock.txt", index_url = "{index_url}")
use_repo(patched, "halves", "whole")
pip.parse(name = "pypi_whole", requirements_lock = "@whole//:requirements_lock.txt")
pip.parse(name = "pypi_halves", requirements_lock = "@halves//:requirements_lock.txt")
use_repo(pip, "pypi_halves", "pypi_whole")
"""

ONE_WHEEL_BZL = """\
def _one_wheel_impl(ctx):
    picked = [wheel for wheel in ctx.files.wheels if wheel.basename.startswith(ctx.attr.distribution + "-")]
    if len(picked) != 1:
        fail("%s: %d wheels of %s" % (ctx.label, len(picked), ctx.attr.distribution))
    return [DefaultInfo(files = depset(picked), runfiles = ctx.runfiles(files = picked))]

# One wheel file of a hub's `:wheels`, alone (no action: picked at analysis).
one_wheel = rule(
    implementation = _one_wheel_impl,
    attrs = {"distribution": attr.string(mandatory = True), "wheels": attr.label(mandatory = True)},
)
"""

BIG_LOAD = 'load("//:one_wheel.bzl", "one_wheel")\n'

BIG_BUILD = """
exports_files(["big_requirements_lock.txt"])

# Each test takes one wheel file of a hub as its input, as a packaging rule would (an image layer, an upload).
[one_wheel(name = name + "_wheel", distribution = distribution, wheels = hub) for name, distribution, hub in [
    ("whole", "bigpkg", "@whole//:wheels"),
    ("halves_main", "bigpkg", "@halves//:wheels"),
    ("halves_libs", "bigpkg_libs", "@halves//:wheels"),
]]

[sh_test(
    name = name + "_wheel_test",
    srcs = ["check_wheel.sh"],
    args = ["$(rootpath :%s_wheel)" % name],
    data = [":%s_wheel" % name],
) for name in ["whole", "halves_main", "halves_libs"]]

# No driver: the probe fails alike in both layouts, which layout_test does not hold against the layout.
layout_test(
    name = "nodriver_layout_test",
    deps = [requirement("faketorch")],
    pip_closure = "@shared//:pip_closure.json",
    probe = "import faketorch; faketorch.answer(); import ctypes; ctypes.CDLL('libfake_driver_absent.so.1')",
)
"""

CHECK_WHEEL = """\
#!/bin/sh
# A wheel is a zip archive: it must start with the local file header's signature.
test "$(head -c 2 "$1")" = PK || { echo "$1 is not a wheel"; exit 1; }
echo "$1: $(wc -c <"$1") bytes"
"""

WHEEL_TESTS = ["//:whole_wheel_test", "//:halves_main_wheel_test", "//:halves_libs_wheel_test"]
PYTHON_TESTS = ["//:nodriver_layout_test", "//:shared_layout_test", "//:shared_test", INTERPRETER_TEST]


@pytest.fixture(scope="module")
def hub(scratch: Path) -> Iterator[BazelWorkspace]:
    """The fixture hub of test_remote_cache.py (faketorch patched, split, preloaded), a layout_test whose probe
    fails alike in both layouts, the build's Python, and bigpkg's hubs `whole` and `halves`; fetched once."""
    pypi = scratch / "hub" / "pypi"
    wheels = fakecuda.build_fake_cuda_wheels(pypi)
    big = _big_wheel(pypi)
    index_wheels(pypi)
    checkout = copy_checkout(scratch / "hub" / "checkout")
    workspace = make_shared_hub_workspace(checkout / "e2e" / "remote_hub", pypi, wheels, "../..")
    write_lock([big], workspace.root / "big_requirements_lock.txt")
    (workspace.root / "check_wheel.sh").write_text(CHECK_WHEEL, encoding="utf-8")
    (workspace.root / "check_wheel.sh").chmod(0o755)
    values = {"suffix": SUFFIX, "limit": str(LIMIT), "index_url": (pypi / "simple").as_uri()}
    with (workspace.root / "MODULE.bazel").open("a", encoding="utf-8") as module:
        module.write(BIG_MODULE.format(**values))
    (workspace.root / "one_wheel.bzl").write_text(ONE_WHEEL_BZL, encoding="utf-8")
    build = workspace.root / "BUILD.bazel"
    build.write_text(BIG_LOAD + build.read_text(encoding="utf-8") + BIG_BUILD, encoding="utf-8")
    register_build_python(workspace.root, relocatable_python(scratch / "hub-python"))
    try:
        yield workspace
    finally:
        workspace.shutdown()


def _verdicts(workspace: BazelWorkspace) -> dict[str, list[str]]:
    """Each layout_test's verdict lines, from the test logs of the last run."""
    return {
        target: re.findall(r"^layout_test: .*$", workspace.test_log(target.split(":")[1]), re.MULTILINE)
        for target in PYTHON_TESTS
        if "layout" in target
    }


def test_the_fixture_hub_runs_every_test_on_the_worker_with_the_verdicts_it_has_locally(
    hub: BazelWorkspace, engine: remote_engine.Engine
) -> None:
    local = hub.run("test", "--keep_going", *PYTHON_TESTS, *WHEEL_TESTS)
    # Locally (no limit) every test passes, the whole wheel's too.
    assert summary_statuses(local.output) == dict.fromkeys(PYTHON_TESTS + WHEEL_TESTS, "PASSED"), local.tail()
    local_verdicts = _verdicts(hub)
    assert "both fail alike" in "\n".join(local_verdicts["//:nodriver_layout_test"]), local_verdicts
    remote = _remote_test(hub, engine, *PYTHON_TESTS)
    _assert_every_test_ran_remotely_and_passed(remote, PYTHON_TESTS)
    assert _verdicts(hub) == local_verdicts
    log = hub.test_log("build_python/interpreter_test")
    assert "interpreter: /" in log and f" {BUILD_PYTHON}\n" in log, log


def test_the_unsplit_wheel_hits_the_engines_input_limit_and_the_split_pair_passes(
    hub: BazelWorkspace, scratch: Path
) -> None:
    work = scratch / "limited-engine"
    with remote_engine.serve(work, input_limit=LIMIT) as limited:
        started = dict(reversed(line.split()) for line in (work / "pids").read_text(encoding="utf-8").splitlines())
        assert set(started) == {"postgres", "buildgrid", "casd", "worker"}
        groups = {int(pid) for pid in started.values()}
        assert len(_groups_alive(groups)) >= len(groups)
        # Each external file once in the runfiles (Bazel 7 also puts it under _main/external/ by default).
        result = _remote_test(hub, limited, *WHEEL_TESTS, flags=("--nolegacy_external_runfiles",))
    # The engine's end stops every process it started, and what they forked.
    assert _wait_gone(groups, seconds=2) == []
    statuses = summary_statuses(result.output)
    assert statuses["//:halves_main_wheel_test"] == statuses["//:halves_libs_wheel_test"] == "PASSED", result.tail()
    assert statuses["//:whole_wheel_test"] != "PASSED", result.tail()
    refusal = hub.test_log("whole_wheel_test")
    assert f"exceeds the engine's limit of {LIMIT} bytes" in refusal, refusal
    for half in ("halves_main_wheel_test", "halves_libs_wheel_test"):
        assert re.search(r"\.whl: \d+ bytes", hub.test_log(half)), hub.test_log(half)
