"""The lock model: what every lock reader produces and every lock writer and ``resolve`` consume.

A lock comes as a pip requirements file, a ``uv.lock`` or a PEP 751 ``pylock.toml``; each reader turns
it into one :class:`Lock` of :class:`Pin` s, so the decision of what changes for the patched wheels
(:mod:`patched_wheels.lock.plan`) and the choice of each pin's wheel (:mod:`patched_wheels.lock.resolve`)
are written once. A pin keeps what the user wrote (the name's spelling, the extras, the marker text)
and the span of lines it came from, so a writer can change that pin and leave every other byte alone.

Every value we write into a lock goes through :func:`check_lock_value`: a lock is line-based (pip)
or quoted (TOML), so a line break, a NUL or a blank inside a value would become another line,
option or token there. Every value a TOML lock (uv.lock, pylock.toml) gives a pin goes through
:func:`locked_pin`, once for every reader: the name and extras must be PEP 508 names, the version a
PEP 440 version, each URL one token and each hash a hex digest - a name such as
``other@https://evil.invalid/x.whl#`` would otherwise become a direct reference in the requirements
lock. Markers are parsed and evaluated by :func:`marker_holds`, whose every failure is one error line.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence
from urllib.parse import quote

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName, default_environment
from packaging.utils import NormalizedName
from packaging.version import InvalidVersion, Version

from patched_wheels.base.fsutil import read_input_text
from patched_wheels.base.names import canonicalize_name
from patched_wheels.base.schema import shown
from patched_wheels.errors import InvalidLockError, InvalidWheelError, UsageError
from patched_wheels.lock.requiresdist import unevaluable_reason
from patched_wheels.wheelfile.filename import WheelFilename

#: The largest lock we read: torch's universal uv.lock is under 1 MiB; a lock is an input anyone can hand a CI job.
MAX_LOCK_BYTES = 64 << 20


def read_lock_text(path: Path) -> str:
    """The UTF-8 text of the lock file ``path``, of at most ``MAX_LOCK_BYTES`` (:func:`read_lock_input`)."""
    return read_lock_input(path, max_bytes=MAX_LOCK_BYTES, what="a lock")


def read_lock_input(path: Path, *, max_bytes: int, what: str) -> str:
    """The UTF-8 text of ``path``, a lock or a file read to resolve one (an index page), ``what`` in errors
    (:func:`~patched_wheels.base.fsutil.read_input_text`: one error line naming the file)."""
    return read_input_text(path, max_bytes=max_bytes, what=what, where=str(path), error=InvalidLockError)


def check_lock_value(value: str, what: str) -> str:
    """``value`` if it can be written into a lock as one token; else one error line naming ``what``
    (the flag or attribute the value came from).

    Refused: blanks, control characters and every other character Python's ``str.splitlines`` (and
    so pip's reader) or TOML would treat as a line break or separator (``isprintable`` is false for
    them all but the ASCII space), and a final backslash, which pip reads as a line continuation that
    would join the next line (a pin) into the value.
    """
    bad = next((c for c in value if c == " " or not c.isprintable()), None)
    if bad is not None:
        reason = f"holds {bad!r}"
    elif not value:
        reason = "is empty"
    elif value.endswith("\\"):
        reason = "ends with '\\', pip's line continuation"
    else:
        return value
    raise UsageError(f"{what} {value!r}: {reason}, which cannot be written into a lock")


def file_url(path: Path, sha256: str | None = None) -> str:
    """A ``file://`` URL that keeps a local version's ``+`` as it is (``Path.as_uri`` writes ``%2B``):
    Bazel's downloader opens the path as written, pip and rules_python read both spellings.
    With ``sha256``, the digest rides along as the ``#sha256=`` fragment pip checks."""
    return "file://" + quote(str(path), safe="/+") + (f"#sha256={sha256}" if sha256 else "")


@dataclass(frozen=True)
class Span:
    """Where a pin or option is written: physical lines [start, end) of ``source`` (0-based)."""

    __slots__ = ("source", "start", "end")  # one per pin: a 50 MB uv.lock has 80,000
    source: str
    start: int
    end: int

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the first line, to start a one-line error."""
        return f"{self.source}:{self.start + 1}"


@dataclass(frozen=True)
class PinFile:
    """A file the lock itself names for a pin (uv.lock, pylock.toml), so no index page is needed. Its name
    and sha256 are derived when asked, not held: a big lock names hundreds of thousands of files."""

    __slots__ = ("url", "hash", "name")  # three or more per pin: no dict each
    url: str
    hash: str | None  # "<algorithm>:<hex>", the very string among the pin's hashes
    name: str | None  # the file's name as the lock writes it; None: the last segment of ``url``

    @property
    def filename(self) -> str:
        return self.name or self.url.split("?", 1)[0].rsplit("/", 1)[-1]

    @property
    def sha256(self) -> str | None:
        """The lower-case hex digest of a sha256 ``hash``; None for another algorithm or none."""
        algorithm, _, digest = (self.hash or "").partition(":")
        return digest.lower() if algorithm == "sha256" else None


@dataclass(frozen=True)
class Pin:
    """One locked project.

    ``head`` is the name and extras exactly as written (``Foo.Bar[x, y]``), ``marker`` the marker text
    as written; a writer that respells the pin (a direct reference, a split by platform) keeps both.
    """

    __slots__ = (  # a 50 MB uv.lock has 80,000: no dict each (and so no defaults)
        "name",
        "extras",
        "head",
        "version",
        "marker",
        "hashes",
        "url",
        "span",
        "text",
        "pin_error",
        "version_text",
        "files",
    )
    name: str
    extras: tuple[str, ...]
    head: str
    version: Version | None  # None: not pinned to one version (see ``pin_error``)
    marker: str | None
    hashes: tuple[str, ...]  # "<algorithm>:<hex>", as written
    url: str | None  # a direct reference's URL
    span: Span
    text: str  # the requirement as packaging writes it, for messages
    pin_error: str | None  # why ``version`` is None
    version_text: str | None  # the version of an ``==`` pin as written, for a writer to find it
    files: Sequence[PinFile]  # a reader may read them again from the lock when asked

    @property
    def project(self) -> NormalizedName:
        return canonicalize_name(self.name)

    @property
    def sha256s(self) -> frozenset[str]:
        """The lower-case hex digests of the pin's sha256 hashes."""
        return frozenset(h.partition(":")[2].lower() for h in self.hashes if h.lower().startswith("sha256:"))

    def pinned_version(self) -> Version:
        """The one version the pin admits; a pin that admits several is an error, since a lock pins one file."""
        if self.version is None:
            raise InvalidLockError(f"{self.span.where}: {self.pin_error or f'{self.name} is not pinned'}")
        return self.version

    def applies(self, environment: Mapping[str, str] | None = None) -> bool:
        """Whether the pin's marker holds in ``environment`` (default: the running interpreter)."""
        return self.marker is None or marker_holds(self.marker, environment, where=self.span.where)


_HASH = re.compile(r"([a-z0-9_]+):([0-9a-fA-F]+)")
_DIGEST_LENGTHS = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64, "sha384": 96, "sha512": 128}


def checked_hash(algorithm: object, digest: object, where: str) -> str:
    """``algorithm:digest`` if it is a hash a lock can carry (a hex digest of the algorithm's length);
    else one error naming ``where``.  A uv.lock's or pylock.toml's hashes are written into the
    requirements lock, where a line break or blank would add an option line (``--index-url=...``).
    A digest of the wrong length is refused before any copy of it is made: a lock may hold megabytes there."""
    length = _DIGEST_LENGTHS.get(algorithm) if isinstance(algorithm, str) else None
    if isinstance(algorithm, str) and isinstance(digest, str) and (length is None or len(digest) == length):
        text = f"{algorithm}:{digest}"
        if _HASH.fullmatch(text):
            return text
    # The start of the value (shown() cuts a longer one), without building the whole of it.
    preview = f"{str(algorithm)[:81]}:{str(digest)[:81]}"[:81]
    expected = f" ({algorithm}: {length} hex digits)" if length else ""
    raise InvalidLockError(f"{where}: hash {shown(preview)} is not <algorithm>:<hex digest>{expected}")


def marker_environment(environment: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``environment``, or this interpreter's marker environment (None), for a lock's markers:
    packaging types its own as a TypedDict, which a ``dict[str, str]`` is built from value by value."""
    if environment is not None:
        return dict(environment)
    return {name: str(value) for name, value in default_environment().items()}


def marker_holds(marker: str, environment: Mapping[str, str] | None, *, where: str) -> bool:
    """Evaluate a PEP 508 marker; one that cannot be parsed or evaluated (``python_version ~= "3"`` is
    packaging's ``UndefinedComparison``) is an error naming ``where``."""
    try:
        return Marker(marker).evaluate(dict(environment) if environment is not None else None)
    except (
        InvalidMarker,
        UndefinedComparison,
        UndefinedEnvironmentName,
        RecursionError,
        SyntaxError,
        ValueError,
        KeyError,
    ) as error:
        # packaging's parser recurses per "(" and hands a quoted value to ast.literal_eval (a line break in it:
        # SyntaxError); packaging >= 25 parses PEP 751's ``extras`` and ``dependency_groups`` but evaluates them
        # only in a lock file's context, raising KeyError outside it (pip's requirements readers do the same).
        reason = unevaluable_reason(error)
        raise InvalidLockError(f"{where}: marker {marker[:200]!r}: {reason[:200]}") from None


#: A PEP 508 project name (and extra name, PEP 685): what pip reads as one name and nothing more.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def checked_name(value: str, where: str, what: str = "name") -> str:
    """``value`` if it is a PEP 508 name; else one error naming ``where``. A name is written into the
    requirements lock as the start of a requirement: ``x@https://…#`` would make it a direct reference."""
    if not _NAME.fullmatch(value):
        raise InvalidLockError(f"{where}: {what} {value[:200]!r} is not a PEP 508 name")
    return value


def checked_version(written: str, where: str) -> Version:
    """The PEP 440 version ``written``, which is written back as it is and so must be one token."""
    return shared_version(written, where)[1]


def shared_version(written: str, where: str) -> tuple[str, Version]:
    """``written`` and its :func:`checked_version`, both the very objects of the last pin that had the same text:
    a Version takes 150 bytes and its text 50, and a big lock's pins repeat their versions (issue 52: 130,000
    pins of a 30 MB pylock.toml). Neither is ever changed, so pins share them; the cache is bounded."""
    parsed = _parsed_version(written)
    if parsed is None:
        raise InvalidLockError(f"{where}: version {written[:200]!r} is not a PEP 440 version")
    return parsed


@functools.lru_cache(maxsize=1024)
def _parsed_version(written: str) -> tuple[str, Version] | None:
    try:
        return (written, Version(written)) if written == written.strip() else None
    except InvalidVersion:
        return None


def reference_version(name: str, url: str) -> tuple[Version | None, str | None]:
    """The version a direct reference pins, or why it pins none: one rule for every lock reader (a
    requirements lock's ``name @ URL`` and ``-e URL#egg=name``, a uv.lock's url, git and path sources, a
    pylock.toml's archive, vcs, directory and lone sdist). Only a wheel file says its version, by its name;
    an sdist, a directory or a VCS checkout pins what a build makes of it, which no patched wheel replaces:
    such a pin is an error wherever its version is needed (:meth:`Pin.pinned_version`: a patched project's)."""
    filename = url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1]
    try:
        return WheelFilename.parse(filename).version, None
    except InvalidWheelError:
        return None, f"{name} @ {url}: names no wheel file, so its version is unknown"


def checked_url(value: str, where: str) -> str:
    """A file's or direct reference's URL, which the requirements lock and Bazel's downloader take as one token."""
    try:
        return check_lock_value(value, f"{where}: url")
    except UsageError as error:
        raise InvalidLockError(str(error)) from None


def package_where(span: Span, name: object) -> str:
    """How an error names a TOML lock's package: ``FILE:LINE: package 'NAME'``, its name as written (whatever
    its type: the error may be that it is no string)."""
    return f"{span.where}: package {name!r}"


def locked_pin(
    name: str,
    extras: Sequence[str],
    version: str | None,
    *,
    hashes: Sequence[str],
    url: str | None,
    files: Sequence[PinFile],
    span: Span,
) -> Pin:
    """The pin of a TOML lock's package written at ``span``, every value checked (module docstring), errors
    naming it as :func:`package_where` does; no version: a pin that is an error when its version is needed (a
    pylock.toml entry may leave it out). With ``url`` (a direct reference), its version is
    :func:`reference_version`'s, whatever ``version`` says."""
    where = package_where(span, name)
    checked_name(name, where)
    for extra in extras:
        checked_name(extra, where, "extra")
    version, parsed = shared_version(version, where) if version else (version, None)
    for value in [url] if url else []:
        checked_url(value, where)
    for file in files:
        checked_url(file.url, where)
    head = name + (f"[{','.join(extras)}]" if extras else "")
    error = None if parsed else f"{name} has no version in the lock"
    if url:
        parsed, error = reference_version(name, url)
    return Pin(
        name,
        tuple(extras),
        head,
        parsed,
        None,
        tuple(hashes),
        url,
        span,
        f"{head}=={version or ''}",
        error,
        version,
        tuple(files),
    )


@dataclass(frozen=True)
class LockOption:
    """An index option line of a requirements lock (``--index-url``, ``--extra-index-url``,
    ``--find-links``, ``--no-index``, with their short forms), as ``kind``."""

    kind: str
    span: Span
    text: str  # the logical line, comments removed (``--find-links=/wheels``)


@dataclass(frozen=True)
class Lock:
    """A lock as its reader understood it: pins and index options, in file order."""

    source: str
    format: str  # one of lock.formats.registry.FORMATS
    pins: tuple[Pin, ...]
    options: tuple[LockOption, ...] = ()
    members: tuple[NormalizedName, ...] = ()  # projects the lock builds from its own source (uv workspace members)

    @property
    def uses_hashes(self) -> bool:
        return any(pin.hashes for pin in self.pins)
