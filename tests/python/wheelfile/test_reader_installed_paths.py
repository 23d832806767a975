"""The reader's check of where members land once installed: a ``<dist>.data/purelib/`` or ``platlib/`` member
installs into site-packages beside the root members, so the two must not clash (pypa's ``installer`` refuses
such a wheel half-way through installing it)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile as InstallerWheel

from patched_wheels.errors import InvalidWheelError
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from patched_wheels.wheelfile import WheelReader
from support.wheelbuilder import build_wheel


def _wheel(tmp_path: Path, files: dict[str, bytes], directories: tuple[str, ...] = ()) -> Path:
    """``demo 1.0`` holding ``files`` (``.data/`` keys in ``demo-1.0.data/``) and the directory entries
    ``directories`` (unlisted in RECORD, as a directory must be)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(tmp_path, "demo", "1.0", files)
    with zipfile.ZipFile(wheel, "a") as archive:
        for directory in directories:
            archive.writestr(zipfile.ZipInfo(directory), b"")
    return wheel


def _installs(wheel: Path, root: Path) -> None:
    """Install ``wheel`` with pypa's ``installer`` into ``root`` (purelib and platlib one site-packages)."""
    site_packages = str(root / "site-packages")
    schemes = {key: str(root / key) for key in ("scripts", "data", "headers")}
    schemes.update(purelib=site_packages, platlib=site_packages)
    with InstallerWheel.open(wheel) as source:
        install(source, SchemeDictionaryDestination(schemes, "python3", "posix"), {})


@pytest.mark.parametrize(
    ("files", "directories", "message"),
    [
        pytest.param(
            {"demo/__init__.py": b"root = 1\n", ".data/purelib/demo/__init__.py": b"data = 1\n"},
            (),
            "members 'demo/__init__.py' and 'demo-1.0.data/purelib/demo/__init__.py' clash once installed: "
            "both install demo/__init__.py",
            id="root and purelib",
        ),
        pytest.param(
            {"demo/_c.py": b"root = 1\n", ".data/platlib/demo/_c.py": b"data = 1\n"},
            (),
            "members 'demo/_c.py' and 'demo-1.0.data/platlib/demo/_c.py' clash once installed: both install demo/_c.py",
            id="root and platlib",
        ),
        pytest.param(
            {".data/purelib/shared.py": b"pure = 1\n", ".data/platlib/shared.py": b"plat = 1\n"},
            (),
            "members 'demo-1.0.data/purelib/shared.py' and 'demo-1.0.data/platlib/shared.py' clash once installed: "
            "both install shared.py",
            id="purelib and platlib",
        ),
        pytest.param(
            {"demo/__init__.py": b"", ".data/purelib/demo-1.0.dist-info/METADATA": b"Name: other\n"},
            (),
            "members 'demo-1.0.dist-info/METADATA' and 'demo-1.0.data/purelib/demo-1.0.dist-info/METADATA' clash "
            "once installed: both install demo-1.0.dist-info/METADATA",
            id="root's dist-info",
        ),
        pytest.param(
            {"demo/__init__.py": b"", ".data/purelib/demo": b"a file\n"},
            (),
            "members 'demo/__init__.py' and 'demo-1.0.data/purelib/demo' clash once installed: "
            "demo is a file of one and a directory of the other",
            id="a file where a root directory is",
        ),
        pytest.param(
            {".data/purelib/demo": b"a file\n"},
            ("demo/",),
            "members 'demo/' and 'demo-1.0.data/purelib/demo' clash once installed: "
            "demo is a file of one and a directory of the other",
            id="a file where a root directory entry is",
        ),
        pytest.param(
            {"demo.py": b"", ".data/platlib/demo.py/x.py": b""},
            (),
            "members 'demo.py' and 'demo-1.0.data/platlib/demo.py/x.py' clash once installed: "
            "demo.py is a file of one and a directory of the other",
            id="a directory where a root file is",
        ),
        pytest.param(
            {".data/purelib/pkg": b"", ".data/platlib/pkg/x.py": b""},
            (),
            "members 'demo-1.0.data/purelib/pkg' and 'demo-1.0.data/platlib/pkg/x.py' clash once installed: "
            "pkg is a file of one and a directory of the other",
            id="a .data directory where a .data file is",
        ),
        pytest.param(
            {".data/platlib/pkg/x.py": b"", ".data/purelib/pkg": b""},
            (),
            "members 'demo-1.0.data/platlib/pkg/x.py' and 'demo-1.0.data/purelib/pkg' clash once installed: "
            "pkg is a file of one and a directory of the other",
            id="a .data file where a .data directory is",
        ),
        pytest.param(
            {"demo.py": b""},
            ("demo-1.0.data/purelib/demo.py/",),
            "members 'demo.py' and 'demo-1.0.data/purelib/demo.py/' clash once installed: "
            "demo.py is a file of one and a directory of the other",
            id="a .data directory entry where a root file is",
        ),
    ],
)
def test_members_that_clash_once_installed_are_refused(
    tmp_path: Path, files: dict[str, bytes], directories: tuple[str, ...], message: str
) -> None:
    wheel = _wheel(tmp_path, files, directories)
    with pytest.raises(InvalidWheelError) as caught:
        WheelReader(wheel)
    assert str(caught.value) == f"{wheel.name}: {message}"


def test_pypa_installer_refuses_the_wheel_the_reader_refuses(tmp_path: Path) -> None:
    """What the check is for: ``installer`` writes the root member, then fails on the ``.data`` one."""
    wheel = _wheel(tmp_path, {"demo/__init__.py": b"root = 1\n", ".data/purelib/demo/__init__.py": b"data = 1\n"})
    with pytest.raises(FileExistsError):
        _installs(wheel, tmp_path / "installed")


def test_members_that_land_apart_are_accepted_and_install(tmp_path: Path) -> None:
    """A package spread over the root and purelib/platlib (a directory both hold is one directory), the same path
    under a scheme that installs outside site-packages, and directory entries on both sides."""
    wheel = _wheel(
        tmp_path,
        {
            "demo/__init__.py": b"",
            ".data/purelib/demo/extra.py": b"",
            ".data/platlib/demo/_c.py": b"",
            ".data/scripts/demo/__init__.py": b"",
            ".data/data/demo/__init__.py": b"",
            ".data/headers/demo.py": b"",
        },
        ("demo/", "demo-1.0.data/purelib/demo/", "demo-1.0.data/platlib/"),
    )
    with WheelReader(wheel) as reader:
        assert "demo-1.0.data/purelib/demo/extra.py" in reader
    _installs(wheel, tmp_path / "installed")
    assert sorted(path.name for path in (tmp_path / "installed" / "site-packages" / "demo").iterdir()) == [
        "__init__.py",
        "_c.py",
        "extra.py",
    ]


def test_a_patch_that_adds_a_root_member_over_a_data_one_writes_nothing(tmp_path: Path) -> None:
    """The check of a wheel about to be published (the writer's, :class:`WrittenArchive`) runs it too."""
    wheel = _wheel(tmp_path / "in", {"demo/__init__.py": b"", ".data/purelib/demo_extra.py": b"EXTRA = 1\n"})
    dest = tmp_path / "out"
    options = PatchOptions(suffix="p.1", member_edits={"demo_extra.py": lambda _: b"EXTRA = 2\n"})
    with pytest.raises(InvalidWheelError) as caught:
        patch_wheel(wheel, dest, options)
    assert str(caught.value) == (
        "demo-1.0+p.1-py3-none-any.whl: members 'demo_extra.py' and 'demo-1.0+p.1.data/purelib/demo_extra.py' "
        "clash once installed: both install demo_extra.py"
    )
    assert not dest.exists() or list(dest.iterdir()) == []
