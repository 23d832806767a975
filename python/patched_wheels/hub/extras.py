"""The hub's decisions about extras: the ``extras`` attribute read and checked against the lock (the plan, before
any download), and which wheels get their extras restored (the build, once pip's closure is known).

rules_python drops the extras of every requirement edge (:mod:`patched_wheels.lock.closure`); with
``restore_extras`` the hub rewrites each wheel pip would install with extras so that the extras' requirements
are plain ``Requires-Dist`` entries. Which wheels, with which entries, and what that changes in the lock is
decided here by a pure function (:func:`restored_extras`) from pip's closure, which needs the fetched wheels'
``METADATA``, and the plan's specs, pins and references; its specs are checked as the configuration's are. Pip's
closure itself, the root extras it starts from (the lock's, the attribute's, the inferred ones) and what the user
is told about them, are decided by :func:`decided_closure` from values the build read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import AbstractSet, Collection, Mapping, Sequence

from packaging.requirements import Requirement
from packaging.utils import NormalizedName

from patched_wheels.base.names import canonicalize_name
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UNREADABLE_REQUIREMENT, UsageError
from patched_wheels.hub.spec import PatchedWheelSpec, check_specs, index_call
from patched_wheels.lock.closure import EXTRAS_SUFFIX, Closure, restored_requirements
from patched_wheels.lock.requiresdist import Dist
from patched_wheels.lock.rootextras import InferredExtra, inferred_root_extras
from patched_wheels.wheelfile.filename import WheelFilename


def extras_requirements(extras: Sequence[str], call: str) -> list[tuple[str, Requirement]]:
    """The ``extras`` attribute read: each a project and its extras (``jax[cuda13]``), nothing else; ``jax[]``
    says the root ``jax`` was asked with no extra (none is inferred for it:
    :func:`~patched_wheels.lock.rootextras.inferred_root_extras`). ``call``: the hub as the user wrote it."""
    read = []
    for written in extras:
        try:
            requirement = Requirement(written)
        except UNREADABLE_REQUIREMENT:
            requirement = None
        if (
            requirement is None
            or (not requirement.extras and "[" not in written)
            or requirement.specifier
            or requirement.marker
            or requirement.url
        ):
            raise UsageError(
                f'{call}: extras = [{json.dumps(written[:200])}]: write a project and its extras, e.g. "jax[cuda13]" '
                '(the version is the lock\'s; "jax[]" for none)'
            )
        read.append((written, requirement))
    return read


def root_extras(
    extras: Sequence[str], pinned: Collection[NormalizedName], call: str, lock: str
) -> dict[str, list[str]]:
    """Project -> the extras the ``extras`` attribute asks of it, each project among those the lock pins
    (``lock``: its attribute as the user wrote it, to name it); checked before any download: whether the wheel
    provides the extra is the build's check, with its METADATA."""
    asked: dict[str, list[str]] = {}
    for written, requirement in extras_requirements(extras, call):
        project = canonicalize_name(requirement.name)
        if project not in pinned:
            raise UsageError(f'{call}: extras = ["{written}"]: {requirement.name} is not pinned in {lock}')
        asked.setdefault(project, [])
        asked[project] += [
            extra for extra in sorted(canonicalize_name(e) for e in requirement.extras) if extra not in asked[project]
        ]
    return asked


def decided_closure(
    dists: Mapping[NormalizedName, Dist],
    pinned: Mapping[NormalizedName, AbstractSet[str]],
    asked: Mapping[str, Sequence[str]],
    *,
    call: str,
    lock: str,
    restores: bool,
) -> tuple[Closure, list[str]]:
    """Pip's closure of the lock (:mod:`patched_wheels.lock.closure`) and the warning lines that go with it, from
    what the build read: ``dists``, the fetched wheels' edges by project; ``pinned``, the extras the lock's own
    pins ask of a project of ``dists``, in the lock's order (pins whose marker holds here); ``asked``, the ``extras``
    attribute as the plan read it (:func:`root_extras`). ``call``: the hub as the user wrote it; ``lock``: its
    attribute as the user wrote it; ``restores``: its ``restore_extras``; all three only name things in messages.

    An extra the attribute asks that the wheel does not provide (``Provides-Extra``) is the one error: the user
    chose it, so it is refused, not guessed around. A root extra the lock shows but does not record
    (:func:`~patched_wheels.lock.rootextras.inferred_root_extras`, for the projects the attribute does not decide)
    is taken, with a warning each; so is every extra pip would be asked that its wheel does not provide, which
    pip installs without (:meth:`~patched_wheels.lock.closure.Closure.unprovided`). Pure: the caller says the
    lines, so they can be checked without wheels on disk."""
    roots = {project: set(extras) for project, extras in pinned.items()}
    for written, extras in asked.items():
        dist = dists.get(canonicalize_name(written))
        if dist is None:  # the plan names only projects it fetched: a configuration written by hand
            raise UsageError(
                f"{call}: internal: the configuration's root_extras names {written}, which was not fetched"
            )
        for extra in extras:
            if extra not in dist.provides:
                provided = ", ".join(sorted(dist.provides)) or "none"
                raise UsageError(
                    f'{call}: extras = ["{written}[{extra}]"]: {written} {dist.version} provides no extra {extra} (it provides: {provided})'
                )
            roots.setdefault(dist.project, set()).add(extra)
    known = Closure(dists, {project: tuple(sorted(extras)) for project, extras in roots.items()})
    inferred = inferred_root_extras(known, frozenset(canonicalize_name(project) for project in asked))
    warnings = []
    for found in inferred:
        roots[found.project] = {*roots.get(found.project, ()), found.extra}
        warnings.append(inferred_warning(call, lock, restores, found))
    closure = (
        Closure(dists, {project: tuple(sorted(extras)) for project, extras in roots.items()}) if inferred else known
    )
    for project, extra, asker in closure.unprovided():
        who = f"{asker} requires" if asker else f"{lock} asks for"
        warnings.append(
            f"{call}: {who} {project}[{extra}], but {project} {dists[project].version} does not provide the extra "
            f"{extra!r} (Provides-Extra): pip installs it without the extra, and so does the hub"
        )
    return closure, warnings


def inferred_warning(call: str, lock: str, restores: bool, found: InferredExtra) -> str:
    """The one line saying that the hub (``call``, whose lock is ``lock``: its attribute as the user wrote it;
    ``restores``: its ``restore_extras``) took ``found`` as a root extra, the pins that show it, and how to override."""
    done = "restores" if restores else "puts in pip_closure.json (restore_extras = False)"
    return (
        f"{call}: {done} {found.project}[{found.extra}], which {lock} "
        "does not record: the lock pins every requirement of that extra, and nothing else requires "
        f"{', '.join(found.evidence)} (pip install -r installs them); name {found.project}'s extras in extras "
        f'(["{found.project}[]"] for none) to decide otherwise'
    )


@dataclass(frozen=True)
class Restoration:
    """What the build makes once extras are restored: the specs to build, and what the lock's rewrite takes from
    them (the fields of :class:`~patched_wheels.hub.documents.HubConfig` of the same names, the plan's before)."""

    patched: tuple[PatchedWheelSpec, ...]
    replaced: Mapping[str, Sequence[str]]
    """Project -> sha256 of the originals its patched wheel replaces in the lock."""
    references: Mapping[str, tuple[str, str]]
    """Unpatched project -> (url, sha256) of its wheel."""


def restored_extras(
    planned: Restoration, closure: Closure, wheels: Sequence[WheelRef], *, hub: str, bzlmod: bool
) -> Restoration:
    """``planned`` (the plan's specs, replaced pins and references) once the wheels whose extras pip installs are
    rewritten: each gets those extras' requirements as plain ``Requires-Dist`` entries, in the user's
    ``patched_wheel`` of it if there is one, else in a spec of its own (local version ``+extras``), whose pin is
    then replaced, no longer referenced. ``wheels``: the fetched set, one per project of ``closure``. Every spec
    returned is checked as the configuration's are (:func:`~patched_wheels.hub.spec.check_specs`). The hub's
    ``restore_extras = False`` calls none of this."""
    closure.check_pinned(f"{index_call(hub, bzlmod)}: restore_extras")
    patched = list(planned.patched)
    replaced = dict(planned.replaced)
    references = dict(planned.references)
    by_name = {canonicalize_name(spec.name): index for index, spec in enumerate(patched)}
    by_project = {canonicalize_name(WheelFilename.parse(wheel.filename).name): wheel for wheel in wheels}
    for project, lines in restored_requirements(closure).items():
        if project in by_name:
            spec = patched[by_name[project]]
            patched[by_name[project]] = replace(spec, add_requires=(*spec.add_requires, *lines))
            continue
        wheel = by_project[project]
        patched.append(
            PatchedWheelSpec(name=project, suffix=EXTRAS_SUFFIX, add_requires=tuple(lines), wheel=wheel.path)
        )
        replaced[project] = [wheel.sha256]
        references.pop(project, None)
    check_specs(patched, hub, bzlmod)
    return Restoration(tuple(patched), replaced, references)
