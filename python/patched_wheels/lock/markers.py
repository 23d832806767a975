"""PEP 508 marker algebra for locks that serve several platforms.

When a pin of such a lock is replaced by the one wheel we patched, the new line must hold exactly
where that wheel installs and the pin's other hashes must stay usable everywhere else. PEP 508 has
``and`` and ``or`` but no ``not``, so the complement is written with De Morgan's laws.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence, overload

from packaging.tags import Tag

from patched_wheels.errors import InvalidLockError

# PEP 425 platform tags -> PEP 508 (sys_platform, platform_machine) values.
_MACHINES = {"amd64": "AMD64", "arm64": "ARM64", "win32": "x86"}


@overload
def and_markers(first: str | None, second: str) -> str: ...
@overload
def and_markers(first: str | None, second: str | None) -> str | None: ...
def and_markers(first: str | None, second: str | None) -> str | None:
    """Both markers (None stands for "always")."""
    if first and second:
        return f"({first}) and ({second})"
    return first or second


@dataclass(frozen=True)
class WheelEnvironments:
    """The environments a wheel's tags admit, as far as a lock for several platforms tells wheels apart:
    the operating system and machine and, for a CPython-ABI wheel, the Python minor version."""

    python: str | None
    platforms: frozenset[tuple[str, str]]  # (sys_platform, platform_machine); empty: any

    @classmethod
    def of(cls, tags: Iterable[Tag]) -> "WheelEnvironments":
        platforms: set[tuple[str, str]] = set()
        pythons: set[str] = set()
        for tag in tags:
            if tag.platform != "any":
                platforms.update(_platform_values(tag.platform))
            if tag.abi.startswith("cp") and tag.interpreter.startswith("cp") and tag.abi != "abi3":
                digits = tag.interpreter[2:]
                pythons.add(f"{digits[0]}.{digits[1:]}")
        return cls(pythons.pop() if len(pythons) == 1 else None, frozenset(platforms))

    def overlaps(self, other: "WheelEnvironments") -> bool:
        """Whether some environment installs both (no platform or Python named: every one)."""
        if self.python and other.python and self.python != other.python:
            return False
        return not self.platforms or not other.platforms or bool(self.platforms & other.platforms)

    def marker(self) -> str | None:
        """A PEP 508 marker true exactly in these environments (None: every environment)."""
        alternatives = [
            f'sys_platform == "{system}" and platform_machine == "{machine}"'
            for system, machine in sorted(self.platforms)
        ]
        python = [f'python_version == "{self.python}"'] if self.python else []
        parts = python + ([_join(" or ", alternatives)] if alternatives else [])
        return _join(" and ", parts) if parts else None

    def complement(self) -> str | None:
        """The marker of every other environment (PEP 508 has no ``not``: De Morgan's laws)."""
        alternatives = [
            f'sys_platform != "{system}" or platform_machine != "{machine}"'
            for system, machine in sorted(self.platforms)
        ]
        python = [f'python_version != "{self.python}"'] if self.python else []
        parts = python + ([_join(" and ", alternatives)] if alternatives else [])
        return _join(" or ", parts) if parts else None


def _join(operator: str, parts: Sequence[str]) -> str:
    """``parts`` (at least one) joined by ``operator``, each parenthesised when it holds more than one term."""
    if len(parts) == 1:
        return parts[0]
    return operator.join(f"({part})" if " and " in part or " or " in part else part for part in parts)


def _platform_values(platform: str) -> set[tuple[str, str]]:
    if platform.startswith(("manylinux", "musllinux", "linux")):
        machine = re.sub(r"^(?:manylinux|musllinux)(?:_\d+_\d+|\d+)?_|^linux_", "", platform)
        return {("linux", machine)}
    if platform.startswith("macosx_"):
        machine = platform.split("_", 3)[-1]
        machines = {"universal2": ("arm64", "x86_64"), "intel": ("x86_64",)}.get(machine, (machine,))
        return {("darwin", m) for m in machines}
    if platform.startswith("win"):
        return {("win32", _MACHINES.get(platform.removeprefix("win_"), platform))}
    raise InvalidLockError(f"platform tag {platform}: cannot tell its sys_platform and platform_machine")
