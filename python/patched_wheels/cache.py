"""STAND-IN for wt-caches' ``cache.py`` (TEAM.md interface), only so wt-cuda's branch runs on its own.

Delete this file in favour of wt-caches' module when merging (take theirs on conflict): the names and
their contracts below are the agreed ones, the implementation is the minimum.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from patched_wheels.errors import warn
from patched_wheels.fsutil import write_atomic


def cache_root() -> Path | None:
    """RULES_PATCHED_WHEELS_CACHE (an absolute directory, or ``off``), else the XDG cache directory."""
    configured = os.environ.get("RULES_PATCHED_WHEELS_CACHE", "")
    if configured == "off":
        return None
    if configured and os.path.isabs(configured):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rules_patched_wheels"


def cache_dir(kind: str) -> Path | None:
    root = cache_root()
    return None if root is None else root / kind


def read_json(path: Path, *, max_bytes: int) -> object | None:
    """The decoded file: a regular file of ours, not group/other-writable, at most ``max_bytes``; else None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        warn(f"{path}: cache entry not read ({error.strerror})")
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022 or info.st_size > max_bytes:
        warn(f"{path}: cache entry ignored (not a private regular file of at most {max_bytes} bytes)")
        return None
    try:
        with open(path, "rb") as file:
            return json.loads(file.read(max_bytes + 1))
    except (OSError, ValueError) as error:
        warn(f"{path}: cache entry ignored ({error})")
        return None


def write_json(path: Path, value: object) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps(value, sort_keys=True).encode("utf-8"))
        os.chmod(path, 0o600)
    except OSError as error:
        warn(f"{path}: cache entry not written ({error.strerror or error})")
