"""Read a pip requirements file (a hashed lock) the way pip reads it, keeping where each piece is written.

Both ``resolve`` (which wheel each pin installs) and ``lock`` (rewriting the pins for the patched
wheels) need the same reading, and ``lock`` must change a pin without disturbing the bytes around it,
so every logical line keeps the span of physical lines it came from. Names, versions and markers are
``packaging``'s; only pip's line format is tokenized here, after ``pip/_internal/req/req_file.py``:

* a comment starts at a ``#`` at the start of a line or after whitespace;
* a line ending in ``\\`` continues on the next one, unless it is a comment;
* a requirement line is a PEP 508 requirement followed by options (``--hash=sha256:...``), split at
  the first space-separated token starting with ``-``; other lines starting with ``-`` are options;
* the text is UTF-8, and a UTF-8 byte order mark before it is no part of the first line.

Included files (``-r``/``-c``) are refused rather than followed: their pins would keep the old hashes
while the rewritten lock pins the patched wheel, and pip would fail on the mismatch far from the cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from patched_wheels.errors import InvalidLockError

BOM = "\ufeff"
EOL = re.compile(r"(\r\n|\n|\r)$")
#: One ``--hash`` option of a requirement line, with the blanks before it (``lead``).
HASH_OPTION = re.compile(r"(?P<lead>[ \t]*)(?<!\S)--hash(?:=|[ \t]+)(?P<value>[^\s\\]+)")
_COMMENT = re.compile(r"(^|\s+)#.*$")
# An option line naming an index: pip's long options take "=value" or " value", its short ones
# (single letters, parsed by optparse) also take the value glued on ("-fDIR").
_INDEX_OPTION = re.compile(r"--(?:index-url|extra-index-url|find-links)(?:=|\s|$)|-[if]")
# An option line including another file: -r/--requirement, -c/--constraint.
_INCLUDE_OPTION = re.compile(r"--(?:requirement|constraint)(?:=|\s|$)|-[rc]")


@dataclass(frozen=True)
class LogicalLine:
    """One logical line: physical lines [start, end) joined as pip joins them."""

    source: str
    start: int
    end: int
    content: str  # joined, comments removed, stripped

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the first physical line, to start a one-line error."""
        return f"{self.source}:{self.start + 1}"

    @property
    def is_option(self) -> bool:
        return self.content.startswith("-")

    @property
    def names_index(self) -> bool:
        """Whether this is an index option (``-i``, ``--index-url``, ``--extra-index-url``, ``-f``, ``--find-links``)."""
        return bool(_INDEX_OPTION.match(self.content))


@dataclass(frozen=True)
class PinLine:
    """A requirement line: the requirement and the ``--hash`` values after it."""

    line: LogicalLine
    requirement: Requirement
    hashes: tuple[str, ...]  # "sha256:<hex>" values of the --hash options, as written

    @property
    def project(self) -> NormalizedName:
        return canonicalize_name(self.requirement.name)

    @property
    def marker(self) -> str | None:
        """The environment marker as ``packaging`` writes it, or None."""
        return str(self.requirement.marker) if self.requirement.marker else None

    def pinned_version(self) -> Version:
        """The version of an ``==`` pin; any other specifier is an error, since a lock pins one file."""
        specifiers = list(self.requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator not in ("==", "===") or "*" in specifiers[0].version:
            raise InvalidLockError(
                f"{self.line.where}: {self.requirement.name} must be pinned with == (found {self.requirement})"
            )
        try:
            return Version(specifiers[0].version)
        except InvalidVersion:
            raise InvalidLockError(f"{self.line.where}: {specifiers[0].version!r} is not a PEP 440 version") from None


@dataclass(frozen=True)
class RequirementsText:
    """A requirements file split into physical lines, logical lines and pins, losing no byte."""

    source: str
    bom: str  # the byte order mark the text started with ("" if none), not part of ``lines``
    lines: tuple[str, ...]  # physical lines, each with its line ending
    logical: tuple[LogicalLine, ...]
    pins: tuple[PinLine, ...]

    @property
    def eol(self) -> str:
        """The line ending of the first line, for lines added to the file ("\\n" if it has none)."""
        first = EOL.search(self.lines[0]) if self.lines else None
        return first.group(1) if first else "\n"


def parse_requirements(text: str, source: str) -> RequirementsText:
    """Split ``text`` (the contents of ``source``, named in errors) into its lines and pins."""
    bom, text = (BOM, text[len(BOM) :]) if text.startswith(BOM) else ("", text)
    lines = tuple(text.splitlines(keepends=True))
    logical = tuple(_logical_lines(lines, source))
    for line in logical:
        if line.is_option and _INCLUDE_OPTION.match(line.content):
            raise InvalidLockError(
                f"{line.where}: {line.content}: included files are not followed; put their lines into this lock"
            )
    pins = tuple(_parse_pin(line) for line in logical if line.content and not line.is_option)
    return RequirementsText(source, bom, lines, logical, pins)


def read_requirements(path: Path | str) -> RequirementsText:
    """Read and split the requirements file ``path``; pip reads it as UTF-8 too (absent a BOM saying otherwise)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise InvalidLockError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InvalidLockError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None
    return parse_requirements(text, str(path))


def split_comment(physical: str) -> tuple[str, str]:
    """``physical`` cut where pip's comment begins: ``--hash=`` in a comment is no option, and
    the comment (with the line's ending) must come out byte for byte."""
    match = _COMMENT.search(physical)
    return (physical[: match.start()], physical[match.start() :]) if match else (physical, "")


def _logical_lines(lines: Sequence[str], source: str) -> Iterator[LogicalLine]:
    """Join continuation lines exactly as pip's ``join_lines`` does, keeping line spans."""
    start = 0
    joined: list[str] = []
    for number, physical in enumerate(lines):
        line = EOL.sub("", physical)
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if joined:
                joined.append(line)
                yield LogicalLine(source, start, number + 1, _COMMENT.sub("", "".join(joined)).strip())
                joined = []
            else:
                yield LogicalLine(source, number, number + 1, _COMMENT.sub("", line).strip())
        else:
            if not joined:
                start = number
            joined.append(line.strip("\\"))
    if joined:
        yield LogicalLine(source, start, len(lines), _COMMENT.sub("", "".join(joined)).strip())


def _parse_pin(line: LogicalLine) -> PinLine:
    """Split a requirement line like pip's ``break_args_options``: the requirement is every
    space-separated token before the first one starting with '-'."""
    tokens = line.content.split(" ")
    first_option = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
    requirement_text = " ".join(tokens[:first_option])
    try:
        requirement = Requirement(requirement_text)
    except InvalidRequirement as error:
        reason = str(error).splitlines()[0]  # packaging adds the text and a caret on more lines
        raise InvalidLockError(f"{line.where}: {requirement_text!r}: {reason}") from None
    options = " ".join(tokens[first_option:])
    hashes = tuple(match.group("value") for match in HASH_OPTION.finditer(options))
    return PinLine(line, requirement, hashes)


@dataclass(frozen=True)
class LockedPin:
    """A pin of a hashed lock, as the Bazel rules need it to fetch the pinned wheel."""

    project: NormalizedName
    version: Version
    hashes: frozenset[str]  # hex sha256 digests of the --hash options
    requirement: Requirement
    line_number: int  # 1-based, of the pin's first physical line

    def applies(self) -> bool:
        """Whether the pin's environment marker holds for the running interpreter."""
        return self.requirement.marker is None or self.requirement.marker.evaluate()


def read_pins(path: Path | str) -> list[LockedPin]:
    """The ``==`` pins of a lock with their sha256 hashes, in file order.

    Direct references (``pkg @ https://...``) are left out: pip installs them from their URL,
    so there is no index page to resolve them from. Any other pin that is not ``==`` is an error.
    """
    return [
        LockedPin(
            project=pin.project,
            version=pin.pinned_version(),
            hashes=frozenset(h.partition(":")[2].lower() for h in pin.hashes if h.startswith("sha256:")),
            requirement=pin.requirement,
            line_number=pin.line.start + 1,
        )
        for pin in read_requirements(path).pins
        if not pin.requirement.url
    ]
