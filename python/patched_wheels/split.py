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
one.  Both wheels are written through the raw-copy engine and renamed into
``dest_dir`` only once both are complete.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.utils import canonicalize_name

from patched_wheels import metadata as metadata_edits
from patched_wheels.elfgraph import ORIGIN_TOKEN, ElfLibrary, LibraryGraph, expand_origin, install_path, read_graph
from patched_wheels.errors import UsageError
from patched_wheels.fsutil import temp_directory
from patched_wheels.names import is_valid_project_name
from patched_wheels.patchelf import find_patchelf, run_patchelf, search_path_arguments
from patched_wheels.preload import (
    PreloadList,
    add_preload_import,
    package_init_members,
    plan_preload,
    preload_module_member,
    read_preload_module,
    render_preload_module,
)
from patched_wheels.wheelfile import CHUNK_SIZE, WheelReader, WheelWriter, generated_members

# Zip bookkeeping per member, beyond its name and data: local header (30) + central header (46).
_ZIP_OVERHEAD = 76
# Upper bound on what the main wheel gains: Requires-Dist, the __init__ import, RECORD rows, headers.
_GROWTH_SLACK = 4096


@dataclass(frozen=True)
class SplitResult:
    main: Path
    sibling: Path
    main_requirement: str
    sibling_requirement: str


@dataclass(frozen=True)
class _Move:
    member: str
    """Archive path in the main wheel."""
    library: ElfLibrary
    target: str
    """Archive (and install) path in the sibling wheel."""


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


def _patch_library(patchelf: str, file: Path, library: ElfLibrary, search_path: Sequence[str], where: str) -> None:
    arguments = search_path_arguments(library, search_path)
    if not library.soname:
        # The preload satisfies other libraries' DT_NEEDED by SONAME; without one, only the file path would match.
        arguments += ["--set-soname", library.filename]
    run_patchelf(patchelf, arguments, file, where=where)


def _select_by_globs(
    reader: WheelReader, libraries: dict[str, ElfLibrary], patterns: Sequence[str]
) -> list[str]:
    selected: list[str] = []
    for pattern in patterns:
        matched = [name for name in reader.members() if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise UsageError(f"{reader.path.name}: --move {pattern} matches no member")
        for name in matched:
            if name not in libraries:
                raise UsageError(
                    f"{reader.path.name}: {name} (matched by --move {pattern}) is not a shared library; "
                    "only libraries can move, since the main wheel preloads them"
                )
            if name not in selected:
                selected.append(name)
    return selected


def _select_by_size(
    reader: WheelReader, libraries: dict[str, ElfLibrary], max_size: int, preload_growth: int
) -> list[str]:
    """Largest libraries (by compressed size) first, until the main wheel's estimated size fits ``max_size``."""
    infos = {name: reader.info(name) for name in libraries}
    estimate = reader.path.stat().st_size + preload_growth + _GROWTH_SLACK
    if estimate <= max_size:
        raise UsageError(f"{reader.path.name}: already fits in --max-size {max_size}; nothing to split")
    selected: list[str] = []
    for name in sorted(libraries, key=lambda name: (-infos[name].compress_size, name)):
        if estimate <= max_size:
            break
        selected.append(name)
        info = infos[name]
        estimate -= info.compress_size + _ZIP_OVERHEAD + 2 * len(name.encode()) + len(info.extra)
    if estimate > max_size:
        raise UsageError(
            f"{reader.path.name}: still ~{estimate} bytes after moving all {len(selected)} shared libraries; "
            f"cannot fit --max-size {max_size}"
        )
    return selected


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


def _sibling_wheel_file(reader: WheelReader) -> bytes:
    """WHEEL for the sibling: same Build and Tag lines as the main wheel."""
    lines = ["Wheel-Version: 1.0", "Generator: patched-wheels split", "Root-Is-Purelib: false"]
    for line in reader.read(f"{reader.dist_info}/WHEEL").decode("utf-8").splitlines():
        if line.startswith(("Tag:", "Build:")):
            lines.append(line.strip())
    return ("\n".join(lines) + "\n").encode("utf-8")


def split_wheel(
    wheel: Path | str,
    dest_dir: Path | str,
    *,
    into: str,
    move: Sequence[str] = (),
    max_size: int | None = None,
    graph_wheels: Sequence[Path] = (),
    cache_dir: Path | None = None,
) -> SplitResult:
    """Move shared libraries of ``wheel`` into the sibling wheel ``into``; write both into ``dest_dir``.

    Exactly one of ``move`` (fnmatch globs over archive paths) and ``max_size``
    (bytes the main wheel must fit in; largest libraries move first) is given.
    ``graph_wheels`` are the other wheels of the environment (e.g. the nvidia
    ones): with them, the preload also loads what the moved libraries need from
    those wheels, so the pair works with one directory per wheel on its own.
    """
    wheel, dest_dir = Path(wheel), Path(dest_dir)
    if bool(move) == (max_size is not None):
        raise UsageError(f"{wheel.name}: give either --move globs or --max-size, not both or neither")
    if not is_valid_project_name(into):
        raise UsageError(f"{wheel.name}: --into {into!r} is not a valid project name")
    with WheelReader(wheel) as reader:
        version = str(reader.filename.version)
        if canonicalize_name(into) == reader.filename.name:
            raise UsageError(f"{wheel.name}: --into {into} names the wheel being split")
        graph = read_graph([wheel, *graph_wheels], cache_dir=cache_dir)
        by_path = {library.path: library for library in graph.libraries if library.wheel == wheel.name}
        libraries = {
            member: by_path[path] for member in reader.members() if (path := install_path(member)) in by_path
        }
        every_path = tuple(library.path for library in graph.libraries)  # an upper bound: all listed, all optional
        preload_estimate = len(render_preload_module("x", PreloadList(every_path, frozenset(every_path))))
        selected = (
            _select_by_globs(reader, libraries, move)
            if move
            else _select_by_size(reader, libraries, max_size or 0, preload_estimate)
        )
        packages = sorted({libraries[name].path.split("/", 1)[0] for name in selected})
        if len(packages) > 1 or any("/" not in libraries[name].path for name in selected):
            raise UsageError(
                f"{wheel.name}: the moved libraries must all live inside one package directory, not {', '.join(packages)}"
            )
        package = packages[0]
        init_member = next(iter(package_init_members(package, reader.members())), None)
        if init_member is None:
            raise UsageError(f"{wheel.name}: no {package}/__init__.py to import the preload from")
        sibling_top = canonicalize_name(into).replace("-", "_")
        moves = [
            _Move(name, libraries[name], f"{sibling_top}/{libraries[name].path.split('/', 1)[1]}") for name in selected
        ]
        module_member = preload_module_member(init_member)
        existing = (
            read_preload_module(reader.read(module_member), where=f"{wheel.name}: {module_member}")
            if module_member in reader
            else PreloadList()
        )
        preload = _preload_after_split(graph, package, wheel.name, moves, existing)

        main_dest = dest_dir / wheel.name
        sibling_dest = dest_dir / f"{sibling_top}-{reader.filename.stem.split('-', 1)[1]}.whl"  # same version, tags
        if main_dest.resolve() == wheel.resolve():
            raise UsageError(f"{wheel}: output would overwrite the input; choose another --dest-dir")
        dest_dir.mkdir(parents=True, exist_ok=True)
        with temp_directory(dest_dir, "split") as scratch_dir:
            sibling_dist_info = f"{sibling_top}-{version}.dist-info"
            patchelf = find_patchelf()
            with WheelWriter(scratch_dir / sibling_dest.name, dist_info=sibling_dist_info) as writer:
                for moved in sorted(moves, key=lambda moved: moved.target):
                    file = scratch_dir / "library"
                    with reader.open(moved.member) as source, open(file, "wb") as target:
                        shutil.copyfileobj(source, target, CHUNK_SIZE)
                    search_path = relocated_search_path(moved.library, moved.target)
                    _patch_library(patchelf, file, moved.library, search_path, f"{wheel.name}: {moved.member}")
                    writer.write_file(moved.target, file, mode=reader.mode(moved.member) or 0o755)
                    file.unlink()
                summary = f"Shared libraries split out of {reader.filename.name} {version} by patched-wheels"
                sibling_metadata = f"Metadata-Version: 2.1\nName: {into}\nVersion: {version}\nSummary: {summary}\n"
                writer.write_bytes(f"{sibling_dist_info}/METADATA", sibling_metadata.encode("utf-8"))
                writer.write_bytes(f"{sibling_dist_info}/WHEEL", _sibling_wheel_file(reader))

            metadata_member = f"{reader.dist_info}/METADATA"
            moved_members = {moved.member for moved in moves}
            generated = generated_members(reader.dist_info)  # RECORD is regenerated, its signatures dropped
            replaced = {
                metadata_member: metadata_edits.add_requires(
                    reader.metadata(), [f"{into}=={version}"], origin=f"{wheel.name}: METADATA"
                ),
                init_member: add_preload_import(reader.read(init_member), where=f"{wheel.name}: {init_member}"),
                module_member: render_preload_module(package, preload),
            }
            with WheelWriter(scratch_dir / main_dest.name, dist_info=reader.dist_info) as writer:
                for name in reader.members():
                    if name in moved_members or name in generated:
                        continue
                    if name not in replaced:
                        writer.copy_raw(reader, name)
                        continue
                    writer.write_bytes(name, replaced[name], mode=reader.mode(name) or 0o644)
                    if name == init_member and module_member not in reader:
                        writer.write_bytes(module_member, replaced[module_member])
            if max_size is not None and (scratch_dir / main_dest.name).stat().st_size > max_size:
                raise UsageError(
                    f"{wheel.name}: the main wheel is {(scratch_dir / main_dest.name).stat().st_size} bytes "
                    f"after the split, over --max-size {max_size}"
                )
            os.replace(scratch_dir / sibling_dest.name, sibling_dest)
            os.replace(scratch_dir / main_dest.name, main_dest)
    return SplitResult(main_dest, sibling_dest, f"{reader.filename.name}=={version}", f"{into}=={version}")
