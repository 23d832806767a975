"""The load order of a library graph: what the dynamic loader needs first, cycles included.

A library cannot be loaded before what it needs, so a preload loads dependencies first.  Libraries that
need each other (a cycle: pillow 13's ``libfreetype`` and ``libharfbuzz``) are legal to the dynamic
loader, which maps a whole cycle when it loads one member whose search paths find the others.  So the
order is taken between strongly connected components (Tarjan's algorithm, iterative: a lock's graph has
thousands of libraries), and inside one by :func:`cycle_order`.
"""

from __future__ import annotations

import heapq
import posixpath
import re
from typing import Mapping, Sequence

from patched_wheels.elf.read import ElfLibrary

# $ORIGIN as ld.so reads it in DT_RPATH/DT_RUNPATH: "${ORIGIN}", or "$ORIGIN" not followed by a name character.
ORIGIN_TOKEN = re.compile(r"\$(?:ORIGIN(?![A-Za-z0-9_])|\{ORIGIN\})")


def expand_origin(entry: str, directory: str) -> str:
    """A DT_RPATH/DT_RUNPATH entry with every ``$ORIGIN`` replaced by ``directory`` (the library's own), normalised."""
    return posixpath.normpath(ORIGIN_TOKEN.sub(lambda _: directory or ".", entry))


def order_key(library: ElfLibrary) -> tuple[str, str]:
    """Ties in every order are broken by (path, wheel): the same set gives the same order, whatever its input order."""
    return (library.path, library.wheel)


def strong_components(
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
                found.append(sorted(component, key=order_key))
    return found


def loads_the_cycle(
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


def stuck_cycles(
    cycles: Sequence[tuple[ElfLibrary, ...]], providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
) -> list[tuple[ElfLibrary, ...]]:
    """The ``cycles`` that no member loads by its path alone (none has an ``$ORIGIN`` search path reaching
    the others inside its wheel; see :func:`cycle_order`).

    Loaded by path such a cycle fails, even in one site-packages, where the package itself may load it
    fine (an extension module's DT_RPATH finds both members): so a preload loads them, and what needs
    them, as optional: tried, and skipped where they fail.
    """
    return [members for members in cycles if not loads_the_cycle(members[0], members, providers)]


def cycle_order(
    members: Sequence[ElfLibrary], providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]]
) -> list[ElfLibrary]:
    """The load order inside one cycle: by (path, wheel), but starting with the first member that loads the
    whole cycle (see :func:`loads_the_cycle`).

    A library cannot be loaded before what it needs, and every member of a cycle needs another: loading
    the first one by its path makes the dynamic loader find the rest itself, along the search paths of the
    libraries that need them.  Once it has, loading the others by path maps nothing new (the loader knows
    each file).  So only the first member matters, and it must be one whose search paths reach the others;
    auditwheel's ``pkg.libs`` often give that ``$ORIGIN`` to some members only.  Where none does, the order
    stays by (path, wheel): the cycle then loads only where its RPATHs resolve (one site-packages).
    """
    entry = next((member for member in members if loads_the_cycle(member, members, providers)), members[0])
    return [entry, *(member for member in members if member != entry)]


def components_load_order(
    components: Sequence[Sequence[ElfLibrary]],
    dependencies: Mapping[ElfLibrary, tuple[ElfLibrary, ...]],
    providers: Mapping[ElfLibrary, Mapping[str, ElfLibrary]],
) -> tuple[ElfLibrary, ...]:
    """Kahn's algorithm on the components with a heap, so equal-rank ones come out by their first member's
    (path, wheel); a cycle's members stay together, in :func:`cycle_order`."""
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
    ready = [(order_key(members[0]), number) for number, members in enumerate(components) if not waiting_on[number]]
    heapq.heapify(ready)
    order: list[ElfLibrary] = []
    while ready:
        _, number = heapq.heappop(ready)
        members = components[number]
        order.extend(cycle_order(members, providers) if len(members) > 1 else members)
        for dependent in dependents[number]:
            waiting_on[dependent].discard(number)
            if not waiting_on[dependent]:
                heapq.heappush(ready, (order_key(components[dependent][0]), dependent))
    return tuple(order)
