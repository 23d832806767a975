"""The hub's plan: every decision of the Bazel hub repository, made before it downloads anything.

The repository rule (``python/private/hub.bzl``) keeps the attribute schema, which Bazel needs at load
time, and the I/O: it writes what the user declared to a request file, runs ``patched-wheels hub plan``,
downloads what the plan lists to where it says, and runs ``patched-wheels hub build``. Everything in
between is decided here, once, in pure functions: the cross-field checks (named by the attributes the
user wrote, and made before the first download), which wheels are fetched and into which folder,
whether the ELF graph is needed, and the build step's configuration (``_hub.json``),
whose one schema is :class:`HubConfig` (written by :meth:`HubConfig.to_json`, read by
:meth:`HubConfig.from_json`; a missing or unknown key is an error, never a default).

The two phases: without resolved wheels, :func:`resolution` checks the request and says how to resolve
its lock; with them, :func:`plan_hub` places every wheel. The bzlmod extension runs the first (it
resolves, so ``MODULE.bazel.lock`` records the result) and the repository rule the second; in
WORKSPACE mode the rule runs both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename

from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.base.names import module_name
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UsageError
from patched_wheels.hub.facts import FILE as FACTS
from patched_wheels.hub.spec import PatchedWheelSpec, check_spec, choice_problem, same_keys, type_problem
from patched_wheels.loading.closure import FILE as CLOSURE
from patched_wheels.lock.formats import registry
from patched_wheels.lock.model import check_lock_value
from patched_wheels.lock.plan import INDEX_OPTIONS
from patched_wheels.lock.resolve import ResolvedWheel

#: The lock attributes of ``patched.index`` / ``patched_index``, exactly one of which is given, and the
#: lock format (``lock.formats.registry.FORMATS``) each is read as; ``patched-wheels resolve --FORMAT`` reads it.
LOCK_FORMATS = {entry.attribute: entry.name for entry in registry.LOCK_FORMATS}

#: Folders of the hub repository: the patched originals and the wheels the build only reads (their
#: ``METADATA`` for pip's closure, their libraries for the ELF graph) are deleted after the build;
#: ``index`` is served.
ORIGINALS, READ_ONLY, INDEX = "originals", "_wheels", "index"


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


@dataclass(frozen=True)
class HubRequest:
    """What the user declared for one hub (``patched.index`` + its ``patched_wheel`` tags, or the
    WORKSPACE ``patched_index`` macro), as the rule writes it; lock and patch labels are paths."""

    hub: str
    bzlmod: bool
    locks: Mapping[str, str]
    """Every lock attribute (LOCK_FORMATS) -> its path, "" when not given."""
    index_url: str
    index_option: str
    rules_python_version: str
    """The release in use ("0" before rules_python had features.bzl, "" for an unreleased checkout)."""
    repository: str
    """The hub repository's directory ("" in the extension, which places nothing)."""
    patched: Sequence[PatchedWheelSpec]
    wheel_facts: str = ""
    """The ``wheel_facts`` file's path (:mod:`patched_wheels.hub.facts`), "" when not given."""
    restore_extras: bool = True
    """Whether the wheels rules_python wires reach pip's closure (:mod:`patched_wheels.loading.closure`)."""
    extras: Sequence[str] = ()
    """The lock's root requirements with the extras the lock may not record, as written (``jax[cuda13]``)."""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "HubRequest":
        """The request, every value checked against its type before any is used (the specs' too: the
        :class:`PatchedWheelSpec` schema), each error naming the attribute as the user wrote it."""
        same_keys(
            raw,
            {
                "hub",
                "bzlmod",
                "index_url",
                "index_option",
                "rules_python_version",
                "repository",
                "patched",
                "wheel_facts",
                "restore_extras",
                "extras",
                *LOCK_FORMATS,
            },
            "hub request",
        )
        types = {
            "hub": "str",
            "bzlmod": "bool",
            "index_url": "str",
            "index_option": "str",
            "rules_python_version": "str",
            "repository": "str",
            "patched": "list",
            "wheel_facts": "str",
            "restore_extras": "bool",
            "extras": "Sequence[str]",
            **dict.fromkeys(LOCK_FORMATS, "str"),
        }
        for key, annotation in types.items():
            if problem := type_problem(key, raw[key], annotation):
                raise UsageError(f"hub request: {problem}")
        shell = cls(raw["hub"], raw["bzlmod"], {}, "", "", "", "", ())  # names the calls in errors
        patched = []
        for index, spec in enumerate(raw["patched"]):
            name = spec.get("name") if isinstance(spec, Mapping) else None
            call = (
                shell.wheel_call(PatchedWheelSpec(name, ""))
                if isinstance(name, str)
                else f"{shell.index_call}: patched[{index}]"
            )
            patched.append(PatchedWheelSpec.from_json(spec, placed=False, call=call))
        return cls(
            hub=raw["hub"],
            bzlmod=raw["bzlmod"],
            locks={attribute: raw[attribute] for attribute in LOCK_FORMATS},
            index_url=raw["index_url"],
            index_option=raw["index_option"],
            rules_python_version=raw["rules_python_version"],
            repository=raw["repository"],
            patched=patched,
            wheel_facts=raw["wheel_facts"],
            restore_extras=raw["restore_extras"],
            extras=tuple(raw["extras"]),
        )

    @property
    def index_call(self) -> str:
        return index_call(self.hub, self.bzlmod)

    def wheel_call(self, spec: PatchedWheelSpec) -> str:
        """A ``patched_wheel`` as the user wrote it, to name it in errors."""
        return wheel_call(self.hub, self.bzlmod, spec.name)

    @property
    def lock(self) -> tuple[str, str]:
        """The one lock attribute given and its path (:func:`check_request` made sure there is one)."""
        (given,) = [(attribute, path) for attribute, path in self.locks.items() if path]
        return given


@dataclass(frozen=True)
class HubConfig:
    """The build step's input (``_hub.json``): the one schema of it, written by the plan and read by
    ``patched-wheels hub build``."""

    hub: str
    bzlmod: bool
    """The hub's name and how it was declared: the build step's errors name the ``patched_wheel`` as written."""
    lock_attribute: str
    """Which of LOCK_FORMATS the user's lock came as: it decides the reader (and the ``uv.lock`` written)."""
    lock: Path
    index_dir: Path
    out: Path
    """The ``requirements_lock.txt`` written (every rules_python release reads it)."""
    out_uv_lock: Path | None
    """The ``uv.lock`` written beside it, for a ``uv_lock`` input (rules_python >= 2.2 reads it)."""
    wheels: Sequence[WheelRef]
    """The lock's wheels for the hub's interpreter, each fetched: their METADATA gives pip's closure, their
    libraries the ELF graph."""
    elf_cache: Path | None
    """The persistent ELF cache; None: none (``RULES_PATCHED_WHEELS_CACHE=off``)."""
    patched: Sequence[PatchedWheelSpec]
    """Each with ``wheel``, the placed original."""
    index_option: str
    index_url: str
    """Where the lock's unpatched pins come from (direct mode, if the lock names no index)."""
    replaced: Mapping[str, Sequence[str]]
    """Project -> sha256 of the originals its patched wheel replaces in the lock."""
    references: Mapping[str, tuple[str, str]]
    """Unpatched project -> (url, sha256) of its wheel, so its pin can name the file directly."""
    wheel_facts: Path | None = None
    """The facts file the user gave (``wheel_facts``), laid over the ELF and probe caches."""
    facts_out: Path | None = None
    """Where the build writes the facts it read (``wheel_facts.json``); None without an ELF cache to record."""
    restore_extras: bool = True
    """Rewrite the wheels whose extras pip installs, so that rules_python's wiring reaches pip's closure."""
    root_extras: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Project -> the extras the user's ``extras`` attribute asks of it (the lock's own are read from the lock)."""
    closure_out: Path | None = None
    """Where the build writes pip's closure of the lock (``pip_closure.json``, for ``layout_test``)."""
    every_pin_served: bool = False
    """``direct`` for a rules_python that installs with pip (:func:`installs_with_pip`): the index holds every
    wheel the plan fetched and the lock sends pip there alone, so a ``clean --expunge`` reads no wheel from the
    network (the hub's copies come from Bazel's repository cache)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "hub": self.hub,
            "bzlmod": self.bzlmod,
            "lock_attribute": self.lock_attribute,
            "lock": str(self.lock),
            "index_dir": str(self.index_dir),
            "out": str(self.out),
            "out_uv_lock": str(self.out_uv_lock) if self.out_uv_lock else None,
            "wheels": [
                {"filename": w.filename, "sha256": w.sha256, "path": str(w.path) if w.path else None}
                for w in self.wheels
            ],
            "elf_cache": str(self.elf_cache) if self.elf_cache else None,
            "patched": [spec.to_json() for spec in self.patched],
            "index_option": self.index_option,
            "index_url": self.index_url,
            "replaced": {project: list(digests) for project, digests in self.replaced.items()},
            "references": {project: list(reference) for project, reference in self.references.items()},
            "wheel_facts": str(self.wheel_facts) if self.wheel_facts else None,
            "facts_out": str(self.facts_out) if self.facts_out else None,
            "restore_extras": self.restore_extras,
            "root_extras": {project: list(extras) for project, extras in self.root_extras.items()},
            "closure_out": str(self.closure_out) if self.closure_out else None,
            "every_pin_served": self.every_pin_served,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "HubConfig":
        same_keys(raw, {f.name for f in fields(cls)}, "hub configuration")
        types = {
            "hub": "str",
            "bzlmod": "bool",
            "lock_attribute": "str",
            "lock": "Path",
            "index_dir": "Path",
            "out": "Path",
            "out_uv_lock": "Path | None",
            "wheels": "list",
            "elf_cache": "Path | None",
            "patched": "list",
            "index_option": "str",
            "index_url": "str",
            "replaced": "dict",
            "references": "dict",
            "wheel_facts": "Path | None",
            "facts_out": "Path | None",
            "restore_extras": "bool",
            "root_extras": "dict",
            "closure_out": "Path | None",
            "every_pin_served": "bool",
        }
        for key, annotation in types.items():
            if problem := type_problem(key, raw[key], annotation):
                raise UsageError(f"hub configuration: {problem}")
        for problem in (
            choice_problem("lock_attribute", raw["lock_attribute"], LOCK_FORMATS),
            choice_problem("index_option", raw["index_option"], INDEX_OPTIONS),
        ):
            if problem:
                raise UsageError(f"hub configuration: {problem}")
        for wheel in raw["wheels"]:
            same_keys(wheel, {"filename", "sha256", "path"}, "hub configuration wheel")
            for key, annotation in (("filename", "str"), ("sha256", "str"), ("path", "Path | None")):
                if problem := type_problem(key, wheel[key], annotation):
                    raise UsageError(f"hub configuration wheel: {problem}")
        for project, value in raw["replaced"].items():
            if problem := type_problem(f"replaced[{project!r}]", value, "Sequence[str]"):
                raise UsageError(f"hub configuration: {problem}")
        for project, value in raw["root_extras"].items():
            if problem := type_problem(f"root_extras[{project!r}]", value, "Sequence[str]"):
                raise UsageError(f"hub configuration: {problem}")
        for project, value in raw["references"].items():
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(item, str) for item in value)):
                raise UsageError(f"hub configuration: references[{project!r}]: expected [url, sha256]")
        optional = {
            key: Path(raw[key]) if raw[key] else None
            for key in ("out_uv_lock", "elf_cache", "wheel_facts", "facts_out", "closure_out")
        }
        return cls(
            hub=raw["hub"],
            bzlmod=raw["bzlmod"],
            lock_attribute=raw["lock_attribute"],
            lock=Path(raw["lock"]),
            index_dir=Path(raw["index_dir"]),
            out=Path(raw["out"]),
            wheels=[
                WheelRef(w["filename"], w["sha256"], Path(w["path"]) if w["path"] else None) for w in raw["wheels"]
            ],
            patched=[
                _checked(PatchedWheelSpec.from_json(spec, placed=True), raw["hub"], raw["bzlmod"])
                for spec in raw["patched"]
            ],
            index_option=raw["index_option"],
            index_url=raw["index_url"],
            replaced=dict(raw["replaced"]),
            references={project: (url, sha256) for project, (url, sha256) in raw["references"].items()},
            restore_extras=raw["restore_extras"],
            root_extras={project: tuple(extras) for project, extras in raw["root_extras"].items()},
            every_pin_served=raw["every_pin_served"],
            **optional,
        )


@dataclass(frozen=True)
class Fetch:
    """One download of the rule: ``output`` is relative to the hub repository."""

    urls: tuple[str, ...]
    sha256: str
    output: str


@dataclass(frozen=True)
class HubPlan:
    """What the rule does: download ``fetch``, build ``config``, delete ``scratch``, export ``exports``."""

    fetch: tuple[Fetch, ...]
    config: HubConfig
    scratch: tuple[str, ...] = (ORIGINALS, READ_ONLY)
    exports: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """What the rule reads (the config goes to ``_hub.json``, not to the rule)."""
        return {
            "fetch": [{"urls": list(f.urls), "sha256": f.sha256, "output": f.output} for f in self.fetch],
            "scratch": list(self.scratch),
            "exports": list(self.exports),
        }


def resolved_wheels(raw: object) -> list[ResolvedWheel]:
    """The wheels ``patched-wheels resolve`` printed (a list of :func:`resolved_wheel`), read strictly."""
    if problem := type_problem("resolved wheels", raw, "list"):
        raise UsageError(problem)
    return [resolved_wheel(wheel) for wheel in raw]  # type: ignore[attr-defined]


def resolved_wheel(raw: Mapping[str, Any]) -> ResolvedWheel:
    """One wheel as ``patched-wheels resolve`` prints it (:meth:`ResolvedWheel.as_json`), read strictly."""
    same_keys(raw, {"project", "filename", "urls", "sha256"}, "resolved wheel")
    for key, annotation in (("project", "str"), ("filename", "str"), ("urls", "Sequence[str]"), ("sha256", "str")):
        if problem := type_problem(key, raw[key], annotation):
            raise UsageError(f"resolved wheel: {problem}")
    if not raw["urls"]:
        raise UsageError(f"resolved wheel {raw['filename']!r}: no URL to fetch it from")
    return ResolvedWheel(canonicalize_name(raw["project"]), raw["filename"], tuple(raw["urls"]), raw["sha256"])


def check_request(request: HubRequest) -> None:
    """Every check that needs no wheel, each naming the attributes the user wrote: contradictory
    attributes fail here, before the first download."""
    given = [attribute for attribute, path in request.locks.items() if path]
    if len(given) != 1:
        raise UsageError(
            f"{request.index_call}: give exactly one of {', '.join(LOCK_FORMATS)}"
            + (f", not {' and '.join(given)}" if given else "")
        )
    allowed = index_options_for(request.rules_python_version)
    if request.index_option not in allowed:
        reason = (
            f"is not one of {', '.join(INDEX_OPTIONS)}"
            if request.index_option not in INDEX_OPTIONS
            else f"cannot be read by rules_python {request.rules_python_version or '(unreleased)'}, whose pip.parse "
            "fetches index pages with Bazel's downloader (a file:// index page is a directory listing to it); "
            'use index_option = "direct" (the default)'
        )
        raise UsageError(f'{request.index_call}: index_option = "{request.index_option}" {reason}')
    if request.index_url:  # written into the lock as --index-url: named here, not as the lock command's flag
        check_lock_value(request.index_url, f"{request.index_call}: index_url")
    seen: set[str] = set()
    for spec in request.patched:
        name = canonicalize_name(spec.name)
        if name in seen:
            raise UsageError(f"{request.wheel_call(spec)}: given twice for one hub; merge them")
        seen.add(name)
        check_spec(spec, request.wheel_call(spec))
    _extras_requirements(request)


def _checked(spec: PatchedWheelSpec, hub: str, bzlmod: bool) -> PatchedWheelSpec:
    """``spec``, once the checks that need no wheel pass (the build's configuration is checked whole before
    anything is written), named as the user wrote it in ``hub``."""
    check_spec(spec, wheel_call(hub, bzlmod, spec.name))
    return spec


def index_options_for(rules_python_version: str) -> tuple[str, ...]:
    """The ``index_option`` values a rules_python release reads (an unknown one counts as the newest).

    rules_python 2.x reads a lock's ``--index-url``/``--extra-index-url`` and fetches the pages with
    Bazel's downloader, which returns a directory listing for a ``file://`` index page: ``index-url``
    then falls back to pip for every pin and ``extra-index-url`` fails inside rules_python. Direct
    references are fetched by URL in every release, so they are the one form 2.x gets.
    """
    return INDEX_OPTIONS if installs_with_pip(rules_python_version) else ("direct",)


def installs_with_pip(rules_python_version: str) -> bool:
    """Whether the release downloads the lock's wheels with pip (before 2; an unknown one counts as the newest).

    Pip keeps no wheel in Bazel's repository cache: what it fetches by URL it fetches again after every
    ``bazel clean --expunge``. Such a hub serves every pin from its own index instead (``every_pin_served``).
    """
    major = rules_python_version.partition(".")[0]
    return major.isdigit() and int(major) < 2


def resolution(request: HubRequest) -> dict[str, Any]:
    """Phase one: the request checked, and how ``patched-wheels resolve`` reads its lock: the lock's
    flag and path, and the wheels the user named by ``urls`` + ``sha256`` (resolved from no page)."""
    check_request(request)
    attribute, path = request.lock
    explicit = {
        canonicalize_name(spec.name): {"urls": list(spec.urls), "sha256": spec.sha256}
        for spec in request.patched
        if spec.urls
    }
    return {"lock_args": [f"--{LOCK_FORMATS[attribute]}", path], "explicit": explicit}


def needs_graph(request: HubRequest) -> bool:
    """Whether the build reads the ELF graph of the whole wheel set (then the cache is worth asking)."""
    return any(spec.needs_graph for spec in request.patched)


def default_probes(specs: Sequence[PatchedWheelSpec]) -> list[str]:
    """The probe of each ``preload = "auto"`` spec (``elf`` runs none), as the build will run it: ``probe``, else the import of
    ``package`` (for a namespace package the build imports its regular packages instead, so its
    observation is never found cached here and every wheel is fetched: slower, never wrong)."""
    return [spec.probe or f"import {module_name(spec.package)}" for spec in specs if spec.runs_probe]


def plan_hub(request: HubRequest, wheels: Sequence[ResolvedWheel], *, elf_cache: Path | None) -> HubPlan:
    """Phase two: where each resolved wheel goes, and the build step's configuration.

    Every wheel is fetched: the build reads the ``METADATA`` of each (pip's closure, the extras to restore)
    and checks what a facts file or the helper cache says of it against the wheel itself. A patched original
    goes to ``originals/``; with an index option, or for a rules_python that installs with pip, every other
    wheel goes to the hub's index, which serves them all (the hub fetched them by sha256, through the
    repository cache: pip, fetching by URL, would read them from the network after each ``clean --expunge``);
    with direct references rules_python 2.x fetches each unpatched wheel itself (by sha256, so the hub's copy
    comes from the repository cache, not the network), and the hub's goes to ``_wheels/``, deleted after the
    build.
    """
    check_request(request)
    if not request.repository:
        raise UsageError(f"{request.index_call}: internal: the plan needs the hub repository's directory")
    # The lock names the patched wheels by file:// URL, which Bazel's downloader opens as written (undecoded):
    # refused now, before any download, rather than by the build as the lock command's --index.
    try:
        check_lock_value(request.repository, f"{request.index_call}: the hub repository's directory")
    except UsageError as error:
        raise UsageError(
            f"{error} (it lies in Bazel's output base: give Bazel one without it, --output_user_root)"
        ) from None
    attribute, lock_path = request.lock
    by_project = {wheel.project: wheel for wheel in wheels}
    root = Path(request.repository)
    graph = needs_graph(request)
    patched = []
    for spec in request.patched:
        wheel = by_project.get(canonicalize_name(spec.name))
        if wheel is None:
            raise UsageError(f'{request.wheel_call(spec)}: {spec.name} is not pinned in {attribute} = "{lock_path}"')
        _check_requirement(spec, wheel, request.wheel_call(spec))
        patched.append(replace(spec, wheel=root / ORIGINALS / wheel.filename))
    patched_projects = {canonicalize_name(spec.name) for spec in patched}
    root_extras = _root_extras(request, by_project)
    direct = request.index_option == "direct"
    every_pin_served = direct and installs_with_pip(request.rules_python_version)

    fetch, refs = [], []
    for wheel in wheels:
        _check_filename(wheel, request)
        read_only = direct and not every_pin_served
        folder = ORIGINALS if wheel.project in patched_projects else READ_ONLY if read_only else INDEX
        output = f"{folder}/{wheel.filename}"
        fetch.append(Fetch(wheel.urls, wheel.sha256, output))
        refs.append(WheelRef(wheel.filename, wheel.sha256, root / output))

    config = HubConfig(
        hub=request.hub,
        bzlmod=request.bzlmod,
        lock_attribute=attribute,
        lock=Path(lock_path),
        index_dir=root / INDEX,
        out=root / "requirements_lock.txt",
        out_uv_lock=root / "uv.lock" if attribute == "uv_lock" else None,
        wheels=refs,
        elf_cache=elf_cache if graph else None,
        patched=patched,
        index_option=request.index_option,
        index_url=request.index_url,
        replaced={wheel.project: [wheel.sha256] for wheel in wheels if wheel.project in patched_projects},
        references={
            wheel.project: (wheel.urls[0], wheel.sha256) for wheel in wheels if wheel.project not in patched_projects
        },
        wheel_facts=Path(request.wheel_facts) if request.wheel_facts else None,
        facts_out=root / FACTS if graph and elf_cache is not None else None,
        restore_extras=request.restore_extras,
        root_extras=root_extras,
        closure_out=root / CLOSURE,
        every_pin_served=every_pin_served,
    )
    exports = (
        ("requirements_lock.txt", CLOSURE)
        + (("uv.lock",) if config.out_uv_lock else ())
        + ((FACTS,) if config.facts_out else ())
    )
    return HubPlan(
        fetch=tuple(fetch),
        config=config,
        exports=exports,
    )


def _check_filename(wheel: ResolvedWheel, request: HubRequest) -> None:
    """The file name becomes a path in the hub repository: a wheel's name, never a path (a lock's or an
    index page's URL ending in ``..%2F`` must not write outside the repository)."""
    try:
        parse_wheel_filename(wheel.filename)
        valid = "/" not in wheel.filename and "\0" not in wheel.filename
    except InvalidWheelFilename:
        valid = False
    if not valid or not SHA256_HEX.fullmatch(wheel.sha256):
        attribute, path = request.lock
        raise UsageError(
            f'{request.index_call}: {attribute} = "{path}": {wheel.project} resolves to {wheel.filename!r} '
            f"(sha256 {wheel.sha256!r}), not a wheel file name with a sha256"
        )


def _root_extras(request: HubRequest, pinned: Mapping[NormalizedName, ResolvedWheel]) -> dict[str, list[str]]:
    """Project -> the extras the ``extras`` attribute asks of it, each project pinned by the lock (checked
    before any download; whether the wheel provides the extra is the build's check, with its METADATA)."""
    asked: dict[str, list[str]] = {}
    for written, requirement in _extras_requirements(request):
        project = canonicalize_name(requirement.name)
        if project not in pinned:
            attribute, lock_path = request.lock
            raise UsageError(
                f'{request.index_call}: extras = ["{written}"]: {requirement.name} is not pinned in {attribute} = "{lock_path}"'
            )
        asked.setdefault(project, [])
        asked[project] += [
            extra for extra in sorted(canonicalize_name(e) for e in requirement.extras) if extra not in asked[project]
        ]
    return asked


def _extras_requirements(request: HubRequest) -> list[tuple[str, Requirement]]:
    """The ``extras`` attribute read: each a project and its extras (``jax[cuda13]``), nothing else."""
    read = []
    for written in request.extras:
        try:
            requirement = Requirement(written)
        except (InvalidRequirement, RecursionError):
            requirement = None
        if (
            requirement is None
            or not requirement.extras
            or requirement.specifier
            or requirement.marker
            or requirement.url
        ):
            raise UsageError(
                f'{request.index_call}: extras = [{json.dumps(written[:200])}]: write a project and its extras, e.g. "jax[cuda13]" '
                "(the version is the lock's)"
            )
        read.append((written, requirement))
    return read


def _check_requirement(spec: PatchedWheelSpec, wheel: ResolvedWheel, call: str) -> None:
    """The user's optional ``requirement`` guards against patching another release than intended: checked
    on the resolved file's name (the download is pinned by sha256, and the reader checks the name against
    the metadata), so a wrong release fails before it is downloaded."""
    if not spec.requirement:
        return
    try:
        _, version, _, _ = parse_wheel_filename(wheel.filename)
    except InvalidWheelFilename as error:
        raise UsageError(f"{call}: {wheel.filename}: {error}") from None
    if not Requirement(spec.requirement).specifier.contains(version, prereleases=True):
        raise UsageError(
            f'{call}: the lock pins {wheel.filename}, version {version}, which does not satisfy requirement = "{spec.requirement}"'
        )
