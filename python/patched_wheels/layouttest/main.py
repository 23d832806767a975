"""A layout_test's runner, as Bazel runs it: the test's main (``python/private/layout_test_main.py``) calls
:func:`main` with its own path; the config, the runs, the closure check and the report are the package's other
modules."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

from patched_wheels.errors import PatchedWheelsError, UsageError, one_line
from patched_wheels.layouttest.closurecheck import closure_lines, read_pip_closure
from patched_wheels.layouttest.config import Config, check_probe, read_config, runfiles_root
from patched_wheels.layouttest.report import format_verdict, passed
from patched_wheels.layouttest.runs import Deadline, Stopped, run_layouts, stopped_by_signals


def _work_directory(config: Config) -> tempfile.TemporaryDirectory[str]:
    """A new directory for both layouts under $TEST_TMPDIR (Bazel's), else the system's."""
    where = os.environ.get("TEST_TMPDIR")
    try:
        return tempfile.TemporaryDirectory(prefix="layout-test-", dir=where)
    except OSError as error:
        raise UsageError(
            f"layout_test {config.test}: TEST_TMPDIR={where or tempfile.gettempdir()}: no new directory there: {error.strerror}"
        ) from None


def main(main_file: str) -> int:
    """Run the test whose main is ``main_file``: 0 when its layout does what one site-packages does, 1 when not,
    2 with one ``patched-wheels: error:`` line when the test itself is wrong (its probe, its deps)."""
    name = main_file
    try:
        with stopped_by_signals() as signals:  # a signal from here on: its one line, its runs killed
            config = read_config(main_file)
            name = config.test
            modules = check_probe(config.test, config.probe)
            runfiles = runfiles_root(main_file)
            deadline = Deadline.start(dict(os.environ))
            with _work_directory(config) as temp:
                closure = read_pip_closure(config, runfiles)
                comparison, merged = run_layouts(config, modules, Path(temp).resolve(), runfiles, deadline, signals)
                incomplete = closure_lines(closure, comparison, merged)
                print(format_verdict(config, comparison, merged, modules, incomplete))
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as error:
        print(f"patched-wheels: error: {one_line(f'layout_test {main_file}: {error}')}", file=sys.stderr)
        return 2
    except Stopped as stopped:
        print(
            f"patched-wheels: error: layout_test {name}: stopped by {stopped} (Bazel's timeout, or Ctrl-C); its runs were killed",
            file=sys.stderr,
        )
        return 128 + signal.Signals[str(stopped)].value
    return 0 if passed(comparison) and not incomplete else 1
