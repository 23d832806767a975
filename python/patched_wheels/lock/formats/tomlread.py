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
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.model import read_lock_text

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
    (0-based)."""

    start: int
    end: int
    line: int


def split_lock(path: Path, key: str) -> tuple[str, dict[str, Any], tuple[Part, ...]]:
    """The text of ``path``, its head parsed, and the part of each ``[[key]]`` header line. The head holds
    no ``key``: the packages are written each under its own header, as every lock writer does."""
    text = read_lock_text(path)
    header = re.compile(rf"^[ \t]*\[\[{re.escape(key)}\]\][ \t]*\r?$", re.MULTILINE)
    starts, lines, position, total = [], [], 0, 0
    for match in header.finditer(text):  # one pass: a 50 MB lock is not held a second time as lines
        total += text.count("\n", position, match.start())
        starts.append(match.start())
        lines.append(total)
        position = match.start()
    head = parse_part(toml_parser(path), path, text, Part(0, starts[0] if starts else len(text), 0))
    if key in head:
        raise InvalidLockError(f"{path}: its {key} are not written each under its own [[{key}]] line")
    return text, head, tuple(Part(*row) for row in zip(starts, [*starts[1:], len(text)], lines))


def parse_part(tomllib: ModuleType, path: Path | str, text: str, part: Part) -> dict[str, Any]:
    """The TOML document of ``part`` of ``text``, the lock ``path``; a syntax error names its line in the lock,
    after the line of the part's header (its "end of document" is the end of that table). ``tomllib``: what
    :func:`toml_parser` gave, asked once a lock (below Python 3.11 a failed ``import tomllib`` searches the path)."""
    where = f"{path}:{part.line + 1}" if part.start else str(path)
    try:
        try:
            return tomllib.loads(text[part.start : part.end])
        except tomllib.TOMLDecodeError:
            # Parsed again behind the empty lines that stand for the lines before it, for the message to count
            # the lock's lines: only on a failure, since a big lock has tens of thousands of parts.
            return tomllib.loads("\n" * part.line + text[part.start : part.end])
    except tomllib.TOMLDecodeError as error:
        raise InvalidLockError(f"{where}: not TOML: {error}") from None
    except RecursionError:
        raise InvalidLockError(f"{where}: not TOML we read: nested too deeply") from None


def get(table: dict[str, Any], key: str, kind: type[T], where: str, default: T | None = None) -> T:
    """``table[key]``, which must be a ``kind`` (absent: ``default``, or an error when None)."""
    if key not in table:
        if default is None:
            raise InvalidLockError(f"{where}: {key!r} is missing")
        return default
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidLockError(
            f"{where}: {key!r} must be a {_KINDS.get(kind, kind.__name__)}, not {type(value).__name__}"
        )
    return value


def tables(table: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """``table[key]``, an array of tables (absent: empty)."""
    values = get(table, key, list, where, [])
    for number, value in enumerate(values):
        if not isinstance(value, dict):
            raise InvalidLockError(f"{where}: {key}[{number}] must be a table, not {type(value).__name__}")
    return values


_KINDS = {str: "string", list: "array", dict: "table", int: "integer"}
