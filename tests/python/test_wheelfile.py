"""Wheel reading (structural checks, hash-checked streaming) and raw-copy writing."""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
from pathlib import Path

import pytest
from installer.sources import WheelFile as InstallerWheel
from wheelbuilder import build_wheel, replace_members

from patched_wheels import wheelfile
from patched_wheels.errors import PatchedWheelsError
from patched_wheels.wheelfile import (
    RecordEntry,
    WheelFilename,
    WheelReader,
    WheelWriter,
    parse_record,
    serialize_record,
)

FILES = {
    "demo/__init__.py": b"print('hello')\n" * 50,
    "demo/lib.so": os.urandom(300_000),  # incompressible: deflate would not shrink it
    "demo/empty.txt": b"",
    ".data/scripts/demo-run": b"#!python\nimport demo\n",
}


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path, "demo", "1.0", FILES, modes={"demo-1.0.data/scripts/demo-run": 0o755})


def _copy_all(reader: WheelReader, dest: Path) -> None:
    with WheelWriter(dest, dist_info=reader.dist_info) as writer:
        for name in reader.members():
            if name != f"{reader.dist_info}/RECORD":
                writer.copy_raw(reader, name)


def _one_line_error(excinfo: pytest.ExceptionInfo[PatchedWheelsError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- reading


def test_reader_exposes_structure(wheel: Path) -> None:
    with WheelReader(wheel) as reader:
        assert reader.filename == WheelFilename.parse(wheel.name)
        assert reader.dist_info == "demo-1.0.dist-info"
        assert reader.data_dir == "demo-1.0.data"
        assert reader.members()[:3] == ["demo/__init__.py", "demo/lib.so", "demo/empty.txt"]
        assert reader.metadata().startswith(b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        assert reader.file_size("demo/lib.so") == 300_000
        assert reader.mode("demo-1.0.data/scripts/demo-run") == 0o755
        assert reader.mode("demo/__init__.py") == 0o644
        assert reader.open("demo/lib.so").read() == FILES["demo/lib.so"]
        assert reader.read("demo/empty.txt") == b""


def test_filename_keeps_spelling_and_build_tag() -> None:
    parsed = WheelFilename.parse("Foo_Bar-2.1.2+cu118-7-cp311-cp311-manylinux1_x86_64.whl")
    assert (parsed.name, str(parsed.version), parsed.build_tag) == ("foo-bar", "2.1.2+cu118", (7, ""))
    assert parsed.with_version("2.1.2+cu118.x") == "Foo_Bar-2.1.2+cu118.x-7-cp311-cp311-manylinux1_x86_64.whl"


def test_streaming_read_detects_tampering(wheel: Path) -> None:
    replace_members(wheel, {"demo/__init__.py": b"print('evil')\n"})
    # Sizes differ, so the cheap check already refuses the wheel.
    with pytest.raises(PatchedWheelsError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught) == (
        f"{wheel.name}: demo-1.0.dist-info/RECORD: demo/__init__.py has size 750 in RECORD but 14 in the zip"
    )


def test_same_size_tampering_is_caught_when_read_and_by_verify(wheel: Path) -> None:
    original = FILES["demo/__init__.py"]
    replace_members(wheel, {"demo/__init__.py": original.replace(b"hello", b"HELLO")})
    with WheelReader(wheel) as reader:  # cheap checks pass: same size
        with pytest.raises(PatchedWheelsError) as caught:
            reader.read("demo/__init__.py")
        assert _one_line_error(caught) == f"{wheel.name}: demo/__init__.py: content does not match its RECORD hash"
        assert reader.read("demo/lib.so") == FILES["demo/lib.so"]
    with pytest.raises(PatchedWheelsError, match="demo/__init__.py: content does not match its RECORD hash"):
        WheelReader(wheel, verify=True)


def test_verify_accepts_intact_wheel(wheel: Path) -> None:
    with WheelReader(wheel, verify=True) as reader:
        assert reader.dist_info == "demo-1.0.dist-info"


def _raw_zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A zip with exactly these members (stdlib allows duplicates and odd names)."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members:
            archive.writestr(zipfile.ZipInfo(name), content)
    return path


def _record_for(members: list[tuple[str, bytes]], dist_info: str) -> bytes:
    rows = [RecordEntry(name, wheelfile.record_hash(hashlib.sha256(data).digest()), len(data)) for name, data in members]
    return serialize_record([*rows, RecordEntry(f"{dist_info}/RECORD", "", None)])


def _wheel_with(tmp_path: Path, extra: list[tuple[str, bytes]], *, record_extra: list[tuple[str, bytes]] = ()) -> Path:
    base = [("a/__init__.py", b"x"), ("a-1.0.dist-info/METADATA", b"Name: a\nVersion: 1.0\n")]
    record = _record_for(base + extra + list(record_extra), "a-1.0.dist-info")
    return _raw_zip(tmp_path / "a-1.0-py3-none-any.whl", base + extra + [("a-1.0.dist-info/RECORD", record)])


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ("../evil.py", "member '../evil.py': unsafe path"),
        ("/etc/passwd", "member '/etc/passwd': unsafe path"),
        ("a/../../evil.py", "member 'a/../../evil.py': unsafe path"),
        ("C:/evil.py", "member 'C:/evil.py': unsafe path"),
        ("a\\..\\evil.py", "unsafe path"),
    ],
)
def test_unsafe_member_paths(tmp_path: Path, member: str, message: str) -> None:
    path = _wheel_with(tmp_path, [(member, b"boom")])
    with pytest.raises(PatchedWheelsError) as caught:
        WheelReader(path)
    assert _one_line_error(caught).startswith(f"{path.name}: ")
    assert message in str(caught.value)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_duplicate_member(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [("a/x.py", b"1"), ("a/x.py", b"2")])
    with pytest.raises(PatchedWheelsError, match=r"^a-1.0-py3-none-any.whl: member 'a/x.py': duplicate member name$"):
        WheelReader(path)


def test_member_missing_from_record(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [("a/x.py", b"1")])
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("a/sneaky.py", b"import os")
    with pytest.raises(PatchedWheelsError, match=r"RECORD: does not list a/sneaky.py$"):
        WheelReader(path)


def test_record_lists_missing_member(tmp_path: Path) -> None:
    path = _wheel_with(tmp_path, [], record_extra=[("a/gone.py", b"1")])
    with pytest.raises(PatchedWheelsError, match=r"RECORD: lists a/gone.py, which is not in the wheel$"):
        WheelReader(path)


def test_malformed_record_row(tmp_path: Path) -> None:
    with pytest.raises(PatchedWheelsError, match="^w: row 2: expected 3 fields, got 2$"):
        parse_record(b"a,sha256=x,1\nb,sha256=y\n", origin="w")
    with pytest.raises(PatchedWheelsError, match="md5 is not allowed"):
        parse_record(b"a,md5=abc,1\n", origin="w")


def test_not_a_zip_and_truncated(tmp_path: Path, wheel: Path) -> None:
    not_zip = tmp_path / "x-1.0-py3-none-any.whl"
    not_zip.write_bytes(b"<html>404</html>")
    with pytest.raises(PatchedWheelsError, match=r"x-1.0-py3-none-any.whl: not a zip archive or truncated"):
        WheelReader(not_zip)
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    with pytest.raises(PatchedWheelsError) as caught:
        WheelReader(wheel)
    assert _one_line_error(caught).startswith(f"{wheel}: not a zip archive or truncated")


def test_wrong_dist_info(tmp_path: Path) -> None:
    path = build_wheel(tmp_path, "demo", "1.0", {"demo/x.py": b""})
    renamed = path.with_name("other-1.0-py3-none-any.whl")
    path.rename(renamed)
    with pytest.raises(PatchedWheelsError, match="expected one other-<version>.dist-info directory, found: demo-1.0"):
        WheelReader(renamed)


def test_record_parse_serialize_round_trip() -> None:
    entries = [RecordEntry("a,b/c \"q\".py", "sha256=abc", 3), RecordEntry("x.dist-info/RECORD", "", None)]
    assert parse_record(serialize_record(entries), origin="r") == entries


# ---------------------------------------------------------------- writing


def test_raw_copy_round_trip_keeps_compressed_bytes(wheel: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    with zipfile.ZipFile(wheel) as before, zipfile.ZipFile(dest) as after:
        assert after.testzip() is None
        assert after.namelist() == before.namelist()  # RECORD was last in both
        for info in before.infolist():
            copied = after.getinfo(info.filename)
            assert (copied.CRC, copied.compress_size, copied.external_attr) == (
                info.CRC,
                info.compress_size,
                info.external_attr,
            )
            assert copied.date_time == (1980, 1, 1, 0, 0, 0)
        assert after.read("demo-1.0.dist-info/RECORD").splitlines() == before.read(
            "demo-1.0.dist-info/RECORD"
        ).splitlines()
    with InstallerWheel.open(dest) as source:
        source.validate_record(validate_contents=True)
    assert list(tmp_path.joinpath("out").iterdir()) == [dest]  # no temp file left


def test_written_members_and_record(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1 << 20) * 3)  # > CHUNK_SIZE: streamed in several chunks
    big.chmod(0o750)
    dest = tmp_path / "n-1-py3-none-any.whl"
    with WheelWriter(dest, dist_info="n-1.dist-info") as writer:
        writer.write_bytes("n/é.py", b"x = 1\n", mode=0o600)
        writer.write_file("n/big.bin", big)
        writer.write_bytes("n-1.dist-info/METADATA", b"Name: n\nVersion: 1\n")
    with zipfile.ZipFile(dest) as archive:
        assert archive.testzip() is None
        assert archive.read("n/é.py") == b"x = 1\n"
        assert archive.read("n/big.bin") == big.read_bytes()
        assert archive.getinfo("n/big.bin").external_attr >> 16 == 0o100750
        assert archive.getinfo("n/é.py").external_attr >> 16 == 0o100600
        record = archive.read("n-1.dist-info/RECORD").decode()
    digest = wheelfile.record_hash(hashlib.sha256(big.read_bytes()).digest())
    assert record.splitlines()[1] == f"n/big.bin,{digest},{3 << 20}"
    assert "=" not in digest[len("sha256=") :]
    assert record.endswith("n-1.dist-info/RECORD,,\n")
    with WheelReader(dest, verify=True) as reader:
        assert reader.members()[-1] == "n-1.dist-info/RECORD"


def test_writer_is_deterministic_and_honours_source_date_epoch(
    wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = []
    for index, epoch in enumerate(["", "", "1700000000"]):
        monkeypatch.setenv("SOURCE_DATE_EPOCH", epoch)
        dest = tmp_path / str(index) / wheel.name
        dest.parent.mkdir()
        with WheelReader(wheel) as reader:
            _copy_all(reader, dest)
        outputs.append(hashlib.sha256(dest.read_bytes()).hexdigest())
    assert outputs[0] == outputs[1] != outputs[2]
    with zipfile.ZipFile(dest) as archive:
        assert archive.infolist()[0].date_time == (2023, 11, 14, 22, 13, 20)


def test_writer_leaves_nothing_on_error(wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with WheelReader(wheel) as reader, pytest.raises(PatchedWheelsError, match="member demo/lib.so written twice"):
        with WheelWriter(out / wheel.name, dist_info=reader.dist_info) as writer:
            writer.copy_raw(reader, "demo/lib.so")
            writer.copy_raw(reader, "demo/lib.so")
    assert list(out.iterdir()) == []


def test_writer_refuses_unsafe_and_generated_names(tmp_path: Path) -> None:
    with pytest.raises(PatchedWheelsError, match="unsafe member path '../x'"):
        with WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info") as writer:
            writer.write_bytes("../x", b"")
    with pytest.raises(PatchedWheelsError, match="n-1.dist-info/RECORD is generated"):
        with WheelWriter(tmp_path / "n-1-py3-none-any.whl", dist_info="n-1.dist-info") as writer:
            writer.write_bytes("n-1.dist-info/RECORD", b"")
    assert list(tmp_path.iterdir()) == []


def test_more_than_65535_members_use_zip64_end_records(tmp_path: Path) -> None:
    count = 70_000
    files = {f"many/m{index}.txt": b"%d" % index for index in range(count)}
    wheel = build_wheel(tmp_path, "many", "1.0", files)
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    data = dest.read_bytes()
    assert struct.pack("<I", 0x06064B50) in data[-200:]  # ZIP64 end of central directory record
    with zipfile.ZipFile(dest) as archive:
        assert len(archive.infolist()) == count + 3
        assert archive.read("many/m69999.txt") == b"69999"
    with WheelReader(dest, verify=True) as reader:
        assert len(reader.members()) == count + 3


def test_zip64_headers_for_members_beyond_4_gib(tmp_path: Path) -> None:
    """Central directory of a member at 6 GiB with 5 GiB sizes, parsed back by stdlib zipfile.

    The data region is a sparse hole, so the test writes only the directory.
    """
    size, compressed, offset = 5 << 30, (5 << 30) - 7, 6 << 30
    entry = wheelfile._Entry(
        name=b"big/huge.bin",
        flags=0,
        method=zipfile.ZIP_DEFLATED,
        crc=0x12345678,
        compress_size=compressed,
        file_size=size,
        offset=offset,
        create_system=3,
        external_attr=0o100755 << 16,
        local_zip64=True,
    )
    directory_offset = offset + (7 << 30)
    path = tmp_path / "sparse.zip"
    with open(path, "wb") as handle:
        handle.truncate(directory_offset)
        handle.seek(directory_offset)
        central = wheelfile._central_header(entry, 0x21, 0)
        handle.write(central + wheelfile._end_records(1, directory_offset, len(central)))
    with zipfile.ZipFile(path) as archive:
        [info] = archive.infolist()
    assert (info.filename, info.file_size, info.compress_size, info.header_offset) == (
        "big/huge.bin",
        size,
        compressed,
        offset,
    )
    assert (info.CRC, info.external_attr >> 16, info.extract_version) == (0x12345678, 0o100755, 45)

    local = wheelfile._local_header(entry, 0x21, 0)
    fields = struct.unpack_from("<IHHHHHIIIHH", local)
    assert fields[0] == 0x04034B50 and fields[1] == 45
    assert fields[7:9] == (0xFFFFFFFF, 0xFFFFFFFF)
    extra = local[30 + fields[9] :]
    assert struct.unpack("<HHQQ", extra) == (1, 16, size, compressed)


def test_small_entries_need_no_zip64() -> None:
    entry = wheelfile._Entry(b"a", 0, 8, 0, 10, 20, 30, 3, 0, False)
    assert len(wheelfile._central_header(entry, 0, 0)) == 46 + 1
    assert len(wheelfile._local_header(entry, 0, 0)) == 30 + 1
    assert len(wheelfile._end_records(0xFFFE, 100, 100)) == 22
    assert len(wheelfile._end_records(0xFFFF, 100, 100)) == 22 + 56 + 20


SAFE = ["a/b.py", "a/", "a/b/", "x.dist-info/RECORD", ".hidden/x", "a/.x", "a/..x", "...", "x."]
UNSAFE = ["", "/", "/a", "../a", "../", "a/../b", "a/..", "a/.", "./a", "a//b", "a//", "a\\b", "C:/x", "a\0", "..", "."]


@pytest.mark.parametrize("name", SAFE + UNSAFE)
def test_is_safe_member_path(name: str) -> None:
    assert wheelfile.is_safe_member_path(name) is (name in SAFE)


def test_raw_copies_get_the_fixed_timestamp_in_local_headers_too(wheel: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out" / wheel.name
    dest.parent.mkdir()
    with WheelReader(wheel) as reader:
        _copy_all(reader, dest)
    data = dest.read_bytes()
    with zipfile.ZipFile(dest) as archive:
        for info in archive.infolist():
            # (time, date) at offset 10 of the local header: 1980-01-01 00:00:00
            assert struct.unpack_from("<HH", data, info.header_offset + 10) == (0, 0x21), info.filename


class _Unseekable:
    """A write-only stream: makes zipfile use data descriptors (flag bit 3) like streaming archivers."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> int:
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        pass


def test_members_with_data_descriptors_are_copied_and_renamed(wheel: Path, tmp_path: Path) -> None:
    stream = _Unseekable()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stream, "w", zipfile.ZIP_DEFLATED) as target:  # type: ignore[arg-type]
        for info in source.infolist():
            with target.open(zipfile.ZipInfo(info.filename, info.date_time), "w") as member:
                member.write(source.read(info))
    streamed = tmp_path / "streamed" / wheel.name
    streamed.parent.mkdir()
    streamed.write_bytes(stream.data)
    with zipfile.ZipFile(streamed) as archive:
        assert all(info.flag_bits & 0x8 for info in archive.infolist())
    dest = tmp_path / "out" / "demo-2-py3-none-any.whl"
    dest.parent.mkdir()
    with WheelReader(streamed) as reader, WheelWriter(dest, dist_info="demo-2.dist-info") as writer:
        for name in reader.members():
            if not name.endswith("/RECORD"):
                writer.copy_raw(reader, name, arcname=name.replace("demo-1.0.", "demo-2."))
    with zipfile.ZipFile(dest) as archive:
        assert archive.testzip() is None
        assert archive.read("demo/lib.so") == FILES["demo/lib.so"]
        assert not any(info.flag_bits & 0x8 for info in archive.infolist())
    with InstallerWheel.open(dest) as source:
        source.validate_record(validate_contents=True)


def test_local_header_must_agree_with_central_directory(wheel: Path) -> None:
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as archive:
        offset = archive.getinfo("demo/lib.so").header_offset
    data[offset + 14 : offset + 18] = b"\0\0\0\0"  # CRC in the local header only
    wheel.write_bytes(bytes(data))
    with WheelReader(wheel) as reader, pytest.raises(PatchedWheelsError) as caught:
        reader.read("demo/lib.so")
    assert _one_line_error(caught) == f"{wheel.name}: demo/lib.so: local header disagrees with the central directory"
