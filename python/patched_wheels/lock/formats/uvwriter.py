"""Write a uv.lock pointing at our wheels: a :class:`~patched_wheels.lock.plan.LockPlan` applied to the
uv.lock :mod:`patched_wheels.lock.formats.uvlock` read.

Each patched package's table names the patched version, our index as its registry (a ``file://`` URL)
and our wheel by ``file://`` URL and sha256; its sdist goes (it is the original's). When the plan keeps
some of the package's wheels for other platforms (a lock for x86_64 and aarch64, the patched wheel for
x86_64), the package becomes a fork, as uv writes one: the original table keeps those wheels (and its
sdist) under ``resolution-markers`` of the other platforms, the patched table follows it under the
patched wheel's own, and every dependency naming the package names both, each with its version,
source and marker. A split sibling is added as a package and as a dependency of the package that
requires it. The file stays one ``uv sync --frozen`` / ``uv export --frozen`` and rules_python 2.x's
``pip.parse(uv_lock = ...)`` read; it no longer matches ``pyproject.toml`` (``--locked`` would re-lock).

Every other byte is left as it was. An edit replaces the lines of a key (or of a row of an array) whose
span was found in the parsed document: each span is checked to parse to exactly the value TOML read
for that key or row, so a ``source =`` line inside a multi-line string is never taken for the key; a
layout not written as uv writes it (one key per line, one row per line of an array) is refused with
one line rather than guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from packaging.utils import NormalizedName

from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import InvalidLockError
from patched_wheels.index.simple import SIMPLE_DIR, IndexedFile
from patched_wheels.lock.formats.tomlread import get, strings, tables, toml_parser
from patched_wheels.lock.formats.uvlock import UvLock
from patched_wheels.lock.markers import WheelEnvironments, and_markers
from patched_wheels.lock.model import file_url
from patched_wheels.lock.plan import LockPlan, PinEdit

_HEADER = "[[package]]"
_CHUNK = 1 << 20  # the characters of the lock left alone given at once
_KEY = re.compile(r"([A-Za-z0-9_-]+)[ \t]*=")
_TABLE = re.compile(r"\[package\.([A-Za-z0-9_.-]+)\][ \t]*(?:#.*)?")
_EDGE_ARRAYS = ("", "optional-dependencies", "dev-dependencies")  # the tables whose arrays are dependencies

#: An edit of a block: lines [start, end) (relative to the block) become ``lines``.
Edit = tuple[int, int, list[str]]


@dataclass(frozen=True)
class _Fork:
    """A patched package split by platform: the original (``rest``) and the patched table (``ours``)."""

    version: str
    source: dict[str, Any]
    ours: tuple[str, dict[str, Any], str]  # version, source, marker of the patched wheel's platforms
    rest: str  # the marker of every other platform


def render_uv_lock(uv: UvLock, plan: LockPlan, index_dir: Path) -> Iterator[str]:
    """The text of ``uv`` with each patched package pointing at our wheels (module docstring), every edit
    checked first, then given a piece at a time."""
    registry = (index_dir / SIMPLE_DIR).as_uri()
    block_of = {span.start: number for number, span in enumerate(uv.blocks)}
    layouts: dict[int, _Layout] = {}  # of the blocks edited only: a block we leave alone may be laid out any way

    def layout(number: int) -> _Layout:
        if number not in layouts:
            layouts[number] = _Layout.of(uv, number)
        return layouts[number]

    edits: dict[int, list[Edit]] = {}
    appended: dict[int, list[Edit]] = {}  # the patched table of a fork, after the original's
    forks: dict[NormalizedName, tuple[_Fork, ...]] = {}
    for edit in plan.edits:
        if edit.files and edit.pin.span.start in block_of:
            number = block_of[edit.pin.span.start]
            fork = _fork(layout(number).package, edit, registry)
            ours = _patched(layout(number), str(edit.version), edit.files, registry, index_dir, fork)
            if fork is None:
                edits[number] = ours
            else:
                edits[number] = _kept(layout(number), edit, fork)
                appended[number] = ours
                forks[uv.names[number]] = forks.get(uv.names[number], ()) + (fork,)
    for number in range(len(uv.names)) if forks else ():
        where = f"{uv.blocks[number].where}: package {uv.names[number]}"
        if _names_a_fork(uv.package(number), forks, where):
            edits.setdefault(number, []).extend(layout(number).split_edges(forks))
            if number in appended:
                appended[number] += layout(number).split_edges(forks)
    added: list[str] = []
    for pin, files in zip(plan.added, plan.added_files):
        if canonicalize_name(pin.head) in uv.names:
            raise InvalidLockError(
                f"{uv.lock.source}: {pin.head} is already a package of this uv.lock; the index cannot add it"
            )
        added += ["\n", _HEADER + "\n", f'name = "{pin.head}"\n', f'version = "{pin.version}"\n']
        added += [f'source = {{ registry = "{registry}" }}\n'] + _wheels(files, index_dir)
        for parent in pin.via:
            for number in (n for n, name in enumerate(uv.names) if name == parent):
                (appended if number in appended else edits).setdefault(number, []).append(
                    layout(number).with_dependency(pin.head)
                )
    output: list[str | slice] = []  # a slice: those characters of the text, left alone
    position = 0  # the text before it is in ``output``: the blocks left alone go as one slice each run
    for number, (start, end, *_) in enumerate(uv.parts):
        if number not in edits and number not in appended:
            continue
        block = uv.block_lines(number)
        output += [
            slice(position, start),
            *(_check(uv, number, _applied(block, edits[number])) if number in edits else block),
        ]
        position = end
        if number in appended:
            last = output[-1]
            assert isinstance(last, str)  # a block's last line
            if not last.endswith("\n"):
                output[-1] = last + "\n"
            output += ([] if output[-1] == "\n" else ["\n"]) + _check(uv, number, _applied(block, appended[number]))
    output.append(slice(position, len(uv.text)))
    ended = _last_character(uv.text, output) in ("", "\n")
    return _pieces(uv.text, [*output, *([] if ended or not added else ["\n"]), *added])


def _last_character(text: str, output: list[str | slice]) -> str:
    """The last character ``output`` writes ("": none)."""
    for piece in reversed(output):
        last = piece[-1:] if isinstance(piece, str) else text[max(piece.start, piece.stop - 1) : piece.stop]
        if last:
            return last
    return ""


def _pieces(text: str, output: list[str | slice]) -> Iterator[str]:
    """The strings of ``output``, and each slice of ``text`` a chunk at a time: the lock is not copied whole."""
    for piece in output:
        if isinstance(piece, str):
            yield piece
        else:
            for start in range(piece.start, piece.stop, _CHUNK):
                yield text[start : min(start + _CHUNK, piece.stop)]


def _names_a_fork(package: dict[str, Any], forks: dict[NormalizedName, tuple["_Fork", ...]], where: str) -> bool:
    """Whether any dependency of ``package`` (its own, its extras', its groups') names a forked package; a table of
    them that is no table is the lock's error at ``where`` (a package not installed here was never read before)."""
    arrays = [tables(package, "dependencies", where)]
    for table in _EDGE_ARRAYS[1:]:
        groups = get(package, table, dict, where, {})
        arrays += [tables(groups, key, f"{where}: {table}") for key in groups]
    return any(_fork_of(edge, forks) is not None for rows in arrays for edge in rows)


def _fork(package: dict[str, Any], edit: PinEdit, registry: str) -> _Fork | None:
    """The fork a patched package (``package``, its block's table) becomes when the plan keeps
    some of its wheels; None: replaced whole."""
    kept = {h.lower() for h in edit.kept}
    if not any(str(wheel.get("hash", "")).lower() in kept for wheel in package.get("wheels", [])):
        return None
    environments = WheelEnvironments.of(tag for file in edit.files for tag in file.tags)
    ours, rest = environments.marker(), environments.complement()
    assert ours is not None and rest is not None  # files for every platform keep no hash (plan._kept)
    quoted = (ours.replace('"', "'"), rest.replace('"', "'"))  # uv's spelling; tag values hold no quote
    return _Fork(
        package["version"], package["source"], (str(edit.version), {"registry": registry}, quoted[0]), quoted[1]
    )


def _patched(
    layout: "_Layout", version: str, files: Sequence[IndexedFile], registry: str, index_dir: Path, fork: _Fork | None
) -> list[Edit]:
    """The edits making a package table the patched one: version, source and wheels replaced, sdist dropped."""
    keys = layout.keys[""]
    after_source = keys["source"][1]
    edits: list[Edit] = [
        (*keys["version"], [f'version = "{version}"\n']),
        (*keys["source"], [f'source = {{ registry = "{registry}" }}\n']),
    ]
    if fork is not None:
        edits.append(layout.resolution_markers(fork.ours[2]))
    if "sdist" in keys:
        edits.append((*keys["sdist"], []))
    edits.append(
        (*keys.get("wheels", (after_source, after_source)), _wheels(files, index_dir))
    )  # sdist only: after the source
    return edits


def _kept(layout: "_Layout", edit: PinEdit, fork: _Fork) -> list[Edit]:
    """The edits making a package table the original side of a fork: the wheels the plan keeps, the
    sdist if it keeps its hash, under the markers of the other platforms."""
    keys = layout.keys[""]
    kept = {h.lower() for h in edit.kept}
    edits = [layout.resolution_markers(fork.rest)]
    for row, wheel in zip(layout.rows("", "wheels"), layout.package["wheels"]):
        if str(wheel.get("hash", "")).lower() not in kept:
            edits.append((row, row + 1, []))
    sdist = layout.package.get("sdist", {})  # a table when its key is there: uvlock read it as one
    if "sdist" in keys and str(sdist.get("hash", "")).lower() not in kept:
        edits.append((*keys["sdist"], []))
    return edits


@dataclass(frozen=True)
class _Layout:
    """Where each key of a ``[[package]]`` block is written (lines relative to the block), per table
    (``""``: the package's own; ``optional-dependencies``, ...), each span checked against the parsed value."""

    lines: tuple[str, ...]
    package: dict[str, Any]
    keys: dict[str, dict[str, tuple[int, int]]]
    where: str

    @classmethod
    def of(cls, uv: UvLock, number: int) -> "_Layout":
        span, package = uv.blocks[number], uv.package(number)  # refused: a header inside a string, a table of another
        lines = tuple(uv.block_lines(number))
        where = f"{span.where}: package {uv.names[number]}"
        keys: dict[str, dict[str, tuple[int, int]]] = {"": {}}
        table, line = "", 1
        while line < len(lines):
            text = lines[line]
            if not text.strip() or text.lstrip().startswith("#"):
                line += 1
                continue
            header = _TABLE.fullmatch(text.strip())
            if text.startswith("["):
                if header is None or not isinstance(_value(package, header.group(1)), dict):
                    raise InvalidLockError(
                        f"{span.source}:{span.start + line + 1}: a table header uv does not write: {text.strip()[:200]!r}"
                    )
                table = header.group(1)
                keys.setdefault(table, {})
                line += 1
                continue
            key = _KEY.match(text)
            end = line + 1
            if key and text.rstrip().endswith("["):  # a multi-line array, closed by a line "]"
                while end < len(lines) and lines[end].strip() != "]":
                    end += 1
                end += 1
            expected = _value(package, table)
            found = (
                _value_end(lines, line, end, {key.group(1): expected[key.group(1)]})
                if key and key.group(1) in expected
                else None
            )
            if key is None or found is None:
                raise InvalidLockError(
                    f"{span.source}:{span.start + line + 1}: not written as uv writes a key (one line, or an array "
                    'closed by a line "]"), so it is not edited'
                )
            keys[table][key.group(1)] = (line, found)
            line = found
        for required in ("version", "source"):
            if required not in keys[""]:
                raise InvalidLockError(f"{where}: no {required} line in the layout uv writes")
        return cls(lines, package, keys, where)

    def rows(self, table: str, key: str) -> list[int]:
        """The line of each row of the array ``key`` of ``table``: each must hold one row as TOML read it."""
        start, end = self.keys[table][key]
        values = _value(self.package, table)[key]
        rows = list(range(start + 1, end - 1))
        if len(rows) != len(values) or any(not _holds_row(self.lines[row], value) for row, value in zip(rows, values)):
            raise InvalidLockError(
                f"{self.where}: {key} is not written one row per line as uv writes it, so it is not edited"
            )
        return rows

    def resolution_markers(self, marker: str) -> Edit:
        """The edit restricting the package to ``marker`` (and to each fork it already held)."""
        markers = [and_markers(m, marker) for m in strings(self.package, "resolution-markers", self.where)] or [marker]
        lines = ["resolution-markers = [\n", *(f"    {_string(m)},\n" for m in markers), "]\n"]
        if "resolution-markers" in self.keys[""]:
            return (*self.keys[""]["resolution-markers"], lines)
        at = self.keys[""]["source"][1]
        return (at, at, lines)

    def split_edges(self, forks: dict[NormalizedName, tuple[_Fork, ...]]) -> list[Edit]:
        """The edits making every dependency on a forked package name both sides of the fork."""
        edits: list[Edit] = []
        for table in (t for t in _EDGE_ARRAYS if t in self.keys):
            for key in ["dependencies"] if table == "" else list(self.keys[table]):
                if key not in self.keys[table]:
                    continue
                values = _value(self.package, table)[key]
                if not any(canonicalize_name(str(e.get("name", ""))) in forks for e in values if isinstance(e, dict)):
                    continue
                for row, edge in zip(self.rows(table, key), values):
                    fork = _fork_of(edge, forks)
                    if fork is not None:
                        sides = [(fork.version, fork.source, fork.rest), fork.ours]
                        edits.append((row, row + 1, [f"    {_edge(edge, *side)},\n" for side in sides]))
        return edits

    def with_dependency(self, name: str) -> Edit:
        """The edit adding ``name`` (a split sibling of the patched package) to the dependencies, first."""
        entry = f'    {{ name = "{name}" }},\n'
        if "dependencies" in self.keys[""]:
            start, end = self.keys[""]["dependencies"]
            if end - start < 2:
                raise InvalidLockError(f"{self.where}: dependencies are not written as uv writes them")
            return (start + 1, start + 1, [entry])
        at = self.keys[""]["source"][1]
        return (at, at, ["dependencies = [\n", entry, "]\n"])


#: How many lines a key's value may span beyond where uv would end it (a multi-line string): bounds the parses.
_MAX_VALUE_LINES = 256


def _value_end(lines: Sequence[str], start: int, end: int, expected: dict[str, Any]) -> int | None:
    """Where the key starting at line ``start`` ends: at ``end`` (where uv ends it) or, for a value that
    spans more lines (a multi-line string holding a ``source =`` line), the first line after which the
    lines parse to exactly ``expected``; None when no end within ``_MAX_VALUE_LINES`` does."""
    for candidate in range(end, min(len(lines), end + _MAX_VALUE_LINES) + 1):
        if _parsed("".join(lines[start:candidate])) == expected:
            return candidate
    return None


def _fork_of(edge: Any, forks: dict[NormalizedName, tuple[_Fork, ...]]) -> _Fork | None:
    """The fork a dependency names: by name, and by version and source when it gives them."""
    if not isinstance(edge, dict):
        return None
    for fork in forks.get(canonicalize_name(str(edge.get("name", ""))), ()):
        if edge.get("version", fork.version) == fork.version and edge.get("source", fork.source) == fork.source:
            return fork
    return None


def _edge(edge: dict[str, Any], version: str, source: dict[str, Any], marker: str) -> str:
    """A dependency row naming one side of a fork, in uv's key order (name, version, source, extra, marker)."""
    values = {"name": edge["name"], "version": version, "source": source}
    values.update((k, v) for k, v in edge.items() if k not in values and k != "marker")
    values["marker"] = and_markers(edge.get("marker"), marker)
    return _inline(values)


def _inline(value: Any) -> str:
    """A TOML inline value as uv writes it."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_inline(item)}" for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, str):
        return _string(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _string(value: str) -> str:
    """A TOML basic string."""
    escaped = "".join(
        c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
        for c in value
    )
    return f'"{escaped}"'


def _value(package: dict[str, Any], table: str) -> Any:
    """The table ``table`` (dotted, ``""``: the package) of ``package``."""
    value: Any = package
    for part in table.split(".") if table else []:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _applied(lines: Sequence[str], edits: list[Edit]) -> list[str]:
    """``lines`` with ``edits`` applied; edits at one position keep their order, overlapping ones are a bug."""
    ordered = sorted(enumerate(edits), key=lambda item: (item[1][0], item[1][1], item[0]))
    output, position = [], 0
    for _, (start, end, new) in ordered:
        assert start >= position, "overlapping edits of one uv.lock block"
        output += list(lines[position:start]) + new
        position = end
    return output + list(lines[position:])


def _holds_row(line: str, value: Any) -> bool:
    """Whether ``line`` is one array row that TOML reads as ``value`` (a line that is no TOML by itself is not)."""
    parsed = _parsed(f"x = [{line}]")
    return parsed is not None and parsed.get("x") == [value]


def _parsed(text: str) -> dict[str, Any] | None:
    """The TOML document ``text``, or None when it is none."""
    tomllib = toml_parser("uv.lock")

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _check(uv: UvLock, number: int, lines: list[str]) -> list[str]:
    """``lines``, once they parse to one package table (an edit that broke the table is refused)."""
    packages = (_parsed("".join(lines)) or {}).get("package")
    if not isinstance(packages, list) or len(packages) != 1:
        raise InvalidLockError(
            f"{uv.blocks[number].where}: package {uv.names[number]} is not written in a layout we can edit"
        )
    return lines


def _wheels(files: Sequence[IndexedFile], index_dir: Path) -> list[str]:
    rows = [f'    {{ url = "{file_url(index_dir / f.filename)}", hash = "sha256:{f.sha256}" }},\n' for f in files]
    return ["wheels = [\n", *rows, "]\n"]
