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
``doctor``, ``patch``, ``split`` and the hub all use it.
"""

from __future__ import annotations

import ast
import codecs
import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, Union

from packaging.utils import canonicalize_name

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.names import glob_problem
from patched_wheels.elf.graph import LibraryGraph, WheelRef, library_members, read_graph
from patched_wheels.elf.order import stuck_cycles
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import InvalidWheelError, UsageError, warn
from patched_wheels.loading.lazyload import is_extension_module, lazy_warning, unprobed_libraries
from patched_wheels.loading.packages import find_package, locate_package, package_libraries
from patched_wheels.loading.preloadmodule import (
    PRELOAD_DATA,
    PRELOAD_MODULE,
    PreloadList,
    all_is_none,
    read_preload_data,
    render_preload_data,
    render_preload_module,
)
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile import WheelFilename, WheelReader
from patched_wheels.wheelfile.metadata import required_projects
from patched_wheels.wheelfile.schemes import data_scheme

if TYPE_CHECKING:
    from patched_wheels.loading.observe import Observation
    from patched_wheels.loading.probe import Installation

_IMPORT_LINE = f"from . import {PRELOAD_MODULE}  # patched-wheels: load shared libraries from other wheels first"
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]")


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


def add_preload_import(init_source: bytes | None, *, where: str) -> bytes:
    """``__init__.py`` with the preload imported first: after the docstring and ``__future__`` imports, which must lead."""
    if init_source is None:
        raise InvalidWheelError(f"{where}: missing; the preload is imported from the package's __init__.py")
    if _IMPORT_LINE.encode() in init_source:
        return init_source
    try:
        tree = ast.parse(init_source)
    except (SyntaxError, ValueError) as error:
        raise InvalidWheelError(f"{where}: cannot parse ({error})") from error
    # A UTF-8 byte order mark must stay the file's first bytes: the line goes after it, not before.
    bom = codecs.BOM_UTF8 if init_source.startswith(codecs.BOM_UTF8) else b""
    lines = init_source[len(bom) :].splitlines(keepends=True)
    insert_at = 0
    for number, line in enumerate(lines[:2], start=1):
        if _CODING_COOKIE.match(line):
            insert_at = number
    for index, node in enumerate(tree.body):
        is_docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (is_docstring or is_future):
            break
        insert_at = max(insert_at, node.end_lineno or 0)
    newline = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    if insert_at and not lines[insert_at - 1].endswith((b"\n", b"\r")):
        lines[insert_at - 1] += newline
    lines.insert(insert_at, _IMPORT_LINE.encode() + newline)
    return bom + b"".join(lines)


def preload_module_member(init_member: str) -> str:
    """Archive path of the generated preload module: next to the package's ``__init__.py``."""
    return f"{init_member.rsplit('/', 1)[0]}/{PRELOAD_MODULE}.py"


def preload_data_member(init_member: str) -> str:
    """Archive path of the preload's data, beside its module: what later runs read back."""
    return f"{init_member.rsplit('/', 1)[0]}/{PRELOAD_DATA}"


def read_installed_preload(read: Callable[[str], bytes | None], init_member: str, wheel: str) -> PreloadList | None:
    """The preload an earlier ``patch``/``split`` put beside ``init_member`` of the wheel file ``wheel`` (None: no
    preload), read from its data file with ``read`` (a member's bytes, None when absent). A module with no data
    beside it was written by a release before the data file: its source is never parsed, so it is refused,
    saying to patch the original wheel again."""
    data_member = preload_data_member(init_member)
    data = read(data_member)
    if data is not None:
        return read_preload_data(data, where=f"{wheel}: {data_member}")
    module_member = preload_module_member(init_member)
    if read(module_member) is not None:
        raise InvalidWheelError(
            f"{wheel}: {module_member} has no {PRELOAD_DATA} beside it (an older patched-wheels wrote it, or not "
            "patched-wheels): patch the original wheel again"
        )
    return None


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
    seen = f", and {observed.probe!r} maps none of them in one site-packages" if observed is not None else ""
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
        f"{package} requires {', '.join(projects)}, which ship shared libraries, but needs none of them through "
        f"DT_NEEDED{seen}: if it opens them itself later (ctypes, dlopen), {ask}; doctor --run compares both layouts"
    )


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


def installed_preload(package_wheel: Path, init_member: str) -> PreloadList | None:
    """The preload a previous ``patch``/``split`` put into the package's wheel, or None."""
    with WheelReader(package_wheel) as reader:
        return read_installed_preload(
            lambda member: reader.read(member) if member in reader else None, init_member, package_wheel.name
        )


@dataclass(frozen=True)
class PackagePreload:
    """A package's preload as a value: what its generated module loads, and the ``__init__.py`` members that
    import it.  :func:`plan_package_preload` makes it, ``patch`` carries it and a split extends it
    (:func:`patched_wheels.patch.split.plan_split`); :func:`rendered_preload_edits` turns it into source once, when
    the wheel is written, so no step reads generated code back."""

    package: str
    """The package's directory (``jax_plugins/xla_cuda12``), which the module's docstring names."""
    init_members: tuple[str, ...]
    """The ``__init__.py`` members (each portion's, for a namespace package) that import the module first; a copy
    of the module lies beside each."""
    entries: PreloadList

    @property
    def module_members(self) -> tuple[str, ...]:
        return tuple(preload_module_member(init_member) for init_member in self.init_members)

    @property
    def data_members(self) -> tuple[str, ...]:
        return tuple(preload_data_member(init_member) for init_member in self.init_members)

    @property
    def written_members(self) -> tuple[str, ...]:
        """The members :func:`rendered_preload_edits` writes: each module and its data."""
        return (*self.module_members, *self.data_members)


def rendered_preload_edits(
    preloads: Sequence[PackagePreload], wheel: str
) -> dict[str, Callable[[bytes | None], bytes]]:
    """Member edits of the wheel file ``wheel`` that write ``preloads``: each module and its data rendered once,
    beside its ``__init__.py``, which imports the module first.  A later preload's files replace an earlier one's
    at the same members (a split's extends the patch's), as :func:`patched_wheels.patch.surgery.patch_wheel`
    expects."""
    latest = {member: preload for preload in preloads for member in preload.written_members}
    rendered = {
        preload: (
            render_preload_module(preload.package, preload.entries),
            render_preload_data(preload.package, preload.entries),
        )
        for preload in dict.fromkeys(latest.values())  # each once, though it writes several members
    }
    edits: dict[str, Callable[[bytes | None], bytes]] = {}
    for member, preload in latest.items():
        module, data = rendered[preload]
        edits[member] = functools.partial(_replaced, data if member.endswith(f"/{PRELOAD_DATA}") else module)
    return {**edits, **preload_import_edits(preloads, wheel)}


def preload_import_edits(preloads: Sequence[PackagePreload], wheel: str) -> dict[str, Callable[[bytes | None], bytes]]:
    """The edits of :func:`rendered_preload_edits` that make each ``__init__.py`` import its preload module first:
    they depend on where the modules go, not on what they load (a split writes them before its graph is read)."""
    return {
        init_member: functools.partial(add_preload_import, where=f"{wheel}: {init_member}")
        for preload in preloads
        for init_member in preload.init_members
    }


def _replaced(content: bytes, _current: bytes | None) -> bytes:
    return content


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
    if graph is None:
        graph = read_graph(wheels, caches=caches, lenient=True)  # check_problems below judges what is unreadable
    phrasing = phrasing or Phrasing.plain(package)
    location = locate_package(package, package_wheel, wheels, phrasing, graph)
    probe = mode if isinstance(mode, Probe) else None
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
            unseen = lazy_warning(package_wheel.name, package, observed.probe, lazy, phrasing)
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
        message += f", and {code!r} maps none in one site-packages" if observed is not None else ""
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
