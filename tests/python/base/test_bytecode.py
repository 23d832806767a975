"""The helper's persistent bytecode directory (bytecode.py): where, when it is trusted, and that it is reused."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import ContextManager, Iterator

import pytest

from patched_wheels.base import bytecode
from patched_wheels.base.bytecode import bytecode_dir, source_digest

PYTHON_DIR = Path(bytecode.__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "root"))


def _package(tmp_path: Path, text: str) -> Path:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "mod.py").write_text(text)
    return package


def test_created_private_and_keyed_by_interpreter_and_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = _package(tmp_path, "A = 1\n")
    first = bytecode_dir(package)
    assert first is not None and first.parent == tmp_path / "root" / "bytecode"
    assert first.name == f"{sys.implementation.cache_tag}-{source_digest(package)[:16]}"
    for directory in (tmp_path / "root", first.parent, first):
        assert os.stat(directory).st_mode & 0o777 == 0o700, directory
    assert bytecode_dir(package) == first

    # Same size, same mtime, other bytes: Python would believe the old .pyc, the digest does not.
    path = package / "sub" / "mod.py"
    stamp = path.stat()
    path.write_text("A = 2\n")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert bytecode_dir(package) != first
    assert capsys.readouterr().err == ""


def test_releases_not_chosen_for_a_month_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each release gets its own directory; choosing one touches it and removes siblings stale for STALE_AFTER."""
    removed: list[str] = []
    rmtree = shutil.rmtree
    monkeypatch.setattr(
        bytecode.shutil, "rmtree", lambda path, **kwargs: (removed.append(os.fspath(path)), rmtree(path, **kwargs))
    )
    root = tmp_path / "root" / "bytecode"
    tag = sys.implementation.cache_tag
    stale, recent = root / f"{tag}-{'a' * 16}", root / f"{tag}-{'b' * 16}"
    foreign, outside = root / "notes", tmp_path / "outside"
    linked = root / f"{tag}-{'c' * 16}"
    for directory in (stale / "x", recent / "x", foreign, outside):
        directory.mkdir(parents=True)
    linked.symlink_to(outside)
    for directory in (root, root.parent):
        directory.chmod(0o700)
    old = time.time() - bytecode.STALE_AFTER - 60
    for path in (stale, foreign, outside):
        os.utime(path, (old, old))
    os.utime(linked, (old, old), follow_symlinks=False)
    chosen = bytecode_dir(_package(tmp_path, "A = 1\n"))
    assert chosen is not None and chosen.exists()
    assert not stale.exists() and removed == [os.fspath(stale)]  # not the link (rmtree would refuse it, silently)
    assert recent.exists() and foreign.exists() and outside.exists() and linked.is_symlink()

    # Choosing a directory again refreshes it: it is not the next release's stale sibling.
    os.utime(chosen, (old, old))
    assert bytecode_dir(_package(tmp_path, "A = 1\n")) == chosen
    assert chosen.stat().st_mtime > old + 60
    assert bytecode_dir(_package(tmp_path, "A = 2\n")) != chosen and chosen.exists()


def test_a_renamed_source_changes_the_digest(tmp_path: Path) -> None:
    package = _package(tmp_path, "A = 1\n")
    before = source_digest(package)
    (package / "sub" / "mod.py").rename(package / "sub" / "other.py")
    assert source_digest(package) != before


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o770])
def test_a_directory_others_may_enter_is_not_used(
    tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python reads whatever .pyc it finds below the prefix, so group or others must not even reach it."""
    (tmp_path / "root" / "bytecode").mkdir(parents=True)
    os.chmod(tmp_path / "root" / "bytecode", mode)
    assert bytecode_dir(_package(tmp_path, "")) is None
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"patched-wheels: warning: {tmp_path / 'root' / 'bytecode'}: bytecode directory not used")
    assert f"{mode:04o}" in line


def test_off_and_a_relative_root_give_none_silently(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = _package(tmp_path, "")
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "off")
    assert bytecode_dir(package) is None
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "relative/dir")  # the helper's real run reports this one
    assert bytecode_dir(package) is None
    assert capsys.readouterr().err == ""


def test_an_unwritable_root_is_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "root").write_text("a file where the cache root should be")  # even root cannot mkdir below a file
    assert bytecode_dir(_package(tmp_path, "")) is None
    (line,) = capsys.readouterr().err.splitlines()
    assert "bytecode directory not usable" in line and "Traceback" not in line


def _helper(env_prefix: str) -> subprocess.CompletedProcess[str]:
    """A helper process importing what ``hub plan`` imports, with the prefix the rules give it."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")} | {
        "PYTHONPATH": str(PYTHON_DIR),
        "PYTHONPYCACHEPREFIX": env_prefix,
        "PYTHONNOUSERSITE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", "import patched_wheels.hub.plan"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )


def test_the_command_prints_the_directory_and_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    environment |= {
        "PYTHONPATH": str(PYTHON_DIR),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RULES_PATCHED_WHEELS_CACHE": str(tmp_path / "root"),
    }
    printed = subprocess.run(
        [sys.executable, "-m", "patched_wheels.base.bytecode"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert printed.stderr == ""
    directory = Path(printed.stdout.strip())
    assert directory.parent == tmp_path / "root" / "bytecode"
    assert not list(directory.rglob("*.pyc"))  # asking wrote nothing

    _helper(str(directory))  # cold: compiles into the directory
    compiled = {path: path.stat().st_mtime_ns for path in directory.rglob("*.pyc")}
    assert any(path.parent.name == "hub" and path.name.startswith("plan.") for path in compiled), sorted(compiled)[:5]
    _helper(str(directory))  # warm: reads them, writes none
    assert {path: path.stat().st_mtime_ns for path in directory.rglob("*.pyc")} == compiled


def test_housekeeping_that_fails_keeps_the_chosen_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale sibling removed by another helper process between the listing and its stat, or a read-only
    cache: the chosen directory was given up with a warning, so the helper compiled every module again."""
    root = tmp_path / "root" / "bytecode"
    tag = sys.implementation.cache_tag
    vanished, stale = root / f"{tag}-{'a' * 16}", root / f"{tag}-{'b' * 16}"
    for directory in (vanished, stale):
        directory.mkdir(parents=True)
        old = time.time() - bytecode.STALE_AFTER - 60
        os.utime(directory, (old, old))
    for directory in (root, root.parent):
        directory.chmod(0o700)
    scandir = os.scandir

    def listing_then_removal(path: object) -> ContextManager[Iterator[os.DirEntry[str]]]:
        if path != root:  # rmtree's own listings
            return scandir(path)  # type: ignore[call-overload]
        entries = sorted(scandir(path), key=lambda entry: entry.name)
        shutil.rmtree(vanished)  # by the other process, after the listing
        return contextlib.nullcontext(iter(entries))

    monkeypatch.setattr(bytecode.os, "scandir", listing_then_removal)
    chosen = bytecode_dir(_package(tmp_path, "A = 1\n"))
    assert chosen is not None and chosen.exists() and not stale.exists()
    monkeypatch.setattr(bytecode.os, "scandir", scandir)

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(bytecode.os, "utime", read_only)
    assert bytecode_dir(_package(tmp_path, "A = 1\n")) == chosen
    assert capsys.readouterr().err == ""


def _release(tmp_path: Path, package: Path) -> Path:
    return tmp_path / "root" / "bytecode" / f"{sys.implementation.cache_tag}-{source_digest(package)[:16]}"


def _one_warning(capsys: pytest.CaptureFixture[str], culprit: Path) -> str:
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"patched-wheels: warning: {culprit}: bytecode directory "), line
    assert line.endswith("; the helper compiles its modules") and "Traceback" not in line
    return line


@pytest.mark.parametrize("kind", ["mode 0777", "mode 0750", "link to a 0777 directory", "link to a 0700 directory"])
def test_a_release_directory_that_is_not_private_is_not_used(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The release's directory, not only ``bytecode``: one made earlier by someone else (``bytecode`` was 0777 a
    while, or another user owns a shared cache) is where Python reads .pyc files, and an existing one was taken
    as it was; a symbolic link leads wherever its target's owner decides."""
    package = _package(tmp_path, "")
    release = _release(tmp_path, package)
    release.parent.mkdir(parents=True)
    for directory in (release.parent, release.parent.parent):
        directory.chmod(0o700)
    if kind.startswith("mode"):
        release.mkdir()
        release.chmod(int(kind[-4:], 8))
    else:
        target = tmp_path / "elsewhere"
        target.mkdir()
        target.chmod(int(kind[-14:-10], 8))
        release.symlink_to(target)
    assert bytecode_dir(package) is None
    line = _one_warning(capsys, release)
    assert ("a symbolic link" if kind.startswith("link") else kind[-4:]) in line


@pytest.mark.parametrize("kind", ["link", "file", "fifo"])
def test_a_bytecode_entry_that_is_not_a_directory_is_not_used(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bytecode`` a symbolic link out of the cache (to a 0700 directory of this user's, even) is refused, not
    followed; neither is a file or a FIFO waited on."""
    bytecode_path = tmp_path / "root" / "bytecode"
    bytecode_path.parent.mkdir(mode=0o700)
    if kind == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        bytecode_path.symlink_to(tmp_path / "elsewhere")
    elif kind == "file":
        bytecode_path.write_text("")
        bytecode_path.chmod(0o600)
    else:
        os.mkfifo(bytecode_path, 0o600)
    assert bytecode_dir(_package(tmp_path, "")) is None
    line = _one_warning(capsys, bytecode_path)
    assert ("a symbolic link" if kind == "link" else "not a directory") in line


@pytest.mark.parametrize(
    ("where", "mode", "used"),
    [
        ("root", 0o777, False),
        ("root", 0o770, False),
        ("above", 0o777, False),
        ("above", 0o757, False),
        ("above", 0o1777, True),  # sticky, as /tmp: nobody else may rename what it holds
        ("above", 0o755, True),
    ],
)
def test_a_path_that_others_may_write_is_not_used(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
    mode: int,
    used: bool,
) -> None:
    """A cache root (or a directory above it) others may write: they rename ``bytecode`` away after the check
    and put their own .pyc files in its place, which every later helper process reads by path."""
    above = tmp_path / "shared"
    root = above / "root"
    root.mkdir(parents=True, mode=0o700)
    (root if where == "root" else above).chmod(mode)
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(root))
    chosen = bytecode_dir(_package(tmp_path, ""))
    if used:
        assert chosen is not None and chosen.parent == root / "bytecode"
        assert capsys.readouterr().err == ""
        return
    assert chosen is None
    culprit = root if where == "root" else above
    line = _one_warning(capsys, culprit)
    assert f"bytecode directory {root / 'bytecode'} not used" in line and f"mode {mode:04o}" in line


def test_symbolic_links_on_the_path_are_followed_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``~/.cache`` a link to another disk is common: the directories it leads through are checked, not the
    link's name; a relative link and ``..`` resolve as the kernel resolves them."""
    real = tmp_path / "real"
    (real / "cache").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".cache").symlink_to("../real/cache")
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "home" / ".cache" / ".." / ".cache" / "root"))
    assert bytecode_dir(_package(tmp_path, "")) is not None
    assert capsys.readouterr().err == ""

    real.chmod(0o777)  # the link's target lies in a directory others may write
    assert bytecode_dir(_package(tmp_path, "")) is None
    _one_warning(capsys, real)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@needs_root
@pytest.mark.parametrize("what", ["release", "bytecode", "above", "link in a sticky directory"])
def test_what_another_user_owns_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    other = 65534
    package = _package(tmp_path, "")
    if what == "link in a sticky directory":  # /tmp-like: the link's owner may point it elsewhere
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        (tmp_path / "target").mkdir()
        culprit = sticky / "link"
        culprit.symlink_to(tmp_path / "target")
        os.lchown(culprit, other, other)
        monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(culprit / "root"))
    elif what == "above":
        culprit = tmp_path / "theirs"
        (culprit / "root").mkdir(parents=True)
        os.chown(culprit, other, other)
        monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(culprit / "root"))
    else:
        culprit = _release(tmp_path, package) if what == "release" else tmp_path / "root" / "bytecode"
        culprit.mkdir(parents=True, mode=0o700)
        for directory in (tmp_path / "root", tmp_path / "root" / "bytecode"):
            directory.chmod(0o700)
        os.chown(culprit, other, other)
    assert bytecode_dir(package) is None
    assert f"uid {other}" in _one_warning(capsys, culprit)


def test_the_command_prints_no_prefix_for_a_cache_root_others_may_write(tmp_path: Path) -> None:
    """The attack the path check stops: with a cache root of mode 0777 (a shared RULES_PATCHED_WHEELS_CACHE),
    another user renamed ``bytecode`` away once its name was printed, made a new one, and planted an
    unchecked-hash .pyc of the helper's ``__init__``, which the next helper process ran. Now no prefix is
    printed for such a root (the rule keeps its per-repository one), so no helper process reads there."""
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")} | {
        "PYTHONPATH": str(PYTHON_DIR),
        "PYTHONDONTWRITEBYTECODE": "1",
        "RULES_PATCHED_WHEELS_CACHE": str(root),
    }
    printed = subprocess.run(
        [sys.executable, "-S", "-m", "patched_wheels.base.bytecode"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert printed.stdout == "\n"
    assert printed.stderr.startswith(f"patched-wheels: warning: {root}: bytecode directory {root / 'bytecode'}")
