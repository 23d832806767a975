"""Ground truth: install the wheels in both layouts and run code there, with this interpreter.

The oracle is the layout every upstream tests: **every wheel in one site-packages**.  The same wheels are
installed a second time **one directory per wheel**, as rules_python lays them out (data, scripts and
headers included: see :mod:`patched_wheels.loading.layout`), every member checked against RECORD as it is
read (unless the whole wheel was checked against a pinned sha256) and streamed to disk (the second layout
is hard-linked from the first, so each member is inflated once).  The code runs in a fresh interpreter --
this one: in one site-packages, the python of a virtual environment around it (no other site-packages;
``site.getsitepackages()`` names it, as code such as cuda-pathfinder expects); one directory per wheel,
with ``-S`` (no site-packages, no ``.pth`` files) and a ``PYTHONPATH`` of the layout's directories only --
without ``LD_LIBRARY_PATH`` and ``LD_PRELOAD``, so the outcome depends on the wheels alone (a CUDA toolkit
on this machine's LD_LIBRARY_PATH would hide a failure that the next machine sees) -- and writing no bytecode
(``PYTHONDONTWRITEBYTECODE=1``, no ``PYTHONPYCACHEPREFIX``): under Bazel the helper's own prefix is the persistent
bytecode directory (:mod:`patched_wheels.base.bytecode`), where every run's modules, at a new temporary path each
time, would pile up for good.  At exit the child copies ``/proc/self/maps``, so a run names the libraries of the
set that were really mapped.

:class:`Comparison` is ``doctor --run``'s verdict: what the per-wheel run does differently.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import venv
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator, Sequence

from patched_wheels.base.supervise import supervise
from patched_wheels.elf.graph import LibraryGraph
from patched_wheels.elf.read import ElfLibrary
from patched_wheels.errors import UsageError
from patched_wheels.loading.layout import FLAT, LAYOUT_TEXT, PER_WHEEL, Layout, install, owners
from patched_wheels.wheelfile import WheelReader
from patched_wheels.wheelfile.schemes import install_path

TIMEOUT_VARIABLE = "RULES_PATCHED_WHEELS_RUN_TIMEOUT"
# Environment variables that would let the child's loader find libraries outside the wheel directories, and the
# helper's bytecode prefix (under Bazel the persistent bytecode directory): the child compiles in memory and writes
# no bytecode (PYTHONDONTWRITEBYTECODE=1), neither there nor beside the wheels' files or the interpreter's own.
_DROPPED_VARIABLES = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPYCACHEPREFIX")
# Runs in the child (`python -c CHILD FD CODE`, or layout_test's probe program, which runs its first
# argument as code): write the mapped files to the pipe the tool holds (argv[1]: its descriptor) at exit, also
# after an uncaught exception and through os._exit; then run the code.  A crash (a signal) runs no hook: then
# what it mapped is unknown, never taken from an earlier run.
CHILD = """\
import atexit, os, sys

def _record_maps(fd=int(sys.argv[1]), _done=[], _pid=os.getpid()):
    if _done or os.getpid() != _pid:  # once, and only this process's maps (a fork inherits the hooks)
        return
    _done.append(True)
    try:
        with open("/proc/self/maps", "rb") as maps:
            data = memoryview(maps.read() + b"\\0")
        while data:
            data = data[os.write(fd, data):]
        os.close(fd)
    except OSError:
        pass

def _exit(status, _exit=os._exit):
    _record_maps()
    _exit(status)

atexit.register(_record_maps)
os._exit = _exit
_code = sys.argv[2]
del sys.argv[1:]
exec(compile(_code, "<string>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class RunResult:
    layout: str
    code: str
    returncode: int
    stdout: str
    """The last lines of its standard output (at most 64 KiB (:class:`~patched_wheels.base.supervise.Tail`))."""
    error_line: str | None
    """The first exception line of stderr (a logged one too); for a failure without one, the last line."""
    entries: int
    """How many directories held the wheels' importable files (one site-packages, or one per wheel)."""
    mapped: tuple[ElfLibrary, ...] | None
    """The set's libraries mapped at exit; None when the process ended without its exit hook (killed, os._exit)."""
    places: tuple[str, ...] = ()
    """The layout's directories (root first), replaced by placeholders when errors are compared."""

    @property
    def comparable_error(self) -> str | None:
        """:attr:`error_line` with the layout's own directories left out, to compare across layouts."""
        line = self.error_line
        for place in sorted(self.places, key=len, reverse=True):
            line = line.replace(place, "<installed>") if line else line
        return line


@dataclass(frozen=True)
class Comparison:
    """The same code run in both layouts: the per-wheel run is right when it does what the flat one does."""

    flat: RunResult
    per_wheel: RunResult

    @property
    def missing(self) -> tuple[ElfLibrary, ...]:
        """The set's libraries the flat run maps and the per-wheel run does not; none is known when either run
        ended without recording what it mapped (a crash)."""
        if self.flat.mapped is None or self.per_wheel.mapped is None:
            return ()
        seen = {(library.wheel, library.path) for library in self.per_wheel.mapped or ()}
        return tuple(library for library in self.flat.mapped if (library.wheel, library.path) not in seen)

    @property
    def differences(self) -> list[str]:
        """What the per-wheel run does differently, one line each; empty when it matches."""
        found = []
        if (self.flat.returncode == 0) != (self.per_wheel.returncode == 0):
            found.append(f"exit status {self.per_wheel.returncode}, {self.flat.returncode} in one site-packages")
        if self.flat.comparable_error != self.per_wheel.comparable_error:
            found.append(
                f"first error {_quoted(self.per_wheel.error_line)}, {_quoted(self.flat.error_line)} in one site-packages"
            )
        if self.missing:
            found.append(f"{len(self.missing)} of the set's libraries mapped in one site-packages are not mapped")
        return found

    @property
    def matches(self) -> bool:
        return not self.differences


def _quoted(error_line: str | None) -> str:
    """An error line as a verdict quotes it; a run without one is said to have none (not ``None``)."""
    return "none" if error_line is None else repr(error_line)


class Installation:
    """Wheels installed under a temporary root in the layouts asked for; see :func:`installed`."""

    def __init__(
        self, root: Path, wheels: Sequence[Path], layouts: dict[str, Layout], owners: dict[PurePosixPath, list[str]]
    ) -> None:
        self.root, self.wheels, self.layouts = root, wheels, layouts
        self._owners = owners  # by target in the first layout (:func:`~patched_wheels.loading.layout.owners`)

    def file(self, kind: str, library: ElfLibrary) -> Path:
        """Where ``library`` was installed in the layout ``kind``."""
        return Path(self.layouts[kind].target(library.wheel, library.path))

    def own_copy(self, wheel: str, path: str) -> Path | None:
        """The file ``wheel`` installed for its member at install path ``path`` in the first layout, or None
        where another wheel of the set installs a file there too (in one site-packages the last one wins,
        so the file there need not be this wheel's): for reading the library graph without inflating the
        members again (:func:`~patched_wheels.elf.graph.read_graph`'s ``installed``)."""
        target = self.layouts[next(iter(self.layouts))].target(wheel, path)
        return Path(target) if self._owners.get(target) == [wheel] else None

    def compare(self, code: str, graph: LibraryGraph) -> Comparison:
        """Run ``code`` in both layouts (both must be installed)."""
        return Comparison(self.run(FLAT, code, graph), self.run(PER_WHEEL, code, graph))

    def run(self, kind: str, code: str, graph: LibraryGraph) -> RunResult:
        """Run ``code`` with this interpreter in the layout ``kind``; report what it did and mapped."""
        layout = self.layouts[kind]
        entries = layout.sys_path(wheel.name for wheel in self.wheels)
        by_file = {os.path.realpath(self.file(kind, library)): library for library in graph.load_order}
        environment = dict(os.environ)
        if kind == FLAT:  # a virtual environment: its site-packages is site.getsitepackages(), as after pip
            command = [str(Path(layout.root) / "bin" / "python"), "-c", CHILD]  # see create_flat_environment
        else:  # rules_python: the interpreter with the wheels' directories on sys.path, no site-packages
            command = [sys.executable, "-S", "-c", CHILD]
            environment["PYTHONPATH"] = os.pathsep.join(entries)
        contents = LayoutContents(by_file, entries, places=(*entries, str(layout.root)))
        return run_child(kind, Launch(command, environment), code, contents, root=self.root)


@dataclass(frozen=True)
class Launch:
    """How one run of :data:`CHILD` starts: its command (``python -c``, or a program that runs its first argument
    as code: ``layout_test``'s) and its environment (:func:`run_child` drops the variables that would let the
    loader look outside the wheels, and the bytecode prefix, and has the child write no bytecode)."""

    command: Sequence[str]
    environment: dict[str, str]


@dataclass(frozen=True)
class LayoutContents:
    """What a run's layout holds, for reading what the run did: the set's libraries by real path (``by_file``),
    the layout's ``sys.path`` directories (``entries``), and the directories an error line names that differ
    between layouts (``places``)."""

    by_file: dict[str, ElfLibrary]
    entries: Sequence[str]
    places: Sequence[str]


def run_child(
    kind: str, launch: Launch, code: str, contents: LayoutContents, *, root: Path, timeout: int | None = None
) -> RunResult:
    """Run ``[*launch.command, FD, code]`` under :func:`supervise`, in a new directory under ``root``, in the
    layout ``kind`` that holds ``contents``; ``timeout``: seconds, else :func:`run_timeout`."""
    environment = {key: value for key, value in launch.environment.items() if key not in _DROPPED_VARIABLES}
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    if "\0" in code:
        raise UsageError(f"code {code!r}: contains a NUL character")
    timeout = run_timeout() if timeout is None else timeout
    # A fresh current directory (sys.path[0] for -c) for each run: nothing an earlier run left is seen.
    with tempfile.TemporaryDirectory(prefix=f"cwd-{kind}-", dir=root) as workdir:
        captured = supervise(launch.command, code, environment, Path(workdir), timeout, wanted=set(contents.by_file))
    if captured is None:
        raise UsageError(f"code {code!r}: still running after {timeout} s with {LAYOUT_TEXT.get(kind, kind)}; stopped")
    by_file = contents.by_file
    mapped = None if captured.mapped is None else tuple(by_file[path] for path in by_file if path in captured.mapped)
    error = captured.stderr.first_error or (captured.stderr.last if captured.returncode != 0 else None)
    return RunResult(
        kind,
        code,
        captured.returncode,
        captured.stdout.text(),
        error,
        len(contents.entries),
        mapped,
        tuple(contents.places),
    )


def run_timeout() -> int:
    """Seconds a run (``doctor --run``, a preload probe) may take: $RULES_PATCHED_WHEELS_RUN_TIMEOUT, else 900."""
    value = os.environ.get(TIMEOUT_VARIABLE, "900")
    if not (value.isascii() and value.isdigit() and 0 < int(value)):
        raise UsageError(f"{TIMEOUT_VARIABLE}={value!r}: not a positive whole number of seconds")
    return int(value)


def create_flat_environment(root: Path) -> Path:
    """A virtual environment at ``root`` (the flat layout's prefix) of this interpreter; its python.

    pip's target is a virtual environment: code that looks for libraries through
    site.getsitepackages() (cuda-pathfinder, as CuPy does) finds them there, never in this
    interpreter's own site-packages, which the environment does not include.
    """
    venv.EnvBuilder(symlinks=True, with_pip=False).create(str(root))
    return root / "bin" / "python"


@contextmanager
def installed(
    wheels: Sequence[Path], kinds: Sequence[str] = (PER_WHEEL, FLAT), *, check_record: bool = True
) -> Iterator[Installation]:
    """``wheels`` installed under a temporary root in each layout of ``kinds``, removed afterwards.

    The first layout is installed from the wheels, a wheel per thread (inflating and writing leave the
    interpreter lock); in one site-packages each file is written once, by the last wheel that installs
    it, as pip's installs in order would leave it. The other layouts are linked from the first.
    ``check_record``: see :func:`~patched_wheels.loading.layout.install`.
    """
    with tempfile.TemporaryDirectory(prefix="patched-wheels-run-") as temp:
        root = Path(temp).resolve()
        layouts = {kind: Layout(kind, PurePosixPath(root / kind)) for kind in kinds}
        first = layouts[kinds[0]]
        found = owners(wheels, first)
        left: dict[str, set[PurePosixPath]] = {wheel.name: set() for wheel in wheels}
        for target, names in found.items():
            for name in names[:-1]:
                if name != names[-1]:  # one wheel's two members there (``x`` and ``<dist>.data/purelib/x``): in order
                    left[name].add(target)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            jobs = [
                pool.submit(install, wheel, first, check_record=check_record, left=left[wheel.name]) for wheel in wheels
            ]
            for job in jobs:
                job.result()
        for layout in list(layouts.values())[1:]:
            for wheel in wheels:
                _link_install(wheel, first, layout)
        if FLAT in layouts:
            _refuse_venv_paths(wheels, layouts[FLAT])
            create_flat_environment(Path(layouts[FLAT].root))
        yield Installation(root, wheels, layouts, found)


# What the virtual environment of one site-packages keeps at its root for its interpreter.
_VENV_OWN = ("pyvenv.cfg", "bin/python", "bin/python3", f"bin/python{sys.version_info[0]}.{sys.version_info[1]}")


def _refuse_venv_paths(wheels: Sequence[Path], layout: Layout) -> None:
    """Refuse a wheel whose files (data or scripts) install where the virtual environment puts its
    interpreter: creating it would fail on, or run, the wheel's file."""
    root = Path(layout.root)
    for wheel in wheels:
        with WheelReader(wheel) as reader:
            members = reader.members()
        for member in members:
            path = install_path(member)
            if path is None:
                continue
            relative = Path(layout.target(wheel.name, path)).relative_to(root).as_posix()
            if any(relative == own or relative.startswith(own + "/") for own in _VENV_OWN):
                raise UsageError(
                    f"{wheel.name}: {member}: installs {relative}, where the virtual environment of "
                    f"{LAYOUT_TEXT[FLAT]} keeps its interpreter, so the run cannot install it"
                )


def compare(wheels: Sequence[Path], code: str, graph: LibraryGraph) -> Comparison:
    """Run ``code`` with every wheel in one site-packages and with one directory per wheel."""
    with installed(wheels) as installation:
        return installation.compare(code, graph)


def _link_install(wheel: Path, source: Layout, target: Layout) -> None:
    """Install ``wheel`` into ``target`` from its files in ``source``: hard links where possible (no second inflate)."""
    with WheelReader(wheel) as reader:
        members = reader.members()
    for member in members:
        path = install_path(member)
        if path is None or member.endswith("/"):
            continue
        origin, destination = Path(source.target(wheel.name, path)), Path(target.target(wheel.name, path))
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.unlink(missing_ok=True)
        try:
            os.link(origin, destination)
        except OSError:
            shutil.copy2(origin, destination)
