"""Whether a layout_test's deps are pip's closure: the hub's ``pip_closure.json`` the test was given, read
bounded and checked (:mod:`patched_wheels.lock.closure` holds the closure itself), and the lines saying which wheels
pip installs from the same lock that deps lack."""

from __future__ import annotations

import json
import os
from pathlib import Path

from patched_wheels.base.fsutil import read_input_text
from patched_wheels.base.names import canonicalize_name, is_valid_project_name
from patched_wheels.errors import UsageError, one_line, plural, printable
from patched_wheels.layouttest.config import Config
from patched_wheels.loading.mergedtree import Merged, dists
from patched_wheels.loading.probe import Comparison
from patched_wheels.lock.closure import Closure, missing_from

#: pip_closure.json's bound: JSON of short strings takes 10 to 20 times its size in Python's objects, so 8 MiB
#: (some 50,000 requirements, ten times a large lock's) peaks under 200 MiB; 64 MiB took 1.6 GB.
_MAX_CLOSURE = 8 << 20


def read_pip_closure(config: Config, runfiles: str) -> Closure | None:
    """The hub's ``pip_closure.json`` the test was given (None: not given), read bounded and checked."""
    if not config.pip_closure:
        return None
    what = f"layout_test {config.test}: pip_closure = {json.dumps(config.pip_closure)}"
    if "\0" in config.pip_closure:  # open() would say "embedded null byte" with no name
        raise UsageError(f"{what}: a path with a NUL character, which no file's path holds")
    path = Path(os.path.normpath(os.path.join(runfiles, config.pip_closure)))
    text = read_input_text(path, max_bytes=_MAX_CLOSURE, what="a pip closure file", where=what, error=UsageError)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as error:  # json nests a Python call per "[" or "{"
        raise UsageError(
            f"{what}: not a pip closure file: {one_line(str(error))[:200] or 'nested too deeply'}"
        ) from None
    closure = Closure.from_json(raw, what)
    _check_project_names(closure, what)
    return closure


def _check_project_names(closure: Closure, what: str) -> None:
    """Refuse a closure naming a project that no wheel can have (PEP 508), or not as the hub writes it
    (normalized, which the check looks names up by): the hub writes only names of the lock's wheels, so such a
    name is a file made by hand, and no verdict should quote it."""
    names = [*closure.dists, *closure.root_extras]
    names += [
        edge.project
        for dist in closure.dists.values()
        for edges in (dist.requires, *dist.extras.values())
        for edge in edges
    ]
    for name in names:
        if not is_valid_project_name(name):
            raise UsageError(
                f"{what}: not a pip closure file: {printable(repr(name))[:200]} is not a project name (PEP 508)"
            )
        if canonicalize_name(name) != name:
            raise UsageError(
                f"{what}: not a pip closure file: {name!r} is not normalized ({canonicalize_name(name)!r})"
            )


#: The most wheels the verdict lists that deps lack (each with its chain, bounded by closure.MAX_STEPS); the rest
#: are counted, so a closure of thousands of projects prints a few lines.
MAX_MISSING = 20


def closure_lines(closure: Closure | None, comparison: Comparison, merged: Merged) -> list[str]:
    """Why the deps are not pip's closure: each wheel pip installs for them that they lack, with the requirements
    that bring it; and a failure both layouts share that names a library one of the wheels ships (the set is
    incomplete or broken, not fine). Empty when the deps are pip's closure, or when no closure was given."""
    if closure is None:
        return []
    installed = [dist.rsplit("-", 1)[0] for entry in merged.wheel_entries for dist in dists(entry)]
    missing = missing_from(closure, installed)
    lines = [
        one_line(f"layout_test: FAILED: deps lack {one.describe()}, which pip installs from the same lock")
        for one in missing[:MAX_MISSING]
    ]
    if len(missing) > MAX_MISSING:
        lines.append(
            f"layout_test: FAILED: deps lack {plural(len(missing) - MAX_MISSING, 'more wheel')} that pip installs from the "
            f"same lock (the first {MAX_MISSING} by name are listed above)"
        )
    error = comparison.flat.error_line or ""
    shipped = {os.path.basename(path) for path in merged.libraries}
    named = [name for name in shipped if f"{name}: cannot open shared object file" in error]
    if comparison.matches and named:
        lines.append(
            one_line(
                f"layout_test: FAILED: both layouts fail loading {named[0]}, which a wheel of the deps ships: {one_line(error)[:300]}"
            )
        )
    return lines
