"""RPATH edits: set, prepend or append the search path (DT_RUNPATH/DT_RPATH) of chosen ELF members.

A library that cannot find a companion shipped in the same wheel (auditwheel moved it into
``<pkg>.libs/`` and left no path to it) is fixed by pointing its search path there.  Only
``$ORIGIN``-relative entries are accepted: the loader resolves an absolute entry on the machine
that installs the wheel, where it points outside the wheel, and a plain relative one against the
process's working directory.  The edited bytes go back through :mod:`patched_wheels.surgery`'s
member edits, so RECORD, renames and reproducibility are handled in one place.
"""

from __future__ import annotations

import posixpath
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from patched_wheels.elfread import parse_elf
from patched_wheels.errors import ElfError, UsageError
from patched_wheels.patchelf import run_patchelf, search_path_arguments

MODES = ("set", "prepend", "append")
"""``set`` replaces the search path; ``prepend``/``append`` add entries before/after the existing ones."""

# "$ORIGIN" or "${ORIGIN}", alone or followed by a path ("$ORIGINAL" is another token).
_ORIGIN_ENTRY = re.compile(r"\$(?:ORIGIN|\{ORIGIN\})(?:/|$)")
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class RpathEdit:
    """Search-path entries to give every ELF member matching ``glob`` (fnmatch on archive paths)."""

    glob: str
    entries: tuple[str, ...]
    mode: str
    origin: str
    """How the user asked for it (``--set-rpath 'pkg/*.so=...'``), to name it in errors."""


def rpath_edit(glob: str, entries: str, mode: str = "set", *, origin: str | None = None) -> RpathEdit:
    """A checked edit from a glob and a ``:``-separated entry list; ``origin`` names it in errors."""
    origin = origin or f"rpath {glob}={entries}"
    if mode not in MODES:
        raise UsageError(f"{origin}: rpath mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not glob:
        raise UsageError(f"{origin}: empty GLOB; expected GLOB=ENTRIES, e.g. 'pkg/*.so=$ORIGIN/../pkg.libs'")
    if not entries:
        raise UsageError(f"{origin}: no entries; expected GLOB=ENTRIES, e.g. 'pkg/*.so=$ORIGIN/../pkg.libs'")
    split = entries.split(":")
    for entry in split:
        if not entry:
            raise UsageError(f"{origin}: empty entry in {entries!r} (the loader may read it as the working directory)")
        if not _ORIGIN_ENTRY.match(entry):
            why = (
                "an absolute path points outside the wheel on the machine that installs it"
                if entry.startswith("/")
                else "a relative path is resolved against the process's working directory"
            )
            raise UsageError(f"{origin}: entry {entry!r} must start with $ORIGIN: {why}")
    return RpathEdit(glob, tuple(split), mode, origin)


def parse_rpath_option(option: str, mode: str, *, origin: str) -> RpathEdit:
    """An edit from the command line's ``GLOB=ENTRIES`` (split at the first ``=``)."""
    glob, equals, entries = option.partition("=")
    if not equals:
        raise UsageError(f"{origin}: expected GLOB=ENTRIES, e.g. 'pkg/*.so=$ORIGIN/../pkg.libs'")
    return rpath_edit(glob, entries, mode, origin=origin)


def edited_search_path(current: Sequence[str], edit: RpathEdit) -> list[str]:
    """The search path after ``edit``; an entry given twice is kept at its first place."""
    if edit.mode == "prepend":
        combined = [*edit.entries, *current]
    elif edit.mode == "append":
        combined = [*current, *edit.entries]
    else:
        combined = list(edit.entries)
    return list(dict.fromkeys(combined))


def edit_library(content: bytes, edit: RpathEdit, *, patchelf: str, wheel: str, member: str) -> bytes:
    """``content`` (one ELF member) with ``edit`` applied by patchelf, its RUNPATH/RPATH kind kept."""
    if not content.startswith(_ELF_MAGIC):
        raise ElfError(f"{edit.origin}: {wheel}: {member} is not an ELF file; only ELF members have an RPATH")
    library = parse_elf(content, wheel=wheel, path=member)
    arguments = search_path_arguments(library, edited_search_path(library.search_path, edit))
    with tempfile.TemporaryDirectory(prefix="patched-wheels-rpath-") as scratch:
        file = Path(scratch) / posixpath.basename(member)
        file.write_bytes(content)
        run_patchelf(patchelf, arguments, file, where=f"{wheel}: {member}")
        return file.read_bytes()
