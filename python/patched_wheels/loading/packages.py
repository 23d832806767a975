"""Packages as users write them (``jax_plugins.xla_cuda12``), found in a wheel set.

A package is named as Python imports it (dotted) or by its directory (``jax_plugins/xla_cuda12``).
It may be a regular package (``__init__.py``) or a namespace package, which has none: see
:func:`find_package` for where the preload of a namespace package is imported from, and why.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from patched_wheels.base.names import module_name, package_path
from patched_wheels.elf.graph import LibraryGraph, WheelRef
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import UsageError
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile import WheelReader
from patched_wheels.wheelfile.schemes import install_path


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
    outermost = _outermost_packages(members)
    if not outermost:
        raise UsageError(
            f"{package}: a namespace package (no __init__.py) in {wheel.name} with no regular package inside: no Python "
            "code of it runs at import to load a preload; name the package that imports it"
        )
    return PackageLocation(wheel, path, outermost)


def _outermost_packages(members: Iterable[str]) -> tuple[str, ...]:
    """The ``__init__.py`` members of the outermost regular packages among ``members`` (a namespace's files,
    each installed somewhere: a member of no install path is none of them)."""
    inits = {
        path: name for name in members if name.endswith("/__init__.py") and (path := install_path(name)) is not None
    }
    return tuple(
        member
        for init, member in sorted(inits.items())
        if not any(init != other and init.startswith(other[: -len("__init__.py")]) for other in inits)
    )


@dataclass(frozen=True)
class EntryPoint:
    """One ``entry_points.txt`` entry: ``[group] name = module:attr``; a plugin host loads ``module``."""

    group: str
    name: str
    module: str

    def __str__(self) -> str:
        return f"{self.group}:{self.name}"


def entry_points(reader: WheelReader) -> list[EntryPoint]:
    """The entry points a wheel declares (none when its ``entry_points.txt`` is absent or not INI)."""
    member = f"{reader.dist_info}/entry_points.txt"
    if member not in reader or reader.file_size(member) > _MAX_SOURCE_BYTES:
        return []
    return parse_entry_points(reader.read(member))


def parse_entry_points(data: bytes) -> list[EntryPoint]:
    """The entries of an ``entry_points.txt`` (none when it is not UTF-8 INI)."""
    parser = configparser.RawConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # entry point names keep their case
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError):
        return []
    return [
        EntryPoint(group, name, value.partition(":")[0].partition("[")[0].strip())
        for group in parser.sections()
        for name, value in parser.items(group)
    ]


def hosted_plugin(module: str, declared: Iterable[tuple[str, EntryPoint]]) -> tuple[str, EntryPoint] | None:
    """The first (wheel or distribution, entry point) of ``declared`` that plugs into ``module``: an entry point of
    the group ``<top>_plugins`` (JAX's ``jax_plugins``) whose module is not ``module`` or under it; None if none.

    Such a host loads its native code through the plugin, which initialises its libraries its own way: on an H100,
    ``patched_wheel(name = "jax", preload = "auto")`` mapped every library and JAX then found no CUDA device
    ("no supported devices found for platform CUDA"), while the same preload in the plugin's package ran on the
    GPU; a machine without a GPU cannot tell the two apart. So the preload goes to the plugin."""
    group = f"{module.split('.')[0]}_plugins"
    return next(
        (
            (owner, point)
            for owner, point in declared
            if point.group == group and not f"{point.module}.".startswith(f"{module}.")
        ),
        None,
    )


# A Python source bigger than this is no package's __init__.py or plugin module worth searching.
_MAX_SOURCE_BYTES = 1 << 20


@dataclass(frozen=True)
class _Importer:
    """A regular package that names a namespace package in its code, and the entry point that loads it, if any."""

    wheel: str
    module: str
    entry_point: EntryPoint | None


def _importers(module: str, wheels: Sequence[Path]) -> list[_Importer]:
    """The regular packages of ``wheels`` whose ``__init__.py`` names ``module`` (``import x``, ``from x``,
    ``importlib.import_module("x")``...): plugin modules an entry point loads first, then by name.

    Only ``__init__.py`` files are read: a namespace package's code runs when a regular package imports it,
    and that is where a preload can go."""
    word = re.compile(rb"(?<![\w.])" + re.escape(module.encode()) + rb"(?![\w])")
    found: list[_Importer] = []
    for wheel in wheels:
        with WheelReader(wheel) as reader:
            loaded = {point.module: point for point in entry_points(reader)}
            for member in reader.members():
                init = install_path(member) or ""
                if not init.endswith("/__init__.py") or reader.file_size(member) > _MAX_SOURCE_BYTES:
                    continue
                importer = init[: -len("/__init__.py")].replace("/", ".")
                inner = importer == module or importer.startswith(f"{module}.")
                if not inner and word.search(reader.read(member)):
                    found.append(_Importer(wheel.name, importer, loaded.get(importer)))
    return sorted(
        found, key=lambda importer: (importer.entry_point is None, importer.module.count("."), importer.module)
    )


def _entry_point_of(wheel: Path, module: str) -> EntryPoint | None:
    with WheelReader(wheel) as reader:
        return next((point for point in entry_points(reader) if point.module == module), None)


def locate_package(
    package: str,
    patched: Path,
    wheels: Sequence[Path | WheelRef],
    phrasing: Phrasing,
    graph: LibraryGraph | None = None,
) -> PackageLocation:
    """Where ``package`` gets its preload in ``patched``, the wheel being patched; else one error saying
    which wheel of the set ships it (or which regular package or plugin entry point imports a namespace
    package that runs no code of its own), and what to write instead, in ``phrasing``'s words.

    Why across the set: the project to patch is often not the one a user guesses (JAX 0.7 ships
    ``jax_plugins/xla_cuda12`` in ``jax-cuda12-pjrt``, beside ``jax-cuda12-plugin``). ``wheels`` is the
    set (``patched`` may be among it); a ref without a file (the hub did not fetch a wheel whose ELF rows
    are cached) is judged by ``graph``: its libraries under the package's directory.
    """
    path, module = package_path(package), module_name(package)
    refs = [WheelRef.of(wheel) for wheel in wheels]
    readable = [ref.path for ref in refs if ref.path is not None and ref.filename != patched.name]
    _refuse_plugin_host(module, readable, phrasing)
    inside, code = _members_of(path, patched)
    if code:
        # Another wheel's copy of the same __init__.py overwrites it in one site-packages, and comes first on
        # sys.path as often as not: the preload would then never run.
        regular = bool(package_init_members(path, code))  # a namespace's portion: its own packages, its own files
        also = [wheel.name for wheel in readable if regular and package_init_members(path, _members_of(path, wheel)[0])]
        if also:
            raise UsageError(
                f"{phrasing.option}: {path}/__init__.py is shipped by {phrasing.wheel(patched.name)} and by "
                f"{', '.join(phrasing.wheel(name) for name in also)}: installed together, one overwrites the other, so "
                "a preload in it may never run"
            )
        return PackageLocation(patched, path, code)
    homes = [wheel.name for wheel in readable if _members_of(path, wheel)[1]]
    homes += [
        ref.filename
        for ref in refs
        if ref.path is None
        and graph is not None
        and any(library.wheel == ref.filename and library.path.startswith(f"{path}/") for library in graph.libraries)
    ]
    if homes:
        home = next((wheel for wheel in readable if wheel.name == homes[0]), None)
        point = _entry_point_of(home, module) if home is not None else None
        via = f", which its entry point {point} loads" if point else ""
        more = f" (and by {', '.join(phrasing.wheel(home) for home in homes[1:])})" if homes[1:] else ""
        raise UsageError(
            f"{phrasing.option}: {module} is shipped by {phrasing.wheel(homes[0])}{via}{more}, not by "
            f"{phrasing.wheel(patched.name)}: write {phrasing.write(homes[0], module)}"
        )
    if not inside:
        raise UsageError(
            f"{phrasing.option}: no wheel in the set ships {path}/__init__.py or any file under {path}/"
            + _what_it_ships(patched, phrasing)
        )
    importers = _importers(module, [patched, *readable])
    if not importers:
        raise UsageError(
            f"{phrasing.option}: {module} is a namespace package (no __init__.py) in {phrasing.wheel(patched.name)} "
            "with no regular package inside, and no regular package of the set names it: no Python code runs at its "
            "import to load a preload; name the package that imports it"
        )
    first = importers[0]
    loaded = f", the plugin its entry point {first.entry_point} loads" if first.entry_point else ""
    raise UsageError(
        f"{phrasing.option}: {module} is a namespace package (no __init__.py) in {phrasing.wheel(patched.name)}: none "
        f"of its code runs at import to load a preload; {first.module} (of {phrasing.wheel(first.wheel)}{loaded}) "
        f"imports it: write {phrasing.write(first.wheel, first.module)}"
    )


def _refuse_plugin_host(module: str, wheels: Sequence[Path], phrasing: Phrasing) -> None:
    """Refuse a preload in a package that loads its native code through another wheel's plugin
    (:func:`hosted_plugin`), naming the stanza that preloads the plugin instead."""

    def declared() -> Iterator[tuple[str, EntryPoint]]:
        for wheel in wheels:
            with WheelReader(wheel) as reader:
                yield from ((wheel.name, point) for point in entry_points(reader))

    found = hosted_plugin(module, declared())
    if found is not None:
        wheel, point = found
        raise UsageError(
            f"{phrasing.option}: {module} loads its plugins by entry point, and {phrasing.wheel(wheel)} declares "
            f"{point} = {point.module}: a preload in {module} loads the plugin's libraries before the plugin does "
            f"(JAX then finds no GPU); preload the plugin: write {phrasing.write(wheel, point.module)}"
        )


def _members_of(path: str, wheel: Path) -> tuple[list[str], tuple[str, ...]]:
    """The members of ``wheel`` under the package at ``path``, and the ``__init__.py`` members that run when
    it is imported: its own, or, for a namespace portion, those of the outermost regular packages inside."""
    with WheelReader(wheel) as reader:
        names = reader.members()
    inside = [name for name in names if (install_path(name) or "").startswith(f"{path}/")]
    return inside, tuple(package_init_members(path, names)) or _outermost_packages(inside)


def _what_it_ships(wheel: Path, phrasing: Phrasing) -> str:
    """What to write for a package ``wheel`` does not ship (a default one, from the project name: ``jax-cuda12-pjrt``
    ships ``jax_plugins.xla_cuda12``, ``onnxruntime-gpu`` ships ``onnxruntime``): the module its first entry point
    loads, else its one top-level regular package, else its top-level packages listed; "" when it ships none."""
    with WheelReader(wheel) as reader:
        names = reader.members()
        points = [point for point in entry_points(reader) if package_init_members(package_path(point.module), names)]
    if points:
        return (
            f"; {phrasing.wheel(wheel.name)} ships {points[0].module}, which its entry point {points[0]} loads: "
            f"write {phrasing.write(wheel.name, points[0].module)}"
        )
    top = sorted(
        {
            init.split("/")[0]
            for init in map(install_path, names)
            if init and init.count("/") == 1 and init.endswith("/__init__.py")
        }
    )
    if len(top) == 1:
        return f"; {phrasing.wheel(wheel.name)} ships {top[0]}: write {phrasing.write(wheel.name, top[0])}"
    return f"; {phrasing.wheel(wheel.name)} ships {', '.join(top)}" if top else ""
