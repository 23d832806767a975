"""Pip's closure of a lock: which wheels ``pip install`` brings for a project, extras honoured.

rules_python wires a wheel's dependencies from its ``Requires-Dist`` entries whose markers hold with no
extra, and drops the extras of every edge (its issues #4168 and #2399): ``torch`` requiring
``cuda-toolkit[cudart]`` gets ``cuda-toolkit`` without ``nvidia-cuda-runtime``, ``jax[cuda13]`` gets ``jax``
alone. pip installs them. This module holds the requirement edges of every wheel of a lock (pure: the
caller reads each ``METADATA``, :func:`~patched_wheels.lock.requiresdist.read_dist` its edges) and answers two
questions from one model:

* :func:`restored_requirements`: which ``Requires-Dist`` entries to add to which project so that the
  extras-free wiring of rules_python reaches what pip installs (the hub writes them into a patched
  ``METADATA``);
* :func:`missing_from`: which wheels of pip's closure a set of installed projects lacks, and the chain of
  requirements that brings each one (``layout_test``'s completeness check).

The extras a root was asked with that the lock does not record are inferred from it by
:mod:`patched_wheels.lock.rootextras`. The model travels between the hub and ``layout_test`` as one JSON document (:meth:`Closure.to_json`,
:meth:`Closure.from_json`), with every marker already evaluated for the hub's interpreter.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from packaging.utils import NormalizedName

from patched_wheels.base.names import canonicalize_name
from patched_wheels.base.schema import read_object, to_json
from patched_wheels.errors import UsageError
from patched_wheels.lock.requiresdist import Dist

#: The closure document's format; a reader refuses any other. /2 keeps each edge's restored requirement and each
#: wheel's ``Provides-Extra``, which /1 left out (read back, an edge restored its marked requirement).
FORMAT = "rules_patched_wheels.pip_closure/2"
#: Its file name in the hub repository (``@<hub>//:pip_closure.json``).
FILE = "pip_closure.json"
#: The PEP 440 local label of a wheel the hub rewrote only to restore extras (``0.10.2+extras``).
EXTRAS_SUFFIX = "extras"


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
