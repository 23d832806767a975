"""Packages as users write them (``jax_plugins.xla_cuda12``), found in a wheel set.

A package is named as Python imports it (dotted) or by its directory (``jax_plugins/xla_cuda12``).
It may be a regular package (``__init__.py``) or a namespace package, which has none: see
:func:`find_package` for where the preload of a namespace package is imported from, and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from patched_wheels.elfgraph import ElfLibrary, LibraryGraph, install_path
from patched_wheels.errors import UsageError
from patched_wheels.wheelfile import WheelReader


def package_init_members(package: str, members: Iterable[str]) -> list[str]:
    """The archive paths among ``members`` that install as ``<package>/__init__.py``."""
    return [name for name in members if install_path(name) == f"{package}/__init__.py"]


def package_libraries(graph: LibraryGraph, package: str, package_wheel: str) -> list[ElfLibrary]:
    """The libraries ``package`` itself ships (inside its directory of ``package_wheel``): what importing it loads."""
    return [
        library
        for library in graph.libraries
        if library.wheel == package_wheel and library.path.startswith(f"{package}/")
    ]


def package_path(package: str) -> str:
    """The directory of ``package`` as users write it: a dotted module name (``jax_plugins.xla_cuda12``)
    or its path (``jax_plugins/xla_cuda12``)."""
    parts = package.replace("/", ".").split(".")
    if not all(part.isidentifier() for part in parts):
        raise UsageError(f"package {package!r}: not a module name (write it as Python imports it, e.g. jax_plugins.xla_cuda12)")
    return "/".join(parts)


def module_name(package: str) -> str:
    """``package`` as Python imports it (``jax_plugins/xla_cuda12`` -> ``jax_plugins.xla_cuda12``)."""
    return package_path(package).replace("/", ".")


@dataclass(frozen=True)
class PackageLocation:
    """Where a package lives in the wheel set, and where its preload is imported from."""

    wheel: Path
    path: str
    """Its directory relative to site-packages (``jax_plugins/xla_cuda12``)."""
    init_members: tuple[str, ...]
    """The ``__init__.py`` members that import the preload: the package's own, or, for a namespace package
    (no ``__init__.py``), those of the outermost regular packages inside it in its wheel."""

    @property
    def import_code(self) -> str:
        """Python that imports the package: each regular package of a namespace (importing the namespace runs nothing)."""
        modules = [(install_path(member) or member).rsplit("/", 1)[0].replace("/", ".") for member in self.init_members]
        return "; ".join(f"import {module}" for module in modules)


def find_package(package: str, wheels: Iterable[Path]) -> PackageLocation:
    """The wheel that ships ``package`` (a regular package, else a namespace package's one portion) and the
    ``__init__.py`` members its preload is imported from.

    Why not create ``__init__.py`` for a namespace package: that turns the portion into a regular package,
    which hides every other wheel's portion of the namespace (with one directory per wheel, Python stops at
    the first regular package of that name) and, in one site-packages, collides with their files.  Any code
    of the namespace that this wheel ships runs through its regular packages, so the preload goes there.
    """
    path = package_path(package)
    regular: list[tuple[Path, str]] = []
    portions: dict[Path, list[str]] = {}
    for wheel in wheels:
        with WheelReader(wheel) as reader:
            names = reader.members()
        regular.extend((wheel, name) for name in package_init_members(path, names))
        inside = [name for name in names if (install_path(name) or "").startswith(f"{path}/")]
        if inside:
            portions[wheel] = inside
    if len(regular) == 1:
        return PackageLocation(regular[0][0], path, (regular[0][1],))
    if len(regular) > 1:
        raise UsageError(f"{package}: shipped by more than one wheel ({', '.join(wheel.name for wheel, _ in regular)})")
    if not portions:
        raise UsageError(f"{package}: no wheel in the set ships {path}/__init__.py or any file under {path}/")
    if len(portions) > 1:
        raise UsageError(
            f"{package}: a namespace package (no __init__.py) with files in more than one wheel "
            f"({', '.join(wheel.name for wheel in portions)}): name the package inside it that you mean"
        )
    wheel, members = next(iter(portions.items()))
    inits = {install_path(name): name for name in members if name.endswith("/__init__.py")}
    outermost = tuple(
        member
        for init, member in sorted(inits.items())
        if not any(init != other and init.startswith(other[: -len("__init__.py")]) for other in inits)
    )
    if not outermost:
        raise UsageError(
            f"{package}: a namespace package (no __init__.py) in {wheel.name} with no regular package inside: no Python "
            "code of it runs at import to load a preload; name the package that imports it"
        )
    return PackageLocation(wheel, path, outermost)
