from __future__ import annotations

import os
from pathlib import Path

import pytest

from patched_wheels.fsutil import write_atomic


def test_writes_readable_file_and_skips_equal_content(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    write_atomic(target, b"one")
    assert target.read_bytes() == b"one"
    assert target.stat().st_mode & 0o777 == 0o644
    os.utime(target, ns=(1, 1))
    write_atomic(target, b"one")
    assert target.stat().st_mtime_ns == 1
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["page.html"]


def test_failed_replace_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    (target / "child").mkdir(parents=True)  # os.replace of a file over a non-empty directory fails
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["occupied"]
