"""The plan refuses, before any download, a path attribute the build would hand the file system and a ``suffix``
whose wheel's name the file system would refuse, each naming the attribute as the user wrote it: the build (after
every fetch) died of ``embedded null byte``, or named one of its temp files as too long."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from patched_wheels.base.fsutil import NAME_MAX
from patched_wheels.cli import main
from patched_wheels.errors import UsageError
from patched_wheels.hub.documents import HubConfig, HubRequest
from patched_wheels.hub.plan import check_request, checked_request, plan_hub
from patched_wheels.hub.spec import PatchedWheelSpec
from patched_wheels.lock.resolve import ResolvedWheel
from support.hubconfig import hub_inputs, index_attributes, run_plan, spec_request_json, write_config
from support.wheelbuilder import build_wheel

CALL = 'patched.patched_wheel(name = "faketorch", hub = "fixed")'
INDEX = 'patched.index(name = "fixed")'


def _raw(spec: dict[str, object] | None = None, labels: dict[str, str] | None = None, **attributes: object):
    return {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(**{"requirements_lock": "/ws/requirements_lock.txt", **attributes}),
        "rules_python_version": "2.3.2",
        "labels": labels or {},
        "repository": "/out/external/fixed",
        "patched": [{**spec_request_json(PatchedWheelSpec(name="faketorch", suffix="test.1")), **(spec or {})}],
    }


def _plan_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: dict[str, object]) -> str:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert main(["hub", "plan", "--request", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    return error.rstrip("\n")


@pytest.mark.parametrize(
    ("patch", "held"),
    [
        ("fix\0.patch", r"'\x00', a control character"),
        ("fix\n.patch", r"'\n', a control character"),
        ("fix\x1b[2J.patch", r"'\x1b', a control character"),
        ("fix\x85.patch", r"'\x85', a control character"),
        ("fix\ud800.patch", r"'\ud800', a surrogate"),
    ],
)
def test_a_patch_path_no_file_has_is_refused_by_the_plan_naming_patches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], patch: str, held: str
) -> None:
    error = _plan_error(tmp_path, capsys, _raw({"patches": ["ok.patch", patch]}))
    assert error == (
        f"patched-wheels: error: {CALL}: patches = {json.dumps(patch)}: holds {held}, which no file's path holds"
    )


def test_a_label_attribute_whose_path_no_file_has_is_refused_naming_the_label_and_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = _plan_error(tmp_path, capsys, _raw(requirements_lock="/ws/req\0.txt"))
    assert error == (
        f"patched-wheels: error: {INDEX}: requirements_lock = \"/ws/req\\u0000.txt\": holds '\\x00', "
        "a control character, which no file's path holds"
    )
    error = _plan_error(tmp_path, capsys, _raw(wheel_facts="/ws/facts\n.json", labels={"wheel_facts": "//:facts.json"}))
    assert error == (
        f'patched-wheels: error: {INDEX}: wheel_facts = "//:facts.json" (the path "/ws/facts\\n.json"): '
        "holds '\\n', a control character, which no file's path holds"
    )


def test_a_configuration_holding_such_a_path_is_refused_by_the_build_before_it_writes() -> None:
    """The build reads a file anyone may have edited: it checks the paths as the plan did."""
    wheels = [_wheel("faketorch", "2.1.0")]
    config = plan_hub(checked_request(HubRequest.from_json(_raw()), wheels), cache_root=None).config.to_json()
    config["patched"][0]["patches"] = ["fix\0.patch"]
    with pytest.raises(UsageError, match=rf"^{re.escape(CALL)}: patches = \"fix\\u0000.patch\": holds '\\x00'"):
        HubConfig.from_json(config)
    config["patched"][0]["patches"] = []
    config["attributes"]["wheel_facts"] = "/ws/f\0.json"
    with pytest.raises(UsageError, match=r"^hub configuration: attributes: wheel_facts = \"/ws/f\\u0000.json\": holds"):
        HubConfig.from_json(config)


def _wheel(project: str, version: str, build: str = "") -> ResolvedWheel:
    filename = f"{project.replace('-', '_')}-{version}{build}-py3-none-linux_x86_64.whl"
    return ResolvedWheel(project, filename, (f"https://files.example/{filename}",), "ab" * 32)  # type: ignore[arg-type]


# The longest name the build writes for a wheel W: ".W.metadata.pw-<pid, 7 digits>-<8 random>.tmp", 34 bytes more.
_OVERHEAD = 34


def _plan(spec: dict[str, object], wheel: ResolvedWheel) -> None:
    request = HubRequest.from_json(_raw(spec))
    check_request(request)
    plan_hub(checked_request(request, [wheel]), cache_root=None)


def test_a_suffix_whose_wheel_name_is_too_long_for_the_file_system_is_refused_by_the_plan() -> None:
    wheel = _wheel("faketorch", "2.1.0")  # faketorch-2.1.0+SUFFIX-py3-none-linux_x86_64.whl
    fits = NAME_MAX - _OVERHEAD - len("faketorch-2.1.0+-py3-none-linux_x86_64.whl")
    _plan({"suffix": "a" * fits}, wheel)

    with pytest.raises(UsageError) as raised:
        _plan({"suffix": "a" * (fits + 1)}, wheel)

    message = str(raised.value)
    assert message.startswith(f'{CALL}: suffix = "aaaa') and "faketorch-2.1.0+aaaa" in message, message
    assert message.endswith(
        f"({NAME_MAX - _OVERHEAD + 1} bytes), and the build writes files named after it in up to {NAME_MAX + 1} "
        f"bytes (its index's .metadata, written to a temp file first), more than the {NAME_MAX} a file name holds: "
        "give a suffix at least 1 characters shorter"
    ), message


def test_the_suffix_of_a_wheel_with_a_local_version_and_a_build_tag_counts_them_too() -> None:
    wheel = _wheel("faketorch", "2.1.0+cu118", "-1")  # faketorch-2.1.0+cu118.SUFFIX-1-py3-none-linux_x86_64.whl
    fits = NAME_MAX - _OVERHEAD - len("faketorch-2.1.0+cu118.-1-py3-none-linux_x86_64.whl")
    _plan({"suffix": "a" * fits}, wheel)
    with pytest.raises(UsageError, match=r'suffix = "aaa'):
        _plan({"suffix": "a" * (fits + 1)}, wheel)


def test_a_split_sibling_named_longer_than_the_wheel_names_split_into_too() -> None:
    wheel = _wheel("faketorch", "2.1.0")
    into = "faketorch-libs-" + "x" * 20
    fits = NAME_MAX - _OVERHEAD - len(f"{into.replace('-', '_')}-2.1.0+-py3-none-linux_x86_64.whl")
    spec = {"split_into": into, "split_max_size": 10}
    _plan({**spec, "suffix": "a" * fits}, wheel)

    with pytest.raises(UsageError) as raised:
        _plan({**spec, "suffix": "a" * (fits + 1)}, wheel)

    assert str(raised.value).startswith(f'{CALL}: suffix = "aaa'), raised.value
    assert f'with split_into = "{into}" makes the wheel "faketorch_libs_xxx' in str(raised.value), raised.value


def test_the_longest_suffix_the_plan_takes_builds(tmp_path: Path) -> None:
    """The bound is the build's: a hub with the longest suffix the plan takes builds and serves the wheel."""
    sources = tmp_path / "src"
    sources.mkdir()
    six = build_wheel(sources, "six", "1.0", {"six.py": b""})
    suffix = "a" * (NAME_MAX - _OVERHEAD - len("six-1.0+-py3-none-any.whl"))
    config = write_config(tmp_path / "hub", [], [(six, {"name": "six", "suffix": suffix})])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(["hub", "build", "--config", str(config)])
    assert code == 0, err.getvalue()
    assert (tmp_path / "hub" / "index" / f"six-1.0+{suffix}-py3-none-any.whl").is_file()

    request, resolved, _ = hub_inputs(tmp_path / "again", [six], [{"name": "six", "suffix": suffix + "a"}])
    code, _, err = run_plan(tmp_path, request, resolved)
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith('patched-wheels: error: patched.patched_wheel(name = "six", hub = "test"): suffix')
    assert not (tmp_path / "_hub.json").exists()
