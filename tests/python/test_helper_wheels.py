"""The helper's pinned python-isal wheels (python/private/helper.bzl's ISAL_WHEELS) against the pin the tests
use, the interpreter facts the hub picks one by, and the command line's dependency on python-isal
(pyproject.toml: wherever a wheel of it installs).

Bazel fetches the wheel of the hub's interpreter (CPython version, machine, glibc) beside packaging and
tomli, so the hub inflates wheels with python-isal instead of zlib (patched_wheels/wheelfile/zipcontainer.py);
the Starlark unit test (tests/starlark) checks the choice, this one the table's rows.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from support.starlark import PRIVATE, starlark_constants

if sys.version_info >= (3, 11):
    import tomllib
else:  # the helper's own dependency below 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
MATRIX = ("3.9", "3.10", "3.11", "3.12", "3.13")  # tools/test's Python versions
MACHINES = ("x86_64", "aarch64")


def _rows() -> dict[str, dict[str, str]]:
    table = starlark_constants(PRIVATE / "helper.bzl")["ISAL_WHEELS"]
    assert isinstance(table, ast.Dict)
    rows = {}
    for key, value in zip(table.keys, table.values):
        assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
        rows[key.value] = {keyword.arg: ast.literal_eval(keyword.value) for keyword in value.keywords}
    return rows


def test_every_row_is_the_pinned_isal_for_its_python_and_machine() -> None:
    (pin,) = re.findall(
        r"^isal==(\S+)$", (REPO / "tools" / "requirements-test.txt").read_text(encoding="utf-8"), re.MULTILINE
    )
    rows = _rows()
    assert {f"{version}-{machine}" for version in MATRIX for machine in MACHINES} <= set(rows), (
        "every Python the tests run, both machines"
    )
    for key, row in rows.items():
        version, machine = key.split("-")
        tag = "cp" + version.replace(".", "")
        assert row["filename"].startswith(f"isal-{pin}-{tag}-{tag}-manylinux"), key
        assert row["filename"].endswith(f"_{machine}.whl"), key
        assert row["url"].startswith("https://files.pythonhosted.org/packages/") and row["url"].endswith(
            "/" + row["filename"]
        ), key
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256"]), key
    assert len({row["sha256"] for row in rows.values()}) == len(rows), "one file per row"


def test_the_interpreter_facts_run_without_site_and_say_what_the_choice_reads() -> None:
    """`python -S -c _INTERPRETER_FACTS` prints one line of tab-separated _INTERPRETER_KEYS values, the ones
    isal_wheel reads; here (CPython on glibc) they name this interpreter, and the row for them exists."""
    constants = starlark_constants(PRIVATE / "helper.bzl")
    code, keys = ast.literal_eval(constants["_INTERPRETER_FACTS"]), ast.literal_eval(constants["_INTERPRETER_KEYS"])
    printed = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed.endswith("\n") and printed.count("\n") == 1, repr(printed)
    fields = printed[:-1].split("\t")
    assert len(fields) == len(keys), fields
    facts = dict(zip(keys, fields))
    assert facts["version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert facts["implementation"] == sys.implementation.name
    assert facts["abiflags"] == sys.abiflags
    assert facts["libc"].startswith("glibc "), facts
    if facts["implementation"] == "cpython" and not facts["abiflags"]:
        assert f"{facts['version']}-{facts['machine']}" in _rows()


def _command_line_isal() -> Requirement:
    """pyproject.toml's python-isal dependency of the command line (not the ``fast`` extra's)."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    (isal,) = [Requirement(line) for line in dependencies if Requirement(line).name == "isal"]
    return isal


def test_the_command_line_installs_isal_wherever_the_hub_has_a_wheel_for_it() -> None:
    """`pip install .` brings python-isal for every interpreter the hub's table serves, at the tests' pin."""
    isal = _command_line_isal()
    (pin,) = re.findall(
        r"^isal==(\S+)$", (REPO / "tools" / "requirements-test.txt").read_text(encoding="utf-8"), re.MULTILINE
    )
    assert isal.specifier.contains(pin), (str(isal.specifier), pin)
    assert isal.marker is not None
    for key in _rows():
        version, machine = key.split("-")
        linux = {
            "platform_python_implementation": "CPython",
            "python_version": version,
            "platform_machine": machine,
            "sys_platform": "linux",
        }
        assert isal.marker.evaluate(linux), key


@pytest.mark.parametrize(
    "where",
    [
        {"platform_python_implementation": "PyPy", "platform_machine": "x86_64"},  # no PyPy wheel for 3.9/3.10
        {"platform_python_implementation": "CPython", "platform_machine": "ppc64le"},
        {"platform_python_implementation": "CPython", "platform_machine": "s390x"},
        {"platform_python_implementation": "CPython", "platform_machine": "ARM64", "sys_platform": "win32"},
        {
            "platform_python_implementation": "CPython",
            "platform_machine": "arm64",
            "python_version": "3.9",
            "sys_platform": "darwin",
        },
    ],
)
def test_the_command_line_leaves_isal_out_where_no_wheel_installs(where: dict[str, str]) -> None:
    """Where python-isal ships no wheel, pip would build it from source (nasm, a compiler) or fail: zlib reads there."""
    marker = _command_line_isal().marker
    assert marker is not None and not marker.evaluate(where)
