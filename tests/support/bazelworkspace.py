"""Synthetic Bazel workspaces that use the rules on the fake CUDA wheels, and a way to drive them.

Each workspace gets its own "PyPI": the wheels of ``tests/support/fakecuda.py`` indexed by the real
``patched-wheels index`` and served as ``file://`` URLs, so the rules resolve every pin through the
index's simple pages exactly as they do against pypi.org. Starting Bazel (a server, rules_python,
pip installs) costs far more than any single assertion, so there are only two workspaces, one per
mode, each shared by a whole test module; tests that need different inputs use extra hubs declared
up front rather than new workspaces.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import string
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
BAZEL = REPO_ROOT / "tools" / "bazel"
TEMPLATES = REPO_ROOT / "tests" / "bazel" / "templates"

from . import (
    cyclefixture,
    extrasfixture,
    fakecuda,
    rpathfixture,
    stackshapes,
)
from .indexfixtures import sha256_of  # re-exported to the Bazel tests
from .uvfixture import compile_lock, serve_over_http, uv_locks  # noqa: F401  (serve_over_http: re-exported to the Bazel tests)

# Must match the `suffix` / `split_into` the templates give the patched wheels.
SUFFIX = "test.1"
CACHE_DIR = "rpw-cache"  # RULES_PATCHED_WHEELS_CACHE of every test workspace, below its root
SPLIT_SIBLING = "faketorch-libs"
SPLIT_MOVED_FROM = fakecuda.LIBRARY_PATHS["faketorch"]
# split.py's layout: a moved `<pkg>/lib/libx.so` lands at `<sibling distribution>/lib/libx.so`.
SPLIT_MOVED_TO = "faketorch_libs/lib/libfaketorch.so"
# A library no layout has (a GPU driver on a machine without one): layout_test's probe that fails alike in both.
ABSENT_DRIVER = "libfake_driver_absent.so.1"


def summary_statuses(output: str) -> dict[str, str]:
    """`//:target -> PASSED|FAILED|...` from the summary `bazel test` prints."""
    return dict(re.findall(r"^(//\S+)\s+(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS)\b", output, re.MULTILINE))


def process_summary(output: str) -> dict[str, int]:
    """Bazel's process summary (`INFO: 3 processes: 2 remote cache hit, 1 internal.`) as kind -> count."""
    (summary,) = re.findall(r"^INFO: \d+ process(?:es)?: (.*)\.$", output, re.MULTILINE)
    return {kind: int(count) for count, kind in re.findall(r"(\d+) ([a-z][a-z -]*[a-z])", summary)}


# What e2e/bzlmod's `local_path_override(path = "../..")` needs of a checkout: the module and its sources.
CHECKOUT = ("MODULE.bazel", "BUILD.bazel", ".bazelignore", "python", "e2e")


def copy_checkout(destination: Path) -> Path:
    """A copy of the module and e2e/ at ``destination``, as another clone of the repository would be."""
    destination.mkdir(parents=True)
    for name in CHECKOUT:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(source, destination / name)
    return destination


@contextlib.contextmanager
def bound_scratch(prefix: str) -> Iterator[Path]:
    """A new folder (removed afterwards) that the offline launcher binds into its root, for workspaces whose module
    lies folders above them: the launcher binds the workspace alone. A name never used before, outside pytest's
    folders: the launcher's namespace keeps its binds, and nothing can be bound below one whose directory was
    deleted (a rerun of pytest with the same --basetemp)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    previous = os.environ.get("RPW_BIND_DIRS")
    os.environ["RPW_BIND_DIRS"] = " ".join(filter(None, [previous, str(directory)]))
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop("RPW_BIND_DIRS", None)
        else:
            os.environ["RPW_BIND_DIRS"] = previous
        shutil.rmtree(directory)


@dataclass(frozen=True)
class BazelResult:
    args: Sequence[str]
    returncode: int
    output: str
    log: Path

    def tail(self, lines: int = 60) -> str:
        return f"`bazel {' '.join(self.args)}` exited {self.returncode}; last lines of {self.log}:\n" + "\n".join(
            self.output.splitlines()[-lines:]
        )


# Run by `unshare --net` in a new network namespace, before Bazel: brings its loopback up (Bazel's client talks
# to its server over 127.0.0.1; nothing else is reachable), then runs the command (argv[1:]). Python's ioctl
# rather than `ip link set lo up`, which a minimal CI image may lack.
_LOOPBACK_UP = """\
import fcntl, os, socket, struct, sys
with socket.socket() as s:
    flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0)))[1]  # SIOCGIFFLAGS
    fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))  # SIOCSIFFLAGS: IFF_UP
os.execvp(sys.argv[1], sys.argv[1:])
"""
WITHOUT_NETWORK = ("unshare", "--net", "--", sys.executable, "-c", _LOOPBACK_UP)
"""A ``launcher`` of :class:`BazelWorkspace`: Bazel (client and the server it starts) with no network but loopback."""


class BazelWorkspace:
    """A generated workspace and the `tools/bazel` commands run in it (output kept in ``logs/``)."""

    def __init__(self, root: Path, logs: Path, *, config: Sequence[str] = (), launcher: Sequence[str] = ()) -> None:
        self.root = root
        self.logs = logs
        self.config = tuple(config)  # flags every command of this workspace needs, e.g. --config=workspace
        self.launcher = tuple(launcher)  # what runs tools/bazel, e.g. WITHOUT_NETWORK
        self._count = 0
        self._output_base: Path | None = None

    def run(self, *args: str, timeout: float = 900) -> BazelResult:
        self._count += 1
        log = self.logs / f"{self._count:02d}-{args[0]}.log"
        with log.open("w", encoding="utf-8") as out:
            completed = subprocess.run(
                [*self.launcher, str(BAZEL), *args],
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        return BazelResult(args, completed.returncode, log.read_text(encoding="utf-8", errors="replace"), log)

    def ok(self, *args: str) -> BazelResult:
        result = self.run(*args)
        assert result.returncode == 0, result.tail()
        return result

    def info(self, key: str) -> Path:
        return Path(self.ok("info", *self.config, key).output.strip().splitlines()[-1])

    def test_log(self, target: str) -> str:
        """The test.log of `//:target` from the last `bazel test` that ran it."""
        return (self.root / "bazel-testlogs" / target / "test.log").read_text(encoding="utf-8", errors="replace")

    @property
    def output_base(self) -> Path:
        """Fixed by the workspace path, so it survives `clean --expunge`; asked once (each command costs seconds)."""
        if self._output_base is None:
            self._output_base = self.info("output_base")
        return self._output_base

    def hub(self, name: str) -> Path:
        """The fetched hub repository `name` (canonical names differ between Bazel versions and modes)."""
        external = self.output_base / "external"
        found = [path for path in external.glob(f"*{name}") if re.search(rf"(^|[~+]){name}$", path.name)]
        found = [path for path in found if (path / "requirements_lock.txt").is_file()]
        assert len(found) == 1, f"hub {name}: expected one fetched repository under {external}, found {found}"
        return found[0]

    def shutdown(self) -> None:
        """Stop the server and drop the output base: every test run makes a new workspace path."""
        self.run("clean", "--expunge", timeout=300)


@dataclass(frozen=True)
class FakePypi:
    directory: Path
    wheels: fakecuda.FakeCudaWheels
    rpath_wheel: Path
    """``pkg``, whose ``_ext.so`` cannot find ``pkg.libs/libdep.so.1`` until the hub edits its RPATH."""
    runtime: fakecuda.RuntimeLoadedWheels
    plugin: stackshapes.Stack
    """A CUDA plugin in a namespace package that opens other wheels' libraries itself (JAX's shape)."""
    split_plugin: stackshapes.Stack
    """JAX 0.7's shape: the plugin module shipped by another project than the one users name."""
    extras: extrasfixture.ExtrasWheels
    """``app`` -> ``toolkit[rt]`` -> ``tk-rt``: a library only an extra on a dependency edge brings."""

    @property
    def index_url(self) -> str:
        return (self.directory / "simple").as_uri()


def index_wheels(directory: Path) -> None:
    """The PEP 503 pages (sha256 fragments) of the wheels in ``directory``, written by the CLI the users run."""
    subprocess.run(
        [sys.executable, "-m", "patched_wheels", "index", str(directory)], check=True, capture_output=True, text=True
    )


def build_fake_pypi(directory: Path) -> FakePypi:
    """The fake CUDA and runtime-loaded wheel sets and the RPATH fixture, indexed by the CLI the users run
    (PEP 503 pages with sha256 fragments)."""
    wheels = fakecuda.build_fake_cuda_wheels(directory)
    rpath_wheel = rpathfixture.build_rpath_wheel(directory)
    runtime = fakecuda.build_runtime_loaded_wheels(directory)
    plugin = stackshapes.build_plugin_stack(directory)
    split_plugin = stackshapes.build_split_plugin_stack(directory)
    extras = extrasfixture.build_extras_wheels(directory)
    index_wheels(directory)
    return FakePypi(directory, wheels, rpath_wheel, runtime, plugin, split_plugin, extras)


def write_lock(wheels: Sequence[Path], path: Path) -> None:
    """A pip-compile style hashed lock of ``wheels`` (no URLs: the rules resolve them)."""
    lines = ["# Hashed lock of fake wheels (generated by tests/bazel/conftest.py).\n"]
    for wheel in sorted(wheels):
        name, version = wheel.name.split("-")[:2]
        lines.append(f"{name.replace('_', '-')}=={version} \\\n    --hash=sha256:{sha256_of(wheel)}\n")
    path.write_text("".join(lines), encoding="utf-8")


def string_template(template: str, values: dict[str, str]) -> str:
    """A template of ``TEMPLATES`` with ``values`` substituted."""
    return string.Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)


def render(template: str, destination: Path, **values: str) -> None:
    """:func:`string_template` written to ``destination``."""
    destination.write_text(string_template(template, values), encoding="utf-8")


def _settings(root: Path) -> None:
    """What every test workspace holds beside its rules: ``.bazelignore``, ``.bazelrc`` and ``logs/``."""
    # The fake PyPI lives inside the workspace so the offline launcher's chroot sees it; not a package.
    # So do the helper's persistent caches (CACHE_DIR): a test starts from none of the user's, and can
    # look at them at the path the helper used, inside the launcher's chroot or not.
    (root / ".bazelignore").write_text(f"pypi\nlogs\nhidden-wheels\n{CACHE_DIR}\n", encoding="utf-8")
    (root / ".bazelrc").write_text(
        "startup --max_idle_secs=900\n"
        f"common --repo_env=RULES_PATCHED_WHEELS_CACHE={root / CACHE_DIR}\n"
        "common:workspace --noenable_bzlmod --enable_workspace\n"
        "test --test_output=errors\n",
        encoding="utf-8",
    )
    (root / "logs").mkdir()


def common_files(root: Path) -> FakePypi:
    root.mkdir(parents=True, exist_ok=True)
    pypi = build_fake_pypi(root / "pypi")
    _settings(root)
    write_lock(pypi.wheels.all, root / "requirements_lock.txt")
    write_lock(pypi.runtime.all, root / "requirements_runtime_lock.txt")
    write_lock(pypi.extras.all, root / "requirements_extras_lock.txt")
    for script in ("check_faketorch.py", "check_answer.py"):
        (root / script).write_text((TEMPLATES / script).read_text(encoding="utf-8"))
    return pypi


def _append_template(destination: Path, template: str, values: dict[str, str]) -> None:
    with destination.open("a", encoding="utf-8") as out:
        out.write(string.Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values))


@dataclass(frozen=True)
class Setup:
    workspace: BazelWorkspace
    pypi: FakePypi


def make_bzlmod_workspace(root: Path) -> Setup:
    """The MODULE.bazel workspace: hubs `fixed`, `original` (control), `split`, `rpath`, `bad`, `runtime`,
    `runtime_original`, `plugin` and `misplaced`."""
    pypi = common_files(root)
    values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX, sibling=SPLIT_SIBLING)
    render("MODULE.bazel.tmpl", root / "MODULE.bazel", **values)
    render("BUILD.bazel.tmpl", root / "BUILD.bazel", expected=str(fakecuda.EXPECTED_ANSWER), **values)
    _append_template(root / "MODULE.bazel", "split.MODULE.bazel.tmpl", values)
    split_values = dict(
        expected=str(fakecuda.EXPECTED_ANSWER),
        moved_from=SPLIT_MOVED_FROM,
        moved_to=SPLIT_MOVED_TO,
        sibling_dist=SPLIT_SIBLING.replace("-", "_"),
    )
    _append_template(root / "BUILD.bazel", "split.BUILD.bazel.tmpl", {**values, **split_values})
    _append_template(root / "MODULE.bazel", "runtime.MODULE.bazel.tmpl", values)
    _append_template(root / "BUILD.bazel", "runtime.BUILD.bazel.tmpl", dict(expected=str(fakecuda.RUNTIME_ANSWER)))
    # The RPATH hub serves a lock of its own: only `pkg`, whose library the hub's `rpath` fixes.
    write_lock([pypi.rpath_wheel], root / "rpath_requirements_lock.txt")
    _append_template(root / "MODULE.bazel", "rpath.MODULE.bazel.tmpl", {**values, "rpath": rpathfixture.FIX})
    _append_template(root / "BUILD.bazel", "rpath.BUILD.bazel.tmpl", dict(expected=str(rpathfixture.EXPECTED_ANSWER)))
    # The plugin hub: preload = "auto" alone preloads what the plugin opens itself (the probe's observation).
    write_lock(pypi.plugin.wheels, root / "plugin_requirements_lock.txt")
    _append_template(root / "MODULE.bazel", "plugin.MODULE.bazel.tmpl", {**values, "package": pypi.plugin.package})
    _append_template(
        root / "BUILD.bazel",
        "plugin.BUILD.bazel.tmpl",
        dict(
            package=pypi.plugin.package,
            expected=str(stackshapes.PLUGIN_ANSWER),
            probe=pypi.plugin.code,
            absent_driver=ABSENT_DRIVER,
        ),
    )
    # Never used by pip.parse: the hub that names the wrong JAX-like project fails, telling the right one.
    write_lock(pypi.split_plugin.wheels, root / "misplaced_requirements_lock.txt")
    _append_template(
        root / "MODULE.bazel", "misplaced.MODULE.bazel.tmpl", {**values, "package": pypi.split_plugin.package}
    )
    _write_does_not_apply_patch(root / "does-not-apply.patch")
    return Setup(BazelWorkspace(root, root / "logs"), pypi)


def _write_does_not_apply_patch(path: Path) -> None:
    """A patch of faketorch/__init__.py whose context is not in the file: a hub patching with it fails."""
    path.write_text(
        "--- a/faketorch/__init__.py\n"
        "+++ b/faketorch/__init__.py\n"
        "@@ -1,3 +1,3 @@\n"
        ' """This line is not in faketorch/__init__.py."""\n'
        "-import ctypes\n"
        "+import ctypes  # patched\n"
        " import os\n",
        encoding="utf-8",
    )


def make_cycles_workspace(root: Path) -> tuple[Setup, Path]:
    """A MODULE.bazel workspace whose lock adds ``fakepil`` (a library cycle, pillow 13's shape) to the fake
    CUDA set: hub `cycles` (faketorch, preload = "auto") and hub `broken` (a patch that does not apply).
    Returns the setup and fakepil's wheel."""
    pypi = common_files(root)
    pil = cyclefixture.build_pillow_shape(pypi.directory).package_wheel
    index_wheels(pypi.directory)
    write_lock([*pypi.wheels.all, pil], root / "requirements_lock.txt")
    values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX)
    render("cycles.MODULE.bazel.tmpl", root / "MODULE.bazel", **values)
    render(
        "cycles.BUILD.bazel.tmpl",
        root / "BUILD.bazel",
        torch_expected=str(fakecuda.EXPECTED_ANSWER),
        pil_expected=str(cyclefixture.PIL_ANSWER),
    )
    _write_does_not_apply_patch(root / "does-not-apply.patch")
    return Setup(BazelWorkspace(root, root / "logs"), pypi), pil


def fixture_uv_locks(root: Path, pypi: FakePypi, http_url: str) -> None:
    """``root/uv.lock`` and ``root/pylock.toml`` of the fake CUDA set, made by uv (see :func:`uv_locks`), and the
    extras set's locks: ``extras_uv.lock``, ``pylock.extras.toml`` and ``requirements_extras_root_lock.txt``."""
    requirements = ["faketorch==2.1.0", *(f"fake-nvidia-{name}" for name in pypi.wheels.nvidia)]
    for made in uv_locks(root / "uvproject", http_url, requirements):
        (root / made.name).write_bytes(made.read_bytes())
    # The extras set's, as extras_uv.lock and pylock.extras.toml (PEP 751's name for a second lock).
    made_uv, made_pylock = uv_locks(root / "uvextras", http_url, ["app==1.0"])
    (root / "extras_uv.lock").write_bytes(made_uv.read_bytes())
    (root / "pylock.extras.toml").write_bytes(made_pylock.read_bytes())
    # The extras set's root toolkit[rt], compiled by uv pip compile (which writes `toolkit==1.0`: no lock
    # records the extra, the hub infers it).
    compiled = compile_lock(root / "uvcompile", pypi.directory, ["toolkit[rt]==1.0"])
    (root / "requirements_extras_root_lock.txt").write_bytes(compiled.read_bytes())


def make_workspace_mode_workspace(root: Path, http_url: str) -> Setup:
    """The legacy WORKSPACE workspace: hubs `fixed` and `runtime` made by the `patched_index` macro, and
    `uvfixed` (from a uv.lock locked against ``http_url``)."""
    pypi = common_files(root)
    values = dict(repo_root=str(REPO_ROOT), index_url=pypi.index_url, suffix=SUFFIX)
    render("WORKSPACE.tmpl", root / "WORKSPACE", **values)
    render(
        "BUILD.bazel.workspace.tmpl",
        root / "BUILD.bazel",
        expected=str(fakecuda.EXPECTED_ANSWER),
        runtime_expected=str(fakecuda.RUNTIME_ANSWER),
        uv_load='load("@pypi_uvfixed//:requirements.bzl", uv_requirement = "requirement")\n',
    )
    fixture_uv_locks(root, pypi, http_url)
    _append_template(root / "WORKSPACE", "uv.WORKSPACE.tmpl", values)
    _append_template(
        root / "BUILD.bazel", "uv.BUILD.bazel.workspace.tmpl", dict(expected=str(fakecuda.EXPECTED_ANSWER))
    )
    return Setup(BazelWorkspace(root, root / "logs", config=["--config=workspace"]), pypi)


def make_fix_line_workspace(root: Path, probe: str) -> BazelWorkspace:
    """The smallest workspace of both modes: one hub `plugin` of the JAX-shaped plugin stack with no
    `patched_wheel`, declared in MODULE.bazel and in WORKSPACE (``--config=workspace``), and a layout_test of it
    whose ``probe`` (a Starlark string literal) fails until the fix line it prints is pasted."""
    root.mkdir(parents=True, exist_ok=True)
    stack = stackshapes.build_plugin_stack(root / "pypi")
    index_wheels(root / "pypi")
    _settings(root)
    write_lock(stack.wheels, root / "plugin_requirements_lock.txt")
    values = dict(repo_root=str(REPO_ROOT), index_url=(root / "pypi" / "simple").as_uri())
    render("fixline.MODULE.bazel.tmpl", root / "MODULE.bazel", **values)
    render("fixline.WORKSPACE.tmpl", root / "WORKSPACE", **values)
    render("fixline.BUILD.bazel.tmpl", root / "BUILD.bazel", probe=probe)
    return BazelWorkspace(root, root / "logs")


# What answer.patch adds to faketorch.answer() in the shared hub: its test passes only if the patch applied.
PATCHED_ANSWER_OFFSET = 1000


def _write_answer_patch(path: Path, torch_wheel: Path) -> None:
    """A unified diff of faketorch/__init__.py (made from the wheel's own file, so it applies strictly) that adds
    PATCHED_ANSWER_OFFSET to what ``answer()`` returns."""
    with zipfile.ZipFile(torch_wheel) as archive:
        original = archive.read("faketorch/__init__.py").decode("utf-8")
    returned = "    return _core.core_answer()\n"
    assert original.count(returned) == 1, original
    patched = original.replace(returned, returned.rstrip("\n") + f" + {PATCHED_ANSWER_OFFSET}\n")
    diff = difflib.unified_diff(
        original.splitlines(keepends=True),
        patched.splitlines(keepends=True),
        "a/faketorch/__init__.py",
        "b/faketorch/__init__.py",
    )
    path.write_text("".join(diff), encoding="utf-8")


def make_shared_hub_workspace(root: Path, pypi: Path, wheels: fakecuda.FakeCudaWheels, module: str) -> BazelWorkspace:
    """A MODULE.bazel workspace of one hub `shared` whose faketorch is patched (``answer.patch``), split into
    SPLIT_SIBLING and preloaded (preload = "auto"); `//:shared_test` (py_test) and `//:shared_layout_test` import
    faketorch through it. ``pypi``: the indexed fake PyPI holding ``wheels``, outside ``root`` so that two
    checkouts name the same index; ``module``: the rules module's path, relative to ``root`` as a checkout has it."""
    root.mkdir(parents=True)
    _settings(root)
    write_lock(wheels.all, root / "requirements_lock.txt")
    (root / "check_faketorch.py").write_text((TEMPLATES / "check_faketorch.py").read_text(encoding="utf-8"))
    _write_answer_patch(root / "answer.patch", wheels.torch)
    values = dict(repo_root=module, index_url=(pypi / "simple").as_uri(), suffix=SUFFIX, sibling=SPLIT_SIBLING)
    render("shared.MODULE.bazel.tmpl", root / "MODULE.bazel", **values)
    render(
        "shared.BUILD.bazel.tmpl",
        root / "BUILD.bazel",
        expected=str(fakecuda.EXPECTED_ANSWER + PATCHED_ANSWER_OFFSET),
        offset=str(PATCHED_ANSWER_OFFSET),
        version=f"{fakecuda.TORCH_VERSION}+{SUFFIX}",
        moved_from=SPLIT_MOVED_FROM,
        moved_to=SPLIT_MOVED_TO,
        sibling_dist=SPLIT_SIBLING.replace("-", "_"),
    )
    return BazelWorkspace(root, root / "logs")
