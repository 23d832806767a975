"""uv.lock in and out: the pins a ``uv.lock`` installs here, and the same file pointing at our wheels.

Reading (after uv's lock format and rules_python 2.3.2's ``parse_requirements.bzl``): a ``uv.lock`` holds
every package of every platform and Python version the project supports, so the pins are the packages
this interpreter installs: from the workspace members (``virtual``/``editable``/``directory`` sources,
with all their extras and dependency groups) along every dependency whose marker holds here, taking the
extras each edge asks for; where a name has several versions (forks), the edge's version and source and
the package's ``resolution-markers`` pick one. A pin's hashes and files are the package's wheels (and
sdist), so ``resolve`` needs no index page for them.

The reader keeps the text cut into ``[[package]]`` blocks for :mod:`patched_wheels.lock.formats.uvwriter` to edit,
not the parsed document (several times the text): each block is parsed alone
(:func:`~patched_wheels.lock.formats.tomlread.split_lock`), once, for both what the walk from the members
reads (a row of values, :class:`_Graph`) and the package's pin, kept until the walk says whether it is
installed. A pin holds its hashes but not its files, mostly URLs, which only a patched pin's plan and
``resolve`` read: they are read again from the block when asked (:class:`_LockedFiles`), as the writer
reads again each block it edits (:meth:`UvLock.package`). It depends on the lock model only.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import AbstractSet, Any, Iterator, Mapping, Sequence, overload

from packaging.utils import NormalizedName

from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.tomlread import (
    Part,
    get,
    parse_part,
    path_url,
    split_lock,
    strings,
    tables,
    toml_parser,
)
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

_WORKSPACE_SOURCES = ("virtual", "editable", "directory")
_NO_EXTRAS: frozenset[str] = (
    frozenset()
)  # one for every package of a lock without members (an empty set each is 200 bytes)


# What the walk from the members reads of each package: not its files (most of a lock), read for its pin.
_GRAPH_KEYS = (
    "name",
    "version",
    "source",
    "dependencies",
    "optional-dependencies",
    "dev-dependencies",
    "resolution-markers",
)
_GRAPH_POSITION = {key: position for position, key in enumerate(_GRAPH_KEYS)}


@dataclass(frozen=True)
class UvLock:
    """A uv.lock read for one environment: its pins, and its text cut into ``[[package]]`` blocks."""

    lock: Lock
    text: str
    blocks: tuple[Span, ...]  # the lines of each [[package]] table, in file order
    parts: tuple[Part, ...]  # the characters of each block in ``text``
    names: tuple[NormalizedName, ...]  # each block's package

    def block_lines(self, number: int) -> list[str]:
        """The lines of block ``number``, each with its line ending."""
        part = self.parts[number]
        return self.text[part.start : part.end].splitlines(keepends=True)

    def package(self, number: int) -> dict[str, Any]:
        """The table of block ``number``, parsed from the block alone."""
        return _table(toml_parser(self.lock.source), self.text, self.parts[number], self.blocks[number])


def read_uv_lock(path: Path | str, environment: Mapping[str, str] | None = None) -> UvLock:
    """The pins ``path`` installs in ``environment`` (default: the running interpreter)."""
    path = Path(path)
    source = str(path)
    text, head, header_parts = split_lock(path, "package")
    _check_version(head, source)
    parts = tuple(header_parts)  # the writer finds each package's block by its number
    ends = [part.line for part in parts[1:]]
    ends += [parts[-1].line + text.count("\n", parts[-1].start) + (not text.endswith("\n"))] if parts else []
    blocks = tuple(Span(source, part.line, end) for part, end in zip(parts, ends))
    tomllib = toml_parser(path)
    root = path.parent
    packages = _Graph()
    pins: list[Pin | InvalidLockError] = []  # each package's pin without extras, or why it has none
    for part, block in zip(parts, blocks):
        table = _table(tomllib, text, part, block)
        packages.add(table)
        pins.append(_first_pin(table, _LockedFiles(tomllib, text, part, block, root, 0)))
    env = marker_environment(environment)
    names = tuple(
        _project(get(package, "name", str, _where(block, package)), block) for package, block in zip(packages, blocks)
    )
    _refuse_duplicates(packages, names, blocks)
    extras = _installed(packages, names, blocks, env)
    kinds = [_source_kind(package, block) for package, block in zip(packages, blocks)]
    members = tuple(sorted({names[n] for n, kind in enumerate(kinds) if kind in _WORKSPACE_SOURCES}))
    del packages
    installed = [
        _installed_pin(pins[number], sorted(extras[number]))
        for number in sorted(extras)
        if kinds[number] not in _WORKSPACE_SOURCES
    ]
    return UvLock(Lock(source, "uv-lock", tuple(installed), members=members), text, blocks, parts, names)


_VERSION = 1
"""The uv.lock format this reader reads: the ``version`` uv writes at the top (its ``revision`` only adds keys)."""


def _check_version(head: dict[str, Any], source: str) -> None:
    """A uv.lock says its format's version before its packages; a file that does not (another lock format, or no
    lock at all) would read as a lock of nothing."""
    if "version" not in head:
        other = " (it has PEP 751's lock-version: a pylock.toml)" if "lock-version" in head else ""
        raise InvalidLockError(f"{source}: 'version' is missing: not a uv.lock{other}")
    version = get(head, "version", int, source)
    if version != _VERSION:
        raise InvalidLockError(f"{source}: version {version}: not a uv.lock format this reader knows ({_VERSION})")


class _Graph:
    """What the walk from the members reads of each package (``_GRAPH_KEYS``), held as a row of values (a dict
    each would take as much as the pins) and given as the table's dict of those keys when asked."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.sources: dict[str, Any] = {}  # one object per source written: a big lock names one registry throughout

    def add(self, table: dict[str, Any]) -> None:
        source = table.get("source")
        if isinstance(source, dict):
            table["source"] = self.sources.setdefault(repr(source), source)
        self.rows.append(tuple(table.get(key) for key in _GRAPH_KEYS))  # None: absent (TOML has no null)

    def value(self, number: int, key: str) -> Any:
        """The value of ``key`` (one of ``_GRAPH_KEYS``) in package ``number``'s table, None where it has none: no
        dict made, for the lookups the walk makes per candidate."""
        return self.rows[number][_GRAPH_POSITION[key]]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, number: int) -> dict[str, Any]:
        return {key: value for key, value in zip(_GRAPH_KEYS, self.rows[number]) if value is not None}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[number] for number in range(len(self.rows)))


def _first_pin(table: dict[str, Any], files: "_LockedFiles") -> Pin | InvalidLockError:
    """The pin of a package asked for no extras, or the error reading it, raised only if it is installed: the
    one parse of each block reads both what the walk from the members needs and the pin."""
    try:
        return _pin(table, files, [])
    except InvalidLockError as error:
        error.__context__ = None  # its traceback, and the one of the error it was raised from, would hold the table
        return error.with_traceback(None)


def _installed_pin(first: Pin | InvalidLockError, extras: list[str]) -> Pin:
    """The pin of an installed package with the ``extras`` asked of it (its block parsed again: rare)."""
    if isinstance(first, InvalidLockError):
        raise first
    if not extras:
        return first
    files = first.files
    assert isinstance(files, _LockedFiles)
    return _pin(files.table(), files, extras)


@dataclass(frozen=True)
class _LockedFiles(Sequence[PinFile]):
    """The files a package's table names, read again from its block when asked: only a patched pin's are
    (and a resolve's), and a big lock names hundreds of thousands, mostly URLs and hashes."""

    __slots__ = ("tomllib", "text", "part", "block", "root", "length")  # one per pin: no dict each
    tomllib: ModuleType
    text: str
    part: Part
    block: Span
    root: Path  # the lock's directory, which relative paths are relative to
    length: int  # how many there are, known without reading them

    def table(self) -> dict[str, Any]:
        return _table(self.tomllib, self.text, self.part, self.block)

    def _files(self) -> list[PinFile]:
        return _files(self.table(), self.block, self.root)[0]

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> PinFile: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PinFile]: ...

    def __getitem__(self, index: int | slice) -> PinFile | Sequence[PinFile]:
        return self._files()[index]

    def __iter__(self) -> Iterator[PinFile]:
        return iter(self._files())


def _table(tomllib: ModuleType, text: str, part: Part, block: Span) -> dict[str, Any]:
    """The one package table of a block, parsed alone (a header spelt otherwise would make it two)."""
    packages = tables(parse_part(tomllib, block.source, text, part), "package", block.where)
    if len(packages) != 1:
        raise InvalidLockError(
            f"{block.where}: its [[package]] tables are not written each under its own line as uv writes them"
        )
    return packages[0]


def _refuse_duplicates(packages: _Graph, names: tuple[NormalizedName, ...], blocks: tuple[Span, ...]) -> None:
    """One spelling per project and one package per name, version and source: a second spelling (``Foo``
    beside ``foo``, the same name by PEP 503; uv writes names normalized) or a second package of the same
    name, version and source cannot be told apart by the dependencies naming it, and would be pinned (and
    rewritten) twice."""
    first: dict[NormalizedName, int] = {}  # the first package of each name
    seen: dict[tuple[NormalizedName, str, str], int] = {}  # the packages of the names written twice only
    for number, name in enumerate(names):
        earlier = first.setdefault(name, number)
        if earlier == number:
            continue
        package, at = packages[number], blocks[earlier]
        spelling = packages[earlier]["name"]
        if package["name"] != spelling:
            raise InvalidLockError(
                f"{_where(blocks[number], package)}: a second spelling of {name} (the first, {spelling!r}, is at line {at.start + 1})"
            )
        seen.setdefault(_identity(name, packages[earlier]), earlier)
        key = _identity(name, package)
        if key in seen:
            raise InvalidLockError(
                f"{_where(blocks[number], package)}: a second package {name} {package.get('version')} from the same source "
                f"(the first is at line {blocks[seen[key]].start + 1})"
            )
        seen[key] = number


def _identity(name: NormalizedName, package: dict[str, Any]) -> tuple[NormalizedName, str, str]:
    """What tells the packages of one name apart: their version and source."""
    return name, repr(package.get("version")), repr(package.get("source"))


def _project(name: str, block: Span) -> NormalizedName:
    """The project ``name`` names, the very string when it is written normalized (as uv writes names)."""
    project = canonicalize_name(checked_name(name, f"{block.where}: package {name!r}"))
    return NormalizedName(name) if project == name else project


def _where(span: Span, package: dict[str, Any]) -> str:
    return package_where(span, package.get("name"))


def _source_kind(package: dict[str, Any], span: Span) -> str:
    source = get(package, "source", dict, _where(span, package))
    kinds = [kind for kind in ("registry", "url", "path", "git", *_WORKSPACE_SOURCES) if kind in source]
    if len(kinds) != 1 or not isinstance(source[kinds[0]], str):
        raise InvalidLockError(
            f"{_where(span, package)}: source must name one registry, url, path, git or workspace member"
        )
    return kinds[0]


def _installed(
    packages: _Graph, names: tuple[NormalizedName, ...], blocks: tuple[Span, ...], env: dict[str, str]
) -> Mapping[int, AbstractSet[str]]:
    """The packages installed in ``env`` (by position) with the extras asked of each (module docstring)."""
    roots = [n for n, package in enumerate(packages) if _source_kind(package, blocks[n]) in _WORKSPACE_SOURCES]
    if not roots:  # no workspace member: every package that applies here
        return {n: _NO_EXTRAS for n, package in enumerate(packages) if _forks_hold(package, blocks[n], env)}
    by_name: dict[NormalizedName, list[int]] = {}
    by_version: dict[tuple[NormalizedName, str], list[int]] = {}  # an edge that names a version: found at once
    for number, name in enumerate(names):
        by_name.setdefault(name, []).append(number)
        version = packages.value(number, "version")
        if isinstance(version, str):
            by_version.setdefault((name, version), []).append(number)
    extras: dict[int, frozenset[str]] = {}  # most are _NO_EXTRAS, one object for all
    work: list[tuple[int, frozenset[str]]] = []
    for root in roots:
        optional = get(packages[root], "optional-dependencies", dict, _where(blocks[root], packages[root]), {})
        work.append((root, frozenset(optional)))
    while work:
        number, asked = work.pop()
        known = extras.get(number)
        if known is not None and asked <= known:
            continue
        extras[number] = asked if known is None else known | asked
        for edge in _edges(packages[number], blocks[number], asked, number in roots):
            where = _where(blocks[number], packages[number])
            marker = get(edge, "marker", str, where, "")
            if marker and not marker_holds(marker, env, where=where):
                continue
            for target in _targets(edge, by_name, by_version, packages, blocks, env, where):
                work.append((target, frozenset(strings(edge, "extra", where)) or _NO_EXTRAS))
    return extras


def _edges(package: dict[str, Any], span: Span, extras: frozenset[str], root: bool) -> list[dict[str, Any]]:
    """The dependency tables of ``package`` with ``extras`` (and, for a workspace member, its groups)."""
    where = _where(span, package)
    edges = list(tables(package, "dependencies", where))  # a copy: the document stays as read, for the writer
    optional = get(package, "optional-dependencies", dict, where, {})
    for extra in sorted(extras & set(optional)):
        edges += tables(optional, extra, f"{where}: optional-dependencies")
    if root:
        groups = get(package, "dev-dependencies", dict, where, {})
        for group in sorted(groups):
            edges += tables(groups, group, f"{where}: dev-dependencies")
    return edges


def _targets(
    edge: dict[str, Any],
    by_name: Mapping[NormalizedName, list[int]],
    by_version: Mapping[tuple[NormalizedName, str], list[int]],
    packages: _Graph,
    blocks: tuple[Span, ...],
    env: dict[str, str],
    where: str,
) -> list[int]:
    """The package an edge names: by name, then version and source, then the forks that hold here. Looked up, not
    searched: a lock of N versions of one package, each named by an edge, was N² tables made."""
    name = canonicalize_name(get(edge, "name", str, where))
    candidates = by_name.get(name)
    if not candidates:
        raise InvalidLockError(f"{where}: depends on {name}, which the lock has no package of")
    if "version" in edge:
        version = edge["version"]
        candidates = by_version.get((name, version), []) if isinstance(version, str) else []
    if "source" in edge:
        candidates = [n for n in candidates if packages.value(n, "source") == edge["source"]]
    if len(candidates) > 1:
        candidates = [n for n in candidates if _forks_hold(packages[n], blocks[n], env)][:1]
    return candidates


def _forks_hold(package: dict[str, Any], span: Span, env: dict[str, str]) -> bool:
    markers = strings(package, "resolution-markers", _where(span, package))
    return not markers or any(marker_holds(marker, env, where=_where(span, package)) for marker in markers)


def _pin(package: dict[str, Any], files: _LockedFiles, extras: list[str]) -> Pin:
    """The pin of an installed package: its version, hashes and files, and its URL when it is no registry's."""
    span, root = files.block, files.root
    where = _where(span, package)
    source = get(package, "source", dict, where)
    kind = _source_kind(package, span)
    found, hashes = _files(package, span, root)
    url = source["url"] if kind == "url" else _git_url(source["git"], where) if kind == "git" else None
    if kind == "path":
        url = path_url(root, get(source, "path", str, where), where)
    version = get(package, "version", str, where)
    pin = locked_pin(get(package, "name", str, where), extras, version, hashes=hashes, url=url, files=found, span=span)
    return replace(pin, files=replace(files, length=len(found)))


def _files(package: dict[str, Any], span: Span, root: Path) -> tuple[list[PinFile], list[str]]:
    """The files a package's table names (its wheels) and its hashes (its wheels', then its sdist's)."""
    where = _where(span, package)
    source = get(package, "source", dict, where)
    kind = _source_kind(package, span)
    base = root / source["registry"] if kind == "registry" and "://" not in source["registry"] else root
    files, hashes = [], []
    for wheel in tables(package, "wheels", where):
        digest = get(wheel, "hash", str, f"{where}: wheel", "")
        hashes += [_hash(digest, f"{where}: wheel")] if digest else []
        location = _file_location(wheel, base, root, source, where)
        files.append(PinFile(location, digest or None, get(wheel, "filename", str, where, "") or None))
    sdist = get(package, "sdist", dict, where, {})
    hashes += [_hash(get(sdist, "hash", str, f"{where}: sdist"), f"{where}: sdist")] if "hash" in sdist else []
    return files, hashes


def _git_url(written: str, where: str) -> str:
    """pip's spelling of uv's git source (``URL?rev=…&subdirectory=…#COMMIT``) at its locked commit:
    ``git+URL@COMMIT#subdirectory=…``. The commit is what pins it: without one the pin would follow a branch."""
    base, _, commit = written.partition("#")
    if not commit.isalnum():
        raise InvalidLockError(f"{where}: git source {written[:200]!r} names no commit (uv writes URL#COMMIT)")
    parts = urllib.parse.urlsplit(base)
    subdirectory = urllib.parse.parse_qs(parts.query).get("subdirectory")
    url = f"git+{urllib.parse.urlunsplit(parts._replace(query=''))}@{commit}"
    return url + (f"#subdirectory={subdirectory[0]}" if subdirectory else "")


def _hash(written: str, where: str) -> str:
    """A uv.lock hash (``sha256:<hex>``), checked like every hash a lock gives us."""
    algorithm, _, digest = written.partition(":")
    checked_hash(algorithm, digest, where)
    return written  # the document's string, equal to the one checked: a 50 MB lock holds 240,000 of them


def _file_location(wheel: dict[str, Any], base: Path, root: Path, source: dict[str, Any], where: str) -> str:
    """A wheel's URL: as written, or a ``file://`` URL of its path (relative to its registry directory),
    or of the path source it is the file of."""
    if "url" in wheel:
        return get(wheel, "url", str, where)
    if "path" in wheel:
        return path_url(base, get(wheel, "path", str, where), where)
    if "path" in source:
        return path_url(root, get(source, "path", str, where), where)
    raise InvalidLockError(f"{where}: a wheel without url or path")
