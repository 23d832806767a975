"""The lock formats, in one registry: what reads each, what writes it, and how users name it.

Every format is read into the lock model (:class:`~patched_wheels.lock.model.Lock`) once, planned once
(:func:`~patched_wheels.lock.plan.plan_lock`) and written by the writers the plan is handed to: always a
requirements lock (every rules_python release reads one), and, for a format with a writer of its own,
the same file pointing at the patched wheels. Adding a format is an entry here plus its reader (and
writer); the CLI's flags (``--uv-lock``), the hub's Bazel attributes (``uv_lock``, listed again in
``hub.bzl``, whose test holds both equal) and ``resolve`` take it from this table. Readers and writers
are named by module, imported only for the format being read: a warm ``index`` run starts fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from patched_wheels.errors import UsageError
from patched_wheels.lock.model import Lock, Pin


@dataclass(frozen=True)
class LockFormat:
    """One lock format: its name (``Lock.format``, the CLI flag ``--NAME``), its Bazel attribute, and
    its reader and own-format writer as ``module:function`` (writer None: written as requirements only)."""

    name: str
    attribute: str
    help: str
    reader: str  # (path, environment) -> a document whose lock model :func:`lock_model` gives
    writer: str | None = None  # (document, plan, index_dir) -> the text of the same format, in pieces
    out_flag: str | None = None  # the CLI flag naming where the writer's output goes

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def read(self, path: Path | str, environment: Mapping[str, str] | None = None) -> Any:
        """The document of ``path`` (the format's own reader result), read for ``environment``."""
        return _function(self.reader)(path, environment)

    def write(self) -> Callable[..., Iterable[str]]:
        """The format's own writer (:attr:`writer` must be set)."""
        assert self.writer is not None, self.name
        return _function(self.writer)


LOCK_FORMATS: tuple[LockFormat, ...] = (
    LockFormat(
        "requirements",
        "requirements_lock",
        "a pip requirements lock",
        "patched_wheels.lock.formats.requirements:read_requirements",
    ),
    LockFormat(
        "uv-lock",
        "uv_lock",
        "a uv.lock, read for this interpreter",
        "patched_wheels.lock.formats.uvlock:read_uv_lock",
        "patched_wheels.lock.formats.uvwriter:render_uv_lock",
        "--out-uv-lock",
    ),
    LockFormat(
        "pylock",
        "pylock",
        "a PEP 751 pylock.toml, read for this interpreter",
        "patched_wheels.lock.formats.pylock:read_pylock",
    ),
)
BY_NAME = {entry.name: entry for entry in LOCK_FORMATS}
#: The formats' names, as ``Lock.format`` holds them.
FORMATS = tuple(BY_NAME)


def lock_format(name: str) -> LockFormat:
    """The registry entry of ``name`` (one of :data:`FORMATS`)."""
    if name not in BY_NAME:
        raise UsageError(f"lock format {name!r}: expected one of {', '.join(BY_NAME)}")
    return BY_NAME[name]


def lock_model(document: Any) -> Lock:
    """The lock model of what a reader returned (the model itself, or a document holding it as ``lock``)."""
    return document if isinstance(document, Lock) else document.lock


def read_lock(path: Path | str, name: str = "requirements", environment: Mapping[str, str] | None = None) -> Lock:
    """The lock model of ``path``, read as the format ``name``; the TOML formats are read for
    ``environment`` (default: the running interpreter), a requirements file keeps its markers."""
    return lock_model(lock_format(name).read(path, environment))


def served_pins(path: Path | str, name: str = "requirements") -> list[Pin]:
    """The pins of a lock that an index (or the lock's own file list) serves: every pin but direct
    references (pip installs those from their URL), each pinned to one version (else an error)."""
    pins = [pin for pin in read_lock(path, name).pins if not pin.url]
    for pin in pins:
        pin.pinned_version()
    return pins


def _function(dotted: str) -> Callable[..., Any]:
    module, _, function = dotted.partition(":")
    return getattr(importlib.import_module(module), function)
