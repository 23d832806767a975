"""A file's sha256, remembered by its identity and status, so a repeat run on the same wheel hashes nothing.

The ELF cache is keyed by a wheel's sha256 (:mod:`patched_wheels.elfcache`); a command given a path
would hash the file first on every run (1.5 s for torch's 670 MB wheel, more than the split it
serves).  The memo maps (device, inode, size, mtime_ns, ctime_ns) to the digest: one file per inode,
``<device>-<inode>.json`` in the cache kind ``digests`` (read and written by :mod:`patched_wheels.cache`,
so an entry is trusted exactly as far as an ELF row is).

Why those five say the content is unchanged: any write moves mtime and ctime, and ctime cannot be set
by a user (``utime`` sets mtime and moves ctime to now), so a rewritten file, a replaced one (a new
inode, or the old inode reused with a new ctime) or a truncated one misses.  Timestamps are only as fine
as the kernel's clock tick, so a file written in the same tick as it was hashed could change again unseen
(git's "racy" index entries): a digest is stored only if the file's ctime is older than
:data:`SETTLED_NS` when hashing starts and its status is the same once hashing ends.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from patched_wheels.cache import read_json, write_json
from patched_wheels.elfcache import SHA256
from patched_wheels.errors import warn
from patched_wheels.fsutil import hash_stream

__all__ = ["SETTLED_NS", "memo_file", "sha256_of"]

SETTLED_NS = 2_000_000_000
"""A file whose ctime is this recent when hashing starts may still be changing within one clock tick."""
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
        key = _key(before)
        if directory is not None:
            remembered = _lookup(memo_file(directory, before), key)
            if remembered is not None:
                return remembered
        settled = time.time_ns() - before.st_ctime_ns >= SETTLED_NS
        digest = hash_stream(stream)
        if directory is not None and settled and _key(os.fstat(stream.fileno())) == key:
            file = memo_file(directory, before)
            if not _is_directory(file):  # the one thing in the way a rename cannot replace (already warned about)
                write_json(file, {**key, "sha256": digest})
    return digest


def _is_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _key(status: os.stat_result) -> dict[str, int]:
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns, "ctime_ns": status.st_ctime_ns}


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
        or not SHA256.fullmatch(value["sha256"])
    ):
        warn(f"{file}: cache entry ignored (not a file digest entry)")
        return None
    if any(value[field] != key[field] for field in _FIELDS):
        return None  # the file changed since: an ordinary miss, rewritten after hashing
    return value["sha256"]
