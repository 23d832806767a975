"""Where ``RULES_PATCHED_WHEELS_TIMINGS`` points: the figures go to a regular file, nowhere else, and never hang
or fail the command (``base/timings.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patched_wheels.base import timings
from support.hostile import make_special_file

RECORD = "from patched_wheels.base import timings; timings.record(['index'])"


def record(path: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, timings.ENVIRONMENT_VARIABLE: str(path)}
    return subprocess.run([sys.executable, "-c", RECORD], env=environment, capture_output=True, text=True, timeout=60)


def test_a_regular_file_gets_one_line_per_command(tmp_path: Path) -> None:
    path = tmp_path / "timings.jsonl"
    for _ in range(2):
        assert record(path).returncode == 0
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["command"] for line in lines] == [["index"], ["index"]]
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("kind", ["fifo", "directory", "link", "missing-parent"])
def test_a_place_that_is_no_regular_file_costs_the_figures_not_the_run(tmp_path: Path, kind: str) -> None:
    """A FIFO nobody reads once hung the command forever (open for append blocks); a directory, a link (which
    could point the figures at a file of someone else's) and an unwritable place are skipped quietly too."""
    path = tmp_path / "timings"
    target = tmp_path / "elsewhere"
    if kind == "link":
        target.write_text("", encoding="utf-8")
        path.symlink_to(target)
    elif kind == "missing-parent":
        path = tmp_path / "absent" / "timings"
    else:
        make_special_file(kind, path)
    done = record(path)
    assert (done.returncode, done.stderr) == (0, "")
    if kind == "link":
        assert target.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("content", [b"PK\x03\x04 a wheel", b"print('a source file')\n", b"x"])
def test_a_file_that_is_no_timings_file_is_left_as_it_is(tmp_path: Path, content: bytes) -> None:
    """The variable set to the input wheel appended a JSON line to it: only a new, empty or timings file is
    appended to."""
    path = tmp_path / "in.whl"
    path.write_bytes(content)
    done = record(path)
    assert (done.returncode, done.stderr) == (0, "")
    assert path.read_bytes() == content
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert record(empty).returncode == 0 and json.loads(empty.read_text(encoding="utf-8"))["command"] == ["index"]
