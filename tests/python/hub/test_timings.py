"""RULES_PATCHED_WHEELS_TIMINGS: the hub build's per-phase times, for the benchmarks, without changing the hub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from patched_wheels.base import timings
from patched_wheels.cli import main
from patched_wheels.wheelfile.zipcontainer import INFLATER_NAME
from support import fakecuda
from support.hubconfig import no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)

PHASES = {
    "closure",
    "graph",
    "patch",
    "probe: install",
    "probe: run",
    "probe: symbols",
    "probe: remove",
    "index",
    "lock",
}


#: The index's memo of file status (mtimes, which differ between any two builds); not served.
STATUS_MEMO = "index/simple/.patched-wheels-cache.json"


def files(root: Path) -> dict[str, bytes]:
    found = {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
    assert b"mtime" in found.pop(STATUS_MEMO)
    return found


def build(
    root: Path, wheels: fakecuda.FakeCudaWheels, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, bytes]:
    """A cold hub (an empty helper cache) in ``root``, split and preloaded with a probe: what it wrote."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(cache))
    spec = {
        "name": "faketorch",
        "preload": "auto",
        "preload_package": "faketorch",
        "split_into": "faketorch-libs",
        "split_move": ["faketorch/lib/*.so"],
    }
    config = write_config(
        root, list(wheels.nvidia.values()), [(wheels.torch, spec)], index_option="direct", rules_python_version="2.3.2"
    )
    assert main(["hub", "build", "--config", str(config)]) == 0
    return files(root)


def test_the_timings_cover_every_phase_and_change_no_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheels = fakecuda.build_fake_cuda_wheels(tmp_path / "wheels")
    hub, cache, record = tmp_path / "hub", tmp_path / "cache", tmp_path / "timings.jsonl"
    monkeypatch.delenv(timings.ENVIRONMENT_VARIABLE, raising=False)
    without = build(hub, wheels, cache, monkeypatch)
    assert any(name.startswith("index/faketorch_libs-") for name in without), sorted(without)
    monkeypatch.setenv(timings.ENVIRONMENT_VARIABLE, str(record))
    assert build(hub, wheels, cache, monkeypatch) == without, "the hub's files are the same with the timings on"

    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert [line["command"] for line in lines] == [["hub", "plan"], ["hub", "build"]]
    built = lines[1]
    assert set(built["phases"]) == PHASES
    assert {line["inflater"] for line in lines} == {INFLATER_NAME}, (
        "which inflater read the wheels (isal here: a test dependency)"
    )
    for figures in [built["total"], *built["phases"].values()]:
        assert set(figures) == set(timings.FIELDS) and min(figures.values()) >= 0, figures
    # Each phase counts its own time only (the probe is not counted again in the patch): they add up to at most the total.
    assert sum(figures["wall"] for figures in built["phases"].values()) <= built["total"]["wall"]
    assert (
        sum(figures["user"] + figures["system"] for figures in built["phases"].values())
        <= built["total"]["user"] + built["total"]["system"] + 0.02
    )
    # The probe's interpreter is a child process: its CPU is in the probe's run. The only other phase that
    # starts one is the symbols' (`ldconfig -p`, to find system libraries: a few ms, which a loaded machine
    # rounds up to a clock tick).
    run = built["phases"]["probe: run"]
    assert run["children_user"] + run["children_system"] > 0
    others = [
        name
        for name, figures in built["phases"].items()
        if name not in ("probe: run", "probe: symbols") and figures["children_user"] + figures["children_system"] > 0
    ]
    assert not others, others


def test_nested_phases_count_their_own_time_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    record = tmp_path / "timings.jsonl"
    monkeypatch.setenv(timings.ENVIRONMENT_VARIABLE, str(record))
    with timings.phase("outer"):
        sum(range(3_000_000))
        with timings.phase("inner"):
            sum(range(6_000_000))
    with timings.phase("inner"):
        sum(range(6_000_000))
    timings.record(["test"])
    (line,) = [json.loads(text) for text in record.read_text(encoding="utf-8").splitlines()]
    outer, inner = line["phases"]["outer"], line["phases"]["inner"]
    assert 0 < outer["wall"] < inner["wall"], line  # the inner phase ran twice, each twice the outer's own work
    assert outer["wall"] + inner["wall"] <= line["total"]["wall"]


def test_no_file_without_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(timings.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    with timings.phase("graph"):
        pass
    timings.record(["test"])
    assert not list(tmp_path.iterdir())
