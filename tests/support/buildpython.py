"""The build's Python as a workspace's registered toolchain, for remote execution: a worker then runs each
py_test under the build's interpreter (an input of the test), not its own python3. Used by
tests/bazel/test_remote_execution.py and benchmarks/bench_remote.py."""

from __future__ import annotations

import sys
from pathlib import Path

BUILD_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the launcher's interpreter's version too
INTERPRETER_TEST = "//build_python:interpreter_test"


BUILD_PYTHON_BZL = '''\
"""The build's Python as a registered toolchain: the interpreter and its standard library are inputs of every
py_test, so a remote worker runs them, not its own python3. Symlinks to a local installation (written by
tests/bazel/test_remote_execution.py); a user's would be rules_python's hermetic toolchain."""

_LEFT_OUT = ["site-packages", "test", "idlelib", "tkinter", "turtledemo", "lib2to3", "__pycache__"]

def _build_python_impl(rctx):
    prefix = rctx.path(rctx.attr.prefix)
    version = rctx.attr.version
    rctx.symlink(prefix.get_child("bin").get_child("python" + version), "bin/python" + version)
    for entry in prefix.get_child("lib").readdir():
        if entry.basename.startswith("libpython"):
            rctx.symlink(entry, "lib/" + entry.basename)
    for entry in prefix.get_child("lib").get_child("python" + version).readdir():
        if entry.basename not in _LEFT_OUT:
            rctx.symlink(entry, "lib/python%s/%s" % (version, entry.basename))
    rctx.file("BUILD.bazel", """\\
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "runtime",
    interpreter = "bin/python%s",
    files = glob(["lib/**"], exclude = ["**/__pycache__/**"]),
    python_version = "PY3",
)

py_runtime_pair(name = "pair", py3_runtime = ":runtime")

toolchain(
    name = "toolchain",
    toolchain = ":pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""" % version)

build_python = repository_rule(
    implementation = _build_python_impl,
    attrs = {"prefix": attr.string(mandatory = True), "version": attr.string(mandatory = True)},
)
'''

INTERPRETER_TEST_PY = """\
import sys

expected = sys.argv[1]
actual = "%d.%d" % sys.version_info[:2]
print("interpreter:", sys.executable, actual)
if actual != expected or sys.executable.startswith("/usr/"):
    sys.exit(f"ran under {sys.executable} (Python {actual}), not the build's Python {expected}")
"""


def relocatable_python(destination: Path) -> Path:
    """This interpreter's installation at ``destination``: its ``lib`` a link to the real one, its executable a copy
    whose RUNPATH (the installation's absolute ``lib``, which a worker lacks) reads ``$ORIGIN/../lib``: the same
    ELF edit in place, NUL-padded, that a relocatable Python's build makes."""
    prefix, name = Path(sys.base_prefix), f"python{BUILD_PYTHON}"
    (destination / "bin").mkdir(parents=True)
    (destination / "lib").symlink_to(prefix / "lib")
    executable = (prefix / "bin" / name).read_bytes()
    runpath = f"{prefix}/lib".encode() + b"\0"
    if runpath in executable:  # linked to libpython (--enable-shared)
        assert executable.count(runpath) == 1, f"{prefix}/bin/{name}: its prefix appears more than once"
        executable = executable.replace(runpath, b"$ORIGIN/../lib".ljust(len(runpath), b"\0"))
    (destination / "bin" / name).write_bytes(executable)
    (destination / "bin" / name).chmod(0o755)
    return destination


def register_build_python(workspace: Path, python: Path) -> None:
    """The build's interpreter (``python``: :func:`relocatable_python`) as the workspace's registered Python
    toolchain, and `//build_python:interpreter_test`, which fails under any other (the worker's own python3)."""
    package = workspace / "build_python"
    package.mkdir()
    (package / "python.bzl").write_text(BUILD_PYTHON_BZL, encoding="utf-8")
    (package / "interpreter_test.py").write_text(INTERPRETER_TEST_PY, encoding="utf-8")
    (package / "BUILD.bazel").write_text(
        "py_test(\n"
        '    name = "interpreter_test",\n'
        '    srcs = ["interpreter_test.py"],\n'
        f'    args = ["{BUILD_PYTHON}"],\n'
        ")\n",
        encoding="utf-8",
    )
    with (workspace / "MODULE.bazel").open("a", encoding="utf-8") as module:
        module.write(
            '\nbuild_python = use_repo_rule("//build_python:python.bzl", "build_python")\n'
            f'build_python(name = "build_python", prefix = "{python}", version = "{BUILD_PYTHON}")\n'
            'register_toolchains("@build_python//:toolchain")\n'
        )
