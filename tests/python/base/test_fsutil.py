from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from patched_wheels.base import fsutil
from patched_wheels.base.fsutil import holds, remove_stale_temps, switch_tree, write_atomic
from support.hostile import make_special_file
from support.wheelbuilder import build_wheel


def test_writes_readable_file_and_skips_equal_content(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    write_atomic(target, b"one")
    assert target.read_bytes() == b"one"
    assert target.stat().st_mode & 0o777 == 0o644
    os.utime(target, ns=(1, 1))
    write_atomic(target, b"one")
    assert target.stat().st_mtime_ns == 1
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["page.html"]


def test_failed_replace_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    (target / "child").mkdir(parents=True)  # os.replace of a file over a non-empty directory fails
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["occupied"]


def _dead_pid() -> int:
    process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(process.stdout)


def test_a_tree_taken_away_while_it_is_switched_leaves_no_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: another writer that moves the target away between the check and the rename (what a concurrent
    build did) fails the switch; the empty directory made for the old tree goes with it."""
    staged, target = tmp_path / "staged", tmp_path / "index"
    staged.mkdir()
    target.mkdir()

    make = tempfile.mkdtemp

    def made_then_taken(**where: str) -> str:
        made = make(**where)
        shutil.rmtree(target)  # the other writer's move, at the worst moment
        return made

    monkeypatch.setattr(fsutil.tempfile, "mkdtemp", made_then_taken)
    with pytest.raises(FileNotFoundError):
        switch_tree(staged, target)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["staged"]


def test_temp_files_of_dead_runs_are_removed_and_others_kept(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getppid()
    stale_file = tmp_path / f".x.whl.pw-{dead}-abc123.tmp"
    stale_dir = tmp_path / f".split.pw-{dead}-def456.tmp"
    running = tmp_path / f".x.whl.pw-{alive}-ghi789.tmp"  # a concurrent run's
    foreign = [tmp_path / ".x.whl.abc.tmp", tmp_path / "x.whl", tmp_path / f".y.pw-{dead}-z.partial"]
    stale_file.write_bytes(b"half a wheel")
    (stale_dir / "inner").mkdir(parents=True)
    for path in [running, *foreign]:
        path.write_bytes(b"")
    for path in [stale_file, stale_dir, running, *foreign]:
        os.utime(path, (1, 1))
    young = tmp_path / f".young.pw-{dead}-jkl.tmp"  # newer than this run: not provably stale
    young.write_bytes(b"")

    remove_stale_temps(tmp_path)

    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(path.name for path in [running, young, *foreign])


def test_the_temp_file_of_a_killed_patch_is_removed_by_the_next_run(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "demo", "1.0", {"demo/x.py": b"x = 1\n"})
    out = tmp_path / "out"
    out.mkdir()
    killed = (
        "import os, sys\n"
        "from patched_wheels.wheelfile import WheelWriter\n"
        "writer = WheelWriter(sys.argv[1], dist_info='demo-1.0+s.dist-info')\n"
        "writer.write_bytes('demo/x.py', b'x' * 100000)\n"
        "os._exit(9)  # like SIGKILL: no cleanup runs\n"
    )
    subprocess.run([sys.executable, "-c", killed, str(out / "demo-1.0+s-py3-none-any.whl")], check=False)
    [leftover] = out.iterdir()
    assert leftover.name.startswith(".demo-1.0+s-py3-none-any.whl.") and leftover.stat().st_size > 0

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "patched_wheels",
            "patch",
            "--wheel",
            str(wheel),
            "--dest-dir",
            str(out),
            "--suffix",
            "s",
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert [path.name for path in out.iterdir()] == ["demo-1.0+s-py3-none-any.whl"]


def test_equal_content_with_other_permissions_is_rewritten(tmp_path: Path) -> None:
    target = tmp_path / "entry.json"
    write_atomic(target, b"rows", mode=0o600)
    target.chmod(0o660)
    write_atomic(target, b"rows", mode=0o600)
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "socket", "directory"])
def test_holds_reads_no_special_file_and_waits_for_none(tmp_path: Path, kind: str) -> None:
    make_special_file(kind, tmp_path / "page.html")
    assert not holds(tmp_path / "page.html", b"")
    assert not holds(tmp_path / "page.html", b"\0" * 10)


@pytest.mark.parametrize("where", ["last", "inside"])
def test_a_loop_of_links_resolves_to_one_oserror_naming_the_path(tmp_path: Path, where: str) -> None:
    """Python 3.9 to 3.12 raise RuntimeError (a traceback); 3.13 returns the link: both become ELOOP, named."""
    loop = tmp_path / "loop"
    make_special_file("link-loop", loop)
    given = loop if where == "last" else loop / "x.whl"
    with pytest.raises(OSError) as caught:
        fsutil.resolved_path(given)
        given.stat()  # 3.13 may leave a loop inside the path unresolved: using it is the same error
    assert caught.value.errno == errno.ELOOP and caught.value.filename == str(given)


def test_a_path_with_links_resolves_to_its_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    assert fsutil.resolved_path(tmp_path / "link" / "x.whl") == (tmp_path / "real" / "x.whl").resolve()
