"""Generated preloaders: load a package's shared-library dependencies from other wheels, in graph order.

In one site-packages, RPATHs such as ``$ORIGIN/../../nvidia/cusparse/lib`` find the
libraries of sibling wheels.  When every wheel has its own ``sys.path`` entry (as
under Bazel) they point nowhere, and hand-written preload lists like torch 2.1.0's
break as soon as their order is wrong.  The module generated here loads each
needed library by its wheel-relative path, found across ``sys.path``, dependencies
first, so that every later DT_NEEDED (and dlopen by name) is satisfied by SONAME;
RTLD_LOCAL unless a library needs its symbols global (see :mod:`patched_wheels.loading.observe`).
The order comes from the ELF files at patch time.

What a package preloads is defined once, by :func:`plan_preload`: the libraries of
other wheels its own libraries need (DT_NEEDED, transitively), plus those of other
wheels a probe maps with every wheel in one site-packages (the observation), plus, on
request, every library of the wheels whose project names match ``preload_wheels``
globs -- for packages that open libraries themselves at run time (JAX's CUDA plugin
locates the ``nvidia-*`` packages and dlopens their libraries), which no ELF edge shows.
``doctor``, ``patch``, ``split`` and the hub all use it; :mod:`patched_wheels.loading.preloadfiles` writes what it
decides into the wheel.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, Union

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.names import canonicalize_name, glob_problem
from patched_wheels.elf.graph import LibraryGraph, WheelRef, library_members, read_graph
from patched_wheels.elf.order import stuck_cycles
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import UsageError, warn
from patched_wheels.loading.lazyload import is_extension_module, lazy_warning, unprobed_libraries
from patched_wheels.loading.packages import find_package, locate_package, package_libraries
from patched_wheels.loading.preloadfiles import PackagePreload
from patched_wheels.loading.preloadmodule import (
    PreloadList,
    all_is_none,
)
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile import WheelFilename, WheelReader
from patched_wheels.wheelfile.metadata import required_projects
from patched_wheels.wheelfile.schemes import data_scheme

if TYPE_CHECKING:
    from patched_wheels.loading.observe import Observation
    from patched_wheels.loading.probe import Installation


@dataclass(frozen=True)
class PreloadPlan:
    """What a package preloads, computed from the library graph by :func:`plan_preload`."""

    libraries: tuple[ElfLibrary, ...]
    """Everything to preload, in load order."""
    optional: frozenset[ElfLibrary]
    """The libraries only the observation or ``preload_wheels`` asks for (not needed through DT_NEEDED),
    and a cycle that cannot load by itself with what needs it (:func:`~patched_wheels.elf.order.stuck_cycles`): skipped when they fail."""
    unmatched: tuple[str, ...]
    """``preload_wheels`` globs that match no other wheel shipping shared libraries."""
    global_: frozenset[ElfLibrary] | None = None
    """Loaded with RTLD_GLOBAL; None: every library (without an observation no symbol table was read)."""

    @property
    def required(self) -> tuple[ElfLibrary, ...]:
        return tuple(library for library in self.libraries if library not in self.optional)

    def as_list(self, path: Callable[[ElfLibrary], str] = lambda library: library.path) -> PreloadList:
        """The plan as module entries; ``path`` gives a library's site-packages path (split moves some)."""
        libraries = tuple(path(library) for library in self.libraries)
        global_ = None if self.global_ is None else frozenset(path(library) for library in self.global_)
        return PreloadList(
            libraries, frozenset(path(library) for library in self.optional), all_is_none(global_, libraries)
        )


def project_name(wheel: str) -> str:
    """The normalised project name of a wheel file name (``nvidia_cublas-13.1-….whl`` -> ``nvidia-cublas``)."""
    return WheelFilename.parse(wheel).name


def wheels_matching(graph: LibraryGraph, globs: Sequence[str], *, exclude: str) -> dict[str, list[ElfLibrary]]:
    """For each glob (fnmatch on normalised project names), the libraries of the matching wheels but ``exclude``."""
    for glob in globs:
        if problem := glob_problem(glob):
            raise UsageError(f"preload wheels glob {glob!r}: {problem}")
    matched: dict[str, list[ElfLibrary]] = {glob: [] for glob in globs}
    for library in graph.libraries:
        if library.wheel == exclude:
            continue
        name = project_name(library.wheel)
        for glob in globs:
            if fnmatch.fnmatchcase(name, canonicalize_name(glob)):
                matched[glob].append(library)
    return matched


def plan_preload(
    graph: LibraryGraph,
    package: str,
    package_wheel: str,
    *,
    preload_wheels: Sequence[str] = (),
    moved: Iterable[ElfLibrary] = (),
    observed: Observation | None = None,
) -> PreloadPlan:
    """What ``package`` (its directory, shipped in ``package_wheel``) must preload, in load order.

    Required: the libraries of other wheels that the package's libraries need,
    directly or through each other, plus everything those need in turn (which can
    include libraries of the package's own wheel: they must be loaded before their
    users).  Libraries of the package's own wheel that only it uses are left to its
    RPATHs, which work in any layout because they stay inside one wheel -- except
    ``moved`` ones (split into a sibling wheel), which are required with their closure.
    Optional: the libraries of other wheels that ``observed`` (a probe in one site-packages)
    mapped, and every library of the other wheels matching ``preload_wheels``, with what they
    need -- for code that loads them itself at run time.  An optional library is left out when
    loading it early could change what works in one site-packages: a Python extension module, a
    library outside site-packages (data scheme), or one that needs a library of the package's own
    wheel (the package loads those itself, later).
    A cycle no member of which loads the others by itself (:func:`~patched_wheels.elf.order.stuck_cycles`) is optional too,
    with everything that needs it.
    RTLD mode: with an observation, RTLD_LOCAL but for the libraries it found needing
    RTLD_GLOBAL; without one (no symbol table read), RTLD_GLOBAL as before.
    """
    own = package_libraries(graph, package, package_wheel)
    foreign = [library for library in graph.closure(own) if library.wheel != package_wheel]
    required = graph.closure([*foreign, *moved])
    matched = wheels_matching(graph, preload_wheels, exclude=package_wheel)
    candidates = [library for libraries in matched.values() for library in libraries]
    if observed is not None:
        candidates += [
            library
            for library in graph.libraries
            if library.wheel != package_wheel and observed.has(library, observed.mapped)
        ]
    unsafe = {
        library
        for library in graph.libraries
        if data_scheme(library.path)
        or is_extension_module(library, observed)
        or (library.wheel == package_wheel and library not in required)
    }
    safe = [library for library in candidates if not graph.closure([library]) & unsafe]
    optional = graph.closure(safe) - required
    planned = required | optional
    # A cycle that no member loads alone fails by its path; whatever needs it, too (see stuck_cycles).
    stuck = {library for members in stuck_cycles(graph.cycles, graph.providers) for library in members}
    if stuck:
        optional |= {library for library in required if graph.closure([library]) & stuck}
    global_ = (
        None
        if observed is None
        else frozenset(library for library in planned if observed.has(library, observed.needs_global))
    )
    return PreloadPlan(
        tuple(graph.ordered(planned)),
        frozenset(optional),
        tuple(glob for glob, libraries in matched.items() if not libraries),
        global_,
    )


def runtime_candidates(graph: LibraryGraph, package_wheel: Path) -> list[str]:
    """Projects ``package_wheel`` requires (Requires-Dist, any marker or extra) whose wheels here ship shared libraries.

    A package with no DT_NEEDED edge to them may still load them itself at run time.
    """
    with WheelReader(package_wheel) as reader:
        metadata = reader.metadata()
    required = required_projects(metadata)
    return sorted(
        {project_name(library.wheel) for library in graph.libraries if library.wheel != package_wheel.name} & required
    )


def runtime_hint(
    package: str, projects: Sequence[str], observed: Observation | None = None, *, probed: bool = True
) -> str:
    """What to do about ``projects`` that ``package`` may load at run time, for ``doctor`` and ``patch``.

    It names no list of wheels to preload: such a list is only right once a run has shown it (a
    preload of everything ``nvidia-*`` pulls in is what crashed TensorFlow).  A probe makes the run; where
    none may run (``probed`` false: ``preload = "elf"``, ``--no-probe``), the user names the wheels.
    """
    seen = f", and {observed_none(observed, 'of them ', failure=False)}" if observed is not None else ""
    ask = (
        'give a probe that makes it do so (probe = "..." on patched_wheel, --probe CODE): '
        'preload = "auto" then preloads what one site-packages maps'
    )
    if not probed:
        ask = (
            'no probe ran to see which (preload = "elf", --no-probe): '
            'name their wheels (preload_wheels, --preload-wheels) or give a probe with preload = "auto"'
        )
    return (
        f"{package} requires {', '.join(projects)}, which {'ships' if len(projects) == 1 else 'ship'} shared libraries, "
        "but needs none of them through "
        f"DT_NEEDED{seen}: if it opens them itself later (ctypes, dlopen), {ask}; doctor --run compares both layouts"
    )


def observed_none(observed: Observation, of: str = "", *, failure: bool = True) -> str:
    """That ``observed``'s probe mapped none (``of``: "of them "), as a verdict says it: where a kept observation says
    so, naming its file; where the probe failed (and ``failure``: not said already), with its status and error line
    (its run's warning is not shown beside a failed command's error)."""
    if failure and observed.returncode != 0:
        return (
            f"{observed.probe!r} maps none {of}in one site-packages before it exits with status {observed.returncode} "
            f"({observed.error_line or 'no error line'})"
        )
    return f"{observed.probe!r} maps none {of}in one site-packages{observed.recorded_in}"


def check_shipped(libraries: Iterable[ElfLibrary], wheels: Sequence[Path | WheelRef]) -> None:
    """Fail unless each of ``libraries`` is a shared library its wheel ships, by the wheel's zip directory: a
    preload entry is only ever a member of the set, whatever rows (a facts file's) the graph was read from.
    A wheel not at hand (rows of the cache's own files, :func:`~patched_wheels.elf.graph.scan_wheels`) is not opened."""
    files = {ref.filename: ref.path for ref in map(WheelRef.of, wheels) if ref.path is not None}
    by_wheel: dict[str, list[str]] = {}
    for library in libraries:
        by_wheel.setdefault(library.wheel, []).append(library.path)
    for wheel, paths in sorted(by_wheel.items()):
        if wheel not in files:
            continue
        shipped = {install for _, install in library_members(files[wheel])}
        for path in paths:
            if path not in shipped:
                raise UsageError(f"{wheel}: {path}: a preload entry, but not a shared library of this wheel")


def check_before_probe(
    graph: LibraryGraph, package: str, path: str, package_wheel: str, preload_wheels: Sequence[str]
) -> list[ElfLibrary]:
    """Fail on an unreadable library that ``package`` (as users write it; ``path``: its directory) needs by
    its ELF graph, before a probe installs and runs the set; return the package's own libraries.  What the
    probe adds is checked with the final plan (:meth:`LibraryGraph.check_problems`), which also warns."""
    own = package_libraries(graph, path, package_wheel)
    elf_plan = plan_preload(graph, path, package_wheel, preload_wheels=preload_wheels)
    graph.check_problems(package, package_wheel, [*own, *elf_plan.libraries], warn_others=False)
    return own


@dataclass(frozen=True)
class Probe:
    """Plan with what a probe maps in one site-packages (``preload = "auto"``, ``patch``'s default): ``code``
    (None: ``import PKG``) runs with the set installed where their tags match this interpreter, or its
    observation comes from the cache; elsewhere (one warning) the ELF graph alone decides."""

    code: str | None = None
    installation: Installation | None = None
    """The set already installed in one site-packages (the hub's, ``doctor --run``); None: installed here."""


@dataclass(frozen=True)
class ElfOnly:
    """Plan from the ELF graph alone: no package code runs (``preload = "elf"``, ``--no-probe``); with ``recorded``,
    the graph and what a probe was recorded mapping (a verified stack's row: :mod:`patched_wheels.hub.verified`)."""

    recorded: Sequence[str] = ()
    """SONAMEs a probe mapped in one site-packages, recorded: preloaded where the set ships them
    (:func:`recorded_observation`)."""
    recorded_global: Sequence[str] = ()
    """Of ``recorded``, those loaded RTLD_GLOBAL."""


def recorded_observation(graph: LibraryGraph, mode: ElfOnly, package_wheel: str, probe: str) -> Observation | None:
    """What ``mode``'s recording says a probe maps, as an observation of this set: the libraries of the other
    wheels whose SONAME (a file name, for a library without one) is recorded, so that :func:`plan_preload` orders
    and filters them as it does a run's. A SONAME that several other wheels ship is left out, with one warning:
    which of them a run maps only a run shows (the ELF graph still preloads the one a DT_NEEDED edge names).
    None without a recording."""
    if not mode.recorded:
        return None
    from patched_wheels.loading.observe import Observation  # the observation's type, not its run

    by_name: dict[str, list[ElfLibrary]] = {}
    for library in graph.libraries:
        if library.wheel != package_wheel:
            by_name.setdefault(library.soname or library.filename, []).append(library)
    mapped, needs_global = set(), set()
    for soname in mode.recorded:
        found = by_name.get(soname, [])
        if len(found) > 1:
            warn(
                f"{package_wheel}: the recorded {soname} is shipped by {len(found)} wheels of the set "
                f"({', '.join(sorted({library.wheel for library in found}))}): preloaded from none of them"
            )
            continue
        keys = {(library.wheel, library.path) for library in found}
        mapped |= keys
        if soname in mode.recorded_global:
            needs_global |= keys
    return Observation(probe, frozenset(mapped), frozenset(), frozenset(needs_global))


PreloadMode = Union[Probe, ElfOnly]
"""How :func:`plan_package_preload` plans: one choice, whose probe carries what only a probe needs."""


@dataclass(frozen=True)
class PreloadRequest:
    """What a user asks a package to preload, as one value: what a ``patched_wheel`` spec says (``preload_package``,
    ``preload``/``probe``, its wheel, ``preload_wheels``) and ``patch``'s flags say (``--preload-for``,
    ``--probe``/``--no-probe``, ``--wheel``, ``--preload-wheels``), which :class:`~patched_wheels.phrasing.Phrasing`
    names in errors.

    ``package``: as users write it (``jax_plugins.xla_cuda12``).  ``mode``: with a :class:`Probe`, what it maps is
    preloaded too (see :func:`plan_preload`); with :class:`ElfOnly`, the ELF graph alone decides.  ``wheel``: the
    wheel being patched, which must ship ``package`` (else the error names the wheel that does); None: the wheel of
    the set that ships it.  ``preload_wheels``: globs of other wheels whose every library is preloaded too."""

    package: str
    mode: PreloadMode = Probe()
    wheel: Path | None = None
    preload_wheels: Sequence[str] = ()


def plan_package_preload(
    request: PreloadRequest,
    wheels: Sequence[Path | WheelRef],
    *,
    graph: LibraryGraph | None = None,
    strict: bool = True,
    phrasing: Phrasing | None = None,
    caches: CacheContext = OFF,
) -> PackagePreload | None:
    """What ``request``'s package preloads from the other ``wheels``, as a value: the planning entry point of ``patch
    --preload-for`` and the hub.  None: nothing to preload (only where not ``strict``).

    ``wheels``: the set's files (or refs with sha256), among them the request's wheel when it names one (errors
    about where the package lies are in ``phrasing``'s words).  ``graph``: the library graph of the whole set, the
    request's wheel among it under its file name (the hub reads one for all of its specs); None: read here
    (``caches``: the ELF cache).  Read leniently: an unreadable library fails here only if the package may need it
    (:meth:`~patched_wheels.elf.graph.LibraryGraph.check_problems`).  A probe's observation is kept in ``caches``,
    which may hold it already; with :class:`ElfOnly`, ``wheels`` still locate the package across the set (a wrong
    package names the wheel that ships it).  ``strict`` (the ``patch`` command): nothing to preload, or a
    ``preload_wheels`` glob that matches nothing, is an error.  Otherwise (the hub, whose lock may be for a platform
    without those wheels, e.g. macOS) it is a warning at most, and None.
    """
    package, mode, package_wheel, preload_wheels = request.package, request.mode, request.wheel, request.preload_wheels
    wheels = [wheel if isinstance(wheel, WheelRef) else Path(wheel) for wheel in wheels]
    if package_wheel is None:
        package_wheel = find_package(package, [wheel for wheel in wheels if isinstance(wheel, Path)]).wheel
    probe = mode if isinstance(mode, Probe) else None
    if graph is None:  # lenient: check_problems below judges what is unreadable; symbols: for a kept observation
        kept = probe is not None and probe.installation is None and caches.root is not None
        graph = read_graph(wheels, caches=caches, lenient=True, symbols=kept)
    phrasing = phrasing or Phrasing.plain(package)
    location = locate_package(package, package_wheel, wheels, phrasing, graph)
    if probe is not None and probe.code is not None and not isinstance(probe.code, str):
        raise UsageError(f"probe {probe.code!r}: not Python code (a string)")
    observed = None
    code = (probe and probe.code) or location.import_code
    own = check_before_probe(graph, package, location.path, package_wheel.name, preload_wheels)
    if wheels and probe is not None:
        from patched_wheels.loading.observe import observe  # imported here: observing installs and runs the set

        observed = observe(wheels, code, graph, caches=caches, installation=probe.installation)
    recorded = None if isinstance(mode, Probe) else recorded_observation(graph, mode, package_wheel.name, "recorded")
    plan = plan_preload(
        graph, location.path, package_wheel.name, preload_wheels=preload_wheels, observed=observed or recorded
    )
    graph.check_problems(package, package_wheel.name, [*own, *plan.libraries])
    check_shipped(plan.libraries, wheels)
    unseen = None  # why the probe may have missed what the package opens: a warning, and part of the error below
    if observed is not None:
        lazy = unprobed_libraries(graph, location.path, package_wheel.name, plan.libraries, observed)
        if lazy is not None:
            unseen = lazy_warning(
                package_wheel.name, package, observed.probe, lazy, phrasing, recorded_in=observed.recorded_in
            )
            warn(unseen)
    planned = set(plan.libraries)
    for members in stuck_cycles(graph.cycles, graph.providers):
        if planned.issuperset(members):
            warn(
                f"{package_wheel.name}: {package} needs {' <-> '.join(map(str, members))}, which need each other, and "
                "none finds the others inside its own wheel (RPATH/RUNPATH $ORIGIN): the preload skips them (and what "
                "needs them) where they fail to load, as they do with one directory per wheel"
            )
    for glob in plan.unmatched:
        message = f"{package_wheel.name}: preload wheels glob {glob!r} matches no other wheel with shared libraries"
        if strict:
            raise UsageError(message)
        warn(message)
    if not plan.libraries:
        candidates = [] if preload_wheels else runtime_candidates(graph, package_wheel)
        message = f"{package_wheel.name}: {package} needs no shared library from the other wheels given"
        message += f", and {observed_none(observed)}" if observed is not None else ""
        message += ", and no library recorded for it is preloaded" if recorded is not None else ""
        message += "; nothing to preload"
        if candidates:
            message += f" ({runtime_hint(package, candidates, observed, probed=probe is not None)})"
        if strict:  # the run's one line (the CLI shows no warning of a failed run): with the probe's advice
            raise UsageError(message if unseen is None else f"{message}; {unseen}")
        if candidates:
            warn(message)
        return None
    return PackagePreload(location.path, tuple(location.init_members), plan.as_list())
