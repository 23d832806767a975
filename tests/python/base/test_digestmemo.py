"""The memo of file digests that key the ELF cache: a hit only for the same file unchanged, never an error."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from patched_wheels.base import digestmemo, fsutil
from patched_wheels.base.cache import CacheContext
from patched_wheels.base.digestmemo import memo_file, sha256_of
from patched_wheels.elf.graph import scan_wheels
from support.fakecuda import build_fake_cuda_wheels
from support.hostile import SPECIAL_KINDS, make_special_file

WRONG = "0" * 64  # a well-formed digest no test file has


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files made by a test are only milliseconds old: treat them as settled, as a downloaded wheel is."""
    monkeypatch.setattr(fsutil, "SETTLED_NS", 0)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the files actually hashed."""
    calls: list[str] = []
    real = fsutil.hash_stream

    def counting(stream: BinaryIO) -> str:
        calls.append(stream.name)
        return real(stream)

    monkeypatch.setattr(digestmemo, "hash_stream", counting)
    return calls


def _file(tmp_path: Path, content: bytes = b"wheel bytes") -> Path:
    path = tmp_path / "a.whl"
    path.write_bytes(content)
    return path


def _entry(path: Path, memo: Path) -> Path:
    return memo_file(memo, os.stat(path))


def test_a_settled_file_is_hashed_once_then_answered_from_the_memo(
    tmp_path: Path, settled: None, hashes: list[str]
) -> None:
    path, memo = _file(tmp_path), tmp_path / "memo"
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_of(path, memo) == expected
    assert json.loads(_entry(path, memo).read_text())["sha256"] == expected
    assert sha256_of(path, memo) == expected
    assert len(hashes) == 1
    # The answer comes from the entry: one with the file's status is believed as it stands.
    entry = _entry(path, memo)
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "sha256": WRONG}))
    assert sha256_of(path, memo) == WRONG and len(hashes) == 1


def test_no_memo_directory_always_hashes(tmp_path: Path, settled: None, hashes: list[str]) -> None:
    path = _file(tmp_path)
    assert sha256_of(path, None) == sha256_of(path, None) == hashlib.sha256(b"wheel bytes").hexdigest()
    assert len(hashes) == 2


def test_a_file_changed_within_a_clock_tick_of_its_hashing_is_not_remembered(tmp_path: Path, hashes: list[str]) -> None:
    path, memo = _file(tmp_path), tmp_path / "memo"  # ctime: now, not SETTLED_NS ago
    sha256_of(path, memo)
    assert not _entry(path, memo).exists()
    sha256_of(path, memo)
    assert len(hashes) == 2


@pytest.mark.parametrize("change", ["append", "same size, mtime put back"])
def test_a_changed_file_misses_and_its_new_digest_is_remembered(
    tmp_path: Path, settled: None, hashes: list[str], change: str
) -> None:
    path, memo = _file(tmp_path), tmp_path / "memo"
    sha256_of(path, memo)
    before = os.stat(path)
    time.sleep(0.05)  # past the kernel's timestamp granularity (a tick: at most 10 ms)
    if change == "append":
        new = b"wheel bytes, longer"
    else:  # what a user can fake: size and mtime; ctime still moves
        new = b"WHEEL BYTES"
    path.write_bytes(new)
    if change != "append":
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert os.stat(path).st_mtime_ns == before.st_mtime_ns and os.stat(path).st_size == before.st_size
    assert sha256_of(path, memo) == hashlib.sha256(new).hexdigest()
    assert json.loads(_entry(path, memo).read_text())["sha256"] == hashlib.sha256(new).hexdigest()
    assert len(hashes) == 2


HOSTILE_ENTRIES = {
    "not JSON": b"{",
    "not UTF-8": b"\xff\xfe",
    "a list": b"[1, 2]",
    "missing sha256": None,
    "a bool for a size": None,
    "an extra field": None,
    "uppercase digest": None,
    "huge": b" " * 10_000 + b"{}",
}


def _hostile(kind: str, good: dict[str, object]) -> bytes:
    data = HOSTILE_ENTRIES[kind]
    if data is not None:
        return data
    value = dict(good)
    if kind == "missing sha256":
        del value["sha256"]
    elif kind == "a bool for a size":
        value["size"] = True
    elif kind == "an extra field":
        value["path"] = "/etc/passwd"
    else:
        value["sha256"] = value["sha256"].upper()
    return json.dumps(value).encode()


@pytest.mark.parametrize("kind", sorted(HOSTILE_ENTRIES))
def test_a_malformed_entry_is_a_miss_with_one_warning_then_rewritten(
    tmp_path: Path, settled: None, hashes: list[str], capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path, memo = _file(tmp_path), tmp_path / "memo"
    expected = sha256_of(path, memo)
    entry = _entry(path, memo)
    entry.write_bytes(_hostile(kind, json.loads(entry.read_text())))
    capsys.readouterr()
    assert sha256_of(path, memo) == expected
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"patched-wheels: warning: {entry}: cache ")
    assert json.loads(entry.read_text())["sha256"] == expected  # rewritten: the next run hits
    assert len(hashes) == 2


@pytest.mark.parametrize("kind", [*SPECIAL_KINDS, "group-writable"])
def test_an_entry_that_is_no_file_of_ours_is_a_miss_with_one_warning(
    tmp_path: Path, settled: None, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path, memo = _file(tmp_path), tmp_path / "memo"
    memo.mkdir(mode=0o700)
    entry = _entry(path, memo)
    if kind == "group-writable":
        entry.write_text(json.dumps({"size": 11, "mtime_ns": 0, "ctime_ns": 0, "sha256": WRONG}))
        entry.chmod(0o620)
    else:
        make_special_file(kind, entry)
    assert sha256_of(path, memo) == hashlib.sha256(b"wheel bytes").hexdigest()
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1 and str(entry) in warnings[0], warnings


def test_the_elf_scan_hashes_a_wheel_once_across_runs_with_a_memo(
    tmp_path: Path, settled: None, hashes: list[str]
) -> None:
    wheels = build_fake_cuda_wheels(tmp_path / "wheels")
    caches, memo = CacheContext(tmp_path / "cache"), tmp_path / "memo"
    first = scan_wheels(wheels.all, caches=caches, digest_dir=memo)
    assert len(hashes) == len(wheels.all)
    second = scan_wheels(wheels.all, caches=caches, digest_dir=memo)
    assert second.cached_wheels == len(wheels.all) and second.libraries == first.libraries
    assert len(hashes) == len(wheels.all)
    scan_wheels(wheels.all, caches=caches)  # without a memo: hashed again
    assert len(hashes) == 2 * len(wheels.all)
