"""The benchmarks' copies of the root example (benchmarks/example_workspace.py, bench_e2e.py) load.

The benchmarks run for an hour and are not part of CI, so a copy that no longer loads is found an hour
too late: when the example started loading `layout_test` from its own `//python:defs.bzl`, every copy
(which is not the module) failed on its first `bazel test`. This checks, without Bazel, that every label
of the main repository a copy loads names a file in that copy, and that each hub's copy keeps only its hub.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# load("//pkg:file.bzl", ...) and use_extension("//pkg:file.bzl", ...): labels of the workspace itself.
MAIN_REPO_LABEL = re.compile(r'(?:load|use_extension)\(\s*"//([^:"]*):([^"]+)"')


@pytest.fixture(scope="module")
def bench_e2e() -> object:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_e2e

        yield bench_e2e
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_workspace_label_a_copy_loads_is_in_the_copy(tmp_path: Path, bench_e2e: object) -> None:
    configs = bench_e2e.make_configs(tmp_path, control=True)  # type: ignore[attr-defined]
    assert [config.name for config in configs] == ["plain", "flat", "split", "plain-again"]
    for config in configs:
        for path in [config.root / "MODULE.bazel", *config.root.rglob("BUILD.bazel")]:
            for package, name in MAIN_REPO_LABEL.findall(path.read_text(encoding="utf-8")):
                assert (config.root / package / name).is_file(), f"{config.name}: {path.relative_to(config.root)} loads //{package}:{name}"


def test_each_hubs_copy_keeps_only_its_hub(tmp_path: Path, bench_e2e: object) -> None:
    configs = {config.name: config for config in bench_e2e.make_configs(tmp_path, control=False)}  # type: ignore[attr-defined]
    flat = (configs["flat"].root / "calculator" / "BUILD.bazel").read_text(encoding="utf-8")
    split = (configs["split"].root / "calculator" / "BUILD.bazel").read_text(encoding="utf-8")
    assert "calc_test" in flat and "torch_layout_test" in flat and "pypi_split" not in flat
    assert "calc_split_test" in split and "torch_split_layout_test" in split and '"@pypi//' not in split
    assert "patched_pypi_split" not in (configs["flat"].root / "MODULE.bazel").read_text(encoding="utf-8")


def test_the_copy_without_facts_differs_from_flat_only_by_them(tmp_path: Path, bench_e2e: object) -> None:
    configs = {config.name: config for config in bench_e2e.make_configs(tmp_path, control=False, no_facts=True)}  # type: ignore[attr-defined]
    flat = (configs["flat"].root / "MODULE.bazel").read_text(encoding="utf-8")
    without = (configs["flat-without-facts"].root / "MODULE.bazel").read_text(encoding="utf-8")
    facts = re.findall(r'wheel_facts = "//([^:"]*):([^"]+)"', flat)
    assert facts and all((configs["flat"].root / package / name).is_file() for package, name in facts), facts
    assert "wheel_facts = " not in without
    assert [line for line in flat.splitlines() if "wheel_facts = " not in line] == without.splitlines()
    assert configs["flat-without-facts"].target == configs["flat"].target
