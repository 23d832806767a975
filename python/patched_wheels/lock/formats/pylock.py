"""Read a PEP 751 ``pylock.toml`` (written by ``pip lock`` and ``uv export --format pylock.toml``) as pins.

Each ``[[packages]]`` entry whose ``marker`` holds for the environment (default: the running
interpreter) is a pin of its ``version`` with the hashes of its wheels and sdist; its wheels are the
pin's files, so ``resolve`` needs no index page. An ``archive``, ``vcs`` or ``directory`` entry, and one
whose only file is its sdist, is a direct reference that keeps its integrity: the archive's hashes, the
VCS commit (``git+URL@COMMIT``, as pip reads it), the sdist's hashes; its version is the one rule's of
every reader (:func:`~patched_wheels.lock.model.reference_version`), so a patched project pinned to
anything but a wheel is refused, as in a requirements lock. The lock is read only: the hub writes a
requirements lock (and a uv.lock) from it.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any, Mapping

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.tomlread import get, parse_part, path_url, split_lock, tables, toml_parser
from patched_wheels.lock.model import (
    Lock,
    Pin,
    PinFile,
    Span,
    checked_hash,
    checked_name,
    locked_pin,
    marker_environment,
    marker_holds,
    package_where,
)


def read_pylock(path: Path | str, environment: Mapping[str, str] | None = None) -> Lock:
    """The pins of ``path`` that apply in ``environment``, each ``[[packages]]`` table parsed alone and
    dropped once its pin is built (the whole document is several times the text)."""
    path = Path(path)
    source = str(path)
    text, head, parts = split_lock(path, "packages", inline=True)
    get(head, "lock-version", str, source)
    env = marker_environment(environment)
    tomllib = toml_parser(path)
    pins, projects = [], set()
    for part in parts:
        span = Span(source, part.line, part.line + 1)
        for package in tables(parse_part(tomllib, path, text, part), "packages", span.where):
            where = package_where(span, package.get("name"))
            marker = get(package, "marker", str, where, "")
            if marker and not marker_holds(marker, env, where=where):
                continue
            pin = _pin(package, span, where, path.parent)
            project = pin.project
            if project in projects:  # PEP 751: at most one entry of a package applies
                raise InvalidLockError(f"{where}: a second entry of {project} for this environment")
            projects.add(pin.name if project == pin.name else project)  # not a second string where one is equal
            pins.append(pin)
    return Lock(source, "pylock", tuple(pins))


def _pin(package: dict[str, Any], span: Span, where: str, root: Path) -> Pin:
    files, hashes = [], []
    for wheel in tables(package, "wheels", where):
        location = _location(wheel, root, f"{where}: wheel")
        own = _hashes(wheel, f"{where}: wheel")
        hashes += own
        sha256 = next((written for written in own if written.startswith("sha256:")), None)
        files.append(PinFile(location, sha256, get(wheel, "name", str, where, "") or None))
    sdist = get(package, "sdist", dict, where, {})
    hashes += _hashes(sdist, f"{where}: sdist", {})
    references = [kind for kind in ("archive", "vcs", "directory") if kind in package]
    if len(references) > 1:
        raise InvalidLockError(f"{where}: {' and '.join(references)}: a package comes from one source")
    url = None
    if references == ["archive"]:
        archive = get(package, "archive", dict, where)
        hashes += _hashes(archive, f"{where}: archive")
        url = _subdirectory(_location(archive, root, f"{where}: archive"), archive, f"{where}: archive")
    elif references == ["vcs"]:
        url = _vcs_url(get(package, "vcs", dict, where), root, f"{where}: vcs")
    elif references == ["directory"]:
        directory = get(package, "directory", dict, where)
        url = _subdirectory(_location(directory, root, f"{where}: directory"), directory, f"{where}: directory")
    elif sdist and not files:  # its one file: a reference to it, as `name @ URL` is in a requirements lock
        url = _location(sdist, root, f"{where}: sdist")
    version = get(package, "version", str, where, "") or None
    return locked_pin(get(package, "name", str, where), (), version, hashes=hashes, url=url, files=files, span=span)


def _hashes(table: dict[str, Any], where: str, default: dict[str, Any] | None = None) -> list[str]:
    """The table's ``hashes`` as ``algorithm:digest``, each checked (absent: ``default``, or an error when None)."""
    return [
        checked_hash(algorithm, digest, where)
        for algorithm, digest in sorted(get(table, "hashes", dict, where, default).items())
    ]


def _vcs_url(vcs: dict[str, Any], root: Path, where: str) -> str:
    """pip's spelling of a VCS source at its locked commit: ``git+URL@COMMIT`` (``#subdirectory=`` added). A
    ``commit-id`` is what pins it (PEP 751 requires one): without it the pin would follow a branch."""
    kind = checked_name(get(vcs, "type", str, where), where, "type")
    commit = get(vcs, "commit-id", str, where)
    if not commit.isalnum():
        raise InvalidLockError(f"{where}: commit-id {commit[:200]!r} is not a commit")
    location = _location(vcs, root, where)
    # pip reads the revision after the last "@" of the URL's path and the fragment after its "#": either in the
    # location would make git check out what it names instead of the commit-id (a branch that moves)
    parts = urllib.parse.urlsplit(location)
    if "#" in location or "?" in location or "@" in parts.path:
        raise InvalidLockError(
            f"{where}: vcs url {location[:200]!r}: a '#' or '?', or an '@' in its path, would make pip read "
            "another revision than the commit-id, or none"
        )
    return _subdirectory(f"{kind}+{location}@{commit}", vcs, where)


def _subdirectory(url: str, table: dict[str, Any], where: str) -> str:
    """``url`` with the table's ``subdirectory`` as pip's ``#subdirectory=`` fragment."""
    subdirectory = get(table, "subdirectory", str, where, "")
    return f"{url}#subdirectory={subdirectory}" if subdirectory else url


def _location(table: dict[str, Any], root: Path, where: str) -> str:
    """A file's URL as written, or a ``file://`` URL of its path (relative to the lock's directory)."""
    if "url" in table:
        return get(table, "url", str, where)
    if "path" in table:
        return path_url(root, get(table, "path", str, where), where)
    raise InvalidLockError(f"{where}: neither url nor path")
