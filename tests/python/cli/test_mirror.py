"""``mirror``: pip reads exactly the lock's bytes that were checked, from a private copy removed afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from patched_wheels.cli import main
from patched_wheels.cli import mirror as mirror_command
from support.indexfixtures import make_wheel, pip_env, run_cli, sha256_of

CHECKED = b"# a lock\nsix==1.16.0 \\\n    --hash=sha256:" + b"a" * 64 + b"\n"
SWAPPED = b"# swapped in after the check\n-r /dev/zero\n"


class FakePip:
    """``subprocess.run`` as ``mirror`` calls it: records the file given to ``-r`` and what it held then."""

    def __init__(self, status: int = 0) -> None:
        self.status = status
        self.read: list[tuple[Path, bytes, int]] = []

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        path = Path(command[command.index("-r") + 1])
        self.read.append((path, path.read_bytes(), path.stat().st_mode & 0o777))
        return subprocess.CompletedProcess(command, self.status)


def _swap_after_the_check(monkeypatch: pytest.MonkeyPatch, lock: Path) -> None:
    """Replace ``lock`` by another file once the command checked it, as pip is about to start."""
    start = mirror_command.mirror

    def swap_then_start(requirements: Path, directory: Path, **kwargs: Any) -> object:
        swapped = lock.with_name("swapped")
        swapped.write_bytes(SWAPPED)
        swapped.replace(lock)
        return start(requirements, directory, **kwargs)

    monkeypatch.setattr(mirror_command, "mirror", swap_then_start)


def _leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if ".pw-" in path.name)


def test_pip_reads_the_bytes_that_were_checked_not_a_file_swapped_in_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "locks" / "requirements.txt"
    lock.parent.mkdir()
    lock.write_bytes(CHECKED)
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)
    _swap_after_the_check(monkeypatch, lock)

    assert main(["mirror", "-r", str(lock), str(tmp_path / "mirror")]) == 0, capsys.readouterr().err

    ((read_path, read_bytes, mode),) = pip.read
    assert lock.read_bytes() == SWAPPED  # the swap happened, before pip started
    assert read_bytes == CHECKED and mode == 0o600
    assert read_path != lock and read_path.parent == lock.parent  # beside it: pip reads --find-links from there
    assert _leftovers(lock.parent) == [] and not read_path.exists()


def test_a_failing_pip_is_said_of_the_users_lock_and_its_copy_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_bytes(CHECKED)
    monkeypatch.setattr(subprocess, "run", FakePip(status=1))

    assert main(["mirror", "-r", str(lock), str(tmp_path / "mirror")]) == 1

    assert capsys.readouterr().err == (
        f"patched-wheels: error: {lock}: pip download failed (exit 1); pip's message is above\n"
    )
    # nothing left: not the copy, nor the directory the run made (an existing one stays: the next test)
    assert _leftovers(tmp_path) == [] and sorted(path.name for path in tmp_path.iterdir()) == ["requirements.txt"]
    (tmp_path / "mirror").mkdir()
    assert main(["mirror", "-r", str(lock), str(tmp_path / "mirror")]) == 1
    assert (tmp_path / "mirror").is_dir() and list((tmp_path / "mirror").iterdir()) == []


def test_a_lock_in_a_directory_that_takes_no_file_is_copied_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lock in a read-only directory (a checkout, a sandbox): the copy goes to a private temporary directory,
    under the lock's name, and is removed with it."""
    lock = tmp_path / "requirements.txt"
    lock.write_bytes(CHECKED)
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)

    def read_only(path: Path, *args: object, **kwargs: object) -> Path:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(mirror_command, "write_temp", read_only)
    assert main(["mirror", "-r", str(lock), str(tmp_path / "mirror")]) == 0, capsys.readouterr().err

    ((read_path, read_bytes, _),) = pip.read
    assert read_bytes == CHECKED and read_path.name == lock.name and read_path.parent != tmp_path
    assert not read_path.parent.exists()


def test_the_real_pip_reads_the_copy_as_it_reads_the_lock_a_relative_find_links_included(tmp_path: Path) -> None:
    """pip looks for a lock's relative ``--find-links`` beside the lock first: the copy it reads lies there too,
    so the command runs from another directory as it did when pip read the lock itself."""
    locks = tmp_path / "locks"
    (locks / "links").mkdir(parents=True)
    wheel = make_wheel(locks / "links", "relfake-1.0-py3-none-any.whl")
    lock = locks / "requirements.txt"
    lock.write_text(f"--find-links links\nrelfake==1.0 --hash=sha256:{sha256_of(wheel)}\n", encoding="utf-8")
    destination = tmp_path / "mirror"

    result = run_cli("mirror", "-r", str(lock), str(destination), "--", "--no-index", env=pip_env())

    assert result.returncode == 0, result.stderr
    assert "downloaded relfake-1.0-py3-none-any.whl" in result.stdout
    assert _leftovers(locks) == [] and sorted(path.name for path in locks.iterdir()) == ["links", "requirements.txt"]


@pytest.mark.parametrize(
    "line",
    [
        "foo @ file://{fifo}",
        "foo @ file://{zero}",
        "--find-links {fifo}",
        "--find-links=fifo",  # relative to the lock's directory, as pip reads it
        "--extra-index-url file://{fifo}",
        "-f{fifo}",  # the short option joined to its value
        '--find-links "{fifo}"',  # quoted, as pip's shell-like split reads it
    ],
    ids=[
        "reference-fifo",
        "reference-device",
        "find-links",
        "find-links-relative",
        "index-url",
        "short-joined",
        "quoted",
    ],
)
def test_a_local_file_pip_would_wait_on_is_the_lock_s_error_before_pip_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """As an included file is: a FIFO or /dev/zero named by a direct reference or an index option kept pip (and
    the command) waiting for ever, its staging directory and the lock's copy left behind once killed."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.whl"
    zero.symlink_to("/dev/zero")
    lock = tmp_path / "requirements.txt"
    lock.write_text(line.format(fifo=fifo, zero=zero) + "\n")
    pip = FakePip()
    monkeypatch.setattr(subprocess, "run", pip)

    assert main(["mirror", "-r", str(lock), str(tmp_path / "mirror")]) == 1

    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(f"patched-wheels: error: {lock}:1: ") and error.endswith(
        "is not a regular file or directory, which pip would wait on"
    )
    assert pip.read == [] and not (tmp_path / "mirror").exists() and _leftovers(tmp_path) == []


def test_a_mirror_ended_by_sigterm_leaves_nothing_behind(tmp_path: Path) -> None:
    """SIGTERM (a CI job cancelled, ``timeout``) ended the process at once: the staging directory inside DIR and the
    lock's copy beside it stayed. Now it ends as an interrupt does, through every cleanup, pip killed, status 143."""
    import os
    import signal
    import sys
    import time

    index = tmp_path / "index"
    (index / "six").mkdir(parents=True)
    os.mkfifo(index / "six" / "index.html")  # what pip reads, and waits on: a page no check looks inside
    lock = tmp_path / "requirements.txt"
    lock.write_text(f"--index-url {index.as_uri()}\nsix==1.16.0\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "patched_wheels", "mirror", "-r", str(lock), str(tmp_path / "mirror")],
        env=pip_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not list((tmp_path / "mirror").glob(".mirror.pw-*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # until pip runs in its staging directory
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert not (tmp_path / "mirror").exists() and _leftovers(tmp_path) == []
