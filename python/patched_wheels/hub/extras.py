"""The hub's decisions about extras: the ``extras`` attribute read and checked against the lock (the plan, before
any download), and which wheels get their extras restored (the build, once pip's closure is known).

rules_python drops the extras of every requirement edge (:mod:`patched_wheels.lock.closure`); with
``restore_extras`` the hub rewrites each wheel pip would install with extras so that the extras' requirements
are plain ``Requires-Dist`` entries. Which wheels, with which entries, and what that changes in the lock is
decided here by a pure function (:func:`restored_extras`) from pip's closure, which needs the fetched wheels'
``METADATA``, and the plan's specs, pins and references; its specs are checked as the configuration's are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Collection, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name

from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UsageError
from patched_wheels.hub.spec import PatchedWheelSpec, check_specs, index_call
from patched_wheels.lock.closure import EXTRAS_SUFFIX, Closure, restored_requirements
from patched_wheels.wheelfile.filename import WheelFilename


def extras_requirements(extras: Sequence[str], call: str) -> list[tuple[str, Requirement]]:
    """The ``extras`` attribute read: each a project and its extras (``jax[cuda13]``), nothing else; ``jax[]``
    says the root ``jax`` was asked with no extra (none is inferred for it:
    :func:`~patched_wheels.lock.rootextras.inferred_root_extras`). ``call``: the hub as the user wrote it."""
    read = []
    for written in extras:
        try:
            requirement = Requirement(written)
        except (InvalidRequirement, RecursionError):
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
    extras: Sequence[str], pinned: Collection[NormalizedName], call: str, lock: tuple[str, Path]
) -> dict[str, list[str]]:
    """Project -> the extras the ``extras`` attribute asks of it, each project among those the lock pins
    (``lock``: its attribute and path, to name it); checked before any download: whether the wheel provides the
    extra is the build's check, with its METADATA."""
    asked: dict[str, list[str]] = {}
    for written, requirement in extras_requirements(extras, call):
        project = canonicalize_name(requirement.name)
        if project not in pinned:
            attribute, lock_path = lock
            raise UsageError(
                f'{call}: extras = ["{written}"]: {requirement.name} is not pinned in {attribute} = "{lock_path}"'
            )
        asked.setdefault(project, [])
        asked[project] += [
            extra for extra in sorted(canonicalize_name(e) for e in requirement.extras) if extra not in asked[project]
        ]
    return asked


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
