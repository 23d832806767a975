"""``patch --suffix`` and ``split --into`` that make an output's file name too long for a file system: one error
line naming the option, before anything is written (the write failed naming its temp file)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from patched_wheels.base.fsutil import longest_temp_name
from patched_wheels.cli import main
from support.wheelbuilder import build_wheel

NAME_MAX = 255
TEMP_OVERHEAD = longest_temp_name("")  # what a temp file's name adds to its output's
LONGEST_NAME = NAME_MAX - TEMP_OVERHEAD
"""The longest output file name whose temp file's name fits."""


def _wheel(tmp_path: Path, name: str = "demo") -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    return build_wheel(tmp_path / "in", name, "1.0", {f"{name}/__init__.py": b"answer = 42\n"})


def _run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    status = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_longest_suffix_whose_wheel_fits_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = _wheel(tmp_path)
    suffix = "a" * (LONGEST_NAME - len("demo-1.0+-py3-none-any.whl"))
    status, out, err = _run(capsys, "patch", "--wheel", wheel, "--dest-dir", tmp_path / "out", "--suffix", suffix)
    assert (status, err) == (0, "")
    written = Path(out.splitlines()[0])
    assert len(written.name) == LONGEST_NAME and written.parent == tmp_path / "out"
    with zipfile.ZipFile(written) as archive:
        assert archive.read("demo/__init__.py") == b"answer = 42\n"


def test_a_suffix_one_character_longer_is_one_error_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = _wheel(tmp_path)
    suffix = "a" * (LONGEST_NAME + 1 - len("demo-1.0+-py3-none-any.whl"))
    status, out, err = _run(capsys, "patch", "--wheel", wheel, "--dest-dir", tmp_path / "out", "--suffix", suffix)
    output = f"demo-1.0+{suffix}-py3-none-any.whl"
    assert (status, out) == (1, "")
    assert err == (
        f'patched-wheels: error: {wheel.name}: --suffix "{suffix[:59]}... makes the wheel "{output[:59]}... '
        f"({LONGEST_NAME + 1} bytes), written to a temp file first named in up to {NAME_MAX + 1} bytes, more than "
        "the 255 a file name holds: give a suffix at least 1 characters shorter\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_sibling_name_too_long_is_one_error_line_naming_into_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = _wheel(tmp_path)
    into = "a" * (LONGEST_NAME + 1 - len("-1.0-py3-none-any.whl"))
    dest = tmp_path / "out"
    dest.mkdir()
    status, out, err = _run(capsys, "split", "--wheel", wheel, "--dest-dir", dest, "--into", into, "--move", "x/*.so")
    sibling = f"{into}-1.0-py3-none-any.whl"
    assert (status, out) == (1, "")
    assert err == (
        f'patched-wheels: error: {wheel.name}: --into "{into[:59]}... makes the sibling wheel "{sibling[:59]}... '
        f"({LONGEST_NAME + 1} bytes), written to a temp file first named in up to {NAME_MAX + 1} bytes, more than "
        "the 255 a file name holds: give a name at least 1 characters shorter\n"
    )
    assert list(dest.iterdir()) == []


def test_an_input_whose_own_name_is_too_long_to_write_again_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a suffix the wheel written is named as the input: a name that fits, but not its temp file's."""
    project = "d" * (LONGEST_NAME + 1 - len("-1.0-py3-none-any.whl"))
    wheel = _wheel(tmp_path, project)
    status, out, err = _run(capsys, "patch", "--wheel", wheel, "--dest-dir", tmp_path / "out")
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith(
        f"patched-wheels: error: {wheel.name}: its file name makes the wheel"
    )
    assert err.endswith("more than the 255 a file name holds: rename it at least 1 characters shorter\n")
    assert not (tmp_path / "out").exists()
