"""What a package loads in one site-packages: the observation ``preload = "auto"`` adds to the ELF graph.

The ELF graph cannot see a library a package opens itself at run time (JAX's plugin, TensorFlow's
``dlopen("libcudart.so.12")``).  The layout every upstream tests can: the wheels are installed into one
site-packages (:mod:`patched_wheels.loading.probe`), a probe (default ``import PKG``) runs there, and the set's
libraries its process maps are the observation.  Two facts are read from the mapped files' dynamic
symbol tables, so that a preload never makes an import crash that works in one site-packages:

* **extension modules** (a library defining ``PyInit_*``) are never preloaded: importing them is
  Python's business, and loading one early runs nothing but its hazards;
* **needs RTLD_GLOBAL**: a mapped library whose symbols another mapped library uses *without linking
  to it* -- an undefined symbol of that library which neither its own DT_NEEDED closure, its system
  libraries nor the interpreter defines, and which only this one library of the set defines (the
  package loaded it with RTLD_GLOBAL for a module that is underlinked).  Every other preloaded
  library is loaded RTLD_LOCAL: a later DT_NEEDED or ``dlopen`` by SONAME still finds it, and its
  symbols cannot take the place of another library's in what later libraries bind to.

The observation is cached persistently (kind ``observed``; key: the wheels' sha256s, the probe and
the interpreter's cache tag and platform), and is only made where every wheel's tags match this
interpreter: elsewhere the preload falls back to the static graph, with one warning.  A probe that fails
(a non-zero exit status: no driver yet, a missing file) is used for its own run only, never kept: its
failure would become every later run's verdict.

A kept observation (the cache's file, or a hub's ``wheel_facts`` entry) is a claim, and only what a run
cannot derive from the wheels is taken from it: which libraries of the set the probe mapped.  The rest is
derived again, from the wheels, before it is believed (:func:`_disagreement`): the extension modules and
the libraries needing RTLD_GLOBAL are read from the mapped libraries' own symbol tables (those the graph read
in its pass over the members, :attr:`~patched_wheels.elf.graph.LibraryGraph.symbols`; a member it did not read is
read here), and must be the ones the entry lists; the mapped set must be closed under the set's own
DT_NEEDED edges (a library listed without the library of the set it needs was not mapped so); a failed
probe's entry is refused.  An entry that disagrees is one warning naming its file, and the probe runs again.
What no check short of running the probe can see stays believed: a listed library of the set that the
probe does not map (with what it needs), or one it maps left out with whatever needs it; such a library
is preloaded RTLD_LOCAL, and skipped where it fails to load (see docs/caches-and-trust.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping, Sequence

from packaging.tags import sys_tags

from patched_wheels.base.cache import OFF, CacheContext, is_int
from patched_wheels.base.fsutil import hash_file
from patched_wheels.base.timings import phase
from patched_wheels.elf.graph import LibraryGraph, WheelRef, library_members
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.elf.symbols import NO_SYMBOLS, NameBudget, SymbolTable, read_member_symbols, read_symbols
from patched_wheels.elf.syslibs import ld_so_cache, system_library_names
from patched_wheels.errors import warn
from patched_wheels.loading.layout import FLAT
from patched_wheels.wheelfile import WheelFilename, ZipMember
from patched_wheels.wheelfile.schemes import data_scheme

if TYPE_CHECKING:
    from patched_wheels.loading.probe import Installation

KIND = "observed"
"""The cache kind of observations (one of :data:`patched_wheels.base.cache.RECORDED_KINDS`)."""
_SCHEMA = 2  # 2: one site-packages is a virtual environment (observations of the PYTHONPATH run missed libraries)
_MAX_ENTRY = 16 << 20
# A run keeps an error line of at most 8 KiB (see probe.py); a longer cached one is not a row this module wrote.
_MAX_ERROR = 8 << 10
_SHOWN = 3  # libraries a disagreement names
Key = tuple[str, str]
"""(wheel file name, install path): one library of the set."""


@dataclass(frozen=True)
class Observation:
    """What a probe mapped in one site-packages, and what the dynamic symbol tables say about it."""

    probe: str
    mapped: frozenset[Key]
    extensions: frozenset[Key] = frozenset()
    """Mapped Python extension modules (they define ``PyInit_*``): never preloaded."""
    needs_global: frozenset[Key] = frozenset()
    """Mapped libraries another mapped library uses without linking to them: preloaded RTLD_GLOBAL."""
    returncode: int = 0
    error_line: str | None = None
    source: str = field(default="", compare=False)
    """Where it was read from, as warnings name it (a cache file, a facts file's entry); empty: made by this run."""

    @property
    def recorded_in(self) -> str:
        """`` (read from SOURCE)`` for a message whose verdict comes from a kept observation; empty for this run's."""
        return f" (read from {self.source})" if self.source else ""

    def has(self, library: ElfLibrary, of: Collection[Key]) -> bool:
        return (library.wheel, library.path) in of


def tag_mismatch(wheels: Iterable[str]) -> str | None:
    """The first of ``wheels`` (file names) this interpreter cannot install, or None when all match."""
    supported = set(sys_tags())
    for wheel in wheels:
        if not set(WheelFilename.parse(wheel).tags) & supported:
            return wheel
    return None


def observe(
    wheels: Sequence[Path | WheelRef],
    probe: str,
    graph: LibraryGraph,
    *,
    caches: CacheContext = OFF,
    installation: Installation | None = None,
) -> Observation | None:
    """Run ``probe`` with ``wheels`` in one site-packages (or take the observation ``caches`` hold, once checked
    against the wheels: see the module docstring); None, with one warning, where that cannot be done here (tags of
    another interpreter, a wheel that was not fetched).  ``installation``: the wheels already installed with a flat
    layout (``doctor --run``), used instead of a new one.  Only an observation whose probe passed is kept."""
    refs = [WheelRef.of(wheel) for wheel in wheels]
    mismatch = tag_mismatch(ref.filename for ref in refs)
    if mismatch is not None:
        warn(
            f"{mismatch}: its tags do not match this interpreter, so the probe cannot run here; the preload "
            "comes from the ELF graph only (libraries the package opens itself at run time are not in it)"
        )
        return None
    digests = (
        {ref.filename: ref.sha256 or (hash_file(ref.path) if ref.path else "") for ref in refs} if caches.root else {}
    )
    entry = None
    if caches.root is not None and all(digests.values()):
        entry = f"{_key(sorted(digests.values()), probe)}.json"
        cached = caches.read(KIND, entry, max_bytes=_MAX_ENTRY)
        if cached is not None:
            where = caches.where(KIND, entry)
            observation = _from_json(cached, probe, digests, graph)
            problem = "not an observation of this wheel set" if observation is None else None
            if observation is not None:
                with phase("probe: check the kept observation"):
                    problem = _disagreement(observation, graph, refs)
            if observation is not None and problem is None:
                return replace(observation, source=where)
            warn(f"{where}: cache entry ignored ({problem}); running the probe again")
            caches.refuse(KIND, entry)
    unfetched = [ref.filename for ref in refs if ref.path is None]
    if unfetched:
        warn(f"{unfetched[0]}: not fetched, so the probe cannot run; the preload comes from the ELF graph only")
        return None
    observation = _run(refs, probe, graph, installation)
    if observation is None:
        return None
    if entry is not None and observation.returncode == 0:  # a failed probe is this run's, never a later one's
        caches.write(KIND, entry, _to_json(observation, digests))
    return _warn_if_failed(observation)


def is_observed(digests: Sequence[str], probe: str, caches: CacheContext) -> bool:
    """Whether ``caches`` hold a readable observation of ``probe`` on the wheel set of these sha256s, of a probe
    that passed.

    For the hub, before the set is installed for a probe: an observation found need not be made.  It is
    still checked against the wheels when :func:`observe` reads it (and the set installed then if it fails).
    """
    if caches.root is None or not digests:
        return False
    value = caches.read(KIND, f"{_key(sorted(digests), probe)}.json", max_bytes=_MAX_ENTRY)
    return isinstance(value, dict) and is_int(value.get("returncode")) and value["returncode"] == 0


def _warn_if_failed(observation: Observation) -> Observation:
    """A probe that fails in one site-packages still shows what it mapped up to there; say it failed."""
    if observation.returncode != 0:
        warn(
            f"probe {observation.probe!r} exits with status {observation.returncode} in one site-packages "
            f"({observation.error_line or 'no error line'}); the preload includes what it mapped until then"
        )
    return observation


def _key(digests: Sequence[str], probe: str) -> str:
    interpreter = [sys.implementation.cache_tag, sysconfig.get_platform()]
    return hashlib.sha256(json.dumps([_SCHEMA, list(digests), probe, interpreter]).encode()).hexdigest()


def _run(
    refs: Sequence[WheelRef], probe: str, graph: LibraryGraph, installation: Installation | None
) -> Observation | None:
    """The observation of one run of ``probe``; None, with one warning, when the run ended without recording
    what it mapped (a crash: what an earlier run recorded is never taken for it)."""
    if installation is None:
        from patched_wheels.loading.probe import installed  # imported here: installing is what observing costs

        with ExitStack() as stack:
            with phase("probe: install"):
                installation = stack.enter_context(
                    installed([ref.path for ref in refs if ref.path is not None], (FLAT,))
                )
            observation = _run(refs, probe, graph, installation)
            with phase("probe: remove"):
                stack.close()
            return observation
    with phase("probe: run"):
        result = installation.run(FLAT, probe, graph)
    if result.mapped is None:
        warn(
            f"probe {probe!r} ended with status {result.returncode} in one site-packages without running its exit "
            f"hooks ({result.error_line or 'no error line'}): what it mapped cannot be known, so the preload comes "
            "from the ELF graph only"
        )
        return None
    mapped = result.mapped
    with phase("probe: symbols"):  # the tables the graph read with the libraries, else the installed files'
        tables = _tables(mapped, graph, lambda library, budget: read_symbols(installation.file(FLAT, library), budget))
        extensions, needs_global = _derived(graph, tables)
    return Observation(probe, frozenset(_keys(mapped)), extensions, needs_global, result.returncode, result.error_line)


def _keys(libraries: Iterable[ElfLibrary]) -> set[Key]:
    return {(library.wheel, library.path) for library in libraries}


def _derived(graph: LibraryGraph, symbols: Mapping[ElfLibrary, SymbolTable]) -> tuple[frozenset[Key], frozenset[Key]]:
    """The extension modules and the libraries needing RTLD_GLOBAL among the mapped libraries whose symbol tables
    (defined, undefined names) ``symbols`` holds: what a run derives, and what a kept observation must list."""
    system = _SystemSymbols()
    extensions = {
        library for library, (defined, _) in symbols.items() if any(name.startswith("PyInit_") for name in defined)
    }
    needs_global = libraries_needing_global(graph, symbols, system.defined_by, system.interpreter())
    return frozenset(_keys(extensions)), frozenset(_keys(needs_global))


def _disagreement(observation: Observation, graph: LibraryGraph, refs: Sequence[WheelRef]) -> str | None:
    """Why a kept ``observation`` (of the right form, naming libraries of ``graph``) is not what a run of its probe
    here would give, as far as the wheels tell; None when nothing contradicts it.  What is checked, cheapest first:

    * its probe passed (a failure is never kept; a kept one is no verdict for a later run);
    * the mapped libraries are closed under the set's DT_NEEDED edges (:func:`_unclosed`);
    * its extension modules and the libraries needing RTLD_GLOBAL are those the mapped libraries' symbol tables,
      read from the wheels, give (:func:`_derived`), as this machine's system libraries and interpreter define
      their names.

    Not checked (no run, no check): that the probe maps every library listed, nor that it maps no other."""
    if observation.returncode != 0:
        return (
            f"its probe exited with status {observation.returncode} ({observation.error_line or 'no error line'}); "
            "an observation of a failed probe is never kept"
        )
    by_key = {(library.wheel, library.path): library for library in graph.libraries}
    mapped = [by_key[key] for key in sorted(observation.mapped)]
    problem = _unclosed(mapped, graph)
    if problem is not None:
        return problem
    files = {ref.filename: ref.path for ref in refs}
    unfetched = sorted({library.wheel for library in mapped if files.get(library.wheel) is None})
    if unfetched:
        return f"{unfetched[0]} is not at hand, so its libraries' symbol tables cannot be read to check it"
    extensions, needs_global = _derived(graph, _member_symbols(mapped, graph, files))
    for name, listed, derived in (
        ("extensions", observation.extensions, extensions),
        ("global", observation.needs_global, needs_global),
    ):
        if listed != derived:
            return f"its {name} list {_shown(listed)}, the mapped libraries' symbol tables give {_shown(derived)}"
    return None


def _shown(keys: Collection[Key]) -> str:
    """Libraries as a disagreement names them: install paths, sorted, the first few."""
    paths = sorted(path for _, path in keys)
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return f"({', '.join(paths[:_SHOWN])}{more})" if paths else "none"


def _unclosed(mapped: Sequence[ElfLibrary], graph: LibraryGraph) -> str | None:
    """Why the loader cannot have mapped the libraries ``mapped`` (of the set) together, or None.

    A mapped library's DT_NEEDED name that a library of the set answers was answered, in the probe's process, by
    a library it mapped: one of the set (then listed: its SONAME or file name is the name), or a file outside the set,
    which only this machine's system libraries (ld.so.cache, the default directories, the GPU driver's) or a
    directory outside site-packages that a search path or the interpreter names can be.  A name none of those
    answers is a library listed without what it needs (an edited entry: the preload would then leave out what it
    needs).  A search path this cannot follow (``$LIB``, a relative entry, an ``$ORIGIN`` entry leaving
    site-packages) lets every name through.  A name no library of the set answers is not judged: an observation
    recorded where a system library exists (a GPU machine) is right there, and its library merely fails to load
    here (a preload skips it)."""
    answered = {name for library in mapped for name in (library.soname, library.filename) if name}
    system: frozenset[str] | None = None
    directories: set[str] | None = None
    for library in mapped:
        for name, provider in graph.providers[library].items():
            if name in answered:
                continue
            if system is None:
                system, directories = system_library_names(), _outside_directories(mapped)
            if (
                name in system
                or directories is None
                or any(os.path.exists(os.path.join(directory, name)) for directory in directories)
            ):
                continue
            return (
                f"it lists {library.path} ({library.wheel}) as mapped but not {provider.path} ({provider.wheel}), "
                f"which the loader maps for its DT_NEEDED {name}"
            )
    return None


def _outside_directories(mapped: Sequence[ElfLibrary]) -> set[str] | None:
    """The directories outside the set where the loader may have found a mapped library's dependency: every absolute
    RPATH/RUNPATH entry of a mapped library (DT_RPATH is searched for what a library's dependencies need, too), and
    the interpreter's library directories (its own DT_RPATH, what it loaded itself); None when a search path names a
    place this cannot tell (see :func:`_unclosed`)."""
    directories = {
        directory
        for directory in (
            sysconfig.get_config_var("LIBDIR"),
            os.path.join(sys.base_prefix, "lib"),
            os.path.join(sys.prefix, "lib"),
            os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))), "lib"),
        )
        if directory
    }
    for library in mapped:
        if data_scheme(library.path) and library.search_path:
            return None  # installed outside site-packages: its $ORIGIN is not the set's
        for entry in library.search_path:
            if entry.startswith("/") and "$" not in entry:
                directories.add(entry)
                continue
            for origin in ("$ORIGIN", "${ORIGIN}"):
                if entry == origin or entry.startswith(origin + "/"):
                    inside = posixpath.normpath(
                        posixpath.join(posixpath.dirname(library.path), entry[len(origin) :].lstrip("/"))
                    )
                    break
            else:
                return None
            if inside == ".." or inside.startswith("../") or "$" in inside:
                return None  # leaves site-packages (or names another token): what lies there is not the set's
    return directories


def _member_symbols(
    libraries: Sequence[ElfLibrary], graph: LibraryGraph, files: Mapping[str, Path | None]
) -> dict[ElfLibrary, SymbolTable]:
    """:func:`_tables` of ``libraries``, those the graph did not read read from their wheels' members (``files``: each
    wheel's file)."""
    members: dict[str, dict[str, ZipMember]] = {}
    for wheel in sorted({library.wheel for library in libraries if library not in graph.symbols}):
        file = files[wheel]
        assert file is not None  # checked by the caller
        members[wheel] = {path: info for info, path in library_members(file)}

    def read(library: ElfLibrary, budget: NameBudget) -> SymbolTable:
        info, file = members[library.wheel].get(library.path), files[library.wheel]
        if info is None or file is None:  # a row the graph holds is a member (checked when it was read)
            return NO_SYMBOLS
        return read_member_symbols(file, info, library.path, budget)

    return _tables(libraries, graph, read)


def _tables(
    libraries: Sequence[ElfLibrary], graph: LibraryGraph, read: Callable[[ElfLibrary, NameBudget], SymbolTable]
) -> dict[ElfLibrary, SymbolTable]:
    """The symbol table of each of ``libraries``: the one ``graph`` read with it, else ``read``'s, a library per thread
    (inflating leaves the interpreter lock), all within one :class:`~patched_wheels.elf.symbols.NameBudget`.  Where
    those read do not fit it, none is used (one warning): every library then has no symbols, whichever was read first."""
    tables = {library: graph.symbols[library] for library in libraries if library in graph.symbols}
    unread = [library for library in libraries if library not in tables]
    if not unread:
        return tables
    budget = NameBudget()
    with ThreadPoolExecutor(max_workers=min(len(unread), os.cpu_count() or 1)) as pool:
        tables.update(zip(unread, pool.map(lambda library: read(library, budget), unread)))
    if budget.spent:
        warn(
            f"the symbol tables of the {len(libraries)} libraries the probe maps hold more names than this tool reads "
            "for one set: none is read, so no library is taken for an extension module or preloaded RTLD_GLOBAL"
        )
        return dict.fromkeys(libraries, NO_SYMBOLS)
    return tables


def libraries_needing_global(
    graph: LibraryGraph,
    symbols: Mapping[ElfLibrary, SymbolTable],
    system_defined: Callable[[str], frozenset[str]],
    interpreter: frozenset[str],
) -> set[ElfLibrary]:
    """The libraries of ``symbols`` (defined, undefined names of each mapped library) that another one uses
    without linking to them: see the module docstring.  ``system_defined``: the names a system library
    (by DT_NEEDED name) defines; ``interpreter``: the names the interpreter exports."""
    providers: dict[str, list[ElfLibrary]] = {}
    for library, (defined, _) in symbols.items():
        for name in defined:
            providers.setdefault(name, []).append(library)
    needed: set[ElfLibrary] = set()
    for library, (_, undefined) in symbols.items():
        closure = graph.closure([library])
        reachable: set[str] = set(interpreter)
        for member in closure:
            reachable |= symbols.get(member, (frozenset(), frozenset()))[0]
            for name in graph.system[member]:
                reachable |= system_defined(name)
        for name in undefined - reachable:
            candidates = [provider for provider in providers.get(name, ()) if provider != library]
            if len(candidates) == 1:
                needed.add(candidates[0])
    return needed


class _SystemSymbols:
    """Defined names of system libraries (found as the loader would, through ld.so.cache) and of this interpreter."""

    def __init__(self) -> None:
        self._paths: dict[str, str] | None = None
        self._defined: dict[str, frozenset[str]] = {}

    def _cache_paths(self) -> dict[str, str]:
        if self._paths is None:
            self._paths = {name: path for name, path in ld_so_cache().items() if os.path.exists(path)}
        return self._paths

    def defined_by(self, name: str) -> frozenset[str]:
        if name not in self._defined:
            path = self._cache_paths().get(name)
            self._defined[name] = read_symbols(path)[0] if path else frozenset()
        return self._defined[name]

    def interpreter(self) -> frozenset[str]:
        """What the interpreter exports to every extension module (its executable, and libpython if shared)."""
        names = set(read_symbols(sys.executable)[0])
        library = sysconfig.get_config_var("LDLIBRARY") or ""
        directory = sysconfig.get_config_var("LIBDIR") or ""
        if (
            sysconfig.get_config_var("Py_ENABLE_SHARED")
            and library
            and os.path.exists(os.path.join(directory, library))
        ):
            names |= read_symbols(os.path.join(directory, library))[0]
        return frozenset(names)


def _to_json(observation: Observation, digests: Mapping[str, str]) -> dict[str, object]:
    """Rows name wheels by sha256, so a renamed copy of the set hits."""

    def rows(keys: Iterable[Key]) -> list[list[str]]:
        return sorted([digests[wheel], path] for wheel, path in keys)

    return {
        "schema": _SCHEMA,
        "probe": observation.probe,
        "mapped": rows(observation.mapped),
        "extensions": rows(observation.extensions),
        "global": rows(observation.needs_global),
        "returncode": observation.returncode,
        "error": observation.error_line,
    }


def _from_json(value: object, probe: str, digests: Mapping[str, str], graph: LibraryGraph) -> Observation | None:
    """A cached observation, if it has the shape :func:`_to_json` writes and names only libraries of this set."""
    by_digest = {digest: wheel for wheel, digest in digests.items()}
    known = {(library.wheel, library.path) for library in graph.libraries}
    if (
        not isinstance(value, dict)
        or not is_int(value.get("schema"))
        or value["schema"] != _SCHEMA
        or value.get("probe") != probe
    ):
        return None
    returncode, error = value.get("returncode"), value.get("error")
    if not is_int(returncode) or not (error is None or isinstance(error, str) and len(error) <= _MAX_ERROR):
        return None
    sets: dict[str, frozenset[Key]] = {}
    for name in ("mapped", "extensions", "global"):
        rows = value.get(name)
        if not isinstance(rows, list):
            return None
        keys = set()
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2 and all(isinstance(item, str) for item in row)):
                return None
            if row[0] not in by_digest:
                return None
            key = (by_digest[row[0]], row[1])
            if key not in known:
                return None
            keys.add(key)
        sets[name] = frozenset(keys)
    if not (sets["extensions"] | sets["global"]) <= sets["mapped"]:
        return None
    return Observation(probe, sets["mapped"], sets["extensions"], sets["global"], returncode, error)
