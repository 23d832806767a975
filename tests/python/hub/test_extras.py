"""The hub restores the extras rules_python drops: the wheels wired for a project are what pip installs."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from patched_wheels.cli import main
from patched_wheels.elf.graph import WheelRef
from patched_wheels.errors import UsageError
from patched_wheels.hub.extras import Restoration, decided_closure, restored_extras
from patched_wheels.hub.spec import PatchedWheelSpec
from patched_wheels.lock.closure import Closure, missing_from
from patched_wheels.lock.requiresdist import read_dist
from support import extrasfixture, fakecuda, wheelbuilder
from support.hubconfig import no_user_cache, write_config  # noqa: F401  (no_user_cache: autouse)
from support.uvfixture import compile_lock, serve_over_http, uv_locks


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


# What a root extra no lock records looks like, as each format writes it for `toolkit[rt]==1.0` (the user asked
# for the extra; nothing in the lock requires toolkit[rt]): the real uv's `uv pip compile --generate-hashes`
# writes `toolkit==1.0` (and `tk-rt==1.0  # via toolkit`), its pylock.toml has no extras, and a uv.lock without
# its project (the root whose edge records `extra = ["rt"]`) has none either. A uv.lock with its project records
# the extra: read, not inferred.


@pytest.fixture(scope="module")
def root_extra_locks(tmp_path_factory: pytest.TempPathFactory, wheels: extrasfixture.ExtrasWheels) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("root-extra-locks")
    pypi = root / "pypi"
    pypi.mkdir()
    for wheel in (wheels.toolkit, wheels.tk_rt):
        shutil.copyfile(wheel, pypi / wheel.name)
    assert main(["index", str(pypi)]) == 0
    with serve_over_http(pypi) as url:
        uv_lock, pylock = uv_locks(root / "project", url, ["toolkit[rt]==1.0"])
    blocks = uv_lock.read_text(encoding="utf-8").split("\n[[package]]\n")
    rootless = root / "rootless" / "uv.lock"
    rootless.parent.mkdir()
    rootless.write_text("\n[[package]]\n".join(b for b in blocks if 'name = "rpw-fixture"' not in b), encoding="utf-8")
    assert len(rootless.read_text(encoding="utf-8")) < len(uv_lock.read_text(encoding="utf-8"))
    return {
        "requirements_lock": compile_lock(root / "compile", pypi, ["toolkit[rt]==1.0"]),
        "uv_lock": uv_lock,
        "uv_lock without its project": rootless,
        "pylock": pylock,
    }


def build_from(
    tmp_path: Path,
    wheels: list[Path],
    attribute: str,
    lock: Path,
    capsys: pytest.CaptureFixture[str],
    **attributes: object,
) -> tuple[Path, list[str]]:
    """Builds the hub of ``lock`` (given as ``attribute``) over ``wheels``: the hub's folder and its warning lines."""
    config = write_config(
        tmp_path,
        wheels,
        [],
        index_option="direct",
        rules_python_version="2.3.2",
        lock=(attribute, lock),
        attributes=attributes,
    )
    capsys.readouterr()
    assert main(["hub", "build", "--config", str(config)]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return tmp_path, [line for line in err.splitlines() if line.strip()]


def read_closure_file(hub: Path) -> Closure:
    return Closure.from_json(json.loads((hub / "pip_closure.json").read_text(encoding="utf-8")), "pip_closure.json")


@pytest.mark.parametrize("form", ["requirements_lock", "uv_lock without its project", "pylock"])
def test_a_root_extra_the_lock_shows_is_inferred_restored_and_said_once(
    tmp_path: Path,
    wheels: extrasfixture.ExtrasWheels,
    root_extra_locks: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    form: str,
) -> None:
    attribute = form.split()[0]
    lock = root_extra_locks[form]
    hub, warnings = build_from(tmp_path, [wheels.toolkit, wheels.tk_rt], attribute, lock, capsys)
    (said,) = warnings
    assert said.startswith('patched-wheels: warning: patched.index(name = "test"): restores toolkit[rt], which ')
    assert f'{attribute} = "{lock}" does not record' in said, said
    assert "nothing else requires tk-rt (pip install -r installs them)" in said, said
    assert 'extras (["toolkit[]"] for none)' in said, said
    (restored,) = (hub / "index").glob("toolkit-*.whl")
    assert restored.name == "toolkit-1.0+extras-py3-none-any.whl"
    assert wheels.tk_rt in wired_like_rules_python("toolkit", [restored, wheels.tk_rt]), (
        "requirement(toolkit) brings tk-rt"
    )
    closure = read_closure_file(hub)
    assert closure.root_extras == {"toolkit": ("rt",)}
    assert [m.project for m in missing_from(closure, ["toolkit"])] == ["tk-rt"], "layout_test fails a layout without it"

    if form == "requirements_lock":
        # The judge of the premise: the real pip, given the compiled lock alone, installs tk-rt too.
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check"]
            + ["--find-links", str(wheels.tk_rt.parent), "--target", str(tmp_path / "site"), "-r", str(lock)],
            check=True,
            capture_output=True,
        )
        installed = {p.name for p in (tmp_path / "site").glob("*.dist-info")}
        assert installed == {"toolkit-1.0.dist-info", "tk_rt-1.0.dist-info"}
    if form == "uv_lock without its project":
        # With its project, the uv.lock records the extra on the project's edge: read, restored, nothing inferred.
        hub, warnings = build_from(
            tmp_path / "recorded", [wheels.toolkit, wheels.tk_rt], "uv_lock", root_extra_locks["uv_lock"], capsys
        )
        assert warnings == [] and read_closure_file(hub).root_extras == {"toolkit": ("rt",)}
        assert [w.name for w in (hub / "index").glob("toolkit-*.whl")] == [restored.name]


def test_the_extras_attribute_overrides_the_inference_and_restore_extras_false_restores_nothing(
    tmp_path: Path,
    wheels: extrasfixture.ExtrasWheels,
    root_extra_locks: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    lock = root_extra_locks["requirements_lock"]
    set_ = [wheels.toolkit, wheels.tk_rt]
    hub, warnings = build_from(tmp_path / "none", set_, "requirements_lock", lock, capsys, extras=["toolkit[]"])
    assert warnings == [] and list((hub / "index").glob("toolkit-*.whl")) == []
    assert read_closure_file(hub).root_extras == {}

    hub, warnings = build_from(tmp_path / "off", set_, "requirements_lock", lock, capsys, restore_extras=False)
    assert list((hub / "index").glob("*.whl")) == [] and "+extras" not in (hub / "requirements_lock.txt").read_text()
    (line,) = warnings
    assert ": puts in pip_closure.json (restore_extras = False) toolkit[rt], which requirements_lock = " in line, line
    closure = read_closure_file(hub)
    assert closure.root_extras == {"toolkit": ("rt",)}, "layout_test still holds the layout to what pip installs"
    assert [m.project for m in missing_from(closure, ["toolkit"])] == ["tk-rt"]


def test_an_extra_the_wheel_does_not_declare_is_not_restored_as_pip_installs_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`a` uses extra x in a marker but declares no Provides-Extra; `app` requires `a[x]`. pip installs a and app
    without c ("a 1.0 does not provide the extra 'x'"): so does the hub, with one warning."""
    a = wheelbuilder.build_wheel(tmp_path, "a", "1.0", {"a/__init__.py": b""}, requires=['c==1.0; extra == "x"'])
    c = wheelbuilder.build_wheel(tmp_path, "c", "1.0", {"c/__init__.py": b""})
    app = wheelbuilder.build_wheel(tmp_path, "app", "1.0", {"app/__init__.py": b""}, requires=["a[x]==1.0"])
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(tmp_path), "app"]
        + ["--target", str(tmp_path / "site"), "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "a 1.0 does not provide the extra 'x'" in pip.stderr, pip.stderr
    assert {p.name for p in (tmp_path / "site").glob("*.dist-info")} == {"app-1.0.dist-info", "a-1.0.dist-info"}

    config = write_config(tmp_path / "hub", [a, c, app], [], index_option="direct", rules_python_version="2.3.2")
    capsys.readouterr()
    assert main(["hub", "build", "--config", str(config)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert warnings == [
        'patched-wheels: warning: patched.index(name = "test"): app requires a[x], but a 1.0 does not provide the extra '
        "'x' (Provides-Extra): pip installs it without the extra, and so does the hub"
    ], warnings
    assert list((tmp_path / "hub" / "index").glob("*.whl")) == []
    closure = read_closure_file(tmp_path / "hub")
    assert closure.dists["a"].extras == {} and missing_from(closure, ["app", "a"]) == []


@pytest.mark.parametrize(
    "marker",
    [
        'extra == "y" and implementation_name ~= "1"',
        'extra ~= "1.0"',
        'extra === "y"',
        'extra == "y" or python_version ~= "x"',
        'platform_machine ~= "1.0"',
    ],
)
def test_a_marker_packaging_cannot_evaluate_is_one_warning_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], marker: str
) -> None:
    """pip 26.2.1 stops with UndefinedComparison's traceback on each of these, for `a` and for `a[y]` (checked by
    hand; the tests' pip is older): the hub leaves the requirement out, says so once, and builds."""
    a = wheelbuilder.build_wheel(
        tmp_path,
        "a",
        "1.0",
        {"a/__init__.py": b""},
        requires=[f"c==1.0; {marker}", "d==1.0"],
        metadata_extra="Provides-Extra: y\n",
    )
    c = wheelbuilder.build_wheel(tmp_path, "c", "1.0", {"c/__init__.py": b""})
    d = wheelbuilder.build_wheel(tmp_path, "d", "1.0", {"d/__init__.py": b""})
    app = wheelbuilder.build_wheel(tmp_path, "app", "1.0", {"app/__init__.py": b""}, requires=["a[y]==1.0"])
    config = write_config(tmp_path / "hub", [a, c, d, app], [], index_option="direct", rules_python_version="2.3.2")
    capsys.readouterr()
    assert main(["hub", "build", "--config", str(config)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        f"patched-wheels: warning: {a.name}: METADATA: Requires-Dist {f'c==1.0; {marker}'!r} ignored: its marker cannot be evaluated"
    ), warnings
    closure = read_closure_file(tmp_path / "hub")
    assert [e.project for e in closure.dists["a"].requires] == ["d"] and closure.dists["a"].extras == {}


# The decision itself (hub/extras.py): pure, from pip's closure and the plan's specs, pins and references.

TOOLKIT = "toolkit-1.0-py3-none-any.whl"
SET = [
    WheelRef("app-1.0-py3-none-any.whl", "a" * 64, Path("/hub/_wheels/app-1.0-py3-none-any.whl")),
    WheelRef(TOOLKIT, "b" * 64, Path(f"/hub/_wheels/{TOOLKIT}")),
    WheelRef("tk_rt-1.0-py3-none-any.whl", "c" * 64, Path("/hub/_wheels/tk_rt-1.0-py3-none-any.whl")),
]
PLANNED = Restoration(
    (),
    {},
    {
        "app": ("https://x/app-1.0-py3-none-any.whl", "a" * 64),
        "toolkit": (f"https://x/{TOOLKIT}", "b" * 64),
        "tk-rt": ("https://x/tk_rt-1.0-py3-none-any.whl", "c" * 64),
    },
)


def closure_of(*dists: tuple[str, list[str], list[str]]) -> Closure:
    """Pip's closure of the dists given as (project, Requires-Dist, Provides-Extra), each at 1.0, with no root extra."""
    read = [read_dist(project, "1.0", requires, provides, origin=project) for project, requires, provides in dists]
    return Closure({dist.project: dist for dist in read}, {})


APP_SET = closure_of(
    ("app", ["toolkit[rt]==1.0"], []),
    ("toolkit", ['tk-rt==1.0; extra == "rt"'], ["rt"]),
    ("tk-rt", [], []),
)


def test_a_wheel_whose_extra_pip_installs_gets_a_spec_of_its_own_and_its_pin_is_replaced() -> None:
    restored = restored_extras(PLANNED, APP_SET, SET, hub="h", bzlmod=True)
    assert restored.patched == (
        PatchedWheelSpec(name="toolkit", suffix="extras", add_requires=("tk-rt==1.0",), wheel=SET[1].path),
    )
    assert restored.replaced == {"toolkit": ["b" * 64]}
    assert restored.references == {key: PLANNED.references[key] for key in ("app", "tk-rt")}
    assert (
        restored_extras(
            PLANNED, closure_of(*[(p, [], []) for p in ("app", "toolkit", "tk-rt")]), SET, hub="h", bzlmod=True
        )
        == PLANNED
    )


def test_the_users_patched_wheel_of_that_project_gets_the_requirements_instead() -> None:
    user = PatchedWheelSpec(
        name="Toolkit", suffix="test.1", add_requires=("app==1.0",), wheel=Path(f"/hub/originals/{TOOLKIT}")
    )
    planned = Restoration(
        (user,), {"toolkit": ["b" * 64]}, {k: v for k, v in PLANNED.references.items() if k != "toolkit"}
    )
    restored = restored_extras(planned, APP_SET, SET, hub="h", bzlmod=True)
    assert restored == Restoration(
        (dataclasses.replace(user, add_requires=("app==1.0", "tk-rt==1.0")),), planned.replaced, planned.references
    )


def test_every_spec_it_returns_is_checked_as_the_configurations_are() -> None:
    flawed = PatchedWheelSpec(name="app", suffix="test.1", preload_package="app", wheel=SET[0].path)
    with pytest.raises(
        UsageError,
        match=r'^patched_wheel\(name = "app"\) of patched_index\(name = "h"\): preload_package needs preload = "auto" or "elf"$',
    ):
        restored_extras(dataclasses.replace(PLANNED, patched=(flawed,)), APP_SET, SET, hub="h", bzlmod=False)


def test_an_extra_whose_requirement_the_lock_does_not_pin_is_refused_naming_restore_extras() -> None:
    unpinned = closure_of(("app", ["toolkit[rt]==1.0"], []), ("toolkit", ['tk-rt==1.0; extra == "rt"'], ["rt"]))
    with pytest.raises(UsageError, match=r'^patched\.index\(name = "h"\): restore_extras: toolkit\[rt\] requires '):
        restored_extras(PLANNED, unpinned, SET[:2], hub="h", bzlmod=True)


# pip's closure and its messages decided from values, as the build reads them (decided_closure): no wheel on disk.
LOCK = 'requirements_lock = "/ws/requirements_lock.txt"'
TOOLKIT_SET = closure_of(("toolkit", ['tk-rt==1.0; extra == "rt"'], ["rt"]), ("tk-rt", [], []))


def decided(
    dists: Closure = TOOLKIT_SET,
    pinned: dict[str, set[str]] | None = None,
    asked: dict[str, list[str]] | None = None,
    *,
    restores: bool = True,
) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The root extras of the closure :func:`decided_closure` returns for ``dists``' wheels, and its warning lines."""
    closure, warnings = decided_closure(
        dists.dists,
        {canonicalize_name(project): extras for project, extras in (pinned or {}).items()},
        asked or {},
        call='patched.index(name = "h")',
        lock=LOCK,
        restores=restores,
    )
    assert closure.dists == dists.dists
    return dict(closure.root_extras), warnings


INFERRED = (
    'patched.index(name = "h"): restores toolkit[rt], which requirements_lock = "/ws/requirements_lock.txt" does not '
    "record: the lock pins every requirement of that extra, and nothing else requires tk-rt (pip install -r installs "
    """them); name toolkit's extras in extras (["toolkit[]"] for none) to decide otherwise"""
)


def test_a_root_extra_the_lock_shows_is_inferred_with_one_warning_and_the_attribute_decides_instead() -> None:
    assert decided() == ({"toolkit": ("rt",)}, [INFERRED])
    assert decided(restores=False) == (
        {"toolkit": ("rt",)},
        [INFERRED.replace("restores", "puts in pip_closure.json (restore_extras = False)", 1)],
    )
    assert decided(asked={"toolkit": []}) == ({}, []), '"toolkit[]": none inferred, nothing said'
    assert decided(asked={"toolkit": ["rt"]}) == ({"toolkit": ("rt",)}, [])
    assert decided(pinned={"toolkit": {"rt"}}) == ({"toolkit": ("rt",)}, []), "the lock records it"


def test_an_extra_the_attribute_asks_that_the_wheel_does_not_provide_is_the_one_error_before_any_warning() -> None:
    with pytest.raises(UsageError) as raised:
        decided(pinned={"toolkit": {"nope"}}, asked={"toolkit": ["rt", "gpu"]})
    assert str(raised.value) == (
        'patched.index(name = "h"): extras = ["toolkit[gpu]"]: toolkit 1.0 provides no extra gpu (it provides: rt)'
    )
    with pytest.raises(UsageError, match=r"tk-rt 1\.0 provides no extra x \(it provides: none\)$"):
        decided(asked={"tk-rt": ["x"]})
    with pytest.raises(
        UsageError, match=r"internal: the configuration's root_extras names other, which was not fetched$"
    ):
        decided(asked={"other": []})


def test_an_extra_asked_that_the_wheel_does_not_provide_is_a_warning_each_after_the_inferred_ones() -> None:
    dists = closure_of(
        ("app", ["other[gpu]"], []),
        ("toolkit", ['tk-rt==1.0; extra == "rt"'], ["rt"]),
        ("tk-rt", [], []),
        ("other", [], []),
    )
    unprovided = [
        'patched.index(name = "h"): requirements_lock = "/ws/requirements_lock.txt" asks for other[cli], but other 1.0 '
        "does not provide the extra 'cli' (Provides-Extra): pip installs it without the extra, and so does the hub",
        "patched.index(name = \"h\"): app requires other[gpu], but other 1.0 does not provide the extra 'gpu' "
        "(Provides-Extra): pip installs it without the extra, and so does the hub",
    ]
    assert decided(dists, pinned={"other": {"cli"}}) == (
        {"other": ("cli",), "toolkit": ("rt",)},
        [INFERRED, *unprovided],
    )
    roots, warnings = decided(dists, pinned={"other": {"cli"}, "toolkit": {"rt", "docs"}})
    assert roots == {"other": ("cli",), "toolkit": ("docs", "rt")}
    assert warnings == [
        *unprovided,
        'patched.index(name = "h"): requirements_lock = "/ws/requirements_lock.txt" asks for toolkit[docs], but '
        "toolkit 1.0 does not provide the extra 'docs' (Provides-Extra): pip installs it without the extra, and so "
        "does the hub",
    ]
