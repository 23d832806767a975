"""The schema of one ``patched_wheel``: its fields, their JSON types and allowed values, and every check of a
spec that needs no wheel.

The Starlark side (PATCHED_WHEEL_SCHEMA in python/private/specs.bzl) gives Bazel the attributes; the rule
writes what the user declared as JSON (a WORKSPACE macro's values reach it untyped), which the hub's request
and configuration (:mod:`patched_wheels.hub.documents`) hold: :mod:`patched_wheels.base.schema` checks every value
against its field's annotation and metadata before any is used, :func:`check_spec` the attributes together,
each error naming the attribute as the user wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import Requirement

from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.base.names import canonicalize_name, character_problem, glob_problem, package_path
from patched_wheels.base.schema import VALUES, shown, to_json
from patched_wheels.base.usercode import code_problem
from patched_wheels.errors import UNREADABLE_REQUIREMENT, UsageError
from patched_wheels.patch.request import BAZEL_NAMES, MODES, SplitRequest, rpath_edit
from patched_wheels.patch.version import with_local_suffix

#: The fields of :class:`PatchedWheelSpec` that are no attribute of ``patched_wheel``: the plan sets them, a
#: request never holds them.
NOT_ATTRIBUTES = ("wheel", "recorded", "recorded_global")
#: The values of ``preload`` (PRELOAD_VALUES in specs.bzl; a test holds the two equal).
PRELOAD_VALUES = ("auto", "elf", "off")


@dataclass(frozen=True)
class PatchedWheelSpec:
    """What to do to one project's wheel: exactly the attributes of the Starlark ``patched_wheel``
    (PATCHED_WHEEL_SCHEMA in python/private/specs.bzl; a test holds the two to the same names, kinds and
    defaults), with ``patches`` as paths, and ``wheel``, the original once the plan has placed it."""

    name: str
    suffix: str
    requirement: str = ""
    urls: Sequence[str] = ()
    sha256: str = ""
    patches: Sequence[Path] = ()
    strip: int = 1
    remove_requires: Sequence[str] = ()
    add_requires: Sequence[str] = ()
    delete: Sequence[str] = ()
    preload: str = field(default="off", metadata={VALUES: PRELOAD_VALUES})
    preload_package: str = ""
    preload_wheels: Sequence[str] = ()
    probe: str = ""
    """With ``preload = "auto"``: the code run in one site-packages whose mapped libraries are preloaded too
    ("": ``import <preload_package>``); run only where the wheels' tags match the hub's interpreter.
    ``preload = "elf"`` runs none: the preload comes from the ELF graph alone."""
    split_into: str = ""
    split_max_size: int = 0
    split_move: Sequence[str] = ()
    rpath: Mapping[str, str] = field(default_factory=dict)
    """GLOB -> ``:``-separated ``$ORIGIN`` entries for the matching ELF members."""
    rpath_mode: str = field(default="set", metadata={VALUES: MODES})
    wheel: Path | None = None
    """Not an attribute: where the hub put the original wheel (set by :func:`~patched_wheels.hub.plan.plan_hub`)."""
    recorded: Sequence[str] = ()
    """Not an attribute: with ``preload = "elf"``, the SONAMEs a verified stack's row recorded its probe mapping
    (:mod:`patched_wheels.hub.verified`), preloaded as an observation would be, with no package code run."""
    recorded_global: Sequence[str] = ()
    """Not an attribute: of ``recorded``, those loaded RTLD_GLOBAL."""

    @property
    def package(self) -> str:
        """The import package that gets the preload: ``preload_package``, by default the project name,
        lower case, with ``-`` and ``.`` as ``_``."""
        return self.preload_package or self.name.replace("-", "_").replace(".", "_").lower()

    @property
    def preloads(self) -> bool:
        """Whether the patched wheel gets a preload module (``auto`` and ``elf``; only ``auto`` runs the probe)."""
        return self.preload != "off"

    @property
    def runs_probe(self) -> bool:
        """Whether the build runs package code (the probe) at fetch time: ``elf`` reads the ELF graph alone."""
        return self.preload == "auto"

    @property
    def needs_graph(self) -> bool:
        """Whether the spec's preload or split reads the library graph of the whole wheel set."""
        return self.preloads or bool(self.split_into)

    def to_json(self) -> dict[str, Any]:
        """The spec as the request and the configuration hold it (read back by :func:`~patched_wheels.base.schema.read_object`)."""
        return to_json(self)


def wheel_call(hub: str, bzlmod: bool, name: str, attributes: str = "") -> str:
    """A ``patched_wheel`` of ``hub`` as the user writes it, with ``attributes`` (``preload = "auto", …``) if
    given: what an error names, or tells the user to write."""
    more = f", {attributes}" if attributes else ""
    if bzlmod:
        return f'patched.patched_wheel(name = "{name}", hub = "{hub}"{more})'
    return f'patched_wheel(name = "{name}"{more}) of patched_index(name = "{hub}")'


def index_call(hub: str, bzlmod: bool) -> str:
    """The hub as the user wrote it, to name it in errors."""
    return f'patched.index(name = "{hub}")' if bzlmod else f'patched_index(name = "{hub}")'


def check_specs(specs: Sequence[PatchedWheelSpec], hub: str, bzlmod: bool) -> None:
    """:func:`check_spec` each of a hub's specs, each named as the user writes it: the configuration's, read by
    the build, and those the build makes (:func:`patched_wheels.hub.extras.restored_extras`)."""
    for spec in specs:
        check_spec(spec, wheel_call(hub, bzlmod, spec.name))


def check_spec(spec: PatchedWheelSpec, call: str) -> None:
    """Refuse ``spec`` if :func:`spec_problem` finds something, naming ``call`` (the ``patched_wheel`` as written)."""
    problem = spec_problem(spec)
    if problem:
        raise UsageError(f"{call}: {problem}")


def spec_problem(spec: PatchedWheelSpec) -> str | None:
    """What is contradictory or malformed in one spec, in the attributes' words; None when nothing is. The first
    problem is named: attributes given without the one they need before the values each is read as."""
    for check in (
        _path_problem,
        _source_problem,
        _dependency_problem,
        _glob_problem,
        _request_problem,
        _package_problem,
        _version_problem,
    ):
        if problem := check(spec):
            return problem
    return None


def path_problem(path: str) -> str | None:
    """Why ``path``, a path attribute's value the build hands to the file system, is no file's path; None when it
    may be one: :func:`~patched_wheels.base.names.character_problem`'s rule, the one of names and globs (a NUL is no
    file name's, a lone surrogate no UTF-8 name's, and the other control characters are refused with them: no label
    spells one)."""
    problem = character_problem(path)
    return f"{problem}, which no file's path holds" if problem else None


def _path_problem(spec: PatchedWheelSpec) -> str | None:
    """A ``patches`` entry that is no file's path (:func:`path_problem`): the build opens each."""
    for patch in spec.patches:
        if problem := path_problem(str(patch)):
            return f"patches = {shown(str(patch))}: {problem}"
    return None


def _source_problem(spec: PatchedWheelSpec) -> str | None:
    """``urls`` and ``sha256``: both or neither, and a digest."""
    if bool(spec.urls) != bool(spec.sha256):
        return "urls and sha256 go together: give both or neither"
    if spec.sha256 and not SHA256_HEX.fullmatch(spec.sha256):
        return f'sha256 = "{spec.sha256}" is not 64 lower-case hex digits'
    return None


def _dependency_problem(spec: PatchedWheelSpec) -> str | None:
    """An attribute given without the one it needs: the preload's options, the split's, ``rpath_mode``."""
    if not spec.preloads:
        for attribute in ("preload_wheels", "preload_package"):
            if getattr(spec, attribute):
                return f'{attribute} needs preload = "auto" or "elf"'
    if spec.probe and not spec.runs_probe:
        return f'probe needs preload = "auto" (preload = "{spec.preload}" runs no package code)'
    if spec.probe and (problem := code_problem(spec.probe)):
        return f"probe = {shown(spec.probe)}: {problem}"
    if spec.split_into:
        if bool(spec.split_max_size) == bool(spec.split_move):
            return "split_into needs exactly one of split_max_size and split_move" + (
                ", not both" if spec.split_move else ""
            )
        if spec.split_max_size < 0:
            return f"split_max_size = {spec.split_max_size} is negative"
    else:
        for attribute in ("split_max_size", "split_move"):
            if getattr(spec, attribute):
                return f"{attribute} needs split_into"
    if spec.recorded and spec.preload != "elf":
        return f'recorded libraries need preload = "elf" (preload = "{spec.preload}")'
    if not set(spec.recorded_global) <= set(spec.recorded):
        return f"recorded_global {sorted(set(spec.recorded_global) - set(spec.recorded))} not among recorded"
    if spec.rpath_mode != "set" and not spec.rpath:
        return f'rpath_mode = "{spec.rpath_mode}" needs rpath'
    return None


def _glob_problem(spec: PatchedWheelSpec) -> str | None:
    """A glob attribute holding a pattern that cannot match as written."""
    for attribute in ("delete", "split_move", "preload_wheels"):
        for glob in getattr(spec, attribute):
            if problem := glob_problem(glob):
                return f"{attribute} = {shown(glob)}: {problem}"
    return None


def _request_problem(spec: PatchedWheelSpec) -> str | None:
    """The split and the RPATH edits, as the patch will read them."""
    if spec.split_into:
        try:
            SplitRequest(
                spec.split_into, move=spec.split_move, max_size=spec.split_max_size or None, names=BAZEL_NAMES
            ).check_options()
        except UsageError as error:
            return str(error)
    if spec.rpath:
        for glob, entries in sorted(spec.rpath.items()):
            try:
                rpath_edit(glob, entries, spec.rpath_mode, origin=f"rpath = {{{shown(glob)}: {shown(entries)}}}")
            except UsageError as error:
                return str(error)
    return None


def _package_problem(spec: PatchedWheelSpec) -> str | None:
    """The package that gets the preload: a module name."""
    if spec.preloads:
        try:
            package_path(spec.package)
        except UsageError:
            written = (
                f'preload_package = "{spec.preload_package}"'
                if spec.preload_package
                else f'name = "{spec.name}" (the default preload_package, {spec.package!r})'
            )
            return (
                f"{written} is not a module name: write the package as Python imports it, e.g. jax_plugins.xla_cuda12"
            )
    return None


def _version_problem(spec: PatchedWheelSpec) -> str | None:
    """``strip``, the local version ``suffix``, and the ``requirement`` the locked release must satisfy."""
    if spec.strip < 0:
        return f"strip = {spec.strip} is negative"
    try:
        with_local_suffix("0", spec.suffix)
    except UsageError as error:
        return str(error)
    if spec.requirement:
        try:
            requirement = Requirement(spec.requirement)
        except UNREADABLE_REQUIREMENT as error:  # packaging's marker parser recurses per "("
            return f'requirement = "{spec.requirement[:200]}": {error}'
        if canonicalize_name(requirement.name) != canonicalize_name(spec.name):
            return f'requirement = "{spec.requirement}" names another project than name = "{spec.name}"'
    return None
