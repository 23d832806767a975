"""Point a lock at the patched wheels of a local index: the I/O around :func:`lockplan.plan_lock`.

``lock(IN, INDEX, OUT)`` reads the lock IN, asks :mod:`patched_wheels.lockplan` what must change for
INDEX (the files ``index.build_index`` just published) and writes OUT with :mod:`patched_wheels.pipwriter`.
The rules - which pins change, how they are spelled in each index option, hashed and unhashed locks -
are the plan's (see its docstring); everything else in the file is kept byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping

from packaging.utils import canonicalize_name

from patched_wheels.errors import InvalidLockError
from patched_wheels.fsutil import write_atomic
from patched_wheels.index import IndexResult
from patched_wheels.lockplan import DEFAULT_INDEX_OPTION, INDEX_OPTIONS, LockOptions, plan_lock
from patched_wheels.pipwriter import render_requirements
from patched_wheels.requirements import read_requirements

__all__ = ["DEFAULT_INDEX_OPTION", "INDEX_OPTIONS", "LockResult", "lock"]


@dataclass(frozen=True)
class LockResult:
    """The lock written, and what changed in it, for the command to print."""

    out: Path
    changes: tuple[str, ...]  # human-readable, e.g. "torch==2.1.0 -> torch==2.1.0+stripe.5"


def lock(
    requirements: Path | str,
    index: IndexResult,
    out: Path | str,
    *,
    index_option: str = DEFAULT_INDEX_OPTION,
    upstream_index_url: str | None = None,
    replaced: Mapping[str, Collection[str]] | None = None,
    references: Mapping[str, tuple[str, str]] | None = None,
) -> LockResult:
    """Write ``out``: ``requirements`` pointed at ``index``, what ``index.build_index`` returned.

    The caller indexes the directory first (``build_index`` is incremental, so that is cheap when
    nothing changed): the hashes written to the lock are then those of the index's files, and a
    result whose pages were since rewritten for other files is refused rather than written from.
    The other arguments are :class:`~patched_wheels.lockplan.LockOptions`'.
    """
    out = Path(out)
    options = LockOptions(
        index_dir=index.directory.resolve(),
        index_option=index_option,
        upstream_index_url=upstream_index_url,
        replaced={canonicalize_name(name): frozenset(d.lower() for d in digests) for name, digests in (replaced or {}).items()},
        references={canonicalize_name(name): (url, sha256) for name, (url, sha256) in (references or {}).items()},
    )
    unserved = index.unserved_pages()
    if unserved:
        raise InvalidLockError(f"{unserved[0]}: does not list the files the lock would pin; index {index.directory} again")
    text = read_requirements(requirements)
    plan = plan_lock(text.lock, index.files, options)
    write_atomic(out, render_requirements(text, plan).encode("utf-8"))
    return LockResult(out=out, changes=plan.changes)
