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
blanks (minutes for 200,000 spaces), and splits options with ``shlex``, which grows a word a character at a
time (a 1 MB value took a minute). A lock is an input anyone can hand a CI job, so the same cuts are made here
in one pass (:func:`comment_start`, :func:`shell_words`), and no pattern is searched across unbounded blanks.

Every option, on an option line or after a requirement, is read as pip 26.3's parser reads it
(:func:`pip_options`); what pip refuses is one error naming the line, not a lock rewritten around it. The reader
is stricter than pip where pip would read the lock otherwise than its rewriting does, or silently ignore part
of it: an abbreviated option, an option after ``--``, a global option after a requirement, a ``--hash`` or
``-C`` on a line of its own (after a blank or comment line ended the pin's continuation), an index option beside
other options, and an included file (``-r``/``-c``): its pins would keep the old hashes while the rewritten lock
pins the patched wheel, and pip would fail on the mismatch far from the cause.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from patched_wheels.base.schema import shown
from patched_wheels.errors import UNREADABLE_REQUIREMENT, InvalidLockError
from patched_wheels.lock.model import Lock, LockOption, Pin, Span, checked_hash, read_lock_text, reference_version

if TYPE_CHECKING:
    from packaging.utils import NormalizedName

BOM = "\ufeff"
EOL = re.compile(r"(\r\n|\n|\r)$")
#: One ``--hash`` option, from its first character (the blanks before it are found by walking back).
_HASH_OPTION = re.compile(r"(?<!\S)--hash(?:=|[ \t]+)(?P<value>[^\s\\]+)")
# The options pip 26.3 reads in a requirements file (req_file.py's SUPPORTED_OPTIONS, then SUPPORTED_OPTIONS_REQ),
# every spelling to its long name. optparse also takes a long name's unambiguous abbreviation; none is taken here,
# since the index options must be recognized to be rewritten (and an abbreviation is one typo from another option).
_PIP_OPTIONS = {
    **{spelling: "--index-url" for spelling in ("--index-url", "-i", "--pypi-url")},
    **{spelling: "--constraint" for spelling in ("--constraint", "-c")},
    **{spelling: "--requirement" for spelling in ("--requirement", "-r")},
    **{spelling: "--editable" for spelling in ("--editable", "-e")},
    **{spelling: "--find-links" for spelling in ("--find-links", "-f")},
    **{spelling: "--config-settings" for spelling in ("--config-settings", "-C")},
    **{
        name: name
        for name in (
            "--extra-index-url",
            "--no-index",
            "--no-binary",
            "--only-binary",
            "--prefer-binary",
            "--require-hashes",
            "--no-require-hashes",
            "--pre",
            "--all-releases",
            "--only-final",
            "--trusted-host",
            "--use-feature",
            "--hash",
        )
    },
}
_FLAGS = frozenset({"--no-index", "--prefer-binary", "--require-hashes", "--no-require-hashes", "--pre"})
# The options whose value pip refuses when it starts with "-" (FormatControl's and ReleaseControl's callbacks).
_NAME_LISTS = frozenset({"--no-binary", "--only-binary", "--all-releases", "--only-final"})
_FEATURES = (  # --use-feature's choices
    "fast-deps",
    "inprocess-build-deps",
    "venv-isolation",
    "truststore",
    "no-binary-enable-wheel-cache",
    "build-constraint",
)
# The options pip takes on a requirement line (SUPPORTED_OPTIONS_REQ; pip reads the others there and ignores
# them, which would leave a lock meaning less than it says), and the hash algorithms of --hash (STRONG_HASHES).
_REQUIREMENT_OPTIONS = ("--hash", "--config-settings")
_HASH_ALGORITHMS = ("sha256", "sha384", "sha512")
# Options pip once read in a requirements file and no longer knows.
_REMOVED = {"--global-option": "pip 25.3 removed it", "--install-option": "pip 23.1 removed it"}
# The option lines naming an index, by kind: the lock's rewriting drops or replaces them whole.
_INDEX_KINDS = {
    "--index-url": "index-url",
    "--extra-index-url": "extra-index-url",
    "--find-links": "find-links",
    "--no-index": "no-index",
}
# What ends a run of plain characters in a shell word (shell_words), and in a double-quoted one.
_SHELL_SPECIAL = re.compile(r"[ \t\r\n'\"\\]")
_SHELL_BLANKS = re.compile(r"[ \t\r\n]*")
_DOUBLE_QUOTED_SPECIAL = re.compile(r'["\\]')
# Where pip's break_args_options cuts a requirement line: before the first space-separated word starting with "-".
_FIRST_OPTION = re.compile(r" (?=-)")
# The name and extras a requirement starts with, as written.
_HEAD = re.compile(r"[ \t]*([A-Za-z0-9][A-Za-z0-9._-]*[ \t]*(?:\[[^\]]*\])?)")
# The project an editable requirement's "#egg=" fragment names (pip's own pattern).
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
    pins: list[Pin] = []
    options: list[LockOption] = []
    for line in logical:
        if not line.content:
            continue
        if not line.is_option:
            pins.append(_parse_pin(line))
            continue
        kind, editable = _option_line(line)
        if kind is not None:
            options.append(LockOption(kind, line.span, line.content))
        pin = _editable_pin(line, editable) if editable is not None else None
        if pin is not None:
            pins.append(pin)
    _refuse_two_versions(pins)
    return RequirementsText(source, bom, lines, logical, Lock(source, "requirements", tuple(pins), tuple(options)))


def _refuse_two_versions(pins: Sequence[Pin]) -> None:
    """Two pins of one project at two versions under the same marker (or none) are a lock pip refuses ("Cannot
    install foo==1.0 and foo==2.0"); rewritten, both became the patched version and the conflict vanished. Under
    markers that differ (``uv pip compile --universal``'s per-environment pins) they are kept."""
    seen: dict[tuple[NormalizedName, str], Pin] = {}
    for pin in pins:
        if pin.url is not None or pin.version is None:
            continue
        first = seen.setdefault((pin.project, (pin.marker or "").strip()), pin)
        if first.version != pin.version:
            raise InvalidLockError(
                f"{pin.span.where}: {pin.name}=={pin.version} beside {first.name}=={first.version} "
                f"({first.span.where}) for the same environments, which pip refuses"
            )


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
    cut = _FIRST_OPTION.search(line.content)  # not split(" "): a value with a blank every few characters
    requirement_text = line.content[: cut.start()] if cut else line.content
    options = line.content[cut.end() :] if cut else ""
    try:
        requirement = Requirement(requirement_text)
    except UNREADABLE_REQUIREMENT as error:  # packaging's parser recurses per "("
        reason = str(error).splitlines()[0]  # packaging adds the text and a caret on more lines
        raise InvalidLockError(f"{line.span.where}: {requirement_text!r}: {reason}") from None
    hashes = tuple(value for _, _, value in hash_options(options))
    _check_requirement_options(options, hashes, line.span.where)
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


def shell_words(text: str) -> Iterator[str]:
    """``shlex.split(text)``, the words pip's option parser is given, in linear time: shlex grows a word a
    character at a time (a megabyte takes a minute, ten take hours), and a lock's option value is as long as
    whoever wrote the lock made it. The same words, and the same :class:`ValueError` on an open quote or a
    final backslash. A word is built in a :class:`io.StringIO`, not as a list of its pieces: a value of
    alternating quotes or escapes has a piece every few characters (each a string object of 50 bytes); and the
    words are given one at a time, since a line may hold millions of them."""
    word: io.StringIO | None = None  # the word being read, None between words
    position = _SHELL_BLANKS.match(text).end()  # type: ignore[union-attr]  # it matches the empty string
    while position < len(text):
        special = _SHELL_SPECIAL.search(text, position)
        stop = special.start() if special else len(text)
        word = io.StringIO() if word is None else word
        word.write(text[position:stop])
        if special is None:
            break
        char = special.group()
        if char == "'":
            close = text.find("'", stop + 1)
            if close < 0:
                raise ValueError("No closing quotation")
            word.write(text[stop + 1 : close])
            position = close + 1
        elif char == '"':
            position = _double_quoted(text, stop + 1, word)
        elif char == "\\":
            if stop + 1 == len(text):
                raise ValueError("No escaped character")
            word.write(text[stop + 1])
            position = stop + 2
        else:  # a blank ends the word
            yield word.getvalue()
            word = None
            position = _SHELL_BLANKS.match(text, stop).end()  # type: ignore[union-attr]
    if word is not None:
        yield word.getvalue()


def _double_quoted(text: str, position: int, word: io.StringIO) -> int:
    """Read the double-quoted string from ``position`` (after its quote) into ``word``, as shlex in POSIX mode:
    a backslash escapes only a quote or a backslash, and stays before any other character. Where it ends."""
    while True:
        special = _DOUBLE_QUOTED_SPECIAL.search(text, position)
        if special is None:
            raise ValueError("No closing quotation")
        word.write(text[position : special.start()])
        if special.group() == '"':
            return special.end()
        if special.end() == len(text):
            raise ValueError("No escaped character")
        escaped = text[special.end()]
        word.write(escaped if escaped in '"\\' else "\\" + escaped)
        position = special.end() + 1


def pip_options(options: str, where: str) -> Iterator[tuple[str, str | None]]:
    """The options written in ``options`` as pip's parser reads them, each as (its long name, its value or None
    for a flag), or one error naming ``where``: an option pip does not know (or an abbreviation, which pip
    takes: see :data:`_PIP_OPTIONS`), a flag given a value, a missing value, or a value pip's parser refuses.
    Words among the options are skipped, as pip skips them."""
    words = shell_words(options)
    try:
        for word in words:
            if word == "--":
                raise InvalidLockError(f"{where}: '--': pip ignores every option after it; remove it")
            if not word.startswith("-") or word == "-":
                continue
            spelling, equals, value = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
            name = _known_option(spelling, where)
            if name in _FLAGS:
                if equals:
                    raise InvalidLockError(f"{where}: option {spelling} takes no value")
                yield name, None
                continue
            if not equals and not value:
                following = next(words, None)
                if following is None:
                    raise InvalidLockError(f"{where}: option {spelling} has no value")
                value = following
            _check_value(name, spelling, value, where)
            yield name, value
    except ValueError as error:  # shlex's words: an open quote, a final backslash
        raise InvalidLockError(f"{where}: {options!r}: {error}") from None


def _known_option(spelling: str, where: str) -> str:
    """The long name of the option written ``spelling``, or one error saying why pip would not read it so."""
    if spelling in _PIP_OPTIONS:
        return _PIP_OPTIONS[spelling]
    if spelling in _REMOVED:
        raise InvalidLockError(f"{where}: option {spelling}: {_REMOVED[spelling]}, and it refuses a lock naming it")
    meant = sorted(name for name in _PIP_OPTIONS if spelling.startswith("--") and name.startswith(spelling))
    raise InvalidLockError(
        f"{where}: option {spelling!r} is not one pip reads in a requirements file"
        + (f" (write {' or '.join(meant)} in full)" if meant else "")
    )


def _check_value(name: str, spelling: str, value: str, where: str) -> None:
    """Refuse a value pip's option parser refuses for ``name``."""
    if name == "--hash":
        algorithm, colon, digest = value.partition(":")
        if algorithm not in _HASH_ALGORITHMS or not colon or not digest:  # pip takes an empty digest, matching none
            raise InvalidLockError(
                f"{where}: --hash {shown(value)}: not a hash pip takes ("
                + ", ".join(f"{a}:<hex>" for a in _HASH_ALGORITHMS)
                + ")"
            )
        # pip takes any digest (``sha256:ab``) and then matches no file; a hub would hand it to Bazel's downloader.
        checked_hash(algorithm, digest, where)
    elif name == "--config-settings" and "=" not in value:
        raise InvalidLockError(f"{where}: option {spelling} {value!r}: pip takes it as KEY=VALUE")
    elif name == "--use-feature" and value not in _FEATURES:
        raise InvalidLockError(
            f"{where}: --use-feature {value!r}: pip knows no such feature (it knows {', '.join(_FEATURES)})"
        )
    elif name in _NAME_LISTS and value.startswith("-"):
        raise InvalidLockError(f"{where}: option {spelling} has no value (pip reads {value!r} as an option)")


def _check_requirement_options(options: str, hashes: tuple[str, ...], where: str) -> None:
    """Refuse a requirement's options that pip refuses or ignores (every option but those of
    :data:`_REQUIREMENT_OPTIONS`), or reads otherwise than :func:`hash_options` (a quoted ``--hash``): the
    lock pip would install from must be the one read here."""
    read: list[str] = []
    for name, value in pip_options(options, where):
        if name not in _REQUIREMENT_OPTIONS:
            raise InvalidLockError(
                f"{where}: option {name} is not one pip takes on a requirement line, spelled in full: "
                + ", ".join(_REQUIREMENT_OPTIONS)
                + " (or -C)"
            )
        if name == "--hash" and value is not None:
            read.append(value)
    if tuple(read) != hashes:
        raise InvalidLockError(f"{where}: write each --hash unquoted, as --hash=<name>:<hex> or --hash <name>:<hex>")


def _option_line(line: LogicalLine) -> tuple[str | None, str | None]:
    """The kind of index an option line names (``index-url``, ``extra-index-url``, ``find-links``, ``no-index``)
    and the value of its ``--editable`` (each None if it has none), its options read as pip reads them; or one
    error naming the line: besides what pip refuses, an included file (whose pins would keep the old hashes while
    the rewritten lock pins the patched wheel), an index option beside other options (index lines are dropped or
    replaced whole), and a requirement's option on a line of its own, which pip ignores: a ``--hash`` after a
    blank or comment line that ended the pin's continuation checks nothing."""
    where = line.span.where
    names: set[str] = set()  # a set, and not every option read: a line may repeat one a million times
    count, kind, editable = 0, None, None
    for name, value in pip_options(line.content, where):
        names.add(name)
        count += 1
        kind = kind or _INDEX_KINDS.get(name)
        editable = value if name == "--editable" and editable is None else editable
    if "--requirement" in names or "--constraint" in names:
        raise InvalidLockError(
            f"{where}: {line.content}: included files are not followed; put their lines into this lock"
        )
    if kind is not None and count > 1:
        raise InvalidLockError(f"{where}: {line.content!r}: write an index option on a line of its own")
    stray = "--hash" if "--hash" in names else "--config-settings" if editable is None else None
    if stray in names:
        raise InvalidLockError(
            f"{where}: {stray} on a line of its own belongs to no requirement, and pip ignores it "
            "(a blank or comment line ends a requirement's continuation lines)"
        )
    return kind, editable


def _editable_pin(line: LogicalLine, url: str) -> Pin | None:
    """The pin an editable line (``-e git+https://…#egg=pwu``, its value ``url``) makes of the project its
    ``#egg=`` names: a direct reference that pins no wheel (:func:`~patched_wheels.lock.model.reference_version`),
    so it is refused for a patched project rather than left beside the pin of the patched wheel; an editable
    line naming no project is left alone, as every option line is."""
    egg = _EGG.search(url)
    if egg is None:
        return None
    try:
        requirement = Requirement(egg.group(1))
    except UNREADABLE_REQUIREMENT as error:
        reason = str(error).splitlines()[0]
        raise InvalidLockError(
            f"{line.span.where}: {line.content[:200]!r}: #egg={egg.group(1)[:200]!r}: {reason}"
        ) from None
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
