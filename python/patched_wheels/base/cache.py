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
:mod:`patched_wheels.hub.facts`). Which caches one run uses, the facts laid over them and what it records
travel in one :class:`CacheContext`, handed to every reader (``read_graph``, the ELF cache, ``observe``):
no module of the helper keeps them in a global.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from patched_wheels.base.fsutil import NotRegularFileError, open_regular_file, read_descriptor, write_atomic
from patched_wheels.errors import UsageError, warn

if TYPE_CHECKING:  # typing's TypeGuard is Python 3.10's; annotations are never evaluated at run time here
    from typing import TypeGuard

ENVIRONMENT_VARIABLE = "RULES_PATCHED_WHEELS_CACHE"
"""An absolute directory holding every cache kind, or ``off``."""
_KIND = re.compile(r"[a-z][a-z0-9_-]*")
_DIRECTORY_MODE = 0o700
_FILE_MODE = 0o600
_MAX_REASON = 200  # characters of an exception's text quoted in a warning
RECORDED_KINDS = ("elfgraph", "observed")
"""The kinds keyed by the wheels' contents alone (sha256s, probe, interpreter), which a hub records."""


def is_int(value: object) -> TypeGuard[int]:
    """Whether a decoded JSON value is an integer: not ``true`` (a bool is an int to Python) nor ``1.0``."""
    return type(value) is int


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
    """The directory of one cache kind (``elfgraph``, ``digests``, ...) under :func:`cache_root`."""
    return CacheContext.from_environment().directory(kind)


def read_json(path: Path, *, max_bytes: int, reported: set[str] | None = None) -> object | None:
    """The JSON value in ``path``; None on a miss.  Never raises (see the module docstring).

    A missing file or directory is a silent miss; anything else that keeps the value from being
    read -- an untrusted owner or mode, not a regular file, over ``max_bytes``, unreadable, not
    UTF-8 JSON, nested too deep, out of memory -- is a miss with one warning line naming ``path``.
    ``reported``: the files and directories this run already warned about (a :class:`CacheContext`'s), so a
    scan of 30 wheels says a directory is untrusted once, not 60 times; None: this call's own.
    """
    reported = set() if reported is None else reported
    try:
        data = _read_trusted(path, max_bytes, reported)
        value = None if data is None else json.loads(data)
    except Exception as error:  # any failure at all is a miss: RecursionError, MemoryError, ...
        reported.add(os.path.abspath(path))
        warn(f"{path}: cache file ignored ({_reason(error)})")
        return None
    return value


def write_json(path: Path, value: object, *, reported: set[str] | None = None) -> None:
    """Store ``value`` in ``path`` atomically, mode ``0600``, creating missing directories ``0700``.

    Never raises: a directory that is not ours or cannot be written costs the next run a
    recomputation, reported by one warning line per directory (and ``reported``, see :func:`read_json`).
    """
    reported = set() if reported is None else reported
    directory = path.parent
    try:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        make_private_directories(directory)
        problem = _untrusted(os.stat(directory), "directory")
        if problem:
            _warn_directory(directory, f"not written ({problem})", reported)
            return
        write_atomic(path, data, mode=_FILE_MODE)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):  # a read-only cache, shared on purpose
            _warn_directory(directory, f"not writable, results not cached ({_reason(error)})", reported)
        elif os.path.abspath(path) not in reported:  # e.g. the directory already reported as ignored
            warn(f"{path}: cache file not written ({_reason(error)})")
    except Exception as error:
        warn(f"{path}: cache file not written ({_reason(error)})")


@dataclass(frozen=True)
class CacheContext:
    """Which persistent caches one run reads and writes, the wheel facts laid over them, and what it records.

    Passed to every reader of a cache kind (``read_graph``, the ELF cache, ``observe``) instead of a global,
    so what a hub believes is visible in the signatures.  Entries are named ``kind/file name``
    (:meth:`name`).  ``given`` (a ``wheel_facts`` file's entries, from ``source``) answers a read of the
    :data:`RECORDED_KINDS` before the cache's files and is never written to them; its entries are claims,
    which each reader checks against the wheels (:mod:`patched_wheels.elf.cache`,
    :mod:`patched_wheels.loading.observe`) before believing them.  ``recorded`` (when not None) collects every
    entry of those kinds read (and not :meth:`refuse`-d) or written: what the hub writes as its facts.
    """

    root: Path | None
    """The cache root (:func:`cache_root`); None: caches off, nothing read or written (nor given, nor recorded)."""
    given: Mapping[str, object] = field(default_factory=dict)
    source: str = ""
    """The file ``given`` came from, for warnings (:meth:`where`)."""
    recorded: dict[str, object] | None = None
    reported: set[str] = field(default_factory=set, compare=False)
    """Files and directories already warned about in this run (:func:`read_json`)."""

    @classmethod
    def from_environment(cls, *, enabled: bool = True) -> CacheContext:
        """The caches under :func:`cache_root`, or none (``enabled`` false: ``--no-cache``)."""
        return cls(cache_root() if enabled else None)

    def recording(self, given: Mapping[str, object], source: str) -> CacheContext:
        """This context with ``given`` laid over its caches and an empty :attr:`recorded`: a hub's build."""
        if self.root is None:
            return self
        return CacheContext(self.root, dict(given), source, {}, self.reported)

    def directory(self, kind: str) -> Path | None:
        """The directory of one cache kind, None when caches are off."""
        if not _KIND.fullmatch(kind):
            raise ValueError(f"cache kind {kind!r} is not a plain lowercase name")
        return None if self.root is None else self.root / kind

    @staticmethod
    def name(kind: str, file: str) -> str:
        return f"{kind}/{file}"

    def is_given(self, kind: str, file: str) -> bool:
        """Whether a read of this entry is answered by the facts given (a claim from a file in the workspace)."""
        return self.root is not None and kind in RECORDED_KINDS and self.name(kind, file) in self.given

    def read(self, kind: str, file: str, *, max_bytes: int, given: bool = True) -> object | None:
        """The entry ``kind/file``: the one given, else the cache file's (:func:`read_json`); None on a miss.
        ``given`` false: the cache file's only (for an entry that cannot be checked against its wheel)."""
        directory = self.directory(kind)
        if directory is None:
            return None
        name = self.name(kind, file)
        if given and self.is_given(kind, file):
            value = self.given[name]
        else:
            value = read_json(directory / file, max_bytes=max_bytes, reported=self.reported)
        if value is not None:
            self._note(kind, name, value)
        return value

    def write(self, kind: str, file: str, value: object) -> None:
        """Store an entry in the cache (never into the facts given) and record it."""
        directory = self.directory(kind)
        if directory is None:
            return
        self._note(kind, self.name(kind, file), value)
        write_json(directory / file, value, reported=self.reported)

    def refuse(self, kind: str, file: str) -> None:
        """The entry read was refused by its reader (which computes it again): not one the hub records."""
        if self.recorded is not None:
            self.recorded.pop(self.name(kind, file), None)

    def where(self, kind: str, file: str) -> str:
        """The entry as a warning names it: the facts file and the entry when it came from there, else its file."""
        if self.is_given(kind, file):
            return f"{self.source}: entry {self.name(kind, file)}"
        directory = self.directory(kind)
        return str(directory / file if directory is not None else file)

    def _note(self, kind: str, name: str, value: object) -> None:
        if self.recorded is not None and kind in RECORDED_KINDS:
            self.recorded[name] = value


OFF = CacheContext(None)
"""No cache: everything is read from the wheels (``--no-cache``, ``RULES_PATCHED_WHEELS_CACHE=off``)."""


def _read_trusted(path: Path, max_bytes: int, reported: set[str]) -> bytes | None:
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
            _warn_directory(path.parent, f"not read ({problem})", reported)
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


def _warn_directory(directory: Path, message: str, reported: set[str]) -> None:
    key = os.path.abspath(directory)
    if key not in reported:
        reported.add(key)
        warn(f"{directory}: cache directory {message}")


def _reason(error: BaseException) -> str:
    """An exception as a short clause for a warning line (a JSON error can quote the input)."""
    text = str(error) if isinstance(error, NotRegularFileError) else f"{type(error).__name__}: {error}"
    text = " ".join(text.splitlines())
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "..."
