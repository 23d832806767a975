"""Pip's closure of a lock: which wheels ``pip install`` brings for a project, extras honoured.

rules_python wires a wheel's dependencies from its ``Requires-Dist`` entries whose markers hold with no
extra, and drops the extras of every edge (its issues #4168 and #2399): ``torch`` requiring
``cuda-toolkit[cudart]`` gets ``cuda-toolkit`` without ``nvidia-cuda-runtime``, ``jax[cuda13]`` gets ``jax``
alone. pip installs them. This module reads the requirement edges of every wheel of a lock (pure: the
caller reads each ``METADATA``) and answers two questions from one model:

* :func:`restored_requirements`: which ``Requires-Dist`` entries to add to which project so that the
  extras-free wiring of rules_python reaches what pip installs (the hub writes them into a patched
  ``METADATA``);
* :func:`missing_from`: which wheels of pip's closure a set of installed projects lacks, and the chain of
  requirements that brings each one (``layout_test``'s completeness check).

The model travels between the hub and ``layout_test`` as one JSON document (:meth:`Closure.to_json`,
:meth:`Closure.from_json`), with every marker already evaluated for the hub's interpreter.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Iterable, Iterator, Mapping, Sequence

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName, Value, Variable
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from patched_wheels.base.schema import read_object, to_json
from patched_wheels.errors import UsageError, warn

#: The closure document's format; a reader refuses any other. /2 keeps each edge's restored requirement and each
#: wheel's ``Provides-Extra``, which /1 left out (read back, an edge restored its marked requirement).
FORMAT = "rules_patched_wheels.pip_closure/2"
#: Its file name in the hub repository (``@<hub>//:pip_closure.json``).
FILE = "pip_closure.json"
#: The PEP 440 local label of a wheel the hub rewrote only to restore extras (``0.10.2+extras``).
EXTRAS_SUFFIX = "extras"


@dataclass(frozen=True)
class Edge:
    """One ``Requires-Dist`` entry whose marker holds on the hub's interpreter."""

    project: NormalizedName
    extras: tuple[str, ...]
    requirement: str
    """As the wheel wrote it, for messages."""
    restored: str
    """The entry as a plain requirement: its extra clauses resolved (what the hub adds to ``METADATA``)."""


@dataclass(frozen=True)
class Dist:
    """One wheel of the lock: its requirements with no extra, and those each of its extras adds."""

    project: NormalizedName
    version: str
    requires: tuple[Edge, ...]
    extras: Mapping[str, tuple[Edge, ...]] = field(default_factory=dict)
    provides: frozenset[str] = frozenset()
    """The extras ``Provides-Extra`` declares (normalized)."""


def read_dist(
    project: str,
    version: str,
    requires_dist: Iterable[str],
    provides_extra: Iterable[str],
    *,
    origin: str,
    environment: Mapping[str, str] | None = None,
) -> Dist:
    """The edges of one wheel from its ``Requires-Dist`` and ``Provides-Extra`` values, markers evaluated in
    ``environment`` (default: this interpreter's, which is the hub's). ``origin`` names the wheel in errors.

    An extra the markers use but ``Provides-Extra`` does not declare gets no edges: pip never installs it
    (``a 1.0 does not provide the extra 'x'``), so neither the hub nor ``pip_closure.json`` may; asking for it
    is :meth:`Closure.unprovided`'s warning."""
    provides = frozenset(canonicalize_name(extra) for extra in provides_extra)
    requires: list[Edge] = []
    by_extra: dict[str, list[Edge]] = {}
    for text in requires_dist:
        try:
            requirement = Requirement(text)
        except (InvalidRequirement, RecursionError) as error:
            # A third party's wheel the user cannot fix: said once, and left out as rules_python leaves it out.
            warn(f"{origin}: Requires-Dist {text[:200]!r} ignored: {str(error).splitlines()[0][:200]}")
            continue
        try:
            base, extras = _residuals(requirement.marker, provides, environment)
        except (UndefinedComparison, UndefinedEnvironmentName, KeyError, InvalidVersion) as error:
            # pip 26 stops on such a wheel with UndefinedComparison's traceback, whichever extras are asked; the
            # hub cannot install what pip refuses, so it leaves the requirement out (as an unparsable one) and
            # goes on: one line, never a traceback (packaging raises these from evaluate(), not from parsing;
            # packaging 23.2, the oldest we take, raises InvalidVersion for ``extra === "y"``).
            warn(
                f"{origin}: Requires-Dist {text[:200]!r} ignored: its marker cannot be evaluated "
                f"({unevaluable_reason(error)[:200]}); pip refuses to install this wheel"
            )
            continue
        if base is not None:
            requires.append(_edge(requirement, text, base))
        for extra, residual in extras:
            by_extra.setdefault(extra, []).append(_edge(requirement, text, residual))
    return Dist(
        canonicalize_name(project),
        version,
        tuple(requires),
        {extra: tuple(edges) for extra, edges in sorted(by_extra.items())},
        provides,
    )


def unevaluable_reason(error: Exception) -> str:
    """Why packaging could not parse or evaluate a marker, in one line: its message, or for the KeyError of a
    variable it knows but has no value for (``extras``, ``dependency_groups``), that variable."""
    if isinstance(error, KeyError):
        return f"{error.args[0]!r} is a variable of a pylock's markers (PEP 751), evaluated by no reader here"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _residuals(
    marker: Marker | None, provides: AbstractSet[str], environment: Mapping[str, str] | None
) -> tuple[bool | str | None, list[tuple[str, bool | str]]]:
    """A requirement's marker decided for no extra (None: it does not hold here) and for each declared extra
    that changes it and holds here. The whole marker is evaluated first, as pip evaluates it for a wheel asked
    with no extra, so a marker that cannot be evaluated raises here whatever its ``extra`` clauses decide."""
    if marker is None:
        return True, []
    marker.evaluate(dict(environment or {}, extra=""))
    base = _partial(marker, None)
    extras = []
    for extra in sorted(_mentioned_extras(marker) & provides):
        residual = _partial(marker, extra)
        if residual != base and _holds(residual, environment):
            extras.append((extra, residual))
    return (base if _holds(base, environment) else None), extras


def _edge(requirement: Requirement, text: str, residual: bool | str) -> Edge:
    head = requirement.name + (f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else "")
    body = f" @ {requirement.url}" if requirement.url else str(requirement.specifier)
    marker = f" ; {residual}" if isinstance(residual, str) else ""
    return Edge(
        canonicalize_name(requirement.name),
        tuple(sorted(canonicalize_name(e) for e in requirement.extras)),
        text,
        head + body + marker,
    )


def _holds(residual: bool | str, environment: Mapping[str, str] | None) -> bool:
    if isinstance(residual, bool):
        return residual
    return Marker(residual).evaluate(dict(environment or {}, extra=""))


def _mentioned_extras(marker: Marker) -> set[str]:
    """The extras a marker compares ``extra`` with (``extra == "cuda"``, either side)."""
    found: set[str] = set()

    def walk(items: Sequence[Any]) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item)
            elif isinstance(item, tuple):
                lhs, _, rhs = item
                if isinstance(lhs, Variable) and lhs.value == "extra" and isinstance(rhs, Value):
                    found.add(canonicalize_name(rhs.value))
                elif isinstance(rhs, Variable) and rhs.value == "extra" and isinstance(lhs, Value):
                    found.add(canonicalize_name(lhs.value))

    walk(_parsed(marker))
    return found


def _parsed(marker: Marker) -> Sequence[Any]:
    """packaging's parsed form of ``marker``, which it keeps private: a list of ``(lhs, op, rhs)`` tuples of
    ``Variable``/``Op``/``Value``, nested lists and ``"and"``/``"or"``. The same from packaging 23.2 (the oldest
    pyproject.toml takes) to the one the helper pins; tests/python/lock/test_packaging_floor.py runs this
    module's marker reading under the oldest and holds it to the pinned one's."""
    return marker._markers


def _partial(marker: Marker, extra: str | None) -> bool | str:
    """``marker`` with every comparison of ``extra`` decided (``None``: no extra asked), the rest kept as
    text: True or False when nothing else is left."""
    return _partial_items(_parsed(marker), extra)


def _partial_items(items: Sequence[Any], extra: str | None) -> bool | str:
    # packaging's list form: terms joined by "and" / "or", "and" binding tighter (as its evaluator reads it).
    groups: list[list[bool | str]] = [[]]
    for item in items:
        if item == "or":
            groups.append([])
        elif item == "and":
            continue
        elif isinstance(item, list):
            groups[-1].append(_partial_items(item, extra))
        else:
            groups[-1].append(_partial_atom(item, extra))
    alternatives: list[str] = []
    for group in groups:
        if any(term is False for term in group):
            continue
        terms = [term for term in group if isinstance(term, str)]
        if not terms:
            return True
        alternatives.append(" and ".join(f"({term})" if " or " in term else term for term in terms))
    if not alternatives:
        return False
    return " or ".join(
        f"({alternative})" if " and " in alternative and len(alternatives) > 1 else alternative
        for alternative in alternatives
    )


def _partial_atom(atom: tuple[Any, Any, Any], extra: str | None) -> bool | str:
    text = " ".join(_node_text(node) for node in atom)
    if not any(isinstance(node, Variable) and node.value == "extra" for node in atom):
        return text
    try:
        return Marker(text).evaluate({"extra": extra or ""})
    except InvalidMarker:  # pragma: no cover - packaging wrote the atom it parsed
        return False


def _node_text(node: Any) -> str:
    if isinstance(node, Value):
        quote = "'" if '"' in node.value else '"'
        return f"{quote}{node.value}{quote}"
    return str(node.value)


@dataclass(frozen=True)
class Closure:
    """The lock's wheels as pip installs them on the hub's interpreter: each wheel's edges, and the extras
    the lock's own roots ask for (what the user locked, e.g. ``jax[cuda13]``)."""

    dists: Mapping[NormalizedName, Dist]
    root_extras: Mapping[NormalizedName, tuple[str, ...]]

    def activated(self) -> dict[NormalizedName, set[str]]:
        """Every extra pip installs somewhere in the lock: asked by a root, by an edge of any wheel (pip
        installs them all), and by the edges those extras add, to a fixed point. Extras a wheel does not
        provide are ignored, as pip ignores them (with a warning: :meth:`unprovided`)."""
        return self._walk()[0]

    def unprovided(self) -> list[tuple[NormalizedName, str, str]]:
        """(project, extra, who asks) for each extra pip would be asked that the pinned wheel does not provide
        (``Provides-Extra``): pip installs the wheel without it and says ``a 1.0 does not provide the extra 'x'``.
        ``who asks`` is a requiring project, or ``""`` for a root. Sorted, one row per project and extra."""
        return [(project, extra, asker) for (project, extra), asker in sorted(self._walk()[1].items())]

    def _walk(self) -> tuple[dict[NormalizedName, set[str]], dict[tuple[NormalizedName, str], str]]:
        active: dict[NormalizedName, set[str]] = {}
        unprovided: dict[tuple[NormalizedName, str], str] = {}
        work: list[tuple[NormalizedName, str, str]] = [
            (project, extra, "") for project, extras in self.root_extras.items() for extra in extras
        ]
        work += [
            (edge.project, extra, dist.project)
            for dist in self.dists.values()
            for edge in dist.requires
            for extra in edge.extras
        ]
        while work:
            project, extra, asker = work.pop()
            dist = self.dists.get(project)
            if dist is None or extra in active.get(project, set()):
                continue
            if extra not in dist.provides:
                known = unprovided.get((project, extra))
                unprovided[(project, extra)] = asker if known is None else min(known, asker)
                continue
            active.setdefault(project, set()).add(extra)
            work += [(edge.project, more, project) for edge in dist.extras.get(extra, ()) for more in edge.extras]
        return active, unprovided

    def check_pinned(self, what: str) -> None:
        """Refuse a lock that is not pip's closure here: an activated extra requires a project it does not pin
        (rules_python would then fail on a missing repository, or pip on a missing pin)."""
        for project, extras in sorted(self.activated().items()):
            for extra in sorted(extras):
                for edge in self.dists[project].extras.get(extra, ()):
                    if edge.project not in self.dists:
                        raise UsageError(
                            f"{what}: {project}[{extra}] requires {edge.requirement!r}, which the lock does not pin for this "
                            "interpreter: lock again with the same extras (pip would install it)"
                        )

    def to_json(self) -> dict[str, Any]:
        """The document :meth:`from_json` reads back into an equal closure (:mod:`patched_wheels.base.schema`)."""
        return {"format": FORMAT, **to_json(self)}

    @classmethod
    def from_json(cls, raw: object, what: str) -> "Closure":
        """The document :meth:`to_json` wrote, every value checked (it crosses from the hub to a test)."""

        def bad(reason: str) -> UsageError:
            return UsageError(f"{what}: not a pip closure file of this version of rules_patched_wheels: {reason}")

        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise bad(f"format is not {FORMAT!r}")
        try:
            closure = read_object(cls, {key: value for key, value in raw.items() if key != "format"}, "closure")
        except (UsageError, ValueError) as error:
            raise bad(str(error)) from None
        for project, dist in closure.dists.items():
            if dist.project != project:
                raise bad(f"dists[{json.dumps(project)}] holds project {json.dumps(dist.project)}")
        return closure


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
    * the lock pins every requirement ``E`` has here (the edges :func:`read_dist` keeps, their markers holding on
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
    except (InvalidRequirement, InvalidVersion, RecursionError):
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


def restored_requirements(closure: Closure) -> dict[NormalizedName, list[str]]:
    """Project -> the ``Requires-Dist`` entries to add to its wheel so that wiring without extras reaches
    pip's closure: for each extra pip installs on it, that extra's edges as plain requirements (an edge to
    the project itself is covered by that extra's own entries). Only projects with something to add."""
    added: dict[NormalizedName, list[str]] = {}
    for project, extras in sorted(closure.activated().items()):
        lines: list[str] = []
        for extra in sorted(extras):
            for edge in closure.dists[project].extras.get(extra, ()):
                if edge.project != project and edge.restored not in lines:
                    lines.append(edge.restored)
        if lines:
            added[project] = lines
    return added


#: The most requirement steps a :class:`Missing` keeps (the innermost ones, then the outermost): a chain of
#: thousands of links costs what those steps cost, never its length, in memory and in what is printed.
MAX_STEPS = 8


@dataclass(frozen=True)
class Missing:
    """A wheel pip installs that the installed set lacks, and the requirements that bring it."""

    project: NormalizedName
    chain: tuple[tuple[NormalizedName, str], ...]
    """(requiring project, its ``Requires-Dist`` entry), outermost first, from an installed project down to the
    missing one; of a chain longer than :data:`MAX_STEPS`, its outermost step and the innermost ones."""
    left_out: int = 0
    """How many steps of the chain were left out between its outermost step and the innermost ones kept."""

    def describe(self) -> str:
        """The project and its chain, innermost step first (text from a file: the caller escapes it)."""
        steps = [f"{requirer} requires {requirement!r}" for requirer, requirement in reversed(self.chain)]
        if self.left_out:
            steps[-1:-1] = [f"... {self.left_out} more"]
        return f"{self.project} ({' <- '.join(steps)})"


@dataclass(frozen=True)
class _Step:
    """How breadth-first search first reached a (project, extra): one ``Requires-Dist`` entry and the step before
    it (a parent pointer: a chain costs one step, never a copy of the chain), its depth and its chain's first step."""

    requirer: NormalizedName
    requirement: str
    parent: "_Step | None"
    depth: int
    outermost: tuple[NormalizedName, str]

    def chain(self, keep: int) -> tuple[tuple[tuple[NormalizedName, str], ...], int]:
        """This chain as :attr:`Missing.chain` and :attr:`Missing.left_out` keep it (at most ``keep`` steps)."""
        whole = self.depth <= keep
        inner: list[tuple[NormalizedName, str]] = []
        step: _Step | None = self
        while step is not None and len(inner) < (self.depth if whole else keep - 1):
            inner.append((step.requirer, step.requirement))
            step = step.parent
        if whole:
            return tuple(reversed(inner)), 0
        return (self.outermost, *reversed(inner)), self.depth - len(inner) - 1


def missing_from(closure: Closure, installed: Iterable[str], *, keep: int = MAX_STEPS) -> list[Missing]:
    """The wheels pip would install for ``installed`` (each with the extras the lock's roots ask of it) that
    are not among them, breadth first, so each comes with its shortest chain of requirements (at most ``keep``
    steps of it). Linear in the closure's size: each (project, extra) is reached once, by one step."""
    have = {canonicalize_name(name) for name in installed}
    # Each project's states reached ("": with no extra), and only the extras its wheel provides: an extra it does
    # not provide brings nothing (pip ignores it), so a million of them asked cost no state and no queue entry.
    seen: dict[NormalizedName, set[str]] = {}
    first: dict[NormalizedName, _Step] = {}
    # (project, whether its plain requirements are new, the extras newly reached, the step that reached them)
    queue: deque[tuple[NormalizedName, bool, tuple[str, ...], _Step | None]] = deque(
        (project, True, closure.root_extras.get(project, ()), None)
        for project in sorted(have)
        if project in closure.dists
    )
    while queue:
        project, plain, extras, before = queue.popleft()
        dist = closure.dists[project]
        edges = [*(dist.requires if plain else ()), *(edge for extra in extras for edge in dist.extras.get(extra, ()))]
        for edge in edges:
            # A project reached before has all its states seen, and its shortest chain already.
            target = closure.dists.get(edge.project)
            reached = seen.setdefault(edge.project, set())
            new_plain = "" not in reached
            new_extras = sorted(
                {
                    extra
                    for extra in edge.extras
                    if extra not in reached and target is not None and extra in target.extras
                }
            )
            if not new_plain and not new_extras:
                continue
            if before is None:
                step = _Step(project, edge.requirement, None, 1, (project, edge.requirement))
            else:
                step = _Step(project, edge.requirement, before, before.depth + 1, before.outermost)
            if edge.project not in have:
                first.setdefault(edge.project, step)
            reached.add("")
            reached.update(new_extras)
            if target is not None:
                queue.append((edge.project, new_plain, tuple(new_extras), step))
    return [Missing(project, *first[project].chain(keep)) for project in sorted(first)]
