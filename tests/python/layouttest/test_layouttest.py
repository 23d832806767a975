"""layout_test's runner (patched_wheels.layouttest) outside Bazel, on real ELF fixtures.

A simulated test directory stands in for the runfiles: the files layout_test.bzl writes (the config and
the probe program beside the main) and the wheels installed as rules_python lays them out -- one
``<wheel>/site-packages`` per wheel (what Bazel's py_test gets by default), or all of them in one
directory (rules_python 2.x's ``venvs_site_packages``).  The probe program is the real one of
``python/private``, launched by a shell script that gives it the layout's ``sys.path``, as a py_binary's
launcher does.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import pytest

from patched_wheels.base.supervise import allow_runs, supervise
from patched_wheels.errors import UsageError
from patched_wheels.layouttest import runs
from patched_wheels.layouttest.closurecheck import MAX_MISSING
from patched_wheels.layouttest.config import CONFIG_SUFFIX, MAIN_SUFFIX, PROBE_SUFFIX, Config, check_probe
from patched_wheels.layouttest.main import main
from patched_wheels.layouttest.report import patched_wheel_line, starlark_string
from patched_wheels.layouttest.runs import RUNFILES, flat_path, is_wheel_entry
from patched_wheels.loading.layout import FLAT, PER_WHEEL, Layout, install
from patched_wheels.loading.probe import CHILD
from patched_wheels.lock.closure import FORMAT
from support import extrasfixture, rpathfixture
from support.fakecuda import build_wheel, compile_shared
from support.hostile import NESTED_PAST_THE_PARSER, skip_unless_past_the_parser
from support.stackshapes import PLUGIN_LIBRARIES, build_plugin_stack

PROBE_PROGRAM = Path(__file__).resolve().parents[3] / "python" / "private" / "layout_test_probe.py"
LABEL = "//pkg:plugin_layout_test"


@pytest.fixture(scope="module")
def headers(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """torch's shape, small: a package with a deep directory of headers beside its libraries (one of them in a
    subdirectory of headers), and two wheels sharing a namespace directory."""
    directory = tmp_path_factory.mktemp("headers")
    library = compile_shared(directory, "libhdr.so", "int hdr(void) { return 1; }\n").read_bytes()
    files = {
        f"hdr/include/deep/level{depth}/h{index}.h": b"#pragma once\n" for depth in range(4) for index in range(30)
    }
    files |= {
        "hdr/__init__.py": b"",
        "hdr/lib/libhdr.so": library,
        "hdr/lib/cmake/hdr.cmake": b"",
        "hdr/share/docs/readme.txt": b"",
        "hdr/share/bin/libtool.so": library,
    }
    wheels = [build_wheel(directory, "hdr", "1.0", files, executable=["hdr/lib/libhdr.so", "hdr/share/bin/libtool.so"])]
    for name in ("nsa", "nsb"):
        wheels.append(
            build_wheel(directory, name, "1.0", {f"ns/shared/pkg/{name}.py": b"", f"ns/{name}/__init__.py": b""})
        )
    return wheels


# Run in both layouts; only one site-packages (links) passes: the test's layout has no such tree.
_TREE_PROBE = """import os, site, hdr
sp = site.getsitepackages()[0]
link, real = os.path.islink, lambda path: os.path.isdir(path) and not os.path.islink(path)
assert link(os.path.join(sp, 'hdr/include')), 'headers: one link'
assert os.path.isfile(os.path.join(sp, 'hdr/include/deep/level3/h29.h'))
assert real(os.path.join(sp, 'hdr')) and real(os.path.join(sp, 'hdr/lib')), 'a top-level package, a library: real'
assert link(os.path.join(sp, 'hdr/lib/libhdr.so')) and link(os.path.join(sp, 'hdr/lib/cmake'))
assert real(os.path.join(sp, 'hdr/share')) and link(os.path.join(sp, 'hdr/share/docs')), 'a library deeper: real'
assert real(os.path.join(sp, 'hdr/share/bin')) and link(os.path.join(sp, 'hdr/share/bin/libtool.so'))
assert real(os.path.join(sp, 'ns/shared/pkg')), 'shared by two wheels: file by file'
assert link(os.path.join(sp, 'ns/shared/pkg/nsa.py')) and link(os.path.join(sp, 'ns/shared/pkg/nsb.py'))
"""


def _snapshot(directory: Path) -> dict[str, str]:
    """Every path under ``directory`` (links not followed) with what it is: a link's target, a file's bytes."""
    found = {}
    for parent, directories, files in os.walk(directory):
        for name in directories + files:
            path = os.path.join(parent, name)
            found[os.path.relpath(path, directory)] = (
                "-> " + os.readlink(path)
                if os.path.islink(path)
                else "dir"
                if os.path.isdir(path)
                else Path(path).read_text("latin-1")
            )
    return found


def test_a_directory_of_one_wheel_without_libraries_is_one_link(headers, tmp_path, capsys) -> None:
    """torch/include's 10,000 headers are one link; a directory holding a library, however deep, and one two
    wheels install into stay real directories of links (checked while the flat run runs)."""
    code, out, err = run_main(make_test(tmp_path, headers, _TREE_PROBE), capsys)
    assert code == 1, out + err
    assert out.count("first error: AssertionError") == 1 and "exit status: 0\n" in out, out
    assert out.count("of the wheels' 2 libraries") == 2, out


def test_the_cleanup_leaves_the_test_s_own_files_as_they_were(headers, tmp_path, capsys, monkeypatch) -> None:
    """Removing the merged tree unlinks its directory links; it never removes (or changes) what they link to."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # both runs import from the test's own directories
    main_file = make_test(tmp_path, headers, _TREE_PROBE)
    before = _snapshot(tmp_path)
    code, out, err = run_main(main_file, capsys)
    assert code == 1 and "first error: AssertionError" in out, out + err  # the flat run had its links
    assert _snapshot(tmp_path) == before
    assert len(before) > 120


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory):
    return build_plugin_stack(tmp_path_factory.mktemp("plugin"))


def make_test(
    directory: Path,
    wheels,
    probe: str,
    *,
    one_site_packages: bool = False,
    pip_closure: str = "",
    repository: str = "",
    bzlmod: bool = True,
) -> str:
    """The files of one layout_test in ``directory``; returns its main's path. ``pip_closure``: the closure
    file's path under ``directory`` (which stands in for the runfiles root); ``repository``: the canonical name
    of the repository Bazel says holds it; ``bzlmod``: whether Bazel reads MODULE.bazel."""
    kind = FLAT if one_site_packages else PER_WHEEL
    layout = Layout(kind, PurePosixPath(directory / "installed"))
    for wheel in wheels:
        install(wheel, layout)
    entries = layout.sys_path(wheel.name for wheel in wheels)
    base = directory / "pkg" / "plugin_layout_test"
    base.parent.mkdir(parents=True)
    (base.parent / (base.name + CONFIG_SUFFIX)).write_text(
        json.dumps(
            {
                "probe": probe,
                "test": LABEL,
                "pip_closure": pip_closure,
                "pip_closure_repository": repository,
                "bzlmod": bzlmod,
            }
        ),
        encoding="utf-8",
    )
    program = base.parent / (base.name + PROBE_SUFFIX)
    program.write_text(
        f'#!/bin/sh\nPYTHONPATH={":".join(entries)} exec {sys.executable} -S {PROBE_PROGRAM} "$@"\n', encoding="utf-8"
    )
    program.chmod(0o755)
    return str(base.parent / (base.name + MAIN_SUFFIX))


def run_main(main_file: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The runner on the test of ``make_test`` (its directory standing in for the runfiles)."""
    os.environ["RUNFILES_DIR"] = str(Path(main_file).parents[1])
    try:
        code = main(main_file)
    finally:
        del os.environ["RUNFILES_DIR"]
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_fails_where_one_directory_per_wheel_maps_fewer_libraries(plugin, tmp_path, capsys) -> None:
    """JAX's shape: per wheel the plugin logs and runs on the CPU (exit 0), mapping none of the set."""
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, plugin.code), capsys)
    assert code == 1, out + err
    missing = out.split("NOT in the test's layout:\n", 1)[1]
    for library in PLUGIN_LIBRARIES.values():
        assert library in missing, out
    assert "first error: " in out and "Unable to load CUDA" in out, out
    assert "layout_test: FAILED" in out, out
    stanza = (
        f'patched.patched_wheel(name = "fakeplug-cuda", hub = "HUB", suffix = "preload.1", preload = "auto", probe = '
        f'{json.dumps(plugin.code)}, preload_package = "fakeplugins.xla_fake")'
    )
    assert (
        "fakeplugins.xla_fake has no generated preload: patch its wheel: add to MODULE.bazel (suffix preload.1 is yours to "
        'change: a PEP 440 local label; HUB: the hub of the deps, which pip_closure = "@HUB//:pip_closure.json" names): '
        f"{stanza}" in out
    ), out


def test_passes_in_one_site_packages(plugin, tmp_path, capsys) -> None:
    """rules_python 2.x's venvs_site_packages: the test's layout is one site-packages, and maps the same."""
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, plugin.code, one_site_packages=True), capsys)
    assert code == 0, out + err
    assert "mapped: 2 of the wheels' 2 libraries" in out and "layout_test: PASSED" in out, out


def test_passes_where_both_layouts_fail_alike(plugin, tmp_path, capsys) -> None:
    """No driver: the probe fails the same way in both layouts, which is not the layout's doing."""
    probe = "import fakeplugins.xla_fake, ctypes; ctypes.CDLL('libfake_driver_absent.so.1')"
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, probe, one_site_packages=True), capsys)
    assert code == 0, out + err
    assert "both fail alike" in out and "libfake_driver_absent.so.1" in out, out


def test_a_probe_that_does_not_compile_is_one_error_line(plugin, tmp_path, capsys) -> None:
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, "import fakeplugins.xla_fake as"), capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"patched-wheels: error: layout_test {LABEL}: probe = ") and "does not compile" in err, err
    assert err.count("\n") == 1, err


_NESTED_PROBES = {kind: "import json\n" + source for kind, source in NESTED_PAST_THE_PARSER.items()}


@pytest.mark.parametrize("kind", sorted(_NESTED_PROBES))
def test_a_probe_nested_past_the_parser_is_one_error_line(tmp_path, capsys, kind: str) -> None:
    """Under the 128 KiB a command line carries, yet past CPython's parser: the error of a probe that does not
    compile (exit 2), not a MemoryError or RecursionError traceback."""
    probe = _NESTED_PROBES[kind]
    skip_unless_past_the_parser(probe, kind)

    code, out, err = run_main(make_test(tmp_path, [], probe), capsys)

    assert (code, out) == (2, ""), err
    assert err.startswith(f"patched-wheels: error: layout_test {LABEL}: probe = ") and err.count("\n") == 1, err
    assert err.rstrip("\n").endswith("does not compile: nested too deeply for Python's parser"), err


def test_a_package_not_among_the_deps_is_one_error_line(plugin, tmp_path, capsys) -> None:
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, "import numpy"), capsys)
    assert code == 2 and out == ""
    assert err.startswith(
        f"patched-wheels: error: layout_test {LABEL}: probe imports numpy, which none of deps provides"
    ), err
    assert "fake_cu" in err and err.count("\n") == 1, err


def test_check_probe_names_the_imported_modules_in_order() -> None:
    assert check_probe(
        LABEL, "import jax, os.path\nfrom jax.lib import xla_bridge\nfrom . import x\njax.devices()"
    ) == [
        "jax",
        "os.path",
        "jax.lib",
    ]
    with pytest.raises(UsageError, match="imports nothing"):
        check_probe(LABEL, "print(1)")


def test_a_probe_no_command_line_can_carry_is_one_error_line(plugin, tmp_path, capsys) -> None:
    """Each run gets the probe as one argument: past Linux's 128 KiB the run could not start (E2BIG, which
    named the environment's python)."""
    probe = "import fake_cu\n#" + "x" * (128 << 10)
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, probe), capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert (
        err.startswith(f"patched-wheels: error: layout_test {LABEL}: probe = ")
        and "131088 bytes, more than the 131071" in err
    ), err
    assert len(err) < 2100


def test_flat_path_puts_one_site_packages_where_the_first_wheel_was() -> None:
    entries = ["/main", "/rf/_main", "/rf/a/site-packages", "/rf/lib", "/rf/b/site-packages", "/usr/lib/python3.11"]
    wheels = ["/rf/a/site-packages", "/rf/b/site-packages"]
    assert flat_path(entries, wheels, Path("/venv/site")) == [
        "/rf/_main",
        "/venv/site",
        "/rf/lib",
        "/usr/lib/python3.11",
    ]


def test_the_merged_tree_is_links(plugin, tmp_path, capsys) -> None:
    """No copies: every file of one site-packages is a link to the test's own file (checked while it runs)."""
    probe = (
        "import os, site, fakeplugins.xla_fake\n"
        "lib = os.path.join(site.getsitepackages()[0], 'fake_cu', 'lib', 'libcu.so.1')\n"
        "assert os.path.islink(lib) and not os.path.islink(os.path.dirname(lib)), lib"
    )
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, probe, one_site_packages=True), capsys)
    # The test's own layout has no link there (the fixture installs real files): only the flat run passes.
    assert code == 1, out + err
    assert "first error: AssertionError" in out and "exit status: 0\n" in out, out
    assert os.listdir(tmp_path / "pkg")  # the test's files stay; the merged tree is gone with its temporary directory


def test_only_entries_in_the_runfiles_hold_the_deps_wheels(tmp_path) -> None:
    """The interpreter's own site-packages (on sys.path without -S, as under rules_python 0.22.1) is not a dep."""
    inside, outside = tmp_path / "t.runfiles" / "pypi_a" / "site-packages", tmp_path / "python" / "site-packages"
    for entry in (inside, outside):
        (entry / "a-1.0.dist-info").mkdir(parents=True)
    (tmp_path / "t.runfiles" / "_main").mkdir()
    runfiles = str(tmp_path / "t.runfiles")
    assert is_wheel_entry(str(inside), runfiles) and not is_wheel_entry(str(outside), runfiles)
    assert not is_wheel_entry(str(tmp_path / "t.runfiles" / "_main"), runfiles)


def test_a_file_named_like_a_dist_info_holds_no_deps_wheel(tmp_path) -> None:
    """Issue 52's look-alike: a file (or a link to one) named ``*.dist-info`` is no installed wheel; a link to a
    *.dist-info directory is one, as importlib.metadata reads it."""
    runfiles = tmp_path / "t.runfiles"
    entry = runfiles / "fake" / "site-packages"
    entry.mkdir(parents=True)
    (entry / "fake-1.0.dist-info").write_bytes(b"")
    (entry / "link-1.0.dist-info").symlink_to(entry / "fake-1.0.dist-info")
    assert not is_wheel_entry(str(entry), str(runfiles))
    (runfiles / "real-1.0.dist-info").mkdir()
    (entry / "real-1.0.dist-info").symlink_to(runfiles / "real-1.0.dist-info")
    assert is_wheel_entry(str(entry), str(runfiles))


def test_a_preload_that_misses_libraries_asks_for_the_probe(plugin, tmp_path, capsys) -> None:
    """The package's wheel already has a generated preload (the hub's probe was `import PKG`, say): the fix
    is the same patched_wheel, now with this test's probe."""
    main_file = make_test(tmp_path, plugin.wheels, plugin.code)
    (package,) = (tmp_path / "installed").glob("fakeplug_cuda-*/site-packages/fakeplugins/xla_fake")
    (package / "_patched_wheels_preload.py").write_text('"""Generated, and preloading nothing."""\n', encoding="utf-8")
    code, out, err = run_main(main_file, capsys)
    assert code == 1, out + err
    assert (
        "fakeplugins.xla_fake has a generated preload that does not cover this probe: give its patched_wheel this probe: add to "
        "MODULE.bazel (suffix preload.1 is yours to change: a PEP 440 local label; HUB: the hub of the deps, which "
        'pip_closure = "@HUB//:pip_closure.json" names): patched.patched_wheel(name = "fakeplug-cuda", hub = "HUB", '
        in out
    ), out


def test_data_scheme_libraries_are_linked_where_pip_puts_them(tmp_path, capsys) -> None:
    """A library of the wheel's data scheme (CyFES's): rules_python installs it beside site-packages, in the
    wheel's ``data/``; one site-packages gets it under the environment's prefix, as pip does."""
    wheel = rpathfixture.build_rpath_wheel(tmp_path / "wheels")
    probe = "import os, sys; assert os.path.isfile(os.path.join(sys.prefix, 'pkgdata', 'libdata.so')), sys.prefix"
    code, out, err = run_main(make_test(tmp_path / "test", [wheel], probe), capsys)
    assert code == 1, out + err  # the test's layout has no prefix holding it: only the flat run passes
    assert out.count("of the wheels' 3 libraries") == 2, out  # _ext.so, libdep.so.1 and the data-scheme libdata.so
    assert "first error: AssertionError" in out and "exit status: 0\n" in out, out


# Attacks on the runner: each bad probe or dep is one error line or a FAILED verdict, never a pass it did not
# earn, a hang, a forged line or a process left running.


# The never-ending probes' texts, unique to this pytest process: tools/test runs the suites of several Pythons at
# once, and a marker shared between them would let one suite count, or kill, another's probes.
NEVER_ENDS = {number: f"never-ends-{number}-{os.getpid()}" for number in (1, 2, 3, 4)}


def _left_running(marker: str) -> list[int]:
    """Processes still running that hold ``marker`` (a probe's own text) in their command line."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def markers():
    """Markers of probes that must not outlive their test: whatever a failing runner left is killed after it."""
    given: list[str] = []
    yield given
    for pid in [pid for marker in given for pid in _left_running(marker)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _runner(main_file: str, environment: dict[str, str]) -> subprocess.Popen[str]:
    """The runner as Bazel starts it: its own process, the test's environment."""
    env = dict(
        os.environ,
        PYTHONPATH=str(PROBE_PROGRAM.parents[1]),
        RUNFILES_DIR=str(Path(main_file).parents[1]),
        **environment,
    )
    code = "import sys; from patched_wheels.layouttest.main import main; sys.exit(main(sys.argv[1]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, main_file],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _ended(runner: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """The runner's output once it ended; killed (its session) when it runs past ``timeout``."""
    try:
        return runner.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)
        out, err = runner.communicate()
        return out, err + f"\n(still running after {timeout} s: killed)"


def test_a_probe_that_never_ends_is_stopped_inside_bazel_s_timeout(plugin, tmp_path, markers) -> None:
    """Bazel kills a test at $TEST_TIMEOUT; the runs end before, with one line naming the probe."""
    probe = f"import fake_cu\nwhile {NEVER_ENDS[1]!r}: pass"
    markers.append(NEVER_ENDS[1])
    started = time.monotonic()
    runner = _runner(make_test(tmp_path, plugin.wheels, probe), {"TEST_TIMEOUT": "8", "TEST_TMPDIR": str(tmp_path)})
    out, err = _ended(runner, 60)
    assert time.monotonic() - started < 8 and (runner.returncode, out) == (2, ""), err
    assert err == (
        f"patched-wheels: error: layout_test {LABEL}: probe = {json.dumps(probe)}: still running after 3 s with every wheel in one "
        "site-packages (the test's timeout is 8 s: give it a larger size or timeout); stopped\n"
    ), err
    assert not _left_running(NEVER_ENDS[1]) and sorted(path.name for path in tmp_path.iterdir()) == [
        "installed",
        "pkg",
    ]


def test_bazel_s_kill_stops_the_runs_with_the_runner(plugin, tmp_path, markers) -> None:
    """SIGTERM (Bazel's at the timeout; the runs are in their own sessions, out of its reach): the runner kills
    them, removes its directory and says so, in one line."""
    probe = f"import fake_cu\nwhile {NEVER_ENDS[2]!r}: pass"
    markers.append(NEVER_ENDS[2])
    (tmp_path / "tmp").mkdir()
    runner = _runner(make_test(tmp_path, plugin.wheels, probe), {"TEST_TMPDIR": str(tmp_path / "tmp")})
    deadline = time.monotonic() + 60
    while len(_left_running(NEVER_ENDS[2])) < 2 and time.monotonic() < deadline:  # both runs under way
        time.sleep(0.05)
    runner.send_signal(signal.SIGTERM)
    out, err = _ended(runner, 30)
    assert (runner.returncode, out) == (128 + signal.SIGTERM, ""), err
    assert (
        err
        == f"patched-wheels: error: layout_test {LABEL}: stopped by SIGTERM (Bazel's timeout, or Ctrl-C); its runs were killed\n"
    )
    assert _left_running(NEVER_ENDS[2]) == [] and list((tmp_path / "tmp").iterdir()) == []


@pytest.fixture
def runs_allowed_after():
    """A test that stops the runs in-process leaves them allowed again, whatever it asserted first."""
    yield
    allow_runs()


@pytest.mark.parametrize(
    ("started", "moment"),
    [("report", "thread-start"), ("report", "after-submit"), ("run", "thread-start"), ("run", "after-submit")],
)
@pytest.mark.usefixtures("runs_allowed_after")
def test_a_signal_while_the_runs_start_stops_them_all_before_the_runner_ends(
    plugin, tmp_path, capsys, monkeypatch, markers, started: str, moment: str
) -> None:
    """Bazel's SIGTERM may come while the pool starts a run's thread (sent from the new thread's first step: the
    main thread is still in ``submit``), or just after (the run's child perhaps started, not yet known): the
    runner ends at once, every run stopped, no thread of its own left (CI once saw a run outlive the runner's
    line: the runner never ended). ``started``: the sys.path report's thread (the first), or the second run's."""
    probe = f"import fake_cu\nwhile {NEVER_ENDS[4]!r}: pass"
    markers.append(NEVER_ENDS[4])

    class SignalledWhileStarting(ThreadPoolExecutor):
        def __init__(self, max_workers: int) -> None:
            workers = itertools.count(1)  # the report's thread, then the second run's (the first run reuses it)

            def first_step() -> None:
                if moment == "thread-start" and next(workers) == (1 if started == "report" else 2):
                    os.kill(os.getpid(), signal.SIGTERM)

            super().__init__(max_workers=max_workers, initializer=first_step)

        def submit(self, fn, /, *args, **kwargs):
            future = super().submit(fn, *args, **kwargs)
            if moment == "after-submit" and (fn is runs.real_sys_path if started == "report" else args == (RUNFILES,)):
                os.kill(os.getpid(), signal.SIGTERM)
            return future

    monkeypatch.setattr(runs, "ThreadPoolExecutor", SignalledWhileStarting)
    monkeypatch.setenv("TEST_TIMEOUT", "30")  # the code before this test's: its runs end there
    threads = set(threading.enumerate())
    begun = time.monotonic()
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, probe), capsys)
    assert time.monotonic() - begun < 10 and (code, out) == (128 + signal.SIGTERM, ""), err
    assert (
        err
        == f"patched-wheels: error: layout_test {LABEL}: stopped by SIGTERM (Bazel's timeout, or Ctrl-C); its runs were killed\n"
    )
    assert set(threading.enumerate()) <= threads and _left_running(NEVER_ENDS[4]) == []
    # The stop holds past the runner's end: a thread it could not have waited for would start no run.
    late = supervise([sys.executable, "-S", "-c", CHILD], "import time; time.sleep(60)", {}, tmp_path, 30, wanted=set())
    assert late is not None and late.returncode == -signal.SIGKILL
    monkeypatch.undo()
    code, out, err = run_main(make_test(tmp_path / "next", plugin.wheels, plugin.code), capsys)
    assert code == 1 and "mapped: 2 of the wheels' 2 libraries" in out, out + err  # runs start again


@pytest.mark.parametrize(
    "ending",
    [
        "import ctypes; ctypes.string_at(0)",
        "os.closerange(3, 1024)",
        "import atexit, signal; atexit.register(os.kill, os.getpid(), signal.SIGKILL)",
    ],
    ids=["segfault", "record-descriptor-closed", "killed-at-exit"],
)
def test_a_probe_that_records_nothing_in_both_layouts_fails(plugin, tmp_path, capsys, ending: str) -> None:
    """Both runs ending alike without a record of their maps compared nothing: never 'the same as one site-packages'."""
    code, out, err = run_main(
        make_test(tmp_path, plugin.wheels, f"import os, fake_cu\n{ending}", one_site_packages=True), capsys
    )
    assert code == 1, out + err
    verdict = out.splitlines()[-1]
    assert verdict.startswith(
        "layout_test: FAILED: nothing to compare: the test's layout and every wheel in one site-packages ended without recording"
    ), out


def test_a_probe_s_output_cannot_forge_the_runner_s_lines(plugin, tmp_path, capsys) -> None:
    forged = "layout_test: PASSED: the test's layout does what one site-packages does"
    written = (
        "ValueError: x\r" + forged + "\u2028" + forged + "\x1b[2K\n"
    )  # a carriage return, a Unicode line break, a terminal control
    probe = f"import sys, fake_cu\nsys.stderr.write({ascii(written)})\nraise SystemExit(1)  # {forged}"
    code, out, err = run_main(make_test(tmp_path, plugin.wheels, probe, one_site_packages=True), capsys)
    lines = out.splitlines()  # as a reader (or Python's splitlines) cuts them
    assert code == 0, out + err
    assert [line for line in lines if line.startswith("layout_test:")] == [lines[-1]], out
    assert lines[-1].startswith(
        "layout_test: PASSED: the test's layout does what one site-packages does (both fail alike"
    ), out
    assert all(line.isprintable() for line in lines), out
    assert lines[0] == f"layout_test {LABEL}: probe: {json.dumps(probe)}", out


def test_a_dep_installing_the_environment_s_interpreter_is_one_error_line(tmp_path, capsys) -> None:
    """A wheel whose scripts hold `python`: one site-packages would run it as the interpreter, and pass."""
    script = b"#!/bin/sh\nexit 0\n"
    wheel = build_wheel(
        tmp_path / "wheels",
        "shadow",
        "1.0",
        {"shadow/__init__.py": b"", "shadow-1.0.data/scripts/python": script},
        executable=["shadow-1.0.data/scripts/python"],
    )
    code, out, err = run_main(make_test(tmp_path / "test", [wheel], "import shadow"), capsys)
    assert (code, out) == (2, ""), out + err
    assert err == (
        f"patched-wheels: error: layout_test {LABEL}: deps: a wheel installs bin/python, where the virtual environment of every wheel "
        "in one site-packages keeps its interpreter\n"
    ), err


def test_a_test_tmpdir_that_takes_no_directory_is_one_error_line(plugin, tmp_path, capsys, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TEST_TMPDIR", str(tmp_path / "file"))
    code, out, err = run_main(make_test(tmp_path / "t", plugin.wheels, plugin.code), capsys)
    assert (code, out) == (2, "")
    assert (
        err
        == f"patched-wheels: error: layout_test {LABEL}: TEST_TMPDIR={tmp_path / 'file'}: no new directory there: Not a directory\n"
    ), err


def test_a_dep_whose_start_up_code_never_ends_is_stopped(plugin, tmp_path, markers) -> None:
    """A wheel's sitecustomize runs in every interpreter with the deps, the sys.path report too."""
    markers.append(NEVER_ENDS[3])
    main_file = make_test(tmp_path, plugin.wheels, plugin.code)
    startup = tmp_path / "startup"
    startup.mkdir()
    (startup / "sitecustomize.py").write_text(
        f"import sys\nsys.stdout.write('x' * (1 << 20))\nwhile {NEVER_ENDS[3]!r}: pass\n"
    )
    program = Path(main_file.replace(MAIN_SUFFIX, PROBE_SUFFIX))
    program.write_text(program.read_text().replace("PYTHONPATH=", f"PYTHONPATH={startup}:").replace(" -S ", " "))
    runner = _runner(main_file, {"TEST_TIMEOUT": "7"})
    out, err = _ended(runner, 60)
    assert (runner.returncode, out) == (2, ""), err
    assert err == (
        f"patched-wheels: error: layout_test {LABEL}: plugin_layout_test_layout_probe (the probe program, with deps) did not report its "
        "sys.path: still running after 2 s (the test's timeout is 7 s: give it a larger size or timeout); stopped: a dep's start-up code never ends\n"
    ), err
    assert _left_running(NEVER_ENDS[3]) == []


def test_a_library_whose_name_is_not_utf_8_is_named_in_the_verdict(tmp_path, capsys) -> None:
    """Mapped in one site-packages only, under a name that is not UTF-8 (written by some other installer):
    the verdict names it with its bytes escaped, instead of failing to print it."""
    library = compile_shared(tmp_path, "libodd.so", "int odd(void) { return 1; }\n").read_bytes()
    wheel = build_wheel(tmp_path / "wheels", "odd", "1.0", {"odd/__init__.py": b"", "odd/libodd.so": library})
    probe = (
        "import ctypes, os, site, odd\n"
        "flat = os.path.join(site.getsitepackages()[0], 'odd')\n"
        "if os.path.isdir(flat): ctypes.CDLL(os.path.join(flat, os.fsdecode(b'lib\\xff.so')))"  # a str: 3.13's ctypes refuses bytes
    )
    main_file = make_test(tmp_path / "test", [wheel], probe)
    (installed,) = (tmp_path / "test" / "installed").glob("odd-*/site-packages/odd/libodd.so")
    os.rename(installed, os.path.join(os.fsencode(installed.parent), b"lib\xff.so"))
    code, out, err = run_main(main_file, capsys)
    assert code == 1, out + err
    assert "  mapped in one site-packages, NOT in the test's layout:\n    odd/lib\\xff.so (odd-1.0)\n" in out, out


def test_deps_that_lack_a_wheel_pip_installs_fail_naming_it_where_both_layouts_fail_alike(tmp_path, capsys) -> None:
    """rules_python drops the extras of ``app``'s ``toolkit[rt]``: both layouts fail alike on the missing
    ``tk_rt``, which once passed; judged against pip's closure of the lock, the test fails naming the wheel."""
    from patched_wheels.lock.closure import Closure
    from patched_wheels.lock.requiresdist import read_dist

    wheels = extrasfixture.build_extras_wheels(tmp_path / "wheels")
    closure = Closure(
        {
            "app": read_dist("app", "1.0", ["toolkit[rt]==1.0"], [], origin="app"),
            "toolkit": read_dist("toolkit", "1.0", ['tk-rt==1.0; extra == "rt"'], ["rt"], origin="toolkit"),
            "tk-rt": read_dist("tk-rt", "1.0", [], [], origin="tk-rt"),
        },
        {},
    )
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "pip_closure.json").write_text(json.dumps(closure.to_json()), encoding="utf-8")
    probe = "import app; app.answer()"
    code, out, err = run_main(make_test(tmp_path / "without", [wheels.app, wheels.toolkit], probe), capsys)
    assert code == 0 and "both fail alike" in out, "without pip_closure: the verdict of old"
    code, out, err = run_main(
        make_test(tmp_path, [wheels.app, wheels.toolkit], probe, pip_closure="hub/pip_closure.json"), capsys
    )
    assert code == 1, out + err
    assert (
        "layout_test: FAILED: deps lack tk-rt (toolkit requires 'tk-rt==1.0; extra == \"rt\"' <- app requires 'toolkit[rt]==1.0')"
        in out
    ), out
    code, out, err = run_main(
        make_test(tmp_path / "all", wheels.all, probe, pip_closure="../hub/pip_closure.json"), capsys
    )
    assert code == 0 and "layout_test: PASSED" in out, out + err


def test_the_fix_for_a_plugin_host_names_the_plugin_never_the_host(tmp_path, capsys) -> None:
    """JAX's shape: the probe imports the host (jaxlike), whose plugin another wheel declares by entry point. The
    host's own preload is what fails on a GPU (the hub refuses it), so the fix names the plugin's stanza."""
    from support.stackshapes import SPLIT_PLUGIN_PROBE, build_split_plugin_stack

    stack = build_split_plugin_stack(tmp_path / "wheels")
    code, out, err = run_main(make_test(tmp_path, stack.wheels, SPLIT_PLUGIN_PROBE), capsys)
    assert code == 1, out + err
    (fix,) = [line for line in out.splitlines() if line.startswith("layout_test: fix:")]
    assert fix == (
        "layout_test: fix: jaxlike loads its plugin jaxlike_plugins.xla_fake by entry point jaxlike_plugins:xla_fake: preload the "
        "plugin: add to MODULE.bazel (suffix preload.1 is yours to change: a PEP 440 local label; HUB: the hub of the deps, "
        'which pip_closure = "@HUB//:pip_closure.json" names): patched.patched_wheel(name = "jaxlike-cuda-pjrt", hub = "HUB", '
        f'suffix = "preload.1", preload = "auto", probe = "{SPLIT_PLUGIN_PROBE}", preload_package = "jaxlike_plugins.xla_fake")'
    ), out


# The deps' trees and the config are the user's: a link, a FIFO or a config of another shape is one error line
# or a tree that is not walked, never a walk of the file system, a hang or a traceback.


def _hostile_entry(runfiles: Path) -> Path:
    """A wheel's site-packages in ``runfiles`` with the links and files no install makes: a link to ``/``, one to a
    directory outside the runfiles holding a library, one to its own parent (a cycle), and a FIFO named like a
    library whose writer has written the ELF magic into it."""
    entry = runfiles / "pypi_evil" / "site-packages"
    (entry / "evil-1.0.dist-info").mkdir(parents=True)
    (entry / "evil-1.0.dist-info" / "RECORD").write_text("evil/__init__.py,,\n", encoding="utf-8")
    (entry / "evil").mkdir()
    (entry / "evil" / "__init__.py").write_text("", encoding="utf-8")
    outside = runfiles.parent / "outside"
    outside.mkdir()
    compile_shared(outside, "libout.so", "int out(void) { return 1; }\n")
    os.symlink("/", entry / "evil" / "root")
    os.symlink(outside, entry / "evil" / "out")
    os.symlink("..", entry / "evil" / "loop")
    os.mkfifo(entry / "evil" / "libfifo.so")
    return entry


def test_no_link_is_walked_out_of_the_runfiles_and_no_fifo_is_opened(tmp_path) -> None:
    """A link to ``/`` walked the file system (950 MiB before a kill), a FIFO named ``*.so`` blocked the runner
    until Bazel's timeout: the links out of the runfiles and the cycle are linked as they are, the FIFO is no
    library."""
    from patched_wheels.loading.mergedtree import merge

    runfiles = tmp_path / "t.runfiles"
    entry = _hostile_entry(runfiles)
    fifo = os.open(entry / "evil" / "libfifo.so", os.O_RDWR | os.O_NONBLOCK)  # a writer: an open for reading returns
    try:
        os.write(fifo, b"\x7fELF")
        merged = merge([str(entry)], tmp_path / "flat", str(runfiles))
    finally:
        os.close(fifo)
    package = merged.site_packages / "evil"
    for name, target in (("root", "/"), ("out", str(tmp_path / "outside")), ("loop", str(entry))):
        assert os.path.islink(package / name) and os.path.realpath(package / name) == target, name
    assert merged.libraries == {}, merged.libraries
    assert sorted(os.listdir(package)) == ["__init__.py", "libfifo.so", "loop", "out", "root"]


def test_a_link_inside_the_runfiles_is_walked_once(tmp_path) -> None:
    """rules_python's one site-packages links a package's directory to the wheel's own (in the runfiles): its
    libraries are found; a second link to the same directory is linked as it is."""
    from patched_wheels.loading.mergedtree import merge

    runfiles = tmp_path / "t.runfiles"
    wheel = runfiles / "pypi_lib" / "site-packages"
    (wheel / "lib").mkdir(parents=True)
    compile_shared(wheel / "lib", "libin.so", "int in(void) { return 1; }\n")
    entry = runfiles / "_main" / "venv" / "site-packages"
    (entry / "lib-1.0.dist-info").mkdir(parents=True)
    os.symlink(wheel / "lib", entry / "lib")
    os.symlink(wheel / "lib", entry / "other")  # after lib, by name: the first by name is walked
    merged = merge([str(entry)], tmp_path / "flat", str(runfiles))
    assert [library.path for library in merged.libraries.values()] == ["lib/libin.so"]
    assert os.path.islink(merged.site_packages / "other") and os.path.realpath(merged.site_packages / "other") == str(
        wheel / "lib"
    )


def test_an_entry_that_links_out_of_the_runfiles_holds_no_dep(tmp_path) -> None:
    """A sys.path entry inside the runfiles that is a link to a directory outside them (a system's dist-packages)
    is no wheel of the deps: it stays on PYTHONPATH, never walked."""
    outside = tmp_path / "dist-packages"
    (outside / "a-1.0.dist-info").mkdir(parents=True)
    (tmp_path / "t.runfiles").mkdir()
    os.symlink(outside, tmp_path / "t.runfiles" / "system")
    assert not is_wheel_entry(str(tmp_path / "t.runfiles" / "system"), str(tmp_path / "t.runfiles"))


_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ("[]", "not a layout_test config: expected an object, got []"),
        ("3", "not a layout_test config: expected an object, got 3"),
        (_DEEP, "not a layout_test config: nested too deeply"),
        (
            '{"test": null, "probe": "import a", "pip_closure": "", "pip_closure_repository": "", "bzlmod": true}',
            "not a layout_test config: test = null: expected a string",
        ),
        (
            '{"test": "//:t", "probe": 5, "pip_closure": "", "pip_closure_repository": "", "bzlmod": true}',
            "not a layout_test config: probe = 5: expected a string",
        ),
        (
            '{"test": "//:t", "probe": "import a", "pip_closure": "", "pip_closure_repository": "", "bzlmod": 1}',
            "not a layout_test config: bzlmod = 1: expected true or false",
        ),
        (
            '{"test": "//:t"}',
            "not a layout_test config: missing keys ['bzlmod', 'pip_closure', 'pip_closure_repository', 'probe']",
        ),
        (
            '{"test": "//:t", "probe": "import a", "pip_closure": "", "pip_closure_repository": "", "bzlmod": true, '
            '"program": "/bin/sh"}',
            "not a layout_test config: unknown keys ['program']",
        ),
        ('{"test": "//:t", "probe": "import a"', "not a layout_test config: Expecting"),
        (b'{"test": "\xff"}', "not a layout_test config: 'utf-8' codec can't decode byte 0xff"),
        ("FIFO", "not a regular file (a FIFO, device, socket or directory); not a layout_test config"),
    ],
    ids=[
        "list",
        "number",
        "nested",
        "test-null",
        "probe-number",
        "bzlmod-number",
        "keys-missing",
        "key-unknown",
        "truncated",
        "not-utf-8",
        "fifo",
    ],
)
def test_every_config_error_is_one_line(tmp_path, config: str | bytes, reason: str) -> None:
    """Run as Bazel runs it (a process of its own: a FIFO config hung the old runner, which a test must not)."""
    main_file = make_test(tmp_path, [], "import a")
    path = Path(main_file.replace(MAIN_SUFFIX, CONFIG_SUFFIX))
    path.unlink()
    if config == "FIFO":
        os.mkfifo(path)
    else:
        path.write_bytes(config if isinstance(config, bytes) else config.encode("utf-8"))
    runner = _runner(main_file, {})
    out, err = _ended(runner, 60)
    assert (runner.returncode, out) == (2, ""), err
    assert err.startswith(f"patched-wheels: error: {path}: {reason}") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "kind",
    [
        "truncated",
        "not utf-8",
        "nested",
        "another schema",
        "huge",
        "a 100,000-digit number",
        "a byte-order mark",
        "the format's key twice",
        "fifo",
        "dev-zero-link",
        "dangling-link",
        "directory",
    ],
)
def test_a_pip_closure_that_is_no_closure_file_is_one_error_line(plugin, tmp_path, capsys, kind: str) -> None:
    """pip_closure is a label the user names: whatever it points at is one error line naming it, never a hang or
    a traceback, and no verdict."""
    from support.hostile import make_special_file

    (tmp_path / "hub").mkdir()
    bad = tmp_path / "hub" / "pip_closure.json"
    contents = {
        "truncated": b'{"format": "rules_patched_wheels.pip_closure/2", "root_extras": {',
        "not utf-8": b'{"format": "\xff"}',
        "nested": _DEEP.encode(),
        "another schema": b'{"format": "rules_patched_wheels.pip_closure/2", "root_extras": [], "projects": {}}',
        "huge": b" " * (64 << 20) + b"{}",
        "a 100,000-digit number": b'{"format": ' + b"9" * 100_000 + b"}",  # int() refuses over 4,300 digits
        "a byte-order mark": b'\xef\xbb\xbf{"format": "rules_patched_wheels.pip_closure/2"}',
        "the format's key twice": b'{"format": "rules_patched_wheels.pip_closure/2", "format": "x", "root_extras": {}, '
        b'"projects": {}}',
    }
    if kind in contents:
        bad.write_bytes(contents[kind])
    elif kind == "directory":
        bad.mkdir()
    else:
        make_special_file(kind, bad)
    code, out, err = run_main(
        make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json"), capsys
    )
    assert code == 2 and "layout_test: " not in out, out
    (line,) = err.splitlines()
    assert line.startswith(f'patched-wheels: error: layout_test {LABEL}: pip_closure = "hub/pip_closure.json": '), line


# The fix line is a patched_wheel the user pastes where the hub of the deps is declared: complete (hub, suffix),
# in that declaration's spelling, every string a Starlark literal of the value.

_PROBE_ATTRIBUTES = [("preload", "auto"), ("probe", "import a\nprint('x')"), ("preload_package", "a")]


@pytest.mark.parametrize(
    ("repository", "bzlmod", "expected"),
    [
        (
            "rules_patched_wheels~~patched~patched_pypi",
            True,
            'add to MODULE.bazel (suffix preload.1 is yours to change: a PEP 440 local label): patched.patched_wheel(name = "a-b", '
            'hub = "patched_pypi", suffix = "preload.1", preload = "auto", probe = "import a\\nprint(\'x\')", preload_package = "a")',
        ),
        (
            "rules_patched_wheels++patched+patched_pypi",
            True,
            'add to MODULE.bazel (suffix preload.1 is yours to change: a PEP 440 local label): patched.patched_wheel(name = "a-b", '
            'hub = "patched_pypi", suffix = "preload.1", preload = "auto", probe = "import a\\nprint(\'x\')", preload_package = "a")',
        ),
        (
            "patched_pypi",
            False,
            'add to patched_index(name = "patched_pypi", wheels = [...]) in WORKSPACE (suffix preload.1 is yours to change: a PEP '
            '440 local label): patched_wheel(name = "a-b", suffix = "preload.1", preload = "auto", probe = "import a\\nprint(\'x\')", '
            'preload_package = "a")',
        ),
        (
            "patched_pypi",
            True,  # bzlmod, and the hub a repository of WORKSPACE.bzlmod: its patched_index takes the wheel
            'add to patched_index(name = "patched_pypi", wheels = [...]) in WORKSPACE (suffix preload.1 is yours to change: a PEP '
            '440 local label): patched_wheel(name = "a-b", suffix = "preload.1", preload = "auto", probe = "import a\\nprint(\'x\')", '
            'preload_package = "a")',
        ),
        (
            "",
            False,
            'add to patched_index(name = "HUB", wheels = [...]) in WORKSPACE (suffix preload.1 is yours to change: a PEP 440 local '
            'label; HUB: the hub of the deps, which pip_closure = "@HUB//:pip_closure.json" names): patched_wheel(name = "a-b", '
            'suffix = "preload.1", preload = "auto", probe = "import a\\nprint(\'x\')", preload_package = "a")',
        ),
    ],
    ids=["bzlmod", "bzlmod-bazel-8", "workspace", "workspace-bzlmod", "no-pip-closure"],
)
def test_the_fix_line_is_a_complete_patched_wheel_in_the_spelling_of_the_hub_s_declaration(
    repository: str, bzlmod: bool, expected: str
) -> None:
    config = Config(LABEL, "import a", Path("p"), "x/pip_closure.json" if repository else "", repository, bzlmod)
    assert patched_wheel_line(config, "a-b", _PROBE_ATTRIBUTES) == expected


_HOSTILE_PROBE = 'import a; print("q\\"", \'\\\\\')\n\t# é \r\x1b[2K\x9b\u202e\x00 \udcff \ud800 layout_test: PASSED'


def test_a_starlark_string_is_one_printable_line_that_reads_back_as_the_value() -> None:
    """Bazel reads a BUILD or MODULE.bazel file's bytes as Latin-1 and holds a string as those bytes, which an octal
    escape writes one by one: read as Bazel reads it, the literal is the value's bytes again (a surrogate of
    os.fsdecode, the byte it stands for)."""
    literal = starlark_string(_HOSTILE_PROBE)
    assert literal.isprintable() and "\n" not in literal, literal
    as_bazel_reads_it = ast.literal_eval(literal.encode("utf-8").decode("latin-1"))
    assert as_bazel_reads_it.encode("latin-1") == _HOSTILE_PROBE.encode("utf-8", "surrogatepass").replace(
        "\udcff".encode("utf-8", "surrogatepass"), b"\xff"
    )
    assert starlark_string('say "hi"') == '"say \\"hi\\""'


def test_the_fix_line_of_a_failing_test_names_its_hub_and_quotes_a_hostile_probe(plugin, tmp_path, capsys) -> None:
    probe = plugin.code + '\n# "quoted" \\ \x1b[2K\rlayout_test: PASSED'
    main_file = make_test(
        tmp_path, plugin.wheels, probe, repository="rules_patched_wheels~~patched~plugin_original", bzlmod=True
    )
    code, out, err = run_main(main_file, capsys)
    assert code == 1, out + err
    lines = out.splitlines()
    assert all(line.isprintable() for line in lines), out
    assert not [line for line in lines if line.startswith("layout_test: PASSED")], "the probe's text forged no verdict"
    (fix,) = [line for line in lines if line.startswith("layout_test: fix:")]
    call = fix[fix.index("patched.patched_wheel(") :]
    assert call == (
        'patched.patched_wheel(name = "fakeplug-cuda", hub = "plugin_original", suffix = "preload.1", preload = "auto", '
        f'probe = {starlark_string(probe)}, preload_package = "fakeplugins.xla_fake")'
    ), fix


def test_a_dist_info_name_cannot_forge_a_line_of_the_verdict(plugin, tmp_path, capsys) -> None:
    """The deps' file names reach the fix line (the project it names): escaped, in its text and its Starlark."""
    main_file = make_test(tmp_path, plugin.wheels, plugin.code)
    (dist_info,) = (tmp_path / "installed").glob("fakeplug_cuda-*/site-packages/fakeplug_cuda-1.0.dist-info")
    dist_info.rename(dist_info.with_name("fakeplug\x1b]0;x\x07\nLAYOUT_TEST: PASSED\r\x9b-1.0.dist-info"))
    code, out, err = run_main(main_file, capsys)
    assert code == 1, out + err
    lines = out.splitlines()
    assert all(line.isprintable() for line in lines), out
    assert [line for line in lines if line.lower().startswith("layout")] == [
        line for line in lines if line.startswith(("layout_test: FAILED", "layout_test: fix:", f"layout_test {LABEL}:"))
    ], out
    assert 'patched.patched_wheel(name = "fakeplug\\033]0;x\\007\\nlayout-test: passed\\r\\302\\233", ' in out, out


def _chain_closure(path: Path, root: str, links: int) -> None:
    """A pip_closure.json in which ``root`` requires link-1, which requires link-2, ... link-``links``."""
    projects = {
        f"link-{i}": {"version": "1.0", "requires": [_edge(f"link-{i + 1}")] if i < links else [], "extras": {}}
        for i in range(1, links + 1)
    }
    projects[root] = {"version": "1.0", "requires": [_edge("link-1")], "extras": {}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_closure_document(projects)), encoding="utf-8")


def _edge(project: str) -> dict[str, object]:
    return {"project": project, "extras": [], "requirement": f"{project}==1.0", "restored": f"{project}==1.0"}


def _closure_document(projects: dict[str, dict[str, object]]) -> dict[str, object]:
    """pip_closure.json of ``projects`` (name -> version, requires and extras), each providing its extras."""
    dists = {
        name: {"project": name, **dist, "provides": list(dist["extras"])}  # type: ignore[call-overload]
        for name, dist in projects.items()
    }
    return {"format": FORMAT, "root_extras": {}, "dists": dists}


def test_deps_that_lack_many_wheels_list_a_bounded_few_and_count_the_rest(plugin, tmp_path, capsys) -> None:
    _chain_closure(tmp_path / "hub" / "pip_closure.json", "fakeplug-cuda", 30)
    main_file = make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json")
    code, out, err = run_main(main_file, capsys)
    assert code == 1, out + err
    lacking = [line for line in out.splitlines() if line.startswith("layout_test: FAILED: deps lack")]
    assert len(lacking) == MAX_MISSING + 1, out
    assert lacking[-1] == (
        f"layout_test: FAILED: deps lack {30 - MAX_MISSING} more wheels that pip installs from the same lock (the first "
        f"{MAX_MISSING} by name are listed above)"
    ), out
    assert "link-30" not in out and "... 2 more <- fakeplug-cuda requires 'link-1==1.0')" in out, out


# The runner's own peak (VmHWM), its address space capped so that a runner gone quadratic fails fast rather than
# taking the machine's memory (the closure check of old took 488 MiB for 3,000 links, and 20,000 ended in MemoryError).
_MEASURE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from patched_wheels.layouttest.main import main
status = main(sys.argv[1])
sys.stdout.flush()
with open("/proc/self/status", encoding="ascii") as status_file:
    print(next(int(line.split()[1]) for line in status_file if line.startswith("VmHWM:")) * 1024)
sys.exit(status)
"""


def test_the_closure_check_of_a_20000_link_chain_is_linear_in_memory_and_bounded_in_output(plugin, tmp_path) -> None:
    _chain_closure(tmp_path / "hub" / "pip_closure.json", "fakeplug-cuda", 20_000)
    main_file = make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json")
    env = dict(os.environ, PYTHONPATH=str(PROBE_PROGRAM.parents[1]), RUNFILES_DIR=str(Path(main_file).parents[1]))
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, main_file], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    *out, peak = result.stdout.splitlines() or ["0"]
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert len("\n".join(out)) < 64 << 10, f"{len(chr(10).join(out))} characters printed"
    assert int(peak) < 120 << 20, f"peak RSS {int(peak) >> 20} MiB"
    assert sum(line.startswith("layout_test: FAILED: deps lack") for line in out) == MAX_MISSING + 1, out[-5:]


def _five_letters(count: int) -> list[str]:
    return ["".join(chr(97 + number // 26**place % 26) for place in range(5)) for number in range(count)]


@pytest.mark.parametrize(
    ("shape", "count"),
    [
        ("extras the wheel does not provide", 1_000_000),  # 7.6 MiB: 315 MiB before, a state queued per extra
        ("extras the wheel provides", 300_000),  # 7.7 MiB, each extra also in provides: 440,000 made 8.0 MiB in /1
        ("over the bound", 1_200_000),  # 9.2 MiB: 364 MiB before (read up to 64 MiB), now one error line
    ],
)
def test_a_pip_closure_of_many_extras_stays_under_200_mib(plugin, tmp_path, shape: str, count: int) -> None:
    """An edge asking half a million extras (issue 52, cause 3, a new variant): what the check keeps per extra is
    one string in a set, and only for an extra the wheel provides; the file's bound keeps Python's objects of it
    under 200 MiB."""
    extras = _five_letters(count)
    provided = {extra: [] for extra in extras} if shape == "extras the wheel provides" else {}
    projects = {
        "fakeplug-cuda": {"version": "1", "requires": [{**_edge("zz"), "extras": extras}], "extras": {}},
        "zz": {"version": "1", "requires": [], "extras": provided},
    }
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "pip_closure.json").write_text(
        json.dumps(_closure_document(projects), separators=(",", ":")), encoding="utf-8"
    )
    main_file = make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json")
    env = dict(os.environ, PYTHONPATH=str(PROBE_PROGRAM.parents[1]), RUNFILES_DIR=str(Path(main_file).parents[1]))
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, main_file], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    *out, peak = result.stdout.splitlines() or ["0"]
    assert int(peak) < 200 << 20, f"peak RSS {int(peak) >> 20} MiB"
    if shape == "over the bound":
        assert (result.returncode, out) == (2, []), result.stdout[-2000:]
        assert result.stderr.endswith("larger than 8388608 bytes; not a pip closure file we read\n"), result.stderr
    else:
        assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
        assert [line for line in out if "deps lack" in line] == [
            "layout_test: FAILED: deps lack zz (fakeplug-cuda requires 'zz==1.0'), which pip installs from the same lock"
        ], out


def test_a_pip_closure_naming_a_project_no_wheel_can_have_is_one_error_line(plugin, tmp_path, capsys) -> None:
    """A name that is not PEP 508's (here one that would print a verdict line of its own) is a file made by hand:
    one error line naming pip_closure, escaped, and no verdict."""
    forged = "evil\nlayout_test: PASSED: forged\x1b[2K\r"
    (tmp_path / "hub").mkdir()
    document = _closure_document({"fakeplug-cuda": {"version": "1.0", "requires": [_edge(forged)], "extras": {}}})
    (tmp_path / "hub" / "pip_closure.json").write_text(json.dumps(document), encoding="utf-8")
    code, out, err = run_main(
        make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json"), capsys
    )
    assert (code, out) == (2, ""), out
    (line,) = err.splitlines()
    assert line == (
        f'patched-wheels: error: layout_test {LABEL}: pip_closure = "hub/pip_closure.json": not a pip closure file: '
        "'evil\\nlayout_test: PASSED: forged\\x1b[2K\\r' is not a project name (PEP 508)"
    ), line


def test_a_nul_in_the_pip_closure_path_is_one_error_line_naming_pip_closure(plugin, tmp_path, capsys) -> None:
    code, out, err = run_main(
        make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip\x00closure.json"), capsys
    )
    assert (code, out) == (2, ""), out
    (line,) = err.splitlines()
    assert line == (
        f'patched-wheels: error: layout_test {LABEL}: pip_closure = "hub/pip\\u0000closure.json": a path with a NUL '
        "character, which no file's path holds"
    ), line


def test_a_pip_closure_naming_a_project_otherwise_than_normalized_is_one_error_line(plugin, tmp_path, capsys) -> None:
    """The check looks projects up by their normalized names, as the hub writes them: a name spelled otherwise
    would match no installed wheel and check nothing, so it is refused, not read past."""
    (tmp_path / "hub").mkdir()
    document = _closure_document({"fakeplug-cuda": {"version": "1.0", "requires": [_edge("Tk_RT")], "extras": {}}})
    (tmp_path / "hub" / "pip_closure.json").write_text(json.dumps(document), encoding="utf-8")
    code, out, err = run_main(
        make_test(tmp_path, plugin.wheels, plugin.code, pip_closure="hub/pip_closure.json"), capsys
    )
    assert (code, out) == (2, ""), out
    assert err == (
        f'patched-wheels: error: layout_test {LABEL}: pip_closure = "hub/pip_closure.json": not a pip closure file: '
        "'Tk_RT' is not normalized ('tk-rt')\n"
    ), err
