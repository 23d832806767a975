"""patched_wheels.base.supervise on real children: what the maps record names, whatever the library's name; runs
stopped, those that start after the stop too."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from patched_wheels.base.supervise import allow_runs, stop_runs, supervise
from patched_wheels.loading.probe import CHILD
from support.fakecuda import compile_shared


@pytest.mark.parametrize(
    "name", ["lib\nline.so", "lib\xff\xfe.so", "lib with spaces.so"], ids=["newline", "not-utf-8", "spaces"]
)
def test_a_mapped_library_is_found_whatever_its_file_name(tmp_path: Path, name: str) -> None:
    """The kernel writes a newline in a maps path as \\012, and a name that is not UTF-8 as its bytes: both
    are the library the caller named (as os.fsdecode names it), not a miss that compares as 'not mapped'."""
    built = compile_shared(tmp_path, "libodd.so", "int odd(void) { return 1; }\n")
    odd = os.path.join(os.fsdecode(tmp_path), os.fsdecode(name.encode("latin-1")))
    shutil.copyfile(built, odd)
    code = f"import ctypes; ctypes.CDLL({odd!r})"  # a str: ctypes encodes it as os.fsencode does (3.13 refuses bytes)
    captured = supervise(
        [sys.executable, "-S", "-c", CHILD], code, dict(os.environ), tmp_path, 60, wanted={odd, str(built)}
    )
    assert captured is not None and captured.returncode == 0, captured and captured.stderr.last
    assert captured.mapped == {odd}


def test_a_run_that_starts_after_a_stop_is_killed_at_once_until_runs_are_allowed(tmp_path: Path) -> None:
    """A signal's stop_runs may come while another thread starts a run, its child not yet registered: that run
    must not go on to its deadline once registered."""
    command = [sys.executable, "-S", "-c", CHILD]
    started = time.monotonic()
    stop_runs()
    try:
        stopped = supervise(command, "import time; time.sleep(60)", dict(os.environ), tmp_path, 30, wanted=set())
    finally:
        allow_runs()
    assert stopped is not None and stopped.returncode == -signal.SIGKILL and stopped.mapped is None
    assert time.monotonic() - started < 20
    allowed = supervise(command, "pass", dict(os.environ), tmp_path, 30, wanted=set())
    assert allowed is not None and (allowed.returncode, allowed.mapped) == (0, set())
