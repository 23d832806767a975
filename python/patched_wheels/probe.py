"""Ground truth for ``doctor --run``: install each wheel into its own directory and run code there.

rules_python gives every wheel its own directory on ``sys.path``; so does this, under
a temporary root, with each wheel's files unpacked as an installer would (members
under ``<dist>.data/purelib`` and ``platlib`` into the directory itself; scripts,
headers and data left out, since imports never see them), every member checked
against RECORD as it is read.  The code runs in a fresh interpreter -- this one,
with ``-S``: no site-packages, no ``.pth`` files -- whose ``PYTHONPATH`` holds those
directories only, without ``LD_LIBRARY_PATH`` and ``LD_PRELOAD``, so the outcome
depends on the wheels alone (a CUDA toolkit on this machine's LD_LIBRARY_PATH would
hide a failure that the next machine sees).  At exit the child copies ``/proc/self/maps``, so the
report names the libraries of the set that were really mapped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from patched_wheels.elfgraph import LibraryGraph, install_path
from patched_wheels.elfread import ElfLibrary
from patched_wheels.wheelfile import CHUNK_SIZE, WheelReader

# Environment variables that would let the child's loader find libraries outside the wheel directories.
_DROPPED_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD")
# A Python exception line ("OSError: libx.so: cannot open ..."), also inside a logged message.
_ERROR_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b: ")
# Runs in the child: record the mapped files at exit (also after an uncaught exception), then run the code.
_CHILD = """\
import atexit, sys

def _record_maps(target=sys.argv[1]):
    try:
        with open("/proc/self/maps", "rb") as maps, open(target, "wb") as out:
            out.write(maps.read())
    except OSError:
        pass

atexit.register(_record_maps)
_code = sys.argv[2]
del sys.argv[1:]
exec(compile(_code, "<string>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class RunResult:
    code: str
    returncode: int
    stdout: str
    stderr: str
    entries: int
    """How many directories (one per wheel) were on PYTHONPATH."""
    mapped: tuple[ElfLibrary, ...] | None
    """The set's libraries mapped at exit; None when the process ended without its exit hook (killed, os._exit)."""

    @property
    def error_line(self) -> str | None:
        """The first exception line of stderr (a logged one too); for a failure without one, the last line."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        found = next((line for line in lines if _ERROR_LINE.search(line)), None)
        if found is None and self.returncode != 0 and lines:
            return lines[-1]
        return found


def install_wheel(wheel: Path, directory: Path) -> None:
    """Unpack what ``wheel`` installs into site-packages into ``directory``, keeping permission bits."""
    with WheelReader(wheel) as reader:
        for member in reader.members():
            path = install_path(member)
            if path is None or member.endswith("/"):
                continue
            target = directory.joinpath(*path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            with reader.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, CHUNK_SIZE)
            mode = reader.mode(member)
            if mode:
                target.chmod(mode & 0o777)


def _mapped(maps: bytes, installed: dict[str, ElfLibrary]) -> tuple[ElfLibrary, ...]:
    """The libraries of ``installed`` (by real path) that a /proc/<pid>/maps listing names."""
    paths = set()
    for line in maps.decode("utf-8", "replace").splitlines():
        fields = line.split(maxsplit=5)  # address, permissions, offset, device, inode, path
        if len(fields) == 6:
            paths.add(fields[5])
    return tuple(library for path, library in installed.items() if path in paths)


def run_per_wheel(wheels: Sequence[Path], code: str, graph: LibraryGraph) -> RunResult:
    """Install ``wheels`` one directory each under a temporary root, run ``code`` there, and report."""
    with tempfile.TemporaryDirectory(prefix="patched-wheels-run-") as temp:
        root = Path(temp).resolve()
        entries = {wheel.name: root / "site" / wheel.name[: -len(".whl")] for wheel in wheels}
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(install_wheel, wheels, [entries[wheel.name] for wheel in wheels]))
        installed = {
            os.path.realpath(entries[library.wheel].joinpath(*library.path.split("/"))): library
            for library in graph.load_order
            if library.wheel in entries
        }
        environment = {key: value for key, value in os.environ.items() if key not in _DROPPED_VARIABLES}
        environment["PYTHONPATH"] = os.pathsep.join(str(entries[wheel.name]) for wheel in wheels)
        maps, workdir = root / "maps", root / "cwd"
        workdir.mkdir()  # the child's current directory (sys.path[0] for -c): empty
        completed = subprocess.run(
            [sys.executable, "-S", "-c", _CHILD, str(maps), code],
            env=environment,
            cwd=workdir,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        mapped = _mapped(maps.read_bytes(), installed) if maps.is_file() else None
    return RunResult(code, completed.returncode, completed.stdout, completed.stderr, len(entries), mapped)
