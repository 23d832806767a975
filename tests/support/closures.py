"""Pip's closure built in a test: each wheel's edges read as the hub reads them, on a Linux interpreter."""

from __future__ import annotations

from patched_wheels.lock.closure import Closure
from patched_wheels.lock.requiresdist import read_dist

LINUX = {"sys_platform": "linux", "python_version": "3.11", "platform_machine": "x86_64"}


def dist(project: str, requires: list[str], provides: list[str] = ()) -> object:  # type: ignore[assignment]
    return read_dist(project, "1.0", requires, provides, origin=project, environment=LINUX)


def closure(*dists: object, roots: dict[str, tuple[str, ...]] | None = None) -> Closure:
    return Closure({d.project: d for d in dists}, roots or {})  # type: ignore[attr-defined]
