"""Turn an upstream wheel into a patched one: diffs, METADATA edits, RPATH edits, new local version, split.

All edits are computed in memory against the *original* member names first (they
touch a few small text files, and the libraries whose RPATH is edited), then the
output is streamed in one pass: edited members are deflated, every other member is
copied raw, ``.dist-info`` and ``.data`` are renamed for the new version, and RECORD
is regenerated.  This is the one rewrite of every wheel patched-wheels writes: a
split (:mod:`patched_wheels.split`) plans against the same edits and hands back the
main wheel's part (moved members dropped, ``Requires-Dist`` on the sibling, the
preload), so a patched and split wheel is written once.  Outputs are written into a
temp directory in the destination and renamed there only once all are complete, so
a failure leaves nothing behind.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from packaging.utils import canonicalize_name

from patched_wheels import metadata as metadata_edits
from patched_wheels.errors import PatchedWheelsError, PatchError, UsageError
from patched_wheels.fsutil import temp_directory
from patched_wheels.unidiff import apply_file_patch, read_patch
from patched_wheels.version import with_local_suffix
from patched_wheels.wheelfile import WheelReader, WheelWriter, generated_members, is_safe_member_path

if TYPE_CHECKING:
    from patched_wheels.elfgraph import LibraryGraph
    from patched_wheels.rpath import RpathEdit
    from patched_wheels.split import SplitRequest

__all__ = ["MemberEdit", "PatchResult", "WheelEdits", "find_patches", "patch_wheel"]

MemberEdit = Callable[[Optional[bytes]], bytes]
"""Maps a member's current content (None when absent) to its new content."""

PATCH_SUFFIXES = (".patch", ".diff")
_REQUIRED = ("METADATA", "WHEEL")


@dataclass(frozen=True)
class PatchResult:
    path: Path
    requirement: str  # pins exactly the patched wheel, e.g. "torch==2.1.0+stripe.5"
    sibling: Path | None = None
    """The wheel a split moved libraries into (None without a split)."""
    sibling_requirement: str | None = None
    """Pins the sibling, e.g. "torch-libs==2.1.0+stripe.5": the main wheel requires exactly it."""

    @property
    def requirements(self) -> tuple[str, ...]:
        """The pins of every wheel written, the main one first: what a lock must list."""
        return (self.requirement,) if self.sibling_requirement is None else (self.requirement, self.sibling_requirement)


def find_patches(patch_dir: Path) -> list[Path]:
    """The ``*.patch``/``*.diff`` files of ``patch_dir`` in name order (number them to order them)."""
    if not patch_dir.is_dir():
        raise UsageError(f"patch directory {patch_dir} does not exist")
    return sorted(path for path in patch_dir.iterdir() if path.suffix in PATCH_SUFFIXES and path.is_file())


def patch_wheel(
    wheel: Path | str,
    dest_dir: Path | str,
    *,
    suffix: str | None = None,
    patches: Sequence[Path] = (),
    strip: int = 1,
    remove_requires: Sequence[str] = (),
    add_requires: Sequence[str] = (),
    delete: Sequence[str] = (),
    verify: bool = False,
    member_edits: Mapping[str, MemberEdit] | None = None,
    rpath_edits: Sequence[RpathEdit] = (),
    split: SplitRequest | None = None,
    graph: LibraryGraph | None = None,
) -> PatchResult:
    """Write the patched copy of ``wheel`` (and, with ``split``, its sibling) into ``dest_dir``.

    Order of edits: ``patches`` (in the given order), ``delete`` globs, ``member_edits``
    (archive paths in the *original* naming, e.g. ``torch/__init__.py``), ``rpath_edits``
    (in the given order, globs over the same names), the ``split`` (planned on the result
    of those: a deleted library does not move, an RPATH-edited one is relocated from its
    edited search path), then the METADATA edits.  ``suffix`` appends a PEP 440 local
    label to the version of both wheels (an empty one is an error: the output would be
    named exactly like the upstream wheel).  ``graph`` is the library graph the split
    reads (a set holding ``wheel`` under its file name, so the preload also covers the
    other wheels); without it, the split reads ``wheel``'s alone.
    """
    wheel, dest_dir = Path(wheel), Path(dest_dir)
    with WheelReader(wheel, verify=verify) as reader:
        if split is not None:
            split.check(reader)  # before any edit: a wrong option should not wait for the patches
        edits = WheelEdits(reader)
        for patch in patches:
            for file_patch in read_patch(Path(patch), strip=strip):
                source = f"patch {file_patch.patch}"
                edits.check_editable(file_patch.path, source)
                patched = apply_file_patch(file_patch, edits.current(file_patch.path))
                if patched is None:
                    edits.check_deletable(file_patch.path, source, PatchError)
                edits.set(file_patch.path, patched)
        for pattern in delete:
            edits.delete_matching(pattern)
        edits.apply_member_edits(member_edits or {}, "member edit")
        if rpath_edits:
            edits.edit_search_paths(rpath_edits)
        version = edits.version(suffix)
        dest = dest_dir / (wheel.name if suffix is None else reader.filename.with_version(version))
        if dest.resolve() == wheel.resolve():
            raise UsageError(f"{wheel}: output would overwrite the input; choose another --dest-dir")
        plan = None
        if split is not None:
            plan = split.plan(edits, version=version, main_name=dest.name, graph=graph)
            for name in plan.moved_members:
                edits.set(name, None)
            edits.apply_member_edits(plan.member_edits, "split")
            add_requires = [*add_requires, plan.requirement]
        project = edits.edit_metadata(version, suffix, remove_requires, add_requires)

        renames: dict[str, str] = {}
        if suffix is not None:
            distribution = reader.dist_info[: -len(".dist-info")].rpartition("-")[0]
            new_prefix = f"{distribution}-{version}"
            renames = {reader.dist_info: f"{new_prefix}.dist-info", reader.data_dir: f"{new_prefix}.data"}

        dest_dir.mkdir(parents=True, exist_ok=True)
        with temp_directory(dest_dir, dest.name) as scratch:
            outputs = [dest.name]
            if plan is not None:
                plan.write_sibling(reader, scratch / plan.sibling_name)
                outputs.insert(0, plan.sibling_name)  # renamed first: the main wheel never appears without it
            with WheelWriter(scratch / dest.name, dist_info=renames.get(reader.dist_info, reader.dist_info)) as writer:
                for name in edits.output_order():
                    top, slash, rest = name.partition("/")
                    arcname = renames.get(top, top) + slash + rest
                    if name not in edits.contents:
                        writer.copy_raw(reader, name, arcname=arcname)
                        continue
                    content = edits.contents[name]
                    if content is not None:
                        mode = reader.mode(name) if name in reader else None
                        writer.write_bytes(arcname, content, mode=mode or 0o644)
            if plan is not None:
                plan.check_size(scratch / dest.name)
            for name in outputs:
                os.replace(scratch / name, dest_dir / name)
    if plan is None:
        return PatchResult(dest, f"{project}=={version}")
    return PatchResult(dest, f"{project}=={version}", dest_dir / plan.sibling_name, plan.requirement)


class WheelEdits:
    """New contents by original member name (None: deleted), over the reader's originals.

    Public because a split plans against it (:meth:`patched_wheels.split.SplitRequest.plan`):
    which members still exist and what they hold once the other edits are made.
    """

    def __init__(self, reader: WheelReader) -> None:
        self.reader = reader
        self.contents: dict[str, bytes | None] = {}
        self._generated = generated_members(reader.dist_info)  # rewritten or dropped, never edited
        self._protected = self._generated | {f"{reader.dist_info}/{name}" for name in _REQUIRED}

    def current(self, name: str) -> bytes | None:
        if name in self.contents:
            return self.contents[name]
        return self.reader.read(name) if name in self.reader else None

    def exists(self, name: str) -> bool:
        return self.contents[name] is not None if name in self.contents else name in self.reader

    def existing(self) -> list[str]:
        """Every member the output will hold (generated ones included), originals in input order, then new ones."""
        created = sorted(name for name in self.contents if name not in self.reader and self.exists(name))
        return [name for name in self.reader.members() if self.exists(name)] + created

    def set(self, name: str, content: bytes | None) -> None:
        self.contents[name] = content

    def check_editable(self, name: str, source: str) -> None:
        if not is_safe_member_path(name) or name.endswith("/"):
            raise PatchError(f"{source}: {name!r} is not a safe file path inside the wheel")
        if name in self._generated:
            raise PatchError(f"{source}: {name} is generated by patched-wheels and cannot be edited")
        top = name.split("/", 1)[0]
        if top.endswith(".dist-info") and top != self.reader.dist_info:
            raise PatchError(f"{source}: {name} would add a second .dist-info directory")

    def check_deletable(self, name: str, source: str, error: type[PatchedWheelsError]) -> None:
        """``error``: whose fault a refused deletion is (a patch's, or the ``--delete`` option's)."""
        if name in self._protected:
            raise error(f"{source}: would delete {name}, which a wheel needs")

    def matching(self, pattern: str) -> list[str]:
        """Existing members matching ``pattern`` (fnmatch: ``*`` also crosses ``/``), in name order."""
        candidates = {*self.reader.members(), *self.contents}
        return sorted(name for name in candidates if fnmatch.fnmatchcase(name, pattern) and self.exists(name))

    def delete_matching(self, pattern: str) -> None:
        """Delete members matching ``pattern``; matching nothing is an error."""
        matches = set(self.matching(pattern))
        if not matches:
            raise UsageError(f"--delete {pattern!r}: matches no member of {self.reader.path.name}")
        for name in sorted(matches):
            self.check_deletable(name, f"--delete {pattern!r}", UsageError)
        for name in matches:
            self.contents[name] = None

    def apply_member_edits(self, member_edits: Mapping[str, MemberEdit], source: str) -> None:
        """Replace each named member by what its edit makes of its current content."""
        for name, edit in member_edits.items():
            self.check_editable(name, source)
            self.set(name, edit(self.current(name)))

    def edit_search_paths(self, rpath_edits: Sequence[RpathEdit]) -> None:
        """Apply each RPATH edit to every member its glob matches; a glob matching nothing is an error."""
        from patched_wheels.patchelf import find_patchelf  # imported here: pyelftools only when RPATHs change
        from patched_wheels.rpath import edit_library

        patchelf = find_patchelf()
        wheel = self.reader.path.name
        for rpath_edit in rpath_edits:
            names = self.matching(rpath_edit.glob)
            if not names:
                raise UsageError(f"{rpath_edit.origin}: matches no member of {wheel}")
            for name in names:
                content = self.current(name)
                assert content is not None  # matching() returns existing members only
                self.set(name, edit_library(content, rpath_edit, patchelf=patchelf, wheel=wheel, member=name))

    def version(self, suffix: str | None) -> str:
        """The output's version: METADATA's (as patched), with ``suffix`` as its local label when given."""
        content = self._metadata()
        versions = metadata_edits.field_values(content, "Version")
        if len(versions) != 1:
            raise PatchError(f"{self._metadata_origin}: expected one Version header, found {len(versions)}")
        return with_local_suffix(versions[0], suffix) if suffix is not None else versions[0]

    def edit_metadata(
        self, version: str, suffix: str | None, remove_requires: Sequence[str], add_requires: Sequence[str]
    ) -> str:
        """Apply the METADATA edits (``version`` is set when a ``suffix`` changed it); return the project name to pin."""
        origin = self._metadata_origin
        content = self._metadata()
        edited = content
        if remove_requires:
            edited = metadata_edits.remove_requires(edited, remove_requires, origin=origin)
        if add_requires:
            edited = metadata_edits.add_requires(edited, add_requires, origin=origin)
        if suffix is not None:
            edited = metadata_edits.set_version(edited, version, origin=origin)
        if edited != content:
            self.contents[f"{self.reader.dist_info}/METADATA"] = edited
        names = metadata_edits.field_values(edited, "Name")
        project = names[0] if names else self.reader.filename.name
        if canonicalize_name(project) != self.reader.filename.name:
            raise PatchError(f"{origin}: Name {project!r} does not match the wheel filename")
        return project

    @property
    def _metadata_origin(self) -> str:
        return f"{self.reader.path.name}: {self.reader.dist_info}/METADATA"

    def _metadata(self) -> bytes:
        content = self.current(f"{self.reader.dist_info}/METADATA")
        if content is None:
            raise PatchError(f"{self._metadata_origin}: missing (deleted by a patch?)")
        return content

    def output_order(self) -> list[str]:
        """Input order, new files after the originals of their part, .dist-info last (as the spec recommends)."""
        dist_info = self.reader.dist_info + "/"
        kept = [name for name in self.reader.members() if name not in self._generated]
        created = sorted(name for name, content in self.contents.items() if content is not None and name not in self.reader)
        ordered = [name for name in kept if not name.startswith(dist_info)]
        ordered += [name for name in created if not name.startswith(dist_info)]
        ordered += [name for name in kept if name.startswith(dist_info)]
        ordered += [name for name in created if name.startswith(dist_info)]
        return ordered
