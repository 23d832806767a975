"""compat_stacks.py's Bazel stage: a stack's own workspace under rules_python 2.3.2, plain against patched.

One directory per wheel (rules_python's default layout). The workspace holds two hubs of the same lock
(every wheel the stack resolved to, pinned by sha256, served from a local PEP 503 index made by
``patched-wheels index``): ``plain`` patches nothing and restores no extra (``restore_extras = False``:
rules_python's own wiring); ``patched`` carries the stack's ONE stanza,
``patched_wheel(name = PROJECT, preload = "auto", probe = PROBE[, preload_package = PACKAGE])``. Both name the
root requirement's extras (``extras = ["jax[cuda13]"]``: the lock written here records none), so that both
``pip_closure.json`` files are pip's closure of what the user locked. Each hub gets
two ``layout_test`` targets with the stack's measured probe: deps = ``all_requirements``, and deps =
``[requirement(ROOT)]`` as a user writes it, judged against the hub's ``pip_closure.json`` (pip's closure of
the lock). Each runs the probe in the test's own runfiles and in one site-packages made of the same installed
wheels, and prints how many of the wheels' libraries each mapped. So the row is: does the hub build with one
stanza, and what do plain and patched map against one venv, with every wheel and with what
``requirement(ROOT)`` wires.

Everything the run writes stays under the workspace (the local index, the helper's cache through
``RULES_PATCHED_WHEELS_CACHE``, no repository cache) or in its output base, which ``clean --expunge``
removes; the caller deletes the workspace.

The lock stage (:func:`run_lock_stage`, issue 48) is a new user's workspace instead: the user's own
``requirements.in`` (the root extras the stack's install docs give) compiled by ``uv pip compile
--generate-hashes`` (:func:`compile_lock`), which records no root extra, and two hubs of that lock written as
nothing but ``patched.index(name, requirements_lock)``: ``plain`` with ``restore_extras = False,
verified_stacks = False`` (rules_python's own wiring), ``hub`` with nothing more. Each gets a ``py_test`` of
``[requirement(ROOT)]`` running the stack's probe (it prints the wheels' libraries it mapped) and a
``layout_test`` of the same deps judged against the hub's ``pip_closure.json``; the hub's warning lines (the
inferred root extras, the verified rows applied) are kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from benchmarks.example_workspace import BAZEL, REPO, TOOLCHAIN, use_offline_modules
from benchmarks.harness import process_cpu
from benchmarks.stacks import Stack

RULES_PYTHON = "2.3.2"
SUFFIX = "compat.1"
HUBS = ("plain", "patched")
#: The layout tests of each hub: over all_requirements, and over requirement(ROOT) alone.
KINDS = {"all": "{hub}_all_requirements", "requirement": "[{hub}_requirement({root})]"}
_MAPPED = re.compile(r"mapped: (\d+) of the wheels' (\d+) librar(?:y|ies)")
#: The lock stage's hubs and what each writes beyond ``patched.index(name, requirements_lock)``.
LOCK_HUBS = {"plain": ", restore_extras = False, verified_stacks = False", "hub": ""}
_STATUS = re.compile(r"^(//\S+)\s+(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS)\b", re.MULTILINE)


def stanza(stack: Stack) -> str:
    """The one ``patched_wheel`` a user writes for the stack (``preload_package`` only where the package
    is not the project's own import name)."""
    attributes = [
        f'name = "{stack.project}"',
        'hub = "patched"',
        'preload = "auto"',
        f"probe = {json.dumps(stack.probe)}",
    ]
    if stack.package != canonicalize_name(stack.project).replace("-", "_"):
        attributes.append(f'preload_package = "{stack.package}"')
    return f'patched.patched_wheel({", ".join(attributes)}, suffix = "{SUFFIX}")'


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lock_text(wheels: list[Path]) -> str:
    """A hashed requirements lock of exactly ``wheels``: one ``name==version --hash=sha256:...`` per wheel
    (also bench_e2e.py's JAX lock)."""
    lock = ["# Every wheel compat_stacks.py resolved for the stack, pinned by sha256.\n"]
    for wheel in wheels:
        name, version = parse_wheel_filename(wheel.name)[:2]
        lock.append(f"{name}=={version} \\\n    --hash=sha256:{_sha256(wheel)}\n")
    return "".join(lock)


def module_start(comment: str, module: str, *, patched: bool = True, python: str = "python3") -> str:
    """MODULE.bazel up to the hubs: rules_python RULES_PYTHON on the host's Python 3.11 (TOOLCHAIN) and, when
    ``patched``, this checkout as rules_patched_wheels with its ``patched`` extension (also bench_e2e.py's JAX
    workspaces)."""
    text = f'# {comment}\nmodule(name = "{module}")\n\nbazel_dep(name = "rules_python", version = "{RULES_PYTHON}")\n'
    if patched:
        text += 'bazel_dep(name = "rules_patched_wheels", version = "0.1.0")\n'
        text += f'local_path_override(module_name = "rules_patched_wheels", path = "{REPO}")\n'
    text += TOOLCHAIN.replace('interpreter_path = "python3"', f"interpreter_path = {json.dumps(python)}") + "\n"
    if patched:
        text += 'patched = use_extension("@rules_patched_wheels//python:extensions.bzl", "patched")\n'
    return text


def pip_hubs(locks: dict[str, str], version: str = "3.11", python: str = "python3") -> str:
    """rules_python's ``pip.parse`` of each lock (hub name -> lock label) for the host's Python ``version`` (the
    interpreter ``python``), and their use_repo."""
    parses = "".join(
        f'pip.parse(hub_name = "{hub}", requirements_lock = "{lock}", python_version = "{version}", python_interpreter = {json.dumps(python)})\n'
        for hub, lock in locks.items()
    )
    return f'pip = use_extension("@rules_python//python/extensions:pip.bzl", "pip")\n{parses}use_repo(pip, {", ".join(map(json.dumps, locks))})\n'


def local_index(root: Path, wheels: list[Path]) -> str:
    """The wheels (hard links) indexed under ``root/pypi`` by ``patched-wheels index``, the workspace's
    ``.bazelignore`` and ``.bazelrc``; the index's URL."""
    pypi = root / "pypi"
    pypi.mkdir(parents=True)
    for wheel in wheels:
        os.link(wheel, pypi / wheel.name)
    environment = os.environ | {"PYTHONPATH": str(REPO / "python")}
    subprocess.run(
        [sys.executable, "-m", "patched_wheels", "index", str(pypi)], env=environment, check=True, capture_output=True
    )
    (root / ".bazelignore").write_text("pypi\nrpw-cache\n", encoding="utf-8")
    (root / ".bazelrc").write_text(
        f"common --repo_env=RULES_PATCHED_WHEELS_CACHE={root / 'rpw-cache'}\n"
        "common --repository_cache=\n"  # no copy of gigabytes of wheels outliving the output base
        "test --test_output=errors\n",
        encoding="utf-8",
    )
    return (pypi / "simple").as_uri()


def write_workspace(root: Path, stack: Stack, wheels: list[Path]) -> None:
    """The workspace: the wheels indexed under ``pypi/``, a hashed lock, MODULE and BUILD."""
    index_url = local_index(root, wheels)
    (root / "requirements_lock.txt").write_text(lock_text(wheels), encoding="utf-8")
    wanted = Requirement(stack.requirements[0])
    extras = json.dumps([f"{wanted.name}[{','.join(sorted(wanted.extras))}]"]) if wanted.extras else "[]"
    # Both name the root's extras (the lock's own fact, which pip_closure.json needs); plain restores none.
    settings = {"plain": f"extras = {extras}, restore_extras = False", "patched": f"extras = {extras}"}
    indexes = "".join(
        f'patched.index(name = "{hub}", requirements_lock = "//:requirements_lock.txt", index_url = "{index_url}", {settings[hub]})\n'
        for hub in HUBS
    )
    (root / "MODULE.bazel").write_text(
        module_start(f"Generated by benchmarks/compat_bazel.py for {stack.name}.", "rpw_compat")
        + f"{stanza(stack)}\n{indexes}"
        f"use_repo(patched, {', '.join(json.dumps(hub) for hub in HUBS)})\n\n"
        + pip_hubs({f"pypi_{hub}": f"@{hub}//:requirements_lock.txt" for hub in HUBS}),
        encoding="utf-8",
    )
    loads = "".join(
        f'load("@pypi_{hub}//:requirements.bzl", {hub}_all_requirements = "all_requirements", {hub}_requirement = "requirement")\n'
        for hub in HUBS
    )
    # requirement(ROOT) brings no companion: its test runs the stack's own probe.
    probes = {"all": stack.measured_probe, "requirement": stack.probe}
    tests = "".join(
        f'\nlayout_test(\n    name = "{hub}_{kind}_layout_test",\n    deps = {deps.format(hub=hub, root=json.dumps(wanted.name))},\n'
        f'    probe = {json.dumps(probes[kind])},\n    pip_closure = "@{hub}//:pip_closure.json",\n    timeout = "long",\n)\n'
        for hub in HUBS
        for kind, deps in KINDS.items()
    )
    (root / "BUILD.bazel").write_text(
        f'{loads}load("@rules_patched_wheels//python:defs.bzl", "layout_test")\n\n'
        f'exports_files(["requirements_lock.txt"])\n{tests}',
        encoding="utf-8",
    )


def interpreter(version: str) -> str:
    """The interpreter a stack's workspace runs for CPython ``version``: the host's ``python3`` (3.11, the offline
    launcher's), else pyenv's newest ``version`` by absolute path (bound into the offline root: ``RPW_BIND_DIRS``,
    set by :func:`run_lock_stage`)."""
    if version == "3.11":
        return "python3"
    found = sorted(
        (Path.home() / ".pyenv" / "versions").glob(f"{version}.*/bin/python{version}"),
        key=lambda path: [int(part) for part in path.parents[1].name.split(".") if part.isdigit()],
    )
    if not found:
        raise ValueError(f"no CPython {version} under ~/.pyenv/versions for the stack's workspace")
    return str(found[-1])


def interpreter_attribute(python: str) -> str:
    """What a ``patched.index`` gains for the interpreter ``python`` (:func:`interpreter`): nothing for the host's
    ``python3``; another is the one attribute more a user of it writes."""
    return "" if python == "python3" else f", python_interpreter = {json.dumps(python)}"


def python_version_flag(version: str) -> str:
    """The ``.bazelrc`` line a workspace for CPython ``version`` needs: rules_python's ``python_version`` flag,
    whose default (3.11) its hubs' aliases select wheels for otherwise; none for 3.11."""
    return "" if version == "3.11" else f"common --@rules_python//python/config_settings:python_version={version}\n"


def bind_interpreter(python: str) -> None:
    """Bind the folder of the interpreter ``python`` into the offline launcher's root (``RPW_BIND_DIRS``): its root
    sees only the host's Python 3.11 unless told."""
    if python != "python3":
        os.environ["RPW_BIND_DIRS"] = " ".join(
            filter(None, (os.environ.get("RPW_BIND_DIRS"), str(Path(python).parents[1])))
        )


def compile_lock(requirements: Sequence[str], root: Path, version: str = "3.11") -> Path:
    """``root/requirements_lock.txt``: the user's own ``requirements.in`` (``requirements``, root extras and all)
    compiled as a new user does, ``uv pip compile --generate-hashes`` for CPython 3.11 on manylinux x86-64 (uv
    beside this interpreter, as tools/dev-env installs it). Such a lock records no root's extras."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "requirements.in").write_text("".join(f"{line}\n" for line in requirements), encoding="utf-8")
    uv = Path(sys.executable).with_name("uv")
    command = [str(uv), "pip", "compile", "--quiet", "--generate-hashes", "--python-version", version]
    command += ["--python-platform", "x86_64-manylinux_2_28", "requirements.in", "-o", "requirements_lock.txt"]
    subprocess.run(command, cwd=root, check=True)
    return root / "requirements_lock.txt"


# The probe a lock stage's py_test runs, then the wheels' libraries (under the runfiles' external repositories)
# it mapped, by name: what requirement(ROOT) alone wires (also bench_e2e.py's lock stacks' test).
PROBE_TEST = """\
import atexit, os

def _mapped():
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        paths = {line.split(maxsplit=5)[5].strip() for line in maps if len(line.split(maxsplit=5)) == 6}
    names = sorted({os.path.basename(path) for path in paths if "/site-packages/" in path and ".so" in path})
    print(f"probe_test: mapped {len(names)} of the wheels' libraries: {' '.join(names)}", flush=True)

atexit.register(_mapped)
"""


def write_lock_workspace(root: Path, stack: Stack, wheels: list[Path], lock: Path) -> None:
    """The lock stage's workspace in ``root``: :func:`compile_lock`'s ``lock``, the wheels indexed under
    ``pypi/``, both hubs of the lock (:data:`LOCK_HUBS`; the index is the local one, the only attribute beyond
    the lock), and each hub's py_test and layout_test of ``[requirement(ROOT)]`` with the stack's probe."""
    index_url = local_index(root, wheels)
    shutil.copyfile(lock, root / "requirements_lock.txt")
    python = interpreter(stack.python)
    chosen = interpreter_attribute(python)
    indexes = "".join(
        f'patched.index(name = "{hub}", requirements_lock = "//:requirements_lock.txt", index_url = "{index_url}"{chosen}{more})\n'
        for hub, more in LOCK_HUBS.items()
    )
    (root / "MODULE.bazel").write_text(
        module_start(
            f"Generated by benchmarks/compat_bazel.py (the lock stage) for {stack.name}.",
            "rpw_compat_lock",
            python=python,
        )
        + f"{indexes}use_repo(patched, {', '.join(map(json.dumps, LOCK_HUBS))})\n\n"
        + pip_hubs({f"pypi_{hub}": f"@{hub}//:requirements_lock.txt" for hub in LOCK_HUBS}, stack.python, python),
        encoding="utf-8",
    )
    with open(root / ".bazelrc", "a", encoding="utf-8") as bazelrc:
        bazelrc.write(python_version_flag(stack.python))
    (root / "probe_test.py").write_text(PROBE_TEST + stack.probe + "\n", encoding="utf-8")
    root_name = json.dumps(Requirement(stack.requirements[0]).name)
    loads = "".join(f'load("@pypi_{hub}//:requirements.bzl", {hub}_requirement = "requirement")\n' for hub in LOCK_HUBS)
    tests = "".join(
        f'\npy_test(\n    name = "{hub}_probe_test",\n    srcs = ["probe_test.py"],\n    main = "probe_test.py",\n'
        f'    deps = [{hub}_requirement({root_name})],\n    timeout = "long",\n)\n'
        f'\nlayout_test(\n    name = "{hub}_layout_test",\n    deps = [{hub}_requirement({root_name})],\n'
        f'    probe = {json.dumps(stack.probe)},\n    pip_closure = "@{hub}//:pip_closure.json",\n    timeout = "long",\n)\n'
        for hub in LOCK_HUBS
    )
    (root / "BUILD.bazel").write_text(
        f'{loads}load("@rules_python//python:py_test.bzl", "py_test")\n'
        f'load("@rules_patched_wheels//python:defs.bzl", "layout_test")\n\n'
        f'exports_files(["requirements_lock.txt"])\n{tests}',
        encoding="utf-8",
    )


@dataclass(frozen=True)
class LayoutTest:
    """One hub's layout_test: its status and what its log says each layout mapped."""

    status: str
    test_layout: tuple[int, int] | None
    """(mapped, of the wheels' libraries) in the test's own runfiles."""
    one_site_packages: tuple[int, int] | None
    first_error: str

    def cell(self) -> str:
        if self.test_layout is None or self.one_site_packages is None:
            return f"{self.status} (no counts in its log: {self.first_error})"
        (mapped, total), (venv, _) = self.test_layout, self.one_site_packages
        return f"{self.status}: {mapped} of {total} mapped (one site-packages: {venv})"


@dataclass(frozen=True)
class BazelStage:
    returncode: int
    tests: dict[str, LayoutTest]
    errors: list[str]
    """The ``patched-wheels: error:`` lines Bazel printed (a failing hub: exactly one)."""
    wall: float
    cpu: float
    """Seconds of CPU: the Bazel server with everything it waited for (fetches, the hub's probe, the tests)."""
    warnings: list[str] = field(default_factory=list)
    """The hubs' ``patched-wheels: warning:`` lines, as Bazel printed them."""
    hubs: dict[str, float] = field(default_factory=dict)
    """The lock stage: seconds to build each hub cold (``bazel build @HUB//:pip_closure.json``, in order)."""
    mapped: dict[str, str] = field(default_factory=dict)
    """The lock stage: each py_test's ``probe_test: mapped ...`` line."""
    observed: list[str] = field(default_factory=list)
    """The lock stage: what the hubs' probe runs recorded (:func:`observations`), one line per observation."""


def _server_cpu(root: Path) -> float:
    """CPU seconds of the workspace's Bazel server and its reaped children (it stays up until shutdown)."""
    pid = subprocess.run([str(BAZEL), "info", "server_pid"], cwd=root, capture_output=True, text=True, check=False)
    try:
        own, children, _ = process_cpu(int(pid.stdout.split()[-1]))
    except (IndexError, ValueError, OSError):
        return float("nan")
    return own + children


def _layout_test(root: Path, name: str, statuses: dict[str, str]) -> LayoutTest:
    log = root / "bazel-testlogs" / name / "test.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    counts = [(int(mapped), int(total)) for mapped, total in _MAPPED.findall(text)]
    error = re.search(r"first error: (.*)", text)
    verdict = re.search(r"layout_test: FAILED: deps lack.*", text) or re.search(
        r"layout_test: (?:PASSED|FAILED).*", text
    )
    detail = (error[1] if error else verdict[0] if verdict else text.strip()[-300:])[:300]
    return LayoutTest(
        statuses.get(f"//:{name}", "NO STATUS"),
        counts[0] if counts else None,
        counts[1] if len(counts) > 1 else None,
        detail,
    )


def test_names() -> list[str]:
    return [f"{hub}_{kind}_layout_test" for hub in HUBS for kind in KINDS]


def run_stage(stack: Stack, wheels: list[Path], root: Path) -> BazelStage:
    """Write the workspace in ``root``, `bazel test` both layout tests, read their logs, expunge."""
    use_offline_modules()
    write_workspace(root, stack, wheels)
    return _bazel_test(root, test_names(), ())


def lock_test_names() -> list[str]:
    return [f"{hub}_{kind}_test" for hub in LOCK_HUBS for kind in ("probe", "layout")]


def run_lock_stage(stack: Stack, wheels: list[Path], lock: Path, root: Path) -> BazelStage:
    """The lock stage in ``root`` of :func:`compile_lock`'s ``lock``, whose pins are ``wheels``: each hub
    built cold on its own (timed), then `bazel test` of both hubs' py_test and layout_test; expunge."""
    use_offline_modules()
    write_lock_workspace(root, stack, wheels, lock)
    bind_interpreter(interpreter(stack.python))
    stage = _bazel_test(root, lock_test_names(), tuple(LOCK_HUBS))
    try:
        observed = observations(root / "rpw-cache", wheels, stack.project)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:  # the tests' verdicts still count
        observed = [f"cannot read the hubs' observations: {error!r}"]
    return dataclasses.replace(stage, observed=observed)


def _soname(wheel: Path, member: str) -> str:
    """The DT_SONAME of ``member`` of ``wheel`` (binutils' readelf), else its file name: how a verified row
    records a library (``recorded``)."""
    with zipfile.ZipFile(wheel) as archive, tempfile.NamedTemporaryFile() as copy:
        with archive.open(member) as source:
            shutil.copyfileobj(source, copy)
        copy.flush()
        dynamic = subprocess.run(["readelf", "-d", copy.name], capture_output=True, text=True, check=False).stdout
    found = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic)
    return found[1] if found else Path(member).name


def observations(cache: Path, wheels: list[Path], project: str) -> list[str]:
    """The probe observations the hubs wrote to their cache (``RULES_PATCHED_WHEELS_CACHE``): per observation,
    the SONAMEs it mapped in one site-packages that are not Python extension modules nor libraries of
    ``project``'s own wheel (the preload is of the other wheels'), and of those the ones it found needing
    RTLD_GLOBAL, as a verified row's ``recorded`` and ``recorded_global`` take them."""
    by_digest = {
        _sha256(wheel): wheel
        for wheel in wheels
        if canonicalize_name(parse_wheel_filename(wheel.name)[0]) != canonicalize_name(project)
    }
    lines = []
    for entry in sorted(cache.rglob("observed/*.json")) if cache.is_dir() else []:
        value = json.loads(entry.read_text(encoding="utf-8"))
        extensions = {tuple(row) for row in value["extensions"]}

        def sonames(rows: list[list[str]], extensions: set[tuple[str, ...]] = extensions) -> list[str]:
            return sorted(
                {
                    _soname(by_digest[digest], path)
                    for digest, path in rows
                    if (digest, path) not in extensions and digest in by_digest
                }
            )

        lines.append(
            f"probe {value['probe']!r}, exit {value['returncode']}: recorded = {json.dumps(sonames(value['mapped']))}"
            f", recorded_global = {json.dumps(sonames(value['global']))}"
        )
    return lines


def _bazel_test(root: Path, names: list[str], hubs: Sequence[str]) -> BazelStage:
    """In the workspace ``root``: build each of ``hubs`` (timed), `bazel test` ``names``, read the logs, expunge."""
    started = time.monotonic()
    try:
        built = {}
        with open(root / "test.log", "w", encoding="utf-8") as out:
            for hub in hubs:
                begun = time.monotonic()
                command = [str(BAZEL), "build", f"@{hub}//:pip_closure.json"]
                subprocess.run(command, cwd=root, stdout=out, stderr=subprocess.STDOUT, check=False)
                built[hub] = time.monotonic() - begun
            command = [str(BAZEL), "test", "--keep_going", *(f"//:{name}" for name in names)]
            returncode = subprocess.run(command, cwd=root, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
        wall = time.monotonic() - started
        cpu = _server_cpu(root)
        output = (root / "test.log").read_text(encoding="utf-8", errors="replace")
        statuses = dict(_STATUS.findall(output))
        tests = {name: _layout_test(root, name, statuses) for name in names}
        errors = [line.strip() for line in output.splitlines() if "patched-wheels: error:" in line]
        # From the helper's progress on (Bazel prefixes the file and line that printed it).
        warnings = [
            line[line.find("rules_patched_wheels: ") :]
            for line in output.splitlines()
            if "patched-wheels: warning:" in line
        ]
        mapped = {}
        for name in names:
            log = root / "bazel-testlogs" / name / "test.log"
            found = re.search(r"probe_test: mapped .*", log.read_text("utf-8", "replace")) if log.is_file() else None
            if found:
                mapped[name] = found[0]
        return BazelStage(returncode, tests, errors, wall, cpu, warnings, built, mapped)
    finally:
        # Also stops the server (a `shutdown` after it would start a client that leaves an empty output base).
        subprocess.run([str(BAZEL), "clean", "--expunge"], cwd=root, capture_output=True, check=False)


def report(stage: BazelStage) -> str:
    lines = [
        f"  bazel (rules_python {RULES_PYTHON}, one directory per wheel): exit {stage.returncode}, {stage.wall:.0f} s wall, {stage.cpu:.0f} s CPU"
    ]
    lines += [
        f"    {name}: {test.status}; {stage.mapped[name]}"
        if name in stage.mapped
        else f"    {name}: {test.cell()}; first error: {test.first_error or '-'}"
        for name, test in stage.tests.items()
    ]
    lines += [f"    error line: {line}" for line in stage.errors]
    lines += [f"    hub {hub} built cold: {seconds:.0f} s" for hub, seconds in stage.hubs.items()]
    lines += [f"    warning line: {line}" for line in stage.warnings]
    lines += [f"    observed: {line}" for line in stage.observed]
    return "\n".join(lines)
