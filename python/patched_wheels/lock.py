"""Point a pip requirements lock at the patched wheels of a local index.

``lock(IN, INDEX_DIR, OUT)`` copies the lock, changing only what must change for pip (and
rules_python's ``pip_parse``, which hands every line to pip) to install the patched wheels:

* the pin of each patched project becomes the patched version (``torch==2.1.0`` ->
  ``torch==2.1.0+stripe.5``) and its ``--hash`` options become the hashes of the index's files;
* projects in the index that the lock does not mention (split siblings such as ``torch-libs``)
  are appended as pins, with the environment marker of the locked project that requires them;
* ``direct`` (the default): each patched pin becomes a direct reference to its wheel
  (``torch @ file:///abs/index/torch-2.1.0+stripe.5-....whl --hash=sha256:...``), so pip and every
  rules_python release (2.x fetches direct references with Bazel's downloader, which cannot read a
  ``file://`` index page) take that file, while every other pin stays as it was and is fetched from
  the lock's own index (or by its own URL, when the caller knows it). When the pin keeps other
  hashes (wheels for other platforms, not patched), the patched reference gets the marker of its
  wheel's tags and those hashes stay usable on a second line with the opposite marker;
* otherwise one option line makes pip look at the index, written ``--option=value``: rules_python 0.22.1
  passes each option line to pip as a single argument, and pip rejects ``--find-links /x`` as
  ``no such option: --find-links /x`` but accepts ``--find-links=/x``. The URL is an absolute
  ``file://`` URL because pip runs inside another (external) repository.

Everything else - comments, blank lines, markers, continuation lines, other projects' hashes,
line endings, a UTF-8 byte order mark - is kept byte for byte, so the diff against the input
shows exactly the patch. Included files (``-r``/``-c``) are refused rather than followed: their
pins would keep the old hashes while this lock pins the patched wheel, and pip would fail on the
mismatch far from the cause.

Which index version replaces a pin (``2.1.0`` stands for the lock's pin):
1. the one version that extends the pin's local label (``2.1.0+stripe.5``, or
   ``2.1.0+cu118.stripe.5`` for ``2.1.0+cu118``): that is how ``patch`` names its output;
2. otherwise, if the index has the pinned version itself (e.g. a mirrored original), the pin
   stays; its hashes are replaced only if none of them matches the index's files (a wheel
   re-patched under the same version);
3. otherwise the index's only version of the project (the index was made to override it).
Two candidates at any step is an error naming them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Iterator, Mapping, Sequence
from urllib.parse import quote

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from patched_wheels.errors import PatchedWheelsError
from patched_wheels.fsutil import write_atomic
from patched_wheels.index import SIMPLE_DIR, IndexedFile, build_index, group_by_project

INDEX_OPTIONS = ("direct", "extra-index-url", "index-url", "find-links")
#: ``direct``: the only form every rules_python release reads (2.x fetches a lock's index pages with
#: Bazel's downloader, which returns a directory listing for a ``file://`` index page), and the
#: wheels nobody patched are not served by us at all. ``extra-index-url`` works whether the index
#: holds every locked wheel or only the patched ones; ``index-url`` when it mirrors the whole lock and
#: pip must not look anywhere else; ``find-links`` for a plain directory listing (pip only).
DEFAULT_INDEX_OPTION = "direct"

# pip's own rules (pip/_internal/req/req_file.py): a comment starts at a '#' at the start of a
# line or after whitespace; a line ending in '\' continues on the next one unless it is a comment.
_COMMENT = re.compile(r"(^|\s+)#.*$")
_HASH_TOKEN = re.compile(r"(?P<lead>[ \t]*)(?<!\S)--hash(?:=|[ \t]+)(?P<value>[^\s\\]+)")
_HASH_ONLY_LINE = re.compile(
    r"^(?P<indent>[ \t]*)--hash(?:=|[ \t]+)[^\s\\]+(?P<cont>[ \t]*\\)?[ \t]*(?P<eol>\r\n|\n|\r)?$"
)
_EOL = re.compile(r"(\r\n|\n|\r)$")
# An option line naming an index: pip's long options take "=value" or " value", its short ones
# (single letters, parsed by optparse) also take the value glued on ("-fDIR").
_ANY_INDEX_OPTION = re.compile(r"--(?:index-url|extra-index-url|find-links)(?:=|\s|$)|-[if]")
# An option line including another file: -r/--requirement, -c/--constraint.
_INCLUDE_OPTION = re.compile(r"--(?:requirement|constraint)(?:=|\s|$)|-[rc]")
_BOM = "\ufeff"  # pip decodes a lock that starts with a UTF-8 byte order mark


@dataclass(frozen=True)
class LockResult:
    out: Path
    changes: tuple[str, ...]  # human-readable, e.g. "torch==2.1.0 -> torch==2.1.0+stripe.5"


@dataclass
class _Logical:
    """One logical line of the lock: physical lines [start, end) joined as pip joins them."""

    start: int
    end: int
    content: str  # joined, comments removed, stripped

    @property
    def is_option(self) -> bool:
        return self.content.startswith("-")


@dataclass
class _Pin:
    line: _Logical
    requirement: Requirement
    hashes: tuple[str, ...]  # "sha256:<hex>" values of the --hash options


def lock(
    requirements: Path | str,
    index_dir: Path | str,
    out: Path | str,
    *,
    index_option: str = DEFAULT_INDEX_OPTION,
    upstream_index_url: str | None = None,
    replaced: Mapping[str, Collection[str]] | None = None,
    references: Mapping[str, tuple[str, str]] | None = None,
) -> LockResult:
    """Write ``out``: ``requirements`` pointed at the index in ``index_dir``.

    The index is refreshed first (incremental, so a no-op when current): the hashes written
    to the lock are then exactly those the index pages serve.

    ``direct`` mode only: ``upstream_index_url`` is written as ``--index-url`` when the lock names
    no index of its own (the index the unpatched pins were resolved from), and ``replaced`` maps a
    project to the sha256 digests of the original wheels its patched wheel replaces; the pin's other
    hashes are kept for the other platforms. Without it every hash of a patched pin is replaced.
    ``references`` maps an unpatched project to the (url, sha256) of the one file its pin admits
    here: a pin whose only hash is that file's becomes a direct reference too, so no index page is
    read for it (rules_python 2.x fetches it by URL and sha256; a lock for several platforms keeps
    its index for such pins).
    """
    requirements, index_dir, out = Path(requirements), Path(index_dir).resolve(), Path(out)
    if index_option not in INDEX_OPTIONS:
        raise PatchedWheelsError(f"--index-option {index_option}: expected one of {', '.join(INDEX_OPTIONS)}")
    text = _read_text(requirements)
    files = build_index(index_dir).files
    if index_option == "direct":
        new_text, changes = rewrite_lock(
            text,
            files,
            option_line=f"--index-url={upstream_index_url}" if upstream_index_url else None,
            direct_dir=index_dir,
            replaced={canonicalize_name(name): frozenset(d.lower() for d in digests) for name, digests in (replaced or {}).items()},
            references={canonicalize_name(name): reference for name, reference in (references or {}).items()},
            source=str(requirements),
        )
    else:
        location = index_dir / SIMPLE_DIR if index_option != "find-links" else index_dir
        option_line = f"--{index_option}={location.as_uri()}"
        new_text, changes = rewrite_lock(text, files, option_line=option_line, source=str(requirements))
    write_atomic(out, new_text.encode("utf-8"))
    return LockResult(out=out, changes=tuple(changes))


def rewrite_lock(
    text: str,
    files: Sequence[IndexedFile],
    *,
    option_line: str | None,
    direct_dir: Path | None = None,
    replaced: Mapping[NormalizedName, frozenset[str]] | None = None,
    references: Mapping[NormalizedName, tuple[str, str]] | None = None,
    source: str = "<lock>",
) -> tuple[str, list[str]]:
    """The pure part of ``lock``: return the new lock text and a list of the changes made.

    With ``direct_dir`` patched pins become direct references to the files there, and
    ``option_line`` (if any) is added only when the lock names no index of its own.
    """
    bom, text = (_BOM, text[len(_BOM) :]) if text.startswith(_BOM) else ("", text)
    lines = text.splitlines(keepends=True)
    first_eol = _EOL.search(lines[0]) if lines else None
    eol = first_eol.group(1) if first_eol else "\n"
    logical = _checked_logical_lines(lines, source)
    pins = [_parse_pin(line, source) for line in logical if line.content and not line.is_option]
    index = group_by_project(files)
    edits: dict[int, tuple[int, list[str]]] = {}  # first physical line -> (end, new lines)
    changes: list[str] = []
    parents: dict[NormalizedName, list[tuple[NormalizedName, _Pin]]] = {}
    for pin in pins:
        project = canonicalize_name(pin.requirement.name)
        if pin.requirement.url:
            continue  # a direct reference names its own file: pip fetches that URL, not the index
        if project not in index:
            reference = (references or {}).get(project)
            if direct_dir is not None and reference and {h.lower() for h in pin.hashes} == {f"sha256:{reference[1]}"}:
                block = _pin_block(f"{pin.requirement.name} @ {reference[0]}", _marker_of(pin), [f"sha256:{reference[1]}"], eol)
                edits[pin.line.start] = (pin.line.end, block)
            continue
        pinned = _pinned_version(pin, source)
        target = _target_version(pin, pinned, index[project], source)
        target_files = [f for f in index[project] if f.version == target]
        _record_parents(parents, project, pin, target_files)
        if direct_dir is not None:
            if target == pinned:
                continue  # the index holds the original itself: the lock's own index serves it
            block = _direct_pin(pin, target_files, direct_dir, (replaced or {}).get(project), eol, source)
            edits[pin.line.start] = (pin.line.end, block)
            changes.append(f"{pin.requirement.name}=={pinned} -> {_strip_eol(block[0])}")
            continue
        new_hashes = sorted(f"sha256:{f.sha256}" for f in target_files)
        locked_hashes = {value.lower() for value in pin.hashes}
        refresh = bool(pin.hashes) and (target != pinned or not set(new_hashes) & locked_hashes)
        physical = lines[pin.line.start : pin.line.end]
        if target != pinned:
            physical = _replace_version(physical, pin, str(target), source)
            changes.append(f"{pin.requirement.name}=={pinned} -> {pin.requirement.name}=={target}")
        elif refresh:
            changes.append(f"{pin.requirement.name}=={pinned}: hashes replaced")
        if refresh:
            physical = _replace_hashes(physical, new_hashes)
        if target != pinned or refresh:
            edits[pin.line.start] = (pin.line.end, physical)

    if option_line is None or (direct_dir is not None and any(_ANY_INDEX_OPTION.match(l.content) for l in logical)):
        option_at, dropped = None, {}
    else:
        option_at, dropped = _place_option(logical, option_line)
    for start, end in dropped.items():
        edits[start] = (end, [])
    if option_at is not None:
        changes.append(f"added {option_line}")
    output: list[str] = []
    number = 0
    while number <= len(lines):
        if number == len(lines):
            if option_at == number:
                _end_input(output, eol)
                output.append(option_line + eol)
            break
        if number == option_at:
            output.append(option_line + eol)
        end, replacement = edits.get(number, (number + 1, [lines[number]]))
        output.extend(replacement)
        number = end
    locked = {canonicalize_name(pin.requirement.name) for pin in pins}
    uses_hashes = any(pin.hashes for pin in pins)
    for requirement, block in _added_pins(index, locked, parents, uses_hashes, eol, source, direct_dir):
        _end_input(output, eol)
        output.extend(block)
        changes.append(f"added {requirement}")
    return bom + "".join(output), changes


def _strip_eol(line: str) -> str:
    return _EOL.sub("", line).rstrip(" \\")


def _direct_pin(
    pin: _Pin,
    files: Sequence[IndexedFile],
    directory: Path,
    replaced: frozenset[str] | None,
    eol: str,
    source: str,
) -> list[str]:
    """The lines that replace a patched pin in ``direct`` mode (module docstring).

    A direct reference names one file, so the patched version must have exactly one. If the pin
    keeps hashes of other wheels (a lock for several platforms), those stay on a second line whose
    marker excludes what the patched wheel's tags cover.
    """
    if len(files) != 1:
        names = ", ".join(sorted(f.filename for f in files))
        raise PatchedWheelsError(
            f"{_where(source, pin.line.start)}: a direct reference names one file, but the index has "
            f"{names} for {pin.requirement.name}; use an index option instead"
        )
    (target,) = files
    reference = f"{pin.requirement.name} @ {_file_url(directory / target.filename)}"
    hashes = [f"sha256:{target.sha256}"]
    left = sorted(h for h in pin.hashes if replaced is not None and h.partition(":")[2].lower() not in replaced)
    if not left:
        # No other line serves other platforms, so no marker of the wheel's own: a marker makes some
        # rules_python releases evaluate markers with an interpreter, for nothing in a one-platform lock.
        return _pin_block(reference, _marker_of(pin), hashes, eol)
    environments = WheelEnvironments.of(target.tags)
    if environments.marker() is None:
        raise PatchedWheelsError(
            f"{_where(source, pin.line.start)}: {target.filename} is for every platform, but the pin of "
            f"{pin.requirement.name} has {len(left)} more hashes; a pure wheel cannot leave other wheels in use"
        )
    return _pin_block(reference, _and(_marker_of(pin), environments.marker()), hashes, eol) + _pin_block(
        f"{pin.requirement.name}{pin.requirement.specifier}", _and(_marker_of(pin), environments.complement()), left, eol
    )


def _marker_of(pin: _Pin) -> str | None:
    return str(pin.requirement.marker) if pin.requirement.marker else None


def _file_url(path: Path) -> str:
    """A ``file://`` URL that keeps a local version's ``+`` as it is (``Path.as_uri`` writes ``%2B``):
    Bazel's downloader opens the path as written, pip and rules_python read both spellings."""
    return "file://" + quote(str(path), safe="/+")


def _pin_block(requirement: str, marker: str | None, hashes: Sequence[str], eol: str) -> list[str]:
    """A pin in pip-compile's layout: one ``--hash`` per continuation line."""
    head = requirement + (f" ; {marker}" if marker else "")
    if not hashes:
        return [head + eol]
    return [head + " \\" + eol] + [
        f"    --hash={value}" + (" \\" if number < len(hashes) - 1 else "") + eol for number, value in enumerate(hashes)
    ]


def _and(first: str | None, second: str | None) -> str | None:
    if first and second:
        return f"({first}) and ({second})"
    return first or second


# PEP 425 platform tags -> PEP 508 (sys_platform, platform_machine) values.
_MACHINES = {"amd64": "AMD64", "arm64": "ARM64", "win32": "x86"}


@dataclass(frozen=True)
class WheelEnvironments:
    """The environments a wheel's tags admit, as far as a lock for several platforms tells wheels apart:
    the operating system and machine and, for a CPython-ABI wheel, the Python minor version."""

    python: str | None
    platforms: frozenset[tuple[str, str]]  # (sys_platform, platform_machine); empty: any

    @classmethod
    def of(cls, tags: Iterable[Tag]) -> "WheelEnvironments":
        platforms: set[tuple[str, str]] = set()
        pythons: set[str] = set()
        for tag in tags:
            if tag.platform != "any":
                platforms.update(_platform_values(tag.platform))
            if tag.abi.startswith("cp") and tag.interpreter.startswith("cp") and tag.abi != "abi3":
                digits = tag.interpreter[2:]
                pythons.add(f"{digits[0]}.{digits[1:]}")
        return cls(pythons.pop() if len(pythons) == 1 else None, frozenset(platforms))

    def marker(self) -> str | None:
        """A PEP 508 marker true exactly in these environments (None: every environment)."""
        alternatives = [
            f'sys_platform == "{system}" and platform_machine == "{machine}"' for system, machine in sorted(self.platforms)
        ]
        python = [f'python_version == "{self.python}"'] if self.python else []
        return _join(" and ", python + ([_join(" or ", alternatives)] if alternatives else []))

    def complement(self) -> str | None:
        """The marker of every other environment (PEP 508 has no ``not``: De Morgan's laws)."""
        alternatives = [
            f'sys_platform != "{system}" or platform_machine != "{machine}"' for system, machine in sorted(self.platforms)
        ]
        python = [f'python_version != "{self.python}"'] if self.python else []
        return _join(" or ", python + ([_join(" and ", alternatives)] if alternatives else []))


def _join(operator: str, parts: Sequence[str]) -> str | None:
    """``parts`` joined by ``operator``, each parenthesised when it holds more than one term."""
    if len(parts) <= 1:
        return parts[0] if parts else None
    return operator.join(f"({part})" if " and " in part or " or " in part else part for part in parts)


def _platform_values(platform: str) -> set[tuple[str, str]]:
    if platform.startswith(("manylinux", "musllinux", "linux")):
        machine = re.sub(r"^(?:manylinux|musllinux)(?:_\d+_\d+|\d+)?_|^linux_", "", platform)
        return {("linux", machine)}
    if platform.startswith("macosx_"):
        machine = platform.split("_", 3)[-1]
        machines = {"universal2": ("arm64", "x86_64"), "intel": ("x86_64",)}.get(machine, (machine,))
        return {("darwin", m) for m in machines}
    if platform.startswith("win"):
        return {("win32", _MACHINES.get(platform.removeprefix("win_"), platform))}
    raise PatchedWheelsError(f"platform tag {platform}: cannot tell its sys_platform and platform_machine")


def _end_input(output: list[str], eol: str) -> None:
    """Before lines are added after the input: end its last line if it lacked a newline, and
    its last logical line if that ended in a dangling continuation (pip would join them)."""
    if output and not _EOL.search(output[-1]):
        output[-1] += eol
    if output and _EOL.sub("", output[-1]).endswith("\\"):
        output.append(eol)


def _logical_lines(lines: Sequence[str]) -> Iterator[_Logical]:
    """Join continuation lines exactly as pip's ``join_lines`` does, keeping line spans."""
    start = None
    joined: list[str] = []
    for number, physical in enumerate(lines):
        line = _EOL.sub("", physical)
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if joined:
                joined.append(line)
                yield _Logical(start, number + 1, _COMMENT.sub("", "".join(joined)).strip())
                joined = []
            else:
                yield _Logical(number, number + 1, _COMMENT.sub("", line).strip())
        else:
            if not joined:
                start = number
            joined.append(line.strip("\\"))
    if joined:
        yield _Logical(start, len(lines), _COMMENT.sub("", "".join(joined)).strip())


def _checked_logical_lines(lines: Sequence[str], source: str) -> list[_Logical]:
    """The logical lines of a lock that includes no other file."""
    logical = list(_logical_lines(lines))
    for line in logical:
        if line.is_option and _INCLUDE_OPTION.match(line.content):
            raise PatchedWheelsError(
                f"{_where(source, line.start)}: {line.content}: included files are not followed; "
                "put their lines into this lock"
            )
    return logical


def _parse_pin(line: _Logical, source: str) -> _Pin:
    """Split a requirement line like pip's ``break_args_options``: the requirement is every
    space-separated token before the first one starting with '-'."""
    tokens = line.content.split(" ")
    first_option = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
    requirement_text = " ".join(tokens[:first_option])
    try:
        requirement = Requirement(requirement_text)
    except InvalidRequirement as error:
        reason = str(error).splitlines()[0]  # packaging adds the text and a caret on more lines
        raise PatchedWheelsError(f"{_where(source, line.start)}: {requirement_text!r}: {reason}") from None
    options = " ".join(tokens[first_option:])
    hashes = tuple(match.group("value") for match in _HASH_TOKEN.finditer(options))
    return _Pin(line, requirement, hashes)


def _pinned_version(pin: _Pin, source: str) -> Version:
    specifiers = list(pin.requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator not in ("==", "===") or "*" in specifiers[0].version:
        raise PatchedWheelsError(
            f"{_where(source, pin.line.start)}: {pin.requirement.name} must be pinned with == "
            f"(found {pin.requirement})"
        )
    try:
        return Version(specifiers[0].version)
    except InvalidVersion:
        raise PatchedWheelsError(
            f"{_where(source, pin.line.start)}: {specifiers[0].version!r} is not a PEP 440 version"
        ) from None


def _target_version(pin: _Pin, pinned: Version, files: Iterable[IndexedFile], source: str) -> Version:
    """Which of the index's versions the pin should name (rules in the module docstring)."""
    versions = sorted({f.version for f in files})
    extending = [v for v in versions if _extends(v, pinned)]
    if len(extending) == 1:
        return extending[0]
    candidates = extending if extending else ([] if pinned in versions else versions)
    if not candidates:
        return pinned
    if len(candidates) == 1:
        return candidates[0]
    raise PatchedWheelsError(
        f"{_where(source, pin.line.start)}: the index has {pin.requirement.name} "
        f"{', '.join(map(str, candidates))} for the pin =={pinned}; keep only one in the index"
    )


def _extends(version: Version, pinned: Version) -> bool:
    """``2.1.0+stripe.5`` extends ``2.1.0``; ``2.1.0+cu118.stripe.5`` extends ``2.1.0+cu118``."""
    if version.local is None or Version(version.public) != Version(pinned.public):
        return False
    return pinned.local is None or version.local.startswith(pinned.local + ".")


def _replace_version(physical: list[str], pin: _Pin, version: str, source: str) -> list[str]:
    """Replace the version text of the ``==`` pin where it is written, leaving the rest alone."""
    written = next(iter(pin.requirement.specifier)).version
    pattern = re.compile(r"(===?[ \t]*)" + re.escape(written) + r"(?![\w.!+*-])")
    for offset, line in enumerate(physical):
        new_line, count = pattern.subn(lambda m: m.group(1) + version, line, count=1)
        if count:
            return physical[:offset] + [new_line] + physical[offset + 1 :]
    raise PatchedWheelsError(
        f"{_where(source, pin.line.start)}: cannot find =={written} of {pin.requirement.name} on one line"
    )


def _replace_hashes(physical: list[str], hashes: Sequence[str]) -> list[str]:
    """Swap the ``--hash`` options for ``hashes``, keeping the layout.

    pip-compile's layout - one ``--hash`` per continuation line - is kept line for line with
    the same indentation and continuation marks; hashes written inline are replaced inline.
    """
    tokens = [f"--hash={value}" for value in hashes]
    with_hash = [i for i, line in enumerate(physical) if _HASH_TOKEN.search(_split_comment(line)[0])]
    if not with_hash:
        return physical
    block = range(with_hash[0], with_hash[-1] + 1)
    own_lines = [_HASH_ONLY_LINE.match(physical[i]) for i in block]
    if all(own_lines):
        first, last = own_lines[0], own_lines[-1]
        continuation = first.group("cont") or " \\"
        new_block = []
        for position, token in enumerate(tokens):
            is_last = position == len(tokens) - 1
            cont = (last.group("cont") or "") if is_last else continuation
            eol = (last.group("eol") or "") if is_last else (first.group("eol") or "\n")
            new_block.append(f"{first.group('indent')}{token}{cont}{eol}")
        return physical[: block.start] + new_block + physical[block.stop :]
    pending = [" ".join(tokens)]  # the first old token becomes all new ones, the rest go

    def substitute(match: re.Match[str]) -> str:
        return match.group("lead") + pending.pop() if pending else ""

    def replace_in_code(line: str) -> str:
        code, comment = _split_comment(line)
        return _HASH_TOKEN.sub(substitute, code) + comment

    return [replace_in_code(line) for line in physical]


def _split_comment(physical: str) -> tuple[str, str]:
    """``physical`` cut where pip's comment begins: ``--hash=`` in a comment is no option, and
    the comment (with the line's ending) must come out byte for byte."""
    match = _COMMENT.search(physical)
    return (physical[: match.start()], physical[match.start() :]) if match else (physical, "")


def _record_parents(
    parents: dict[NormalizedName, list[tuple[NormalizedName, _Pin]]],
    project: NormalizedName,
    pin: _Pin,
    files: Iterable[IndexedFile],
) -> None:
    """Note which projects each indexed wheel requires, to place split siblings in the lock."""
    for indexed in files:
        if indexed.metadata is None:
            continue
        raw, _unparsed = parse_email(indexed.metadata)
        for text in raw.get("requires_dist", []):
            try:
                required = canonicalize_name(Requirement(text).name)
            except InvalidRequirement:
                continue
            parents.setdefault(required, []).append((project, pin))


def _added_pins(
    index: Mapping[NormalizedName, list[IndexedFile]],
    locked: set[NormalizedName],
    parents: Mapping[NormalizedName, list[tuple[NormalizedName, _Pin]]],
    uses_hashes: bool,
    eol: str,
    source: str,
    direct_dir: Path | None = None,
) -> list[tuple[str, list[str]]]:
    """Pins for index projects the lock lacks, in pip-compile's layout, sorted by name.

    The marker is copied from the locked projects requiring the new one when they agree, so a
    Linux-only torch does not drag its sibling onto other platforms.
    """
    added = []
    for project in sorted(set(index) - locked):
        versions = sorted({f.version for f in index[project]})
        if len(versions) != 1:
            raise PatchedWheelsError(
                f"{source}: the index has {project} {', '.join(map(str, versions))}, which the lock "
                "does not pin; keep only one in the index"
            )
        requirers = parents.get(project, [])
        markers = {str(pin.requirement.marker) if pin.requirement.marker else None for _, pin in requirers}
        marker = markers.pop() if len(markers) == 1 and None not in markers else None
        if direct_dir is not None:
            if len(index[project]) != 1:
                raise PatchedWheelsError(f"{source}: a direct reference names one file; the index has several of {project}")
            (single,) = index[project]
            requirement = f"{project} @ {_file_url(direct_dir / single.filename)}"
        else:
            requirement = f"{project}=={versions[0]}"
        if marker:
            requirement += f" ; {marker}"
        hashes = sorted(f"--hash=sha256:{f.sha256}" for f in index[project]) if uses_hashes else []
        continuations = [" \\"] * len(hashes) + [""]
        block = [requirement + continuations[0] + eol]
        block += [f"    {h}{continuations[i + 1]}{eol}" for i, h in enumerate(hashes)]
        via = sorted({name for name, _ in requirers})
        if via:
            block.append(f"    # via {', '.join(via)}{eol}")
        added.append((requirement, block))
    return added


def _place_option(logical: Sequence[_Logical], option_line: str) -> tuple[int | None, dict[int, int]]:
    """Where to insert the index option line, and which option lines to drop (start -> end).

    The line goes before the first non-comment line (after pip-compile's header). An identical
    line already present is kept and nothing is added, so locking is idempotent. With
    ``--index-url`` the lock's other index options (``-i``, ``--extra-index-url``, ``-f``,
    ``--find-links``) are dropped: that mode promises pip looks at the local index only.
    """
    dropped: dict[int, int] = {}
    if option_line.split("=", 1)[0] == "--index-url":
        for line in logical:
            if line.content != option_line and _ANY_INDEX_OPTION.match(line.content):
                dropped[line.start] = line.end
    if any(line.content == option_line for line in logical):
        return None, dropped
    if dropped:
        return min(dropped), dropped
    first = next((line.start for line in logical if line.content), None)
    return (first if first is not None else (logical[-1].end if logical else 0)), dropped


def _read_text(requirements: Path) -> str:
    """The lock's text; pip reads requirement files as UTF-8 too (absent a BOM saying otherwise)."""
    try:
        return requirements.read_bytes().decode("utf-8")
    except OSError as error:
        raise PatchedWheelsError(f"{requirements}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise PatchedWheelsError(f"{requirements}: not UTF-8 ({error.reason} at byte {error.start})") from None


def _where(source: str, start: int) -> str:
    return f"{source}:{start + 1}"


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


def read_pins(requirements: Path | str) -> list[LockedPin]:
    """The ``==`` pins of a lock with their sha256 hashes, in file order.

    Direct references (``pkg @ https://...``) are left out: pip installs them from their URL,
    so there is no index page to resolve them from. Any other pin that is not ``==`` is an error.
    """
    requirements = Path(requirements)
    source = str(requirements)
    pins = []
    lines = _read_text(requirements).removeprefix(_BOM).splitlines(keepends=True)
    for line in _checked_logical_lines(lines, source):
        if not line.content or line.is_option:
            continue
        pin = _parse_pin(line, source)
        if pin.requirement.url:
            continue
        pins.append(
            LockedPin(
                project=canonicalize_name(pin.requirement.name),
                version=_pinned_version(pin, source),
                hashes=frozenset(h.partition(":")[2].lower() for h in pin.hashes if h.startswith("sha256:")),
                requirement=pin.requirement,
                line_number=line.start + 1,
            )
        )
    return pins
