"""Building the helper's wheel (what `pip install .` and `tools/dev-env` do) writes nothing into the
source tree: no `build/`, no `*.egg-info/` left in a checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _files(tree: Path) -> set[str]:
    return {str(path.relative_to(tree)) for path in tree.rglob("*")}


def test_building_the_wheel_leaves_the_tree_as_it_was(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "python", source / "python", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    before = _files(source)
    # No build isolation: the backend is a pinned test requirement, so nothing is fetched.
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]
    built = subprocess.run(
        [*command, "-w", str(tmp_path / "out"), str(source)], capture_output=True, text=True, timeout=300
    )
    assert built.returncode == 0, built.stderr
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["patched_wheels-0.1.0-py3-none-any.whl"]
    with zipfile.ZipFile(tmp_path / "out" / "patched_wheels-0.1.0-py3-none-any.whl") as built_wheel:
        assert "patched_wheels/hub/verified_stacks.json" in built_wheel.namelist(), "the hub reads its table there"
    assert sorted(_files(source) - before) == []
