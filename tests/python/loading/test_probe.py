"""The comparison of one code's runs in both layouts (``loading/probe.py``'s ``Comparison``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.wheelbuilder import build_wheel

from patched_wheels.elf.graph import read_graph
from patched_wheels.loading.probe import Comparison, RunResult, installed


def result(layout: str, *, returncode: int = 0, error_line: str | None = None) -> RunResult:
    return RunResult(layout, "import pkg", returncode, "", error_line, 1, ())


def test_a_run_without_an_error_is_said_to_have_none() -> None:
    """The verdict quotes each side's first error; the side without one reads "none", never "None"."""
    only_per_wheel = Comparison(flat=result("flat"), per_wheel=result("per-wheel", error_line="Unable to load CUDA"))
    assert only_per_wheel.differences == ["first error 'Unable to load CUDA', none in one site-packages"]
    only_flat = Comparison(
        flat=result("flat", returncode=1, error_line="ValueError: boom"), per_wheel=result("per-wheel")
    )
    assert only_flat.differences == [
        "exit status 0, 1 in one site-packages",
        "first error none, 'ValueError: boom' in one site-packages",
    ]
    assert Comparison(flat=result("flat"), per_wheel=result("per-wheel")).matches


def test_the_child_writes_no_bytecode_into_the_helpers_prefix_or_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under Bazel the helper runs with PYTHONPYCACHEPREFIX naming the persistent bytecode directory: a child
    that inherited it left a .pyc there for every module the code imported, at a new temporary path each
    run (torch: thousands a probe), never read again nor removed. It gets no prefix and writes no bytecode."""
    wheel = build_wheel(tmp_path, "bytecodeprobe", "1.0", {"bytecodeprobe/__init__.py": b"X = 1\n"})
    prefix = tmp_path / "prefix"
    prefix.mkdir(mode=0o700)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(prefix))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "")  # as helper.bzl sets it: empty is unset
    code = "import bytecodeprobe, os, sys; print(bytecodeprobe.X, os.environ.get('PYTHONPYCACHEPREFIX'), sys.flags.dont_write_bytecode)"
    with installed([wheel]) as installation:
        comparison = installation.compare(code, read_graph([wheel]))
        left = sorted(str(path) for path in Path(installation.root).rglob("*.pyc"))
    for run in (comparison.flat, comparison.per_wheel):
        assert (run.returncode, run.stdout) == (0, "1 None 1\n"), run
    assert left == []
    assert list(prefix.rglob("*")) == []
