"""Synthetic wheels and a pip runner for the index, lock and mirror tests.

Wheels are built with :mod:`wheelbuilder` (stdlib zipfile) so every property the tests rely on
(file name spelling, build tag, local version, Requires-Python, Requires-Dist) is chosen by the
test itself.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Sequence

from .wheelbuilder import build_wheel


def make_wheel(
    directory: Path,
    filename: str,
    *,
    requires_python: str | None = None,
    requires_dist: Sequence[str] = (),
    metadata_name: str | None = None,
    payload: str = "VALUE = 1\n",
) -> Path:
    """Write a pure-Python wheel ``directory/filename`` importable as its normalized name.

    ``filename`` decides the dist-info directory (its first two dash-separated parts), as a
    real build backend would; ``metadata_name`` overrides METADATA's ``Name:`` to build a
    wheel whose metadata disagrees with its file name.
    """
    stem = filename[: -len(".whl")]
    parts = stem.split("-")
    dist_name, version = parts[:2]
    package = dist_name.lower().replace(".", "_").replace("-", "_")
    path = build_wheel(
        directory,
        metadata_name or dist_name,
        version,
        {f"{package}/__init__.py": payload.encode()},
        build_tag=parts[2] if len(parts) == 6 else None,
        tag="-".join(parts[-3:]),
        requires=requires_dist,
        metadata_extra=f"Requires-Python: {requires_python}\n" if requires_python else "",
        distribution=dist_name,
    )
    assert path.name == filename, f"{filename}: not a <name>-<version>[-<build>]-<tag>.whl file name"
    return path


def wheel_metadata(path: Path) -> bytes:
    """METADATA read independently of the code under test."""
    with zipfile.ZipFile(path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pip_env() -> dict[str, str]:
    """Environment isolating pip from the machine's config (a global constraints file) and
    from its cache, so every test sees only the index it made."""
    env = dict(os.environ)
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        PIP_NO_PYTHON_VERSION_WARNING="1",
    )
    env.pop("PIP_INDEX_URL", None)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    env.pop("PIP_FIND_LINKS", None)
    return env


def run_pip(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real pip of this interpreter; never touches the network (``--index-url`` is
    always a file:// URL in these tests)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        env=pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "patched_wheels", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
