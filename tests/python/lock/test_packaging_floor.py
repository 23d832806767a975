"""The oldest packaging pyproject.toml takes: every module of the helper imports with it, a bad wheel file name is
the helper's own error, and pip's closure reads markers through packaging's private parsed form
(``requiresdist._parsed``) the same as with the pinned release.

packaging is a dependency users resolve (``packaging>=X``), so a helper installed beside an old one must work
with it; the floor is read from pyproject.toml, installed with the suite's own pip into a throwaway directory,
and the same script runs under both releases, its results compared."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]

# Requirement shapes whose extras the closure reads from the marker's parsed form: an extra on either side, in
# "and" and "or", in parentheses, a URL, and markers no release evaluates (one warning each, the entry left out).
_REQUIREMENTS = [
    'tk-rt==1.0; extra == "rt"',
    'tk-linux; extra == "rt" and sys_platform == "linux"',
    'tk-win; sys_platform == "win32" and extra == "rt"',
    'tk-either; python_version >= "3.9" and (extra == "rt" or extra == "all")',
    "tk-reversed; 'all' == extra",
    'tk-url @ https://example.invalid/tk_url-1.0-py3-none-any.whl ; extra == "all" or os_name == "nt"',
    'tk-base; sys_platform == "linux"',
    "tk-always",
    'tk-unevaluable; extra === "rt"',
    'tk-unevaluable-too; extra ~= "1.0"',
]

_SCRIPT = """
import json, pkgutil, sys, importlib
import packaging, patched_wheels
for module in pkgutil.walk_packages(patched_wheels.__path__, "patched_wheels."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
from patched_wheels.base.schema import to_json
from patched_wheels.index.simple import _requires_python  # the index's one import of packaging.metadata, cold
assert _requires_python(b"Metadata-Version: 2.1\\nName: a\\nVersion: 1\\nRequires-Python: >=3.9\\n") == ">=3.9"
from patched_wheels.errors import InvalidWheelError
from patched_wheels.wheelfile.filename import WheelFilename
try:  # packaging before 23.2 raised InvalidVersion here, which the helper does not catch: a traceback
    WheelFilename.parse("foo-notaversion-py3-none-any.whl")
except InvalidWheelError:
    pass
from patched_wheels.lock.requiresdist import read_dist
environment = {"sys_platform": "linux", "python_version": "3.11", "platform_machine": "x86_64", "os_name": "posix"}
dist = read_dist("toolkit", "1.0", json.loads(sys.argv[1]), ["rt", "all"], origin="toolkit", environment=environment)
print(json.dumps({"version": packaging.__version__, "dist": to_json(dist)}))
"""


def _floor() -> str:
    """The release ``packaging>=X`` in pyproject.toml's dependencies names."""
    (floor,) = re.findall(r'"packaging>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return floor


def _run(path: list[str]) -> tuple[dict[str, object], list[str]]:
    """The script's result and warning lines with ``path`` before the suite's own packages."""
    env = {"PYTHONPATH": ":".join([*path, str(ROOT / "python")]), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(_REQUIREMENTS)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr.splitlines()


def test_the_oldest_packaging_pyproject_takes_imports_every_module_and_reads_markers_as_the_pinned_one(
    tmp_path: Path,
) -> None:
    floor = _floor()
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(tmp_path),
            f"packaging=={floor}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0:
        pytest.skip(f"pip cannot install packaging=={floor} here (no index reachable): {installed.stderr[-300:]}")
    (old, old_warnings), (pinned, pinned_warnings) = _run([str(tmp_path)]), _run([])
    assert Version(old["version"]) == Version(floor) != Version(pinned["version"])  # type: ignore[arg-type]
    assert old["dist"] == pinned["dist"]
    assert [e["project"] for e in old["dist"]["requires"]] == ["tk-base", "tk-always"]  # type: ignore[index]
    assert len(old_warnings) == len(pinned_warnings) == 2, (old_warnings, pinned_warnings)
    assert all(": its marker cannot be evaluated (" in line for line in old_warnings + pinned_warnings)
