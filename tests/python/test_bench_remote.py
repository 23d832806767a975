"""benchmarks/bench_remote.py's parts that need no engine and no Bazel: its arguments, the reading of Bazel's
summary (how many actions ran remotely: the benchmark's evidence that the tests ran on the worker), the size of
a content-addressed store, and the workspace it builds (the root example with both hubs and the build's Python)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from benchmarks import bench_remote

REMOTE_OUTPUT = """\
INFO: Analyzed 3 targets (0 packages loaded, 0 targets configured).
INFO: Found 3 test targets...
INFO: Elapsed time: 412.551s, Critical Path: 398.20s
INFO: 10 processes: 4 internal, 6 remote.
INFO: Build completed successfully, 10 total actions
//build_python:interpreter_test                                          PASSED in 3.1s
//calculator:calc_split_test                                             PASSED in 61.0s
//calculator:calc_test                                                   FAILED in 12.4s

Executed 3 out of 3 tests: 2 tests pass and 1 fails remotely.
"""


def test_the_summary_gives_each_kind_of_process_and_each_tests_status() -> None:
    processes, statuses = bench_remote.run_summary(REMOTE_OUTPUT)
    assert processes == {"internal": 4, "remote": 6}
    assert statuses == {
        "//build_python:interpreter_test": "PASSED",
        "//calculator:calc_split_test": "PASSED",
        "//calculator:calc_test": "FAILED",
    }


def test_a_summary_of_local_and_cached_kinds_keeps_their_names() -> None:
    processes, _ = bench_remote.run_summary("INFO: 9 processes: 1 remote cache hit, 2 internal, 6 linux-sandbox.\n")
    assert processes == {"remote cache hit": 1, "internal": 2, "linux-sandbox": 6}


def test_a_run_that_stopped_before_executing_has_an_empty_summary() -> None:
    output = "ERROR: Analysis of target '//calculator:calc_test' failed; build aborted\nINFO: Elapsed time: 3.0s\n"
    assert bench_remote.run_summary(output) == ({}, {})
    assert bench_remote.run_summary("INFO: 0 processes.\nINFO: Build completed successfully, 0 total actions\n") == (
        {},
        {},
    )


def test_a_work_folder_that_is_not_empty_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "left-over").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        bench_remote.parse_args(["--work", str(tmp_path)])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert errors == [f"benchmarks/bench_remote.py: error: --work {tmp_path}: not empty"]
    args = bench_remote.parse_args(["--work", str(tmp_path / "new"), "--keep", "--json", str(tmp_path / "r.json")])
    assert (args.work, args.keep, args.json) == (tmp_path / "new", True, tmp_path / "r.json")


def test_a_store_counts_each_file_once_however_many_links_it_has(tmp_path: Path) -> None:
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "blob").write_bytes(b"x" * 1000)
    os.link(tmp_path / "ab" / "blob", tmp_path / "staged")  # casd stages by hard link
    (tmp_path / "other").write_bytes(b"y" * 24)
    assert bench_remote.store_size(tmp_path) == bench_remote.Store(files=2, bytes=1024)
    assert bench_remote.store_size(tmp_path / "absent") == bench_remote.Store(files=0, bytes=0)


def test_the_workspace_is_the_example_with_both_hubs_and_the_builds_python_registered(tmp_path: Path) -> None:
    root = bench_remote.prepare_workspace(tmp_path)
    module = (root / "MODULE.bazel").read_text(encoding="utf-8")
    assert 'name = "patched_pypi"' in module and 'name = "patched_pypi_split"' in module
    assert 'register_toolchains("@build_python//:toolchain")' in module
    for package, name in re.findall(r'(?:use_repo_rule|load)\("//([^:"]*):([^"]+)"', module):
        assert (root / package / name).is_file(), f"MODULE.bazel loads //{package}:{name}"
    for target in bench_remote.TARGETS:
        package, name = target[2:].split(":")
        assert f'name = "{name}"' in (root / package / "BUILD.bazel").read_text(encoding="utf-8"), target
    python = re.search(r'prefix = "([^"]+)"', module)
    assert python is not None and Path(python.group(1)).is_relative_to(tmp_path)
