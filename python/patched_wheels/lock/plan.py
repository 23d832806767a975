"""Decide how a lock changes for the wheels we wrote: one pure function, :func:`plan_lock`.

Given the lock's pins (any format), the files of our index and the index option, it returns a
:class:`LockPlan`; writers (pip text, uv.lock) render it and do the I/O. The rules:

* the pin of each patched project names the patched version (``torch==2.1.0`` ->
  ``torch==2.1.0+stripe.5``) with the hashes of the index's files; a pin written as a direct reference
  (``torch @ https://…/torch-2.1.0-….whl``, as uv and pip-compile write local wheels) counts as a pin of
  the version its wheel's file name says, so it is rewritten too, never silently left to the original;
* projects in the index that the lock does not pin (split siblings such as ``torch-libs``) are added,
  with the marker of the locked projects that require them; one that no wheel of the index the lock
  pins requires (a wheel for another lock that shares the index, or one left over) is not: a warning
  names it;
* ``direct`` (the default): each patched pin becomes a direct reference to its wheel, keeping the name
  as written, its extras and its marker; every other pin stays, fetched from the lock's own index (or by
  its URL, when the caller knows the one file it admits). When the pin keeps other hashes (wheels for
  other platforms, not patched), the reference gets the marker of its wheel's tags and those hashes
  stay usable on a second line with the opposite marker;
* which of a pin's hashes a patched wheel replaces: every one when the patched wheel is pure (it serves
  every platform, so no original wheel nor the sdist stays in use); else those ``replaced`` names for its
  project; without an entry, for a lock that names its files (uv.lock, pylock.toml), the wheels that
  install where the patched wheel installs (by their tags: an aarch64 wheel stays beside a patched x86_64
  one), and for any other pin every hash. The hashes left are each edit's ``kept``, for every writer;
* ``direct`` with ``every_pin_served`` (a hub for a rules_python that installs with pip, whose index holds
  the wheel of every pin): the patched pins as in ``direct``, every other pin as in ``index-url``, so pip
  reads the hub's copies and never the network (a direct reference to an original becomes a pin by version);
* otherwise one option line makes pip look at the index, written ``--option=value`` (rules_python
  0.22.1 passes each option line to pip as one argument). Under the lock's own ``--no-index`` pip reads
  no index URL at all, so the index is then named as ``--find-links=`` (a directory of wheels) in every
  mode. ``index-url`` drops the lock's other indexes: that mode promises pip looks at ours only.

Hashes: pip's hash-checking mode is all or nothing (one ``--hash`` switches it on for every pin), so a
lock that has hashes gets ``--hash`` on every line we write, and a lock without any (pip-compile's
default) gets none: a direct reference then carries its sha256 as the URL's ``#sha256=`` fragment,
which pip checks without switching the mode on.

Which index version replaces a pin (``2.1.0`` stands for the lock's pin):
1. the one version that extends the pin's local label (``2.1.0+stripe.5``, or
   ``2.1.0+cu118.stripe.5`` for ``2.1.0+cu118``): that is how ``patch`` names its output;
2. otherwise, if the index has the pinned version itself (e.g. a mirrored original), the pin
   stays; unless none of its hashes matches the index's files (a wheel patched or split under the
   same version): then its hashes are replaced, or in ``direct`` the pin becomes a reference to that
   wheel, as a patched version's does. A lock without hashes cannot tell the two apart: such a pin
   stays, with a warning where pip may then install either (every mode but ``index-url``);
3. otherwise the index's only version of the project (the index was made to override it).
Two candidates at any step is an error naming them.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

from packaging.utils import NormalizedName
from packaging.version import Version

from patched_wheels.base.names import canonicalize_name
from patched_wheels.errors import InvalidLockError, InvalidWheelError, UsageError
from patched_wheels.index.simple import SIMPLE_DIR, IndexedFile, group_by_project
from patched_wheels.lock.markers import WheelEnvironments, and_markers
from patched_wheels.lock.model import Lock, LockOption, Pin, PinFile, check_lock_value, file_url, marker_holds
from patched_wheels.wheelfile.filename import WheelFilename
from patched_wheels.wheelfile.metadata import required_projects

INDEX_OPTIONS = ("direct", "extra-index-url", "index-url", "find-links")
#: ``direct``: the only form every rules_python release reads (2.x fetches a lock's index pages with
#: Bazel's downloader, which returns a directory listing for a ``file://`` index page), and the
#: wheels nobody patched are not served by us at all. ``extra-index-url`` works whether the index
#: holds every locked wheel or only the patched ones; ``index-url`` when it mirrors the whole lock and
#: pip must not look anywhere else; ``find-links`` for a plain directory listing (pip only).
DEFAULT_INDEX_OPTION = "direct"


@dataclass(frozen=True)
class LockOptions:
    """How the lock should name our index (the ``lock`` command's flags, the hub's configuration): one value,
    what every writer of the plan reads, checked and made canonical once, when it is made.

    ``index_dir``: where the index is served from, absolute (a hub builds it in a temporary directory first;
    the locks name where it will be). ``upstream_index_url``: ``direct`` only, written as ``--index-url`` when
    the lock names no index of its own. ``replaced``: project -> sha256 of the original wheels its patched
    wheel replaces (the pin's other hashes stay for other platforms; without an entry every hash is replaced).
    ``references``: unpatched project -> (url, sha256) of the one file its pin admits here (``direct``).
    ``every_pin_served``: ``direct`` only, the index holds the wheel of every pin that applies here: pip is sent
    to it alone, as ``index-url`` sends it, and the patched pins stay direct references. Project names are
    kept canonical and ``replaced``'s digests lower-case, however they were given.
    """

    index_dir: Path
    index_option: str = DEFAULT_INDEX_OPTION
    upstream_index_url: str | None = None
    replaced: Mapping[str, Collection[str]] = field(default_factory=dict)
    references: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    every_pin_served: bool = False

    def __post_init__(self) -> None:
        replaced = {
            canonicalize_name(name): frozenset(d.lower() for d in digests) for name, digests in self.replaced.items()
        }
        object.__setattr__(self, "replaced", replaced)
        references = {canonicalize_name(name): (url, sha256) for name, (url, sha256) in self.references.items()}
        object.__setattr__(self, "references", references)
        if self.index_option not in INDEX_OPTIONS:
            raise UsageError(f"--index-option {self.index_option}: expected one of {', '.join(INDEX_OPTIONS)}")
        if self.every_pin_served and self.index_option != "direct":
            raise UsageError(f"--index-option {self.index_option}: every pin is served from the index only in direct")
        check_lock_value(str(self.index_dir), "--index")
        if self.upstream_index_url is not None:
            check_lock_value(self.upstream_index_url, "--upstream-index-url")
        for project, (url, sha256) in self.references.items():
            check_lock_value(url, f"references: {project}")
            check_lock_value(sha256, f"references: {project}")


@dataclass(frozen=True)
class NewPin:
    """A pin line to write: ``head==version`` or ``head @ url``, a marker, hashes, and who requires it."""

    head: str  # name and extras as the user wrote them
    version: Version | None  # None: a direct reference to no wheel (``url``), kept as it is
    url: str | None
    marker: str | None
    hashes: tuple[str, ...]
    via: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        """The PEP 508 requirement with its marker, as pip reads it."""
        text = f"{self.head} @ {self.url}" if self.url else f"{self.head}=={self.version}"
        return text + (f" ; {self.marker}" if self.marker else "")


@dataclass(frozen=True)
class PinEdit:
    """What happens to one pin: rewritten as ``lines``, or (``lines`` empty) edited where it is written:
    its version text becomes ``version`` and, unless ``hashes`` is None, its hashes become ``hashes``."""

    pin: Pin
    version: Version
    hashes: tuple[str, ...] | None
    lines: tuple[NewPin, ...]
    files: tuple[IndexedFile, ...]  # the index's files of the new version ((): not ours)
    kept: tuple[str, ...] = ()  # the pin's hashes still in use on the platforms ``files`` do not serve


@dataclass(frozen=True)
class LockPlan:
    """Every change to a lock, in file order, with a human-readable line per change."""

    edits: tuple[PinEdit, ...]
    added: tuple[NewPin, ...]
    added_files: tuple[tuple[IndexedFile, ...], ...]  # the index's files of each added pin
    option: str | None  # an index option line to add, "--find-links=file:///…"
    dropped: tuple[LockOption, ...]  # the lock's index options to drop
    changes: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # for the user: what the plan could not decide from the lock (rule 2)


def plan_lock(lock: Lock, files: Sequence[IndexedFile], options: LockOptions) -> LockPlan:
    """The changes that make ``lock`` install ``files`` (our index) as ``options`` say; no I/O."""
    index = group_by_project(files)
    direct = options.index_option == "direct"
    hashed = lock.uses_hashes
    edits: list[PinEdit] = []
    changes: list[str] = []
    undecided: list[str] = []  # unhashed pins of a version the index holds too (rule 2)
    parents: dict[NormalizedName, list[tuple[NormalizedName, str | None]]] = {}
    for pin in lock.pins:
        project = pin.project
        if project not in index:
            edits.extend(_referenced(pin, options) if direct else ())
            continue
        pinned = pin.pinned_version()
        target = _target_version(pin, pinned, index[project])
        target_files = tuple(f for f in index[project] if f.version == target)
        _record_parents(parents, project, pin.marker, target_files)
        stands_for = target == pinned and _may_stand_for(pin, target_files)
        original = target == pinned and (not stands_for or _holds_original(pin, target_files))
        if stands_for and not _admitted(pin) and options.index_option != "index-url":
            undecided.append(_spelled(pin, pinned))
        if direct or pin.url:
            served_original = target == pinned and pin.url is not None and options.every_pin_served
            if original and not served_original:
                continue  # the index holds the original itself: the lock's own index (or URL) serves it
            kept = _kept(pin, target_files, options.replaced.get(project))
            if direct and not served_original:
                lines = _direct_pin(pin, target_files, options.index_dir, kept, hashed)
            else:  # a direct reference, for an index option or to an original the index serves: a pin by version
                new_hashes = tuple(sorted(f"sha256:{f.sha256}" for f in target_files)) if hashed else ()
                lines = (NewPin(pin.head, target, None, pin.marker, new_hashes),)
            edits.append(PinEdit(pin, target, None, lines, target_files, kept))
            changes.append(f"{_spelled(pin, pinned)} -> {lines[0].requirement}")
            continue
        new_hashes = tuple(sorted(f"sha256:{f.sha256}" for f in target_files))
        refresh = bool(pin.hashes) and (target != pinned or not original)
        if target != pinned:
            changes.append(f"{pin.name}=={pinned} -> {pin.name}=={target}")
        elif refresh:
            changes.append(f"{pin.name}=={pinned}: hashes replaced")
        if target != pinned or refresh:
            edits.append(
                PinEdit(
                    pin,
                    target,
                    new_hashes if refresh else None,
                    (),
                    target_files,
                    _kept(pin, target_files, options.replaced.get(project)),
                )
            )

    option, dropped = _option_line(lock, options)
    if option is not None:
        changes.append(f"added {option}")
    members = sorted(set(index) & set(lock.members))
    if members:
        raise InvalidLockError(
            f"{lock.source}: {members[0]} is a workspace member of the lock (built from its own source, never "
            "installed from an index), so no wheel of the index can replace it"
        )
    added, added_files, unrequired = _added_pins(
        index, {pin.project for pin in lock.pins}, parents, hashed, lock.source, options
    )
    changes.extend(f"added {line.requirement}" for line in added)
    warnings = _warnings(lock.source, undecided, unrequired)
    return LockPlan(tuple(edits), added, added_files, option, dropped, tuple(changes), warnings)


def _referenced(pin: Pin, options: LockOptions) -> tuple[PinEdit, ...]:
    """``direct``: an unpatched pin whose only hash is the one file the caller knows it admits (``references``)
    names that file's URL, so pip needs no index page for it."""
    reference = options.references.get(pin.project)
    if not reference or pin.url or {h.lower() for h in pin.hashes} != {f"sha256:{reference[1]}"}:
        return ()
    version = pin.pinned_version()
    line = NewPin(pin.head, version, reference[0], pin.marker, (f"sha256:{reference[1]}",))
    return (PinEdit(pin, version, None, (line,), ()),)


def _warnings(source: str, undecided: Sequence[str], unrequired: Sequence[str]) -> tuple[str, ...]:
    """What the plan could not decide from the lock ``source``, one line for each kind: the unhashed pins of a
    version the index holds too (rule 2), and the index's projects left out (nothing the lock pins requires)."""
    warnings = []
    if undecided:
        named = ", ".join(undecided[:5]) + (f" and {len(undecided) - 5} more" if len(undecided) > 5 else "")
        warnings.append(
            f"{source}: {named}: the index holds this version too, and without hashes the lock "
            "cannot tell a wheel patched under the same version from the original, so the pin stays as it is (pip "
            "may install the lock's own); give a patched wheel a --suffix, or lock with hashes"
        )
    if unrequired:
        warnings.append(
            f"{source}: not added: {', '.join(unrequired)}, which the index holds but the lock does not pin and "
            "no wheel of the index that the lock pins requires (a wheel for another lock, or left over?)"
        )
    return tuple(warnings)


def _holds_original(pin: Pin, files: Iterable[IndexedFile]) -> bool:
    """Whether the index's ``files`` of the pinned version are the lock's own wheels (rule 2): one of them has a
    hash the pin admits, or the pin has none to tell them by."""
    admitted = _admitted(pin)
    return not admitted or any(f"sha256:{f.sha256}" in admitted for f in files)


def _admitted(pin: Pin) -> set[str]:
    """The ``sha256:<hex>`` digests ``pin`` admits: its hashes, and a direct reference's ``#sha256=`` fragment (how
    an unhashed lock's reference, ours included, carries the one digest pip checks; ``&subdirectory=`` may follow)."""
    admitted = {h.lower() for h in pin.hashes}
    fragment = urllib.parse.parse_qs(urllib.parse.urlsplit(pin.url or "").fragment)
    admitted.update(f"sha256:{digest.lower()}" for digest in fragment.get("sha256", []))
    return admitted


def _may_stand_for(pin: Pin, files: Sequence[IndexedFile]) -> bool:
    """Whether the pin may stand for one of ``files``, the index's wheels of its very version (rule 2): one of the
    files the lock names installs where one of them does, or its marker holds where one of them installs. A pin
    kept for other platforms (the second line :func:`_direct_pin` writes, a lock's line per platform) stands for
    none: its hashes are other wheels', not the originals of a wheel patched under the same version."""
    try:
        ours = [WheelEnvironments.of(file.tags) for file in files]
    except InvalidLockError:  # a platform no marker names: nothing tells where it installs
        return True
    if pin.files:
        theirs = [_locked_file_environments(file) for file in pin.files]
        return any(mine.overlaps(other) for mine in ours for other in theirs)
    if not pin.marker:
        return True
    samples = [sample for environments in ours for sample in _sample_environments(environments)]
    try:
        return any(marker_holds(pin.marker, sample, where=pin.span.where) for sample in samples)
    except InvalidLockError:  # a marker we cannot evaluate there: it may hold
        return True


def _sample_environments(environments: WheelEnvironments) -> list[dict[str, str]]:
    """A marker environment for each platform ``environments`` admit, with its Python where it names one (the other
    variables as this interpreter's, as ``marker_holds`` fills them)."""
    python = {"python_version": environments.python} if environments.python else {}
    if not environments.platforms:
        return [python]
    return [
        {**python, "sys_platform": system, "platform_machine": machine}
        for system, machine in sorted(environments.platforms)
    ]


def _spelled(pin: Pin, pinned: Version) -> str:
    return f"{pin.head} @ {pin.url}" if pin.url else f"{pin.name}=={pinned}"


def _option_line(lock: Lock, options: LockOptions) -> tuple[str | None, tuple[LockOption, ...]]:
    """The index option line to add and the lock's option lines to drop (module docstring)."""
    mode = "index-url" if options.every_pin_served else options.index_option
    if mode == "direct":
        if options.upstream_index_url is None or lock.options:
            return None, ()
        option = f"--index-url={options.upstream_index_url}"
    elif mode == "find-links" or any(o.kind == "no-index" for o in lock.options):
        option = f"--find-links={options.index_dir.as_uri()}"
    else:
        option = f"--{mode}={(options.index_dir / SIMPLE_DIR).as_uri()}"
    dropped: tuple[LockOption, ...] = ()
    if mode == "index-url":
        dropped = tuple(o for o in lock.options if o.kind != "no-index" and o.text != option)
    if any(o.text == option for o in lock.options):
        return None, dropped  # already there: locking its own output changes nothing
    return option, dropped


def _kept(pin: Pin, files: Sequence[IndexedFile], replaced: Collection[str] | None) -> tuple[str, ...]:
    """The pin's hashes that the patched ``files`` leave in use (module docstring).

    Patched files for every platform (a pure wheel) replace the whole pin whatever ``replaced`` says: they
    install wherever any of its wheels would (a wheel left for another platform would install there
    unpatched), and pip never builds the sdist when a wheel fits (the hub names only the wheel it fetched,
    and a requirements lock does not tell an sdist's hash from a wheel's)."""
    if replaced is None:
        replaced = _superseded(pin, files)
    kept = tuple(sorted(h for h in pin.hashes if h.partition(":")[2].lower() not in replaced))
    try:
        everywhere = WheelEnvironments.of(tag for file in files for tag in file.tags).marker() is None
    except InvalidLockError:  # a platform no marker names: _direct_pin names the pin that cannot keep them
        return kept
    return () if kept and everywhere else kept


def _superseded(pin: Pin, files: Sequence[IndexedFile]) -> frozenset[str]:
    """The sha256 of every hash of ``pin`` that ``files`` replace, told by the tags of the files the lock
    names: each wheel that installs somewhere a patched file installs. Every hash when none stays (so a
    lone sdist never keeps a second line), the lock names no files, or a patched file is of a platform no
    marker can name (``freebsd_13_amd64``): no line could then keep the others beside it."""
    every = frozenset(h.partition(":")[2].lower() for h in pin.hashes)
    if not pin.files:
        return every
    try:
        ours = [WheelEnvironments.of(f.tags) for f in files]
    except InvalidLockError:
        return every
    superseded: set[str | None] = set()  # None: a file the lock names without a hash (superseded, replacing none)
    for file in pin.files:
        theirs = _locked_file_environments(file)
        if file.sha256 is None or any(environments.overlaps(theirs) for environments in ours):
            superseded.add(file.sha256)
    return every if superseded >= {f.sha256 for f in pin.files} else frozenset(h for h in superseded if h is not None)


def _locked_file_environments(file: PinFile) -> WheelEnvironments:
    """Where a file the lock names installs, told by its name's tags; every environment for one whose name tells
    none (not a wheel: an sdist; a platform we cannot tell apart)."""
    try:
        return WheelEnvironments.of(WheelFilename.parse(file.filename).tags)
    except (InvalidWheelError, InvalidLockError):
        return WheelEnvironments(None, frozenset())


def _direct_pin(
    pin: Pin, files: Sequence[IndexedFile], directory: Path, left: tuple[str, ...], hashed: bool
) -> tuple[NewPin, ...]:
    """The lines that replace a patched pin in ``direct`` mode (module docstring).

    A direct reference names one file, so the patched version must have exactly one. If the pin
    keeps hashes of other wheels (a lock for several platforms), those stay on a second line whose
    marker excludes what the patched wheel's tags cover.
    """
    if len(files) != 1:
        names = ", ".join(sorted(f.filename for f in files))
        raise UsageError(
            f"{pin.span.where}: a direct reference names one file, but the index has "
            f"{names} for {pin.name}; use an index option instead"
        )
    (target,) = files
    url = file_url(directory / target.filename, None if hashed else target.sha256)
    hashes = (f"sha256:{target.sha256}",) if hashed else ()
    if not left or pin.url:
        # No other line serves other platforms, so no marker of the wheel's own: a marker makes some
        # rules_python releases evaluate markers with an interpreter, for nothing in a one-platform lock.
        return (NewPin(pin.head, target.version, url, pin.marker, hashes),)
    try:
        environments = WheelEnvironments.of(target.tags)  # not every platform: a pure wheel leaves nothing (_kept)
    except InvalidLockError as error:
        raise InvalidLockError(
            f"{pin.span.where}: {target.filename}: {error}, so the pin of {pin.name} cannot keep its {len(left)} other hashes beside it"
        ) from None
    return (
        NewPin(pin.head, target.version, url, and_markers(pin.marker, environments.marker()), hashes),
        NewPin(pin.head, pin.pinned_version(), None, and_markers(pin.marker, environments.complement()), left),
    )


def _target_version(pin: Pin, pinned: Version, files: Iterable[IndexedFile]) -> Version:
    """Which of the index's versions the pin should name (rules in the module docstring)."""
    versions = sorted({f.version for f in files})
    extending = [v for v in versions if _extends(v, pinned)]
    if len(extending) == 1:
        return extending[0]
    candidates = extending if extending else ([] if pinned in versions else versions)
    if not candidates:
        return pinned
    if len(candidates) == 1:
        return candidates[0]
    raise InvalidLockError(
        f"{pin.span.where}: the index has {pin.name} "
        f"{', '.join(map(str, candidates))} for the pin =={pinned}; keep only one in the index"
    )


def _extends(version: Version, pinned: Version) -> bool:
    """``2.1.0+stripe.5`` extends ``2.1.0``; ``2.1.0+cu118.stripe.5`` extends ``2.1.0+cu118``."""
    if version.local is None or Version(version.public) != Version(pinned.public):
        return False
    return pinned.local is None or version.local.startswith(pinned.local + ".")


def _record_parents(
    parents: dict[NormalizedName, list[tuple[NormalizedName, str | None]]],
    project: NormalizedName,
    marker: str | None,
    files: Iterable[IndexedFile],
) -> set[NormalizedName]:
    """Note which projects each indexed wheel of ``project`` (installed where ``marker`` holds) requires, to place
    split siblings in the lock; the projects noted."""
    noted = set()
    for indexed in files:
        if indexed.metadata is not None:
            for required in required_projects(indexed.metadata):
                parents.setdefault(required, []).append((project, marker))
                noted.add(required)
    return noted


def _added_pins(
    index: Mapping[NormalizedName, list[IndexedFile]],
    locked: set[NormalizedName],
    parents: Mapping[NormalizedName, list[tuple[NormalizedName, str | None]]],
    hashed: bool,
    source: str,
    options: LockOptions,
) -> tuple[tuple[NewPin, ...], tuple[tuple[IndexedFile, ...], ...], tuple[str, ...]]:
    """Pins for index projects the lock lacks, sorted by name, with the index's files of each; and, as
    ``project version``, those the lock lacks that no wheel of the index the lock pins requires, directly or
    through another one added (not added).

    The marker is copied from the projects requiring the new one when they agree, so a Linux-only torch does not
    drag its sibling onto other platforms (a project added for another added one takes that one's marker).
    """
    requirers = {project: list(rows) for project, rows in parents.items()}
    candidates = set(index) - locked
    markers: dict[NormalizedName, str | None] = {}
    queue = sorted(project for project in candidates if requirers.get(project))
    while queue:  # breadth first from the pinned projects' wheels: each added project's marker before its own needs'
        project = queue.pop(0)
        if project in markers:
            continue
        written = {marker for _, marker in requirers[project]}
        markers[project] = written.pop() if len(written) == 1 and None not in written else None
        needed = _record_parents(requirers, project, markers[project], index[project])
        queue += sorted(name for name in needed if name in candidates and name not in markers)
    added, added_files, unrequired = [], [], []
    for project in sorted(candidates):
        versions = sorted({f.version for f in index[project]})
        if project not in markers:
            unrequired.append(f"{project} {', '.join(map(str, versions))}")
            continue
        if len(versions) != 1:
            raise InvalidLockError(
                f"{source}: the index has {project} {', '.join(map(str, versions))}, which the lock "
                "does not pin; keep only one in the index"
            )
        url = None
        if options.index_option == "direct":
            if len(index[project]) != 1:
                raise UsageError(f"{source}: a direct reference names one file; the index has several of {project}")
            (single,) = index[project]
            url = file_url(options.index_dir / single.filename, None if hashed else single.sha256)
        hashes = tuple(sorted(f"sha256:{f.sha256}" for f in index[project])) if hashed else ()
        via = tuple(sorted({name for name, _ in requirers[project]}))
        added.append(NewPin(project, versions[0], url, markers[project], hashes, via))
        added_files.append(tuple(index[project]))
    return tuple(added), tuple(added_files), tuple(unrequired)
