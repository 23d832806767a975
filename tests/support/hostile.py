"""Hostile files for the tests of every reader: special files where a regular one is expected, and a count
of the bytes actually read (so a size cap is asserted by what was read, not by a clock)."""

from __future__ import annotations

import ast
import os
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

SPECIAL_KINDS = ("link-loop", "dangling-link", "dev-zero-link", "fifo", "socket", "directory", "device")


def make_special_file(kind: str, path: Path) -> None:
    """Put a non-regular file of ``kind`` (one of :data:`SPECIAL_KINDS`) at ``path``."""
    if kind == "link-loop":
        path.symlink_to(path.name)  # ln -s x.whl x.whl
    elif kind == "dangling-link":
        path.symlink_to("gone.whl")
    elif kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "socket":  # bound where its path fits sockaddr_un's 108 bytes, then moved into place
        short = Path(tempfile.mkdtemp(dir=path.parent if len(str(path)) < 100 else "/tmp"))
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(short / "s"))  # the file stays after the socket is closed
        os.rename(short / "s", path)
        short.rmdir()
    elif kind == "directory":
        path.mkdir(mode=0o700)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    else:
        raise AssertionError(kind)


def count_read_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the length of everything ``os.read`` returns, in order."""
    counted: list[int] = []
    real_read = os.read

    def counting(handle: int, size: int) -> bytes:
        data = real_read(handle, size)
        counted.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting)
    return counted


NESTED_PAST_THE_PARSER = {
    "parser-stack": "x = " + "-" * 6000 + "1",  # its stack: a MemoryError (3.9 to 3.13)
    "tree-depth": "x = " + "1+" * 20000 + "1",  # the tree built: a RecursionError (3.11 from 3,000 levels, 3.13 later)
}
"""Sources nested past CPython's parser at its default recursion limit, each a few kB to 40 kB."""


def skip_unless_past_the_parser(source: str | bytes, kind: str) -> None:
    """Skip, saying why, where this interpreter's parser takes ``source`` (3.9 and 3.10 build any depth of tree):
    there is no error to turn into a line then."""
    try:
        ast.parse(source)
    except (MemoryError, RecursionError):
        return
    pytest.skip(
        f"Python {sys.version_info[0]}.{sys.version_info[1]}'s parser takes the {kind} source: nothing to refuse"
    )
