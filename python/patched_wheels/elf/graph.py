"""The shared-library graph of a set of wheels, read straight from the archives.

Each wheel's libraries are read by :mod:`patched_wheels.elf.read` (or answered by the
ELF cache, :mod:`patched_wheels.elf.cache`, keyed by the wheel's sha256).  Each
DT_NEEDED name is resolved to a library of the set (by SONAME first, then by file
name); names no wheel provides are "system" dependencies: reported, never followed.
The libraries are then ordered dependencies first, which is what a preload needs; libraries that need
each other (a cycle, such as pillow 13's ``libfreetype`` and ``libharfbuzz``) are legal, as they are
to the dynamic loader, and are ordered as one (see :mod:`patched_wheels.elf.order`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import SHA256_HEX, resolved_path
from patched_wheels.elf.cache import ElfCache, wheel_problem
from patched_wheels.elf.order import components_load_order, order_key, strong_components
from patched_wheels.elf.read import (
    ElfLibrary,
    is_shared_library_name,
    read_installed_library,
    read_library,
    starts_as_elf,
)
from patched_wheels.elf.symbols import NameBudget, SymbolTable, read_library_and_symbols
from patched_wheels.errors import ElfError, UsageError, warn
from patched_wheels.wheelfile import WheelReader, ZipMember
from patched_wheels.wheelfile.schemes import data_scheme, install_path


@dataclass(frozen=True)
class WheelRef:
    """One wheel of a set: the file name the graph reports it under, its sha256 and its file, each when known.

    The sha256 keys the ELF cache, so a wheel whose rows are cached needs no file (the hub does not fetch
    it); without one, the file is hashed.  A wheel with neither a file nor cached rows cannot be read.
    """

    filename: str
    sha256: str = ""
    """Hex digest of the file; empty: hash ``path`` when a cache is used."""
    path: Path | None = None

    def __post_init__(self) -> None:
        if self.sha256 and not SHA256_HEX.fullmatch(self.sha256):
            raise UsageError(f"{self.filename}: sha256 {self.sha256!r} is not 64 lowercase hex digits")
        if self.path is not None and self.path.name != self.filename:
            raise UsageError(f"{self.path}: named {self.filename} in the wheel set; the file must have that name")

    @classmethod
    def of(cls, wheel: Path | str | WheelRef) -> WheelRef:
        """``wheel`` itself, or a file named by its path (its digest computed when needed)."""
        if isinstance(wheel, WheelRef):
            return wheel
        path = Path(wheel)
        return cls(path.name, path=path)


@dataclass(frozen=True)
class WheelScan:
    """The libraries of a set of wheels plus what it cost to find them."""

    libraries: tuple[ElfLibrary, ...]
    inflated_bytes: int
    """Bytes inflated in this run (0 for wheels answered from the cache)."""
    cached_wheels: int
    problems: Mapping[str, LibraryProblem] = field(default_factory=dict)
    """Per wheel file name, its first library (by path) that cannot be read; its other libraries are listed."""
    symbols: Mapping[ElfLibrary, SymbolTable] = field(default_factory=dict)
    """The symbol tables read with the libraries (:func:`scan_wheels`'s ``symbols``)."""


@dataclass(frozen=True)
class LibraryProblem:
    """A library of a wheel that cannot be read (not ELF, truncated, ...): left out of the graph."""

    path: str
    """Its install path."""
    message: str
    """The error, one line naming the wheel and the member."""


@dataclass(frozen=True)
class LibraryGraph:
    """Libraries, their resolved dependency edges and a deps-first load order."""

    libraries: tuple[ElfLibrary, ...]
    dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]]
    """Resolved DT_NEEDED of each library, in DT_NEEDED order."""
    system: Mapping[ElfLibrary, tuple[str, ...]]
    """DT_NEEDED names no library of the set provides (libc, libcuda, ...)."""
    providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
    """For each library, the library of the set each resolved DT_NEEDED name stands for."""
    load_order: tuple[ElfLibrary, ...]
    """Every library after all of its dependencies, but for the members of a cycle (libraries that need
    each other, which the dynamic loader accepts): each cycle after everything it needs, its members
    together in the order of :func:`patched_wheels.elf.order.cycle_order`; ties broken by (path, wheel)."""
    cycles: tuple[tuple[ElfLibrary, ...], ...] = ()
    """The libraries that need each other (strongly connected components of two or more), each in load order."""
    problems: Mapping[str, LibraryProblem] = field(default_factory=dict)
    """Wheels with a library that cannot be read (see :func:`read_graph`'s ``lenient``)."""
    symbols: Mapping[ElfLibrary, SymbolTable] = field(default_factory=dict, compare=False, repr=False)
    """The dynamic symbol tables of the libraries read from their wheels in this run, where asked for
    (:func:`read_graph`'s ``symbols``): a kept observation is checked with them instead of inflating the members
    again (:mod:`patched_wheels.elf.symbols`).  A library whose table could not be read in that pass, or whose rows
    came from the cache unread, has none here."""
    _warned: set[str] = field(default_factory=set, compare=False, repr=False)
    """Wheels whose problem :meth:`check_problems` has warned about: once per graph (the hub reads one for every spec)."""

    def closure(self, roots: Iterable[ElfLibrary]) -> set[ElfLibrary]:
        """``roots`` plus everything they need, transitively."""
        seen: set[ElfLibrary] = set()
        stack = list(roots)
        while stack:
            library = stack.pop()
            if library not in seen:
                seen.add(library)
                stack.extend(self.dependencies[library])
        return seen

    def vendored_copies(self, name: str, wheel: str) -> tuple[ElfLibrary, ...]:
        """The private copies (:func:`is_vendored`) of the library ``name`` that wheels other than ``wheel`` ship:
        why a DT_NEEDED of ``wheel`` they would answer is still looked for on the system. Matched by SONAME or file
        name with the hash a vendoring tool inserts taken out (auditwheel's ``libz-a1b2c3d4.so.1``)."""
        return tuple(copy for copy in self._vendored.get(_unhashed(name), ()) if copy.wheel != wheel)

    @functools.cached_property
    def _vendored(self) -> dict[str, list[ElfLibrary]]:
        """Every private copy by its names with the hash taken out: made once, asked once per system name."""
        copies: dict[str, list[ElfLibrary]] = {}
        for library in self.libraries:
            if is_vendored(library):
                for name in {_unhashed(library.filename), _unhashed(library.soname or library.filename)}:
                    copies.setdefault(name, []).append(library)
        return copies

    def ordered(self, libraries: Iterable[ElfLibrary]) -> list[ElfLibrary]:
        """``libraries`` in load order."""
        wanted = set(libraries)
        return [library for library in self.load_order if library in wanted]

    def check_problems(
        self, package: str, package_wheel: str, used: Iterable[ElfLibrary], *, warn_others: bool = True
    ) -> None:
        """Fail on an unreadable library ``package`` may need; one warning for each other wheel with one.

        ``used``: what the package's own libraries and its preload are (their closure is taken).  A wheel
        is needed when it is the package's, ships one of those libraries (an unreadable one beside them
        may be what they open), or its unreadable library has the file name of a DT_NEEDED none of them
        resolved.  Any other wheel's problem cannot change the package's preload: a lock's bystander
        (a wheel nobody here patches) must not fail the hub, ``patch`` or ``doctor``.  ``warn_others`` false:
        only fail (a check before a probe runs, whose observation may yet add libraries to ``used``).
        """
        closure = self.closure(used)
        wheels = {package_wheel} | {library.wheel for library in closure}
        unresolved = {name for library in closure for name in self.system[library]}
        for wheel, problem in sorted(self.problems.items()):
            if wheel in wheels or posixpath.basename(problem.path) in unresolved:
                raise ElfError(problem.message)
        for wheel, problem in sorted(self.problems.items()) if warn_others else ():
            if wheel not in self._warned:
                self._warned.add(wheel)
                warn(f"{problem.message}; {package} needs nothing of {wheel}: left out of its library graph")


def library_members(wheel: Path) -> list[tuple[ZipMember, str]]:
    """The shared libraries of ``wheel`` with their install paths, once the wheel passed the checks
    of a wheel we accept (safe member paths, RECORD, names and versions).  Outside site-packages (data
    scheme) only ELF files count: a ``.so``-named data file need not be a library."""
    with WheelReader(wheel) as reader:
        members = []
        for name in reader.members():
            path = install_path(name)
            if path is None or name.endswith("/") or not is_shared_library_name(path):
                continue
            info = reader.info(name)
            if data_scheme(path) and not starts_as_elf(wheel, info):
                continue
            members.append((info, path))
    return members


def scan_wheels(
    wheels: Sequence[Path | str | WheelRef],
    *,
    caches: CacheContext = OFF,
    workers: int | None = None,
    installed: Callable[[str, str], Path | None] | None = None,
    symbols: bool = False,
) -> WheelScan:
    """Read the dynamic section of every shared library in ``wheels``.

    ``installed``: (wheel file name, install path) -> the member's installed copy, or None; a library
    with a copy is read from it rather than inflated (the hub's probe installs the set first).  ``symbols``:
    each library read also has its symbol table read (:func:`~patched_wheels.elf.symbols.read_library_and_symbols`:
    its section headers in the same pass, then up to the table), for a kept observation's check.

    With ``caches`` (:class:`~patched_wheels.base.cache.CacheContext`), rows cached for a wheel (by sha256) are
    claims: each becomes a path or an edge of every preload, so a wheel at hand is read all the same and its
    rows must be what its members' dynamic sections say (:func:`~patched_wheels.elf.cache.wheel_problem`); one
    that disagrees is one warning naming the entry (the facts file's, or the cache file) and the wheel, and
    the wheel's own rows are used and stored.  Only a wheel the hub did not fetch, named by its sha256 alone,
    takes rows unread: the cache's own files' (trusted as their owner), never a facts file's.  A wheel given
    by its file alone (no sha256: the commands) is read and neither hashed nor cached: its rows would be
    read all the same, so a key would cost a pass over the file and spare nothing.
    Members are inflated largest first on ``workers`` threads (default: one
    per core), so the biggest library never starts last and leaves a core idle.  A library that cannot be
    read is no error here: it goes to :attr:`WheelScan.problems` (see :func:`read_graph`).
    """
    with _Scan(wheels, caches=caches, workers=workers, installed=installed, symbols=symbols) as scan:
        return scan.finish()


class _Scan:
    """:func:`scan_wheels` under way: made, it has listed every wheel's libraries (:attr:`listed`) and started
    inflating them on the worker threads; :meth:`finish` waits for them and judges the rows; leaving the ``with``
    ends the threads (a library not started yet is not read)."""

    def __init__(
        self,
        wheels: Sequence[Path | str | WheelRef],
        *,
        caches: CacheContext = OFF,
        workers: int | None = None,
        installed: Callable[[str, str], Path | None] | None = None,
        symbols: bool = False,
    ) -> None:
        refs = list(
            {(resolved_path(ref.path) if ref.path else ref.filename): ref for ref in map(WheelRef.of, wheels)}.values()
        )
        names = [ref.filename for ref in refs]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise UsageError(f"{duplicates[0]}: two different files with this name are given")
        for ref in refs:
            if ref.path is not None and not ref.path.is_file():
                raise UsageError(f"{ref.path}: no such wheel")
        self._refs = refs
        self._cache = cache = None if caches.root is None else ElfCache(caches)
        self._found: dict[str, list[ElfLibrary]] = {}
        self._claimed: dict[str, list[ElfLibrary]] = {}
        self._scanned: list[WheelRef] = []
        jobs: list[tuple[Path, ZipMember, str]] = []
        for ref in refs:
            digest = ref.sha256
            # A facts entry only for a wheel at hand: rows without their wheel cannot be checked.
            cached = (
                None if cache is None or not digest else cache.load(digest, ref.filename, given=ref.path is not None)
            )
            if ref.path is None:
                if cached is None:
                    raise UsageError(
                        f"{ref.filename}: no file given, and no ELF rows are cached for its sha256 {digest or '(none)'}"
                    )
                self._found[ref.filename] = cached
                continue
            if cached is not None:
                self._claimed[ref.filename] = cached
            self._found[ref.filename] = []
            self._scanned.append(ref)
            jobs.extend((ref.path, info, install) for info, install in library_members(ref.path))
        jobs.sort(key=lambda job: (-job[1].file_size, job[0].name, job[1].filename))
        self._jobs = jobs
        listed: dict[str, list[str]] = {name: [library.path for library in rows] for name, rows in self._found.items()}
        for wheel, _, path in jobs:
            listed[wheel.name].append(path)
        self.listed: Mapping[str, tuple[str, ...]] = {name: tuple(sorted(paths)) for name, paths in listed.items()}
        """Per wheel file name, the install paths of its libraries (cached rows', or the members being read)."""

        self._budget = NameBudget() if symbols else None

        def read(job: tuple[Path, ZipMember, str]) -> tuple[ElfLibrary | ElfError | None, SymbolTable | None]:
            return _read_or_problem(job, None if installed is None else installed(job[0].name, job[2]), self._budget)

        self._results, self._stop = _start_on_threads(read, jobs, workers or os.cpu_count() or 1)

    def __enter__(self) -> _Scan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()

    def finish(self) -> WheelScan:
        """Every library read (waiting for the threads), the cache's rows checked and stored."""
        refs, cache, found, claimed, jobs = self._refs, self._cache, self._found, self._claimed, self._jobs
        problems: dict[str, LibraryProblem] = {}
        symbols: dict[ElfLibrary, SymbolTable] = {}
        shipped: dict[str, dict[str, ElfLibrary | str]] = {ref.filename: {} for ref in self._scanned}
        for (wheel, _, path), (library, table) in zip(jobs, self._results):
            if isinstance(library, ElfError):
                shipped[wheel.name][path] = str(library)
                if wheel.name not in problems or path < problems[wheel.name].path:
                    problems[wheel.name] = LibraryProblem(path, str(library))
            elif library is not None:  # None: an installed data-scheme copy that is not ELF, so no library
                shipped[wheel.name][path] = library
                found[library.wheel].append(library)
                if table is not None:
                    symbols[library] = table
        if self._budget is not None and self._budget.spent:  # some were dropped: none is kept (see NameBudget)
            symbols = {}
        believed = 0
        for ref in self._scanned:
            found[ref.filename].sort(key=lambda library: library.path)
            if cache is None or not ref.sha256:
                continue
            rows = claimed.get(ref.filename)
            problem = None if rows is None else wheel_problem(ref.filename, shipped[ref.filename], rows)
            if rows is not None and problem is None:
                believed += 1
                continue
            if problem is not None:
                cache.refuse(ref.sha256, problem)
            # A wheel with an unreadable library is not cached: its rows would list less than the wheel ships.
            if ref.filename not in problems:
                cache.store(ref.sha256, found[ref.filename])
        libraries = tuple(library for ref in refs for library in found[ref.filename])
        cached_wheels = len(refs) - len(self._scanned) + believed
        return WheelScan(libraries, sum(job[1].file_size for job in jobs), cached_wheels, problems, symbols)


def _read_or_problem(
    job: tuple[Path, ZipMember, str], file: Path | None, symbols: NameBudget | None
) -> tuple[ElfLibrary | ElfError | None, SymbolTable | None]:
    """The library of one member (from its installed ``file`` when given), or the error that says why it
    cannot be read (kept for its wheel); None when a data-scheme member is no ELF file (its installed copy
    can be other than the wheel's bytes that :func:`library_members` looked at).  With ``symbols`` (the scan's
    budget of names), beside it its symbol table (None where it was not read in that pass)."""
    wheel, info, path = job
    try:
        if symbols is not None:
            return read_library_and_symbols(wheel, info, path, installed=file, budget=symbols)
        if file is None:
            return read_library(wheel, info, path), None
        return read_installed_library(file, wheel=wheel.name, path=path), None
    except ElfError as error:
        # Kept without its traceback: its frames would keep the reader's tables alive for every unreadable library.
        return error.with_traceback(None), None


_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def _start_on_threads(
    function: Callable[[_Item], _Result], items: Sequence[_Item], workers: int
) -> tuple[Iterator[_Result], Callable[[], None]]:
    """``function`` of each item, started now on up to ``workers`` threads: the results, in order, as they come,
    and what ends the threads (an item not started yet is dropped).  A single item (a split's own wheel, answered
    by the cache) is done by the thread that reads the results: no pool, nor the import of the pool's module."""
    if len(items) <= 1:
        return map(function, items), lambda: None
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)))
    return pool.map(function, items), lambda: pool.shutdown(cancel_futures=True)


class _Candidates:
    """The libraries that answer to one DT_NEEDED name (a SONAME, or a file name), indexed once for :meth:`pick`:
    by (path, wheel), each wheel's apart, and those that are no vendored copy (:func:`is_vendored`)."""

    def __init__(self, libraries: Sequence[ElfLibrary]) -> None:
        ordered = sorted(libraries, key=order_key)  # stable: equal keys keep the input order, as min() did
        self._by_wheel: dict[str, list[ElfLibrary]] = {}
        for library in ordered:
            self._by_wheel.setdefault(library.wheel, []).append(library)
        self._shared = [library for library in ordered if not is_vendored(library)]

    def pick(self, library: ElfLibrary) -> ElfLibrary | None:
        """The provider of the name for ``library``: one from the same wheel if any, else the first by (path, wheel)
        that is not another wheel's vendored copy; never ``library`` itself.  Each scan stops at its first match, past
        only ``library`` (and rows equal to it): a few candidates visited, however many share the name."""
        same_wheel = self._by_wheel.get(library.wheel, ())
        found = next((candidate for candidate in same_wheel if candidate != library), None)
        if found is None:
            found = next((candidate for candidate in self._shared if candidate.wheel != library.wheel), None)
        return found


_VENDORING_HASH = re.compile(r"[-.][0-9a-f]{8}(?=\.so)")
"""The hash auditwheel (``-a1b2c3d4``) and others (``.def23b81``) put into a copy's file name and SONAME."""


def _unhashed(name: str) -> str:
    return _VENDORING_HASH.sub("", name, count=1)


def is_vendored(library: ElfLibrary) -> bool:
    """Whether ``library`` is a wheel's private copy of a system library, in a top-level ``<name>.libs/`` folder as
    auditwheel (and delvewheel-like tools) place them, e.g. ``torchvision.libs/libz.def23b81.so.1``. Only its own
    wheel links it (by a renamed SONAME or an RPATH): another wheel's library that needs ``libz.so.1`` gets the
    system's in one site-packages, so a preload must not load this copy for it."""
    top, _, rest = library.path.partition("/")
    return top.endswith(".libs") and "/" not in rest


def build_graph(
    libraries: Sequence[ElfLibrary],
    problems: Mapping[str, LibraryProblem] | None = None,
    symbols: Mapping[ElfLibrary, SymbolTable] | None = None,
) -> LibraryGraph:
    """Resolve DT_NEEDED edges and order the libraries deps first, each cycle as one (see :attr:`LibraryGraph.load_order`)."""
    by_soname: dict[str, list[ElfLibrary]] = {}
    by_filename: dict[str, list[ElfLibrary]] = {}
    for library in libraries:
        if library.soname:
            by_soname.setdefault(library.soname, []).append(library)
        by_filename.setdefault(library.filename, []).append(library)
    soname_index = {name: _Candidates(candidates) for name, candidates in by_soname.items()}
    filename_index = {name: _Candidates(candidates) for name, candidates in by_filename.items()}
    providers: dict[ElfLibrary, dict[str, ElfLibrary]] = {}
    system: dict[ElfLibrary, tuple[str, ...]] = {}
    for library in libraries:
        resolved: dict[str, ElfLibrary] = {}
        for name in dict.fromkeys(library.needed):  # a repeated name resolves as its first entry did
            by_name = soname_index.get(name)
            provider = by_name.pick(library) if by_name is not None else None
            if provider is None and name in filename_index:
                provider = filename_index[name].pick(library)
            if provider is not None:
                resolved[name] = provider
        providers[library] = resolved
        system[library] = tuple(name for name in library.needed if name not in resolved)
    dependencies = {library: tuple(dict.fromkeys(providers[library].values())) for library in libraries}
    ordered = tuple(sorted(libraries, key=order_key))
    components = strong_components(ordered, dependencies)
    load_order = components_load_order(components, dependencies, providers)
    position = {library: number for number, library in enumerate(load_order)}
    cycles = sorted(
        (tuple(sorted(members, key=position.__getitem__)) for members in components if len(members) > 1),
        key=lambda members: position[members[0]],
    )
    return LibraryGraph(
        ordered, dependencies, system, providers, load_order, tuple(cycles), dict(problems or {}), dict(symbols or {})
    )


def read_graph(
    wheels: Sequence[Path | str | WheelRef],
    *,
    caches: CacheContext = OFF,
    workers: int | None = None,
    lenient: bool = False,
    installed: Callable[[str, str], Path | None] | None = None,
    symbols: bool = False,
) -> LibraryGraph:
    """Scan ``wheels`` and build their library graph.

    A library that cannot be read is an :class:`ElfError` naming it, unless ``lenient``: then it is left
    out and kept in :attr:`LibraryGraph.problems`, for :meth:`LibraryGraph.check_problems` to judge
    against the package being patched (the whole lock is read, and most of its wheels are bystanders).
    ``symbols``: the graph also holds the symbol tables of the libraries read (:attr:`LibraryGraph.symbols`),
    for a kept observation's check.
    """
    with start_graph(
        wheels, caches=caches, workers=workers, lenient=lenient, installed=installed, symbols=symbols
    ) as reading:
        return reading.result()


def _graph_of(scan: WheelScan, wheels: Sequence[Path | str | WheelRef], lenient: bool) -> LibraryGraph:
    if scan.problems and not lenient:
        first = next(ref.filename for ref in map(WheelRef.of, wheels) if ref.filename in scan.problems)
        raise ElfError(scan.problems[first].message)
    return build_graph(scan.libraries, scan.problems, scan.symbols)


class ListingChanged(Exception):
    """A lenient graph holds fewer libraries than its reading listed (:meth:`GraphReading.result_as_listed`): what
    was planned from the listing is planned again from :attr:`graph`."""

    def __init__(self, graph: LibraryGraph) -> None:
        super().__init__("the library graph holds fewer libraries than were listed")
        self.graph = graph


class GraphReading:
    """A library graph on its way: which libraries each wheel has is known at once (:attr:`listed`), the graph
    once their dynamic sections are read (:meth:`result`), on worker threads meanwhile.  So a split decides
    what moves and copies the members that stay compressed while the libraries inflate (:func:`start_graph`);
    :meth:`of` wraps a graph already read, so the split has one way to ask."""

    def __init__(
        self,
        listed: Mapping[str, tuple[str, ...]],
        finish: Callable[[], LibraryGraph],
        stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.listed = listed
        """Per wheel file name, the install paths of its libraries (sorted): those of the graph, once read."""
        self._finish, self._stop = finish, stop
        self._lock = threading.Lock()  # the main wheel's writer and the sibling's may both ask first
        self._done: LibraryGraph | BaseException | None = None

    @classmethod
    def of(cls, graph: LibraryGraph) -> GraphReading:
        listed: dict[str, list[str]] = {}
        for library in graph.libraries:  # in (path, wheel) order: sorted per wheel
            listed.setdefault(library.wheel, []).append(library.path)
        return cls({wheel: tuple(paths) for wheel, paths in listed.items()}, lambda: graph)

    def result(self) -> LibraryGraph:
        """The graph, waiting for the reads; the error of a library that cannot be read, each time it is asked."""
        with self._lock:
            if self._done is None:
                try:
                    self._done = self._finish()
                except Exception as error:  # kept: asked again (the other wheel's writer), it is raised again
                    self._done = error
        if isinstance(self._done, BaseException):
            raise self._done
        return self._done

    def result_as_listed(self) -> LibraryGraph:
        """:meth:`result`, which must hold every library :attr:`listed` said: what was planned from the listing
        holds for it.  A lenient graph that left some out (unreadable; an installed copy that is no ELF file)
        raises :class:`ListingChanged`, carrying it."""
        graph = self.result()
        if GraphReading.of(graph).listed != {wheel: paths for wheel, paths in self.listed.items() if paths}:
            raise ListingChanged(graph)
        return graph

    def checked(self, check: Callable[[LibraryGraph], None]) -> GraphReading:
        """This reading, listed the same, whose graph is given to ``check`` (which raises) before anyone gets it:
        a check that needs the dynamic sections is made when they are read, not before."""

        def finish() -> LibraryGraph:
            graph = self.result()
            check(graph)
            return graph

        return GraphReading(self.listed, finish)

    def __enter__(self) -> GraphReading:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()


def start_graph(
    wheels: Sequence[Path | str | WheelRef],
    *,
    caches: CacheContext = OFF,
    workers: int | None = None,
    lenient: bool = False,
    installed: Callable[[str, str], Path | None] | None = None,
    symbols: bool = False,
) -> GraphReading:
    """:func:`read_graph`, started: listed now, read on ``workers`` threads while the caller goes on (the ``split``
    command's graph and the hub's, which its splits write beside); use it in a ``with``, which ends the threads.
    Strict, the graph, once read, holds every library listed (or :meth:`GraphReading.result` raises); ``lenient``,
    it leaves out those that cannot be read, which :meth:`GraphReading.result_as_listed` tells.  ``symbols``: as
    :func:`read_graph`'s."""
    scan = _Scan(wheels, caches=caches, workers=workers, installed=installed, symbols=symbols)
    return GraphReading(scan.listed, lambda: _graph_of(scan.finish(), wheels, lenient), scan.__exit__)
