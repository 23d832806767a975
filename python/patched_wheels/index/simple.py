"""A PEP 503 simple index over a directory of wheels and sdists (the job of ``dir2pi``).

``build_index(DIR)`` writes ``DIR/simple/index.html`` and ``DIR/simple/<project>/index.html``
linking back to the files in ``DIR``, plus a PEP 658 ``<wheel>.metadata`` file next to every
wheel. What pip needs from an index, and what pip2pi gets wrong, is spelled out here:

* names come from ``packaging.utils.parse_wheel_filename`` / ``parse_sdist_filename``, so a
  build tag (``triton-2.1.0-0-cp311-...``) is not mistaken for part of the name;
* hrefs are double-quoted, percent-encoded (a local version's ``+`` becomes ``%2B``) and carry
  ``#sha256=`` fragments, which pip checks against the downloaded bytes;
* ``data-requires-python`` is HTML-escaped; ``data-core-metadata`` (PEP 714) and the older
  ``data-dist-info-metadata`` (PEP 658, read by pip < 23.2) advertise the ``.metadata`` file,
  which holds the wheel's METADATA byte for byte, so resolvers need not download the wheel;
* the output is byte-deterministic (sorted, no timestamps), so rebuilds give equal bytes, and
  it is published all at once: the ``.metadata`` files and a complete new ``simple/`` tree are
  written aside first, then renamed into place, so a failure midway leaves the old index;
* hashing dominates the cost (gigabytes of CUDA wheels), so results are cached in
  ``DIR/simple/.patched-wheels-cache.json`` keyed by file name and :func:`_file_key` (size, ``mtime_ns``,
  inode) and the remaining files are hashed on all cores; a file whose key changed is rehashed.  The inode is
  the kernel's, never copied: a tree unpacked, restored from a CI cache or copied with its mtimes (``tar``,
  ``rsync -t``, ``cp -p``) is hashed again, whatever its cache file says.  That
  cache is read like every persistent cache (:mod:`patched_wheels.base.cache`): bounded, a regular file
  owned by us and written by no one else, anything wrong a miss with one warning.

Every input is read and checked before anything is written: on bad input (a ``.whl`` that is
not a wheel we accept, an invalid file or project name, a link to a file outside the directory,
a distribution name that is not a regular file -- a FIFO, device, socket, directory, or a link
loop -- two files for the same project, version and tags) the existing index is left as it was.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import quote

from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    NormalizedName,
    parse_sdist_filename,
)
from packaging.version import Version

from patched_wheels.base.cache import read_json
from patched_wheels.base.fsutil import (
    SHA256_HEX,
    hash_file,
    holds,
    locked_directory,
    read_regular_file,
    resolved_path,
    stage_tree,
    switch_tree,
    tree_holds,
    write_temp,
)
from patched_wheels.base.names import is_valid_project_name
from patched_wheels.errors import InvalidWheelError, UsageError, warn
from patched_wheels.wheelfile import WheelFilename

SIMPLE_DIR = "simple"
CACHE_FILE = ".patched-wheels-cache.json"
METADATA_SUFFIX = ".metadata"
_CACHE_FORMAT = 1
_MAX_CACHE_BYTES = 16 << 20  # the hash cache: about 60,000 files' entries
_MAX_METADATA_BYTES = 64 << 20  # a .metadata file we wrote, compared with the wheel's METADATA
_SDIST_SUFFIXES = (".tar.gz", ".zip")


@dataclass(frozen=True)
class IndexedFile:
    """One distribution file of the index, with what its link advertises."""

    filename: str
    project: NormalizedName
    version: Version
    tags: frozenset[Tag]  # empty for an sdist
    sha256: str
    requires_python: str | None
    metadata: bytes | None  # exact METADATA bytes of a wheel; None for an sdist

    @property
    def is_wheel(self) -> bool:
        return self.metadata is not None

    @property
    def metadata_sha256(self) -> str | None:
        return None if self.metadata is None else hashlib.sha256(self.metadata).hexdigest()


@dataclass(frozen=True)
class IndexResult:
    """What ``build_index`` indexed, and how many files it had to hash this time."""

    directory: Path
    files: tuple[IndexedFile, ...]
    hashed: int

    @property
    def projects(self) -> dict[NormalizedName, list[IndexedFile]]:
        return group_by_project(self.files)

    def unserved_pages(self) -> list[Path]:
        """The pages under ``directory/simple/`` that do not list exactly these files (none, until the
        directory is indexed again with other files): a lock written from this result would pin
        hashes those pages do not serve."""
        simple = self.directory / SIMPLE_DIR
        return [simple / name for name, data in _pages(self.files).items() if not holds(simple / name, data)]


def group_by_project(files: Iterable[IndexedFile]) -> dict[NormalizedName, list[IndexedFile]]:
    by_project: dict[NormalizedName, list[IndexedFile]] = {}
    for indexed in files:
        by_project.setdefault(indexed.project, []).append(indexed)
    return by_project


@dataclass(frozen=True)
class _Candidate:
    path: Path
    project: NormalizedName
    version: Version
    tags: frozenset[Tag]
    stat: os.stat_result

    @property
    def is_wheel(self) -> bool:
        return self.path.name.endswith(".whl")


def build_index(directory: Path | str) -> IndexResult:
    """Index every wheel and sdist directly inside ``directory``; return what was indexed."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    with locked_directory(directory):  # a concurrent index or lock of this directory waits its turn
        candidates = _find_distributions(directory)
        _reject_duplicates(candidates)
        cache = _load_cache(directory)
        files, hashed = _describe(candidates, cache)
        _write_index(directory, files, _cache_payload(candidates, files))
    return IndexResult(directory=directory, files=files, hashed=hashed)


def _find_distributions(directory: Path) -> list[_Candidate]:
    """Parse the name of every distribution file; an unparseable or invalid name is an error, and
    so is a symbolic link to a file outside ``directory`` (the index would publish it)."""
    candidates = []
    root = resolved_path(directory)
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if not _is_distribution(entry.name):
            continue
        path = Path(entry.path)
        try:
            status = os.stat(path)  # through links: a loop or a dangling one fails here
        except OSError as error:
            raise InvalidWheelError(f"{path}: cannot be read ({error.strerror or error})") from None
        if entry.is_symlink() and not Path(os.path.realpath(path)).is_relative_to(root):
            raise InvalidWheelError(
                f"{path}: a link to {os.path.realpath(path)}, outside {directory}; copy the file in"
            )
        if not stat.S_ISREG(status.st_mode):
            raise InvalidWheelError(
                f"{path}: not a regular file ({_file_kind(status.st_mode)}); a distribution must be one"
            )
        if entry.name.endswith(".whl"):
            try:
                parsed = WheelFilename.parse(entry.name)
            except InvalidWheelError as error:
                raise InvalidWheelError(f"{path.parent}/{error}") from None
            name, version, tags = parsed.name, parsed.version, parsed.tags
            written_name = entry.name.split("-", 1)[0]
        else:
            try:
                name, version = parse_sdist_filename(entry.name)
            except InvalidSdistFilename as error:
                raise InvalidWheelError(f"{path}: {error}") from None
            tags = frozenset()
            written_name = entry.name.rpartition("-")[0]
        if not is_valid_project_name(written_name):
            raise InvalidWheelError(f"{path}: invalid project name {written_name!r}")
        candidates.append(_Candidate(path, name, version, tags, status))
    return candidates


def _reject_duplicates(candidates: list[_Candidate]) -> None:
    """Refuse two files that a client could not tell apart (same project, version, and tag).

    Two wheels differing only in build tag or in the spelling of the name would both match a
    pin, and the lock could not say which hash is meant.
    """
    seen: dict[tuple[NormalizedName, Version, bool], list[_Candidate]] = {}
    for candidate in candidates:
        key = (candidate.project, candidate.version, candidate.is_wheel)
        for other in seen.get(key, []):
            if not candidate.is_wheel or candidate.tags & other.tags:
                raise InvalidWheelError(
                    f"{candidate.path}: same project, version and tags as {other.path.name}; keep only one of them"
                )
        seen.setdefault(key, []).append(candidate)


def _describe(candidates: list[_Candidate], cache: Mapping[str, object]) -> tuple[tuple[IndexedFile, ...], int]:
    """Read and hash the files the cache cannot vouch for, on all cores.

    METADATA reads are queued before the hashes, so a broken wheel is reported after
    milliseconds rather than after hashing gigabytes; reading torch's (12k-member) RECORD
    still overlaps with hashing, as hashlib releases the GIL. Hashes go largest first.
    """
    described: dict[str, IndexedFile] = {}
    stale = []
    for candidate in candidates:
        cached = _from_cache(candidate, cache.get(candidate.path.name))
        if cached is None:
            stale.append(candidate)
        else:
            described[candidate.path.name] = cached
    if not stale:
        return tuple(described[candidate.path.name] for candidate in candidates), 0
    # Imported only now: a warm run (nothing to read) should not pay for loading them.
    from concurrent.futures import ThreadPoolExecutor

    stale.sort(key=lambda c: (-c.stat.st_size, c.path.name))
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(stale), os.cpu_count() or 1)))
    try:
        metadata = {c.path.name: pool.submit(_read_metadata, c) for c in stale if c.is_wheel}
        hashes = {c.path.name: pool.submit(hash_file, c.path) for c in stale}
        # Results in name order, so the error reported does not depend on timing.
        read = {name: metadata[name].result() for name in sorted(metadata)}
        for candidate in sorted(stale, key=lambda c: c.path.name):
            name = candidate.path.name
            sha256 = hashes[name].result()
            after = candidate.path.stat()
            if _file_key(after) != _file_key(candidate.stat):
                raise InvalidWheelError(f"{candidate.path}: changed while it was being indexed; run again")
            wheel_metadata, requires_python = read.get(name, (None, None))
            described[name] = IndexedFile(
                filename=name,
                project=candidate.project,
                version=candidate.version,
                tags=candidate.tags,
                sha256=sha256,
                requires_python=requires_python,
                metadata=wheel_metadata,
            )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    files = tuple(described[candidate.path.name] for candidate in candidates)
    return files, len(stale)


def _file_key(status: os.stat_result) -> dict[str, int]:
    """What a cache entry of a file is valid for: the file as this stat saw it.  Size and mtime are what a copy
    keeps; the inode is what the kernel gives a file when it is made, copied or unpacked, and nothing sets back (a
    lying cache carried with a tree meets files with new ones).  Not the change time: a hard link changes it
    (``mirror`` links the files it has into pip's download directory) and keeps the inode and the bytes."""
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns, "inode": status.st_ino}


def _from_cache(candidate: _Candidate, entry: object) -> IndexedFile | None:
    """Reuse a cache entry if the file is unchanged (:func:`_file_key`) and, for a wheel, its
    ``.metadata`` file still holds the bytes the entry's hash was computed from."""
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("sha256"), str)
        or not SHA256_HEX.fullmatch(entry["sha256"])
        or not isinstance(entry.get("requires_python"), (str, type(None)))
        or any(entry.get(field) != value for field, value in _file_key(candidate.stat).items())
    ):
        return None
    metadata = None
    if candidate.is_wheel:
        try:  # a FIFO or a link in its place is a miss (and then in the way of the index), never a hang
            metadata = read_regular_file(_metadata_path(candidate.path), max_bytes=_MAX_METADATA_BYTES)
        except (OSError, ValueError):
            return None
        if hashlib.sha256(metadata).hexdigest() != entry.get("metadata_sha256"):
            return None
    return IndexedFile(
        filename=candidate.path.name,
        project=candidate.project,
        version=candidate.version,
        tags=candidate.tags,
        sha256=entry["sha256"],
        requires_python=entry.get("requires_python"),
        metadata=metadata,
    )


def _read_metadata(candidate: _Candidate) -> tuple[bytes, str | None]:
    """A wheel's METADATA bytes and its Requires-Python."""
    metadata = read_wheel_metadata(candidate.path)
    return metadata, _requires_python(metadata)


def read_wheel_metadata(path: Path) -> bytes:
    """The exact bytes of the wheel's ``.dist-info/METADATA``; ``WheelReader`` checks on the way
    that the file is a wheel we accept (one ``.dist-info`` with METADATA, WHEEL and a RECORD that
    lists every member, METADATA naming the file's project and version), so a broken wheel never
    gets published."""
    from patched_wheels.wheelfile import WheelReader  # cold path only, like parse_email below

    with WheelReader(path) as wheel:
        return wheel.metadata()


def _requires_python(metadata: bytes) -> str | None:
    from packaging.metadata import parse_email  # pulls in the email package; cold path only

    raw, _unparsed = parse_email(metadata)
    requires_python = raw.get("requires_python")
    return requires_python.strip() if requires_python else None


def _metadata_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + METADATA_SUFFIX)


# --- output --------------------------------------------------------------------------------


def _write_index(directory: Path, files: tuple[IndexedFile, ...], cache: bytes) -> None:
    """Publish the pages, the cache and the ``.metadata`` files all or nothing; write nothing
    when they are already current (a warm run), so mtimes stay put."""
    simple = directory / SIMPLE_DIR
    pages = {**_pages(files), CACHE_FILE: cache}
    metadata = {_metadata_path(directory / f.filename): f.metadata for f in files if f.metadata is not None}
    changed = {path: data for path, data in metadata.items() if not holds(path, data)}
    stale = [
        Path(entry.path)
        for entry in os.scandir(directory)
        if entry.name.endswith(".whl" + METADATA_SUFFIX) and Path(entry.path) not in metadata
    ]
    if not changed and not stale and tree_holds(simple, pages):
        return
    for path, kind, is_kind in [
        (simple, "directory", Path.is_dir),
        *((path, "file", Path.is_file) for path in changed),
    ]:
        if os.path.islink(path) or (os.path.lexists(path) and not is_kind(path)):
            raise UsageError(f"{path}: in the way of the index (a link, or not a {kind})")
    for path in stale:  # removed after the switch, which must not fail then: a directory would
        if path.is_dir() and not path.is_symlink():
            raise UsageError(f"{path}: in the way of the index (a directory where its stale file goes)")
    staged_tree = stage_tree(simple, pages)
    staged: dict[Path, Path] = {}
    created: list[Path] = []
    try:
        for path, data in changed.items():
            staged[path] = write_temp(path, data)
        # The switch: renames only. .metadata files go first, so no page links one that is missing.
        for path, temp in staged.items():
            if not os.path.lexists(path):
                created.append(path)
            os.replace(temp, path)
        switch_tree(staged_tree, simple)
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        for temp in staged.values():
            temp.unlink(missing_ok=True)
        shutil.rmtree(staged_tree, ignore_errors=True)
        raise
    for path in stale:
        path.unlink(missing_ok=True)


def owned_by_index(directory: Path, path: Path) -> bool:
    """Whether ``path`` is a file the index of ``directory`` reads or writes (a distribution, a ``.metadata`` file,
    anything under ``simple/``): an output written there would replace what pip is sent to."""
    directory, path = resolved_path(directory), resolved_path(path)
    if path.parent == directory:
        return _is_distribution(path.name) or (not path.name.startswith(".") and path.name.endswith(METADATA_SUFFIX))
    return path.is_relative_to(directory / SIMPLE_DIR)


def _is_distribution(name: str) -> bool:
    """Whether the file ``name`` in the index's directory is a distribution the index lists (a hidden one never is:
    the index's own cache and staging files)."""
    return not name.startswith(".") and name.endswith((".whl", *_SDIST_SUFFIXES))


def _pages(files: Iterable[IndexedFile]) -> dict[str, bytes]:
    """The PEP 503 pages of ``files``, by path relative to ``simple/``."""
    by_project = group_by_project(files)
    pages = {"index.html": render_root_page(by_project)}
    for project, project_files in by_project.items():
        pages[f"{project}/index.html"] = render_project_page(project, project_files)
    return pages


def render_root_page(projects: Iterable[NormalizedName]) -> bytes:
    """PEP 503 root page: one anchor per normalized project name."""
    links = "".join(f'    <a href="{quote(p)}/">{html.escape(p)}</a><br>\n' for p in sorted(projects))
    return _page("Simple index", links)


def render_project_page(project: NormalizedName, files: Iterable[IndexedFile]) -> bytes:
    """PEP 503 project page; hrefs are relative to ``DIR/simple/<project>/``."""
    links = []
    for indexed in sorted(files, key=lambda f: (f.version, f.filename)):
        attributes = [f'href="../../{quote(indexed.filename)}#sha256={indexed.sha256}"']
        if indexed.requires_python:
            attributes.append(f'data-requires-python="{html.escape(indexed.requires_python)}"')
        if indexed.metadata_sha256:
            value = f"sha256={indexed.metadata_sha256}"
            attributes.append(f'data-dist-info-metadata="{value}"')
            attributes.append(f'data-core-metadata="{value}"')
        links.append(f"    <a {' '.join(attributes)}>{html.escape(indexed.filename)}</a><br>\n")
    return _page(f"Links for {project}", "".join(links))


def _page(title: str, body: str) -> bytes:
    escaped = html.escape(title)
    return (
        "<!DOCTYPE html>\n"
        "<html>\n"
        "  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{escaped}</title>\n"
        "  </head>\n"
        "  <body>\n"
        f"    <h1>{escaped}</h1>\n"
        f"{body}"
        "  </body>\n"
        "</html>\n"
    ).encode("utf-8")


def _load_cache(directory: Path) -> dict[str, dict]:
    """The previous run's hashes, read through the one cache reader (:func:`patched_wheels.base.cache.read_json`:
    bounded, regular files we own only); anything unreadable or of another shape just means hashing again."""
    path = directory / SIMPLE_DIR / CACHE_FILE
    data = read_json(path, max_bytes=_MAX_CACHE_BYTES)
    if data is None:
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("format") == _CACHE_FORMAT else None
    if not isinstance(files, dict):
        warn(f"{path}: cache file ignored (not a format {_CACHE_FORMAT} hash cache)")
        return {}
    return files


def _file_kind(mode: int) -> str:
    """What a non-regular file is, for an error line."""
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a device",
        stat.S_ISBLK: "a device",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "a special file")


def _cache_payload(candidates: list[_Candidate], files: tuple[IndexedFile, ...]) -> bytes:
    """Key each hash by the stat taken before hashing: a file touched since is rehashed."""
    entries = {}
    for candidate, indexed in zip(candidates, files):
        entries[indexed.filename] = {
            **_file_key(candidate.stat),
            "sha256": indexed.sha256,
            "metadata_sha256": indexed.metadata_sha256,
            "requires_python": indexed.requires_python,
        }
    payload = json.dumps({"format": _CACHE_FORMAT, "files": entries}, indent=1, sort_keys=True)
    return payload.encode("utf-8") + b"\n"
