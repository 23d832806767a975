"""The ELF cache: each wheel's library rows, keyed by its content, believed only as far as a wheel member is.

Results are cached per wheel *content*: keyed by the wheel's sha256 (and the cache
schema), holding no file name, so a renamed copy hits and a wheel whose sha256 is
known (the hub's, pinned by the lock and verified by Bazel) needs no file at all when
its rows are cached -- the hub then need not even fetch it.  Only a wheel that comes with
its sha256 is cached: the rows of a wheel at hand are checked against its members, so one
given by its file alone is read all the same, and hashing it for a key would spare nothing.
Files are read and written through :mod:`patched_wheels.base.cache` (trust, bounds, a miss
for anything wrong).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping, Sequence

from patched_wheels.base.cache import CacheContext
from patched_wheels.base.fsutil import NAME_MAX
from patched_wheels.elf.read import ElfLibrary, is_shared_library_name
from patched_wheels.errors import warn
from patched_wheels.wheelfile import is_safe_member_path

# In every cache file name: rows of another layout or reader are never read (2: keyed by sha256, rows without
# the file name; 3: data-scheme libraries included; 4: read by the helper's own ELF reader, which refuses what
# pyelftools read on, so rows it wrote are not believed).
CACHE_SCHEMA = 4
_ROW_FIELDS = frozenset(field for field in ElfLibrary.__dataclass_fields__ if field != "wheel")
_CHECKED_FIELDS = tuple(field for field in ElfLibrary.__dataclass_fields__ if field not in ("wheel", "path"))
"""What a row says of its library beside its path, each compared with the member's own dynamic section."""
# Bounds on what a cache file may hold, whatever it claims (a row is a few hundred bytes).
_MAX_CACHE_BYTES = 16 << 20
_MAX_ROWS = 1 << 16
_MAX_ENTRIES = 4096  # DT_NEEDED names, or RPATH/RUNPATH entries, of one row
_MAX_PATH = 4096  # PATH_MAX


class ElfCache:
    """Per-wheel ELF rows, one entry per wheel content: ``elfgraph/<sha256>.v<schema>.json``, read and written
    through a :class:`~patched_wheels.base.cache.CacheContext` (the cache's files, or a ``wheel_facts`` file's
    entries laid over them).

    The rows hold no wheel file name (it is filled in on load), so a renamed copy of a wheel hits.
    A row becomes a path every import of a patched package loads, so it is believed only as a wheel
    member would be (:func:`rows_problem`), and, when the wheel is at hand, only if it says what the wheel's
    members say (:func:`wheel_problem`); a bad row makes the whole entry a miss, read again.
    """

    KIND = "elfgraph"

    def __init__(self, caches: CacheContext) -> None:
        self.caches = caches

    @staticmethod
    def file(sha256: str) -> str:
        return f"{sha256}.v{CACHE_SCHEMA}.json"

    def where(self, sha256: str) -> str:
        """The entry of ``sha256`` as a warning names it (the facts file, or the cache file)."""
        return self.caches.where(self.KIND, self.file(sha256))

    def load(self, sha256: str, wheel: str, *, given: bool = True) -> list[ElfLibrary] | None:
        """The libraries of the wheel with this digest, reported as shipped by ``wheel``; None on a miss.
        ``given`` false: not from the facts laid over the cache (a wheel that is not at hand to check them)."""
        rows = self.caches.read(self.KIND, self.file(sha256), max_bytes=_MAX_CACHE_BYTES, given=given)
        if rows is None:
            return None
        problem = rows_problem(rows)
        if problem is not None:
            self.refuse(sha256, problem)
            return None
        assert isinstance(rows, list)  # rows_problem says so
        return [_library_from_row(row, wheel) for row in rows]

    def refuse(self, sha256: str, problem: str) -> None:
        """One warning that the entry of ``sha256`` is not believed (``problem``), and not recorded."""
        warn(f"{self.where(sha256)}: cache entry ignored ({problem}); read again from the wheel")
        self.caches.refuse(self.KIND, self.file(sha256))

    def store(self, sha256: str, libraries: Sequence[ElfLibrary]) -> None:
        """Write the rows of one wheel, unless they are rows a later load would refuse (then they are
        read again each time: a SONAME with a ``/`` is legal ELF, only not one we cache)."""
        rows = [
            {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in asdict(library).items()
                if key != "wheel"
            }
            for library in libraries
        ]
        if rows_problem(rows) is None:
            self.caches.write(self.KIND, self.file(sha256), rows)


def rows_problem(rows: object) -> str | None:
    """Why decoded cache rows are not rows :meth:`ElfCache.store` writes, or None.

    Each row is checked like a wheel member: a safe relative path (the check ``WheelReader`` applies
    to member names) naming a shared library, a SONAME and DT_NEEDED names that are plain file names,
    RPATH/RUNPATH entries that are strings without ``:`` or NUL; every count and length bounded.
    """
    if not isinstance(rows, list):
        return "not a list of rows"
    if len(rows) > _MAX_ROWS:
        return f"more than {_MAX_ROWS} rows"
    paths: set[str] = set()
    for number, row in enumerate(rows, start=1):
        problem = _row_problem(row)
        if problem is None and row["path"] in paths:
            problem = "a path listed twice"
        if problem is not None:
            return f"row {number}: {problem}"
        paths.add(row["path"])
    return None


def _row_problem(row: object) -> str | None:
    if not isinstance(row, dict) or set(row) != _ROW_FIELDS:
        return f"not an object with exactly the keys {', '.join(sorted(_ROW_FIELDS))}"
    path, soname = row["path"], row["soname"]
    if not isinstance(path, str) or len(path) > _MAX_PATH:
        return f"path is not a string of at most {_MAX_PATH} characters"
    if not is_safe_member_path(path) or path.endswith("/") or not is_shared_library_name(path):
        return f"path {_quoted(path)} is not a safe relative path of a shared library"
    if soname is not None and not _is_plain_name(soname):
        return f"soname {_quoted(soname)} is not a plain file name"
    for key in ("needed", "rpath", "runpath"):
        value = row[key]
        if not isinstance(value, list) or len(value) > _MAX_ENTRIES:
            return f"{key} is not a list of at most {_MAX_ENTRIES} entries"
        for item in value:
            if key == "needed" and not _is_plain_name(item):
                return f"needed {_quoted(item)} is not a plain file name"
            if key != "needed" and not (
                isinstance(item, str) and 0 < len(item) <= _MAX_PATH and ":" not in item and "\0" not in item
            ):
                return f"{key} entry {_quoted(item)} is not a search path entry"
    return None


def _is_plain_name(name: object) -> bool:
    """A file name the loader looks up in its search path: no directory, nothing special."""
    if not isinstance(name, str) or not 0 < len(name) <= NAME_MAX:  # a longer SONAME or DT_NEEDED names no file
        return False
    return "/" not in name and "\0" not in name and name not in (".", "..")


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _library_from_row(row: Mapping[str, Any], wheel: str) -> ElfLibrary:
    """One row that passed :func:`rows_problem` as a library of ``wheel`` (decoded JSON, typed Any: its
    field types are what that check holds, which no static type says)."""
    lists = [tuple(row[key]) for key in ("needed", "rpath", "runpath")]
    return ElfLibrary(wheel, row["path"], row["soname"], *lists)


def wheel_problem(wheel: str, shipped: Mapping[str, ElfLibrary | str], libraries: Sequence[ElfLibrary]) -> str | None:
    """Why cached rows do not describe the wheel ``wheel``, or None.

    ``shipped``: what the wheel's own members say, by install path: each shared library as read from its
    dynamic section (:func:`patched_wheels.elf.read.read_library`), or why it cannot be read.  The rows must
    list exactly those libraries, each with the SONAME, DT_NEEDED, RPATH and RUNPATH its member holds:
    every field the graph and a preload are built from, so no row decides what is loaded unchecked.
    """
    listed = {library.path: library for library in libraries}
    absent = sorted(listed.keys() - shipped.keys())
    unlisted = sorted(shipped.keys() - listed.keys())
    if absent:
        return f"{absent[0]}: no shared library of {wheel} has this path"
    if unlisted:
        return f"{unlisted[0]}: shipped by {wheel}, but no row lists it"
    for path, row in sorted(listed.items()):
        member = shipped[path]
        if isinstance(member, str):
            return member  # the reader's error, which names the wheel and the member
        for key in _CHECKED_FIELDS:
            claim, truth = getattr(row, key), getattr(member, key)
            if claim != truth:
                return f"{path}: the row says {key} {_quoted(claim)}, {wheel} says {_quoted(truth)}"
    return None
