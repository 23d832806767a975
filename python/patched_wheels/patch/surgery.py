"""Turn an upstream wheel into a patched one: diffs, METADATA edits, RPATH edits, new local version, split.

What to do is one value, :class:`PatchOptions` (each edit documented there, in the order they apply).
All edits are computed first against the *original* member names, in a
:class:`patched_wheels.patch.rewrite.WheelEdits` (they touch a few small text files, and the
libraries whose RPATH is edited, which are streamed, never held whole), then every output
is written by :func:`patched_wheels.patch.rewrite.write_wheel` in one pass: unchanged members
are copied raw, ``.dist-info`` and ``.data`` are renamed for the new version, and RECORD is
regenerated.  A split (:class:`patched_wheels.patch.request.SplitRequest`, planned by
:func:`patched_wheels.patch.split.plan_split`) plans against the same edits and hands back a
:class:`patched_wheels.patch.split.PlannedSplit`: the main wheel's part (moved
members dropped, ``Requires-Dist`` on the sibling, the preload) and the sibling's members, so a patched
and split wheel is read once and both outputs go through the same writer.  Outputs are written into a
temp directory in the destination and renamed there only once all are complete, so a failure leaves
nothing behind.
"""

from __future__ import annotations

import errno
import functools
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, NamedTuple, Sequence

from patched_wheels.base.fsutil import NAME_MAX, longest_temp_name, resolved_path
from patched_wheels.base.gcpause import cycle_collection_paused
from patched_wheels.errors import PatchError, UsageError
from patched_wheels.patch.request import RpathEdit, SplitRequest
from patched_wheels.patch.rewrite import Later, MemberEdit, Scratch, WheelEdits, write_wheel
from patched_wheels.wheelfile import WheelReader

if TYPE_CHECKING:
    from patched_wheels.elf.graph import GraphReading, LibraryGraph
    from patched_wheels.loading.preloadfiles import PackagePreload
    from patched_wheels.patch.split import PlannedSplit

__all__ = ["MemberEdit", "PatchOptions", "PatchResult", "find_patches", "patch_wheel", "split_wheel"]

PATCH_SUFFIXES = (".patch", ".diff")


class PatchResult(NamedTuple):
    path: Path
    requirement: str  # pins exactly the patched wheel, e.g. "torch==2.1.0+stripe.5"
    sibling: Path | None = None
    """The wheel a split moved libraries into (None without a split)."""
    sibling_requirement: str | None = None
    """Pins the sibling, e.g. "torch-libs==2.1.0+stripe.5": the main wheel requires exactly it."""

    @property
    def requirements(self) -> tuple[str, ...]:
        """The pins of every wheel written, the main one first: what a lock must list."""
        return (self.requirement,) if self.sibling_requirement is None else (self.requirement, self.sibling_requirement)


def find_patches(patch_dir: Path, given_as: str) -> list[Path]:
    """The ``*.patch``/``*.diff`` entries of ``patch_dir`` in name order (number them to order them): every one,
    so that one that is no patch file (a FIFO, a directory, a broken link) is an error when read, not a patch
    left out without a word; a directory holding none is an error too (``given_as``: the option that named it)."""
    if not patch_dir.is_dir():
        problem = "not a directory" if os.path.lexists(patch_dir) else "no such directory"
        raise UsageError(f"{given_as} {patch_dir}: {problem}")
    patches = sorted(path for path in patch_dir.iterdir() if path.suffix in PATCH_SUFFIXES)
    if not patches:
        raise UsageError(f"{given_as} {patch_dir}: holds no {' or '.join(f'*{s}' for s in PATCH_SUFFIXES)} file")
    return patches


class PatchOptions(NamedTuple):
    """What :func:`patch_wheel` does to a wheel: each edit, listed in the order they apply.

    The default is no edit at all (the wheel is rewritten as it is, RECORD regenerated).  Member
    names are archive paths in the *original* naming (e.g. ``torch/__init__.py``), whatever the new
    version renames; globs are fnmatch patterns over them.  A named tuple, as this module's other values: the
    ``patch`` command imports no ``dataclasses`` (10 ms of its start-up, and about 1 ms a class).
    """

    patches: Sequence[Path] = ()
    """Unified diffs, applied first, in the given order (:func:`find_patches` orders a directory's)."""
    strip: int = 1
    """Leading path components to strip from the diffs' file names (``patch -p``)."""
    delete: Sequence[str] = ()
    """Globs of members to delete, after the patches."""
    member_edits: Mapping[str, MemberEdit] = MappingProxyType({})
    """Member name -> function of its current content (None: absent) giving its new one."""
    preload: PackagePreload | None = None
    """The preload module to generate (:func:`patched_wheels.loading.preload.plan_package_preload`), with the
    ``__init__.py`` import: written last, once, extended by a split of the same package."""
    rpath_edits: Sequence[RpathEdit] = ()
    """RPATH/RUNPATH edits, in the given order (globs over the same names)."""
    split: SplitRequest | None = None
    """Libraries to move into a sibling wheel, planned on the result of the edits above: a deleted library
    does not move, an RPATH-edited one moves with its edit."""
    graph: LibraryGraph | GraphReading | None = None
    """The library graph the split reads (a set holding the wheel under its file name, so the preload also
    covers the other wheels), or one being read (:func:`patched_wheels.elf.graph.start_graph`: the split copies
    what stays compressed meanwhile); None: the split reads the wheel's alone.  Unused without ``split``."""
    remove_requires: Sequence[str] = ()
    """Projects whose ``Requires-Dist`` lines are dropped (METADATA edits come last)."""
    add_requires: Sequence[str] = ()
    """``Requires-Dist`` lines to add."""
    suffix: str | None = None
    """PEP 440 local label appended to the version of every wheel written (an empty one is an error: the
    output would be named exactly like the upstream wheel); None: the version stays."""
    verify: bool = False
    """Check every member's hash against RECORD before anything else."""


def patch_wheel(wheel: Path | str, dest_dir: Path | str, options: PatchOptions = PatchOptions()) -> PatchResult:
    """Write the patched copy of ``wheel`` (and, with ``options.split``, its sibling) into ``dest_dir``.

    ``options`` says what to edit, in which order (:class:`PatchOptions`).  With a split whose graph is still being
    read (the ``split`` command's, the hub's), the outputs are the bytes a graph read first gives: an error while
    it is read yields to the graph's own (a library that cannot be read), as when it was read first, and a lenient
    graph that leaves out a library it listed has the split planned again from what it holds.
    """
    if options.split is None or options.graph is None:
        return _patch_wheel(Path(wheel), Path(dest_dir), options)
    # Imported here: the `patch` command, which imports this module, reads no library graph unless asked.
    from patched_wheels.elf.graph import GraphReading, ListingChanged

    reading = options.graph
    if not isinstance(reading, GraphReading):
        return _patch_wheel(Path(wheel), Path(dest_dir), options)
    try:
        return _patch_wheel(Path(wheel), Path(dest_dir), options)
    except Exception:  # nothing was published
        try:
            reading.result_as_listed()  # a library that cannot be read is the error, as when the graph was read first
        except ListingChanged as changed:  # planned from a library the hub's lenient graph left out: plan again
            return _patch_wheel(Path(wheel), Path(dest_dir), options._replace(graph=changed.graph))
        raise


def _patch_wheel(wheel: Path, dest_dir: Path, options: PatchOptions) -> PatchResult:
    """:func:`_write_outputs` with the cycle collector paused: the outputs' members and RECORD rows are tens of
    thousands of objects without cycles.  The pause ends once the call has returned and they are freed, so the
    collection that follows it does not walk them all (7 ms of a patch of torch)."""
    with cycle_collection_paused():
        return _write_outputs(wheel, dest_dir, options)


def _write_outputs(wheel: Path, dest_dir: Path, options: PatchOptions) -> PatchResult:
    with WheelReader(wheel, verify=options.verify) as reader, Scratch(dest_dir, wheel.name) as scratch:
        split = options.split
        if split is not None:
            split.check(
                wheel.name, reader.filename.name
            )  # before any edit: a wrong option should not wait for the patches
        edits = WheelEdits(reader)
        # Before any edit too, from METADATA's version as it comes: an output whose name cannot be a file's.
        _check_output_names(wheel.name, _output_name(wheel, reader, edits.version(options.suffix), options), options)
        if options.patches:
            from patched_wheels.patch.unidiff import (
                apply_file_patch,
                read_patch,
            )  # imported here: only a patch needs the diff reader
        for patch in options.patches:
            for file_patch in read_patch(Path(patch), strip=options.strip):
                source = f"patch {file_patch.patch}"
                edits.check_editable(file_patch.path, source)
                patched = apply_file_patch(file_patch, edits.current(file_patch.path))
                if patched is None:
                    edits.check_deletable(file_patch.path, source, PatchError)
                edits.set(file_patch.path, patched)
        for pattern in options.delete:
            edits.delete_matching(pattern)
        edits.apply_member_edits(options.member_edits, "member edit")
        if options.rpath_edits:
            from patched_wheels.patch.rpath import (
                apply_rpath_edits,
            )  # imported here: the ELF reader only when RPATHs change

            apply_rpath_edits(edits, options.rpath_edits, scratch)
        version = edits.version(options.suffix)
        dest = dest_dir / _output_name(wheel, reader, version, options)
        if resolved_path(dest) == resolved_path(wheel):
            raise UsageError(f"{wheel}: output would overwrite the input; choose another --dest-dir")
        planned = None
        if split is not None:
            from patched_wheels.patch.split import plan_split  # imported here: only a split reads the library graph

            planned = plan_split(
                split,
                edits,
                version=version,
                main_name=dest.name,
                graph=options.graph,
                scratch=scratch,
                preload=options.preload,
            )
            for name in planned.removed:
                edits.set(name, None)
        _write_preloads(edits, wheel.name, options.preload, planned)
        project = edits.edit_metadata(
            version,
            options.suffix,
            options.remove_requires,
            options.add_requires,
            generated_requires=[planned.requirement] if planned else [],
        )

        renames: dict[str, str] = {}
        if options.suffix is not None:
            distribution = reader.dist_info[: -len(".dist-info")].rpartition("-")[0]
            new_prefix = f"{distribution}-{version}"
            renames = {reader.dist_info: f"{new_prefix}.dist-info", reader.data_dir: f"{new_prefix}.data"}

        outputs = [dest.name]
        written = scratch.path  # made here, once: not by two threads at the same time
        sibling = None
        if planned is not None:
            sibling = _Background(
                lambda: write_wheel(
                    reader,
                    written / planned.sibling_name,
                    dist_info=planned.sibling_dist_info,
                    members=planned.sibling_members,
                )
            )
            outputs.insert(0, planned.sibling_name)  # renamed first: the main wheel never appears without it
        with _named_as_published(written, dest_dir):
            try:
                dist_info = renames.get(reader.dist_info, reader.dist_info)
                write_wheel(reader, written / dest.name, dist_info=dist_info, members=edits.output_members(renames))
            finally:
                if sibling is not None:
                    sibling.result()  # its error first, as when written first; always joined before the scratch goes
        if planned is not None:
            planned.check_size(wheel.name, written / dest.name)
        _publish(written, dest_dir, outputs)
    if planned is None:
        return PatchResult(dest, f"{project}=={version}")
    return PatchResult(dest, f"{project}=={version}", dest_dir / planned.sibling_name, planned.requirement)


def _output_name(wheel: Path, reader: WheelReader, version: str, options: PatchOptions) -> str:
    """The file name of the main wheel written: the input's, or with ``version`` where a suffix changes it."""
    return wheel.name if options.suffix is None else reader.filename.with_version(version)


def _check_output_names(wheel: str, main: str, options: PatchOptions) -> None:
    """Refuse options that make the name of a wheel written (``main``, the main one's, and a split's sibling) longer
    than a file name may be, counting the temp file it is written to first (:func:`longest_temp_name`), before
    anything is written: else the write fails naming that temp file. ``wheel``: the input's file name."""
    names = {main: "the wheel"}
    split = options.split
    if split is not None:
        from patched_wheels.patch.split import sibling_wheel_name  # imported here: a split imports the module anyway

        names[sibling_wheel_name(split.into, main)] = "the sibling wheel"
    longest = max(names, key=longest_temp_name)
    written = longest_temp_name(longest)
    if written <= NAME_MAX:
        return
    from patched_wheels.base.schema import shown  # imported here: it imports dataclasses, which a patch needs not

    over = written - NAME_MAX
    if longest != main:  # the sibling's: its name is --into's
        assert split is not None
        given = f"{split.names.into} {shown(split.into)}"
        if options.suffix is not None:
            given += f" with --suffix {shown(options.suffix)}"
        remedy = f"give a name at least {over} characters shorter"
    elif options.suffix is not None:
        given, remedy = f"--suffix {shown(options.suffix)}", f"give a suffix at least {over} characters shorter"
    else:
        given, remedy = "its file name", f"rename it at least {over} characters shorter"
    raise UsageError(
        f"{wheel}: {given} makes {names[longest]} {shown(longest)} ({len(longest.encode())} bytes), written to a "
        f"temp file first named in up to {written} bytes, more than the {NAME_MAX} a file name holds: {remedy}"
    )


@contextmanager
def _named_as_published(scratch: Path, dest_dir: Path) -> Iterator[None]:
    """An output's write error (a full disk) named as the file it was to be in ``dest_dir``, not as its unfinished
    copy in the ``scratch`` directory, gone once the error is reported."""
    try:
        yield
    except OSError as error:
        if error.filename is None or Path(error.filename).parent != scratch:
            raise
        raise OSError(error.errno, error.strerror, str(dest_dir / Path(error.filename).name)) from None


def _write_preloads(edits: WheelEdits, wheel: str, preload: PackagePreload | None, split: PlannedSplit | None) -> None:
    """The preload modules and their imports, last: each module rendered once, a split's replacing the patch's.

    A split's preload is known once its library graph is read: then the imports are written now and the modules
    :class:`~patched_wheels.patch.rewrite.Later` (rendered when the writer reaches them, all at once)."""
    if preload is None and split is None:
        return
    from patched_wheels.loading.preloadfiles import (  # imported here: only a preload renders
        preload_import_edits,
        rendered_preload_edits,
    )

    if split is None:
        assert preload is not None
        edits.apply_member_edits(rendered_preload_edits([preload], wheel), "preload")
        return
    kept = [preload] if preload is not None else []
    shapes = [*kept, split.preload_shape]
    edits.apply_member_edits(preload_import_edits(shapes, wheel), "preload")
    rendered = functools.cache(lambda: rendered_preload_edits([*kept, split.preload()], wheel))
    for written in dict.fromkeys(member for shape in shapes for member in shape.written_members):
        edits.check_editable(written, "preload")
        edits.set(written, Later(functools.partial(lambda member: rendered()[member](None), written)))


class _Background:
    """``work()`` run in a thread of its own from now on; :meth:`result` waits for it and raises what it raised.

    A split's sibling is mostly the moved libraries' bytes, which the kernel copies while its thread waits:
    written beside the main wheel, whose thousands of small members keep this thread busy, the two outputs
    cost about the longer one instead of both.  Each output has its own writer and window on the input;
    the reader's members are read with positional reads only, so the two share it.
    """

    def __init__(self, work: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run, name="sibling-wheel", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as error:  # handed to the thread that waits for it
            self._error = error

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def _publish(scratch: Path, dest_dir: Path, names: Sequence[str]) -> None:
    """Rename the finished outputs ``names`` from ``scratch`` into ``dest_dir``, in that order: all or none.

    A name taken there by a directory (what a rename cannot replace) fails before anything is renamed,
    with an error naming the destination, not the scratch file: a sibling never stays without its main
    wheel, and the outputs of an earlier run stay as they were.  Should a rename still fail, those renamed
    before it are removed again.
    """
    for name in names:
        target = dest_dir / name
        if target.is_dir() and not target.is_symlink():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    published: list[Path] = []
    try:
        for name in names:
            target = dest_dir / name
            try:
                os.replace(scratch / name, target)
            except OSError as error:
                raise OSError(error.errno, error.strerror, str(target)) from None
            published.append(target)
    except BaseException:
        for target in published:
            target.unlink(missing_ok=True)
        raise


def split_wheel(
    wheel: Path | str,
    dest_dir: Path | str,
    *,
    into: str,
    move: Sequence[str] = (),
    max_size: int | None = None,
    graph_wheels: Sequence[Path] = (),
    workers: int | None = None,
) -> PatchResult:
    """Move shared libraries of ``wheel`` into the sibling wheel ``into``, with no other edit (the ``split`` command).

    ``graph_wheels`` are the other wheels of the environment (e.g. the nvidia ones):
    with them, the preload also loads what the moved libraries need from those wheels,
    so the pair works with one directory per wheel on its own.  ``workers``: the threads the libraries are
    inflated on, as for ``graph --jobs`` (:func:`patched_wheels.elf.graph.scan_wheels`; default one per core).
    """
    # Imported here: the `patch` command, which imports this module, reads no library graph unless asked.
    from patched_wheels.elf.graph import start_graph

    # Read while the split plans and writes: it waits for the graph only at the members whose bytes need it.
    with start_graph([Path(wheel), *graph_wheels], workers=workers) as reading:
        return patch_wheel(wheel, dest_dir, PatchOptions(split=SplitRequest(into, move, max_size), graph=reading))
