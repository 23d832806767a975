"""Read a TOML lock (uv.lock, pylock.toml) into checked values, every failure one line naming the file.

``tomllib`` (Python 3.11) reports a syntax error with its line and column but recurses on nesting, and a
lock is an input anyone can hand a CI job, so every failure - syntax, nesting, a value of the wrong
type where the format says what it is - becomes one :class:`InvalidLockError` naming the file and key.

A lock is a head (the keys before its first package) and one array-of-tables entry per package, each
under its own header line (``[[package]]``, ``[[packages]]``). Its parsed document is several times its
text, so a big lock is parsed a part at a time (:func:`split_lock`, :func:`parse_part`): each part is the
text from one header line to the next, which parses alone to exactly the table the whole document holds
there. A header line inside a multi-line string cannot fool the cut: the part before it then ends
inside that string, and fails to parse.

A pylock.toml may also hold its packages as one inline array (``packages = [{name = ...}, ...]``): valid TOML,
read as any other. Its elements are found by a scan that knows TOML's strings, comments and brackets
(:func:`_inline_parts`), and each is parsed alone as a one-element array; the head is the document with the
array emptied, and must then hold exactly that empty array, so a scan fooled by a text no full parse would read
so (the key under a table, inside a string) falls back to parsing the whole document.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator, NamedTuple, TypeVar

from patched_wheels.base.fsutil import resolved_path
from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.model import file_url, read_lock_text

T = TypeVar("T")


def toml_parser(path: Path | str) -> ModuleType:
    """``tomllib``, or below Python 3.11 ``tomli``: its upstream, the same API. The CLI depends on tomli
    there and the hub puts a pinned wheel of it on PYTHONPATH, so a missing one is an install fault."""
    try:
        import tomllib

        return tomllib
    except ImportError:
        pass
    try:
        import tomli

        return tomli
    except ImportError:
        raise InvalidLockError(
            f"{path}: reading a TOML lock below Python 3.11 needs tomli (pip install tomli)"
        ) from None


class Part(NamedTuple):
    """One package's text in a lock: the characters [start, end) from its header line, which is ``line``
    (0-based); or, with ``inline`` set, one element of an inline array of packages, which starts on ``line``."""

    start: int
    end: int
    line: int
    inline: str | None = None  # the key of the inline array the element is one of


class _NotInline(Exception):
    """The text is not an inline array this scan reads: the whole document is parsed instead."""


# What ends a plain run inside an inline array, and the start of a line assigning it (one such line in a lock).
_ARRAY_SPECIAL = re.compile(r"""["'\[\]{}#,]""")
_BASIC_STRING_SPECIAL = re.compile(r'["\\\n]')
_MULTILINE_BASIC_SPECIAL = re.compile(r'"""|\\')
# What TOML allows between an array's values: blanks, line ends, comments (no control character but a tab).
_GAP = re.compile(r"(?:[ \t]|\r?\n|#[^\x00-\x08\n-\x1f\x7f]*)*")


def split_lock(path: Path, key: str, *, inline: bool = False) -> tuple[str, dict[str, Any], Iterable[Part]]:
    """The text of ``path``, its head parsed, and the part of each ``[[key]]`` header line (made as they are
    iterated: a lock of 150,000 packages does not hold 150,000 parts), or with ``inline`` of each element of a
    ``key = [...]`` array written instead. Otherwise the head holds no ``key``: the packages are written each
    under its own header, as every lock writer does."""
    text = read_lock_text(path)
    _refuse_deep_keys(text, path)
    header = re.compile(rf"^[ \t]*\[\[{re.escape(key)}\]\][ \t]*\r?$", re.MULTILINE)
    first = header.search(text)
    tomllib = toml_parser(path)
    if inline and first is None:
        return (text, *_inline_lock(tomllib, path, text, key))
    head = parse_part(tomllib, path, text, Part(0, first.start() if first else len(text), 0))
    if key in head:
        raise InvalidLockError(f"{path}: its {key} are not written each under its own [[{key}]] line")
    return text, head, _header_parts(text, header.finditer(text, first.start()) if first else iter(()))


_MAX_KEY_PARTS = 32
"""Dotted parts of one key (``a.b.c = 1``, ``[a.b.c]``) a lock may have: uv and PEP 751 write three at most."""
_DEEP_KEY_REVERSED = re.compile(
    rf"""[=\]][ \t]*(?:(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')[ \t]*\.[ \t]*){{{_MAX_KEY_PARTS}}}"""
)
"""A key of more than :data:`_MAX_KEY_PARTS` parts, read backwards from the ``=`` or ``]`` that ends it (the text
reversed: a match starts only at those, so the search is linear; bare parts and quoted ones read the same)."""


_ESCAPE = re.compile(r'\\[\\"]')


def _refuse_deep_keys(text: str, path: Path) -> None:
    """``tomllib`` keeps every prefix of a dotted key (and walks them all for each next part): a key of k parts
    costs k² memory and time, an 80 KB key gigabytes, a 600 KB one minutes. None in a lock has more than a few."""
    # An escaped backslash or quote in a basic string (a quoted part: "a\"b") blanked first, its length kept:
    # read backwards, the quote it escapes would end the part there.
    found = _DEEP_KEY_REVERSED.search(_ESCAPE.sub("__", text)[::-1])
    if found is not None:
        line = text.count("\n", 0, len(text) - found.start()) + 1
        raise InvalidLockError(f"{path}:{line}: a key of more than {_MAX_KEY_PARTS} dotted parts, which no lock has")


def _header_parts(text: str, headers: Iterator[re.Match[str]]) -> Iterator[Part]:
    """The part of each header line matched, its line counted from the previous one (one pass over the text)."""
    start, line = -1, 0
    for match in headers:
        if start >= 0:
            yield Part(start, match.start(), line)
            line += text.count("\n", start, match.start())
        else:
            line = text.count("\n", 0, match.start())
        start = match.start()
    if start >= 0:
        yield Part(start, len(text), line)


def _inline_lock(tomllib: ModuleType, path: Path, text: str, key: str) -> tuple[dict[str, Any], tuple[Part, ...]]:
    """The head and parts of a lock whose ``key`` is an inline array (or absent): each element its own part."""
    assignment = re.compile(
        rf"""^[ \t]*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')[ \t]*=[ \t]*\[""", re.M
    )
    found = list(itertools.islice(assignment.finditer(text), 2))
    if len(found) == 1:
        try:
            opening = found[0].end() - 1
            closing, parts = _inline_parts(text, opening, key)
            head = parse_part(tomllib, path, text[:opening] + "[]" + text[closing:], Part(0, len(text), 0))
            if head.get(key) == []:
                return {name: value for name, value in head.items() if name != key}, parts
        except (_NotInline, InvalidLockError):
            pass  # the whole document's parse says what is wrong, or reads what the scan could not
    whole = Part(0, len(text), 0)  # parsed whole, as the head, and again as the one part holding the packages
    head = parse_part(tomllib, path, text, whole)
    return {name: value for name, value in head.items() if name != key}, (whole,) if key in head else ()


def _inline_parts(text: str, opening: int, key: str) -> tuple[int, tuple[Part, ...]]:
    """Where the inline array opened at ``opening`` ends (after its "]") and each element's part, found by a
    scan that skips strings and comments and counts brackets: linear in the text. Raises :class:`_NotInline`
    where the scan cannot follow the text (an unclosed string or bracket, an empty element), which TOML
    refuses too."""
    parts: list[Part] = []
    depth, start, position, seen = 1, opening + 1, opening + 1, False
    line = text.count("\n", 0, start)
    while True:
        special = _ARRAY_SPECIAL.search(text, position)
        if special is None:
            raise _NotInline
        seen = seen or (depth == 1 and bool(text[position : special.start()].strip()))
        char, position = special.group(), special.end()
        if char in "\"'":
            position, seen = _string_end(text, special.start()), True
        elif char == "#":
            newline = text.find("\n", position)
            position = len(text) if newline < 0 else newline
        elif char in "[{":
            depth, seen = depth + 1, True
        elif char in "]}":
            depth -= 1
        if depth == 0 or char == "," and depth == 1:
            first = _GAP.match(text, start).end()  # type: ignore[union-attr]  # it matches the empty string
            if not seen and (char == "," or first != special.start()):
                raise _NotInline  # an element missing before a comma, or what TOML allows nowhere
            if seen:  # parsed from its first character: the gap before it was matched, the rest is the parser's
                parts.append(Part(first, special.start(), line + text.count("\n", start, first), key))
            if depth == 0:
                return position, tuple(parts)
            line += text.count("\n", start, position)
            start, seen = position, False


def _string_end(text: str, start: int) -> int:
    """Where the TOML string opened at ``start`` ends (after its closing quotes)."""
    if text.startswith("'''", start) or text.startswith('"""', start):
        quotes = text[start : start + 3]
        if quotes == "'''":
            close = text.find(quotes, start + 3)
        else:
            close, position = -1, start + 3
            while (special := _MULTILINE_BASIC_SPECIAL.search(text, position)) is not None:
                if special.group() == '"""':
                    close = special.start()
                    break
                position = special.end() + 1  # an escaped character
        if close < 0:
            raise _NotInline
        end = close + 3
        while end < close + 5 and text.startswith(quotes[0], end):  # up to two quotes end the content
            end += 1
        return end
    if text[start] == "'":
        close = text.find("'", start + 1)
        if close < 0 or "\n" in text[start:close]:
            raise _NotInline
        return close + 1
    position = start + 1
    while (special := _BASIC_STRING_SPECIAL.search(text, position)) is not None:
        if special.group() == '"':
            return special.end()
        if special.group() == "\n":
            break
        position = special.end() + 1
    raise _NotInline


def parse_part(tomllib: ModuleType, path: Path | str, text: str, part: Part) -> dict[str, Any]:
    """The TOML document of ``part`` of ``text``, the lock ``path``; a syntax error names its line in the lock,
    after the line of the part's header (its "end of document" is the end of that table). ``tomllib``: what
    :func:`toml_parser` gave, asked once a lock (below Python 3.11 a failed ``import tomllib`` searches the path)."""
    where = f"{path}:{part.line + 1}" if part.start else str(path)
    document = text[part.start : part.end]
    if part.inline is not None:  # an element of an inline array, parsed as a one-element array
        document = f"{part.inline} = [{document}]"  # it ends before a "," or "]", never in a comment
    try:
        try:
            return tomllib.loads(document)
        except tomllib.TOMLDecodeError:
            # Parsed again behind the empty lines that stand for the lines before it, for the message to count
            # the lock's lines: only on a failure, since a big lock has tens of thousands of parts.
            return tomllib.loads("\n" * part.line + document)
    except tomllib.TOMLDecodeError as error:
        raise InvalidLockError(f"{where}: not TOML: {error}") from None
    except RecursionError:
        raise InvalidLockError(f"{where}: not TOML we read: nested too deeply") from None
    except ValueError as error:  # an integer past Python's 4,300 digits (no TOMLDecodeError: a ValueError of int())
        raise InvalidLockError(f"{where}: not TOML we read: {error}") from None


def path_url(root: Path, path: str, where: str) -> str:
    """The ``file://`` URL of a lock's ``path`` (relative to ``root``), its links followed; a path no file can
    have (a loop of links, a NUL) is the lock's error, at ``where``."""
    try:
        return file_url(resolved_path(root / path))
    except OSError as error:
        raise InvalidLockError(f"{where}: path {path!r}: {error.strerror}") from None


def get(table: dict[str, Any], key: str, kind: type[T], where: str, default: T | None = None) -> T:
    """``table[key]``, which must be a ``kind`` (absent: ``default``, or an error when None)."""
    if key not in table:
        if default is None:
            raise InvalidLockError(f"{where}: {key!r} is missing")
        return default
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidLockError(
            f"{where}: {key!r} must be {_KINDS.get(kind, f'a {kind.__name__}')}, not {type(value).__name__}"
        )
    return value


def tables(table: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """``table[key]``, an array of tables (absent: empty)."""
    return _array_of(table, key, dict, where)


def strings(table: dict[str, Any], key: str, where: str) -> list[str]:
    """``table[key]``, an array of strings (absent: empty)."""
    return _array_of(table, key, str, where)


def _array_of(table: dict[str, Any], key: str, kind: type[T], where: str) -> list[T]:
    """``table[key]``, an array whose every item is a ``kind`` (absent: empty)."""
    values = get(table, key, list, where, [])
    for number, value in enumerate(values):
        if not isinstance(value, kind):
            raise InvalidLockError(f"{where}: {key}[{number}] must be {_KINDS[kind]}, not {type(value).__name__}")
    return values


_KINDS = {str: "a string", list: "an array", dict: "a table", int: "an integer"}
