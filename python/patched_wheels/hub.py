"""Build a hub: the patched wheels, the local index serving every wheel of a lock, and the lock for pip.

This is the one step the Bazel repository rule runs after fetching the wheels (``patched-wheels hub
--config hub.json``): patch (and optionally split) each patched project, with its preload computed
from the whole wheel set, then index the directory and rewrite the lock to point at it. Keeping the
orchestration here, not in Starlark, lets a failure surface as the helper's one error line and lets
the ELF graph be read once for the set, from a cache keyed by each wheel's sha256 that outlives the
hub (``bazel clean --expunge`` included): before fetching, the rule asks ``hub --list-cached`` which
wheels the cache knows, and does not fetch those it needs only for the graph.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from patched_wheels.elfgraph import LibraryGraph, WheelRef, cached_digests, read_graph
from patched_wheels.errors import UsageError
from patched_wheels.index import build_index
from patched_wheels.lock import DEFAULT_INDEX_OPTION, lock
from patched_wheels.surgery import MemberEdit, patch_wheel
from patched_wheels.wheelfile import WheelReader

if TYPE_CHECKING:
    from patched_wheels.rpath import RpathEdit


@dataclass(frozen=True)
class PatchedWheelSpec:
    """What to do to one project's wheel: the attributes of the Starlark `patched_wheel` (its schema is
    PATCHED_WHEEL_SCHEMA in python/private/specs.bzl) with ``wheel`` and ``patches`` as paths."""

    name: str
    wheel: Path
    suffix: str
    requirement: str = ""
    urls: Sequence[str] = ()  # the schema's explicit original; the hub has already fetched ``wheel`` from it
    sha256: str = ""
    patches: Sequence[Path] = ()
    strip: int = 1
    remove_requires: Sequence[str] = ()
    add_requires: Sequence[str] = ()
    delete: Sequence[str] = ()
    preload: str = "off"
    preload_package: str = ""
    preload_wheels: Sequence[str] = ()
    probe: str | None = None
    """With ``preload = "auto"``: the code run in one site-packages whose mapped libraries are preloaded too
    (None: ``import <preload_package>``); run only where the wheels' tags match the hub's interpreter."""
    split_into: str = ""
    split_max_size: int = 0
    split_move: Sequence[str] = ()
    rpath: Mapping[str, str] = field(default_factory=dict)
    """GLOB -> ``:``-separated ``$ORIGIN`` entries for the matching ELF members."""
    rpath_mode: str = "set"


@dataclass(frozen=True)
class HubConfig:
    """What the repository rule writes to ``hub.json`` (see ``python/private/hub.bzl``)."""

    requirements: Path
    index_dir: Path
    out: Path
    wheels: Sequence[WheelRef]
    """The wheel set the ELF graph is read from, as ``{filename, sha256, path?}``: a wheel without a path
    was not fetched, because the ELF cache holds its rows (see :func:`cached_wheels`)."""
    elf_cache: Path | None = None
    """The persistent ELF cache; None: one for this run only."""
    patched: Sequence[PatchedWheelSpec] = field(default_factory=tuple)
    index_option: str = DEFAULT_INDEX_OPTION
    index_url: str = ""  # where the lock's unpatched pins come from (direct mode, if the lock names none)
    replaced: Mapping[str, Sequence[str]] = field(default_factory=dict)  # project -> sha256 of the patched originals
    references: Mapping[str, Sequence[str]] = field(default_factory=dict)  # project -> [url, sha256] of its wheel

    @classmethod
    def load(cls, path: Path) -> "HubConfig":
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls._from_json(raw)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UsageError(f"{path}: cannot read the hub configuration: {error!r}") from None

    @classmethod
    def _from_json(cls, raw: dict) -> "HubConfig":
        fields = PatchedWheelSpec.__dataclass_fields__
        specs = []
        for spec in raw.get("patched", []):
            unknown = sorted(set(spec) - set(fields))
            if unknown:
                # The schema changed on one side only (specs.bzl vs this dataclass): say so, never drop it.
                raise ValueError(f"patched_wheel {spec.get('name')!r}: unknown keys {unknown}")
            specs.append(
                PatchedWheelSpec(
                    **{
                        key: ([Path(p) for p in value] if key == "patches" else Path(value) if key == "wheel" else value)
                        for key, value in spec.items()
                    }
                )
            )
        return cls(
            requirements=Path(raw["requirements"]),
            index_dir=Path(raw["index_dir"]),
            out=Path(raw["out"]),
            wheels=[
                WheelRef(wheel["filename"], wheel["sha256"], Path(wheel["path"]) if "path" in wheel else None)
                for wheel in raw["wheels"]
            ],
            elf_cache=Path(raw["elf_cache"]) if raw.get("elf_cache") else None,
            patched=specs,
            index_option=raw.get("index_option", DEFAULT_INDEX_OPTION),
            index_url=raw.get("index_url", ""),
            replaced=raw.get("replaced", {}),
            references=raw.get("references", {}),
        )


def build_hub(config: HubConfig) -> list[str]:
    """Patch every spec into ``config.index_dir``, index it, write ``config.out``; return the pins made."""
    config.index_dir.mkdir(parents=True, exist_ok=True)
    pins = []
    # One ELF graph of the whole set (the originals, under their own names) for every spec's preload and
    # split, read only if some spec needs one.
    needs_graph = any(map(_needs_graph, config.patched))
    graph = read_graph(config.wheels, cache_dir=config.elf_cache) if needs_graph else None
    for spec in config.patched:
        pins.extend(patch_into_index(spec, config.wheels, config.index_dir, graph=graph, use_cache=config.elf_cache is not None))
    # Indexed after the last wheel is written, so the hashes the lock pins are the ones the pages serve.
    lock(
        config.requirements,
        build_index(config.index_dir),
        config.out,
        index_option=config.index_option,
        upstream_index_url=config.index_url or None,
        replaced=config.replaced,
        references={project: (url, sha256) for project, (url, sha256) in config.references.items()},
    )
    return pins


def cached_wheels(config: HubConfig) -> list[str]:
    """The sha256 of ``config.wheels`` whose ELF rows ``config.elf_cache`` holds: the rule need not fetch
    those wheels for the graph (it still fetches those it serves or patches)."""
    if config.elf_cache is None:
        return []
    return cached_digests((wheel.sha256 for wheel in config.wheels if wheel.sha256), config.elf_cache)


def patch_into_index(
    spec: PatchedWheelSpec,
    wheel_set: Sequence[Path | WheelRef],
    index_dir: Path,
    *,
    graph: LibraryGraph | None = None,
    use_cache: bool = False,
) -> list[str]:
    """Patch (and maybe split) one wheel; the results land in ``index_dir``. Returns their pins.

    ``graph``: the library graph of ``wheel_set`` (``spec.wheel`` included, under its file name), read
    here (without a cache) if the spec needs it and none is given.  ``use_cache``: keep the preload
    probe's observation in the persistent cache.
    """
    _check_requirement(spec)
    if graph is None and _needs_graph(spec):
        graph = read_graph(wheel_set)
    member_edits: Mapping[str, MemberEdit] = {}
    if spec.preload == "auto":
        from patched_wheels.preload import preload_edits

        assert graph is not None  # read above
        # Not strict: a lock for a platform without the other wheels (macOS, a pure package) needs no preload.
        member_edits = preload_edits(
            graph,
            spec.preload_package,
            spec.wheel,
            preload_wheels=spec.preload_wheels,
            strict=False,
            wheels=wheel_set,
            probe=spec.probe,
            use_cache=use_cache,
        )
    elif spec.preload != "off":
        raise UsageError(f"patched_wheel {spec.name}: preload must be 'auto' or 'off', not {spec.preload!r}")
    elif spec.preload_wheels:
        raise UsageError(f"patched_wheel {spec.name}: preload_wheels needs preload = 'auto'")
    elif spec.probe is not None:
        raise UsageError(f"patched_wheel {spec.name}: probe needs preload = 'auto'")
    rpath_edits: list[RpathEdit] = []
    if spec.rpath:
        from patched_wheels.rpath import rpath_edit

        # In glob order, documented, so two globs matching one library do not depend on how the dict travels.
        rpath_edits = [
            rpath_edit(glob, entries, spec.rpath_mode, origin=f"patched_wheel {spec.name}: rpath {glob!r}")
            for glob, entries in sorted(spec.rpath.items())
        ]
    options = dict(
        suffix=spec.suffix,
        patches=sorted(spec.patches, key=lambda patch: patch.name),  # numbered files apply in order
        strip=spec.strip,
        remove_requires=spec.remove_requires,
        add_requires=spec.add_requires,
        delete=spec.delete,
        member_edits=member_edits,
        rpath_edits=rpath_edits,
    )
    if not spec.split_into:
        return [patch_wheel(spec.wheel, index_dir, **options).requirement]
    from patched_wheels.split import SplitRequest

    split = SplitRequest(spec.split_into, move=spec.split_move, max_size=spec.split_max_size or None)
    return list(patch_wheel(spec.wheel, index_dir, **options, split=split, graph=graph).requirements)


def _needs_graph(spec: PatchedWheelSpec) -> bool:
    """Whether the spec's preload or split needs the library graph of the wheel set."""
    return spec.preload == "auto" or bool(spec.split_into)


def _check_requirement(spec: PatchedWheelSpec) -> None:
    """The user's optional ``requirement`` guards against patching a different release than intended."""
    if not spec.requirement:
        return
    try:
        requirement = Requirement(spec.requirement)
    except InvalidRequirement as error:
        raise UsageError(f"patched_wheel {spec.name}: requirement {spec.requirement!r}: {error}") from None
    with WheelReader(spec.wheel) as reader:
        name, version = reader.filename.name, reader.filename.version
    if canonicalize_name(requirement.name) != name or not requirement.specifier.contains(version, prereleases=True):
        raise UsageError(
            f"patched_wheel {spec.name}: {spec.wheel.name} is {name} {version}, "
            f"which does not satisfy requirement {spec.requirement!r}"
        )
