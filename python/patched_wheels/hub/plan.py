"""The hub's plan: every decision of the Bazel hub repository, made before it downloads anything.

The repository rule (``python/private/hub.bzl``) keeps the attribute schema, which Bazel needs at load
time, and the I/O: it writes what the user declared to a request file, runs ``patched-wheels hub plan``,
downloads what the plan lists to where it says, and runs ``patched-wheels hub build``. Everything in
between is decided here, once, in pure functions: the cross-field checks (named by the attributes the
user wrote, and made before the first download), which wheels are fetched and into which folder,
whether the ELF graph is needed, and the build step's configuration (``_hub.json``),
whose one schema is :class:`HubConfig`. The request, the resolved wheels and the configuration are read by
one reader (:mod:`patched_wheels.base.schema`) from these dataclasses: a missing or unknown key is an error,
never a default.

The two phases: without resolved wheels, :func:`resolution` checks the request and says how to resolve
its lock; with them, :func:`plan_hub` places every wheel. The bzlmod extension runs the first (it
resolves, so ``MODULE.bazel.lock`` records the result) and the repository rule the second; in
WORKSPACE mode the rule runs both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename

from patched_wheels.base.fsutil import SHA256_HEX
from patched_wheels.base.names import module_name
from patched_wheels.base.schema import CALL, OMIT, VALUES, read_object, to_json, type_problem
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UsageError
from patched_wheels.hub.facts import FILE as FACTS
from patched_wheels.hub.spec import NOT_ATTRIBUTES, PatchedWheelSpec, check_spec
from patched_wheels.hub.verified import (
    VerifiedStack,
    VerifiedTable,
    applicable_rows,
    product_table,
    row_spec,
    stanza_attributes,
    uses_recording,
)
from patched_wheels.lock.closure import FILE as CLOSURE
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


def _request_call(read: Mapping[str, Any], index: int, raw: Any) -> str:
    """A request's ``patched_wheel`` as the user wrote it, to name it in errors (by its index until its name
    is a string)."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    if isinstance(name, str):
        return wheel_call(read["hub"], read["bzlmod"], name)
    return f"{index_call(read['hub'], read['bzlmod'])}: patched[{index}]"


def _config_call(_read: Mapping[str, Any], _index: int, raw: Any) -> str:
    """A configuration's ``patched_wheel``, to name it in the errors of a file the plan wrote."""
    return f"patched_wheel {raw.get('name')!r}" if isinstance(raw, Mapping) else "patched_wheel"


@dataclass(frozen=True)
class IndexAttributes:
    """The attributes of ``patched.index`` / ``patched_index`` as the user gave them: one field per entry of
    ``INDEX_ATTRS`` in hub.bzl, whose ``hub_request`` writes each (a label as its path, an unset one as null).
    The request and the build's configuration both hold this object, so a new attribute is its entry there,
    its field here and the code that reads it."""

    requirements_lock: Path | None
    uv_lock: Path | None
    pylock: Path | None
    """The lock attributes (LOCK_FORMATS), exactly one of them given (:meth:`check_one_lock`)."""
    index_url: str
    """Where the lock's unpatched pins come from (direct mode, if the lock names no index)."""
    index_option: str = field(metadata={VALUES: INDEX_OPTIONS})
    """How the written lock names the hub's wheels; which a rules_python release reads is the plan's check."""
    python_interpreter: str
    python_interpreter_target: Path | None
    """The interpreter the rule runs the helper with (the helper runs as it): recorded, not read."""
    restore_extras: bool
    """Whether the wheels rules_python wires reach pip's closure (:mod:`patched_wheels.lock.closure`)."""
    extras: Sequence[str]
    """The lock's root requirements with the extras the lock may not record, as written (``jax[cuda13]``)."""
    verified_stacks: bool
    """Whether a stack of the verified table (:mod:`patched_wheels.hub.verified`) the lock holds gets its row's
    ``patched_wheel`` where the user wrote none of that name."""
    wheel_facts: Path | None
    """The facts file the user gave (:mod:`patched_wheels.hub.facts`), laid over the ELF and probe caches."""
    netrc: str
    auth_patterns: Mapping[str, str]
    """Where the rule's downloads find their credentials (hub.bzl's ``index_credentials``): recorded, not read;
    a path and ``<password>`` patterns, never a credential (an ``index_url`` holding one is refused before)."""

    @property
    def locks(self) -> dict[str, Path | None]:
        """Every lock attribute (LOCK_FORMATS) -> its path, None when not given."""
        return {attribute: getattr(self, attribute) for attribute in LOCK_FORMATS}

    @property
    def lock(self) -> tuple[str, Path]:
        """The one lock attribute given and its path (:meth:`check_one_lock` made sure there is one)."""
        (given,) = [(attribute, path) for attribute, path in self.locks.items() if path is not None]
        return given

    def check_one_lock(self, where: str) -> None:
        """Refuse attributes naming no lock or several, naming ``where`` (the request's ``patched.index`` call,
        or the configuration's attributes: the build step reads a file anyone may have edited)."""
        given = [attribute for attribute, path in self.locks.items() if path is not None]
        if len(given) != 1:
            raise UsageError(
                f"{where}: give exactly one of {', '.join(LOCK_FORMATS)}"
                + (f", not {' and '.join(given)}" if given else "")
            )


@dataclass(frozen=True)
class HubRequest:
    """What the user declared for one hub (``patched.index`` + its ``patched_wheel`` tags, or the
    WORKSPACE ``patched_index`` macro), as the rule writes it (``hub_request`` in hub.bzl); labels are
    paths. Its schema: :mod:`patched_wheels.base.schema`."""

    hub: str
    bzlmod: bool
    attributes: IndexAttributes
    rules_python_version: str
    """The release in use ("0" before rules_python had features.bzl, "" for an unreleased checkout)."""
    repository: str
    """The hub repository's directory ("" in the extension, which places nothing)."""
    patched: Sequence[PatchedWheelSpec] = field(metadata={OMIT: NOT_ATTRIBUTES, CALL: _request_call})

    @classmethod
    def from_json(cls, raw: object) -> "HubRequest":
        """The request, every value checked against its type before any is used (the specs' too), each error
        naming the attribute as the user wrote it."""
        return read_object(cls, raw, "hub request")

    @property
    def index_call(self) -> str:
        return index_call(self.hub, self.bzlmod)

    def wheel_call(self, spec: PatchedWheelSpec) -> str:
        """A ``patched_wheel`` as the user wrote it, to name it in errors."""
        return wheel_call(self.hub, self.bzlmod, spec.name)

    @property
    def needs_graph(self) -> bool:
        """Whether the build reads the ELF graph of the whole wheel set (then the cache is worth asking): decided
        here once, and written into the configuration for the build (:attr:`HubConfig.needs_graph`)."""
        return any(spec.needs_graph for spec in self.patched)


@dataclass(frozen=True)
class HubConfig:
    """The build step's input (``_hub.json``): the one schema of it, written by the plan and read by
    ``patched-wheels hub build`` (:mod:`patched_wheels.base.schema`)."""

    hub: str
    bzlmod: bool
    """The hub's name and how it was declared: the build step's errors name the ``patched_wheel`` as written."""
    attributes: IndexAttributes
    """The request's, as the user gave them: the build reads each there (the plan copies none)."""
    index_dir: Path
    out: Path
    """The ``requirements_lock.txt`` written (every rules_python release reads it)."""
    out_uv_lock: Path | None
    """The ``uv.lock`` written beside it, for a ``uv_lock`` input (rules_python >= 2.2 reads it)."""
    wheels: Sequence[WheelRef]
    """The lock's wheels for the hub's interpreter, each fetched: their METADATA gives pip's closure, their
    libraries the ELF graph."""
    needs_graph: bool
    """Whether the build reads the ELF graph of the whole set (:attr:`HubRequest.needs_graph`)."""
    elf_cache: Path | None
    """The persistent ELF cache; None: none (``RULES_PATCHED_WHEELS_CACHE=off``)."""
    patched: Sequence[PatchedWheelSpec] = field(metadata={CALL: _config_call})
    """Each with ``wheel``, the placed original."""
    replaced: Mapping[str, Sequence[str]]
    """Project -> sha256 of the originals its patched wheel replaces in the lock."""
    references: Mapping[str, tuple[str, str]]
    """Unpatched project -> (url, sha256) of its wheel, so its pin can name the file directly."""
    facts_out: Path | None = None
    """Where the build writes the facts it read (``wheel_facts.json``); None without an ELF cache to record."""
    root_extras: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Project -> the extras the user's ``extras`` attribute asks of it, maybe none (``jax[]``); the lock's own are read
    from the lock, and no extra is inferred for a project named here."""
    closure_out: Path | None = None
    """Where the build writes pip's closure of the lock (``pip_closure.json``, for ``layout_test``)."""
    every_pin_served: bool = False
    """``direct`` for a rules_python that installs with pip (:func:`installs_with_pip`): the index holds every
    wheel the plan fetched and the lock sends pip there alone, so a ``clean --expunge`` reads no wheel from the
    network (the hub's copies come from Bazel's repository cache)."""

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, raw: object) -> "HubConfig":
        """The configuration, checked whole (types, then every spec as the plan checked it) before the build
        writes anything."""
        config = read_object(cls, raw, "hub configuration")
        config.attributes.check_one_lock("hub configuration: attributes")
        for spec in config.patched:
            check_spec(spec, wheel_call(config.hub, config.bzlmod, spec.name))
        return config


@dataclass(frozen=True)
class Fetch:
    """One download of the rule: ``output`` is relative to the hub repository."""

    urls: tuple[str, ...]
    sha256: str
    output: str


@dataclass(frozen=True)
class HubPlan:
    """What the rule does: download ``fetch``, build ``config``, delete ``scratch``, export ``exports`` and the
    wheels of ``index_folder`` (the plan names the hub's folders: the rule writes none of its own)."""

    fetch: tuple[Fetch, ...]
    config: HubConfig
    scratch: tuple[str, ...] = (ORIGINALS, READ_ONLY)
    exports: tuple[str, ...] = ()
    index_folder: str = INDEX
    notes: tuple[str, ...] = ()
    """What the user should hear of the plan's own decisions (the verified stacks applied): one warning line each,
    said by the command."""

    def to_json(self) -> dict[str, Any]:
        """What the rule reads (the config goes to ``_hub.json``, the notes to the warnings, not to the rule)."""
        return {key: value for key, value in to_json(self).items() if key not in ("config", "notes")}


def resolved_wheels(raw: object) -> list[ResolvedWheel]:
    """The wheels ``patched-wheels resolve`` printed (a list of :func:`resolved_wheel`), read strictly."""
    if problem := type_problem("resolved wheels", raw, Sequence[ResolvedWheel]):
        raise UsageError(problem)
    assert isinstance(raw, list)  # checked above
    return [resolved_wheel(wheel) for wheel in raw]


def resolved_wheel(raw: object) -> ResolvedWheel:
    """One wheel as ``patched-wheels resolve`` prints it (:meth:`ResolvedWheel.as_json`), read strictly."""
    wheel = read_object(ResolvedWheel, raw, "resolved wheel")
    if not wheel.urls:
        raise UsageError(f"resolved wheel {wheel.filename!r}: no URL to fetch it from")
    return replace(wheel, project=canonicalize_name(wheel.project))


def check_request(request: HubRequest) -> None:
    """Every check that needs no wheel, each naming the attributes the user wrote: contradictory
    attributes fail here, before the first download."""
    request.attributes.check_one_lock(request.index_call)
    index_option, index_url = request.attributes.index_option, request.attributes.index_url
    if index_option not in index_options_for(request.rules_python_version):  # one of INDEX_OPTIONS: the schema's
        raise UsageError(
            f'{request.index_call}: index_option = "{index_option}" cannot be read by rules_python '
            f"{request.rules_python_version or '(unreleased)'}, whose pip.parse fetches index pages with Bazel's "
            "downloader (a file:// index page is a directory listing to it); "
            'use index_option = "direct" (the default)'
        )
    if index_url:  # written into the lock as --index-url: named here, not as the lock command's flag
        check_lock_value(index_url, f"{request.index_call}: index_url")
    seen: set[str] = set()
    for spec in request.patched:
        name = canonicalize_name(spec.name)
        if name in seen:
            raise UsageError(f"{request.wheel_call(spec)}: given twice for one hub; merge them")
        seen.add(name)
        check_spec(spec, request.wheel_call(spec))
    _extras_requirements(request)


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
    attribute, path = request.attributes.lock
    explicit = {
        canonicalize_name(spec.name): {"urls": list(spec.urls), "sha256": spec.sha256}
        for spec in request.patched
        if spec.urls
    }
    return {"lock_args": [f"--{LOCK_FORMATS[attribute]}", str(path)], "explicit": explicit}


def default_probes(specs: Sequence[PatchedWheelSpec]) -> list[str]:
    """The probe of each ``preload = "auto"`` spec (``elf`` runs none), as the build will run it: ``probe``, else the import of
    ``package`` (for a namespace package the build imports its regular packages instead, so its
    observation is never found cached here and every wheel is fetched: slower, never wrong)."""
    return [spec.probe or f"import {module_name(spec.package)}" for spec in specs if spec.runs_probe]


def with_verified_stacks(
    request: HubRequest, wheels: Sequence[ResolvedWheel], stacks: VerifiedTable | None = None
) -> tuple[HubRequest, str | None]:
    """``request`` with the ``patched_wheel`` of each verified stack its lock holds where the user wrote none of
    that name (``stacks``: the table, by default the product's), and the one line that says which; ``request``
    itself and None when no row applies or ``verified_stacks = False``. Each applied spec is checked as the user's
    are (:func:`check_spec`): a row is data, and a flawed one fails here, before any download."""
    if not request.attributes.verified_stacks:
        return request, None
    table = product_table() if stacks is None else stacks
    written = {canonicalize_name(spec.name) for spec in request.patched}
    rows = applicable_rows(table, {wheel.project for wheel in wheels}, written)
    if not rows:
        return request, None
    recording = {row.stack: uses_recording(row, _versions(wheels, canonicalize_name(row.name))) for row in rows}
    applied = [row_spec(row, table.suffix, recording=recording[row.stack]) for row in rows]
    for spec in applied:
        check_spec(spec, f"verified stack {spec.name}: {request.wheel_call(spec)}")
    said = "; ".join(
        f"{row.stack}: {wheel_call(request.hub, request.bzlmod, row.name, stanza_attributes(row))}"
        + _recording_said(row, recording[row.stack])
        for row in rows
    )
    note = (
        f"{request.index_call}: the lock holds verified stacks, so the hub applies their rows "
        f'(docs/verified-stacks.md; suffix "{table.suffix}"): {said}; a patched_wheel of that name overrides '
        "its row, verified_stacks = False turns them off"
    )
    return replace(request, patched=(*request.patched, *applied)), note


def _recording_said(row: VerifiedStack, used: bool) -> str:
    """What the hub's line adds of a row's recording: used (no probe runs), or made on another release."""
    if used:
        return f" (its libraries recorded for {row.name}{row.recorded_for}: no probe runs)"
    return f" (its recording is for {row.name}{row.recorded_for}: the probe runs)" if row.recorded else ""


def _versions(wheels: Sequence[ResolvedWheel], project: NormalizedName) -> list[str]:
    """The versions of ``project``'s wheels, as their file names give them; a name that is no wheel's gives
    none here (the plan refuses it, naming the lock: :func:`_check_filename`), so no recording is used for it."""
    versions = []
    for wheel in wheels:
        if wheel.project == project:
            try:
                versions.append(str(parse_wheel_filename(wheel.filename)[1]))
            except InvalidWheelFilename:
                return []
    return versions


def plan_hub(
    request: HubRequest,
    wheels: Sequence[ResolvedWheel],
    *,
    elf_cache: Path | None,
    stacks: VerifiedTable | None = None,
) -> HubPlan:
    """Phase two: where each resolved wheel goes, and the build step's configuration.

    Every wheel is fetched: the build reads the ``METADATA`` of each (pip's closure, the extras to restore)
    and checks what a facts file or the helper cache says of it against the wheel itself. A patched original
    goes to ``originals/``; with an index option, or for a rules_python that installs with pip, every other
    wheel goes to the hub's index, which serves them all (the hub fetched them by sha256, through the
    repository cache: pip, fetching by URL, would read them from the network after each ``clean --expunge``);
    with direct references rules_python 2.x fetches each unpatched wheel itself (by sha256, so the hub's copy
    comes from the repository cache, not the network), and the hub's goes to ``_wheels/``, deleted after the
    build. The verified stacks' rows apply first (:func:`with_verified_stacks`, ``stacks``: the table).
    """
    check_request(request)
    request, note = with_verified_stacks(request, wheels, stacks)
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
    attribute, lock_path = request.attributes.lock
    by_project = {wheel.project: wheel for wheel in wheels}
    root = Path(request.repository)
    graph = request.needs_graph
    patched = []
    for spec in request.patched:
        wheel = by_project.get(canonicalize_name(spec.name))
        if wheel is None:
            raise UsageError(f'{request.wheel_call(spec)}: {spec.name} is not pinned in {attribute} = "{lock_path}"')
        _check_requirement(spec, wheel, request.wheel_call(spec))
        patched.append(replace(spec, wheel=root / ORIGINALS / wheel.filename))
    patched_projects = {canonicalize_name(spec.name) for spec in patched}
    root_extras = _root_extras(request, by_project)
    direct = request.attributes.index_option == "direct"
    every_pin_served = direct and installs_with_pip(request.rules_python_version)
    read_only = direct and not every_pin_served  # rules_python 2.x fetches each unpatched wheel itself

    fetch, refs = [], []
    for wheel in wheels:
        _check_filename(wheel, request)
        folder = ORIGINALS if wheel.project in patched_projects else READ_ONLY if read_only else INDEX
        output = f"{folder}/{wheel.filename}"
        fetch.append(Fetch(wheel.urls, wheel.sha256, output))
        refs.append(WheelRef(wheel.filename, wheel.sha256, root / output))

    config = HubConfig(
        hub=request.hub,
        bzlmod=request.bzlmod,
        attributes=request.attributes,
        index_dir=root / INDEX,
        out=root / "requirements_lock.txt",
        out_uv_lock=root / "uv.lock" if attribute == "uv_lock" else None,
        wheels=refs,
        needs_graph=graph,
        elf_cache=elf_cache if graph else None,
        patched=patched,
        replaced={wheel.project: [wheel.sha256] for wheel in wheels if wheel.project in patched_projects},
        references={
            wheel.project: (wheel.urls[0], wheel.sha256) for wheel in wheels if wheel.project not in patched_projects
        },
        facts_out=root / FACTS if graph and elf_cache is not None else None,
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
        notes=(note,) if note else (),
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
        attribute, path = request.attributes.lock
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
            attribute, lock_path = request.attributes.lock
            raise UsageError(
                f'{request.index_call}: extras = ["{written}"]: {requirement.name} is not pinned in {attribute} = "{lock_path}"'
            )
        asked.setdefault(project, [])
        asked[project] += [
            extra for extra in sorted(canonicalize_name(e) for e in requirement.extras) if extra not in asked[project]
        ]
    return asked


def _extras_requirements(request: HubRequest) -> list[tuple[str, Requirement]]:
    """The ``extras`` attribute read: each a project and its extras (``jax[cuda13]``), nothing else; ``jax[]``
    says the root ``jax`` was asked with no extra (none is inferred for it: :func:`~patched_wheels.lock.rootextras.inferred_root_extras`)."""
    read = []
    for written in request.attributes.extras:
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
                f'{request.index_call}: extras = [{json.dumps(written[:200])}]: write a project and its extras, e.g. "jax[cuda13]" '
                '(the version is the lock\'s; "jax[]" for none)'
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
