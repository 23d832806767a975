"""The one reader and writer of persistent cache files (cache.py): trust, bounds, and misses that never fail."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from patched_wheels.base import cache
from patched_wheels.base.cache import CacheContext, cache_dir, cache_root, is_int, read_json, write_json
from patched_wheels.errors import UsageError
from support.hostile import count_read_bytes, make_special_file

CAP = 1 << 20


@pytest.fixture
def private(tmp_path: Path) -> Path:
    directory = tmp_path / "cache"
    directory.mkdir(mode=0o700)
    return directory


def _warnings(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def _one_warning(capsys: pytest.CaptureFixture[str], names: Path, *words: str) -> str:
    lines = _warnings(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"patched-wheels: warning: {names}")
    assert "Traceback" not in lines[0]
    for word in words:
        assert word in lines[0]
    return lines[0]


# --- where -----------------------------------------------------------------------------------


def test_the_override_wins_and_off_disables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "shared"))
    assert cache_root() == tmp_path / "shared"
    assert cache_dir("elfgraph") == tmp_path / "shared" / "elfgraph"
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "off")
    assert cache_root() is None and cache_dir("observed") is None


def test_a_relative_override_is_one_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "relcache")
    with pytest.raises(
        UsageError, match="^RULES_PATCHED_WHEELS_CACHE=relcache: expected an absolute directory or off$"
    ):
        cache_root()


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RULES_PATCHED_WHEELS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relcache")
    assert cache_root() == tmp_path / "home" / ".cache" / "rules_patched_wheels"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "rules_patched_wheels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "relhome")
    assert cache_root() is None


def test_a_kind_is_a_plain_name() -> None:
    with pytest.raises(ValueError):
        cache_dir("../elsewhere")


# --- written private, read back -----------------------------------------------------------------


def test_written_0600_in_directories_created_0700_and_read_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "root" / "kind" / "entry.json"
    write_json(path, {"rows": [1, "two", None]})
    assert read_json(path, max_bytes=CAP) == {"rows": [1, "two", None]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "root").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "root" / "kind").stat().st_mode) == 0o700
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["entry.json"]
    assert _warnings(capsys) == []


def test_a_missing_file_or_directory_is_a_silent_miss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert read_json(tmp_path / "nothing.json", max_bytes=CAP) is None
    assert read_json(tmp_path / "no" / "dir.json", max_bytes=CAP) is None
    assert _warnings(capsys) == []


def test_an_unwritable_value_or_place_is_a_warning_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(tmp_path / "set.json", {1, 2})
    _one_warning(capsys, tmp_path / "set.json", "not written", "TypeError")
    (tmp_path / "file").write_bytes(b"")
    write_json(tmp_path / "file" / "below.json", [])
    _one_warning(capsys, tmp_path / "file" / "below.json", "not written")


# --- hostile files: each a miss with one warning naming it --------------------------------------


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("fifo", "not a regular file"),  # opened without blocking: nothing waits for a writer
        ("dev-zero-link", "a symbolic link"),
        ("link-loop", "a symbolic link"),
        ("socket", "not a regular file"),
        ("directory", "not a regular file"),
        ("device", "not a regular file"),
    ],
)
def test_a_special_file_is_a_miss_with_one_warning(
    private: Path, capsys: pytest.CaptureFixture[str], kind: str, reason: str
) -> None:
    make_special_file(kind, private / "entry.json")
    assert read_json(private / "entry.json", max_bytes=CAP) is None
    _one_warning(capsys, private / "entry.json", reason)


def test_a_link_to_a_good_file_is_not_followed_either(private: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_json(private / "real.json", [1])
    (private / "entry.json").symlink_to(private / "real.json")
    assert read_json(private / "entry.json", max_bytes=CAP) is None
    _one_warning(capsys, private / "entry.json", "symbolic link")


def test_deep_nesting_is_a_miss_not_a_recursion_traceback(private: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = private / "entry.json"
    write_json(path, [])
    path.write_bytes(b"[" * 200_000)
    assert read_json(path, max_bytes=CAP) is None
    _one_warning(capsys, path, "RecursionError")


@pytest.mark.parametrize("content", [b"\xff\xfe{not json", b'{"a": 1', b"", b"\x00" * 10])
def test_undecodable_content_is_a_miss(private: Path, capsys: pytest.CaptureFixture[str], content: bytes) -> None:
    path = private / "entry.json"
    path.write_bytes(content)
    path.chmod(0o600)
    assert read_json(path, max_bytes=CAP) is None
    _one_warning(capsys, path, "cache file ignored")


def test_a_huge_file_is_refused_by_its_size_before_any_read(
    private: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = private / "entry.json"
    with open(path, "wb") as stream:
        stream.truncate(150 << 20)  # sparse: 150 MB that cost no disk
    read_bytes = count_read_bytes(monkeypatch)
    assert read_json(path, max_bytes=CAP) is None
    assert sum(read_bytes) == 0
    _one_warning(capsys, path, f"larger than {CAP} bytes")


def test_a_file_growing_past_the_cap_is_read_no_further_than_the_cap(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fstat said small, the file is large by the time it is read (a writer appending): reading stops at the cap."""
    path = private / "entry.json"
    path.write_bytes(b" " * (4 * CAP))
    path.chmod(0o600)
    real_fstat = os.fstat
    monkeypatch.setattr(
        os, "fstat", lambda handle: os.stat_result((*real_fstat(handle)[:6], 10, *real_fstat(handle)[7:]))
    )
    read_bytes = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda handle, size: read_bytes.append(size) or real_read(handle, size))
    assert read_json(path, max_bytes=CAP) is None
    assert sum(read_bytes) <= CAP + 1


# --- trust: owner and mode, of the file and of its directory -------------------------------------


def test_a_group_or_world_writable_file_is_not_read(private: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = private / "entry.json"
    write_json(path, [1])
    for mode in (0o620, 0o602, 0o666):
        path.chmod(mode)
        assert read_json(path, max_bytes=CAP) is None
        _one_warning(capsys, path, "writable by group or others", f"{mode:04o}")
    path.chmod(0o644)  # readable by others is fine: only who can write it matters
    assert read_json(path, max_bytes=CAP) == [1]


def test_a_world_writable_directory_is_not_read_nor_written_and_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once per run: the files and directories already reported travel in the run's context (no global)."""
    shared = tmp_path / "shared"
    write_json(shared / "a.json", [1])
    write_json(shared / "b.json", [2])
    shared.chmod(0o777)
    run = CacheContext(tmp_path)
    assert run.read("shared", "a.json", max_bytes=CAP) is None
    assert run.read("shared", "b.json", max_bytes=CAP) is None
    run.write("shared", "c.json", [3])
    lines = _warnings(capsys)
    assert lines == [
        f"patched-wheels: warning: {shared}: cache directory not read (the directory is writable by group or others (mode 0777))"
    ]
    assert not (shared / "c.json").exists()
    assert CacheContext(tmp_path).read("shared", "a.json", max_bytes=CAP) is None
    assert len(_warnings(capsys)) == 1, "another run says it again"
    shared.chmod(0o700)
    assert read_json(shared / "a.json", max_bytes=CAP) == [1]


def _chown_or_skip(path: Path, uid: int) -> None:
    if os.geteuid() != 0:
        pytest.skip(
            "chown to another uid needs root; the decision itself is tested by test_untrusted_decides_by_owner_and_mode"
        )
    os.chown(path, uid, -1, follow_symlinks=False)


def test_a_file_owned_by_another_user_is_not_read(
    private: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = private / "entry.json"
    write_json(path, [1])
    _chown_or_skip(path, 12345)
    assert read_json(path, max_bytes=CAP) is None
    _one_warning(capsys, path, "owned by uid 12345")


def test_a_directory_owned_by_another_user_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = tmp_path / "theirs"
    write_json(theirs / "entry.json", [1])
    _chown_or_skip(theirs, 12345)
    assert read_json(theirs / "entry.json", max_bytes=CAP) is None
    assert _warnings(capsys) == [
        f"patched-wheels: warning: {theirs}: cache directory not read (the directory is owned by uid 12345, not by this user)"
    ]


def _status(uid: int, mode: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, 0, 0, 0, 0, 0))


def test_untrusted_decides_by_owner_and_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision behind the chown tests, for runs that cannot chown: ours or root's, and written by no one else."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert cache._untrusted(_status(1000, stat.S_IFREG | 0o600), "file") is None
    assert cache._untrusted(_status(0, stat.S_IFDIR | 0o755), "directory") is None
    assert "owned by uid 1001" in cache._untrusted(_status(1001, stat.S_IFREG | 0o600), "file")
    assert "writable by group" in cache._untrusted(_status(1000, stat.S_IFDIR | 0o770), "directory")
    assert "writable by group" in cache._untrusted(_status(1000, stat.S_IFDIR | 0o1777), "directory")


def test_a_miss_and_the_rewrite_that_follows_it_say_one_warning(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory where the entry should be: the read misses and the write after it cannot replace it;
    the user hears about the file once."""
    make_special_file("directory", private / "entry.json")
    reported: set[str] = set()
    assert read_json(private / "entry.json", max_bytes=CAP, reported=reported) is None
    write_json(private / "entry.json", [1], reported=reported)
    _one_warning(capsys, private / "entry.json", "not a regular file")


def test_recorded_entries_answer_first_and_what_is_read_or_written_is_collected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hub's ``wheel_facts`` lie over the cache (read first, never written there); the entries of the recorded
    kinds read or written are what the hub records, and nothing is collected by a context that does not record."""
    plain = CacheContext(tmp_path / "cache")
    plain.write("elfgraph", "a.json", ["from the cache"])
    plain.write("elfgraph", "b.json", ["from the cache"])
    plain.write("digests", "d.json", "not a recorded kind")
    assert plain.recorded is None
    hub = plain.recording(
        {"elfgraph/a.json": ["recorded"], "observed/gone.json": {}, "digests/d.json": "given"}, "facts.json"
    )
    assert hub.read("elfgraph", "a.json", max_bytes=100) == ["recorded"]
    assert hub.read("elfgraph", "a.json", max_bytes=100, given=False) == ["from the cache"], "the cache's own file"
    assert hub.read("elfgraph", "b.json", max_bytes=100) == ["from the cache"]
    assert hub.read("digests", "d.json", max_bytes=100) == "not a recorded kind", "only the recorded kinds are given"
    hub.write("observed", "new.json", {"computed": 1})
    assert hub.where("elfgraph", "a.json") == "facts.json: entry elfgraph/a.json"
    assert hub.where("elfgraph", "b.json") == str(tmp_path / "cache" / "elfgraph" / "b.json")
    other = plain.recording({}, "")
    assert other.read("elfgraph", "a.json", max_bytes=100) == ["from the cache"]
    assert other.recorded == {"elfgraph/a.json": ["from the cache"]}
    hub.refuse("elfgraph", "b.json")  # its reader refused it
    assert hub.recorded == {"elfgraph/a.json": ["from the cache"], "observed/new.json": {"computed": 1}}
    assert plain.read("elfgraph", "a.json", max_bytes=100) == ["from the cache"], (
        "a given entry is never written to the cache"
    )
    assert (
        CacheContext(None).recording({"elfgraph/a.json": []}, "facts.json").read("elfgraph", "a.json", max_bytes=100)
        is None
    ), "off: nothing"
    assert not capsys.readouterr().err


def test_a_json_integer_is_neither_a_bool_nor_a_float() -> None:
    assert is_int(0) and is_int(-3) and is_int(1 << 70)
    assert not any(is_int(value) for value in (True, False, 1.0, "1", None))
