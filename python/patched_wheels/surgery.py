"""Turn an upstream wheel into a patched one: diffs, METADATA edits, RPATH edits, new local version.

All edits are computed in memory against the *original* member names first (they
touch a few small text files, and the libraries whose RPATH is edited), then the
output is streamed in one pass: edited members are deflated, every other member is
copied raw, ``.dist-info`` and ``.data`` are renamed for the new version, and RECORD
is regenerated.  Nothing is written to the destination until every edit has
succeeded, and a failure while writing removes the partial file.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from packaging.utils import canonicalize_name

from patched_wheels import metadata as metadata_edits
from patched_wheels.errors import PatchedWheelsError, PatchError, UsageError
from patched_wheels.unidiff import apply_file_patch, read_patch
from patched_wheels.version import with_local_suffix
from patched_wheels.wheelfile import WheelReader, WheelWriter, generated_members, is_safe_member_path

if TYPE_CHECKING:
    from patched_wheels.rpath import RpathEdit

__all__ = ["MemberEdit", "PatchResult", "find_patches", "patch_wheel"]

MemberEdit = Callable[[Optional[bytes]], bytes]
"""Maps a member's current content (None when absent) to its new content."""

PATCH_SUFFIXES = (".patch", ".diff")
_REQUIRED = ("METADATA", "WHEEL")


@dataclass(frozen=True)
class PatchResult:
    path: Path
    requirement: str  # pins exactly the patched wheel, e.g. "torch==2.1.0+stripe.5"


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
) -> PatchResult:
    """Write the patched copy of ``wheel`` into ``dest_dir``.

    Order of edits: ``patches`` (in the given order), ``delete`` globs, ``member_edits``
    (archive paths in the *original* naming, e.g. ``torch/__init__.py``), ``rpath_edits``
    (in the given order, globs over the same names), then the METADATA edits.  ``suffix``
    appends a PEP 440 local label to the version (an empty one is an error: the output would be
    named exactly like the upstream wheel).
    """
    wheel, dest_dir = Path(wheel), Path(dest_dir)
    with WheelReader(wheel, verify=verify) as reader:
        edits = _Edits(reader)
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
        for name, edit in (member_edits or {}).items():
            edits.check_editable(name, "member edit")
            edits.set(name, edit(edits.current(name)))
        if rpath_edits:
            edits.edit_search_paths(rpath_edits)
        version, project = edits.edit_metadata(suffix, remove_requires, add_requires)

        renames: dict[str, str] = {}
        dest = dest_dir / wheel.name
        if suffix is not None:
            distribution = reader.dist_info[: -len(".dist-info")].rpartition("-")[0]
            new_prefix = f"{distribution}-{version}"
            renames = {reader.dist_info: f"{new_prefix}.dist-info", reader.data_dir: f"{new_prefix}.data"}
            dest = dest_dir / reader.filename.with_version(version)
        if dest.resolve() == wheel.resolve():
            raise UsageError(f"{wheel}: output would overwrite the input; choose another --dest-dir")

        dest_dir.mkdir(parents=True, exist_ok=True)
        with WheelWriter(dest, dist_info=renames.get(reader.dist_info, reader.dist_info)) as writer:
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
    return PatchResult(dest, f"{project}=={version}")


class _Edits:
    """New contents by original member name (None: deleted), over the reader's originals."""

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

    def edit_metadata(
        self, suffix: str | None, remove_requires: Sequence[str], add_requires: Sequence[str]
    ) -> tuple[str, str]:
        """Apply the METADATA edits; return the new version and the project name to pin."""
        name = f"{self.reader.dist_info}/METADATA"
        origin = f"{self.reader.path.name}: {name}"
        content = self.current(name)
        if content is None:
            raise PatchError(f"{origin}: missing (deleted by a patch?)")
        versions = metadata_edits.field_values(content, "Version")
        if len(versions) != 1:
            raise PatchError(f"{origin}: expected one Version header, found {len(versions)}")
        version = with_local_suffix(versions[0], suffix) if suffix is not None else versions[0]
        edited = content
        if remove_requires:
            edited = metadata_edits.remove_requires(edited, remove_requires, origin=origin)
        if add_requires:
            edited = metadata_edits.add_requires(edited, add_requires, origin=origin)
        if suffix is not None:
            edited = metadata_edits.set_version(edited, version, origin=origin)
        if edited != content:
            self.contents[name] = edited
        names = metadata_edits.field_values(edited, "Name")
        project = names[0] if names else self.reader.filename.name
        if canonicalize_name(project) != self.reader.filename.name:
            raise PatchError(f"{origin}: Name {project!r} does not match the wheel filename")
        return version, project

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
