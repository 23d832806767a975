"""Split shared libraries out of a wheel into a sibling wheel that the main one requires and preloads.

Package indexes cap file sizes (and some caches choke on 700 MB members); moving the
biggest libraries into ``NAME-VERSION-<same tags>.whl`` keeps each wheel small.  A
moved library ``<pkg>/lib/libx.so`` lands at ``<name>/lib/libx.so``: the same depth
under site-packages, so its ``$ORIGIN/../../nvidia/...`` entries still resolve in one
site-packages.  What it needs from its old directory is loaded first by the main
package's preload (imported first by ``<pkg>/__init__.py``): the moved libraries and
everything they need, in graph order -- the same plan and generated preloader as
``patch --preload-for`` (:func:`patched_wheels.loading.preload.plan_preload`), extended if the
wheel already has one.  Once a library is loaded, the loader satisfies every later
DT_NEEDED of its SONAME with it, whatever the search paths say; so the same preload
makes one directory per wheel work too.

So a moved library keeps its bytes and is copied raw (its compressed bytes, like every
unchanged member of a patch): a split costs about a copy of the wheel.  Only a library
without a SONAME is rewritten (one added, streamed into a temp file: :mod:`patched_wheels.elf.grow`), since the
loader matches what the preload loaded by SONAME.  A library that a moved one opens with
``dlopen`` by bare name from its old directory, outside its DT_NEEDED closure, is not
found through ``$ORIGIN`` any more: do not move such a library.

A split is part of :func:`patched_wheels.patch.surgery.patch_wheel` (``PatchOptions.split``), so a
wheel that is patched and split is read and written once: the split plans against
the patch's edits (a library deleted by ``delete`` or a patch does not move; one whose
RPATH an ``rpath_edits`` entry changed moves with that edit, and both wheels get the
patch's version) and hands back a :class:`PlannedSplit`, a plain value: the main wheel's edits (moved
members dropped, ``Requires-Dist: NAME==VERSION``, the patch's preload extended, as a value, which the patch
renders into the module and the ``__init__.py`` import) and the sibling's members; both wheels go through :func:`patched_wheels.patch.rewrite.write_wheel`
and are renamed into the destination only once both are complete.  Data flows one way: surgery
imports this module and calls it; this module never imports surgery (the ``split`` command's
:func:`patched_wheels.patch.surgery.split_wheel` lives there).

What moves is decided from which libraries the graph lists and the members' sizes, which a graph still
being read (:class:`patched_wheels.elf.graph.GraphReading`, the ``split`` command's and the hub's) knows at once;
what needs the libraries' dynamic sections (the preload's entries, whether a moved library has a SONAME) comes
:class:`~patched_wheels.patch.rewrite.Later`, asked for by the writers when they reach those members.  So the
members that stay compressed are copied while the libraries inflate, and the bytes written are the same as
from a graph read first (a lenient graph that lists a library it then cannot read raises
:class:`~patched_wheels.elf.graph.ListingChanged` there, and the patch plans again from the graph).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from patched_wheels.base.names import canonicalize_name, is_tagged_extension_module
from patched_wheels.elf.graph import GraphReading, LibraryGraph, read_graph
from patched_wheels.elf.read import DT_SONAME, ElfLibrary, read_dynamic
from patched_wheels.errors import UsageError
from patched_wheels.loading.packages import package_init_members
from patched_wheels.loading.preload import plan_preload
from patched_wheels.loading.preloadfiles import PackagePreload, read_installed_preload
from patched_wheels.loading.preloadmodule import PreloadList, render_preload_data, render_preload_module
from patched_wheels.patch.request import SplitRequest
from patched_wheels.patch.rewrite import (
    Content,
    Later,
    OutputMember,
    Overwritten,
    Scratch,
    Spilled,
    WheelEdits,
    member_chunks,
)
from patched_wheels.wheelfile.schemes import data_scheme, install_path
from patched_wheels.wheelfile.zipcontainer import MAX_ALIGNMENT_PADDING, kernel_copied

# Zip bookkeeping per member, beyond its name and data: local header (30) + central header (46).
_ZIP_OVERHEAD = 76
# Upper bound on what the main wheel gains: Requires-Dist, the __init__ import, RECORD rows, headers.
_GROWTH_SLACK = 4096


@dataclass(frozen=True)
class _Move:
    member: str
    """Archive path in the main wheel."""
    path: str
    """Its install path: the graph's library of the wheel there (the unedited wheel's) is the node the preload is
    planned on."""
    content: Content | None
    """What the patch's other edits made of it (an RPATH edit); None: the input member as is."""
    target: str
    """Archive (and install) path in the sibling wheel."""


@dataclass(frozen=True)
class PlannedSplit:
    """What a split adds to a patch: the main wheel's edits, and the sibling wheel written beside it.

    A value :func:`plan_split` returns and :func:`patched_wheels.patch.surgery.patch_wheel` applies; its late
    parts (:attr:`preload`, the moved members' :class:`~patched_wheels.patch.rewrite.Later` contents) wait for the
    graph being read and compute from it, never from the writer's state."""

    removed: tuple[str, ...]
    """Members (original names) the main wheel no longer holds."""
    preload_shape: PackagePreload
    """The main package's preload after the split, which the main wheel's ``__init__.py`` imports first, with no
    entries: which members it writes (known at once)."""
    preload: Callable[[], PackagePreload]
    """The same with its entries, known once the library graph is read (it waits for that)."""
    requirement: str
    """``NAME==VERSION`` of the sibling: the main wheel's new Requires-Dist, and the sibling's pin."""
    sibling_name: str
    sibling_dist_info: str
    sibling_members: tuple[OutputMember, ...]
    max_size: int | None
    max_size_option: str
    """How the user spelled the size limit (``--max-size``, ``split_max_size``), to name it in errors."""

    def check_size(self, wheel: str, main: Path) -> None:
        """The main wheel as written must fit ``max_size`` (the selection only estimated it)."""
        size = main.stat().st_size
        if self.max_size is not None and size > self.max_size:
            raise UsageError(
                f"{wheel}: the main wheel is {size} bytes after the split, over {self.max_size_option} {self.max_size}"
            )


def _sibling_top_level(into: str) -> str:
    """The sibling's top-level directory and distribution name in file names (``nvidia-libs`` -> ``nvidia_libs``)."""
    return canonicalize_name(into).replace("-", "_")


def sibling_wheel_name(into: str, main_name: str) -> str:
    """The file name of the sibling ``into`` split out of the wheel named ``main_name``: its version, build tag
    and tags."""
    return f"{_sibling_top_level(into)}-{main_name.split('-', 1)[1]}"


def plan_split(
    request: SplitRequest,
    edits: WheelEdits,
    *,
    version: str,
    main_name: str,
    graph: LibraryGraph | GraphReading | None,
    scratch: Scratch,
    preload: PackagePreload | None = None,
) -> PlannedSplit:
    """What ``request`` moves and what the main wheel becomes, given the patch's other ``edits``.

    ``version`` is the output version (both wheels carry it), ``main_name`` the main
    output's file name (the sibling's takes its version and tags), ``graph`` one that
    holds the wheel under its input file name, or is being read (None: read from the wheel alone),
    ``scratch`` where a library given a SONAME is written, ``preload`` the patch's (None: none): the split
    extends it where it is the main package's, else the preload the wheel already has.

    What moves is decided from the libraries the graph lists (their paths and the members' sizes): a graph
    being read (:func:`patched_wheels.elf.graph.start_graph`) lists them at once.  What needs their dynamic
    sections, the preload's entries and the SONAME a moved library may lack, comes :class:`Later`, when the
    writers reach those members: the members before them are copied while the libraries inflate.
    """
    reader = edits.reader
    wheel = reader.path.name
    if graph is None:
        graph = read_graph([reader.path])
    reading = graph if isinstance(graph, GraphReading) else GraphReading.of(graph)
    listed = set(reading.listed.get(wheel, ()))
    members = edits.existing()
    # Libraries outside site-packages (data scheme) stay: the preload finds libraries on sys.path only.
    libraries = {
        member: path for member in members if (path := install_path(member)) in listed and not data_scheme(path)
    }
    # An upper bound: all listed, all optional (in the graph's order, (path, wheel)).
    every_path = tuple(
        path for path, _ in sorted((path, name) for name, paths in reading.listed.items() for path in paths)
    )
    bound = PreloadList(every_path, frozenset(every_path))
    preload_estimate = len(render_preload_module("x", bound)) + len(render_preload_data("x", bound))
    selected = (
        _select_by_globs(request, edits, libraries)
        if request.move
        else _select_by_size(request, edits, members, libraries, preload_estimate)
    )
    chosen_by = (
        f"{request.names.move} {' '.join(request.move)}"
        if request.move
        else f"{request.names.max_size} {request.max_size}"
    )
    packages = sorted({libraries[name].split("/", 1)[0] for name in selected})
    if len(packages) > 1 or any("/" not in libraries[name] for name in selected):
        raise UsageError(
            f"{wheel}: the libraries {chosen_by} moves must all live inside one package directory, "
            f"not {', '.join(packages)}"
        )
    package = packages[0]
    init_member = next(iter(package_init_members(package, members)), None)
    if init_member is None:
        raise UsageError(
            f"{wheel}: {chosen_by} moves libraries of {package}/, which has no __init__.py to import the preload from"
        )
    sibling_top = _sibling_top_level(request.into)
    moves = tuple(
        _Move(name, libraries[name], edits.edited(name), f"{sibling_top}/{libraries[name].split('/', 1)[1]}")
        for name in selected
    )
    existing = _existing_preload(edits, init_member, preload)

    @functools.cache
    def after() -> PackagePreload:  # once, when the main wheel's writer reaches the preload module
        return PackagePreload(
            package, (init_member,), _preload_after_split(reading.result_as_listed(), package, wheel, moves, existing)
        )

    sibling_dist_info = f"{sibling_top}-{version}.dist-info"
    summary = f"Shared libraries split out of {reader.filename.name} {version} by patched-wheels"
    sibling_metadata = f"Metadata-Version: 2.1\nName: {request.into}\nVersion: {version}\nSummary: {summary}\n"
    moved = [_moved_member(edits, move, reading, scratch) for move in sorted(moves, key=lambda move: move.target)]
    return PlannedSplit(
        removed=tuple(move.member for move in moves),
        preload_shape=PackagePreload(package, (init_member,), PreloadList()),
        preload=after,
        requirement=f"{request.into}=={version}",
        sibling_name=sibling_wheel_name(request.into, main_name),
        sibling_dist_info=sibling_dist_info,
        sibling_members=(
            *moved,
            OutputMember(f"{sibling_dist_info}/METADATA", None, sibling_metadata.encode("utf-8")),
            OutputMember(f"{sibling_dist_info}/WHEEL", None, _sibling_wheel_file(edits)),
        ),
        max_size=request.max_size,
        max_size_option=request.names.max_size,
    )


def _select_by_globs(request: SplitRequest, edits: WheelEdits, libraries: Mapping[str, str]) -> list[str]:
    wheel = edits.reader.path.name
    option = request.names.move
    selected: list[str] = []
    for pattern in request.move:
        matched = edits.matching(pattern, option)
        if not matched:
            raise UsageError(f"{wheel}: {option} {pattern} matches no member")
        for name in matched:
            if name not in libraries:
                raise UsageError(
                    f"{wheel}: {name} (matched by {option} {pattern}) is not a shared library; "
                    "only libraries can move, since the main wheel preloads them"
                )
            if is_tagged_extension_module(name):
                raise UsageError(
                    f"{wheel}: {name} (matched by {option} {pattern}) is a Python extension module, which Python "
                    "imports from its place in its package: only the libraries it loads can move"
                )
            if name not in selected:
                selected.append(name)
    return selected


def _select_by_size(
    request: SplitRequest,
    edits: WheelEdits,
    members: Sequence[str],
    libraries: Mapping[str, str],
    preload_growth: int,
) -> list[str]:
    """Largest libraries first, until the main wheel's estimated size fits ``max_size``; Python extension modules
    stay where Python imports them."""
    wheel, option, max_size = edits.reader.path.name, request.names.max_size, request.max_size or 0
    sizes = _stored_sizes(edits, members)
    estimate = sum(sizes.values()) + preload_growth + _GROWTH_SLACK
    if estimate <= max_size:
        raise UsageError(f"{wheel}: already fits in {option} {max_size}; nothing to split")
    movable = [name for name in libraries if not is_tagged_extension_module(name)]
    selected: list[str] = []
    for name in sorted(movable, key=lambda name: (-sizes[name], name)):
        if estimate <= max_size:
            break
        selected.append(name)
        estimate -= sizes[name]
    if estimate > max_size:
        what = (
            f"after moving every shared library that can move ({len(selected)}; Python extension modules stay)"
            if selected
            else "and no shared library of it can move (Python extension modules stay)"
        )
        raise UsageError(f"{wheel}: still ~{estimate} bytes {what}; cannot fit {option} {max_size}")
    return selected


def _moved_member(edits: WheelEdits, move: _Move, reading: GraphReading, scratch: Scratch) -> OutputMember:
    """The sibling's copy of a moved library: its bytes as they are (copied raw when unedited), unless it has
    no SONAME, which the preload needs: other libraries' DT_NEEDED then match the one it loaded.  Whether it
    has one is known once the graph is read: the sibling's writer asks then (:class:`Later`)."""

    def content() -> Content | None:
        library = _library_at(reading.result_as_listed(), edits.reader.path.name, move.path)
        if library.soname:
            return move.content
        from patched_wheels.elf.grow import grow_dynamic  # imported here: only a library without a SONAME grows

        open_chunks = member_chunks(edits.reader, move.member, move.content)
        where = f"{edits.reader.path.name}: {move.member}"
        file = scratch.new_file()
        grow_dynamic(open_chunks, read_dynamic(open_chunks, where), {DT_SONAME: library.filename.encode()}, file, where)
        return Spilled(file)

    return OutputMember(move.target, move.member, Later(content))


def _library_at(graph: LibraryGraph, wheel: str, path: str) -> ElfLibrary:
    """The library of ``wheel`` at install ``path`` in ``graph`` (the last of two members installed there, as the
    split's selection saw them)."""
    return {library.path: library for library in graph.libraries if library.wheel == wheel}[path]


def _stored_sizes(edits: WheelEdits, members: Sequence[str]) -> dict[str, int]:
    """About what each of ``members`` takes in the main wheel: its compressed bytes (for an edited member,
    its size: deflate's bound) plus headers and the name twice (local and central), and for a large one
    copied raw the most its local header is padded by (at most 64 KiB, so its data keeps a cheap place
    for the kernel's copy)."""
    contents, reader = edits.contents, edits.reader
    sizes = {}
    for name in members:  # a loop, not a call per member: torch's wheel has 10,600
        content = contents.get(name)
        if content is None:  # unedited (members holds no deleted one)
            info = reader.info(name)
            data = (
                info.compress_size
                + len(info.extra)
                + (MAX_ALIGNMENT_PADDING if kernel_copied(info.compress_size) else 0)
            )
        elif isinstance(content, bytes):
            data = len(content)
        elif isinstance(content, Overwritten):
            data = reader.file_size(content.source)
        else:
            assert isinstance(content, Spilled)  # planned before any content comes Later
            data = content.path.stat().st_size
        sizes[name] = data + _ZIP_OVERHEAD + 2 * len(name.encode())
    return sizes


def _existing_preload(edits: WheelEdits, init_member: str, preload: PackagePreload | None) -> PreloadList:
    """What the main package preloads before the split: the patch's preload where it writes beside
    ``init_member``, else what the wheel (as edited) holds there, an earlier patch's or split's, read from its data."""
    if preload is not None and init_member in preload.init_members:
        return preload.entries
    return read_installed_preload(edits.current, init_member, edits.reader.path.name) or PreloadList()


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
    moved = [_library_at(graph, wheel, move.path) for move in moves]
    new_path = {library: move.target for library, move in zip(moved, moves)}
    by_path: dict[str, ElfLibrary] = {}
    for library in graph.libraries:
        by_path.setdefault(new_path.get(library, library.path), library)
    plan = plan_preload(graph, package, wheel, moved=moved)
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
