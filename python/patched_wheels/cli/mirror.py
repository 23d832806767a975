"""``patched-wheels mirror -r REQUIREMENTS DIR``: download pinned distributions and index them."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

from patched_wheels.base.fsutil import temp_directory, write_temp
from patched_wheels.cli import check_directory, index_summary
from patched_wheels.errors import InvalidLockError
from patched_wheels.index.mirror import mirror
from patched_wheels.lock.formats.requirements import parse_requirements, pip_options
from patched_wheels.lock.model import Lock, read_lock_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mirror",
        help="pip download the pins of a requirements file into DIR and index DIR",
        description=(
            "Run `pip download --no-deps -r REQUIREMENTS` (with this Python's pip) into DIR, then "
            "write DIR/simple/. The lock is read first as `lock` reads it, and one it refuses (an included "
            "file: -r/-c) is refused before pip starts; pip reads a private copy of the bytes checked, so a "
            "lock changed meanwhile is not seen. Arguments after `--` go to pip, e.g. "
            "`-- --index-url=https://... --platform=manylinux2014_x86_64 --only-binary=:all:`."
        ),
    )
    parser.add_argument("-r", "--requirements", required=True, type=Path, help="requirements (lock) file")
    parser.add_argument("directory", metavar="DIR", type=Path, help="directory to download into and index")
    parser.add_argument("pip_args", nargs="*", metavar="PIP_ARG", help="extra pip download arguments (after --)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    # pip would follow an included file (-r/-c) wherever it leads (a FIFO blocks it for ever, /dev/zero never ends)
    # and read a lock of any size: the lock is read as `lock` reads it, and refused as it refuses it, before DIR is
    # touched or pip starts. pip then reads those very bytes, from a copy: the lock read again by its path could be
    # another file by then (swapped, or grown an include).
    lock: Path = args.requirements
    check_directory("DIR", args.directory)
    text = read_lock_text(lock)
    _refuse_files_pip_would_wait_on(parse_requirements(text, str(lock)).lock, lock.parent)
    with _checked_copy(lock, text.encode("utf-8")) as copy:  # strict UTF-8 both ways: the bytes read
        result = mirror(copy, args.directory, pip_args=args.pip_args, named=lock)  # pip's failure: the user's lock
    for name in result.added:
        print(f"downloaded {name}")
    print(index_summary(result.index))
    return 0


def _refuse_files_pip_would_wait_on(model: Lock, directory: Path) -> None:
    """A local file the lock names that is no regular file nor directory (a FIFO, a device: ``/dev/zero``) is the
    lock's error before pip starts: pip would read it for ever, as it would an included file. Checked: each direct
    reference's ``file:`` URL and each index option's local path or ``file:`` URL (relative to ``directory``, the
    lock's); what an index directory holds is pip's to read."""
    named = [(pin.span.where, pin.url) for pin in model.pins if pin.url]
    for option in model.options:  # each value as pip's parser reads it: quoted, after "=", or joined to "-f"
        named += [(option.span.where, value) for _, value in pip_options(option.text, option.span.where) if value]
    for where, location in named:
        if "${" in location:  # pip expands ${VARIABLE} in a requirements file: the path is known only to pip
            continue
        parts = urllib.parse.urlsplit(location)
        if parts.scheme == "file":
            path = Path(urllib.request.url2pathname(parts.path))
        elif parts.scheme and len(parts.scheme) > 1:  # a remote URL (a one-letter scheme is a Windows drive)
            continue
        else:
            path = directory / location
        try:
            mode = os.stat(path).st_mode
        except OSError:  # missing, a loop: pip says so and ends
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InvalidLockError(
                f"{where}: {location[:200]!r} is not a regular file or directory, which pip would wait on"
            )


@contextlib.contextmanager
def _checked_copy(lock: Path, data: bytes) -> Iterator[Path]:
    """A private file holding ``data`` (the lock's bytes as checked) for pip to read, removed on exit.

    Beside the lock (a temporary file, ``0600``), so pip reads it from the lock's directory, where it looks for a
    relative ``--find-links`` first; where that directory cannot be written, in a private temporary directory,
    under the lock's name."""
    try:
        copy = write_temp(lock, data, mode=0o600)
    except OSError:
        with temp_directory(Path(tempfile.gettempdir()), "mirror") as directory:
            (directory / lock.name).write_bytes(data)
            yield directory / lock.name
        return
    try:
        yield copy
    finally:
        copy.unlink(missing_ok=True)
