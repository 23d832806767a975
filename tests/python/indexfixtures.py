"""Synthetic wheels and a pip runner for the index, lock and mirror tests.

Wheels are built with stdlib zipfile so every property the tests rely on (file name spelling,
build tag, local version, Requires-Python, Requires-Dist) is chosen by the test itself.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Sequence


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
    dist_name, version = stem.split("-")[:2]
    package = dist_name.lower().replace(".", "_").replace("-", "_")
    dist_info = f"{dist_name}-{version}.dist-info"
    metadata_lines = [
        "Metadata-Version: 2.1",
        f"Name: {metadata_name or dist_name}",
        f"Version: {version}",
    ]
    if requires_python:
        metadata_lines.append(f"Requires-Python: {requires_python}")
    metadata_lines += [f"Requires-Dist: {requirement}" for requirement in requires_dist]
    members = {
        f"{package}/__init__.py": payload.encode(),
        f"{dist_info}/METADATA": ("\n".join(metadata_lines) + "\n\nA test wheel.\n").encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: indexfixtures\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={_record_hash(data)},{len(data)}\n" for name, data in members.items())
    members[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    path = directory / filename
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path


def wheel_metadata(path: Path) -> bytes:
    """METADATA read independently of the code under test."""
    with zipfile.ZipFile(path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


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
