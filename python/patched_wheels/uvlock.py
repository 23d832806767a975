"""uv.lock in and out: the pins a ``uv.lock`` installs here, and the same file pointing at our wheels.

Reading (after uv's lock format and rules_python 2.3.2's ``parse_requirements.bzl``): a ``uv.lock`` holds
every package of every platform and Python version the project supports, so the pins are the packages
this interpreter installs: from the workspace members (``virtual``/``editable``/``directory`` sources,
with all their extras and dependency groups) along every dependency whose marker holds here, taking the
extras each edge asks for; where a name has several versions (forks), the edge's version and source and
the package's ``resolution-markers`` pick one. A pin's hashes and files are the package's wheels (and
sdist), so ``resolve`` needs no index page for them.

Writing: each patched package's table names the patched version, our index as its registry (a
``file://`` URL) and our wheel by ``file://`` URL and sha256; its sdist goes (it is the original's). A
split sibling is added as a package and as a dependency of the package that requires it. Every other
byte is left as it was. The file stays one ``uv sync --frozen`` / ``uv export --frozen`` and rules_python
2.x's ``pip.parse(uv_lock = ...)`` read; it no longer matches ``pyproject.toml`` (``--locked`` would
re-lock), and a patched package keeps only our wheel, for the platform the hub ran on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from packaging.markers import default_environment
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from patched_wheels.errors import InvalidLockError
from patched_wheels.index import SIMPLE_DIR, IndexedFile
from patched_wheels.lockplan import LockPlan, file_url
from patched_wheels.pins import Lock, Pin, PinFile, Span, checked_hash, marker_holds
from patched_wheels.tomlread import get, load_toml, tables, toml_parser

_HEADER = "[[package]]"
_WORKSPACE_SOURCES = ("virtual", "editable", "directory")
_KEY = re.compile(r"([A-Za-z0-9_-]+)[ \t]*=")


@dataclass(frozen=True)
class UvLock:
    """A uv.lock read for one environment: its pins, and its text cut into ``[[package]]`` blocks."""

    lock: Lock
    lines: tuple[str, ...]
    blocks: tuple[Span, ...]  # of each [[package]] table, in file order
    names: tuple[NormalizedName, ...]  # each block's package


def read_uv_lock(path: Path | str, environment: Mapping[str, str] | None = None) -> UvLock:
    """The pins ``path`` installs in ``environment`` (default: the running interpreter)."""
    path = Path(path)
    source = str(path)
    text, document = load_toml(path)
    packages = tables(document, "package", source)
    lines = tuple(text.splitlines(keepends=True))
    blocks = _blocks(lines, packages, source)
    env = dict(environment) if environment is not None else dict(default_environment())
    names = tuple(canonicalize_name(get(package, "name", str, f"{source}: package")) for package in packages)
    extras = _installed(packages, names, blocks, env)
    pins = tuple(
        _pin(packages[number], blocks[number], sorted(extras[number]), path.parent)
        for number in sorted(extras)
        if _source_kind(packages[number], blocks[number]) not in _WORKSPACE_SOURCES
    )
    return UvLock(Lock(source, "uv-lock", pins), lines, blocks, names)


def _blocks(lines: tuple[str, ...], packages: list[dict[str, Any]], source: str) -> tuple[Span, ...]:
    """The line span of each ``[[package]]`` table; each is checked to parse to its package alone, so an
    edit of a block edits that package and nothing else."""
    tomllib = toml_parser(source)
    starts = [number for number, line in enumerate(lines) if line.strip() == _HEADER]
    spans = tuple(Span(source, start, end) for start, end in zip(starts, starts[1:] + [len(lines)]))
    if len(spans) != len(packages) or any(
        tomllib.loads("".join(lines[span.start : span.end])).get("package") != [package]
        for span, package in zip(spans, packages)
    ):
        raise InvalidLockError(f"{source}: its [[package]] tables are not written one after another as uv writes them")
    return spans


def _where(span: Span, package: dict[str, Any]) -> str:
    return f"{span.where}: package {package.get('name')!r}"


def _source_kind(package: dict[str, Any], span: Span) -> str:
    source = get(package, "source", dict, _where(span, package))
    kinds = [kind for kind in ("registry", "url", "path", "git", *_WORKSPACE_SOURCES) if kind in source]
    if len(kinds) != 1 or not isinstance(source[kinds[0]], str):
        raise InvalidLockError(f"{_where(span, package)}: source must name one registry, url, path, git or workspace member")
    return kinds[0]


def _installed(
    packages: list[dict[str, Any]], names: tuple[NormalizedName, ...], blocks: tuple[Span, ...], env: dict[str, str]
) -> dict[int, set[str]]:
    """The packages installed in ``env`` (by position) with the extras asked of each (module docstring)."""
    by_name: dict[NormalizedName, list[int]] = {}
    for number, name in enumerate(names):
        by_name.setdefault(name, []).append(number)
    roots = [n for n, package in enumerate(packages) if _source_kind(package, blocks[n]) in _WORKSPACE_SOURCES]
    if not roots:  # no workspace member: every package that applies here
        return {n: set() for n, package in enumerate(packages) if _forks_hold(package, blocks[n], env)}
    extras: dict[int, set[str]] = {}
    work: list[tuple[int, frozenset[str]]] = []
    for root in roots:
        optional = get(packages[root], "optional-dependencies", dict, _where(blocks[root], packages[root]), {})
        work.append((root, frozenset(optional)))
    while work:
        number, asked = work.pop()
        if number in extras and asked <= extras[number]:
            continue
        extras.setdefault(number, set()).update(asked)
        for edge in _edges(packages[number], blocks[number], asked, number in roots):
            where = _where(blocks[number], packages[number])
            marker = get(edge, "marker", str, where, "")
            if marker and not marker_holds(marker, env, where=where):
                continue
            for target in _targets(edge, by_name, packages, blocks, env, where):
                work.append((target, frozenset(get(edge, "extra", list, where, []))))
    return extras


def _edges(package: dict[str, Any], span: Span, extras: frozenset[str], root: bool) -> list[dict[str, Any]]:
    """The dependency tables of ``package`` with ``extras`` (and, for a workspace member, its groups)."""
    where = _where(span, package)
    edges = tables(package, "dependencies", where)
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
    packages: list[dict[str, Any]],
    blocks: tuple[Span, ...],
    env: dict[str, str],
    where: str,
) -> list[int]:
    """The package an edge names: by name, then version and source, then the forks that hold here."""
    name = canonicalize_name(get(edge, "name", str, where))
    candidates = by_name.get(name)
    if not candidates:
        raise InvalidLockError(f"{where}: depends on {name}, which the lock has no package of")
    if "version" in edge:
        candidates = [n for n in candidates if packages[n].get("version") == edge["version"]]
    if "source" in edge:
        candidates = [n for n in candidates if packages[n].get("source") == edge["source"]]
    if len(candidates) > 1:
        candidates = [n for n in candidates if _forks_hold(packages[n], blocks[n], env)][:1]
    return candidates


def _forks_hold(package: dict[str, Any], span: Span, env: dict[str, str]) -> bool:
    markers = get(package, "resolution-markers", list, _where(span, package), [])
    return not markers or any(marker_holds(str(m), env, where=_where(span, package)) for m in markers)


def _pin(package: dict[str, Any], span: Span, extras: list[str], root: Path) -> Pin:
    """The pin of an installed package: its version, hashes and files, and its URL when it is no registry's."""
    where = _where(span, package)
    name = get(package, "name", str, where)
    written = get(package, "version", str, where)
    try:
        version = Version(written)
    except InvalidVersion:
        raise InvalidLockError(f"{where}: version {written!r} is not a PEP 440 version") from None
    source = get(package, "source", dict, where)
    kind = _source_kind(package, span)
    base = root / source["registry"] if kind == "registry" and "://" not in source["registry"] else root
    files, hashes = [], []
    for wheel in tables(package, "wheels", where):
        digest = get(wheel, "hash", str, f"{where}: wheel", "")
        hashes += [_hash(digest, f"{where}: wheel")] if digest else []
        url = _file_location(wheel, base, root, source, where)
        filename = get(wheel, "filename", str, where, "") or url.split("?", 1)[0].rsplit("/", 1)[-1]
        files.append(PinFile(filename, url, digest.partition(":")[2].lower() if digest.startswith("sha256:") else None))
    sdist = get(package, "sdist", dict, where, {})
    hashes += [_hash(get(sdist, "hash", str, f"{where}: sdist"), f"{where}: sdist")] if "hash" in sdist else []
    url = {"registry": None, "url": source.get("url"), "git": f"git+{source.get('git')}"}.get(kind)
    if kind == "path":
        url = file_url((root / source["path"]).resolve())
    head = name + (f"[{','.join(extras)}]" if extras else "")
    return Pin(name, tuple(extras), head, version, None, tuple(hashes), url, span, f"{head}=={version}", None, written, tuple(files))


def _hash(written: str, where: str) -> str:
    """A uv.lock hash (``sha256:<hex>``), checked like every hash a lock gives us."""
    algorithm, _, digest = written.partition(":")
    return checked_hash(algorithm, digest, where)


def _file_location(wheel: dict[str, Any], base: Path, root: Path, source: dict[str, Any], where: str) -> str:
    """A wheel's URL: as written, or a ``file://`` URL of its path (relative to its registry directory),
    or of the path source it is the file of."""
    if "url" in wheel:
        return get(wheel, "url", str, where)
    if "path" in wheel:
        return file_url((base / get(wheel, "path", str, where)).resolve())
    if "path" in source:
        return file_url((root / source["path"]).resolve())
    raise InvalidLockError(f"{where}: a wheel without url or path")


def render_uv_lock(uv: UvLock, plan: LockPlan, index_dir: Path) -> str:
    """The text of ``uv`` with each patched package pointing at our wheels; every other byte kept."""
    registry = (index_dir / SIMPLE_DIR).as_uri()
    replaced: dict[int, list[str]] = {}
    block_of = {span.start: number for number, span in enumerate(uv.blocks)}
    for edit in plan.edits:
        if edit.files and edit.pin.span.start in block_of:
            number = block_of[edit.pin.span.start]
            replaced[number] = _patched_block(uv, number, str(edit.version), edit.files, registry, index_dir)
    added_blocks: list[str] = []
    for pin, files in zip(plan.added, plan.added_files):
        added_blocks += ["\n", _HEADER + "\n", f'name = "{pin.head}"\n', f'version = "{pin.version}"\n']
        added_blocks += [f'source = {{ registry = "{registry}" }}\n'] + _wheels(files, index_dir)
        for parent in pin.via:
            for number in (n for n, name in enumerate(uv.names) if name == parent):
                lines = replaced.get(number) or list(uv.lines[uv.blocks[number].start : uv.blocks[number].end])
                replaced[number] = _with_dependency(lines, pin.head)
    output: list[str] = []
    for number, span in enumerate(uv.blocks):
        if number == 0:
            output.extend(uv.lines[: span.start])
        output.extend(replaced.get(number) or uv.lines[span.start : span.end])
    if not uv.blocks:
        output.extend(uv.lines)
    if added_blocks and output and not output[-1].endswith("\n"):
        output[-1] += "\n"
    return "".join(output + added_blocks)


def _patched_block(uv: UvLock, number: int, version: str, files: tuple[IndexedFile, ...], registry: str, index_dir: Path) -> list[str]:
    """The ``[[package]]`` block ``number`` with version, source and wheels replaced and the sdist dropped."""
    span = uv.blocks[number]
    lines = list(uv.lines[span.start : span.end])
    keys = _top_level_keys(lines, span)
    new = {"version": [f'version = "{version}"\n'], "source": [f'source = {{ registry = "{registry}" }}\n'],
           "sdist": [], "wheels": _wheels(files, index_dir)}  # fmt: skip
    if "wheels" not in keys:  # an sdist-only package: the wheels go where uv writes them, after the source
        keys["wheels"] = (keys["source"][1], keys["source"][1])
    for key in sorted((k for k in new if k in keys), key=lambda k: keys[k][0], reverse=True):
        start, end = keys[key]
        lines[start:end] = new[key]
    tomllib = toml_parser(span.where)
    written = tomllib.loads("".join(lines))["package"][0]
    if written.get("version") != version or len(written.get("wheels", [])) != len(files):
        raise InvalidLockError(f"{span.where}: package {uv.names[number]} is not written in a layout we can edit")
    return lines


def _wheels(files: tuple[IndexedFile, ...], index_dir: Path) -> list[str]:
    rows = [f'    {{ url = "{file_url(index_dir / f.filename)}", hash = "sha256:{f.sha256}" }},\n' for f in files]
    return ["wheels = [\n", *rows, "]\n"]


def _top_level_keys(lines: list[str], span: Span) -> dict[str, tuple[int, int]]:
    """The lines [start, end) of each key of the package table itself (not its sub-tables)."""
    keys: dict[str, tuple[int, int]] = {}
    number = 1
    while number < len(lines) and not lines[number].startswith("["):
        match = _KEY.match(lines[number])
        end = number + 1
        if match and lines[number].rstrip().endswith("["):  # a multi-line array, closed by a line "]"
            while end < len(lines) and lines[end].strip() != "]":
                end += 1
            if end == len(lines):
                raise InvalidLockError(f"{span.where}: an array of {match.group(1)!r} that does not end")
            end += 1
        if match:
            keys[match.group(1)] = (number, end)
        number = end
    for required in ("version", "source"):
        if required not in keys:
            raise InvalidLockError(f"{span.where}: no {required} line in the layout uv writes")
    return keys


def _with_dependency(lines: list[str], name: str) -> list[str]:
    """A package block that also depends on ``name`` (a split sibling of the patched package)."""
    keys = _top_level_keys(lines, Span("", 0, 0))
    entry = f'    {{ name = "{name}" }},\n'
    if "dependencies" in keys:
        start, end = keys["dependencies"]
        if end - start > 1:
            return lines[: start + 1] + [entry] + lines[start + 1 :]
        raise InvalidLockError(f"dependencies of {name}'s parent are not written as uv writes them")
    at = keys["source"][1]
    return lines[:at] + ["dependencies = [\n", entry, "]\n"] + lines[at:]
