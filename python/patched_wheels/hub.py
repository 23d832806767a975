"""Build a hub: the patched wheels, the local index serving every wheel of a lock, and the lock for pip.

This is the one step the Bazel repository rule runs after fetching the wheels (``patched-wheels hub
--config hub.json``): patch (and optionally split) each patched project, with its preload computed
from the whole wheel set, then index the directory and rewrite the lock to point at it. Keeping the
orchestration here, not in Starlark, lets a failure surface as the helper's one error line and lets
the ELF graph be read once for the set.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from patched_wheels.errors import PatchedWheelsError
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
    split_into: str = ""
    split_max_size: int = 0
    split_move: Sequence[str] = ()
    rpath: Mapping[str, str] = field(default_factory=dict)
    """GLOB -> ``:``-separated ``$ORIGIN`` entries for the matching ELF members."""
    rpath_mode: str = "set"


@dataclass(frozen=True)
class HubConfig:
    requirements: Path
    index_dir: Path
    out: Path
    wheels: Sequence[Path]
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
            raise PatchedWheelsError(f"{path}: cannot read the hub configuration: {error!r}") from None

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
            wheels=[Path(p) for p in raw["wheels"]],
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
    # One ELF scan per wheel for the whole hub: the preload and the split of every spec share it.
    with tempfile.TemporaryDirectory(dir=config.index_dir.parent, prefix=".elfgraph-") as elf_cache:
        for spec in config.patched:
            pins.extend(patch_into_index(spec, config.wheels, config.index_dir, elf_cache=Path(elf_cache)))
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


def patch_into_index(
    spec: PatchedWheelSpec, wheel_set: Sequence[Path], index_dir: Path, *, elf_cache: Path | None = None
) -> list[str]:
    """Patch (and maybe split) one wheel; the results land in ``index_dir``. Returns their pins."""
    _check_requirement(spec)
    member_edits: Mapping[str, MemberEdit] = {}
    if spec.preload == "auto":
        from patched_wheels.preload import preload_member_edits

        # Not strict: a lock for a platform without the other wheels (macOS, a pure package) needs no preload.
        member_edits = preload_member_edits(
            spec.preload_package, wheel_set, preload_wheels=spec.preload_wheels, cache_dir=elf_cache, strict=False
        )
    elif spec.preload != "off":
        raise PatchedWheelsError(f"patched_wheel {spec.name}: preload must be 'auto' or 'off', not {spec.preload!r}")
    elif spec.preload_wheels:
        raise PatchedWheelsError(f"patched_wheel {spec.name}: preload_wheels needs preload = 'auto'")
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
    from patched_wheels.elfgraph import read_graph
    from patched_wheels.split import SplitRequest

    split = SplitRequest(spec.split_into, move=spec.split_move, max_size=spec.split_max_size or None)
    graph = read_graph(wheel_set, cache_dir=elf_cache)
    return list(patch_wheel(spec.wheel, index_dir, **options, split=split, graph=graph).requirements)


def _check_requirement(spec: PatchedWheelSpec) -> None:
    """The user's optional ``requirement`` guards against patching a different release than intended."""
    if not spec.requirement:
        return
    try:
        requirement = Requirement(spec.requirement)
    except InvalidRequirement as error:
        raise PatchedWheelsError(f"patched_wheel {spec.name}: requirement {spec.requirement!r}: {error}") from None
    with WheelReader(spec.wheel) as reader:
        name, version = reader.filename.name, reader.filename.version
    if canonicalize_name(requirement.name) != name or not requirement.specifier.contains(version, prereleases=True):
        raise PatchedWheelsError(
            f"patched_wheel {spec.name}: {spec.wheel.name} is {name} {version}, "
            f"which does not satisfy requirement {spec.requirement!r}"
        )
