"""The names a wheel is made of: its file name, and the paths of its members.

Both are checked where they enter (a wheel opened, a member written), because pip and
installers refuse them only at install time, far from the cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from packaging.tags import Tag
from packaging.utils import BuildTag, InvalidWheelFilename, NormalizedName, parse_wheel_filename
from packaging.version import Version

from patched_wheels.base.names import is_valid_project_name
from patched_wheels.errors import InvalidWheelError

__all__ = ["WheelFilename", "all_safe_member_paths", "is_safe_member_path"]


@dataclass(frozen=True)
class WheelFilename:
    """A parsed wheel filename that remembers the original spelling of its parts.

    ``packaging`` normalises the name and version; the output wheel must keep the input's
    distribution spelling, build tag and platform tags, so ``stem`` is kept verbatim.
    """

    name: NormalizedName
    version: Version
    build_tag: BuildTag
    tags: frozenset[Tag]
    stem: str

    @classmethod
    def parse(cls, filename: str) -> WheelFilename:
        try:
            name, version, build_tag, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename as error:
            raise InvalidWheelError(f"{filename}: not a valid wheel filename ({error})") from None
        if not is_valid_project_name(filename.split("-", 1)[0]):
            raise InvalidWheelError(f"{filename}: not a valid wheel filename (invalid project name)")
        return cls(name, version, build_tag, tags, filename[: -len(".whl")])

    def with_version(self, version: str) -> str:
        """The same filename with only the version component replaced."""
        parts = self.stem.split("-")
        parts[1] = version
        return "-".join(parts) + ".whl"


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
