"""RPATH edits: set, prepend or append the search path (DT_RUNPATH/DT_RPATH) of chosen ELF members.

A library that cannot find a companion shipped in the same wheel (auditwheel moved it into
``<pkg>.libs/`` and left no path to it) is fixed by pointing its search path there.  Only
``$ORIGIN``-relative entries are accepted: the loader resolves an absolute entry on the machine
that installs the wheel, where it points outside the wheel, and a plain relative one against the
process's working directory.  The edited members go back into the patch's
:class:`patched_wheels.patch.rewrite.WheelEdits`, so RECORD, renames and reproducibility are handled
in one place; a library is streamed, never held whole (see :mod:`patched_wheels.elf.edit`).
"""

from __future__ import annotations

from typing import Sequence

from patched_wheels.elf.edit import names_inside, overwrite_in_place
from patched_wheels.elf.grow import grow_dynamic
from patched_wheels.elf.read import ELF_MAGIC, read_dynamic
from patched_wheels.errors import ElfError, UsageError
from patched_wheels.patch.request import RpathEdit
from patched_wheels.patch.rewrite import Content, Overwritten, Scratch, Spilled, WheelEdits, member_chunks


def edited_search_path(current: Sequence[str], edit: RpathEdit) -> list[str]:
    """The search path after ``edit``; an entry given twice is kept at its first place."""
    if edit.mode == "prepend":
        combined = [*edit.entries, *current]
    elif edit.mode == "append":
        combined = [*current, *edit.entries]
    else:
        combined = list(edit.entries)
    return list(dict.fromkeys(combined))


def apply_rpath_edits(edits: WheelEdits, rpath_edits: Sequence[RpathEdit], scratch: Scratch) -> None:
    """Apply each RPATH edit to every member its glob matches, in order; a glob matching nothing is an error.

    A library several globs match is edited once, to the search path all of them make in turn.
    """
    wheel = edits.reader.path.name
    matched: dict[str, list[RpathEdit]] = {}
    for rpath_edit in rpath_edits:
        names = edits.matching(rpath_edit.glob, rpath_edit.origin)
        if not names:
            raise UsageError(f"{rpath_edit.origin}: matches no member of {wheel}")
        for name in names:
            matched.setdefault(name, []).append(rpath_edit)
    for name, applied in matched.items():
        content = edits.edited(name)  # None: the input member, unchanged so far
        edited = _edit_library(edits, name, content, applied, scratch)
        if edited is not None:
            edits.set(name, edited)


def _edit_library(
    edits: WheelEdits, name: str, content: Content | None, applied: Sequence[RpathEdit], scratch: Scratch
) -> Content | None:
    """``name`` with the search path ``applied`` make, its RUNPATH/RPATH kind kept: overwritten in place
    when it fits and no other name shares the old string, else with its string table grown into a temp
    file (both streamed); None when nothing changes (it stays as it is)."""
    reader, wheel = edits.reader, edits.reader.path.name
    open_chunks = member_chunks(reader, name, content)
    if not next(open_chunks(), b"").startswith(ELF_MAGIC):
        raise ElfError(f"{applied[0].origin}: {wheel}: {name} is not an ELF file; only ELF members have an RPATH")
    where = f"{wheel}: {name}"
    layout = read_dynamic(open_chunks, where)
    old = layout.search_path()
    search_path = ":".join(_after(applied, [entry for entry in old.split(":") if entry]))
    if search_path == old:
        return None
    tags = layout.search_path_tags()
    new = search_path.encode("utf-8", "surrogateescape")
    patch = overwrite_in_place(layout, tags, new)
    if patch is not None and names_inside(open_chunks, layout, tags, where):
        patch = None  # writing over the string would rename what shares it: the table grows instead
    if patch is not None and content is None:
        return Overwritten(name, (patch,))
    if patch is not None and isinstance(content, Overwritten):
        return Overwritten(content.source, (*content.patches, patch))
    if patch is not None and isinstance(content, bytes):
        offset, data = patch
        return content[:offset] + data + content[offset + len(data) :]
    file = scratch.new_file()
    grow_dynamic(open_chunks, layout, dict.fromkeys(tags, new), file, where)
    return Spilled(file)


def _after(applied: Sequence[RpathEdit], search_path: Sequence[str]) -> list[str]:
    current = list(search_path)
    for rpath_edit in applied:
        current = edited_search_path(current, rpath_edit)
    return current
