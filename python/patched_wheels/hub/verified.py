"""The verified stacks: one row per CUDA stack the product checks, kept as data beside the code.

As pypa auditwheel keeps its manylinux policies as JSON it reads, the hub keeps ``verified_stacks.json``: per
stack (torch, JAX, TensorFlow, CuPy, onnxruntime) which project's wheel gets the preload, the probe that makes
the stack load its CUDA libraries, the lock pins that identify the stack, optionally the libraries the stack
loads at run time (recorded as SONAMEs for the releases they were measured on, so that no package code runs at
fetch time for those), and the evidence behind the row. A lock that pins a row's stack, in a hub whose user wrote no ``patched_wheel`` of the row's ``name``,
gets the row's spec (:func:`applicable_rows`, :func:`row_spec`; applied by :func:`patched_wheels.hub.plan.checked_request`,
which says so in one line). ``docs/verified-stacks.md`` shows the table as :func:`render_stanzas` writes it
(``tools/gen_verified_stacks.py``; a test holds the page equal to the table).

The file is read by the one schema reader (:func:`patched_wheels.base.schema.read_object`) and checked whole
(:func:`check_table`): every row's spec passes :func:`~patched_wheels.hub.spec.check_spec` as a user's would.
"""

from __future__ import annotations

import fnmatch
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from patched_wheels.base.fsutil import read_regular_file
from patched_wheels.base.names import canonicalize_name, glob_problem
from patched_wheels.base.schema import read_object
from patched_wheels.errors import UsageError
from patched_wheels.hub.spec import PatchedWheelSpec, spec_problem

#: The product's table.
TABLE = Path(__file__).with_name("verified_stacks.json")
#: The schema version the reader knows: a file of another is refused, never read by guess.
SCHEMA = 1
_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Evidence:
    """One measurement behind a row, as docs/verified-stacks.md and benchmarks/results report it."""

    versions: str
    """What was measured: the requirements and the size of the wheel set."""
    cpu: str
    """The verdict without a GPU: ``layout_test`` under Bazel (plain hub against the hub), or the compat harness's
    one-directory-per-wheel against one-venv comparison where no Bazel run was made."""
    gpu: str
    """The verdict on a GPU machine; "" where none was lent."""
    results: str
    """Where the measurement is reported (a file of the repository)."""


@dataclass(frozen=True)
class VerifiedStack:
    """One row: a stack, the spec the hub applies for it, and why the row is trusted."""

    stack: str
    """The row's name, as the hub's line and the docs name it (``jax-cuda13``)."""
    install: str
    """The requirement as the stack's install docs give it (``jax[cuda13]``): what a user locks."""
    name: str
    """The project whose wheel ships ``preload_package`` (``patched_wheel``'s ``name``)."""
    preload_package: str
    """As ``patched_wheel``'s (``""``: from ``name``)."""
    probe: str
    """The code that makes the stack load its CUDA libraries (``patched_wheel``'s ``probe``)."""
    lock_pins: Sequence[str]
    """Globs on the lock's project names (fnmatch, normalised names), each of which some pin must match for the
    lock to hold the stack; ``name`` is one of them."""
    recorded: Sequence[str]
    """The SONAMEs the probe mapped in one site-packages, recorded; empty: none recorded, the probe runs at fetch
    time. When given, the preload is these libraries where the set ships them (and what they need), in the ELF
    graph's order, and no package code runs (``preload = "elf"``)."""
    recorded_global: Sequence[str]
    """Of ``recorded``, those the probe's symbol tables showed another library using without linking to them:
    loaded RTLD_GLOBAL (:mod:`patched_wheels.loading.observe`)."""
    recorded_for: str
    """The releases of ``name`` the recording was made on, a PEP 440 specifier (``==2.15.0``); ``""`` exactly
    when nothing is recorded. A lock pinning another release gets the probe instead: another release loads other
    libraries (torch 2.8's ``libcudart.so.12`` against 2.15's ``.so.13``), which a recording would silently miss
    (:func:`uses_recording`)."""
    evidence: Sequence[Evidence]


@dataclass(frozen=True)
class VerifiedTable:
    """The file: its schema version, the local version label of every spec it applies, and its rows."""

    schema: int
    suffix: str
    """The PEP 440 local label of the wheels the rows patch (``torch==2.15.0+verified``)."""
    stacks: Sequence[VerifiedStack]


def read_table(path: Path = TABLE) -> VerifiedTable:
    """The table in ``path``, read by the one schema reader and checked whole (:func:`check_table`); any flaw is
    one error naming the file."""
    try:
        raw = json.loads(read_regular_file(path, max_bytes=_MAX_BYTES, follow_links=True).decode("utf-8"))
        table = read_object(VerifiedTable, raw, "verified stacks")
        check_table(table)
    except RecursionError:
        raise UsageError(f"{path}: cannot read the verified stacks: nested too deeply") from None
    except (OSError, ValueError, UsageError) as error:
        raise UsageError(f"{path}: cannot read the verified stacks: {error}") from None
    return table


@functools.lru_cache(maxsize=1)
def product_table() -> VerifiedTable:
    """The product's own table (:data:`TABLE`), read once per process."""
    return read_table(TABLE)


def check_table(table: VerifiedTable) -> None:
    """What the reader cannot see in one field: the schema version, rows that share a name or a ``name``, a row
    whose spec a user could not write (:func:`~patched_wheels.hub.spec.spec_problem`), a lock-pin glob that
    cannot match, a row its own pins would not find, a recording without its libraries."""
    if table.schema != SCHEMA:
        raise ValueError(f"schema = {table.schema}: this helper reads schema {SCHEMA}")
    stacks: set[str] = set()
    names: set[str] = set()
    for row in table.stacks:
        where = f"stack {row.stack!r}"
        if row.stack in stacks or canonicalize_name(row.name) in names:
            raise ValueError(f"{where}: a second row of this stack or of name {row.name!r}")
        stacks.add(row.stack)
        names.add(canonicalize_name(row.name))
        if not row.evidence:
            raise ValueError(f"{where}: no evidence (a row is verified by a measurement)")
        for glob in row.lock_pins:
            if problem := glob_problem(glob):
                raise ValueError(f"{where}: lock_pins {glob!r}: {problem}")
        if not any(matches([glob], [canonicalize_name(row.name)]) for glob in row.lock_pins):
            raise ValueError(f"{where}: lock_pins {list(row.lock_pins)}: none matches name {row.name!r}")
        if bool(row.recorded) != bool(row.recorded_for):
            raise ValueError(
                f"{where}: recorded libraries and recorded_for (the releases they were recorded on) go together"
            )
        if row.recorded_for:
            try:
                SpecifierSet(row.recorded_for)
            except InvalidSpecifier:
                raise ValueError(f"{where}: recorded_for {row.recorded_for!r} is not a PEP 440 specifier") from None
        for recording in (False, True) if row.recorded else (False,):
            if problem := spec_problem(row_spec(row, table.suffix, recording=recording)):
                raise ValueError(f"{where}: {problem}")


def matches(globs: Sequence[str], pinned: Collection[str]) -> bool:
    """Whether every glob of ``globs`` matches one of ``pinned`` (normalised project names)."""
    return all(any(fnmatch.fnmatchcase(project, canonicalize_name(glob)) for project in pinned) for glob in globs)


def applicable_rows(table: VerifiedTable, pinned: Collection[str], written: Collection[str]) -> list[VerifiedStack]:
    """The rows whose stack the lock holds (``pinned``: its projects) and whose ``name`` no ``patched_wheel`` the
    user wrote names (``written``: normalised names): a user's stanza overrides its row entirely."""
    return [
        row
        for row in table.stacks
        if canonicalize_name(row.name) not in written and canonicalize_name(row.name) in pinned
        if matches(row.lock_pins, pinned)
    ]


def uses_recording(row: VerifiedStack, versions: Collection[str]) -> bool:
    """Whether the row's recorded libraries stand for its probe in a lock whose wheels of ``name`` have
    ``versions``: only where every one of them is a release the recording was made on (``recorded_for``)."""
    if not row.recorded or not versions:
        return False
    releases = SpecifierSet(row.recorded_for)
    return all(releases.contains(version, prereleases=True) for version in versions)


def row_spec(row: VerifiedStack, suffix: str, *, recording: bool) -> PatchedWheelSpec:
    """The ``patched_wheel`` a row stands for: ``preload = "auto"`` with its probe, or, with ``recording`` (see
    :func:`uses_recording`), ``preload = "elf"`` with the recorded libraries (no package code runs at fetch
    time)."""
    return PatchedWheelSpec(
        name=row.name,
        suffix=suffix,
        preload="elf" if recording else "auto",
        preload_package=row.preload_package,
        probe="" if recording else row.probe,
        recorded=tuple(row.recorded) if recording else (),
        recorded_global=tuple(row.recorded_global) if recording else (),
    )


def stanza_attributes(row: VerifiedStack) -> str:
    """The row as the attributes of the ``patched_wheel`` a user writes for it (the probe's, recorded or not)."""
    package = f", preload_package = {json.dumps(row.preload_package)}" if row.preload_package else ""
    return f'preload = "auto"{package}, probe = {json.dumps(row.probe)}'


def render_stanzas(table: VerifiedTable) -> str:
    """docs/verified-stacks.md's table of the rows (a Markdown table; ``|`` in a cell escaped)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| stack | what the hub applies (the stanza that overrides it) | found by the pins | evidence |",
        "| --- | --- | --- | --- |",
    ]
    for row in table.stacks:
        stanza = f'`patched_wheel(name = "{row.name}", {stanza_attributes(row)})`'
        if row.recorded:
            stanza += f"; for `{row.name}{row.recorded_for}` recorded, so no probe runs: " + ", ".join(
                f"`{soname}`" for soname in row.recorded
            )
        evidence = "<br>".join(
            f"{item.versions}: "
            + "; ".join([*([item.cpu] if item.cpu else []), f"GPU: {item.gpu or 'not measured'}"])
            + f" ([results](../{item.results}))"
            for item in row.evidence
        )
        pins = ", ".join(f"`{glob}`" for glob in row.lock_pins)
        lines.append(f"| `{cell(row.install)}` | {cell(stanza)} | {cell(pins)} | {cell(evidence)} |")
    return "\n".join(lines) + "\n"
