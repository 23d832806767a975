"""The hub's documents: what the user declared (:class:`HubRequest`), what the plan tells the rule
(:class:`HubPlan`) and the build step (:class:`HubConfig`, ``_hub.json``), and the wheels ``patched-wheels
resolve`` chose, one schema each.

Each is dataclasses read by one reader (:mod:`patched_wheels.base.schema`): a missing or unknown key is an
error, never a default, and every value is checked against its type before any is used, each error naming the
attribute as the user wrote it. The decisions that fill them are :mod:`patched_wheels.hub.plan`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from patched_wheels.base.names import canonicalize_name
from patched_wheels.base.schema import AMONG, CALL, OMIT, VALUES, read_object, shown, to_json, type_problem
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UsageError
from patched_wheels.hub.spec import NOT_ATTRIBUTES, PatchedWheelSpec, check_specs, index_call, path_problem, wheel_call
from patched_wheels.lock.formats import registry
from patched_wheels.lock.plan import INDEX_OPTIONS
from patched_wheels.lock.resolve import ResolvedWheel

#: The lock attributes of ``patched.index`` / ``patched_index``, exactly one of which is given, and the
#: lock format (``lock.formats.registry.FORMATS``) each is read as; ``patched-wheels resolve --FORMAT`` reads it.
LOCK_FORMATS = {entry.attribute: entry.name for entry in registry.LOCK_FORMATS}

#: Folders of the hub repository: the patched originals and the wheels the build only reads (their
#: ``METADATA`` for pip's closure, their libraries for the ELF graph) are deleted after the build;
#: ``index`` is served.
ORIGINALS, READ_ONLY, INDEX = "originals", "_wheels", "index"


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

    def as_written(self, attribute: str, labels: Mapping[str, str]) -> str:
        """``wheel_facts = "//third_party:wheel_facts.json"``: ``attribute`` and its value as the user wrote it, for
        messages (``labels``: the request's, each label attribute's spelling); a label attribute ``labels`` has no
        entry for (a configuration written by hand) by its path."""
        return f'{attribute} = "{labels.get(attribute, getattr(self, attribute))}"'

    def lock_as_written(self, labels: Mapping[str, str]) -> str:
        """The lock attribute given, as :meth:`as_written` names it."""
        return self.as_written(self.lock[0], labels)

    def check_one_lock(self, where: str) -> None:
        """Refuse attributes naming no lock or several, naming ``where`` (the request's ``patched.index`` call,
        or the configuration's attributes: the build step reads a file anyone may have edited)."""
        given = [attribute for attribute, path in self.locks.items() if path is not None]
        if len(given) != 1:
            raise UsageError(
                f"{where}: give exactly one of {', '.join(LOCK_FORMATS)}"
                + (f", not {' and '.join(given)}" if given else "")
            )

    def check_paths(self, where: str, labels: Mapping[str, str]) -> None:
        """Refuse a label attribute whose path is no file's path (:func:`~patched_wheels.hub.spec.path_problem`),
        naming ``where`` and the attribute as the user wrote it (``labels``), and the path it stands for: the helper
        opens each (the lock, the facts file), and the file system takes no NUL."""
        for attribute in LABEL_ATTRIBUTES:
            path = getattr(self, attribute)
            if path is not None and (problem := path_problem(str(path))):
                written = f"{attribute} = {shown(str(path))}"
                if attribute in labels:
                    written = f"{attribute} = {shown(labels[attribute])} (the path {shown(str(path))})"
                raise UsageError(f"{where}: {written}: {problem}")


LABEL_ATTRIBUTES = tuple(attribute.name for attribute in fields(IndexAttributes) if attribute.type == "Path | None")
"""The label attributes (the request holds a file's path): the keys a request's ``labels`` may hold."""


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
    labels: Mapping[str, str] = field(metadata={AMONG: LABEL_ATTRIBUTES})
    """Each label attribute given -> the label as the user wrote it (``//:requirements_lock.txt``; hub.bzl's
    ``label_as_written``): messages name an attribute by it, while ``attributes`` holds its path."""

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
    cache_root: Path | None
    """The helper's persistent caches (the ELF rows, the probes' observations); None: none
    (``RULES_PATCHED_WHEELS_CACHE=off``, or no spec reads the wheels)."""
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
    labels: Mapping[str, str] = field(default_factory=dict, metadata={AMONG: LABEL_ATTRIBUTES})
    """The request's (:attr:`HubRequest.labels`): the build's messages name a label attribute as the user wrote it."""
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
        config.attributes.check_paths("hub configuration: attributes", config.labels)
        check_specs(config.patched, config.hub, config.bzlmod)
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
