"""The hub restores the extras rules_python drops: the wheels wired for a project are what pip installs."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from patched_wheels.cli import main
from patched_wheels.loading.closure import Closure, missing_from
from support import extrasfixture, fakecuda
from support.hubconfig import no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> extrasfixture.ExtrasWheels:
    return extrasfixture.build_extras_wheels(tmp_path_factory.mktemp("extras"))


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name).decode()


def wired_like_rules_python(root: str, wheels: list[Path]) -> list[Path]:
    """The wheels rules_python wires for ``root``: every ``Requires-Dist`` whose marker holds without an extra,
    followed without its extras (its issues #4168, #2399)."""
    by_project = {canonicalize_name(w.name.split("-")[0]): w for w in wheels}
    wired, work = [], [canonicalize_name(root)]
    while work:
        project = work.pop()
        if by_project[project] in wired:
            continue
        wired.append(by_project[project])
        for line in metadata(by_project[project]).splitlines():
            if line.startswith("Requires-Dist: "):
                requirement = Requirement(line.removeprefix("Requires-Dist: "))
                if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                    work.append(canonicalize_name(requirement.name))
    return wired


def import_app(wired: list[Path], root: Path) -> str:
    result = fakecuda.run_import(fakecuda.per_wheel_layout(wired, root), "import app; print(app.answer())")
    return result.stdout + result.stderr


@pytest.mark.parametrize("index_option", ["direct", "index-url"])
def test_the_hub_wires_what_pip_installs_without_any_patched_wheel(
    tmp_path: Path, wheels: extrasfixture.ExtrasWheels, index_option: str
) -> None:
    plain = import_app(wired_like_rules_python("app", wheels.all), tmp_path / "plain")
    assert extrasfixture.MISSING_ERROR in plain, plain

    hub = tmp_path / "hub"
    config = write_config(hub, wheels.all, [], index_option=index_option)
    assert main(["hub", "build", "--config", str(config)]) == 0
    (restored,) = (hub / "index").glob("toolkit-*.whl")
    assert restored.name == "toolkit-1.0+extras-py3-none-any.whl"
    assert "Requires-Dist: tk-rt==1.0\n" in metadata(restored), "the extra's requirement, now plain"
    lock = (hub / "requirements_lock.txt").read_text(encoding="utf-8")
    assert ("toolkit @ file://" if index_option == "direct" else "toolkit==1.0+extras") in lock, lock
    served = [restored if w == wheels.toolkit else w for w in wheels.all]
    assert str(extrasfixture.ANSWER) in import_app(wired_like_rules_python("app", served), tmp_path / "hub-layout")
    if index_option == "index-url":
        assert not (hub / "index" / wheels.toolkit.name).exists(), "the original is no longer served beside its rewrite"

    closure = Closure.from_json(json.loads((hub / "pip_closure.json").read_text(encoding="utf-8")), "pip_closure.json")
    assert [m.project for m in missing_from(closure, ["app", "toolkit"])] == ["tk-rt"]


def test_restore_extras_false_leaves_the_lock_to_rules_python_and_still_writes_the_closure(
    tmp_path: Path, wheels: extrasfixture.ExtrasWheels
) -> None:
    config = write_config(tmp_path, wheels.all, [], index_option="direct", rules_python_version="2.3.2")
    raw = json.loads(config.read_text(encoding="utf-8"))
    raw["attributes"]["restore_extras"] = False
    config.write_text(json.dumps(raw), encoding="utf-8")
    assert main(["hub", "build", "--config", str(config)]) == 0
    assert list((tmp_path / "index").glob("*.whl")) == []
    assert "+extras" not in (tmp_path / "requirements_lock.txt").read_text(encoding="utf-8")
    assert (tmp_path / "pip_closure.json").is_file()


def test_a_root_extra_the_lock_does_not_record_is_restored_and_one_the_wheel_lacks_is_one_error(
    tmp_path: Path, wheels: extrasfixture.ExtrasWheels, capsys: pytest.CaptureFixture[str]
) -> None:
    """``toolkit[rt]`` asked by the user, not by ``app`` (left out of the set)."""
    config = write_config(
        tmp_path / "ok", [wheels.toolkit, wheels.tk_rt], [], index_option="direct", rules_python_version="2.3.2"
    )
    raw = json.loads(config.read_text(encoding="utf-8"))
    config.write_text(json.dumps({**raw, "root_extras": {"toolkit": ["rt"]}}), encoding="utf-8")
    assert main(["hub", "build", "--config", str(config)]) == 0
    assert (tmp_path / "ok" / "index" / "toolkit-1.0+extras-py3-none-any.whl").is_file()

    config.write_text(json.dumps({**raw, "root_extras": {"toolkit": ["gpu"]}}), encoding="utf-8")
    capsys.readouterr()
    assert main(["hub", "build", "--config", str(config)]) == 1
    error = capsys.readouterr().err
    assert (
        error.count("\n") == 1
        and 'extras = ["toolkit[gpu]"]: toolkit 1.0 provides no extra gpu (it provides: rt)' in error
    ), error
