"""Read a pip requirements file (a lock) the way pip reads it, keeping where each piece is written.

The reader turns the file into the lock model (:class:`~patched_wheels.lock.model.Lock`) and keeps the text
split into lines, because the pip writer must change a pin without disturbing the bytes around it:
every logical line keeps the span of physical lines it came from. Names, versions and markers are
``packaging``'s; only pip's line format is tokenized here, after ``pip/_internal/req/req_file.py``:

* a comment starts at a ``#`` at the start of a line or after whitespace;
* a line ending in ``\\`` continues on the next one, unless it is a comment;
* a requirement line is a PEP 508 requirement followed by options (``--hash=sha256:...``), split at
  the first space-separated token starting with ``-``; other lines starting with ``-`` are options;
* the text is UTF-8, and a UTF-8 byte order mark before it is no part of the first line.

pip finds comments with the pattern ``(^|\\s+)#.*$``, which backtracks quadratically on a run of
blanks (minutes for 200,000 spaces). A lock is an input anyone can hand a CI job, so the same cut is
made here by :func:`comment_start` in one pass, and no pattern is searched across unbounded blanks.

Included files (``-r``/``-c``) are refused rather than followed: their pins would keep the old hashes
while the rewritten lock pins the patched wheel, and pip would fail on the mismatch far from the cause.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.model import Lock, LockOption, Pin, Span, read_lock_text, reference_version

BOM = "\ufeff"
EOL = re.compile(r"(\r\n|\n|\r)$")
#: One ``--hash`` option, from its first character (the blanks before it are found by walking back).
_HASH_OPTION = re.compile(r"(?<!\S)--hash(?:=|[ \t]+)(?P<value>[^\s\\]+)")
# The options pip takes on a requirement line (its SUPPORTED_OPTIONS_REQ), each with a value, and the hash
# algorithms its --hash accepts (STRONG_HASHES).
_REQUIREMENT_OPTIONS = ("--hash", "--global-option", "--config-settings", "-C")
_HASH_ALGORITHMS = ("sha256", "sha384", "sha512")
# An option line naming an index: pip's long options take "=value" or " value", its short ones
# (single letters, parsed by optparse) also take the value glued on ("-fDIR").
_INDEX_OPTIONS = {
    "--index-url": "index-url",
    "-i": "index-url",
    "--extra-index-url": "extra-index-url",
    "--find-links": "find-links",
    "-f": "find-links",
    "--no-index": "no-index",
}
_INDEX_OPTION = re.compile(r"(--(?:index-url|extra-index-url|find-links|no-index)(?==|\s|$)|-[if])")
# An option line including another file: -r/--requirement, -c/--constraint.
_INCLUDE_OPTION = re.compile(r"--(?:requirement|constraint)(?:=|\s|$)|-[rc]")
# The name and extras a requirement starts with, as written.
_HEAD = re.compile(r"[ \t]*([A-Za-z0-9][A-Za-z0-9._-]*[ \t]*(?:\[[^\]]*\])?)")
# An editable requirement (-e/--editable, optparse's spellings: "-e URL", "-eURL", "--editable=URL") and the
# project its "#egg=" fragment names (pip's own pattern).
_EDITABLE = re.compile(r"(?:-e|--editable)(?:=|[ \t]+|(?=[^ \t-]))(?P<value>\S+)")
_EGG = re.compile(r"[#&]egg=([^&]*)")


def comment_start(line: str) -> int | None:
    """Where pip's comment pattern ``(^|\\s+)#.*$`` would match ``line`` first, in linear time: at the
    first ``#`` that starts the line or follows whitespace, extended back over that whitespace."""
    position = line.find("#")
    while position > 0 and not line[position - 1].isspace():
        position = line.find("#", position + 1)
    if position <= 0:
        return position if position == 0 else None
    return len(line[:position].rstrip())  # str.rstrip strips what \s matches


def split_comment(physical: str) -> tuple[str, str]:
    """``physical`` cut where pip's comment begins: ``--hash=`` in a comment is no option, and
    the comment (with the line's ending) must come out byte for byte."""
    start = comment_start(physical)
    return (physical, "") if start is None else (physical[:start], physical[start:])


def hash_options(code: str) -> list[tuple[int, int, str]]:
    """The ``--hash`` options of ``code`` as (start of the blanks before it, end, value), in order."""
    found: list[tuple[int, int, str]] = []
    for match in _HASH_OPTION.finditer(code):
        previous = found[-1][1] if found else 0  # the blanks are looked at once, whatever their number
        found.append((previous + len(code[previous : match.start()].rstrip(" \t")), match.end(), match.group("value")))
    return found


@dataclass(frozen=True)
class LogicalLine:
    """One logical line: physical lines [start, end) joined as pip joins them."""

    span: Span
    content: str  # joined, comments removed, stripped

    @property
    def is_option(self) -> bool:
        return self.content.startswith("-")

    @property
    def index_option(self) -> str | None:
        """The kind of index option this line is (``index-url``, ``extra-index-url``, ``find-links``,
        ``no-index``), or None."""
        match = _INDEX_OPTION.match(self.content)
        return _INDEX_OPTIONS[match.group(1)] if match else None


@dataclass(frozen=True)
class RequirementsText:
    """A requirements file split into physical and logical lines, losing no byte, and its lock model."""

    source: str
    bom: str  # the byte order mark the text started with ("" if none), not part of ``lines``
    lines: tuple[str, ...]  # physical lines, each with its line ending
    logical: tuple[LogicalLine, ...]
    lock: Lock

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
                f"{line.span.where}: {line.content}: included files are not followed; put their lines into this lock"
            )
    pins = tuple(
        pin
        for line in logical
        if line.content
        for pin in ([_editable_pin(line)] if line.is_option else [_parse_pin(line)])
        if pin
    )
    options = tuple(LockOption(line.index_option, line.span, line.content) for line in logical if line.index_option)
    return RequirementsText(source, bom, lines, logical, Lock(source, "requirements", pins, options))


def read_requirements(path: Path | str, environment: Mapping[str, str] | None = None) -> RequirementsText:
    """Read and split the requirements file ``path``; pip reads it as UTF-8 too (absent a BOM saying otherwise).
    It keeps its markers, so ``environment`` (the lock readers' common signature) is not needed."""
    return parse_requirements(read_lock_text(Path(path)), str(path))


def _without_comment(line: str) -> str:
    start = comment_start(line)
    return line if start is None else line[:start]


def _logical_lines(lines: Sequence[str], source: str) -> Iterator[LogicalLine]:
    """Join continuation lines exactly as pip's ``join_lines`` does, keeping line spans."""
    start = 0
    joined: list[str] = []
    for number, physical in enumerate(lines):
        line = EOL.sub("", physical)
        is_comment = line.lstrip().startswith("#")  # pip: COMMENT_RE.match(line)
        if not line.endswith("\\") or is_comment:
            if is_comment:
                line = " " + line
            if joined:
                joined.append(line)
                yield LogicalLine(Span(source, start, number + 1), _without_comment("".join(joined)).strip())
                joined = []
            else:
                yield LogicalLine(Span(source, number, number + 1), _without_comment(line).strip())
        else:
            if not joined:
                start = number
            joined.append(line.strip("\\"))
    if joined:
        yield LogicalLine(Span(source, start, len(lines)), _without_comment("".join(joined)).strip())


def _parse_pin(line: LogicalLine) -> Pin:
    """Split a requirement line like pip's ``break_args_options``: the requirement is every
    space-separated token before the first one starting with '-'."""
    tokens = line.content.split(" ")
    first_option = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
    requirement_text = " ".join(tokens[:first_option])
    try:
        requirement = Requirement(requirement_text)
    except (InvalidRequirement, RecursionError) as error:  # packaging's parser recurses per "("
        reason = str(error).splitlines()[0]  # packaging adds the text and a caret on more lines
        raise InvalidLockError(f"{line.span.where}: {requirement_text!r}: {reason}") from None
    hashes = tuple(value for _, _, value in hash_options(" ".join(tokens[first_option:])))
    _check_options(" ".join(tokens[first_option:]), hashes, line.span.where)
    head = _HEAD.match(requirement_text)
    assert head is not None  # packaging accepted the requirement, so it starts with a name
    version, pin_error = _version(requirement, line.span)
    return Pin(
        name=requirement.name,
        extras=tuple(sorted(requirement.extras)),
        head=head.group(1).rstrip(),
        version=version,
        marker=_marker_text(requirement, requirement_text),
        hashes=hashes,
        url=requirement.url,
        span=line.span,
        text=str(requirement),
        pin_error=pin_error,
        version_text=None if requirement.url or version is None else next(iter(requirement.specifier)).version,
        files=(),
    )


def _check_options(options: str, hashes: tuple[str, ...], where: str) -> None:
    """Refuse a requirement's options that pip refuses (an unknown or valueless option, a ``--hash`` that is no
    ``sha256:``/``sha384:``/``sha512:`` value) or reads otherwise than :func:`hash_options` (a quoted or
    abbreviated ``--hash``): the lock pip would install from must be the one read here."""
    try:
        tokens = shlex.split(options)
    except ValueError as error:
        raise InvalidLockError(f"{where}: {options!r}: {error}") from None
    read: list[str] = []
    position = 0
    while position < len(tokens):
        token = tokens[position]
        position += 1
        if not token.startswith("-"):
            continue  # pip ignores words among the options
        name, equals, value = token.partition("=")
        if name.startswith("-C") and not name.startswith("--") and len(name) > 2:
            name, equals, value = "-C", "=", token[2:]  # optparse's glued short form, -Ckey=value
        if name not in _REQUIREMENT_OPTIONS:
            raise InvalidLockError(
                f"{where}: option {name!r} is not one pip takes on a requirement line, spelled in full: "
                + ", ".join(_REQUIREMENT_OPTIONS)
            )
        if not equals:
            if position == len(tokens):
                raise InvalidLockError(f"{where}: option {name} has no value")
            value, position = tokens[position], position + 1
        if name == "--hash":
            algorithm, colon, digest = value.partition(":")
            if algorithm not in _HASH_ALGORITHMS or not colon or not digest:
                raise InvalidLockError(
                    f"{where}: --hash {value!r}: not a hash pip takes ("
                    + ", ".join(f"{a}:<hex>" for a in _HASH_ALGORITHMS)
                    + ")"
                )
            read.append(value)
    if tuple(read) != hashes:
        raise InvalidLockError(f"{where}: write each --hash unquoted, as --hash=<name>:<hex> or --hash <name>:<hex>")


def _editable_pin(line: LogicalLine) -> Pin | None:
    """The pin an editable line (``-e git+https://…#egg=pwu``) makes of the project its ``#egg=`` names: a
    direct reference that pins no wheel (:func:`~patched_wheels.lock.model.reference_version`), so it is
    refused for a patched project rather than left beside the pin of the patched wheel; an editable line
    naming no project is left alone, as every option line is."""
    match = _EDITABLE.match(line.content)
    egg = _EGG.search(match.group("value")) if match else None
    if match is None or egg is None:
        return None
    try:
        requirement = Requirement(egg.group(1))
    except (InvalidRequirement, RecursionError) as error:
        reason = str(error).splitlines()[0]
        raise InvalidLockError(
            f"{line.span.where}: {line.content[:200]!r}: #egg={egg.group(1)[:200]!r}: {reason}"
        ) from None
    url = match.group("value")
    version, pin_error = reference_version(requirement.name, url)
    return Pin(
        name=requirement.name,
        extras=tuple(sorted(requirement.extras)),
        head=egg.group(1),
        version=version,
        marker=None,
        hashes=(),
        url=url,
        span=line.span,
        text=line.content,
        pin_error=pin_error,
        version_text=None,
        files=(),
    )


def _marker_text(requirement: Requirement, text: str) -> str | None:
    """The marker as the user wrote it (after the ``;``; after whitespace and ``;`` behind a URL)."""
    if requirement.marker is None:
        return None
    if requirement.url:
        cut = re.search(r"\s;", text)
        assert cut is not None  # packaging requires the blank before a URL's marker
        return text[cut.end() :].strip()
    return text.partition(";")[2].strip()


def _version(requirement: Requirement, span: Span) -> tuple[Version | None, str | None]:
    """The one version a pin admits, or why there is none: an ``==`` pin, or a direct reference to a wheel
    (its file name says the version: :func:`~patched_wheels.lock.model.reference_version`)."""
    if requirement.url:
        return reference_version(requirement.name, requirement.url)
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator not in ("==", "===") or "*" in specifiers[0].version:
        return None, f"{requirement.name} must be pinned with == (found {requirement})"
    try:
        return Version(specifiers[0].version), None
    except InvalidVersion:
        return None, f"{specifiers[0].version!r} is not a PEP 440 version"
