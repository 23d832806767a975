"""The names a wheel is made of: its file name, and the paths of its members.

Both are checked where they enter (a wheel opened, a member written), because pip and
installers refuse them only at install time, far from the cause.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple, Sequence

from packaging.version import InvalidVersion, Version

from patched_wheels.base.names import canonicalize_name, is_valid_project_name
from patched_wheels.errors import InvalidWheelError

if TYPE_CHECKING:
    from packaging.tags import Tag
    from packaging.utils import BuildTag, NormalizedName

__all__ = ["WheelFilename", "all_safe_member_paths", "is_safe_member_path"]

_BUILD_TAG = re.compile(r"(\d+)(.*)", re.ASCII)
"""A build tag: digits first (PEP 427); they and the rest are what it sorts by."""
_TAG = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*", re.ASCII)
"""One of the three tags (PEP 425: letters, digits and ``_``; a compressed set joins several with ``.``). What
``packaging`` does not check: a tag becomes a lock's marker and a URL, where a quote or a line break would be
text of the lock (``…x86_64"\nevil==1\n#.whl``)."""


class WheelFilename(NamedTuple):
    """A parsed wheel filename that remembers the original spelling of its parts.

    The name is normalised and the version parsed; the output wheel must keep the input's
    distribution spelling, build tag and platform tags, so ``stem`` is kept verbatim.

    Parsed here, not with ``packaging.utils.parse_wheel_filename``: every command opens a wheel, and
    that module's import of ``packaging.tags`` is a fifth of the helper's start-up (see
    :mod:`patched_wheels.base.names`).  It accepts what ``parse_wheel_filename`` accepts, with the same
    parts, but for names pip would refuse (:func:`is_valid_project_name`) and tags no tag is made of (PEP 425's
    letters, digits and ``_``); a test holds them equal.
    The platform tags are parsed with ``packaging.tags`` when first asked for (:attr:`tags`).  A named tuple, not a
    dataclass: importing ``dataclasses`` (10 ms) and each class it builds (about 1 ms) are start-up of every command.
    """

    name: NormalizedName
    version: Version
    build_tag: BuildTag
    stem: str

    @classmethod
    def parse(cls, filename: str) -> WheelFilename:
        """The parts of ``filename``; :class:`InvalidWheelError` naming it and the part at fault."""
        stem = filename[: -len(".whl")]
        parts = stem.split("-")
        if not filename.endswith(".whl"):
            problem = "its extension is not .whl"
        elif len(parts) not in (5, 6):
            problem = f"{len(parts)} parts separated by '-', not 5 or 6"
        elif "__" in parts[0] or not is_valid_project_name(parts[0]):
            problem = "invalid project name"
        elif (version := _version(parts[1])) is None:
            problem = f"invalid version {parts[1]!r}"
        elif (build_tag := _build_tag(parts[2:-3])) is None:
            problem = f"invalid build tag {parts[2]!r} (it starts with a digit)"
        elif bad := [tag for tag in parts[-3:] if not _TAG.fullmatch(tag)]:
            problem = f"invalid tag {bad[0]!r} (letters, digits, '_', and '.' between tags of a set)"
        else:
            return cls(canonicalize_name(parts[0]), version, build_tag, stem)
        raise InvalidWheelError(f"{filename}: not a valid wheel filename ({problem})")

    @property
    def tags(self) -> frozenset[Tag]:
        """The tags the file name's last three parts stand for (a compressed set, ``py2.py3``, stands for each)."""
        return _parsed_tags("-".join(self.stem.split("-")[-3:]))

    def with_version(self, version: str) -> str:
        """The same filename with only the version component replaced."""
        parts = self.stem.split("-")
        parts[1] = version
        return "-".join(parts) + ".whl"


@lru_cache(maxsize=1024)
def _parsed_tags(tags: str) -> frozenset[Tag]:
    """``packaging.tags.parse_tag``, once per spelling (a resolver asks for the tags of each file of a lock, and
    wheels share a few spellings)."""
    from packaging.tags import parse_tag  # imported here: only a resolver or an index matches tags

    return parse_tag(tags)


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _build_tag(parts: Sequence[str]) -> BuildTag | None:
    """The build tag the file name's optional third part (``parts``: it or nothing) stands for, or None when
    that part is no build tag."""
    if not parts:
        return ()
    match = _BUILD_TAG.fullmatch(parts[0])
    return None if match is None else (int(match[1]), match[2])


# Components that leave or blur the target: empty (a leading "/" makes the first one empty), ".", "..".
_UNSAFE_PARTS = frozenset(("", ".", ".."))


def all_safe_member_paths(names: Sequence[str]) -> bool:
    """Whether :func:`is_safe_member_path` accepts every one of ``names``: the same verdict from a few passes of C
    over all of them (a reader checks each of torch's 10,600 names on every open) instead of a call per name.
    Where it is False, a loop over the names finds the first refused, for the message."""
    joined = "\0".join([*names, ""])  # NUL ends each name: no safe name holds it
    if joined.count("\0") != len(names):
        return not names  # a NUL in a name; or no name at all
    if "\\" in joined or ":" in joined and any(":" in name.partition("/")[0] for name in names):
        return False
    # Each name's path (its final "/" dropped, as is_safe_member_path drops it) ends with a "/", so that each one
    # but the first follows one: an empty, "." or ".." component anywhere is then "//", "/./" or "/../" in them
    # all, or, in the first one's start, after the "/" put before it here.
    paths = joined.replace("/\0", "\0").replace("\0", "/")
    first = "/" + paths[:3]
    return not any(part in paths or part in first for part in ("//", "/./", "/../"))


def is_safe_member_path(name: str) -> bool:
    """Whether installing ``name`` stays inside the target: relative, POSIX, no ``..``/``.``/empty parts.

    Refused: absolute paths, a ``:`` in the first component ("C:" drives), backslashes, NUL, and
    empty/``.``/``..`` components (a final ``/`` marks a directory).  Called for every member of every
    wheel read and written (10,600 in torch's), so string methods, not a regular expression.
    """
    path = name[:-1] if name.endswith("/") else name
    parts = path.split("/")
    return (
        bool(name) and "\\" not in path and "\0" not in path and ":" not in parts[0] and _UNSAFE_PARTS.isdisjoint(parts)
    )
