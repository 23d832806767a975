"""The offline launcher's shared parts, stood in for: a root with only what its module registry reads, module
archives as upstream makes them, and copies of tools/ at other paths (other clones of the repository)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def stand_in_root(root: Path) -> Path:
    """``root`` holding Debian's rules_python MODULE.bazel (what tools/offline/registry.py reads there) and
    what tools/bazel needs to take it for a provisioned root: its marker and Debian's bazelrc. Nothing runs in it."""
    rules_python = root / "usr/share/bazel/rules/python"
    rules_python.mkdir(parents=True)
    (rules_python / "MODULE.bazel").write_text('module(name = "rules_python", version = "0.22.1")\n', encoding="utf-8")
    (root / "etc/bazel").mkdir(parents=True)
    (root / "etc/bazel/bazelrc").write_text("", encoding="utf-8")
    (root / ".rpw-complete").write_text("stand-in\n", encoding="utf-8")
    return root


def module_archive(directory: Path, name: str, module_file: str) -> Path:
    """``NAME-VERSION.tar.gz`` as upstream's ``git archive`` makes it: one top folder holding MODULE.bazel."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.tar.gz"
    data = module_file.encode()
    with tarfile.open(path, "w:gz") as tar:
        member = tarfile.TarInfo(f"{name}/MODULE.bazel")
        member.size, member.mtime = len(data), 0
        tar.addfile(member, io.BytesIO(data))
    return path


def checkout_tools(directory: Path) -> Path:
    """A copy of this checkout's tools/ under ``directory`` (what another clone or worktree has); its path."""
    tools = directory / "tools"
    shutil.copytree(REPO_ROOT / "tools", tools, ignore=shutil.ignore_patterns("__pycache__"))
    return tools


def status(path: Path) -> tuple[int, int]:
    """``path``'s inode and modification time: both stay put unless it is rewritten."""
    found = os.stat(path)
    return found.st_ino, found.st_mtime_ns
