"""Per-phase wall and CPU time of a helper run, for the benchmarks (``benchmarks/bench_hub_cold.py``).

Off unless ``RULES_PATCHED_WHEELS_TIMINGS`` names a file (an absolute path): then each helper process
appends one JSON line to it when its command ends: the command, its total wall and CPU time, each
:func:`phase` it went through, and the inflater it read wheels with (python-isal or zlib).  A phase's
figures are its own: a phase inside another (the probe inside the patch) is counted in the inner one only,
so the phases of a run add up to at most its total.  CPU is split into the process's user and system time
and its reaped children's (the probe's interpreter, the processes it starts), as :func:`os.times` reports
them; the ELF graph's threads count in the process's.

The file is written outside whatever the command produces and read by nothing but a benchmark, so a hub
built with it on is byte for byte the hub built without it.  It is appended to only when it is a timings
file: a new or empty regular file, or one whose first bytes are a timings line's (:data:`_HEAD`); any other
file (the input wheel, a source file: the variable is the user's to mistype) is left as it is.  The hub rule passes the variable on from
Bazel's client environment (``--repo_env``) without declaring it, so setting it re-runs no hub.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

ENVIRONMENT_VARIABLE = "RULES_PATCHED_WHEELS_TIMINGS"
FIELDS = ("wall", "user", "system", "children_user", "children_system")
"""What each phase records, in seconds."""

_HEAD = b'{"command": '
"""How every line of a timings file starts (:func:`record` writes ``command`` first)."""

_phases: dict[str, list[float]] = {}
_open: list[list[float]] = []
"""For each phase under way, innermost last: the time its nested phases took, subtracted from its own."""
_started = time.perf_counter()


def _now() -> list[float]:
    times = os.times()
    return [time.perf_counter(), times.user, times.system, times.children_user, times.children_system]


def enabled() -> bool:
    return bool(os.environ.get(ENVIRONMENT_VARIABLE))


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time spent inside the ``with`` block as ``name`` (added up when a phase repeats)."""
    if not enabled():
        yield
        return
    start = _now()
    _open.append([0.0] * len(FIELDS))
    try:
        yield
    finally:
        nested = _open.pop()
        spent = [after - before for before, after in zip(start, _now())]
        totals = _phases.setdefault(name, [0.0] * len(FIELDS))
        for index, value in enumerate(spent):
            totals[index] += value - nested[index]
            if _open:
                _open[-1][index] += value


def record(command: Sequence[str], facts: Mapping[str, str] | None = None) -> None:
    """Append this run's line to the file the variable names (nothing when it is unset): ``command`` (the
    subcommand's words, no paths), the total since the helper's modules were imported, the phases, and
    ``facts`` about how the run did its work (which inflater).  A file that cannot be written costs the
    figures, never the run."""
    phases = {name: dict(zip(FIELDS, values)) for name, values in _phases.items()}
    _phases.clear()  # a second command in the same process (a test) reports its own
    path = os.environ.get(ENVIRONMENT_VARIABLE, "")
    if not path or not os.path.isabs(path):
        return
    now = _now()
    total = [now[0] - _started, *now[1:]]
    line = {
        "command": list(command),
        "pid": os.getpid(),
        "total": dict(zip(FIELDS, total)),
        "phases": phases,
        **(facts or {}),
    }
    import json  # only when asked, as fsutil: every command imports this module

    from patched_wheels.base.fsutil import NotRegularFileError, open_regular_file

    try:  # a FIFO without a reader, a device or a link is no place for them, and must not hang the run
        with os.fdopen(open_regular_file(path, append=True), "a", encoding="utf-8") as file:
            if os.fstat(file.fileno()).st_size and not _is_timings_file(path):
                return  # someone else's file: never a line appended to it
            file.write(json.dumps(line) + "\n")
    except (OSError, NotRegularFileError):
        pass


def _is_timings_file(path: str) -> bool:
    """Whether the (regular, non-empty) file ``path`` starts as :func:`record` starts a line."""
    from patched_wheels.base.fsutil import open_regular_file

    with os.fdopen(open_regular_file(path), "rb") as file:
        return file.read(len(_HEAD)) == _HEAD
