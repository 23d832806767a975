"""Real CUDA stacks from PyPI, one site-packages against one directory per wheel: an opt-in compatibility check.

Not part of the test suite (gigabytes per stack).  For each named stack it

1. resolves and downloads the wheel set with ``pip download --only-binary=:all:`` for CPython 3.11
   on manylinux x86-64 into ``${XDG_CACHE_HOME:-~/.cache}/rules_patched_wheels/compat/<stack>/``;
2. installs it twice with pypa ``installer``: one directory per wheel as rules_python's
   ``whl_library`` lays them out (``site-packages/``, ``data/``, ``include/``, ``bin/``), and one
   virtual environment holding every wheel (the control every upstream tests; its files are hard
   links to the first layout's, so it costs no inflating and no disk);
3. runs the stack's probe in both -- code that makes the stack try to load its CUDA libraries, which
   fails later for want of a GPU on a machine without one -- and records which ELF files of the set
   the process has mapped at exit (``/proc/self/maps``, matched by inode, so a hard link in the
   flat layout counts as the same file);
4. runs ``patched-wheels doctor`` (static, then ``--run`` with the probe) on the set, patches the
   package with the equivalent of ``preload = "auto"`` (``patch --preload-for PKG --preload-from
   <the set> --probe CODE``), measures the per-wheel layout again with the patched wheel, and runs
   doctor again on the patched set.

Real locks (``NAME-lock`` stacks, issue 30): the stack is resolved with common companions (torchvision,
``pillow>=13`` with its libfreetype <-> libharfbuzz cycle, opencv-python-headless, scipy, pyarrow; one
that does not resolve with the stack is left out and named); ``patched-wheels graph`` must exit 0 on the
whole set; the layouts are compared on the stack's probe followed by code loading the companions'
libraries (``patch`` gets the stack's probe alone, as a user's one stanza does). ``--bazel`` then runs
``compat_bazel.py``: the stack's own workspace under rules_python 2.3.2, plain against patched. ``--lock``
resolves as a new user does instead (``uv pip compile --generate-hashes`` of the stack's requirements and
companions, the pins downloaded by ``pip download --require-hashes``), and its Bazel stage is that lock's
workspace: ``patched.index(name, lock)`` alone against rules_python's own wiring (issue 48).

The harness is the oracle the product is judged by, so it installs and observes on its own, with
nothing from ``patched_wheels``.  Layout verdict: **ok** when the per-wheel run maps every library
of the set the flat run maps and exits the same way (both zero or both non-zero).  Doctor agrees
when it exits 0 exactly where the layout verdict is ok.  Exit status 1 when, for some stack, the
patched per-wheel layout maps fewer of the set's libraries than the flat one, or ``doctor --run``
disagrees with the harness (before or after patching), ``graph`` or ``patch`` fails, or (``--bazel``)
the patched hub's ``layout_test`` does not pass; 2 when a download or an install fails.

    nice -n 10 .venv/bin/python -m benchmarks.compat_stacks [--stacks torch-2.1.0 jax-0.6.2 ...] [--keep] [--bazel]

One stack at a time: its wheels (several GB) are deleted after it is measured unless ``--keep``;
the installed layouts always are.  ``--no-probe`` patches without ``--probe`` (the static graph only).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile
from packaging.utils import canonicalize_name, parse_wheel_filename

from benchmarks import compat_bazel
from benchmarks.harness import children_cpu
from benchmarks.stacks import STACKS, Stack

REPO = Path(__file__).resolve().parents[1]
# pip widens only the legacy manylinux names of an explicit --platform, so every glibc level is listed.
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)) + (
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)

# Runs before the probe in every child: record the mapped files at exit, also after an uncaught exception.
_RECORD_MAPS = """\
import atexit, os
def _rpw_maps(target=os.environ.pop("RPW_COMPAT_MAPS")):
    with open("/proc/self/maps", "rb") as maps, open(target, "wb") as out:
        out.write(maps.read())
atexit.register(_rpw_maps)
del atexit, os
"""
# A Python exception line, also inside a logged message; else a loader or logged C++ error line.
_ERROR_LINES = (
    re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)\b: "),
    re.compile(r"cannot open|Unable to|Could not|[Ff]ail(?:ed|ure) to"),
)


# doctor's verdict lines: the static ones ("as is: 3 libraries fail ..."), the run's, the comparison, an error.
_DOCTOR_VERDICT = re.compile(
    r"as is: \d|as is: every|with the generated preload:|run: (?!.*\(python -S)|prediction|patched-wheels: error"
)


@dataclass(frozen=True)
class Run:
    returncode: int
    mapped: frozenset[str]
    """The set's libraries mapped at exit, as ``project:path`` (path inside the wheel's directory)."""
    error: str


@dataclass(frozen=True)
class Doctor:
    returncode: int
    verdict: str
    """doctor's last output lines, joined: its verdicts."""

    @property
    def refused(self) -> bool:
        """doctor gave no verdict: it refused the input (the package name, a flag) with an error line."""
        return self.verdict.startswith("patched-wheels: error")


def cache_dir(stack: str) -> Path:
    """Where a stack's wheels live; read at call time so ``XDG_CACHE_HOME`` set by a caller counts."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rules_patched_wheels" / "compat" / stack


def _pip(verb: str, *arguments: str, python: str = "3.11") -> list[str]:
    """pip ``verb`` (download, install) for CPython ``python`` on manylinux x86-64, wheels only."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", verb, "--quiet", "--no-cache-dir", "--only-binary=:all:"]
    abi = "cp" + python.replace(".", "")
    return [*command, "--python-version", python, "--implementation", "cp", "--abi", abi, *platforms, *arguments]


def download(stack: Stack, directory: Path) -> tuple[list[Path], tuple[str, ...]]:
    """The stack's resolved wheel set, fetched by pip into ``directory`` (files already there are kept),
    and the companions it holds. When the whole set does not resolve, a companion that does not resolve
    with the stack and the companions before it (pip's resolver, without downloading: ``install
    --dry-run``) is left out and named."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = [*stack.requirements, *stack.companions]
    if subprocess.run(_pip("download", "-d", str(directory), *wanted), check=False).returncode == 0:
        return sorted(directory.glob("*.whl")), stack.companions
    if not stack.companions:
        raise subprocess.CalledProcessError(1, "pip download")
    resolvable = [*stack.requirements]
    for companion in stack.companions:
        dry = _pip(
            "install", "--dry-run", "--ignore-installed", "--target", str(directory / ".dry"), *resolvable, companion
        )
        if subprocess.run(dry, capture_output=True, check=False).returncode == 0:
            resolvable.append(companion)
        else:
            print(
                f"compat_stacks: {stack.name}: {companion} does not resolve with the stack; left out", file=sys.stderr
            )
    for stale in directory.glob("*.whl"):  # the set is this resolution's, nothing else
        stale.unlink()
    subprocess.run(_pip("download", "-d", str(directory), *resolvable), check=True)
    return sorted(directory.glob("*.whl")), tuple(resolvable[len(stack.requirements) :])


def download_lock(lock: Path, directory: Path, python: str = "3.11") -> list[Path]:
    """The wheels ``lock`` pins, fetched by pip into ``directory`` as ``pip install -r`` would (``--require-hashes``)."""
    arguments = ("--no-deps", "--require-hashes", "-r", str(lock), "-d", str(directory))
    subprocess.run(_pip("download", *arguments, python=python), check=True)
    return sorted(directory.glob("*.whl"))


def install_per_wheel(wheel: Path, directory: Path) -> None:
    """Install ``wheel`` as rules_python's ``whl_library`` does: its schemes as directories of one repository."""
    schemes = {"purelib": "site-packages", "platlib": "site-packages", "headers": "include", "scripts": "bin"}
    schemes = {key: str(directory / value) for key, value in schemes.items()} | {"data": str(directory / "data")}
    destination = SchemeDictionaryDestination(schemes, interpreter=sys.executable, script_kind="posix")
    with WheelFile.open(wheel) as source:
        install(source, destination, additional_metadata={})


def link_flat(per_wheel: list[Path], venv: Path) -> None:
    """Fill ``venv`` as pip would from the per-wheel installs, by hard links (the files are the same bytes).

    site-packages merges into the environment's site-packages (a file two wheels ship: the later wins,
    as with pip), data into its prefix, headers into ``include/``, scripts into ``bin/``.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    targets = {"site-packages": site, "data": venv, "include": venv / "include", "bin": venv / "bin"}
    for root in per_wheel:
        for scheme, target in targets.items():
            for source in sorted((root / scheme).rglob("*")) if (root / scheme).is_dir() else []:
                destination = target / source.relative_to(root / scheme)
                if source.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.unlink(missing_ok=True)
                os.link(source, destination)


def elf_index(project: str, root: Path) -> dict[int, str]:
    """Every ELF file under ``root`` (one wheel's install) by inode, named ``project:path-under-root``."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as file:
                if file.read(4) == b"\x7fELF":
                    found[path.stat().st_ino] = f"{project}:{path.relative_to(root)}"
    return found


def run_probe(python: list[str], code: str, environment: dict[str, str], index: dict[int, str], root: Path) -> Run:
    """Run ``code`` and name the indexed libraries under ``root`` that the process mapped at exit."""
    with tempfile.TemporaryDirectory(prefix="rpw-compat-") as temp:
        maps = Path(temp) / "maps"
        completed = subprocess.run(
            [*python, "-c", _RECORD_MAPS + code],
            env=environment | {"RPW_COMPAT_MAPS": str(maps)},
            cwd=temp,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=900,
            check=False,
        )
        mapped = set()
        for line in maps.read_text("utf-8", "replace").splitlines() if maps.is_file() else []:
            fields = line.split(maxsplit=5)  # address, permissions, offset, device, inode, path
            if len(fields) == 6 and fields[5].startswith(str(root)) and int(fields[4]) in index:
                mapped.add(index[int(fields[4])])
    lines = [line.strip() for line in completed.stderr.splitlines() if line.strip()]
    found = (line for pattern in _ERROR_LINES for line in lines if pattern.search(line))
    error = next(found, lines[-1] if lines else "")
    return Run(completed.returncode, frozenset(mapped), error[:300])


def patched_wheels(*arguments: str) -> subprocess.CompletedProcess[str]:
    """This checkout's ``patched-wheels`` with the same interpreter."""
    environment = os.environ | {"PYTHONPATH": str(REPO / "python")}
    command = [sys.executable, "-m", "patched_wheels", *arguments]
    return subprocess.run(command, env=environment, capture_output=True, text=True, errors="replace", check=False)


def doctor(wheels: list[Path], stack: Stack, *, run: bool) -> Doctor:
    """doctor's verdict on ``wheels``: static, or with ``--run`` of the stack's probe."""
    arguments = ["doctor", *map(str, wheels), "--package", stack.package]
    completed = patched_wheels(*arguments, *([f"--run={stack.probe}"] if run else []))
    lines = [line.strip() for line in (completed.stdout + completed.stderr).splitlines() if line.strip()]
    verdicts = [line for line in lines if _DOCTOR_VERDICT.match(line)]
    return Doctor(completed.returncode, " / ".join(verdicts or lines[-2:])[:1000])


def layout_ok(flat: Run, per_wheel: Run) -> bool:
    """The per-wheel layout behaves as one site-packages: nothing fewer mapped, the same kind of exit."""
    return flat.mapped <= per_wheel.mapped and (flat.returncode == 0) == (per_wheel.returncode == 0)


@dataclass(frozen=True)
class Graph:
    """``patched-wheels graph`` of the whole set: it must exit 0 on any real lock, cycles included."""

    returncode: int
    cycles: int
    error: str


def graph_of(wheels: list[Path]) -> Graph:
    """``patched-wheels graph`` of the whole set, and how many library cycles it printed."""
    graphed = patched_wheels("graph", *map(str, wheels))
    return Graph(
        graphed.returncode, len(set(re.findall(r"\(cycle (\d+)\)", graphed.stdout))), _last_line(graphed.stderr)
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


@dataclass(frozen=True)
class Result:
    stack: Stack
    flat: Run
    before: Run
    after: Run | None
    patch_error: str
    doctors: dict[str, Doctor]
    """``static before``, ``run before``, ``static after``, ``run after`` (the last two only once patched)."""
    graph: Graph

    def agrees(self, key: str) -> bool:
        per_wheel = self.before if key.endswith("before") else self.after
        found = self.doctors[key]
        return (
            per_wheel is not None and not found.refused and (found.returncode == 0) == layout_ok(self.flat, per_wheel)
        )

    @property
    def failed(self) -> bool:
        after = self.after or self.before
        runs = [key for key in ("run before", "run after") if key in self.doctors]
        failed = not self.flat.mapped <= after.mapped or not all(self.agrees(key) for key in runs)
        return failed or self.graph.returncode != 0 or self.after is None


def measure(stack: Stack, wheels: list[Path], work: Path, *, probe: bool) -> Result:
    """Both layouts, doctor before and after, the patch: one stack's row."""
    by_project = {canonicalize_name(parse_wheel_filename(wheel.name)[0]): wheel for wheel in wheels}
    roots = {project: work / "per-wheel" / wheel.name[: -len(".whl")] for project, wheel in by_project.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(install_per_wheel, by_project.values(), roots.values()))
    link_flat(list(roots.values()), work / "flat")
    index = {inode: key for project, root in roots.items() for inode, key in elf_index(project, root).items()}
    environment = {key: value for key, value in os.environ.items() if key not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    environment.pop("PYTHONPATH", None)
    flat = run_probe([str(work / "flat" / "bin" / "python"), "-I"], stack.measured_probe, environment, index, work)

    def per_wheel(entries: dict[str, Path]) -> Run:
        path = os.pathsep.join(str(root / "site-packages") for root in entries.values())
        return run_probe([sys.executable, "-S"], stack.measured_probe, environment | {"PYTHONPATH": path}, index, work)

    before = per_wheel(roots)
    graph = graph_of(wheels)
    doctors = {"static before": doctor(wheels, stack, run=False), "run before": doctor(wheels, stack, run=True)}
    package = canonicalize_name(stack.project)
    arguments = ["patch", "--wheel", str(by_project[package]), "--dest-dir", str(work / "patched")]
    arguments += ["--suffix", "compat.1", "--preload-for", stack.package, "--preload-from", *map(str, wheels)]
    patched = patched_wheels(*arguments, *(["--probe", stack.probe] if probe else []))
    if patched.returncode != 0:
        return Result(stack, flat, before, None, patched.stderr.strip()[-300:], doctors, graph)
    patched_wheel = Path(patched.stdout.splitlines()[0])
    root = work / "per-wheel-patched" / patched_wheel.name[: -len(".whl")]
    install_per_wheel(patched_wheel, root)
    index.update(elf_index(package, root))
    after = per_wheel(roots | {package: root})
    patched_set = [patched_wheel if wheel == by_project[package] else wheel for wheel in wheels]
    doctors["static after"] = doctor(patched_set, stack, run=False)
    doctors["run after"] = doctor(patched_set, stack, run=True)
    return Result(stack, flat, before, after, "", doctors, graph)


def _count(run: Run | None, flat: Run) -> str:
    if run is None:
        return "(not patched)"
    missing = len(flat.mapped - run.mapped)
    return f"{len(run.mapped)}, exit {run.returncode}" + (f", {missing} missing" if missing else "")


def _doctor_cell(result: Result, key: str) -> str:
    found = result.doctors.get(key)
    if found is None:
        return "-"
    if found.refused:
        return "refused"
    return f"exit {found.returncode} ({'agrees' if result.agrees(key) else 'DISAGREES'})"


def report(result: Result) -> str:
    """The stack's details: what each run mapped less than the flat one, the errors, doctor's words."""
    lines = [
        f"## {result.stack.name}: {' '.join(result.stack.requirements)}, probe {result.stack.measured_probe[-120:]!r}"
    ]
    for label, run in (("flat", result.flat), ("per-wheel before", result.before), ("per-wheel after", result.after)):
        if run is None:
            lines.append(f"  {label}: patch refused: {result.patch_error}")
            continue
        lines.append(f"  {label}: exit {run.returncode}, {len(run.mapped)} of the set's libraries mapped")
        lines.append(f"    first error: {run.error or '-'}")
        for library in sorted(result.flat.mapped - run.mapped):
            lines.append(f"    not mapped (flat maps it): {library}")
    graph = result.graph
    lines.append(f"  graph of the set: exit {graph.returncode}, {graph.cycles} library cycle(s) {graph.error}".rstrip())
    for key, found in result.doctors.items():
        lines.append(f"  doctor {key}: exit {found.returncode}: {found.verdict}")
    return "\n".join(lines)


TABLE_HEADER = (
    "| stack | flat | per-wheel before | per-wheel after | doctor static before/after | doctor --run before/after |\n"
    "| --- | --- | --- | --- | --- | --- |"
)


def table_row(result: Result) -> str:
    flat = f"{len(result.flat.mapped)}, exit {result.flat.returncode}"
    cells = [
        f"`{' '.join(result.stack.requirements)}`",
        flat,
        _count(result.before, result.flat),
        _count(result.after, result.flat),
        f"{_doctor_cell(result, 'static before')} / {_doctor_cell(result, 'static after')}",
        f"{_doctor_cell(result, 'run before')} / {_doctor_cell(result, 'run after')}",
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", nargs="+", choices=sorted(STACKS), default=list(STACKS), metavar="STACK")
    parser.add_argument("--keep", action="store_true", help="keep each stack's downloaded wheels")
    parser.add_argument(
        "--reuse", action="store_true", help="use the wheels a --keep run left, without resolving again"
    )
    parser.add_argument("--no-probe", action="store_true", help="patch without --probe (the static graph only)")
    parser.add_argument("--bazel", action="store_true", help="also the Bazel stage (benchmarks/compat_bazel.py)")
    parser.add_argument(
        "--lock",
        action="store_true",
        help="resolve as a new user does, `uv pip compile --generate-hashes` of the stack's requirements (root "
        "extras and all); with --bazel, the lock stage: patched.index(name, lock) alone, plain against the hub",
    )
    parser.add_argument(
        "--no-layouts",
        action="store_true",
        help="skip the harness's own layouts, probes, doctor --run and patch (the slow part): graph and static doctor only",
    )
    args = parser.parse_args(argv)
    # A stopped run still removes what it installed (gigabytes): SIGTERM unwinds like an exception.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results, failed = [], False
    for name in args.stacks:
        stack, directory = STACKS[name], cache_dir(name)
        started, cpu = time.monotonic(), children_cpu()
        directory.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{name}-layouts-", dir=directory.parent))
        try:
            lock = directory / "requirements_lock.txt"
            if args.reuse and any(directory.glob("*.whl")):
                wheels, companions = sorted(directory.glob("*.whl")), stack.companions
            elif args.lock:
                # The user's own requirements.in: the stack and its companions, all resolved together.
                lock = compat_bazel.compile_lock((*stack.requirements, *stack.companions), directory, stack.python)
                wheels, companions = download_lock(lock, directory, stack.python), stack.companions
            else:
                wheels, companions = download(stack, directory)
            print(f"## {name}: {len(wheels)} wheels, companions {' '.join(companions) or '-'}", flush=True)
            if args.no_layouts:
                graph, static = graph_of(wheels), doctor(wheels, stack, run=False)
                failed |= graph.returncode != 0 or static.refused
                print(
                    f"  graph of the set: exit {graph.returncode}, {graph.cycles} library cycle(s) {graph.error}".rstrip()
                )
                print(f"  doctor static: exit {static.returncode}: {static.verdict}")
            else:
                results.append(measure(stack, wheels, work, probe=not args.no_probe))
                print(report(results[-1]), sep="\n")
            print(f"  ({time.monotonic() - started:.0f} s wall, {children_cpu() - cpu:.0f} s CPU)", flush=True)
            if args.bazel:
                for installed in work.iterdir():  # disk: the workspace installs the set again, twice
                    shutil.rmtree(installed, ignore_errors=True)
                if args.lock:
                    stage = compat_bazel.run_lock_stage(stack, wheels, lock, work / "bazel")
                else:
                    stage = compat_bazel.run_stage(stack, wheels, work / "bazel")
                print(compat_bazel.report(stage), flush=True)
                patched = [test for name, test in stage.tests.items() if name.startswith(("patched_", "hub_"))]
                failed |= stage.returncode not in (0, 3) or any(test.status != "PASSED" for test in patched)
        except (subprocess.CalledProcessError, OSError, ValueError) as error:
            print(f"compat_stacks: {name}: {error}", file=sys.stderr)
            return 2
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
    if results:
        print(TABLE_HEADER, *map(table_row, results), sep="\n")
    return 1 if failed or any(result.failed for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
