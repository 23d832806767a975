"""Split shared libraries out of a wheel into a sibling wheel that the main one requires and preloads.

Package indexes cap file sizes (and some caches choke on 700 MB members); moving the
biggest libraries into ``NAME-VERSION-<same tags>.whl`` keeps each wheel small.  A
moved library ``<pkg>/lib/libx.so`` lands at ``<name>/lib/libx.so``.  Its RPATH is
rewritten with patchelf to ``$ORIGIN``, then its old entries re-based to the new
directory (so ``$ORIGIN`` itself becomes the way back, e.g. ``$ORIGIN/../../torch/lib``):
that keeps a single site-packages working.  For one directory per wheel, the main
wheel's package preloads the moved libraries, after everything they need, in graph
order -- the same plan and generated preloader as ``patch --preload-for``
(:func:`patched_wheels.preload.plan_preload`), extended if the wheel already has
one.

A split is part of :func:`patched_wheels.surgery.patch_wheel` (``split=``), so a
wheel that is patched and split is read and written once: the split plans against
the patch's edits (a library deleted by ``delete`` or a patch does not move; one whose
RPATH an ``rpath_edits`` entry changed is relocated from its edited search path, and
both wheels get the patch's version), writes the sibling itself, streaming each moved
library through a temp file for patchelf, and hands the main wheel's edits (moved
members dropped, ``Requires-Dist: NAME==VERSION``, the ``__init__.py`` import and the
preload module) to the patch's own rewrite.  Both wheels are renamed into the
destination only once both are complete.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from packaging.utils import canonicalize_name

from patched_wheels.elfgraph import (
    ORIGIN_TOKEN,
    ElfLibrary,
    LibraryGraph,
    data_scheme,
    expand_origin,
    install_path,
    parse_elf,
    read_graph,
)
from patched_wheels.errors import UsageError
from patched_wheels.fsutil import create_temp_file
from patched_wheels.names import is_valid_project_name
from patched_wheels.packages import package_init_members
from patched_wheels.patchelf import find_patchelf, run_patchelf, search_path_arguments
from patched_wheels.preload import (
    PreloadList,
    add_preload_import,
    plan_preload,
    preload_module_member,
    read_preload_module,
    render_preload_module,
)
from patched_wheels.surgery import PatchResult, patch_wheel
from patched_wheels.wheelfile import CHUNK_SIZE, WheelReader, WheelWriter

if TYPE_CHECKING:
    from patched_wheels.surgery import MemberEdit, WheelEdits

# Zip bookkeeping per member, beyond its name and data: local header (30) + central header (46).
_ZIP_OVERHEAD = 76
# Upper bound on what the main wheel gains: Requires-Dist, the __init__ import, RECORD rows, headers.
_GROWTH_SLACK = 4096


@dataclass(frozen=True)
class _Move:
    member: str
    """Archive path in the main wheel."""
    library: ElfLibrary
    """The library as the graph knows it (the unedited wheel's): the node the preload is planned on."""
    current: ElfLibrary
    """The library as it will be relocated: after the RPATH edits of the same patch."""
    content: bytes | None
    """Its edited bytes, already in memory (an RPATH edit); None: streamed from the wheel."""
    target: str
    """Archive (and install) path in the sibling wheel."""


@dataclass(frozen=True)
class SplitRequest:
    """Which shared libraries to split into which sibling wheel, for :func:`patched_wheels.surgery.patch_wheel`.

    Exactly one of ``move`` (fnmatch globs over archive paths) and ``max_size`` (bytes
    the main wheel must fit in; the largest libraries move first) is given.
    """

    into: str
    """Project name of the sibling wheel."""
    move: Sequence[str] = ()
    max_size: int | None = None

    def check(self, reader: WheelReader) -> None:
        """Refuse a request that no edit can make valid, before the patch does any work."""
        wheel = reader.path.name
        if bool(self.move) == (self.max_size is not None):
            raise UsageError(f"{wheel}: give either --move globs or --max-size, not both or neither")
        if not is_valid_project_name(self.into):
            raise UsageError(f"{wheel}: --into {self.into!r} is not a valid project name")
        if canonicalize_name(self.into) == reader.filename.name:
            raise UsageError(f"{wheel}: --into {self.into} names the wheel being split")

    def plan(self, edits: WheelEdits, *, version: str, main_name: str, graph: LibraryGraph | None) -> SplitPlan:
        """What moves and what the main wheel becomes, given the patch's other ``edits``.

        ``version`` is the output version (both wheels carry it), ``main_name`` the main
        output's file name (the sibling's takes its version and tags), ``graph`` one that
        holds the wheel under its input file name (None: read from the wheel alone).
        """
        reader = edits.reader
        wheel = reader.path.name
        if graph is None:
            graph = read_graph([reader.path])
        by_path = {library.path: library for library in graph.libraries if library.wheel == wheel}
        members = edits.existing()
        # Libraries outside site-packages (data scheme) stay: the preload finds libraries on sys.path only.
        libraries = {
            member: by_path[path]
            for member in members
            if (path := install_path(member)) in by_path and not data_scheme(path)
        }
        every_path = tuple(library.path for library in graph.libraries)  # an upper bound: all listed, all optional
        preload_estimate = len(render_preload_module("x", PreloadList(every_path, frozenset(every_path))))
        selected = (
            _select_by_globs(edits, libraries, self.move)
            if self.move
            else _select_by_size(edits, members, libraries, self.max_size or 0, preload_estimate)
        )
        packages = sorted({libraries[name].path.split("/", 1)[0] for name in selected})
        if len(packages) > 1 or any("/" not in libraries[name].path for name in selected):
            raise UsageError(
                f"{wheel}: the moved libraries must all live inside one package directory, not {', '.join(packages)}"
            )
        package = packages[0]
        init_member = next(iter(package_init_members(package, members)), None)
        if init_member is None:
            raise UsageError(f"{wheel}: no {package}/__init__.py to import the preload from")
        sibling_top = canonicalize_name(self.into).replace("-", "_")
        moves = tuple(_move(edits, name, libraries[name], sibling_top) for name in selected)
        module_member = preload_module_member(init_member)
        module = edits.current(module_member)
        existing = PreloadList() if module is None else read_preload_module(module, where=f"{wheel}: {module_member}")
        preload = render_preload_module(package, _preload_after_split(graph, package, wheel, moves, existing))
        init_where = f"{wheel}: {init_member}"
        sibling_dist_info = f"{sibling_top}-{version}.dist-info"
        summary = f"Shared libraries split out of {reader.filename.name} {version} by patched-wheels"
        sibling_metadata = f"Metadata-Version: 2.1\nName: {self.into}\nVersion: {version}\nSummary: {summary}\n"
        return SplitPlan(
            wheel=wheel,
            moves=moves,
            member_edits={
                init_member: lambda current: add_preload_import(current, where=init_where),
                module_member: lambda _current: preload,
            },
            requirement=f"{self.into}=={version}",
            sibling_name=f"{sibling_top}-{main_name.split('-', 1)[1]}",  # same version, build and tags
            sibling_dist_info=sibling_dist_info,
            sibling_files={
                f"{sibling_dist_info}/METADATA": sibling_metadata.encode("utf-8"),
                f"{sibling_dist_info}/WHEEL": _sibling_wheel_file(edits),
            },
            max_size=self.max_size,
        )


@dataclass(frozen=True)
class SplitPlan:
    """A planned split: the sibling wheel it writes, and the main wheel's edits, which the patch applies."""

    wheel: str
    """The input's file name, to name it in errors."""
    moves: tuple[_Move, ...]
    member_edits: Mapping[str, MemberEdit]
    """For the main wheel: the ``__init__.py`` import and the preload module."""
    requirement: str
    """``NAME==VERSION`` of the sibling: the main wheel's new Requires-Dist, and the sibling's pin."""
    sibling_name: str
    sibling_dist_info: str
    sibling_files: Mapping[str, bytes]
    """The sibling's METADATA and WHEEL."""
    max_size: int | None

    @property
    def moved_members(self) -> tuple[str, ...]:
        """What the main wheel drops."""
        return tuple(move.member for move in self.moves)

    def write_sibling(self, reader: WheelReader, path: Path) -> None:
        """Write the sibling wheel to ``path``.

        Each moved library goes through a temp file next to ``path`` (patchelf edits
        files in place, and a 1 GB library must not sit in memory) and is deflated from
        there in chunks.
        """
        patchelf = find_patchelf()
        with WheelWriter(path, dist_info=self.sibling_dist_info) as writer:
            for move in sorted(self.moves, key=lambda move: move.target):
                handle, file = create_temp_file(path.parent, posixpath.basename(move.target))
                try:
                    with os.fdopen(handle, "wb") as target:
                        if move.content is None:
                            with reader.open(move.member) as source:
                                shutil.copyfileobj(source, target, CHUNK_SIZE)
                        else:
                            target.write(move.content)
                    search_path = relocated_search_path(move.current, move.target)
                    _patch_library(patchelf, file, move.current, search_path, f"{self.wheel}: {move.member}")
                    writer.write_file(move.target, file, mode=reader.mode(move.member) or 0o755)
                finally:
                    file.unlink(missing_ok=True)
            for name, content in self.sibling_files.items():
                writer.write_bytes(name, content)

    def check_size(self, main: Path) -> None:
        """The main wheel as written must fit ``max_size`` (the selection only estimated it)."""
        size = main.stat().st_size
        if self.max_size is not None and size > self.max_size:
            raise UsageError(f"{self.wheel}: the main wheel is {size} bytes after the split, over --max-size {self.max_size}")


def split_wheel(
    wheel: Path | str,
    dest_dir: Path | str,
    *,
    into: str,
    move: Sequence[str] = (),
    max_size: int | None = None,
    graph_wheels: Sequence[Path] = (),
    cache_dir: Path | None = None,
) -> PatchResult:
    """Move shared libraries of ``wheel`` into the sibling wheel ``into``, with no other edit (the ``split`` command).

    ``graph_wheels`` are the other wheels of the environment (e.g. the nvidia ones):
    with them, the preload also loads what the moved libraries need from those wheels,
    so the pair works with one directory per wheel on its own.
    """
    graph = read_graph([Path(wheel), *graph_wheels], cache_dir=cache_dir)
    return patch_wheel(wheel, dest_dir, split=SplitRequest(into, move, max_size), graph=graph)


def relocated_search_path(library: ElfLibrary, target: str) -> list[str]:
    """``$ORIGIN`` first, then each old entry re-based from the library's old directory to ``target``'s."""
    old_directory = posixpath.dirname(library.path)
    new_directory = posixpath.dirname(target)

    def rebase(directory: str) -> str:
        relative = posixpath.relpath(directory, new_directory)
        return "$ORIGIN" if relative == "." else f"$ORIGIN/{relative}"

    entries = ["$ORIGIN"]
    for entry in [*library.search_path, "$ORIGIN"]:
        if ORIGIN_TOKEN.match(entry):
            entry = rebase(expand_origin(entry, old_directory))
        if entry not in entries:
            entries.append(entry)
    return entries


def _move(edits: WheelEdits, member: str, library: ElfLibrary, sibling_top: str) -> _Move:
    """How ``member`` moves: an edited library is relocated from what the edit made of it, not from the graph's."""
    content = edits.contents.get(member)
    current = library if content is None else parse_elf(content, wheel=library.wheel, path=library.path)
    return _Move(member, library, current, content, f"{sibling_top}/{library.path.split('/', 1)[1]}")


def _patch_library(patchelf: str, file: Path, library: ElfLibrary, search_path: Sequence[str], where: str) -> None:
    arguments = search_path_arguments(library, search_path)
    if not library.soname:
        # The preload satisfies other libraries' DT_NEEDED by SONAME; without one, only the file path would match.
        arguments += ["--set-soname", library.filename]
    run_patchelf(patchelf, arguments, file, where=where)


def _select_by_globs(edits: WheelEdits, libraries: Mapping[str, ElfLibrary], patterns: Sequence[str]) -> list[str]:
    wheel = edits.reader.path.name
    selected: list[str] = []
    for pattern in patterns:
        matched = edits.matching(pattern)
        if not matched:
            raise UsageError(f"{wheel}: --move {pattern} matches no member")
        for name in matched:
            if name not in libraries:
                raise UsageError(
                    f"{wheel}: {name} (matched by --move {pattern}) is not a shared library; "
                    "only libraries can move, since the main wheel preloads them"
                )
            if name not in selected:
                selected.append(name)
    return selected


def _select_by_size(
    edits: WheelEdits, members: Sequence[str], libraries: Mapping[str, ElfLibrary], max_size: int, preload_growth: int
) -> list[str]:
    """Largest libraries first, until the main wheel's estimated size fits ``max_size``."""
    wheel = edits.reader.path.name
    sizes = {name: _stored_size(edits, name) for name in members}
    estimate = sum(sizes.values()) + preload_growth + _GROWTH_SLACK
    if estimate <= max_size:
        raise UsageError(f"{wheel}: already fits in --max-size {max_size}; nothing to split")
    selected: list[str] = []
    for name in sorted(libraries, key=lambda name: (-sizes[name], name)):
        if estimate <= max_size:
            break
        selected.append(name)
        estimate -= sizes[name]
    if estimate > max_size:
        raise UsageError(
            f"{wheel}: still ~{estimate} bytes after moving all {len(selected)} shared libraries; "
            f"cannot fit --max-size {max_size}"
        )
    return selected


def _stored_size(edits: WheelEdits, name: str) -> int:
    """About what ``name`` takes in the main wheel: its compressed bytes (for an edited member, its
    size: deflate's bound) plus headers and the name twice (local and central)."""
    content = edits.contents.get(name)
    if content is not None:
        data = len(content)
    else:
        info = edits.reader.info(name)
        data = info.compress_size + len(info.extra)
    return data + _ZIP_OVERHEAD + 2 * len(name.encode())


def _preload_after_split(
    graph: LibraryGraph, package: str, wheel: str, moves: Sequence[_Move], existing: PreloadList
) -> PreloadList:
    """The main package's preload after the split: :func:`plan_preload` with the moved libraries.

    Moved libraries come after everything they need (the main wheel's own
    libraries included: under one directory per wheel, the moved library's way
    back to them does not exist).  Entries of an existing preload stay: those
    this graph does not know (libraries of wheels not given) at the front, the
    others in graph order, optional ones still optional unless now required.
    """
    new_path = {move.library: move.target for move in moves}
    by_path: dict[str, ElfLibrary] = {}
    for library in graph.libraries:
        by_path.setdefault(new_path.get(library, library.path), library)
    plan = plan_preload(graph, package, wheel, moved=[move.library for move in moves])
    unknown = [path for path in existing.libraries if path not in by_path]
    kept = {by_path[path] for path in existing.libraries if path in by_path}
    libraries = unknown + [new_path.get(library, library.path) for library in graph.ordered(set(plan.libraries) | kept)]
    required = {new_path.get(library, library.path) for library in plan.required}
    return PreloadList(tuple(libraries), frozenset(existing.optional - required))


def _sibling_wheel_file(edits: WheelEdits) -> bytes:
    """WHEEL for the sibling: same Build and Tag lines as the main wheel."""
    lines = ["Wheel-Version: 1.0", "Generator: patched-wheels split", "Root-Is-Purelib: false"]
    current = edits.current(f"{edits.reader.dist_info}/WHEEL")
    assert current is not None  # a wheel needs it: no edit may delete it
    # A patch may have broken its UTF-8: then the main wheel's own check fails it, with the one-line error.
    for line in current.decode("utf-8", errors="replace").splitlines():
        if line.startswith(("Tag:", "Build:")):
            lines.append(line.strip())
    return ("\n".join(lines) + "\n").encode("utf-8")
