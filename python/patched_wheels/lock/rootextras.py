"""The extras a lock's roots were asked with that the lock does not record (a ``uv pip compile`` lock of
``jax[cuda13]`` pins the extra's wheels but writes ``jax`` bare), inferred from what only the extra explains:
:func:`inferred_root_extras`, on a :class:`~patched_wheels.lock.closure.Closure` as it stands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Iterator, Mapping, Sequence

from packaging.requirements import Requirement
from packaging.utils import NormalizedName
from packaging.version import Version

from patched_wheels.errors import UNREADABLE_REQUIREMENT
from patched_wheels.lock.closure import Closure
from patched_wheels.lock.requiresdist import Dist, Edge


@dataclass(frozen=True)
class InferredExtra:
    """A root extra the lock does not record but shows (:func:`inferred_root_extras`)."""

    project: NormalizedName
    extra: str
    evidence: tuple[NormalizedName, ...]
    """The pins of the extra's requirements that nothing else requires (what only the extra explains)."""


def inferred_root_extras(closure: Closure, decided: AbstractSet[NormalizedName] = frozenset()) -> list[InferredExtra]:
    """The extras a root of the lock was asked with that the lock does not record (a ``uv pip compile`` lock
    writes ``onnxruntime-gpu==…`` for ``onnxruntime-gpu[cuda]``; a pylock, or a uv.lock with no project, records
    no root's extras), sorted. ``decided``: projects whose root extras the user chose (the ``extras``
    attribute), never inferred.

    Extra ``E`` of pinned ``D`` is inferred when, in ``closure`` as it stands (one pass: an inferred extra
    does not make another one, so the answer does not depend on any order):

    * ``E`` is not already installed (asked by a root or an edge) and ``D`` declares it (``Provides-Extra``);
    * the lock pins every requirement ``E`` has here (the edges :func:`~patched_wheels.lock.requiresdist.read_dist` keeps, their markers holding on
      the hub's interpreter; at least one), each pin's version within the requirement's specifier, and so every
      requirement of the extras those requirements ask in turn;
    * at least one of those pins is required by nothing else pip installs from the lock: no requirement of any
      pinned wheel, nor of an extra already installed, names it. Only ``D[E]`` explains why the lock pins it,
      and ``pip install -r`` of the lock installs it, so restoring ``E`` wires only what pip installs anyway;
    * no pin ``E`` requires already requires ``D``: then that pin is more likely a root that brought ``D`` (a
      plugin's ``standalone`` extra requiring its host), and restoring ``E`` would make a dependency cycle,
      which rules_python refuses."""
    active = closure.activated()
    requires: dict[NormalizedName, set[NormalizedName]] = {}  # the known closure's edges, a wheel's own left out
    for project, dist in closure.dists.items():
        known = [*dist.requires, *(edge for extra in active.get(project, ()) for edge in dist.extras.get(extra, ()))]
        requires[project] = {edge.project for edge in known if edge.project != project}
    required = set().union(*requires.values())
    candidates = []
    for project, dist in sorted(closure.dists.items()):
        if project in decided:
            continue
        for extra, edges in sorted(dist.extras.items()):
            if extra in active.get(project, ()) or not edges or extra not in dist.provides:
                continue
            evidence = sorted({edge.project for edge in edges if edge.project != project} - required)
            if evidence:
                candidates.append(InferredExtra(project, extra, tuple(evidence)))
    if not candidates:
        return []
    owners = sorted({(found.project, "") for found in candidates})
    reaches = _reaching(_extras_graph(closure, requires), [_UNPINNED, *owners])
    bit = {owner: 1 << number for number, (owner, _) in enumerate(owners, 1)}
    return [
        found for found in candidates if not reaches.get((found.project, found.extra), 0) & (1 | bit[found.project])
    ]


#: The node every extra whose requirement the lock does not pin (or pins in a version it does not take) reaches.
_UNPINNED = ("", "")


def _extras_graph(
    closure: Closure, requires: Mapping[NormalizedName, AbstractSet[NormalizedName]]
) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """The known closure's edges (``(project, "")`` -> ``(requirement, "")``) with, for each extra of each wheel,
    ``(project, extra)`` -> what restoring it adds: each requirement's project (not the wheel's own, which
    restoring skips), the extras it asks in turn, and :data:`_UNPINNED` for a requirement the lock does not pin
    in a version it takes. An extra is inferable when it reaches neither :data:`_UNPINNED` nor its own project
    (a cycle), which one pass of :func:`_reaching` answers for every extra at once (walking each extra's
    requirements apart was quadratic in a chain of extras: 1,000 links took 89 s)."""
    graph: dict[tuple[str, str], set[tuple[str, str]]] = {
        (project, ""): {(pin, "") for pin in pins} for project, pins in requires.items()
    }
    for project, dist in closure.dists.items():
        for extra, edges in dist.extras.items():
            out = graph.setdefault((project, extra), set())
            for edge in edges:
                target = closure.dists.get(edge.project)
                if target is None or not _pin_satisfies(target, edge):
                    out.add(_UNPINNED)
                    continue
                if edge.project != project:
                    out.add((edge.project, ""))
                out.update((edge.project, more) for more in edge.extras if more in target.provides)
    return graph


def _pin_satisfies(dist: Dist, edge: Edge) -> bool:
    """Whether the pinned version is one ``edge`` takes (a requirement by URL takes the pin the lock made)."""
    try:
        requirement = Requirement(edge.requirement)
        return requirement.specifier.contains(Version(dist.version), prereleases=True)
    except UNREADABLE_REQUIREMENT:  # InvalidVersion is a ValueError too
        return False


def _reaching(
    requires: Mapping[tuple[str, str], AbstractSet[tuple[str, str]]], targets: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """Project -> the ``targets`` it requires, directly or through others (bit ``i``: ``targets[i]``; itself
    included). Linear in the graph's size: Tarjan's strongly connected components, iterative (a 10,000-link
    chain is no deeper a recursion than one link), each component's set made once from those it requires."""
    bit = {target: 1 << number for number, target in enumerate(targets)}
    index: dict[tuple[str, str], int] = {}
    low: dict[tuple[str, str], int] = {}
    stack: list[tuple[str, str]] = []
    on_stack: set[tuple[str, str]] = set()
    reach: dict[tuple[str, str], int] = {}

    def enter(node: tuple[str, str]) -> tuple[tuple[str, str], Iterator[tuple[str, str]]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        return node, iter(sorted(requires.get(node, ())))

    for root in sorted(requires):
        if root in index:
            continue
        work = [enter(root)]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    work.append(enter(child))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] != index[node]:
                    continue
                component = set()
                while node not in component:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                bits = 0
                for member in component:
                    bits |= bit.get(member, 0)
                    for child in requires.get(member, ()):
                        bits |= reach.get(child, 0)  # a member's own component has no entry yet
                for member in component:
                    reach[member] = bits
    return reach
