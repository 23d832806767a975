"""A hub's wheel facts: what its build read from the wheels' contents, as a file to check in beside the lock.

The slow part of a hub on a runner whose helper cache is empty is reading the wheels, not patching
them: the ELF rows of every library of the set (each member inflated up to its dynamic section) and
the ``preload = "auto"`` probe's observation (the whole set installed in one site-packages, the package
imported). Both depend on the wheels' contents alone (their sha256s, the probe, the interpreter), like
the lock itself, so they can be recorded once and checked in: the hub writes ``wheel_facts.json`` with
every such entry its build used, and ``wheel_facts`` on ``patched.index`` / ``patched_index`` gives such
a file back to later builds, which then install and probe nothing the file answers.

The entries are the helper cache's own (:data:`patched_wheels.base.cache.RECORDED_KINDS`, by
``kind/file name``), laid over the cache (:meth:`patched_wheels.base.cache.CacheContext.recording`). They
are claims, never instructions: each is checked by its reader against the wheels, which the hub holds
(each ELF row against its member's path and dynamic section, which is read for that,
:func:`patched_wheels.elf.cache.wheel_problem`; an observation against the set's libraries, its extension
modules and RTLD_GLOBAL libraries against the mapped libraries' symbol tables, and its probe's exit status:
:mod:`patched_wheels.loading.observe`), and one that disagrees is one warning naming this file and the
entry, and is read from the wheel (or probed) again; which libraries an observation lists as mapped is
taken from it once those checks pass. What is and is not verified, and so what the file still saves, is
listed in docs/caches-and-trust.md. An observation of a failed probe is never recorded here. A file that
is not a facts file at all is an error naming the attribute; one that no longer matches the lock (a bump,
another interpreter) costs the work it no longer saves, and one warning saying which file to copy over it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from patched_wheels.base.cache import RECORDED_KINDS
from patched_wheels.base.fsutil import read_input_text, write_atomic
from patched_wheels.base.schema import VALUES, read_object, to_json
from patched_wheels.errors import UsageError, warn

FILE = "wheel_facts.json"
"""The file a hub writes, exported as ``@<hub>//:wheel_facts.json``."""
ATTRIBUTE = "wheel_facts"
_FORMAT = "rules_patched_wheels wheel facts"
_SCHEMA = 1
# A row is a few hundred bytes and an observation lists the libraries a probe mapped: torch 2.1.0's 22 wheels
# make 27 KB. The bound, a cache file's (elf.cache), keeps a wrong file from being decoded into gigabytes.
_MAX_BYTES = 16 << 20
_NAME = re.compile(rf"(?:{'|'.join(RECORDED_KINDS)})/[0-9a-z][0-9a-z.]*\.json")


@dataclass(frozen=True)
class FactsFile:
    """``wheel_facts.json``: its format and schema (a reader refuses any other) and its entries, each a cache
    entry's value (checked by that entry's reader against the wheel, :mod:`patched_wheels.base.cache`)."""

    format: str = field(metadata={VALUES: (_FORMAT,)})
    schema: int = field(metadata={VALUES: (_SCHEMA,)})
    entries: Mapping[str, object]


def read_facts(path: Path, call: str) -> dict[str, object]:
    """The entries of the facts file ``path`` (``kind/file name`` -> value), as :func:`write_facts` writes them;
    anything else is one error naming ``call`` (the hub as the user declared it) and the attribute."""
    where = f'{call}: {ATTRIBUTE} = "{path}"'
    text = read_input_text(path, max_bytes=_MAX_BYTES, what="a facts file", where=where, error=UsageError)
    try:
        value = json.loads(text)
    except RecursionError:
        raise UsageError(f"{where}: not a facts file (nested too deeply)") from None
    except ValueError as error:
        raise UsageError(f"{where}: not JSON ({error})") from None
    try:
        if not isinstance(value, dict) or value.get("format") != _FORMAT:  # another document: say what this one is
            raise ValueError(f'no "format": "{_FORMAT}"')
        facts = read_object(FactsFile, value, FILE)
        for name in facts.entries:
            if not _NAME.fullmatch(name):
                raise ValueError(f"entry {json.dumps(name)[:80]} is no {' or '.join(RECORDED_KINDS)} entry")
    except (UsageError, ValueError) as error:
        raise UsageError(f"{where}: not a facts file the hub writes ({error}); copy @<hub>//:{FILE} over it") from None
    return dict(facts.entries)


def facts_text(entries: Mapping[str, object]) -> str:
    """The file for ``entries``: sorted and indented, so that a lock bump is a readable diff."""
    return json.dumps(to_json(FactsFile(_FORMAT, _SCHEMA, entries)), indent=1, sort_keys=True) + "\n"


def write_facts(path: Path, entries: Mapping[str, object]) -> None:
    write_atomic(path, facts_text(entries).encode("utf-8"), mode=0o644)


def stale_warning(
    given: Mapping[str, object], used: Mapping[str, object], *, call: str, shown: str, given_path: Path, written: Path
) -> None:
    """One warning when the facts file given (``shown``: the attribute as the user wrote it) is not the one this
    build would write (``used``): the work it should have saved was done, and copying ``written`` over
    ``given_path`` saves it next time."""
    if dict(given) == dict(used):
        return
    missing = sum(1 for name, value in used.items() if given.get(name) != value)
    unused = sum(1 for name in given if name not in used)
    warn(
        f"{call}: {shown} does not hold what this build read from the wheels ({missing} of its "
        f"{len(used)} entries missing or different, {unused} unused: a changed lock, probe or interpreter), so they were "
        f"read again; to record them: cp {written} {given_path}"
    )
