"""The README's MODULE.bazel snippet builds as written with rules_python 2.3.2.

The snippet (the first ```starlark block of README.md) becomes the workspace's MODULE.bazel, and its
`# BUILD.bazel:` comment the BUILD file; the test fills in a tiny lock (a synthetic `torch` wheel, pure
Python, on a `file://` fake PyPI). What the offline launcher cannot do as an online user does is
substituted, and only that (each substitution below fails the test when the README no longer holds the text
it replaces, so the README cannot drift away from what is built):

1. `python.toolchain(python_version = "3.11")` downloads a hermetic Python from GitHub: its three lines
   become rules_python's local toolchain on the host's Python 3.11 (as the matrix registers it) and a
   repository `python_3_11_host` whose `:python` is that interpreter, the label the snippet gives the hub;
2. `pip.parse` then finds no `python_3_11_host` among the python extension's interpreters: it is given
   that label as `python_interpreter_target`, as the python extension would;
3. the hub reads the fake PyPI (`index_url`) instead of pypi.org's torch;
4. `rules_patched_wheels` comes from this checkout (`local_path_override`, as docs/release.md's
   `archive_override` would).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.bazelworkspace import (
    BAZEL,
    CACHE_DIR,
    REPO_ROOT,
    TEMPLATES,
    BazelWorkspace,
    summary_statuses,
    write_lock,
)
from support.wheelbuilder import build_wheel

pytestmark = pytest.mark.bazel

PYTHON_BLOCK = """\
python = use_extension("@rules_python//python/extensions:python.bzl", "python")
python.toolchain(python_version = "3.11")
use_repo(python, "python_3_11_host")
"""
HOST_PYTHON_BZL = """\
def _impl(rctx):
    rctx.symlink(rctx.which("python3"), "python")
    rctx.file("BUILD.bazel", 'exports_files(["python"])\\n')

host_python = repository_rule(implementation = _impl)
"""
HOST_PYTHON = """\
host_python = use_repo_rule("//:host_python.bzl", "host_python")
host_python(name = "python_3_11_host")
"""
TEST = """\
import importlib.metadata

import torch

assert torch.ANSWER == 42, torch.ANSWER
assert importlib.metadata.version("torch") == "2.1.0+stripe.5", importlib.metadata.version("torch")
print("patched torch", importlib.metadata.version("torch"))
"""


def readme_snippet() -> tuple[str, str]:
    """The README's MODULE.bazel block and the BUILD file its `# BUILD.bazel:` comment holds."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```starlark\n(.*?)```", readme, flags=re.S)
    assert block, "README.md: no ```starlark block"
    module, marker, build = block.group(1).partition("# BUILD.bazel: ")
    assert marker, "README.md: the snippet has no `# BUILD.bazel:` comment"
    return module, re.sub(r"^#\s+", "", build, flags=re.M)


def substitute(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"README.md's snippet no longer holds {old!r} once"
    return text.replace(old, new)


def _workspace(root: Path) -> None:
    module, build = readme_snippet()
    toolchain = (TEMPLATES / "matrix" / "toolchain.tmpl").read_text(encoding="utf-8")
    module = substitute(module, PYTHON_BLOCK, toolchain + HOST_PYTHON)
    module = substitute(
        module,
        'pip.parse(hub_name = "pypi_deps", python_version = "3.11", ',
        'pip.parse(hub_name = "pypi_deps", python_version = "3.11", '
        'python_interpreter_target = "@python_3_11_host//:python", ',
    )
    pypi = root / "pypi"
    module = substitute(
        module,
        '    requirements_lock = "//third_party:requirements_lock.txt",\n',
        f'    requirements_lock = "//third_party:requirements_lock.txt",\n    index_url = "{(pypi / "simple").as_uri()}",\n',
    )
    module += f'local_path_override(module_name = "rules_patched_wheels", path = "{REPO_ROOT}")\n'
    (root / "MODULE.bazel").write_text(module, encoding="utf-8")
    (root / "BUILD.bazel").write_text(build, encoding="utf-8")
    (root / "host_python.bzl").write_text(HOST_PYTHON_BZL, encoding="utf-8")
    (root / "t.py").write_text(TEST, encoding="utf-8")
    (root / ".bazelignore").write_text(f"pypi\nlogs\n{CACHE_DIR}\n", encoding="utf-8")
    (root / ".bazelrc").write_text(
        f"startup --max_idle_secs=900\ncommon --repo_env=RULES_PATCHED_WHEELS_CACHE={root / CACHE_DIR}\n"
        "test --test_output=errors\n",
        encoding="utf-8",
    )
    pypi.mkdir()
    wheel = build_wheel(pypi, "torch", "2.1.0", {"torch/__init__.py": b"ANSWER = 42\n"})
    subprocess.run([sys.executable, "-m", "patched_wheels", "index", str(pypi)], check=True, capture_output=True)
    (root / "third_party").mkdir()
    (root / "third_party" / "BUILD.bazel").write_text("", encoding="utf-8")
    write_lock([wheel], root / "third_party" / "requirements_lock.txt")
    (root / "logs").mkdir()


def test_the_readme_snippet_builds_with_rules_python_2_3_2(tmp_path: Path) -> None:
    """Fails where the README's form does not build on 2.3.2: `pip.parse(name = ...)`, no registered Python."""
    if not os.access(BAZEL, os.X_OK):
        pytest.skip(f"{BAZEL} is not executable")
    root = tmp_path / "ws"
    root.mkdir()
    _workspace(root)
    assert 'bazel_dep(name = "rules_python", version = "2.3.2")' in (root / "MODULE.bazel").read_text()
    workspace = BazelWorkspace(root, root / "logs")
    try:
        result = workspace.run("test", "//:t")
        assert summary_statuses(result.output).get("//:t") == "PASSED", result.tail()
        assert "patched torch 2.1.0+stripe.5" in workspace.test_log("t")
    finally:
        workspace.shutdown()
