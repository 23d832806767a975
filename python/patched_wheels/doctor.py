"""Predict which shared libraries fail to load when each wheel has its own directory (as under Bazel).

The dynamic loader looks for a library's DT_NEEDED names in the directories of
its own DT_RUNPATH (or DT_RPATH when there is no RUNPATH), with ``$ORIGIN``
standing for the library's directory, then in the system directories; a name
that an already loaded library carries as its SONAME needs no search at all.
This module replays the first part over a simulated one-directory-per-wheel
layout and reports every dependency that is not found there, and whether a
package's preload (the one already in its wheel, or the one ``patch
--preload-for`` would generate) loads it first.  Simplification: DT_RPATH
inherited from the loading object and LD_LIBRARY_PATH are ignored, since neither
reaches across wheel directories under Bazel.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

from patched_wheels.elfgraph import ElfLibrary, LibraryGraph, expand_origin, read_graph
from patched_wheels.preload import (
    find_package_wheel,
    package_libraries,
    preload_libraries,
    preload_module_member,
    read_preload_module,
)
from patched_wheels.wheelfile import WheelReader

# What a dependency missing from the per-wheel layout means for the package asked about.
FAILS = "fails"  # no package given: it fails whenever the library is loaded
COVERED = "covered"  # the package's preload loads the provider first
NOT_COVERED = "not covered"  # the package loads the library, and it will fail
NOT_LOADED = "not loaded"  # the package never loads the library
_STATUS_TEXT = {
    COVERED: "covered by {package}'s preload",
    NOT_COVERED: "NOT covered by {package}'s preload",
    NOT_LOADED: "{package} does not load it",
}

# Installed with the GPU driver on the machine that runs the code, never shipped in wheels:
# a build host without a GPU lacking them says nothing about the target.
DRIVER_LIBRARIES = frozenset({"libcuda.so.1", "libnvidia-ml.so.1"})
_SYSTEM_DIRECTORIES = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
)


@dataclass(frozen=True)
class Finding:
    """One DT_NEEDED name of one library that the per-wheel layout does not satisfy."""

    library: ElfLibrary
    needed: str
    provider: ElfLibrary | None
    """The library of the set with that name, or None when neither the set nor this system has it."""
    status: str

    @property
    def fails(self) -> bool:
        return self.status in (FAILS, NOT_COVERED)


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    package: str | None
    preload: tuple[str, ...]
    preload_origin: str
    """"installed" (found in the package's wheel), "planned" (what patch --preload-for would write) or ""."""

    @property
    def fails(self) -> bool:
        return any(finding.fails for finding in self.findings)


def system_library_names() -> frozenset[str]:
    """File names the loader finds without any RPATH: ld.so.cache, the default directories, GPU driver libraries."""
    names: set[str] = set(DRIVER_LIBRARIES)
    ldconfig = shutil.which("ldconfig") or next(
        (path for path in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(path)), None
    )
    if ldconfig:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
        names.update(line.split()[0] for line in listing.splitlines()[1:] if line.strip())
    for directory in _SYSTEM_DIRECTORIES:
        try:
            names.update(os.listdir(directory))
        except OSError:
            continue
    return frozenset(names)


def _layout_directory(library: ElfLibrary) -> str:
    return posixpath.join("/", library.wheel, posixpath.dirname(library.path))


def _search_directories(library: ElfLibrary) -> list[str]:
    origin = _layout_directory(library)
    return [expand_origin(entry, origin) for entry in library.search_path]


def _planned_or_installed_preload(
    graph: LibraryGraph, package: str, package_wheel: Path, init_member: str
) -> tuple[tuple[str, ...], str]:
    module_member = preload_module_member(init_member)
    with WheelReader(package_wheel) as reader:
        if module_member in reader:
            source = reader.read(module_member)
            return read_preload_module(source, where=f"{package_wheel.name}: {module_member}"), "installed"
    planned = preload_libraries(graph, package, package_wheel.name)
    return tuple(library.path for library in planned), "planned"


def diagnose_graph(
    graph: LibraryGraph,
    *,
    system_names: Collection[str],
    package: str | None = None,
    package_wheel: str | None = None,
    preload: Sequence[str] = (),
) -> list[Finding]:
    """The findings for ``graph``; with ``package``, each is judged against ``preload`` (site-packages paths)."""
    files_by_directory: dict[str, set[str]] = {}
    for library in graph.libraries:
        files_by_directory.setdefault(_layout_directory(library), set()).add(library.filename)
    loaded: set[ElfLibrary] = set()
    if package is not None:
        loaded = graph.closure(package_libraries(graph, package, package_wheel))
    position = {path: index for index, path in enumerate(preload)}
    findings = []
    for library in graph.libraries:
        directories = _search_directories(library)
        for name in library.needed:
            if any(name in files_by_directory.get(directory, ()) for directory in directories):
                continue
            provider = graph.providers[library].get(name)
            if provider is None and name in system_names:
                continue
            if package is None:
                status = FAILS
            elif library not in loaded:
                status = NOT_LOADED
            elif (
                provider is not None
                and provider.path in position
                and position[provider.path] < position.get(library.path, len(position))
            ):
                status = COVERED
            else:
                status = NOT_COVERED
            findings.append(Finding(library, name, provider, status))
    return findings


def diagnose(
    wheels: Sequence[Path],
    *,
    package: str | None = None,
    cache_dir: Path | None = None,
    system_names: Collection[str] | None = None,
) -> Diagnosis:
    """Simulate one directory per wheel for ``wheels`` and report what would not load.

    ``system_names``: the library file names the target system provides (default:
    :func:`system_library_names` of this machine).
    """
    wheels = [Path(wheel) for wheel in wheels]
    graph = read_graph(wheels, cache_dir=cache_dir)
    names = system_library_names() if system_names is None else system_names
    if package is None:
        return Diagnosis(tuple(diagnose_graph(graph, system_names=names)), None, (), "")
    package_wheel, init_member = find_package_wheel(package, wheels)
    preload, origin = _planned_or_installed_preload(graph, package, package_wheel, init_member)
    findings = diagnose_graph(
        graph, system_names=names, package=package, package_wheel=package_wheel.name, preload=preload
    )
    return Diagnosis(tuple(findings), package, preload, origin)


def format_diagnosis(diagnosis: Diagnosis) -> str:
    lines = []
    for finding in diagnosis.findings:
        library = finding.library
        where = f"{library.path} ({library.wheel})"
        search = ":".join(library.search_path) or "none"
        if finding.provider is None:
            problem = f"needs {finding.needed}, found in no wheel given nor on this system"
        else:
            problem = (
                f"needs {finding.needed} from {finding.provider.path} ({finding.provider.wheel}), "
                f"not on its {'RUNPATH' if library.runpath else 'RPATH'} ({search}) in a per-wheel layout"
            )
        suffix = "" if finding.status == FAILS else " -- " + _STATUS_TEXT[finding.status].format(package=diagnosis.package)
        lines.append(f"{where}: {problem}{suffix}")
    if diagnosis.package is not None:
        lines.append(f"{diagnosis.preload_origin} preload of {diagnosis.package}: {len(diagnosis.preload)} libraries")
        lines.extend(f"  {index}. {path}" for index, path in enumerate(diagnosis.preload, start=1))
    failing = sum(finding.fails for finding in diagnosis.findings)
    if failing:
        lines.append(f"{failing} dependencies would fail to load with one directory per wheel")
    else:
        lines.append("every library loads with one directory per wheel")
    return "\n".join(lines)

