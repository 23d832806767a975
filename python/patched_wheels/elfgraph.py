"""The shared-library graph of a set of wheels, read straight from the archives.

Each wheel's libraries are read by :mod:`patched_wheels.elfread` (or answered by the
ELF cache, :mod:`patched_wheels.elfcache`, keyed by the wheel's sha256).  Each
DT_NEEDED name is resolved to a library of the set (by SONAME first, then by file
name); names no wheel provides are "system" dependencies: reported, never followed.
The libraries are then ordered dependencies first, which is what a preload needs; libraries that need
each other (a cycle, such as pillow 13's ``libfreetype`` and ``libharfbuzz``) are legal, as they are
to the dynamic loader, and are ordered as one (see :func:`_cycle_order`).
"""

from __future__ import annotations

import heapq
import os
import posixpath
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from patched_wheels.elfcache import ElfCache, wheel_problem
from patched_wheels.elfread import ElfLibrary, data_scheme, is_shared_library_name, read_library, starts_as_elf
from patched_wheels.digestmemo import sha256_of
from patched_wheels.errors import UsageError, warn
from patched_wheels.fsutil import SHA256_HEX
from patched_wheels.wheelfile import WheelReader, ZipMember

# Wheel members under <dist>.data/purelib|platlib/ install into site-packages.
_DATA_TO_SITE_PACKAGES = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
# $ORIGIN as ld.so reads it in DT_RPATH/DT_RUNPATH: "${ORIGIN}", or "$ORIGIN" not followed by a name character.
ORIGIN_TOKEN = re.compile(r"\$(?:ORIGIN(?![A-Za-z0-9_])|\{ORIGIN\})")


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
    together in the order of :func:`_cycle_order`; ties broken by (path, wheel)."""
    cycles: tuple[tuple[ElfLibrary, ...], ...] = ()
    """The libraries that need each other (strongly connected components of two or more), each in load order."""

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

    def ordered(self, libraries: Iterable[ElfLibrary]) -> list[ElfLibrary]:
        """``libraries`` in load order."""
        wanted = set(libraries)
        return [library for library in self.load_order if library in wanted]


def install_path(member: str) -> str | None:
    """Where an archive member lands: relative to site-packages, or, for the ``data``, ``scripts`` and
    ``headers`` schemes, the member's own path (its ``<dist>.data/<scheme>/`` prefix says where an
    installer puts it: see :func:`data_scheme`); None for a scheme no installer knows."""
    if not member.partition("/")[0].endswith(".data"):  # nearly every member, and every member is asked
        return member
    if _DATA_TO_SITE_PACKAGES.match(member):
        return _DATA_TO_SITE_PACKAGES.sub("", member, count=1)
    return member if data_scheme(member) else None


def expand_origin(entry: str, directory: str) -> str:
    """A DT_RPATH/DT_RUNPATH entry with every ``$ORIGIN`` replaced by ``directory`` (the library's own), normalised."""
    return posixpath.normpath(ORIGIN_TOKEN.sub(lambda _: directory or ".", entry))


def _library_members(wheel: Path) -> list[tuple[ZipMember, str]]:
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


def _digest(wheel: WheelRef, digest_dir: Path | None) -> str:
    if wheel.sha256 or wheel.path is None:
        return wheel.sha256
    return sha256_of(wheel.path, digest_dir)


def scan_wheels(
    wheels: Sequence[Path | str | WheelRef],
    *,
    cache_dir: Path | None = None,
    workers: int | None = None,
    digest_dir: Path | None = None,
) -> WheelScan:
    """Read the dynamic section of every shared library in ``wheels``.

    With ``cache_dir``, a wheel whose rows are cached (by sha256) is not inflated (nor needed: the hub
    names wheels it did not fetch by their sha256; when the file is at hand, the rows are checked against
    it); the others are read and their rows stored.  A wheel given by its file alone is hashed for that
    key, unless ``digest_dir`` (:mod:`patched_wheels.digestmemo`) remembers the file's digest.  Members are inflated largest first on ``workers`` threads (default: one
    per core), so the biggest library never starts last and leaves a core idle.
    """
    refs = list({(ref.path.resolve() if ref.path else ref.filename): ref for ref in map(WheelRef.of, wheels)}.values())
    names = [ref.filename for ref in refs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UsageError(f"{duplicates[0]}: two different files with this name are given")
    for ref in refs:
        if ref.path is not None and not ref.path.is_file():
            raise UsageError(f"{ref.path}: no such wheel")
    cache = None if cache_dir is None else ElfCache(cache_dir)
    found: dict[str, list[ElfLibrary]] = {}
    jobs: list[tuple[Path, ZipMember, str]] = []
    scanned: list[tuple[WheelRef, str]] = []
    workers = workers or os.cpu_count() or 1
    digests = _map_on_threads(lambda ref: _digest(ref, digest_dir), refs, workers) if cache is not None else [ref.sha256 for ref in refs]
    for ref, digest in zip(refs, digests):
        cached = None if cache is None or not digest else _cached_libraries(cache, ref, digest)
        if cached is not None:
            found[ref.filename] = cached
            continue
        if ref.path is None:
            raise UsageError(f"{ref.filename}: no file given, and no ELF rows are cached for its sha256 {digest or '(none)'}")
        found[ref.filename] = []
        scanned.append((ref, digest))
        jobs.extend((ref.path, info, install) for info, install in _library_members(ref.path))
    jobs.sort(key=lambda job: (-job[1].file_size, job[0].name, job[1].filename))
    for library in _map_on_threads(lambda job: read_library(*job), jobs, workers):
        found[library.wheel].append(library)
    for ref, digest in scanned:
        found[ref.filename].sort(key=lambda library: library.path)
        if cache is not None:
            cache.store(digest, found[ref.filename])
    libraries = tuple(library for ref in refs for library in found[ref.filename])
    return WheelScan(libraries, sum(job[1].file_size for job in jobs), len(refs) - len(scanned))


_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


def _map_on_threads(function: Callable[[_Item], _Result], items: Sequence[_Item], workers: int) -> list[_Result]:
    """``function`` of each item, in order, on up to ``workers`` threads; in this one for a single item (a
    split's own wheel, answered by the cache: no pool, nor the import of the thread pool's module)."""
    if len(items) <= 1:
        return [function(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(function, items))


def _cached_libraries(cache: ElfCache, ref: WheelRef, digest: str) -> list[ElfLibrary] | None:
    """The cached libraries of ``ref``, or None on a miss.

    When its file is at hand, the rows must describe it (each becomes a path that every import of a
    patched package loads): a mismatch is a miss with one warning, and the rows are read again and rewritten.
    """
    cached = cache.load(digest, ref.filename)
    if cached is None or ref.path is None:
        return cached
    problem = wheel_problem(ref.path, {install: info for info, install in _library_members(ref.path)}, cached)
    if problem is None:
        return cached
    warn(f"{cache.file(digest)}: cache entry ignored ({problem}); read again from the wheel")
    return None


def _pick(library: ElfLibrary, candidates: Sequence[ElfLibrary]) -> ElfLibrary | None:
    """The provider of one DT_NEEDED name: one from the same wheel if any, else the first by (path, wheel)."""
    others = [candidate for candidate in candidates if candidate != library]
    if not others:
        return None
    same_wheel = [candidate for candidate in others if candidate.wheel == library.wheel]
    return min(same_wheel or others, key=_order_key)


def _order_key(library: ElfLibrary) -> tuple[str, str]:
    return (library.path, library.wheel)


def build_graph(libraries: Sequence[ElfLibrary]) -> LibraryGraph:
    """Resolve DT_NEEDED edges and order the libraries deps first, each cycle as one (see :attr:`LibraryGraph.load_order`)."""
    by_soname: dict[str, list[ElfLibrary]] = {}
    by_filename: dict[str, list[ElfLibrary]] = {}
    for library in libraries:
        if library.soname:
            by_soname.setdefault(library.soname, []).append(library)
        by_filename.setdefault(library.filename, []).append(library)
    providers: dict[ElfLibrary, dict[str, ElfLibrary]] = {}
    system: dict[ElfLibrary, tuple[str, ...]] = {}
    for library in libraries:
        resolved: dict[str, ElfLibrary] = {}
        for name in library.needed:
            provider = _pick(library, by_soname.get(name, ())) or _pick(library, by_filename.get(name, ()))
            if provider is not None:
                resolved[name] = provider
        providers[library] = resolved
        system[library] = tuple(name for name in library.needed if name not in resolved)
    dependencies = {library: tuple(dict.fromkeys(providers[library].values())) for library in libraries}
    ordered = tuple(sorted(libraries, key=_order_key))
    components = _components(ordered, dependencies)
    load_order = _load_order(components, dependencies, providers)
    position = {library: number for number, library in enumerate(load_order)}
    cycles = sorted(
        (tuple(sorted(members, key=position.__getitem__)) for members in components if len(members) > 1),
        key=lambda members: position[members[0]],
    )
    return LibraryGraph(ordered, dependencies, system, providers, load_order, tuple(cycles))


def _components(
    libraries: Sequence[ElfLibrary], dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]]
) -> list[list[ElfLibrary]]:
    """The strongly connected components of the graph (Tarjan's algorithm, iterative: a lock's graph has
    thousands of libraries, more than Python's recursion allows), each listed by (path, wheel), in the
    order Tarjan closes them: every component after the components it needs."""
    index: dict[ElfLibrary, int] = {}
    low: dict[ElfLibrary, int] = {}
    on_stack: set[ElfLibrary] = set()
    stack: list[ElfLibrary] = []
    found: list[list[ElfLibrary]] = []
    for root in libraries:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(dependencies[root]))]
        while work:
            library, pending = work[-1]
            following = next((d for d in pending if d not in index or d in on_stack), None)
            if following is not None:
                if following in index:
                    low[library] = min(low[library], index[following])
                else:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    work.append((following, iter(dependencies[following])))
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[library])
            if low[library] == index[library]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == library:
                        break
                found.append(sorted(component, key=_order_key))
    return found


def _loads_the_cycle(
    entry: ElfLibrary, members: Sequence[ElfLibrary], providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
) -> bool:
    """Whether loading ``entry`` by its path maps every other member of its cycle with one directory per wheel.

    What the dynamic loader does (breadth first, each DT_NEEDED name matched to an object already mapped,
    else looked up along the needing library's DT_RUNPATH, or its DT_RPATH when it has none), with the
    libraries outside the cycle already loaded (they come earlier in the load order) and only the paths
    inside the needing library's own wheel to be found: a ``$ORIGIN/../../other_wheel/lib`` entry leads
    nowhere when every wheel has its own ``sys.path`` entry.
    """
    in_cycle = set(members)
    mapped = {entry}
    queue = [entry]
    for library in queue:
        directory = posixpath.dirname(library.path)
        search = {expand_origin(path, directory) for path in library.search_path if ORIGIN_TOKEN.search(path)}
        for name in library.needed:
            provider = providers[library].get(name)
            if provider is None or provider not in in_cycle or provider in mapped:
                continue
            if provider.wheel != library.wheel or posixpath.dirname(provider.path) not in search:
                return False
            mapped.add(provider)
            queue.append(provider)
    return True


def _cycle_order(
    members: Sequence[ElfLibrary], providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
) -> list[ElfLibrary]:
    """The load order inside one cycle: by (path, wheel), but starting with the first member that loads the
    whole cycle (see :func:`_loads_the_cycle`).

    A library cannot be loaded before what it needs, and every member of a cycle needs another: loading
    the first one by its path makes the dynamic loader find the rest itself, along the search paths of the
    libraries that need them.  Once it has, loading the others by path maps nothing new (the loader knows
    each file).  So only the first member matters, and it must be one whose search paths reach the others;
    auditwheel's ``pkg.libs`` often give that ``$ORIGIN`` to some members only.  Where none does, the order
    stays by (path, wheel): the cycle then loads only where its RPATHs resolve (one site-packages).
    """
    entry = next((member for member in members if _loads_the_cycle(member, members, providers)), members[0])
    return [entry, *(member for member in members if member != entry)]


def _load_order(
    components: Sequence[Sequence[ElfLibrary]],
    dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]],
    providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]],
) -> tuple[ElfLibrary, ...]:
    """Kahn's algorithm on the components with a heap, so equal-rank ones come out by their first member's
    (path, wheel); a cycle's members stay together, in :func:`_cycle_order`."""
    component_of = {library: number for number, members in enumerate(components) for library in members}
    waiting_on: list[set[int]] = [set() for _ in components]
    dependents: list[list[int]] = [[] for _ in components]
    for number, members in enumerate(components):
        for library in members:
            for dependency in dependencies[library]:
                needed = component_of[dependency]
                if needed != number and needed not in waiting_on[number]:
                    waiting_on[number].add(needed)
                    dependents[needed].append(number)
    ready = [(_order_key(members[0]), number) for number, members in enumerate(components) if not waiting_on[number]]
    heapq.heapify(ready)
    order: list[ElfLibrary] = []
    while ready:
        _, number = heapq.heappop(ready)
        members = components[number]
        order.extend(_cycle_order(members, providers) if len(members) > 1 else members)
        for dependent in dependents[number]:
            waiting_on[dependent].discard(number)
            if not waiting_on[dependent]:
                heapq.heappush(ready, (_order_key(components[dependent][0]), dependent))
    return tuple(order)


def read_graph(
    wheels: Sequence[Path | str | WheelRef],
    *,
    cache_dir: Path | None = None,
    workers: int | None = None,
    digest_dir: Path | None = None,
) -> LibraryGraph:
    """Scan ``wheels`` and build their library graph."""
    return build_graph(scan_wheels(wheels, cache_dir=cache_dir, workers=workers, digest_dir=digest_dir).libraries)


def format_graph(graph: LibraryGraph) -> str:
    """Human-readable listing: each library with its edges, then the load order."""
    lines: list[str] = []
    for library in graph.libraries:
        lines.append(str(library))
        if library.soname:
            lines.append(f"  soname:  {library.soname}")
        if library.rpath:
            lines.append(f"  rpath:   {':'.join(library.rpath)}")
        if library.runpath:
            lines.append(f"  runpath: {':'.join(library.runpath)}")
        for dependency in graph.dependencies[library]:
            lines.append(f"  needs    {dependency}")
        for name in graph.system[library]:
            lines.append(f"  needs    {name} (system, not followed)")
    lines.append("load order (dependencies first):")
    width = len(str(len(graph.load_order)))
    cycle_of = {library: number for number, members in enumerate(graph.cycles, start=1) for library in members}
    for index, library in enumerate(graph.load_order, start=1):
        mark = f"  (cycle {cycle_of[library]})" if library in cycle_of else ""
        lines.append(f"  {index:>{width}}. {library}{mark}")
    if graph.cycles:
        # Only when there are any: the listing of an acyclic set stays as it was.
        lines.append("cycles (libraries that need each other; each loads as one, first member first):")
        for number, members in enumerate(graph.cycles, start=1):
            lines.append(f"  cycle {number}: " + " <-> ".join(map(str, members)))
    return "\n".join(lines)


def graph_as_json(graph: LibraryGraph) -> dict[str, object]:
    """The graph as plain data, for tools that consume ``patched-wheels graph --json``."""
    return {
        "libraries": [
            {
                **asdict(library),
                "dependencies": [
                    {"wheel": dependency.wheel, "path": dependency.path} for dependency in graph.dependencies[library]
                ],
                "system": list(graph.system[library]),
            }
            for library in graph.libraries
        ],
        "load_order": [{"wheel": library.wheel, "path": library.path} for library in graph.load_order],
        "cycles": [[{"wheel": library.wheel, "path": library.path} for library in members] for members in graph.cycles],
    }
