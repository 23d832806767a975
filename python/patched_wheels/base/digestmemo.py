"""A file's sha256, remembered by its identity and status, so a repeat run on the same wheel hashes nothing.

The ELF cache is keyed by a wheel's sha256 (:mod:`patched_wheels.elf.cache`); a command given a path
would hash the file first on every run (for torch's 670 MB wheel, longer than the split it serves:
see benchmarks/bench_split.py).  The memo maps a file's :func:`patched_wheels.base.fsutil.settled_stamp` (device, inode, size,
mtime_ns, ctime_ns: why they change with the content is told there) to its digest: one file per inode,
``<device>-<inode>.json`` in the cache kind ``digests`` (read and written by :mod:`patched_wheels.base.cache`,
so an entry is trusted exactly as far as an ELF row is).  A file too new for a stamp is hashed and not
remembered; one whose status changed while it was hashed is not remembered either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from patched_wheels.base.cache import read_json, write_json
from patched_wheels.base.fsutil import SHA256_HEX, FileStamp, hash_stream, settled_stamp
from patched_wheels.errors import warn

__all__ = ["memo_file", "sha256_of"]

_MAX_BYTES = 4096  # an entry is ~150 bytes
_FIELDS = ("size", "mtime_ns", "ctime_ns")


def memo_file(directory: Path, status: os.stat_result) -> Path:
    """Where the memo of the file with this ``status`` lives."""
    return directory / f"{status.st_dev}-{status.st_ino}.json"


def sha256_of(path: Path, directory: Path | None) -> str:
    """sha256 hex digest of the file ``path``, from the memo in ``directory`` when it holds one for the file
    as it is now (None: no memo, always hash).  A malformed entry is a miss with one warning."""
    with open(path, "rb") as stream:
        before = os.fstat(stream.fileno())
        stamp = settled_stamp(before)
        if directory is None or stamp is None:
            return hash_stream(stream)
        file = memo_file(directory, before)
        remembered = _lookup(file, _fields(stamp))
        if remembered is not None:
            return remembered
        digest = hash_stream(stream)
        if settled_stamp(os.fstat(stream.fileno())) == stamp and not _is_directory(file):
            # (a directory is the one thing in the way that a rename cannot replace; its lookup warned)
            write_json(file, {**_fields(stamp), "sha256": digest})
    return digest


def _fields(stamp: FileStamp) -> dict[str, int]:
    return dict(zip(_FIELDS, stamp[2:]))


def _lookup(file: Path, key: dict[str, int]) -> str | None:
    """The digest ``file`` holds for a file with this ``key``; None when absent, stale or malformed."""
    value = read_json(file, max_bytes=_MAX_BYTES)
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {*_FIELDS, "sha256"}
        or not all(type(value[field]) is int for field in _FIELDS)
        or not isinstance(value["sha256"], str)
        or not SHA256_HEX.fullmatch(value["sha256"])
    ):
        warn(f"{file}: cache entry ignored (not a file digest entry)")
        return None
    if any(value[field] != key[field] for field in _FIELDS):
        return None  # the file changed since: an ordinary miss, rewritten after hashing
    return value["sha256"]


def _is_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
