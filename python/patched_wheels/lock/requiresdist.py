"""One wheel's requirement edges, read from its ``Requires-Dist`` and ``Provides-Extra`` (pure: the caller reads
``METADATA``): each marker evaluated on the hub's interpreter with its ``extra`` clauses left open, so an edge
says which extra of the wheel brings it and what it reads as once that extra is asked (:class:`Edge`'s
``restored``). :mod:`patched_wheels.lock.closure` builds pip's closure of a lock from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Iterable, Mapping, Sequence

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName, Value, Variable
from packaging.requirements import Requirement
from packaging.utils import NormalizedName
from packaging.version import InvalidVersion

from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import UNREADABLE_REQUIREMENT, warn


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
    is :meth:`~patched_wheels.lock.closure.Closure.unprovided`'s warning."""
    provides = frozenset(canonicalize_name(extra) for extra in provides_extra)
    requires: list[Edge] = []
    by_extra: dict[str, list[Edge]] = {}
    for text in requires_dist:
        try:
            requirement = Requirement(text)
        except UNREADABLE_REQUIREMENT as error:
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
    """A marker node as marker text that parses back to it. packaging reads a quoted value with
    ``ast.literal_eval``, so a value is written as a Python literal (``repr``'s: a backslash doubled, a control
    character escaped), not between bare quotes, where ``"\\"`` would end as ``"\"``, a literal that never
    closes; in double quotes unless it holds one (it never holds both: packaging's tokenizer does not allow it),
    so that ordinary values are written as they were."""
    if isinstance(node, Value):
        literal = repr(node.value)
        return f'"{literal[1:-1]}"' if literal[0] == "'" and '"' not in node.value else literal
    return str(node.value)
