"""The hub's plan: every decision of the Bazel hub repository, made before it downloads anything.

The repository rule (``python/private/hub.bzl``) keeps the attribute schema, which Bazel needs at load
time, and the I/O: it writes what the user declared to a request file, runs ``patched-wheels hub plan``,
downloads what the plan lists to where it says, and runs ``patched-wheels hub build``. Everything in
between is decided here, once, in pure functions: the cross-field checks (named by the attributes the
user wrote, and made before the first download), which wheels are fetched and into which folder,
whether the ELF graph is needed, and the build step's configuration (``_hub.json``). What they read and
write are the hub's documents (:mod:`patched_wheels.hub.documents`); the choices the build can make only
once it holds the wheels (which extras to restore) are :mod:`patched_wheels.hub.extras`'.

The two phases: without resolved wheels, :func:`resolution` checks the request and says how to resolve
its lock; with them, :func:`checked_request` completes it and :func:`plan_hub` places every wheel. The
bzlmod extension runs the first (it resolves, so ``MODULE.bazel.lock`` records the result) and the
repository rule the second; in WORKSPACE mode the rule runs both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from packaging.requirements import Requirement

from patched_wheels.base.fsutil import NAME_MAX, SHA256_HEX, longest_temp_name
from patched_wheels.base.names import canonicalize_name, module_name
from patched_wheels.base.schema import shown
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import InvalidWheelError, UsageError
from patched_wheels.hub.documents import (
    INDEX,
    LOCK_FORMATS,
    ORIGINALS,
    READ_ONLY,
    Fetch,
    HubConfig,
    HubPlan,
    HubRequest,
)
from patched_wheels.hub.extras import extras_requirements, root_extras
from patched_wheels.hub.facts import FILE as FACTS
from patched_wheels.hub.spec import PatchedWheelSpec, check_spec, wheel_call
from patched_wheels.hub.verified import (
    VerifiedStack,
    VerifiedTable,
    applicable_rows,
    product_table,
    row_spec,
    stanza_attributes,
    uses_recording,
)
from patched_wheels.index.simple import METADATA_SUFFIX
from patched_wheels.lock.closure import FILE as CLOSURE
from patched_wheels.lock.model import check_lock_value
from patched_wheels.lock.plan import INDEX_OPTIONS
from patched_wheels.lock.resolve import ResolvedWheel
from patched_wheels.patch.split import sibling_wheel_name
from patched_wheels.patch.version import with_local_suffix
from patched_wheels.wheelfile import WheelFilename

if TYPE_CHECKING:
    from packaging.utils import NormalizedName


def check_request(request: HubRequest) -> None:
    """Every check that needs no wheel, each naming the attributes the user wrote: contradictory
    attributes fail here, before the first download."""
    request.attributes.check_one_lock(request.index_call)
    request.attributes.check_paths(request.index_call, request.labels)
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
    extras_requirements(request.attributes.extras, request.index_call)


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


@dataclass(frozen=True)
class CheckedRequest:
    """A request checked (:func:`check_request`), with the rows of the verified stacks its lock holds applied
    (:func:`with_verified_stacks`), and the wheels it resolved to, each file name read once: what
    :func:`plan_hub` places. Made once per plan: its specs also say whether the build reads the ELF graph,
    which decides whether the caller asks where the cache is (:attr:`HubRequest.needs_graph`)."""

    request: HubRequest
    wheels: Sequence[ResolvedWheel]
    filenames: Mapping[str, WheelFilename | InvalidWheelError]
    """File name -> its parts (:meth:`WheelFilename.parse`), or why it is no wheel's name (the plan refuses it:
    :func:`_check_filename`)."""
    notes: tuple[str, ...]
    """What the user should hear of the rows applied: :attr:`HubPlan.notes`."""


def checked_request(
    request: HubRequest, wheels: Sequence[ResolvedWheel], stacks: VerifiedTable | None = None
) -> CheckedRequest:
    """``request`` checked and completed by the verified stacks (``stacks``: the table, by default the product's)
    for ``wheels``: the user's attributes are checked first, then each row applied."""
    check_request(request)
    filenames = {wheel.filename: _parsed(wheel.filename) for wheel in wheels}
    applied, note = with_verified_stacks(request, wheels, filenames, stacks)
    return CheckedRequest(applied, tuple(wheels), filenames, (note,) if note else ())


def _parsed(filename: str) -> WheelFilename | InvalidWheelError:
    """The parts of a wheel's file name, read as every command reads a wheel's (:meth:`WheelFilename.parse`), or why
    it is no wheel's name."""
    try:
        return WheelFilename.parse(filename)
    except InvalidWheelError as error:
        return error


def with_verified_stacks(
    request: HubRequest,
    wheels: Sequence[ResolvedWheel],
    filenames: Mapping[str, WheelFilename | InvalidWheelError],
    stacks: VerifiedTable | None = None,
) -> tuple[HubRequest, str | None]:
    """``request`` with the ``patched_wheel`` of each verified stack its lock holds where the user wrote none of
    that name (``stacks``: the table, by default the product's; ``filenames``: each wheel's parsed, by file name), and the
    one line that says which; ``request`` itself and None when no row applies or ``verified_stacks = False``. Each
    applied spec is checked as the user's are (:func:`check_spec`): a row is data, and a flawed one fails here,
    before any download."""
    if not request.attributes.verified_stacks:
        return request, None
    table = product_table() if stacks is None else stacks
    written = {canonicalize_name(spec.name) for spec in request.patched}
    rows = applicable_rows(table, {wheel.project for wheel in wheels}, written)
    if not rows:
        return request, None
    recording = {
        row.stack: uses_recording(row, _versions(wheels, filenames, canonicalize_name(row.name))) for row in rows
    }
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


def _versions(
    wheels: Sequence[ResolvedWheel],
    filenames: Mapping[str, WheelFilename | InvalidWheelError],
    project: NormalizedName,
) -> list[str]:
    """The versions of ``project``'s wheels, as their file names give them; a name that is no wheel's gives
    none here (the plan refuses it, naming the lock: :func:`_check_filename`), so no recording is used for it."""
    found = [filenames[wheel.filename] for wheel in wheels if wheel.project == project]
    versions = [str(parsed.version) for parsed in found if not isinstance(parsed, InvalidWheelError)]
    return versions if len(versions) == len(found) else []


def plan_hub(checked: CheckedRequest, *, cache_root: Path | None) -> HubPlan:
    """Phase two: where each resolved wheel of ``checked`` goes, and the build step's configuration
    (``cache_root``: the helper's caches, kept only where the build reads the ELF graph).

    Every wheel is fetched: the build reads the ``METADATA`` of each (pip's closure, the extras to restore)
    and checks what a facts file or the helper cache says of it against the wheel itself. A patched original
    goes to ``originals/``; with an index option, or for a rules_python that installs with pip, every other
    wheel goes to the hub's index, which serves them all (the hub fetched them by sha256, through the
    repository cache: pip, fetching by URL, would read them from the network after each ``clean --expunge``);
    with direct references rules_python 2.x fetches each unpatched wheel itself (by sha256, so the hub's copy
    comes from the repository cache, not the network), and the hub's goes to ``_wheels/``, deleted after the
    build. The verified stacks' rows were applied with the checks (:func:`checked_request`).
    """
    request, wheels = checked.request, checked.wheels
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
    attribute, _ = request.attributes.lock
    lock_shown = request.attributes.lock_as_written(request.labels)
    by_project = {wheel.project: wheel for wheel in wheels}
    root = Path(request.repository)
    graph = request.needs_graph
    patched = []
    for spec in request.patched:
        wheel = by_project.get(canonicalize_name(spec.name))
        if wheel is None:
            raise UsageError(f"{request.wheel_call(spec)}: {spec.name} is not pinned in {lock_shown}")
        parsed = checked.filenames[wheel.filename]
        _check_requirement(spec, wheel, parsed, request.wheel_call(spec))
        _check_output_names(spec, parsed, request.wheel_call(spec))
        patched.append(replace(spec, wheel=root / ORIGINALS / wheel.filename))
    patched_projects = {canonicalize_name(spec.name) for spec in patched}
    asked = root_extras(request.attributes.extras, by_project, request.index_call, lock_shown)
    direct = request.attributes.index_option == "direct"
    every_pin_served = direct and installs_with_pip(request.rules_python_version)
    read_only = direct and not every_pin_served  # rules_python 2.x fetches each unpatched wheel itself

    fetch, refs = [], []
    for wheel in wheels:
        _check_filename(wheel, checked.filenames[wheel.filename], request)
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
        cache_root=cache_root if graph else None,
        patched=patched,
        replaced={wheel.project: [wheel.sha256] for wheel in wheels if wheel.project in patched_projects},
        references={
            wheel.project: (wheel.urls[0], wheel.sha256) for wheel in wheels if wheel.project not in patched_projects
        },
        facts_out=root / FACTS if graph and cache_root is not None else None,
        root_extras=asked,
        closure_out=root / CLOSURE,
        labels=request.labels,
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
        notes=checked.notes,
    )


def _check_filename(wheel: ResolvedWheel, parsed: WheelFilename | InvalidWheelError, request: HubRequest) -> None:
    """The file name becomes a path in the hub repository: a wheel's name (``parsed``: what reading it gave),
    never a path (a lock's or an index page's URL ending in ``..%2F`` must not write outside the repository; the
    parse reads no platform tag, so a ``/`` there is refused here)."""
    valid = not isinstance(parsed, InvalidWheelError) and "/" not in wheel.filename and "\0" not in wheel.filename
    if not valid or not SHA256_HEX.fullmatch(wheel.sha256):
        lock = request.attributes.lock_as_written(request.labels)
        raise UsageError(
            f"{request.index_call}: {lock}: {wheel.project} resolves to {wheel.filename!r} "
            f"(sha256 {wheel.sha256!r}), not a wheel file name with a sha256"
        )


def output_names(spec: PatchedWheelSpec, original: WheelFilename) -> tuple[str, ...]:
    """The file names of the wheels the build writes for ``spec`` from the ``original`` wheel's (parsed): the
    patched wheel (the version with ``suffix`` as its local label) and, with ``split_into``, its sibling."""
    patched = original.with_version(with_local_suffix(str(original.version), spec.suffix))
    return (patched, sibling_wheel_name(spec.split_into, patched)) if spec.split_into else (patched,)


def _check_output_names(spec: PatchedWheelSpec, parsed: WheelFilename | InvalidWheelError, call: str) -> None:
    """Refuse a ``suffix`` (with ``split_into``) that makes a name of a file the build writes longer than a file
    name may be (:data:`NAME_MAX` bytes; the longest is the temp file of an output wheel's ``.metadata``), before
    any download: the build would fail only once it writes, naming a temp file. A file name that is no wheel's
    (``parsed``) is :func:`_check_filename`'s to refuse."""
    if isinstance(parsed, InvalidWheelError):
        return
    names = output_names(spec, parsed)
    longest = max(names, key=lambda name: longest_temp_name(name + METADATA_SUFFIX))
    written = longest_temp_name(longest + METADATA_SUFFIX)
    if written > NAME_MAX:
        attributes = f"suffix = {shown(spec.suffix)}"
        if longest != names[0]:  # the split's sibling: its name is split_into's
            attributes += f" with split_into = {shown(spec.split_into)}"
        raise UsageError(
            f"{call}: {attributes} makes the wheel {shown(longest)} ({len(longest.encode())} bytes), and the "
            f"build writes files named after it in up to {written} bytes (its index's .metadata, written to a temp "
            f"file first), more than the {NAME_MAX} a file name holds: give a suffix at least {written - NAME_MAX} "
            "characters shorter"
        )


def _check_requirement(
    spec: PatchedWheelSpec, wheel: ResolvedWheel, parsed: WheelFilename | InvalidWheelError, call: str
) -> None:
    """The user's optional ``requirement`` guards against patching another release than intended: checked
    on the resolved file's name (``parsed``: what reading it gave; the download is pinned by sha256, and the
    reader checks the name against the metadata), so a wrong release fails before it is downloaded."""
    if not spec.requirement:
        return
    if isinstance(parsed, InvalidWheelError):  # its message names the file: "<file>: not a valid wheel filename (…)"
        raise UsageError(f"{call}: {parsed}")
    version = parsed.version
    if not Requirement(spec.requirement).specifier.contains(version, prereleases=True):
        raise UsageError(
            f'{call}: the lock pins {wheel.filename}, version {version}, which does not satisfy requirement = "{spec.requirement}"'
        )
