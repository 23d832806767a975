"""Hostile inputs and destinations for the wheel-writing commands (``patch``, ``split``), through the CLI: one
error line naming the input (or destination) at fault, exit 1, no partial output; or a valid, readable output."""

from __future__ import annotations

import errno
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import threading
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import pytest

from patched_wheels.cli import main
from support.fakecuda import build_fake_cuda_wheels
from support.hostile import make_special_file
from support.wheelbuilder import build_wheel, edit_headers

FILES = {
    "demo/__init__.py": b"x = 1\n",
    "demo/big.bin": random.Random(7).randbytes(2 << 20),
    "demo/caf\u00e9.txt": b"hi\n",
}
"""big.bin: over 1 MiB compressed, so it is copied by the kernel after a padded local header of ours."""


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return build_wheel(tmp_path / "in", "demo", "1.0", FILES, compression=zipfile.ZIP_STORED)


def _patch(capsys: pytest.CaptureFixture[str], wheel: Path, dest: Path, *extra: str) -> tuple[int, str]:
    status = main(["patch", "--wheel", str(wheel), "--dest-dir", str(dest), "--suffix", "x.1", *extra])
    captured = capsys.readouterr()
    return status, captured.err


def _one_error(status: int, err: str, dest: Path) -> str:
    """The error line, once the promises hold: exit 1, one line, nothing written into ``dest``."""
    assert status == 1 and err.count("\n") == 1 and err.startswith("patched-wheels: error: "), (status, err)
    assert not dest.exists() or not any(dest.iterdir()), sorted(dest.iterdir())
    return err.strip()


def _header_offset(wheel: Path, member: str) -> int:
    with zipfile.ZipFile(wheel) as archive:
        return archive.getinfo(member).header_offset


def test_a_wheel_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "demo-1.0-py3-none-any.whl"
    make_special_file("fifo", fifo)
    command = [
        sys.executable,
        "-m",
        "patched_wheels",
        "patch",
        "--wheel",
        str(fifo),
        "--dest-dir",
        str(tmp_path / "out"),
        "--suffix",
        "x.1",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=30
    )  # opening it for reading blocked forever
    assert (result.returncode, result.stderr) == (
        1,
        f"patched-wheels: error: {fifo}: not a regular file (a FIFO, device, socket or directory)\n",
    )
    assert not (tmp_path / "out").exists()


def test_a_name_flagged_utf8_that_is_not_is_named(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path
) -> None:
    """The error named the codec's complaint and no member."""
    data = bytearray(wheel.read_bytes())
    data[data.rindex("demo/caf\u00e9.txt".encode()) + 8] = 0xFF  # the central name's \u00e9 (the local one comes first)
    wheel.write_bytes(bytes(data))
    status, err = _patch(capsys, wheel, tmp_path / "out")
    assert _one_error(status, err, tmp_path / "out") == (
        f"patched-wheels: error: {wheel}: member b'demo/caf\\xff\\xa9.txt': flagged UTF-8, not UTF-8 (byte 8)"
    )


@pytest.mark.parametrize(
    ("member", "flags"), [("demo/caf\u00e9.txt", 0), ("demo/__init__.py", 0x8), ("demo/big.bin", 0x8)]
)
def test_local_flags_that_read_differently_are_refused(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path, member: str, flags: int
) -> None:
    """A local header without the central record's UTF-8 flag names another file for zipfile (which refuses the member),
    one with a data descriptor flag the central record lacks promises a descriptor after the data: copied verbatim,
    both went into the output (zipfile could not read the first)."""
    edit_headers(wheel, member, local_only=True, flags=flags)
    status, err = _patch(capsys, wheel, tmp_path / "out")
    assert _one_error(status, err, tmp_path / "out") == (
        f"patched-wheels: error: {wheel.name}: {member}: local header disagrees with the central directory"
    )


@pytest.mark.parametrize("member", ["demo/__init__.py", "demo/big.bin"])
def test_a_local_name_that_only_starts_with_the_central_one_is_refused(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path, member: str
) -> None:
    """The local name one byte longer (its data's first byte): zipfile refuses the member; it was copied,
    verbatim or from one byte too far."""
    data = bytearray(wheel.read_bytes())
    struct.pack_into("<H", data, _header_offset(wheel, member) + 26, len(member) + 1)
    wheel.write_bytes(bytes(data))
    status, err = _patch(capsys, wheel, tmp_path / "out")
    assert (
        _one_error(status, err, tmp_path / "out")
        == f"patched-wheels: error: {wheel.name}: {member}: local header names another file"
    )


def _data_start(wheel: Path, member: str) -> int:
    """Where ``member``'s data starts: after its local header, whose own extra field length counts."""
    offset = _header_offset(wheel, member)
    with open(wheel, "rb") as handle:
        handle.seek(offset + 26)
        name_length, extra_length = struct.unpack("<HH", handle.read(4))
    return offset + 30 + name_length + extra_length


@pytest.mark.parametrize("into", ["data", "header"])
def test_members_that_overlap_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, into: str) -> None:
    """inner.bin's entry points at a local header of its own planted in big.bin's data (a zip bomb's nesting:
    each copied whole), or at big.bin's own header: zipfile refuses both since Python 3.11.8."""
    inner = FILES["demo/big.bin"][: 3 << 19]
    planted = struct.pack(
        "<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0x21, zlib.crc32(inner), len(inner), len(inner), 14, 0
    )
    files = {
        "demo/big.bin": planted + b"demo/inner.bin" + inner,
        "demo/inner.bin": inner,
    }  # the real inner.bin, orphaned
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "demo", "1.0", files, compression=zipfile.ZIP_STORED)
    edit_headers(wheel, "demo/inner.bin", header_offset=_data_start(wheel, "demo/big.bin") if into == "data" else 0)
    status, err = _patch(capsys, wheel, tmp_path / "out")
    assert (
        _one_error(status, err, tmp_path / "out")
        == f"patched-wheels: error: {wheel.name}: member 'demo/big.bin': overlaps member 'demo/inner.bin'"
    )


@pytest.mark.parametrize(
    ("member", "lie"),
    [
        ("demo/big.bin", 0xFFFF),  # copied by the kernel: ran past the end of the file ('truncated', naming the output)
        ("demo/caf\u00e9.txt", 60),  # through the read-ahead window: copied 60 bytes of the next header as its data
        ("demo-1.0.dist-info/RECORD", 40),  # the last member: its data read from the central directory
    ],
)
def test_a_local_extra_field_running_the_data_into_what_follows_is_refused(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path, member: str, lie: int
) -> None:
    """A local extra field longer than the member's room (zipfile refuses it since 3.11.8: each member
    could copy up to 64 KiB of the archive's other bytes as its own)."""
    with zipfile.ZipFile(wheel) as archive:
        assert archive.infolist()[-1].filename == "demo-1.0.dist-info/RECORD"
    data = bytearray(wheel.read_bytes())
    offset = _header_offset(wheel, member) + 28
    struct.pack_into("<H", data, offset, struct.unpack_from("<H", data, offset)[0] + lie)  # extra field length
    wheel.write_bytes(bytes(data))
    status, err = _patch(capsys, wheel, tmp_path / "out")
    assert _one_error(status, err, tmp_path / "out") == (
        f"patched-wheels: error: {wheel.name}: {member}: local header and data run into the next member or the central directory"
    )


def test_verify_refuses_a_crc_that_lies_for_a_raw_copied_member(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path
) -> None:
    """The content matches RECORD, the CRC-32 of both headers does not: copied raw, zipfile (so pip) refused the output."""
    edit_headers(wheel, "demo/big.bin", crc=0x12345678)
    status, err = _patch(capsys, wheel, tmp_path / "out", "--verify")
    assert _one_error(status, err, tmp_path / "out") == (
        f"patched-wheels: error: {wheel.name}: demo/big.bin: content does not match the zip directory's CRC-32"
    )


def test_an_existing_alignment_field_and_other_extra_fields_give_a_valid_aligned_output(tmp_path: Path) -> None:
    """Input local headers already padded (zipalign's 0xD935, as our outputs are) or with a timestamp field."""
    padding = struct.pack("<HHH", 0xD935, 102, 4096) + bytes(100)
    timestamp = struct.pack("<HHBI", 0x5455, 5, 1, 12345)
    source = tmp_path / "demo-1.0-py3-none-any.whl"
    with (
        zipfile.ZipFile(build_wheel(tmp_path, "demo", "1.0", FILES)) as built,
        zipfile.ZipFile(tmp_path / "x.zip", "w") as archive,
    ):
        for info in built.infolist():
            info.extra = {"demo/big.bin": padding + timestamp, "demo/__init__.py": timestamp + padding}.get(
                info.filename, b""
            )
            archive.writestr(info, built.read(info))
    os.replace(tmp_path / "x.zip", source)
    assert (
        main(["patch", "--wheel", str(source), "--dest-dir", str(tmp_path / "out"), "--suffix", "x.1", "--verify"]) == 0
    )
    (output,) = (tmp_path / "out").iterdir()
    with zipfile.ZipFile(output) as archive:
        assert archive.testzip() is None and archive.read("demo/big.bin") == FILES["demo/big.bin"]
    assert _data_start(output, "demo/big.bin") % 4096 == _data_start(source, "demo/big.bin") % 4096


@pytest.fixture(scope="module")
def torch_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_cuda_wheels(tmp_path_factory.mktemp("fakecuda")).torch


def test_split_publishes_both_wheels_or_neither(
    capsys: pytest.CaptureFixture[str], torch_wheel: Path, tmp_path: Path
) -> None:
    """The main output's name is taken by a directory: the sibling, renamed first, was left behind, and the
    error named a temp file that no longer exists; then a sibling of an earlier run was replaced and removed."""
    command = [
        "split",
        "--wheel",
        str(torch_wheel),
        "--dest-dir",
        str(tmp_path),
        "--into",
        "faketorch-libs",
        "--move",
        "faketorch/lib/*.so",
    ]
    assert main(command) == 0
    sibling = next(path for path in tmp_path.iterdir() if path.name.startswith("faketorch_libs-"))
    earlier = sibling.read_bytes()
    main_output = tmp_path / torch_wheel.name
    main_output.unlink()
    main_output.mkdir()
    capsys.readouterr()
    status = main(command)
    err = capsys.readouterr().err
    assert (status, err) == (1, f"patched-wheels: error: {main_output}: Is a directory\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([torch_wheel.name, sibling.name]) and not any(
        main_output.iterdir()
    )
    assert sibling.read_bytes() == earlier


@pytest.mark.parametrize("failure", ["io-error", "truncated"])
def test_a_kernel_copy_failing_in_its_thread_is_one_error_and_no_output(
    capsys: pytest.CaptureFixture[str], wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """big.bin's data is copied in a thread beside the writer's other work: its failure (a disk error, or the
    input cut short while it is read) still ends the command with one error line naming the member, no
    output, and no thread left behind."""

    def failing(*args: object) -> int:
        if failure == "truncated":
            return 0  # what copy_file_range says at the input's end
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "copy_file_range", failing)
    threads = threading.active_count()
    status, err = _patch(capsys, wheel, tmp_path / "out")
    reason = "truncated member data" if failure == "truncated" else os.strerror(errno.EIO)
    assert _one_error(status, err, tmp_path / "out") == f"patched-wheels: error: {wheel.name}: demo/big.bin: {reason}"
    assert threading.active_count() == threads


def test_a_split_whose_sibling_fails_while_the_main_wheel_is_written_is_one_error_and_no_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sibling (the moved library, a kernel copy) is written in a thread beside the main wheel: its
    failure is the command's one error line, neither wheel is published, and no thread is left."""
    from support.fakecuda import blob_library

    build = tmp_path / "build"
    build.mkdir()
    library = blob_library(build, "libbig.so", 2 << 20)
    (tmp_path / "in").mkdir()
    wheel = build_wheel(
        tmp_path / "in",
        "demo",
        "1.0",
        {"demo/__init__.py": b"", "demo/lib/libbig.so": library.read_bytes()},
        tag="py3-none-linux_x86_64",
    )
    monkeypatch.setattr(os, "copy_file_range", lambda *args: 0)  # the input cut short under the copy
    threads = threading.active_count()
    status = main(
        [
            "split",
            "--wheel",
            str(wheel),
            "--move",
            "demo/lib/*",
            "--into",
            "demo-libs",
            "--dest-dir",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert (
        _one_error(status, err, tmp_path / "out")
        == f"patched-wheels: error: {wheel.name}: demo/lib/libbig.so: truncated member data"
    )
    assert threading.active_count() == threads


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "directory", "link-loop", "dangling-link"])
@pytest.mark.parametrize("given", ["--patch", "--patch-dir"])
def test_a_patch_that_is_no_patch_file_is_one_error_not_a_hang_nor_left_out(
    wheel: Path, tmp_path: Path, kind: str, given: str
) -> None:
    """Given by name or found in a patch directory beside a real patch: a FIFO blocked forever, /dev/zero read until
    memory ran out, and a directory's entry that was no file was left out, its patch not applied, without a word."""
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0002-real.patch").write_text(
        "--- a/demo/__init__.py\n+++ b/demo/__init__.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n", encoding="utf-8"
    )
    special = patches / "0001-odd.patch"
    make_special_file(kind, special)
    source = ["--patch", str(special)] if given == "--patch" else ["--patch-dir", str(patches)]
    command = [sys.executable, "-m", "patched_wheels", "patch", "--wheel", str(wheel), "--suffix", "x.1"]
    result = subprocess.run(
        [*command, "--dest-dir", str(tmp_path / "out"), *source], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"patched-wheels: error: patch {special}: "), result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_patch_larger_than_any_patch_is_refused_unread(wheel: Path, tmp_path: Path, capsys) -> None:
    from patched_wheels.patch.unidiff import MAX_PATCH_BYTES

    huge = tmp_path / "huge.patch"
    with open(huge, "wb") as stream:
        stream.truncate(MAX_PATCH_BYTES + 1)  # sparse: nothing is written, and nothing must be read
    status, err = _patch(capsys, wheel, tmp_path / "out", "--patch", str(huge))
    assert _one_error(status, err, tmp_path / "out") == (
        f"patched-wheels: error: patch {huge}: larger than {MAX_PATCH_BYTES} bytes"
    )


@pytest.mark.parametrize("loop", ["--dest-dir", "--wheel"])
def test_a_loop_of_links_as_a_path_is_one_error_naming_it(wheel: Path, tmp_path: Path, capsys, loop: str) -> None:
    """Python 3.9 to 3.12 resolve a loop of links with a RuntimeError: a traceback, not an error line."""
    looping = tmp_path / ("out" if loop == "--dest-dir" else "demo-1.0-py3-none-any.whl")
    make_special_file("link-loop", looping)
    dest, given = (looping, wheel) if loop == "--dest-dir" else (tmp_path / "out", looping)
    status = main(["patch", "--wheel", str(given), "--dest-dir", str(dest), "--suffix", "x.1"])
    err = capsys.readouterr().err
    named = f"--dest-dir {looping}: a link that leads to no directory" if loop == "--dest-dir" else str(looping)
    assert status == 1 and err.count("\n") == 1 and err.startswith(f"patched-wheels: error: {named}"), err
    assert "Traceback" not in err and "Symlink loop" not in err


def _with_file_size_limit(limit: int) -> Callable[[], None]:
    """A child's set-up: writes past ``limit`` bytes of a file fail (EFBIG, what a full disk's ENOSPC is to us),
    and SIGXFSZ, which would kill it instead, is ignored."""

    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return setup


def test_an_output_that_cannot_be_written_is_named_as_published(wheel: Path, tmp_path: Path) -> None:
    """A write's error (a full disk, a quota, a size limit) carries no file name: it was one line saying only
    ``File too large``; the patch's output is named where it was to be published, not in its scratch directory."""
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "patched_wheels", "patch", "--wheel", str(wheel), "--suffix", "x.1"]
        + ["--dest-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_with_file_size_limit(100_000),  # the wheel holds 2 MiB
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"patched-wheels: error: {out / 'demo-1.0+x.1-py3-none-any.whl'}: File too large\n",
    )
    assert not out.exists()  # made by the patch, and removed with its scratch directory


def test_an_index_file_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    directory = tmp_path / "wheels"
    directory.mkdir()
    built = build_wheel(directory, "demo", "1.0", {"demo/__init__.py": b""}, metadata_extra="Summary: x\n" * 20_000)
    result = subprocess.run(
        [sys.executable, "-m", "patched_wheels", "index", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_with_file_size_limit(100_000),  # its METADATA, and so its .metadata file, is 220 kB
    )
    assert (result.returncode, result.stderr) == (
        1,
        f"patched-wheels: error: {built}.metadata: File too large\n",
    )
    assert sorted(path.name for path in directory.iterdir()) == [built.name]
