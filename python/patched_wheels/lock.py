"""Point a pip requirements lock at the patched wheels of a local index.

``lock(IN, INDEX, OUT)`` copies the lock IN (read by :mod:`patched_wheels.requirements`), pointing it
at INDEX, the files ``index.build_index`` just published; it changes only what must change for pip (and
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
shows exactly the patch. Included files (``-r``/``-c``) are refused (see ``requirements``).

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
from typing import Collection, Iterable, Mapping, Sequence
from urllib.parse import quote

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from patched_wheels.errors import InvalidLockError, UsageError
from patched_wheels.fsutil import write_atomic
from patched_wheels.index import SIMPLE_DIR, IndexedFile, IndexResult, group_by_project
from patched_wheels.requirements import (
    EOL,
    HASH_OPTION,
    LogicalLine,
    PinLine,
    RequirementsText,
    read_requirements,
    split_comment,
)

INDEX_OPTIONS = ("direct", "extra-index-url", "index-url", "find-links")
#: ``direct``: the only form every rules_python release reads (2.x fetches a lock's index pages with
#: Bazel's downloader, which returns a directory listing for a ``file://`` index page), and the
#: wheels nobody patched are not served by us at all. ``extra-index-url`` works whether the index
#: holds every locked wheel or only the patched ones; ``index-url`` when it mirrors the whole lock and
#: pip must not look anywhere else; ``find-links`` for a plain directory listing (pip only).
DEFAULT_INDEX_OPTION = "direct"

# A physical line holding one --hash option and nothing else (pip-compile's layout).
_HASH_ONLY_LINE = re.compile(
    r"^(?P<indent>[ \t]*)--hash(?:=|[ \t]+)[^\s\\]+(?P<cont>[ \t]*\\)?[ \t]*(?P<eol>\r\n|\n|\r)?$"
)


@dataclass(frozen=True)
class LockResult:
    """The lock written, and what changed in it, for the command to print."""

    out: Path
    changes: tuple[str, ...]  # human-readable, e.g. "torch==2.1.0 -> torch==2.1.0+stripe.5"


def lock(
    requirements: Path | str,
    index: IndexResult,
    out: Path | str,
    *,
    index_option: str = DEFAULT_INDEX_OPTION,
    upstream_index_url: str | None = None,
    replaced: Mapping[str, Collection[str]] | None = None,
    references: Mapping[str, tuple[str, str]] | None = None,
) -> LockResult:
    """Write ``out``: ``requirements`` pointed at ``index``, what ``index.build_index`` returned.

    The caller indexes the directory first (``build_index`` is incremental, so that is cheap when
    nothing changed): the hashes written to the lock are then those of the index's files, and a
    result whose pages were since rewritten for other files is refused rather than written from.

    ``direct`` mode only: ``upstream_index_url`` is written as ``--index-url`` when the lock names
    no index of its own (the index the unpatched pins were resolved from), and ``replaced`` maps a
    project to the sha256 digests of the original wheels its patched wheel replaces; the pin's other
    hashes are kept for the other platforms. Without it every hash of a patched pin is replaced.
    ``references`` maps an unpatched project to the (url, sha256) of the one file its pin admits
    here: a pin whose only hash is that file's becomes a direct reference too, so no index page is
    read for it (rules_python 2.x fetches it by URL and sha256; a lock for several platforms keeps
    its index for such pins).
    """
    out = Path(out)
    if index_option not in INDEX_OPTIONS:
        raise UsageError(f"--index-option {index_option}: expected one of {', '.join(INDEX_OPTIONS)}")
    unserved = index.unserved_pages()
    if unserved:
        raise InvalidLockError(f"{unserved[0]}: does not list the files the lock would pin; index {index.directory} again")
    text = read_requirements(requirements)
    index_dir = index.directory.resolve()
    if index_option == "direct":
        new_text, changes = rewrite_lock(
            text,
            index.files,
            option_line=f"--index-url={upstream_index_url}" if upstream_index_url else None,
            direct_dir=index_dir,
            replaced={canonicalize_name(name): frozenset(d.lower() for d in digests) for name, digests in (replaced or {}).items()},
            references={canonicalize_name(name): reference for name, reference in (references or {}).items()},
        )
    else:
        location = index_dir / SIMPLE_DIR if index_option != "find-links" else index_dir
        option_line = f"--{index_option}={location.as_uri()}"
        new_text, changes = rewrite_lock(text, index.files, option_line=option_line)
    write_atomic(out, new_text.encode("utf-8"))
    return LockResult(out=out, changes=tuple(changes))


def rewrite_lock(
    requirements: RequirementsText,
    files: Sequence[IndexedFile],
    *,
    option_line: str | None,
    direct_dir: Path | None = None,
    replaced: Mapping[NormalizedName, frozenset[str]] | None = None,
    references: Mapping[NormalizedName, tuple[str, str]] | None = None,
) -> tuple[str, list[str]]:
    """The pure part of ``lock``: return the new lock text and a list of the changes made.

    With ``direct_dir`` patched pins become direct references to the files there, and
    ``option_line`` (if any) is added only when the lock names no index of its own.
    """
    lines, logical, pins, eol = requirements.lines, requirements.logical, requirements.pins, requirements.eol
    index = group_by_project(files)
    edits: dict[int, tuple[int, list[str]]] = {}  # first physical line -> (end, new lines)
    changes: list[str] = []
    parents: dict[NormalizedName, list[tuple[NormalizedName, PinLine]]] = {}
    for pin in pins:
        project = pin.project
        if pin.requirement.url:
            continue  # a direct reference names its own file: pip fetches that URL, not the index
        if project not in index:
            reference = (references or {}).get(project)
            if direct_dir is not None and reference and {h.lower() for h in pin.hashes} == {f"sha256:{reference[1]}"}:
                block = _pin_block(f"{pin.requirement.name} @ {reference[0]}", pin.marker, [f"sha256:{reference[1]}"], eol)
                edits[pin.line.start] = (pin.line.end, block)
            continue
        pinned = pin.pinned_version()
        target = _target_version(pin, pinned, index[project])
        target_files = [f for f in index[project] if f.version == target]
        _record_parents(parents, project, pin, target_files)
        if direct_dir is not None:
            if target == pinned:
                continue  # the index holds the original itself: the lock's own index serves it
            block = _direct_pin(pin, target_files, direct_dir, (replaced or {}).get(project), eol)
            edits[pin.line.start] = (pin.line.end, block)
            changes.append(f"{pin.requirement.name}=={pinned} -> {_strip_eol(block[0])}")
            continue
        new_hashes = sorted(f"sha256:{f.sha256}" for f in target_files)
        locked_hashes = {value.lower() for value in pin.hashes}
        refresh = bool(pin.hashes) and (target != pinned or not set(new_hashes) & locked_hashes)
        physical = list(lines[pin.line.start : pin.line.end])
        if target != pinned:
            physical = _replace_version(physical, pin, str(target))
            changes.append(f"{pin.requirement.name}=={pinned} -> {pin.requirement.name}=={target}")
        elif refresh:
            changes.append(f"{pin.requirement.name}=={pinned}: hashes replaced")
        if refresh:
            physical = _replace_hashes(physical, new_hashes)
        if target != pinned or refresh:
            edits[pin.line.start] = (pin.line.end, physical)

    if option_line is None or (direct_dir is not None and any(line.names_index for line in logical)):
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
    locked = {pin.project for pin in pins}
    uses_hashes = any(pin.hashes for pin in pins)
    for requirement, block in _added_pins(index, locked, parents, uses_hashes, eol, requirements.source, direct_dir):
        _end_input(output, eol)
        output.extend(block)
        changes.append(f"added {requirement}")
    return requirements.bom + "".join(output), changes


def _strip_eol(line: str) -> str:
    return EOL.sub("", line).rstrip(" \\")


def _direct_pin(
    pin: PinLine,
    files: Sequence[IndexedFile],
    directory: Path,
    replaced: frozenset[str] | None,
    eol: str,
) -> list[str]:
    """The lines that replace a patched pin in ``direct`` mode (module docstring).

    A direct reference names one file, so the patched version must have exactly one. If the pin
    keeps hashes of other wheels (a lock for several platforms), those stay on a second line whose
    marker excludes what the patched wheel's tags cover.
    """
    if len(files) != 1:
        names = ", ".join(sorted(f.filename for f in files))
        raise UsageError(
            f"{pin.line.where}: a direct reference names one file, but the index has "
            f"{names} for {pin.requirement.name}; use an index option instead"
        )
    (target,) = files
    reference = f"{pin.requirement.name} @ {_file_url(directory / target.filename)}"
    hashes = [f"sha256:{target.sha256}"]
    left = sorted(h for h in pin.hashes if replaced is not None and h.partition(":")[2].lower() not in replaced)
    if not left:
        # No other line serves other platforms, so no marker of the wheel's own: a marker makes some
        # rules_python releases evaluate markers with an interpreter, for nothing in a one-platform lock.
        return _pin_block(reference, pin.marker, hashes, eol)
    environments = WheelEnvironments.of(target.tags)
    if environments.marker() is None:
        raise InvalidLockError(
            f"{pin.line.where}: {target.filename} is for every platform, but the pin of "
            f"{pin.requirement.name} has {len(left)} more hashes; a pure wheel cannot leave other wheels in use"
        )
    return _pin_block(reference, _and(pin.marker, environments.marker()), hashes, eol) + _pin_block(
        f"{pin.requirement.name}{pin.requirement.specifier}", _and(pin.marker, environments.complement()), left, eol
    )


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
    raise InvalidLockError(f"platform tag {platform}: cannot tell its sys_platform and platform_machine")


def _end_input(output: list[str], eol: str) -> None:
    """Before lines are added after the input: end its last line if it lacked a newline, and
    its last logical line if that ended in a dangling continuation (pip would join them)."""
    if output and not EOL.search(output[-1]):
        output[-1] += eol
    if output and EOL.sub("", output[-1]).endswith("\\"):
        output.append(eol)


def _target_version(pin: PinLine, pinned: Version, files: Iterable[IndexedFile]) -> Version:
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
    raise InvalidLockError(
        f"{pin.line.where}: the index has {pin.requirement.name} "
        f"{', '.join(map(str, candidates))} for the pin =={pinned}; keep only one in the index"
    )


def _extends(version: Version, pinned: Version) -> bool:
    """``2.1.0+stripe.5`` extends ``2.1.0``; ``2.1.0+cu118.stripe.5`` extends ``2.1.0+cu118``."""
    if version.local is None or Version(version.public) != Version(pinned.public):
        return False
    return pinned.local is None or version.local.startswith(pinned.local + ".")


def _replace_version(physical: list[str], pin: PinLine, version: str) -> list[str]:
    """Replace the version text of the ``==`` pin where it is written, leaving the rest alone."""
    written = next(iter(pin.requirement.specifier)).version
    pattern = re.compile(r"(===?[ \t]*)" + re.escape(written) + r"(?![\w.!+*-])")
    for offset, line in enumerate(physical):
        new_line, count = pattern.subn(lambda m: m.group(1) + version, line, count=1)
        if count:
            return physical[:offset] + [new_line] + physical[offset + 1 :]
    raise InvalidLockError(f"{pin.line.where}: cannot find =={written} of {pin.requirement.name} on one line")


def _replace_hashes(physical: list[str], hashes: Sequence[str]) -> list[str]:
    """Swap the ``--hash`` options for ``hashes``, keeping the layout.

    pip-compile's layout - one ``--hash`` per continuation line - is kept line for line with
    the same indentation and continuation marks; hashes written inline are replaced inline.
    """
    tokens = [f"--hash={value}" for value in hashes]
    with_hash = [i for i, line in enumerate(physical) if HASH_OPTION.search(split_comment(line)[0])]
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
        code, comment = split_comment(line)
        return HASH_OPTION.sub(substitute, code) + comment

    return [replace_in_code(line) for line in physical]


def _record_parents(
    parents: dict[NormalizedName, list[tuple[NormalizedName, PinLine]]],
    project: NormalizedName,
    pin: PinLine,
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
    parents: Mapping[NormalizedName, list[tuple[NormalizedName, PinLine]]],
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
            raise InvalidLockError(
                f"{source}: the index has {project} {', '.join(map(str, versions))}, which the lock "
                "does not pin; keep only one in the index"
            )
        requirers = parents.get(project, [])
        markers = {pin.marker for _, pin in requirers}
        marker = markers.pop() if len(markers) == 1 and None not in markers else None
        if direct_dir is not None:
            if len(index[project]) != 1:
                raise UsageError(f"{source}: a direct reference names one file; the index has several of {project}")
            (single,) = index[project]
            requirement = f"{project} @ {_file_url(direct_dir / single.filename)}"
        else:
            requirement = f"{project}=={versions[0]}"
        hashes = sorted(f"sha256:{f.sha256}" for f in index[project]) if uses_hashes else []
        block = _pin_block(requirement, marker, hashes, eol)
        via = sorted({name for name, _ in requirers})
        if via:
            block.append(f"    # via {', '.join(via)}{eol}")
        added.append((_strip_eol(block[0]), block))
    return added


def _place_option(logical: Sequence[LogicalLine], option_line: str) -> tuple[int | None, dict[int, int]]:
    """Where to insert the index option line, and which option lines to drop (start -> end).

    The line goes before the first non-comment line (after pip-compile's header). An identical
    line already present is kept and nothing is added, so locking is idempotent. With
    ``--index-url`` the lock's other index options (``-i``, ``--extra-index-url``, ``-f``,
    ``--find-links``) are dropped: that mode promises pip looks at the local index only.
    """
    dropped: dict[int, int] = {}
    if option_line.split("=", 1)[0] == "--index-url":
        for line in logical:
            if line.content != option_line and line.names_index:
                dropped[line.start] = line.end
    if any(line.content == option_line for line in logical):
        return None, dropped
    if dropped:
        return min(dropped), dropped
    first = next((line.start for line in logical if line.content), None)
    return (first if first is not None else (logical[-1].end if logical else 0)), dropped
