"""What a patch asks for, as values checked without the wheel: RPATH edits and the split request.

The hub's plan checks every ``patched_wheel`` with these before anything is downloaded
(:mod:`patched_wheels.hub.spec`), and the command line checks its flags with them before a wheel is
opened; the doing is elsewhere: :func:`patched_wheels.patch.rpath.apply_rpath_edits` edits the libraries,
:func:`patched_wheels.patch.split.plan_split` plans a split, :func:`patched_wheels.patch.surgery.patch_wheel`
(whose :class:`~patched_wheels.patch.surgery.PatchOptions` holds these values) writes the wheels.  So the
configuration's checks import nothing of the ELF editor, the library graph or the preload planner.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

from patched_wheels.base.names import canonicalize_name, character_problem, glob_problem, is_valid_project_name
from patched_wheels.errors import UsageError

__all__ = ["BAZEL_NAMES", "MODES", "RpathEdit", "SplitOptionNames", "SplitRequest", "parse_rpath_option", "rpath_edit"]

MODES = ("set", "prepend", "append")
"""``set`` replaces the search path; ``prepend``/``append`` add entries before/after the existing ones."""

# "$ORIGIN" or "${ORIGIN}", alone or followed by a path ("$ORIGINAL" is another token).
_ORIGIN_ENTRY = re.compile(r"\$(?:ORIGIN|\{ORIGIN\})(?:/|$)")
_MAX_ENTRIES = 4096


class RpathEdit(NamedTuple):
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
    if problem := glob_problem(glob):
        raise UsageError(f"{origin}: GLOB {glob!r}: {problem}")
    if not entries:
        raise UsageError(f"{origin}: no entries; expected GLOB=ENTRIES, e.g. 'pkg/*.so=$ORIGIN/../pkg.libs'")
    if len(entries) > _MAX_ENTRIES:
        raise UsageError(f"{origin}: entries longer than {_MAX_ENTRIES} characters")
    if problem := character_problem(entries):
        # Written as a C string into the library: a NUL would silently cut the search path there.
        raise UsageError(f"{origin}: entries {entries!r}: {problem}")
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


class SplitOptionNames(NamedTuple):
    """How the user spelled the split's options, so errors name them: flags on the command line, the
    ``patched_wheel`` attributes in Bazel (:data:`BAZEL_NAMES`)."""

    into: str = "--into"
    move: str = "--move"
    max_size: str = "--max-size"


BAZEL_NAMES = SplitOptionNames("split_into", "split_move", "split_max_size")


class SplitRequest(NamedTuple):
    """Which shared libraries to split into which sibling wheel (:func:`patched_wheels.patch.split.plan_split`).

    Exactly one of ``move`` (fnmatch globs over archive paths) and ``max_size`` (bytes
    the main wheel must fit in; the largest libraries move first) is given.
    """

    into: str
    """Project name of the sibling wheel."""
    move: Sequence[str] = ()
    max_size: int | None = None
    names: SplitOptionNames = SplitOptionNames()

    def check_options(self) -> None:
        """The checks that need no wheel: a hub runs them before it downloads anything."""
        names = self.names
        if bool(self.move) == (self.max_size is not None):
            raise UsageError(f"give either {names.move} or {names.max_size}, not both or neither")
        if not is_valid_project_name(self.into):
            raise UsageError(f"{names.into} {self.into!r} is not a valid project name")

    def check(self, wheel: str, project: str) -> None:
        """Refuse a request that no edit can make valid for the wheel file ``wheel`` of the (normalized)
        ``project``, before the patch does any work."""
        try:
            self.check_options()
        except UsageError as error:
            raise UsageError(f"{wheel}: {error}") from None
        if canonicalize_name(self.into) == project:
            raise UsageError(f"{wheel}: {self.names.into} {self.into} names the wheel being split")
