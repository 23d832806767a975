"""tools/release, importable by the tests (a script without a .py suffix)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

RELEASE = Path(__file__).resolve().parents[2] / "tools" / "release"


def load_release() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("rpw_release", str(RELEASE))
    spec = importlib.util.spec_from_loader("rpw_release", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def make_repository(root: Path, version: str = "1.2.3", files: dict[str, bytes] | None = None) -> Path:
    """A small git checkout shaped like this repository (MODULE.bazel, python/, the version in its three
    places, a test and an example the archive must leave out), committed; returns ``root``."""
    import subprocess

    tree = {
        "MODULE.bazel": f'module(name = "rules_patched_wheels", version = "{version}")\n'.encode(),
        "BUILD.bazel": b"",
        "pyproject.toml": f'[project]\nname = "patched-wheels"\nversion = "{version}"\n'.encode(),
        "python/BUILD.bazel": b"",
        "python/patched_wheels/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "python/run.sh": b"#!/bin/sh\n",
        "tests/test_x.py": b"",
        **(files or {}),
    }
    for path, data in tree.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / "python" / "run.sh").chmod(0o755)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fixture"], cwd=root, check=True)
    return root
