"""A hub's ``wheel_facts``: an observation entry is a claim checked against the wheels, and a failed probe is never
recorded (:mod:`patched_wheels.loading.observe`)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from patched_wheels.cli import main
from patched_wheels.hub.facts import facts_text
from patched_wheels.loading import probe
from support import fakecuda
from support.hubconfig import no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)

FOO, BAR, PMIX = (fakecuda.RUNTIME_LIBRARY_PATHS[name] for name in ("foo", "bar", "pmix"))


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> fakecuda.RuntimeLoadedWheels:
    return fakecuda.build_runtime_loaded_wheels(tmp_path_factory.mktemp("runtime"))


@pytest.fixture
def installs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per installation of the set for a probe."""
    counted: list[int] = []
    installed = probe.installed

    def installing(*args: object, **kwargs: object) -> object:
        counted.append(1)
        return installed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(probe, "installed", installing)
    return counted


def build(
    tmp_path: Path,
    name: str,
    runtime: fakecuda.RuntimeLoadedWheels,
    *,
    cache: str,
    wheel_facts: Path | None = None,
    probe_code: str | None = None,
) -> Path:
    spec: dict[str, object] = {"name": "fakejax", "preload": "auto", "preload_package": "fakejax"}
    if probe_code is not None:
        spec["probe"] = probe_code
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / cache))
        config = write_config(
            tmp_path / name,
            [runtime.foo, runtime.bar],
            [(runtime.package, spec)],
            index_option="direct",
            rules_python_version="2.3.2",
            wheel_facts=wheel_facts,
        )
        assert main(["hub", "build", "--config", str(config)]) == 0
    return tmp_path / name


def preload(directory: Path) -> dict[str, object]:
    (wheel,) = (directory / "index").glob("fakejax-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read("fakejax/_patched_wheels_preload.json"))["preload"]


def _row(wheel: Path, path: str) -> list[str]:
    return [hashlib.sha256(wheel.read_bytes()).hexdigest(), path]


@pytest.mark.parametrize("lie", ["mapped and global", "global"])
def test_an_observation_the_wheels_contradict_is_one_warning_naming_the_file_and_the_probe_runs(
    tmp_path: Path,
    runtime: fakecuda.RuntimeLoadedWheels,
    installs: list[int],
    capsys: pytest.CaptureFixture[str],
    lie: str,
) -> None:
    """The attacker's edit: a library of the set the probe never maps (it needs a system library no machine has)
    listed as mapped and RTLD_GLOBAL; or a mapped library made RTLD_GLOBAL. The RTLD_GLOBAL set is derived from the
    wheels' symbol tables, so neither reaches the preload."""
    first = build(tmp_path, "first", runtime, cache="cache-a")
    assert preload(first) == {"global_": [], "libraries": [BAR, FOO], "optional": [BAR, FOO]}
    entries = json.loads((first / "wheel_facts.json").read_text(encoding="utf-8"))["entries"]
    (name,) = [name for name in entries if name.startswith("observed/")]
    if lie == "mapped and global":
        entries[name] = {
            **entries[name],
            "mapped": sorted([*entries[name]["mapped"], _row(runtime.bar, PMIX)]),
            "global": [_row(runtime.bar, PMIX)],
        }
        says = f"its global list ({PMIX}), the mapped libraries' symbol tables give none"
    else:
        entries[name] = {**entries[name], "global": [_row(runtime.bar, BAR)]}
        says = f"its global list ({BAR}), the mapped libraries' symbol tables give none"
    given = tmp_path / "workspace" / "wheel_facts.json"
    given.parent.mkdir()
    given.write_text(facts_text(entries), encoding="utf-8")
    capsys.readouterr()
    installs.clear()

    second = build(tmp_path, "second", runtime, cache="cache-b", wheel_facts=given)
    assert installs == [1], "the probe ran again"
    assert preload(second) == preload(first)
    assert (second / "wheel_facts.json").read_bytes() == (first / "wheel_facts.json").read_bytes(), (
        "what the probe maps is recorded"
    )
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("patched-wheels: warning")]
    (ignored,) = [line for line in warnings if "cache entry ignored" in line]
    assert ignored.startswith(f"patched-wheels: warning: {given}: entry {name}: cache entry ignored ({says}"), ignored
    assert ignored.endswith("; running the probe again"), ignored
    assert len(warnings) == 2 and f"cp {second / 'wheel_facts.json'} {given}" in warnings[1], warnings


def test_a_genuine_observation_spares_the_probe(
    tmp_path: Path, runtime: fakecuda.RuntimeLoadedWheels, installs: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    first = build(tmp_path, "first", runtime, cache="cache-a")
    capsys.readouterr()
    installs.clear()
    second = build(tmp_path, "second", runtime, cache="cache-b", wheel_facts=first / "wheel_facts.json")
    assert installs == [], "nothing installed nor probed: the facts checked out"
    assert preload(second) == preload(first)
    assert "patched-wheels: warning" not in capsys.readouterr().err


def test_a_failed_probe_is_used_for_its_build_and_never_recorded(
    tmp_path: Path, runtime: fakecuda.RuntimeLoadedWheels, installs: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    code = "import fakejax; raise SystemExit(3)"  # maps both libraries, then fails: a driver missing, say
    first = build(tmp_path, "first", runtime, cache="cache-a", probe_code=code)
    assert preload(first)["libraries"] == [BAR, FOO]
    assert "exits with status 3" in capsys.readouterr().err
    entries = json.loads((first / "wheel_facts.json").read_text(encoding="utf-8"))["entries"]
    assert not [name for name in entries if name.startswith("observed/")], "not recorded"
    assert not (tmp_path / "cache-a" / "observed").exists() or not list((tmp_path / "cache-a" / "observed").iterdir())
    installs.clear()
    build(tmp_path, "second", runtime, cache="cache-a", probe_code=code)
    assert installs == [1], "the next build probes again"
