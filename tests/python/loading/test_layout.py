"""Installing wheels into the two layouts (``loading/layout.py``'s ``install``, ``loading/probe.py``'s ``installed``)."""

from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath

import pytest
from tests.support.wheelbuilder import build_wheel, edit_headers, replace_members

from patched_wheels.errors import InvalidWheelError
from patched_wheels.loading.layout import FLAT, PER_WHEEL, SITE_PACKAGES, Layout, install
from patched_wheels.loading.probe import installed


def test_record_is_checked_unless_the_whole_wheel_was_pinned_and_the_crc_always(tmp_path: Path) -> None:
    """A member whose bytes disagree with RECORD stops an install, unless the caller checked the whole
    wheel's sha256 already (the hub); a member that disagrees with the zip's own CRC-32 always does."""
    wheel = build_wheel(tmp_path, "tampered", "1.0", {"tampered/__init__.py": b"answer = 1\n"})
    replace_members(wheel, {"tampered/__init__.py": b"answer = 2\n"})  # same size, RECORD's hash now wrong
    with pytest.raises(InvalidWheelError, match="tampered/__init__.py: content does not match its RECORD hash"):
        install(wheel, Layout(PER_WHEEL, PurePosixPath(tmp_path / "checked")))
    install(wheel, Layout(PER_WHEEL, PurePosixPath(tmp_path / "pinned")), check_record=False)
    assert (
        tmp_path / "pinned" / wheel.name[: -len(".whl")] / "site-packages" / "tampered" / "__init__.py"
    ).read_bytes() == b"answer = 2\n"

    edit_headers(wheel, "tampered/__init__.py", crc=0)
    with pytest.raises(
        InvalidWheelError, match="tampered/__init__.py: content does not match the zip directory's CRC-32"
    ):
        install(wheel, Layout(PER_WHEEL, PurePosixPath(tmp_path / "crc")), check_record=False)


@pytest.mark.parametrize("order", ["first, second", "second, first"])
def test_one_site_packages_holds_the_last_wheels_copy_of_a_shared_file(tmp_path: Path, order: str) -> None:
    """The wheels install a wheel per thread, yet a file two wheels ship ends up as pip's installs in order
    leave it: the last wheel's, and a file only one wheel ships is that wheel's own copy.  (One wheel shipping a
    file twice, ``x.py`` and ``<dist>.data/purelib/x.py``, is refused when it is read: test_reader_installed_paths.)"""
    first = build_wheel(tmp_path, "first", "1.0", {"ns/__init__.py": b"# first\n", "ns/first.py": b"FIRST = 1\n"})
    second = build_wheel(tmp_path, "second", "1.0", {"ns/__init__.py": b"# second\n", "second.py": b"SECOND = 2\n"})
    wheels = [first, second] if order == "first, second" else [second, first]
    with installed(wheels, (FLAT,)) as installation:
        site_packages = Path(installation.layouts[FLAT].root) / SITE_PACKAGES
        assert (site_packages / "ns" / "__init__.py").read_bytes() == (
            b"# second\n" if wheels[-1] == second else b"# first\n"
        )
        assert (site_packages / "ns" / "first.py").read_bytes() == b"FIRST = 1\n"
        assert installation.own_copy(first.name, "ns/first.py") == site_packages / "ns" / "first.py"
        assert installation.own_copy(first.name, "ns/__init__.py") is None
        assert installation.own_copy(second.name, "second.py") == site_packages / "second.py"


def test_a_bad_wheel_among_many_fails_the_install_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threads' first error is raised once every install has stopped; the temporary root is removed."""
    root = tmp_path / "temp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    good = [
        build_wheel(tmp_path, f"good{number}", "1.0", {f"good{number}/__init__.py": b"x" * 100_000})
        for number in range(4)
    ]
    bad = build_wheel(tmp_path, "bad", "1.0", {"bad/__init__.py": b"answer = 1\n"})
    replace_members(bad, {"bad/__init__.py": b"answer = 2\n"})
    with pytest.raises(InvalidWheelError, match="bad-1.0-py3-none-any.whl: bad/__init__.py"):
        with installed([*good[:2], bad, *good[2:]], (FLAT,)):
            pass
    assert list(root.iterdir()) == []
