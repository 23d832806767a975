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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from packaging.utils import NormalizedName

from patched_wheels.base.cache import OFF, CacheContext
from patched_wheels.base.fsutil import locked_directory, switch_tree, temp_directory, write_atomic
from patched_wheels.base.names import canonicalize_name
from patched_wheels.base.timings import phase
from patched_wheels.elf.graph import GraphReading, LibraryGraph, WheelRef, start_graph
from patched_wheels.errors import UsageError, warn
from patched_wheels.hub.documents import LOCK_FORMATS, HubConfig
from patched_wheels.hub.extras import Restoration, decided_closure, restored_extras
from patched_wheels.hub.facts import ATTRIBUTE as FACTS_ATTRIBUTE
from patched_wheels.hub.facts import read_facts, stale_warning, write_facts
from patched_wheels.hub.plan import default_probes
from patched_wheels.hub.spec import PatchedWheelSpec, index_call, wheel_call
from patched_wheels.index.simple import IndexResult, build_index
from patched_wheels.loading.layout import FLAT
from patched_wheels.loading.observe import is_observed, tag_mismatch
from patched_wheels.loading.preload import ElfOnly, PreloadRequest, Probe, plan_package_preload, project_name
from patched_wheels.lock.apply import LockOptions, lock
from patched_wheels.lock.closure import Closure
from patched_wheels.lock.formats.registry import read_lock
from patched_wheels.lock.requiresdist import Dist, read_dist
from patched_wheels.patch.request import BAZEL_NAMES, RpathEdit, SplitRequest, rpath_edit
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from patched_wheels.phrasing import Phrasing
from patched_wheels.wheelfile.metadata import field_values
from patched_wheels.wheelfile.reader import WheelReader

if TYPE_CHECKING:
    # Only for its type: loading.probe (venv, the supervised runs) is imported when a probe runs (probe_installation).
    from patched_wheels.loading.probe import Installation


def build_hub(config: HubConfig) -> list[str]:
    """Patch every spec into ``config.index_dir``, index it, write ``config.out``; return the pins made.

    ``config`` was checked whole when it was read (:meth:`HubConfig.from_json`); the lock and the
    ``wheel_facts`` file are looked at here, before anything is written. Every output (the patched wheels,
    ``simple/``, the lock(s), the facts) is written into a temporary directory beside them and moved into
    place only once all of them were written (:class:`Staging`), so a build that fails, at any step, leaves
    the hub as it found it; builds into one directory run one at a time. What the build read from the wheels
    (ELF rows, probe observations: :mod:`patched_wheels.hub.facts`) is written to ``config.facts_out``. Its warnings come once the
    outputs are in place: a failed build says one line, its error."""
    if not config.attributes.lock[1].is_file():
        raise UsageError(f"{config.attributes.lock_as_written(config.labels)}: not a file")
    call, given_path = index_call(config.hub, config.bzlmod), config.attributes.wheel_facts
    _check_places(config.index_dir, _outputs(config))
    # Read even where they cannot be used (the cache off, or no spec reading the wheels), so that a file that is
    # no facts file fails every build, not only some.
    given_facts = read_facts(given_path, call) if given_path is not None else {}
    caches = CacheContext(config.cache_root)
    if config.facts_out is not None:
        caches = caches.recording(given_facts, str(given_path or ""))
    # Builds into one repository take turns; each stages only what its plan fetched into the index (Staging.of).
    repository = config.index_dir.parent
    with locked_directory(repository), temp_directory(repository, "hub-build") as work:
        fetched = _fetched_into(config)
        staging = Staging.of(config.index_dir, _outputs(config), work, fetched=fetched)
        with phase("closure"):
            closure, planned = _decided(config, call)
        pins = _build(config, planned, staging, caches, fetched)
        if config.closure_out is not None:
            write_atomic(
                staging.outputs[config.closure_out],
                (json.dumps(closure.to_json(), indent=1, sort_keys=True) + "\n").encode("utf-8"),
                mode=0o644,
            )
        read_from_wheels = caches.recorded or {}
        if config.facts_out is not None:
            write_facts(staging.outputs[config.facts_out], read_from_wheels)
        staging.place(config.index_dir)
    facts_shown = config.attributes.as_written(FACTS_ATTRIBUTE, config.labels)
    if given_path is not None and config.facts_out is None:
        unused_facts_warning(call, facts_shown)
    elif given_path is not None and config.facts_out is not None:
        stale_warning(
            given_facts, read_from_wheels, call=call, shown=facts_shown, given_path=given_path, written=config.facts_out
        )
    return pins


def _decided(config: HubConfig, call: str) -> tuple[Closure, Restoration]:
    """Pip's closure of the lock (:func:`read_closure`; ``call``: the hub as the user wrote it) and what the build
    makes of the plan's specs, replaced pins and references: with extras restored
    (:func:`~patched_wheels.hub.extras.restored_extras`), or as planned (``restore_extras = False``)."""
    closure = read_closure(config, call)
    planned = Restoration(tuple(config.patched), config.replaced, config.references)
    if config.attributes.restore_extras:
        planned = restored_extras(planned, closure, config.wheels, hub=config.hub, bzlmod=config.bzlmod)
    return closure, planned


def _outputs(config: HubConfig) -> list[Path]:
    """The files a build writes besides its index, in the order they are put in place (the locks name the
    index's wheels, so they follow it)."""
    return [path for path in (config.out, config.out_uv_lock, config.facts_out, config.closure_out) if path is not None]


def _fetched_into(config: HubConfig) -> dict[str, WheelRef]:
    """The wheels the plan fetched into the index directory (``config.wheels`` placed there), by file name: what a
    build's index starts from. The originals it patches and the wheels it only reads lie elsewhere."""
    index_dir = os.path.abspath(config.index_dir)
    return {
        wheel.path.name: wheel
        for wheel in config.wheels
        if wheel.path is not None and os.path.abspath(wheel.path.parent) == index_dir
    }


def _check_fetched(index: IndexResult, fetched: Mapping[str, WheelRef]) -> None:
    """Each wheel the index serves under the name of one the plan fetched is that file (its sha256, which the
    index hashed anyway): not one left there under its name (a build run by hand after the lock changed)."""
    for served in index.files:
        wheel = fetched.get(served.filename)
        if wheel is not None and served.sha256 != wheel.sha256:
            raise UsageError(
                f"{wheel.path}: sha256 {served.sha256}, not the {wheel.sha256} of the wheel the plan fetched there: "
                "fetch it again"
            )


def _check_places(index_dir: Path, outputs: Sequence[Path]) -> None:
    """Where each output goes must take it: the index a directory (or nothing yet), each other output a regular
    file (or nothing yet); refused before anything is written."""
    if os.path.lexists(index_dir) and (os.path.islink(index_dir) or not index_dir.is_dir()):
        raise UsageError(f"{index_dir}: in the way of the hub's index (a link, or not a directory)")
    for path in outputs:
        if os.path.lexists(path) and (os.path.islink(path) or not path.is_file()):
            raise UsageError(f"{path}: in the way of the hub's output (a link, or not a regular file)")


@dataclass(frozen=True)
class Staging:
    """Where a build writes: its index directory and, for each output's final path, the temporary one written in
    its stead, all in one work directory beside the hub's; :meth:`place` moves them where they belong."""

    index_dir: Path
    outputs: Mapping[Path, Path]
    """Final path -> temporary path, in the order they are put in place (:func:`_outputs`)."""

    @classmethod
    def of(cls, index_dir: Path, outputs: Sequence[Path], work: Path, *, fetched: Collection[str]) -> Staging:
        """The staging of a build into ``index_dir`` and ``outputs``, in ``work``: its index starts with the wheels
        the plan ``fetched`` into ``index_dir`` (file names; hard links: nothing is copied, and a file written again
        is replaced, never changed in place), and nothing else: what an earlier build wrote there (its patched
        wheels, ``.metadata`` files, ``simple/``) or anyone put there is not served, so a build gives what a build
        into an empty directory gives. A fetched wheel missing there, or no file, is left out here: reading the
        wheels (:func:`read_dists`) names it."""
        index = work / "index"
        index.mkdir()
        for name in dict.fromkeys(fetched):
            source, target = index_dir / name, index / name
            if not (os.path.islink(source) or source.is_file()):
                continue
            try:
                os.link(source, target, follow_symlinks=False)
            except OSError:  # a file system without hard links
                if os.path.islink(source):
                    os.symlink(os.readlink(source), target)
                else:
                    shutil.copy2(source, target, follow_symlinks=False)
        return cls(index, {path: work / f"{number}-{path.name}" for number, path in enumerate(outputs)})

    def place(self, index_dir: Path) -> None:
        """Move what was written where it belongs: renames only, the index first (two renames: a reader sees the
        old index or the new one, ``index_dir``), then the locks, then the facts."""
        switch_tree(self.index_dir, index_dir)
        for target, written in self.outputs.items():
            os.replace(written, target)


def _build(
    config: HubConfig, planned: Restoration, staging: Staging, caches: CacheContext, fetched: Mapping[str, WheelRef]
) -> list[str]:
    """:func:`build_hub` once pip's closure is known, but for the documents beside the lock: patch ``planned``'s
    specs (extras restored or not: decided before), index, lock, reading the wheels through ``caches``, writing
    where ``staging`` says (``config.index_dir``: where its index will be, which the locks name); ``fetched``: the
    wheels the plan fetched into the index (:func:`_fetched_into`), each checked to be what the index serves."""
    index_dir, served = staging.index_dir, config.index_dir
    index_dir.mkdir(parents=True, exist_ok=True)
    pins = []
    # One ELF graph of the whole set (the originals, under their own names) for every spec's preload and
    # split, read only if the plan says some spec needs one.
    with ExitStack() as stack:
        # A probe whose observation is kept (the cache's, the facts') does not run: that observation is checked
        # against the mapped libraries' symbol tables, which the graph then reads in its pass over the members.
        probes = default_probes(planned.patched)
        digests = [wheel.sha256 for wheel in config.wheels]
        kept = {probe for probe in probes if is_observed(digests, probe, caches)}
        installation = probe_installation(config.wheels, stack) if set(probes) - kept else None
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
                        symbols=bool(kept),
                    )
                )
                if config.needs_graph
                else None
            )
        for spec in planned.patched:
            with phase("patch"):  # the preload's plan and the split included; its probe is a phase of its own
                pins.extend(
                    patch_into_index(
                        spec,
                        config.wheels,
                        index_dir,
                        graph=graph,
                        caches=caches,
                        phrasing=phrasing(config.hub, config.bzlmod, spec),
                        installation=installation,
                    )
                )
            if spec.wheel is not None and spec.wheel.parent == served:
                # An original the index serves (an index option): its rewrite replaces it.
                (index_dir / spec.wheel.name).unlink(missing_ok=True)
        with phase("probe: remove"):
            stack.close()
    # Indexed after the last wheel is written, so the hashes the lock pins are the ones the pages serve.
    with phase("index"):
        index = build_index(index_dir)
        _check_fetched(index, fetched)
    attribute, lock_path = config.attributes.lock
    out, out_uv_lock = staging.outputs[config.out], staging.outputs[config.out_uv_lock] if config.out_uv_lock else None
    with phase("lock"):
        lock(
            lock_path,
            index,
            out,
            LockOptions(
                served.resolve(),
                index_option=config.attributes.index_option,
                upstream_index_url=config.attributes.index_url or None,
                replaced=planned.replaced,
                references=planned.references,
                every_pin_served=config.every_pin_served,
            ),
            lock_format=LOCK_FORMATS[attribute],
            out_uv_lock=out_uv_lock,
        )
    return pins


def read_closure(config: HubConfig, call: str) -> Closure:
    """Pip's closure of the lock on this interpreter, decided by :func:`~patched_wheels.hub.extras.decided_closure`
    from the METADATA of every wheel the plan fetched, the extras the lock's own pins ask and those the ``extras``
    attribute asks; its warnings said here (``call``: the hub as the user wrote it, which they name)."""
    dists = read_dists(config.wheels, call)
    attribute, lock_path = config.attributes.lock
    closure, warnings = decided_closure(
        dists,
        pinned_root_extras(lock_path, LOCK_FORMATS[attribute], dists),
        config.root_extras,
        call=call,
        lock=config.attributes.lock_as_written(config.labels),
        restores=config.attributes.restore_extras,
    )
    for line in warnings:
        warn(line)
    return closure


def read_dists(wheels: Sequence[WheelRef], call: str) -> dict[NormalizedName, Dist]:
    """Each fetched wheel's edges (:func:`~patched_wheels.lock.requiresdist.read_dist`), by project, from its
    ``METADATA`` (``call``: the hub as the user wrote it, for the error of a wheel the plan did not fetch)."""
    dists = {}
    for wheel in wheels:
        if wheel.path is None:
            raise UsageError(f"{call}: internal: {wheel.filename} was not fetched")
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
    return dists


def pinned_root_extras(
    lock_path: Path, lock_format: str, projects: Collection[NormalizedName]
) -> dict[NormalizedName, set[str]]:
    """Project -> the extras the lock's pins ask of it (normalized), in the lock's order, for the pins of
    ``projects`` (the wheels fetched) whose marker holds on this interpreter (evaluated for those alone)."""
    roots: dict[NormalizedName, set[str]] = {}
    for pin in read_lock(lock_path, lock_format).pins:
        if pin.extras and pin.project in projects and pin.applies():
            roots.setdefault(pin.project, set()).update(canonicalize_name(extra) for extra in pin.extras)
    return roots


def unused_facts_warning(call: str, shown: str) -> None:
    """The warning of a ``wheel_facts`` file (``shown``: the attribute as the user wrote it) given to a build
    (``call``: the hub as the user wrote it) that reads nothing from the wheels."""
    warn(
        f"{call}: {shown} is not used: no patched_wheel of this hub reads "
        "the wheels (preload, split_into), or the helper cache is off (RULES_PATCHED_WHEELS_CACHE=off), which reads everything again"
    )


def probe_installation(wheels: Sequence[WheelRef], stack: ExitStack) -> Installation | None:
    """The wheel set installed in one site-packages, once, for the probes that will run on it (``preload = "auto"``
    specs whose observation is not kept), where every wheel is fetched and installable here; else None, and each
    probe installs the set itself if it runs after all (:func:`~patched_wheels.loading.observe.observe`).
    Installed before the ELF graph is read, which then reads the installed libraries instead of inflating
    every member twice; removed when ``stack`` closes. RECORD's hashes are not checked: Bazel's downloader
    checked each whole wheel against the sha256 of the lock."""
    paths = [wheel.path for wheel in wheels]
    if None in paths or tag_mismatch(wheel.filename for wheel in wheels) is not None:
        return None
    from patched_wheels.loading.probe import installed  # imported here: only a probe that runs installs anything

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
            # In glob order, documented, so two globs matching one library do not depend on how the dict travels.
            rpath_edits = [
                rpath_edit(glob, entries, spec.rpath_mode, origin=f"patched_wheel {spec.name}: rpath {glob!r}")
                for glob, entries in sorted(spec.rpath.items())
            ]
        split = None
        if spec.split_into:
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


def phrasing(hub: str, bzlmod: bool, spec: PatchedWheelSpec) -> Phrasing:
    """How the build step's placement errors and probe warnings name ``spec``: by the ``patched_wheel`` of ``hub``
    the user wrote, its ``preload_package`` and ``probe`` attributes, and the one to write instead."""
    call = wheel_call(hub, bzlmod, spec.name)
    if spec.preload_package:
        option = f"{call}: preload_package = {json.dumps(spec.preload_package)}"
    else:
        option = f"{call}: preload_package (not given: {json.dumps(spec.package)}, from name)"
    probe = f", probe = {json.dumps(spec.probe)}" if spec.probe else ""
    return Phrasing(
        option=option,
        wheel=project_name,
        write=lambda filename, module: wheel_call(
            hub,
            bzlmod,
            project_name(filename),
            f'preload = "{spec.preload}", preload_package = {json.dumps(module)}{probe}, …',
        ),
        probe=lambda code: f"probe = {json.dumps(code)} on {call}",
    )
