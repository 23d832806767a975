"""Persistent caches: where they live, and the one reader and writer of their files.

A cache file is an input like a wheel or a lock: whoever can write it decides what a later run
believes (an ELF row becomes a path every ``import`` of a patched package loads).  So a cache is
trusted only as far as its owner: like ssh with ``~/.ssh``, a directory or file owned by another
user (root excepted: it can change anything anyway), or writable by group or others, is not read.
Directories are created ``0700`` and files written atomically ``0600``.  Reading is bounded: only
a regular file (no FIFO, device, socket, or final symbolic link; opened without blocking), at
most ``max_bytes``.  Whatever goes wrong -- a missing file aside, which is the ordinary miss -- is
a miss with one ``patched-wheels: warning:`` line naming the file, never an error: the caller
recomputes what the cache would have said.  Callers still check the decoded value's shape.

Two kinds hold what a hub reads from its wheels' contents (:data:`RECORDED_KINDS`: ELF rows, probe
observations). A hub can also be given them as a file checked in beside its lock (``wheel_facts``,
:mod:`patched_wheels.hub.facts`): within :func:`recording`, those entries lie over the cache, read first and
never written to it, and every entry of those kinds read or computed is collected, for the hub to write the
file it would want to be given.  With the cache ``off``, nothing is read, so nothing is recorded.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from patched_wheels.errors import UsageError, warn
from patched_wheels.base.fsutil import NotRegularFileError, open_regular_file, read_descriptor, write_atomic

ENVIRONMENT_VARIABLE = "RULES_PATCHED_WHEELS_CACHE"
"""An absolute directory holding every cache kind, or ``off``."""
_KIND = re.compile(r"[a-z][a-z0-9_-]*")
_DIRECTORY_MODE = 0o700
_FILE_MODE = 0o600
_MAX_REASON = 200  # characters of an exception's text quoted in a warning
_warned_directories: set[str] = set()
"""Directories already reported in this run: a scan of 30 wheels says it once, not 60 times."""
_warned_files: set[str] = set()
"""Files whose read was reported in this run: the rewrite after that miss does not report them again."""

RECORDED_KINDS = ("elfgraph", "observed")
"""The kinds keyed by the wheels' contents alone (sha256s, probe, interpreter), which a hub records."""
_recorded: Mapping[str, object] = {}
"""``kind/file name`` -> value: the entries :func:`recording` was given, read before the cache's files."""
_used: dict[str, object] | None = None
"""``kind/file name`` -> value: the entries of :data:`RECORDED_KINDS` read or written within :func:`recording`."""
_source = ""
"""Where :data:`_recorded` came from, to name one of its entries in a warning (:func:`where`)."""


def cache_root() -> Path | None:
    """The directory of every persistent cache; None when caching is off (or no home is known).

    ``RULES_PATCHED_WHEELS_CACHE`` (an absolute directory, or ``off``) wins; otherwise
    ``$XDG_CACHE_HOME/rules_patched_wheels``, where a relative ``XDG_CACHE_HOME`` is ignored as the
    XDG spec says (it would put the cache in whatever directory a command runs from), then
    ``~/.cache/rules_patched_wheels``.
    """
    override = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if override == "off":
        return None
    if override:
        if not os.path.isabs(override):
            raise UsageError(f"{ENVIRONMENT_VARIABLE}={override}: expected an absolute directory or off")
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "rules_patched_wheels"


def cache_dir(kind: str) -> Path | None:
    """The directory of one cache kind (``elfgraph``, ``observed``, ...) under :func:`cache_root`."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"cache kind {kind!r} is not a plain lowercase name")
    root = cache_root()
    return None if root is None else root / kind


def read_json(path: Path, *, max_bytes: int) -> object | None:
    """The JSON value in ``path``; None on a miss.  Never raises (see the module docstring).

    A missing file or directory is a silent miss; anything else that keeps the value from being
    read -- an untrusted owner or mode, not a regular file, over ``max_bytes``, unreadable, not
    UTF-8 JSON, nested too deep, out of memory -- is a miss with one warning line naming ``path``.
    Within :func:`recording`, an entry it was given is answered without reading ``path``.
    """
    name = recorded_name(path) if _used is not None else None
    if name is not None and name in _recorded:
        _note(name, _recorded[name])
        return _recorded[name]
    try:
        data = _read_trusted(path, max_bytes)
        value = None if data is None else json.loads(data)
    except Exception as error:  # any failure at all is a miss: RecursionError, MemoryError, ...
        _warned_files.add(os.path.abspath(path))
        warn(f"{path}: cache file ignored ({_reason(error)})")
        return None
    if name is not None and value is not None:
        _note(name, value)
    return value


@contextmanager
def recording(entries: Mapping[str, object], source: str = "") -> Iterator[dict[str, object]]:
    """Within: a read of an entry of :data:`RECORDED_KINDS` named in ``entries`` (``kind/file name``, see
    :func:`recorded_name`; from the file ``source``) is answered from them before the cache's files; the dict
    yielded collects every such entry read (and not :func:`discard`-ed) or written, by name: what the hub records."""
    global _recorded, _used, _source
    saved = _recorded, _used, _source
    _recorded, _used, _source = dict(entries), {}, source
    try:
        yield _used
    finally:
        _recorded, _used, _source = saved


def where(path: Path) -> str:
    """``path`` as a warning about the entry read from it names it: the file :func:`recording` was given, when
    the entry came from there."""
    name = recorded_name(path) if _used is not None else None
    return f"{_source}: entry {name}" if name is not None and name in _recorded else str(path)


def _note(name: str, value: object) -> None:
    if _used is not None:
        _used[name] = value


def recorded_name(path: Path) -> str | None:
    """``kind/file name`` of ``path`` if it is an entry of :data:`RECORDED_KINDS` in the cache root, else None."""
    try:
        root = cache_root()
    except UsageError:  # a bad RULES_PATCHED_WHEELS_CACHE: reported by whoever asked for a cache directory
        return None
    if root is None or path.parent.parent != root or path.parent.name not in RECORDED_KINDS:
        return None
    return f"{path.parent.name}/{path.name}"


def discard(path: Path) -> None:
    """The entry read from ``path`` was refused by its reader (which computes it again): not one :func:`recording` collects."""
    if _used is not None and (name := recorded_name(path)) is not None:
        _used.pop(name, None)


def write_json(path: Path, value: object) -> None:
    """Store ``value`` in ``path`` atomically, mode ``0600``, creating missing directories ``0700``.

    Never raises: a directory that is not ours or cannot be written costs the next run a
    recomputation, reported by one warning line per directory and run.
    """
    directory = path.parent
    if _used is not None and (name := recorded_name(path)) is not None:
        _note(name, value)
    try:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        make_private_directories(directory)
        problem = _untrusted(os.stat(directory), "directory")
        if problem:
            _warn_directory(directory, f"not written ({problem})")
            return
        write_atomic(path, data, mode=_FILE_MODE)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):  # a read-only cache, shared on purpose
            _warn_directory(directory, f"not writable, results not cached ({_reason(error)})")
        elif os.path.abspath(path) not in _warned_files:  # e.g. the directory already reported as ignored
            warn(f"{path}: cache file not written ({_reason(error)})")
    except Exception as error:
        warn(f"{path}: cache file not written ({_reason(error)})")


def _read_trusted(path: Path, max_bytes: int) -> bytes | None:
    """``path``'s bytes if it and its directory pass the trust checks; None when either is missing."""
    try:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        problem = _untrusted(os.fstat(directory), "directory")
        if problem:
            if not os.path.lexists(path):
                return None
            _warn_directory(path.parent, f"not read ({problem})")
            return None
        try:
            handle = open_regular_file(path.name, dir_fd=directory)
        except FileNotFoundError:
            return None
    finally:
        os.close(directory)
    try:
        status = os.fstat(handle)
        problem = _untrusted(status, "file")
        if problem:
            raise NotRegularFileError(problem)
        return read_descriptor(handle, max_bytes=max_bytes, size=status.st_size)
    finally:
        os.close(handle)


def _untrusted(status: os.stat_result, what: str) -> str | None:
    """Why a cache directory or file with this ``stat`` must not be believed, or None."""
    if status.st_uid not in (os.geteuid(), 0):
        return f"the {what} is owned by uid {status.st_uid}, not by this user"
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"the {what} is writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
    return None


def make_private_directories(directory: Path) -> None:
    """Create ``directory`` and its missing parents ``0700`` (the umask could only narrow that)."""
    missing = []
    while not os.path.lexists(directory) and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        try:
            os.mkdir(created, _DIRECTORY_MODE)
        except FileExistsError:  # a concurrent run made it
            continue
        os.chmod(created, _DIRECTORY_MODE)


def _warn_directory(directory: Path, message: str) -> None:
    key = os.path.abspath(directory)
    if key not in _warned_directories:
        _warned_directories.add(key)
        warn(f"{directory}: cache directory {message}")


def _reason(error: BaseException) -> str:
    """An exception as a short clause for a warning line (a JSON error can quote the input)."""
    text = str(error) if isinstance(error, NotRegularFileError) else f"{type(error).__name__}: {error}"
    text = " ".join(text.splitlines())
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "..."
