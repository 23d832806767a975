"""Build a hub: the patched wheels, the local index serving them, and the lock for rules_python.

This is the one step the Bazel repository rule runs after fetching what the plan
(:mod:`patched_wheels.hub.plan`) listed (``patched-wheels hub build --config _hub.json``): patch (and
optionally split) each patched project, with its preload computed from the whole wheel set, then index
the directory and rewrite the lock to point at it. Keeping the orchestration here, not in Starlark, lets
a failure surface as the helper's one error line and lets the ELF graph be read once for the set, from
a cache keyed by each wheel's sha256 that outlives the hub (``bazel clean --expunge`` included).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from packaging.utils import NormalizedName, canonicalize_name

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import locked_directory, switch_tree, temp_directory, write_atomic
from patched_wheels.base.timings import phase
from patched_wheels.elf.graph import GraphReading, LibraryGraph, WheelRef, start_graph
from patched_wheels.errors import UsageError, warn
from patched_wheels.hub.facts import ATTRIBUTE, read_facts, stale_warning, write_facts
from patched_wheels.hub.plan import LOCK_FORMATS, HubConfig, PatchedWheelSpec, index_call, wheel_call
from patched_wheels.index.simple import SIMPLE_DIR, build_index
from patched_wheels.lock.apply import LockOptions, lock
from patched_wheels.lock.closure import EXTRAS_SUFFIX, Closure, restored_requirements
from patched_wheels.lock.requiresdist import read_dist
from patched_wheels.lock.rootextras import InferredExtra, inferred_root_extras
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile.filename import WheelFilename

if TYPE_CHECKING:
    from patched_wheels.loading.probe import Installation
    from patched_wheels.patch.request import RpathEdit


def build_hub(config: HubConfig) -> list[str]:
    """Patch every spec into ``config.index_dir``, index it, write ``config.out``; return the pins made.

    ``config`` was checked whole when it was read (:meth:`HubConfig.from_json`); the lock and the
    ``wheel_facts`` file are looked at here, before anything is written. Every output (the patched wheels,
    ``simple/``, the lock(s), the facts) is written into a temporary directory beside them and moved into
    place only once all of them were written (:func:`_place`), so a build that fails, at any step, leaves
    the hub as it found it; builds into one directory run one at a time. What the build read from the wheels
    (ELF rows, probe observations: :mod:`patched_wheels.hub.facts`) is written to ``config.facts_out``. Its warnings come once the
    outputs are in place: a failed build says one line, its error."""
    attribute, lock_path = config.attributes.lock
    if not lock_path.is_file():
        raise UsageError(f'{attribute} = "{lock_path}": not a file')
    _check_places(config)
    given_facts = read_given_facts(config)
    # The plan's ELF cache is <root>/elfgraph: the observations lie beside it, under the same root.
    caches = CacheContext(config.elf_cache.parent if config.elf_cache else None)
    if config.facts_out is not None:
        caches = caches.recording(given_facts, str(config.attributes.wheel_facts or ""))
    # Builds into one repository take turns: each stages from the index the one before it put in place.
    repository = config.index_dir.parent
    with locked_directory(repository), temp_directory(repository, "hub-build") as work:
        staged = _staged(config, work)
        pins = _build(staged, caches, served=config.index_dir)
        read_from_wheels = caches.recorded or {}
        if staged.facts_out is not None:
            write_facts(staged.facts_out, read_from_wheels)
        _place(staged, config)
    if config.attributes.wheel_facts is not None and config.facts_out is None:
        unused_facts_warning(config)
    elif config.attributes.wheel_facts is not None and config.facts_out is not None:
        stale_warning(
            given_facts,
            read_from_wheels,
            call=index_call(config.hub, config.bzlmod),
            given_path=config.attributes.wheel_facts,
            written=config.facts_out,
        )
    return pins


def _outputs(config: HubConfig) -> list[Path]:
    """The files a build writes besides its index, in the order they are put in place (the locks name the
    index's wheels, so they follow it)."""
    return [path for path in (config.out, config.out_uv_lock, config.facts_out, config.closure_out) if path is not None]


def _check_places(config: HubConfig) -> None:
    """Where each output goes must take it: the index a directory (or nothing yet), each other output a regular
    file (or nothing yet); refused before anything is written."""
    if os.path.lexists(config.index_dir) and (os.path.islink(config.index_dir) or not config.index_dir.is_dir()):
        raise UsageError(f"{config.index_dir}: in the way of the hub's index (a link, or not a directory)")
    for path in _outputs(config):
        if os.path.lexists(path) and (os.path.islink(path) or not path.is_file()):
            raise UsageError(f"{path}: in the way of the hub's output (a link, or not a regular file)")


def _staged(config: HubConfig, work: Path) -> HubConfig:
    """``config`` writing into ``work``: its index starts as the hub's (the wheels the rule fetched there, as hard
    links: nothing is copied, and a file written again is replaced, never changed in place), less ``simple/``,
    which the build makes again."""
    index = work / "index"
    index.mkdir()
    for entry in os.scandir(config.index_dir) if config.index_dir.is_dir() else ():
        target = index / entry.name
        if entry.name == SIMPLE_DIR:
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            shutil.copytree(entry.path, target, symlinks=True)
        else:
            try:
                os.link(entry.path, target, follow_symlinks=False)
            except OSError:  # a file system without hard links
                shutil.copy2(entry.path, target, follow_symlinks=False)
    named = {path: work / f"{number}-{path.name}" for number, path in enumerate(_outputs(config))}
    return replace(
        config,
        index_dir=index,
        out=named[config.out],
        out_uv_lock=named.get(config.out_uv_lock) if config.out_uv_lock else None,
        facts_out=named.get(config.facts_out) if config.facts_out else None,
        closure_out=named.get(config.closure_out) if config.closure_out else None,
    )


def _place(staged: HubConfig, config: HubConfig) -> None:
    """Move what ``staged`` wrote where ``config`` says: renames only, the index first (two renames: a reader
    sees the old index or the new one), then the locks, then the facts."""
    switch_tree(staged.index_dir, config.index_dir)
    for written, target in zip(_outputs(staged), _outputs(config)):
        os.replace(written, target)


def _build(config: HubConfig, caches: CacheContext, *, served: Path) -> list[str]:
    """:func:`build_hub` but for the facts and the outputs' places: pip's closure, patch, index, lock, reading the
    wheels through ``caches`` (``config``'s outputs are the staged ones; ``served``: where its index will be, which
    the locks name)."""
    config.index_dir.mkdir(parents=True, exist_ok=True)
    with phase("closure"):
        closure = read_closure(config)
        patched, replaced, references = with_restored_extras(config, closure)
    pins = []
    # One ELF graph of the whole set (the originals, under their own names) for every spec's preload and
    # split, read only if the plan says some spec needs one.
    with ExitStack() as stack:
        installation = probe_installation(config, caches, stack)
        # Lenient: a lock's unreadable library fails only a spec that may need it (LibraryGraph.check_problems).
        # A library the probes' installation holds is read there, not inflated a second time.  Started, not
        # waited for: the first spec's split copies what stays compressed while the libraries inflate, on every
        # core (its time then counts as the patch's); a preload waits for the graph (timed as "graph").
        with phase("graph"):
            graph = (
                stack.enter_context(
                    start_graph(
                        config.wheels,
                        caches=caches,
                        lenient=True,
                        installed=installation.own_copy if installation is not None else None,
                    )
                )
                if config.needs_graph
                else None
            )
        for spec in patched:
            with phase("patch"):  # the preload's plan and the split included; its probe is a phase of its own
                pins.extend(
                    patch_into_index(
                        spec,
                        config.wheels,
                        config.index_dir,
                        graph=graph,
                        caches=caches,
                        phrasing=phrasing(config, spec),
                        installation=installation,
                    )
                )
            if spec.wheel is not None and spec.wheel.parent == served:
                # An original the index serves (an index option): its rewrite replaces it.
                (config.index_dir / spec.wheel.name).unlink(missing_ok=True)
        with phase("probe: remove"):
            stack.close()
    # Indexed after the last wheel is written, so the hashes the lock pins are the ones the pages serve.
    with phase("index"):
        index = build_index(config.index_dir)
    attribute, lock_path = config.attributes.lock
    with phase("lock"):
        lock(
            lock_path,
            index,
            config.out,
            LockOptions(
                served.resolve(),
                index_option=config.attributes.index_option,
                upstream_index_url=config.attributes.index_url or None,
                replaced=replaced,
                references=references,
                every_pin_served=config.every_pin_served,
            ),
            lock_format=LOCK_FORMATS[attribute],
            out_uv_lock=config.out_uv_lock,
        )
    if config.closure_out is not None:
        write_atomic(
            config.closure_out,
            (json.dumps(closure.to_json(), indent=1, sort_keys=True) + "\n").encode("utf-8"),
            mode=0o644,
        )
    return pins


def read_closure(config: HubConfig) -> Closure:
    """Pip's closure of the lock on this interpreter (:mod:`patched_wheels.lock.closure`), from the METADATA
    of every wheel the plan fetched and the extras the lock's own pins and the ``extras`` attribute ask for."""
    from patched_wheels.lock.formats.registry import read_lock
    from patched_wheels.wheelfile.metadata import field_values
    from patched_wheels.wheelfile.reader import WheelReader

    dists = {}
    for wheel in config.wheels:
        if wheel.path is None:
            raise UsageError(f"{index_call(config.hub, config.bzlmod)}: internal: {wheel.filename} was not fetched")
        with WheelReader(wheel.path, filename=wheel.filename) as reader:
            metadata = reader.metadata()
            name = reader.filename
        dist = read_dist(
            name.name,
            str(name.version),
            field_values(metadata, "Requires-Dist"),
            field_values(metadata, "Provides-Extra"),
            origin=f"{wheel.filename}: METADATA",
        )
        dists[dist.project] = dist
    roots: dict[NormalizedName, set[str]] = {}
    attribute, lock_path = config.attributes.lock
    for pin in read_lock(lock_path, LOCK_FORMATS[attribute]).pins:
        if pin.extras and pin.project in dists and pin.applies():
            roots.setdefault(pin.project, set()).update(canonicalize_name(extra) for extra in pin.extras)
    call = index_call(config.hub, config.bzlmod)
    for project, extras in config.root_extras.items():
        for extra in extras:
            dist = dists[canonicalize_name(project)]
            if extra not in dist.provides:
                provided = ", ".join(sorted(dist.provides)) or "none"
                raise UsageError(
                    f'{call}: extras = ["{project}[{extra}]"]: {project} {dist.version} provides no extra {extra} (it provides: {provided})'
                )
            roots.setdefault(dist.project, set()).add(extra)
    known = Closure(dists, {project: tuple(sorted(extras)) for project, extras in roots.items()})
    inferred = inferred_root_extras(known, frozenset(canonicalize_name(project) for project in config.root_extras))
    for found in inferred:
        roots[found.project] = {*roots.get(found.project, ()), found.extra}
        warn(inferred_warning(config, found))
    closure = (
        Closure(dists, {project: tuple(sorted(extras)) for project, extras in roots.items()}) if inferred else known
    )
    for project, extra, asker in closure.unprovided():
        who = f"{asker} requires" if asker else f'{attribute} = "{lock_path}" asks for'
        warn(
            f"{call}: {who} {project}[{extra}], but {project} {dists[project].version} does not provide the extra "
            f"{extra!r} (Provides-Extra): pip installs it without the extra, and so does the hub"
        )
    return closure


def inferred_warning(config: HubConfig, found: InferredExtra) -> str:
    """The one line saying that the hub took ``found`` as a root extra, the pins that show it, and how to override."""
    attribute, lock_path = config.attributes.lock
    done = "restores" if config.attributes.restore_extras else "puts in pip_closure.json (restore_extras = False)"
    return (
        f"{index_call(config.hub, config.bzlmod)}: {done} {found.project}[{found.extra}], which {attribute} = "
        f'"{lock_path}" does not record: the lock pins every requirement of that extra, and nothing else requires '
        f"{', '.join(found.evidence)} (pip install -r installs them); name {found.project}'s extras in extras "
        f'(["{found.project}[]"] for none) to decide otherwise'
    )


def with_restored_extras(
    config: HubConfig, closure: Closure
) -> tuple[list[PatchedWheelSpec], dict[str, Sequence[str]], dict[str, tuple[str, str]]]:
    """The specs to build, and the lock's replaced and referenced pins, once the wheels whose extras pip installs
    are rewritten (``restore_extras``): each gets those extras' requirements as plain ``Requires-Dist`` entries, in
    the user's ``patched_wheel`` of it if there is one, else in a spec of its own (local version ``+extras``)."""
    patched = list(config.patched)
    replaced = dict(config.replaced)
    references = dict(config.references)
    if not config.attributes.restore_extras:
        return patched, replaced, references
    call = index_call(config.hub, config.bzlmod)
    closure.check_pinned(f"{call}: restore_extras")
    by_name = {canonicalize_name(spec.name): index for index, spec in enumerate(patched)}
    wheels = {canonicalize_name(WheelFilename.parse(wheel.filename).name): wheel for wheel in config.wheels}
    for project, lines in restored_requirements(closure).items():
        if project in by_name:
            spec = patched[by_name[project]]
            patched[by_name[project]] = replace(spec, add_requires=(*spec.add_requires, *lines))
            continue
        wheel = wheels[project]
        patched.append(
            PatchedWheelSpec(name=project, suffix=EXTRAS_SUFFIX, add_requires=tuple(lines), wheel=wheel.path)
        )
        replaced[project] = [wheel.sha256]
        references.pop(project, None)
    return patched, replaced, references


def read_given_facts(config: HubConfig) -> dict[str, object]:
    """The ``wheel_facts`` file's entries ({} when none is given). Read even where they cannot be used (the
    cache off, or no spec reading the wheels: :func:`unused_facts_warning`), so that a file that is no facts
    file fails every build, not only some."""
    if config.attributes.wheel_facts is None:
        return {}
    return read_facts(config.attributes.wheel_facts, index_call(config.hub, config.bzlmod))


def unused_facts_warning(config: HubConfig) -> None:
    """The warning of a ``wheel_facts`` file given to a build that reads nothing from the wheels."""
    warn(
        f'{index_call(config.hub, config.bzlmod)}: {ATTRIBUTE} = "{config.attributes.wheel_facts}" is not used: no patched_wheel of this hub reads '
        "the wheels (preload, split_into), or the helper cache is off (RULES_PATCHED_WHEELS_CACHE=off), which reads everything again"
    )


def probe_installation(config: HubConfig, caches: CacheContext, stack: ExitStack) -> Installation | None:
    """The wheel set installed in one site-packages, once, when a probe will run on it (a ``preload = "auto"``
    spec whose observation is not cached, every wheel fetched and installable here); else None, and each
    probe installs the set itself if it runs after all (:func:`~patched_wheels.loading.observe.observe`).
    Installed before the ELF graph is read, which then reads the installed libraries instead of inflating
    every member twice; removed when ``stack`` closes. RECORD's hashes are not checked: Bazel's downloader
    checked each whole wheel against the sha256 of the lock."""
    from patched_wheels.hub.plan import default_probes
    from patched_wheels.loading.observe import is_observed, tag_mismatch

    probes = default_probes(config.patched)
    paths = [wheel.path for wheel in config.wheels]
    if not probes or None in paths or tag_mismatch(wheel.filename for wheel in config.wheels) is not None:
        return None
    if all(is_observed([wheel.sha256 for wheel in config.wheels], probe, caches) for probe in probes):
        return None
    from patched_wheels.loading.layout import FLAT
    from patched_wheels.loading.probe import installed

    with phase("probe: install"):
        return stack.enter_context(installed([path for path in paths if path is not None], (FLAT,), check_record=False))


def patch_into_index(
    spec: PatchedWheelSpec,
    wheel_set: Sequence[Path | WheelRef],
    index_dir: Path,
    *,
    graph: LibraryGraph | GraphReading | None = None,
    caches: CacheContext = OFF,
    phrasing: Phrasing | None = None,
    installation: Installation | None = None,
) -> list[str]:
    """Patch (and maybe split) one wheel; the results land in ``index_dir``. Returns their pins.

    ``graph``: the library graph of ``wheel_set`` (``spec.wheel`` included, under its file name), or one being
    read (:func:`~patched_wheels.elf.graph.start_graph`), read here (without a cache) if the spec needs it and
    none is given.  A split without a preload of its own writes while it is read, as the ``split`` command
    does (:func:`~patched_wheels.patch.surgery.patch_wheel`); a preload's plan waits for it.  ``caches``: where the preload
    probe's observation is looked up and kept.  ``phrasing``: how errors name the spec's attributes
    (:func:`phrasing`; default: by the spec's name alone).  ``installation``: the set already installed in
    one site-packages (:func:`probe_installation`), for the probe to run in. The spec was checked by the plan
    (:func:`patched_wheels.hub.plan.check_request`).
    """
    if spec.wheel is None:
        raise UsageError(f"patched_wheel {spec.name}: no original wheel placed")
    with ExitStack() as stack:
        if graph is None and spec.needs_graph:
            graph = stack.enter_context(start_graph(wheel_set, lenient=True))
        reading = GraphReading.of(graph) if isinstance(graph, LibraryGraph) else graph
        preload = None
        if spec.preloads:
            from patched_wheels.loading.preload import ElfOnly, PreloadRequest, Probe, plan_package_preload

            assert reading is not None  # started above
            with phase("graph"):  # what is left of it to read
                graph = reading.result()
            # Not strict: a lock for a platform without the other wheels (macOS, a pure package) needs no preload.
            mode = (
                Probe(spec.probe or None, installation)
                if spec.runs_probe
                else ElfOnly(spec.recorded, spec.recorded_global)
            )
            preload = plan_package_preload(
                PreloadRequest(spec.package, mode, spec.wheel, spec.preload_wheels),
                wheel_set,
                graph=graph,
                phrasing=phrasing,
                strict=False,
                caches=caches,
            )
        rpath_edits: list[RpathEdit] = []
        if spec.rpath:
            from patched_wheels.patch.request import rpath_edit

            # In glob order, documented, so two globs matching one library do not depend on how the dict travels.
            rpath_edits = [
                rpath_edit(glob, entries, spec.rpath_mode, origin=f"patched_wheel {spec.name}: rpath {glob!r}")
                for glob, entries in sorted(spec.rpath.items())
            ]
        split = None
        if spec.split_into:
            from patched_wheels.patch.request import BAZEL_NAMES, SplitRequest

            assert reading is not None  # a split needs one
            split = SplitRequest(
                spec.split_into, move=spec.split_move, max_size=spec.split_max_size or None, names=BAZEL_NAMES
            )
            wheel = spec.wheel.name

            def check(graph: LibraryGraph) -> None:  # once read: the split writes meanwhile
                graph.check_problems(
                    spec.name, wheel, [library for library in graph.libraries if library.wheel == wheel]
                )

            reading = reading.checked(check)
        options = PatchOptions(
            suffix=spec.suffix,
            patches=sorted(spec.patches, key=lambda patch: patch.name),  # numbered files apply in order
            strip=spec.strip,
            remove_requires=spec.remove_requires,
            add_requires=spec.add_requires,
            delete=spec.delete,
            preload=preload,
            rpath_edits=rpath_edits,
            split=split,
            graph=reading,
        )
        return list(patch_wheel(spec.wheel, index_dir, options).requirements)


def phrasing(config: HubConfig, spec: PatchedWheelSpec) -> Phrasing:
    """How the build step's placement errors and probe warnings name ``spec``: by the ``patched_wheel`` the user
    wrote, its ``preload_package`` and ``probe`` attributes, and the one to write instead."""
    from patched_wheels.loading.preload import project_name

    call = wheel_call(config.hub, config.bzlmod, spec.name)
    if spec.preload_package:
        option = f"{call}: preload_package = {json.dumps(spec.preload_package)}"
    else:
        option = f"{call}: preload_package (not given: {json.dumps(spec.package)}, from name)"
    probe = f", probe = {json.dumps(spec.probe)}" if spec.probe else ""
    return Phrasing(
        option=option,
        wheel=project_name,
        write=lambda filename, module: wheel_call(
            config.hub,
            config.bzlmod,
            project_name(filename),
            f'preload = "{spec.preload}", preload_package = {json.dumps(module)}{probe}, …',
        ),
        probe=lambda code: f"probe = {json.dumps(code)} on {call}",
    )
