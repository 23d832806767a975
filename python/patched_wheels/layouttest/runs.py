"""The two runs of a layout_test's probe: the probe program's own ``sys.path`` (its wheel entries), the one
site-packages of links made from them (:mod:`patched_wheels.loading.mergedtree`), and doctor --run's child in
both layouts at once, each supervised and stopped at a :class:`Deadline` inside Bazel's own timeout; a signal
(Bazel's kill, Ctrl-C) stops both before the runner ends."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Iterator, Sequence

from patched_wheels.base.supervise import allow_runs, stop_runs, supervise
from patched_wheels.errors import UsageError
from patched_wheels.layouttest.config import Config
from patched_wheels.loading.layout import FLAT, LAYOUT_TEXT
from patched_wheels.loading.mergedtree import Merged, inside, merge
from patched_wheels.loading.probe import (
    CHILD,
    TIMEOUT_VARIABLE,
    Comparison,
    Launch,
    LayoutContents,
    RunResult,
    create_flat_environment,
    run_child,
    run_timeout,
)

RUNFILES = "runfiles"
"""The kind of the run in the test's own layout (FLAT is the other)."""

# The probe program's sys.path, written (the program's own sys.path[0] first) to the file named after it.
_SYS_PATH_CODE = "import json, sys; open({!r}, 'w', encoding='utf-8').write(json.dumps(sys.path))"

_MAX_SYS_PATH = 1 << 20

# Of Bazel's $TEST_TIMEOUT, what the runs leave to the runner to report and clean up before Bazel kills it.
_TIMEOUT_MARGIN = 0.1

_MIN_MARGIN_S = 5


@dataclass(frozen=True)
class Deadline:
    """When the runs must have ended: $RULES_PATCHED_WHEELS_RUN_TIMEOUT, and inside Bazel's $TEST_TIMEOUT."""

    seconds: int
    at: float
    """time.monotonic() at which they are stopped."""
    why: str

    @classmethod
    def start(cls, environment: dict[str, str]) -> "Deadline":
        """The deadline of a runner that starts now, under ``environment`` (its own)."""
        own, bazel = run_timeout(), environment.get("TEST_TIMEOUT", "")
        seconds, why = own, f"{TIMEOUT_VARIABLE}={own}"
        if bazel.isascii() and bazel.isdigit() and int(bazel) > 0:
            inside = int(int(bazel) - max(_MIN_MARGIN_S, int(bazel) * _TIMEOUT_MARGIN))
            if inside < own:
                seconds, why = max(1, inside), f"the test's timeout is {bazel} s: give it a larger size or timeout"
        return cls(seconds, time.monotonic() + seconds, why)

    def left(self) -> int:
        """Whole seconds left (at least 1: a run always starts)."""
        return max(1, math.ceil(self.at - time.monotonic()))  # never before `at`: a run stopped is past it


def check_imports(test: str, modules: Sequence[str], entries: Sequence[str], wheel_entries: Sequence[str]) -> None:
    """Every top-level module the probe imports must be found on the test's ``sys.path`` (its deps)."""
    for module in modules:
        top = module.split(".")[0]
        if top in sys.builtin_module_names or PathFinder.find_spec(top, list(entries)) is not None:
            continue
        found = sorted({name for entry in wheel_entries for name in _top_level_names(entry)})
        raise UsageError(
            f"layout_test {test}: probe imports {top}, which none of deps provides (the deps' wheels hold: {', '.join(found) or 'nothing'})"
        )


def _top_level_names(entry: str) -> Iterator[str]:
    for name in os.listdir(entry):
        if name.endswith((".dist-info", ".data")) or name.startswith(("_", ".")):
            continue
        yield name.split(".")[0]


def is_wheel_entry(entry: str, runfiles: str) -> bool:
    """Whether a ``sys.path`` entry holds installed wheels of the deps: it is in the runfiles, links resolved
    (the interpreter's own site-packages is not, nor a link in the runfiles to a directory outside them),
    and holds a ``*.dist-info`` directory."""
    real = os.path.realpath(entry or os.curdir)
    if real == os.path.realpath(runfiles) or not inside(real, os.path.realpath(runfiles)):
        return False
    try:
        return any(
            name.endswith(".dist-info") and os.path.isdir(os.path.join(entry, name)) for name in os.listdir(entry)
        )
    except OSError:  # a zip file, a directory that does not exist
        return False


def flat_path(entries: Sequence[str], wheel_entries: Sequence[str], site_packages: Path) -> list[str]:
    """The flat run's ``PYTHONPATH``: the test's ``sys.path`` with its wheel entries replaced by one site-packages
    where the first of them was (``-c``'s empty first entry dropped: the run's own)."""
    wheels, merged, path = set(wheel_entries), False, []
    for entry in entries[1:]:
        if entry in wheels:
            if not merged:
                path.append(str(site_packages))
                merged = True
        else:
            path.append(entry)
    return path


def real_sys_path(config: Config, environment: dict[str, str], work: Path, deadline: Deadline) -> list[str]:
    """The ``sys.path`` of the probe program as Bazel launches it (through :data:`CHILD`, supervised: the deps'
    own start-up code, a ``sitecustomize``, runs there too)."""
    report = work / "sys-path.json"
    command = [str(config.program), CHILD]
    captured = supervise(command, _SYS_PATH_CODE.format(str(report)), environment, work, deadline.left(), wanted=set())
    where = (
        f"layout_test {config.test}: {config.program.name} (the probe program, with deps) did not report its sys.path"
    )
    if captured is None:
        raise UsageError(
            f"{where}: still running after {deadline.seconds} s ({deadline.why}); stopped: a dep's start-up code never ends"
        )
    try:
        if captured.returncode != 0 or not report.is_file():
            raise ValueError(
                captured.stderr.first_error or captured.stderr.last or f"exit status {captured.returncode}"
            )
        if report.stat().st_size > _MAX_SYS_PATH:
            raise ValueError(f"more than {_MAX_SYS_PATH} bytes")
        entries = json.loads(report.read_text(encoding="utf-8", errors="surrogateescape"))
        if not (isinstance(entries, list) and all(isinstance(entry, str) for entry in entries)):
            raise ValueError("not a list of strings")
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None
    return entries


def _child_environment() -> dict[str, str]:
    """This test's environment less the PYTHONPATH its own launcher set (the probe program sets its own)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


class Stopped(BaseException):
    """Bazel's kill at the test's timeout (SIGTERM), or Ctrl-C: the runs are stopped, then the runner ends."""


class Signals:
    """SIGTERM (Bazel's kill at the test's timeout) and SIGINT (Ctrl-C) as the runner handles them
    (:func:`stopped_by_signals`): each kills every run at once, those under way and those that start later, and
    raises :class:`Stopped` in the main thread, where it waits for the runs; not while it starts or joins the runs'
    threads (:meth:`deferred`), which would leave one it never waits for, running on beside the work directory's
    removal."""

    def __init__(self) -> None:
        self._deferring = 0
        self._pending: str | None = None
        """The first signal that came while the raise was deferred."""

    def handle(self, signum: int, frame: object) -> None:
        """The handler of both signals (``signal.signal``'s signature)."""
        stop_runs()  # first: a run is never left to its deadline, whatever the main thread is doing
        name = signal.Signals(signum).name
        if self._deferring:
            self._pending = self._pending or name
            return
        raise Stopped(name)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside, a signal stops the runs but its Stopped waits for the end (where it replaces any exception)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            if not self._deferring and self._pending is not None:
                pending, self._pending = self._pending, None  # raised once
                raise Stopped(pending)


@contextmanager
def stopped_by_signals() -> Iterator[Signals]:
    """Inside, runs start (whatever an earlier runner's stop left) and the runner's :class:`Signals` handle
    SIGTERM and SIGINT; afterwards, the handlers before. A stop is not undone at the end: a run's thread the
    runner could not wait for still starts nothing."""
    allow_runs()
    signals, handlers = Signals(), {}
    try:
        with signals.deferred():  # a signal between the two handlers: both installed, both restored
            for signum in (signal.SIGTERM, signal.SIGINT):
                handlers[signum] = signal.signal(signum, signals.handle)
        yield signals
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def run_layouts(
    config: Config, modules: Sequence[str], work: Path, runfiles: str, deadline: Deadline, signals: Signals
) -> tuple[Comparison, Merged]:
    """Both runs of ``config``'s probe (which imports ``modules``): in the test's layout and in one site-packages
    (``work``: a new directory), stopped at ``deadline`` or by ``signals``."""
    # Every run in a thread, the main thread only waiting for them: a signal's Stopped is never raised in the
    # main thread while it starts a run (its child started, not yet registered: never killed), and every thread
    # has ended before the work directory goes.
    pool = ThreadPoolExecutor(max_workers=2)  # at once: the test costs about one run of the probe
    try:
        return _run_layouts(config, modules, work, runfiles, deadline, pool, signals)
    finally:
        with signals.deferred():
            pool.shutdown(cancel_futures=True)


def _run_layouts(
    config: Config,
    modules: Sequence[str],
    work: Path,
    runfiles: str,
    deadline: Deadline,
    pool: ThreadPoolExecutor,
    signals: Signals,
) -> tuple[Comparison, Merged]:
    environment = _child_environment()
    with signals.deferred():
        report = pool.submit(real_sys_path, config, environment, work, deadline)
    entries = report.result()
    wheel_entries = [entry for entry in entries[1:] if is_wheel_entry(entry, runfiles)]
    check_imports(config.test, modules, entries, wheel_entries)
    if not wheel_entries:
        raise UsageError(
            f"layout_test {config.test}: no installed wheel on the probe's sys.path: give deps from a pip hub (requirement(...))"
        )
    # The virtual environment first: a wheel installing where it keeps its interpreter is then found, not run.
    python = create_flat_environment(work / FLAT)
    try:
        merged = merge(wheel_entries, work / FLAT, runfiles)
    except FileExistsError as error:
        taken = os.path.relpath(str(error.filename2 or error.filename), work / FLAT)
        raise UsageError(
            f"layout_test {config.test}: deps: a wheel installs {taken}, where the virtual environment of {LAYOUT_TEXT[FLAT]} keeps its interpreter"
        ) from None
    flat_environment = dict(
        environment, PYTHONPATH=os.pathsep.join(flat_path(entries, wheel_entries, merged.site_packages))
    )
    runs = {
        RUNFILES: (
            Launch([str(config.program), CHILD], environment),
            LayoutContents(merged.libraries, wheel_entries, wheel_entries),
        ),
        FLAT: (
            Launch([str(python), "-c", CHILD], flat_environment),
            LayoutContents(
                merged.libraries, [str(merged.site_packages)], [str(merged.site_packages), str(merged.root)]
            ),
        ),
    }

    def run(kind: str) -> RunResult:
        launch, contents = runs[kind]
        directory = work / f"run-{kind}"
        directory.mkdir()
        try:
            return run_child(kind, launch, config.probe, contents, root=directory, timeout=deadline.left())
        except UsageError:
            if time.monotonic() < deadline.at:
                raise
            where = "in the test's layout" if kind == RUNFILES else f"with {LAYOUT_TEXT[FLAT]}"
            raise UsageError(
                f"{config.subject}: still running after {deadline.seconds} s {where} ({deadline.why}); stopped"
            ) from None

    with signals.deferred():
        futures = [pool.submit(run, kind) for kind in (FLAT, RUNFILES)]
    flat, real = [future.result() for future in futures]
    return Comparison(flat=flat, per_wheel=real), merged
