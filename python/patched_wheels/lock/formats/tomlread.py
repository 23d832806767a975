"""Read a TOML lock (uv.lock, pylock.toml) into checked values, every failure one line naming the file.

``tomllib`` (Python 3.11) reports a syntax error with its line and column but recurses on nesting, and a
lock is an input anyone can hand a CI job, so every failure - syntax, nesting, a value of the wrong
type where the format says what it is - becomes one :class:`InvalidLockError` naming the file and key.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

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


def load_toml(path: Path) -> tuple[str, dict[str, Any]]:
    """The text of ``path`` and its TOML document."""
    tomllib = toml_parser(path)
    text = read_lock_text(path)
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidLockError(f"{path}: not TOML: {error}") from None
    except RecursionError:
        raise InvalidLockError(f"{path}: not TOML we read: nested too deeply") from None


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
