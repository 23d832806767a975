"""The schema of one ``patched_wheel``: its fields, their JSON types and allowed values, and every check of a
spec that needs no wheel.

The Starlark side (PATCHED_WHEEL_SCHEMA in python/private/specs.bzl) gives Bazel the attributes; the rule
writes what the user declared as JSON (a WORKSPACE macro's values reach it untyped), and this module reads
it: :meth:`PatchedWheelSpec.from_json` checks every value against its field's annotation before any is
used, :func:`check_spec` the attributes together, each error naming the attribute as the user wrote it.
The hub's plan (:mod:`patched_wheels.hub.plan`) and the build's configuration use both.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.base.names import glob_problem, package_path
from patched_wheels.errors import UsageError
from patched_wheels.patch.request import BAZEL_NAMES, MODES, SplitRequest, rpath_edit
from patched_wheels.patch.version import with_local_suffix

#: The values of ``preload`` (PRELOAD_VALUES in specs.bzl; a test holds the two equal).
PRELOAD_VALUES = ("auto", "elf", "off")

#: Each annotation the JSON schemas here use -> whether a JSON value has that type, and its name in errors.
#: The request is written by the rule from what the user declared (a WORKSPACE macro's values are not typed
#: by Bazel), so every value is checked against its field before it is used.
_JSON_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "str": (lambda value: isinstance(value, str), "a string"),
    "int": (lambda value: type(value) is int, "an integer"),
    "bool": (lambda value: type(value) is bool, "true or false"),
    "Sequence[str]": (
        lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
        "a list of strings",
    ),
    "Sequence[Path]": (
        lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
        "a list of paths",
    ),
    "Mapping[str, str]": (
        lambda value: isinstance(value, dict) and all(isinstance(item, str) for item in value.values()),
        "a dict of strings",
    ),
    "Path": (lambda value: isinstance(value, str) and bool(value), "a path"),
    "Path | None": (lambda value: value is None or isinstance(value, str) and bool(value), "a path or null"),
    "list": (lambda value: isinstance(value, list), "a list"),
    "dict": (lambda value: isinstance(value, dict), "an object"),
}


@functools.cache
def spec_values() -> dict[str, Sequence[str]]:
    """The attributes of ``patched_wheel`` with a fixed set of values (``values`` in specs.bzl), and those values."""
    return {"preload": PRELOAD_VALUES, "rpath_mode": MODES}


def shown(value: object) -> str:
    """``value`` as JSON, cut to a length an error line can quote."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:60] + "..."


def type_problem(attribute: str, value: object, annotation: str) -> str | None:
    """Why ``value`` is not of ``annotation`` (see :data:`_JSON_TYPES`), in the attribute's words; None when it is."""
    accepts, text = _JSON_TYPES[annotation]
    return None if accepts(value) else f"{attribute} = {shown(value)}: expected {text}"


def choice_problem(attribute: str, value: object, allowed: Collection[str]) -> str | None:
    """Why ``value`` is none of ``allowed``, in the attribute's words; None when it is one."""
    return None if value in allowed else f"{attribute} = {shown(value)}: must be one of {', '.join(allowed)}"


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
    preload: str = "off"
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
    rpath_mode: str = "set"
    wheel: Path | None = None
    """Not an attribute: where the hub put the original wheel (set by :func:`plan_hub`)."""

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
        raw = {f.name: getattr(self, f.name) for f in fields(self)}
        lists = {name: list(value) for name, value in raw.items() if isinstance(value, (tuple, list))}
        return {
            **raw,
            **lists,
            "patches": [str(p) for p in self.patches],
            "wheel": str(self.wheel) if self.wheel else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], *, placed: bool, call: str | None = None) -> "PatchedWheelSpec":
        """A spec from JSON with every key (``wheel`` only when ``placed``), each of its field's type and allowed
        values: the two sides of the schema changed apart if a key is missing or unknown, so say which, never
        drop or default one.  ``call``: the ``patched_wheel`` as the user wrote it, to name it in errors."""
        if call is None:
            call = f"patched_wheel {raw.get('name')!r}" if isinstance(raw, Mapping) else "patched_wheel"
        if not isinstance(raw, Mapping):
            raise UsageError(f"{call}: expected an object, got {shown(raw)}")
        names = {f.name for f in fields(cls)} - (set() if placed else {"wheel"})
        same_keys(raw, names, call)
        for spec_field in fields(cls):
            if spec_field.name in raw:
                problem = type_problem(spec_field.name, raw[spec_field.name], str(spec_field.type))
                allowed = spec_values().get(spec_field.name)
                if problem is None and allowed is not None:
                    problem = choice_problem(spec_field.name, raw[spec_field.name], allowed)
                if problem:
                    raise UsageError(f"{call}: {problem}")
        values = dict(raw)
        values["patches"] = [Path(p) for p in raw["patches"]]
        if placed:
            values["wheel"] = Path(raw["wheel"]) if raw["wheel"] else None
        return cls(**values)


def check_spec(spec: PatchedWheelSpec, call: str) -> None:
    """Refuse ``spec`` if :func:`spec_problem` finds something, naming ``call`` (the ``patched_wheel`` as written)."""
    problem = spec_problem(spec)
    if problem:
        raise UsageError(f"{call}: {problem}")


def spec_problem(spec: PatchedWheelSpec) -> str | None:
    """What is contradictory or malformed in one spec, in the attributes' words; None when nothing is."""
    if bool(spec.urls) != bool(spec.sha256):
        return "urls and sha256 go together: give both or neither"
    if spec.sha256 and not SHA256_HEX.fullmatch(spec.sha256):
        return f'sha256 = "{spec.sha256}" is not 64 lower-case hex digits'
    if not spec.preloads:
        for attribute in ("preload_wheels", "preload_package"):
            if getattr(spec, attribute):
                return f'{attribute} needs preload = "auto" or "elf"'
    if spec.probe and not spec.runs_probe:
        return f'probe needs preload = "auto" (preload = "{spec.preload}" runs no package code)'
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
    if spec.rpath_mode != "set" and not spec.rpath:
        return f'rpath_mode = "{spec.rpath_mode}" needs rpath'
    for attribute in ("delete", "split_move", "preload_wheels"):
        for glob in getattr(spec, attribute):
            if problem := glob_problem(glob):
                return f"{attribute} = {shown(glob)}: {problem}"
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
    if spec.strip < 0:
        return f"strip = {spec.strip} is negative"
    try:
        with_local_suffix("0", spec.suffix)
    except UsageError as error:
        return str(error)
    if spec.requirement:
        try:
            requirement = Requirement(spec.requirement)
        except (InvalidRequirement, RecursionError) as error:  # packaging's marker parser recurses per "("
            return f'requirement = "{spec.requirement[:200]}": {error}'
        if canonicalize_name(requirement.name) != canonicalize_name(spec.name):
            return f'requirement = "{spec.requirement}" names another project than name = "{spec.name}"'
    return None


def same_keys(raw: Mapping[str, Any], expected: Collection[str], what: str) -> None:
    """Refuse a JSON object whose keys are not exactly ``expected``: one schema, no silent defaults."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what}: expected an object, got {type(raw).__name__}")
    missing, unknown = sorted(set(expected) - set(raw)), sorted(set(raw) - set(expected))
    if missing or unknown:
        raise ValueError(
            f"{what}: "
            + "; ".join(
                part
                for part in (f"missing keys {missing}" if missing else "", f"unknown keys {unknown}" if unknown else "")
                if part
            )
        )
