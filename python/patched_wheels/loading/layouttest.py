"""``layout_test``'s runner: the probe in the test's own runfiles, and again with those wheels in one site-packages.

Bazel runs this as the test's main (``python/private/layout_test.bzl`` writes the files named below beside
it).  The *probe program* is a ``py_binary`` with the test's ``deps`` whose main runs its first argument as
code, so rules_python launches it exactly as it launches a ``py_test`` with those deps: one directory per
wheel, or rules_python 2.x's one site-packages when the user's flags say so.

1. The probe program reports its ``sys.path`` (one short run).
2. Every entry holding a ``*.dist-info`` directory is installed wheels (rules_python's ``site-packages``
   directories, whose ``data``/``bin``/``include`` siblings are the other schemes).  Their files are
   linked (symbolic links to the real files, inside real directories, so that ``$ORIGIN/..`` stays in the
   merged tree) into one site-packages of a virtual environment made at test time, where pip would put
   them (:mod:`patched_wheels.loading.layout`); the other entries stay on ``PYTHONPATH`` where they were.
3. The probe runs in both at once, each with doctor --run's child (:func:`patched_wheels.loading.probe.run_child`),
   and the verdict is doctor --run's :class:`~patched_wheels.loading.probe.Comparison`: the test fails when its
   own layout maps fewer of the wheels' libraries, exits otherwise or fails with another first error.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path, PurePosixPath
from typing import Iterator, Sequence

from patched_wheels.elf.read import ELF_MAGIC
from patched_wheels.elf.read import ElfLibrary, is_shared_library_name
from patched_wheels.errors import PatchedWheelsError, UsageError
from patched_wheels.loading.layout import FLAT, PER_WHEEL_SCHEMES, Layout
from patched_wheels.loading.probe import CHILD, Comparison, RunResult, create_flat_environment, run_child

# The files python/private/layout_test.bzl writes for a test NAME, beside each other in the runfiles.
MAIN_SUFFIX = "_layout_main.py"
CONFIG_SUFFIX = "_layout_test.json"
PROBE_SUFFIX = "_layout_probe"
RUNFILES = "runfiles"
"""The kind of the run in the test's own layout (FLAT is the other)."""
_SYS_PATH_CODE = "import json, sys; sys.stdout.write(json.dumps(sys.path))"
_MAX_SYS_PATH = 1 << 20


@dataclass(frozen=True)
class Config:
    test: str
    """The test's label, as the user wrote the target."""
    probe: str
    program: Path
    """The probe program (a py_binary with the test's deps; its main runs its first argument as code)."""


@dataclass(frozen=True)
class Merged:
    """The wheels of the test's layout linked into one site-packages."""

    root: Path
    """The virtual environment's prefix."""
    site_packages: Path
    libraries: dict[str, ElfLibrary]
    """The wheels' shared libraries by real path (the same file in both layouts)."""
    wheel_entries: tuple[str, ...]


def read_config(main_file: str) -> Config:
    """The test's config, found beside its main ``NAME_layout_main.py``."""
    if not main_file.endswith(MAIN_SUFFIX):
        raise UsageError(f"{main_file}: not a layout_test main (expected a name ending in {MAIN_SUFFIX})")
    base = main_file[: -len(MAIN_SUFFIX)]
    with open(base + CONFIG_SUFFIX, encoding="utf-8") as file:
        value = json.load(file)
    return Config(value["test"], value["probe"], Path(base + PROBE_SUFFIX))


def check_probe(test: str, probe: str) -> list[str]:
    """The modules ``probe`` imports (absolute imports, in order); a probe that does not compile is refused."""
    try:
        tree = ast.parse(probe, "<probe>")
        compile(tree, "<probe>", "exec")
    except SyntaxError as error:
        where = f" (line {error.lineno})" if error.lineno else ""
        raise UsageError(f"layout_test {test}: probe = {json.dumps(probe)} does not compile: {error.msg}{where}") from None
    except ValueError as error:  # a NUL character
        raise UsageError(f"layout_test {test}: probe = {json.dumps(probe)} does not compile: {error}") from None
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    names: list[str] = []
    for node in sorted(imports, key=lambda node: (node.lineno, node.col_offset)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            names.append(node.module)
    if not names:
        raise UsageError(f"layout_test {test}: probe = {json.dumps(probe)} imports nothing: import the package whose libraries it checks")
    return list(dict.fromkeys(names))


def check_imports(test: str, modules: Sequence[str], entries: Sequence[str], wheel_entries: Sequence[str]) -> None:
    """Every top-level module the probe imports must be found on the test's ``sys.path`` (its deps)."""
    for module in modules:
        top = module.split(".")[0]
        if top in sys.builtin_module_names or PathFinder.find_spec(top, list(entries)) is not None:
            continue
        found = sorted({name for entry in wheel_entries for name in _top_level_names(entry)})
        raise UsageError(
            f"layout_test {test}: probe imports {top}, which none of deps provides (the deps' wheels hold: {', '.join(found) or 'nothing'})"
        )


def _top_level_names(entry: str) -> Iterator[str]:
    for name in os.listdir(entry):
        if name.endswith((".dist-info", ".data")) or name.startswith(("_", ".")):
            continue
        yield name.split(".")[0]


def runfiles_root(main_file: str) -> str:
    """The test's runfiles directory: $RUNFILES_DIR or $TEST_SRCDIR (Bazel's), else the ``*.runfiles`` above its main."""
    for variable in ("RUNFILES_DIR", "TEST_SRCDIR"):
        if os.environ.get(variable):
            return os.path.abspath(os.environ[variable])
    parent = os.path.dirname(os.path.abspath(main_file))
    while parent != os.path.dirname(parent) and not parent.endswith(".runfiles"):
        parent = os.path.dirname(parent)
    if not parent.endswith(".runfiles"):
        raise UsageError(f"{main_file}: not in a runfiles directory, and neither RUNFILES_DIR nor TEST_SRCDIR is set")
    return parent


def is_wheel_entry(entry: str, runfiles: str) -> bool:
    """Whether a ``sys.path`` entry holds installed wheels of the deps: it is in the runfiles (the interpreter's
    own site-packages is not) and holds a ``*.dist-info`` directory."""
    if not os.path.abspath(entry or os.curdir).startswith(runfiles.rstrip("/") + "/"):
        return False
    try:
        return any(name.endswith(".dist-info") for name in os.listdir(entry))
    except OSError:  # a zip file, a directory that does not exist
        return False


def _dists(entry: str) -> list[str]:
    """The distributions (``name-version``) installed in a ``sys.path`` entry, by their ``*.dist-info`` directories."""
    return [name[: -len(".dist-info")] for name in sorted(os.listdir(entry)) if name.endswith(".dist-info")]


def _owners(entry: str) -> dict[str, str]:
    """Install path -> distribution (``name-version``) for an entry holding several wheels, from their RECORDs."""
    owners = {}
    for name in sorted(os.listdir(entry)):
        if name.endswith(".dist-info") and os.path.isfile(record := os.path.join(entry, name, "RECORD")):
            with open(record, encoding="utf-8", errors="replace") as file:
                for line in file:
                    path = line.split(",", 1)[0].strip().strip('"')
                    owners.setdefault(path, name[: -len(".dist-info")])
    return owners


def _files(directory: str) -> Iterator[tuple[str, str]]:
    """(path relative to ``directory``, full path) of every file under it, links to directories followed."""
    for parent, _, files in os.walk(directory, followlinks=True):
        for name in files:
            full = os.path.join(parent, name)
            yield os.path.relpath(full, directory), full


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(ELF_MAGIC)) == ELF_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class _File:
    """A file of the merged tree: the test's own file it links to, and whose it is."""

    full: str
    owner: tuple[str, str]
    """(the directory it was found under, its distribution): one wheel's files in one place share it."""
    library: bool


_Tree = dict[str, "_Tree | _File"]
"""A directory of the merged tree: its entries by name, directories and files."""


@dataclass(frozen=True)
class _Whole:
    """What decides whether a directory of the merged tree can be one link to the test's own directory."""

    owner: tuple[str, str] | None
    """The one owner of every file under it; None when several wheels (or places) share it."""
    library: bool
    """Whether a shared library is under it (it must then be a real directory: see :func:`merge`)."""
    source: str | None
    """The test's directory holding exactly its files at the same relative paths; None when there is none."""


def _whole(tree: _Tree, wholes: dict[int, _Whole]) -> _Whole:
    """Summarise every directory of ``tree`` into ``wholes`` (by ``id`` of its dict), bottom-up."""
    owners, library, sources = set(), False, set()
    for name, node in tree.items():
        part = _whole(node, wholes) if isinstance(node, dict) else _Whole(node.owner, node.library, node.full)
        owners.add(part.owner)
        library = library or part.library
        sources.add(os.path.dirname(part.source) if part.source and os.path.basename(part.source) == name else None)
    whole = _Whole(owners.pop() if len(owners) == 1 else None, library, sources.pop() if len(sources) == 1 else None)
    wholes[id(tree)] = whole
    return whole


def _may_be_one_link(parts: tuple[str, ...], site_packages: tuple[str, ...]) -> bool:
    """Whether the merged tree's directory at ``parts`` (below the prefix) may be a link at all.

    Never the prefix's own directories (``bin``, ``lib``, ``include``: the virtual environment is made in
    them afterwards) nor site-packages and its parents; and no top-level package: code that reaches its
    siblings as ``dirname(__file__)/..`` must find the merged site-packages, not its wheel's directory."""
    if parts[: len(site_packages)] == site_packages:
        return len(parts) >= len(site_packages) + 2
    return len(parts) >= 2 and site_packages[: len(parts)] != parts


def _make(tree: _Tree, directory: str, parts: tuple[str, ...], site_packages: tuple[str, ...], wholes: dict[int, _Whole]) -> None:
    """Make ``tree`` at ``directory`` (a real directory made here): files and whole directories as links."""
    os.makedirs(directory, exist_ok=True)
    for name, node in tree.items():
        target = os.path.join(directory, name)
        if not isinstance(node, dict):
            os.symlink(node.full, target)  # to the test's own file: resolving every runfiles link costs more than the run
            continue
        whole, child = wholes[id(node)], parts + (name,)
        if whole.owner is not None and not whole.library and whole.source and _may_be_one_link(child, site_packages):
            os.symlink(whole.source, target)  # one wheel's directory without a library: one link for all its files
        else:
            _make(node, target, child, site_packages, wholes)


def merge(wheel_entries: Sequence[str], root: Path) -> Merged:
    """Link the wheels of ``wheel_entries`` into the flat layout at ``root`` (a later wheel's file wins, as with
    pip) and find their shared libraries; ``root`` gets its virtual environment afterwards.

    A shared library is a link to the test's own file inside real directories up to ``root``, so that the
    ``$ORIGIN/..`` of its RUNPATH (``nvidia/*/lib``'s, torch's) resolves in the merged tree, not in its own
    wheel's.  A directory only one wheel installs files into, with no shared library under it (torch's
    10,000 headers), is one link to the test's own directory: one call instead of one per file."""
    layout = Layout(FLAT, PurePosixPath(root))
    libraries: dict[str, ElfLibrary] = {}
    tree: _Tree = {}
    prefix = str(root).rstrip("/") + "/"
    for entry in wheel_entries:
        dists = _dists(entry)
        owners = _owners(entry) if len(dists) > 1 else {}
        sources = [(path, path, full, entry) for path, full in _files(entry)]
        if os.path.basename(entry) == PER_WHEEL_SCHEMES["site-packages"] and len(dists) == 1:
            for scheme, directory in PER_WHEEL_SCHEMES.items():  # rules_python's repository: the other schemes beside it
                sibling = os.path.join(os.path.dirname(entry), directory)
                if scheme != "site-packages" and os.path.isdir(sibling):
                    sources += [(f"{dists[0]}.data/{scheme}/{path}", os.path.join(directory, path), full, sibling) for path, full in _files(sibling)]
        for install_path, record_path, full, place in sources:
            dist = owners.get(record_path, dists[0] if dists else os.path.basename(entry))
            library = is_shared_library_name(install_path) and _is_elf(full)
            if library:
                libraries[os.path.realpath(full)] = ElfLibrary(dist, install_path, None, (), (), ())
            *parents, name = str(layout.target(dist, install_path))[len(prefix) :].split("/")
            node = tree
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[name] = _File(full, (place, dist), library)  # a later wheel's file wins, as with pip
    wholes: dict[int, _Whole] = {}
    _whole(tree, wholes)
    site_packages = PurePosixPath(layout.site_packages("")).relative_to(root).parts
    _make(tree, str(root), (), site_packages, wholes)
    return Merged(root, Path(layout.site_packages("")), libraries, tuple(wheel_entries))


def flat_path(entries: Sequence[str], wheel_entries: Sequence[str], site_packages: Path) -> list[str]:
    """The flat run's ``PYTHONPATH``: the test's ``sys.path`` with its wheel entries replaced by one site-packages
    where the first of them was (``-c``'s empty first entry dropped: the run's own)."""
    wheels, merged, path = set(wheel_entries), False, []
    for entry in entries[1:]:
        if entry in wheels:
            if not merged:
                path.append(str(site_packages))
                merged = True
        else:
            path.append(entry)
    return path


def real_sys_path(program: Path, environment: dict[str, str], test: str) -> list[str]:
    """The ``sys.path`` of the probe program as Bazel launches it."""
    result = subprocess.run(
        [str(program), _SYS_PATH_CODE], env=environment, stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    try:
        if result.returncode != 0 or len(result.stdout) > _MAX_SYS_PATH:
            raise ValueError(result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or f"exit status {result.returncode}")
        entries = json.loads(result.stdout)
        if not (isinstance(entries, list) and all(isinstance(entry, str) for entry in entries)):
            raise ValueError("not a list of strings")
    except ValueError as error:
        raise UsageError(f"layout_test {test}: {program} did not report its sys.path: {error}") from None
    return entries


def _child_environment() -> dict[str, str]:
    """This test's environment less the PYTHONPATH its own launcher set (the probe program sets its own)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def run_layouts(config: Config, modules: Sequence[str], work: Path, runfiles: str) -> tuple[Comparison, Merged]:
    """Both runs of ``config``'s probe (which imports ``modules``): in the test's layout and in one site-packages
    (``work``: a new directory)."""
    environment = _child_environment()
    entries = real_sys_path(config.program, environment, config.test)
    wheel_entries = [entry for entry in entries[1:] if is_wheel_entry(entry, runfiles)]
    check_imports(config.test, modules, entries, wheel_entries)
    if not wheel_entries:
        raise UsageError(f"layout_test {config.test}: no installed wheel on the probe's sys.path: give deps from a pip hub (requirement(...))")
    merged = merge(wheel_entries, work / FLAT)
    python = create_flat_environment(merged.root)
    flat_environment = dict(environment, PYTHONPATH=os.pathsep.join(flat_path(entries, wheel_entries, merged.site_packages)))
    runs = {
        RUNFILES: ([str(config.program), CHILD], environment, wheel_entries, wheel_entries),
        FLAT: ([str(python), "-c", CHILD], flat_environment, [str(merged.site_packages)], [str(merged.site_packages), str(merged.root)]),
    }

    def run(kind: str) -> RunResult:
        command, env, kind_entries, places = runs[kind]
        directory = work / f"run-{kind}"
        directory.mkdir()
        return run_child(
            kind, command, config.probe, root=directory, environment=env, by_file=merged.libraries, entries=kind_entries, places=places
        )

    with ThreadPoolExecutor(max_workers=2) as pool:  # at once: the test costs about one run of the probe
        flat, real = pool.map(run, [FLAT, RUNFILES])
    return Comparison(flat=flat, per_wheel=real), merged


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def _run_lines(title: str, result: RunResult, total: int) -> list[str]:
    lines = [f"  {title}:", f"    exit status: {result.returncode}"]
    if result.error_line:
        lines.append(f"    first error: {result.error_line}")
    mapped = "unknown (the process ended without running its exit hooks)" if result.mapped is None else f"{len(result.mapped)} of the wheels' {_plural(total, 'library')}"
    lines.append(f"    mapped: {mapped}")
    return lines


def fix_stanza(probe: str, modules: Sequence[str], wheel_entries: Sequence[str]) -> str | None:
    """The ``patched_wheel`` that makes the probe's package preload what one site-packages maps; None when the
    probe's first imported package is in none of the wheels."""
    from patched_wheels.loading.preload import PRELOAD_MODULE  # only a failing test needs it

    for module in modules:
        relative = module.replace(".", "/")
        for entry in wheel_entries:
            if not os.path.isdir(os.path.join(entry, relative)):
                continue
            dists = _dists(entry)
            owner = _owners(entry).get(f"{relative}/__init__.py") if len(dists) > 1 else dists[0]
            if owner is None:
                continue
            project = owner.split("-")[0].replace("_", "-").lower()
            stanza = f'patched_wheel(name = "{project}", preload = "auto", probe = {json.dumps(probe)}'
            if module != project.replace("-", "_").replace(".", "_"):
                stanza += f", preload_package = {json.dumps(module)}"
            stanza += ")"
            if os.path.isfile(os.path.join(entry, relative, f"{PRELOAD_MODULE}.py")):
                return f"{module} has a generated preload that does not cover this probe: give the hub's patched_wheel this probe: {stanza}"
            return f"{module} has no generated preload: patch its wheel in the hub the deps come from: {stanza}"
    return None


def format_verdict(config: Config, comparison: Comparison, merged: Merged, modules: Sequence[str]) -> str:
    """What both runs did, and the verdict: what the test's layout does differently, and the fix."""
    total = len(set(merged.libraries.values()))
    lines = [f"layout_test {config.test}: probe: {config.probe}"]
    lines += _run_lines(f"the test's layout ({_plural(len(merged.wheel_entries), 'directory')} of wheels on sys.path)", comparison.per_wheel, total)
    lines += _run_lines("every wheel in one site-packages (links, in a virtual environment)", comparison.flat, total)
    if comparison.missing:
        lines.append("  mapped in one site-packages, NOT in the test's layout:")
        lines += [f"    {library}" for library in comparison.missing]
    if comparison.matches:
        verdict = "PASSED: the test's layout does what one site-packages does"
        if comparison.flat.returncode != 0 or comparison.flat.error_line:
            verdict += f" (both fail alike, not because of the layout: {comparison.flat.error_line or 'exit status ' + str(comparison.flat.returncode)})"
        lines.append(f"layout_test: {verdict}")
        return "\n".join(lines)
    lines.append("layout_test: FAILED: the test's layout differs from one site-packages: " + "; ".join(comparison.differences))
    fix = fix_stanza(config.probe, modules, merged.wheel_entries) if comparison.missing else None
    if fix:
        lines.append(f"layout_test: fix: {fix}")
    return "\n".join(lines)


def main(main_file: str) -> int:
    """Run the test whose main is ``main_file``: 0 when its layout does what one site-packages does, 1 when not,
    2 with one ``patched-wheels: error:`` line when the test itself is wrong (its probe, its deps)."""
    try:
        config = read_config(main_file)
        modules = check_probe(config.test, config.probe)
        runfiles = runfiles_root(main_file)
        with tempfile.TemporaryDirectory(prefix="layout-test-", dir=os.environ.get("TEST_TMPDIR")) as temp:
            comparison, merged = run_layouts(config, modules, Path(temp).resolve(), runfiles)
            print(format_verdict(config, comparison, merged, modules))
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {error}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as error:
        print(f"patched-wheels: error: layout_test {main_file}: {error}", file=sys.stderr)
        return 2
    return 0 if comparison.matches else 1
