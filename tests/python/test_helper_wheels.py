"""The helper's pinned python-isal wheels (python/private/helper.bzl's ISAL_WHEELS) against the pin the tests
use, and the interpreter facts the hub picks one by.

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

from support.starlark import PRIVATE, starlark_constants

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
    (pin,) = re.findall(r"^isal==(\S+)$", (REPO / "tools" / "requirements-test.txt").read_text(encoding="utf-8"), re.MULTILINE)
    rows = _rows()
    assert {f"{version}-{machine}" for version in MATRIX for machine in MACHINES} <= set(rows), "every Python the tests run, both machines"
    for key, row in rows.items():
        version, machine = key.split("-")
        tag = "cp" + version.replace(".", "")
        assert row["filename"].startswith(f"isal-{pin}-{tag}-{tag}-manylinux"), key
        assert row["filename"].endswith(f"_{machine}.whl"), key
        assert row["url"].startswith("https://files.pythonhosted.org/packages/") and row["url"].endswith("/" + row["filename"]), key
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
