"""Point a lock at the patched wheels of a local index: the I/O around :func:`~patched_wheels.lock.plan.plan_lock`.

``lock(IN, INDEX, OUT, OPTIONS)`` reads the lock IN once (its format's reader, :mod:`patched_wheels.lock.formats.registry`),
asks :mod:`patched_wheels.lock.plan` once what must change for INDEX (the files ``index.build_index``
just published) and hands that plan to every writer: OUT, a requirements lock
(:mod:`patched_wheels.lock.formats.pipwriter`), and for a format with a writer of its own (uv.lock) the same file.
The rules - which pins change, how they are spelled in each index option, hashed and unhashed locks,
which hashes stay for other platforms - are the plan's (see its docstring); everything else in the
file is kept byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from patched_wheels.base.fsutil import holds, resolved_path, write_temp
from patched_wheels.errors import InvalidLockError, UsageError
from patched_wheels.index.simple import IndexResult
from patched_wheels.lock.formats import registry
from patched_wheels.lock.formats.pipwriter import render_exported, render_requirements
from patched_wheels.lock.formats.requirements import RequirementsText
from patched_wheels.lock.plan import DEFAULT_INDEX_OPTION, INDEX_OPTIONS, LockOptions, plan_lock

__all__ = [
    "DEFAULT_INDEX_OPTION",
    "INDEX_OPTIONS",
    "LockOptions",
    "LockResult",
    "check_outputs",
    "lock",
    "read_lock_document",
    "write_lock",
]


@dataclass(frozen=True)
class LockResult:
    """The lock written, and what changed in it, for the command to print."""

    out: Path
    changes: tuple[str, ...]  # human-readable, e.g. "torch==2.1.0 -> torch==2.1.0+stripe.5"
    warnings: tuple[str, ...] = ()  # what the plan could not decide from the lock, for the command to warn


def lock(
    source: Path | str,
    index: IndexResult,
    out: Path | str,
    options: LockOptions,
    *,
    lock_format: str = "requirements",
    out_uv_lock: Path | str | None = None,
) -> LockResult:
    """Write ``out``: the lock ``source`` pointed at ``index``, what ``index.build_index`` returned, as ``options`` say.

    The caller indexes the directory first (``build_index`` is incremental, so that is cheap when
    nothing changed): the hashes written to the lock are then those of the index's files, and a
    result whose pages were since rewritten for other files is refused rather than written from.
    ``options.index_dir`` is where the index is served from: its own directory, or where a hub's build,
    staged in a temporary directory, will put it; the locks name it.
    ``lock_format``: what ``source`` is (one of ``lock.formats.registry.FORMATS``); ``out`` is a
    requirements lock whatever it is, and ``out_uv_lock`` (a ``uv-lock`` input only) the same uv.lock
    pointing at the patched wheels.
    """
    return write_lock(
        read_lock_document(source, lock_format), index, out, options, lock_format=lock_format, out_uv_lock=out_uv_lock
    )


def read_lock_document(source: Path | str, lock_format: str = "requirements") -> Any:
    """The lock ``source`` as its format's reader reads it (what :func:`write_lock` writes from): read first, so a
    lock refused leaves nothing behind, not even the index the command would have (re)built for it."""
    return registry.lock_format(lock_format).read(source)


def check_outputs(lock_format: str, out: Path | str, out_uv_lock: Path | str | None) -> None:
    """The outputs asked for are ones this format can write, and two files: checked by :func:`write_lock`, and by
    the command before it (re)builds the index, so a refused command line leaves DIR as it was."""
    entry = registry.lock_format(lock_format)
    if out_uv_lock is not None:
        if entry.writer is None:
            raise UsageError("--out-uv-lock needs --uv-lock: it rewrites the uv.lock given")
        if resolved_path(Path(out_uv_lock)) == resolved_path(Path(out)):
            raise UsageError(f"{entry.out_flag} {out_uv_lock}: the same file as --out")


def write_lock(
    document: Any,
    index: IndexResult,
    out: Path | str,
    options: LockOptions,
    *,
    lock_format: str = "requirements",
    out_uv_lock: Path | str | None = None,
) -> LockResult:
    """:func:`lock` of a lock already read (:func:`read_lock_document`)."""
    out = Path(out)
    unserved = index.unserved_pages()
    if unserved:
        raise InvalidLockError(
            f"{unserved[0]}: does not list the files the lock would pin; index {index.directory} again"
        )
    entry = registry.lock_format(lock_format)
    check_outputs(lock_format, out, out_uv_lock)
    plan = plan_lock(registry.lock_model(document), index.files, options)
    outputs: dict[Path, tuple[str, Callable[[], Iterable[str]]]]
    if isinstance(document, RequirementsText):
        outputs = {out: ("--out", lambda: [render_requirements(document, plan)])}
    else:
        outputs = {out: ("--out", lambda: render_exported(registry.lock_model(document), plan))}
    if out_uv_lock is not None:
        outputs[Path(out_uv_lock)] = (str(entry.out_flag), lambda: entry.write()(document, plan, options.index_dir))
    _write_all(outputs)
    return LockResult(out=out, changes=plan.changes, warnings=plan.warnings)


def _write_all(outputs: Mapping[Path, tuple[str, Callable[[], Iterable[str]]]]) -> None:
    """Write every output (path: flag, its renderer, which checks what it renders and gives its text a piece
    at a time) or none: each is rendered as it is staged beside its target (none is held whole), and before
    that once more to compare it with what its target holds, where the target is a file already; then all
    are renamed; an output that cannot be written is one error naming its flag."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, (flag, render) in outputs.items():
            if os.path.isfile(path) and holds(path, render()):  # no target (the hub's case): nothing to compare
                continue
            if os.path.exists(path) and not os.path.isfile(path):
                raise UsageError(
                    f"{flag} {path}: not a regular file"
                )  # a directory, or a device renaming would replace
            try:
                staged.append((write_temp(path, render()), path))
            except OSError as error:
                raise UsageError(f"{flag} {path}: cannot be written ({error.strerror or error})") from None
        for temp, path in staged:
            os.replace(temp, path)
    finally:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
