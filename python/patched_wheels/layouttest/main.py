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
   them (:mod:`patched_wheels.loading.mergedtree`); the other entries stay on ``PYTHONPATH`` where they were.
   The environment is made first: a wheel installing where it keeps its interpreter is refused, never run.
3. The probe runs in both at once, each with doctor --run's child (:func:`patched_wheels.loading.probe.run_child`),
   and the verdict is doctor --run's :class:`~patched_wheels.loading.probe.Comparison`: the test fails when its
   own layout maps fewer of the wheels' libraries, exits otherwise or fails with another first error -- and
   when either run ended without recording what it mapped (a crash, a kill): then nothing was compared.

Every child (the sys.path report too) runs under :func:`~patched_wheels.base.supervise.supervise`: bounded
output, its processes killed at its end, a deadline inside Bazel's own (``$TEST_TIMEOUT``), so a probe that
never ends is one error line naming it rather than Bazel's kill; when Bazel (or Ctrl-C) stops the test first,
the runs are killed before the runner exits, never left running without it.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Iterator, Sequence

from packaging.utils import canonicalize_name

from patched_wheels.base.fsutil import NotRegularFileError, read_input_text, read_regular_file
from patched_wheels.base.names import is_valid_project_name
from patched_wheels.base.schema import read_object
from patched_wheels.base.supervise import stop_runs, supervise
from patched_wheels.errors import PatchedWheelsError, UsageError, one_line, printable
from patched_wheels.loading.layout import FLAT, LAYOUT_TEXT
from patched_wheels.loading.mergedtree import Merged, dists, inside, merge, owners
from patched_wheels.loading.packages import EntryPoint, hosted_plugin, parse_entry_points
from patched_wheels.loading.probe import (
    CHILD,
    TIMEOUT_VARIABLE,
    Comparison,
    RunResult,
    create_flat_environment,
    run_child,
    run_timeout,
)
from patched_wheels.lock.closure import Closure, missing_from

# The files python/private/layout_test.bzl writes for a test NAME, beside each other in the runfiles.
MAIN_SUFFIX = "_layout_main.py"
CONFIG_SUFFIX = "_layout_test.json"
PROBE_SUFFIX = "_layout_probe"
RUNFILES = "runfiles"
"""The kind of the run in the test's own layout (FLAT is the other)."""
# The probe program's sys.path, written (the program's own sys.path[0] first) to the file named after it.
_SYS_PATH_CODE = "import json, sys; open({!r}, 'w', encoding='utf-8').write(json.dumps(sys.path))"
_MAX_SYS_PATH = 1 << 20
#: pip_closure.json's bound: JSON of short strings takes 10 to 20 times its size in Python's objects, so 8 MiB
#: (some 50,000 requirements, ten times a large lock's) peaks under 200 MiB; 64 MiB took 1.6 GB.
_MAX_CLOSURE = 8 << 20
# Linux's MAX_ARG_STRLEN (32 pages), its NUL included: the most one argument of a new program may hold.
_MAX_ARGUMENT = 32 * 4096
# Of Bazel's $TEST_TIMEOUT, what the runs leave to the runner to report and clean up before Bazel kills it.
_TIMEOUT_MARGIN = 0.1
_MIN_MARGIN_S = 5


@dataclass(frozen=True)
class Config:
    """A test's config: what ``layout_test.bzl`` writes (every field but ``program``), and its probe program."""

    test: str
    """The test's label, as the user wrote the target."""
    probe: str
    program: Path
    """The probe program (a py_binary with the test's deps; its main runs its first argument as code)."""
    pip_closure: str = ""
    """``pip_closure``'s path under the runfiles root ("": not given)."""
    pip_closure_repository: str = ""
    """The canonical name of the repository holding ``pip_closure`` ("": none given, or the main repository's)."""
    bzlmod: bool = True
    """Whether Bazel reads the main repository's MODULE.bazel (the label of layout_test.bzl is canonical)."""

    @property
    def hub(self) -> str:
        """The hub ``pip_closure`` comes from, as its ``index`` tag or ``patched_index`` names it ("": unknown):
        the last part of a module extension's canonical name (``rules_patched_wheels~~patched~patched_pypi``,
        ``+`` since Bazel 8), or the name of a WORKSPACE's repository."""
        return re.split(r"[~+]", self.pip_closure_repository)[-1]

    @property
    def tag_spelling(self) -> str:
        """How the user declares a patched wheel of that hub: ``bzlmod`` (a tag of the module extension, which
        names its repositories with ``~`` or ``+``) or ``workspace`` (a ``patched_index`` macro)."""
        repository = self.pip_closure_repository
        if repository:
            return "bzlmod" if re.search(r"[~+]", repository) else "workspace"
        return "bzlmod" if self.bzlmod else "workspace"

    @property
    def subject(self) -> str:
        """The start of every message about the probe: the test and the attribute as the user wrote them."""
        return f"layout_test {self.test}: probe = {json.dumps(self.probe)}"


@dataclass(frozen=True)
class Deadline:
    """When the runs must have ended: $RULES_PATCHED_WHEELS_RUN_TIMEOUT, and inside Bazel's $TEST_TIMEOUT."""

    seconds: int
    at: float
    """time.monotonic() at which they are stopped."""
    why: str

    @classmethod
    def start(cls, environment: dict[str, str]) -> "Deadline":
        """The deadline of a runner that starts now, under ``environment`` (its own)."""
        own, bazel = run_timeout(), environment.get("TEST_TIMEOUT", "")
        seconds, why = own, f"{TIMEOUT_VARIABLE}={own}"
        if bazel.isascii() and bazel.isdigit() and int(bazel) > 0:
            inside = int(int(bazel) - max(_MIN_MARGIN_S, int(bazel) * _TIMEOUT_MARGIN))
            if inside < own:
                seconds, why = max(1, inside), f"the test's timeout is {bazel} s: give it a larger size or timeout"
        return cls(seconds, time.monotonic() + seconds, why)

    def left(self) -> int:
        """Whole seconds left (at least 1: a run always starts)."""
        return max(1, math.ceil(self.at - time.monotonic()))  # never before `at`: a run stopped is past it


_MAX_CONFIG_BYTES = 1 << 20
"""The largest config read: layout_test.bzl writes the test's label and its probe, which a command line carries."""


def read_config(main_file: str) -> Config:
    """The test's config, found beside its main ``NAME_layout_main.py``: the JSON object of :class:`Config`'s fields
    (but ``program``, the probe program beside it) that ``layout_test.bzl`` writes, read by the schema reader;
    anything else is one error naming the file."""
    if not main_file.endswith(MAIN_SUFFIX):
        raise UsageError(f"{main_file}: not a layout_test main (expected a name ending in {MAIN_SUFFIX})")
    base = main_file[: -len(MAIN_SUFFIX)]
    path = base + CONFIG_SUFFIX
    what = f"{path}: not a layout_test config"
    try:
        value = json.loads(read_regular_file(path, max_bytes=_MAX_CONFIG_BYTES, follow_links=True).decode("utf-8"))
    except NotRegularFileError as problem:  # a FIFO is not waited on, a device not read
        raise UsageError(f"{path}: {problem}; not a layout_test config") from None
    except OSError as problem:
        raise UsageError(f"{path}: cannot read the layout_test config: {problem.strerror or problem}") from None
    except RecursionError:  # json nests a Python call per "[" or "{"
        raise UsageError(f"{what}: nested too deeply") from None
    except ValueError as problem:  # not UTF-8, not JSON
        raise UsageError(f"{what}: {problem}") from None
    try:
        return read_object(Config, value, what, given={"program": Path(base + PROBE_SUFFIX)})
    except ValueError as problem:  # not an object, or not of the config's keys
        raise UsageError(str(problem)) from None


def check_probe(test: str, probe: str) -> list[str]:
    """The modules ``probe`` imports (absolute imports, in order); a probe that does not compile, or that no
    command line can carry (each run gets it as one argument), is refused."""
    size = len(probe.encode("utf-8", "surrogatepass"))
    if size >= _MAX_ARGUMENT:
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)}: {size} bytes, more than the {_MAX_ARGUMENT - 1} a command-line "
            "argument holds: put the code in a module of deps and import it"
        )
    try:
        tree = ast.parse(probe, "<probe>")
        compile(tree, "<probe>", "exec")
    except SyntaxError as error:
        where = f" (line {error.lineno})" if error.lineno else ""
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)} does not compile: {error.msg}{where}"
        ) from None
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
        raise UsageError(
            f"layout_test {test}: probe = {json.dumps(probe)} imports nothing: import the package whose libraries it checks"
        )
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
    """Whether a ``sys.path`` entry holds installed wheels of the deps: it is in the runfiles, links resolved
    (the interpreter's own site-packages is not, nor a link in the runfiles to a directory outside them),
    and holds a ``*.dist-info`` directory."""
    real = os.path.realpath(entry or os.curdir)
    if real == os.path.realpath(runfiles) or not inside(real, os.path.realpath(runfiles)):
        return False
    try:
        return any(
            name.endswith(".dist-info") and os.path.isdir(os.path.join(entry, name)) for name in os.listdir(entry)
        )
    except OSError:  # a zip file, a directory that does not exist
        return False


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


def real_sys_path(config: Config, environment: dict[str, str], work: Path, deadline: Deadline) -> list[str]:
    """The ``sys.path`` of the probe program as Bazel launches it (through :data:`CHILD`, supervised: the deps'
    own start-up code, a ``sitecustomize``, runs there too)."""
    report = work / "sys-path.json"
    command = [str(config.program), CHILD]
    captured = supervise(command, _SYS_PATH_CODE.format(str(report)), environment, work, deadline.left(), wanted=set())
    where = (
        f"layout_test {config.test}: {config.program.name} (the probe program, with deps) did not report its sys.path"
    )
    if captured is None:
        raise UsageError(
            f"{where}: still running after {deadline.seconds} s ({deadline.why}); stopped: a dep's start-up code never ends"
        )
    try:
        if captured.returncode != 0 or not report.is_file():
            raise ValueError(
                captured.stderr.first_error or captured.stderr.last or f"exit status {captured.returncode}"
            )
        if report.stat().st_size > _MAX_SYS_PATH:
            raise ValueError(f"more than {_MAX_SYS_PATH} bytes")
        entries = json.loads(report.read_text(encoding="utf-8", errors="surrogateescape"))
        if not (isinstance(entries, list) and all(isinstance(entry, str) for entry in entries)):
            raise ValueError("not a list of strings")
    except ValueError as error:
        raise UsageError(f"{where}: {error}") from None
    return entries


def _child_environment() -> dict[str, str]:
    """This test's environment less the PYTHONPATH its own launcher set (the probe program sets its own)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


class _Stopped(BaseException):
    """Bazel's kill at the test's timeout (SIGTERM), or Ctrl-C: the runs are stopped, then the runner ends."""


def _stop(signum: int, frame: object) -> None:
    stop_runs()
    raise _Stopped(signal.Signals(signum).name)


def run_layouts(
    config: Config, modules: Sequence[str], work: Path, runfiles: str, deadline: Deadline
) -> tuple[Comparison, Merged]:
    """Both runs of ``config``'s probe (which imports ``modules``): in the test's layout and in one site-packages
    (``work``: a new directory), stopped at ``deadline``."""
    environment = _child_environment()
    entries = real_sys_path(config, environment, work, deadline)
    wheel_entries = [entry for entry in entries[1:] if is_wheel_entry(entry, runfiles)]
    check_imports(config.test, modules, entries, wheel_entries)
    if not wheel_entries:
        raise UsageError(
            f"layout_test {config.test}: no installed wheel on the probe's sys.path: give deps from a pip hub (requirement(...))"
        )
    # The virtual environment first: a wheel installing where it keeps its interpreter is then found, not run.
    python = create_flat_environment(work / FLAT)
    try:
        merged = merge(wheel_entries, work / FLAT, runfiles)
    except FileExistsError as error:
        taken = os.path.relpath(str(error.filename2 or error.filename), work / FLAT)
        raise UsageError(
            f"layout_test {config.test}: deps: a wheel installs {taken}, where the virtual environment of {LAYOUT_TEXT[FLAT]} keeps its interpreter"
        ) from None
    flat_environment = dict(
        environment, PYTHONPATH=os.pathsep.join(flat_path(entries, wheel_entries, merged.site_packages))
    )
    runs = {
        RUNFILES: ([str(config.program), CHILD], environment, wheel_entries, wheel_entries),
        FLAT: (
            [str(python), "-c", CHILD],
            flat_environment,
            [str(merged.site_packages)],
            [str(merged.site_packages), str(merged.root)],
        ),
    }

    def run(kind: str) -> RunResult:
        command, env, kind_entries, places = runs[kind]
        directory = work / f"run-{kind}"
        directory.mkdir()
        try:
            return run_child(
                kind,
                command,
                config.probe,
                root=directory,
                environment=env,
                by_file=merged.libraries,
                entries=kind_entries,
                places=places,
                timeout=deadline.left(),
            )
        except UsageError:
            if time.monotonic() < deadline.at:
                raise
            where = "in the test's layout" if kind == RUNFILES else f"with {LAYOUT_TEXT[FLAT]}"
            raise UsageError(
                f"{config.subject}: still running after {deadline.seconds} s {where} ({deadline.why}); stopped"
            ) from None

    pool = ThreadPoolExecutor(max_workers=2)  # at once: the test costs about one run of the probe
    futures = [pool.submit(run, kind) for kind in (FLAT, RUNFILES)]
    try:
        flat, real = (future.result() for future in futures)
    except _Stopped:  # a run may start after the signal's kill: stop them until both have ended
        while wait(futures, timeout=0.1).not_done:
            stop_runs()
        raise
    finally:
        pool.shutdown()
    return Comparison(flat=flat, per_wheel=real), merged


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def _run_lines(title: str, result: RunResult, total: int) -> list[str]:
    lines = [f"  {title}:", f"    exit status: {result.returncode}"]
    if result.error_line:
        lines.append(f"    first error: {one_line(result.error_line)}")  # the probe's text: it forges no line
    mapped = (
        "unknown (the process ended without running its exit hooks)"
        if result.mapped is None
        else f"{len(result.mapped)} of the wheels' {_plural(total, 'library')}"
    )
    lines.append(f"    mapped: {mapped}")
    return lines


#: The ``suffix`` of the ``patched_wheel`` a fix line gives: the version's PEP 440 local label (``1.0+preload.1``),
#: the user's to choose (an organisation's name and a counter, say).
FIX_SUFFIX = "preload.1"
#: What a fix line gives as ``hub`` when the test does not know it (no ``pip_closure`` of a hub).
UNKNOWN_HUB = "HUB"


def starlark_string(text: str) -> str:
    """``text`` as a Starlark string literal that parses back to it, on one printable line: quotes and
    backslashes escaped, ``\\n``/``\\r``/``\\t``, and every other character a terminal would act on as the octal
    escapes of its UTF-8 bytes (Bazel's Starlark holds a string as those bytes, so they are the character)."""
    out = []
    for character in text:
        if character in _STARLARK_ESCAPES:
            out.append(_STARLARK_ESCAPES[character])
        elif character.isprintable():
            out.append(character)
        else:  # a byte os.fsdecode could not decode is that byte again; another lone surrogate, its three bytes
            byte_error = "surrogateescape" if "\udc80" <= character <= "\udcff" else "surrogatepass"
            out += [f"\\{byte:03o}" for byte in character.encode("utf-8", byte_error)]
    return '"' + "".join(out) + '"'


_STARLARK_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def patched_wheel_line(config: Config, project: str, attributes: Sequence[tuple[str, str]]) -> str:
    """The ``patched_wheel`` of ``project`` a user pastes where the test's hub is declared, complete: its ``hub``
    and a ``suffix`` beside ``attributes``, in the spelling of that declaration (a tag in MODULE.bazel, or an
    item of ``patched_index(wheels = [...])`` in WORKSPACE); where to paste it, then the line itself, last."""
    hub = config.hub or UNKNOWN_HUB
    known = (
        f'; {UNKNOWN_HUB}: the hub of the deps, which pip_closure = "@{UNKNOWN_HUB}//:pip_closure.json" names'
        if not config.hub
        else ""
    )
    values = [("name", project), ("suffix", FIX_SUFFIX), *attributes]
    if config.tag_spelling == "bzlmod":
        values.insert(1, ("hub", hub))
        where, call = "add to MODULE.bazel", "patched.patched_wheel"
    else:
        where, call = (
            f"add to patched_index(name = {starlark_string(hub)}, wheels = [...]) in WORKSPACE",
            "patched_wheel",
        )
    rendered = ", ".join(f"{key} = {starlark_string(value)}" for key, value in values)
    return f"{where} (suffix {FIX_SUFFIX} is yours to change: a PEP 440 local label{known}): {call}({rendered})"


def fix_stanza(config: Config, modules: Sequence[str], wheel_entries: Sequence[str]) -> str | None:
    """The ``patched_wheel`` that makes the probe's package preload what one site-packages maps; None when the
    probe's first imported package is in none of the wheels."""
    from patched_wheels.loading.preload import PRELOAD_MODULE  # only a failing test needs it

    declared = [
        (dist, point)
        for entry in wheel_entries
        for dist in dists(entry)
        for point in _declared_entry_points(os.path.join(entry, f"{dist}.dist-info", "entry_points.txt"))
    ]
    preload = [("preload", "auto"), ("probe", config.probe)]
    for module in modules:
        plugin = hosted_plugin(module, declared)
        if plugin is not None:  # the host's own preload is what fails on a GPU: name the plugin's
            dist, point = plugin
            project = dist.rsplit("-", 1)[0].replace("_", "-").lower()
            stanza = patched_wheel_line(config, project, [*preload, ("preload_package", point.module)])
            return printable(
                f"{module} loads its plugin {point.module} by entry point {point}: preload the plugin: {stanza}"
            )
        relative = module.replace(".", "/")
        for entry in wheel_entries:
            if not os.path.isdir(os.path.join(entry, relative)):
                continue
            installed = dists(entry)
            owner = owners(entry).get(f"{relative}/__init__.py") if len(installed) > 1 else installed[0]
            if owner is None:
                continue
            project = owner.split("-")[0].replace("_", "-").lower()
            package = [("preload_package", module)] if module != project.replace("-", "_").replace(".", "_") else []
            stanza = patched_wheel_line(config, project, [*preload, *package])
            if os.path.isfile(os.path.join(entry, relative, f"{PRELOAD_MODULE}.py")):
                return printable(
                    f"{module} has a generated preload that does not cover this probe: give its patched_wheel this probe: {stanza}"
                )
            return printable(f"{module} has no generated preload: patch its wheel: {stanza}")
    return None


def _declared_entry_points(path: str) -> list[EntryPoint]:
    """An installed distribution's entry points (none when its ``entry_points.txt`` is absent, not a regular
    file, or too big to be one)."""
    try:
        return parse_entry_points(read_regular_file(path, max_bytes=1 << 20, follow_links=True))
    except (OSError, PatchedWheelsError):
        return []


def unrecorded(comparison: Comparison) -> list[str]:
    """The layouts whose run ended without recording what it mapped (killed, a crash, its record descriptor
    closed): the libraries were not compared, so the test cannot pass."""
    runs = ((comparison.per_wheel, "the test's layout"), (comparison.flat, LAYOUT_TEXT[FLAT]))
    return [text for run, text in runs if run.mapped is None]


def passed(comparison: Comparison) -> bool:
    return comparison.matches and not unrecorded(comparison)


def read_pip_closure(config: Config, runfiles: str) -> Closure | None:
    """The hub's ``pip_closure.json`` the test was given (None: not given), read bounded and checked."""
    if not config.pip_closure:
        return None
    what = f"layout_test {config.test}: pip_closure = {json.dumps(config.pip_closure)}"
    if "\0" in config.pip_closure:  # open() would say "embedded null byte" with no name
        raise UsageError(f"{what}: a path with a NUL character, which no file's path holds")
    path = Path(os.path.normpath(os.path.join(runfiles, config.pip_closure)))
    text = read_input_text(path, max_bytes=_MAX_CLOSURE, what="a pip closure file", where=what, error=UsageError)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as error:  # json nests a Python call per "[" or "{"
        raise UsageError(
            f"{what}: not a pip closure file: {one_line(str(error))[:200] or 'nested too deeply'}"
        ) from None
    closure = Closure.from_json(raw, what)
    _check_project_names(closure, what)
    return closure


def _check_project_names(closure: Closure, what: str) -> None:
    """Refuse a closure naming a project that no wheel can have (PEP 508), or not as the hub writes it
    (normalized, which the check looks names up by): the hub writes only names of the lock's wheels, so such a
    name is a file made by hand, and no verdict should quote it."""
    names = [*closure.dists, *closure.root_extras]
    names += [
        edge.project
        for dist in closure.dists.values()
        for edges in (dist.requires, *dist.extras.values())
        for edge in edges
    ]
    for name in names:
        if not is_valid_project_name(name):
            raise UsageError(
                f"{what}: not a pip closure file: {printable(repr(name))[:200]} is not a project name (PEP 508)"
            )
        if canonicalize_name(name) != name:
            raise UsageError(
                f"{what}: not a pip closure file: {name!r} is not normalized ({canonicalize_name(name)!r})"
            )


#: The most wheels the verdict lists that deps lack (each with its chain, bounded by closure.MAX_STEPS); the rest
#: are counted, so a closure of thousands of projects prints a few lines.
MAX_MISSING = 20


def closure_lines(closure: Closure | None, comparison: Comparison, merged: Merged) -> list[str]:
    """Why the deps are not pip's closure: each wheel pip installs for them that they lack, with the requirements
    that bring it; and a failure both layouts share that names a library one of the wheels ships (the set is
    incomplete or broken, not fine). Empty when the deps are pip's closure, or when no closure was given."""
    if closure is None:
        return []
    installed = [dist.rsplit("-", 1)[0] for entry in merged.wheel_entries for dist in dists(entry)]
    missing = missing_from(closure, installed)
    lines = [
        one_line(f"layout_test: FAILED: deps lack {one.describe()}, which pip installs from the same lock")
        for one in missing[:MAX_MISSING]
    ]
    if len(missing) > MAX_MISSING:
        lines.append(
            f"layout_test: FAILED: deps lack {_plural(len(missing) - MAX_MISSING, 'more wheel')} that pip installs from the "
            f"same lock (the first {MAX_MISSING} by name are listed above)"
        )
    error = comparison.flat.error_line or ""
    shipped = {os.path.basename(path) for path in merged.libraries}
    named = [name for name in shipped if f"{name}: cannot open shared object file" in error]
    if comparison.matches and named:
        lines.append(
            one_line(
                f"layout_test: FAILED: both layouts fail loading {named[0]}, which a wheel of the deps ships: {one_line(error)[:300]}"
            )
        )
    return lines


def format_verdict(
    config: Config, comparison: Comparison, merged: Merged, modules: Sequence[str], incomplete: Sequence[str] = ()
) -> str:
    """What both runs did, and the verdict: ``incomplete`` (:func:`closure_lines`: why the deps are not pip's
    closure), what the test's layout does differently, and the fix."""
    total = len(set(merged.libraries.values()))
    lines = [printable(f"layout_test {config.test}: probe: {json.dumps(config.probe)}")]
    lines += _run_lines(
        f"the test's layout ({_plural(len(merged.wheel_entries), 'directory')} of wheels on sys.path)",
        comparison.per_wheel,
        total,
    )
    lines += _run_lines("every wheel in one site-packages (links, in a virtual environment)", comparison.flat, total)
    if comparison.missing:
        lines.append("  mapped in one site-packages, NOT in the test's layout:")
        lines += [f"    {one_line(str(library))}" for library in comparison.missing]
    if incomplete:
        lines += incomplete
        lines.append(
            "layout_test: fix: add the missing wheels to deps, or take deps from a hub with restore_extras (the default), "
            "which wires what pip installs (docs/rules-python.md#extras)"
        )
        return "\n".join(lines)
    if comparison.matches and unrecorded(comparison):
        lines.append(
            f"layout_test: FAILED: nothing to compare: {' and '.join(unrecorded(comparison))} ended without recording what it mapped "
            f"(exit status {comparison.per_wheel.returncode}, {comparison.flat.returncode} in one site-packages: killed, a crash, "
            "or the probe closed the descriptor it records to): a probe must end (return, exit, raise) in both"
        )
        return "\n".join(lines)
    if comparison.matches:
        verdict = "PASSED: the test's layout does what one site-packages does"
        if comparison.flat.returncode != 0 or comparison.flat.error_line:
            verdict += f" (both fail alike, not because of the layout: {comparison.flat.error_line or 'exit status ' + str(comparison.flat.returncode)})"
        lines.append(one_line(f"layout_test: {verdict}"))
        return "\n".join(lines)
    lines.append(
        one_line(
            "layout_test: FAILED: the test's layout differs from one site-packages: "
            + "; ".join(comparison.differences)
        )
    )
    fix = fix_stanza(config, modules, merged.wheel_entries) if comparison.missing else None
    if fix:
        lines.append(f"layout_test: fix: {fix}")
    return "\n".join(lines)


def _work_directory(config: Config) -> tempfile.TemporaryDirectory[str]:
    """A new directory for both layouts under $TEST_TMPDIR (Bazel's), else the system's."""
    where = os.environ.get("TEST_TMPDIR")
    try:
        return tempfile.TemporaryDirectory(prefix="layout-test-", dir=where)
    except OSError as error:
        raise UsageError(
            f"layout_test {config.test}: TEST_TMPDIR={where or tempfile.gettempdir()}: no new directory there: {error.strerror}"
        ) from None


def main(main_file: str) -> int:
    """Run the test whose main is ``main_file``: 0 when its layout does what one site-packages does, 1 when not,
    2 with one ``patched-wheels: error:`` line when the test itself is wrong (its probe, its deps)."""
    handlers = {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    name = main_file
    try:
        config = read_config(main_file)
        name = config.test
        modules = check_probe(config.test, config.probe)
        runfiles = runfiles_root(main_file)
        deadline = Deadline.start(dict(os.environ))
        with _work_directory(config) as temp:
            closure = read_pip_closure(config, runfiles)
            comparison, merged = run_layouts(config, modules, Path(temp).resolve(), runfiles, deadline)
            incomplete = closure_lines(closure, comparison, merged)
            print(format_verdict(config, comparison, merged, modules, incomplete))
    except PatchedWheelsError as error:
        print(f"patched-wheels: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as error:
        print(f"patched-wheels: error: {one_line(f'layout_test {main_file}: {error}')}", file=sys.stderr)
        return 2
    except _Stopped as stopped:
        print(
            f"patched-wheels: error: layout_test {name}: stopped by {stopped} (Bazel's timeout, or Ctrl-C); its runs were killed",
            file=sys.stderr,
        )
        return 128 + signal.Signals[str(stopped)].value
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return 0 if passed(comparison) and not incomplete else 1
