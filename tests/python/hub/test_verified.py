"""The verified stacks (issue 48): the product's table of rows, applied by the hub's plan where the lock holds a
row's stack and the user wrote no ``patched_wheel`` of its name; a row with recorded libraries runs no probe."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from benchmarks.stacks import STACKS

from patched_wheels.base.schema import to_json
from patched_wheels.errors import UsageError
from patched_wheels.hub.build import build_hub
from patched_wheels.hub.documents import HubConfig, HubPlan, HubRequest, resolved_wheels
from patched_wheels.hub.plan import checked_request, plan_hub
from patched_wheels.hub.verified import TABLE, VerifiedTable, product_table, read_table
from patched_wheels.loading.preloadmodule import read_preload_data
from patched_wheels.lock.resolve import ResolvedWheel
from patched_wheels.wheelfile import WheelFilename
from support import fakecuda
from support.hubconfig import fetch_into, hub_inputs, load_config, no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)

ROOT = Path(__file__).resolve().parents[3]
PATCHED = "fakejax-1.0+verified-py3-none-linux_x86_64.whl"


@pytest.fixture(scope="module")
def runtime_set(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.RuntimeLoadedWheels:
    """fakejax opens libfoo.so.1 (which needs libbar.so.1) of other wheels at import: no ELF edge shows it."""
    return fakecuda.build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


def fixture_row(marker: Path, **values: object) -> dict[str, Any]:
    """A row for the fake stack: its probe writes ``marker`` (so a test sees whether package code ran) and
    imports fakejax, which maps libfoo and libbar."""
    return {
        "stack": "fakejax",
        "install": "fakejax[with-rt]",
        "name": "fakejax",
        "preload_package": "",
        "probe": f"open({str(marker)!r}, 'w').close(); {fakecuda.RUNTIME_CODE}",
        "lock_pins": ["fakejax", fakecuda.RUNTIME_GLOB],
        "recorded": [],
        "recorded_global": [],
        "recorded_for": "",
        "evidence": [{"versions": "fakejax 1.0", "cpu": "a test", "gpu": "", "results": "tests/python/hub"}],
        **values,
    }


def table_file(tmp_path: Path, *rows: dict[str, Any], **values: object) -> Path:
    path = tmp_path / "stacks.json"
    path.write_text(json.dumps({"schema": 1, "suffix": "verified", "stacks": list(rows), **values}), encoding="utf-8")
    return path


def plan_fake_hub(
    tmp_path: Path,
    wheels: list[Path],
    table: VerifiedTable,
    *specs: dict[str, object],
    **attributes: object,
) -> HubPlan:
    """The plan of a hub over a lock of ``wheels`` (``table``: the verified stacks), its
    files fetched where it says."""
    request, resolved, sources = hub_inputs(tmp_path, wheels, list(specs), index_option="index-url", **attributes)
    plan = plan_hub(checked_request(HubRequest.from_json(request), resolved_wheels(resolved), table), cache_root=None)
    fetch_into(tmp_path, [dataclasses.asdict(fetch) for fetch in plan.fetch], sources)
    return plan


def preload_of(wheel: Path) -> tuple[str, ...]:
    with zipfile.ZipFile(wheel) as archive:
        return read_preload_data(archive.read("fakejax/_patched_wheels_preload.json"), where="test").libraries


def answer_per_wheel(tmp_path: Path, wheels: list[Path]) -> str:
    result = fakecuda.run_import(fakecuda.per_wheel_layout(wheels, tmp_path / "site"), fakecuda.RUNTIME_CODE)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_stack_of_the_table_is_patched_with_its_row_when_no_stanza_names_it(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    marker = tmp_path / "probe-ran"
    table = read_table(table_file(tmp_path, fixture_row(marker)))
    plan = plan_fake_hub(tmp_path / "hub", runtime_set.all, table)
    (spec,) = plan.config.patched
    assert (spec.name, spec.suffix, spec.preload, spec.probe) == ("fakejax", "verified", "auto", table.stacks[0].probe)
    (note,) = plan.notes
    assert note.count("\n") == 0 and note.startswith('patched.index(name = "test"): the lock holds verified stacks')
    assert 'fakejax: patched.patched_wheel(name = "fakejax", hub = "test", preload = "auto", probe = ' in note

    assert build_hub(plan.config) == ["fakejax==1.0+verified"]
    patched = tmp_path / "hub" / "index" / PATCHED
    assert marker.exists(), "a row without a recording runs its probe, as preload = 'auto' does"
    assert preload_of(patched) == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"], fakecuda.RUNTIME_LIBRARY_PATHS["foo"])
    assert answer_per_wheel(tmp_path, [runtime_set.foo, runtime_set.bar, patched]) == str(fakecuda.RUNTIME_ANSWER)


def test_a_row_with_recorded_libraries_preloads_them_in_graph_order_and_runs_no_package_code(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    marker = tmp_path / "probe-ran"
    table = read_table(table_file(tmp_path, fixture_row(marker, recorded=["libfoo.so.1"], recorded_for="==1.0")))
    plan = plan_fake_hub(tmp_path / "hub", runtime_set.all, table)
    (spec,) = plan.config.patched
    assert (spec.preload, spec.probe, tuple(spec.recorded)) == ("elf", "", ("libfoo.so.1",))
    assert "(its libraries recorded for fakejax==1.0: no probe runs)" in plan.notes[0]

    # Built from the configuration as the build step reads it back (the recording travels in _hub.json).
    config = HubConfig.from_json(json.loads(json.dumps(plan.config.to_json())))
    assert build_hub(config) == ["fakejax==1.0+verified"]
    assert not marker.exists(), "a recorded row must run no package code at fetch time"
    patched = tmp_path / "hub" / "index" / PATCHED
    # libfoo is recorded; libbar comes with it, first, because libfoo needs it (DT_NEEDED).
    assert preload_of(patched) == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"], fakecuda.RUNTIME_LIBRARY_PATHS["foo"])
    assert answer_per_wheel(tmp_path, [runtime_set.foo, runtime_set.bar, patched]) == str(fakecuda.RUNTIME_ANSWER)


def test_a_recording_made_on_another_release_is_not_used_the_probe_runs(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    """Another release loads other libraries (torch 2.8's libcudart.so.12, 2.15's .so.13): a recording stands
    for the probe only on the releases it was made on; elsewhere the row's probe runs, as without a recording."""
    marker = tmp_path / "probe-ran"
    row = fixture_row(marker, recorded=["libfoo.so.1"], recorded_for=">=2")
    plan = plan_fake_hub(tmp_path / "hub", runtime_set.all, read_table(table_file(tmp_path, row)))
    (spec,) = plan.config.patched
    assert (spec.preload, spec.probe, tuple(spec.recorded)) == ("auto", row["probe"], ())
    assert "(its recording is for fakejax>=2: the probe runs)" in plan.notes[0]
    assert build_hub(plan.config) == ["fakejax==1.0+verified"]
    assert marker.exists()
    patched = tmp_path / "hub" / "index" / PATCHED
    assert preload_of(patched) == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"], fakecuda.RUNTIME_LIBRARY_PATHS["foo"])


def test_a_users_stanza_of_the_rows_name_replaces_the_row(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    marker = tmp_path / "probe-ran"
    table = read_table(table_file(tmp_path, fixture_row(marker)))
    plan = plan_fake_hub(
        tmp_path / "hub", runtime_set.all, table, {"name": "FakeJax", "remove_requires": ["fakert-bar"]}
    )
    (spec,) = plan.config.patched
    assert (spec.name, spec.suffix, spec.preload, spec.probe) == ("FakeJax", "test.1", "off", "")
    assert plan.notes == ()
    assert build_hub(plan.config) == ["fakejax==1.0+test.1"]
    assert not marker.exists()
    with zipfile.ZipFile(tmp_path / "hub" / "index" / "fakejax-1.0+test.1-py3-none-linux_x86_64.whl") as archive:
        assert not [name for name in archive.namelist() if "_patched_wheels_preload" in name]


def test_verified_stacks_false_and_a_lock_without_the_stack_apply_no_row(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels
) -> None:
    table = read_table(table_file(tmp_path, fixture_row(tmp_path / "probe-ran")))
    off = plan_fake_hub(tmp_path / "off", runtime_set.all, table, verified_stacks=False)
    assert (list(off.config.patched), off.notes) == ([], ())
    # A stack is the row's every pin: fakejax without any fakert-* wheel is not it.
    without = read_table(table_file(tmp_path, fixture_row(tmp_path / "probe-ran", lock_pins=["fakejax", "fakecuda-*"])))
    assert list(plan_fake_hub(tmp_path / "other", runtime_set.all, without).config.patched) == []


def wheel(project: str, version: str = "1.0") -> ResolvedWheel:
    filename = f"{project.replace('-', '_')}-{version}-py3-none-linux_x86_64.whl"
    return ResolvedWheel(project, filename, (f"https://files.example/{filename}",), f"{len(project):064x}")  # type: ignore[arg-type]


def test_the_products_table_applies_the_jax_cuda13_row_to_a_lock_pinning_its_plugin(tmp_path: Path) -> None:
    """The real table is the default: a lock pinning jax-cuda13-pjrt gets the JAX row, found by that pin; its
    recording (benchmarks/results/2026-11-29-no-stanza-newest.md) stands for the probe on the release it was made
    on, and another release gets the probe."""
    request, _, _ = hub_inputs(tmp_path, [], [])
    for version, preload, probe in (("0.10.2", "auto", "import jax; jax.devices()"), ("0.12.0.1", "elf", "")):
        wheels = [wheel(project, version) for project in ("jax", "jax-cuda13-plugin", "jax-cuda13-pjrt")]
        plan = plan_hub(
            checked_request(HubRequest.from_json({**request, "repository": str(tmp_path)}), wheels), cache_root=None
        )
        (spec,) = plan.config.patched
        assert (spec.name, spec.preload_package, spec.preload, spec.probe, spec.suffix) == (
            "jax-cuda13-pjrt",
            "jax_plugins.xla_cuda13",
            preload,
            probe,
            "verified",
        )
        assert ("libcudart.so.13" in spec.recorded) == (preload == "elf")
        assert plan.config.needs_graph and "jax-cuda13: " in plan.notes[0]


def test_the_products_table_has_a_valid_row_for_each_verified_stack() -> None:
    table = product_table()
    assert read_table(TABLE) == table
    rows = {row.stack: row for row in table.stacks}
    assert sorted(rows) == sorted(
        ["torch", "jax-cuda12", "jax-cuda13", "tensorflow", "cupy-cuda12x", "onnxruntime-gpu"]
    )
    assert "ort.preload_dlls()" in rows["onnxruntime-gpu"].probe  # the session probe misses libcufft, libnvrtc
    assert rows["cupy-cuda12x"].probe == STACKS["cupy-14.2.0"].probe  # the probe measured on 14.2.0
    for row in table.stacks:
        assert row.evidence and all(item.results for item in row.evidence), row.stack
        for item in row.evidence:
            assert (ROOT / item.results).exists(), f"{row.stack}: {item.results}"


def test_docs_verified_stacks_shows_the_table_the_hub_applies() -> None:
    spec = importlib.util.spec_from_file_location("gen_verified_stacks", ROOT / "tools" / "gen_verified_stacks.py")
    assert spec and spec.loader
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    page = (ROOT / "docs" / "verified-stacks.md").read_text(encoding="utf-8")
    assert page == generator.render(page), "docs/verified-stacks.md is stale: run python3 tools/gen_verified_stacks.py"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": 2}, "schema = 2: this helper reads schema 1"),
        ({"suffix": "ver ified"}, "suffix 'ver ified' is not a valid PEP 440 local version label"),
        ({"extra": 1}, "unknown keys ['extra']"),
        ({"stacks": [{"stack": "x"}]}, "missing keys"),
        ({"row": {"probe": 3}}, "probe = 3: expected a string"),
        ({"row": {"lock_pins": ["jax"]}}, "none matches name 'fakejax'"),
        ({"row": {"lock_pins": ["fakejax", "fake[jax"]}}, "lock_pins 'fake[jax'"),
        (
            {"row": {"recorded": ["liby.so"], "recorded_global": ["libx.so"], "recorded_for": "==1.0"}},
            "recorded_global ['libx.so'] not among recorded",
        ),
        ({"row": {"recorded": ["libx.so"]}}, "recorded libraries and recorded_for"),
        ({"row": {"recorded_for": "==1.0"}}, "recorded libraries and recorded_for"),
        ({"row": {"recorded": ["libx.so"], "recorded_for": "1.0"}}, "recorded_for '1.0' is not a PEP 440 specifier"),
        ({"row": {"preload_package": "fake-jax"}}, 'preload_package = "fake-jax" is not a module name'),
        ({"row": {"evidence": []}}, "no evidence"),
        ({"twice": True}, "a second row"),
    ],
)
def test_a_flawed_table_is_one_error_naming_the_file(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    row = fixture_row(tmp_path / "marker", **change.pop("row", {}))
    rows = [row, {**row, "stack": "other"}] if change.pop("twice", False) else [row]
    path = table_file(tmp_path, *rows, **change)
    with pytest.raises(UsageError) as error:
        read_table(path)
    text = str(error.value)
    assert text.startswith(f"{path}: cannot read the verified stacks: ") and message in text and "\n" not in text


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"[" * 100_000, b'{"schema": 1', b"x" * (2 << 20)])
def test_an_unreadable_table_file_is_one_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "stacks.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=rf"^{path}: cannot read the verified stacks: "):
        read_table(path)


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "stacks.json"
    os.mkfifo(path)
    with pytest.raises(UsageError, match=rf"^{path}: cannot read the verified stacks: "):
        read_table(path)


def test_the_table_round_trips_through_its_schema() -> None:
    table = product_table()
    assert json.loads(json.dumps(to_json(table))) == json.loads(TABLE.read_text("utf-8"))


def test_hub_plan_says_which_rows_it_applies_in_one_warning_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command the rule runs: the product's table, and its one line on stderr (the rule shows warning lines)."""
    files = []
    for name in ("jax-0.10.2", "jax_cuda13_pjrt-0.10.2"):
        files.append(tmp_path / f"{name}-py3-none-any.whl")
        files[-1].write_bytes(name.encode())  # the plan reads no wheel
    config = load_config(write_config(tmp_path / "hub", files, []))  # hub plan, as the rule runs it
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("patched-wheels: warning: ") and 'name = "jax-cuda13-pjrt"' in line
    assert [spec.name for spec in config.patched] == ["jax-cuda13-pjrt"]


def test_hub_plan_applies_the_table_once_and_reads_each_file_name_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command asks where the cache is only when some spec reads the wheels, the rows' included: the rows are
    applied once, and that one request is what the plan places; each resolved file name is read once, for the
    row's recording, the ``requirement`` and the file's place alike."""
    from patched_wheels.hub import plan

    applied, parsed = Counter[int](), Counter[str]()

    def counted_stacks(*args: Any, **kwargs: Any) -> Any:
        applied[0] += 1
        return with_verified_stacks(*args, **kwargs)

    class CountedFilename(WheelFilename):
        @classmethod
        def parse(cls, filename: str) -> WheelFilename:
            parsed[filename] += 1
            return WheelFilename.parse(filename)

    with_verified_stacks = plan.with_verified_stacks
    monkeypatch.setattr(plan, "with_verified_stacks", counted_stacks)
    monkeypatch.setattr(plan, "WheelFilename", CountedFilename)
    files = []
    for name in ("jax-0.12.0.1", "jax_cuda13_pjrt-0.12.0.1"):
        files.append(tmp_path / f"{name}-py3-none-any.whl")
        files[-1].write_bytes(name.encode())  # the plan reads no wheel
    spec = {"name": "jax", "requirement": "jax==0.12.0.1"}
    config = load_config(write_config(tmp_path / "hub", files[1:], [(files[0], spec)]))
    assert [(spec.name, spec.preload) for spec in config.patched] == [("jax", "off"), ("jax-cuda13-pjrt", "elf")]
    assert applied[0] == 1
    assert parsed == {file.name: 1 for file in files}


def test_a_recorded_soname_two_wheels_ship_is_preloaded_from_neither_with_one_warning(
    tmp_path: Path, runtime_set: fakecuda.RuntimeLoadedWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which copy a run maps only a run shows: the recording names a SONAME, not a wheel."""
    with zipfile.ZipFile(runtime_set.foo) as archive:
        foo = archive.read(fakecuda.RUNTIME_LIBRARY_PATHS["foo"])
    copy = fakecuda.build_wheel(tmp_path / "copy", "fakert-copy", "1.0", {"fakert_copy/lib/libfoo.so.1": foo})
    marker = tmp_path / "probe-ran"
    table = read_table(
        table_file(tmp_path, fixture_row(marker, recorded=["libfoo.so.1", "libbar.so.1"], recorded_for="==1.0"))
    )
    plan = plan_fake_hub(tmp_path / "hub", [*runtime_set.all, copy], table)
    assert build_hub(plan.config) == ["fakejax==1.0+verified"]
    warnings = capsys.readouterr().err.splitlines()
    assert [line for line in warnings if "libfoo.so.1 is shipped by 2 wheels" in line] == [
        "patched-wheels: warning: fakejax-1.0-py3-none-linux_x86_64.whl: the recorded libfoo.so.1 is shipped by 2 "
        "wheels of the set (fakert_copy-1.0-py3-none-linux_x86_64.whl, fakert_foo-1.0-py3-none-linux_x86_64.whl): "
        "preloaded from none of them"
    ]
    assert not marker.exists()
    assert preload_of(tmp_path / "hub" / "index" / PATCHED) == (fakecuda.RUNTIME_LIBRARY_PATHS["bar"],)
