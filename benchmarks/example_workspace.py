"""The root torch example as a throwaway workspace, and a timed `tools/bazel` command in it.

Shared by the benchmarks that drive Bazel on the example (bench_example_rules_python.py, bench_e2e.py), so
both build exactly what the README's bzlmod example tells users to write, from the same copy of the example.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple, Protocol, Sequence

from benchmarks.harness import children_cpu

REPO = Path(__file__).resolve().parents[1]
BAZEL = REPO / "tools" / "bazel"
TOOLCHAIN = (REPO / "tests" / "bazel" / "templates" / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8")


def use_offline_modules() -> None:
    """Point the offline launcher at the CI's module archives unless the caller chose others."""
    os.environ.setdefault("RPW_BAZEL_MODULES", str(REPO.parent / "shared" / "bazel-modules"))


def adapt_module(text: str, release: str, module: Path = REPO) -> str:
    """The example's MODULE.bazel for ``release`` (only what docs/rules-python.md's table says differs), using
    the checkout ``module`` as rules_patched_wheels."""
    text = text.replace(
        'bazel_dep(name = "rules_python", version = "0.22.1")',
        f'bazel_dep(name = "rules_python", version = "{release}")',
    )
    own_module = re.search(r"^module\(.*?^\)\n", text, flags=re.MULTILINE | re.DOTALL)
    if own_module is None:
        raise ValueError("the example's MODULE.bazel has no module(...) call")
    text = text.replace(
        own_module.group(0),
        'module(name = "rpw_example")\n\nbazel_dep(name = "rules_patched_wheels", version = "0.1.0")\n'
        f'local_path_override(module_name = "rules_patched_wheels", path = "{module}")\n',
    )
    text = text.replace('use_extension("//', 'use_extension("@rules_patched_wheels//')  # the module's extensions
    if release.split(".")[0] == "0":
        return text
    text = text.replace("\npatched = use_extension", "\n" + TOOLCHAIN + "\npatched = use_extension", 1)
    for hub in ("pypi", "pypi_split"):
        text = text.replace(
            f'pip.parse(\n    name = "{hub}",',
            f'pip.parse(\n    hub_name = "{hub}",\n    python_version = "3.11",\n    python_interpreter = "python3",',
        )
    return text


def make_workspace(root: Path, release: str, module: Path = REPO) -> None:
    """A copy of the example in ``root`` that uses ``module`` (default: this checkout) as the module
    `rules_patched_wheels` (local_path_override), so it shares nothing with the checkout's own output base."""
    for folder in ("calculator", "patches", "third_party"):
        shutil.copytree(REPO / folder, root / folder)
    # The example loads the module's rules from its own repository (it is the module); the copy is not.
    for build in (root / "calculator").rglob("BUILD.bazel"):
        build.write_text(
            build.read_text(encoding="utf-8").replace('load("//python:', 'load("@rules_patched_wheels//python:'),
            encoding="utf-8",
        )
    (root / "MODULE.bazel").write_text(
        adapt_module((REPO / "MODULE.bazel").read_text(encoding="utf-8"), release, module), encoding="utf-8"
    )
    (root / "BUILD.bazel").write_text("", encoding="utf-8")
    shutil.copyfile(REPO / ".bazelrc", root / ".bazelrc")


class Timed(NamedTuple):
    """One `tools/bazel` command: exit status, stdout + stderr, wall seconds, and the CPU seconds of the
    processes it waited for (the launcher and the Bazel client; the server is a daemon, not among them)."""

    code: int
    output: str
    wall: float
    cpu: float


def run(root: Path, *args: str, environment: dict[str, str] | None = None) -> Timed:
    """`tools/bazel ARGS` in ``root``, with ``environment`` added to this process's."""
    before = children_cpu()
    start = time.perf_counter()
    completed = subprocess.run(
        [str(BAZEL), *args], cwd=root, capture_output=True, text=True, env={**os.environ, **(environment or {})}
    )
    wall = time.perf_counter() - start
    return Timed(completed.returncode, completed.stdout + completed.stderr, wall, children_cpu() - before)


class Workspace(Protocol):
    """What remove_workspaces needs of a benchmark's workspace: its root and its own output base."""

    root: Path
    output_base: Path


def remove_workspaces(workspaces: Sequence[Workspace], work: Path) -> None:
    """Expunge and stop each workspace's Bazel, then delete the folder of their output bases and ``work``
    (the benchmarks' output bases sit side by side in one folder; each is gigabytes)."""
    for workspace in workspaces:
        run(workspace.root, f"--output_base={workspace.output_base}", "clean", "--expunge")
        run(workspace.root, f"--output_base={workspace.output_base}", "shutdown")
    shutil.rmtree(workspaces[0].output_base.parent, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
