"""patched_wheels.base.supervise on real children: what the maps record names, whatever the library's name."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from patched_wheels.base.supervise import supervise
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
