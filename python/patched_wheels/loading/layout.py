"""Where an installed wheel's files land: in one site-packages (pip) or one directory per wheel (rules_python).

Both layouts are defined here once, for ``doctor``'s static simulation (paths only) and for the
real installs ``doctor --run`` and the preload probe run code in:

* **flat**, pip into a prefix: purelib/platlib into ``<prefix>/lib/pythonX.Y/site-packages``,
  ``data`` into ``<prefix>/``, ``scripts`` into ``<prefix>/bin``, ``headers`` into
  ``<prefix>/include/site/pythonX.Y/<dist>`` (pip's locations for a prefix or a venv);
* **per wheel**, rules_python's ``whl_library``: each wheel into its own repository, with the
  schemes ``site-packages``, ``data``, ``bin`` and ``include`` beside each other.

An install path is what :func:`patched_wheels.wheelfile.schemes.install_path` gives a member: relative to
site-packages, or ``<dist>.data/<scheme>/...`` for the other schemes.
"""

from __future__ import annotations

import os
import posixpath
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Container, Iterable, Sequence

from patched_wheels.wheelfile import WheelReader
from patched_wheels.wheelfile.schemes import data_scheme, install_path

FLAT = "flat"
PER_WHEEL = "per-wheel"
LAYOUT_TEXT = {FLAT: "every wheel in one site-packages", PER_WHEEL: "one directory per wheel"}
SITE_PACKAGES = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
# rules_python's whl_library installs with these schemes (0.22.1 through 2.x), relative to the wheel's repository.
PER_WHEEL_SCHEMES = {"site-packages": "site-packages", "data": "data", "scripts": "bin", "headers": "include"}


@dataclass(frozen=True)
class Layout:
    """One of the two layouts under ``root`` (a real directory, or ``/`` to simulate paths only)."""

    kind: str
    root: PurePosixPath

    def base(self, wheel: str) -> PurePosixPath:
        """The prefix (flat) or the wheel's repository (per wheel)."""
        return self.root if self.kind == FLAT else self.root / wheel[: -len(".whl")]

    def site_packages(self, wheel: str) -> PurePosixPath:
        """The ``sys.path`` entry ``wheel``'s importable files land in."""
        return self.base(wheel) / (SITE_PACKAGES if self.kind == FLAT else PER_WHEEL_SCHEMES["site-packages"])

    def target(self, wheel: str, path: str) -> PurePosixPath:
        """Where the file with install path ``path`` of ``wheel`` lands."""
        scheme = data_scheme(path)
        if scheme is None:
            return self.site_packages(wheel) / path
        dist, kind, rest = scheme
        if self.kind == PER_WHEEL:
            return self.base(wheel) / PER_WHEEL_SCHEMES[kind] / rest
        if kind == "data":
            return self.root / rest
        if kind == "scripts":
            return self.root / "bin" / rest
        return (
            self.root
            / "include"
            / "site"
            / posixpath.basename(posixpath.dirname(SITE_PACKAGES))
            / dist.split("-")[0]
            / rest
        )

    def sys_path(self, wheels: Iterable[str]) -> list[str]:
        """The ``sys.path`` entries of the layout, one per wheel in order (flat: one in all)."""
        return list(dict.fromkeys(str(self.site_packages(wheel)) for wheel in wheels))


def install(wheel: Path, layout: Layout, *, check_record: bool = True, left: Container[PurePosixPath] = ()) -> None:
    """Install ``wheel``'s files into ``layout`` (a real directory), streamed, permission bits kept.

    Every member is checked against the zip's CRC-32 as it is read, and against RECORD unless
    ``check_record`` is False (see :meth:`~patched_wheels.wheelfile.WheelReader.chunks`).  In the flat
    layout a file another wheel installed already (a shared namespace ``__init__.py``) is replaced, as
    pip does; ``left``: targets not written, because a later wheel of the set installs its own there.
    """
    with WheelReader(wheel) as reader:
        for member in reader.members():
            path = install_path(member)
            if path is None or member.endswith("/"):
                continue
            target = layout.target(wheel.name, path)
            if target in left:
                continue
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                for chunk in reader.chunks(member, check_record=check_record):
                    out.write(chunk)
            mode = reader.mode(member)
            if mode:
                os.chmod(target, mode & 0o777)


def owners(wheels: Sequence[Path], layout: Layout) -> dict[PurePosixPath, list[str]]:
    """The wheels (file names, in ``wheels``' order) that install a file at each target of ``layout``."""
    found: dict[PurePosixPath, list[str]] = {}
    for wheel in wheels:
        with WheelReader(wheel) as reader:
            members = reader.members()
        for member in members:
            path = install_path(member)
            if path is not None and not member.endswith("/"):
                found.setdefault(layout.target(wheel.name, path), []).append(wheel.name)
    return found
